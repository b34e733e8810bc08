"""Lowering a group of graph nodes (one fused kernel) to a PrimFunc.

    lowered = lower_nodes(graph, nodes, name="fused_conv2d_add_relu")
    lowered.func        # PrimFunc(x0, w0, w1, out0): the group's te stages, one block each
    lowered.args        # ("input", "conv1.weight", "conv1.bias", "/relu/Relu_output_0")

Each node's registered lowering (:mod:`.registry`) writes te computes over the tensors of its
inputs: a placeholder for a value made outside the group (an activation, or a constant the
kernel reads), or the te tensor another node of the group made. The PrimFunc's parameters are,
in order, the activations read (first use first), the constants read (weights, biases), and the
group's outputs; a constant a lowering only read at compile time (a shape, a scalar it inlined)
is no parameter. Parameter and block names do not depend on the model's value names, so equal
kernels in two places of a model are structurally equal (one task).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .. import te
from ..ir import PrimFunc
from ..transform import mark_layout_free
from .ir import Graph, GraphError, Node, Value
from .registry import Operand, lowering_of

__all__ = ["ORT_ORDER", "LoweredGroup", "lower_nodes", "stage_name"]

# node attribute: compute this float op in onnxruntime's CPU kernel's order of operations, bit
# for bit (MatMul, LayerNormalization; set by quant.fold_qdq on the float ones between the
# integer ops)
ORT_ORDER = "ort_order"

_names: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("stage_names", default=None)


def stage_name(base: str) -> str:
    """A block name for a new stage, unique within the kernel being lowered: ``conv2d``,
    ``conv2d_1``, ... (call it for every ``te.compute`` a lowering writes)."""
    base = re.sub(r"\W+", "_", base).strip("_") or "stage"
    used = _names.get()
    if used is None:
        return base
    n = used.get(base, 0)
    used[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


@dataclass(frozen=True)
class LoweredGroup:
    """A kernel: the PrimFunc and the graph value bound to each of its parameters, in order."""

    func: PrimFunc
    args: tuple[str, ...]
    num_inputs: int  # activations, then constants, then outputs
    num_constants: int

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.args[self.num_inputs + self.num_constants :]


def lower_nodes(graph: Graph, nodes: Sequence[Node], outputs: Sequence[str], name: str = "main") -> LoweredGroup:
    """Lower ``nodes`` (in graph order) into one PrimFunc computing ``outputs``; see the module
    docstring. Raises :class:`GraphError` naming the node whose lowering failed."""
    token = _names.set({})
    try:
        tensors: dict[str, te.Tensor] = {}
        outside: dict[str, te.Tensor] = {}
        for node in nodes:
            args = [_operand(graph, i, tensors, outside) for i in node.inputs]
            outs = [graph.values[o] if o else None for o in node.outputs]
            made = _lower_node(node, args, outs)
            for o, t in zip(node.outputs, made, strict=True):
                if o and t is not None:
                    tensors[o] = t
        results = [_as_stage(tensors[o], graph.values[o]) for o in outputs]
    finally:
        _names.reset(token)
    read = _placeholders_read(results)
    acts = [v for v, t in outside.items() if id(t) in read and not graph.is_constant(v)]
    consts = [v for v, t in outside.items() if id(t) in read and graph.is_constant(v)]
    params = [outside[v] for v in acts + consts] + results
    try:
        func = te.create_prim_func(params, name=name)
    except te.TEError as err:
        raise GraphError(f"kernel {name} ({', '.join(n.name for n in nodes)}): {err}") from None
    func = mark_layout_free(func, range(len(acts), len(acts) + len(consts)))
    return LoweredGroup(func, tuple(acts + consts + list(outputs)), len(acts), len(consts))


def _operand(graph: Graph, name: str, tensors: dict[str, te.Tensor], outside: dict[str, te.Tensor]) -> Operand | None:
    if not name:
        return None
    value = graph.values[name]
    tensor = tensors.get(name)
    if tensor is None:
        tensor = outside.get(name)
        if tensor is None:
            prefix = "w" if graph.is_constant(name) else "x"
            count = sum(1 for v in outside if graph.is_constant(v) == graph.is_constant(name))
            tensor = te.placeholder(value.shape or (1,), value.dtype, name=f"{prefix}{count}")
            outside[name] = tensor
    return Operand(tensor, value, graph.constants.get(name))


def _lower_node(node: Node, args: list[Operand | None], outs: list[Value | None]) -> list[te.Tensor | None]:
    lowering = lowering_of(node.op)
    if lowering is None:
        raise GraphError(f"{node.where}: no lowering for operator {node.op}")
    try:
        made = lowering.fn(node, args, outs)
    except GraphError as err:
        msg = str(err)
        raise GraphError(msg if node.where in msg else f"{node.where}: {msg}") from None
    except (te.TEError, ValueError, TypeError, IndexError) as err:
        raise GraphError(f"{node.where}: lowering failed: {err}") from err
    if len(made) != len(outs):
        raise GraphError(f"{node.where}: the lowering made {len(made)} tensors for {len(outs)} outputs")
    for t, v in zip(made, outs, strict=True):
        if v is None:
            continue  # an optional output the model leaves out
        if t is None:
            raise GraphError(f"{node.where}: the lowering made nothing for output {v.name}")
        if tuple(t.shape) != (v.shape or (1,)) or t.dtype != v.dtype:
            raise GraphError(
                f"{node.where}: the lowering of output {v.name} made {t.dtype}{list(t.shape)}, "
                f"shape inference says {v.dtype}{list(v.shape)}"
            )
    return made


def _as_stage(t: te.Tensor, value: Value) -> te.Tensor:
    """An output must be computed in the kernel: a placeholder passed through is copied."""
    if t.op is not None:
        return t
    return te.compute(t.shape, lambda *i: t[i], name=stage_name("copy"))


def _placeholders_read(outputs: Sequence[te.Tensor]) -> set[int]:
    seen: set[int] = set()
    read: set[int] = set()
    stack = list(outputs)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.op is None:
            read.add(id(t))
        else:
            stack.extend(t.op.inputs)
    return read
