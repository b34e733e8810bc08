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


def tensor_core_gemm(n: int = 64, hardware=SM86, warps=(2, 2), warp_tiles=(2, 2), k_tiles: int = 2) -> Schedule:
    """f16 x f16 -> f32 GEMM n^3 scheduled as TVM schedules tensor cores: per thread block a
    (warps x warp_tiles x 16)^2 tile of Z, each warp's 16x16 accumulator fragments kept across
    the reduction, X and Y fetched into shared memory per k_tiles x 16 slice by all threads
    (cooperative fetch), fragments loaded from there; fill, load, mma and store each one WMMA
    intrinsic on fragment buffers."""
    sch = Schedule(gemm_func(n), hardware=hardware)
    b = sch.get_block("Z")
    sch.cache_write(b, 0, "wmma.accumulator")
    shared = [sch.cache_read(b, k, "shared") for k in (0, 1)]
    frags = [sch.cache_read(b, 0, "wmma.matrix_a"), sch.cache_read(b, 1, "wmma.matrix_b")]
    bb, i, j, k = sch.get_loops(b)
    i0, i1, i2, i3 = sch.split(i, [None, warps[0], warp_tiles[0], 16])
    j0, j1, j2, j3 = sch.split(j, [None, warps[1], warp_tiles[1], 16])
    k0, k1, k2 = sch.split(k, [None, k_tiles, 16])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2, i3, j3, k2)
    sch.bind(sch.fuse(bb, i0, j0), "blockIdx.x")
    ty = sch.fuse(i1, j1)
    sch.bind(ty, "threadIdx.y")
    tile = sch.blockize(i3)
    sch.tensorize(sch.decompose_reduction(tile, k0), "wmma_fill_16x16x16_f32")
    sch.tensorize(tile, "wmma_mma_16x16x16_f16f32")
    for frag, intrin in zip(frags, ("wmma_load_a_16x16x16_f16", "wmma_load_b_16x16x16_f16"), strict=True):
        sch.compute_at(frag, k1)
        sch.tensorize(_tile_2d(sch, frag), intrin)
    for cache in shared:
        sch.compute_at(cache, k0)
        fused = sch.fuse(*sch.get_loops(cache)[3:])
        _, ty_fetch, tx = sch.split(fused, [None, warps[0] * warps[1], 32])
        sch.bind(ty_fetch, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    store = sch.get_block("Z_wmma.accumulator")
    sch.reverse_compute_at(store, ty)
    sch.tensorize(_tile_2d(sch, store), "wmma_store_16x16x16_f32")
    return sch


def _tile_2d(sch: Schedule, block):
    """Split the block's two innermost loops into 16x16 tiles and blockize one tile."""
    *_, a, b = sch.get_loops(block)
    a0, a1 = sch.split(a, [None, 16])
    b0, b1 = sch.split(b, [None, 16])
    sch.reorder(a0, b0, a1, b1)
    return sch.blockize(a1)
