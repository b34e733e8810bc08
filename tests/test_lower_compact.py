"""Buffer compaction in lowering, and opt-in FMA contraction in code generation."""

import sys
from pathlib import Path

import numpy as np

import tensorsearch as ts
from tensorsearch import workloads
from tensorsearch.ir import Allocate, post_order_visit
from tensorsearch.lower import lower
from tensorsearch.target import resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from bench_manual_gemm import schedule_gemm


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


def test_compacted_gemm_is_exact_and_fp_contract_is_opt_in():
    wl = workloads.make("GMM", (1, 32, 48, 16))
    sch = schedule_gemm(wl.func, mi=4, ni=16, ki=4)
    x, y = wl.make_inputs(np.random.default_rng())
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
