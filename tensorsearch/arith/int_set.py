"""Interval sets of integer expressions with symbolic bounds.

``eval_int_set(e, dom_map)`` bounds ``e`` when each Var of ``dom_map`` ranges over its Range
(or IntervalSet); other variables stay symbolic::

    eval_int_set(i * 4 + j, {j: Range(0, 4)})          # IntervalSet(i*4, i*4 + 3)
    eval_int_set((k * 16 + t) // 4, {t: Range(0, 16)}) # IntervalSet(k*4, k*4 + 3)
    eval_int_set(x % 8, {x: Range(n, 100)})            # IntervalSet(0, 7)

A bound that cannot be expressed is ``NEG_INF`` / ``POS_INF``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ir.expr import (
    Add,
    Broadcast,
    Cast,
    Div,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    PrimExpr,
    Ramp,
    Range,
    Select,
    Sub,
    Var,
)
from ..ir.functor import free_vars
from .simplify import NEG_INF, POS_INF, LinearForm, Simplifier, int_imm


@dataclass(frozen=True)
class IntervalSet:
    """The integers ``min_value <= x <= max_value`` (inclusive; NEG_INF / POS_INF when unbounded)."""

    min_value: PrimExpr
    max_value: PrimExpr

    @staticmethod
    def single_point(value: PrimExpr) -> IntervalSet:
        return IntervalSet(value, value)

    @staticmethod
    def everything() -> IntervalSet:
        return IntervalSet(NEG_INF, POS_INF)

    @staticmethod
    def from_range(r: Range) -> IntervalSet:
        """``Range(m, e)`` -> ``[m, m + e - 1]``."""
        return IntervalSet(r.min, Simplifier().simplify(r.min + r.extent - 1))

    @property
    def is_single_point(self) -> bool:
        return self.min_value == self.max_value and self.min_value is not NEG_INF

    @property
    def is_bounded(self) -> bool:
        return self.min_value is not NEG_INF and self.max_value is not POS_INF

    def extent(self, dom_map: dict | None = None) -> PrimExpr:
        """``simplify(max - min + 1)``; a ValueError for an unbounded set."""
        if not self.is_bounded:
            raise ValueError(f"the interval set {self} is unbounded and has no extent")
        return Simplifier(dom_map).simplify(self.max_value - self.min_value + 1)

    def to_range(self, dom_map: dict | None = None) -> Range:
        return Range(self.min_value, self.extent(dom_map))

    def __str__(self) -> str:
        lo = "-inf" if self.min_value is NEG_INF else str(self.min_value)
        hi = "+inf" if self.max_value is POS_INF else str(self.max_value)
        return f"[{lo}, {hi}]"


def _smin(s: Simplifier, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if a is NEG_INF or b is NEG_INF:
        return NEG_INF
    return b if a is POS_INF else a if b is POS_INF else s.simplify(Min(a, b))


def _smax(s: Simplifier, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if a is POS_INF or b is POS_INF:
        return POS_INF
    return b if a is NEG_INF else a if b is NEG_INF else s.simplify(Max(a, b))


def union(sets: Any, dom_map: dict | None = None) -> IntervalSet:
    """The hull of interval sets: ``union([[i, i], [i + 2, i + 2]]) == [i, i + 2]``."""
    return hull(Simplifier(dom_map), list(sets))


def hull(s: Simplifier, sets: list[IntervalSet]) -> IntervalSet:
    """The smallest interval set holding every set of ``sets``, bounds simplified by ``s``."""
    if not sets:
        raise ValueError("union needs at least one interval set")
    lo, hi = sets[0].min_value, sets[0].max_value
    for x in sets[1:]:
        lo, hi = _smin(s, lo, x.min_value), _smax(s, hi, x.max_value)
    return IntervalSet(lo, hi)


def intersect(a: IntervalSet, b: IntervalSet, dom_map: dict | None = None) -> IntervalSet:
    """``intersect([0, 15], [i, i + 31]) == [max(i, 0), min(i + 31, 15)]``."""
    s = Simplifier(dom_map)
    lo = a.min_value if b.min_value is NEG_INF else b.min_value if a.min_value is NEG_INF else None
    hi = a.max_value if b.max_value is POS_INF else b.max_value if a.max_value is POS_INF else None
    lo = s.simplify(Max(a.min_value, b.min_value)) if lo is None else lo
    hi = s.simplify(Min(a.max_value, b.max_value)) if hi is None else hi
    return IntervalSet(lo, hi)


class SetEvaluator:
    """Evaluates integer expressions to interval sets over one domain map (its simplifier and
    memo shared by every expression evaluated)."""

    def __init__(self, dom_map: dict) -> None:
        self.dom = dict(dom_map)
        ranges = {}
        for v, r in self.dom.items():
            if isinstance(r, IntervalSet):
                if r.is_bounded:
                    ranges[v] = Range(r.min_value, r.max_value - r.min_value + 1)
            else:
                ranges[v] = r
        self.s = Simplifier(ranges)  # simplification is valid anywhere inside the domain
        self.busy: set[Var] = set()

    def sign(self, e: PrimExpr) -> int:
        """1 when e >= 0 provably, -1 when e <= 0, else 0."""
        lo, hi = self.s.bound_lin(self.s.lin(e))
        return 1 if lo >= 0 else -1 if hi <= 0 else 0

    def var(self, v: Var) -> IntervalSet:
        r = self.dom[v]
        if _is_constant_range(r):
            # what eval gives for a constant range, without simplifying min and min + extent - 1
            return IntervalSet(
                int_imm(r.min.value, r.min.dtype), int_imm(r.min.value + r.extent.value - 1, r.min.dtype)
            )
        self.busy.add(v)
        try:
            if isinstance(r, IntervalSet):
                lo = r.min_value if r.min_value is NEG_INF else self.eval(r.min_value).min_value
                hi = r.max_value if r.max_value is POS_INF else self.eval(r.max_value).max_value
                return IntervalSet(lo, hi)
            return IntervalSet(self.eval(r.min).min_value, self.eval(r.min + r.extent - 1).max_value)
        finally:
            self.busy.discard(v)

    def eval(self, e: PrimExpr) -> IntervalSet:
        t = type(e)
        if t is Var:  # simplify keeps a variable as it is
            return self.visit(e)
        if t is IntImm:  # ... and a constant equal to itself
            return IntervalSet.single_point(e)
        if e.dtype.is_integer and e.dtype.lanes == 1:
            fast = self._linear(self.s.lin(e))
            if fast is not None:
                return fast
        e = self.s.simplify(e)
        if e.dtype.lanes == 1 and not any(v in self.dom and v not in self.busy for v in free_vars(e)):
            return IntervalSet.single_point(e)
        return self.visit(e)

    def _linear(self, lin: LinearForm) -> IntervalSet | None:
        """The interval of ``sum(c * v) + const`` whose terms are variables, each relaxed one over a
        constant range: the relaxed terms go to their ends, the others stay (None for any other form).

        ``i*4 + j`` with ``j`` in ``[0, 4)`` -> ``[i*4, i*4 + 3]``: what the general walk gives, without it.
        """
        lo, hi = lin.const, lin.const
        kept: dict[PrimExpr, int] = {}
        for v, c in lin.terms.items():
            if type(v) is not Var:
                return None
            if v not in self.dom or v in self.busy:
                kept[v] = c
                continue
            r = self.dom[v]
            if not _is_constant_range(r):
                return None
            a, b = r.min.value * c, (r.min.value + r.extent.value - 1) * c
            lo, hi = lo + min(a, b), hi + max(a, b)
        return IntervalSet(LinearForm(lin.dtype, kept, lo).to_expr(), LinearForm(lin.dtype, dict(kept), hi).to_expr())

    def visit(self, e: PrimExpr) -> IntervalSet:
        t = type(e)
        if t is Var:
            return self.var(e) if e in self.dom and e not in self.busy else IntervalSet.single_point(e)
        if t is IntImm:
            return IntervalSet.single_point(e)
        if t is Ramp:  # the lanes lie between the first and the last one
            return hull(self.s, [self.eval(e.base), self.eval(e.base + e.stride * (e.lanes - 1))])
        if t is Broadcast:
            return self.eval(e.value)
        if t is Select:
            return hull(self.s, [self.visit(e.true_value), self.visit(e.false_value)])
        if t is Cast and e.value.dtype.is_integer and e.dtype.is_integer:
            a = self.visit(e.value)
            lo = a.min_value if a.min_value is NEG_INF else self.s.simplify(Cast(e.dtype, a.min_value))
            hi = a.max_value if a.max_value is POS_INF else self.s.simplify(Cast(e.dtype, a.max_value))
            return IntervalSet(lo, hi)
        if t not in (Add, Sub, Mul, FloorDiv, FloorMod, Div, Mod, Min, Max):
            return IntervalSet.everything()
        a, b = self.visit(e.a), self.visit(e.b)
        if a.is_single_point and b.is_single_point:
            return IntervalSet.single_point(self.s.simplify(t(a.min_value, b.min_value)))
        if t in (Min, Max):
            f = _smin if t is Min else _smax
            return IntervalSet(f(self.s, a.min_value, b.min_value), f(self.s, a.max_value, b.max_value))
        if t is Add:
            return IntervalSet(self._op(Add, a.min_value, b.min_value), self._op(Add, a.max_value, b.max_value))
        if t is Sub:
            return IntervalSet(self._op(Sub, a.min_value, b.max_value), self._op(Sub, a.max_value, b.min_value))
        if t is Mul:
            if a.is_single_point:
                a, b = b, a
            return self._mul(a, b.min_value) if b.is_single_point else self._corners(Mul, a, b)
        if t in (Div, Mod):  # truncating forms equal the floor forms for a non-negative dividend
            if a.min_value is NEG_INF or self.sign(a.min_value) <= 0:
                return IntervalSet.everything()
            t = FloorDiv if t is Div else FloorMod
        if not b.is_single_point or self.s.bound_lin(self.s.lin(b.min_value))[0] < 1:  # positive divisor only
            return IntervalSet.everything()
        d = b.min_value
        if t is FloorDiv:
            return IntervalSet(self._op(FloorDiv, a.min_value, d), self._op(FloorDiv, a.max_value, d))
        if a.is_bounded and self.s.simplify(a.min_value // d) == self.s.simplify(a.max_value // d):
            return IntervalSet(self.s.simplify(a.min_value % d), self.s.simplify(a.max_value % d))
        return IntervalSet(IntImm(d.dtype, 0), self.s.simplify(d - 1))

    def _op(self, t: type, x: PrimExpr, y: PrimExpr) -> PrimExpr:
        for inf in (NEG_INF, POS_INF):
            if x is inf or y is inf:
                return inf if t is not Sub or x is inf else (POS_INF if inf is NEG_INF else NEG_INF)
        return self.s.simplify(t(x, y))

    def _mul(self, a: IntervalSet, p: PrimExpr) -> IntervalSet:
        """[lo, hi] * p for a single point p of known sign (else the hull of the corners)."""
        sign = self.sign(p)
        if sign == 0:
            return self._corners(Mul, a, IntervalSet.single_point(p))
        lo, hi = (a.min_value, a.max_value) if sign > 0 else (a.max_value, a.min_value)

        def scale(x: PrimExpr, inf: PrimExpr) -> PrimExpr:
            return inf if x is NEG_INF or x is POS_INF else self.s.simplify(x * p)

        return IntervalSet(scale(lo, NEG_INF), scale(hi, POS_INF))

    def _corners(self, t: type, a: IntervalSet, b: IntervalSet) -> IntervalSet:
        if not (a.is_bounded and b.is_bounded):
            return IntervalSet.everything()
        c = []
        for x in (a.min_value, a.max_value):
            for y in (b.min_value, b.max_value):
                v = self.s.simplify(t(x, y))
                if all(v != w for w in c):
                    c.append(v)
        lo, hi = c[0], c[0]
        for x in c[1:]:
            lo, hi = _smin(self.s, lo, x), _smax(self.s, hi, x)
        return IntervalSet(lo, hi)


def eval_int_set(expr: PrimExpr, dom_map: dict | None = None) -> IntervalSet:
    """The interval of ``expr`` when each Var of ``dom_map`` ranges over its Range or IntervalSet."""
    _check_int_expr(expr)
    return SetEvaluator(dom_map or {}).eval(expr)


def _check_int_expr(expr: Any) -> None:
    if not isinstance(expr, PrimExpr) or not (expr.dtype.is_integer or expr.dtype.is_bool):
        raise TypeError(f"eval_int_set needs an integer expression, got {expr!r}")


def _is_constant_range(r: Any) -> bool:
    """A Range with a constant min and extent of one type."""
    return type(r) is Range and type(r.min) is IntImm and type(r.extent) is IntImm and r.min.dtype == r.extent.dtype


def constant_ranges(dom_map: dict) -> bool:
    """Every domain a constant range (then nothing an evaluation learns about the domain depends
    on the expression evaluated)."""
    return all(_is_constant_range(r) for r in dom_map.values())


def eval_int_sets(exprs: list[PrimExpr], dom_map: dict | None = None) -> list[IntervalSet]:
    """``[eval_int_set(e, dom_map) for e in exprs]``; one evaluator (and its simplifier's memo)
    serves them all when every domain is a constant range."""
    dom_map = dom_map or {}
    for e in exprs:
        _check_int_expr(e)
    if not constant_ranges(dom_map):
        return [SetEvaluator(dom_map).eval(e) for e in exprs]
    ev = SetEvaluator(dom_map)
    return [ev.eval(e) for e in exprs]
