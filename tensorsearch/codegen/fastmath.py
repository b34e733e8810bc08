"""float32 ``exp`` and ``erf`` as inline LLVM arithmetic that vectorizes.

LLVM has no vector math library here: ``llvm.exp.v16f32`` becomes sixteen calls of libm's
``expf``, and ``erff`` is a call per element, so a GELU epilogue (``x * (1 + erf(x / sqrt 2)) /
2``) on a 197 x 3072 output cost 8.5 ms of a 13.7 ms ViT-B/16 kernel on Zen 4. These emit the
same polynomials in ``fmuladd``, ``floor``, compares and selects, one lane or a vector alike
(MLAS and Eigen, which onnxruntime and TVM's ``fast_exp``/``fast_erf`` follow, do the same)::

    exp(x) = 2^n * p(r),  n = round(x / ln 2),  r = x - n ln 2 (in two parts), |r| <= ln(2) / 2
    erf(x) = x + x * S(x^2)                    for |x| <= 0.921875
           = 1 - exp(-(a + a * B(a)))          for a = min(|x|, 3.925) above, sign of x

``exp`` is within 2 ulp of the exact value on normal results; above 88.72 it is ``inf``, below
-103.97 zero (the 2^n scale is applied in two halves, so subnormal results come out graded,
not flushed). ``erf`` is MLAS's ``MlasComputeErf`` operation for operation (its polynomials
``S`` and ``B``, its own exp with a round-to-integer by adding 1.5 * 2^23, the same fused
multiply-adds), so a GELU computes what onnxruntime's Erf computes, bit for bit where both use
FMA; it is faithfully rounded (within 1 ulp). Both pass NaN on.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

# Cephes' expf: 1/ln 2, ln 2 split in a part exact in float32 and the rest, and the polynomial
# of exp(r) - 1 - r over r^2 on [-ln(2)/2, ln(2)/2]
_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_EXP_MAX = 88.72283935546875  # above: inf
_EXP_MIN = -103.97208404541016  # below: 0 (exp rounds to zero in float32)

# MLAS's erf (onnxruntime/core/mlas/lib/erf.cpp, after a faithfully rounded erff): the split,
# the polynomial of the small part (in x^2, its last coefficient less one) and of the large part
# (in |x|), and the exp it evaluates 1 - erf with (log 2 split in two, a polynomial, the
# constant 1.5 * 2^23 whose addition rounds to an integer)
_ERF_UPPER = 3.925
_ERF_SPLIT = 0.921875
_ERF_SMALL = (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1, -3.76124859e-1, 1.28379151e-1)
_ERF_BIG = (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2, 1.06777847e-1, 6.34846687e-1, 1.28717512e-1)
_ERF_EXP_LOWER = -88.3762626647949
_ERF_EXP_LOG2_HI = -6.93145752e-1
_ERF_EXP_LOG2_LO = -1.42860677e-6
_ERF_EXP_POLY = (1.38319808e-3, 8.37550033e-3, 4.16689515e-2, 1.66664466e-1, 4.99999851e-1, 1.0, 1.0)
_ROUNDING = 1.25829120e7  # 1.5 * 2^23

Intrinsic = Callable[[str, list[ir.Value]], ir.Value]  # (llvm.name without type suffix, args) -> value


def is_f32(t: ir.Type) -> bool:
    """Whether ``t`` is float32 or a vector of it (what these functions take)."""
    return isinstance(t.element if isinstance(t, ir.VectorType) else t, ir.FloatType)


def _const(t: ir.Type, value: float | int) -> ir.Constant:
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [value] * t.count)
    return ir.Constant(t, value)


def _ints(t: ir.Type) -> ir.Type:
    """The int32 type with ``t``'s lanes."""
    return ir.VectorType(I32, t.count) if isinstance(t, ir.VectorType) else I32


def _horner(call: Intrinsic, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
    """c0 x^(n-1) + c1 x^(n-2) + ... + c(n-1), by fused multiply-adds."""
    t = x.type
    acc = _const(t, coefficients[0])
    for c in coefficients[1:]:
        acc = call("llvm.fmuladd", [acc, x, _const(t, c)])
    return acc


def _clamp(b: ir.IRBuilder, x: ir.Value, low: float, high: float) -> ir.Value:
    """``x`` limited to [low, high] by compares that are false for NaN, so NaN passes."""
    t = x.type
    x = b.select(b.fcmp_ordered("<", x, _const(t, low)), _const(t, low), x)
    return b.select(b.fcmp_ordered(">", x, _const(t, high)), _const(t, high), x)


def _pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2^n for integer-valued float32 ``n`` in [-126, 127], built in the exponent field."""
    t = n.type
    bits = b.shl(b.add(b.fptosi(n, _ints(t)), _const(_ints(t), 127)), _const(_ints(t), 23))
    return b.bitcast(bits, t)


def exp_f32(b: ir.IRBuilder, call: Intrinsic, x: ir.Value) -> ir.Value:
    """exp(x) for float32 ``x`` (a value or a vector), see the module docstring."""
    t = x.type
    xc = _clamp(b, x, _EXP_MIN, _EXP_MAX)
    n = call("llvm.floor", [call("llvm.fmuladd", [xc, _const(t, _LOG2E), _const(t, 0.5)])])
    r = call("llvm.fmuladd", [n, _const(t, -_LN2_HI), xc])
    r = call("llvm.fmuladd", [n, _const(t, -_LN2_LO), r])
    p = _horner(call, r, _EXP_POLY)
    y = b.fadd(call("llvm.fmuladd", [p, b.fmul(r, r), r]), _const(t, 1.0))
    half = call("llvm.floor", [b.fmul(n, _const(t, 0.5))])  # n = half + (n - half), each in range
    y = b.fmul(b.fmul(y, _pow2(b, half)), _pow2(b, b.fsub(n, half)))
    y = b.select(b.fcmp_ordered(">", x, _const(t, _EXP_MAX)), _const(t, float("inf")), y)
    y = b.select(b.fcmp_ordered("<", x, _const(t, _EXP_MIN)), _const(t, 0.0), y)
    return b.select(b.fcmp_unordered("uno", x, x), x, y)


def erf_f32(b: ir.IRBuilder, call: Intrinsic, x: ir.Value) -> ir.Value:
    """erf(x) for float32 ``x`` (a value or a vector), see the module docstring."""
    t = x.type
    zero = _const(t, 0.0)
    a = call("llvm.fabs", [x])
    upper = _const(t, _ERF_UPPER)
    a = b.select(b.fcmp_ordered("<", upper, a), upper, a)  # minps(upper, a): NaN passes
    small = call("llvm.fmuladd", [_horner(call, b.fmul(a, a), _ERF_SMALL), a, a])
    big = b.fcmp_ordered(">", a, _const(t, _ERF_SPLIT))
    a_big = b.select(big, a, zero)
    e = b.fneg(call("llvm.fmuladd", [_horner(call, a_big, _ERF_BIG), a_big, a_big]))
    lower = _const(t, _ERF_EXP_LOWER)
    e = b.select(b.fcmp_ordered(">", lower, e), lower, e)  # maxps(lower, e)
    rounding = _const(t, _ROUNDING)
    n = b.fsub(call("llvm.fmuladd", [_const(t, _LOG2E), e, rounding]), rounding)
    f = call("llvm.fmuladd", [n, _const(t, _ERF_EXP_LOG2_HI), e])
    f = call("llvm.fmuladd", [n, _const(t, _ERF_EXP_LOG2_LO), f])
    y = b.fsub(_const(t, 1.0), b.fmul(_horner(call, f, _ERF_EXP_POLY), _pow2(b, n)))
    return call("llvm.copysign", [b.select(big, y, small), x])
