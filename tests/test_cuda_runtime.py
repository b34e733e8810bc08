"""CUDA modules (tensorsearch.runtime.cuda): nvcc builds a cubin here; pycuda runs it on a GPU.

The build, save/load and argument tests need only nvcc; the tests that run kernels skip with the
reason (no pycuda, no GPU) where they cannot run, and run in experiments/gpu_check.sh on a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from cuda_util import SM86, SM90, gpu_descriptor, gpu_missing, needs_nvcc, tensor_core_gemm, wmma_gemm

import tensorsearch as ts
from tensorsearch.codegen import cuda as cg
from tensorsearch.runtime.cuda import CudaModule, CudaRuntimeError
from tensorsearch.schedule import Schedule
from tensorsearch.script import parse

pytestmark = pytest.mark.filterwarnings("ignore::tensorsearch.target.IntrinsicNotVerified")
GPU_MISSING = gpu_missing()
needs_gpu = pytest.mark.skipif(GPU_MISSING is not None, reason=f"no GPU to run on: {GPU_MISSING}")

SCALE = """
@T.prim_func
def scale(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32"), alpha: T.float32):
    for i in range(4096):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] * alpha + T.float32(1.0)
"""


def _scale() -> Schedule:
    sch = Schedule(parse(SCALE))
    (i,) = sch.get_loops(sch.get_block("B"))
    io, ii = sch.split(i, [None, 256])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    return sch


@needs_nvcc
@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_build_gives_a_cubin_for_the_descriptors_architecture(hw, tmp_path):
    mod = ts.build(wmma_gemm(shared=True, hardware=hw).func, hw)
    assert isinstance(mod, CudaModule) and mod.sm == hw.gpu.sm
    assert mod.cubin[:4] == b"\x7fELF"  # a cubin is an ELF file of machine code
    assert (mod.grid, mod.block) == ((4, 2, 1), (32, 2, 1))
    assert [(p.name, p.written) for p in mod.params] == [("X", False), ("Y", False), ("Z", True)]
    assert "mma_sync(" in mod.source
    loaded = ts.runtime.load_module(mod.save(tmp_path / "gemm.cubin"))
    assert isinstance(loaded, CudaModule) and loaded.cubin == mod.cubin
    assert (loaded.grid, loaded.block, loaded.params) == (mod.grid, mod.block, mod.params)
    ptx = cg.compile_cuda(mod.source, hw, "ptx").decode()
    assert f".target {hw.gpu.sm}" in ptx and "wmma.mma.sync" in ptx


@needs_nvcc
@pytest.mark.slow
def test_arguments_are_checked_before_anything_runs():
    mod = ts.build(_scale().func, SM86)
    a, b = np.ones(4096, np.float32), np.empty(4096, np.float32)
    with pytest.raises(TypeError, match=r"scale takes 3 arguments \(A, B, alpha\), got 2"):
        mod(a, b)
    with pytest.raises(ValueError, match=r"buffer A: expected dtype float32, got float64"):
        mod(a.astype(np.float64), b, 2.0)
    with pytest.raises(ValueError, match=r"buffer B: expected shape \(4096,\), got \(4095,\)"):
        mod(a, b[:-1], 2.0)
    with pytest.raises(TypeError, match=r"argument 2 \(alpha\) must be a float32 scalar"):
        mod(a, b, a)


@pytest.mark.skipif(GPU_MISSING is None, reason="a GPU is here: the error for its absence cannot show")
@needs_nvcc
@pytest.mark.slow
def test_running_without_a_gpu_says_what_is_missing():
    mod = ts.build(_scale().func, SM86)
    with pytest.raises(CudaRuntimeError, match=r"running a CUDA module needs (pycuda|a GPU)"):
        mod(np.ones(4096, np.float32), np.empty(4096, np.float32), 2.0)


def test_without_nvcc_the_build_says_so(monkeypatch):
    monkeypatch.setattr(cg, "find_nvcc", lambda: None)
    with pytest.raises(cg.NvccNotFound, match=r"building for nvidia-sm86 needs nvcc.*install the CUDA toolkit"):
        ts.build(_scale().func, SM86)


@needs_nvcc
def test_nvcc_errors_are_one_line():
    with pytest.raises(cg.CudaCodegenError, match=r"nvcc refused the kernel for sm_86: .*error"):
        cg.compile_cuda('extern "C" __global__ void k() { undefined_name = 1; }', SM86)
    with pytest.raises(cg.CudaCodegenError, match="hardware x86-znver4 is not a GPU"):
        cg.compile_cuda("", "x86-znver4")


# ---------------------------------------------------------------------------------------------
# on a GPU


@needs_gpu
@needs_nvcc
def test_scale_runs_and_matches_numpy():
    mod = ts.build(_scale().func, gpu_descriptor())
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4096).astype(np.float32), np.full(4096, np.nan, np.float32)
    mod(a, b, 3.0)
    np.testing.assert_allclose(b, a * 3.0 + 1.0, rtol=1e-5, atol=1e-6)  # nvcc contracts to an FMA


@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("n,shared", [(64, True), (256, False)])
def test_wmma_gemm_runs_and_matches_numpy(n, shared):
    hw = gpu_descriptor()
    mod = ts.build(wmma_gemm(shared=shared, n=n, hardware=hw).func, hw)
    rng = np.random.default_rng(n)
    x = rng.standard_normal((1, n, n)).astype(np.float16)
    y = rng.standard_normal((1, n, n)).astype(np.float16)
    z = np.full((1, n, n), np.nan, np.float32)
    mod(x, y, z)
    np.testing.assert_allclose(z, x.astype(np.float32) @ y.astype(np.float32), rtol=1e-3, atol=1e-2)


@needs_gpu
@needs_nvcc
def test_time_measures_with_cuda_events():
    mod = ts.build(wmma_gemm(shared=True, n=256, hardware=gpu_descriptor()).func, gpu_descriptor())
    args = [np.ones((1, 256, 256), np.float16)] * 2 + [np.empty((1, 256, 256), np.float32)]
    t = mod.time(*args, repeat=3, min_repeat_ms=5)
    assert len(t.results) == 3 and all(0 < r < 0.01 for r in t.results) and t.number >= 1


@needs_gpu
@needs_nvcc
def test_a_cubin_of_another_architecture_is_refused():
    other = SM86 if gpu_descriptor() is SM90 else SM90
    mod = ts.build(_scale().func, other)
    with pytest.raises(CudaRuntimeError, match=rf"built for {other.gpu.sm} and cannot run on this GPU"):
        mod(np.ones(4096, np.float32), np.empty(4096, np.float32), 2.0)


@needs_gpu
@needs_nvcc
def test_tensor_core_gemm_runs_and_matches_numpy():
    hw, n = gpu_descriptor(), 256
    mod = ts.build(tensor_core_gemm(n, hw, warps=(2, 2), warp_tiles=(2, 2), k_tiles=2).func, hw)
    x, y, z = _gemm_args(n, seed=7)
    mod(x, y, z)
    np.testing.assert_allclose(z, x.astype(np.float32) @ y.astype(np.float32), rtol=1e-3, atol=1e-2)


@needs_gpu
@needs_nvcc
def test_design_space_candidates_run_and_match_numpy():
    import random

    from tensorsearch.search.space.design import DesignSpace

    hw, n = gpu_descriptor(), 256
    space = DesignSpace(ts.workloads.make("GMM", (1, n, n, n), "float16").func, hw)
    rng, ran = random.Random(3), 0
    while ran < 4:
        cand = space.sample(rng)
        if cand is None:
            continue
        x, y, z = _gemm_args(n, seed=ran)
        ts.build(cand.func, hw)(x, y, z)
        np.testing.assert_allclose(z, x.astype(np.float32) @ y.astype(np.float32), rtol=1e-3, atol=1e-2)
        ran += 1


def _gemm_args(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, n, n)).astype(np.float16)
    y = rng.standard_normal((1, n, n)).astype(np.float16)
    return x, y, np.full((1, n, n), np.nan, np.float32)


@needs_nvcc
@pytest.mark.slow
def test_a_kernel_needing_more_registers_than_its_block_may_have_is_a_build_error():
    # 16 warps of 4 x 4 accumulator fragments: far more than 65536 / 512 = 128 registers a thread
    sch = tensor_core_gemm(1024, SM90, warps=(4, 4), warp_tiles=(4, 4), k_tiles=1)
    with pytest.raises(cg.CudaCodegenError, match=r"uses \d+ registers a thread: \d+ for its block of 32x16x1 "
                       r"threads, more than the 65536 of nvidia-sm90"):  # fmt: skip
        ts.build(sch.func, SM90)
    assert ts.build(tensor_core_gemm(256, SM90).func, SM90).registers > 0


@needs_gpu
@needs_nvcc
def test_conv_design_space_candidates_run_and_match_numpy():
    import random

    from tensorsearch.search.space.design import DesignSpace

    hw = gpu_descriptor()
    wl = ts.workloads.make("C2D", (1, 56, 56, 64, 64, 3, 1, 1), "float16")  # ResNet-50's 3x3, 64 channels
    space = DesignSpace(wl.func, hw)
    rng, ran = random.Random(5), 0
    while ran < 3:
        cand = space.sample(rng)
        if cand is None:
            continue
        inputs = wl.make_inputs(ran)
        out = np.full((1, 56, 56, 64), np.nan, np.float32)
        ts.build(cand.func, hw)(*inputs, out)
        wl.check([out], wl.reference(*inputs))
        ran += 1
