"""decompose_reduction, rfactor and pad_einsum: expected IR, errors, trace round trips, results."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip

from tensorsearch.schedule import (
    InvalidArgument,
    LoopKindError,
    LoopNotFound,
    LoopStructureError,
    NotAffineBinding,
    NotReductionBlock,
    Schedule,
)
from tensorsearch.script import parse

# ---------------------------------------------------------------------------------------
# programs

GEMM = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

# the reduction loop k sits between i and j
GEMM_IKJ = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, k, j in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

# i split 4 x 8 and k split 4 x 8, written directly
GEMM_TILED = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for io, ii, j, ko, ki in T.grid(4, 8, 32, 4, 8):
        with T.block("C"):
            vi = T.axis.spatial(32, io * 8 + ii)
            vj = T.axis.spatial(32, j)
            vk = T.axis.reduce(32, ko * 8 + ki)
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

FLT_LOWEST = "T.float32(-3.4028234663852886e+38)"
FLT_MAX = "T.float32(3.4028234663852886e+38)"


def rowsum(combiner: str = "sum", tiled: bool = False, kind: str = "") -> str:
    """B[i] = reduce_k A[i, k] over (32, 32); tiled: k split 4 x 8 as ko * 8 + ki."""
    init = {"sum": "T.float32(0.0)", "max": FLT_LOWEST, "min": FLT_MAX, "prod": "T.float32(1.0)"}[combiner]
    update = {
        "sum": "B[vi] + A[vi, vk]",
        "max": "T.max(B[vi], A[vi, vk])",
        "min": "T.min(B[vi], A[vi, vk])",
        "prod": "B[vi] * A[vi, vk]",
    }[combiner]
    if tiled:
        head = """    for i, ko, ki in T.grid(32, 4, 8):
        with T.block("B"):
            vi = T.axis.spatial(32, i)
            vk = T.axis.reduce(32, ko * 8 + ki)"""
    elif kind:
        head = f"""    for i in T.serial(32):
        for k in T.{kind}(32):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])"""
    else:
        head = """    for i, k in T.grid(32, 32):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])"""
    indent = " " * (16 if kind else 12)
    return f"""
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
{head}
{indent}T.reads(A[vi, vk])
{indent}T.writes(B[vi])
{indent}with T.init():
{indent}    B[vi] = {init}
{indent}B[vi] = {update}
"""


# a row sum followed by an elementwise block
ROWSUM_SCALE = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), D: T.Buffer((32,), "float32")):
    B = T.alloc_buffer((32,), "float32")
    for i, k in T.grid(32, 32):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
    for i in T.serial(32):
        with T.block("D"):
            vi = T.axis.spatial(32, i)
            T.reads(B[vi])
            T.writes(D[vi])
            D[vi] = B[vi] * T.float32(2.0)
"""

# the row sum and the scaling share loop i
ROWSUM_SCALE_FUSED = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), D: T.Buffer((32,), "float32")):
    B = T.alloc_buffer((32,), "float32")
    for i in T.serial(32):
        for k in T.serial(32):
            with T.block("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                T.reads(A[vi, vk])
                T.writes(B[vi])
                with T.init():
                    B[vi] = T.float32(0.0)
                B[vi] = B[vi] + A[vi, vk]
        with T.block("D"):
            vi = T.axis.spatial(32, i)
            T.reads(B[vi])
            T.writes(D[vi])
            D[vi] = B[vi] * T.float32(2.0)
"""

GEMM_30 = """
@T.prim_func
def main(A: T.Buffer((30, 30), "float32"), B: T.Buffer((30, 30), "float32"), C: T.Buffer((30, 30), "float32")):
    for i, j, k in T.grid(30, 30, 30):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""


def _assert_failed_cleanly(sch: Schedule, before, trace_len: int) -> None:
    assert sch.func is before
    assert len(sch.trace) == trace_len


# ---------------------------------------------------------------------------------------
# decompose_reduction

GEMM_DECOMPOSED_AT_I = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i_init, j_init in T.grid(32, 32):
        with T.block("C_init"):
            vi, vj = T.axis.remap("SS", [i_init, j_init])
            T.reads()
            T.writes(C[vi, vj])
            C[vi, vj] = T.float32(0.0)
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C_update"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(C[vi, vj], A[vi, vk], B[vk, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

GEMM_DECOMPOSED_AT_K = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for i, j in T.grid(32, 32):
        with T.block("C_init"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads()
            T.writes(C[vi, vj])
            C[vi, vj] = T.float32(0.0)
        for k in T.serial(32):
            with T.block("C_update"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(C[vi, vj], A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

GEMM_TILED_DECOMPOSED_AT_II = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    for io in T.serial(4):
        for ii_init, j_init in T.grid(8, 32):
            with T.block("C_init"):
                vi = T.axis.spatial(32, io * 8 + ii_init)
                vj = T.axis.spatial(32, j_init)
                T.reads()
                T.writes(C[vi, vj])
                C[vi, vj] = T.float32(0.0)
        for ii, j, ko, ki in T.grid(8, 32, 4, 8):
            with T.block("C_update"):
                vi = T.axis.spatial(32, io * 8 + ii)
                vj = T.axis.spatial(32, j)
                vk = T.axis.reduce(32, ko * 8 + ki)
                T.reads(C[vi, vj], A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""


@pytest.mark.parametrize(
    ("loop_index", "expected"), [(0, GEMM_DECOMPOSED_AT_I), (2, GEMM_DECOMPOSED_AT_K)], ids=["at_i", "at_k"]
)
def test_decompose_reduction_gemm(loop_index, expected):
    func = parse(GEMM)
    sch = Schedule(func)
    block = sch.get_block("C")
    loops = sch.get_loops(block)
    init = sch.decompose_reduction(block, loops[loop_index])
    assert_program(sch.func, expected)
    assert sch.get(init).name == "C_init"
    # like TVM, the BlockRV of the reduction follows the update block, and the kept loops stay valid
    assert sch.get(block).name == "C_update"
    assert sch.get(sch.get_block("C_update")) is sch.get(block)
    assert [sch.get(lp).loop_var.name for lp in loops] == ["i", "j", "k"]
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_decompose_reduction_tiled_keeps_outer_loop_and_drops_reduce_loops():
    func = parse(GEMM_TILED)
    sch = Schedule(func)
    block = sch.get_block("C")
    _, ii, _, _, _ = sch.get_loops(block)
    sch.decompose_reduction(block, ii)
    assert_program(sch.func, GEMM_TILED_DECOMPOSED_AT_II)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_decompose_reduction_predicate_keeps_only_spatial_conditions():
    src = """
@T.prim_func
def main(A: T.Buffer((30, 30), "float32"), B: T.Buffer((30,), "float32")):
    for io, ii, ko, ki in T.grid(4, 8, 4, 8):
        with T.block("B"):
            T.where(io * 8 + ii < 30 and ko * 8 + ki < 30)
            vi = T.axis.spatial(30, io * 8 + ii)
            vk = T.axis.reduce(30, ko * 8 + ki)
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
"""
    expected = """
@T.prim_func
def main(A: T.Buffer((30, 30), "float32"), B: T.Buffer((30,), "float32")):
    for io, ii in T.grid(4, 8):
        with T.block("B_init"):
            T.where(io * 8 + ii < 30)
            vi = T.axis.spatial(30, io * 8 + ii)
            T.reads()
            T.writes(B[vi])
            B[vi] = T.float32(0.0)
        for ko, ki in T.grid(4, 8):
            with T.block("B_update"):
                T.where(io * 8 + ii < 30 and ko * 8 + ki < 30)
                vi = T.axis.spatial(30, io * 8 + ii)
                vk = T.axis.reduce(30, ko * 8 + ki)
                T.reads(B[vi], A[vi, vk])
                T.writes(B[vi])
                B[vi] = B[vi] + A[vi, vk]
"""
    func = parse(src)
    sch = Schedule(func)
    block = sch.get_block("B")
    _, _, ko, _ = sch.get_loops(block)
    sch.decompose_reduction(block, ko)
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_decompose_reduction_keeps_loop_kinds():
    src = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    for k in T.serial(32):
        for i in T.vectorized(32):
            with T.block("B"):
                vk, vi = T.axis.remap("RS", [k, i])
                T.reads(A[vk, vi])
                T.writes(B[vi])
                with T.init():
                    B[vi] = T.float32(0.0)
                B[vi] = B[vi] + A[vk, vi]
"""
    expected = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    for i_init in T.vectorized(32):
        with T.block("B_init"):
            vi = T.axis.spatial(32, i_init)
            T.reads()
            T.writes(B[vi])
            B[vi] = T.float32(0.0)
    for k in T.serial(32):
        for i in T.vectorized(32):
            with T.block("B_update"):
                vk, vi = T.axis.remap("RS", [k, i])
                T.reads(B[vi], A[vk, vi])
                T.writes(B[vi])
                B[vi] = B[vi] + A[vk, vi]
"""
    func = parse(src)
    sch = Schedule(func)
    block = sch.get_block("B")
    k, _ = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_decompose_reduction_loop_not_ancestor():
    func = parse(ROWSUM_SCALE)
    sch = Schedule(func)
    block = sch.get_block("B")
    (d_loop,) = sch.get_loops(sch.get_block("D"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(LoopStructureError, match="needs loop i to be an ancestor of block B"):
        sch.decompose_reduction(block, d_loop)
    _assert_failed_cleanly(sch, before, n)


def test_decompose_reduction_not_a_reduction_block():
    func = parse(ROWSUM_SCALE)
    sch = Schedule(func)
    block = sch.get_block("D")
    (loop,) = sch.get_loops(block)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(NotReductionBlock, match="needs a reduction block, but block D has no init statement"):
        sch.decompose_reduction(block, loop)
    _assert_failed_cleanly(sch, before, n)


def test_decompose_reduction_loop_below_a_reduce_loop():
    func = parse(GEMM_IKJ)
    sch = Schedule(func)
    block = sch.get_block("C")
    _, _, j = sch.get_loops(block)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError,
        match="needs loop j to be higher than all the loops related to reduce iterators of block C, "
        "but loop k above it is bound to reduce iterator vk",
    ):
        sch.decompose_reduction(block, j)
    _assert_failed_cleanly(sch, before, n)


NOT_AFFINE = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    for i, k in T.grid(32, 32):
        with T.block("B"):
            vi = T.axis.spatial(32, i)
            vk = T.axis.reduce(32, k * 3 % 32)
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
"""


@pytest.mark.parametrize("primitive", ["decompose_reduction", "rfactor"])
def test_reduction_primitives_need_an_affine_binding(primitive):
    sch = Schedule(parse(NOT_AFFINE))
    block = sch.get_block("B")
    _, k = sch.get_loops(block)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        NotAffineBinding,
        match=f"{primitive} needs an affine binding: the bindings of block B are not an affine map of the loops",
    ):
        if primitive == "rfactor":
            sch.rfactor(k, 0)
        else:
            sch.decompose_reduction(block, k)
    _assert_failed_cleanly(sch, before, n)


def test_decompose_reduction_unbound_loop_below():
    src = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    for i, r, k in T.grid(32, 2, 32):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
"""
    func = parse(src)
    sch = Schedule(func)
    block = sch.get_block("B")
    i, r, k = sch.get_loops(block)
    before, n = sch.func, len(sch.trace)
    # the reduction runs twice (loop r) and re-initializes each time: one init before i would double it
    with pytest.raises(
        LoopStructureError,
        match="cannot decompose block B at loop i: loop r below it is bound to no iterator of the block",
    ):
        sch.decompose_reduction(block, i)
    with pytest.raises(LoopStructureError, match="at loop r: loop r is bound to no iterator"):
        sch.decompose_reduction(block, r)
    _assert_failed_cleanly(sch, before, n)
    sch.decompose_reduction(block, k)  # inside r: the init repeats with the reduction
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_decompose_reduction_argument_types():
    func = parse(GEMM)
    sch = Schedule(func)
    block = sch.get_block("C")
    i, _, _ = sch.get_loops(block)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(InvalidArgument, match="expected a BlockRV, got LoopRV"):
        sch.decompose_reduction(i, i)
    with pytest.raises(InvalidArgument, match="expected a LoopRV, got BlockRV"):
        sch.decompose_reduction(block, block)
    _assert_failed_cleanly(sch, before, n)


def test_decompose_reduction_twice_fails_on_the_update_block():
    func = parse(GEMM)
    sch = Schedule(func)
    block = sch.get_block("C")
    _, _, k = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    before, n = sch.func, len(sch.trace)
    with pytest.raises(NotReductionBlock, match="block C_update has no init statement"):
        sch.decompose_reduction(block, k)
    _assert_failed_cleanly(sch, before, n)


# ---------------------------------------------------------------------------------------
# rfactor

GEMM_RFACTOR_K = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    C_rf = T.alloc_buffer((32, 32, 32), "float32")
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C_rf"):
            vk, vi, vj = T.axis.remap("SSS", [k, i, j])
            T.reads(A[vi, vk], B[vk, vj])
            T.writes(C_rf[vk, vi, vj])
            C_rf[vk, vi, vj] = A[vi, vk] * B[vk, vj]
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vk, vi, vj = T.axis.remap("RSS", [k, i, j])
            T.reads(C_rf[vk, vi, vj])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + C_rf[vk, vi, vj]
"""

GEMM_TILED_RFACTOR_KI = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    C_rf = T.alloc_buffer((32, 32, 8), "float32")
    for io, ii, j, ko, ki in T.grid(4, 8, 32, 4, 8):
        with T.block("C_rf"):
            vki = T.axis.spatial(8, ki)
            vi = T.axis.spatial(32, io * 8 + ii)
            vj = T.axis.spatial(32, j)
            vko = T.axis.reduce(4, ko)
            T.reads(A[vi, vko * 8 + vki], B[vko * 8 + vki, vj])
            T.writes(C_rf[vi, vj, vki])
            with T.init():
                C_rf[vi, vj, vki] = T.float32(0.0)
            C_rf[vi, vj, vki] = C_rf[vi, vj, vki] + A[vi, vko * 8 + vki] * B[vko * 8 + vki, vj]
    for io, ii, j, ki in T.grid(4, 8, 32, 8):
        with T.block("C"):
            vki = T.axis.reduce(8, ki)
            vi = T.axis.spatial(32, io * 8 + ii)
            vj = T.axis.spatial(32, j)
            T.reads(C_rf[vi, vj, vki])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0.0)
            C[vi, vj] = C[vi, vj] + C_rf[vi, vj, vki]
"""


def test_rfactor_gemm_whole_reduction_loop():
    func = parse(GEMM)
    sch = Schedule(func)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    rf = sch.rfactor(k, 0)
    assert_program(sch.func, GEMM_RFACTOR_K)
    assert sch.get(rf).name == "C_rf"
    assert "C_rf = T.alloc_buffer((32, 32, 32)" in sch.func.script()
    # the kept loops are the write-back block's loops
    assert [sch.get(lp).loop_var.name for lp in (i, j, k)] == ["i", "j", "k"]
    assert sch.get_loops(block) and [sch.get(lp) for lp in sch.get_loops(block)] == [sch.get(x) for x in (i, j, k)]
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("factor_axis", [2, -1])
def test_rfactor_gemm_tiled_inner_reduction_loop(factor_axis):
    func = parse(GEMM_TILED)
    sch = Schedule(func)
    block = sch.get_block("C")
    io, ii, j, ko, ki = sch.get_loops(block)
    sch.rfactor(ki, factor_axis)
    assert_program(sch.func, GEMM_TILED_RFACTOR_KI)
    # ko is gone from the write-back nest; ki and the spatial loops survive
    with pytest.raises(LoopNotFound, match="loop ko no longer exists"):
        sch.get(ko)
    assert [sch.get(lp).loop_var.name for lp in (io, ii, j, ki)] == ["io", "ii", "j", "ki"]
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func, rtol=1e-4, atol=1e-4)


ROWSUM_TILED_RFACTOR_KO = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    B_rf = T.alloc_buffer((4, 32), "float32")
    for i, ko, ki in T.grid(32, 4, 8):
        with T.block("B_rf"):
            vko = T.axis.spatial(4, ko)
            vi = T.axis.spatial(32, i)
            vki = T.axis.reduce(8, ki)
            T.reads(A[vi, vko * 8 + vki])
            T.writes(B_rf[vko, vi])
            with T.init():
                B_rf[vko, vi] = {identity}
            B_rf[vko, vi] = {rf_update}
    for i, ko in T.grid(32, 4):
        with T.block("B"):
            vko = T.axis.reduce(4, ko)
            vi = T.axis.spatial(32, i)
            T.reads(B_rf[vko, vi])
            T.writes(B[vi])
            with T.init():
                B[vi] = {identity}
            B[vi] = {wb_update}
"""


@pytest.mark.parametrize(
    ("combiner", "identity", "rf_update", "wb_update"),
    [
        ("sum", "T.float32(0.0)", "B_rf[vko, vi] + A[vi, vko * 8 + vki]", "B[vi] + B_rf[vko, vi]"),
        ("max", FLT_LOWEST, "T.max(B_rf[vko, vi], A[vi, vko * 8 + vki])", "T.max(B[vi], B_rf[vko, vi])"),
        ("min", FLT_MAX, "T.min(B_rf[vko, vi], A[vi, vko * 8 + vki])", "T.min(B[vi], B_rf[vko, vi])"),
    ],
)
def test_rfactor_rowsum_combiners(combiner, identity, rf_update, wb_update):
    func = parse(rowsum(combiner, tiled=True))
    sch = Schedule(func)
    block = sch.get_block("B")
    _, ko, _ = sch.get_loops(block)
    rf = sch.rfactor(ko, 0)
    expected = ROWSUM_TILED_RFACTOR_KO.format(identity=identity, rf_update=rf_update, wb_update=wb_update)
    assert_program(sch.func, expected)
    assert sch.get(rf).name == "B_rf"
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_rfactor_commuted_update_and_decompose_afterwards():
    src = rowsum("sum").replace("B[vi] = B[vi] + A[vi, vk]", "B[vi] = A[vi, vk] + B[vi]")
    func = parse(src)
    sch = Schedule(func)
    block = sch.get_block("B")
    _, k = sch.get_loops(block)
    sch.rfactor(k, 1)
    sch.decompose_reduction(block, k)
    expected = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    B_rf = T.alloc_buffer((32, 32), "float32")
    for i, k in T.grid(32, 32):
        with T.block("B_rf"):
            vk, vi = T.axis.remap("SS", [k, i])
            T.reads(A[vi, vk])
            T.writes(B_rf[vi, vk])
            B_rf[vi, vk] = A[vi, vk]
    for i in T.serial(32):
        with T.block("B_init"):
            vi = T.axis.spatial(32, i)
            T.reads()
            T.writes(B[vi])
            B[vi] = T.float32(0.0)
        for k in T.serial(32):
            with T.block("B_update"):
                vk, vi = T.axis.remap("RS", [k, i])
                T.reads(B[vi], B_rf[vi, vk])
                T.writes(B[vi])
                B[vi] = B[vi] + B_rf[vi, vk]
"""
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_rfactor_keeps_sibling_blocks_under_the_spatial_loop():
    func = parse(ROWSUM_SCALE_FUSED)
    sch = Schedule(func)
    _, k = sch.get_loops(sch.get_block("B"))
    sch.rfactor(k, 0)
    expected = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), D: T.Buffer((32,), "float32")):
    B = T.alloc_buffer((32,), "float32")
    B_rf = T.alloc_buffer((32, 32), "float32")
    for i, k in T.grid(32, 32):
        with T.block("B_rf"):
            vk, vi = T.axis.remap("SS", [k, i])
            T.reads(A[vi, vk])
            T.writes(B_rf[vk, vi])
            B_rf[vk, vi] = A[vi, vk]
    for i in T.serial(32):
        for k in T.serial(32):
            with T.block("B"):
                vk, vi = T.axis.remap("RS", [k, i])
                T.reads(B_rf[vk, vi])
                T.writes(B[vi])
                with T.init():
                    B[vi] = T.float32(0.0)
                B[vi] = B[vi] + B_rf[vk, vi]
        with T.block("D"):
            vi = T.axis.spatial(32, i)
            T.reads(B[vi])
            T.writes(D[vi])
            D[vi] = B[vi] * T.float32(2.0)
"""
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_rfactor_spatial_loop():
    func = parse(GEMM)
    sch = Schedule(func)
    i, _, _ = sch.get_loops(sch.get_block("C"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError, match="cannot factor loop i: it is bound to a spatial iterator of block C; the rfactor loop"
    ):
        sch.rfactor(i, 0)
    _assert_failed_cleanly(sch, before, n)


def test_rfactor_unbound_loop():
    src = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32,), "float32")):
    for i, k, t in T.grid(32, 32, 2):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = T.max(B[vi], A[vi, vk])
"""
    sch = Schedule(parse(src))
    _, _, t = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError, match="cannot factor loop t: it is not bound to any reduce iterator of block B"
    ):
        sch.rfactor(t, 0)
    _assert_failed_cleanly(sch, before, n)


def test_rfactor_loop_with_two_blocks():
    sch = Schedule(parse(ROWSUM_SCALE_FUSED))
    i, _ = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError, match=r"needs loop i to contain exactly one block, but it contains 2 \(B, D\)"
    ):
        sch.rfactor(i, 0)
    _assert_failed_cleanly(sch, before, n)


def test_rfactor_not_a_reduction_block():
    sch = Schedule(parse(ROWSUM_SCALE))
    (loop,) = sch.get_loops(sch.get_block("D"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(NotReductionBlock, match="rfactor needs a reduction block, but block D has no init statement"):
        sch.rfactor(loop, 0)
    _assert_failed_cleanly(sch, before, n)


@pytest.mark.parametrize("factor_axis", [2, -3])
def test_rfactor_factor_axis_out_of_range(factor_axis):
    sch = Schedule(parse(rowsum("sum")))
    _, k = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        InvalidArgument,
        match=rf"buffer B of block B has 1 dimension\(s\), so factor_axis must be in \[-2, 1\], got {factor_axis}",
    ):
        sch.rfactor(k, factor_axis)
    with pytest.raises(InvalidArgument, match="factor_axis must be an integer, got str"):
        sch.rfactor(k, "0")
    _assert_failed_cleanly(sch, before, n)


def test_rfactor_unsupported_combiner():
    sch = Schedule(parse(rowsum("prod")))
    _, k = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        NotReductionBlock,
        match=r"cannot recognize the reduction of block B: .* C\[\.\.\.\] = C\[\.\.\.\] \+ x, "
        r"C\[\.\.\.\] = T\.max\(C\[\.\.\.\], x\) or C\[\.\.\.\] = T\.min\(C\[\.\.\.\], x\)",
    ):
        sch.rfactor(k, 0)
    _assert_failed_cleanly(sch, before, n)


def test_rfactor_parallel_loop():
    sch = Schedule(parse(rowsum("sum", kind="parallel")))
    _, k = sch.get_loops(sch.get_block("B"))
    before, n = sch.func, len(sch.trace)
    with pytest.raises(LoopKindError, match="rfactor needs loop k to be serial, but it is parallel"):
        sch.rfactor(k, 0)
    _assert_failed_cleanly(sch, before, n)


# ---------------------------------------------------------------------------------------
# pad_einsum

GEMM_30_PADDED = """
@T.prim_func
def main(A: T.Buffer((30, 30), "float32"), B: T.Buffer((30, 30), "float32"), C: T.Buffer((30, 30), "float32")):
    A_pad = T.alloc_buffer((32, 32), "float32")
    B_pad = T.alloc_buffer((32, 32), "float32")
    C_pad = T.alloc_buffer((32, 32), "float32")
    for i0, i1 in T.grid(32, 32):
        with T.block("A_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(A[v0, v1])
            T.writes(A_pad[v0, v1])
            A_pad[v0, v1] = T.Select(v0 < 30 and v1 < 30, A[v0, v1], T.float32(0.0))
    for i0, i1 in T.grid(32, 32):
        with T.block("B_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(B[v0, v1])
            T.writes(B_pad[v0, v1])
            B_pad[v0, v1] = T.Select(v0 < 30 and v1 < 30, B[v0, v1], T.float32(0.0))
    for i, j, k in T.grid(32, 32, 32):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A_pad[vi, vk], B_pad[vk, vj])
            T.writes(C_pad[vi, vj])
            with T.init():
                C_pad[vi, vj] = T.float32(0.0)
            C_pad[vi, vj] = C_pad[vi, vj] + A_pad[vi, vk] * B_pad[vk, vj]
    for i0, i1 in T.grid(30, 30):
        with T.block("C_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(C_pad[v0, v1])
            T.writes(C[v0, v1])
            C[v0, v1] = C_pad[v0, v1]
"""

# only j grows: A is not indexed by j and stays as it is
GEMM_30_PADDED_J = """
@T.prim_func
def main(A: T.Buffer((30, 30), "float32"), B: T.Buffer((30, 30), "float32"), C: T.Buffer((30, 30), "float32")):
    B_pad = T.alloc_buffer((30, 32), "float32")
    C_pad = T.alloc_buffer((30, 32), "float32")
    for i0, i1 in T.grid(30, 32):
        with T.block("B_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(B[v0, v1])
            T.writes(B_pad[v0, v1])
            B_pad[v0, v1] = T.Select(v1 < 30, B[v0, v1], T.float32(0.0))
    for i, j, k in T.grid(30, 32, 30):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B_pad[vk, vj])
            T.writes(C_pad[vi, vj])
            with T.init():
                C_pad[vi, vj] = T.float32(0.0)
            C_pad[vi, vj] = C_pad[vi, vj] + A[vi, vk] * B_pad[vk, vj]
    for i0, i1 in T.grid(30, 30):
        with T.block("C_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(C_pad[v0, v1])
            T.writes(C[v0, v1])
            C[v0, v1] = C_pad[v0, v1]
"""


@pytest.mark.parametrize(
    ("padding", "expected"), [([32, 32, 32], GEMM_30_PADDED), ([1, 16, 5], GEMM_30_PADDED_J)], ids=["all", "j_only"]
)
def test_pad_einsum_gemm(padding, expected):
    func = parse(GEMM_30)
    sch = Schedule(func)
    block = sch.get_block("C")
    loops = sch.get_loops(block)
    sch.pad_einsum(block, padding)
    assert_program(sch.func, expected)
    text = sch.func.script()
    assert "C_pad = T.alloc_buffer" in text and "B_pad = T.alloc_buffer" in text
    # the loops of the block are the same loops, with larger extents
    assert [sch.get(lp).loop_var.name for lp in loops] == ["i", "j", "k"]
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func, rtol=1e-4, atol=1e-4)


def test_pad_einsum_nothing_to_pad():
    func = parse(GEMM)
    sch = Schedule(func)
    sch.pad_einsum(sch.get_block("C"), [16, 8, 32])
    assert sch.func is func
    assert len(sch.trace) == 2


def test_pad_einsum_spatial_only_of_a_max_reduction():
    src = (
        rowsum("max")
        .replace("(32, 32)", "(30, 32)")
        .replace("(32,)", "(30,)")
        .replace("T.grid(32, 32)", "T.grid(30, 32)")
    )
    func = parse(src)
    sch = Schedule(func)
    block = sch.get_block("B")
    before, n = sch.func, len(sch.trace)
    # padding k of a max would add max(.., 0) terms: refused
    with pytest.raises(NotReductionBlock, match="pads reduce iterators but its update is not C"):
        sch.pad_einsum(block, [1, 64])
    _assert_failed_cleanly(sch, before, n)
    sch.pad_einsum(block, [16, 1])
    expected = f"""
@T.prim_func
def main(A: T.Buffer((30, 32), "float32"), B: T.Buffer((30,), "float32")):
    A_pad = T.alloc_buffer((32, 32), "float32")
    B_pad = T.alloc_buffer((32,), "float32")
    for i0, i1 in T.grid(32, 32):
        with T.block("A_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(A[v0, v1])
            T.writes(A_pad[v0, v1])
            A_pad[v0, v1] = T.Select(v0 < 30, A[v0, v1], T.float32(0.0))
    for i, k in T.grid(32, 32):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A_pad[vi, vk])
            T.writes(B_pad[vi])
            with T.init():
                B_pad[vi] = {FLT_LOWEST}
            B_pad[vi] = T.max(B_pad[vi], A_pad[vi, vk])
    for i0 in T.serial(30):
        with T.block("B_pad"):
            v0 = T.axis.spatial(30, i0)
            T.reads(B_pad[v0])
            T.writes(B[v0])
            B[v0] = B_pad[v0]
"""
    assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func)


def test_pad_einsum_bad_padding():
    sch = Schedule(parse(GEMM_30))
    block = sch.get_block("C")
    before, n = sch.func, len(sch.trace)
    for bad in ([32, 32], [32, 0, 32], [32, -4, 32], [32, 32.0, 32]):
        with pytest.raises(
            InvalidArgument, match=r"the padding of block C must be a list of 3 positive integers \(one per iterator\)"
        ):
            sch.pad_einsum(block, bad)
    _assert_failed_cleanly(sch, before, n)


def test_pad_einsum_not_einsum():
    src = """
@T.prim_func
def main(A: T.Buffer((40,), "float32"), W: T.Buffer((11,), "float32"), B: T.Buffer((30,), "float32")):
    for i, k in T.grid(30, 11):
        with T.block("B"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(A[vi + vk], W[vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi + vk] * W[vk]
"""
    sch = Schedule(parse(src))
    block = sch.get_block("B")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        NotReductionBlock,
        match="pad_einsum needs an einsum block, but block B pads iterator vi, which indexes A inside the "
        "expression vi \\+ vk, not alone",
    ):
        sch.pad_einsum(block, [32, 1])
    _assert_failed_cleanly(sch, before, n)


CONV_3_CHANNELS = """
@T.prim_func
def main(A: T.Buffer((10, 3), "float32"), W: T.Buffer((3, 3, 8), "float32"), B: T.Buffer((8, 8), "float32")):
    for i, j, r, c in T.grid(8, 8, 3, 3):
        with T.block("B"):
            vi, vj, vr, vc = T.axis.remap("SSRR", [i, j, r, c])
            T.reads(A[vi + vr, vc], W[vr, vc, vj])
            T.writes(B[vi, vj])
            with T.init():
                B[vi, vj] = T.float32(0.0)
            B[vi, vj] = B[vi, vj] + A[vi + vr, vc] * W[vr, vc, vj]
"""

CONV_4_CHANNELS = """
@T.prim_func
def main(A: T.Buffer((10, 3), "float32"), W: T.Buffer((3, 3, 8), "float32"), B: T.Buffer((8, 8), "float32")):
    A_pad = T.alloc_buffer((10, 4), "float32")
    W_pad = T.alloc_buffer((3, 4, 8), "float32")
    for i0, i1 in T.grid(10, 4):
        with T.block("A_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(A[v0, v1])
            T.writes(A_pad[v0, v1])
            A_pad[v0, v1] = T.Select(v1 < 3, A[v0, v1], T.float32(0.0))
    for i0, i1, i2 in T.grid(3, 4, 8):
        with T.block("W_pad"):
            v0, v1, v2 = T.axis.remap("SSS", [i0, i1, i2])
            T.reads(W[v0, v1, v2])
            T.writes(W_pad[v0, v1, v2])
            W_pad[v0, v1, v2] = T.Select(v1 < 3, W[v0, v1, v2], T.float32(0.0))
    for i, j, r, c in T.grid(8, 8, 3, 4):
        with T.block("B"):
            vi, vj, vr, vc = T.axis.remap("SSRR", [i, j, r, c])
            T.reads(A_pad[vi + vr, vc], W_pad[vr, vc, vj])
            T.writes(B[vi, vj])
            with T.init():
                B[vi, vj] = T.float32(0.0)
            B[vi, vj] = B[vi, vj] + A_pad[vi + vr, vc] * W_pad[vr, vc, vj]
"""


def test_pad_einsum_an_iterator_that_indexes_alone_beside_a_window():
    """The channels (``vc``, 3 -> 4) index A alone, beside the window ``vi + vr``: A_pad grows that
    dimension only (a convolution's input padded, not gathered); the window's ``vr`` cannot pad."""
    func = parse(CONV_3_CHANNELS)
    sch = Schedule(func)
    block = sch.get_block("B")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(NotReductionBlock, match=r"pads iterator vr, which indexes A inside the expression vi \+ vr"):
        sch.pad_einsum(block, [1, 1, 4, 1])
    _assert_failed_cleanly(sch, before, n)
    sch.pad_einsum(block, [1, 1, 1, 4])
    assert_program(sch.func, CONV_4_CHANNELS)
    check_trace_round_trip(sch, func)
    check_same_results(func, sch.func, rtol=1e-5, atol=1e-5)


def test_pad_einsum_iterator_not_bound_to_a_loop():
    src = """
@T.prim_func
def main(A: T.Buffer((32, 30), "float32"), B: T.Buffer((32,), "float32")):
    for i, ko, ki in T.grid(32, 6, 5):
        with T.block("B"):
            vi = T.axis.spatial(32, i)
            vk = T.axis.reduce(30, ko * 5 + ki)
            T.reads(A[vi, vk])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk]
"""
    sch = Schedule(parse(src))
    block = sch.get_block("B")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(LoopStructureError, match=r"iterator vk of block B is bound to ko \* 5 \+ ki"):
        sch.pad_einsum(block, [1, 32])
    _assert_failed_cleanly(sch, before, n)


def test_pad_einsum_shared_loop_nest():
    src = ROWSUM_SCALE_FUSED.replace("32", "30").replace("float30", "float32")
    sch = Schedule(parse(src))
    block = sch.get_block("B")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(
        LoopStructureError, match="needs the loop nest of block B to hold no other block, but it also holds D"
    ):
        sch.pad_einsum(block, [32, 1])
    _assert_failed_cleanly(sch, before, n)
