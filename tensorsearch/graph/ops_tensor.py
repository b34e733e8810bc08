"""Lowerings of ONNX's elementwise, shape, constant and normalization operators (opsets 11 to 21).

Importing this module registers them (:mod:`.registry` does it on first use)::

    from tensorsearch.graph.registry import lowering_of
    lowering_of("Add").kind        # OpKind.INJECTIVE
    lowering_of("Softmax").kind    # OpKind.REDUCTION

- INJECTIVE: arithmetic with numpy broadcasting (Add, Sub, Mul, Div, Pow, Mod, variadic Max, Min,
  Sum), unary math (Exp, Erf, Tanh, Sigmoid, Relu, LeakyRelu, Clip, ...), comparisons and logic,
  Where, Cast, CastLike, Identity, Dropout (inference), and the layout and shape operators
  (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather, Expand, Tile).
  Shape, Size, Constant, ConstantOfShape and Range, which import normally folds, write their
  values from immediates.
- REDUCTION: Softmax, LogSoftmax (max-subtracted: a max stage, a sum-of-exp stage, the result),
  LayerNormalization (mean, then the mean of squared deviations, as onnxruntime), and ReduceSum,
  ReduceMean, ReduceMax, ReduceMin, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum.

Values a lowering needs at compile time (shapes, axes, starts, repeats) come from constant
inputs; such an input that is not a constant is a :class:`~.ir.GraphError` naming it. Where an
attribute became an input (Squeeze/Unsqueeze axes and Split's split at 13, ReduceSum's axes at
13, the other reductions' at 18) the node's opset picks the place. A one-element constant operand
of an elementwise operator is inlined as an immediate. Integer Div truncates (as C and
onnxruntime do); Pow by a constant 1, 2, 3 or 0.5 is a product or a square root.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import te
from ..ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    And,
    FloatImm,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Not,
    Or,
    PrimExpr,
    Select,
    call,
    const,
)
from .ir import GraphError, Node, Value
from .lowering import ORT_ORDER, stage_name
from .registry import Operand, OpKind, lowers

__all__: list[str] = []

Index = tuple[PrimExpr, ...]
INJECTIVE, REDUCTION = OpKind.INJECTIVE, OpKind.REDUCTION
_MAX_WRITTEN_CONSTANT = 256  # elements of a constant a kernel writes from a tree of immediates


# ---------------------------------------------------------------------------------------------
# helpers


def _imm(value: Any, dtype: str) -> PrimExpr:
    """An immediate of ``dtype``."""
    if dtype == "bool":
        return const(bool(value), dtype)
    if dtype.startswith(("float", "bfloat")):
        return const(float(value), dtype)
    return const(int(value), dtype)


def _read(arg: Operand, index: Sequence[PrimExpr]) -> PrimExpr:
    """Element ``index`` (one index per dimension of the value) of an operand; a 0-d value is
    element 0 of its one-element tensor."""
    return arg.tensor[tuple(index)] if arg.shape else arg.tensor[0]


def _broadcast(arg: Operand, index: Index) -> PrimExpr:
    """The element of ``arg`` that numpy broadcasting pairs with output element ``index``; a
    one-element constant is an immediate."""
    scalar = arg.scalar()
    if scalar is not None:
        return _imm(scalar, arg.dtype)
    sub = index[len(index) - len(arg.shape) :]
    return _read(arg, [const(0) if d == 1 else i for d, i in zip(arg.shape, sub)])


def _compute(out: Value, fn: Callable[[Index], PrimExpr], base: str) -> te.Tensor:
    """A stage computing ``out`` (a 0-d value as one element) with ``fn(index)``."""
    rank = len(out.shape)
    return te.compute(out.shape or (1,), lambda *i: fn(i[:rank]), name=stage_name(base))


def _first(arg: Operand) -> PrimExpr:
    """The first element of an operand (an immediate when it is a constant)."""
    scalar = arg.scalar()
    if scalar is not None:
        return _imm(scalar, arg.dtype)
    return _read(arg, [const(0)] * len(arg.shape))


def _const(arg: Operand | None, what: str) -> np.ndarray:
    """The array of a constant input, or a GraphError naming the input."""
    if arg is None:
        raise GraphError(f"the {what} input is missing")
    if arg.const is None:
        raise GraphError(f"the {what} input {arg.value.name!r} is not a constant (it must be known at compile time)")
    return np.asarray(arg.const)


def _ints(arg: Operand | None, what: str) -> tuple[int, ...]:
    return tuple(int(v) for v in _const(arg, what).reshape(-1))


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise GraphError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _arg(args: Sequence[Operand | None], k: int) -> Operand | None:
    return args[k] if k < len(args) else None


def _attr_or_input(node: Node, args: Sequence[Operand | None], name: str, k: int, since: int) -> tuple[int, ...] | None:
    """A list of ints that is attribute ``name`` before opset ``since`` and input ``k`` from it on
    (None when absent)."""
    if node.opset < since:
        value = node.attr(name)
        return None if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))
    arg = _arg(args, k)
    return None if arg is None else _ints(arg, name)


def _expect_shape(shape: Sequence[int], out: Value) -> None:
    if tuple(shape) != out.shape:
        raise GraphError(f"the attributes give the shape {list(shape)}, shape inference says {list(out.shape)}")


# ---------------------------------------------------------------------------------------------
# elementwise


def _pow(node: Node, x: PrimExpr, y: PrimExpr) -> PrimExpr:
    """``x ** y``: a constant 1, 2, 3 or 0.5 is a product or sqrt; integers go through float64."""
    if isinstance(y, IntImm | FloatImm) and x.dtype.is_float:
        special = {1.0: lambda: x, 2.0: lambda: x * x, 3.0: lambda: x * x * x, 0.5: lambda: te.sqrt(x)}
        make = special.get(float(y.value))
        if make is not None:
            return make()
    if x.dtype.is_float:
        return call("pow", x, te.cast(y, x.dtype))
    wide = call("pow", te.cast(x, "float64"), te.cast(y, "float64"))
    return te.cast(wide, x.dtype)


def _mod(node: Node, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if node.attr("fmod", 0) or a.dtype.is_float:
        return Mod(a, b)  # C fmod: the sign of the dividend
    return FloorMod(a, b)  # Python %: the sign of the divisor


def _fold(fn: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> Callable[..., PrimExpr]:
    """An operator of any number of operands folded from a binary one."""
    return lambda node, *xs: functools.reduce(fn, xs)


def _leaky_relu(node: Node, x: PrimExpr) -> PrimExpr:
    return Select(x >= _imm(0, str(x.dtype)), x, x * _imm(node.attr("alpha", 0.01), str(x.dtype)))


def _reciprocal(node: Node, x: PrimExpr) -> PrimExpr:
    return _imm(1, str(x.dtype)) / x


def _relu(node: Node, x: PrimExpr) -> PrimExpr:
    return Max(x, _imm(0, str(x.dtype)))


def _math(name: str) -> Callable[..., PrimExpr]:
    def fn(node: Node, x: PrimExpr) -> PrimExpr:
        if not x.dtype.is_float:
            raise GraphError(f"{node.op} of {x.dtype} values is not supported (floating point only)")
        return call(name, x)

    return fn


# op -> fn(node, *operand elements); operands broadcast like numpy
_ELEMENTWISE: dict[str, Callable[..., PrimExpr]] = {
    "Add": _fold(lambda a, b: a + b),
    "Sub": lambda node, a, b: a - b,
    "Mul": _fold(lambda a, b: a * b),
    "Div": lambda node, a, b: a / b,  # truncating for integers
    "Pow": _pow,
    "Mod": _mod,
    "Max": _fold(Max),
    "Min": _fold(Min),
    "Sum": _fold(lambda a, b: a + b),
    "Neg": lambda node, x: -x,
    "Abs": lambda node, x: call("abs", x),
    "Reciprocal": _reciprocal,
    "Relu": _relu,
    "LeakyRelu": _leaky_relu,
    "Equal": lambda node, a, b: EQ(a, b),
    "Less": lambda node, a, b: LT(a, b),
    "Greater": lambda node, a, b: GT(a, b),
    "LessOrEqual": lambda node, a, b: LE(a, b),
    "GreaterOrEqual": lambda node, a, b: GE(a, b),
    "Not": lambda node, x: Not(x),
    "And": lambda node, a, b: And(a, b),
    "Or": lambda node, a, b: Or(a, b),
    "Xor": lambda node, a, b: NE(a, b),
    "Where": lambda node, c, a, b: Select(c, a, b),
    **{op: _math(op.lower()) for op in ("Exp", "Log", "Sqrt", "Erf", "Tanh", "Sigmoid", "Floor", "Ceil", "Round")},
}


def _elementwise(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    fn = _ELEMENTWISE[node.op]
    present = [a for a in args if a is not None]
    return [_compute(outs[0], lambda i: fn(node, *(_broadcast(a, i) for a in present)), node.op.lower())]


lowers(*_ELEMENTWISE, kind=INJECTIVE)(_elementwise)


@lowers("Clip", kind=INJECTIVE)
def _clip(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``min(max(x, lo), hi)``; ``lo`` and ``hi`` are optional one-element inputs (opset 11 on)."""
    x, lo, hi = args[0], _arg(args, 1), _arg(args, 2)

    def body(i: Index) -> PrimExpr:
        v = _read(x, i)
        if lo is not None:
            v = Max(v, _first(lo))
        if hi is not None:
            v = Min(v, _first(hi))
        return v

    return [_compute(outs[0], body, "clip")]


@lowers("Cast", "CastLike", kind=INJECTIVE)
def _cast(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """A conversion to the output's type: float to integer truncates, anything to bool is ``!= 0``."""
    x = args[0]
    return [_compute(outs[0], lambda i: te.cast(_read(x, i), outs[0].dtype), "cast")]


@lowers("Identity", kind=INJECTIVE)
def _identity(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x = args[0]
    return [_compute(outs[0], lambda i: _read(x, i), "identity")]


@lowers("Dropout", kind=INJECTIVE)
def _dropout(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """Inference: the data unchanged, and a mask (when asked for) of all true."""
    training = _arg(args, 2)
    if training is not None and bool(_const(training, "training_mode").reshape(-1)[0]):
        raise GraphError("training_mode=True is not supported (inference only)")
    x = args[0]
    made = [_compute(outs[0], lambda i: _read(x, i), "dropout")]
    if len(outs) > 1:
        made.append(None if outs[1] is None else _compute(outs[1], lambda i: _imm(True, "bool"), "dropout_mask"))
    return made


# ---------------------------------------------------------------------------------------------
# layout and shape


def _prefix_products(shape: Sequence[int]) -> list[int]:
    return [math.prod(shape[:k]) for k in range(len(shape) + 1)]


def _groups(shape: Sequence[int], cuts: list[int]) -> list[list[int]]:
    """The dimensions of ``shape`` in each span between consecutive common prefix products."""
    groups: list[list[int]] = [[] for _ in cuts]
    for d, p in enumerate(_prefix_products(shape)[:-1]):
        groups[bisect.bisect_right(cuts, p) - 1].append(d)
    return groups


def _reshape_index(in_shape: Sequence[int], out_shape: Sequence[int], o: Index) -> list[PrimExpr]:
    """The input index of output element ``o`` of a row-major reshape: each run of dimensions
    whose products agree maps on its own, so a split or merge costs one div/mod per dimension."""
    cuts = sorted(set(_prefix_products(in_shape)) & set(_prefix_products(out_shape)))
    index: list[PrimExpr] = [const(0)] * len(in_shape)
    for in_dims, out_dims in zip(_groups(in_shape, cuts), _groups(out_shape, cuts)):
        flat: PrimExpr | None = None
        stride = 1
        for d in reversed(out_dims):
            if out_shape[d] != 1:
                term = o[d] if stride == 1 else o[d] * stride
                flat = term if flat is None else term + flat
            stride *= out_shape[d]
        total, stride = stride, 1
        for d in reversed(in_dims):
            if in_shape[d] != 1 and flat is not None:
                i = flat if stride == 1 else te.floordiv(flat, stride)
                index[d] = i if stride * in_shape[d] == total else te.floormod(i, in_shape[d])
            stride *= in_shape[d]
    return index


def _reshaped(x: Operand, out: Value, base: str) -> te.Tensor:
    return _compute(out, lambda o: _read(x, _reshape_index(x.shape, out.shape, o)), base)


def _reshape_target(shape: Sequence[int], in_shape: Sequence[int], allowzero: int) -> list[int]:
    """Reshape's shape input resolved: 0 copies the input's dimension (unless allowzero), -1 is inferred."""
    dims = [in_shape[k] if s == 0 and not allowzero else s for k, s in enumerate(shape)]
    if dims.count(-1) > 1:
        raise GraphError(f"the shape {list(shape)} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = math.prod(in_shape) // known if known else 0
    return dims


@lowers("Reshape", kind=INJECTIVE)
def _reshape(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    shape = _ints(args[1], "shape")
    _expect_shape(_reshape_target(shape, args[0].shape, node.attr("allowzero", 0)), outs[0])
    return [_reshaped(args[0], outs[0], "reshape")]


@lowers("Flatten", kind=INJECTIVE)
def _flatten(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    shape = args[0].shape
    axis = node.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis  # in [-rank, rank]
    _expect_shape((math.prod(shape[:axis]), math.prod(shape[axis:])), outs[0])
    return [_reshaped(args[0], outs[0], "flatten")]


@lowers("Squeeze", kind=INJECTIVE)
def _squeeze(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    shape = args[0].shape
    axes = _attr_or_input(node, args, "axes", 1, since=13)
    drop = {d for d, n in enumerate(shape) if n == 1} if axes is None else {_axis(a, len(shape)) for a in axes}
    _expect_shape([n for d, n in enumerate(shape) if d not in drop], outs[0])
    return [_reshaped(args[0], outs[0], "squeeze")]


@lowers("Unsqueeze", kind=INJECTIVE)
def _unsqueeze(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    axes = _attr_or_input(node, args, "axes", 1, since=13)
    if axes is None:
        raise GraphError("the axes are missing")
    rank = len(args[0].shape) + len(axes)
    new = {_axis(a, rank) for a in axes}
    rest = iter(args[0].shape)
    _expect_shape([1 if d in new else next(rest) for d in range(rank)], outs[0])
    return [_reshaped(args[0], outs[0], "unsqueeze")]


@lowers("Transpose", kind=INJECTIVE)
def _transpose(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x = args[0]
    rank = len(x.shape)
    perm = tuple(node.attr("perm", tuple(reversed(range(rank)))))
    if sorted(perm) != list(range(rank)):
        raise GraphError(f"perm={list(perm)} is not a permutation of the {rank} dimensions")

    def body(o: Index) -> PrimExpr:
        index: list[PrimExpr] = [const(0)] * rank
        for k, p in enumerate(perm):
            index[p] = o[k]
        return _read(x, index)

    return [_compute(outs[0], body, "transpose")]


@lowers("Concat", kind=INJECTIVE)
def _concat(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """A chain of selects on the concatenation axis, the last input first."""
    axis = _axis(node.attr("axis"), len(outs[0].shape))
    parts, offset = [], 0
    for a in args:
        if a is not None and a.shape[axis] > 0:
            parts.append((offset, a))
            offset += a.shape[axis]

    def body(o: Index) -> PrimExpr:
        def part(start: int, a: Operand) -> PrimExpr:
            return _read(a, [*o[:axis], o[axis] - start if start else o[axis], *o[axis + 1 :]])

        value = part(*parts[-1])
        for start, a in reversed(parts[:-1]):
            end = start + a.shape[axis]
            value = Select(o[axis] < end, part(start, a), value)
        return value

    return [_compute(outs[0], body, "concat")]


def _window(x: Operand, out: Value, axis: int, start: int) -> te.Tensor:
    """``out[..., i, ...] = x[..., start + i, ...]`` on ``axis``."""
    return _compute(out, lambda o: _read(x, [*o[:axis], _stepped(o[axis], start, 1), *o[axis + 1 :]]), "split")


@lowers("Split", kind=INJECTIVE)
def _split(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """Each output a window of the input; sizes from ``split`` (attribute before 13, input from
    13) or even parts (``num_outputs`` from 18, the last part smaller)."""
    x = args[0]
    axis = _axis(node.attr("axis", 0), len(x.shape))
    sizes = _attr_or_input(node, args, "split", 1, since=13)
    if sizes is not None and sizes != tuple(v.shape[axis] for v in outs):
        raise GraphError(f"split={list(sizes)} does not match the outputs' sizes on axis {axis}")
    made, start = [], 0
    for v in outs:
        made.append(_window(x, v, axis, start))
        start += v.shape[axis]
    return made


def _slice_window(start: int, end: int, step: int, dim: int) -> tuple[int, int]:
    """Slice's first index and element count on one axis: negative bounds count from the end,
    then they are clamped (to [0, dim] going forward, to [-1, dim - 1] going backward)."""
    start, end = (v + dim if v < 0 else v for v in (start, end))
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return start, max(0, -(-(end - start) // step))


def _stepped(i: PrimExpr, begin: int, step: int) -> PrimExpr:
    i = i if step == 1 else i * step
    return i + begin if begin else i


@lowers("Slice", kind=INJECTIVE)
def _slice(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``out[i] = x[start + i * step]`` per axis; starts, ends, axes and steps are constant inputs."""
    x = args[0]
    rank = len(x.shape)
    starts, ends = _ints(args[1], "starts"), _ints(args[2], "ends")
    axes = _ints(args[3], "axes") if _arg(args, 3) is not None else tuple(range(len(starts)))
    steps = _ints(args[4], "steps") if _arg(args, 4) is not None else (1,) * len(starts)
    begin, stride, shape = [0] * rank, [1] * rank, list(x.shape)
    for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
        if step == 0:
            raise GraphError("a step of 0 is not allowed")
        d = _axis(a, rank)
        (begin[d], shape[d]), stride[d] = _slice_window(s, e, step, x.shape[d]), step
    _expect_shape(shape, outs[0])
    return [_compute(outs[0], lambda o: _read(x, [_stepped(*t) for t in zip(o, begin, stride)]), "slice")]


def _gather_index(indices: Operand, sub: Index, dim: int) -> PrimExpr:
    """An index of the gathered axis: negative ones wrap, then it is clamped into the axis."""
    scalar = indices.scalar()
    if scalar is not None:
        return const(min(max(int(scalar) + dim if scalar < 0 else int(scalar), 0), dim - 1))
    k = te.cast(_read(indices, sub), "int32")
    k = Select(k < 0, k + dim, k)
    return Min(Max(k, const(0)), const(dim - 1))


@lowers("Gather", kind=INJECTIVE)
def _gather(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``out[pre, j..., post] = data[pre, indices[j...], post]`` (an embedding lookup on axis 0)."""
    data, indices = args[0], args[1]
    axis = _axis(node.attr("axis", 0), len(data.shape))
    q = len(indices.shape)
    dim = data.shape[axis]

    def body(o: Index) -> PrimExpr:
        k = _gather_index(indices, o[axis : axis + q], dim)
        return _read(data, [*o[:axis], k, *o[axis + q :]])

    return [_compute(outs[0], body, "gather")]


@lowers("Expand", kind=INJECTIVE)
def _expand(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    shape = _ints(args[1], "shape")
    x = args[0]
    rank = max(len(shape), len(x.shape))
    a = (1,) * (rank - len(shape)) + shape
    b = (1,) * (rank - len(x.shape)) + x.shape
    _expect_shape([max(m, n) for m, n in zip(a, b)], outs[0])
    return [_compute(outs[0], lambda o: _broadcast(x, o), "expand")]


@lowers("Tile", kind=INJECTIVE)
def _tile(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x = args[0]
    repeats = _ints(args[1], "repeats")
    _expect_shape([n * r for n, r in zip(x.shape, repeats, strict=True)], outs[0])
    return [
        _compute(
            outs[0],
            lambda o: _read(x, [te.floormod(i, n) if r > 1 else i for i, n, r in zip(o, x.shape, repeats)]),
            "tile",
        )
    ]


# ---------------------------------------------------------------------------------------------
# constants written by a kernel


def _flat_index(shape: Sequence[int], o: Index) -> PrimExpr:
    flat: PrimExpr = const(0)
    stride = 1
    for d in reversed(range(len(shape))):
        if shape[d] != 1:
            flat = o[d] * stride + flat if stride != 1 else o[d] + flat
        stride *= shape[d]
    return flat


def _affine(flat: np.ndarray) -> tuple[int, int] | None:
    """(first, step) when the values are ``first + k * step`` in exact integers, else None."""
    if flat.dtype.kind not in "iuf" or not np.all(np.mod(flat, 1) == 0) or np.max(np.abs(flat)) >= 1 << 24:
        return None  # (floats: only integers that float32 holds exactly, whatever the order of operations)
    values = flat.astype(np.int64)
    first, step = int(values[0]), int(values[1] - values[0])
    return (first, step) if np.array_equal(values, first + step * np.arange(values.size, dtype=np.int64)) else None


def _tree(flat: np.ndarray, k: PrimExpr, lo: int, hi: int, dtype: str) -> PrimExpr:
    """Element ``k`` of ``flat[lo:hi]`` as a balanced tree of selects between immediates."""
    if hi - lo == 1:
        return _imm(flat[lo], dtype)
    mid = (lo + hi) // 2
    return Select(k < mid, _tree(flat, k, lo, mid, dtype), _tree(flat, k, mid, hi, dtype))


def _written(values: Any, out: Value, base: str) -> te.Tensor:
    """A stage writing a constant array: one immediate, an affine ramp, or a tree of immediates."""
    flat = np.asarray(values).reshape(-1)
    if flat.size != max(out.size, 1):
        raise GraphError(f"the value has {flat.size} elements, the output {out.size}")
    dtype = out.dtype
    if np.all(flat == flat[0]):
        return _compute(out, lambda o: _imm(flat[0], dtype), base)
    ramp = _affine(flat)
    if ramp is not None:
        first, step = ramp
        return _compute(out, lambda o: te.cast(te.cast(_flat_index(out.shape, o), "int64") * step + first, dtype), base)
    if flat.size > _MAX_WRITTEN_CONSTANT:
        raise GraphError(f"a constant of {flat.size} distinct values is too large to write in a kernel")
    return _compute(out, lambda o: _tree(flat, _flat_index(out.shape, o), 0, flat.size, dtype), base)


@lowers("Shape", kind=INJECTIVE)
def _shape(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    shape = args[0].shape[node.attr("start", 0) : node.attr("end", None)]
    return [_written(np.array(shape, dtype=np.int64), outs[0], "shape")]


@lowers("Size", kind=INJECTIVE)
def _size(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    return [_written(np.array(math.prod(args[0].shape), dtype=np.int64), outs[0], "size")]


_CONSTANT_ATTRS = {
    "value": lambda v: np.asarray(v),
    "value_float": lambda v: np.array(v, np.float32),
    "value_floats": lambda v: np.array(v, np.float32),
    "value_int": lambda v: np.array(v, np.int64),
    "value_ints": lambda v: np.array(v, np.int64),
}


@lowers("Constant", kind=INJECTIVE)
def _constant(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    for key in node.attrs:
        if key not in _CONSTANT_ATTRS:
            raise GraphError(f"attribute {key} is not supported (supported: {', '.join(_CONSTANT_ATTRS)})")
    (key,) = node.attrs
    return [_written(_CONSTANT_ATTRS[key](node.attrs[key]), outs[0], "constant")]


@lowers("ConstantOfShape", kind=INJECTIVE)
def _constant_of_shape(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    value = np.asarray(node.attr("value", np.zeros(1, np.float32))).reshape(-1)
    return [_compute(outs[0], lambda o: _imm(value[0], outs[0].dtype), "constant_of_shape")]


@lowers("Range", kind=INJECTIVE)
def _range(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """The values onnxruntime makes: ``start``, then ``delta`` added again and again in the output type."""
    start, delta = (_const(args[k], what).reshape(()) for k, what in ((0, "start"), (2, "delta")))
    _const(args[1], "limit")
    dtype = np.dtype(outs[0].dtype)
    values = np.empty(outs[0].size, dtype)
    acc = start.astype(dtype)
    for k in range(values.size):
        values[k] = acc
        acc = (acc + delta).astype(dtype)
    return [_written(values, outs[0], "range")]


# ---------------------------------------------------------------------------------------------
# reductions


def _reduce_stage(
    shape: Sequence[int],
    axes: Sequence[int],
    keepdims: bool,
    source: Callable[[list[PrimExpr]], PrimExpr],
    reducer: Callable[..., PrimExpr],
    base: str,
) -> te.Tensor:
    """``reducer`` of ``source(index)`` over ``axes`` of ``shape``; the reduced dimensions kept as
    1 or dropped (all dropped: one element)."""
    axes = sorted(set(axes))
    kept = [d for d in range(len(shape)) if d not in axes]
    out_shape = [1 if d in axes else n for d, n in enumerate(shape)] if keepdims else [shape[d] for d in kept]
    rvars = {d: te.reduce_axis((0, shape[d]), name=f"k{d}") for d in axes}

    def body(*o: PrimExpr) -> PrimExpr:
        outer = {d: o[d] for d in kept} if keepdims else dict(zip(kept, o))
        index = [rvars[d] if d in rvars else outer[d] for d in range(len(shape))]
        return reducer(source(index), axis=[rvars[d] for d in axes])

    return te.compute(out_shape or (1,), body, name=stage_name(base))


def _reduced_at(t: te.Tensor, rank: int, axes: Sequence[int], index: Sequence[PrimExpr]) -> PrimExpr:
    """The element of a ``_reduce_stage`` (dims dropped) that input element ``index`` belongs to."""
    kept = [index[d] for d in range(rank) if d not in axes]
    return t[tuple(kept)] if kept else t[0]


def _softmax_parts(node: Node, x: Operand) -> tuple[list[int], te.Tensor, Callable[[Sequence[PrimExpr]], PrimExpr]]:
    """Softmax's axes (one from opset 13; before, ``axis`` and all after it), its sum-of-exp
    stage and ``x - max`` (over a max stage) at an index."""
    rank = len(x.shape)
    axis = _axis(node.attr("axis", -1 if node.opset >= 13 else 1), rank)
    axes = [axis] if node.opset >= 13 else list(range(axis, rank))
    base = node.op.lower()
    peak = _reduce_stage(x.shape, axes, False, lambda i: _read(x, i), te.max, f"{base}_max")

    def shifted(i: Sequence[PrimExpr]) -> PrimExpr:
        return _read(x, i) - _reduced_at(peak, rank, axes, i)

    total = _reduce_stage(x.shape, axes, False, lambda i: te.exp(shifted(i)), te.sum, f"{base}_sum")
    return axes, total, shifted


@lowers("Softmax", kind=REDUCTION)
def _softmax(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x = args[0]
    axes, total, shifted = _softmax_parts(node, x)
    rank = len(x.shape)
    return [_compute(outs[0], lambda i: te.exp(shifted(i)) / _reduced_at(total, rank, axes, i), "softmax")]


@lowers("LogSoftmax", kind=REDUCTION)
def _log_softmax(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x = args[0]
    axes, total, shifted = _softmax_parts(node, x)
    rank = len(x.shape)
    return [_compute(outs[0], lambda i: shifted(i) - te.log(_reduced_at(total, rank, axes, i)), "logsoftmax")]


@lowers("LayerNormalization", kind=REDUCTION)
def _layer_norm(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` over ``axis`` and the dimensions after
    it; the optional Mean and InvStdDev outputs too. Computed in float32 for 16-bit inputs."""
    x, scale, bias = args[0], _arg(args, 1), _arg(args, 2)
    rank = len(x.shape)
    axis = _axis(node.attr("axis", -1), rank)
    axes = list(range(axis, rank))
    count = math.prod(x.shape[axis:])
    ct = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype  # the computing type
    eps = _imm(node.attr("epsilon", 1e-5), ct)

    def xv(i: Sequence[PrimExpr]) -> PrimExpr:
        return te.cast(_read(x, i), ct)

    if node.attr(ORT_ORDER, 0) and x.dtype == "float32" and axes == [rank - 1] and len(outs) == 1:
        if x.shape[-1] % _MLAS_LANES == 0:
            return [_mlas_layer_norm(x, scale, bias, eps, outs[0])]
    total = _reduce_stage(x.shape, axes, False, xv, te.sum, "layer_norm_sum")

    def centered(i: Sequence[PrimExpr]) -> PrimExpr:
        return xv(i) - _reduced_at(total, rank, axes, i) / _imm(count, ct)

    squares = _reduce_stage(x.shape, axes, False, lambda i: _square(centered(i)), te.sum, "layer_norm_var")

    def std(i: Sequence[PrimExpr]) -> PrimExpr:
        return te.sqrt(_reduced_at(squares, rank, axes, i) / _imm(count, ct) + eps)

    def y(i: Index) -> PrimExpr:
        v = centered(i) / std(i)
        if scale is not None:
            v = v * te.cast(_broadcast(scale, i), ct)
        if bias is not None:
            v = v + te.cast(_broadcast(bias, i), ct)
        return te.cast(v, outs[0].dtype)

    made = [_compute(outs[0], y, "layer_norm")]
    extra = [
        ("layer_norm_mean", lambda i: _reduced_at(total, rank, axes, i) / _imm(count, ct)),
        ("layer_norm_inv_std", lambda i: _imm(1, ct) / std(i)),
    ]
    for v, (base, fn) in zip(outs[1:], extra):
        made.append(None if v is None else _compute(v, lambda i, fn=fn, v=v: te.cast(fn(i), v.dtype), base))
    return made


_MLAS_LANES = 8  # the lanes of MLAS's AVX2 LayerNorm kernel


def _mlas_layer_norm(x: Operand, scale: Operand | None, bias: Operand | None, eps: PrimExpr, out: Value) -> te.Tensor:
    """LayerNormalization over the last axis as onnxruntime's CPU kernel on x86 (MLAS's AVX2
    kernel, rows of a multiple of 8) computes it in float32, bit for bit::

        mean  = float32(sum of the row in float64 / n)
        s[l]  = chain of fused multiply-adds of (x[8 j + l] - mean)^2 over j, for lanes l < 8
        var   = (((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7))) / n
        y     = fma((x - mean) * (1 / sqrt(var + epsilon)), scale, bias)
    """
    lead, n = tuple(x.shape[:-1]), x.shape[-1]
    k = te.reduce_axis((0, n), name="k")
    total = te.compute(
        lead or (1,),
        lambda *r: te.sum(te.cast(_read(x, (*r[: len(lead)], k)), "float64"), axis=k),
        name=stage_name("layer_norm_sum"),
    )
    mean = te.compute(
        lead or (1,), lambda *r: te.cast(total[r] / _imm(n, "float64"), "float32"), name=stage_name("layer_norm_mean")
    )

    def centered(r: Index, h: PrimExpr) -> PrimExpr:
        return _read(x, (*r, h)) - mean[r or (0,)]

    j = te.reduce_axis((0, n // _MLAS_LANES), name="j")

    def lane_squares(*rl: PrimExpr) -> te.Reduce:
        d = centered(rl[:-1], j * _MLAS_LANES + rl[-1])
        return te.fma_sum(d, d, axis=j)

    lanes = te.compute((*lead, _MLAS_LANES), lane_squares, name=stage_name("layer_norm_lanes"))

    def inv(r: Index) -> PrimExpr:
        s = [lanes[(*r, lane)] for lane in range(_MLAS_LANES)]
        var = (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))) / _imm(n, "float32")
        return _imm(1, "float32") / te.sqrt(var + eps)

    inv_std = te.compute(lead or (1,), lambda *r: inv(r[: len(lead)]), name=stage_name("layer_norm_inv_std"))

    def y(i: Index) -> PrimExpr:
        r = i[:-1]
        v = centered(r, i[-1]) * inv_std[r or (0,)]
        g = _broadcast(scale, i) if scale is not None else _imm(1, "float32")
        return call("fma", v, g, _broadcast(bias, i)) if bias is not None else v * g

    return _compute(out, y, "layer_norm")


def _same(x: PrimExpr, *count: int) -> PrimExpr:
    return x


def _square(x: PrimExpr) -> PrimExpr:
    return x * x


# op -> (reducer, what is reduced, what is done to the result given the count, opset of axes as an input)
_REDUCE: dict[str, tuple[Callable[..., PrimExpr], Callable, Callable, int]] = {
    "ReduceSum": (te.sum, _same, _same, 13),
    "ReduceMean": (te.sum, _same, lambda s, n: s / _imm(n, str(s.dtype)), 18),
    "ReduceMax": (te.max, _same, _same, 18),
    "ReduceMin": (te.min, _same, _same, 18),
    "ReduceSumSquare": (te.sum, _square, _same, 18),
    "ReduceL1": (te.sum, lambda x: call("abs", x), _same, 18),
    "ReduceL2": (te.sum, _square, lambda s, n: te.sqrt(s), 18),
    "ReduceLogSum": (te.sum, _same, lambda s, n: te.log(s), 18),
}


@lowers(*_REDUCE, kind=REDUCTION)
def _reduce(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``axes`` (attribute, or input from opset 13 for ReduceSum and 18 for the others; none: all,
    or nothing with ``noop_with_empty_axes``) and ``keepdims``."""
    reducer, source, finish, since = _REDUCE[node.op]
    x = args[0]
    rank = len(x.shape)
    axes = _attr_or_input(node, args, "axes", 1, since)
    if not axes:
        axes = () if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))
    axes = tuple(sorted({_axis(a, rank) for a in axes}))
    base = node.op[len("Reduce") :].lower()
    if not axes:  # reduce over nothing: each element on its own
        return [_compute(outs[0], lambda i: finish(source(_read(x, i)), 1), base)]
    keep = bool(node.attr("keepdims", 1))
    t = _reduce_stage(x.shape, axes, keep, lambda i: source(_read(x, i)), reducer, f"reduce_{base}")
    if finish is _same:
        return [t]
    count = math.prod(x.shape[d] for d in axes)
    return [_compute(outs[0], lambda i: finish(t[tuple(i)] if i else t[0], count), f"reduce_{base}_finish")]
