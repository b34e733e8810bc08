"""CUDA C generation (tensorsearch.codegen.cuda): thread-bound kernels and WMMA units from YAML.

The sources are compiled by nvcc for sm_80 to PTX (no GPU or driver is needed); the tests are
skipped with a reason when nvcc is not installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import tensorsearch as ts
from tensorsearch.codegen import cuda
from tensorsearch.schedule import Schedule
from tensorsearch.script import parse


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found is None and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        found = "/usr/local/cuda/bin/nvcc"
    return found


NVCC = _nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (neither on PATH nor /usr/local/cuda/bin)")


def _ptx(tmp_path, source: str) -> str:
    cu, ptx = tmp_path / "kernel.cu", tmp_path / "kernel.ptx"
    cu.write_text(source)
    r = subprocess.run(
        [NVCC, "-arch=sm_80", "-ptx", "-o", str(ptx), str(cu)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, f"nvcc failed:\n{r.stderr}\n--- source ---\n{source}"
    return ptx.read_text()


def _wmma_gemm(unit: str = "wmma_16x16x16_f16f32", shared: bool = False) -> Schedule:
    """f16 x f16 -> f32 GEMM 64^3: 16x16 warp tiles (blockIdx.x/y, threadIdx.y), each tile blockized
    over its whole reduction and computed by the YAML unit."""
    wl = ts.workloads.make("GMM", (1, 64, 64, 64), "float16")
    sch = Schedule(wl.func)
    b = sch.get_block("Z")
    _bb, i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 16])
    jo, jt, ji = sch.split(j, [None, 2, 16])
    ko, ki = sch.split(k, [None, 16])
    sch.reorder(io, jo, jt, ii, ji, ko, ki)
    sch.bind(io, "blockIdx.x")
    sch.bind(jo, "blockIdx.y")
    sch.bind(jt, "threadIdx.y")
    tile = sch.blockize(ii)
    sch.annotate(tile, cuda.UNIT_ATTR, unit)
    if shared:  # stage X and Y through shared memory per thread block (the YAML's load scope)
        for index in (0, 1):
            sch.compute_at(sch.cache_read(tile, index, "shared"), jo)
    return sch


def test_wmma_gemm_source_structure():
    src = cuda.generate(_wmma_gemm().func, "nvidia-sm86")
    assert (
        'extern "C" __global__ void main_kernel(half* __restrict__ X, half* __restrict__ Y, float* __restrict__ Z)'
        in src
    )
    assert "#include <mma.h>" in src and "#include <cuda_fp16.h>" in src
    assert "int i_0 = blockIdx.x;" in src and "int j_1 = threadIdx.y;" in src
    # fragments declared from the templates, fill for the init, 4 k-steps of load/load/mma, store
    assert src.count("nvcuda::wmma::fragment<") == 3
    assert src.count("fill_fragment(Z_accumulator, 0.0f);") == 1
    assert "for (int unit_k = 0; unit_k < 4; ++unit_k)" in src
    assert (
        src.count("load_matrix_sync(") == 2 and "mma_sync(Z_accumulator, X_matrix_a, Y_matrix_b, Z_accumulator);" in src
    )
    assert "store_matrix_sync((&Z[" in src and ", 64, nvcuda::wmma::mem_row_major);" in src
    assert "threadIdx.x=32" in src  # warp-wide unit


@needs_nvcc
@pytest.mark.parametrize("shared", [False, True])
def test_wmma_gemm_compiles_to_wmma_ptx(tmp_path, shared):
    src = cuda.generate(_wmma_gemm(shared=shared).func, "nvidia-sm86")
    if shared:
        assert "__shared__ half X_shared[" in src and "load_matrix_sync(X_shared_matrix_a, (&X_shared[" in src
        assert src.index("__syncthreads();") < src.index("fill_fragment(")
    ptx = _ptx(tmp_path, src)
    assert "wmma.mma" in ptx and "wmma.load.a" in ptx and "wmma.load.b" in ptx and "wmma.store.d" in ptx


def test_unit_semantics_mismatch_is_an_error():
    # the f16-accumulating unit does not compute a float32 accumulation
    with pytest.raises(cuda.CudaCodegenError, match=r"block Z_o \(unit wmma_16x16x16_f16f16\).*semantics"):
        cuda.generate(_wmma_gemm("wmma_16x16x16_f16f16").func)
    with pytest.raises(cuda.CudaCodegenError, match="no intrinsic set .* unit 'no_such_unit'"):
        cuda.generate(_wmma_gemm("no_such_unit").func)


ELEMENTWISE = """
@T.prim_func
def add(A: T.Buffer((1024,), "float16"), B: T.Buffer((1024,), "float16"), C: T.Buffer((1024,), "float32")):
    for i in range(1024):
        with T.block("C"):
            vi = T.axis.remap("S", [i])
            T.reads(A[vi], B[vi])
            T.writes(C[vi])
            C[vi] = T.Cast("float32", A[vi]) + T.Cast("float32", B[vi] * T.float16(2.0))
"""


def _elementwise(shared: bool) -> Schedule:
    sch = Schedule(parse(ELEMENTWISE))
    b = sch.get_block("C")
    (i,) = sch.get_loops(b)
    io, ii = sch.split(i, [None, 128])
    sch.bind(io, "blockIdx.x")
    sch.bind(ii, "threadIdx.x")
    if shared:
        cache = sch.cache_read(b, 0, "shared")
        sch.compute_at(cache, io)
    return sch


def test_elementwise_source():
    src = cuda.generate(_elementwise(False).func)
    assert 'extern "C" __global__ void add(half* __restrict__ A, half* __restrict__ B, float* __restrict__ C)' in src
    assert "// launch: blockIdx.x=8, threadIdx.x=128" in src
    assert "int i_1 = threadIdx.x;" in src and "__float2half(2.0f)" in src
    src = cuda.generate(_elementwise(True).func)
    assert "__shared__ half A_shared[" in src
    assert (
        src.index("A_shared[((i_0 * 128) + ax0)] = ")
        < src.index("__syncthreads();")
        < src.index("int i_1 = threadIdx.x;")
    )


@needs_nvcc
@pytest.mark.parametrize("shared", [False, True])
def test_elementwise_compiles(tmp_path, shared):
    ptx = _ptx(tmp_path, cuda.generate(_elementwise(shared).func))
    assert ".entry add" in ptx
    if shared:
        assert "bar.sync" in ptx and ".shared" in ptx
