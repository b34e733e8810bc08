"""bfloat16 emulation in LLVM IR: the rounding, bit conversions and intrinsic-boundary types of the
LLVM code generator's bfloat16 values.

bfloat16 values live in float32 registers, already rounded to bfloat16 (:meth:`BFloat16Emulation.round_bf16`
after every operation that could leave more precision); memory holds their 16 bits
(:meth:`~BFloat16Emulation.bf16_register_bits` to store, :meth:`~BFloat16Emulation.bf16_from_bits` to
load). An LLVM intrinsic declared with ``bfloat`` operands takes and returns LLVM's ``bfloat``
(:data:`BFLOAT`, :func:`call_type`), bitcast from and to the 16 bits (:meth:`~BFloat16Emulation.to_call`,
:meth:`~BFloat16Emulation.from_call`); a ``reinterpret`` goes through the same bits (:func:`bits_type`).
"""

from __future__ import annotations

from llvmlite import ir

from ..ir.dtype import DataType
from .llvm_types import F32, I16, I32, CodegenError, value_type


class _BFloat(ir.Type):
    """LLVM's ``bfloat``, which llvmlite 0.50's IR layer lacks; only its text is needed.

    bfloat16 values live in float32 registers; this type appears only at the boundary of an LLVM
    intrinsic declared with ``bfloat`` operands or results (``<16 x bfloat>``, as AVX512-BF16's
    ``llvm.x86.avx512bf16.dpbf16ps.256`` is in LLVM 22), where the values are bitcast from and to
    their ``<N x i16>`` bits (:meth:`BFloat16Emulation.to_call`, :meth:`BFloat16Emulation.from_call`).
    """

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash(_BFloat)


BFLOAT = _BFloat()


def call_type(dt: DataType) -> ir.Type:
    """The type of a value passed to or returned by an LLVM intrinsic: ``value_type``, except that
    bfloat16 is LLVM's ``bfloat`` there (``bfloat16x16`` -> ``<16 x bfloat>``, not float32 lanes)."""
    if dt.code != "bfloat":
        return value_type(dt)
    return BFLOAT if dt.lanes == 1 else ir.VectorType(BFLOAT, dt.lanes)


def bits_type(dt: DataType) -> ir.Type:
    """The type a bit-pattern reinterpretation of ``dt`` goes through: ``value_type``, except that
    bfloat16 lanes (float32 registers) are their 16 bits (``bfloat16x32`` -> ``<32 x i16>``)."""
    if dt.code != "bfloat":
        return value_type(dt)
    return I16 if dt.lanes == 1 else ir.VectorType(I16, dt.lanes)


class BFloat16Emulation:
    """The bfloat16 conversions of the LLVM code generator (a base class of it): every method emits
    through the generator's current builder ``self.b``."""

    b: ir.IRBuilder

    def _splat_like(self, c: ir.Constant, t: ir.Type) -> ir.Value:
        if isinstance(t, ir.VectorType):
            return ir.Constant(t, [c.constant] * t.count)
        return c

    def bf16_bits(self, v: ir.Value) -> ir.Value:
        """Round float32 values to bfloat16 (nearest even, NaN kept quiet) and return the 16 bits."""
        b = self.b
        vec = isinstance(v.type, ir.VectorType)
        i32 = ir.VectorType(I32, v.type.count) if vec else I32
        i16 = ir.VectorType(I16, v.type.count) if vec else I16

        def c(x: int) -> ir.Value:
            return self._splat_like(ir.Constant(I32, x), i32)

        bits = b.bitcast(v, i32)
        lsb = b.and_(b.lshr(bits, c(16)), c(1))
        rounded = b.lshr(b.add(bits, b.add(lsb, c(0x7FFF))), c(16))
        nan = b.or_(b.lshr(bits, c(16)), c(0x40))
        isnan = b.fcmp_unordered("uno", v, v)
        return b.trunc(b.select(isnan, nan, rounded), i16)

    def bf16_register_bits(self, v: ir.Value) -> ir.Value:
        """The 16 bits of bfloat16 values held in float32 registers (already rounded, so the low
        half is zero): bitcast to i32, shift right 16, truncate to i16. Exact, no rounding."""
        vec = isinstance(v.type, ir.VectorType)
        i32 = ir.VectorType(I32, v.type.count) if vec else I32
        i16 = ir.VectorType(I16, v.type.count) if vec else I16
        high = self.b.lshr(self.b.bitcast(v, i32), self._splat_like(ir.Constant(I32, 16), i32))
        return self.b.trunc(high, i16)

    def reinterpret(self, v: ir.Value, src: DataType, dst: DataType) -> ir.Value:
        """``reinterpret`` by bit pattern from ``src`` to ``dst`` (the same total bits): a bitcast
        of :func:`bits_type` values, so a bfloat16 side goes through its 16-bit lanes
        (``bfloat16x2 -> int32``: f32 lanes -> ``<2 x i16>`` -> ``i32``; back: zext, shl 16)."""
        if src.bits * src.lanes != dst.bits * dst.lanes:
            raise CodegenError(f"reinterpret from {src} to {dst} changes the number of bits")
        bits = self.bf16_register_bits(v) if src.code == "bfloat" else v
        out = self.b.bitcast(bits, bits_type(dst))
        return self.bf16_from_bits(out) if dst.code == "bfloat" else out

    def to_call(self, v: ir.Value, dt: DataType) -> ir.Value:
        """A value as an LLVM intrinsic takes it: bfloat16 float32 lanes -> their bits -> ``bfloat``."""
        if dt.code != "bfloat":
            return v
        return self.b.bitcast(self.bf16_register_bits(v), call_type(dt))

    def from_call(self, v: ir.Value, dt: DataType) -> ir.Value:
        """An LLVM intrinsic's result as a register value: ``bfloat`` -> its bits -> float32 lanes."""
        if dt.code != "bfloat":
            return v
        return self.bf16_from_bits(self.b.bitcast(v, bits_type(dt)))

    def round_bf16(self, v: ir.Value) -> ir.Value:
        """Round float32 values to bfloat16, kept in float32 registers."""
        return self.bf16_from_bits(self.bf16_bits(v))

    def bf16_from_bits(self, v: ir.Value) -> ir.Value:
        """bfloat16 values from their 16 bits (as memory holds them) into float32 registers: zext, shl 16."""
        vec = isinstance(v.type, ir.VectorType)
        i32 = ir.VectorType(I32, v.type.count) if vec else I32
        f32 = ir.VectorType(F32, v.type.count) if vec else F32
        wide = self.b.shl(self.b.zext(v, i32), self._splat_like(ir.Constant(I32, 16), i32))
        return self.b.bitcast(wide, f32)
