"""compute_at, reverse_compute_at, compute_inline, reverse_compute_inline, sample_compute_location,
and the block analyses they share (tensorsearch.schedule.analysis)."""

import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip

from tensorsearch import workloads
from tensorsearch.arith import IntervalSet
from tensorsearch.interpreter import interpret
from tensorsearch.ir import IntImm, IterType
from tensorsearch.runtime import build
from tensorsearch.schedule import (
    DecisionError,
    InlineError,
    InvalidArgument,
    LoopNotFound,
    LoopStructureError,
    NotCompleteBlock,
    OutputBlockError,
    RegionCoverError,
    Schedule,
    StagePipelineError,
)
from tensorsearch.schedule.analysis import (
    check_region_cover,
    check_stage_pipeline,
    consumers_of,
    is_complete_block,
    is_output_block,
    is_reduction_block,
    locate_block,
    loop_iter_type,
    producers_of,
    region_covers,
)
from tensorsearch.script import parse

# --- programs --------------------------------------------------------------------------

CHAIN = parse("""
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, vj] + T.float32(1.0)
""")

# GEMM C = A * B, then D = C + bias with D's loops tiled 4x8 by 2x16
GEMM_BIAS = parse("""
@T.prim_func
def main(A: T.Buffer((32, 16), "float32"), B: T.Buffer((16, 32), "float32"), bias: T.Buffer((32,), "float32"),
         D: T.Buffer((32, 32), "float32")):
    C = T.alloc_buffer((32, 32), "float32")
    for i, j, k in T.grid(32, 32, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i0, j0, i1, j1 in T.grid(4, 2, 8, 16):
        with T.block("D"):
            vi = T.axis.spatial(32, i0 * 8 + i1)
            vj = T.axis.spatial(32, j0 * 16 + j1)
            T.reads(C[vi, vj], bias[vj])
            T.writes(D[vi, vj])
            D[vi, vj] = C[vi, vj] + bias[vj]
""")

GEMM_RELU = parse("""
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), D: T.Buffer((16, 16), "float32")):
    C = T.alloc_buffer((16, 16), "float32")
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
    for i, j in T.grid(16, 16):
        with T.block("D"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(C[vi, vj])
            T.writes(D[vi, vj])
            D[vi, vj] = T.max(C[vi, vj], T.float32(0.0))
""")

C2D = workloads.reduced("C2D", 0).func


def assert_fails(sch, action, error, match):
    """``action`` (which must not call lookups: they would add to the trace) fails and changes nothing."""
    before, n = sch.func, len(sch.trace)
    with pytest.raises(error, match=match):
        action()
    assert sch.func is before
    assert len(sch.trace) == n


def check_all(sch, original, expected):
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, original)
    check_same_results(original, sch.func)


# --- compute_at ------------------------------------------------------------------------


def test_compute_at_elementwise_chain_outer_loop():
    sch = Schedule(CHAIN)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    check_all(
        sch,
        CHAIN,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i in range(16):
        for ax0 in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i)
                vj = T.axis.spatial(16, ax0)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for j in range(16):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(B[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = B[vi, vj] + T.float32(1.0)
""",
    )


def test_compute_at_inner_loop_preserve_unit_loops():
    sch = Schedule(CHAIN)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[1], preserve_unit_loops=True)
    check_all(
        sch,
        CHAIN,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i, j in T.grid(16, 16):
        for ax0, ax1 in T.grid(1, 1):
            with T.block("B"):
                vi = T.axis.spatial(16, i + ax0)
                vj = T.axis.spatial(16, j + ax1)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, vj] + T.float32(1.0)
""",
    )
    sch = Schedule(CHAIN)
    sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[1])
    assert sch.func.script().count("for") == 1  # B sits directly under j: no unit loops


def test_compute_at_gemm_bias_tile():
    sch = Schedule(GEMM_BIAS)
    sch.compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("D"))[1])
    check_all(
        sch,
        GEMM_BIAS,
        """
@T.prim_func
def main(A: T.Buffer((32, 16), "float32"), B: T.Buffer((16, 32), "float32"), bias: T.Buffer((32,), "float32"),
         D: T.Buffer((32, 32), "float32")):
    C = T.alloc_buffer((32, 32), "float32")
    for i0, j0 in T.grid(4, 2):
        for ax0, ax1, ax2 in T.grid(8, 16, 16):
            with T.block("C"):
                vi = T.axis.spatial(32, i0 * 8 + ax0)
                vj = T.axis.spatial(32, j0 * 16 + ax1)
                vk = T.axis.reduce(16, ax2)
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        for i1, j1 in T.grid(8, 16):
            with T.block("D"):
                vi = T.axis.spatial(32, i0 * 8 + i1)
                vj = T.axis.spatial(32, j0 * 16 + j1)
                T.reads(C[vi, vj], bias[vj])
                T.writes(D[vi, vj])
                D[vi, vj] = C[vi, vj] + bias[vj]
""",
    )


def test_compute_at_padding_window_of_conv():
    sch = Schedule(C2D)
    sch.compute_at(sch.get_block("PadInput"), sch.get_loops(sch.get_block("conv2d_nhwc"))[2])
    check_all(
        sch,
        C2D,
        """
@T.prim_func
def main(inputs: T.Buffer((1, 8, 8, 3), "float32"), weight: T.Buffer((7, 7, 3, 4), "float32"),
         conv2d_nhwc: T.Buffer((1, 4, 4, 4), "float32")):
    PadInput = T.alloc_buffer((1, 14, 14, 3), "float32")
    for nn, hh, ww in T.grid(1, 4, 4):
        for ax0, ax1, ax2 in T.grid(7, 7, 3):
            with T.block("PadInput"):
                v_i0 = T.axis.spatial(1, nn)
                v_i1 = T.axis.spatial(14, hh * 2 + ax0)
                v_i2 = T.axis.spatial(14, ww * 2 + ax1)
                v_i3 = T.axis.spatial(3, ax2)
                T.reads(inputs[v_i0, v_i1 - 3, v_i2 - 3, v_i3])
                T.writes(PadInput[v_i0, v_i1, v_i2, v_i3])
                PadInput[v_i0, v_i1, v_i2, v_i3] = T.Select(v_i1 >= 3 and v_i1 < 11 and v_i2 >= 3 and v_i2 < 11,
                                                            inputs[v_i0, v_i1 - 3, v_i2 - 3, v_i3], T.float32(0.0))
        for cc, rh, rw, rc in T.grid(4, 7, 7, 3):
            with T.block("conv2d_nhwc"):
                v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
                T.reads(PadInput[v_nn, v_hh * 2 + v_rh, v_ww * 2 + v_rw, v_rc], weight[v_rh, v_rw, v_rc, v_cc])
                T.writes(conv2d_nhwc[v_nn, v_hh, v_ww, v_cc])
                with T.init():
                    conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
                conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] = conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] + PadInput[v_nn, v_hh * 2 + v_rh, v_ww * 2 + v_rw, v_rc] * weight[v_rh, v_rw, v_rc, v_cc]
""",
    )


# a producer that writes only half of what its consumer reads
HALF = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(8):
        with T.block("B"):
            vi = T.axis.spatial(8, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(C[vi])
            C[vi] = B[vi]
""")

# X reads B, then W writes B again: a write-after-read dependency
WAR = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("P"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
    for i in range(16):
        with T.block("X"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(C[vi])
            C[vi] = B[vi]
    for i in range(16):
        with T.block("W"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] + T.float32(1.0)
""")

# B accumulates into itself without init: neither complete nor a reduction block
ACCUM = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi], A[vi])
            T.writes(B[vi])
            B[vi] = B[vi] + A[vi]
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(C[vi])
            C[vi] = B[vi]
""")

# B has two consumers, C and D, in separate loop nests
TWO_CONSUMERS = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32"), D: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] * T.float32(2.0)
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(C[vi])
            C[vi] = B[vi] + T.float32(1.0)
    for i in range(16):
        with T.block("D"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(D[vi])
            D[vi] = B[vi] * B[vi]
""")


def test_compute_at_errors():
    sch = Schedule(HALF)
    args = (sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        RegionCoverError,
        r"cannot compute_at block B: its scope root is not a stage pipeline: block C reads B\[0:16\] "
        r"but its producer\(s\) B write only B\[0:8\] in the scope \(region cover\)",
    )
    sch = Schedule(WAR)
    args = (sch.get_block("P"), sch.get_loops(sch.get_block("X"))[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        StagePipelineError,
        "block W writes buffer B after block X reads it",
    )
    sch = Schedule(ACCUM)
    args = (sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        NotCompleteBlock,
        r"cannot compute_at block B: the block is not a complete block or reduction block \(not complete: it reads buffer B, which it also "
        r"writes; not a reduction: it has no init statement\)",
    )
    sch = Schedule(CHAIN)
    b, c = sch.get_block("B"), sch.get_block("C")
    args = (b, sch.get_loops(b)[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        LoopStructureError,
        "cannot compute_at block B at loop i: the loop is an ancestor of the block itself",
    )
    args = (c, sch.get_loops(b)[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        OutputBlockError,
        "cannot compute_at block C: the block is an output block",
    )
    c_i = sch.get_loops(c)[0]
    assert_fails(
        sch,
        lambda: sch.compute_at(b, c_i, index=3),
        InvalidArgument,
        "index 3 is not a valid insertion position; valid are -1, -2 and 0..0",
    )
    assert_fails(sch, lambda: sch.compute_at(b, c_i, preserve_unit_loops=1), InvalidArgument, "bool")
    sch = Schedule(TWO_CONSUMERS)
    args = (sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])
    assert_fails(
        sch,
        lambda: sch.compute_at(*args),
        LoopStructureError,
        "all the consumers of the block must be under the loop, but D is not",
    )


# --- reverse_compute_at ------------------------------------------------------------------


def test_reverse_compute_at_relu_after_gemm():
    sch = Schedule(GEMM_RELU)
    sch.reverse_compute_at(sch.get_block("D"), sch.get_loops(sch.get_block("C"))[1])
    check_all(
        sch,
        GEMM_RELU,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), D: T.Buffer((16, 16), "float32")):
    C = T.alloc_buffer((16, 16), "float32")
    for i, j in T.grid(16, 16):
        for k in range(16):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        with T.block("D"):
            vi = T.axis.spatial(16, i)
            vj = T.axis.spatial(16, j)
            T.reads(C[vi, vj])
            T.writes(D[vi, vj])
            D[vi, vj] = T.max(C[vi, vj], T.float32(0.0))
""",
    )


def test_reverse_compute_at_outer_loop_and_errors():
    sch = Schedule(GEMM_RELU)
    sch.reverse_compute_at(sch.get_block("D"), sch.get_loops(sch.get_block("C"))[0])
    assert "for ax0 in range(16)" in sch.func.script() or "for ax0 in T.serial(16)" in sch.func.script()
    check_trace_round_trip(sch, GEMM_RELU)
    check_same_results(GEMM_RELU, sch.func)

    sch = Schedule(TWO_CONSUMERS)
    args = (sch.get_block("D"), sch.get_loops(sch.get_block("C"))[0])
    assert_fails(
        sch,
        lambda: sch.reverse_compute_at(*args),
        LoopStructureError,
        "cannot reverse_compute_at block D at loop i: all the producers of the block must be under the loop, but B is not",
    )


def test_reverse_compute_at_refuses_a_consumer_reading_rows_later_iterations_write():
    # found by tests/test_compiled_fuzz.py: a depthwise convolution reads a window of 3 rows of
    # PadInput; moved under PadInput's row loop (one row per iteration) it was placed at its window's
    # first row (v_hh_o = i1) and read two rows that later iterations write: wrong results, compiled
    # or interpreted.  Now refused, and the schedule is unchanged.
    wl = workloads.make("DEP", (1, 4, 4, 4, 3, 1, 1))
    sch = Schedule(wl.func)
    conv = sch.blockize(sch.get_loops(sch.get_block("depth_conv2d_nhwc"))[2])
    i0, i1, _, _ = sch.get_loops(sch.get_block("PadInput"))
    assert_fails(
        sch,
        lambda: sch.reverse_compute_at(conv, i1),
        RegionCoverError,
        r"cannot reverse_compute_at block depth_conv2d_nhwc_o at loop i1: under the loop the block would read "
        r"PadInput\[i0, i1:i1 \+ 3, 0:6, 0:4\] but its producers write only PadInput\[i0, i1, 0:6, 0:4\] in an "
        r"iteration \(region cover\): it may read only what they write in the same iteration",
    )
    # unblockized, no iterator is solved from the row PadInput[v_hh + v_rh]: the whole convolution
    # would run in every iteration, reading rows not written yet (and racing were i1 parallel)
    plain = Schedule(wl.func)
    i1_plain = plain.get_loops(plain.get_block("PadInput"))[1]
    conv_plain = plain.get_block("depth_conv2d_nhwc")
    assert_fails(
        plain,
        lambda: plain.reverse_compute_at(conv_plain, i1_plain),
        RegionCoverError,
        r"cannot reverse_compute_at block depth_conv2d_nhwc at loop i1: under the loop the block would read "
        r"PadInput\[i0, 0:6, 0:6, 0:4\] but its producers write only PadInput\[i0, i1, 0:6, 0:4\]",
    )
    # under the batch loop each iteration writes every row the convolution reads: accepted, and the
    # fuzzer's later steps (parallel, a split with a predicate) compute the numpy reference, interpreted
    # and compiled
    sch.reverse_compute_at(conv, i0)
    sch.parallel(i0)
    _, hh = sch.get_loops(conv)
    sch.split(hh, [None, 8])
    check_trace_round_trip(sch, wl.func)
    inputs = wl.make_inputs(np.random.default_rng(0))
    expected = wl.reference(*inputs)
    out = np.full(wl.outputs[0].shape, np.nan, wl.outputs[0].dtype)
    wl.check(interpret(sch.func, *[a.copy() for a in inputs], out.copy())[len(inputs) :], expected)
    args = [a.copy() for a in inputs] + [out.copy()]
    build(sch.func)(*args)
    wl.check(args[len(inputs) :], expected)


def test_reverse_compute_at_refuses_a_loop_that_reduces_a_producer():
    # found by tests/test_schedule_fuzz.py in CI: rfactor over rh, then the write-back block moved
    # under the rf block's rw loop, read conv2d_nhwc_rf after one rw step and added it three times.
    # rw's region cover held (one element written, one read), but that element was a partial sum.
    wl = workloads.make("C2D", (1, 4, 4, 4, 4, 3, 1, 1))
    sch = Schedule(wl.func)
    rf = sch.rfactor(sch.get_loops(sch.get_block("conv2d_nhwc"))[4], 0)
    loops = sch.get_loops(rf)
    write_back = sch.get_block("conv2d_nhwc")
    for loop, name in ((loops[5], "rw"), (loops[6], "rc")):
        assert_fails(
            sch,
            lambda loop=loop: sch.reverse_compute_at(write_back, loop),
            LoopStructureError,
            re.escape(
                f"cannot reverse_compute_at block conv2d_nhwc at loop {name}: loop rw reduces its producer "
                "conv2d_nhwc_rf (iterator v_rw), so the block would read partial sums"
            ),
        )
    # above the rf block's reduction loops every partial sum is finished
    sch.reverse_compute_at(write_back, loops[4])
    check_same_results(wl.func, sch.func)
    check_trace_round_trip(sch, wl.func)


def test_reverse_compute_at_lets_a_copy_sit_under_a_producers_reduction_loop():
    # a write cache's copy rewrites its output in every k iteration; the last one writes the
    # finished sum, so the result is right (the cost model's tests sample such schedules)
    wl = workloads.make("GMM", (1, 8, 8, 8))
    sch = Schedule(wl.func)
    block = sch.get_block("Z")
    cache = sch.cache_write(block, 0, "local")
    _b, i, _j, k = sch.get_loops(block)
    sch.reorder(k, i)
    sch.reverse_compute_at(cache, i)
    check_same_results(wl.func, sch.func)
    check_trace_round_trip(sch, wl.func)


# --- compute_inline ------------------------------------------------------------------------


def test_compute_inline_elementwise():
    sch = Schedule(CHAIN)
    sch.compute_inline(sch.get_block("B"))
    check_all(
        sch,
        CHAIN,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)
""",
    )


def test_compute_inline_padding_into_conv():
    sch = Schedule(C2D)
    sch.compute_inline(sch.get_block("PadInput"))
    check_all(
        sch,
        C2D,
        """
@T.prim_func
def main(inputs: T.Buffer((1, 8, 8, 3), "float32"), weight: T.Buffer((7, 7, 3, 4), "float32"),
         conv2d_nhwc: T.Buffer((1, 4, 4, 4), "float32")):
    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 4, 4, 4, 7, 7, 3):
        with T.block("conv2d_nhwc"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(inputs[v_nn, v_hh * 2 + v_rh - 3, v_ww * 2 + v_rw - 3, v_rc], weight[v_rh, v_rw, v_rc, v_cc])
            T.writes(conv2d_nhwc[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] = T.float32(0.0)
            conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] = conv2d_nhwc[v_nn, v_hh, v_ww, v_cc] + T.Select(
                v_hh * 2 + v_rh >= 3 and v_hh * 2 + v_rh < 11 and v_ww * 2 + v_rw >= 3 and v_ww * 2 + v_rw < 11,
                inputs[v_nn, v_hh * 2 + v_rh - 3, v_ww * 2 + v_rw - 3, v_rc], T.float32(0.0)) * weight[v_rh, v_rw, v_rc, v_cc]
""",
    )


def test_compute_inline_two_consumers():
    sch = Schedule(TWO_CONSUMERS)
    sch.compute_inline(sch.get_block("B"))
    assert "B = T.alloc_buffer" not in sch.func.script()
    assert_program(
        sch.func,
        """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32"), D: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(C[vi])
            C[vi] = A[vi] * T.float32(2.0) + T.float32(1.0)
    for i in range(16):
        with T.block("D"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(D[vi])
            D[vi] = A[vi] * T.float32(2.0) * (A[vi] * T.float32(2.0))
""",
    )
    check_trace_round_trip(sch, TWO_CONSUMERS)
    check_same_results(TWO_CONSUMERS, sch.func)


NOT_INDEX = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i, j in T.grid(16, 2):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] + T.Cast("float32", vj)
    for i in range(16):
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(B[vi])
            T.writes(C[vi])
            C[vi] = B[vi]
""")


def test_compute_inline_errors():
    sch = Schedule(CHAIN)
    args = (sch.get_block("C"),)
    assert_fails(
        sch,
        lambda: sch.compute_inline(*args),
        OutputBlockError,
        "cannot inline block C: the block is an output block",
    )
    sch = Schedule(GEMM_RELU)
    c = sch.get_block("C")
    assert_fails(sch, lambda: sch.compute_inline(c), NotCompleteBlock, "has an init statement")
    sch = Schedule(NOT_INDEX)
    args = (sch.get_block("B"),)
    assert_fails(
        sch,
        lambda: sch.compute_inline(*args),
        InlineError,
        "cannot inline block B: the stored value uses a variable that is not a store index",
    )
    sch = Schedule(ACCUM)
    b = sch.get_block("B")
    assert_fails(sch, lambda: sch.compute_inline(b), NotCompleteBlock, "reads buffer B")


# --- reverse_compute_inline ------------------------------------------------------------------


def test_reverse_compute_inline_elementwise():
    sch = Schedule(CHAIN)
    sch.reverse_compute_inline(sch.get_block("C"))
    check_all(
        sch,
        CHAIN,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = A[vi, vj] * T.float32(2.0) + T.float32(1.0)
""",
    )


# the consumer needs only the first 8 rows of B and reads them transposed
PARTIAL = parse("""
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] + T.float32(1.0)
    for i, j in T.grid(16, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vj, vi])
            T.writes(C[vi, vj])
            C[vi, vj] = T.max(B[vj, vi], T.float32(0.0))
""")


def test_reverse_compute_inline_adds_predicate():
    sch = Schedule(PARTIAL)
    sch.reverse_compute_inline(sch.get_block("C"))
    check_all(
        sch,
        PARTIAL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 8), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.where(i < 8)
            T.reads(A[vi, vj])
            T.writes(C[vj, vi])
            C[vj, vi] = T.max(A[vi, vj] + T.float32(1.0), T.float32(0.0))
""",
    )


BROADCAST = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16, 4), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] * T.float32(2.0)
    for i, j in T.grid(16, 4):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi]
""")


def test_reverse_compute_inline_errors():
    sch = Schedule(BROADCAST)
    args = (sch.get_block("C"),)
    assert_fails(
        sch,
        lambda: sch.reverse_compute_inline(*args),
        InlineError,
        "cannot reverse-inline block C: its iterator vj does not index B",
    )
    sch = Schedule(TWO_CONSUMERS)
    args = (sch.get_block("C"),)
    assert_fails(
        sch,
        lambda: sch.reverse_compute_inline(*args),
        InlineError,
        "the producer block should be a complete block who has only a single consumer",
    )
    sch = Schedule(GEMM_RELU)
    args = (sch.get_block("C"),)
    assert_fails(
        sch,
        lambda: sch.reverse_compute_inline(*args),
        InlineError,
        "cannot reverse-inline block C: the block is allowed to read only a single buffer that another block "
        "of its scope writes, but it reads 0",
    )
    args = (sch.get_block("D"),)
    assert_fails(
        sch,
        lambda: sch.reverse_compute_inline(*args),
        InlineError,
        "producer block should be a complete block",
    )


# --- sample_compute_location ------------------------------------------------------------------


def test_sample_compute_location_candidates_and_replay():
    for decision, expected in [(None, None), (-3, -1), (-2, -1), (0, 0), (1, 1), (3, 3), (7, 3)]:
        sch = Schedule(GEMM_BIAS, seed=5)
        c = sch.get_block("C")
        loc = sch.sample_compute_location(c, decision=decision)
        sch.compute_at(c, loc)
        got = sch.trace.insts[-2].decision
        assert got in (-1, 0, 1, 2, 3)  # C is a reduction: it cannot be inlined
        if expected is not None:
            assert got == expected
        check_trace_round_trip(sch, GEMM_BIAS)
        check_same_results(GEMM_BIAS, sch.func)
        if got >= 0:
            assert sch.get(loc).loop_var.name == ["i0", "j0", "i1", "j1"][got]
        else:
            with pytest.raises(LoopNotFound):
                sch.get(loc)


def test_compute_at_after_sampling_applies_what_the_check_built():
    # the sampler's legality check builds the program; compute_at (preserve_unit_loops False, as
    # RandomComputeLocation calls it) takes that program, the same as a compute_at of its own
    for decision in (0, 1, 3):
        sch = Schedule(GEMM_BIAS, seed=1)
        c = sch.get_block("C")
        loc = sch.sample_compute_location(c, decision=decision)
        sch.compute_at(c, loc, preserve_unit_loops=False)
        plain = Schedule(GEMM_BIAS)
        target = plain.get_loops(plain.get_block("D"))[decision]
        plain.compute_at(plain.get_block("C"), target, preserve_unit_loops=False)
        assert_program(sch.func, plain.func.script())
        check_same_results(GEMM_BIAS, sch.func)


def test_sample_compute_location_inline_and_root():
    sch = Schedule(CHAIN)
    b = sch.get_block("B")
    loc = sch.sample_compute_location(b, decision=-2)
    sch.compute_at(b, loc)
    assert_program(sch.func, _inlined_chain())
    check_trace_round_trip(sch, CHAIN)
    sch = Schedule(CHAIN)
    b = sch.get_block("B")
    loc = sch.sample_compute_location(b, decision=-1)
    sch.compute_at(b, loc)
    assert sch.func is CHAIN
    check_trace_round_trip(sch, CHAIN)
    seen = set()
    for seed in range(12):
        sch = Schedule(CHAIN, seed=seed)
        sch.sample_compute_location(sch.get_block("B"))
        seen.add(sch.trace.insts[-1].decision)
    assert seen == {-2, -1, 0, 1}
    sch = Schedule(CHAIN)
    b = sch.get_block("B")
    assert_fails(sch, lambda: sch.sample_compute_location(b, decision="x"), DecisionError, "must be an integer")


def _inlined_chain():
    sch = Schedule(CHAIN)
    sch.compute_inline(sch.get_block("B"))
    return sch.func.script()


def test_reverse_compute_at_with_inline_mark():
    sch = Schedule(CHAIN)
    c = sch.get_block("C")
    loc = sch.sample_compute_location(sch.get_block("B"), decision=-2)
    sch.reverse_compute_at(c, loc)
    sch2 = Schedule(CHAIN)
    sch2.reverse_compute_inline(sch2.get_block("C"))
    assert_program(sch.func, sch2.func.script())
    check_trace_round_trip(sch, CHAIN)


# --- analyses ---------------------------------------------------------------------------------


def test_block_analyses():
    root = locate_block(GEMM_RELU, "root").node
    assert is_complete_block(GEMM_RELU, "D") is None
    assert is_complete_block(GEMM_RELU, "C") == "its iterator vk is a reduce iterator, not spatial"
    assert is_reduction_block(GEMM_RELU, "C") is None
    assert is_reduction_block(root, "D") == "it has no init statement"
    assert [b.name for b in producers_of(GEMM_RELU, "D")] == ["C"]
    assert [b.name for b in consumers_of(root, "C")] == ["D"]
    assert consumers_of(GEMM_RELU, "D") == [] and producers_of(GEMM_RELU, "C") == []
    assert is_output_block(GEMM_RELU, root, locate_block(root, "D").node).name == "D"
    assert is_output_block(GEMM_RELU, root, locate_block(root, "C").node) is None
    assert check_stage_pipeline(root) is None
    assert "write-after-read" in check_stage_pipeline(locate_block(WAR, "root").node)
    assert "region cover" in check_region_cover(locate_block(HALF, "root").node)
    assert "also writes" in is_complete_block(WAR, "P")
    loops = [loc.node for loc in _loops(GEMM_RELU)]
    assert [loop_iter_type(lp) for lp in loops[:3]] == [IterType.SPATIAL, IterType.SPATIAL, IterType.REDUCE]
    i = IntImm("int32", 0)
    whole = [IntervalSet(i, IntImm("int32", 15))]
    buf = locate_block(HALF, "C").node.writes[0].buffer
    assert region_covers(whole, [IntervalSet(IntImm("int32", -3), IntImm("int32", 20))], buf)
    assert not region_covers([IntervalSet(i, IntImm("int32", 7))], whole, buf)


def _loops(func):
    from tensorsearch.ir import For
    from tensorsearch.schedule.tree import walk_stmts

    return [loc for loc in walk_stmts(func.body) if isinstance(loc.node, For)]


# the consumer is blockized: its inner loop ii lies in the scope of block C_o
NESTED = parse("""
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] + T.float32(1.0)
    for io in range(4):
        with T.block("C_o"):
            vio = T.axis.spatial(4, io)
            T.reads(B[vio * 4:vio * 4 + 4])
            T.writes(C[vio * 4:vio * 4 + 4])
            for ii in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(16, vio * 4 + ii)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] * T.float32(3.0)
""")


def test_compute_at_blockized_consumer_and_scope_error():
    sch = Schedule(NESTED)
    b, c = sch.get_block("B"), sch.get_block("C")
    inner = sch.get_loops(c)[0]
    assert_fails(
        sch,
        lambda: sch.compute_at(b, inner),
        LoopStructureError,
        "cannot compute_at block B at loop ii: the block and the loop are not in the same scope",
    )
    sch.compute_at(b, sch.get_loops(sch.get_block("C_o"))[0], index=-2)
    check_all(
        sch,
        NESTED,
        """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    B = T.alloc_buffer((16,), "float32")
    for io in range(4):
        for ax0 in range(4):
            with T.block("B"):
                vi = T.axis.spatial(16, io * 4 + ax0)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] + T.float32(1.0)
        with T.block("C_o"):
            vio = T.axis.spatial(4, io)
            T.reads(B[vio * 4:vio * 4 + 4])
            T.writes(C[vio * 4:vio * 4 + 4])
            for ii in range(4):
                with T.block("C"):
                    vi = T.axis.spatial(16, vio * 4 + ii)
                    T.reads(B[vi])
                    T.writes(C[vi])
                    C[vi] = B[vi] * T.float32(3.0)
""",
    )
