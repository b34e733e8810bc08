"""CUDA C generation (tensorsearch.codegen.cuda): thread-bound kernels and WMMA units from YAML.

The sources are compiled by nvcc for sm_80 to PTX (no GPU or driver is needed); the tests are
skipped with a reason when nvcc is not installed.
"""

from __future__ import annotations

import re
import subprocess
import warnings

import pytest
from cuda_util import NVCC, SM86, gemm_func, needs_nvcc, wmma_gemm, wmma_tile
from schedule_util import check_trace_round_trip

from tensorsearch.codegen import cuda
from tensorsearch.ir import assert_structural_equal
from tensorsearch.schedule import InvalidArgument, Schedule, TensorizeError
from tensorsearch.script import parse


def _ptx(tmp_path, source: str) -> str:
    cu, ptx = tmp_path / "kernel.cu", tmp_path / "kernel.ptx"
    cu.write_text(source)
    r = subprocess.run(
        [NVCC, "-arch=sm_80", "-ptx", "-o", str(ptx), str(cu)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, f"nvcc failed:\n{r.stderr}\n--- source ---\n{source}"
    return ptx.read_text()


def test_wmma_gemm_source_structure():
    src = cuda.generate(wmma_gemm().func, "nvidia-sm86")
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
@pytest.mark.slow
def test_wmma_gemm_compiles_to_wmma_ptx(tmp_path, shared):
    src = cuda.generate(wmma_gemm(shared=shared).func, "nvidia-sm86")
    if shared:
        assert (
            "__shared__ __align__(32) half X_shared[" in src
            and "load_matrix_sync(X_shared_matrix_a, (&X_shared[" in src
        )
        assert src.index("__syncthreads();") < src.index("fill_fragment(")
    ptx = _ptx(tmp_path, src)
    assert "wmma.mma" in ptx and "wmma.load.a" in ptx and "wmma.load.b" in ptx and "wmma.store.d" in ptx


def test_generated_units_say_they_were_not_verified(monkeypatch):
    """tensorsearch runs no CUDA code, so no unit intrinsic is ever run against its semantics:
    generating one warns IntrinsicNotVerified for each of its intrinsics, once per process."""
    from tensorsearch.target import IntrinsicNotVerified, intrinsics

    monkeypatch.setattr(intrinsics, "_WARNED_NOT_VERIFIED", set())
    func = wmma_gemm().func
    with pytest.warns(IntrinsicNotVerified) as record:
        cuda.generate(func, "nvidia-sm86")
    messages = sorted(str(w.message) for w in record if issubclass(w.category, IntrinsicNotVerified))
    unit = SM86.intrinsic_sets[0].unit("wmma_16x16x16_f16f32")
    assert len(messages) == len(unit.members) == 5
    for name, text in zip(sorted(unit.members), messages, strict=True):
        assert re.fullmatch(rf".*/cuda-wmma-f16\.yaml: {name} not verified: .*CUDA.*", text), text
    with warnings.catch_warnings():
        warnings.simplefilter("error", IntrinsicNotVerified)
        cuda.generate(func, "nvidia-sm86")


def test_annotated_unit_matches_tensorized_unit():
    # the annotation path still works, and tensorize records exactly the same annotation
    annotated = wmma_gemm(annotate=True)
    tensorized = wmma_gemm()
    assert_structural_equal(annotated.func, tensorized.func)
    assert cuda.generate(annotated.func, "nvidia-sm86") == cuda.generate(tensorized.func, "nvidia-sm86")
    # naming the unit's compute intrinsic selects the unit
    by_compute = Schedule(gemm_func(), hardware=SM86)
    by_compute.tensorize(wmma_tile(by_compute)[0], "wmma_mma_16x16x16_f16f32")
    assert_structural_equal(by_compute.func, tensorized.func)


def test_tensorize_unit_trace_round_trip():
    sch = wmma_gemm(shared=True)
    assert "tensorize" in sch.trace.as_python() and "wmma_16x16x16_f16f32" in sch.trace.as_python()
    check_trace_round_trip(sch, gemm_func())


def test_tensorize_unit_mismatch_leaves_schedule_unchanged():
    # the f16-accumulating unit does not compute the float32 accumulation of this GEMM
    sch = Schedule(gemm_func(), hardware=SM86)
    tile, _jo = wmma_tile(sch)
    before, trace = sch.func, sch.trace.as_json_text()
    with pytest.raises(
        TensorizeError,
        match=r"cannot tensorize block Z_o with unit wmma_16x16x16_f16f16: the inner block Z does not "
        r"compute the semantics of wmma_mma_16x16x16_f16f16",
    ):
        sch.tensorize(tile, "wmma_16x16x16_f16f16")
    assert sch.func is before and sch.trace.as_json_text() == trace
    with pytest.raises(InvalidArgument, match="hardware nvidia-sm86 offers no intrinsic or unit 'no_such_unit'"):
        sch.tensorize(tile, "no_such_unit")
    # a CUDA intrinsic that is no unit's compute cannot be tensorized
    with pytest.raises(TensorizeError, match="not the compute intrinsic of a unit"):
        sch.tensorize(tile, "wmma_fill_16x16x16_f32")
    assert sch.func is before and sch.trace.as_json_text() == trace
    # a loop is blockized first; on failure that blockize is undone too
    sch = Schedule(gemm_func(), hardware=SM86)
    _bb, i, _j, _k = sch.get_loops(sch.get_block("Z"))
    before, trace = sch.func, sch.trace.as_json_text()
    with pytest.raises(
        TensorizeError,
        match=r"unit wmma_16x16x16_f16f32: operand C \(shape \[16, 16\]\) covers 64 elements of Z dimension 1",
    ):
        sch.tensorize(i, "wmma_16x16x16_f16f32")
    assert sch.func is before and sch.trace.as_json_text() == trace


def test_unit_semantics_mismatch_is_an_error():
    # the annotation path is checked when lowering, by the same check_unit
    with pytest.raises(cuda.CudaCodegenError, match=r"block Z_o \(unit wmma_16x16x16_f16f16\).*semantics"):
        cuda.generate(wmma_gemm("wmma_16x16x16_f16f16", annotate=True).func, SM86)
    with pytest.raises(cuda.CudaCodegenError, match="hardware nvidia-sm86 offers no unit 'no_such_unit'"):
        cuda.generate(wmma_gemm("no_such_unit", annotate=True).func, SM86)


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
    src = cuda.generate(_elementwise(False).func, SM86)
    assert 'extern "C" __global__ void add(half* __restrict__ A, half* __restrict__ B, float* __restrict__ C)' in src
    assert "// launch: blockIdx.x=8, threadIdx.x=128" in src
    assert "int i_1 = threadIdx.x;" in src and "__float2half(2.0f)" in src
    src = cuda.generate(_elementwise(True).func, SM86)
    assert "__shared__ __align__(32) half A_shared[" in src
    assert (
        src.index("A_shared[ax0] = A[((i_0 * 128) + ax0)];")
        < src.index("__syncthreads();")
        < src.index("int i_1 = threadIdx.x;")
    )


@needs_nvcc
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.slow
def test_elementwise_compiles(tmp_path, shared):
    ptx = _ptx(tmp_path, cuda.generate(_elementwise(shared).func, SM86))
    assert ".entry add" in ptx
    if shared:
        assert "bar.sync" in ptx and ".shared" in ptx
