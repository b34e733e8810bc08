"""Integer arithmetic analysis: simplifier, interval sets, prover and access-region detection.

::

    from tensorsearch.arith import simplify, can_prove, eval_int_set
    simplify((i * 8 + j) // 8, {j: Range(0, 8)})            # i
    can_prove(i * 4 + j < 64, {i: Range(0, 16), j: Range(0, 4)})   # True
    eval_int_set(i * 4 + j, {j: Range(0, 4)})               # IntervalSet(i*4, i*4 + 3)
"""

from .analyzer import Analyzer
from .count import count_macs, count_ops
from .int_set import NEG_INF, POS_INF, IntervalSet, eval_int_set, intersect, union
from .iter_map import (
    IterMapResult,
    IterMark,
    IterSplit,
    IterSum,
    SubspaceDivision,
    affine_binding_error,
    detect_iter_map,
    normalize_iter_map_to_expr,
    subspace_divide,
)
from .region import detect_access_regions, region_from_points
from .simplify import can_prove, can_prove_equal, const_int_bound, simplify, simplify_all
from .verify import VerifyError, verify

__all__ = [
    "NEG_INF",
    "POS_INF",
    "Analyzer",
    "IntervalSet",
    "IterMapResult",
    "IterMark",
    "IterSplit",
    "IterSum",
    "SubspaceDivision",
    "VerifyError",
    "affine_binding_error",
    "can_prove",
    "can_prove_equal",
    "const_int_bound",
    "count_macs",
    "count_ops",
    "detect_access_regions",
    "detect_iter_map",
    "eval_int_set",
    "intersect",
    "normalize_iter_map_to_expr",
    "region_from_points",
    "simplify",
    "simplify_all",
    "subspace_divide",
    "union",
    "verify",
]
