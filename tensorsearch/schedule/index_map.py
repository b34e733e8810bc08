"""Index maps: a function from an index tuple to an index tuple (TVM's ``tir.IndexMap``).

Layout and block-layout transformations take an index map::

    m = IndexMap.from_func(lambda i, j: (i // 16, j, i % 16))
    m.map_indices([x, y])            # (x // 16, y, x % 16)
    m.map_shape([64, 32])            # (4, 32, 16)
    m.inverse([64, 32])              # lambda i0, i1, i2: (i0 * 16 + i2, i1)
    m.to_text()                      # "lambda i, j: (i // 16, j, i % 16)"
    IndexMap.from_text("lambda i, j: (j, i)")

The inverse is computed for quasi-affine bijections built from permutations, splits
(``i // c``, ``i % c``), fusions (``i * n + j``) and their combinations: every output is
decomposed into "split terms" ``(v // lower) % extent * scale`` of the inputs, the terms of
each input must tile its domain exactly and the terms of each output must tile the output's
extent exactly.  Maps outside that family are refused as not bijective.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..arith import eval_int_set, simplify
from ..ir import (
    Add,
    FloorDiv,
    FloorMod,
    IntImm,
    Mul,
    PrimExpr,
    Range,
    Sub,
    Var,
    convert,
    free_vars,
    substitute,
)
from ..ir.dtype import int32


class IndexMapError(ValueError):
    """An index map that cannot be built, parsed, applied or inverted."""


class IndexMap:
    """``lambda *initial_indices: final_indices``."""

    __slots__ = ("final_indices", "initial_indices")

    def __init__(self, initial_indices: Sequence[Var], final_indices: Sequence[PrimExpr | int]) -> None:
        initial = tuple(initial_indices)
        for v in initial:
            if not isinstance(v, Var):
                raise IndexMapError(f"the initial indices of an index map must be variables, got {v!r}")
        if len({v.name for v in initial}) != len(initial):
            raise IndexMapError(
                f"the initial indices of an index map need distinct names, got {[v.name for v in initial]}"
            )
        final = tuple(convert(e) for e in final_indices)
        allowed = set(initial)
        for e in final:
            if not (e.dtype.is_integer and e.dtype.lanes == 1):
                raise IndexMapError(f"index map output {e} is not a scalar integer")
            extra = [v.name for v in free_vars(e) if v not in allowed]
            if extra:
                raise IndexMapError(f"index map output {e} uses {', '.join(extra)}, which are not its inputs")
        if not final:
            raise IndexMapError("an index map needs at least one output index")
        self.initial_indices = initial
        self.final_indices = final

    # --- construction -------------------------------------------------------------------
    @staticmethod
    def from_func(func: Callable[..., Any], ndim: int | None = None) -> IndexMap:
        """Build from a Python function of index variables (one per positional parameter)."""
        if not callable(func):
            raise IndexMapError(f"IndexMap.from_func needs a callable, got {type(func).__name__}")
        names: list[str]
        try:
            params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):
            params = []
        if params and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
            names = [p.name for p in params]
            if ndim is not None and len(names) != ndim:
                raise IndexMapError(f"the index map function takes {len(names)} indices but {ndim} are needed")
        elif ndim is not None:
            names = [f"i{k}" for k in range(ndim)]
        else:
            raise IndexMapError("IndexMap.from_func needs a function with positional parameters (or ndim)")
        initial = [Var(n, int32) for n in names]
        out = func(*initial)
        if isinstance(out, IndexMap):
            raise IndexMapError("the index map function must return index expressions, not an IndexMap")
        final = tuple(out) if isinstance(out, list | tuple) else (out,)
        return IndexMap(initial, final)

    @staticmethod
    def from_text(text: str) -> IndexMap:
        """Parse ``"lambda i, j: (i // 16, j, i % 16)"`` (script expression syntax, no eval)."""
        from ..script import ScriptError, parse_expr

        if not isinstance(text, str):
            raise IndexMapError(f"IndexMap.from_text needs a string, got {type(text).__name__}")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as err:
            raise IndexMapError(f"cannot parse index map {text!r}: {err.msg}") from None
        lam = tree.body
        if not isinstance(lam, ast.Lambda):
            raise IndexMapError(f"an index map text is a lambda, like 'lambda i, j: (j, i)'; got {text!r}")
        a = lam.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
            raise IndexMapError(f"index map {text!r} may only have plain positional parameters")
        variables = {arg.arg: Var(arg.arg, int32) for arg in a.args}
        elts = lam.body.elts if isinstance(lam.body, ast.Tuple | ast.List) else [lam.body]
        try:
            final = [parse_expr(ast.unparse(e), variables) for e in elts]
        except ScriptError as err:
            raise IndexMapError(f"cannot parse index map {text!r}: {err}") from None
        return IndexMap([variables[arg.arg] for arg in a.args], final)

    @staticmethod
    def coerce(value: Any, ndim: int | None = None) -> IndexMap:
        """An IndexMap from an IndexMap, a callable or the text of a lambda."""
        if isinstance(value, IndexMap):
            return value
        if isinstance(value, str):
            return IndexMap.from_text(value)
        if callable(value):
            return IndexMap.from_func(value, ndim)
        raise IndexMapError(f"an index map is an IndexMap, a function or a lambda text, got {type(value).__name__}")

    # --- use ----------------------------------------------------------------------------
    @property
    def ndim_in(self) -> int:
        return len(self.initial_indices)

    @property
    def ndim_out(self) -> int:
        return len(self.final_indices)

    def map_indices(self, exprs: Sequence[PrimExpr | int], dom_map: dict | None = None) -> tuple[PrimExpr, ...]:
        """The final indices with the initial indices replaced by ``exprs`` (simplified)."""
        exprs = [convert(e) for e in exprs]
        if len(exprs) != self.ndim_in:
            raise IndexMapError(f"index map {self.to_text()} takes {self.ndim_in} indices, got {len(exprs)}")
        subst = dict(zip(self.initial_indices, exprs, strict=True))
        return tuple(simplify(substitute(e, subst), dom_map) for e in self.final_indices)

    def map_shape(self, shape: Sequence[PrimExpr | int]) -> tuple[PrimExpr, ...]:
        """The shape of the image of ``[0, shape)``: the extent of each final index over that domain."""
        shape = [convert(s) for s in shape]
        if len(shape) != self.ndim_in:
            raise IndexMapError(f"index map {self.to_text()} takes {self.ndim_in} indices, got a shape of {len(shape)}")
        dom = {v: Range(IntImm(s.dtype, 0), s) for v, s in zip(self.initial_indices, shape, strict=True)}
        out = []
        for e in self.final_indices:
            st = eval_int_set(e, dom)
            if not st.is_bounded:
                raise IndexMapError(f"index map output {e} is unbounded over the shape {[str(s) for s in shape]}")
            lo = simplify(st.min_value)
            if not (isinstance(lo, IntImm) and lo.value == 0):
                raise IndexMapError(
                    f"index map output {e} starts at {lo}, not 0, over the shape {[str(s) for s in shape]}"
                )
            out.append(simplify(st.max_value + 1))
        return tuple(out)

    def inverse(self, shape: Sequence[PrimExpr | int]) -> IndexMap:
        """The inverse map, when this map is a bijection from ``[0, shape)`` onto ``[0, map_shape(shape))``.

        Raises IndexMapError naming the reason when the map is not (provably) bijective.
        """
        shape = [convert(s) for s in shape]
        if len(shape) != self.ndim_in:
            raise IndexMapError(f"index map {self.to_text()} takes {self.ndim_in} indices, got a shape of {len(shape)}")
        extents: dict[Var, int] = {}
        for v, s in zip(self.initial_indices, shape, strict=True):
            if not isinstance(s, IntImm):
                raise IndexMapError(f"cannot invert index map {self.to_text()} over the non-constant extent {s}")
            extents[v] = s.value
        outputs = []
        where = f"index map {self.to_text()} is not bijective over the shape ({', '.join(str(s) for s in shape)})"
        for e in self.final_indices:
            try:
                terms, offset = _decompose(simplify(e), extents)
            except IndexMapError as err:
                raise IndexMapError(f"{where}: {err}") from None
            if offset != 0:
                raise IndexMapError(f"{where}: output {e} has a constant offset {offset}")
            outputs.append([t for t in terms if t.extent != 1])
        # each input's splits must tile its domain exactly
        by_var: dict[Var, list[_Split]] = {v: [] for v in self.initial_indices}
        for terms in outputs:
            for t in terms:
                by_var[t.var].append(t)
        for v in self.initial_indices:
            expect = 1
            for t in sorted(by_var[v], key=lambda t: t.lower):
                if t.lower != expect:
                    raise IndexMapError(f"{where}: input {v.name} is used twice or only in part")
                expect *= t.extent
            if expect != extents[v]:
                raise IndexMapError(f"{where}: input {v.name} is not fully used")
        # each output's terms must tile [0, extent) densely
        for e, terms in zip(self.final_indices, outputs, strict=True):
            expect = 1
            for t in sorted(terms, key=lambda t: t.scale):
                if t.scale != expect:
                    raise IndexMapError(f"{where}: output {e} has gaps or overlaps")
                expect *= t.extent
        new_vars = [Var(f"i{k}", int32) for k in range(self.ndim_out)]
        parts: dict[Var, PrimExpr] = {}
        for y, terms in zip(new_vars, outputs, strict=True):
            ordered = sorted(terms, key=lambda t: t.scale)
            for pos, t in enumerate(ordered):
                value: PrimExpr = y if t.scale == 1 else FloorDiv(y, IntImm(int32, t.scale))
                if pos != len(ordered) - 1:
                    value = FloorMod(value, IntImm(int32, t.extent))
                contrib = value if t.lower == 1 else Mul(value, IntImm(int32, t.lower))
                parts[t.var] = contrib if t.var not in parts else Add(parts[t.var], contrib)
        dom = {y: Range(0, s) for y, s in zip(new_vars, self.map_shape(shape), strict=True)}
        final = [simplify(parts.get(v, IntImm(int32, 0)), dom) for v in self.initial_indices]
        return IndexMap(new_vars, final)

    def is_bijective(self, shape: Sequence[PrimExpr | int]) -> bool:
        try:
            self.inverse(shape)
        except IndexMapError:
            return False
        return True

    # --- text ---------------------------------------------------------------------------
    def to_text(self) -> str:
        """``"lambda i, j: (i // 16, j, i % 16)"`` (what :meth:`from_text` reads)."""
        from ..script import node_to_str

        args = ", ".join(v.name for v in self.initial_indices)
        outs = ", ".join(node_to_str(e) for e in self.final_indices)
        if len(self.final_indices) == 1:
            outs += ","
        return f"lambda {args}: ({outs})"

    def __str__(self) -> str:
        return self.to_text()

    def __repr__(self) -> str:
        return f"IndexMap({self.to_text()!r})"


def index_map_to_json(value: Any) -> str:
    """Trace form of an index map argument: the lambda text."""
    return IndexMap.coerce(value).to_text()


@dataclass(frozen=True)
class _Split:
    """``(var // lower) % extent * scale``."""

    var: Var
    lower: int
    extent: int
    scale: int


def _const(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _decompose(e: PrimExpr, extents: dict[Var, int]) -> tuple[list[_Split], int]:
    """``e`` as a sum of split terms plus a constant; IndexMapError when it is not of that form."""
    if isinstance(e, Var):
        if e not in extents:
            raise IndexMapError(f"index map uses unknown variable {e.name}")
        return [_Split(e, 1, extents[e], 1)], 0
    c = _const(e)
    if c is not None:
        return [], c
    if isinstance(e, Add | Sub):
        ta, ca = _decompose(e.a, extents)
        tb, cb = _decompose(e.b, extents)
        if isinstance(e, Sub):
            if tb:
                raise IndexMapError(f"index map output {e} subtracts an index; only affine sums are supported")
            return ta, ca - cb
        return ta + tb, ca + cb
    if isinstance(e, Mul):
        k = _const(e.b) if _const(e.b) is not None else _const(e.a)
        other = e.a if _const(e.b) is not None else e.b
        if k is None or k <= 0:
            raise IndexMapError(f"index map output {e} multiplies by a non-constant or non-positive value")
        terms, off = _decompose(other, extents)
        return [_Split(t.var, t.lower, t.extent, t.scale * k) for t in terms], off * k
    if isinstance(e, FloorDiv | FloorMod):
        c = _const(e.b)
        if c is None or c <= 0:
            raise IndexMapError(f"index map output {e} divides by a non-constant or non-positive value")
        terms, off = _decompose(e.a, extents)
        if off != 0:
            raise IndexMapError(f"index map output {e} divides an offset sum; not supported")
        high: list[_Split] = []
        low: list[_Split] = []
        for t in terms:
            if t.scale % c == 0:
                high.append(_Split(t.var, t.lower, t.extent, t.scale // c))
            elif c % t.scale == 0:
                k = c // t.scale
                if t.extent <= k:
                    low.append(t)
                elif t.extent % k == 0:
                    high.append(_Split(t.var, t.lower * k, t.extent // k, 1))
                    low.append(_Split(t.var, t.lower, k, t.scale))
                else:
                    raise IndexMapError(
                        f"index map output {e}: extent {t.extent} of {t.var.name} is not a multiple of {k}"
                    )
            else:
                raise IndexMapError(f"index map output {e}: scale {t.scale} and divisor {c} do not divide each other")
        if sum(t.scale * (t.extent - 1) for t in low) >= c:
            raise IndexMapError(f"index map output {e}: the remainder part can exceed {c}")
        return (high, 0) if isinstance(e, FloorDiv) else (low, 0)
    raise IndexMapError(f"index map output {e} is not a quasi-affine expression of its inputs")


__all__ = ["IndexMap", "IndexMapError", "index_map_to_json"]
