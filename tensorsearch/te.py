"""A tensor-expression compute DSL that emits TensorIR (paper section 3.1, Figure 5).

Write each stage as a function of its output indices::

    A = te.placeholder((128, 128), "float32", name="A")
    B = te.placeholder((128, 128), "float32", name="B")
    k = te.reduce_axis((0, 128), name="k")
    C = te.compute((128, 128), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_prim_func([A, B, C])

``create_prim_func`` emits one block per stage, nested in one loop per axis (spatial axes,
then reduce axes), with iterator kinds from the stage's definition and read/write regions
inferred from the body::

    for i, j, k in T.grid(128, 128, 128):
        with T.block("C"):
            v_i, v_j, v_k = T.axis.remap("SSR", [i, j, k])
            T.reads(A[v_i, v_k], B[v_k, v_j])
            T.writes(C[v_i, v_j])
            with T.init():
                C[v_i, v_j] = T.float32(0)
            C[v_i, v_j] = C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]

Intermediate stages become buffers allocated in the root block.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import arith
from .ir import (
    TRUE,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    DataType,
    For,
    ForKind,
    IterType,
    IterVar,
    Max,
    Min,
    Mul,
    Or,
    PrimExpr,
    PrimFunc,
    Range,
    Select,
    Var,
    Visitor,
    call,
    const,
    convert,
    logical_and,
    make_prim_func,
    parse_dtype,
    seq,
    substitute,
)
from .ir import equal as equal
from .ir import not_equal as not_equal

__all__ = [
    "Reduce",
    "TEError",
    "Tensor",
    "all",
    "any",
    "cast",
    "compute",
    "const",
    "create_prim_func",
    "equal",
    "exp",
    "floordiv",
    "floormod",
    "fma_sum",
    "if_then_else",
    "log",
    "max",
    "max_value",
    "min",
    "min_value",
    "not_equal",
    "placeholder",
    "reduce_axis",
    "sigmoid",
    "sqrt",
    "sum",
    "tanh",
]


class TEError(ValueError):
    """A wrong use of the compute DSL; the message names the stage or tensor at fault."""


# ---------------------------------------------------------------------------------------
# tensors and operations


_capture_stack: list[list[Tensor]] = []


class Tensor:
    """The output of a placeholder or compute stage; ``T[i, j]`` reads it."""

    def __init__(self, buffer: Buffer, op: ComputeOp | None) -> None:
        self.buffer = buffer
        self.op = op  # None for a placeholder

    @property
    def name(self) -> str:
        return self.buffer.name

    @property
    def shape(self) -> tuple[int | PrimExpr, ...]:
        return tuple(s.value if hasattr(s, "value") else s for s in self.buffer.shape)

    @property
    def dtype(self) -> str:
        return str(self.buffer.dtype)

    @property
    def ndim(self) -> int:
        return len(self.buffer.shape)

    def __getitem__(self, indices: Any) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"tensor {self.name} has {self.ndim} dimensions but is indexed with {len(indices)} indices")
        loaded = []
        for pos, index in enumerate(indices):
            index = convert(index)
            if not index.dtype.is_integer:
                raise TEError(f"index {pos} of tensor {self.name} must be an integer, got {index.dtype} ({index})")
            loaded.append(index)
        if _capture_stack:
            _capture_stack[-1].append(self)
        return BufferLoad(self.buffer, tuple(loaded))

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else "compute"
        return f"Tensor({self.name!r}, {kind}, shape={list(self.shape)}, dtype={self.dtype})"


@dataclass(frozen=True, eq=False, slots=True)
class ReduceAxis(Var):
    """A reduction iterator: a variable with a domain; index with it inside te.sum/max/min."""

    dom: Range | None = None

    @property
    def var(self) -> Var:
        return self


def _expr(value: Any, dtype: str | DataType | None = None) -> PrimExpr:
    return convert(value, dtype)


def reduce_axis(dom: Any, name: str = "k") -> ReduceAxis:
    """A reduction axis over ``range(dom)`` or ``range(lo, hi)`` when ``dom`` is a pair."""
    if isinstance(dom, tuple | list):
        if len(dom) != 2:
            raise TEError(f"reduce_axis {name!r}: the domain must be an extent or a (begin, end) pair, got {dom!r}")
        lo, hi = dom
    else:
        lo, hi = 0, dom
    if isinstance(lo, int) and isinstance(hi, int) and hi <= lo:
        raise TEError(f"reduce_axis {name!r}: the domain [{lo}, {hi}) is empty")
    begin = convert(lo)
    extent = arith.simplify(convert(hi) - begin)
    return ReduceAxis(name, parse_dtype("int32"), Range(begin, extent))


@dataclass(frozen=True, eq=False)
class Reduce(PrimExpr):
    """A commutative reduction ``combiner`` of ``source`` over ``axis``, starting from ``init``.

    Only valid as the whole body of a ``te.compute``.
    """

    combiner: str  # "sum", "max", "min" or "fma" (a sum of products, in order: :func:`fma_sum`)
    source: PrimExpr
    axis: tuple[ReduceAxis, ...]
    init: PrimExpr

    @property
    def dtype(self) -> DataType:
        return self.source.dtype

    def combine(self, acc: PrimExpr, value: PrimExpr) -> PrimExpr:
        if self.combiner == "fma" and isinstance(value, Mul):
            return call("fma", value.a, value.b, acc)
        if self.combiner in ("sum", "fma"):
            return acc + value
        if self.combiner == "max":
            return Max(acc, value)
        return Min(acc, value)


def _reducer(combiner: str, default_init: Callable[[DataType], PrimExpr]) -> Callable[..., Reduce]:
    def reduce(expr: Any, axis: ReduceAxis | Sequence[ReduceAxis], init: Any = None) -> Reduce:
        source = _expr(expr)
        axes = tuple(axis) if isinstance(axis, list | tuple) else (axis,)
        if not axes:
            raise TEError(f"te.{combiner} needs at least one reduce axis")
        for a in axes:
            if not isinstance(a, ReduceAxis):
                raise TEError(f"te.{combiner}: axis must be made by te.reduce_axis, got {a!r}")
        init_value = default_init(source.dtype) if init is None else _expr(init, source.dtype)
        if init_value.dtype != source.dtype:
            raise TEError(f"te.{combiner}: init has type {init_value.dtype} but the reduced value has {source.dtype}")
        return Reduce(combiner, source, axes, init_value)

    reduce.__name__ = combiner
    reduce.__doc__ = f"The {combiner} of ``expr`` over the reduce axes ``axis``."
    return reduce


def min_value(dtype: str | DataType) -> PrimExpr:
    """The smallest value of a type (the identity of max)."""
    dtype = parse_dtype(dtype)
    return const(dtype.min_value(), dtype)


def max_value(dtype: str | DataType) -> PrimExpr:
    """The largest value of a type (the identity of min)."""
    dtype = parse_dtype(dtype)
    return const(dtype.max_value(), dtype)


sum = _reducer("sum", lambda dt: const(0, dt))
max = _reducer("max", min_value)
min = _reducer("min", max_value)


def fma_sum(left: Any, right: Any, axis: ReduceAxis | Sequence[ReduceAxis]) -> Reduce:
    """The sum of ``left * right`` over ``axis`` in a fixed order, a float dot product as a BLAS
    kernel computes it: each step is one fused multiply-add, ``acc = fma(left, right, acc)``
    (one rounding), from 0. The update is a call, not an ``+``, so the code generator does not
    let LLVM reassociate it: a schedule that keeps the reduction loops serial and in order
    (splits, tiles, a vectorized spatial loop) keeps the result bit for bit.

        C[v_i, v_j] = T.fma(A[v_i, v_k], B[v_k, v_j], C[v_i, v_j])
    """
    r = sum(_expr(left) * _expr(right), axis)
    if not isinstance(r.source, Mul) or not r.dtype.is_float:
        raise TEError(f"te.fma_sum needs two float operands, got {r.source!r}")
    return Reduce("fma", r.source, r.axis, r.init)


def if_then_else(cond: Any, true_value: Any, false_value: Any) -> PrimExpr:
    """``true_value`` where ``cond`` holds, else ``false_value`` (used for padding)."""
    cond = _expr(cond)
    if isinstance(true_value, PrimExpr):
        t = _expr(true_value)
        f = _expr(false_value, t.dtype)
    else:
        f = _expr(false_value)
        t = _expr(true_value, f.dtype)
    if t.dtype != f.dtype:
        raise TEError(f"if_then_else: the two values have different types {t.dtype} and {f.dtype}")
    return Select(cond, t, f)


def all(*conds: Any) -> PrimExpr:
    """The conjunction of conditions."""
    return logical_and(*(_expr(c) for c in conds))


def any(*conds: Any) -> PrimExpr:
    """The disjunction of conditions."""
    result: PrimExpr | None = None
    for c in conds:
        c = _expr(c)
        result = c if result is None else Or(result, c)
    if result is None:
        raise TEError("te.any needs at least one condition")
    return result


def cast(value: Any, dtype: str | DataType) -> PrimExpr:
    value = _expr(value)
    dtype = parse_dtype(dtype)
    return value if value.dtype == dtype else Cast(dtype, value)


def floordiv(a: Any, b: Any) -> PrimExpr:
    return _expr(a) // _expr(b)


def floormod(a: Any, b: Any) -> PrimExpr:
    return _expr(a) % _expr(b)


def _math(name: str) -> Callable[[Any], PrimExpr]:
    def fn(x: Any) -> PrimExpr:
        x = _expr(x)
        if not x.dtype.is_float:
            raise TEError(f"te.{name} needs a floating-point argument, got {x.dtype} ({x})")
        return call(name, x)

    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}."
    return fn


exp = _math("exp")
log = _math("log")
sqrt = _math("sqrt")
tanh = _math("tanh")
sigmoid = _math("sigmoid")


def placeholder(shape: Any, dtype: str | DataType = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor."""
    return Tensor(Buffer(name, _shape(shape, f"placeholder {name!r}"), parse_dtype(dtype)), None)


def _shape(shape: Any, where: str) -> tuple[PrimExpr, ...]:
    if isinstance(shape, int | PrimExpr):
        shape = (shape,)
    out = []
    for s in shape:
        if isinstance(s, int) and s <= 0:
            raise TEError(f"{where}: every extent of the shape must be positive, got {tuple(shape)}")
        e = convert(s)
        if not e.dtype.is_integer:
            raise TEError(f"{where}: shape extents must be integers, got {e.dtype}")
        out.append(e)
    return tuple(out)


@dataclass(eq=False)
class ComputeOp:
    """A compute stage: output axes, the body, and the tensors it reads."""

    name: str
    axis: tuple[Var, ...]
    body: PrimExpr  # a Reduce or a plain expression of ``axis``
    inputs: tuple[Tensor, ...]
    attrs: tuple[tuple[str, Any], ...] = ()


class _FindReduce(Visitor):
    def __init__(self) -> None:
        self.found: list[Reduce] = []

    def visit_Reduce(self, op: Reduce) -> None:
        self.found.append(op)


def compute(
    shape: Any, fcompute: Callable[..., Any], name: str = "compute", attrs: dict[str, Any] | None = None
) -> Tensor:
    """A stage whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``."""
    where = f"te.compute {name!r}"
    dims = _shape(shape, where)
    try:
        params = inspect.signature(fcompute).parameters.values()
        arg_names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        variadic = [p for p in params if p.kind == p.VAR_POSITIONAL]
    except (TypeError, ValueError):
        arg_names, variadic = [], [True]
    if variadic:
        arg_names = [f"i{d}" for d in range(len(dims))]
    if len(arg_names) != len(dims):
        raise TEError(
            f"{where}: the function takes {len(arg_names)} arguments but the shape has {len(dims)} dimensions"
        )
    axis = tuple(Var(n, "int32") for n in arg_names)
    _capture_stack.append([])
    try:
        body = _expr(fcompute(*axis))
    except (TypeError, ValueError, IndexError) as err:
        if isinstance(err, TEError):
            raise
        raise TEError(f"{where}: {err}") from err
    finally:
        captured = _capture_stack.pop()
    finder = _FindReduce()
    if isinstance(body, Reduce):
        finder.visit(body.source)
    else:
        finder.visit(body)
    if finder.found:
        raise TEError(f"{where}: a reduction (te.{finder.found[0].combiner}) must be the whole expression of the stage")
    allowed = set(axis) | (set(body.axis) if isinstance(body, Reduce) else set())
    for v in _vars_of(body):
        if v not in allowed:
            what = "a reduce axis not reduced over here" if isinstance(v, ReduceAxis) else "not an axis of this stage"
            raise TEError(f"{where}: the expression uses variable {v.name}, which is {what}")
    inputs: list[Tensor] = []
    for t in captured:
        if t not in inputs:
            inputs.append(t)
    out = Buffer(name, dims, body.dtype)
    return Tensor(out, ComputeOp(name, axis, body, tuple(inputs), tuple(sorted((attrs or {}).items()))))


def _vars_of(expr: PrimExpr) -> list[Var]:
    found: list[Var] = []

    class _V(Visitor):
        def visit_Var(self, v: Var) -> None:
            found.append(v)

        def visit_Reduce(self, r: Reduce) -> None:
            self.visit(r.source)
            self.visit(r.init)

    _V().visit(expr)
    return found


# ---------------------------------------------------------------------------------------
# lowering to a PrimFunc


def _stages(outputs: Sequence[Tensor]) -> list[Tensor]:
    """All compute stages reachable from ``outputs``, producers before consumers."""
    order: list[Tensor] = []
    state: dict[int, str] = {}

    def visit(t: Tensor) -> None:
        mark = state.get(id(t))
        if mark == "done" or t.op is None:
            return
        state[id(t)] = "busy"
        for inp in t.op.inputs:
            visit(inp)
        state[id(t)] = "done"
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _block_for(stage: Tensor) -> BlockRealize | For:
    op = stage.op
    assert op is not None
    body = op.body
    reduce = body if isinstance(body, Reduce) else None
    spatial = [(v, Range(const(0), ext)) for v, ext in zip(op.axis, stage.buffer.shape, strict=True)]
    reduces = [(a, a.dom) for a in reduce.axis] if reduce is not None else []
    loop_vars = [Var(v.name, v.dtype) for v, _ in spatial + reduces]
    iter_vars = [
        IterVar(Var("v_" + v.name, v.dtype), dom, IterType.SPATIAL if n < len(spatial) else IterType.REDUCE)
        for n, (v, dom) in enumerate(spatial + reduces)
    ]
    to_block = {v: iv.var for (v, _), iv in zip(spatial + reduces, iter_vars, strict=True)}
    out_index = tuple(iv.var for iv in iter_vars[: len(spatial)])
    out = stage.buffer
    if reduce is not None:
        source = substitute(reduce.source, to_block)
        update = BufferStore(out, reduce.combine(BufferLoad(out, out_index), source), out_index)
        init = BufferStore(out, reduce.init, out_index)
        reads, writes = arith.detect_access_regions(BufferStore(out, source, out_index), {})
    else:
        value = substitute(body, to_block)
        update = BufferStore(out, value, out_index)
        init = None
        reads, writes = arith.detect_access_regions(update, {})
    reads = [r for r in reads if r.buffer is not out]
    block = Block(op.name, tuple(iter_vars), tuple(reads), tuple(writes), update, init, annotations=op.attrs)
    stmt: BlockRealize | For = BlockRealize(tuple(loop_vars), TRUE, block)
    for lv, (_, dom) in reversed(list(zip(loop_vars, spatial + reduces, strict=True))):
        stmt = For(lv, dom.min, dom.extent, ForKind.SERIAL, stmt)
    return stmt


def create_prim_func(tensors: Sequence[Tensor], name: str = "main") -> PrimFunc:
    """Lower the stages that compute ``tensors`` into a PrimFunc whose parameters are ``tensors``.

    Every placeholder a stage reads must be among ``tensors``; stages not listed become
    intermediate buffers allocated in the root block.
    """
    tensors = list(tensors)
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TEError(f"create_prim_func takes te tensors, got {type(t).__name__} {t!r}")
    params = {id(t) for t in tensors}
    if len(params) != len(tensors):
        raise TEError("create_prim_func: a tensor is listed twice among the arguments")
    stages = _stages(tensors)
    if not stages:
        raise TEError("create_prim_func: no compute stage produces any of the given tensors")
    for stage in stages:
        assert stage.op is not None
        for inp in stage.op.inputs:
            if inp.op is None and id(inp) not in params:
                raise TEError(
                    f"create_prim_func: placeholder {inp.name} is read by stage {stage.name} but is not among the arguments"
                )
    names = [s.name for s in stages]
    for n in names:
        if names.count(n) > 1:
            raise TEError(f"create_prim_func: two stages are named {n!r}; block names must be unique")
    intermediates = tuple(s.buffer for s in stages if id(s) not in params)
    body = seq(*(_block_for(s) for s in stages))
    root = Block("root", (), (), (), body, alloc_buffers=intermediates)
    return make_prim_func([t.buffer for t in tensors], BlockRealize((), TRUE, root), name=name)
