"""Tensor intrinsics (paper section 4), the public names in one place.

``load_intrinsic(path_or_name)`` loads one ``intrinsics/<set>.yaml`` file into an
:class:`IntrinsicSet`; ``tensorsearch.hardware.load(name).intrinsics`` lists the intrinsics a
target offers. Each :class:`Intrinsic` has ``name``, ``operands``, ``iterators``, ``semantics``
(text; ``desc_func()`` is the same computation as a one-block PrimFunc), ``impl`` (an
:class:`LLVMImpl`, an :class:`LLVMTileCall` for a CPU unit's instruction on tile registers, or a
:class:`CudaImpl`) and ``for_target(hw)``. docs/hardware-yaml.md has the schema.

``match(func, block_name, intrin)`` (the matcher, paper section 4.2) returns a
:class:`MatchReport` whose ``feasible`` lists the mappings with their loop plans and whose
``str()`` explains every rejection; ``tile_with_intrin(sch, block, intrin)`` performs a mapping
with schedule primitives and returns the blockized block, ready for ``sch.tensorize``.

The definitions live in their layers (:mod:`tensorsearch.target` for the data and the matcher,
:mod:`tensorsearch.schedule` for ``tile_with_intrin``); nothing inside the package imports this
module.
"""

from ..schedule.intrin_tile import tile_with_intrin
from ..target.intrinsics import (
    CudaImpl,
    Intrinsic,
    IntrinsicError,
    IntrinsicSet,
    Iterator,
    LLVMArg,
    LLVMImpl,
    LLVMTileCall,
    Operand,
    Requirements,
    TileRegisters,
    Unit,
    available,
    find,
    load_intrinsic,
    parse_set,
)
from ..target.matcher import IterMapping, Mapping, MatchReport, OperandPlan, Rejection, match
from ..target.semantics import SemanticsIR


def search_path(near=None) -> list:
    """The directories searched for intrinsic sets, in order (see docs/hardware-yaml.md)."""
    from ..target.reader import search_path as _search_path

    return _search_path("intrinsics", near)


__all__ = [
    "CudaImpl",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicSet",
    "IterMapping",
    "Iterator",
    "LLVMArg",
    "LLVMImpl",
    "LLVMTileCall",
    "Mapping",
    "MatchReport",
    "Operand",
    "OperandPlan",
    "Rejection",
    "Requirements",
    "SemanticsIR",
    "TileRegisters",
    "Unit",
    "available",
    "find",
    "load_intrinsic",
    "match",
    "parse_set",
    "search_path",
    "tile_with_intrin",
]
