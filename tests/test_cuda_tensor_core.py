"""Tensor cores without a GPU: WMMA intrinsics on fragment buffers, the GPU design space, its checks.

Every program here is checked where this machine can check it: its semantics by the interpreter
(the scheduled program, before CUDA code generation) against numpy on random inputs, its CUDA C by
nvcc (the PTX holds the mma instructions). tests/test_cuda_runtime.py runs them on a GPU.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from cuda_util import SM86, SM90, gemm_func, needs_nvcc, tensor_core_gemm

import tensorsearch as ts
from tensorsearch.codegen import cuda as cg
from tensorsearch.interpreter import interpret
from tensorsearch.ir import Allocate, For, post_order_visit
from tensorsearch.schedule import LoopKindError, Schedule, TensorizeError
from tensorsearch.search.mutator import gpu_mutators
from tensorsearch.search.postproc.gpu import gpu_limits_error
from tensorsearch.search.space.design import DesignSpace
from tensorsearch.search.space.kind import SEARCH_KINDS

pytestmark = pytest.mark.filterwarnings("ignore::tensorsearch.target.IntrinsicNotVerified")


def _gemm_matches_numpy(func, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, n, n)).astype(np.float16)
    y = rng.standard_normal((1, n, n)).astype(np.float16)
    z = rng.standard_normal((1, n, n)).astype(np.float32)  # garbage the kernel must overwrite
    interpret(func, x, y, z)
    np.testing.assert_allclose(z, x.astype(np.float32) @ y.astype(np.float32), rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_fragment_intrinsics_are_recorded_on_their_blocks_and_compute_the_gemm():
    sch = tensor_core_gemm(64)
    annotated = {
        sch.get(b).name: dict(sch.get(b).annotations).get("cuda_intrinsic")
        for b in sch.get_child_blocks(sch.get_block("root"))
    }
    names = {n: v for n, v in _all_annotations(sch).items() if v}
    assert set(names.values()) == {
        "cuda-wmma-f16/wmma_fill_16x16x16_f32",
        "cuda-wmma-f16/wmma_load_a_16x16x16_f16",
        "cuda-wmma-f16/wmma_load_b_16x16x16_f16",
        "cuda-wmma-f16/wmma_mma_16x16x16_f16f32",
        "cuda-wmma-f16/wmma_store_16x16x16_f32",
    }
    assert annotated  # the blocks are under the root's loops
    _gemm_matches_numpy(sch.func, 64, seed=0)


def _all_annotations(sch: Schedule) -> dict[str, str | None]:
    from tensorsearch.ir import Block

    out: dict[str, str | None] = {}
    post_order_visit(
        sch.func.body,
        lambda n: out.__setitem__(n.name, dict(n.annotations).get("cuda_intrinsic")) if isinstance(n, Block) else None,
    )
    return out


@pytest.mark.slow
def test_generated_kernel_keeps_fragments_across_the_reduction():
    src = cg.generate(tensor_core_gemm(256, SM90, warps=(2, 4), warp_tiles=(4, 2), k_tiles=2).func, SM90)
    assert "// launch: blockIdx.x=4, threadIdx.x=32, threadIdx.y=8" in src
    # per warp 4 x 2 accumulators, filled once, stored once after the reduction loop
    assert "fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> Z_wmma_accumulator[8];" in src
    assert (
        src.index("fill_fragment(") < src.index("for (int k_0 = 0; k_0 < 8; ++k_0)") < src.index("store_matrix_sync(")
    )
    # shared tiles of one k slice (128 x 32 and 32 x 128 halves), refilled after a barrier each step
    k_loop = src[src.index("for (int k_0 = 0;") :]
    assert k_loop.split("\n")[1].strip() == "__syncthreads();"
    # rows of 32 halves (64 bytes) padded by 8 halves so that a tile's rows start in other banks
    assert (
        "__shared__ __align__(32) half X_shared[5120];" in src
        and "__shared__ __align__(32) half Y_shared[4352];" in src
    )
    assert "mma_sync(Z_wmma_accumulator[((i_2 * 2) + j_2)], X_shared_wmma_matrix_a[" in src
    assert "load_matrix_sync(X_shared_wmma_matrix_a[" in src and "), 40);" in src  # row stride of X_shared


@needs_nvcc
@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_tensor_core_gemm_compiles_to_mma(hw):
    mod = ts.build(tensor_core_gemm(128, hw).func, hw)
    ptx = cg.compile_cuda(mod.source, hw, "ptx").decode()
    assert "wmma.mma.sync" in ptx and "wmma.load.a" in ptx and "wmma.store.d" in ptx and "bar.sync" in ptx


def _fragment_copy(staged: bool) -> tuple[Schedule, object]:
    """A schedule whose copy of X into matrix_a fragments (from shared memory when ``staged``) is
    split into 16 x 16 tiles: (the schedule, the tile loop to tensorize)."""
    sch = Schedule(gemm_func(64), hardware=SM86)
    b = sch.get_block("Z")
    if staged:
        sch.cache_read(b, 0, "shared")
    frag = sch.cache_read(b, 0, "wmma.matrix_a")
    *_, i, k = sch.get_loops(frag)
    i0, i1 = sch.split(i, [None, 16])
    k0, k1 = sch.split(k, [None, 16])
    sch.reorder(i0, k0, i1, k1)
    return sch, i1


def test_a_fragment_block_with_the_wrong_intrinsic_is_refused_and_the_schedule_kept():
    sch, tile = _fragment_copy(staged=True)
    before, trace = sch.func, sch.trace.as_json_text()
    with pytest.raises(TensorizeError, match=r"with wmma_load_b_16x16x16_f16: operand dst is buffer "
                       r"X_shared_wmma.matrix_a in scope wmma.matrix_a, the intrinsic needs wmma.matrix_b"):  # fmt: skip
        sch.tensorize(tile, "wmma_load_b_16x16x16_f16")
    assert sch.func is before and sch.trace.as_json_text() == trace
    sch.tensorize(tile, "wmma_load_a_16x16x16_f16")
    sch, tile = _fragment_copy(staged=False)
    with pytest.raises(TensorizeError, match=r"operand src is buffer X in scope global, the intrinsic needs shared"):
        sch.tensorize(tile, "wmma_load_a_16x16x16_f16")


def test_a_cooperative_fetch_may_bind_the_warps_axis_again_and_nothing_else_may():
    sch = tensor_core_gemm(64)  # its shared copies are bound to threadIdx.y inside the warps' loop
    assert "threadIdx.y" in [sch.get(lp).thread_binding for lp in sch.get_loops(sch.get_block("X_shared"))][-2:]
    other = Schedule(gemm_func(64), hardware=SM86)
    _bb, i, j, _k = other.get_loops(other.get_block("Z"))
    i0, _ = other.split(i, [None, 2])
    other.bind(i0, "threadIdx.y")
    j0, _ = other.split(j, [None, 32])
    with pytest.raises(LoopKindError, match=r"inside loop i_0, which is already bound to threadIdx.y \(only a copy "
                       r"into shared memory .* a cooperative fetch\)"):  # fmt: skip
        other.bind(j0, "threadIdx.y")


def test_a_shared_copy_computed_under_the_warps_covers_every_warps_rows():
    sch = tensor_core_gemm(64, warps=(2, 2), warp_tiles=(1, 1), k_tiles=1)
    loops = sch.get_loops(sch.get_block("X_shared"))
    fetch = [sch.get(lp) for lp in loops[3:]]  # below bx, ty, k_0: the fused copy over the block's threads
    total = 1
    for f in fetch:
        total *= f.extent.value
    assert total == 32 * 16  # 2 warps x 16 rows by 16 columns of k, not one warp's 16 rows


# ---------------------------------------------------------------------------------------------
# the design space


@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_design_space_samples_compute_the_gemm(hw):
    space = DesignSpace(gemm_func(64), hw)
    assert [r.name for r in space.rules] == [
        "MultiLevelTilingTensorCore",
        "MultiLevelTilingGPU",
        "AutoInline",
        "AutoBind",
    ]
    rng, checked = random.Random(0), 0
    for seed in range(40):
        cand = space.sample(rng)
        if cand is None:
            continue
        assert "wmma_mma_16x16x16_f16f32" in cand.trace.as_python()
        _gemm_matches_numpy(cand.func, 64, seed)
        checked += 1
        if checked == 2:
            break
    assert checked == 2


@needs_nvcc
@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_design_space_samples_build_for_the_descriptor(hw):
    space = DesignSpace(gemm_func(1024), hw)
    rng, built = random.Random(1), 0
    while built < 2:
        cand = space.sample(rng)
        if cand is None:
            continue
        assert gpu_limits_error(cand.func, hw) is None
        mod = ts.build(cand.func, hw)
        assert mod.block[0] == 32 and mod.block[1] * mod.block[0] <= hw.gpu.max_threads_per_block
        assert "wmma.mma.sync" in cg.compile_cuda(mod.source, hw, "ptx").decode()
        # RewriteCooperativeFetch copies whole vectors: 2, 4 or 8 halves a thread and access
        assert re.search(r"\*\(\((uint4|uint2|unsigned int)\*\)\(&X_shared\[", mod.source)
        built += 1


@pytest.mark.slow
def test_verify_gpu_code_names_the_limit_a_candidate_exceeds():
    big = tensor_core_gemm(512, SM86, warps=(8, 8), warp_tiles=(1, 1), k_tiles=1)
    assert gpu_limits_error(big.func, SM86) == "2048 threads per block, more than 1024"
    wide = tensor_core_gemm(1024, SM86, warps=(2, 2), warp_tiles=(8, 8), k_tiles=4)
    # 512 x 64 halves of X and 64 x 512 of Y, rows padded by 16 bytes
    assert gpu_limits_error(wide.func, SM86) == "70656 bytes of shared memory per block, more than 49152"


def test_auto_bind_runs_an_elementwise_program_on_threads():
    space = DesignSpace(_elementwise(), SM86)
    cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
    tags = set()
    post_order_visit(cand.func.body, lambda n: tags.add(n.thread_binding) if isinstance(n, For) else None)
    assert {"blockIdx.x", "threadIdx.x"} <= tags
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4096).astype(np.float32)
    b = np.empty(4096, np.float32)
    interpret(cand.func, a, b)
    np.testing.assert_allclose(b, a * 2.0 + 1.0, rtol=1e-6)


def _elementwise():
    from tensorsearch.script import parse

    return parse(
        """
@T.prim_func
def scale(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32")):
    for i in range(4096):
        with T.block("B"):
            vi = T.axis.remap("S", [i])
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] * T.float32(2.0) + T.float32(1.0)
"""
    )


@pytest.mark.slow
def test_gpu_compaction_gives_each_thread_block_its_tile_of_shared_memory():
    low = cg.lower_gpu(tensor_core_gemm(256, SM90, warps=(2, 4), warp_tiles=(4, 2), k_tiles=2).func, SM90)
    sizes = {}
    post_order_visit(
        low.body,
        lambda n: sizes.__setitem__(n.buffer.name, n.buffer.shape[0].value) if isinstance(n, Allocate) else None,
    )
    assert sizes["X_shared"] == 128 * (32 + 8) and sizes["Y_shared"] == 32 * (128 + 8)  # not 256 x 256; padded rows
    assert sizes["Z_wmma.accumulator"] == 4 * 2 * 256  # one warp's 4 x 2 fragments
    assert sizes["X_shared_wmma.matrix_a"] == 4 * 256  # 4 row tiles for one k step


# ---------------------------------------------------------------------------------------------
# convolutions: reindexed into a GEMM (im2col in the shared fetch, the output through shared memory)


def _conv(shape=(1, 16, 16, 32, 32, 3, 1, 1)):
    return ts.workloads.make("C2D", shape, "float16")


@pytest.mark.slow
def test_as_gemm_makes_a_convolution_a_gemm_over_reindexed_buffers():
    from tensorsearch.search.space.gpu import as_gemm

    sch = Schedule(_conv().func, hardware=SM86)
    block = sch.get_block("conv2d_nhwc")
    gemm = as_gemm(sch, block)
    blk = sch.get(block)
    assert [(iv.iter_type.value, iv.dom.extent.value) for iv in blk.iter_vars] == [
        ("spatial", 16 * 16),  # m = (n, h, w)
        ("spatial", 32),  # co
        ("reduce", 3 * 3 * 32),  # k = (rh, rw, ci)
    ]
    assert [(r.buffer.name, [x.value for x in r.buffer.shape]) for r in blk.reads] == [
        ("PadInput_reindex", [256, 288]),
        ("weight_reindex", [288, 32]),
    ]
    assert [sch.get(b).name for b in gemm.input_copies] == ["PadInput", "PadInput_reindex", "weight_reindex"]
    assert sch.get(gemm.output_copy).name == "conv2d_nhwc_reindex"
    x, w = (np.random.default_rng(1).standard_normal(s).astype(np.float16) for s in ((1, 16, 16, 32), (3, 3, 32, 32)))
    got, want = np.zeros((1, 16, 16, 32), np.float32), np.zeros((1, 16, 16, 32), np.float32)
    interpret(sch.func, x, w, got)
    interpret(_conv().func, x, w, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_conv_design_space_samples_compute_the_convolution(hw):
    wl = _conv()
    space = DesignSpace(wl.func, hw)
    cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
    names = {v for v in _all_annotations(Schedule(cand.func)).values() if v}
    assert "cuda-wmma-f16/wmma_store_shared_16x16x16_f32" in names and len(names) == 5
    rng = np.random.default_rng(2)
    x, w = (
        rng.standard_normal((1, 16, 16, 32)).astype(np.float16),
        rng.standard_normal((3, 3, 32, 32)).astype(np.float16),
    )
    got = rng.standard_normal((1, 16, 16, 32)).astype(np.float32)
    want = np.zeros_like(got)
    interpret(cand.func, x, w, got)
    interpret(wl.func, x, w, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@needs_nvcc
@pytest.mark.parametrize("hw", [SM86, SM90], ids=lambda h: h.name)
@pytest.mark.slow
def test_resnet_conv_samples_build_with_mma(hw):
    space = DesignSpace(_conv((1, 56, 56, 64, 64, 3, 1, 1)).func, hw)  # ResNet-50's 3x3, 64 channels
    cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
    mod = ts.build(cand.func, hw)
    assert "wmma.mma.sync" in cg.compile_cuda(mod.source, hw, "ptx").decode()
    assert "store_matrix_sync((&conv2d_nhwc_reindex_shared[" in mod.source  # out through shared memory


@pytest.mark.slow
def test_the_gpu_search_mutates_the_tile_and_thread_choices():
    from tensorsearch.search.mutator import MutateSplitChoice
    from tensorsearch.search.strategy.evolutionary import SearchConfig

    space = DesignSpace(gemm_func(1024), SM90)
    cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
    mutator = MutateSplitChoice()
    choices = mutator.candidates(cand.design_trace)
    assert [dict(i.args)["candidates"] for i in choices] == [[1, 2, 4]] * 5  # warps, tiles of i and j; k steps
    children = [space.replay(mutator.apply(cand.design_trace, random.Random(s))) for s in range(6)]
    changed = [c for c in children if c is not None and c.key != cand.key]
    assert len(changed) >= 3
    gpu, cpu = SEARCH_KINDS["gpu"].mutator_probs, SEARCH_KINDS["cpu"].mutator_probs
    assert [m.name for m, _ in SearchConfig().mutators(gpu)] == ["MutateSplitChoice"]
    assert [m.name for m, _ in SearchConfig().mutators(gpu)] == [m.name for m in gpu_mutators()]
    assert "MutateSplitChoice" not in [m.name for m, _ in SearchConfig().mutators(cpu)]


# ---------------------------------------------------------------------------------------------
# without tensor cores: MultiLevelTilingGPU (float32, or float16 shapes no 16x16 tile divides)


@pytest.mark.parametrize("op,args,dtype", [("GMM", (1, 64, 64, 64), "float32"), ("GMM", (1, 40, 40, 40), "float16")])
@pytest.mark.slow
def test_gpu_tiling_without_tensor_cores_computes_the_operator(op, args, dtype):
    wl = ts.workloads.make(op, args, dtype)
    space = DesignSpace(wl.func, SM86)
    text = space.traces[0].as_python()
    assert "tensorize" not in text and "'threadIdx.x'" in text and "cache_write" in text
    rng, checked = random.Random(0), 0
    for _ in range(20):
        cand = space.sample(rng)
        if cand is None:
            continue
        inputs = wl.make_inputs(checked)
        outs = [np.full(o.shape, np.nan, o.dtype) for o in wl.reference(*inputs)]
        interpret(cand.func, *inputs, *outs)
        wl.check(outs, wl.reference(*inputs))
        checked += 1
        if checked == 2:
            break
    assert checked == 2


@needs_nvcc
@pytest.mark.slow
def test_gpu_tiling_without_tensor_cores_builds():
    space = DesignSpace(ts.workloads.make("GMM", (1, 512, 512, 512), "float32").func, SM90)
    cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
    mod = ts.build(cand.func, SM90)
    assert "__shared__ __align__(32) float X_shared[" in mod.source and "Z_local[" in mod.source


@pytest.mark.slow
def test_gpu_tiling_of_a_float32_convolution_computes_it():
    """The shared fetch of a sliding window binds threads whose rows overlap (a halo): allowed for
    a pure copy, so a sample is invalid only where a copy does not divide among the threads."""
    wl = ts.workloads.make("C2D", (1, 8, 8, 16, 16, 3, 1, 1), "float32")
    space = DesignSpace(wl.func, SM86)
    valid = [c for c in (space.sample(random.Random(s)) for s in range(8)) if c is not None]
    assert len(valid) >= 6
    inputs = wl.make_inputs(4)
    outs = [np.full(o.shape, np.nan, o.dtype) for o in wl.reference(*inputs)]
    interpret(valid[0].func, *inputs, *outs)
    wl.check(outs, wl.reference(*inputs))


@pytest.mark.parametrize("op", ["C1D", "DEP", "GRP", "T2D"])
def test_gpu_space_of_other_operators_computes_them(op):
    """Operators no unit computes still get valid GPU programs: a shared fetch that does not divide
    among the threads is guarded in its last round instead of refused."""
    wl = ts.workloads.reduced(op, 0, "float32")
    space = DesignSpace(wl.func, SM86)
    cand = next(c for c in (space.sample_space(0, s) for s in range(12)) if c is not None)
    inputs = wl.make_inputs(1)
    outs = [np.full(o.shape, np.nan, o.dtype) for o in wl.reference(*inputs)]
    interpret(cand.func, *inputs, *outs)
    wl.check(outs, wl.reference(*inputs))
