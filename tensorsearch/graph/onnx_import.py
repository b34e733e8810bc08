"""ONNX import: a model file or ``ModelProto`` becomes a :class:`~.ir.Graph` with static shapes.

    from tensorsearch.graph import from_onnx
    g = from_onnx("resnet50.onnx")                            # a path, bytes or an onnx.ModelProto
    g = from_onnx(model, input_shapes={"input_ids": (1, 128)})  # bind symbolic input dimensions
    g = from_onnx(model, input_shapes={"batch": 1})            # ... or a dim_param by its name

The steps: parse (a truncated or non-ONNX file is one error naming the file); check that every
node's operator is one the graph layer lowers (:func:`~.registry.supported_ops`) in the default
domain at a supported opset; order the nodes (a cycle is an error naming the nodes on it); bind
the symbolic input dimensions; then, until nothing changes, run ``onnx.shape_inference`` and fold
every node whose inputs are all constants (``Shape`` of a statically shaped value counts: its
shape is known) with onnx's reference evaluator. Quantize/Dequantize nodes are not folded: the
int8 passes read them. A value still without a static shape is an error naming the node that
makes it and the dimensions to bind.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .ir import Graph, GraphError, Node, Value
from .registry import supported_ops

__all__ = ["MAX_OPSET", "MIN_OPSET", "from_onnx"]

MIN_OPSET, MAX_OPSET = 11, 21  # default-domain opsets whose operator versions the lowerings follow
_NOT_FOLDED = {"QuantizeLinear", "DequantizeLinear"}  # the int8 passes fold these into integer ops
_MAX_FOLDED_ELEMENTS = 1 << 24

ModelLike = onnx.ModelProto | str | os.PathLike | bytes


def from_onnx(model: ModelLike, input_shapes: Mapping[str, Sequence[int] | int] | None = None) -> Graph:
    """Import an ONNX model; see the module docstring. Raises :class:`GraphError`."""
    proto, where = _load(model)
    opset = _default_opset(proto, where)
    _check_ops(proto, opset, where)
    _sort_nodes(proto.graph, where)
    _bind_inputs(proto, dict(input_shapes or {}), where)
    proto = _infer_and_fold(proto, where)
    return _to_graph(proto, opset, where)


# ---------------------------------------------------------------------------------------------
# reading and checking


def _load(model: ModelLike) -> tuple[onnx.ModelProto, str]:
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        return proto, f"model {proto.graph.name or '<unnamed>'}"
    if isinstance(model, bytes):
        where, data = "the model bytes", model
    else:
        where = os.fspath(model)
        try:
            data = Path(where).read_bytes()
        except OSError as err:
            raise GraphError(f"{where}: cannot read the model file ({err.strerror or err})") from None
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError and friends
        raise GraphError(f"{where}: not a readable ONNX model (truncated or not ONNX: {err})") from None
    if not proto.graph.node and not proto.graph.output:
        raise GraphError(f"{where}: not a readable ONNX model (no graph in the file)")
    return proto, where


def _default_opset(proto: onnx.ModelProto, where: str) -> int:
    versions = {imp.domain: imp.version for imp in proto.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise GraphError(f"{where}: the model imports no version of the default ONNX domain (opset_import)")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise GraphError(f"{where}: opset {opset} is not supported (supported: {MIN_OPSET} to {MAX_OPSET})")
    return opset


def _node_where(node: onnx.NodeProto, opset: int) -> str:
    dom = f"{node.domain}." if node.domain not in ("", "ai.onnx") else ""
    return f"node {node.name or node.output[0]!r} ({dom}{node.op_type}, opset {opset})"


def _check_ops(proto: onnx.ModelProto, opset: int, where: str) -> None:
    supported = set(supported_ops())
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise GraphError(
                f"{where}: {_node_where(node, opset)}: operators of domain {node.domain!r} are not supported "
                "(only the default ONNX domain)"
            )
        if node.op_type not in supported:
            raise GraphError(
                f"{where}: {_node_where(node, opset)}: operator {node.op_type} is not supported; "
                f"supported: {', '.join(sorted(supported))}"
            )


def _sort_nodes(graph: onnx.GraphProto, where: str) -> None:
    """Order ``graph.node`` topologically in place (stable); a cycle is an error."""
    produced = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    deps = [{produced[i] for i in n.input if i in produced} for n in graph.node]
    order: list[int] = []
    state = [0] * len(graph.node)  # 0 new, 1 on the stack, 2 done
    for start in range(len(graph.node)):
        if state[start]:
            continue
        stack = [(start, iter(sorted(deps[start])))]
        state[start] = 1
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[k] = 2
                order.append(k)
            elif state[nxt] == 1:
                cycle = [j for j, _ in stack[[j for j, _ in stack].index(nxt) :]] + [nxt]
                names = " -> ".join(repr(graph.node[j].name or graph.node[j].output[0]) for j in cycle)
                raise GraphError(f"{where}: the graph has a cycle: {names}")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))
    if order != list(range(len(graph.node))):
        nodes = [graph.node[k] for k in order]
        del graph.node[:]
        graph.node.extend(nodes)


# ---------------------------------------------------------------------------------------------
# shapes


def _graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in inits]


def _bind_inputs(proto: onnx.ModelProto, shapes: dict[str, Sequence[int] | int], where: str) -> None:
    inputs = _graph_inputs(proto)
    by_name = {v.name: v for v in inputs}
    params = {d.dim_param for v in inputs for d in v.type.tensor_type.shape.dim if d.dim_param}
    for key, shape in shapes.items():
        if key in by_name:
            dims = by_name[key].type.tensor_type.shape.dim
            shape = (shape,) if isinstance(shape, int) else tuple(shape)
            if len(shape) != len(dims):
                raise GraphError(
                    f"{where}: input {key} has rank {len(dims)}, the given shape {list(shape)} has {len(shape)}"
                )
            for d, s in zip(dims, shape, strict=True):
                if d.HasField("dim_value") and d.dim_value != s:
                    raise GraphError(
                        f"{where}: input {key} has the static shape {_dims(dims)}; the given {list(shape)} differs"
                    )
                d.dim_value = int(s)
        elif key in params:
            if not isinstance(shape, int):
                raise GraphError(f"{where}: dimension {key} is bound to {shape!r}; give it one integer")
            for v in inputs:
                for d in v.type.tensor_type.shape.dim:
                    if d.dim_param == key:
                        d.dim_value = int(shape)
        else:
            raise GraphError(
                f"{where}: input_shapes names {key!r}, which is neither an input "
                f"({', '.join(by_name) or 'none'}) nor a symbolic dimension ({', '.join(sorted(params)) or 'none'})"
            )
    for v in inputs:
        dims = v.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims):
            raise GraphError(
                f"{where}: input {v.name} has the symbolic shape {_dims(dims)}; bind it, e.g. "
                f"input_shapes={{{v.name!r}: (...)}} or --input-shape {v.name}=" + ",".join("1" for _ in dims)
            )


def _dims(dims: Sequence[onnx.TensorShapeProto.Dimension]) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


def _static_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    if any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return tuple(int(d.dim_value) for d in t.shape.dim)


def _infer(proto: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
    except Exception as err:  # onnx raises InferenceError, ValidationError, RuntimeError
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GraphError(f"{where}: shape inference failed: {first}") from None


def _infer_and_fold(proto: onnx.ModelProto, where: str) -> onnx.ModelProto:
    for _ in range(32):
        proto = _infer(proto, where)
        if not _fold_once(proto, where):
            return proto
    return proto


def _fold_once(proto: onnx.ModelProto, where: str) -> bool:
    """Fold every node whose inputs are all known; True when some node was folded."""
    graph = proto.graph
    consts = {t.name: t for t in graph.initializer}
    infos = {v.name: v for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
    keep: list[onnx.NodeProto] = []
    folded: list[onnx.TensorProto] = []
    known: dict[str, np.ndarray] = {}
    opset = _default_opset(proto, where)
    for node in graph.node:
        values = _fold_node(node, consts, known, infos, opset, where)
        if values is None:
            keep.append(node)
            continue
        for name, arr in zip(node.output, values, strict=False):
            if name:
                known[name] = arr
                folded.append(numpy_helper.from_array(np.asarray(arr), name))
    if not folded:
        return False
    outputs = {v.name for v in graph.output}
    del graph.node[:]
    graph.node.extend(keep)
    for t in folded:
        if t.name in outputs:  # a graph output computed at import: keep a node that makes it
            graph.node.append(helper.make_node("Constant", [], [t.name], value=t))
        else:
            graph.initializer.append(t)
    names = {t.name for t in folded}
    kept_info = [v for v in graph.value_info if v.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return True


def _fold_node(
    node: onnx.NodeProto,
    consts: Mapping[str, onnx.TensorProto],
    known: dict[str, np.ndarray],
    infos: Mapping[str, onnx.ValueInfoProto],
    opset: int,
    where: str,
) -> list[np.ndarray] | None:
    if node.op_type in _NOT_FOLDED:
        return None
    if node.op_type == "Shape" and node.input[0] in infos:
        shape = _static_shape(infos[node.input[0]])
        if shape is None:
            return None
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        return [np.array(shape[start:end], dtype=np.int64)]
    if node.op_type == "Size" and node.input[0] in infos:
        shape = _static_shape(infos[node.input[0]])
        return None if shape is None else [np.array(int(np.prod(shape)), dtype=np.int64)]
    args = []
    for name in node.input:
        if not name:
            args.append(None)
        elif name in known:
            args.append(known[name])
        elif name in consts:
            args.append(numpy_helper.to_array(consts[name]))
        else:
            return None
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ev = ReferenceEvaluator(_single_node_model(node, opset))
            outs = ev.run(None, {f"in{k}": a for k, a in enumerate(args) if a is not None})
    except Exception as err:
        raise GraphError(f"{where}: {_node_where(node, opset)}: folding its constant inputs failed: {err}") from None
    if sum(np.asarray(o).size for o in outs) > _MAX_FOLDED_ELEMENTS:
        return None
    return [np.asarray(o) for o in outs]


def _single_node_model(node: onnx.NodeProto, opset: int) -> onnx.ModelProto:
    n = onnx.NodeProto()
    n.CopyFrom(node)
    del n.input[:]
    n.input.extend(f"in{k}" if name else "" for k, name in enumerate(node.input))
    del n.output[:]
    n.output.extend(f"out{k}" for k in range(len(node.output)))
    inputs = [helper.make_empty_tensor_value_info(f"in{k}") for k, name in enumerate(node.input) if name]
    outputs = [helper.make_empty_tensor_value_info(f"out{k}") for k in range(len(node.output))]
    g = helper.make_graph([n], "fold", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


# ---------------------------------------------------------------------------------------------
# to the graph layer's IR


_DTYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.BOOL: "bool",
}


def _dtype(elem_type: int, what: str, where: str) -> str:
    if elem_type not in _DTYPES:
        name = (
            onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else elem_type
        )
        raise GraphError(
            f"{where}: {what} has element type {name}, which is not supported ({', '.join(_DTYPES.values())})"
        )
    return _DTYPES[elem_type]


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    out: dict[str, object] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, onnx.TensorProto):
            v = numpy_helper.to_array(v)
        elif isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, list):
            v = tuple(x.decode() if isinstance(x, bytes) else x for x in v)
        out[a.name] = v
    return out


def _to_graph(proto: onnx.ModelProto, opset: int, where: str) -> Graph:
    g = proto.graph
    constants = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    values: dict[str, Value] = {}
    for name, arr in constants.items():
        values[name] = Value(name, tuple(arr.shape), _dtype(_elem_of(arr), f"constant {name}", where))
    infos = {v.name: v for v in list(g.value_info) + list(g.input) + list(g.output)}
    producers = {o: n for n in g.node for o in n.output if o}
    for name, vi in infos.items():
        if name in values:
            continue
        shape = _static_shape(vi)
        if shape is None:
            node = producers.get(name)
            what = _node_where(node, opset) + f": output {name}" if node else f"value {name}"
            raise GraphError(
                f"{where}: {what} has no static shape after shape inference "
                f"({_dims(vi.type.tensor_type.shape.dim) if vi.type.tensor_type.HasField('shape') else 'unknown rank'}); "
                "bind the model's symbolic input dimensions (input_shapes / --input-shape NAME=D,D,...)"
            )
        values[name] = Value(name, shape, _dtype(vi.type.tensor_type.elem_type, f"value {name}", where))
    nodes = []
    for k, n in enumerate(g.node):
        for o in n.output:
            if o and o not in values:
                raise GraphError(f"{where}: {_node_where(n, opset)}: shape inference gave output {o} no type or shape")
        for i in n.input:
            if i and i not in values:
                raise GraphError(
                    f"{where}: {_node_where(n, opset)}: input {i!r} is not produced by any node or initializer"
                )
        nodes.append(Node(n.name or f"{n.op_type}_{k}", n.op_type, tuple(n.input), tuple(n.output), _attrs(n), opset))
    inputs = [values[v.name] for v in _graph_inputs(proto)]
    outputs = [values[v.name] for v in g.output]
    return Graph(g.name or "model", nodes, inputs, outputs, values, constants)


def _elem_of(arr: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(arr.dtype)
