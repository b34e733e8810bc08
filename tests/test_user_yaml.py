"""A new instruction really is one YAML file: a hardware file and intrinsic files of a user's own,
in one temporary folder, are matched, tensorized, built, checked against numpy and auto-tuned with
no environment variable and no Python change, and the tuned kernels contain the instructions.

The int16 unit is AVX2's ``vpmaddwd`` (``llvm.x86.avx2.pmadd.wd``: 16 int16 pairs multiplied and
summed pairwise into 8 int32 lanes); it does not accumulate, so the file says ``accumulate: true``.
The bfloat16 unit multiplies bfloat16 operands into float32 lanes with one FMA (``llvm.fma.v8f32``
after a ``cast`` step: a product of two bfloat16 values is exact in float32). Both run on every
x86-64 CPU with AVX2 and FMA, this one included.
"""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest
from user_units import FMA_BF16, pmaddwd

from tensorsearch import te
from tensorsearch.runtime import build
from tensorsearch.schedule import Schedule, tile_with_intrin
from tensorsearch.search import SearchConfig, tune
from tensorsearch.target import host, load, match, native

SMALL = SearchConfig(population_size=16, init_min_unmeasured=8, genetic_num_iters=1, num_trials_per_iter=8)


@pytest.fixture(scope="module")
def ray_session():
    from tensorsearch.search.measure.cluster import init_ray

    init_ray()
    yield


HARDWARE_YAML = """\
name: my-avx2-cpu
kind: cpu
triple: x86_64-unknown-linux-gnu
cpu: x86-64-v3
features: [+avx2, +fma]
cores: {cores}
vector_bits: 256
caches: {{l1d: 32 KiB, l2: 512 KiB, l3: 16 MiB}}
intrinsics: [my-avx2-pmaddwd, x86-fma-bf16]
description: any AVX2 machine, with the user's own int16 dot unit
"""

M, N, K = 16, 32, 64


def _user_folder(tmp_path):
    folder = tmp_path / "my-target"
    folder.mkdir()
    (folder / "my-avx2-pmaddwd.yaml").write_text(pmaddwd("my-avx2-pmaddwd"))
    (folder / "x86-fma-bf16.yaml").write_text(FMA_BF16)
    (folder / "my-avx2-cpu.yaml").write_text(HARDWARE_YAML.format(cores=os.cpu_count() or 1))
    return folder


def _int16_gemm():
    a = te.placeholder((M, K), "int16", name="A")
    b = te.placeholder((N, K), "int16", name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(te.cast(a[i, k], "int32") * te.cast(b[j, k], "int32"), axis=k), name="C")
    return te.create_prim_func([a, b, c])


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    a = rng.integers(-(2**15), 2**15, (M, K), dtype=np.int16)
    b = rng.integers(-(2**15), 2**15, (N, K), dtype=np.int16)
    return a, b, a.astype(np.int64) @ b.astype(np.int64).T


def _needs_avx2():
    here = host()
    if here.arch != "x86_64" or not here.has_feature("avx2"):
        pytest.skip("the int16 unit needs an x86-64 CPU with AVX2")


@pytest.mark.slow
def test_hardware_file_finds_its_intrinsic_file_beside_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORSEARCH_INTRINSICS_PATH", raising=False)
    hw = load(str(_user_folder(tmp_path) / "my-avx2-cpu.yaml"))
    assert [i.name for i in hw.intrinsics] == ["avx2_dot_8x2_i16i16i32", "fma_bf16_8x1_f32"]
    assert hw.intrinsics[0].source.endswith("my-target/my-avx2-pmaddwd.yaml")
    assert hw.intrinsics[1].source.endswith("my-target/x86-fma-bf16.yaml")


@pytest.mark.slow
def test_int16_unit_is_matched_tensorized_built_and_exact(tmp_path):
    _needs_avx2()
    hw = load(str(_user_folder(tmp_path) / "my-avx2-cpu.yaml"))
    dot = hw.intrinsic("avx2_dot_8x2_i16i16i32")
    func = _int16_gemm()
    report = match(func, "C", dot)
    # both operands are int16, so either can play the intrinsic's A: the swapped binding (the
    # tile reads B[...] * A[...], the intrinsic A[k] * B[i, k]) copies fewer elements and ranks first
    assert [m.binding[0] for m in report.feasible] == [("A", "B"), ("A", "A")], str(report)
    for mapping in range(len(report.feasible)):
        sch = Schedule(func, hardware=hw)
        sch.tensorize(tile_with_intrin(sch, sch.get_block("C"), dot, mapping), dot.name)  # by name
        mod = build(sch.func, hw)
        assert "vpmaddwd" in mod.assembly
        seed = int.from_bytes(os.urandom(4), "little")
        a, b, want = _inputs(seed)
        c = np.random.default_rng(seed).integers(-9, 9, (M, N)).astype(np.int32)  # garbage, not zeros
        mod(a, b, c)
        np.testing.assert_array_equal(c, want.astype(np.int32), err_msg=f"mapping {mapping}, inputs from seed {seed}")


@pytest.mark.slow
def test_int16_unit_is_auto_tuned(tmp_path, ray_session):
    _needs_avx2()
    hw = load(str(_user_folder(tmp_path) / "my-avx2-cpu.yaml"))
    result = tune(_int16_gemm(), hw, 16, tmp_path / "work", workers=0, config=SMALL)
    assert "vpmaddwd" in result.module.assembly, textwrap.shorten(result.trace.as_python(), 400)
    assert any(i.kind.name == "tensorize" for i in result.trace.insts), "the tuned kernel uses the unit"
    a, b, want = _inputs(7)
    c = np.zeros((M, N), np.int32)
    result.module(a, b, c)
    np.testing.assert_array_equal(c, want.astype(np.int32))


def _edited_vnni_folder(tmp_path):
    """A user's copy of the shipped VNNI set that keeps the intrinsic's name but calls the
    saturating vpdpbusds, and a hardware file beside it that lists the copy."""
    from tensorsearch.target import search_path

    shipped = search_path("intrinsics")[0] / "x86-avx512-vnni.yaml"
    folder = tmp_path / "edited"
    folder.mkdir()
    text = shipped.read_text().replace("llvm.x86.avx512.vpdpbusd.512", "llvm.x86.avx512.vpdpbusds.512")
    (folder / "x86-avx512-vnni.yaml").write_text(text)
    hw_text = (search_path("hardware")[0] / "x86-znver4.yaml").read_text().replace("name: x86-znver4", "name: my-zen4")
    (folder / "my-zen4.yaml").write_text(hw_text)
    return load(str(folder / "my-zen4.yaml"))


def _vnni_tile(hw):
    from tensorsearch.workloads import make

    wl = make("GMM", (1, 16, 32, 64), "int8")
    sch = Schedule(wl.func, hardware=hw)
    block = tile_with_intrin(sch, sch.get_block("Z"), hw.intrinsic("vnni_dot_16x4_u8i8i32"))
    return wl, sch, block


def test_an_edited_copy_that_keeps_a_shipped_name_is_used_as_edited(tmp_path):
    mine = _edited_vnni_folder(tmp_path)
    _, sch, block = _vnni_tile(mine)
    sch.tensorize(block, "vnni_dot_16x4_u8i8i32")
    assert "vpdpbusds.512" in sch.func.script()
    # an intrinsic is verified before it is built wherever this CPU can run it, whether or not the
    # descriptor it is built for does (a Zen 4 copy on an Ice Lake runs its VNNI check natively)
    if mine.intrinsic("vnni_dot_16x4_u8i8i32").requires.why_not(native()) is None:
        # verified before it is built: the saturating edit is caught, in the copy
        from tensorsearch.runtime.verify import IntrinsicVerifyError

        with pytest.raises(
            IntrinsicVerifyError, match=r"edited/x86-avx512-vnni.yaml: intrinsic vnni_dot_16x4_u8i8i32 computes"
        ):
            build(sch.func, mine, jit=False)
    else:
        assert "vpdpbusds" in build(sch.func, mine, jit=False).assembly


def test_a_trace_replayed_against_a_changed_definition_is_refused(tmp_path):
    from tensorsearch.schedule import InvalidArgument, Trace

    shipped = load("x86-znver4")
    wl, sch, block = _vnni_tile(shipped)
    sch.tensorize(block, "vnni_dot_16x4_u8i8i32")
    trace = Trace.from_json(sch.trace.as_json_text())
    trace.apply(Schedule(wl.func, hardware=shipped))  # the same definition: fine
    with pytest.raises(
        InvalidArgument,
        match=r"the trace's intrinsic vnni_dot_16x4_u8i8i32 .* differs from the one hardware my-zen4 offers .*edited/x86-avx512-vnni.yaml",
    ):
        trace.apply(Schedule(wl.func, hardware=_edited_vnni_folder(tmp_path)))


def _bf16_gemm():
    a = te.placeholder((M, K), "bfloat16", name="A")
    b = te.placeholder((K, N), "bfloat16", name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute(
        (M, N), lambda i, j: te.sum(te.cast(a[i, k], "float32") * te.cast(b[k, j], "float32"), axis=k), name="C"
    )
    return te.create_prim_func([a, b, c])


def _bf16_inputs(seed: int):
    import ml_dtypes

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))  # sum of |terms| per output
    return a, b, exact, scale


def _check_bf16(mod, seed: int) -> None:
    a, b, exact, scale = _bf16_inputs(seed)
    c = np.zeros((M, N), np.float32)
    mod(a, b, c)
    # float32 accumulation of exact products: each output within K roundings of its terms' magnitude
    assert np.all(np.abs(c - exact) <= K * np.finfo(np.float32).eps * scale), f"inputs from seed {seed}"


def test_bf16_unit_is_matched_tensorized_built_and_accurate(tmp_path):
    _needs_avx2()
    hw = load(str(_user_folder(tmp_path) / "my-avx2-cpu.yaml"))
    fma = hw.intrinsic("fma_bf16_8x1_f32")
    func = _bf16_gemm()
    assert match(func, "C", fma).feasible
    sch = Schedule(func, hardware=hw)
    sch.tensorize(tile_with_intrin(sch, sch.get_block("C"), fma), fma.name)
    mod = build(sch.func, hw)
    assert "vfmadd" in mod.assembly
    _check_bf16(mod, int.from_bytes(os.urandom(4), "little"))


@pytest.mark.slow
def test_bf16_unit_is_auto_tuned(tmp_path, ray_session):
    _needs_avx2()
    hw = load(str(_user_folder(tmp_path) / "my-avx2-cpu.yaml"))
    result = tune(_bf16_gemm(), hw, 16, tmp_path / "work", workers=0, config=SMALL)
    assert "vfmadd" in result.module.assembly
    assert any(i.kind.name == "tensorize" for i in result.trace.insts), "the tuned kernel uses the unit"
    _check_bf16(result.module, 11)


def test_the_workload_table_has_the_forms_of_the_users_int16_and_bfloat16_units(tmp_path, capsys):
    """GMM's int16 and bfloat16 forms map onto the pmaddwd and bfloat16 FMA units of the user's
    descriptor; `match` without --dtype (float32) names those dtypes."""
    from tensorsearch import workloads
    from tensorsearch.cli import main
    from tensorsearch.target import match

    path = _user_folder(tmp_path) / "my-avx2-cpu.yaml"
    hw = load(str(path))
    units = {i.name: i for i in hw.intrinsics}
    for dtype, unit in [("int16", "avx2_dot_8x2_i16i16i32"), ("bfloat16", "fma_bf16_8x1_f32")]:
        assert match(workloads.get("GMM", 0, dtype).func, "Z", units[unit]), (dtype, unit)
    assert main(["match", "GMM", "--hardware", str(path)]) == 0
    err = capsys.readouterr().err
    assert "GMM float32 (the default): none of my-avx2-cpu's tensor intrinsics takes float32" in err
    assert "fma_bf16_8x1_f32 takes bfloat16; avx2_dot_8x2_i16i16i32 takes int16: add --dtype bfloat16" in err
