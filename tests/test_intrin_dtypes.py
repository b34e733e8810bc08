"""bfloat16 and float16 in intrinsic YAML.

bfloat16 / float16 operands, ``then`` steps on them (reinterpret, cast), LLVM intrinsics declared
with ``<N x bfloat>`` / ``<N x half>`` vectors (AVX512-BF16 vdpbf16ps, AVX512-FP16 vmaxph, compiled
for descriptors that have them), a bfloat16 unit built on AVX2 FMA that runs here, and LLVM
signatures checked against LLVM's own declarations when a file is loaded: each mistake a one-line
IntrinsicError naming the file and key, never an LLVM assertion that kills the process.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from user_units import FMA_BF16

import tensorsearch
from tensorsearch import hardware
from tensorsearch.interpreter import interpret
from tensorsearch.intrin import IntrinsicError, LLVMImpl, load_intrinsic
from tensorsearch.schedule import Schedule
from tensorsearch.script import parse
from tensorsearch.target import llvm_check

BF16 = ml_dtypes.bfloat16
HOST = hardware.load("host")

# vdpbf16ps ymm: C[8] (float32) += A[2] (bfloat16, the same pair for every lane) . B[8, 2] (bfloat16)
DPBF16 = """\
name: x86-avx512-bf16
target: llvm
description: AVX512-BF16 dot products of bfloat16 pairs into float32 (vdpbf16ps, 256-bit)
requires:
  arch: [x86_64]
  features: [+avx512bf16, +avx512vl]
intrinsics:
  - name: dpbf16_dot_8x2_bf16f32
    operands:
      - {name: A, shape: [2], dtype: bfloat16, role: input, contiguous: true}
      - {name: B, shape: [8, 2], dtype: bfloat16, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: float32, role: accumulator, contiguous: true}
    iterators:
      - {name: i, kind: spatial, extent: 8}
      - {name: k, kind: reduce, extent: 2}
    semantics: C[i] += cast(float32, A[k]) * cast(float32, B[i, k])
    llvm:
      intrinsic: llvm.x86.avx512bf16.dpbf16ps.256
      # LLVM 22: <8 x float> (<8 x float>, <16 x bfloat>, <16 x bfloat>)
      args:
        - {operand: C, load: float32x8}
        # A's pair as one int32, broadcast to 8 lanes, seen again as 16 bfloat16
        - {operand: A, load: bfloat16x2, then: [reinterpret: int32, broadcast: 8, reinterpret: bfloat16x16]}
        - {operand: B, load: bfloat16x16}
      returns: float32x8
      store: C
"""

# vmaxph ymm: C[16] = max(A, B) in float16. x86's max(a, b) is (a > b ? a : b); ours is
# (b > a ? b : a), so B goes first and NaNs and signed zeros agree too.
MAXPH = """\
name: x86-avx512-fp16
target: llvm
requires:
  arch: [x86_64]
  features: [+avx512fp16, +avx512vl]
intrinsics:
  - name: maxph_16_f16
    operands:
      - {name: A, shape: [16], dtype: float16, role: input, contiguous: true}
      - {name: B, shape: [16], dtype: float16, role: input, contiguous: true}
      - {name: C, shape: [16], dtype: float16, role: output, contiguous: true}
    iterators:
      - {name: i, kind: spatial, extent: 16}
    semantics: C[i] = max(A[i], B[i])
    llvm:
      intrinsic: llvm.x86.avx512fp16.max.ph.256
      args:
        - {operand: B, load: float16x16}
        - {operand: A, load: float16x16}
      returns: float16x16
      store: C
"""


def _write(tmp_path, text: str):
    name = text.split("\n", 1)[0].removeprefix("name: ")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def _gemm(a_layout: str, b_layout: str, b_index: str, m: int, n: int, k: int) -> str:
    """C[i, j] (float32) = sum_k float32(A[i, k]) * float32(B[...]) over bfloat16 A and B."""
    return f"""
@T.prim_func
def main(A: T.Buffer({a_layout}, "bfloat16"), B: T.Buffer({b_layout}, "bfloat16"), C: T.Buffer(({m}, {n}), "float32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[{b_index}])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast("float32", B[{b_index}])
"""


def _tile(func, hw, n_tile: int, k_tile: int):
    sch = Schedule(func, hardware=hw)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    jo, ji = sch.split(j, [None, n_tile])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(i, jo, ko, ji, ki)
    sch.decompose_reduction(b, i)
    return sch, sch.blockize(ji)


def _bf16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(BF16)


# ----------------------------------------------------------------------------------------------
# bfloat16 / float16 operands: parse, semantics


def test_bfloat16_operands_parse_and_the_semantics_interprets_with_float32_casts(tmp_path):
    intr = load_intrinsic(_write(tmp_path, DPBF16))["dpbf16_dot_8x2_bf16f32"]
    a_op, b_op, c_op = intr.operands
    assert (str(a_op.dtype), str(b_op.vector_type), str(c_op.dtype)) == ("bfloat16", "bfloat16x16", "float32")
    impl = intr.impl
    assert isinstance(impl, LLVMImpl)
    assert [str(t) for t in (impl.signature[0], *impl.signature[1])] == [
        "float32x8",
        "float32x8",
        "bfloat16x16",
        "bfloat16x16",
    ]
    rng = np.random.default_rng(1)
    a, b = _bf16(rng, 2), _bf16(rng, (8, 2))
    c = rng.standard_normal(8).astype(np.float32)
    want = c.copy()
    for k in range(2):  # float32 after every add, in k order
        want = (want + a[k].astype(np.float32) * b[:, k].astype(np.float32)).astype(np.float32)
    interpret(intr.desc_func(), a, b, c)
    np.testing.assert_array_equal(c, want)
    fp16 = load_intrinsic(_write(tmp_path, MAXPH))["maxph_16_f16"]
    x, y = rng.standard_normal(16).astype(np.float16), rng.standard_normal(16).astype(np.float16)
    z = np.zeros(16, np.float16)
    interpret(fp16.desc_func(), x, y, z)
    np.testing.assert_array_equal(z, np.maximum(x, y))


def test_then_steps_on_bfloat16_values(tmp_path):
    fma = load_intrinsic(_write(tmp_path, FMA_BF16))["fma_bf16_8x1_f32"]
    a, b, c = fma.impl.args
    assert a.steps == (("cast", tensorsearch.ir.DataType("float", 32)), ("broadcast", 8))
    assert str(a.dtype) == str(b.dtype) == str(c.dtype) == "float32x8"
    bad = [
        (FMA_BF16.replace("cast: float32x8]", "cast: float32x4]"), "intrinsics[0].llvm.args[1].then[0].cast",
         "expected a type of 8 lanes, the lanes of the bfloat16x8 value converted, found 'float32x4'"),
        (FMA_BF16.replace("cast: float32x8]", "convert: float32x8]"), "intrinsics[0].llvm.args[1].then[0].convert",
         "unknown step 'convert'; the steps are reinterpret, cast and broadcast"),
        (DPBF16.replace("reinterpret: bfloat16x16]", "reinterpret: bfloat16x8]"),
         "intrinsics[0].llvm.args[1].then[2].reinterpret", "expected a type of 256 bits"),
    ]  # fmt: skip
    for text, key, fragment in bad:
        path = _write(tmp_path, text)
        with pytest.raises(IntrinsicError) as info:
            load_intrinsic(path)
        assert info.value.key == key and fragment in str(info.value), str(info.value)


# ----------------------------------------------------------------------------------------------
# LLVM intrinsics declared with bfloat / half vectors


def test_dpbf16ps_tile_tensorizes_and_compiles_to_vdpbf16ps(tmp_path):
    s = load_intrinsic(_write(tmp_path, DPBF16))
    m, n, k = 16, 32, 32
    func = parse(_gemm(f"({m}, {k})", f"({n // 8}, {k // 2}, 8, 2)", "vj // 8, vk // 2, vj % 8, vk % 2", m, n, k))
    zen4 = dataclasses.replace(hardware.load("x86-znver4"), intrinsic_sets=(s,))
    sch, ob = _tile(func, zen4, 8, 2)
    sch.tensorize(ob, "dpbf16_dot_8x2_bf16f32")
    text = sch.show()
    assert "llvm.x86.avx512bf16.dpbf16ps.256" in text and 'dtype="bfloat16x16"' in text
    mod = tensorsearch.build(sch.func, zen4, jit=False)
    assert "vdpbf16ps" in mod.assembly
    if not HOST.has_feature("+avx512bf16") or not HOST.has_feature("+avx512vl"):
        pytest.skip(f"this CPU ({HOST.cpu}) has no AVX512-BF16: compiled for x86-znver4, not run")
    mod = tensorsearch.build(sch.func, dataclasses.replace(HOST, intrinsic_sets=(s,)))
    rng = np.random.default_rng(3)
    a, b = _bf16(rng, (m, k)), _bf16(rng, (n // 8, k // 2, 8, 2))
    c = np.zeros((m, n), np.float32)
    mod(a, b, c)
    b_plain = b.transpose(0, 2, 1, 3).reshape(n, k).astype(np.float64)
    want = a.astype(np.float64) @ b_plain.T
    scale = np.abs(a.astype(np.float64)) @ np.abs(b_plain).T
    assert np.all(np.abs(c - want) <= 1e-6 * scale)  # vdpbf16ps adds each pair in its own order


def test_float16_intrinsic_with_half_vectors_compiles_to_vmaxph(tmp_path):
    s = load_intrinsic(_write(tmp_path, MAXPH))
    src = """
@T.prim_func
def main(A: T.Buffer((64,), "float16"), B: T.Buffer((64,), "float16"), C: T.Buffer((64,), "float16")):
    for i in T.serial(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A[vi], B[vi])
            T.writes(C[vi])
            C[vi] = T.max(A[vi], B[vi])
"""
    spr = dataclasses.replace(hardware.load("x86-emeraldrapids"), intrinsic_sets=(s,))
    sch = Schedule(parse(src), hardware=spr)
    (i,) = sch.get_loops(sch.get_block("C"))
    _, ii = sch.split(i, [None, 16])
    sch.tensorize(ii, "maxph_16_f16")
    mod = tensorsearch.build(sch.func, spr, jit=False)
    assert "<16 x half>" in mod.llvm_ir and "vmaxph" in mod.assembly


# ----------------------------------------------------------------------------------------------
# a bfloat16 unit that runs here: AVX2 FMA


def test_fma_bf16_unit_tensorizes_a_bf16_gemm_and_runs_exactly(tmp_path):
    s = load_intrinsic(_write(tmp_path, FMA_BF16))
    m, n, k = 16, 32, 24
    func = parse(_gemm(f"({m}, {k})", f"({k}, {n})", "vk, vj", m, n, k))
    hw = dataclasses.replace(HOST, intrinsic_sets=(s,))
    sch, ob = _tile(func, hw, 8, 1)  # blockize drops the k loop of extent 1
    sch.tensorize(ob, "fma_bf16_8x1_f32")
    assert "llvm.fma.v8f32" in sch.show()
    mod = tensorsearch.build(sch.func, hw)
    assert "vfmadd" in mod.assembly
    rng = np.random.default_rng(4)
    for _ in range(2):
        a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n))
        c = np.full((m, n), 7, np.float32)
        mod(a, b, c)
        want = np.zeros((m, n), np.float32)
        for kk in range(k):  # float32 accumulation of exact bfloat16 products, in k order
            want = (want + a[:, kk : kk + 1].astype(np.float32) * b[kk : kk + 1, :].astype(np.float32)).astype(
                np.float32
            )
        np.testing.assert_array_equal(c, want)


def test_fma_bf16_unit_through_match_and_tile_with_intrin(tmp_path):
    from tensorsearch.intrin import match, tile_with_intrin

    intr = load_intrinsic(_write(tmp_path, FMA_BF16))["fma_bf16_8x1_f32"]
    m, n, k = 8, 16, 8
    func = parse(_gemm(f"({m}, {k})", f"({k}, {n})", "vk, vj", m, n, k))
    assert match(func, "C", intr).feasible
    sch = Schedule(func)
    sch.tensorize(tile_with_intrin(sch, sch.get_block("C"), intr), intr)
    mod = tensorsearch.build(sch.func, dataclasses.replace(HOST, intrinsic_sets=(load_intrinsic(intr.source),)))
    rng = np.random.default_rng(5)
    a, b = _bf16(rng, (m, k)), _bf16(rng, (k, n))
    c = np.zeros((m, n), np.float32)
    mod(a, b, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# LLVM signatures checked at load, against LLVM's own declarations

# pmaddwd ymm (AVX2, does not accumulate): C[8] (int32) += A[8, 2] . B[8, 2] (int16 pairs)
PMADDWD = """\
name: x86-avx2-pmaddwd
target: llvm
requires: {arch: [x86_64], features: [+avx2]}
intrinsics:
  - name: pmaddwd_8x2_i16i32
    operands:
      - {name: A, shape: [8, 2], dtype: int16, role: input, contiguous: true}
      - {name: B, shape: [8, 2], dtype: int16, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: int32, role: accumulator, contiguous: true}
    iterators: [{name: i, kind: spatial, extent: 8}, {name: k, kind: reduce, extent: 2}]
    semantics: C[i] += cast(int32, A[i, k]) * cast(int32, B[i, k])
    llvm:
      intrinsic: llvm.x86.avx2.pmadd.wd
      args: [{operand: A, load: int16x16}, {operand: B, load: int16x16}]
      returns: int32x8
      store: C
      accumulate: true
"""

# one argument for vdpbf16ps: LLVM's upgrade of its old signatures reads a second parameter and
# fails an assertion (in this process it would abort Python)
ONE_ARGUMENT = """\
name: one-argument
target: llvm
requires: {arch: [x86_64], features: [+avx512bf16, +avx512vl]}
intrinsics:
  - name: dpbf16_one_argument
    operands:
      - {name: A, shape: [8], dtype: bfloat16, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: float32, role: accumulator, contiguous: true}
    iterators: [{name: i, kind: spatial, extent: 8}]
    semantics: C[i] += cast(float32, A[i])
    llvm:
      intrinsic: llvm.x86.avx512bf16.dpbf16ps.256
      args: [{operand: A, load: bfloat16x8}]
      returns: float32x8
      store: C
      accumulate: true
"""

I0 = "intrinsics[0].llvm"
WRONG_SIGNATURES = [
    ("i16-where-llvm-wants-bfloat",
     DPBF16.replace("{operand: B, load: bfloat16x16}", "{operand: B, load: bfloat16x16, then: [reinterpret: int16x16]}"),
     f"{I0}.args[2]", ["LLVM 22 rejects a call of llvm.x86.avx512bf16.dpbf16ps.256 as <8 x float> (<8 x float>, "
                       "<16 x bfloat>, <16 x i16>)", "it accepts argument 2 as <16 x bfloat> (bfloat16x16)"]),
    ("bfloat-where-llvm-wants-i16",
     PMADDWD.replace("{operand: A, load: int16x16}", "{operand: A, load: int16x16, then: [reinterpret: bfloat16x16]}"),
     f"{I0}.args[0]", ["LLVM 22 rejects a call of llvm.x86.avx2.pmadd.wd as <8 x i32> (<16 x bfloat>, <16 x i16>): "
                       "Intrinsic has incorrect argument type; it accepts argument 0 as <16 x i16> (int16x16 or uint16x16)"]),
    ("wrong-lane-count",
     DPBF16.replace("dpbf16ps.256", "dpbf16ps.512"),
     f"{I0}.returns", ["LLVM 22 rejects a call of llvm.x86.avx512bf16.dpbf16ps.512 as <8 x float> (<8 x float>, "
                       "<16 x bfloat>, <16 x bfloat>): Intrinsic has incorrect return type"]),
    ("wrong-integer-width",
     DPBF16.replace("reinterpret: int32, broadcast: 8, reinterpret: bfloat16x16]", "reinterpret: int32, broadcast: 8, reinterpret: int16x16]"),
     f"{I0}.args[1]", ["argument 1 is <16 x bfloat> (bfloat16x16), but int16x16 (<16 x i16>) is written"]),
    ("unknown-intrinsic",
     DPBF16.replace("dpbf16ps.256", "dpbf16pz.256"),
     f"{I0}.intrinsic", ["LLVM 22 has no intrinsic llvm.x86.avx512bf16.dpbf16pz.256"]),
    ("name-mangled-for-other-types",
     FMA_BF16.replace("llvm.fma.v8f32", "llvm.fma.v16f32"),
     f"{I0}.intrinsic", ["LLVM 22 names the intrinsic with these types llvm.fma.v8f32, not llvm.fma.v16f32"]),
    ("argument-missing",
     FMA_BF16.replace("        - {operand: C, load: float32x8}\n", "").replace("      store: C", "      store: C\n      accumulate: true"),
     f"{I0}.args", ["LLVM 22 rejects a call of llvm.fma.v8f32 as <8 x float> (<8 x float>, <8 x float>)"]),
    ("one-argument-aborts-llvm", ONE_ARGUMENT, f"{I0}.args",
     ["LLVM 22 aborts reading a declaration of llvm.x86.avx512bf16.dpbf16ps.256 as <8 x float> (<8 x bfloat>)",
      "getParamType() out of range", "check the number and types of the arguments"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "fragments"), [w[1:] for w in WRONG_SIGNATURES], ids=[w[0] for w in WRONG_SIGNATURES]
)
@pytest.mark.slow
def test_wrong_llvm_signature_is_one_line_naming_file_and_key(tmp_path, text, key, fragments):
    path = _write(tmp_path, text)
    with pytest.raises(IntrinsicError) as info:
        load_intrinsic(path)
    err = info.value
    message = str(err)
    assert err.source == str(path) and err.key == key, message
    where = f"{path}:{err.line}" if err.line is not None else str(path)  # the key's line, where it has one
    assert message.startswith(f"{where}: {key}: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_signature_answers_are_cached_and_an_abort_stays_in_the_child():
    """The check asks a child process once per (name, signature); LLVM's abort there is an answer."""
    calls = [
        ("llvm.x86.avx512bf16.dpbf16ps.256", "<8 x float>", ("<16 x bfloat>",)),  # aborts LLVM
        ("llvm.fma.v4f32", "<4 x float>", ("<4 x float>",) * 3),
    ]
    first = llvm_check.check_calls(calls)
    assert [a.kind for a in first] == ["aborted", "ok"] and "getParamType" in first[0].message
    assert llvm_check.check_calls(calls[1:]) == first[1:] and calls[1] in llvm_check._ANSWERS
    # the same question asked in this process would abort it: the child really is needed
    probe = (
        "import llvmlite.binding as llvm; "
        "llvm.parse_assembly('declare <8 x float> @llvm.x86.avx512bf16.dpbf16ps.256(<16 x bfloat>)')"
    )
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0
