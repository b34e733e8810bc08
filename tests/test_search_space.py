"""The design space: rules, postprocessors and mutators (tensorsearch.search.space.design/postproc/mutator).

Every sampled program is built and checked against numpy on fresh random inputs.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from schedule_util import gemm_bias
from seeds import seeded_rng

import tensorsearch as ts
from tensorsearch import hardware, te, workloads
from tensorsearch.ir import Block, ForKind, structural_equal
from tensorsearch.schedule import Schedule
from tensorsearch.schedule.tree import walk_stmts
from tensorsearch.search.mutator import MutateComputeLocation, MutateParallel, MutateTileSize, MutateUnroll
from tensorsearch.search.space.cpu import (
    AutoInline,
    MultiLevelTiling,
    ParallelizeVectorizeUnroll,
    RandomComputeLocation,
    TileLayoutCopy,
)
from tensorsearch.search.space.design import DesignSpace
from tensorsearch.search.space.kind import postprocs_for, rules_for
from tensorsearch.search.space.rule import AUTO_TENSORIZE, SearchSpaceError

HOST = hardware.load("x86-emeraldrapids")  # a descriptor with VNNI; the programs are built for this CPU
VNNI_HERE = hardware.load("host").has_feature("+avx512vnni")


def _check_runs(wl, func, rng):
    xs = wl.make_inputs(rng)
    expected = wl.reference(*xs)
    if not VNNI_HERE and "vpdpbusd" in ts.build(func, HOST, jit=False).assembly:
        pytest.skip("this CPU has no AVX-512 VNNI")
    mod = ts.build(func)
    outs = [rng.uniform(-9, 9, size=o.shape).astype(o.dtype) for o in wl.outputs]  # garbage, not zeros
    mod(*xs, *outs)
    wl.check(outs, expected)
    return mod


def _kinds(func):
    return [loc.node.kind for loc in walk_stmts(func.body) if hasattr(loc.node, "kind")]


def _inst_names(trace):
    return [i.kind.name for i in trace.insts]


def test_default_rules_follow_the_descriptor():
    names = [r.name for r in rules_for(HOST)]
    assert names == [
        "SplitStridePhases",
        "AutoInline",
        "AddRFactor",
        "MultiLevelTilingWithIntrin",
        "MultiLevelTiling",
        "ParallelizeVectorizeUnroll",
        "RandomComputeLocation",
        "TileLayoutCopy",
    ]
    arm = hardware.load("arm-graviton2")
    assert "MultiLevelTilingWithIntrin" in [r.name for r in rules_for(arm)]
    gpu = hardware.load("nvidia-sm86")
    assert [r.name for r in rules_for(gpu)] == [
        "MultiLevelTilingTensorCore",
        "MultiLevelTilingGPU",
        "AutoInline",
        "AutoBind",
    ]


@pytest.mark.slow
def test_gemm_float32_spaces_and_candidates_compute_the_gemm():
    wl = workloads.make("GMM", (1, 64, 32, 48), "float32")
    space = DesignSpace(wl.func, HOST)
    # SSRSRS with no write cache, and the write cache under level 1 and under level 2; the same
    # three again with Y (read [k, j]) packed into 16-lane panels
    assert len(space.traces) == 6
    for trace in space.traces:
        tiles = [i for i in trace.insts if i.kind.name == "sample_perfect_tile"]
        assert sorted(dict(i.args)["n"] for i in tiles) == [2, 4, 4]  # i, j spatial; k reduce (b has extent 1)
        assert _inst_names(trace).count("sample_categorical") == 2  # parallel extent, unroll step
    assert [_inst_names(t).count("cache_write") for t in space.traces] == [0, 1, 1, 0, 1, 1]
    assert [_inst_names(t).count("cache_read") for t in space.traces] == [0, 0, 0, 1, 1, 1]
    packs = [dict(i.args)["index_map"] for i in space.traces[3].insts if i.kind.name == "transform_layout"]
    assert packs == ["lambda d0, d1, d2: (d2 // 16, d0, d1, d2 % 16)"]
    rng = random.Random(0)
    nprng = seeded_rng()
    keys = set()
    seen_kinds = set()
    for _ in range(6):
        cand = space.sample(rng)
        assert cand is not None
        keys.add(cand.key)
        seen_kinds.update(_kinds(cand.func))
        _check_runs(wl, cand.func, nprng)
        # the candidate's trace replays to the very same program
        sch = Schedule(wl.func)
        cand.trace.apply(sch)
        assert structural_equal(sch.func, cand.func)
    assert len(keys) > 1
    assert {ForKind.PARALLEL, ForKind.VECTORIZED} <= seen_kinds


@pytest.mark.slow
def test_a_read_transposed_to_the_vector_lanes_packs_into_panels():
    """Attention's scores, ``S[b, i, j] = sum_k Q[b, i, k] * K[b, j, k]``: K holds the vector
    lanes' iterator j in its middle dimension, so a vector of j is 32 elements apart; packed into
    ``(j // 16, b, k, j % 16)`` panels it is contiguous (ViT's scores took 2.8 ms unpacked, 7.6
    times the time of the same-sized product by V)."""
    Q = te.placeholder((2, 32, 32), "float32", name="Q")
    K = te.placeholder((2, 48, 32), "float32", name="K")
    r = te.reduce_axis((0, 32), name="k")
    S = te.compute((2, 32, 48), lambda b, i, j: te.sum(Q[b, i, r] * K[b, j, r], axis=r), name="S")
    from tensorsearch.search.space.heuristics import heuristic_trace

    func = te.create_prim_func([Q, K, S])
    space = DesignSpace(func, HOST)
    packs = {dict(i.args)["index_map"] for t in space.traces for i in t.insts if i.kind.name == "transform_layout"}
    assert packs == {"lambda d0, d1, d2: (d1 // 16, d0, d2, d1 % 16)"}
    packed = [k for k, t in enumerate(space.traces) if "transform_layout" in _inst_names(t)]
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 32, 32)).astype(np.float32), rng.standard_normal((2, 48, 32)).astype(np.float32)
    for index in packed[:2]:  # the analytic decisions: seed 0's sample unrolled 512 steps, a 90 s build
        cand = space.replay(heuristic_trace(space.traces[index], func, HOST), index)
        assert cand is not None
        out = rng.uniform(-9, 9, size=(2, 32, 48)).astype(np.float32)
        ts.build(cand.func)(q, k, out)
        np.testing.assert_allclose(out, q @ k.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_an_elementwise_epilogue_is_computed_under_the_tile_in_place_of_a_write_cache():
    # TVM's ReuseType::kMayReuse: the epilogue (bias + relu, one block once D is inlined into E)
    # is the write cache: reverse_compute_at under level 1 or 2, no cache_write copy, so the
    # output tile gets its bias and relu while it is in cache
    func = gemm_bias(48, 32, 24, relu=True)
    space = DesignSpace(func, HOST, rules=[r for r in rules_for(HOST) if r.name != "MultiLevelTilingWithIntrin"])
    assert not any("cache_write" in _inst_names(t) for t in space.traces)
    fused = [t for t in space.traces if "reverse_compute_at" in _inst_names(t)]
    assert len(fused) == 2 * len(space.traces) // 3  # levels 1 and 2 beside the unfused space, packed or not
    rng = random.Random(0)
    nprng = np.random.default_rng(7)
    a, b, bias = (nprng.standard_normal(s).astype(np.float32) for s in ((48, 24), (24, 32), (32,)))
    checked = 0
    for _ in range(8):
        cand = space.sample(rng)
        if cand is None or "reverse_compute_at" not in _inst_names(cand.trace):
            continue
        loops_above = {
            loc.node.name: len(loc.path) for loc in walk_stmts(cand.func.body) if isinstance(loc.node, Block)
        }
        assert loops_above["D"] > loops_above["root"] + 1  # under the tile's loops, not beside them
        out = nprng.uniform(-9, 9, size=(48, 32)).astype(np.float32)  # garbage, not zeros
        ts.build(cand.func)(a, b, bias, out)
        np.testing.assert_allclose(out, np.maximum(a @ b + bias, 0), rtol=1e-5, atol=1e-5)
        checked += 1
    assert checked >= 2
    # a batch of one read back as the constant 0 (as the ONNX lowering's broadcasts do) still matches
    A = te.placeholder((1, 8, 4), "float32", name="A")
    B = te.placeholder((4, 16), "float32", name="B")
    r = te.reduce_axis((0, 4), name="k")
    C = te.compute((1, 8, 16), lambda b, i, j: te.sum(A[b, i, r] * B[r, j], axis=r), name="C")
    D = te.compute((1, 8, 16), lambda b, i, j: C[0, i, j] + A[0, i, 0], name="D")
    batched = DesignSpace(te.create_prim_func([A, B, D]), HOST, rules=space.rules)
    assert any("reverse_compute_at" in _inst_names(t) for t in batched.traces)


@pytest.mark.slow
def test_a_prime_extent_is_padded_in_a_forked_space():
    """197 (ViT's tokens) tiles only as 1 or 197: a second set of spaces pads the output's rows to
    200 (a multiple of 8) and its columns to 208 (of the 16 float32 lanes) before tiling."""
    wl = workloads.make("GMM", (1, 197, 197, 64), "float32")
    space = DesignSpace(wl.func, HOST)
    pads = [dict(i.args)["padding"] for t in space.traces for i in t.insts if i.kind.name == "pad_einsum"]
    assert len(space.traces) == 9 and pads == [[1, 8, 16, 1]] * 6  # Y[k, j] packs into panels once padded
    padded = next(k for k, t in enumerate(space.traces) if "pad_einsum" in _inst_names(t))
    rng, nprng = random.Random(1), np.random.default_rng(2)
    for _ in range(3):
        cand = space.sample_space(padded, rng.randrange(1 << 30))
        assert cand is not None
        shapes = {b.name: [d.value for d in b.shape] for b in _buffers(cand.func)}
        assert shapes["Z_pad"] == [1, 200, 208] and shapes["Y_pad"][-1] == 208
        _check_runs(wl, cand.func, nprng)
    # extents that tile well, or padding that would add more than an eighth: no padded space
    assert not any(
        "pad_einsum" in _inst_names(t)
        for t in DesignSpace(workloads.make("GMM", (1, 64, 32, 48), "float32").func, HOST).traces
    )
    assert not any(
        "pad_einsum" in _inst_names(t)
        for t in DesignSpace(workloads.make("GMM", (1, 23, 17, 16), "float32").func, HOST).traces
    )


def _buffers(func):
    out = []
    for loc in walk_stmts(func.body):
        if isinstance(loc.node, Block):
            out.extend(loc.node.alloc_buffers)
    return out


@pytest.mark.slow
def test_postprocessing_equals_the_same_primitives_by_hand():
    wl = workloads.make("GMM", (1, 16, 16, 16), "float32")
    rules = [
        MultiLevelTiling(cache_write_levels=[], pack_reads=False),
        ParallelizeVectorizeUnroll(cores=2, unroll_max_steps=[16]),
    ]
    space = DesignSpace(wl.func, HOST, rules=rules)
    assert len(space.traces) == 1
    tiles = {"i": [2, 1, 2, 4], "j": [1, 2, 1, 8], "k": [4, 4]}

    def decide(inst, recorded):
        if inst.kind.name == "sample_perfect_tile":
            name = next(k for k, v in tiles.items() if len(v) == dict(inst.args)["n"] and k not in decide.used)
            decide.used.add(name)
            return tiles[name]
        if inst.kind.name == "sample_categorical":
            return 0  # parallel extent 2 (1 job per core x 2 cores); unroll step 16
        return recorded

    decide.used = set()
    sch = Schedule(wl.func)
    space.traces[0].apply(sch, decide)
    assert space.postprocess(sch)
    # by hand
    ref = Schedule(wl.func)
    z = ref.get_block("Z")
    b, i, j, k = ref.get_loops(z)
    i0, i1, i2, i3 = ref.split(i, tiles["i"])
    j0, j1, j2, j3 = ref.split(j, tiles["j"])
    k0, k1 = ref.split(k, tiles["k"])
    ref.reorder([b, i0, j0, i1, j1, k0, i2, j2, k1, i3, j3])
    ref.annotate(z, "meta_schedule.tiling_structure", "SSRSRS")
    ref.decompose_reduction(z, k0)
    fused = ref.fuse([b, i0])  # extent 1 * 2 reaches the parallel extent 2
    ref.parallel(fused)
    init = ref.get_block("Z_init")
    ref.vectorize(ref.get_loops(init)[-1])
    ref.vectorize(j3)
    # unroll the innermost loops while the product of their extents stays within 16
    init_loops = ref.get_loops(init)
    ref.unroll(init_loops[-2])  # i3_init (4); then j2_init (1) is skipped and i2_init (2) makes 8
    ref.unroll(init_loops[-4])
    ref.unroll(i3)  # 4; j2 (1) skipped; k1 (4) makes 16
    ref.unroll(k1)
    assert structural_equal(sch.func, ref.func), sch.func.script()
    _check_runs(wl, sch.func, seeded_rng())


@pytest.mark.slow
def test_int8_gemm_is_tensorized_with_the_yaml_intrinsic():
    wl = workloads.make("GMM", (1, 64, 64, 64), "int8")
    space = DesignSpace(wl.func, HOST)
    for trace in space.traces:
        names = _inst_names(trace)
        assert "blockize" in names and "transform_layout" in names
        # the packed copy of Y stays at the root, tiled by its panels (TileLayoutCopy) in every space
        assert "sample_compute_location" not in names and names.count("unroll") == 2
        ann = [dict(i.args)["ann_val"] for i in trace.insts if dict(i.args).get("ann_key") == AUTO_TENSORIZE]
        assert ann == [HOST.intrinsics[0].name]
    rng = random.Random(1)
    nprng = seeded_rng()
    for _ in range(3):
        cand = space.sample(rng)
        assert cand is not None
        assert "tensorize" in _inst_names(cand.trace)
        mod = _check_runs(wl, cand.func, nprng)
        assert "vpdpbusd" in mod.assembly


@pytest.mark.slow
def test_int8_convolution_keeps_its_padding_out_of_the_tensorized_tile():
    wl = workloads.reduced("C2D", 0, "int8")
    space = DesignSpace(wl.func, HOST)
    rng = random.Random(3)
    nprng = seeded_rng()
    for _ in range(2):
        cand = space.sample(rng)
        assert cand is not None  # a padding Select inlined into the tile would fail tensorize
        names = _inst_names(cand.trace)
        assert "tensorize" in names
        assert "vpdpbusd" in _check_runs(wl, cand.func, nprng).assembly


@pytest.mark.slow
def test_convolution_keeps_its_padding_out_of_the_hot_loop():
    # TVM's disallow_if_then_else: the padding's Select is not inlined into the convolution; the
    # padding gets a sampled compute location, and every sample computes the convolution
    wl = workloads.reduced("C2D", 0, "float32")
    space = DesignSpace(wl.func, HOST)
    for trace in space.traces:
        names = _inst_names(trace)
        assert "compute_inline" not in names and "sample_compute_location" in names
    # the sampled location may still be "inline" (as TVM's); the others keep the Select out
    rng = random.Random(2)
    nprng = seeded_rng()
    kept = 0
    for _ in range(4):
        cand = space.sample(rng)
        assert cand is not None
        blocks = {loc.node.name: loc.node for loc in walk_stmts(cand.func.body) if isinstance(loc.node, Block)}
        if "PadInput" in blocks:
            kept += 1
            assert "T.Select" not in str(blocks["conv2d_nhwc_update"])
        _check_runs(wl, cand.func, nprng)
    assert kept
    # disallow_select: false inlines it, as before
    rules = [r if r.name != "AutoInline" else AutoInline(disallow_select=False) for r in rules_for(HOST)]
    inlined = DesignSpace(wl.func, HOST, rules=rules)
    assert all("compute_inline" in _inst_names(t) for t in inlined.traces)
    cand = inlined.sample(random.Random(2))
    assert not any(getattr(loc.node, "name", None) == "PadInput" for loc in walk_stmts(cand.func.body))
    _check_runs(wl, cand.func, nprng)


def _blocks(func):
    return {loc.node.name: loc.node for loc in walk_stmts(func.body) if isinstance(loc.node, Block)}


@pytest.mark.slow
def test_a_plain_copy_is_inlined_into_an_intrinsic_tile():
    # a 1x1 convolution without padding: its PadInput only copies the input; rather than a pass
    # of its own in every call, the VNNI tile reads the input itself
    wl = workloads.make("C2D", (1, 6, 6, 16, 16, 1, 1, 0), "int8")
    space = DesignSpace(wl.func, HOST)
    nprng = np.random.default_rng(11)
    for seed in range(3):
        cand = space.sample(random.Random(seed))
        blocks = _blocks(cand.func)
        assert "PadInput" not in blocks
        tile = blocks["conv2d_nhwc_o_update"]
        assert "llvm.x86.avx512.vpdpbusd.512" in str(tile.body)
        assert "inputs" in [r.buffer.name for r in tile.reads]
        _check_runs(wl, cand.func, nprng)


@pytest.mark.slow
def test_padding_is_inlined_into_the_channel_padding_copy_and_kept_out_of_the_tile():
    # 3 input channels: tile_with_intrin pads them to the intrinsic's 4 in a copy; the spatial
    # padding's Select goes into that copy (one pass, not two), never into the reduction
    wl = workloads.make("C2D", (1, 8, 8, 3, 16, 3, 1, 1), "int8")
    space = DesignSpace(wl.func, HOST)
    nprng = np.random.default_rng(12)
    bodies = set()
    for seed in range(4):
        cand = space.sample(random.Random(seed))
        blocks = _blocks(cand.func)
        assert "PadInput" not in blocks
        (pad,) = [b for n, b in blocks.items() if n.startswith("PadInput_")]
        bodies.add(str(pad.body))
        assert "T.Select" not in str(blocks["conv2d_nhwc_o_update"].body)
        _check_runs(wl, cand.func, nprng)
    inbounds = "v1 >= 1 and v1 < 9 and v2 >= 1 and v2 < 9"
    assert (
        f"PadInput_pad[v0, v1, v2, v3] = T.Select(v3 < 3, T.Select({inbounds}, inputs[v0, v1 - 1, v2 - 1, v3], "
        "T.uint8(0)), T.uint8(0))"
    ) in bodies


@pytest.mark.slow
def test_add_rfactor_forks_a_small_output_reduction():
    wl = workloads.make("NRM", (1, 16, 256), "float32") if "NRM" in workloads.names() else None
    space = DesignSpace(wl.func, HOST)
    assert any("rfactor" in _inst_names(t) for t in space.traces)
    rng = random.Random(3)
    nprng = seeded_rng()
    ok = 0
    for _ in range(8):
        cand = space.sample(rng)
        if cand is not None and "rfactor" in _inst_names(cand.trace):
            _check_runs(wl, cand.func, nprng)
            ok += 1
    assert ok


def test_auto_inline_keeps_a_block_it_cannot_inline():
    wl = workloads.make("GMM", (1, 8, 8, 8), "float32")
    sch = Schedule(wl.func)
    before = sch.func
    out = AutoInline().apply(sch, sch.get_block("Z"))
    assert out == [sch] and sch.func is before


@pytest.mark.slow
def test_mutators_change_one_decision_and_replay():
    wl = workloads.make("GMM", (1, 64, 64, 64), "float32")
    space = DesignSpace(wl.func, HOST)
    rng = random.Random(4)
    cand = space.sample(rng)
    design = cand.design_trace
    assert "enter_postproc" not in _inst_names(design)
    for mutator in (MutateTileSize(), MutateUnroll(), MutateParallel()):
        mutant = mutator.apply(design, rng)
        assert mutant is not None, mutator
        changed = [(a, b) for a, b in zip(design.insts, mutant.insts, strict=True) if a.decision != b.decision]
        assert len(changed) == 1, mutator
        old, new = changed[0]
        if old.kind.name == "sample_perfect_tile":
            assert math.prod(old.decision) == math.prod(new.decision)
            assert new.decision[-1] <= dict(new.args)["max_innermost_factor"]
        child = space.replay(mutant)
        assert child is not None
        if isinstance(mutator, MutateTileSize):  # other decisions may leave this program as it was
            assert child.key != cand.key
        _check_runs(wl, child.func, seeded_rng())
    # no compute location to mutate in a single-block GEMM
    assert MutateComputeLocation().apply(design, rng) is None


@pytest.mark.slow
def test_mutating_a_compute_location():
    wl = workloads.reduced("C2D", 0, "float32")  # without AutoInline, the padding is computed at a sampled loop
    rules = [MultiLevelTiling(vector_bits=HOST.vector_bits, pack_reads=False), RandomComputeLocation()]
    space = DesignSpace(wl.func, HOST, rules=rules)
    rng = random.Random(5)
    cand = space.sample(rng)
    assert "sample_compute_location" in [i.kind.name for i in cand.design_trace.insts]
    mutant = MutateComputeLocation().apply(cand.design_trace, rng)
    assert mutant is not None
    child = space.replay(mutant)
    if child is not None:  # the primitive may fall back to the same location
        _check_runs(wl, child.func, seeded_rng())


def test_rules_listed_in_the_yaml(tmp_path):
    text = (hardware.search_path()[0] / "x86-emeraldrapids.yaml").read_text()
    custom = tmp_path / "custom.yaml"
    custom.write_text(
        text.replace("name: x86-emeraldrapids", "name: custom")
        + "search:\n  rules:\n    - MultiLevelTiling: {cache_write_levels: [], max_innermost_factor: 8, pack_reads: false}\n"
        + "    - ParallelizeVectorizeUnroll: {unroll_max_steps: [0]}\n"
    )
    hw = hardware.load(custom)
    assert [r.name for r in rules_for(hw)] == ["MultiLevelTiling", "ParallelizeVectorizeUnroll"]
    wl = workloads.make("GMM", (1, 32, 32, 32), "float32")
    space = DesignSpace(wl.func, hw)
    assert len(space.traces) == 1
    tiles = [i for i in space.traces[0].insts if i.kind.name == "sample_perfect_tile"]
    assert all(dict(i.args)["max_innermost_factor"] == 8 for i in tiles)
    bad = tmp_path / "bad.yaml"
    # the search checks rule names and parameters when it makes a design space, naming file and key
    bad.write_text(text + "search:\n  rules:\n    - MultiLevelTiling: {structure: SSXS}\n")
    with pytest.raises(SearchSpaceError, match=r"bad.yaml: search.rules\[0\].MultiLevelTiling: .*structure"):
        DesignSpace(wl.func, hardware.load(bad))
    bad.write_text(text + "search:\n  rules:\n    - Tiling\n")
    with pytest.raises(SearchSpaceError, match=r"bad.yaml: search.rules\[0\]: unknown schedule rule 'Tiling'"):
        rules_for(hardware.load(bad))
    # the target layer checks the section's shape
    bad.write_text(text + "search:\n  rules:\n    - [MultiLevelTiling]\n")
    with pytest.raises(hardware.HardwareError, match=r"bad.yaml:\d+: search.rules\[0\]: expected a rule name"):
        hardware.load(bad)


def test_postprocessors_reject_dynamic_loops():
    assert [p.name for p in postprocs_for(HOST)] == [
        "DisallowDynamicLoop",
        "RewriteReductionBlock",
        "RewriteTensorize",
        "RewriteParallelVectorizeUnroll",
    ]


def test_tile_layout_copy_tiles_a_packing_copy_by_its_layout():
    wl = workloads.make("GMM", (1, 64, 64, 64), "int8")
    sch = Schedule(wl.func)
    z = sch.get_block("Z")
    pack = sch.cache_read(z, 1, "global")
    sch.transform_layout(pack, ("write", 0), "lambda b, k, j: (b, j // 16, k // 4, j % 16, k % 4)")
    (out,) = TileLayoutCopy().apply(sch, pack)
    # by hand: split k by 4 and j by 16, outer parts in Y's order (k, j), inner ones in the packed order
    ref = Schedule(wl.func)
    z = ref.get_block("Z")
    rp = ref.cache_read(z, 1, "global")
    ref.transform_layout(rp, ("write", 0), "lambda b, k, j: (b, j // 16, k // 4, j % 16, k % 4)")
    k, j = ref.get_loops(rp)  # cache_read drops the unit batch loop
    k0, k1 = ref.split(k, [None, 4])
    j0, j1 = ref.split(j, [None, 16])
    ref.reorder([k0, j0, j1, k1])
    ref.unroll(j1)
    ref.unroll(k1)
    assert structural_equal(out.func, ref.func), out.func.script()
    # a block that is not such a copy is left alone
    sch2 = Schedule(wl.func)
    assert TileLayoutCopy().apply(sch2, sch2.get_block("Z")) == [sch2]


def test_a_1x1_convolution_runs_its_update_in_parallel():
    """The 1x1 kernel's unit reduction loops (rh, rw) go to the first reduction tile level: placed
    outermost they stopped the parallel rewrite at the first loop, and the convolution ran on one
    thread."""
    wl = workloads.get("C2D", 1, "float32")
    space = DesignSpace(wl.func, HOST)
    for n in range(len(space.traces)):
        cand = space.sample_space(n, 7 + n)
        assert cand is not None
        sch = Schedule(cand.func)
        outer = sch.get(sch.get_loops(sch.get_block("conv2d_nhwc_update"))[0])
        assert outer.kind == ForKind.PARALLEL, cand.func.script()


@pytest.mark.slow
def test_transposed_convolution_is_split_into_phases_and_each_is_tensorized():
    """T2D's stride-parity Select becomes four dense phase blocks before the other rules; each
    is tensorized with VNNI and the program is exact (interpreter with the vpdpbusd model)."""
    import intrin_oracle

    intrin_oracle.register()
    wl = workloads.reduced("T2D", 0, "int8")
    space = DesignSpace(wl.func, HOST)
    assert len(space.traces) <= space.max_spaces  # four phases would fork 6 ** 4 ways uncapped
    rng = seeded_rng()
    for n in (0, len(space.traces) - 1):
        cand = space.sample_space(n, n)
        assert cand is not None
        names = _inst_names(cand.trace)
        assert next(n for n in names if not n.startswith("get_")) == "split_stride_phases"
        assert names.count("tensorize") == 4
        xs = wl.make_inputs(rng)
        wl.check(ts.interpret(cand.func, *xs)[len(xs) :], wl.reference(*xs))


def test_a_reduction_whose_reads_serve_one_output_each_also_stays_untiled():
    # TVM tiles a reduction only where a read is shared between outputs (GEMM's A and B). A
    # softmax's row sum reads each element for one output: it keeps an untiled space, the first
    # since it reduces rows; a max pool's window (channels last) keeps one too, after the tiled ones
    from tensorsearch.search.space.rule import TILING_STRUCTURE

    def tiled(spaces, name):
        return [bool(dict(s.get(s.get_block(name)).annotations).get(TILING_STRUCTURE)) for s in spaces]

    rule = MultiLevelTiling(vector_bits=512)
    gemm = Schedule(workloads.make("GMM", (1, 32, 32, 32), "float32").func)
    assert all(tiled(rule.apply(gemm, gemm.get_block("Z")), "Z"))

    x = te.placeholder((8, 37), "float32", "x")
    k = te.reduce_axis((0, 37), "k")
    total = te.compute((8,), lambda i: te.sum(te.exp(x[i, k]), axis=k), name="total")
    rows = Schedule(te.create_prim_func([x, total]))
    got = tiled(rule.apply(rows, rows.get_block("total")), "total")
    assert got[0] is False and all(got[1:]) and len(got) > 1

    img = te.placeholder((1, 8, 8, 16), "float32", "img")
    rh, rw = te.reduce_axis((0, 2), "rh"), te.reduce_axis((0, 2), "rw")
    pool = te.compute(
        (1, 4, 4, 16), lambda n, h, w, c: te.max(img[n, h * 2 + rh, w * 2 + rw, c], axis=[rh, rw]), name="pool"
    )
    window = Schedule(te.create_prim_func([img, pool]))
    got = tiled(rule.apply(window, window.get_block("pool")), "pool")
    assert got[-1] is False and all(got[:-1]) and len(got) > 1
