"""Buffer compaction in lowering, and opt-in FMA contraction in code generation."""

import sys
from pathlib import Path

import numpy as np
import pytest
from seeds import seeded_rng

import tensorsearch as ts
from tensorsearch import workloads
from tensorsearch.ir import Allocate, post_order_visit
from tensorsearch.lower import lower
from tensorsearch.target import resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from bench_manual_gemm import schedule_gemm
from schedule_util import gemm_bias


def _allocations(func):
    found = {}
    post_order_visit(
        func.body, lambda n: found.__setitem__(n.buffer.name, n.buffer) if isinstance(n, Allocate) else None
    )
    return found


def test_cache_write_accumulator_shrinks_to_its_tile():
    func = workloads.make("GMM", (1, 64, 64, 64)).func
    sch = schedule_gemm(func, mi=4, ni=16, ki=4, parallel=False)
    allocs = _allocations(lower(sch.func))
    assert [int(s.value) for s in allocs["Z_local"].shape] == [4 * 16]  # one i_o x j_o tile, not 64 x 64
    # the packed panel is read across all i_o iterations: it keeps its full size
    assert [int(s.value) for s in allocs["Y_global"].shape] == [64 * 64]


@pytest.mark.slow
def test_compacted_gemm_is_exact_and_fp_contract_is_opt_in():
    wl = workloads.make("GMM", (1, 32, 48, 16))
    sch = schedule_gemm(wl.func, mi=4, ni=16, ki=4)
    x, y = wl.make_inputs(seeded_rng())
    expected = wl.reference(x, y)[0]
    plain = ts.build(sch.func)
    assert "fmuladd" not in plain.llvm_ir
    z = np.zeros_like(expected)
    plain(x, y, z)
    np.testing.assert_array_equal(z, ts.interpret(wl.func, x, y)[2])  # bit-exact with the interpreter
    fused = ts.build(sch.func, resolve(None).with_fp_contract())
    assert "fmuladd" in fused.llvm_ir or "fma" in fused.assembly
    z2 = np.zeros_like(expected)
    fused(x, y, z2)
    np.testing.assert_allclose(z2, expected, rtol=1e-5, atol=1e-5)


def _tiled(parallel: bool):
    """C tiled 8 x 16 with its epilogue D at the loop fused of the two tile loops."""
    sch = ts.Schedule(gemm_bias(32, 48, 16))
    i, j, _ = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder([i0, j0, i1, j1])
    fused = sch.fuse([i0, j0])
    sch.reverse_compute_at(sch.get_block("D"), fused)
    if parallel:
        sch.parallel(fused)
    return sch


def test_a_tile_of_a_fused_parallel_loop_gets_its_own_small_buffer():
    # C's tile and its epilogue both under a parallel loop fused of i_0 and j_0: consecutive
    # iterations' regions overlap in i (same i_0), so only the loop being parallel (independent
    # iterations) lets C move in; it shrinks to one 8 x 16 tile, on the stack of its thread
    sch = _tiled(parallel=True)
    allocs = _allocations(lower(sch.func))
    assert [int(s.value) for s in allocs["C"].shape] == [8 * 16]
    mod = ts.build(sch.func)
    assert "aligned_alloc" not in mod.llvm_ir
    rng = np.random.default_rng(11)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16, 48), (48,)))
    d = rng.uniform(-9, 9, size=(32, 48)).astype(np.float32)  # garbage, not zeros
    mod(a, b, bias, d)
    np.testing.assert_allclose(d, a @ b + bias, rtol=1e-5, atol=1e-5)
    # the same loop left serial keeps C whole: nothing proves its iterations independent
    assert [int(s.value) for s in _allocations(lower(_tiled(parallel=False).func))["C"].shape] == [32 * 48]
