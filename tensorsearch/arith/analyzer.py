"""The analyzer: one domain map shared by the simplifier, prover, bound and interval-set analyses.

ana = Analyzer(); ana.bind(i, Range(0, 16)); ana.can_prove(i < 16)  # True
"""

from __future__ import annotations

from typing import Any

from ..ir.expr import PrimExpr, Range, Var
from .int_set import IntervalSet, eval_int_set
from .simplify import Bound, can_prove, can_prove_equal, const_int_bound, simplify


class Analyzer:
    """Bundles a domain map with the simplifier, prover, bound and interval-set analyses.

    ``ana = Analyzer(); ana.bind(i, Range(0, 16)); ana.can_prove(i < 16)  # True``
    """

    def __init__(self, dom_map: dict | None = None) -> None:
        self.dom_map: dict = dict(dom_map or {})

    def bind(self, var: Var, dom: Any) -> None:
        """Declare that ``var`` lies in ``dom`` (a Range, an IntervalSet, or an int extent)."""
        self.dom_map[var] = Range.from_extent(dom, var.dtype) if isinstance(dom, int) else dom

    def simplify(self, expr: PrimExpr) -> PrimExpr:
        return simplify(expr, self.dom_map)

    def can_prove(self, cond: PrimExpr) -> bool:
        return can_prove(cond, self.dom_map)

    def can_prove_equal(self, a: PrimExpr, b: PrimExpr) -> bool:
        return can_prove_equal(a, b, self.dom_map)

    def const_int_bound(self, expr: PrimExpr) -> Bound:
        return const_int_bound(expr, self.dom_map)

    def eval_int_set(self, expr: PrimExpr, relax: dict | None = None) -> IntervalSet:
        """Interval of ``expr`` when the vars of ``relax`` (default: all bound vars) range over their domains."""
        return eval_int_set(expr, self.dom_map if relax is None else relax)
