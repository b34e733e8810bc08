"""Hand-scheduled CUDA programs and the nvcc / GPU skip markers shared by the CUDA tests."""

from __future__ import annotations

import pytest

import tensorsearch as ts
from tensorsearch.codegen.cuda import find_nvcc
from tensorsearch.schedule import Schedule

SM86 = ts.hardware.load("nvidia-sm86")
SM90 = ts.hardware.load("nvidia-sm90")
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed (neither on PATH nor /usr/local/cuda/bin)")


def gpu_missing() -> str | None:
    """Why CUDA modules cannot run here (no pycuda, no GPU), or None when they can."""
    from tensorsearch.runtime.cuda import CudaRuntimeError, device_compute_capability

    try:
        device_compute_capability()
    except CudaRuntimeError as err:
        return str(err)
    return None


def gpu_descriptor() -> ts.target.Hardware:
    """The descriptor of GPU 0: nvidia-sm90 for compute capability 9.x, nvidia-sm86 for 8.x."""
    from tensorsearch.runtime.cuda import device_compute_capability

    major, _minor = device_compute_capability()
    return SM90 if major == 9 else SM86


def gemm_func(n: int = 64):
    return ts.workloads.make("GMM", (1, n, n, n), "float16").func


def wmma_tile(sch: Schedule):
    """16x16 warp tiles (blockIdx.x/y, threadIdx.y), each tile blockized over its whole reduction:
    (the tile block, the blockIdx.y loop)."""
    b = sch.get_block("Z")
    _bb, i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 16])
    jo, jt, ji = sch.split(j, [None, 2, 16])
    ko, ki = sch.split(k, [None, 16])
    sch.reorder(io, jo, jt, ii, ji, ko, ki)
    sch.bind(io, "blockIdx.x")
    sch.bind(jo, "blockIdx.y")
    sch.bind(jt, "threadIdx.y")
    return sch.blockize(ii), jo


def wmma_gemm(
    unit: str = "wmma_16x16x16_f16f32", shared: bool = False, annotate: bool = False, n: int = 64, hardware=SM86
) -> Schedule:
    """f16 x f16 -> f32 GEMM n^3 whose warp tiles are computed by the YAML unit: tensorized (checked
    at schedule time), or, with ``annotate``, only annotated (checked when lowering)."""
    from tensorsearch.codegen import cuda

    sch = Schedule(gemm_func(n), hardware=hardware)
    tile, jo = wmma_tile(sch)
    if annotate:
        sch.annotate(tile, cuda.UNIT_ATTR, unit)
    else:
        sch.tensorize(tile, unit)
    if shared:  # stage X and Y through shared memory per thread block (the YAML's load scope)
        for index in (0, 1):
            sch.compute_at(sch.cache_read(tile, index, "shared"), jo)
    return sch
