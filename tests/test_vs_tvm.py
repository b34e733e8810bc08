"""experiments/vs_tvm.py's int8 rows take the weights packed ahead on both sides.

Nothing here imports ``tvm``: tvm_worker.py's numpy packing is checked against the index map
its ``transform_layout`` applies, and our side's programs (the main part on weights packed once,
ahead, and the whole function) are built and run on the host.
"""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import tvm_worker
import vs_tvm

from tensorsearch import hardware, workloads
from tensorsearch.runtime import aligned_copy
from tensorsearch.search.space.design import DesignSpace
from tensorsearch.search.space.heuristics import heuristic_trace
from tensorsearch.transform import mark_layout_free


def test_pack_vnni_lays_weights_out_as_the_workers_index_map():
    # (..., K, N) -> (..., N/16, K/4, 16, 4): packed[..., n // 16, k // 4, n % 16, k % 4] = w[..., k, n]
    w = np.random.default_rng(3).integers(-128, 128, (2, 3, 8, 32), dtype=np.int8)
    packed = tvm_worker.pack_vnni(w)
    assert packed.shape == (2, 3, 2, 2, 16, 4) and packed.flags.c_contiguous
    a, b, k, n = np.indices(w.shape)
    np.testing.assert_array_equal(packed[a, b, n // 16, k // 4, n % 16, k % 4], w)


def _host_with_vnni():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hw = hardware.load("host")
    if not hw.has_feature("+avx512vnni"):
        pytest.skip(f"the host ({hw.name}) lacks AVX-512 VNNI")
    return hw


def test_our_int8_kernel_is_timed_on_weights_packed_ahead():
    hw = _host_with_vnni()
    wl = workloads.make("GMM", (1, 64, 128, 64), "int8")
    func = mark_layout_free(wl.func, [1])
    trace = heuristic_trace(DesignSpace(func, hw).traces[0], func, hw)
    program, whole = vs_tvm.ours_programs(wl, trace, hw, packed=True)
    assert program.split is not None and program.main is not whole  # the weight copy is out of the timed part
    inputs = [aligned_copy(a) for a in wl.make_inputs(np.random.default_rng(5))]
    want = wl.reference(*inputs)
    for mod, args in ((program.main, None), (whole, [*inputs])):
        out = [aligned_copy(np.full(o.shape, 7, o.dtype)) for o in wl.outputs]
        mod(*(program.main_args([*inputs, *out]) if args is None else [*args, *out]))
        wl.check(out, want)
    plain, none = vs_tvm.ours_programs(wl, trace, hw, packed=False)
    assert plain.split is None and none is None


@pytest.mark.slow
def test_a_descriptor_this_cpu_cannot_run_is_refused_in_one_line_before_anything_starts(tmp_path):
    if hardware.load("arm-neoverse-v1").runs_here:
        pytest.skip("this CPU runs arm-neoverse-v1 code")
    script = Path(vs_tvm.__file__)
    res = subprocess.run(
        [sys.executable, str(script), "--hardware", "arm-neoverse-v1", "--out", str(tmp_path / "out")],
        cwd=script.parent.parent, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "vs_tvm.py: error: --hardware: this CPU cannot run code built for arm-neoverse-v1; "
        "name a descriptor it runs (default host)"
    )
    assert not (tmp_path / "out").exists()
