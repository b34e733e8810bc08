"""LLVM types of IR dtypes, and the error the LLVM code generator raises; shared by the generator
(:mod:`.llvm`) and the modules it is built from (:mod:`.parallel`, :mod:`.bf16`).

A value lives in a register of :func:`value_type` (bfloat16 lanes in float32 registers, already
rounded) and in memory as :func:`storage_type` (bool a byte, bfloat16 its 16 bits).
"""

from __future__ import annotations

from llvmlite import ir

from ..ir.dtype import DataType


class CodegenError(ValueError):
    """The program is not in the lowered form or uses something the code generator lacks."""


I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def scalar_type(dt: DataType) -> ir.Type:
    """The register type of one lane (bfloat16 values live in float registers, already rounded)."""
    if dt.code in ("int", "uint"):
        return ir.IntType(dt.bits)
    if dt.code == "bool":
        return I1
    if dt.code == "float":
        return {16: ir.HalfType(), 32: F32, 64: ir.DoubleType()}[dt.bits]
    if dt.code == "bfloat":
        return F32
    if dt.code == "handle":
        return PTR
    raise CodegenError(f"no LLVM type for {dt}")


def value_type(dt: DataType) -> ir.Type:
    s = scalar_type(dt.element_of())
    return s if dt.lanes == 1 else ir.VectorType(s, dt.lanes)


def storage_type(dt: DataType) -> ir.Type:
    """The in-memory type of one element (bool is a byte, bfloat16 its 16 bits)."""
    dt = dt.element_of()
    if dt.is_bool:
        return I8
    if dt.code == "bfloat":
        return I16
    return scalar_type(dt)
