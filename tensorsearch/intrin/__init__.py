"""Tensor intrinsics (paper section 4): YAML descriptions, and later the matcher and tensorize.

``load_intrinsic(path_or_name)`` loads one ``intrinsics/<set>.yaml`` file into an
:class:`IntrinsicSet`; ``tensorsearch.hardware.load(name).intrinsics`` lists the intrinsics a
target offers. Each :class:`Intrinsic` has ``name``, ``operands``, ``iterators``, ``semantics``
(text; ``desc_func()`` is the same computation as a one-block PrimFunc), ``impl`` (an
:class:`LLVMImpl` or :class:`CudaImpl`) and ``for_target(hw)``. docs/hardware-yaml.md has the schema.
"""

from .schema import (
    CudaImpl,
    Intrinsic,
    IntrinsicError,
    IntrinsicSet,
    Iterator,
    LLVMArg,
    LLVMImpl,
    Operand,
    Requirements,
    Unit,
    available,
    find,
    load_intrinsic,
    parse_set,
    search_path,
)
from .semantics import SemanticsIR

__all__ = [
    "CudaImpl",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicSet",
    "Iterator",
    "LLVMArg",
    "LLVMImpl",
    "Operand",
    "Requirements",
    "SemanticsIR",
    "Unit",
    "available",
    "find",
    "load_intrinsic",
    "parse_set",
    "search_path",
]
