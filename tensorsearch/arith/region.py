"""Access regions of statements: which part of each buffer a statement reads and writes.

::

    # for k in range(16): C[vi, vj] = C[vi, vj] + A[vi, k] * B[k, vj]
    reads, writes = detect_access_regions(loop, relax={})
    # reads  == [C[vi:vi+1, vj:vj+1], A[vi:vi+1, 0:16], B[0:16, vj:vj+1]]
    # writes == [C[vi:vi+1, vj:vj+1]]

    region_from_points(A, [(vi,), (vi + 1,), (vi + 2,)])   # A[vi:vi+3]
"""

from __future__ import annotations

import itertools
from typing import Any

from ..ir.expr import BufferLoad, IntImm, PrimExpr, Range, Var
from ..ir.functor import post_order_visit, substitute
from ..ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    SeqStmt,
    Stmt,
)
from .int_set import NEG_INF, POS_INF, IntervalSet, SetEvaluator, constant_ranges, hull
from .simplify import Simplifier, simplify


def _to_region(buffer: Buffer, sets: list[IntervalSet], s: Simplifier) -> BufferRegion:
    """Interval sets to a BufferRegion; an unbounded side falls back to the buffer's edge."""
    ranges = []
    for dim, st in zip(buffer.shape, sets):
        lo = IntImm(dim.dtype, 0) if st.min_value is NEG_INF else st.min_value
        hi = s.simplify(dim - 1) if st.max_value is POS_INF else st.max_value
        ranges.append(Range(lo, s.simplify(hi - lo + 1)))
    return BufferRegion(buffer, tuple(ranges))


def region_from_points(buffer: Buffer, points: Any, dom_map: dict | None = None) -> BufferRegion:
    """The smallest region holding every index tuple in ``points`` (vars of ``dom_map`` relaxed)."""
    ev = SetEvaluator(dom_map or {})
    sets: list[IntervalSet] | None = None
    for idx in points:
        new = [ev.eval(i if isinstance(i, PrimExpr) else IntImm(buffer.shape[0].dtype, i)) for i in idx]
        sets = new if sets is None else [hull(ev.s, [a, b]) for a, b in zip(sets, new)]
    if sets is None:
        raise ValueError(f"region_from_points needs at least one point of buffer {buffer.name}")
    return _to_region(buffer, sets, ev.s)


class _Collector:
    def __init__(self, relax: dict) -> None:
        self.dom: dict[Var, Any] = dict(relax)
        self.subst: dict[Var, PrimExpr] = {}
        self.reads: dict[Buffer, list[IntervalSet]] = {}
        self.writes: dict[Buffer, list[IntervalSet]] = {}
        self.local: set[Buffer] = set()
        self.matched: dict[Buffer, BufferRegion] = {}
        self._ev: SetEvaluator | None = None  # the evaluator of the current domain (None after it changed)

    @property
    def ev(self) -> SetEvaluator:
        """One evaluator serves every access while the domain stays the same and constant (as in
        ``eval_int_sets``); a symbolic domain gets a fresh one each time."""
        if self._ev is None:
            if not constant_ranges(self.dom):
                return SetEvaluator(self.dom)
            self._ev = SetEvaluator(self.dom)
        return self._ev

    def relax(self, e: PrimExpr) -> IntervalSet:
        return self.ev.eval(substitute(e, self.subst))

    def add(self, table: dict, buffer: Buffer, sets: list[IntervalSet]) -> None:
        old = table.get(buffer)
        s = self.ev.s
        table[buffer] = sets if old is None else [hull(s, [a, b]) for a, b in zip(old, sets)]

    def access(self, table: dict, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> None:
        if buffer in self.matched:  # a match_buffer view: count its whole source region
            self.region(table, self.matched[buffer])
        else:
            self.add(table, buffer, [self.relax(i) for i in indices])

    def region(self, table: dict, region: BufferRegion) -> None:
        sets = []
        for r in region.region:
            lo = self.relax(r.min)
            hi = self.relax(r.min + r.extent - 1)
            sets.append(IntervalSet(lo.min_value, hi.max_value))
        self.add(table, region.buffer, sets)

    def expr(self, e: PrimExpr) -> None:
        def visit(node: Any) -> None:
            if isinstance(node, BufferLoad):
                self.access(self.reads, node.buffer, node.indices)

        post_order_visit(e, visit)

    def stmt(self, s: Stmt) -> None:
        t = type(s)
        if t is SeqStmt:
            for x in s.stmts:
                self.stmt(x)
        elif t is For:
            self.expr(s.min)
            self.expr(s.extent)
            saved = self.dom.get(s.loop_var)
            self.dom[s.loop_var] = Range(substitute(s.min, self.subst), substitute(s.extent, self.subst))
            self._ev = None
            self.stmt(s.body)
            if saved is None:
                del self.dom[s.loop_var]
            else:
                self.dom[s.loop_var] = saved
            self._ev = None
        elif t is BufferStore:
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            self.access(self.writes, s.buffer, s.indices)
        elif t is IfThenElse:
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif t is Evaluate:
            self.expr(s.value)
        elif t is Allocate:
            self.local.add(s.buffer)
            self.stmt(s.body)
        elif t is BlockRealize:
            for v in s.iter_values:
                self.expr(v)
            self.expr(s.predicate)
            self.block(s.block, {iv.var: substitute(v, self.subst) for iv, v in zip(s.block.iter_vars, s.iter_values)})
        elif t is Block:
            self.block(s, None)
        else:
            raise TypeError(f"detect_access_regions cannot walk a {t.__name__} statement: {s}")

    def block(self, block: Block, binding: dict[Var, PrimExpr] | None) -> None:
        """A nested block counts through its declared regions; a top one (or one declaring none) through its body."""
        self.local.update(block.alloc_buffers)
        saved = dict(self.subst)
        if binding is not None:
            self.subst.update(binding)
        for m in block.match_buffers:
            self.matched[m.buffer] = BufferRegion(
                m.source.buffer,
                tuple(Range(substitute(r.min, self.subst), substitute(r.extent, self.subst)) for r in m.source.region),
            )
        if binding is not None and (block.reads or block.writes):
            for r in block.reads:
                self.region(self.reads, r)
            for r in block.writes:
                self.region(self.writes, r)
        else:
            if block.init is not None:
                self.stmt(block.init)
            self.stmt(block.body)
        self.subst = saved


def detect_access_regions(stmt: Stmt, relax: dict | None = None) -> tuple[list[BufferRegion], list[BufferRegion]]:
    """(reads, writes) of ``stmt``: one hull region per buffer, buffers in order of first access.

    Loop variables of loops inside ``stmt`` and the vars of ``relax`` (Var -> Range) are relaxed
    over their ranges; other vars stay symbolic.  Buffers allocated inside are left out.
    """
    c = _Collector(relax or {})
    c.stmt(stmt)
    s = Simplifier(relax)

    def regions(table: dict) -> list[BufferRegion]:
        return [_to_region(b, sets, s) for b, sets in table.items() if b not in c.local and b not in c.matched]

    return regions(c.reads), regions(c.writes)


def region_strides(buf: Buffer) -> list[int] | None:
    """The element strides of ``buf`` as integers (explicit or row-major), None when symbolic."""
    if buf.strides:
        out = []
        for s in buf.strides:
            s = simplify(s)
            if not isinstance(s, IntImm):
                return None
            out.append(s.value)
        return out
    dims = []
    for s in buf.shape:
        s = simplify(s)
        if not isinstance(s, IntImm):
            return None
        dims.append(s.value)
    out = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        out[k] = out[k + 1] * dims[k + 1]
    return out


def region_extents(region: BufferRegion) -> list[int] | None:
    """The region's extents as integers, None when one is symbolic."""
    out = []
    for r in region.region:
        e = simplify(r.extent)
        if not isinstance(e, IntImm):
            return None
        out.append(e.value)
    return out


def contiguity_error(region: BufferRegion) -> str | None:
    """None when the region's elements, in row-major order, are consecutive in memory; else why not."""
    buf = region.buffer
    extents = region_extents(region)
    if extents is None:
        return f"the region of buffer {buf.name} has a non-constant extent"
    strides = region_strides(buf)
    if strides is None:
        return f"buffer {buf.name} has symbolic strides, so the region cannot be proven contiguous"
    dims = [k for k, e in enumerate(extents) if e != 1]
    if not dims:
        return None
    if strides[dims[-1]] != 1:
        return (
            f"its innermost dimension {dims[-1]} of buffer {buf.name} has stride {strides[dims[-1]]}, "
            "not 1 (the elements of a row are not adjacent)"
        )
    for a, b in itertools.pairwise(dims):
        need = strides[b] * extents[b]
        if strides[a] != need:
            shape = [extents[k] for k in dims]
            return (
                f"its rows are strided: dimension {a} of buffer {buf.name} has stride {strides[a]} elements, "
                f"but a contiguous {'x'.join(map(str, shape))} tile needs {need}"
            )
    return None
