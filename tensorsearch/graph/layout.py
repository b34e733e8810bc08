"""The layout pass: run 2-D convolutions and everything around them in NHWC (TVM's ConvertLayout).

    from tensorsearch.graph.layout import to_nhwc
    g = to_nhwc(from_onnx("resnet50.onnx"))

Rules, applied to the nodes in graph order:

- **Layout ops** run in NHWC: every Conv, ConvTranspose, MaxPool (without its Indices output),
  AveragePool, GlobalAveragePool, BatchNormalization (one output), QLinearConv and ConvInteger
  whose data input is 4-D (two spatial dims) gets ``attrs["layout"] = "NHWC"``. Its data input
  and output are NHWC ``[N, H, W, C]``; its weight becomes HWIO:

  - Conv, QLinearConv (weight = input 3), ConvInteger (input 1): ONNX ``[Cout, Cin/g, KH, KW]``
    becomes ``[KH, KW, Cin/g, Cout]`` (workloads' ``conv2d_nhwc``);
  - ConvTranspose (input 1): ONNX ``[Cin, Cout/g, KH, KW]`` becomes ``[KH, KW, Cin/g, Cout]``
    (``w_nhwc[kh, kw, i, g * Cout/g + j] = w[g * Cin/g + i, j, kh, kw]``; with one group this is
    workloads' T2D weight ``[KH, KW, CI, CO]``).

  A constant weight is rearranged at compile time into a new constant; another weight gets a
  ``LayoutTransform`` node (a ConvTranspose with a non-constant weight and several groups, whose
  rearrangement is no transpose, stays NCHW). Biases, batch-norm parameters and per-channel
  scales are 1-D and stay as they are.
- **Layout-agnostic ops** keep NHWC and pass it on (their output is NHWC too):

  - elementwise ops (unary: Relu, Clip, Sigmoid, Tanh, Erf, Sqrt, Cast, Identity, Neg, Exp, ...;
    binary and variadic: Add, Sub, Mul, Div, Pow, Max, Min, Where, ...) when at least one input
    is NHWC and every other input is NHWC, a one-element value, or a constant of rank <= 4 (it
    is permuted at compile time like the data: ``[C, 1, 1]`` becomes ``[1, 1, C]``);
  - QuantizeLinear / DequantizeLinear with a per-tensor scale and zero point, and the integer
    elementwise ops QLinearAdd / QLinearMul (quant.fold_qdq's) likewise, their two data inputs
    treated as a binary op's;
  - Concat of NHWC values (and 4-D constants), its axis remapped (1 becomes 3).
- **Anything else** reads NCHW: an NHWC value it reads (or a graph output) gets one
  ``LayoutTransform`` back to NCHW, shared by all such consumers, which keeps the value's original
  name. A 4-D NCHW value (a graph input, the output of an op left NCHW) that a converted op reads
  gets one ``LayoutTransform`` to NHWC.

An NHWC value is a new value named ``<name>_nhwc`` whose :class:`~.ir.Value` has the permuted
shape; the original name is the NCHW value, made by a ``LayoutTransform`` only where something
reads it. A ``LayoutTransform`` that only moves size-1 dimensions (``[1, C, 1, 1]``) is still
emitted. A graph that already has NHWC nodes is returned unchanged. Before::

    %c1 = Conv(x, w1)                    x: [1, 8, 9, 9], w1: [8, 8, 3, 3]
    %r  = Relu(%c1)
    %c2 = Conv(%r, w2)
    %a  = Add(%c2, %r)
    %p  = GlobalAveragePool(%a)
    %y  = Flatten(%p)

after (``w1_hwio: [3, 3, 8, 8]``)::

    %x_nhwc  = LayoutTransform(x) {perm=(0, 2, 3, 1)}           [1, 9, 9, 8]
    %c1_nhwc = Conv(%x_nhwc, w1_hwio) {layout='NHWC'}
    %r_nhwc  = Relu(%c1_nhwc)
    %c2_nhwc = Conv(%r_nhwc, w2_hwio) {layout='NHWC'}
    %a_nhwc  = Add(%c2_nhwc, %r_nhwc)
    %p_nhwc  = GlobalAveragePool(%a_nhwc) {layout='NHWC'}       [1, 1, 1, 8]
    %p       = LayoutTransform(%p_nhwc) {perm=(0, 3, 1, 2)}     [1, 8, 1, 1]
    %y       = Flatten(%p)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ir import Graph, Node, Value

__all__ = [
    "ELEMENTWISE_OPS",
    "LAYOUT_OPS",
    "TO_NCHW",
    "TO_NHWC",
    "conv_transpose_weight_to_hwio",
    "conv_weight_to_hwio",
    "to_nhwc",
]

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
_OIHW_TO_HWIO = (2, 3, 1, 0)  # Conv [Cout, Cin/g, KH, KW] -> [KH, KW, Cin/g, Cout]
_IOHW_TO_HWIO = (2, 3, 0, 1)  # ConvTranspose with one group: [Cin, Cout, KH, KW] -> [KH, KW, Cin, Cout]

# op -> the index of its weight input (None: no weight)
LAYOUT_OPS: dict[str, int | None] = {
    "Conv": 1,
    "ConvTranspose": 1,
    "QLinearConv": 3,
    "ConvInteger": 1,
    "MaxPool": None,
    "AveragePool": None,
    "GlobalAveragePool": None,
    "BatchNormalization": None,
}

ELEMENTWISE_OPS = frozenset(
    {
        # unary (Clip's bounds, Cast, ... have one-element or no other inputs)
        *("Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh"),
        *("Erf", "Sqrt", "Cast", "Identity", "Neg", "Exp", "Log", "Abs", "Reciprocal", "Floor", "Ceil"),
        *("Round", "Sign", "Softplus", "Softsign", "Gelu", "Mish", "Not", "Sin", "Cos", "IsNaN", "IsInf"),
        # binary and variadic, numpy broadcasting
        *("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Where", "PRelu"),
        *("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor"),
    }
)
_QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
# integer elementwise ops (quant.fold_qdq's): the inputs that are data; the rest are scales and
# zero points, which must be one element each (per tensor) for the op to run in NHWC
_QLINEAR_ELEMENTWISE = {"QLinearAdd": (0, 3), "QLinearMul": (0, 3)}


def conv_weight_to_hwio(w: np.ndarray) -> np.ndarray:
    """A Conv / QLinearConv / ConvInteger weight ``[Cout, Cin/g, KH, KW]`` as ``[KH, KW, Cin/g, Cout]``."""
    return np.ascontiguousarray(w.transpose(_OIHW_TO_HWIO))


def conv_transpose_weight_to_hwio(w: np.ndarray, groups: int) -> np.ndarray:
    """A ConvTranspose weight ``[Cin, Cout/g, KH, KW]`` as ``[KH, KW, Cin/g, Cout]``."""
    cin, cog, kh, kw = w.shape
    grouped = w.reshape(groups, cin // groups, cog, kh, kw).transpose(3, 4, 1, 0, 2)
    return np.ascontiguousarray(grouped.reshape(kh, kw, cin // groups, groups * cog))


def _permute(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


def to_nhwc(graph: Graph) -> Graph:
    """``graph`` with its 4-D convolutions, pools and batch norms in NHWC; see the module docstring."""
    if any(n.attr("layout") == "NHWC" for n in graph.nodes):
        return graph
    rewriter = _Rewriter(graph)
    for node in graph.nodes:
        rewriter.visit(node)
    return rewriter.finish()


class _Rewriter:
    """The pass's state: the nodes so far and which values exist in NHWC (see ``to_nhwc``)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: list[Node] = []
        self.values = dict(graph.values)
        self.constants = dict(graph.constants)
        self.nhwc: dict[str, str] = {}  # value -> its NHWC twin
        self.nchw_missing: set[str] = set()  # values made only in NHWC so far
        self.derived: dict[tuple[str, str], str] = {}  # (constant, how) -> the rearranged constant
        self.taken = set(graph.values) | {n.name for n in graph.nodes}
        self.opset = max((n.opset for n in graph.nodes), default=0)

    # -- driving --------------------------------------------------------------------------

    def visit(self, node: Node) -> None:
        if node.op in LAYOUT_OPS and self._convertible(node):
            self._convert(node)
        elif not self._pass_through(node):
            for i in node.inputs:
                self._nchw(i)
            self._emit(node)

    def finish(self) -> Graph:
        for out in self.graph.outputs:
            self._nchw(out.name)
        return self.graph.replace(nodes=self.nodes, values=self.values, constants=self.constants)

    # -- helpers --------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def _emit(self, node: Node) -> None:
        self.nodes.append(node)

    def _transform(self, src: str, dst: str, perm: Sequence[int]) -> None:
        name = self._fresh(f"{src}/layout_transform")
        self._emit(Node(name, "LayoutTransform", (src,), (dst,), {"perm": tuple(perm)}, self.opset))

    def _new_value(self, like: str, base: str, shape: Sequence[int]) -> str:
        name = self._fresh(base)
        self.values[name] = Value(name, tuple(shape), self.values[like].dtype)
        return name

    def _nchw(self, value: str) -> str:
        """``value`` as NCHW (made from its NHWC twin on first need)."""
        if value in self.nchw_missing:
            self.nchw_missing.discard(value)
            self._transform(self.nhwc[value], value, TO_NCHW)
        return value

    def _to_nhwc(self, value: str) -> str:
        """The NHWC twin of a 4-D ``value`` (a LayoutTransform on first need)."""
        if value not in self.nhwc:
            twin = self._new_value(value, f"{value}_nhwc", _permute(self.values[value].shape, TO_NHWC))
            self._transform(value, twin, TO_NHWC)
            self.nhwc[value] = twin
        return self.nhwc[value]

    def _derived_constant(self, name: str, how: str, array: np.ndarray) -> str:
        key = (name, how)
        if key not in self.derived:
            new = self._fresh(f"{name}_{how}")
            self.constants[new] = array
            self.values[new] = Value(new, tuple(array.shape), self.values[name].dtype)
            self.derived[key] = new
        return self.derived[key]

    def _rank(self, value: str) -> int:
        return len(self.values[value].shape)

    # -- layout ops -----------------------------------------------------------------------

    def _convertible(self, node: Node) -> bool:
        if not node.inputs or not node.inputs[0] or self._rank(node.inputs[0]) != 4:
            return False
        if any(node.outputs[1:]):  # MaxPool's Indices, batch norm's training outputs
            return False
        if node.op == "ConvTranspose" and int(node.attr("group", 1)) != 1:
            return node.inputs[1] in self.constants
        return True

    def _convert(self, node: Node) -> None:
        weight = LAYOUT_OPS[node.op]
        inputs = [self._nchw(i) if k else i for k, i in enumerate(node.inputs)]
        inputs[0] = self._to_nhwc(node.inputs[0])
        if weight is not None:
            inputs[weight] = self._weight(node, node.inputs[weight])
        out = node.outputs[0]
        self._set_nhwc_output(out)
        outputs = (self.nhwc[out], *node.outputs[1:])
        self._emit(node.with_(inputs=tuple(inputs), outputs=outputs, attrs={"layout": "NHWC"}))

    def _set_nhwc_output(self, out: str) -> None:
        self.nhwc[out] = self._new_value(out, f"{out}_nhwc", _permute(self.values[out].shape, TO_NHWC))
        self.nchw_missing.add(out)

    def _weight(self, node: Node, w: str) -> str:
        transpose = node.op == "ConvTranspose"
        if w in self.constants:
            array = np.asarray(self.constants[w])
            hwio = (
                conv_transpose_weight_to_hwio(array, int(node.attr("group", 1)))
                if transpose
                else conv_weight_to_hwio(array)
            )
            return self._derived_constant(w, "hwio" if not transpose else "hwio_t", hwio)
        perm = _IOHW_TO_HWIO if transpose else _OIHW_TO_HWIO
        key = (w, "hwio" if not transpose else "hwio_t")
        if key not in self.derived:
            self.derived[key] = self._new_value(w, f"{w}_hwio", _permute(self.values[w].shape, perm))
            self._transform(w, self.derived[key], perm)
        return self.derived[key]

    # -- layout-agnostic ops --------------------------------------------------------------

    def _pass_through(self, node: Node) -> bool:
        """Rewrite ``node`` to read and write NHWC when it may (see the module docstring)."""
        if len(node.outputs) != 1 or not any(i in self.nhwc for i in node.inputs if i):
            return False
        inputs = self._agnostic_inputs(node)
        if inputs is None:
            return False
        attrs = {}
        if node.op == "Concat":
            attrs["axis"] = TO_NHWC.index(int(node.attr("axis")) % 4)
        self._set_nhwc_output(node.outputs[0])
        self._emit(node.with_(inputs=tuple(inputs), outputs=(self.nhwc[node.outputs[0]],), attrs=attrs))
        return True

    def _agnostic_inputs(self, node: Node) -> list[str] | None:
        """The node's inputs in NHWC, or None when the node cannot run in NHWC."""
        if node.op in ELEMENTWISE_OPS:
            plans = [self._elementwise_operand(i) for i in node.inputs]
        elif node.op in _QLINEAR_ELEMENTWISE:
            data = _QLINEAR_ELEMENTWISE[node.op]
            plans = [
                self._elementwise_operand(i) if k in data else ("keep", i) if self.values[i].size == 1 else None
                for k, i in enumerate(node.inputs)
            ]
        elif node.op in _QDQ_OPS:
            per_tensor = all(self.values[i].size == 1 for i in node.inputs[1:] if i)
            plans = [self._plan_nhwc(node.inputs[0])] + [("keep", i) for i in node.inputs[1:]]
            plans = plans if per_tensor else [None]
        elif node.op == "Concat":
            plans = [self._plan_nhwc(i) or self._plan_constant(i, 4) for i in node.inputs]
        else:
            return None
        if any(p is None for p in plans):
            return None
        return [self._realize(p) for p in plans]

    def _elementwise_operand(self, value: str) -> tuple[str, str] | None:
        if not value:
            return ("keep", value)
        plan = self._plan_nhwc(value)
        if plan is None and self._rank(value) <= 4 and self.values[value].size == 1:
            plan = ("keep", value)
        return plan or self._plan_constant(value, None)

    def _plan_nhwc(self, value: str) -> tuple[str, str] | None:
        return ("nhwc", value) if value in self.nhwc else None

    def _plan_constant(self, value: str, rank: int | None) -> tuple[str, str] | None:
        if value not in self.constants or self._rank(value) > 4 or (rank is not None and self._rank(value) != rank):
            return None
        return ("constant", value)

    def _realize(self, plan: tuple[str, str]) -> str:
        how, value = plan
        if how == "keep":
            return value
        if how == "nhwc":
            return self.nhwc[value]
        array = np.asarray(self.constants[value])
        rank = array.ndim
        permuted = array.reshape((1,) * (4 - rank) + array.shape).transpose(TO_NHWC)
        while permuted.ndim > rank and permuted.shape[0] == 1:
            permuted = permuted.reshape(permuted.shape[1:])
        return self._derived_constant(value, "nhwc", np.ascontiguousarray(permuted))
