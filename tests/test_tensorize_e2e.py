"""Auto-tensorization end to end: plain-layout int8 workloads -> matcher -> tile_with_intrin ->
tensorize (VNNI from YAML) -> LLVM -> exact against numpy."""

import numpy as np
import pytest
from seeds import seeded_rng

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.intrin import tile_with_intrin
from tensorsearch.schedule import Schedule, Trace


def _vnni():
    hw = hardware.load("x86-emeraldrapids")
    return next(i for i in hw.intrinsics if "vnni" in i.name)


def _vnni_runs_here() -> bool:
    return ts.hardware.load("host").has_feature("+avx512vnni")


@pytest.mark.parametrize(
    ("name", "args"),
    [("GMM", (1, 1024, 1024, 1024)), ("C2D", (1, 14, 14, 64, 32, 3, 1, 1))],
    ids=["GMM-1024", "C2D"],
)
@pytest.mark.slow
def test_plain_layout_int8_tensorized_with_vnni_is_exact(name, args):
    if not _vnni_runs_here():
        pytest.skip("this CPU has no AVX-512 VNNI")
    wl = workloads.make(name, args, "int8")
    vnni = _vnni()
    host = hardware.load("host")
    sch = Schedule(wl.func, hardware=host)
    out_block = wl.output_buffers[0].name
    block = tile_with_intrin(sch, sch.get_block(out_block), vnni)
    sch.tensorize(block, vnni.name)
    # the trace replays to the same tensorized program
    again = Schedule(wl.func, hardware=host)
    Trace.from_json(sch.trace.as_json_text()).apply(again)
    assert ts.structural_hash(again.func) == ts.structural_hash(sch.func)
    mod = ts.build(sch.func)
    assert "vpdpbusd" in mod.assembly
    inputs = wl.make_inputs(seeded_rng())
    outputs = [np.zeros(t.shape, t.dtype) for t in wl.outputs]
    mod(*inputs, *outputs)
    np.testing.assert_array_equal(outputs[0], wl.reference(*inputs)[0])
