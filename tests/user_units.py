"""User-written intrinsic units that run on any x86-64 CPU with AVX2 and FMA, shared by the tests
that load, verify and tune them (none of them is shipped)."""

# The int16 dot unit docs/hardware-yaml.md shows: C[8] (int32) += A[2] (int16, the same pair for
# every lane) . B[8, 2] (int16). vpmaddwd multiplies pairs and adds each pair's products; it does
# not accumulate, so the llvm section says accumulate: true (the stored value is C + the result).
PMADDWD = """\
name: {name}
target: llvm
description: AVX2 int16 dot products (vpmaddwd ymm), accumulated with one vpaddd
requires:
  arch: [x86_64]
  features: [+avx2]
intrinsics:
  - name: avx2_dot_8x2_i16i16i32
    description: >-
      8 int32 lanes, each += the dot product of A's 2 int16 with its row of 2 int16 of B
      (vpmaddwd multiplies pairs and adds them; a vpaddd adds the sums to C).
    operands:
      - {{name: A, shape: [2], dtype: int16, role: input, contiguous: true}}
      - {{name: B, shape: {b_shape}, dtype: int16, role: input, contiguous: true}}
      - {{name: C, shape: [8], dtype: {c_dtype}, role: accumulator, contiguous: true, alignment: 32}}
    iterators:
      - {{name: i, kind: spatial, extent: 8}}
      - {{name: k, kind: reduce, extent: 2}}
    semantics: {semantics}
    llvm:
      intrinsic: llvm.x86.avx2.pmadd.wd
      args:
        # A's 2 int16 as one int32, broadcast to 8 lanes, seen again as 16 int16
        - {{operand: A, load: int16x2, then: [reinterpret: int32, broadcast: 8, reinterpret: int16x16]}}
        - {{operand: B, load: int16x16}}
      returns: int32x8
      store: C
      accumulate: true
"""
DOT = "C[i] += cast(int32, A[k]) * cast(int32, B[i, k])"


def pmaddwd(name: str, semantics: str = DOT, b_shape: str = "[8, 2]", c_dtype: str = "int32") -> str:
    """The vpmaddwd int16 dot unit's file text, with set ``name`` (the file must be ``name.yaml``)."""
    return PMADDWD.format(name=name, semantics=semantics, b_shape=b_shape, c_dtype=c_dtype)


# A bfloat16 unit that runs on AVX2: C[8] (float32) += A (one bfloat16, broadcast) * B[1, 8]
# (bfloat16); bfloat16 values are float32 in registers, so `cast: float32x8` costs nothing, and
# a product of two bfloat16 values is exact in float32, so one fused multiply-add rounds as the
# semantics' multiply-then-add does.
FMA_BF16 = """\
name: x86-fma-bf16
target: llvm
description: bfloat16 x bfloat16 -> float32 multiply-accumulate on AVX2 FMA (vfmadd, 256-bit)
requires:
  arch: [x86_64]
  features: [+avx2, +fma]
intrinsics:
  - name: fma_bf16_8x1_f32
    operands:
      - {name: A, shape: [1], dtype: bfloat16, role: input}
      - {name: B, shape: [1, 8], dtype: bfloat16, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: float32, role: accumulator, contiguous: true}
    iterators:
      - {name: i, kind: spatial, extent: 8}
      - {name: k, kind: reduce, extent: 1}
    semantics: C[i] += cast(float32, A[k]) * cast(float32, B[k, i])
    llvm:
      intrinsic: llvm.fma.v8f32
      args:
        - {operand: A, load: bfloat16, then: [cast: float32, broadcast: 8]}
        - {operand: B, load: bfloat16x8, then: [cast: float32x8]}
        - {operand: C, load: float32x8}
      returns: float32x8
      store: C
"""
