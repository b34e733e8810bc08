"""Analytic first-round candidates (tensorsearch.search.heuristics): the machine model read from
the YAML, decisions valid for every design space of GEMM and convolution (int8 with VNNI and
float32), register tiles that fit the register file, and the first batch measuring them first."""

import math

import pytest

from tensorsearch import hardware, workloads
from tensorsearch.search.cost_model import CostModel
from tensorsearch.search.evolutionary import EvolutionarySearch, RoundStats, SearchConfig
from tensorsearch.search.heuristics import MachineModel, heuristic_trace, heuristic_traces
from tensorsearch.search.parallel import LocalEvaluator
from tensorsearch.search.space import DesignSpace

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


def test_int8_gemm_register_tile_counts_intrinsic_tiles():
    wl = workloads.get("GMM", 3, "int8")
    space = DesignSpace(wl.func, ZNVER4)
    i_tiles, j_tiles, k_tiles = tiles_of(heuristic_trace(space.traces[0], wl.func, ZNVER4))
    # the outer block of the VNNI tile walks j in whole 16-lane tiles (64 of them)
    assert math.prod(j_tiles) == 64 and math.prod(k_tiles) == 256
    assert 8 <= i_tiles[-1] * j_tiles[-1] <= 32 - j_tiles[-1] - 2


def test_first_round_measures_the_analytic_candidates_first():
    wl = workloads.make("GMM", SMALL["GMM"], "int8")
    space = DesignSpace(wl.func, ZNVER4)
    config = SearchConfig(
        population_size=4, init_min_unmeasured=2, genetic_num_iters=1, num_trials_per_iter=16, init_heuristic=6
    )
    search = EvolutionarySearch(space, CostModel(seed=0), config, 0, LocalEvaluator(space))
    stats = RoundStats()
    batch = search.next_batch([], set(), stats)
    assert stats.heuristic == 4 and batch  # at most a quarter of the batch
    expected = set()
    for k, trace in enumerate(space.traces):
        for t in heuristic_traces(trace, wl.func, ZNVER4, variants=2):
            expected.add(space.replay(t, k).key)
    assert {c.key for c in batch[:4]} <= expected
    # a later round (something measured) makes none, nor does a batch under 16
    stats = RoundStats()
    search.next_batch(batch[:2], {c.key for c in batch[:2]}, stats)
    assert stats.heuristic == 0
    search.config = config.replace(num_trials_per_iter=8)
    stats = RoundStats()
    search.next_batch([], set(), stats)
    assert stats.heuristic == 0
