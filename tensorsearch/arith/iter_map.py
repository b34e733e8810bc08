"""Quasi-affine iterator maps (TVM's ``arith.detect_iter_map``; paper section 3.3, "affine binding").

An index expression over loop iterators is *quasi-affine* when it is a sum of *splits* of
*marks*: a mark is an input iterator or a fusion of splits of other marks
(``i * 8 + j`` with ``j`` in [0, 8) is the fused mark of extent ``8 * extent(i)``), and a split
takes the digits ``lower_factor ... lower_factor * extent`` of its mark, scaled::

    IterSplit(mark, lower_factor, extent, scale)  ==  (mark // lower_factor) % extent * scale

``detect_iter_map`` rewrites each index to at most one split plus a constant, and then checks
that the splits of every mark tile it: with ``check_level="bijective"`` every input iterator of
extent > 1 is used exactly once and the map is one-to-one and onto; with ``"surjective"``
the splits may not overlap but need not use every digit (a padded fused iterator, whose extent
is cut by a predicate such as ``io * 4 + ii < 10``, is accepted there)::

    r = detect_iter_map([i // 4, i % 4], {i: Range(0, 16)})          # r.errors == []
    r = detect_iter_map([i, i * 2], {i: Range(0, 16)})               # i is used twice
    r = detect_iter_map([i + j], {i: Range(0, 4), j: Range(0, 4)})   # i + j overlaps

``subspace_divide`` splits each index into a part over the outer iterators and a part over
a set of inner iterators, ``index == outer * inner_extent + inner`` (what ``blockize`` needs);
``affine_binding_error`` says why a BlockRealize's bindings are not affine (None when they are).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ..ir.dtype import bool_
from ..ir.expr import (
    GE,
    GT,
    LE,
    LT,
    Add,
    And,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    PrimExpr,
    Range,
    Sub,
    Var,
)
from ..ir.functor import children, free_vars
from ..ir.identity_cache import MISSING, IdentityCache
from .simplify import Simplifier, int_imm, simplify, simplify_all

# ---------------------------------------------------------------------------------------
# the structured form


@dataclass(frozen=True, eq=False)
class IterMark:
    """An iterator of ``extent`` values: an input Var (counting ``var - min``) or a fused IterSum.

    Marks compare by identity: two uses of the same fused expression share one mark.
    """

    source: Var | IterSum
    extent: int
    min: int = 0  # for a Var source: its minimum (the mark's value is var - min)

    def __str__(self) -> str:
        return str(self.source) if isinstance(self.source, Var) else f"({_sum_text(self.source)})"


@dataclass(frozen=True)
class IterSplit:
    """``(source // lower_factor) % extent * scale``."""

    source: IterMark
    lower_factor: int
    extent: int
    scale: int

    def key(self) -> tuple[int, int, int]:
        return id(self.source), self.lower_factor, self.extent


@dataclass(frozen=True)
class IterSum:
    """``sum(args) + base``; ``base`` is an expression free of input iterators."""

    args: tuple[IterSplit, ...]
    base: PrimExpr

    @property
    def extent(self) -> int:
        """The number of values the iterator part takes (1 for a constant)."""
        return math.prod(a.extent for a in self.args) if self.args else 1


def _sum_text(s: IterSum) -> str:
    return str(normalize_iter_map_to_expr(s))


def _split_expr(s: IterSplit) -> PrimExpr:
    mark = s.source
    if isinstance(mark.source, Var):
        v = mark.source
        e: PrimExpr = v if mark.min == 0 else v - mark.min
    else:
        e = _sum_expr(mark.source)
    dt = e.dtype
    if s.lower_factor != 1:
        e = FloorDiv(e, IntImm(dt, s.lower_factor))
    if s.lower_factor * s.extent < mark.extent:
        e = FloorMod(e, IntImm(dt, s.extent))
    if s.scale != 1:
        e = Mul(e, IntImm(dt, s.scale))
    return e


def _sum_expr(s: IterSum) -> PrimExpr:
    e: PrimExpr | None = None
    for a in s.args:
        x = _split_expr(a)
        e = x if e is None else Add(e, x)
    if e is None:
        return s.base
    if isinstance(s.base, IntImm) and s.base.value == 0:
        return e
    return Add(e, s.base)


def normalize_iter_map_to_expr(expr: IterSum | IterSplit | IterMark) -> PrimExpr:
    """The (simplified) expression that a structured iterator form stands for."""
    if isinstance(expr, IterSplit):
        return simplify(_split_expr(expr))
    if isinstance(expr, IterMark):
        return simplify(_split_expr(IterSplit(expr, 1, expr.extent, 1)))
    return simplify(_sum_expr(expr))


@dataclass
class IterMapResult:
    """``errors`` (sentences; empty on success) and, on success, one IterSum per index with at most one arg."""

    errors: list[str] = field(default_factory=list)
    indices: list[IterSum] = field(default_factory=list)
    padding_predicate: PrimExpr | None = None

    def __bool__(self) -> bool:
        return not self.errors


class _Fail(Exception):
    pass


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _const_value(e: PrimExpr) -> int | None:
    """The value of ``e`` when it simplifies to a constant."""
    return e.value if type(e) is IntImm else _const(simplify(e))


# ---------------------------------------------------------------------------------------
# rewriting expressions to IterSums


class _Rewriter:
    def __init__(self, input_iters: dict[Var, Range], simplify_trivial: bool) -> None:
        self.input_iters = input_iters
        self.simplify_trivial = simplify_trivial
        self.bounds: dict[Var, tuple[int, int]] = {}  # var -> (min, extent)
        for v, r in input_iters.items():
            mn, ext = _const_value(r.min), _const_value(r.extent)
            if mn is None or ext is None:
                raise _Fail(f"iterator {v.name} has a non-constant range [{r.min}, {r.min} + {r.extent})")
            if ext < 1:
                raise _Fail(f"iterator {v.name} has an empty range (extent {ext})")
            self.bounds[v] = (mn, ext)
        self.marks: dict[Var, IterMark] = {}
        self.fused: dict[tuple, IterMark] = {}  # normalized args of a fusion -> its mark
        self.padded: list[tuple[IterMark, PrimExpr]] = []  # marks cut by the predicate
        self.uses: dict[int, tuple[PrimExpr, bool]] = {}  # id -> (expression kept alive, uses an iterator)

    def make_marks(self) -> None:
        self.uses.clear()
        for v, (mn, ext) in self.bounds.items():
            self.marks[v] = IterMark(v, ext, mn)

    def zero(self, dtype: object) -> PrimExpr:
        return IntImm(dtype, 0)  # type: ignore[arg-type]

    # -- sums ---------------------------------------------------------------------------
    def add(self, a: IterSum, b: IterSum, sign: int = 1) -> IterSum:
        merged: dict[tuple, IterSplit] = {}
        for s in a.args:
            merged[s.key()] = s
        for s in b.args:
            old = merged.get(s.key())
            scale = s.scale * sign + (old.scale if old is not None else 0)
            merged[s.key()] = IterSplit(s.source, s.lower_factor, s.extent, scale)
        args = tuple(s for s in merged.values() if s.scale != 0)
        x, y = a.base, b.base
        if type(x) is IntImm and type(y) is IntImm and x.dtype == y.dtype:
            return IterSum(args, int_imm(x.value + sign * y.value, x.dtype))
        return IterSum(args, simplify(x + y if sign > 0 else x - y))

    def scale(self, a: IterSum, c: int) -> IterSum:
        args = tuple(IterSplit(s.source, s.lower_factor, s.extent, s.scale * c) for s in a.args) if c else ()
        x = a.base
        if type(x) is IntImm:
            return IterSum(args, int_imm(x.value * c, x.dtype))
        return IterSum(args, simplify(x * c))

    def uses_iterators(self, e: PrimExpr) -> bool:
        """Whether ``e`` uses an input iterator (remembered per sub-expression, which the rewrite
        visits top-down: asking free_vars at every level would walk each one again)."""
        hit = self.uses.get(id(e))
        if hit is None:
            t = type(e)
            if t is Var:
                found = e in self.marks
            elif t is IntImm:
                found = False
            else:
                found = any(self.uses_iterators(c) for c in children(e) if isinstance(c, PrimExpr))
            hit = self.uses[id(e)] = (e, found)
        return hit[1]

    def visit(self, e: PrimExpr) -> IterSum:
        t = type(e)
        if t is IntImm:
            return IterSum((), e)
        if t is Var:
            mark = self.marks.get(e)
            if mark is None:
                return IterSum((), e)  # a symbolic constant
            if mark.extent == 1 and self.simplify_trivial:
                return IterSum((), IntImm(e.dtype, mark.min))
            return IterSum((IterSplit(mark, 1, mark.extent, 1),), IntImm(e.dtype, mark.min))
        if not self.uses_iterators(e):
            return IterSum((), e)
        if t is Add or t is Sub:
            return self.add(self.visit(e.a), self.visit(e.b), 1 if t is Add else -1)
        if t is Mul:
            a, b = self.visit(e.a), self.visit(e.b)
            if not b.args and _const(b.base) is not None:
                return self.scale(a, b.base.value)
            if not a.args and _const(a.base) is not None:
                return self.scale(b, a.base.value)
            if a.args and b.args:
                raise _Fail(f"{e} multiplies two iterator expressions, which is not affine")
            raise _Fail(f"{e} multiplies an iterator by the non-constant {b.base if a.args else a.base}")
        if t is FloorDiv or t is FloorMod:
            return self.floor_op(e, t)
        raise _Fail(f"{e} is not a quasi-affine expression of the iterators ({t.__name__} is not supported)")

    def floor_op(self, e: PrimExpr, t: type) -> IterSum:
        a, b = self.visit(e.a), self.visit(e.b)
        c = _const(b.base) if not b.args else None
        if c is None or c <= 0:
            raise _Fail(f"{e} divides by {e.b}, which is not a positive constant")
        dt = e.dtype
        if not a.args:
            return IterSum((), simplify(t(a.base, b.base)))
        base = _const(a.base)
        if base is None:
            raise _Fail(f"{e} divides an iterator expression with the symbolic offset {a.base}")
        split = self.fuse(list(a.args), e.a)
        if base % c:
            raise _Fail(f"{e}: the offset {base} of {e.a} is not a multiple of the divisor {c}")
        if t is FloorDiv:
            res = self.split_div(split, c, e)
            return IterSum((res,) if res is not None else (), IntImm(dt, base // c))
        res = self.split_mod(split, c, e)
        return IterSum((res,) if res is not None else (), IntImm(dt, 0))

    def split_div(self, s: IterSplit, c: int, e: PrimExpr) -> IterSplit | None:
        if s.scale % c == 0:
            return IterSplit(s.source, s.lower_factor, s.extent, s.scale // c)
        if c % s.scale:
            raise _Fail(f"{e}: the divisor {c} and the stride {s.scale} do not divide each other")
        k = c // s.scale
        if s.extent % k == 0:
            return IterSplit(s.source, s.lower_factor * k, s.extent // k, 1)
        if s.extent <= k:
            return None  # always 0
        if s.lower_factor * s.extent == s.source.extent:  # the top digits of a padded mark
            return IterSplit(s.source, s.lower_factor * k, -(-s.extent // k), 1)
        raise _Fail(f"{e}: the extent {s.extent} of {_split_expr(s)} is not divisible by {k}")

    def split_mod(self, s: IterSplit, c: int, e: PrimExpr) -> IterSplit | None:
        if s.scale % c == 0:
            return None  # always 0
        if c % s.scale:
            raise _Fail(f"{e}: the divisor {c} and the stride {s.scale} do not divide each other")
        k = c // s.scale
        if s.extent <= k:
            return s
        if s.extent % k == 0 or s.lower_factor * s.extent == s.source.extent:
            return IterSplit(s.source, s.lower_factor, k, s.scale)
        raise _Fail(f"{e}: the extent {s.extent} of {_split_expr(s)} is not divisible by {k}")

    # -- fusion -------------------------------------------------------------------------
    def chain(self, args: list[IterSplit], what: object) -> tuple[list[IterSplit], int]:
        """Order ``args`` by increasing scale so each scale is the previous scale times extent."""
        for a in args:
            if a.scale <= 0:
                raise _Fail(f"{what} has the negative or zero coefficient {a.scale} on {_split_expr(a)}")
        units = [a for a in args if a.extent == 1]
        rest = [a for a in args if a.extent != 1]
        if not rest:
            return sorted(units, key=lambda a: a.scale), min(a.scale for a in units)
        base_scale = min(a.scale for a in rest)
        ordered: list[IterSplit] = []
        expected = base_scale
        while rest:
            hits = [a for a in rest if a.scale == expected]
            if not hits:
                terms = " + ".join(str(_split_expr(a)) for a in rest)
                raise _Fail(
                    f"{what} is not a fusion of iterators: the terms {terms} overlap with or leave gaps between the others"
                )
            if len(hits) > 1:
                terms = " and ".join(str(_split_expr(a)) for a in hits)
                raise _Fail(f"{what} is not a fusion of iterators: {terms} have the same stride {expected} and overlap")
            ordered.append(hits[0])
            rest.remove(hits[0])
            expected *= hits[0].extent
        for u in units:  # unit iterators are always 0: keep them where their stride fits
            pos = next((i for i, a in enumerate(ordered) if a.scale >= u.scale), len(ordered))
            ordered.insert(pos, u)
        return ordered, base_scale

    def fuse(self, args: list[IterSplit], what: object) -> IterSplit:
        """One split equal to ``sum(args)`` (a split of a new or existing fused mark)."""
        ordered, base_scale = self.chain(args, what)
        if len(ordered) == 1:
            return ordered[0]
        marks = {id(a.source) for a in ordered}
        if len(marks) == 1:  # digits of one mark: contiguous ones are a single split
            lf, ok = ordered[0].lower_factor, True
            for a in ordered:
                ok = ok and a.lower_factor == lf
                lf *= a.extent
            if ok:
                ext = math.prod(a.extent for a in ordered)
                return IterSplit(ordered[0].source, ordered[0].lower_factor, ext, base_scale)
        normalized = tuple(
            IterSplit(a.source, a.lower_factor, a.extent, a.scale // base_scale if a.extent != 1 else 1)
            for a in reversed(ordered)
        )
        key = tuple((id(a.source), a.lower_factor, a.extent, a.scale) for a in normalized)
        mark = self.fused.get(key)
        if mark is None:
            dt = _dtype_of(normalized)
            mark = IterMark(IterSum(normalized, IntImm(dt, 0)), math.prod(a.extent for a in normalized))
            self.fused[key] = mark
        return IterSplit(mark, 1, mark.extent, base_scale)

    # -- predicates ---------------------------------------------------------------------
    def constrain(self, predicate: PrimExpr) -> None:
        conjuncts = _conjuncts(simplify(predicate))
        conjuncts.sort(key=lambda c: len([v for v in free_vars(c) if v in self.bounds]))
        for cond in conjuncts:  # single-iterator bounds first: they narrow the iterator itself
            if isinstance(cond, IntImm) and cond.value:
                continue
            if len([v for v in free_vars(cond) if v in self.bounds]) == 1:
                self.bound_var(cond)
        self.make_marks()
        for cond in conjuncts:
            if len([v for v in free_vars(cond) if v in self.bounds]) > 1:
                self.bound_sum(cond)

    def upper_form(self, cond: PrimExpr) -> tuple[IterSum, int]:
        """``cond`` as ``sum < bound`` with positive coefficients."""
        t = type(cond)
        if t not in (LT, LE, GT, GE):
            raise _Fail(f"the predicate {cond} is not a conjunction of comparisons")
        a, b = (cond.a, cond.b) if t in (LT, LE) else (cond.b, cond.a)
        diff = self.visit(simplify(a - b))  # diff < 0 (or <= 0)
        c = _const(diff.base)
        if c is None:
            raise _Fail(f"the predicate {cond} compares with the symbolic bound {diff.base}")
        if all(s.scale < 0 for s in diff.args):
            raise _Fail(f"the predicate {cond} bounds the iterators from below, which is not supported")
        return IterSum(diff.args, IntImm(diff.base.dtype, 0)), -c + (1 if t in (LE, GE) else 0)

    def bound_var(self, cond: PrimExpr) -> None:
        (v,) = [v for v in free_vars(cond) if v in self.bounds]
        saved, self.marks = self.marks, {v: IterMark(v, self.bounds[v][1], self.bounds[v][0])}
        saved_uses, self.uses = self.uses, {}  # what uses an iterator depends on the marks
        try:
            s, bound = self.upper_form(cond)
        finally:
            self.marks, self.uses = saved, saved_uses
        mn, ext = self.bounds[v]
        if len(s.args) != 1 or s.args[0].lower_factor != 1:
            raise _Fail(f"the predicate {cond} is not a bound on iterator {v.name}")
        # scale * (v - mn) < bound  <=>  v - mn < ceil(bound / scale)
        new_ext = min(ext, max(0, -(-bound // s.args[0].scale)))
        if new_ext < 1:
            raise _Fail(f"the predicate {cond} leaves iterator {v.name} no value")
        self.bounds[v] = (mn, new_ext)

    def bound_sum(self, cond: PrimExpr) -> None:
        s, bound = self.upper_form(cond)
        split = self.fuse(list(s.args), cond)
        mark = split.source
        if split.lower_factor != 1 or split.extent != mark.extent or isinstance(mark.source, Var):
            raise _Fail(f"the predicate {cond} does not bound a fused iterator")
        limit = -(-bound // split.scale)
        if limit >= mark.extent:
            return
        if limit < 1:
            raise _Fail(f"the predicate {cond} is never true")
        key = next(k for k, m in self.fused.items() if m is mark)
        new = IterMark(mark.source, limit)
        self.fused[key] = new
        self.padded.append((new, cond))


def _dtype_of(args: tuple[IterSplit, ...]) -> object:
    m = args[0].source
    while not isinstance(m.source, Var):
        m = m.source.args[0].source
    return m.source.dtype


def _conjuncts(e: PrimExpr) -> list[PrimExpr]:
    if isinstance(e, And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


# ---------------------------------------------------------------------------------------
# checking that the splits tile their marks


def _check_mapping(rw: _Rewriter, indices: list[IterSum], level: str, input_iters: dict[Var, Range]) -> list[str]:
    uses: dict[int, list[IterSplit]] = {}
    marks: dict[int, IterMark] = {}
    order: list[IterMark] = []
    seen: set[int] = set()

    def dfs(m: IterMark) -> None:
        if id(m) in seen:
            return
        seen.add(id(m))
        marks[id(m)] = m
        if isinstance(m.source, IterSum):
            for a in m.source.args:
                dfs(a.source)
        order.append(m)

    for idx in indices:
        for s in idx.args:
            uses.setdefault(id(s.source), []).append(s)
            dfs(s.source)
    errors: list[str] = []
    for m in reversed(order):  # parents before children
        splits = [s for s in uses.get(id(m), []) if s.extent != 1]
        err = _check_mark(m, splits, level)
        if err:
            errors.append(err)
            break
        if isinstance(m.source, IterSum):
            for a in m.source.args:
                uses.setdefault(id(a.source), []).append(a)
    if errors:
        return errors
    for m, cond in rw.padded:
        if id(m) not in seen:
            return [f"the predicate {cond} bounds the fused iterator {m}, which no index uses as a whole"]
    if level == "bijective":
        used = {m.source for m in marks.values() if isinstance(m.source, Var)}
        for v in input_iters:
            ext = rw.bounds[v][1] if v in rw.bounds else 1
            if ext > 1 and v not in used:
                return [
                    f"iterator {v.name} (extent {ext}) is not used by any index; a bijective map uses every iterator"
                ]
    return []


def _check_mark(m: IterMark, splits: list[IterSplit], level: str) -> str | None:
    if not splits:
        if level == "bijective" and m.extent > 1:
            return f"iterator {m} is not used by any index; a bijective map uses every iterator"
        return None
    splits = sorted(splits, key=lambda s: (s.lower_factor, s.extent))
    for a, b in itertools.pairwise(splits):
        if b.lower_factor < a.lower_factor * a.extent:
            if b.lower_factor == a.lower_factor and a.extent == b.extent:
                return f"iterator {m} is used twice (by {_split_expr(a)} and by {_split_expr(b)}); each value must be used once"
            return f"{_split_expr(a)} and {_split_expr(b)} overlap: they use the same values of iterator {m}"
    last = splits[-1]
    if last.lower_factor * last.extent > m.extent and last.extent != -(-m.extent // last.lower_factor):
        return f"{_split_expr(last)} goes beyond the extent {m.extent} of iterator {m}"
    if level == "bijective":
        lf = 1
        for s in splits:
            if s.lower_factor != lf:
                return (
                    f"the indices use only part of iterator {m} ({_split_expr(s)} starts at factor {s.lower_factor}, "
                    f"expected {lf}); a bijective map uses all of it"
                )
            lf *= s.extent
        if lf != m.extent:
            return (
                f"the indices cover {lf} values of iterator {m} of extent {m.extent}; a bijective map covers it exactly"
            )
    return None


# ---------------------------------------------------------------------------------------
# public functions


def _detect(
    indices: list[PrimExpr],
    input_iters: dict[Var, Range],
    predicate: PrimExpr | bool,
    check_level: str,
    simplify_trivial_iterators: bool,
) -> tuple[IterMapResult, _Rewriter | None]:
    if check_level not in ("bijective", "surjective"):
        raise ValueError(f"check_level must be 'bijective' or 'surjective', got {check_level!r}")
    if isinstance(predicate, bool):
        predicate = IntImm(bool_, int(predicate))
    try:
        rw = _Rewriter(input_iters, simplify_trivial_iterators)
        rw.constrain(predicate)
        out: list[IterSum] = []
        for e, plain in zip(indices, simplify_all(indices), strict=True):  # one context: shared parts once
            s = rw.visit(plain)
            if len(s.args) > 1:
                s = IterSum((rw.fuse(list(s.args), e),), s.base)
            elif s.args and s.args[0].scale < 0:
                raise _Fail(f"{e} has the negative coefficient {s.args[0].scale}")
            out.append(s)
    except _Fail as err:
        return IterMapResult([str(err)]), None
    errors = _check_mapping(rw, out, check_level, input_iters)
    if errors:
        return IterMapResult(errors), rw
    pad = None
    for _, cond in rw.padded:
        pad = cond if pad is None else And(pad, cond)
    return IterMapResult([], out, pad), rw


def detect_iter_map(
    indices: list[PrimExpr],
    input_iters: dict[Var, Range],
    predicate: PrimExpr | bool = True,
    check_level: str = "bijective",
    simplify_trivial_iterators: bool = True,
) -> IterMapResult:
    """Whether ``indices`` are a quasi-affine map of ``input_iters`` (under ``predicate``).

    ``check_level``: "bijective" (every iterator of extent > 1 used exactly once, every digit
    covered) or "surjective" (no value used twice; padding through the predicate allowed).
    ``simplify_trivial_iterators``: iterators of extent 1 become their minimum.
    """
    return _detect(list(indices), dict(input_iters), predicate, check_level, simplify_trivial_iterators)[0]


_AFFINE_MEMO = IdentityCache(1024)  # a search's candidates find their answers among the last few hundred


def affine_binding_error(realize: object, loops: dict[Var, Range]) -> str | None:
    """None when ``realize.iter_values`` are an affine binding of ``loops`` under ``realize.predicate``.

    Affine: a surjective quasi-affine map with stride 1 whose extent is the block iterator's
    domain extent.  Otherwise a sentence naming the block and the iterator.

    The answer is remembered by what it depends on: the identity of the bindings, the predicate
    and the block's iterators, and the loops' variables and bounds. An affine answer holds for
    any order of the loops and any block name (a reason names the block and follows the loop
    order, so it is reused only for the same). Schedule primitives ask again for every loop above
    a block they change, and one that rebuilds a block without touching those
    (decompose_reduction, say) finds the answer.
    """
    block = realize.block  # type: ignore[attr-defined]
    try:
        ordered = tuple((v, r.min, r.extent) for v, r in loops.items())
    except AttributeError:  # a domain that is not a Range
        return uncached_affine_binding_error(realize, loops)
    parts = (realize.iter_values, realize.predicate, block.iter_vars)  # type: ignore[attr-defined]
    hit = _AFFINE_MEMO.get(parts, frozenset(ordered))
    if hit is not MISSING and (hit[2] is None or hit[:2] == (ordered, block.name)):
        return hit[2]
    reason = uncached_affine_binding_error(realize, loops)
    _AFFINE_MEMO.put(parts, frozenset(ordered), (ordered, block.name, reason))
    return reason


def _tiled_bindings(realize: object, loops: dict[Var, Range]) -> bool:
    """A quick sufficient test for an affine binding: with no predicate and loops and iterators
    from 0, each binding a sum of loop variables no other binding uses whose coefficients are
    mixed-radix digits (the smallest 1, each next the previous times its loop's extent) spanning
    the iterator's extent, as split and reorder leave a tiling: ``vi = i0 * 32 + i1 * 4 + i2``.
    Anything else (fused loops' ``//`` and ``%``, predicates) goes to the full detection."""
    pred = realize.predicate  # type: ignore[attr-defined]
    if type(pred) is not IntImm or pred.value != 1:
        return False
    extents: dict[Var, int] = {}
    for v, r in loops.items():
        if type(r.min) is not IntImm or r.min.value != 0 or type(r.extent) is not IntImm:
            return False
        extents[v] = r.extent.value
    used: set[Var] = set()
    forms = Simplifier()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):  # type: ignore[attr-defined]
        dom = iv.dom
        if type(dom.min) is not IntImm or dom.min.value != 0 or type(dom.extent) is not IntImm:
            return False
        if not value.dtype.is_integer or value.dtype.lanes != 1:
            return False
        lin = forms.lin(value)
        if lin.const != 0:
            return False
        digits = []
        for t, c in lin.terms.items():
            if type(t) is not Var or t not in extents or t in used or c <= 0:
                return False
            used.add(t)
            if extents[t] != 1:
                digits.append((c, extents[t]))
        span = 1
        for c, ext in sorted(digits):
            if c != span:
                return False
            span *= ext
        if span != dom.extent.value:
            return False
    return True


def uncached_affine_binding_error(realize: object, loops: dict[Var, Range]) -> str | None:
    """``affine_binding_error`` worked out again, without its memo."""
    block = realize.block  # type: ignore[attr-defined]
    if _tiled_bindings(realize, loops):
        return None
    res = detect_iter_map(list(realize.iter_values), loops, realize.predicate, "surjective")  # type: ignore[attr-defined]
    if res.errors:
        return f"the bindings of block {block.name} are not an affine map of the loops: {res.errors[0]}"
    for iv, value, s in zip(block.iter_vars, realize.iter_values, res.indices, strict=True):  # type: ignore[attr-defined]
        if s.args and s.args[0].scale != 1:
            return (
                f"block {block.name} binds iterator {iv.var.name} to {value}, which has stride {s.args[0].scale}, not 1"
            )
        dom_ext = _const(simplify(iv.dom.extent))
        if dom_ext is not None and s.extent != dom_ext:
            return (
                f"block {block.name} binds iterator {iv.var.name} of extent {dom_ext} to {value}, "
                f"which takes {s.extent} values"
            )
    return None


@dataclass
class SubspaceDivision:
    """``parts[k] == (outer_expr, outer_extent, inner_expr, inner_extent)`` with
    ``index_k == outer_expr * inner_extent + inner_expr``; ``parts`` is None and ``error`` says
    why when an index cannot be divided."""

    parts: list[tuple[PrimExpr, int, PrimExpr, int]] | None
    outer_predicate: PrimExpr | None = None
    inner_predicate: PrimExpr | None = None
    error: str | None = None
    index: int | None = None  # the index that failed


class _Divider:
    def __init__(self, sub_iters: set[Var]) -> None:
        self.sub = sub_iters
        self.memo: dict[int, tuple[PrimExpr, int, PrimExpr, int]] = {}

    def mark(self, m: IterMark) -> tuple[PrimExpr, int, PrimExpr, int]:
        """(outer, n_outer, inner, n_inner) with ``value(m) == outer * n_inner + inner``."""
        hit = self.memo.get(id(m))
        if hit is not None:
            return hit
        if isinstance(m.source, Var):
            v = m.source
            e = v if m.min == 0 else v - m.min
            zero = IntImm(v.dtype, 0)
            res = (zero, 1, e, m.extent) if v in self.sub else (e, m.extent, zero, 1)
        else:
            res = self.fused(m)
        self.memo[id(m)] = res
        return res

    def fused(self, m: IterMark) -> tuple[PrimExpr, int, PrimExpr, int]:
        args = list(reversed(m.source.args))  # lowest stride first
        parts = [(a, self.split(a)) for a in args]
        dt = m.source.base.dtype
        inner_terms: list[PrimExpr] = []
        outer_terms: list[PrimExpr] = []
        n_inner = 1
        state = "inner"
        for a, (o, oe, i, ie) in parts:
            if oe == 1 and ie == 1:  # unit iterator: value 0, keep it on its side
                if not (isinstance(o, IntImm) and o.value == 0):
                    outer_terms.append(o)
                if not (isinstance(i, IntImm) and i.value == 0):
                    inner_terms.append(i)
                continue
            if oe == 1 and state == "inner":
                inner_terms.append(i * a.scale)
                n_inner = a.scale * ie
                continue
            if ie == 1:
                state = "outer"
                if a.scale % n_inner:
                    raise _Fail(f"{_split_expr(a)} is not aligned to the inner part of extent {n_inner}")
                outer_terms.append(o * (a.scale // n_inner))
                continue
            if state == "inner" and ie > 1 and oe > 1:  # the one mixed term
                inner_terms.append(i * a.scale)
                n_inner = a.scale * ie
                outer_terms.append(o)
                state = "outer"
                continue
            raise _Fail(
                f"the fused iterator {m} mixes inner and outer loops: {_split_expr(a)} over inner loops "
                "sits above a term over outer loops"
            )
        if state == "inner" and not outer_terms:
            return IntImm(dt, 0), 1, _total(inner_terms, dt), m.extent
        if m.extent % n_inner:
            raise _Fail(f"the extent {m.extent} of {m} is not a multiple of its inner part's extent {n_inner}")
        return _total(outer_terms, dt), m.extent // n_inner, _total(inner_terms, dt), n_inner

    def split(self, s: IterSplit) -> tuple[PrimExpr, int, PrimExpr, int]:
        o, n_outer, i, n_inner = self.mark(s.source)
        lf, ext = s.lower_factor, s.extent
        dt = o.dtype

        def digits(e: PrimExpr, f: int, n: int, total: int) -> PrimExpr:
            if f != 1:
                e = FloorDiv(e, IntImm(dt, f))
            if f * n < total:
                e = FloorMod(e, IntImm(dt, n))
            return e

        zero = IntImm(dt, 0)
        if n_inner == 1:  # i is 0 (or a sum of unit iterators, kept for preserve_unit_iters)
            return digits(o, lf, ext, n_outer), ext, i, 1
        if n_outer == 1:
            return o, 1, digits(i, lf, ext, n_inner), ext
        if lf % n_inner == 0:
            return digits(o, lf // n_inner, ext, n_outer), ext, zero, 1
        if n_inner % lf == 0:
            k = n_inner // lf
            if ext <= k and k % ext == 0:
                return zero, 1, digits(i, lf, ext, n_inner), ext
            if ext % k == 0:
                return digits(o, 1, ext // k, n_outer), ext // k, digits(i, lf, k, n_inner), k
        raise _Fail(f"{_split_expr(s)} cannot be divided at the inner part of extent {n_inner} of {s.source}")


def _total(terms: list[PrimExpr], dtype: object) -> PrimExpr:
    """The sum of terms collected lowest stride first, written highest stride first."""
    e: PrimExpr | None = None
    for t in reversed(terms):
        e = t if e is None else e + t
    return e if e is not None else IntImm(dtype, 0)


def subspace_divide(
    bindings: list[PrimExpr],
    input_iters: dict[Var, Range],
    sub_iters: set[Var],
    predicate: PrimExpr | bool = True,
    preserve_unit_iters: bool = True,
) -> SubspaceDivision:
    """Divide each binding into a part over the iterators outside ``sub_iters`` and one over ``sub_iters``.

    ``binding == outer * inner_extent + inner`` with ``outer`` in [0, outer_extent) over the
    outer iterators and ``inner`` in [0, inner_extent) over ``sub_iters`` (a constant offset
    goes to whichever side keeps that true).  The predicate is split into conjuncts over the
    outer iterators only and over the inner ones only.
    """
    res, _ = _detect(list(bindings), dict(input_iters), predicate, "surjective", not preserve_unit_iters)
    if res.errors:
        return SubspaceDivision(None, error=res.errors[0])
    div = _Divider(set(sub_iters))
    parts = []
    for k, (b, s) in enumerate(zip(bindings, res.indices, strict=True)):
        dt = b.dtype
        try:
            if not s.args:
                o, n_outer, i, n_inner = IntImm(dt, 0), 1, IntImm(dt, 0), 1
            else:
                if s.args[0].scale != 1:
                    raise _Fail(f"{b} has stride {s.args[0].scale}, not 1")
                o, n_outer, i, n_inner = div.split(s.args[0])
        except _Fail as err:
            return SubspaceDivision(None, error=f"{b}: {err}", index=k)
        base = s.base
        if not (isinstance(base, IntImm) and base.value == 0):
            c = _const(base)
            if n_inner == 1:
                o = o + base
            elif n_outer == 1:
                i = i + base
            elif c is not None and c % n_inner == 0:
                o = o + c // n_inner
            else:
                return SubspaceDivision(
                    None, error=f"{b}: the offset {base} is not a multiple of the inner extent {n_inner}", index=k
                )
        parts.append((simplify(o), n_outer, simplify(i), n_inner))
    true = IntImm(bool_, 1)
    outer_pred: PrimExpr = true
    inner_pred: PrimExpr = true
    for cond in _conjuncts(simplify(predicate if isinstance(predicate, PrimExpr) else true)):
        if isinstance(cond, IntImm):
            if not cond.value:
                outer_pred = cond
            continue
        used = [v for v in free_vars(cond) if v in input_iters]
        if all(v in sub_iters for v in used):
            inner_pred = cond if _is_true(inner_pred) else And(inner_pred, cond)
        elif not any(v in sub_iters for v in used):
            outer_pred = cond if _is_true(outer_pred) else And(outer_pred, cond)
        else:
            return SubspaceDivision(None, error=f"the predicate {cond} mixes inner and outer loops")
    return SubspaceDivision(parts, outer_pred, inner_pred)


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


__all__ = [
    "IterMapResult",
    "IterMark",
    "IterSplit",
    "IterSum",
    "SubspaceDivision",
    "affine_binding_error",
    "detect_iter_map",
    "normalize_iter_map_to_expr",
    "subspace_divide",
]
