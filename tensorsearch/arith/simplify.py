"""Simplifier of integer index expressions, constant bounds and a prover.

Integer expressions are put in a canonical *linear form*: a sum of ``coefficient * atom``
terms plus a constant, where an atom is anything that is not an addition or a product by a
constant (a Var, a floordiv, a min, a load...).  Terms keep the order in which they first
appear, positive terms first, so equal inputs always give syntactically equal outputs::

    simplify(i * 4 + j + i * 2 - j)                 # i * 6
    simplify((i * 8 + j) // 8, {j: Range(0, 8)})    # i
    simplify((i * 8 + j) % 8, {j: Range(0, 8)})     # j
    simplify((x // 4) * 4 + x % 4)                  # x
    simplify(i < 16, {i: Range(0, 16)})             # True (IntImm(bool, 1))
    simplify(i + 1 <= 16)                           # i <= 15

Float expressions only get their constants folded (no reassociation).  ``dom_map`` maps a
Var to the half-open Range (or an IntervalSet) it lies in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir.dtype import DataType, bool_
from ..ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    Sub,
    Var,
)
from ..ir.functor import map_children

INF = math.inf
Bound = tuple[Any, Any]  # (lo, hi): Python ints, or -inf / +inf
NEG_INF = Var("neg_inf")  # the unbounded ends of an IntervalSet
POS_INF = Var("pos_inf")


def _wrap(value: int, dtype: DataType) -> int:
    if dtype.is_bool:
        return 1 if value else 0
    value &= (1 << dtype.bits) - 1
    if dtype.is_int and value >= 1 << (dtype.bits - 1):
        value -= 1 << dtype.bits
    return value


def int_imm(value: int, dtype: DataType) -> IntImm:
    """An IntImm of ``dtype`` holding ``value`` wrapped to the type's width: ``int_imm(300, int8)`` is 44."""
    return IntImm(dtype, _wrap(int(value), dtype))


def _bool(value: bool) -> IntImm:
    return IntImm(bool_, 1 if value else 0)


def _is_int(e: PrimExpr) -> bool:
    return e.dtype.is_integer and e.dtype.lanes == 1


def _dtype_bound(dtype: DataType) -> Bound:
    if dtype.is_integer or dtype.is_bool:
        return dtype.min_value(), dtype.max_value()
    return -INF, INF


def _mulx(x: Any, y: Any) -> Any:
    return 0 if x == 0 or y == 0 else x * y


def _fdivx(x: Any, y: Any) -> Any:
    """floor(x / y) for y != 0 where either may be infinite."""
    if math.isinf(x):
        return x if y > 0 else -x
    if math.isinf(y):
        return 0 if (x >= 0) == (y > 0) else -1
    return x // y


class LinearForm:
    """``sum(coef * atom) + const`` in the integer type ``dtype``; terms in first-appearance order."""

    __slots__ = ("const", "dtype", "terms")

    def __init__(self, dtype: DataType, terms: dict[PrimExpr, int] | None = None, const: int = 0) -> None:
        self.dtype, self.terms, self.const = dtype, terms if terms is not None else {}, const

    @property
    def is_const(self) -> bool:
        return not self.terms

    def add(self, other: LinearForm, scale: int = 1) -> LinearForm:
        terms = dict(self.terms)
        for t, c in other.terms.items():
            terms[t] = terms.get(t, 0) + c * scale
            if terms[t] == 0:
                del terms[t]
        return LinearForm(self.dtype, terms, self.const + other.const * scale)

    def scale(self, k: int) -> LinearForm:
        if k == 0:
            return LinearForm(self.dtype)
        return LinearForm(self.dtype, {t: c * k for t, c in self.terms.items()}, self.const * k)

    def content(self) -> int:
        return math.gcd(*self.terms.values(), self.const)

    def to_expr(self) -> PrimExpr:
        dt = self.dtype

        def term(t: PrimExpr, c: int) -> PrimExpr:
            return t if c == 1 else Mul(t, int_imm(c, dt))

        pos = [(t, c) for t, c in self.terms.items() if c > 0]
        neg = [(t, -c) for t, c in self.terms.items() if c < 0]
        res: PrimExpr | None = None
        for t, c in pos:
            res = term(t, c) if res is None else Add(res, term(t, c))
        if res is None and neg:
            if self.const == 0:
                res = term(neg[0][0], -neg[0][1])
                neg = neg[1:]
            else:
                res = int_imm(self.const, dt)
        for t, c in neg:
            res = Sub(res, term(t, c))
        if res is None:
            return int_imm(self.const, dt)
        if pos and self.const != 0:
            res = Add(res, int_imm(self.const, dt)) if self.const > 0 else Sub(res, int_imm(-self.const, dt))
        return res


_FLIP = {LT: LE, LE: LT, EQ: NE, NE: EQ}  # not (a < b)  <=>  b <= a, etc. (operands swapped for LT/LE)
_FLOAT_FOLD = {
    Add: lambda a, b: a + b, Sub: lambda a, b: a - b, Mul: lambda a, b: a * b,
    Div: lambda a, b: a / b, Min: min, Max: max,
    FloorDiv: lambda a, b: math.floor(a / b), FloorMod: lambda a, b: a - math.floor(a / b) * b,
}  # fmt: skip
_CMP_FOLD = {
    LT: lambda a, b: a < b, LE: lambda a, b: a <= b, GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b, EQ: lambda a, b: a == b, NE: lambda a, b: a != b,
}  # fmt: skip


def _round_float(value: float, dtype: DataType) -> float:
    try:
        return float(np.asarray(value, dtype=dtype.numpy))
    except Exception:  # ml_dtypes missing or overflow: keep the double
        return value


class Simplifier:
    """One simplification context: a domain map and a cache of variable bounds."""

    def __init__(self, dom_map: dict | None = None) -> None:
        self.dom = dict(dom_map or {})
        self._var_bounds: dict[Var, Bound] = {}
        self._busy: set[Var] = set()
        self._offsets: dict[Var, tuple[Var, PrimExpr] | None] = {}
        self._memo: dict[int, tuple[PrimExpr, LinearForm]] = {}

    # -- bounds -------------------------------------------------------------------------
    def var_bound(self, v: Var) -> Bound:
        if v in self._var_bounds:
            return self._var_bounds[v]
        r = self.dom.get(v)
        if r is None or v in self._busy:
            return _dtype_bound(v.dtype)
        self._busy.add(v)
        try:
            if hasattr(r, "extent"):  # Range
                lo = self.bound_lin(self.lin(r.min))[0]
                hi = self.bound_lin(self.lin(r.min).add(self.lin(r.extent)))[1] - 1
            else:  # IntervalSet
                lo = -INF if r.min_value is NEG_INF else self.bound_lin(self.lin(r.min_value))[0]
                hi = INF if r.max_value is POS_INF else self.bound_lin(self.lin(r.max_value))[1]
        finally:
            self._busy.discard(v)
        self._var_bounds[v] = (lo, hi)
        return lo, hi

    def _offset(self, v: Var) -> tuple[Var, PrimExpr] | None:
        """For ``v`` in a Range with a symbolic min: (o, min) with ``v == min + o`` and ``o`` in [0, extent)."""
        if v not in self._offsets:
            r, self._offsets[v] = self.dom.get(v), None
            if r is not None and hasattr(r, "extent") and type(r.min) is not IntImm:
                off = Var(v.name + "_offset", v.dtype)
                self.dom[off] = type(r)(IntImm(r.min.dtype, 0), r.extent)
                self._offsets[v] = (off, r.min)
        return self._offsets[v]

    def bound_lin(self, lin: LinearForm, depth: int = 0) -> Bound:
        for _ in range(4):  # rewrite vars with symbolic domains as min + offset, so j - n is bounded for j in [n, n+4)
            shift = [t for t in lin.terms if type(t) is Var and self._offset(t) is not None]
            for v in shift:
                off, mn = self._offset(v)
                coef, rest = lin.terms[v], dict(lin.terms)
                del rest[v]
                lin = LinearForm(lin.dtype, rest, lin.const).add(
                    self.lin(mn).add(LinearForm(lin.dtype, {off: 1})), coef
                )
            if not shift:
                break
        lo = hi = lin.const
        for t, c in lin.terms.items():
            a, b = self.bound(t)
            x, y = _mulx(a, c), _mulx(b, c)
            lo, hi = lo + min(x, y), hi + max(x, y)
        if depth < 2:
            lo, hi = self._tighten_min_max(lin, lo, hi, depth)
        return lo, hi

    def _tighten_min_max(self, lin: LinearForm, lo: Any, hi: Any, depth: int) -> Bound:
        """Use ``min(p, q) <= p`` and ``max(p, q) >= p`` for Min/Max terms, so ``a - max(a, b) <= 0``."""
        for t, c in list(lin.terms.items())[:4]:
            if type(t) not in (Min, Max):
                continue
            rest = dict(lin.terms)
            del rest[t]
            upper = (type(t) is Min) == (c > 0)  # replacing t by an operand bounds lin from above
            for operand in (t.a, t.b):
                replaced = LinearForm(lin.dtype, rest, lin.const).add(self.lin(operand), c)
                r_lo, r_hi = self.bound_lin(replaced, depth + 1)
                if upper:
                    hi = min(hi, r_hi)
                else:
                    lo = max(lo, r_lo)
        return lo, hi

    def bound(self, e: PrimExpr) -> Bound:
        """Interval arithmetic on the structure of ``e`` (no simplification)."""
        t = type(e)
        if t is IntImm:
            return e.value, e.value
        if t is Var:
            return self.var_bound(e)
        if t in (Add, Sub, Mul, Min, Max, FloorDiv, FloorMod, Div, Mod):
            (a0, a1), (b0, b1) = self.bound(e.a), self.bound(e.b)
            if t is Add:
                return a0 + b0, a1 + b1
            if t is Sub:
                return a0 - b1, a1 - b0
            if t is Mul:
                p = [_mulx(x, y) for x in (a0, a1) for y in (b0, b1)]
                return min(p), max(p)
            if t is Min:
                return min(a0, b0), min(a1, b1)
            if t is Max:
                return max(a0, b0), max(a1, b1)
            if t in (Div, Mod) and a0 < 0:  # truncating forms of a possibly negative dividend
                if t is Mod and b0 == b1 and b0 != 0:
                    m = abs(b0) - 1
                    return (-m, m) if a1 > 0 else (-m, 0)
                return _dtype_bound(e.dtype)
            if b0 >= 1:  # positive divisor
                if t in (FloorDiv, Div):
                    p = [_fdivx(x, y) for x in (a0, a1) for y in (b0, b1)]
                    return min(p), max(p)
                if a0 >= 0 and a1 < b0:
                    return a0, a1
                return 0, (b1 - 1 if a0 < 0 else min(b1 - 1, a1))
            if b1 <= -1 and t is FloorDiv:
                p = [_fdivx(x, y) for x in (a0, a1) for y in (b0, b1)]
                return min(p), max(p)
            return _dtype_bound(e.dtype)
        if t is Select:
            (a0, a1), (b0, b1) = self.bound(e.true_value), self.bound(e.false_value)
            return min(a0, b0), max(a1, b1)
        if t is Cast and (e.value.dtype.is_integer or e.value.dtype.is_bool):
            lo, hi = self.bound(e.value)
            d0, d1 = _dtype_bound(e.dtype)
            return (lo, hi) if d0 <= lo and hi <= d1 else (d0, d1)
        return _dtype_bound(e.dtype)

    # -- linear forms -------------------------------------------------------------------
    def atom(self, e: PrimExpr) -> LinearForm:
        if type(e) is IntImm:
            return LinearForm(e.dtype, {}, e.value)
        return LinearForm(e.dtype, {e: 1})

    def lin(self, e: PrimExpr) -> LinearForm:
        hit = self._memo.get(id(e))  # by identity: shared sub-expressions are linearized once
        if hit is None:
            hit = self._memo[id(e)] = (e, self._lin(e))
        return hit[1]

    def _lin(self, e: PrimExpr) -> LinearForm:
        t = type(e)
        dt = e.dtype
        if t is IntImm:
            return LinearForm(dt, {}, e.value)
        if t is Var:
            return LinearForm(dt, {e: 1})
        if t is Add or t is Sub:
            return self.fuse(self.lin(e.a).add(self.lin(e.b), 1 if t is Add else -1))
        if t is Mul:
            la, lb = self.lin(e.a), self.lin(e.b)
            if lb.is_const:
                return la.scale(lb.const)
            if la.is_const:
                return lb.scale(la.const)
            ga, gb = la.content(), lb.content()  # pull the constant content out: (i*2)*j -> (i*j)*2
            prod = Mul(LinearForm(dt, {k: c // ga for k, c in la.terms.items()}, la.const // ga).to_expr(),
                       LinearForm(dt, {k: c // gb for k, c in lb.terms.items()}, lb.const // gb).to_expr())  # fmt: skip
            return LinearForm(dt, {prod: ga * gb})
        if t is FloorDiv or t is FloorMod:
            return self.floor_op(t, self.lin(e.a), self.lin(e.b))
        if t is Div or t is Mod:
            la, lb = self.lin(e.a), self.lin(e.b)
            if lb.is_const and lb.const != 0 and la.is_const:
                q = abs(la.const) // abs(lb.const) * (1 if (la.const >= 0) == (lb.const > 0) else -1)
                return LinearForm(dt, {}, q if t is Div else la.const - q * lb.const)
            if lb.is_const and lb.const > 0 and self.bound_lin(la)[0] >= 0:
                return self.floor_op(FloorDiv if t is Div else FloorMod, la, lb)
            return self.atom(t(la.to_expr(), lb.to_expr()))
        if t is Min or t is Max:
            la, lb = self.lin(e.a), self.lin(e.b)
            lo, hi = self.bound_lin(la.add(lb, -1))
            if hi <= 0:
                return la if t is Min else lb
            if lo >= 0:
                return lb if t is Min else la
            ea, eb = la.to_expr(), lb.to_expr()
            for x, y in ((ea, eb), (eb, ea)):  # min(min(u, v), y) -> min(u, v) when u <= y or v <= y
                if type(x) is t and any(self._dominates(t, z, y) for z in (x.a, x.b)):
                    return self.atom(x)
            return self.atom(t(ea, eb))
        if t is Select:
            cond = self.simplify(e.condition)
            if type(cond) is IntImm:
                return self.lin(e.true_value if cond.value else e.false_value)
            la, lb = self.lin(e.true_value), self.lin(e.false_value)
            if la.add(lb, -1).is_const and la.const == lb.const:
                return la
            return self.atom(Select(cond, la.to_expr(), lb.to_expr()))
        if t is Cast:
            if e.value.dtype == dt:
                return self.lin(e.value)
            return self.atom(self.fold_cast(dt, self.simplify(e.value)))
        return self.atom(map_children(e, self._child))

    def _dominates(self, t: type, z: PrimExpr, y: PrimExpr) -> bool:
        """min(z, y) == z (t is Min) or max(z, y) == z (t is Max), provably."""
        lo, hi = self.bound_lin(self.lin(z).add(self.lin(y), -1))
        return hi <= 0 if t is Min else lo >= 0

    def fuse(self, lin: LinearForm) -> LinearForm:
        """``(x // c) * c * k + (x % c) * k -> x * k`` and
        ``(x // c % d) * c * k + (x % c) * k -> (x % (c * d)) * k`` (undoing a fused index's split)."""
        for t, k in list(lin.terms.items()):
            if type(t) is not FloorMod or type(t.b) is not IntImm:
                continue
            c = t.b.value
            if lin.terms.get(FloorDiv(t.a, t.b)) == k * c:
                rest = dict(lin.terms)
                del rest[t], rest[FloorDiv(t.a, t.b)]
                return self.fuse(LinearForm(lin.dtype, rest, lin.const).add(self.lin(t.a), k))
            for u, ku in lin.terms.items():
                if ku == k * c and type(u) is FloorMod and type(u.b) is IntImm and u.a == FloorDiv(t.a, t.b):
                    rest = dict(lin.terms)
                    del rest[t], rest[u]
                    merged = self.atom(FloorMod(t.a, int_imm(c * u.b.value, t.b.dtype)))
                    return self.fuse(LinearForm(lin.dtype, rest, lin.const).add(merged, k))
        return lin

    def floor_op(self, op: type, la: LinearForm, lb: LinearForm) -> LinearForm:
        """floordiv / floormod of linear forms (see the module docstring for the rules)."""
        dt = la.dtype
        if not lb.is_const or lb.const <= 0:
            if la.is_const and lb.is_const and lb.const != 0:
                q = la.const // lb.const
                return LinearForm(dt, {}, q if op is FloorDiv else la.const - q * lb.const)
            return self.atom(op(la.to_expr(), lb.to_expr()))
        c = lb.const
        if c == 1:
            return la if op is FloorDiv else LinearForm(dt)
        quo = LinearForm(dt, {t: k // c for t, k in la.terms.items() if k % c == 0}, la.const // c)
        rem = LinearForm(dt, {t: k for t, k in la.terms.items() if k % c != 0}, la.const % c)
        if op is FloorMod:
            quo = LinearForm(dt)
        if rem.is_const:
            return quo.add(LinearForm(dt, {}, rem.const if op is FloorMod else 0))
        g = math.gcd(c, rem.content())
        if g > 1:  # (g*y) // (g*d) == y // d and (g*y) % (g*d) == (y % d) * g
            rem, c = LinearForm(dt, {t: k // g for t, k in rem.terms.items()}, rem.const // g), c // g
        lo, hi = self.bound_lin(rem)
        if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
            q = lo // c
            res = LinearForm(dt, {}, q) if op is FloorDiv else rem.add(LinearForm(dt, {}, -q * c))
        elif len(rem.terms) == 1 and next(iter(rem.terms.values())) == 1 and self._nested(op, rem, c):
            inner, a = self._nested(op, rem, c)
            inner = self.lin(inner)
            inner = inner.add(LinearForm(dt, {}, rem.const * (a if op is FloorDiv else 1)))
            res = self.floor_op(op, inner, LinearForm(dt, {}, a * c if op is FloorDiv else c))
        else:
            res = self.atom(op(rem.to_expr(), int_imm(c, dt)))
        return quo.add(res if op is FloorDiv else res.scale(g))

    @staticmethod
    def _nested(op: type, rem: LinearForm, c: int) -> tuple[PrimExpr, int] | None:
        """(x // a) // c -> x // (a*c);  (x % a) % c -> x % c when c divides a."""
        t = next(iter(rem.terms))
        if type(t) is op and type(t.b) is IntImm and t.b.value > 0 and (op is FloorDiv or t.b.value % c == 0):
            return t.a, t.b.value
        return None

    # -- general expressions ------------------------------------------------------------
    def _child(self, n: Any) -> Any:
        return self.simplify(n) if isinstance(n, PrimExpr) else n

    def simplify(self, e: PrimExpr) -> PrimExpr:
        if not isinstance(e, PrimExpr):
            raise TypeError(f"simplify expects an expression, got {type(e).__name__} {e!r}")
        if _is_int(e):
            return self.lin(e).to_expr()
        t = type(e)
        if issubclass(t, CmpOp):
            return self.compare(e)
        if t in (And, Or, Not):
            return self.logical(e)
        if t is Select:
            cond = self.simplify(e.condition)
            if type(cond) is IntImm:
                return self.simplify(e.true_value if cond.value else e.false_value)
            a, b = self.simplify(e.true_value), self.simplify(e.false_value)
            return a if a == b else Select(cond, a, b)
        if t is Cast:
            return self.fold_cast(e.dtype, self.simplify(e.value))
        e = map_children(e, self._child)
        if t in _FLOAT_FOLD:
            a, b = e.a, e.b
            if type(a) is FloatImm and type(b) is FloatImm and not (t in (Div, FloorDiv, FloorMod) and b.value == 0):
                return FloatImm(e.dtype, _round_float(_FLOAT_FOLD[t](a.value, b.value), e.dtype))
            if t in (Add, Sub, Mul) and e.dtype.lanes > 1:
                return self.vector(e)
        return e

    def vector(self, e: PrimExpr) -> PrimExpr:
        """Ramp/Broadcast arithmetic: Ramp(b, s) + Broadcast(x) -> Ramp(b + x, s), etc."""
        t, a, b = type(e), e.a, e.b
        if type(a) is Broadcast and type(b) is Broadcast:
            return Broadcast(self.simplify(t(a.value, b.value)), a.lanes)
        if t in (Add, Sub) and type(a) is Ramp and type(b) in (Ramp, Broadcast):
            bs, st = (b.base, b.stride) if type(b) is Ramp else (b.value, None)
            stride = a.stride if st is None else self.simplify(t(a.stride, st))
            return Ramp(self.simplify(t(a.base, bs)), stride, a.lanes)
        if t is Add and type(a) is Broadcast and type(b) is Ramp:
            return Ramp(self.simplify(a.value + b.base), b.stride, b.lanes)
        if t is Mul and {type(a), type(b)} == {Ramp, Broadcast}:
            r, s = (a, b.value) if type(a) is Ramp else (b, a.value)
            return Ramp(self.simplify(r.base * s), self.simplify(r.stride * s), r.lanes)
        return e

    def fold_cast(self, dtype: DataType, v: PrimExpr) -> PrimExpr:
        if v.dtype == dtype:
            return v
        if dtype.lanes == 1 and type(v) in (IntImm, FloatImm):
            value = v.value
            if dtype.is_float:
                return FloatImm(dtype, _round_float(float(value), dtype))
            if dtype.is_bool:
                return _bool(value != 0)
            if math.isfinite(value) and (dtype.is_integer):
                return int_imm(int(value), dtype)  # int() truncates toward zero
        return Cast(dtype, v)

    def compare(self, e: CmpOp) -> PrimExpr:
        t = type(e)
        a, b = self.simplify(e.a), self.simplify(e.b)
        if type(a) in (IntImm, FloatImm) and type(b) in (IntImm, FloatImm):
            return _bool(_CMP_FOLD[t](a.value, b.value))
        if not _is_int(a):
            return t(a, b)
        # canonical form: d op 0 with op in LT, LE, EQ, NE
        d = self.lin(a).add(self.lin(b), -1)
        if t in (GT, GE):
            d, t = d.scale(-1), (LT if t is GT else LE)
        lo, hi = self.bound_lin(d)
        if t is LT and (hi < 0 or lo >= 0):
            return _bool(hi < 0)
        if t is LE and (hi <= 0 or lo > 0):
            return _bool(hi <= 0)
        if t in (EQ, NE) and (lo > 0 or hi < 0 or lo == hi == 0):
            return _bool((lo == hi == 0) == (t is EQ))
        g = math.gcd(*d.terms.values())
        if g > 1:
            terms = {k: c // g for k, c in d.terms.items()}
            if t is LT:  # g*y + c < 0  <=>  y < ceil(-c/g)
                d = LinearForm(d.dtype, terms, d.const // g)
            elif t is LE:  # g*y + c <= 0  <=>  y <= floor(-c/g)
                d = LinearForm(d.dtype, terms, -((-d.const) // g))
            elif d.const % g:
                return _bool(t is NE)
            else:
                d = LinearForm(d.dtype, terms, d.const // g)
        if t in (EQ, NE) and all(c < 0 for c in d.terms.values()):
            d = d.scale(-1)
        left = LinearForm(d.dtype, {k: c for k, c in d.terms.items() if c > 0})
        right = LinearForm(d.dtype, {k: -c for k, c in d.terms.items() if c < 0})
        if left.is_const:
            left.const = d.const
        else:
            right.const = -d.const
        return t(left.to_expr(), right.to_expr())

    def logical(self, e: PrimExpr) -> PrimExpr:
        if type(e) is Not:
            a = self.simplify(e.a)
            if type(a) is IntImm:
                return _bool(not a.value)
            if type(a) is Not:
                return a.a
            if type(a) in _FLIP and _is_int(a.a):
                return self.simplify(_FLIP[type(a)](a.b, a.a) if type(a) in (LT, LE) else _FLIP[type(a)](a.a, a.b))
            return Not(a)
        a, b = self.simplify(e.a), self.simplify(e.b)
        absorbing = 0 if type(e) is And else 1
        for x, y in ((a, b), (b, a)):
            if type(x) is IntImm and x.dtype.lanes == 1:
                return _bool(bool(absorbing)) if x.value == absorbing else y
        return a if a == b else type(e)(a, b)


# -- public functions ---------------------------------------------------------------------


def simplify(expr: PrimExpr, dom_map: dict | None = None) -> PrimExpr:
    """Canonicalize ``expr`` (see the module docstring); ``dom_map`` maps a Var to its Range."""
    return Simplifier(dom_map).simplify(expr)


def simplify_all(exprs: list[PrimExpr] | tuple[PrimExpr, ...], dom_map: dict | None = None) -> list[PrimExpr]:
    """``[simplify(e, dom_map) for e in exprs]`` in one context: a sub-expression the expressions
    share (the fused index of a block's bindings, say) is linearized once."""
    s = Simplifier(dom_map)
    return [s.simplify(e) for e in exprs]


def const_int_bound(expr: PrimExpr, dom_map: dict | None = None) -> Bound:
    """Inclusive (lo, hi) Python-int bounds of an integer or bool expression; -inf/+inf when unknown.

    ``const_int_bound(i * 4 + 3, {i: Range(0, 8)}) == (3, 31)``
    """
    if not (expr.dtype.is_integer or expr.dtype.is_bool) or expr.dtype.lanes != 1:
        raise TypeError(f"const_int_bound needs a scalar integer expression, got {expr.dtype} ({expr})")
    s = Simplifier(dom_map)
    if expr.dtype.is_bool:
        v = s.simplify(expr)
        return (v.value, v.value) if type(v) is IntImm else (0, 1)
    return s.bound_lin(s.lin(expr))


def can_prove(cond: PrimExpr, dom_map: dict | None = None) -> bool:
    """True when ``cond`` simplifies to true for every value of the variables in ``dom_map``.

    ``can_prove(i * 4 + j < 64, {i: Range(0, 16), j: Range(0, 4)})`` is True.
    """
    if not cond.dtype.is_bool:
        raise TypeError(f"can_prove needs a bool condition, got {cond.dtype} ({cond})")
    v = Simplifier(dom_map).simplify(cond)
    return type(v) is IntImm and v.value != 0


def can_prove_equal(a: PrimExpr, b: PrimExpr, dom_map: dict | None = None) -> bool:
    """True when ``a`` and ``b`` provably have the same value: ``can_prove_equal((x//4)*4 + x%4, x)``."""
    s = Simplifier(dom_map)
    if _is_int(a) and a.dtype == b.dtype:
        return s.bound_lin(s.lin(a).add(s.lin(b), -1)) == (0, 0)
    return s.simplify(a) == s.simplify(b)
