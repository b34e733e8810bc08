"""split_stride_phases: a transposed convolution's stride-parity Select becomes dense
stride-phase blocks. Expected IR, exact results against numpy (interpreted and compiled) on fresh
random inputs, the VNNI matcher on every phase block, and blocks without the pattern left alone."""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pytest
from seeds import draw_seed

sys.path.insert(0, os.path.dirname(__file__))

import intrin_oracle
from schedule_util import assert_program

import tensorsearch as ts
from tensorsearch import hardware, te
from tensorsearch import workloads as W
from tensorsearch.arith import verify
from tensorsearch.interpreter import interpret
from tensorsearch.intrin import match, tile_with_intrin
from tensorsearch.ir import Block, Select, post_order_visit, structural_equal
from tensorsearch.schedule import Schedule
from tensorsearch.script import parse
from tensorsearch.transform import StridePhaseError, split_stride_phases
from tensorsearch.workloads.definitions import pad

VNNI = "vnni_dot_16x4_u8i8i32"
PHASES_2X2 = ["0_0", "0_1", "1_0", "1_1"]


def blocks(func) -> dict[str, Block]:
    found: dict[str, Block] = {}
    post_order_visit(func.body, lambda n: found.setdefault(n.name, n) if isinstance(n, Block) else None)
    return found


def has_select(block: Block) -> bool:
    found = []
    post_order_visit(block.body, lambda n: found.append(n) if isinstance(n, Select) else None)
    return bool(found)


def run_interpreted(func, wl, seed: int) -> tuple[np.ndarray, np.ndarray]:
    xs = wl.make_inputs(np.random.default_rng(seed))
    assert all(x.any() for x in xs)
    outs = [np.full(t.shape, 7, dtype=t.dtype) for t in wl.outputs]  # garbage: every element must be written
    interpret(func, *xs, *outs)
    return outs[0], wl.reference(*xs)[0]


# ----------------------------------------------------------------------------------------------
# expected IR

# T2D (N, H, W, CI, CO, kernel, stride, pad) = (1, 2, 2, 2, 2, 4, 2, 1), int8: 4 phases of 2x2 rows
# and 2x2 taps, each writing every other row and column of the output
SMALL_T2D_PHASES = """
@T.prim_func
def main(inputs: T.Buffer((1, 2, 2, 2), "uint8"), weight: T.Buffer((4, 4, 2, 2), "int8"), conv2d_transpose_nhwc: T.Buffer((1, 4, 4, 2), "int32")):
    PadInput = T.alloc_buffer((1, 4, 4, 2), "uint8")
    for i0, i1, i2, i3 in T.grid(1, 4, 4, 2):
        with T.block("PadInput"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3])
            T.writes(PadInput[v_i0, v_i1, v_i2, v_i3])
            PadInput[v_i0, v_i1, v_i2, v_i3] = T.Select(v_i1 >= 1 and v_i1 < 3 and v_i2 >= 1 and v_i2 < 3, inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3], T.uint8(0))
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 2, 2, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_0_0"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh, v_ww + v_rw, v_rc], weight[3 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] + T.Cast("int32", PadInput[v_nn, v_hh + v_rh, v_ww + v_rw, v_rc]) * T.Cast("int32", weight[3 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 2, 2, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_0_1"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh, v_ww + v_rw + 1, v_rc], weight[3 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2 + 1, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2 + 1, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2 + 1, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2 + 1, v_cc] + T.Cast("int32", PadInput[v_nn, v_hh + v_rh, v_ww + v_rw + 1, v_rc]) * T.Cast("int32", weight[3 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 2, 2, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_1_0"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw, v_rc], weight[2 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2, v_cc] + T.Cast("int32", PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw, v_rc]) * T.Cast("int32", weight[2 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 2, 2, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_1_1"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc], weight[2 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2 + 1, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2 + 1, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2 + 1, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh * 2 + 1, v_ww * 2 + 1, v_cc] + T.Cast("int32", PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc]) * T.Cast("int32", weight[2 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
"""

# T2D (1, 2, 2, 2, 2, 3, 2, 1), float32, phase buffers: a 3x3 output (phase 0 has 2 rows, phase 1
# one) and a 3-tap kernel (phase 0 has 1 tap, phase 1 two); the read is shifted by the border of
# 1, (hh + rh + 1) // 2; each phase fills its own dense buffer, the block conv2d_transpose_nhwc
# gathers them
ODD_T2D_PHASE_BUFFERS = """
@T.prim_func
def main(inputs: T.Buffer((1, 2, 2, 2), "float32"), weight: T.Buffer((3, 3, 2, 2), "float32"), conv2d_transpose_nhwc: T.Buffer((1, 3, 3, 2), "float32")):
    PadInput = T.alloc_buffer((1, 4, 4, 2), "float32")
    conv2d_transpose_nhwc_phase_0_0 = T.alloc_buffer((1, 2, 2, 2), "float32")
    conv2d_transpose_nhwc_phase_0_1 = T.alloc_buffer((1, 2, 1, 2), "float32")
    conv2d_transpose_nhwc_phase_1_0 = T.alloc_buffer((1, 1, 2, 2), "float32")
    conv2d_transpose_nhwc_phase_1_1 = T.alloc_buffer((1, 1, 1, 2), "float32")
    for i0, i1, i2, i3 in T.grid(1, 4, 4, 2):
        with T.block("PadInput"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3])
            T.writes(PadInput[v_i0, v_i1, v_i2, v_i3])
            PadInput[v_i0, v_i1, v_i2, v_i3] = T.Select(v_i1 >= 1 and v_i1 < 3 and v_i2 >= 1 and v_i2 < 3, inputs[v_i0, v_i1 - 1, v_i2 - 1, v_i3], T.float32(0.0))
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 2, 1, 1, 2):
        with T.block("conv2d_transpose_nhwc_phase_0_0"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc], weight[1 - v_rh * 2, 1 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
            conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh, v_ww, v_cc] = conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh, v_ww, v_cc] + PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc] * weight[1 - v_rh * 2, 1 - v_rw * 2, v_rc, v_cc]
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 1, 2, 1, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_0_1"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc], weight[1 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
            conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh, v_ww, v_cc] = conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh, v_ww, v_cc] + PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc] * weight[1 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc]
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 1, 2, 2, 2, 1, 2):
        with T.block("conv2d_transpose_nhwc_phase_1_0"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc], weight[2 - v_rh * 2, 1 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
            conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh, v_ww, v_cc] = conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh, v_ww, v_cc] + PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc] * weight[2 - v_rh * 2, 1 - v_rw * 2, v_rc, v_cc]
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 1, 1, 2, 2, 2, 2):
        with T.block("conv2d_transpose_nhwc_phase_1_1"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc], weight[2 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
            conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh, v_ww, v_cc] = conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh, v_ww, v_cc] + PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc] * weight[2 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc]
    for nn, hh, ww, cc in T.grid(1, 3, 3, 2):
        with T.block("conv2d_transpose_nhwc"):
            v_nn, v_hh, v_ww, v_cc = T.axis.remap("SSSS", [nn, hh, ww, cc])
            T.reads(conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh // 2, v_ww // 2, v_cc], conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh // 2, v_ww // 2, v_cc], conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh // 2, v_ww // 2, v_cc], conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh // 2, v_ww // 2, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc])
            conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc] = T.Select(v_hh % 2 == 0 and v_ww % 2 == 0, conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh // 2, v_ww // 2, v_cc], T.Select(v_hh % 2 == 0 and v_ww % 2 == 1, conv2d_transpose_nhwc_phase_0_1[v_nn, v_hh // 2, v_ww // 2, v_cc], T.Select(v_hh % 2 == 1 and v_ww % 2 == 0, conv2d_transpose_nhwc_phase_1_0[v_nn, v_hh // 2, v_ww // 2, v_cc], conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh // 2, v_ww // 2, v_cc])))
"""


def test_small_t2d_phases_expected_ir():
    func = split_stride_phases(W.make("T2D", (1, 2, 2, 2, 2, 4, 2, 1), "int8").func)
    assert_program(func, SMALL_T2D_PHASES)
    verify(func)
    assert structural_equal(parse(func.script()), func)


def test_odd_extents_phase_buffers_expected_ir():
    func = split_stride_phases(W.make("T2D", (1, 2, 2, 2, 2, 3, 2, 1), "float32").func, phase_buffers=True)
    assert_program(func, ODD_T2D_PHASE_BUFFERS)
    verify(func)


# ----------------------------------------------------------------------------------------------
# results against numpy

TABLE_CASES = [(i, dt, pb) for i in range(4) for dt in ("int8", "float32", "float16") for pb in (False, True)]


@pytest.mark.parametrize(("index", "dtype", "phase_buffers"), TABLE_CASES)
@pytest.mark.slow
def test_table_shapes_match_numpy(index, dtype, phase_buffers):
    """The four T2D shapes of the table, reduced (kernel 4, stride 2, pad 1 kept)."""
    wl = W.reduced("T2D", index, dtype)
    func = split_stride_phases(wl.func, phase_buffers=phase_buffers)
    verify(func)
    names = blocks(func)
    assert [f"conv2d_transpose_nhwc_phase_{p}" in names for p in PHASES_2X2] == [True] * 4
    assert not any(has_select(b) for n, b in names.items() if "_phase_" in n)
    assert split_stride_phases(func, phase_buffers=phase_buffers) is func  # nothing left to split
    seed = draw_seed()
    got, want = run_interpreted(func, wl, seed)
    try:
        wl.check([got], [want])
    except AssertionError as err:
        raise AssertionError(f"T2D[{index}] {dtype} with inputs from seed {seed}: {err}") from None


# (N, H, W, CI, CO, kernel, stride, pad): odd outputs and kernels, a border shift, stride 3,
# a kernel smaller than the stride (phases without taps), an output shorter than the stride
ODD_ARGS = [
    (1, 3, 3, 3, 2, 3, 2, 1),
    (1, 3, 2, 2, 3, 4, 3, 0),
    (1, 3, 3, 2, 2, 5, 3, 2),
    (1, 3, 3, 2, 2, 1, 2, 0),
    (1, 1, 1, 2, 2, 1, 2, 0),
    (1, 1, 2, 2, 2, 2, 3, 0),
]


@pytest.mark.parametrize("args", ODD_ARGS, ids=str)
@pytest.mark.parametrize("dtype", ["int8", "float32"])
@pytest.mark.parametrize("phase_buffers", [False, True])
@pytest.mark.slow
def test_odd_shapes_match_numpy(args, dtype, phase_buffers):
    wl = W.make("T2D", args, dtype)
    func = split_stride_phases(wl.func, phase_buffers=phase_buffers)
    verify(func)
    seed = draw_seed()
    got, want = run_interpreted(func, wl, seed)
    try:
        wl.check([got], [want])
    except AssertionError as err:
        raise AssertionError(f"T2D{args} {dtype} with inputs from seed {seed}: {err}") from None


def test_phase_extents_follow_the_output_and_the_kernel():
    """Output 5 rows (phase 0: 3, phase 1: 2), kernel 3 with a border of 1 (phase 0: 1 tap, phase 1: 2)."""
    func = split_stride_phases(W.make("T2D", (1, 3, 3, 3, 2, 3, 2, 1), "int8").func)
    doms = {n: [int(iv.dom.extent.value) for iv in b.iter_vars] for n, b in blocks(func).items() if "_phase_" in n}
    assert doms == {
        "conv2d_transpose_nhwc_phase_0_0": [1, 3, 3, 2, 1, 1, 3],
        "conv2d_transpose_nhwc_phase_0_1": [1, 3, 2, 2, 1, 2, 3],
        "conv2d_transpose_nhwc_phase_1_0": [1, 2, 3, 2, 2, 1, 3],
        "conv2d_transpose_nhwc_phase_1_1": [1, 2, 2, 2, 2, 2, 3],
    }


def test_phases_without_taps_store_the_init_value():
    """Kernel 1 at stride 2: only phase (0, 0) has a tap; the others are spatial blocks storing 0."""
    func = split_stride_phases(W.make("T2D", (1, 3, 3, 2, 2, 1, 2, 0), "int8").func)
    found = blocks(func)
    assert found["conv2d_transpose_nhwc_phase_0_0"].init is not None
    for p in PHASES_2X2[1:]:
        b = found[f"conv2d_transpose_nhwc_phase_{p}"]
        assert b.init is None and b.reads == () and all(iv.iter_type.value == "spatial" for iv in b.iter_vars)


def test_output_shorter_than_the_stride_drops_the_empty_phases():
    func = split_stride_phases(W.make("T2D", (1, 1, 1, 2, 2, 1, 2, 0), "int8").func)  # a 1x1 output
    assert sorted(n for n in blocks(func) if "_phase_" in n) == ["conv2d_transpose_nhwc_phase_0_0"]


def transposed_conv(h: int, w: int, ci: int, co: int, k: int, strides: tuple[int, int], pad_: int):
    """The T2D formulation with a stride per dimension (1 on a dimension: no parity test there)."""
    inputs = te.placeholder((1, h, w, ci), "float32", "inputs")
    weight = te.placeholder((k, k, ci, co), "float32", "weight")
    bpad = k - 1 - pad_
    outer = [(bpad + s - 1) // s for s in strides]
    border = [(s - bpad % s) % s for s in strides]
    padded = pad(inputs, [0, outer[0], outer[1], 0])
    out_hw = [(n - 1) * s - 2 * pad_ + k for n, s in zip((h, w), strides)]
    rh, rw, rc = te.reduce_axis((0, k), "rh"), te.reduce_axis((0, k), "rw"), te.reduce_axis((0, ci), "rc")

    def body(nn, hh, ww, cc):
        ys = [hh + rh + border[0], ww + rw + border[1]]
        on_grid = [te.equal(y % s, 0) for y, s in zip(ys, strides) if s > 1]
        idx = [y // s if s > 1 else y for y, s in zip(ys, strides)]
        value = te.if_then_else(te.all(*on_grid), padded[nn, idx[0], idx[1], rc], te.const(0.0, "float32"))
        return te.sum(value * weight[k - 1 - rh, k - 1 - rw, rc, cc], axis=[rh, rw, rc])

    out = te.compute((1, *out_hw, co), body, name="T")
    return te.create_prim_func([inputs, weight, out])


def transposed_conv_numpy(x, w, strides, pad_):
    _, h, wd, _ = x.shape
    k, co = w.shape[0], w.shape[3]
    oh, ow = ((n - 1) * s - 2 * pad_ + k for n, s in zip((h, wd), strides))
    out = np.zeros((1, oh, ow, co), np.float64)
    for i, j, kh, kw in itertools.product(range(h), range(wd), range(k), range(k)):
        y, xx = i * strides[0] + kh - pad_, j * strides[1] + kw - pad_
        if 0 <= y < oh and 0 <= xx < ow:
            out[0, y, xx] += x[0, i, j].astype(np.float64) @ w[kh, kw].astype(np.float64)
    return out


@pytest.mark.parametrize(
    ("strides", "phases"),
    [((2, 3), 6), ((1, 3), 3), ((3, 1), 3)],
    ids=["2x3", "1x3", "3x1"],
)
@pytest.mark.parametrize("phase_buffers", [False, True])
def test_a_stride_per_dimension(strides, phases, phase_buffers):
    """The strides, parities and input index come from the IR: 2 x 3 gives 6 phases, 1 x 3 three."""
    func = transposed_conv(3, 2, 3, 2, 4, strides, 1)
    split = split_stride_phases(func, phase_buffers=phase_buffers)
    verify(split)
    assert len([n for n in blocks(split) if n.startswith("T_phase_")]) == phases
    rng = np.random.default_rng(draw_seed())
    x, w = rng.uniform(-1, 1, (1, 3, 2, 3)).astype("float32"), rng.uniform(-1, 1, (4, 4, 3, 2)).astype("float32")
    out = np.full(transposed_conv_numpy(x, w, strides, 1).shape, 7, "float32")
    interpret(split, x, w, out)
    np.testing.assert_allclose(out, transposed_conv_numpy(x, w, strides, 1), rtol=1e-5, atol=1e-5)


def test_a_parity_test_on_taps_only_keeps_one_block():
    """A kernel dilated by zeros, Select(r % 2 == 0, ...): no spatial split, so one dense block
    under the original name, with the taps r = 2 * r'."""
    a = te.placeholder((8,), "float32", "A")
    w = te.placeholder((5,), "float32", "W")
    r = te.reduce_axis((0, 5), "r")
    zero = te.const(0.0, "float32")
    c = te.compute((4,), lambda i: te.sum(te.if_then_else(te.equal(r % 2, 0), a[i + r], zero) * w[r], axis=r), name="C")
    split = split_stride_phases(te.create_prim_func([a, w, c]), phase_buffers=True)
    verify(split)
    (block,) = (b for n, b in blocks(split).items() if n != "root")
    assert block.name == "C" and not has_select(block)
    assert [int(iv.dom.extent.value) for iv in block.iter_vars] == [4, 3]
    rng = np.random.default_rng(draw_seed())
    xa, xw = rng.uniform(-1, 1, 8).astype("float32"), rng.uniform(-1, 1, 5).astype("float32")
    out = np.full(4, 7, "float32")
    interpret(split, xa, xw, out)
    want = [sum(float(xa[i + r]) * float(xw[r]) for r in (0, 2, 4)) for i in range(4)]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# tensorization and compilation


@pytest.mark.parametrize("phase_buffers", [False, True])
@pytest.mark.parametrize("index", range(4))
def test_vnni_matches_every_phase_block(index, phase_buffers):
    vnni = hardware.load("x86-znver4").intrinsic(VNNI)
    wl = W.get("T2D", index, "int8")
    assert not match(wl.func, "conv2d_transpose_nhwc", vnni)  # the Select keeps the original out
    func = split_stride_phases(wl.func, phase_buffers=phase_buffers)
    for p in PHASES_2X2:
        report = match(func, f"conv2d_transpose_nhwc_phase_{p}", vnni)
        assert report.feasible, str(report)
        plans = [{m.intrin_iter: m.workload_iters for m in f.iterators} for f in report.feasible]
        assert {"i": ("v_cc",), "k": ("v_rc",)} in plans  # output channels on i, input channels on k


@pytest.mark.parametrize("phase_buffers", [False, True])
@pytest.mark.slow
def test_compiled_phases_match_numpy(phase_buffers):
    wl = W.get("T2D", 1, "int8")  # (1, 8, 8, 256, 128, 4, 2, 1), full size
    mod = ts.build(split_stride_phases(wl.func, phase_buffers=phase_buffers))
    seed = draw_seed()
    xs = wl.make_inputs(np.random.default_rng(seed))
    out = np.full(wl.outputs[0].shape, 7, wl.outputs[0].dtype)  # garbage: every element must be written
    mod(*xs, out)
    np.testing.assert_array_equal(out, wl.reference(*xs)[0], err_msg=f"inputs from seed {seed}")


@pytest.mark.slow
def test_phase_buffers_tensorize_with_vnni():
    """With phase buffers every phase block is the only writer of its output, so tile_with_intrin
    (decompose_reduction first) and tensorize apply to each. The tensorized program is exact in the
    interpreter (numpy models of the VNNI instructions, tests/intrin_oracle.py) and its code has
    vpdpbusd (and is run where this CPU has VNNI)."""
    intrin_oracle.register()
    znver4 = hardware.load("x86-znver4")
    vnni = znver4.intrinsic(VNNI)
    wl = W.make("T2D", (1, 3, 3, 8, 16, 4, 2, 1), "int8")
    sch = Schedule(split_stride_phases(wl.func, phase_buffers=True), hardware=znver4)
    for p in PHASES_2X2:
        sch.tensorize(tile_with_intrin(sch, sch.get_block(f"conv2d_transpose_nhwc_phase_{p}"), vnni), VNNI)
    verify(sch.func)
    seed = draw_seed()
    got, want = run_interpreted(sch.func, wl, seed)
    np.testing.assert_array_equal(got, want, err_msg=f"inputs from seed {seed}")
    vnni_here = hardware.load("host").has_feature("+avx512vnni")
    mod = ts.build(sch.func, None if vnni_here else "x86-znver4", jit=vnni_here)
    assert "vpdpbusd" in mod.assembly
    if vnni_here:
        xs = wl.make_inputs(np.random.default_rng(seed))
        out = np.full(wl.outputs[0].shape, 7, wl.outputs[0].dtype)  # garbage, not zeros
        mod(*xs, out)
        np.testing.assert_array_equal(out, want, err_msg=f"inputs from seed {seed}")


# ----------------------------------------------------------------------------------------------
# what the pass leaves alone, and what it refuses


@pytest.mark.parametrize(
    ("name", "args", "dtype"),
    [
        ("T2D", (1, 3, 3, 2, 2, 3, 1, 1), "int8"),  # stride 1: no Select
        ("C2D", (1, 6, 6, 4, 4, 3, 2, 1), "int8"),  # padding Select, not a parity one
        ("GMM", (1, 8, 8, 8), "float32"),
        ("DEP", (1, 6, 6, 4, 3, 1, 1), "float32"),
    ],
)
def test_functions_without_the_pattern_are_returned_as_is(name, args, dtype):
    func = W.make(name, args, dtype).func
    assert split_stride_phases(func) is func
    assert split_stride_phases(func, phase_buffers=True) is func


def test_a_parity_select_outside_a_reduction_is_left_alone():
    """Zero-insertion upsampling is a spatial block: it has the Select but is not a reduction."""
    a = te.placeholder((4,), "float32", "A")
    up = te.compute((8,), lambda i: te.if_then_else(te.equal(i % 2, 0), a[i // 2], te.const(0.0, "float32")), name="U")
    func = te.create_prim_func([a, up])
    assert split_stride_phases(func) is func


def test_blocks_without_the_pattern_keep_their_identity():
    wl = W.reduced("T2D", 0, "int8")
    func = split_stride_phases(wl.func)
    assert blocks(func)["PadInput"] is blocks(wl.func)["PadInput"]


def test_reordered_loops_keep_their_order():
    """Loops bound one to one in another order are rebuilt in that order, with the phase extents."""
    wl = W.reduced("T2D", 0, "int8")
    sch = Schedule(wl.func)
    loops = sch.get_loops(sch.get_block("conv2d_transpose_nhwc"))
    sch.reorder(loops[4], loops[1])  # rh before hh
    func = split_stride_phases(sch.func, phase_buffers=True)
    verify(func)
    assert "for nn, rh, ww, cc, hh, rw, rc in T.grid(1, 2, 2, 4, 2, 2, 4):" in func.script()
    seed = draw_seed()
    got, want = run_interpreted(func, wl, seed)
    np.testing.assert_array_equal(got, want, err_msg=f"inputs from seed {seed}")


def test_a_scheduled_block_is_refused_with_its_name():
    sch = Schedule(W.reduced("T2D", 0, "int8").func)
    hh = sch.get_loops(sch.get_block("conv2d_transpose_nhwc"))[1]
    sch.split(hh, [None, 2])
    with pytest.raises(StridePhaseError, match="block conv2d_transpose_nhwc is not bound one to one"):
        split_stride_phases(sch.func)


def test_a_max_reduction_is_refused_with_its_name():
    """Outside a sum the zeros the Select supplies matter: the pass refuses to drop them."""
    a = te.placeholder((4,), "float32", "A")
    r = te.reduce_axis((0, 2), "r")
    zero = te.const(0.0, "float32")
    out = te.compute(
        (6,), lambda i: te.max(te.if_then_else(te.equal((i + r) % 2, 0), a[(i + r) // 2], zero), axis=r), name="M"
    )
    with pytest.raises(StridePhaseError, match="block M guards its update with a stride-parity Select"):
        split_stride_phases(te.create_prim_func([a, out]))
