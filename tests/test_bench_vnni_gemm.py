"""experiments/bench_vnni_gemm.py: the hand-scheduled VNNI GEMM it times is exact, with each way
of packing Y, on a reduced shape (the interpreter runs vpdpbusd through tests/intrin_oracle.py,
so this holds on CPUs without VNNI)."""

import sys
from pathlib import Path

import intrin_oracle
import numpy as np
import pytest

import tensorsearch as ts
from tensorsearch import workloads

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import bench_vnni_gemm


@pytest.mark.parametrize("pack", ["blocked", "vectorized", "plain"])
def test_the_hand_schedule_matches_numpy(pack):
    intrin_oracle.register()
    wl = workloads.make("GMM", (1, 12, 64, 16), "int8")
    sch = bench_vnni_gemm.schedule_vnni_gemm(wl.func, bench_vnni_gemm._vnni(), pack=pack)
    assert [i.kind.name for i in sch.trace.insts].count("tensorize") == 1
    xs = wl.make_inputs(np.random.default_rng(7))
    got = ts.interpret(sch.func, *xs)[len(xs) :]
    wl.check(got, wl.reference(*xs))
