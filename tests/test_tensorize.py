"""tensorize: validated replacement of a blockized tile by a tensor intrinsic (VNNI, SDOT)."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from seeds import seeded_rng

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import check_trace_round_trip

import tensorsearch
from tensorsearch import hardware
from tensorsearch.ir import BufferStore, Call, assert_structural_equal, structural_equal
from tensorsearch.lower import lower
from tensorsearch.runtime.cross import aarch64_tools_available, run_aarch64
from tensorsearch.schedule import InvalidArgument, Schedule
from tensorsearch.schedule.tensorize import TensorizeError
from tensorsearch.script import parse

VNNI = "vnni_dot_16x4_u8i8i32"
SDOT = "neon_sdot_4x4_i8i8i32"
M, N, K = 32, 64, 64


def packed_gemm(a_dtype: str, b_dtype: str, n_tile: int, k_tile: int, m: int = M, n: int = N, k: int = K) -> str:
    """int8 GEMM C[i, j] = sum_k A[i, k] * B[j, k] with B stored in the packed [n/nt, k/kt, nt, kt] layout."""
    nt, kt = n_tile, k_tile
    return f"""
@T.prim_func
def main(A: T.Buffer(({m}, {k}), "{a_dtype}"), B: T.Buffer(({n // nt}, {k // kt}, {nt}, {kt}), "{b_dtype}"),
         C: T.Buffer(({m}, {n}), "int32")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vj // {nt}, vk // {kt}, vj % {nt}, vk % {kt}])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vk]) * T.Cast("int32", B[vj // {nt}, vk // {kt}, vj % {nt}, vk % {kt}])
"""


PLAIN_GEMM = f"""
@T.prim_func
def main(A: T.Buffer(({M}, {K}), "uint8"), B: T.Buffer(({N}, {K}), "int8"), C: T.Buffer(({M}, {N}), "int32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vj, vk])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = 0
            C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vk]) * T.Cast("int32", B[vj, vk])
"""

FLOAT_GEMM = f"""
@T.prim_func
def main(A: T.Buffer(({M}, {K}), "float32"), B: T.Buffer(({N // 16}, {K // 4}, 16, 4), "float32"),
         C: T.Buffer(({M}, {N}), "float32")):
    for i, j, k in T.grid({M}, {N}, {K}):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vj // 16, vk // 4, vj % 16, vk % 4])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj // 16, vk // 4, vj % 16, vk % 4]
"""


X86 = hardware.load("x86-emeraldrapids")  # offers VNNI
ARM = hardware.load("arm-graviton2")  # offers SDOT


def tile(func, n_tile: int, k_tile: int, decompose: bool = True, blockize: bool = True, hw=X86):
    """split j and k by the intrinsic's tile, reorder the tile innermost, (decompose,) blockize."""
    sch = Schedule(func, hardware=hw)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    jo, ji = sch.split(j, [None, n_tile])
    ko, ki = sch.split(k, [None, k_tile])
    sch.reorder(i, jo, ko, ji, ki)
    if decompose:
        sch.decompose_reduction(b, i)
    if not blockize:
        return sch, ji
    return sch, sch.blockize(ji)


def unpack(b: np.ndarray) -> np.ndarray:
    """The packed [n/nt, k/kt, nt, kt] weight as a plain [n, k] matrix."""
    no, ko, nt, kt = b.shape
    return b.transpose(0, 2, 1, 3).reshape(no * nt, ko * kt)


def reference(a: np.ndarray, b_plain: np.ndarray) -> np.ndarray:
    return a.astype(np.int32) @ b_plain.astype(np.int32).T


# ---------------------------------------------------------------------------------------
# VNNI on this machine


VNNI_HERE = hardware.load("host").has_feature("+avx512vnni")


def _build_vnni(func):
    """Build for this CPU where it has VNNI; elsewhere compile for Emerald Rapids and skip the run."""
    if VNNI_HERE:
        return tensorsearch.build(func, name="gemm")
    assert "vpdpbusd" in tensorsearch.build(func, "x86-emeraldrapids", name="gemm", jit=False).assembly
    pytest.skip("this CPU has no AVX-512 VNNI (compiled for x86-emeraldrapids only)")


def test_building_vnni_for_a_cpu_without_it_says_so():
    """LLVM aborts the process on an intrinsic the CPU lacks; the build refuses first."""
    import dataclasses

    from tensorsearch.codegen.llvm import CodegenError

    func = parse(packed_gemm("uint8", "int8", 16, 4))
    sch, ob = tile(func, 16, 4)
    sch.tensorize(ob, VNNI)
    zen4 = tensorsearch.target.load("x86-znver4")
    features = tuple(f.replace("+avx512vnni", "-avx512vnni") for f in zen4.features)
    zen3 = dataclasses.replace(zen4, name="no-vnni", features=features, intrinsic_sets=())
    with pytest.raises(
        CodegenError, match=r"calls llvm.x86.avx512.vpdpbusd.512, which needs CPU feature\(s\) \+avx512vnni"
    ):
        tensorsearch.build(sch.func, zen3, jit=False)


def test_vnni_gemm_packed_weight_is_exact_and_uses_vpdpbusd():
    func = parse(packed_gemm("uint8", "int8", 16, 4))
    sch, ob = tile(func, 16, 4)
    sch.tensorize(ob, VNNI)
    text = sch.show()
    assert "llvm.x86.avx512.vpdpbusd.512" in text and "T.match_buffer" in text
    assert_structural_equal(parse(text), sch.func)  # the tensorized program prints and parses back
    mod = _build_vnni(sch.func)
    assert "vpdpbusd" in mod.assembly
    rng = seeded_rng()
    for _ in range(2):
        a = rng.integers(0, 256, (M, K), dtype=np.uint8)
        b = rng.integers(-128, 128, (N // 16, K // 4, 16, 4), dtype=np.int8)
        c = np.full((M, N), 7, np.int32)
        mod(a, b, c)
        np.testing.assert_array_equal(c, reference(a, unpack(b)))


def test_tensorize_keeps_the_init_of_a_blockized_block_and_accepts_a_loop():
    func = parse(packed_gemm("uint8", "int8", 16, 4))
    sch, ji = tile(func, 16, 4, decompose=False, blockize=False)
    sch.tensorize(ji, VNNI)  # blockized first, like TVM
    kinds = [t.kind.name for t in sch.trace.insts]
    assert kinds[-1] == "tensorize" and "blockize" not in kinds  # blockize is part of tensorize
    outer = sch.get(sch.get_block("C_o"))
    assert outer.init is not None and outer.match_buffers
    check_trace_round_trip(sch, func)
    mod = _build_vnni(sch.func)
    rng = seeded_rng()
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (N // 16, K // 4, 16, 4), dtype=np.int8)
    c = rng.integers(-1000, 1000, (M, N), dtype=np.int32)
    mod(a, b, c)
    np.testing.assert_array_equal(c, reference(a, unpack(b)))


def test_trace_round_trip_and_the_recorded_name():
    func = parse(packed_gemm("uint8", "int8", 16, 4))
    sch, ob = tile(func, 16, 4)
    intr = hardware.load("x86-emeraldrapids").intrinsic(VNNI)
    sch.tensorize(ob, intr)  # an Intrinsic object is recorded by its name, set and digest
    assert f"intrin={{'digest': '{intr.digest}', 'name': '{VNNI}', 'set': 'x86-avx512-vnni'}}" in sch.trace.as_python()
    assert VNNI in sch.trace.as_json_text()
    check_trace_round_trip(sch, func)


def test_lowered_form_has_one_vector_access_per_operand():
    func = parse(packed_gemm("uint8", "int8", 16, 4))
    sch, ob = tile(func, 16, 4)
    sch.tensorize(ob, VNNI)
    low = lower(sch.func, debug=True)
    stores = []

    from tensorsearch.ir import post_order_visit

    post_order_visit(low.body, lambda n: stores.append(n) if isinstance(n, BufferStore) else None)
    calls = [s for s in stores if isinstance(s.value, Call) and s.value.op.startswith("llvm.")]
    assert len(calls) == 1
    store = calls[0]
    assert store.value.dtype.lanes == 16 and str(store.indices[0].stride) == "1"
    lanes = sorted(a.dtype.lanes * a.dtype.bits // 8 for a in store.value.args)
    assert lanes == [64, 64, 64]


# ---------------------------------------------------------------------------------------
# errors: the schedule is unchanged


def _assert_refused(sch: Schedule, target, intrin: str, *words: str) -> None:
    before, trace_len = sch.func, len(sch.trace.insts)
    with pytest.raises(TensorizeError) as info:
        sch.tensorize(target, intrin)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    assert sch.func is before and len(sch.trace.insts) == trace_len


def test_float_block_is_refused_with_the_dtype():
    sch, ob = tile(parse(FLOAT_GEMM), 16, 4)
    _assert_refused(sch, ob, VNNI, "C_update_o", VNNI, "operand C", "float32", "int32")


def test_wrong_tile_extents_are_refused():
    # a tile of 8 x 4: the intrinsic's i runs 16
    sch2 = Schedule(parse(packed_gemm("uint8", "int8", 8, 4)), hardware=X86)
    b = sch2.get_block("C")
    i, j, k = sch2.get_loops(b)
    jo, ji = sch2.split(j, [None, 8])
    ko, ki = sch2.split(k, [None, 4])
    sch2.reorder(i, jo, ko, ji, ki)
    ob2 = sch2.blockize(ji)
    _assert_refused(sch2, ob2, VNNI, "C_o", "extent 8", "iterator i", "16")


def test_plain_weight_layout_is_refused_as_strided_rows():
    # B[j, k] with j tiled by 16 and k by 4: each row of the 16x4 tile is 64 bytes apart
    sch, ob = tile(parse(PLAIN_GEMM), 16, 4)
    _assert_refused(sch, ob, VNNI, "C_update_o", "operand B", "contiguous", "stride 64")


def test_transposed_access_is_refused():
    # B stored [k, n]: the tile B[k, j] has the dimensions in the other order
    text = PLAIN_GEMM.replace(f'B: T.Buffer(({N}, {K}), "int8")', f'B: T.Buffer(({K}, {N}), "int8")')
    text = text.replace("B[vj, vk]", "B[vk, vj]")
    sch, ob = tile(parse(text), 16, 4)
    _assert_refused(sch, ob, VNNI, "operand B", "same order")


def test_wrong_signedness_is_refused():
    sch, ob = tile(parse(packed_gemm("int8", "int8", 16, 4)), 16, 4)
    _assert_refused(sch, ob, VNNI, "operand A", "int8", "uint8")


def test_unknown_intrinsic_is_refused():
    sch, ob = tile(parse(packed_gemm("uint8", "int8", 16, 4)), 16, 4)
    before = sch.func
    with pytest.raises(
        InvalidArgument, match="hardware x86-emeraldrapids offers no intrinsic or unit 'nope'; it offers: vnni"
    ):
        sch.tensorize(ob, "nope")
    assert sch.func is before


def test_a_block_that_is_not_blockized_is_refused():
    sch = Schedule(parse(packed_gemm("uint8", "int8", 16, 4)), hardware=X86)
    _assert_refused(sch, sch.get_block("C"), VNNI, "block C", "loops around one inner block")


# ---------------------------------------------------------------------------------------
# SDOT for aarch64


@pytest.mark.slow
def test_sdot_gemm_for_graviton2():
    func = parse(packed_gemm("int8", "int8", 4, 4))
    sch, ob = tile(func, 4, 4, hw=ARM)
    sch.tensorize(ob, SDOT)
    assert not structural_equal(sch.func, func)
    mod = tensorsearch.build(sch.func, "arm-graviton2", name="gemm")
    assert "sdot" in mod.assembly
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(f"cannot run aarch64 code here: {reason}")
    rng = seeded_rng()
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    b = rng.integers(-128, 128, (N // 4, K // 4, 4, 4), dtype=np.int8)
    c = np.full((M, N), -3, np.int32)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "gemm.o")
        mod.save_object(path)
        _, _, out = run_aarch64(path, "gemm", [a, b, c])
    np.testing.assert_array_equal(out, reference(a, unpack(b)))


# ---------------------------------------------------------------------------------------
# a new intrinsic written in YAML only


VNNI_256_YAML = """
name: test-vnni-256
target: llvm
description: AVX-512 VNNI at 256-bit width (vpdpbusd ymm)
requires:
  arch: [x86_64]
  features: [+avx512vnni]
intrinsics:
  - name: vnni256_dot_8x4_u8i8i32
    operands:
      - {name: A, shape: [4], dtype: uint8, role: input, contiguous: true}
      - {name: B, shape: [8, 4], dtype: int8, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: int32, role: accumulator, contiguous: true}
    iterators:
      - {name: i, kind: spatial, extent: 8}
      - {name: k, kind: reduce, extent: 4}
    semantics: C[i] += cast(int32, A[k]) * cast(int32, B[i, k])
    llvm:
      intrinsic: llvm.x86.avx512.vpdpbusd.256
      args:
        - {operand: C, load: int32x8}
        - {operand: A, load: uint8x4, then: [reinterpret: int32, broadcast: 8, reinterpret: uint8x32]}
        - {operand: B, load: int8x32}
      returns: int32x8
      store: C
"""


def test_an_intrinsic_from_a_new_yaml_file(tmp_path):
    from tensorsearch.intrin import load_intrinsic

    path = tmp_path / "test-vnni-256.yaml"
    path.write_text(VNNI_256_YAML)
    intr = load_intrinsic(path)["vnni256_dot_8x4_u8i8i32"]
    func = parse(packed_gemm("uint8", "int8", 8, 4))
    sch, ob = tile(func, 8, 4)
    sch.tensorize(ob, intr)
    # a replay by name needs a hardware that offers the intrinsic
    with pytest.raises(InvalidArgument, match="offers no intrinsic or unit 'vnni256_dot_8x4_u8i8i32'"):
        check_trace_round_trip(sch, func)
    user_hw = dataclasses.replace(X86, name="test-ymm", intrinsic_sets=(load_intrinsic(path),))
    sch, ob = tile(func, 8, 4, hw=user_hw)
    sch.tensorize(ob, "vnni256_dot_8x4_u8i8i32")
    check_trace_round_trip(sch, func)
    host = hardware.load("host")
    if not host.has_feature("+avx512vnni") or not host.has_feature("+avx512vl"):
        pytest.skip("this machine has no AVX-512 VNNI with 256-bit vectors")
    mod = tensorsearch.build(sch.func, name="gemm")
    assert "vpdpbusd" in mod.assembly and "ymm" in mod.assembly
    rng = seeded_rng()
    a = rng.integers(0, 256, (M, K), dtype=np.uint8)
    b = rng.integers(-128, 128, (N // 8, K // 4, 8, 4), dtype=np.int8)
    c = np.zeros((M, N), np.int32) + 5
    mod(a, b, c)
    np.testing.assert_array_equal(c, reference(a, unpack(b)))


def test_new_yaml_intrinsic_and_hardware_file_auto_tensorize_a_plain_gemm(tmp_path):
    """No Python change: a hardware file listing a new intrinsic set; load, match, tile, tensorize, run."""
    from tensorsearch.intrin import match, tile_with_intrin
    from tensorsearch.workloads import make

    (tmp_path / "test-vnni-256.yaml").write_text(VNNI_256_YAML)
    src = (Path(hardware.__file__).resolve().parents[1] / "hardware" / "x86-emeraldrapids.yaml").read_text()
    hw_text = src.replace("name: x86-emeraldrapids", "name: test-avx512-ymm").replace(
        "intrinsics: [x86-avx512-vnni]", "intrinsics: [test-vnni-256.yaml]"
    )
    (tmp_path / "test-avx512-ymm.yaml").write_text(hw_text)
    hw = hardware.load(str(tmp_path / "test-avx512-ymm.yaml"))
    (intr,) = hw.intrinsics
    wl = make("GMM", (1, 32, 48, 64), "int8")  # plain [K, N] weight layout
    report = match(wl.func, "Z", intr)
    assert report.feasible, str(report)
    sch = Schedule(wl.func)
    block = tile_with_intrin(sch, sch.get_block("Z"), intr)
    sch.tensorize(block, intr)
    host = hardware.load("host")
    if not host.has_feature("+avx512vnni") or not host.has_feature("+avx512vl"):
        pytest.skip("this machine has no AVX-512 VNNI with 256-bit vectors")
    mod = tensorsearch.build(sch.func)
    assert "vpdpbusd" in mod.assembly and "ymm" in mod.assembly
    x, y = wl.make_inputs(seeded_rng())
    z = np.zeros(wl.outputs[0].shape, np.int32)
    mod(x, y, z)
    np.testing.assert_array_equal(z, wl.reference(x, y)[0])
