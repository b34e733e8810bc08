"""Pass ``vectorize_loops``: VECTORIZED loops become vector statements (TVM's Vectorizer)."""

from __future__ import annotations

from .. import arith
from ..ir.expr import (
    MATH_FUNCTIONS,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Sub,
    Var,
)
from ..ir.functor import Mutator, Visitor, children, post_order_visit, substitute
from ..ir.stmt import Buffer, BufferStore, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from .common import contains, uses_var

MAX_LANES = 64  # longer vectorized loops run as a serial loop of 64-lane chunks plus a tail


class _Fallback(Exception):
    """The loop body cannot be vectorized; the loop stays a serial loop."""


_LAZY_UNSAFE = (BufferLoad, Div, Mod, FloorDiv, FloorMod, Call)


class _Vectorizer:
    """Rewrite a loop body for ``var`` -> ``Ramp(base, 1, lanes)``."""

    def __init__(self, var: Var, base: PrimExpr, lanes: int, dom: dict[Var, Range]) -> None:
        self.var = var
        self.base = base
        self.lanes = lanes
        self.dom = dom

    def bc(self, e: PrimExpr) -> PrimExpr:
        return e if e.dtype.lanes == self.lanes else Broadcast(e, self.lanes)

    # expressions ----------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> PrimExpr:
        if isinstance(e, Var):
            if e is self.var:
                return Ramp(self.base, IntImm(e.dtype, 1), self.lanes)
            return e
        if isinstance(e, IntImm | FloatImm | StringImm):
            return e
        if e.dtype.lanes != 1 or isinstance(e, Ramp | Broadcast):
            raise _Fallback("the body already holds vectors")
        if not uses_var(e, self.var):
            return e
        if isinstance(e, BinaryOp):
            return self.binary(e)
        if isinstance(e, CmpOp):
            a, b = self.expr(e.a), self.expr(e.b)
            return type(e)(self.bc(a), self.bc(b))
        if isinstance(e, And | Or):
            return type(e)(self.bc(self.expr(e.a)), self.bc(self.expr(e.b)))
        if isinstance(e, Not):
            return Not(self.expr(e.a))
        if isinstance(e, Select):
            lazy = contains(e.true_value, _LAZY_UNSAFE) or contains(e.false_value, _LAZY_UNSAFE)
            if lazy and not _loads_only_select(e, self.var):
                raise _Fallback("a Select whose values load or divide cannot be evaluated for all lanes")
            c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
            if lazy:  # one condition for all lanes: the code generator keeps the loads guarded
                return Select(c, self.bc(t), self.bc(f))
            return Select(self.bc(c), self.bc(t), self.bc(f))
        if isinstance(e, Cast):
            v = self.expr(e.value)
            if isinstance(v, Ramp) and e.dtype.is_integer and v.dtype.is_integer:
                return Ramp(Cast(e.dtype, v.base), Cast(e.dtype, v.stride), v.lanes)
            if isinstance(v, Broadcast):
                return Broadcast(Cast(e.dtype, v.value), v.lanes)
            return Cast(e.dtype.with_lanes(self.lanes), v)
        if isinstance(e, BufferLoad):
            return self.load(e)
        if isinstance(e, Call):
            if e.op not in MATH_FUNCTIONS or not e.dtype.is_float:
                raise _Fallback(f"call of {e.op} has no vector form")
            args = tuple(self.bc(self.expr(a)) for a in e.args)
            return Call(e.dtype.with_lanes(self.lanes), e.op, args)
        raise _Fallback(f"cannot vectorize {type(e).__name__}")

    def binary(self, e: BinaryOp) -> PrimExpr:
        a, b = self.expr(e.a), self.expr(e.b)
        t = type(e)
        ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
        sa, sb = a.dtype.lanes == 1, b.dtype.lanes == 1
        if t in (Add, Sub) and (ra or sa) and (rb or sb):
            if ra and rb:
                return Ramp(t(a.base, b.base), t(a.stride, b.stride), self.lanes)
            if ra:
                return Ramp(t(a.base, b), a.stride, self.lanes)
            if t is Add:
                return Ramp(a + b.base, b.stride, self.lanes)
            return Ramp(a - b.base, IntImm(b.stride.dtype, 0) - b.stride, self.lanes)
        if t is Mul and ((ra and sb) or (sa and rb)):
            r, s = (a, b) if ra else (b, a)
            return Ramp(r.base * s, r.stride * s, self.lanes)
        if t in (FloorDiv, FloorMod) and ra and sb and isinstance(b, IntImm) and b.value > 0:
            last = a.base + a.stride * IntImm(a.stride.dtype, self.lanes - 1)
            dom = self.dom
            same_block = arith.can_prove(a.stride >= 0, dom) and arith.can_prove_equal(
                FloorDiv(a.base, b), FloorDiv(last, b), dom
            )
            if same_block:
                if t is FloorDiv:
                    return Broadcast(arith.simplify(FloorDiv(a.base, b), dom), self.lanes)
                return Ramp(arith.simplify(FloorMod(a.base, b), dom), a.stride, self.lanes)
        return t(self.bc(a), self.bc(b))

    def index(self, e: PrimExpr) -> PrimExpr:
        v = self.expr(e)
        if isinstance(v, Ramp):
            return Ramp(arith.simplify(v.base, self.dom), arith.simplify(v.stride, self.dom), v.lanes)
        return v

    def load(self, e: BufferLoad) -> PrimExpr:
        if len(e.indices) != 1:
            raise _Fallback("vectorization needs flat buffers")
        idx = self.index(e.indices[0])
        if isinstance(idx, Ramp):
            return BufferLoad(e.buffer, (idx,))
        if isinstance(idx, Broadcast):
            return Broadcast(BufferLoad(e.buffer, (idx.value,)), self.lanes)
        if idx.dtype.lanes == 1:
            return BufferLoad(e.buffer, (idx,))
        raise _Fallback(f"load of {e.buffer.name} at a non-affine vector index (a gather)")

    def hoistable_select(self, e: PrimExpr) -> Select | None:
        """A Select evaluated unconditionally in ``e`` whose values load or divide and depend on
        the lane while its condition does not: it can become an if around the store."""
        if isinstance(e, Select):
            if (
                uses_var(e, self.var)
                and not uses_var(e.condition, self.var)
                and (contains(e.true_value, _LAZY_UNSAFE) or contains(e.false_value, _LAZY_UNSAFE))
                and not _loads_only_select(e, self.var)
            ):
                return e
            return self.hoistable_select(e.condition)  # the values are evaluated lazily
        for child in children(e):
            if isinstance(child, PrimExpr):
                found = self.hoistable_select(child)
                if found is not None:
                    return found
        return None

    # statements -----------------------------------------------------------------------
    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, SeqStmt):
            return seq(*(self.stmt(x) for x in s.stmts))
        if isinstance(s, BufferStore):
            if len(s.indices) != 1:
                raise _Fallback("vectorization needs flat buffers")
            idx = self.index(s.indices[0])
            if not isinstance(idx, Ramp) or not arith.can_prove(NE(idx.stride, IntImm(idx.stride.dtype, 0)), self.dom):
                raise _Fallback(f"the store to {s.buffer.name} is not at a distinct element per lane")
            sel = self.hoistable_select(s.value)
            if sel is not None:  # if c: store(value[t]) else: store(value[f]), keeps laziness
                then = BufferStore(s.buffer, _replace(s.value, sel, sel.true_value), s.indices)
                other = BufferStore(s.buffer, _replace(s.value, sel, sel.false_value), s.indices)
                return self.stmt(IfThenElse(sel.condition, then, other))
            return BufferStore(s.buffer, self.bc(self.expr(s.value)), (idx,))
        if isinstance(s, IfThenElse):
            if uses_var(s.condition, self.var):
                raise _Fallback("an if whose condition depends on the vectorized loop")
            other = None if s.else_case is None else self.stmt(s.else_case)
            return IfThenElse(s.condition, self.stmt(s.then_case), other)
        raise _Fallback(f"cannot vectorize a {type(s).__name__} statement")


def _loads_only_select(e: Select, var: Var) -> bool:
    """``e``'s condition is the same for every lane and its values can fault only by loading:
    it stays one expression with a scalar condition, which the code generator evaluates
    without a branch (a padded convolution's ``Select(in_bounds, x[...], 0)``), instead of an
    ``if`` around the store that splits an unrolled update into many basic blocks."""
    if uses_var(e.condition, var):
        return False
    return not (_faults(e.true_value) or _faults(e.false_value))


def _faults(e: PrimExpr) -> bool:
    """Whether ``e`` holds a call or an integer division that could trap (a divisor other than
    a constant besides 0 and -1)."""
    found: list[PrimExpr] = []

    def visit(n: PrimExpr) -> None:
        if isinstance(n, Call):
            found.append(n)
        elif isinstance(n, Div | Mod | FloorDiv | FloorMod) and not n.dtype.is_float:
            if not (isinstance(n.b, IntImm) and n.b.value not in (0, -1)):
                found.append(n)

    post_order_visit(e, visit)
    return bool(found)


def _replace(e: PrimExpr, old: PrimExpr, new: PrimExpr) -> PrimExpr:
    class _R(Mutator):
        def visit(self, n: PrimExpr) -> PrimExpr:
            return new if n is old else super().visit(n)

    return _R().visit(e)


def _lane_local(body: Stmt) -> bool:
    """Each written buffer is accessed at one index expression only (no cross-lane dependence)."""
    accesses: dict[Buffer, set] = {}
    written: set[Buffer] = set()

    class _Collect(Visitor):
        def visit_BufferLoad(self, op: BufferLoad) -> None:
            accesses.setdefault(op.buffer, set()).add(op.indices)
            self.generic_visit(op)

        def visit_BufferStore(self, op: BufferStore) -> None:
            accesses.setdefault(op.buffer, set()).add(op.indices)
            written.add(op.buffer)
            self.generic_visit(op)

    _Collect().visit(body)
    return all(len(accesses[b]) == 1 for b in written)


class _VectorizeLoops(Mutator):
    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        return seq(*(self.visit(s) for s in op.stmts))

    def __init__(self, max_lanes: int) -> None:
        self.max_lanes = max_lanes
        self.dom: dict[Var, Range] = {}

    def visit_For(self, op: For) -> Stmt:
        self.dom[op.loop_var] = Range(op.min, op.extent)
        try:
            body = self.visit(op.body)
        finally:
            del self.dom[op.loop_var]
        if op.kind != ForKind.VECTORIZED:
            return For(op.loop_var, op.min, op.extent, op.kind, body, op.thread_binding, op.annotations)
        serial = For(op.loop_var, op.min, op.extent, ForKind.SERIAL, body, None, op.annotations)
        if not isinstance(op.extent, IntImm) or op.extent.value < 2 or not _lane_local(body):
            return serial
        try:
            return self.vectorize(op.loop_var, op.min, op.extent.value, body, op.annotations)
        except _Fallback:
            return serial

    def vectorize(self, var: Var, lo: PrimExpr, n: int, body: Stmt, annotations: tuple) -> Stmt:
        w = self.max_lanes
        dt = var.dtype
        if n <= w:
            return _Vectorizer(var, lo, n, dict(self.dom)).stmt(body)
        chunks, tail = divmod(n, w)
        vo = Var(var.name + "_vo", dt)
        dom = {**self.dom, vo: Range(IntImm(dt, 0), IntImm(dt, chunks))}
        base = arith.simplify(lo + vo * IntImm(dt, w))
        parts = [For(vo, IntImm(dt, 0), IntImm(dt, chunks), ForKind.SERIAL, _Vectorizer(var, base, w, dom).stmt(body))]
        if chunks == 1:
            parts = [substitute(parts[0].body, {vo: IntImm(dt, 0)})]
        tail_base = arith.simplify(lo + IntImm(dt, chunks * w))
        if tail == 1:
            parts.append(substitute(body, {var: tail_base}))
        elif tail > 1:
            parts.append(_Vectorizer(var, tail_base, tail, dict(self.dom)).stmt(body))
        del annotations
        return seq(*parts)


def vectorize_loops(func: PrimFunc, max_lanes: int = MAX_LANES) -> PrimFunc:
    """Turn each VECTORIZED loop of constant extent N into vector statements.

    The loop variable becomes ``Ramp(min, 1, N)``; affine indices become Ramp indices (a
    stride other than 1 gives a strided access); scalars are broadcast where they meet vectors;
    ``floordiv``/``floormod`` of a Ramp that stays inside one block become a Broadcast/Ramp.
    Loops longer than ``max_lanes`` run as a serial loop of ``max_lanes``-lane chunks and a
    shorter vector (or scalar) tail.  A loop whose body cannot be vectorized exactly stays a
    SERIAL loop: nested loops or allocations, an if or a Select-with-loads that depends on the
    loop, a store that does not hit a distinct element per lane (a reduction), a written buffer
    accessed at two different indices (a possible cross-lane dependence), a gather at a
    non-affine index, or a call without a vector form.
    """
    return func.with_body(_VectorizeLoops(max_lanes).visit(func.body))
