"""ARM's int8 matrix multiply (FEAT_I8MM: smmla, ummla, usmmla) written as YAML only
(intrinsics/arm-i8mm.yaml, hardware/arm-neoverse-v1.yaml): each unit's semantics verified
under qemu, a GEMM tiled with it, tensorized and compiled (its assembly has the instruction) and
run under qemu-aarch64 against numpy on fresh random inputs; the design space picks it for an
int8 GEMM. A test that runs aarch64 code skips with the reason when qemu or the cross compiler is
missing (``apt-get install qemu-user gcc-aarch64-linux-gnu``)."""

from __future__ import annotations

import numpy as np
import pytest
from seeds import seeded_rng

import tensorsearch as ts
from tensorsearch import hardware, te, workloads
from tensorsearch.intrin import match, tile_with_intrin
from tensorsearch.runtime.cross import aarch64_tools_available, run_aarch64
from tensorsearch.runtime.verify import IntrinsicVerifyError, verify_intrinsic
from tensorsearch.schedule import Schedule
from tensorsearch.search.space.design import DesignSpace

pytestmark = pytest.mark.slow  # every test here: see pyproject.toml's markers

V1 = hardware.load("arm-neoverse-v1")
UNITS = {  # intrinsic -> (A dtype, B dtype, C dtype, mnemonic)
    "neon_smmla_2x2x8_i8i8i32": ("int8", "int8", "int32", "smmla"),
    "neon_ummla_2x2x8_u8u8u32": ("uint8", "uint8", "uint32", "ummla"),
    "neon_usmmla_2x2x8_u8i8i32": ("uint8", "int8", "int32", "usmmla"),
}


def _needs_qemu() -> None:
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(f"cannot run aarch64 code here: {reason}")


def _gemm(a_dtype: str, b_dtype: str, c_dtype: str, m: int, n: int, k: int):
    """C[i, j] = sum_k A[i, k] * B[k, j] (B row-major over k, as a weight is stored)."""
    a = te.placeholder((m, k), a_dtype, "A")
    b = te.placeholder((k, n), b_dtype, "B")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(te.cast(a[i, r], c_dtype) * te.cast(b[r, j], c_dtype), axis=r), name="C")
    return te.create_prim_func([a, b, c])


def _random(shape, dtype, rng):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _run(mod: ts.Module, tmp_path, arrays):
    path = tmp_path / f"{mod.name}.o"
    mod.save_object(str(path))
    return run_aarch64(str(path), mod.name, arrays)


def test_the_shipped_descriptor_offers_i8mm_before_sdot():
    assert [i.name for i in V1.intrinsics] == [*UNITS, "neon_sdot_4x4_i8i8i32", "neon_udot_4x4_u8u8u32"]
    assert V1.has_feature("+i8mm") and not hardware.load("arm-graviton2").has_feature("+i8mm")


@pytest.mark.parametrize("name", sorted(UNITS))
def test_each_unit_is_verified_under_qemu(name):
    _needs_qemu()
    verdict = verify_intrinsic(V1.intrinsic(name), V1)
    assert verdict.verified and verdict.detail == "8 trials under qemu-aarch64 (neoverse-v1)", verdict.detail


def test_a_unit_with_its_output_transposed_is_refused_under_qemu(tmp_path):
    """C[j, i] for C[i, j]: the 2x2 tile's elements [0, 1] and [1, 0] swap, which only running the
    instruction shows."""
    _needs_qemu()
    text = open(V1.intrinsic_sets[0].source).read()
    wrong = text.replace("name: arm-i8mm", "name: my-i8mm").replace(
        "semantics: C[i, j] += cast(int32, A[i, k]) * cast(int32, B[j, k])\n    llvm:\n      intrinsic: llvm.aarch64.neon.smmla",
        "semantics: C[i, j] += cast(int32, A[j, k]) * cast(int32, B[i, k])\n    llvm:\n      intrinsic: llvm.aarch64.neon.smmla",
    )
    assert wrong.count("A[j, k]") == 1
    path = tmp_path / "my-i8mm.yaml"
    path.write_text(wrong)
    smmla = ts.target.load_intrinsic(path)["neon_smmla_2x2x8_i8i8i32"]
    with pytest.raises(
        IntrinsicVerifyError,
        match=r"my-i8mm\.yaml: intrinsic neon_smmla_2x2x8_i8i8i32 computes something other than its semantics: "
        r"element \[0, 1\] of C is -?\d+, the semantics give -?\d+",
    ):
        verify_intrinsic(smmla)


@pytest.mark.parametrize("name", sorted(UNITS))
def test_a_gemm_tensorized_with_each_unit_matches_numpy(name, tmp_path):
    a_dtype, b_dtype, c_dtype, mnemonic = UNITS[name]
    m, n, k = 6, 10, 40  # 40 is a multiple of 8; 6 and 10 of 2
    func = _gemm(a_dtype, b_dtype, c_dtype, m, n, k)
    report = match(func, "C", V1.intrinsic(name))
    assert [it.intrin_iter for it in report.best.iterators] == ["i", "j", "k"]
    sch = Schedule(func, hardware=V1)
    sch.tensorize(tile_with_intrin(sch, sch.get_block("C"), V1.intrinsic(name)), name)
    mod = ts.build(sch.func, V1, name="gemm")
    assert f"\t{mnemonic}\t" in mod.assembly
    _needs_qemu()
    rng = seeded_rng()
    a, b = _random((m, k), a_dtype, rng), _random((k, n), b_dtype, rng)
    c = _random((m, n), c_dtype, rng)  # garbage, not zeros: the kernel initializes it
    *_, got = _run(mod, tmp_path, [a, b, c])
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(c_dtype)
    np.testing.assert_array_equal(got, want)


def test_the_design_space_tensorizes_an_int8_gemm_with_usmmla(tmp_path):
    """GMM's uint8 x int8 reaches usmmla, the first unit of the descriptor that fits, with no
    unit named in the search's code."""
    wl = workloads.make("GMM", (1, 16, 32, 64), "int8")
    space = DesignSpace(wl.func, V1)
    cand = None
    for seed in range(8):
        cand = space.sample_space(0, seed)
        if cand is not None:
            break
    assert cand is not None, space.why_invalid(0, 0)
    assert any(i.kind.name == "tensorize" for i in cand.trace.insts)
    mod = ts.build(cand.func, V1, name="gmm")
    assert "\tusmmla\t" in mod.assembly
    _needs_qemu()
    xs = wl.make_inputs(seeded_rng())
    out = np.full(wl.outputs[0].shape, -7, np.int32)
    *_, got = _run(mod, tmp_path, [*xs, out])
    wl.check([got], wl.reference(*xs))
