"""Per-store features of a scheduled PrimFunc: what the cost model sees of a candidate.

In the spirit of TVM MetaSchedule's ``PerStoreFeature`` (164 features per ``BufferStore``):
:func:`extract_features` lowers the program partially and returns one row per ``BufferStore``
(program order), ``len(FEATURE_NAMES)`` float32 columns, every count scaled by
``slog(x) = log2(1 + |x|)`` as TVM does::

    from tensorsearch.search.cost_model.features import FEATURE_NAMES, extract_features, candidate_vector
    rows = extract_features(sch.func)          # (n_stores, 169) float32
    vec = candidate_vector(rows)               # (CANDIDATE_LENGTH,) for the gradient-boosted model
    rows[:, FEATURE_NAMES.index("vec_prod")]   # log2(1 + product of the vectorized extents)

The groups of columns (names in :data:`FEATURE_NAMES`):

1. **arithmetic** (17): operations of the stored value by kind -- float/int multiply-add (``a + b * c``
   counts once as a ``mad``), add/sub, mul, div/mod, compare (min/max too), math calls, other calls;
   bool ops, selects, casts -- each counted per vector lane and multiplied by the product of the
   enclosing loop extents. Index arithmetic is *not* counted (TVM counts it): before
   simplification it measures how the loops were split, not work the machine does.
   A tensorized tile (an ``llvm.*`` call returning a vector, see below) counts as
   ``macs`` multiply-adds per call.
2. **loop kinds** (3 x 11): for vectorized, unrolled and parallel loops around the store: their
   number, the product of their extents, the extent of the innermost one, and its position as a
   one-hot of 8 (none; innermost/middle/outermost among the *spatial* loops -- loops whose
   variable indexes the stored element -- or among the *reduce* loops; mixed when the kind
   covers both).
3. **buffer accesses** (5 x 18): for each buffer the statement touches (at most 5, sorted by
   cache lines then bytes, zero-padded): access kind (read/write/read-write one-hot), bytes
   touched, unique bytes, cache lines (64 B), unique cache lines, reuse type (one-hot:
   loop-invariant multiple read, serial multiple read/write, none), reuse distance in iterations
   and in bytes, reuse count, bytes/lines per reuse, and the stride (elements) of the innermost
   loop that moves the index.
4. **arithmetic intensity curve** (10): ops per unique byte touched, sampled at 10 evenly spaced
   compute levels from the innermost loop to the whole nest (TVM's curve).
5. **allocation** (4): when the stored buffer is allocated in the program: its size in bytes
   *as compacted* (the region used under the innermost loop holding every access, TVM's
   CompactBufferAllocation), size times the loops outside it, the product of those outer loops,
   and of the loops between the allocation and the store. Group 3 sees such a buffer compacted
   too: the loops outside its allocation move the allocation, not the index into it (a
   ``cache_write("local")`` accumulator touches its tile's bytes, not the whole output's).
6. **loop nest** (4): product of all loop extents, number of loops, ``pragma_auto_unroll_max_step``
   of the innermost loop carrying one, product of the reduce loops; and **the innermost loops**
   (5, not in TVM: what LLVM's vectorizers see): extent of the innermost loop, the fraction of
   accesses that are contiguous or invariant in it, the largest stride in it; the extent of the
   innermost loop that every access walks contiguously or not at all, and the product of the
   loops inside it (LLVM unrolls those and vectorizes that loop). On random schedules of a GEMM
   these are the strongest single predictors of speed (Spearman 0.57 for the fraction).
7. **tensor intrinsic and store** (6): whether a tensor intrinsic computes the store, how many
   calls run, multiply-adds per call and the vector width it stores; whether the stored value is
   a constant (an init), and whether the store sits under an ``if``.

**Partial lowering.** Only ``lower_init``, ``lower_intrin`` and ``lower_blocks(compact=False)``
run: blocks become loops with their iterators substituted, tensorized tiles become vector accesses
of their source buffers, while buffers keep their dimensions (as in TVM's feature passes).
Skipped, for speed: ``compact_buffers`` (about 25 of the 37 ms that lowering a 1024^3 GEMM
schedule takes -- allocation sizes are computed here instead, see group 5), ``flatten_buffers`` and
``simplify`` (index ranges are evaluated here from affine forms, without the simplifier),
``unroll_loops`` and ``vectorize_loops`` (loop kinds are read from the ``For`` nodes), and
``check_cpu_target`` (a GPU thread-binding loop counts as a parallel loop). A program that
cannot be lowered raises the lowering error.

**Speed.** About 5 ms per candidate (about 200 candidates/s, ``extract_features`` plus
:func:`candidate_vector`, one core) for the hand schedule of a 1024^3 GEMM in
experiments/bench_manual_gemm.py (25 primitives, 5 stores): the walk works on affine forms of the
indices, memoized per expression, and evaluates interval bounds only for indices that are not
affine (fused or reshaped loops).

**Tensorized tiles.** ``tensorize`` replaces a tile by a store of an ``llvm.*`` call on vector
accesses (``Z[i, Ramp(j*16, 1, 16)] = llvm.x86.avx512.vpdpbusd.512(...)``). Such a call counts as
``macs = max(lanes of the result, lanes of any argument)`` multiply-adds (VNNI: 64 = 16 int32
lanes x 4 bytes; NEON sdot: 16); the store's vector lanes are its vector width.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...codegen.parallel import SERIAL_WORK, loop_work
from ...ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    MATH_FUNCTIONS,
    NE,
    Add,
    Allocate,
    And,
    Block,
    BlockRealize,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    PrimFunc,
    Ramp,
    Select,
    SeqStmt,
    Stmt,
    StringImm,
    Sub,
    Var,
)
from ...lower import lower_init, lower_intrin
from ...lower.blocks import lower_blocks

__all__ = [
    "CACHE_LINE_BYTES",
    "CANDIDATE_LENGTH",
    "FEATURE_NAMES",
    "slog",
    "candidate_vector",
    "extract_features",
    "partial_lower",
]

CACHE_LINE_BYTES = 64
BUFFERS_PER_STORE = 5
CURVE_POINTS = 10
AUTO_UNROLL_KEY = "pragma_auto_unroll_max_step"

_ARITH = (
    "float_mad", "float_add_sub", "float_mul", "float_div_mod", "float_cmp", "float_math_func", "float_other_func",
    "int_mad", "int_add_sub", "int_mul", "int_div_mod", "int_cmp", "int_math_func", "int_other_func",
    "bool_op", "select_op", "cast_op",
)  # fmt: skip
_POSITIONS = (
    "none", "inner_spatial", "middle_spatial", "outer_spatial", "inner_reduce", "middle_reduce", "outer_reduce", "mixed"
)  # fmt: skip
_KINDS = ("vec", "unroll", "parallel")
_BUFFER_FEATURES = (
    "acc_read", "acc_write", "acc_rw", "bytes", "unique_bytes", "lines", "unique_lines",
    "reuse_loop_read", "reuse_serial_rw", "reuse_none", "reuse_dis_iter", "reuse_dis_bytes", "reuse_ct",
    "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct", "lines_d_reuse_ct", "unique_lines_d_reuse_ct", "stride",
)  # fmt: skip
_TAIL = (
    "alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod",
    "outer_prod", "num_loops", "auto_unroll_max_step", "reduce_prod",
    "inner_len", "inner_unit_stride", "inner_max_stride", "unit_loop_len", "unit_loop_inner_prod",
    "is_tensorized", "intrin_calls", "intrin_macs", "intrin_vector_width", "is_const_store", "is_guarded",
)  # fmt: skip

FEATURE_NAMES: tuple[str, ...] = (
    *_ARITH,
    *(f"{k}_{f}" for k in _KINDS for f in ("num", "prod", "len", *(f"pos_{p}" for p in _POSITIONS))),
    *(f"B{b}.{f}" for b in range(BUFFERS_PER_STORE) for f in _BUFFER_FEATURES),
    *(f"arith_intensity_{i}" for i in range(CURVE_POINTS)),
    *_TAIL,
)
"""Column names of :func:`extract_features`, in order (169)."""

_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}
_N = len(FEATURE_NAMES)

# indices into the arithmetic counters
(
    _F_MAD, _F_ADD, _F_MUL, _F_DIV, _F_CMP, _F_MATH, _F_OTHER,
    _I_MAD, _I_ADD, _I_MUL, _I_DIV, _I_CMP, _I_MATH, _I_OTHER,
    _BOOL, _SELECT, _CAST,
) = range(len(_ARITH))  # fmt: skip
_COMPUTE = ((_F_MAD, 2), (_F_ADD, 1), (_F_MUL, 1), (_F_DIV, 1), (_F_MATH, 1),
            (_I_MAD, 2), (_I_ADD, 1), (_I_MUL, 1), (_I_DIV, 1), (_I_MATH, 1))  # fmt: skip


def slog(x: float) -> float:
    """``log2(1 + |x|)``, the scaling of every count (TVM's ``slog``)."""
    return math.log2(abs(x) + 1.0)


def partial_lower(func: PrimFunc) -> PrimFunc:
    """The cheap lowering passes features are read from (see the module docstring)."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"extract_features takes a PrimFunc, got {type(func).__name__}")
    return lower_blocks(lower_intrin(lower_init(func)), compact=False)


# ---------------------------------------------------------------------------------------
# arithmetic counts of one stored value


class _Intrin:
    """What the tensor intrinsic calls in a value do (zero when there is none)."""

    __slots__ = ("calls", "macs", "width")

    def __init__(self) -> None:
        self.calls = 0
        self.macs = 0
        self.width = 0


def _count(e: PrimExpr, c: list[float], intr: _Intrin) -> None:
    """Add the operations of ``e`` (not of load indices) to the counters ``c``."""
    t = type(e)
    if t is BufferLoad or t is Var or t is IntImm or t is FloatImm or t is StringImm or t is Ramp:
        return
    if t is Add or t is Sub:
        dt = e.a.dtype
        fl = dt.is_float
        a, b = e.a, e.b
        if type(b) is Mul or (t is Add and type(a) is Mul):
            if type(b) is not Mul:
                a, b = b, a
            c[_F_MAD if fl else _I_MAD] += dt.lanes
            _count(a, c, intr)
            _count(b.a, c, intr)
            _count(b.b, c, intr)
            return
        c[_F_ADD if fl else _I_ADD] += dt.lanes
        _count(a, c, intr)
        _count(b, c, intr)
        return
    if t is Mul or t is Div or t is Mod or t is FloorDiv or t is FloorMod or t is Min or t is Max:
        dt = e.a.dtype
        fl = dt.is_float
        if t is Mul:
            slot = _F_MUL if fl else _I_MUL
        elif t is Min or t is Max:
            slot = _F_CMP if fl else _I_CMP
        else:
            slot = _F_DIV if fl else _I_DIV
        c[slot] += dt.lanes
        _count(e.a, c, intr)
        _count(e.b, c, intr)
        return
    if t is EQ or t is NE or t is LT or t is LE or t is GT or t is GE:
        dt = e.a.dtype
        c[_F_CMP if dt.is_float else _I_CMP] += dt.lanes
        _count(e.a, c, intr)
        _count(e.b, c, intr)
        return
    if t is And or t is Or:
        c[_BOOL] += e.a.dtype.lanes
        _count(e.a, c, intr)
        _count(e.b, c, intr)
        return
    if t is Not:
        c[_BOOL] += e.a.dtype.lanes
        _count(e.a, c, intr)
        return
    if t is Select:
        c[_SELECT] += e.dtype.lanes
        _count(e.condition, c, intr)
        _count(e.true_value, c, intr)
        _count(e.false_value, c, intr)
        return
    if t is Cast:
        c[_CAST] += e.dtype.lanes
        _count(e.value, c, intr)
        return
    if t is Broadcast:
        _count(e.value, c, intr)
        return
    if t is Call:
        op = e.op
        dt = e.dtype
        if op == "reinterpret" or op == "likely":
            pass
        elif op == "if_then_else":
            c[_SELECT] += dt.lanes
        elif op.startswith("llvm.") and dt.lanes > 1:
            macs = max([dt.lanes] + [a.dtype.lanes for a in e.args])
            c[_F_MAD if dt.is_float else _I_MAD] += macs
            intr.calls += 1
            intr.macs = max(intr.macs, macs)
            intr.width = max(intr.width, dt.lanes)
        elif op == "fma":  # te.fma_sum's multiply-add
            c[_F_MAD] += dt.lanes
        elif op in MATH_FUNCTIONS:
            c[_F_MATH if dt.is_float else _I_MATH] += dt.lanes
        else:
            c[_F_OTHER if dt.is_float else _I_OTHER] += dt.lanes
        for a in e.args:
            _count(a, c, intr)
        return
    # any other expression: count nothing, look inside
    for name in getattr(e, "__dataclass_fields__", ()):
        v = getattr(e, name)
        if isinstance(v, PrimExpr):
            _count(v, c, intr)


def _loads(e: PrimExpr, out: list[BufferLoad]) -> None:
    """Every BufferLoad in ``e`` (indices included: indirect accesses), in evaluation order."""
    t = type(e)
    if t is BufferLoad:
        out.append(e)
        for i in e.indices:
            _loads(i, out)
        return
    if t is Var or t is IntImm or t is FloatImm or t is StringImm:
        return
    if t is Call:
        for a in e.args:
            _loads(a, out)
        return
    for name in e.__dataclass_fields__:
        v = getattr(e, name)
        if isinstance(v, PrimExpr):
            _loads(v, out)


# ---------------------------------------------------------------------------------------
# index analysis: affine forms and interval bounds


class _Form:
    """An affine index ``const + sum(coef * var)`` plus a vector lane term ``lane * stride``."""

    __slots__ = ("coefs", "const", "lane_span", "lane_stride")

    def __init__(self, coefs: dict[Var, int], const: int, lane_span: int = 0, lane_stride: int = 0) -> None:
        self.coefs = coefs
        self.const = const
        self.lane_span = lane_span  # stride * (lanes - 1)
        self.lane_stride = lane_stride


def _int_const(e: PrimExpr) -> int | None:
    t = type(e)
    if t is IntImm:
        return e.value
    if t is Broadcast and type(e.value) is IntImm:
        return e.value.value
    return None


def _affine(e: PrimExpr, memo: dict[int, Any]) -> _Form | None:
    key = id(e)
    if key in memo:
        return memo[key]
    t = type(e)
    out: _Form | None = None
    if t is IntImm:
        out = _Form({}, e.value)
    elif t is Var:
        out = _Form({e: 1}, 0)
    elif t is Add or t is Sub:
        a = _affine(e.a, memo)
        b = _affine(e.b, memo) if a is not None else None
        if a is not None and b is not None:
            s = 1 if t is Add else -1
            coefs = dict(a.coefs)
            for v, k in b.coefs.items():
                coefs[v] = coefs.get(v, 0) + s * k
            out = _Form(coefs, a.const + s * b.const, a.lane_span + s * b.lane_span, a.lane_stride + s * b.lane_stride)
    elif t is Mul:
        k = _int_const(e.b)
        x = e.a
        if k is None:
            k = _int_const(e.a)
            x = e.b
        if k is not None:
            f = _affine(x, memo)
            if f is not None:
                out = _Form({v: k * c for v, c in f.coefs.items()}, k * f.const, k * f.lane_span, k * f.lane_stride)
    elif t is Ramp:
        base = _affine(e.base, memo)
        stride = _int_const(e.stride)
        if base is not None and stride is not None and base.lane_span == 0:
            out = _Form(base.coefs, base.const, stride * (e.lanes - 1), stride)
    elif t is Broadcast:
        out = _affine(e.value, memo)
    elif t is Cast and e.dtype.is_integer:
        out = _affine(e.value, memo)
    memo[key] = out
    return out


_BOUNDED_BINARY = frozenset((Add, Sub, Mul, FloorDiv, FloorMod, Div, Mod, Min, Max))


def _bound(e: PrimExpr, env: dict[Var, tuple[int, int]]) -> tuple[int, int] | None:
    """Integer bounds of ``e`` with the variables in ``env`` ranging over [lo, hi]; None when unknown."""
    t = type(e)
    if t is IntImm:
        return e.value, e.value
    if t is Var:
        return env.get(e, (0, 0))
    if t is Broadcast or (t is Cast and e.dtype.is_integer):
        return _bound(e.value, env)
    if t is Ramp:
        b = _bound(e.base, env)
        s = _bound(e.stride, env)
        if b is None or s is None:
            return None
        span = [s[0] * (e.lanes - 1), s[1] * (e.lanes - 1)]
        return b[0] + min(0, *span), b[1] + max(0, *span)
    if t is Select:
        a = _bound(e.true_value, env)
        b = _bound(e.false_value, env)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if t not in _BOUNDED_BINARY:
        return None
    a = _bound(e.a, env)
    b = _bound(e.b, env)
    if a is None or b is None:
        return None
    if t is Add:
        return a[0] + b[0], a[1] + b[1]
    if t is Sub:
        return a[0] - b[1], a[1] - b[0]
    if t is Mul:
        ps = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(ps), max(ps)
    if t is Min:
        return min(a[0], b[0]), min(a[1], b[1])
    if t is Max:
        return max(a[0], b[0]), max(a[1], b[1])
    if b[0] != b[1] or b[0] <= 0:
        return None
    k = b[0]
    if t is FloorDiv or (t is Div and a[0] >= 0):
        return a[0] // k, a[1] // k
    if t is FloorMod or (t is Mod and a[0] >= 0):
        if a[0] // k == a[1] // k:
            return a[0] % k, a[1] % k
        return 0, k - 1
    return None


def _vars_in(e: PrimExpr, memo: dict[int, Any]) -> frozenset[Var]:
    key = id(e)
    got = memo.get(key)
    if got is not None:
        return got
    t = type(e)
    if t is Var:
        out: frozenset[Var] = frozenset((e,))
    elif t is IntImm or t is FloatImm or t is StringImm:
        out = frozenset()
    else:
        parts = []
        for name in e.__dataclass_fields__:
            v = getattr(e, name)
            if isinstance(v, PrimExpr):
                parts.append(_vars_in(v, memo))
            elif isinstance(v, tuple):
                parts.extend(_vars_in(x, memo) for x in v if isinstance(x, PrimExpr))
        out = frozenset().union(*parts)
    memo[key] = out
    return out


# ---------------------------------------------------------------------------------------
# the walk


class _Loop:
    __slots__ = ("annotations", "extent", "kind", "lo", "node", "var")

    def __init__(self, node: For, lo: int, extent: int) -> None:
        self.node = node
        self.var = node.loop_var
        self.lo = lo
        self.extent = extent
        self.kind = _runs_as(node)
        self.annotations = node.annotations


def _runs_as(node: For) -> ForKind:
    """How the loop runs: a GPU thread binding as a parallel loop, and a CPU parallel loop too small
    for a second thread serially, on the caller (``codegen.parallel.SERIAL_WORK``)."""
    if node.kind == ForKind.THREAD_BINDING:
        return ForKind.PARALLEL
    if node.kind == ForKind.PARALLEL and loop_work(node) < SERIAL_WORK:
        return ForKind.SERIAL
    return node.kind


class _Access:
    """One buffer as the store's statement touches it."""

    __slots__ = ("buffer", "bytes", "indices", "kind", "lanes", "numel", "skip")

    def __init__(self, buffer: Buffer, kind: int) -> None:
        self.buffer = buffer
        self.kind = kind  # 0 read, 1 write, 2 read-write
        self.indices: list[tuple[PrimExpr, ...]] = []
        self.lanes = 1
        self.bytes = buffer.dtype.bytes * buffer.dtype.lanes
        self.numel: list[int] = []  # elements touched with loops[i:] varying, i = 0..n
        self.skip = 0  # loops outside the buffer's (compacted) allocation: they do not move it


def _const_dims(buffer: Buffer) -> tuple[list[int], list[int]]:
    """Shape (upper bounds) and element strides of ``buffer`` (explicit, else row-major)."""
    shape = []
    for s in buffer.shape:
        b = _bound(s, {})
        shape.append(max(1, b[1]) if b is not None else 1)
    if buffer.strides:
        strides = []
        for s in buffer.strides:
            b = _bound(s, {})
            strides.append(b[1] if b is not None else 1)
    else:
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
    return shape, strides


def _store_loads(s: BufferStore, memo: dict[int, list[BufferLoad]]) -> list[BufferLoad]:
    got = memo.get(id(s))
    if got is None:
        got = memo[id(s)] = []
        _loads(s.value, got)
    return got


def _allocation_scopes(body: Stmt, loads_memo: dict[int, list[BufferLoad]]) -> dict[Buffer, set[int]]:
    """For each allocated buffer, the loops (ids) around every one of its accesses.

    These are the loops a compacted allocation sits inside (TVM's CompactBufferAllocation puts it
    at the innermost statement holding every access), so they do not move its compacted index.
    """
    allocated: set[Buffer] = set()
    common: dict[Buffer, tuple[For, ...]] = {}
    stack: list[For] = []

    def note(buf: Buffer) -> None:
        if buf not in allocated:
            return
        old = common.get(buf)
        if old is None:
            common[buf] = tuple(stack)
            return
        k = 0
        while k < len(old) and k < len(stack) and old[k] is stack[k]:
            k += 1
        if k < len(old):
            common[buf] = old[:k]

    def visit(s: Stmt) -> None:
        t = type(s)
        if t is SeqStmt:
            for x in s.stmts:
                visit(x)
        elif t is For:
            stack.append(s)
            visit(s.body)
            stack.pop()
        elif t is BufferStore:
            note(s.buffer)
            for ld in _store_loads(s, loads_memo):
                note(ld.buffer)
        elif t is IfThenElse:
            visit(s.then_case)
            if s.else_case is not None:
                visit(s.else_case)
        elif t is Allocate:
            allocated.add(s.buffer)
            visit(s.body)

    visit(body)
    return {buf: {id(f) for f in loops} for buf, loops in common.items()}


class _Extractor:
    def __init__(self, body: Stmt) -> None:
        self.loops: list[_Loop] = []
        self.all_loops: list[_Loop] = []
        self.fixed: dict[Var, tuple[int, int]] = {}  # extent-1 loops: pinned variables
        self.guards = 0
        self.affine_memo: dict[int, Any] = {}
        self.vars_memo: dict[int, Any] = {}
        self.dims_memo: dict[int, tuple[list[int], list[int]]] = {}
        self.loads_memo: dict[int, list[BufferLoad]] = {}
        self.rows: list[list[float]] = []
        self.row_buffers: list[tuple[Buffer, int]] = []  # (stored buffer, product of loops) per row
        # TVM's buffer_touched_under_loop: loop -> buffer -> elements touched by each store below
        self.touched: dict[int, dict[Buffer, list[int]]] = {}
        self.scopes = _allocation_scopes(body, self.loads_memo)
        # allocated buffer -> (product of the loops outside its allocation, per access: per dim (lo, hi))
        self.alloc: dict[Buffer, tuple[int, list[list[tuple[int, int]]]]] = {}
        self.stmt(body)

    # statements ---------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        t = type(s)
        if t is SeqStmt:
            for x in s.stmts:
                self.stmt(x)
        elif t is For:
            self.loop(s)
        elif t is BufferStore:
            self.store(s)
        elif t is IfThenElse:
            self.guards += 1
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.guards -= 1
        elif t is Allocate:
            self.stmt(s.body)
        elif t is Block or t is BlockRealize:  # pragma: no cover - lower_blocks removes them
            raise TypeError(f"feature extraction met a block ({t.__name__}) after lowering")

    def env(self, upto: int) -> dict[Var, tuple[int, int]]:
        """Variable ranges with loops[upto:] varying and the outer ones at their first value."""
        env = dict(self.fixed)
        for k, lp in enumerate(self.loops):
            env[lp.var] = (lp.lo, lp.lo + lp.extent - 1) if k >= upto else (lp.lo, lp.lo)
        return env

    def loop(self, s: For) -> None:
        if type(s.min) is IntImm and type(s.extent) is IntImm:
            lo, extent = s.min.value, s.extent.value
        else:
            env = self.env(0)
            lo_b = _bound(s.min, env)
            ext_b = _bound(s.extent, env)
            lo = lo_b[0] if lo_b is not None else 0
            extent = ext_b[1] if ext_b is not None else 1
        if extent <= 0:
            return
        if extent == 1:
            self.fixed[s.loop_var] = (lo, lo)
            self.stmt(s.body)
            del self.fixed[s.loop_var]
            return
        lp = _Loop(s, lo, extent)
        self.all_loops.append(lp)  # kept alive: ``touched`` is keyed by id
        self.loops.append(lp)
        self.stmt(s.body)
        self.loops.pop()

    # one store ----------------------------------------------------------------------------
    def store(self, s: BufferStore) -> None:
        loops = self.loops
        n = len(loops)
        prod = 1
        for lp in loops:
            prod *= lp.extent
        row = [0.0] * _N

        # arithmetic
        counts = [0.0] * len(_ARITH)
        intr = _Intrin()
        _count(s.value, counts, intr)
        for k in range(len(_ARITH)):
            row[k] = slog(counts[k] * prod)

        # which loops index the stored element (spatial) and which do not (reduce)
        store_vars: set[Var] = set()
        for i in s.indices:
            store_vars |= _vars_in(i, self.vars_memo)
        spatial = [lp.var in store_vars for lp in loops]

        # loop kinds
        col = len(_ARITH)
        for kind in (ForKind.VECTORIZED, ForKind.UNROLLED, ForKind.PARALLEL):
            picked = [k for k, lp in enumerate(loops) if lp.kind == kind]
            if picked:
                p = 1
                for k in picked:
                    p *= loops[k].extent
                row[col] = slog(len(picked))
                row[col + 1] = slog(p)
                row[col + 2] = slog(loops[picked[-1]].extent)
                row[col + 3 + _position(picked, spatial)] = 1.0
            else:
                row[col + 3] = 1.0
            col += 11

        # buffer accesses
        accesses: dict[Buffer, _Access] = {}
        acc = accesses[s.buffer] = _Access(s.buffer, 1)
        acc.indices.append(s.indices)
        acc.lanes = s.value.dtype.lanes // s.buffer.dtype.lanes
        for ld in _store_loads(s, self.loads_memo):
            a = accesses.get(ld.buffer)
            if a is None:
                a = accesses[ld.buffer] = _Access(ld.buffer, 0)
            elif a.kind == 1:
                a.kind = 2
            if a.kind != 2:
                a.indices.append(ld.indices)
            a.lanes = max(a.lanes, ld.dtype.lanes // ld.buffer.dtype.lanes)
        subs = []
        touched_bytes = [0] * (n + 1)
        for a in accesses.values():
            scope = self.scopes.get(a.buffer)
            if scope is not None:
                while a.skip < n and id(loops[a.skip].node) in scope:
                    a.skip += 1
            sub = self._buffer_features(a, loops, prod)
            subs.append(sub)
            for i in range(n + 1):
                touched_bytes[i] += a.numel[i] * a.bytes
        for k, lp in enumerate(loops):
            under = self.touched.setdefault(id(lp), {})
            for a in accesses.values():
                under.setdefault(a.buffer, []).append(a.numel[k])
        for a, sub in zip(accesses.values(), subs, strict=True):
            sub["reuse"] = self._reuse(a, loops, accesses)
        # the innermost loop: LLVM vectorizes it when every access is contiguous or invariant there
        if n:
            row[_COL["inner_len"]] = slog(loops[-1].extent)
        row[_COL["inner_unit_stride"]] = sum(sub["stride"] <= 1 for sub in subs) / len(subs)
        row[_COL["inner_max_stride"]] = slog(max(sub["stride"] for sub in subs))
        # the innermost loop every access walks contiguously (or not at all): what LLVM vectorizes
        # once the loops inside it are fully unrolled
        inner_prod = 1
        for k in range(n - 1, -1, -1):
            var = loops[k].var
            if all(self._var_stride(a, var, self._dims(a.buffer)[1]) <= 1 for a in accesses.values()):
                row[_COL["unit_loop_len"]] = slog(loops[k].extent)
                row[_COL["unit_loop_inner_prod"]] = slog(inner_prod)
                break
            inner_prod *= loops[k].extent
        subs.sort(key=lambda x: (-x["lines"], -x["bytes"], x["name"]))
        col = _COL["B0.acc_read"]
        for sub in subs[:BUFFERS_PER_STORE]:
            row[col : col + len(_BUFFER_FEATURES)] = _export_buffer(sub)
            col += len(_BUFFER_FEATURES)

        # arithmetic intensity curve
        per_iter = sum(counts[k] * w for k, w in _COMPUTE)
        _curve(row, per_iter, loops, touched_bytes)

        # loop nest
        row[_COL["outer_prod"]] = slog(prod)
        row[_COL["num_loops"]] = slog(n)
        unroll = 0
        for lp in loops:
            for key, value in lp.annotations:
                if key == AUTO_UNROLL_KEY and isinstance(value, int):
                    unroll = value
        row[_COL["auto_unroll_max_step"]] = slog(unroll)
        rprod = 1
        for lp, sp in zip(loops, spatial, strict=True):
            if not sp:
                rprod *= lp.extent
        row[_COL["reduce_prod"]] = slog(rprod)

        # tensor intrinsic, store kind
        if intr.calls:
            row[_COL["is_tensorized"]] = 1.0
            row[_COL["intrin_calls"]] = slog(intr.calls * prod)
            row[_COL["intrin_macs"]] = slog(intr.macs)
            row[_COL["intrin_vector_width"]] = slog(intr.width)
        value = s.value.value if type(s.value) is Broadcast else s.value
        row[_COL["is_const_store"]] = float(type(value) is IntImm or type(value) is FloatImm)
        row[_COL["is_guarded"]] = float(self.guards > 0)
        self.rows.append(row)
        self.row_buffers.append((s.buffer, prod))

    def _dims(self, buffer: Buffer) -> tuple[list[int], list[int]]:
        got = self.dims_memo.get(id(buffer))
        if got is None:
            got = self.dims_memo[id(buffer)] = _const_dims(buffer)
        return got

    def _ranges(self, a: _Access, loops: list[_Loop]) -> list[list[list[tuple[int, int]]]]:
        """Per index of ``a``, per level i = 0..n, per dimension: (lo, hi) with loops[max(i, skip):] varying."""
        n = len(loops)
        skip = a.skip
        shape, _ = self._dims(a.buffer)
        pos = {lp.var: k for k, lp in enumerate(loops)}
        out = []
        for idx in a.indices:
            per_level: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
            for e in idx:
                f = _affine(e, self.affine_memo)
                if f is None:
                    for i in range(n + 1):
                        b = _bound(e, self.env(max(i, skip)))
                        per_level[i].append(b if b is not None else (0, 1 << 62))
                    continue
                base = f.const
                neg = [0] * n
                pos_ = [0] * n
                for v, c in f.coefs.items():
                    k = pos.get(v)
                    if k is None:
                        base += c * self.fixed.get(v, (0, 0))[0]
                        continue
                    lp = loops[k]
                    base += c * lp.lo
                    if k < skip:
                        continue
                    span = c * (lp.extent - 1)
                    if span < 0:
                        neg[k] += span
                    else:
                        pos_[k] += span
                lo = base + min(0, f.lane_span)
                hi = base + max(0, f.lane_span)
                per_level[n].append((lo, hi))
                for i in range(n - 1, -1, -1):
                    lo += neg[i]
                    hi += pos_[i]
                    per_level[i].append((lo, hi))
            # a vector run longer than its dimension (a tensorized tile) carries into the outer one
            for lv in per_level:
                for d in range(len(lv) - 1, 0, -1):
                    lo, hi = lv[d]
                    if hi - lo + 1 > shape[d]:
                        carry = -(-(hi - lo + 1) // shape[d])
                        lv[d] = (0, shape[d] - 1)
                        plo, phi = lv[d - 1]
                        lv[d - 1] = (plo, phi + carry - 1)
            out.append(per_level)
        return out

    def _buffer_features(self, a: _Access, loops: list[_Loop], prod: int) -> dict[str, Any]:
        n = len(loops)
        shape, strides = self._dims(a.buffer)
        ranges = self._ranges(a, loops)
        ndim = len(shape)
        access_shape: list[int] = [1] * ndim
        for i in range(n + 1):
            numel = 1
            for d in range(ndim):
                lo = min(r[i][d][0] for r in ranges)
                hi = max(r[i][d][1] for r in ranges)
                ext = min(hi - lo + 1, shape[d])
                numel *= ext
                if i == 0:
                    access_shape[d] = ext
            a.numel.append(numel)
        if a.buffer in self.scopes:
            outer = 1
            for lp in loops[: a.skip]:
                outer *= lp.extent
            got = self.alloc.setdefault(a.buffer, (outer, []))
            got[1].extend(r[a.skip] for r in ranges)
        # stride: the innermost loop (or vector lane) that moves an index, the least it moves it by
        min_stride = 0
        found = -1
        if a.lanes > 1:
            for idx in a.indices:
                for d in range(ndim - 1, -1, -1):
                    f = _affine(idx[d], self.affine_memo)
                    if f is not None and f.lane_stride:
                        st = abs(f.lane_stride) * strides[d]
                        min_stride = st if min_stride == 0 else min(min_stride, st)
                        break
            if min_stride:
                found = n
        if not min_stride:
            for k in range(n - 1, a.skip - 1, -1):
                st = self._var_stride(a, loops[k].var, strides)
                if st:
                    min_stride = st
                    found = k
                    break
        innermost_stride = min_stride if found >= n - 1 else 0
        non_strided = 1
        for k in range(n - 1, found, -1):
            non_strided *= loops[k].extent
        elem_bytes = a.bytes
        total = prod * a.lanes
        if n == 0 and a.lanes == 1:
            lines = 1.0
        else:
            lines = max(1.0, total / non_strided * min(1.0, min_stride * elem_bytes / CACHE_LINE_BYTES))
        # contiguous run: the inner dimensions covered fully, times the first one covered in part
        cont = 1
        for d in range(ndim - 1, -1, -1):
            cont *= access_shape[d]
            if access_shape[d] != shape[d]:
                break
        unique = a.numel[0]
        unique_lines = max(1.0, unique / cont * math.ceil(cont * elem_bytes / CACHE_LINE_BYTES))
        return {
            "name": a.buffer.name,
            "kind": a.kind,
            "bytes": float(total * elem_bytes),
            "unique_bytes": float(unique * elem_bytes),
            "lines": lines,
            "unique_lines": unique_lines,
            "stride": innermost_stride,
        }

    def _var_stride(self, a: _Access, var: Var, strides: list[int]) -> int:
        best = 0
        for idx in a.indices:
            for d in range(len(idx) - 1, -1, -1):
                f = _affine(idx[d], self.affine_memo)
                if f is not None:
                    c = f.coefs.get(var, 0)
                elif var in _vars_in(idx[d], self.vars_memo):
                    c = 1
                else:
                    c = 0
                if c:
                    st = abs(c) * strides[d]
                    best = st if best == 0 else min(best, st)
                    break
        return best

    def _reuse(self, a: _Access, loops: list[_Loop], accesses: dict[Buffer, _Access]) -> tuple[int, float, float, int]:
        """TVM's reuse analysis: (type, distance in iterations, distance in bytes, count).

        From the innermost loop outwards, the first loop that does not move the access (type 0:
        each iteration reads the same data again) or under which an earlier store touched the
        buffer too (type 1: serial reuse); type 2 when there is none.
        """
        n = len(loops)
        region_vars: set[Var] = set()
        for idx in a.indices:
            for e in idx:
                region_vars |= _vars_in(e, self.vars_memo)
        for k in range(n - 1, -1, -1):
            lp = loops[k]
            if k < a.skip or lp.var not in region_vars:
                dis_iter = 1.0
                for j in range(n - 1, k, -1):
                    dis_iter *= loops[j].extent
                dis_bytes = 0.0
                if k == n - 1:
                    dis_bytes = float(sum(x.bytes * x.lanes for x in accesses.values()))
                else:
                    for buf, numels in self.touched[id(loops[k + 1])].items():
                        dis_bytes += sum(numels) * buf.dtype.bytes
                return 0, dis_iter, dis_bytes, lp.extent
            touched = self.touched[id(lp)].get(a.buffer, [])
            if len(touched) >= 2:
                dis_bytes = 0.0
                for buf, numels in self.touched[id(lp)].items():
                    dis_bytes += sum(numels) * buf.dtype.bytes
                return 1, min(touched) / lp.extent, dis_bytes / lp.extent, len(touched) - 1
        return 2, 0.0, 0.0, 0

    # allocations ----------------------------------------------------------------------------
    def finish(self) -> np.ndarray:
        sizes: dict[Buffer, tuple[int, int]] = {}  # buffer -> (compacted bytes, product of outer loops)
        for buf, (outer, ranges) in self.alloc.items():
            shape, _ = self._dims(buf)
            numel = 1
            for d, size in enumerate(shape):
                lo = min(r[d][0] for r in ranges)
                hi = max(r[d][1] for r in ranges)
                numel *= min(hi - lo + 1, size)
            sizes[buf] = (numel * buf.dtype.bytes * buf.dtype.lanes, outer)
        for row, (buf, prod) in zip(self.rows, self.row_buffers, strict=True):
            got = sizes.get(buf)
            if got is None:
                continue
            size, outer = got
            row[_COL["alloc_size"]] = slog(size)
            row[_COL["alloc_prod"]] = slog(size * outer)
            row[_COL["alloc_outer_prod"]] = slog(outer)
            row[_COL["alloc_inner_prod"]] = slog(prod / outer)
        if not self.rows:
            return np.zeros((0, _N), dtype=np.float32)
        return np.asarray(self.rows, dtype=np.float32)


def _export_buffer(sub: dict[str, Any]) -> list[float]:
    """The 18 columns of one buffer access (TVM's group 2 order)."""
    reuse_type, dis_iter, dis_bytes, reuse_ct = sub["reuse"]
    proxy = reuse_ct if reuse_ct > 0 else 0.5
    kind = sub["kind"]
    return [
        float(kind == 0),
        float(kind == 1),
        float(kind == 2),
        slog(sub["bytes"]),
        slog(sub["unique_bytes"]),
        slog(sub["lines"]),
        slog(sub["unique_lines"]),
        float(reuse_type == 0),
        float(reuse_type == 1),
        float(reuse_type == 2),
        slog(dis_iter),
        slog(dis_bytes),
        slog(reuse_ct),
        slog(sub["bytes"] / proxy),
        slog(sub["unique_bytes"] / proxy),
        slog(sub["lines"] / proxy),
        slog(sub["unique_lines"] / proxy),
        slog(sub["stride"]),
    ]


def _position(picked: list[int], spatial: list[bool]) -> int:
    """One-hot slot (index into _POSITIONS) of the innermost loop among ``picked``."""
    kinds = {spatial[k] for k in picked}
    if len(kinds) == 2:
        return 7
    sp = kinds.pop()
    same = [k for k, s in enumerate(spatial) if s == sp]
    k = picked[-1]
    if k == same[-1]:
        slot = 1
    elif k == same[0]:
        slot = 3
    else:
        slot = 2
    return slot if sp else slot + 3


def _curve(row: list[float], per_iter: float, loops: list[_Loop], touched_bytes: list[int]) -> None:
    """TVM's arithmetic intensity curve: ops / unique bytes at 10 levels of compute."""
    n = len(loops)
    col = _COL["arith_intensity_0"]
    if per_iter <= 0 or n == 0:
        return
    compute = []
    memory = []
    ops = per_iter
    for k in range(n - 1, -1, -1):
        ops *= loops[k].extent
        compute.append(ops)
        memory.append(max(1, touched_bytes[k]))
    total = compute[-1]
    p = 0
    for i in range(CURVE_POINTS):
        cur = (i + 1) / CURVE_POINTS * total
        while p < n - 1 and compute[p] < cur - 1e-4:
            p += 1
        if p == 0:
            value = compute[0] / memory[0]
        else:
            base = compute[p - 1] / memory[p - 1]
            slope = (compute[p] / memory[p] - base) / (compute[p] - compute[p - 1])
            value = base + slope * (cur - compute[p - 1])
        row[col + i] = slog(value)


def extract_features(func: PrimFunc) -> np.ndarray:
    """Per-store features of a scheduled ``func``: float32 ``(n_stores, len(FEATURE_NAMES))``.

    One row per ``BufferStore`` of the partially lowered program, in program order (an init
    statement is its own store). Deterministic: the same program gives the same array.

    >>> from tensorsearch import workloads
    >>> rows = extract_features(workloads.make("GMM", (1, 64, 64, 64)).func)
    >>> rows.shape                          # init and update of Z
    (2, 169)
    >>> round(2 ** float(rows[1, FEATURE_NAMES.index("float_mad")]) - 1)   # 64^3 multiply-adds
    262144
    """
    return _Extractor(partial_lower(func).body).finish()


CANDIDATE_LENGTH = 2 * _N + 1
"""Length of :func:`candidate_vector`: per-column maximum and total over the stores, and the store count."""

# columns summed as raw quantities (2**x - 1) and scaled again; the others (one-hot, ratios) are averaged
_ADDITIVE = np.array(
    [
        not (
            "_pos_" in name
            or ".acc_" in name
            or ".reuse_" in name
            or name.startswith(
                ("arith_intensity", "is_", "intrin_macs", "intrin_vector_width", "alloc_", "inner_", "unit_")
            )
            or name.endswith(("_len", "_num", "num_loops", "auto_unroll_max_step", "stride", "reduce_prod"))
        )
        for name in FEATURE_NAMES
    ]
)


def candidate_vector(features: np.ndarray) -> np.ndarray:
    """A fixed-length float32 vector of one candidate, from its :func:`extract_features` rows.

    ``[max over stores (169), total over stores (169), slog(number of stores)]``: the total is the
    slog of the summed raw counts for count-like columns (operations, bytes, lines, loop products)
    and the mean for the others (one-hot flags, reuse distances, intensity, positions).

    >>> candidate_vector(np.zeros((3, len(FEATURE_NAMES)), np.float32)).shape == (CANDIDATE_LENGTH,)
    True
    """
    rows = np.asarray(features, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != _N:
        raise ValueError(f"candidate_vector takes an (n_stores, {_N}) feature array, got shape {rows.shape}")
    out = np.zeros(CANDIDATE_LENGTH, dtype=np.float32)
    n = rows.shape[0]
    if n == 0:
        return out
    out[:_N] = rows.max(axis=0)
    total = rows.mean(axis=0)
    total[_ADDITIVE] = np.log2(np.exp2(rows[:, _ADDITIVE]).sum(axis=0) - n + 1.0)
    out[_N : 2 * _N] = total
    out[-1] = slog(n)
    return out
