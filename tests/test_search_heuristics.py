"""Analytic first-round candidates (tensorsearch.search.space.heuristics): the machine model read from
the YAML, decisions valid for every design space of GEMM and convolution (int8 with VNNI and
float32), register tiles that fit the register file, and the first batch measuring them first."""

import math

import numpy as np
import pytest

from tensorsearch import hardware, interpret, workloads
from tensorsearch.search.cost_model.model import CostModel
from tensorsearch.search.space.design import DesignSpace
from tensorsearch.search.space.heuristics import MachineModel, heuristic_trace, heuristic_traces
from tensorsearch.search.strategy.evolutionary import EvolutionarySearch, RoundStats, SearchConfig
from tensorsearch.search.strategy.parallel import LocalEvaluator

ZNVER4 = hardware.load("x86-znver4")
# small shapes of the paper's operators, so that every design space replays in a few seconds
SMALL = {"GMM": (1, 128, 128, 128), "C2D": (1, 16, 16, 16, 32, 3, 1, 1)}


def tiles_of(trace):
    """The sample_perfect_tile decisions of a design trace, in order."""
    return [list(i.decision) for i in trace.insts if i.kind.name == "sample_perfect_tile"]


def test_machine_model_reads_the_yaml():
    assert MachineModel.from_hardware(ZNVER4) == MachineModel(64, 32, 32 * 1024, 1024 * 1024, 2)
    graviton = MachineModel.from_hardware(hardware.load("arm-graviton2"))
    assert (graviton.vector_bytes, graviton.vector_registers, graviton.l1, graviton.cores) == (16, 32, 64 * 1024, 64)


@pytest.mark.parametrize(
    "name,dtype", [("GMM", "int8"), ("GMM", "float32"), ("C2D", "float32"), ("C2D", "int8")], ids=str
)
@pytest.mark.slow
def test_heuristic_decisions_replay_and_postprocess_in_every_design_space(name, dtype):
    wl = workloads.make(name, SMALL[name], dtype)
    space = DesignSpace(wl.func, ZNVER4)
    for k, trace in enumerate(space.traces):
        made = heuristic_traces(trace, wl.func, ZNVER4, variants=2 if name == "GMM" else 1)
        assert made, f"space {k}: no heuristic decisions replay"
        for t in made:
            assert space.replay(t, k) is not None, f"space {k}: {tiles_of(t)} does not post-process"


def test_float32_gemm_register_tile_is_whole_vectors_that_fit_the_register_file():
    wl = workloads.get("GMM", 3, "float32")  # 1024^3
    space = DesignSpace(wl.func, ZNVER4)
    i_tiles, j_tiles, k_tiles = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    lanes = 16  # float32 in a 512-bit vector
    assert j_tiles[-1] % lanes == 0
    vectors = j_tiles[-1] // lanes
    assert i_tiles[-1] * vectors + vectors + 2 <= 32  # accumulators + loaded vectors + spare
    assert math.prod(i_tiles) == math.prod(j_tiles) == math.prod(k_tiles) == 1024
    # the L1 tile: one k panel of A and B under the register tile fits half of L1
    assert (i_tiles[-1] + j_tiles[-1]) * k_tiles[-1] * 4 <= 16 * 1024
    # enough outer parallel iterations for the cores
    assert i_tiles[0] * j_tiles[0] >= 2 * ZNVER4.cores


def test_padded_vector_loop_gets_a_register_tile_of_whole_vectors():
    # ViT's 197 tokens padded to 208 = 13 x 16 lanes: four vectors' worth would be 52 columns, the
    # largest divisor below 64, 3.25 vectors; the tile is 16 columns by as many rows as fit
    wl = workloads.make("GMM", (1, 197, 197, 64), "float32")
    space = DesignSpace(wl.func, ZNVER4)
    padded = [k for k, t in enumerate(space.traces) if any(i.kind.name == "pad_einsum" for i in t.insts)]
    assert padded
    for k in padded:
        trace = heuristic_trace(space.traces[k], wl.func, ZNVER4)
        i_tiles, j_tiles, _ = tiles_of(trace)
        assert math.prod(j_tiles) == 208 and j_tiles[-1] == 16
        assert i_tiles[-1] + 1 + 2 <= 32 and i_tiles[-1] >= 8  # accumulators + one loaded vector + spare
        assert space.replay(trace, k) is not None


def test_depthwise_register_tile_is_one_vector_by_a_few_columns_with_many_jobs():
    # DEP:1 (112x112x64, 3x3, stride 2): the input is not shared across output channels, so the
    # register tile is one vector of channels by up to 8 columns, the 3x3 window whole around it,
    # and every other iteration a parallel job (the channels' outer part too)
    wl = workloads.get("DEP", 1, "float32")
    space = DesignSpace(wl.func, ZNVER4)
    h, w, c, rh, rw = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    assert (c[-1], w[-1], h[-1]) == (16, 8, 1)
    assert rh == rw == [3, 1]
    assert h[0] * w[0] * c[0] == 7 * 7 * 4 and h[1] == 8
    # variant 2 is the GEMM-like plan's best shape, as for any other operator
    assert tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4, variant=2))[2][-1] in (16, 32)
    # int8: the register tile leaves room for the loads beside its int32 accumulators
    wl = workloads.get("DEP", 1, "int8")
    space = DesignSpace(wl.func, ZNVER4)
    h, w, c, *_ = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    assert c[-1] == 64 and 4 * w[-1] <= 32 - 4


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.slow
def test_depthwise_analytic_candidates_match_numpy(dtype):
    wl = workloads.make("DEP", (1, 16, 16, 32, 3, 1, 1), dtype)
    space = DesignSpace(wl.func, ZNVER4)
    rng = np.random.default_rng(3)
    inputs = wl.make_inputs(rng)
    want = wl.reference(*inputs)
    for k, trace in enumerate(space.traces):
        for t in heuristic_traces(trace, wl.func, ZNVER4, variants=1):
            cand = space.replay(t, k)
            assert cand is not None, f"space {k}: {tiles_of(t)} does not post-process"
            out = [np.zeros(o.shape, o.dtype) for o in wl.outputs]
            got = interpret(cand.func, *inputs, *out)
            wl.check(got[len(inputs) :], want)


def test_int8_gemm_register_tile_counts_intrinsic_tiles():
    wl = workloads.get("GMM", 3, "int8")
    space = DesignSpace(wl.func, ZNVER4)
    i_tiles, j_tiles, k_tiles = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    # the outer block of the VNNI tile walks j in whole 16-lane tiles (64 of them)
    assert math.prod(j_tiles) == 64 and math.prod(k_tiles) == 256
    assert 8 <= i_tiles[-1] * j_tiles[-1] <= 32 - j_tiles[-1] - 2


@pytest.mark.slow
def test_first_round_measures_the_analytic_candidates_alone():
    wl = workloads.make("GMM", SMALL["GMM"], "int8")
    space = DesignSpace(wl.func, ZNVER4)
    config = SearchConfig(
        population_size=4, init_min_unmeasured=2, genetic_num_iters=1, num_trials_per_iter=16, init_heuristic=6
    )
    search = EvolutionarySearch(space, CostModel(seed=0), config, 0, LocalEvaluator(space))
    stats = RoundStats()
    batch = search.next_batch([], set(), stats)
    assert stats.heuristic == 4 and len(batch) == 4  # at most a quarter of the batch
    assert stats.sampled == stats.mutants == stats.scored == 0  # nothing evolved before they are measured
    expected = set()
    for k, trace in enumerate(space.traces):
        for t in heuristic_traces(trace, wl.func, ZNVER4, variants=2):
            expected.add(space.replay(t, k).key)
    assert {c.key for c in batch} <= expected
    # a later round (something measured) makes none, nor does a batch under 16
    stats = RoundStats()
    search.next_batch(batch[:2], {c.key for c in batch[:2]}, stats)
    assert stats.heuristic == 0
    search.config = config.replace(num_trials_per_iter=8)
    stats = RoundStats()
    search.next_batch([], set(), stats)
    assert stats.heuristic == 0


@pytest.mark.slow
def test_a_round_from_nothing_measured_and_untrained_measures_fresh_samples():
    wl = workloads.make("GMM", SMALL["GMM"], "int8")
    space = DesignSpace(wl.func, ZNVER4)
    config = SearchConfig(population_size=8, init_min_unmeasured=4, genetic_num_iters=2, num_trials_per_iter=4)
    model = CostModel(seed=0)
    search = EvolutionarySearch(space, model, config, 0, LocalEvaluator(space))
    stats = RoundStats()
    batch = search.next_batch([], set(), stats)
    assert len({c.key for c in batch}) == len(batch) == 4
    assert stats.mutants == stats.scored == 0  # random scores would pick no better than the samples
    stats = RoundStats()  # something measured: its mutants are proposed, though the scores are still random
    later = search.next_batch(batch, {c.key for c in batch}, stats)
    assert not model.trained and stats.mutants > 0 and stats.scored > 0
    assert len(later) == 4 and not {c.key for c in later} & {c.key for c in batch}


def test_analytic_candidates_alternate_inline_and_root_padding():
    # a padded convolution: which padding is faster depends on the operator (DEP:1 inline, C3D:0
    # at the root), so the first round gets each; a GEMM (nothing to place) gets its variants
    wl = workloads.make("C2D", SMALL["C2D"], "float32")
    space = DesignSpace(wl.func, ZNVER4)
    search = EvolutionarySearch(space, CostModel(seed=0), SearchConfig(), 0, LocalEvaluator(space))
    trace = space.traces[0]
    got = [t.as_json_text() for t in search._analytic_traces(trace, 3, seed=5)]
    inline = heuristic_traces(trace, wl.func, ZNVER4, variants=2, seed=5)
    root = heuristic_traces(trace, wl.func, ZNVER4, variants=1, seed=5, compute_root=True)
    assert got == [inline[0].as_json_text(), root[0].as_json_text(), inline[1].as_json_text()]
    assert got[0] != got[1]
    gemm = workloads.make("GMM", SMALL["GMM"], "float32")
    space = DesignSpace(gemm.func, ZNVER4)
    search = EvolutionarySearch(space, CostModel(seed=0), SearchConfig(), 0, LocalEvaluator(space))
    want = [t.as_json_text() for t in heuristic_traces(space.traces[0], gemm.func, ZNVER4, variants=2, seed=5)]
    assert [t.as_json_text() for t in search._analytic_traces(space.traces[0], 2, seed=5)] == want


def test_mid_tile_sits_above_the_reduction():
    """The mid tile (S1) is above R0 and S2 is 1, so one register tile's init and accumulation
    run back to back (a 1x1 convolution: [14, 4, 1, 1] rows, not [14, 1, 4, 1])."""
    wl = workloads.get("C2D", 1, "float32")  # 56x56x64 -> 64, 1x1
    space = DesignSpace(wl.func, ZNVER4)
    h, w, co, rc = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    assert (h, w, co, rc) == ([14, 4, 1, 1], [1, 14, 1, 4], [1, 1, 1, 64], [2, 32])


def test_mid_tile_takes_the_innermost_tied_loop_whole():
    """Growing d, h or w of a 1x1x1 convolution adds the same input bytes; the innermost of them
    (w, then h) is taken whole, so a job reads whole rows: 2 x 56 x 56 pixels a job, not the
    16 x 8 x 8 of growing w by its smallest factor and then d and h."""
    wl = workloads.get("C3D", 1, "float32")  # 16x56x56x64 -> 64, 1x1x1
    space = DesignSpace(wl.func, ZNVER4)
    d, h, w, co, rc = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    assert (d, h, w, co, rc) == ([8, 2, 1, 1], [1, 56, 1, 1], [1, 14, 1, 4], [1, 1, 1, 64], [2, 32])


def _softmax(rows: int, cols: int):
    from tensorsearch import te

    x = te.placeholder((rows, cols), "float32", "x")
    k = te.reduce_axis((0, cols), "k")
    peak = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="peak")
    k2 = te.reduce_axis((0, cols), "k2")
    total = te.compute((rows,), lambda i: te.sum(te.exp(x[i, k2] - peak[i]), axis=k2), name="total")
    y = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - peak[i]) / total[i], name="y")
    return te.create_prim_func([x, y])


def test_row_reductions_are_computed_once_under_their_consumers_row_loop():
    # a softmax's max and sum read each element for one output only: tiling them gains nothing,
    # so the first design space leaves them untiled and the analytic decisions compute them
    # under the row loop of the output, each row once (not at the column loop, once a column)
    from tensorsearch.runtime import build

    func = _softmax(24, 37)  # 37 columns: no whole vectors, LLVM vectorizes the rows with a tail
    space = DesignSpace(func, ZNVER4)
    first = space.traces[0]
    assert not any(i.kind.name == "sample_perfect_tile" for i in first.insts)
    trace = heuristic_trace(first, func, ZNVER4)
    cand = space.replay(trace, 0)
    assert cand is not None
    out = cand.func.script()
    row_loop = out.index("T.parallel(24)")
    assert row_loop < out.index('T.block("peak_update")') < out.index('T.block("total_update")')
    assert out.count("T.serial(37)") >= 2  # each reduction's own loop over one row's columns
    x = np.random.default_rng(4).standard_normal((24, 37)).astype("float32") * 3
    y = np.zeros_like(x)
    build(cand.func, ZNVER4 if ZNVER4.name == hardware.load("host").name else "host")(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
