"""blockize: the subtree under a loop becomes a new outer block (TVM semantics)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip

from tensorsearch.schedule import InvalidArgument, LoopStructureError, NotAffineBinding, Schedule
from tensorsearch.script import parse

GEMM_TILED = """
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i0, j0, k0, i1, j1, k1 in T.grid(4, 4, 4, 16, 16, 16):
        with T.block("C"):
            vi = T.axis.spatial(64, i0 * 16 + i1)
            vj = T.axis.spatial(64, j0 * 16 + j1)
            vk = T.axis.reduce(64, k0 * 16 + k1)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

GEMM_BLOCKIZED = """
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i0, j0, k0 in T.grid(4, 4, 4):
        with T.block("C_o"):
            vi_o, vj_o, vk_o = T.axis.remap("SSR", [i0, j0, k0])
            T.reads(A[vi_o * 16:vi_o * 16 + 16, vk_o * 16:vk_o * 16 + 16], B[vk_o * 16:vk_o * 16 + 16, vj_o * 16:vj_o * 16 + 16])
            T.writes(C[vi_o * 16:vi_o * 16 + 16, vj_o * 16:vj_o * 16 + 16])
            with T.init():
                for i1, j1 in T.grid(16, 16):
                    with T.block("C_init"):
                        vi_i_init, vj_i_init = T.axis.remap("SS", [i1, j1])
                        T.reads()
                        T.writes(C[vi_o * 16 + vi_i_init, vj_o * 16 + vj_i_init])
                        C[vi_o * 16 + vi_i_init, vj_o * 16 + vj_i_init] = T.float32(0.0)
            for i1, j1, k1 in T.grid(16, 16, 16):
                with T.block("C"):
                    vi_i, vj_i, vk_i = T.axis.remap("SSR", [i1, j1, k1])
                    T.reads(C[vi_o * 16 + vi_i, vj_o * 16 + vj_i], A[vi_o * 16 + vi_i, vk_o * 16 + vk_i], B[vk_o * 16 + vk_i, vj_o * 16 + vj_i])
                    T.writes(C[vi_o * 16 + vi_i, vj_o * 16 + vj_i])
                    C[vi_o * 16 + vi_i, vj_o * 16 + vj_i] = C[vi_o * 16 + vi_i, vj_o * 16 + vj_i] + A[vi_o * 16 + vi_i, vk_o * 16 + vk_i] * B[vk_o * 16 + vk_i, vj_o * 16 + vj_i]
"""

GEMM_BLOCKIZED_AT_K1 = """
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    for i0, j0, k0, i1, j1 in T.grid(4, 4, 4, 16, 16):
        with T.block("C_o"):
            vi = T.axis.spatial(64, i0 * 16 + i1)
            vj = T.axis.spatial(64, j0 * 16 + j1)
            vk_o = T.axis.reduce(4, k0)
            T.reads(A[vi, vk_o * 16:vk_o * 16 + 16], B[vk_o * 16:vk_o * 16 + 16, vj])
            T.writes(C[vi, vj])
            with T.init():
                with T.block("C_init"):
                    T.reads()
                    T.writes(C[vi, vj])
                    C[vi, vj] = T.float32(0.0)
            for k1 in range(16):
                with T.block("C"):
                    vk_i = T.axis.reduce(16, k1)
                    T.reads(C[vi, vj], A[vi, vk_o * 16 + vk_i], B[vk_o * 16 + vk_i, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = C[vi, vj] + A[vi, vk_o * 16 + vk_i] * B[vk_o * 16 + vk_i, vj]
"""

ELEMENTWISE_UNIT = """
@T.prim_func
def main(A: T.Buffer((16, 128), "float32"), B: T.Buffer((16, 128), "float32")):
    for i0, j0, i1, j1 in T.grid(1, 8, 16, 16):
        with T.block("B"):
            vi = T.axis.spatial(16, i0 * 16 + i1)
            vj = T.axis.spatial(128, j0 * 16 + j1)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] + T.float32(1.0)
"""

ELEMENTWISE_BLOCKIZED = """
@T.prim_func
def main(A: T.Buffer((16, 128), "float32"), B: T.Buffer((16, 128), "float32")):
    for i0, j0 in T.grid(1, 8):
        with T.block("B_o"):
            vi_o = T.axis.spatial(1, UNIT)
            vj_o = T.axis.spatial(8, j0)
            T.reads(A[0:16, vj_o * 16:vj_o * 16 + 16])
            T.writes(B[0:16, vj_o * 16:vj_o * 16 + 16])
            for i1, j1 in T.grid(16, 16):
                with T.block("B"):
                    vi_i, vj_i = T.axis.remap("SS", [i1, j1])
                    T.reads(A[vi_i, vj_o * 16 + vj_i])
                    T.writes(B[vi_i, vj_o * 16 + vj_i])
                    B[vi_i, vj_o * 16 + vj_i] = A[vi_i, vj_o * 16 + vj_i] + T.float32(1.0)
"""


def _gemm() -> tuple:
    func = parse(GEMM_TILED)
    sch = Schedule(func)
    return func, sch, sch.get_loops(sch.get_block("C"))


@pytest.mark.slow
def test_blockize_gemm_tile():
    func, sch, loops = _gemm()
    outer = sch.blockize(loops[3])
    assert_program(sch.func, GEMM_BLOCKIZED)
    assert sch.get(outer).name == "C_o"
    # the inner block and the loops kept their random variables
    assert sch.get(sch.get_block("C")).iter_vars[0].var.name == "vi_i"
    assert [sch.get(lp).loop_var.name for lp in sch.get_loops(sch.get_block("C"))] == ["i1", "j1", "k1"]
    assert sch.get(loops[4]).loop_var.name == "j1"
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


@pytest.mark.slow
def test_blockize_innermost_reduction_loop():
    func, sch, loops = _gemm()
    sch.blockize(loops[5])
    assert_program(sch.func, GEMM_BLOCKIZED_AT_K1)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


@pytest.mark.slow
def test_blockize_whole_nest():
    func, sch, loops = _gemm()
    sch.blockize(loops[0])
    outer = sch.get(sch.get_block("C_o"))
    assert [(iv.var.name, int(iv.dom.extent.value), iv.iter_type.value) for iv in outer.iter_vars] == [
        ("vi_o", 1, "spatial"),
        ("vj_o", 1, "spatial"),
        ("vk_o", 1, "reduce"),
    ]
    assert "C[0:64, 0:64]" in sch.show()
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


@pytest.mark.parametrize("preserve_unit_iters", [True, False])
def test_blockize_unit_iters(preserve_unit_iters):
    func = parse(ELEMENTWISE_UNIT)
    sch = Schedule(func)
    _, _, i1, _ = sch.get_loops(sch.get_block("B"))
    sch.blockize(i1, preserve_unit_iters=preserve_unit_iters)
    assert_program(sch.func, ELEMENTWISE_BLOCKIZED.replace("UNIT", "i0" if preserve_unit_iters else "0"))
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


@pytest.mark.slow
def test_blockize_twice_nests_blocks():
    func, sch, loops = _gemm()
    sch.blockize(loops[3])
    sch.blockize(loops[0])
    assert sch.get(sch.get_block("C_o_o")).body.body.body.body.block.name == "C_o"
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


# -- errors ------------------------------------------------------------------------------


def _unchanged(sch: Schedule, before, n: int) -> None:
    assert sch.func is before
    assert len(sch.trace) == n


def test_error_list_of_blocks():
    _, sch, _ = _gemm()
    block = sch.get_block("C")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(InvalidArgument, match="only the loop form"):
        sch.blockize([block])
    _unchanged(sch, before, n)


def test_error_not_a_loop():
    _, sch, _ = _gemm()
    block = sch.get_block("C")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(InvalidArgument, match="target must be a LoopRV"):
        sch.blockize(block)
    _unchanged(sch, before, n)


TWO_BLOCKS = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    B = T.alloc_buffer((16, 16), "float32")
    for i in range(16):
        for j in range(16):
            with T.block("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(A[vi, vj])
                T.writes(B[vi, vj])
                B[vi, vj] = A[vi, vj] * T.float32(2.0)
        for j in range(16):
            with T.block("C"):
                vi, vj = T.axis.remap("SS", [i, j])
                T.reads(B[vi, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = B[vi, vj] + T.float32(1.0)
"""


def test_error_two_blocks():
    sch = Schedule(parse(TWO_BLOCKS))
    (i, _) = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError, match=r"loop i: the subtree under it must contain exactly one block, it contains 2 \(B, C\)"
    ):
        sch.blockize(i)
    _unchanged(sch, before, n)


def test_blockize_one_of_two_blocks():
    func = parse(TWO_BLOCKS)
    sch = Schedule(func)
    _, j = sch.get_loops(sch.get_block("C"))
    sch.blockize(j)
    assert sch.get(sch.get_block("C_o")).iter_vars[0].var.name == "vi_o"
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


NOT_DIVISIBLE = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i0, i1 in T.grid(4, 16):
        with T.block("B"):
            vi = T.axis.spatial(64, i1 * 4 + i0)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
"""


def test_error_not_divisible():
    sch = Schedule(parse(NOT_DIVISIBLE))
    _, i1 = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        NotAffineBinding,
        match=r"cannot blockize block B at loop i1: the binding of iterator vi cannot be divided .*mixes inner and outer loops",
    ):
        sch.blockize(i1)
    _unchanged(sch, before, n)


NOT_AFFINE = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i0, i1 in T.grid(4, 16):
        with T.block("B"):
            vi = T.axis.spatial(64, i0 * i1)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
"""


def test_error_not_affine():
    sch = Schedule(parse(NOT_AFFINE))
    _, i1 = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(NotAffineBinding, match="multiplies two iterator expressions"):
        sch.blockize(i1)
    _unchanged(sch, before, n)
