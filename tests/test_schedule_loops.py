"""split, fuse, reorder, add_unit_loop, loop kinds and annotations: expected IR, errors, traces, results."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip

from tensorsearch import workloads
from tensorsearch.ir import ForKind
from tensorsearch.runtime import build
from tensorsearch.schedule import (
    BlockNotFound,
    InvalidArgument,
    LoopKindError,
    LoopNotFound,
    LoopStructureError,
    NotAffineBinding,
    Schedule,
)
from tensorsearch.script import parse

# ---------------------------------------------------------------------------------------
# programs

ELEM = """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i, j in T.grid(16, 24):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
"""

MATMUL = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

# loop i holds two loops: B then C
TWO_STAGES = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i in range(16):
        for j in range(16):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for j2 in range(8):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j2])
                T.reads(B[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = B[vi, vj] + T.float32(1.0)
"""

# j's extent depends on i (a triangle)
TRIANGLE = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    for i in range(16):
        for j in T.serial(i + 1):
            with T.block("B"):
                vi = T.axis.opaque(16, i)
                vj = T.axis.opaque(16, j)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
"""

# iterator vi is opaque
OPAQUE = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi = T.axis.opaque(16, i)
            vj = T.axis.spatial(16, j)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
"""

# vi is bound to (i + j) % 16: not a quasi-affine map of the loops
NOT_AFFINE = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi = T.axis.spatial(16, (i + j) % 16)
            vj = T.axis.spatial(16, j)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
"""

# B reads what it writes: writing a point twice would add twice
NOT_AFFINE_ACCUMULATE = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32")):
    for i, j in T.grid(16, 16):
        with T.block("B"):
            vi = T.axis.spatial(16, (i + j) % 16)
            vj = T.axis.spatial(16, j)
            T.reads(A[vi, vj], B[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = B[vi, vj] + A[vi, vj]
"""

# a loop starting at 2
OFFSET = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in T.serial(2, 18):
        with T.block("B"):
            vi = T.axis.spatial(18, i)
            T.reads(A[vi - 2])
            T.writes(B[vi - 2])
            B[vi - 2] = A[vi - 2] + T.float32(1.0)
"""

# loops in a nested block scope below the root's loop o
NESTED_SCOPE = """
@T.prim_func
def main(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    for o in range(4):
        with T.block("outer"):
            vo = T.axis.spatial(4, o)
            T.reads(A[vo, 0:16])
            T.writes(B[vo, 0:16])
            for i in range(16):
                with T.block("B"):
                    vi = T.axis.spatial(16, i)
                    T.reads(A[vo, vi])
                    T.writes(B[vo, vi])
                    B[vo, vi] = A[vo, vi] * T.float32(2.0)
"""


def _sch(text: str, block: str) -> tuple[Schedule, list]:
    sch = Schedule(parse(text))
    return sch, sch.get_loops(sch.get_block(block))


def _finish(sch: Schedule, text: str, expected: str | None = None) -> None:
    original = parse(text)
    if expected is not None:
        assert_program(sch.func, expected)
    check_trace_round_trip(sch, original)
    check_same_results(original, sch.func)


def _fails(sch: Schedule, fn, error: type, match: str) -> None:
    before, n = sch.func, len(sch.trace)
    with pytest.raises(error, match=match):
        fn()
    assert sch.func is before
    assert len(sch.trace) == n


# ---------------------------------------------------------------------------------------
# split


def test_split_perfect():
    sch, (i, _) = _sch(ELEM, "B")
    i0, i1 = sch.split(i, [4, None])
    assert sch.get(i0).loop_var.name == "i_0" and sch.get(i1).extent.value == 4
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i_0, i_1, j in T.grid(4, 4, 24):
        with T.block("B"):
            vi = T.axis.spatial(16, i_0 * 4 + i_1)
            vj = T.axis.spatial(24, j)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_split_imperfect_adds_predicate_and_conjoins():
    sch, (_, j) = _sch(ELEM, "B")
    _, j1 = sch.split(j, [None, 5])
    sch.split(j1, factors=[None, 2])
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i, j_0, j_1_0, j_1_1 in T.grid(16, 5, 3, 2):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            vj = T.axis.spatial(24, j_0 * 5 + j_1_0 * 2 + j_1_1)
            T.where(j_0 * 5 + j_1_0 * 2 + j_1_1 < 24 and j_1_0 * 2 + j_1_1 < 5)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_split_three_ways_with_sampled_factors():
    sch, (_i, _j, k) = _sch(MATMUL, "C")
    factors = sch.sample_perfect_tile(k, n=3, decision=[2, 2, 4])
    sch.split(k, factors)
    _finish(
        sch,
        MATMUL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k_0, k_1, k_2 in T.grid(16, 16, 2, 2, 4):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            vk = T.axis.reduce(16, k_0 * 8 + k_1 * 4 + k_2)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
""",
    )


@pytest.mark.parametrize("preserve", [True, False])
def test_split_unit_factor(preserve):
    sch, (i, _) = _sch(ELEM, "B")
    sch.split(i, [1, 16], preserve_unit_iters=preserve)
    binding = "i_0 * 16 + i_1" if preserve else "i_1"
    _finish(
        sch,
        ELEM,
        f"""
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i_0, i_1, j in T.grid(1, 16, 24):
        with T.block("B"):
            vi = T.axis.spatial(16, {binding})
            vj = T.axis.spatial(24, j)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_split_outer_loop_of_two_stages_guards_both_blocks():
    sch, (i, _) = _sch(TWO_STAGES, "B")
    sch.split(i, [None, 3])
    _finish(
        sch,
        TWO_STAGES,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 8), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i_0, i_1 in T.grid(6, 3):
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(16, i_0 * 3 + i_1)
                vj = T.axis.spatial(16, j)
                T.where(i_0 * 3 + i_1 < 16)
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for j2 in range(8):
            with T.block("C"):
                vi = T.axis.spatial(16, i_0 * 3 + i_1)
                vj = T.axis.spatial(8, j2)
                T.where(i_0 * 3 + i_1 < 16)
                T.reads(B[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = B[vi, vj] + T.float32(1.0)
""",
    )


def test_split_guards_only_the_first_level_block():
    sch = Schedule(parse(NESTED_SCOPE))
    (o,) = sch.get_loops(sch.get_block("outer"))
    o0, _ = sch.split(o, [None, 3])
    sch.parallel(o0)  # checks the nested block B too
    _finish(
        sch,
        NESTED_SCOPE,
        """
@T.prim_func
def main(A: T.Buffer((4, 16), "float32"), B: T.Buffer((4, 16), "float32")):
    for o_0 in T.parallel(2):
        for o_1 in range(3):
            with T.block("outer"):
                vo = T.axis.spatial(4, o_0 * 3 + o_1)
                T.where(o_0 * 3 + o_1 < 4)
                T.reads(A[vo, 0:16])
                T.writes(B[vo, 0:16])
                for i in range(16):
                    with T.block("B"):
                        vi = T.axis.spatial(16, i)
                        T.reads(A[vo, vi])
                        T.writes(B[vo, vi])
                        B[vo, vi] = A[vo, vi] * T.float32(2.0)
""",
    )


def test_split_workload_gmm_and_old_rv_is_gone():
    func = workloads.reduced("GMM", 0, "float32").func
    sch = Schedule(func)
    _, i, _j, k = sch.get_loops(sch.get_block("Z"))
    sch.split(i, [None, 4])
    sch.split(k, [3, 6])
    with pytest.raises(LoopNotFound, match="no longer exists"):
        sch.get(i)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_split_errors():
    sch, (i, j) = _sch(ELEM, "B")
    _fails(sch, lambda: sch.split(i, [None, None]), InvalidArgument, "2 factors are None; at most one")
    _fails(sch, lambda: sch.split(i, [0, 16]), InvalidArgument, "factor 0 is 0; factors must be positive")
    _fails(sch, lambda: sch.split(i, [-2, None]), InvalidArgument, "factor 0 is -2; factors must be positive")
    _fails(
        sch,
        lambda: sch.split(i, [3, 5]),
        InvalidArgument,
        "product of the factors, 15, is less than the loop's extent 16",
    )
    _fails(sch, lambda: sch.split(i, [2.0, None]), InvalidArgument, "factor 0 is 2.0; a factor must be an integer")
    _fails(sch, lambda: sch.split(i, []), InvalidArgument, "factors must be a non-empty list")
    b = sch.get_block("B")
    _fails(sch, lambda: sch.split(b, [4, 4]), InvalidArgument, "expected a LoopRV")
    sch.annotate(i, "pragma_x", 1)
    _fails(sch, lambda: sch.split(i, [4, 4]), LoopKindError, "cannot split loop i: it has annotations \\(pragma_x\\)")
    sch.bind(j, "threadIdx.x")
    _fails(sch, lambda: sch.split(j, [4, 6]), LoopKindError, "cannot split loop j: it is bound to threadIdx.x")
    sch2, (o,) = _sch(OFFSET, "B")
    _fails(sch2, lambda: sch2.split(o, [4, 4]), LoopStructureError, "cannot split loop i: it starts at 2")


# ---------------------------------------------------------------------------------------
# fuse


def test_fuse_two_loops():
    sch, (i, j) = _sch(ELEM, "B")
    f = sch.fuse(i, j)
    assert sch.get(f).extent.value == 384
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i_j_fused in range(384):
        with T.block("B"):
            vi = T.axis.spatial(16, i_j_fused // 24)
            vj = T.axis.spatial(24, i_j_fused % 24)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_fuse_three_loops_list_argument():
    sch, (i, j, k) = _sch(MATMUL, "C")
    sch.fuse([i, j, k])
    assert sch.trace.insts[-1].arg_dict["loops"] == [i, j, k]
    _finish(
        sch,
        MATMUL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i_j_k_fused in range(4096):
        with T.block("C"):
            vi = T.axis.spatial(16, i_j_k_fused // 256)
            vj = T.axis.spatial(16, i_j_k_fused // 16 % 16)
            vk = T.axis.reduce(16, i_j_k_fused % 16)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
""",
    )


def test_fuse_after_split_and_single_loop():
    sch, (i, j) = _sch(ELEM, "B")
    i0, i1 = sch.split(i, [4, 4])
    sch.fuse(i1, j)
    sch.fuse(i0)
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i_0_fused, i_1_j_fused in T.grid(4, 96):
        with T.block("B"):
            vi = T.axis.spatial(16, i_0_fused * 4 + i_1_j_fused // 24)
            vj = T.axis.spatial(24, i_1_j_fused % 24)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_fuse_unit_loop_without_preserving_it():
    func = workloads.reduced("GMM", 0, "float32").func
    sch = Schedule(func)
    bb, i, _, _ = sch.get_loops(sch.get_block("Z"))
    sch.fuse(bb, i, preserve_unit_iters=False)
    assert sch.get(sch.get_loops(sch.get_block("Z"))[0]).loop_var.name == "bb_i_fused"
    block_realize = sch._block_realize(sch.get_block("Z"))[0]
    assert str(block_realize.iter_values[0]) == "0"
    assert str(block_realize.iter_values[1]) == "bb_i_fused"
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


@pytest.mark.slow
def test_fuse_errors():
    sch, (i, j, k) = _sch(MATMUL, "C")
    _fails(sch, lambda: sch.fuse(i, k), LoopStructureError, "loop k is not directly inside loop i")
    _fails(sch, lambda: sch.fuse(j, i), LoopStructureError, "loop i is not directly inside loop j")
    _fails(sch, lambda: sch.fuse(i, i), LoopStructureError, "loop i is not directly inside loop i")
    _fails(sch, lambda: sch.fuse(), InvalidArgument, "fuse")
    _fails(sch, lambda: sch.fuse([]), InvalidArgument, "fuse takes one or more LoopRVs")
    sch.annotate(k, "pragma_x", "v")
    _fails(sch, lambda: sch.fuse(j, k), LoopKindError, "cannot fuse loop k: it has annotations")
    sch2, (i2, j2) = _sch(TWO_STAGES, "B")
    _fails(sch2, lambda: sch2.fuse(i2, j2), LoopStructureError, "loop j is not the only statement in loop i")
    sch3, (o,) = _sch(OFFSET, "B")
    _fails(sch3, lambda: sch3.fuse(o), LoopStructureError, "cannot fuse loop i: it starts at 2")
    sch4, (ti, tj) = _sch(TRIANGLE, "B")
    _fails(sch4, lambda: sch4.fuse(ti, tj), LoopStructureError, "extent i \\+ 1 depends on loop i")


# ---------------------------------------------------------------------------------------
# reorder


def test_reorder_all_loops():
    sch, (i, j, k) = _sch(MATMUL, "C")
    sch.reorder(k, i, j)
    assert [sch.get(lp).loop_var.name for lp in sch.get_loops(sch.get_block("C"))] == ["k", "i", "j"]
    _finish(
        sch,
        MATMUL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for k, i, j in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
""",
    )


def test_reorder_keeps_unlisted_loops_in_place():
    sch, (i, j, k) = _sch(MATMUL, "C")
    i0, i1 = sch.split(i, [4, 4])
    sch.reorder([k, i0])  # chain i_0, i_1, j, k: i_0's and k's positions swap
    sch.reorder(j, i1)
    _finish(
        sch,
        MATMUL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for k, j, i_1, i_0 in T.grid(16, 16, 4, 4):
        with T.block("C"):
            vi = T.axis.spatial(16, i_0 * 4 + i_1)
            vj = T.axis.spatial(16, j)
            vk = T.axis.reduce(16, k)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
""",
    )


def test_reorder_single_loop_is_a_no_op():
    sch, (i, _, _) = _sch(MATMUL, "C")
    before = sch.func
    sch.reorder(i)
    assert sch.func is before and len(sch.trace) == 3
    check_trace_round_trip(sch, parse(MATMUL))


def test_reorder_errors():
    sch, (i, _j, k) = _sch(MATMUL, "C")
    _fails(sch, lambda: sch.reorder(k, i, k), InvalidArgument, "loop k appears more than once")
    sch2, (i2, j2) = _sch(TWO_STAGES, "B")
    j_c = sch2.get_loops(sch2.get_block("C"))[1]
    _fails(sch2, lambda: sch2.reorder(j_c, j2), LoopStructureError, "are in different subtrees")
    _fails(sch2, lambda: sch2.reorder(j2, i2), LoopStructureError, "the body of loop i is not the single loop below it")
    sch3, (ti, tj) = _sch(TRIANGLE, "B")
    _fails(sch3, lambda: sch3.reorder(tj, ti), LoopStructureError, "the range of loop j depends on loop i")
    sch4, (oi, oj) = _sch(OPAQUE, "B")
    _fails(sch4, lambda: sch4.reorder(oj, oi), LoopStructureError, "block B under them has the opaque iterator vi")
    sch5, (ni, nj) = _sch(NOT_AFFINE, "B")
    _fails(sch5, lambda: sch5.reorder(nj, ni), NotAffineBinding, "block B")
    sch6 = Schedule(parse(NESTED_SCOPE))
    (o,) = sch6.get_loops(sch6.get_block("outer"))
    (inner,) = sch6.get_loops(sch6.get_block("B"))
    _fails(sch6, lambda: sch6.reorder(inner, o), LoopStructureError, "not under the same block scope")


# ---------------------------------------------------------------------------------------
# add_unit_loop


def test_add_unit_loop_above_block_and_loop():
    sch, (i, _) = _sch(ELEM, "B")
    u = sch.add_unit_loop(sch.get_block("B"))
    sch.add_unit_loop(i)
    assert sch.get(u).extent.value == 1
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for u_1, i, j, u in T.grid(1, 16, 24, 1):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_add_unit_loop_errors():
    sch = Schedule(parse(ELEM))
    root = sch.get_block("root")
    _fails(sch, lambda: sch.add_unit_loop(root), InvalidArgument, "block root: it is the root block")
    _fails(sch, lambda: sch.add_unit_loop("B"), InvalidArgument, "must be a BlockRV or a LoopRV")


# ---------------------------------------------------------------------------------------
# loop kinds


def test_parallel_vectorize_unroll():
    sch, (i, j) = _sch(ELEM, "B")
    j0, j1 = sch.split(j, [None, 8])
    sch.parallel(i)
    sch.unroll(j0)
    sch.vectorize(j1)
    assert sch.get(i).kind == ForKind.PARALLEL  # the LoopRV survives a kind change
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i in T.parallel(16):
        for j_0 in T.unroll(3):
            for j_1 in T.vectorized(8):
                with T.block("B"):
                    vi = T.axis.spatial(16, i)
                    vj = T.axis.spatial(24, j_0 * 8 + j_1)
                    T.reads(A[vi, vj])
                    T.writes(B[vi, vj])
                    B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_bind_threads_and_cross_thread_reduction():
    sch, (i, j, k) = _sch(MATMUL, "C")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, thread_axis="threadIdx.y")
    sch.bind(k, "threadIdx.x")  # a reduce iterator may be bound to threadIdx (cross-thread reduction)
    sch.unroll(j)  # unroll replaces the thread binding
    _finish(
        sch,
        MATMUL,
        """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i in T.thread_binding(16, thread="blockIdx.x"):
        for j in T.unroll(16):
            for k in T.thread_binding(16, thread="threadIdx.x"):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
""",
    )


def test_loop_kind_reduction_errors():
    sch, (_, _, k) = _sch(MATMUL, "C")
    _fails(
        sch,
        lambda: sch.parallel(k),
        LoopKindError,
        "cannot parallelize loop k: block C's reduce iterator vk is bound to it; a reduction cannot run in parallel",
    )
    _fails(sch, lambda: sch.vectorize(k), LoopKindError, "cannot vectorize loop k: block C's reduce iterator vk")
    _fails(
        sch,
        lambda: sch.bind(k, "blockIdx.x"),
        LoopKindError,
        "cannot bind loop k to blockIdx.x: block C's reduce iterator vk is bound to it; a reduction can be bound only to threadIdx",
    )
    # a loop that contains the reduction but is bound only to spatial iterators is fine
    sch.parallel(sch.get_loops(sch.get_block("C"))[0])


def test_loop_kind_opaque_and_not_affine_errors():
    sch, (i, j) = _sch(OPAQUE, "B")
    _fails(sch, lambda: sch.parallel(i), LoopKindError, "cannot parallelize loop i: block B's opaque iterator vi")
    sch.vectorize(j)  # vj is spatial
    sch2, (ni, nj) = _sch(NOT_AFFINE, "B")
    _fails(sch2, lambda: sch2.vectorize(nj), NotAffineBinding, "cannot vectorize loop j: .*block B")
    sch2.unroll(ni)  # unrolling has no requirement
    sch3, (ri, _) = _sch(NOT_AFFINE_ACCUMULATE, "B")
    _fails(sch3, lambda: sch3.parallel(ri), NotAffineBinding, "cannot parallelize loop i: .*block B")
    _fails(sch3, lambda: sch3.bind(ri, "blockIdx.x"), NotAffineBinding, "cannot bind loop i to blockIdx.x")


def test_parallel_takes_a_pure_spatial_block_with_overlapping_bindings():
    # B writes each point from A alone: two threads writing one point write the same value
    sch, (i, _) = _sch(NOT_AFFINE, "B")
    bound = sch.copy()
    bound.bind(bound.get_loops(bound.get_block("B"))[0], "blockIdx.x")  # on a GPU too (a sliding-window fetch)
    sch.parallel(i)
    a = np.random.default_rng(3).standard_normal((16, 16)).astype("float32")
    b = np.zeros((16, 16), "float32")
    build(sch.func)(a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_parallel_over_a_padding_copy_computed_at_overlapping_row_tiles():
    wl = workloads.make("DEP", (1, 8, 8, 16, 3, 1, 1))
    sch = Schedule(wl.func)
    conv = sch.get_block("depth_conv2d_nhwc")
    h_o, _ = sch.split(sch.get_loops(conv)[1], [None, 2])
    sch.compute_at(sch.get_block("PadInput"), h_o)  # rows 2t .. 2t+3: each tile re-reads a halo
    sch.parallel(h_o)
    inputs = [a.copy() for a in wl.make_inputs(5)]
    out = np.zeros(wl.outputs[0].shape, wl.outputs[0].dtype)
    build(sch.func)(*inputs, out)
    wl.check([out], wl.reference(*inputs))


def test_vectorize_needs_constant_extent():
    sch, (_, tj) = _sch(TRIANGLE, "B")
    _fails(
        sch, lambda: sch.vectorize(tj), LoopKindError, "cannot vectorize loop j: its extent i \\+ 1 is not a constant"
    )


def test_bind_errors():
    sch, (i, j) = _sch(TWO_STAGES, "B")
    j_c = sch.get_loops(sch.get_block("C"))[1]
    _fails(sch, lambda: sch.bind(i, "threadIdx.w"), InvalidArgument, "thread_axis must be one of blockIdx.x")
    _fails(sch, lambda: sch.bind(i, 3), InvalidArgument, "thread_axis must be one of")
    sch.bind(i, "blockIdx.x")
    sch.bind(j, "threadIdx.x")
    _fails(
        sch,
        lambda: sch.bind(j_c, "threadIdx.x"),
        LoopKindError,
        "cannot bind loop j2 to threadIdx.x: loop j in the same kernel is bound to threadIdx.x with extent 16 but loop j2 has extent 8",
    )
    _fails(
        sch,
        lambda: sch.bind(i, "threadIdx.x"),
        LoopKindError,
        "cannot bind loop i to threadIdx.x: loop j inside it is already bound to threadIdx.x",
    )
    j_c0, _ = sch.split(j_c, [None, 4])
    _fails(
        sch,
        lambda: sch.bind(j_c0, "blockIdx.x"),
        LoopKindError,
        "it is inside loop i, which is already bound to blockIdx.x",
    )
    sch.bind(j_c0, "threadIdx.y")
    _finish(sch, TWO_STAGES)


def test_kind_primitive_on_removed_loop():
    sch, (i, _) = _sch(ELEM, "B")
    sch.split(i, [4, 4])
    _fails(sch, lambda: sch.parallel(i), LoopNotFound, "loop i no longer exists")


# ---------------------------------------------------------------------------------------
# annotations


def test_annotate_and_unannotate():
    sch, (i, j) = _sch(ELEM, "B")
    b = sch.get_block("B")
    v = sch.sample_categorical([0, 16, 64], [0.0, 0.0, 1.0])
    sch.annotate(b, "meta_schedule.unroll_explicit", v)
    sch.annotate(b, "tile", [4, 2, 1.5, "x", True])
    sch.annotate(i, ann_key="pragma_auto_unroll_max_step", ann_val=16)
    sch.annotate(i, "pragma_auto_unroll_max_step", 32)  # replaces the value
    sch.annotate(j, "note", "a")
    sch.unannotate(j, "note")
    assert dict(sch.get(b).annotations)["tile"] == (4, 2, 1.5, "x", True)
    _finish(
        sch,
        ELEM,
        """
@T.prim_func
def main(A: T.Buffer((16, 24), "float32"), B: T.Buffer((16, 24), "float32")):
    for i in T.serial(16, annotations={"pragma_auto_unroll_max_step": 32}):
        for j in range(24):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                T.block_attr({"meta_schedule.unroll_explicit": 64, "tile": [4, 2, 1.5, "x", True]})
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
""",
    )


def test_annotate_errors():
    sch, (i, _) = _sch(ELEM, "B")
    b = sch.get_block("B")
    _fails(
        sch,
        lambda: sch.unannotate(i, "missing"),
        InvalidArgument,
        "cannot unannotate loop i: it has no annotation 'missing'",
    )
    sch.annotate(b, "k", 1)
    _fails(
        sch,
        lambda: sch.unannotate(b, "x"),
        InvalidArgument,
        "cannot unannotate block B: it has no annotation 'x' \\(its annotations: k\\)",
    )
    _fails(
        sch, lambda: sch.annotate(i, "k", {"a": 1}), InvalidArgument, "ann_val must be an int, float, str, bool, ExprRV"
    )
    _fails(sch, lambda: sch.annotate(i, "", 1), InvalidArgument, "ann_key must be a non-empty string")
    _fails(sch, lambda: sch.annotate(3, "k", 1), InvalidArgument, "block_or_loop must be a BlockRV or a LoopRV")
    sch.split(i, [4, 4])
    _fails(sch, lambda: sch.annotate(i, "k", 1), LoopNotFound, "loop i no longer exists")
    _fails(sch, lambda: sch.get_block("nope"), BlockNotFound, "no block named nope")
