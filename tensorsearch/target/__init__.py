"""The target layer: hardware descriptors and tensor intrinsics, read from YAML into frozen data.

Below the schedule and everything above it, on top of ir, arith and script::

    hw = tensorsearch.target.load("x86-znver4")     # hardware/x86-znver4.yaml -> Hardware
    hw.intrinsics                                     # the Intrinsic objects its sets offer
    report = tensorsearch.target.match(func, "C", hw.intrinsic("vnni_dot_16x4_u8i8i32"))

:class:`Hardware` is the one object that says what a program is compiled for (code generation,
the schedule's tensorize and the search all take it); :mod:`.reader` is the one YAML reader and
the one search path; :mod:`.intrinsics` parses intrinsic sets, :mod:`.semantics` their
computations, :mod:`.matcher` maps a block onto an intrinsic (paper section 4.2).
"""

from .hardware import (
    GPU,
    Caches,
    CpuIdentity,
    Hardware,
    HardwareWarning,
    SearchSpec,
    arch_of,
    available,
    host,
    host_identity,
    host_triple,
    load,
    native,
    parse,
    resolve,
)
from .intrinsics import (
    CudaImpl,
    Intrinsic,
    IntrinsicError,
    IntrinsicNotVerified,
    IntrinsicSet,
    Iterator,
    LLVMArg,
    LLVMImpl,
    LLVMTileCall,
    Operand,
    Requirements,
    TileRegisters,
    Unit,
    load_intrinsic,
    parse_set,
)
from .matcher import IterMapping, Mapping, MatchReport, OperandPlan, Rejection, match
from .reader import HardwareError, read_yaml, search_path
from .semantics import SemanticsIR

__all__ = [
    "GPU",
    "Caches",
    "CpuIdentity",
    "CudaImpl",
    "Hardware",
    "HardwareError",
    "HardwareWarning",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicNotVerified",
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
    "SearchSpec",
    "SemanticsIR",
    "TileRegisters",
    "Unit",
    "arch_of",
    "available",
    "host",
    "host_identity",
    "host_triple",
    "load",
    "load_intrinsic",
    "match",
    "native",
    "parse",
    "parse_set",
    "read_yaml",
    "resolve",
    "search_path",
]
