"""Every convolution kind tensorized with VNNI through the design space.

Each kind (C1D, C2D with 3 input channels and 1x1, C3D, DIL, GRP, T2D) is sampled from its int8 design
space at a reduced shape; the tensorized program runs in the interpreter with numpy models of
the VNNI instructions (tests/intrin_oracle.py) against numpy on fresh random inputs, on every
CPU, and is compiled and run where the CPU has AVX-512 VNNI (elsewhere its assembly is checked
for vpdpbusd).
"""

from __future__ import annotations

import intrin_oracle
import pytest
from seeds import draw_seed, seeded_rng

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.search.space.design import DesignSpace

VNNI_HW = hardware.load("x86-emeraldrapids")
VNNI_HERE = hardware.load("host").has_feature("+avx512vnni")

KINDS = [
    ("C1D", 0),  # 3 taps
    ("C2D", 0),  # 3 input channels, 7x7 stride 2: k <- rc padded, or rh * rw * rc fused
    ("C2D", 1),  # 1x1
    ("C3D", 0),  # 3 input channels
    ("DIL", 0),  # dilation 2
    ("GRP", 0),  # 4 groups: mapped per group (cc split into the group and the channel in it)
    ("T2D", 0),  # stride 2: split into four dense phases, each tensorized
]


@pytest.fixture(scope="module", autouse=True)
def _oracle():
    intrin_oracle.register()


def _sample(space: DesignSpace, index: int, seed: int):
    cand = space.sample_space(index, seed)
    assert cand is not None, space.why_invalid(index, seed)
    assert "tensorize" in [i.kind.name for i in cand.trace.insts]
    return cand


@pytest.mark.parametrize(("name", "index"), KINDS, ids=[f"{n}-{i}" for n, i in KINDS])
@pytest.mark.slow
def test_convolution_tensorized_through_the_design_space_is_exact(name, index):
    wl = workloads.reduced(name, index, "int8")
    space = DesignSpace(wl.func, VNNI_HW)
    rng = seeded_rng()
    seed = draw_seed() % (1 << 16)
    spaces = len(space.traces)
    for n in sorted({0, spaces // 3, 2 * spaces // 3, spaces - 1}):  # each mapping's spaces, and the last
        cand = _sample(space, n, seed + n)
        xs = wl.make_inputs(rng)
        got = ts.interpret(cand.func, *xs)[len(xs) :]
        wl.check(got, wl.reference(*xs))
    mod = ts.build(cand.func, VNNI_HW if not VNNI_HERE else None, jit=VNNI_HERE)
    assert "vpdpbusd" in mod.assembly
    if VNNI_HERE:
        outs = [rng.integers(-9, 9, size=o.shape).astype(o.dtype) for o in wl.outputs]  # garbage, not zeros
        mod(*xs, *outs)
        wl.check(outs, wl.reference(*xs))


def test_three_input_channels_fork_over_the_padded_and_the_fused_mapping():
    """C2D shape 0 (3 input channels): the cheapest mapping pads rc 3 -> 4 and reads the padded
    input in place (no im2col); the second fuses rh * rw * rc onto k (147 -> 148) and gathers;
    each gets its own design spaces."""
    wl = workloads.get("C2D", 0, "int8")
    space = DesignSpace(wl.func, VNNI_HW)
    layouts = [
        [dict(i.args)["index_map"] for i in t.insts if i.kind.name == "transform_block_layout"] for t in space.traces
    ]
    pads = [[dict(i.args)["padding"] for i in t.insts if i.kind.name == "pad_einsum"] for t in space.traces]
    fused = "lambda v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc: (v_nn, v_hh, v_ww, v_cc, v_rh * 21 + v_rw * 3 + v_rc)"
    assert sum(1 for lay in layouts if lay == [fused]) == len(space.traces) // 2
    unfused = [p for lay, p in zip(layouts, pads, strict=True) if lay == []]
    assert len(unfused) == len(space.traces) // 2
    assert all(p == [[1, 1, 1, 1, 1, 1, 4]] for p in unfused)  # rc alone is padded
