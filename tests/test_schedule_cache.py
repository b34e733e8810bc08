"""Index maps and the cache/layout primitives: expected IR, errors, trace round trips, results."""
# ruff: noqa: B008 (block random variables are looked up before the call under test)

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip, random_inputs

from tensorsearch.interpreter import interpret
from tensorsearch.ir import Range, Var
from tensorsearch.schedule import (
    BlockNotFound,
    CacheError,
    InvalidArgument,
    LoopStructureError,
    NotAffineBinding,
    Schedule,
)
from tensorsearch.schedule.index_map import IndexMap, IndexMapError
from tensorsearch.script import ScriptError, parse, parse_expr

# ---------------------------------------------------------------------------------------
# programs

ELEMENTWISE = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    B = T.alloc_buffer((32, 32))
    for i, j in T.grid(32, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, vj] + T.float32(1)
"""

GEMM = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vj, vk])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]
"""

MULTI_CONSUMER = """
@T.prim_func
def main(X: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    A = T.alloc_buffer((64,))
    for i in range(4):
        for j in range(16):
            with T.block("A"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(X[vi])
                T.writes(A[vi])
                A[vi] = X[vi] + T.float32(1)
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * T.float32(2)
    for i in range(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A[vi])
            T.writes(C[vi])
            C[vi] = A[vi]
"""

MULTI_PRODUCER = """
@T.prim_func
def main(X: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    A = T.alloc_buffer((16,))
    for i in range(16):
        with T.block("A0"):
            vi = T.axis.spatial(16, i)
            T.reads(X[vi])
            T.writes(A[vi])
            A[vi] = X[vi]
    for i in range(16):
        with T.block("A1"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(A[vi])
            A[vi] = A[vi] + T.float32(2)
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
"""

TRANSPOSED = """
@T.prim_func
def main(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32")):
    for i, j in T.grid(32, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vj, vi])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vj, vi] * T.float32(2)
"""


def run(text: str) -> tuple[Schedule, object]:
    func = parse(text)
    return Schedule(func), func


def finish(sch: Schedule, func: object, expected: str | None = None, results: bool = True) -> None:
    if expected is not None:
        assert_program(sch.func, expected)
    check_trace_round_trip(sch, func)
    if results:
        check_same_results(func, sch.func)


def refuses(sch: Schedule, call, error: type, match: str) -> None:
    before, n = sch.func, len(sch.trace)
    with pytest.raises(error, match=match):
        call()
    assert sch.func is before
    assert len(sch.trace) == n


# ---------------------------------------------------------------------------------------
# index maps and parse_expr


def test_parse_expr():
    i, j = Var("i"), Var("j")
    e = parse_expr("i // 16 + T.min(j, 3) * 2", {"i": i, "j": j})
    assert e == (i // 16 + parse_expr("T.min(j, 3)", {"j": j}) * 2)
    with pytest.raises(ScriptError, match="undefined variable 'k'"):
        parse_expr("k + 1", {"i": i})
    with pytest.raises(ScriptError):
        parse_expr("i +", {"i": i})


def test_index_map_split_permutation_and_text():
    m = IndexMap.from_func(lambda i, j: (i // 16, j, i % 16))
    assert m.to_text() == "lambda i, j: (i // 16, j, i % 16)"
    x, y = Var("x"), Var("y")
    assert m.map_indices([x, y]) == (x // 16, y, x % 16)
    assert [s.value for s in m.map_shape([64, 32])] == [4, 32, 16]
    inv = m.inverse([64, 32])
    assert inv.to_text() == "lambda i0, i1, i2: (i0 * 16 + i2, i1)"
    again = IndexMap.from_text(m.to_text())
    assert again.to_text() == m.to_text()
    assert IndexMap.from_text("lambda i: i * 2").to_text() == "lambda i: (i * 2,)"
    # composing the map with its inverse is the identity on the domain
    dom = {x: Range(0, 64), y: Range(0, 32)}
    assert inv.map_indices(m.map_indices([x, y], dom), dom) == (x, y)


def test_index_map_fusion_and_mixed_inverse():
    fuse = IndexMap.from_func(lambda i, j: (i * 32 + j,))
    assert fuse.inverse([4, 32]).to_text() == "lambda i0: (i0 // 32, i0 % 32)"
    assert [s.value for s in fuse.map_shape([4, 32])] == [128]
    refold = IndexMap.from_func(lambda i, j: ((i * 32 + j) // 8, (i * 32 + j) % 8))
    assert refold.inverse([4, 32]).to_text() == "lambda i0, i1: (i0 // 4, i0 % 4 * 8 + i1)"
    assert IndexMap.from_func(lambda i, j: (j, i)).inverse([4, 8]).to_text() == "lambda i0, i1: (i1, i0)"
    assert IndexMap.coerce("lambda a: (a,)").is_bijective([5])


@pytest.mark.parametrize(
    ("func", "shape", "match"),
    [
        (lambda i, j: (i,), [4, 4], "input j is not fully used"),
        (lambda i: (i // 16, i % 16), [100], "not a multiple of 16"),
        (lambda i, j: (i + j,), [4, 4], "gaps or overlaps"),
        (lambda i: (i, i), [8], "used twice"),
        (lambda i: (i + 1,), [8], "constant offset"),
        (lambda i: (i * i,), [8], "multiplies by a non-constant"),
    ],
)
def test_index_map_not_bijective(func, shape, match):
    with pytest.raises(IndexMapError, match=match):
        IndexMap.from_func(func).inverse(shape)


def test_index_map_bad_inputs():
    with pytest.raises(IndexMapError, match="is a lambda"):
        IndexMap.from_text("(i, j)")
    with pytest.raises(IndexMapError, match="cannot parse"):
        IndexMap.from_text("lambda i: (k,)")
    with pytest.raises(IndexMapError, match="cannot parse"):
        IndexMap.from_text("lambda i: (i +,)")
    with pytest.raises(IndexMapError, match="takes 2 indices"):
        IndexMap.from_func(lambda i, j: (i, j)).map_shape([4])
    with pytest.raises(IndexMapError, match="not its inputs"):
        IndexMap([Var("i")], [Var("k")])


# ---------------------------------------------------------------------------------------
# cache_read

CACHE_READ_BOTH = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    B = T.alloc_buffer((32, 32))
    A_shared = T.alloc_buffer((32, 32), scope="shared")
    B_local = T.alloc_buffer((32, 32), scope="local")
    for ax0, ax1 in T.grid(32, 32):
        with T.block("A_shared"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(A[v0, v1])
            T.writes(A_shared[v0, v1])
            A_shared[v0, v1] = A[v0, v1]
    for i, j in T.grid(32, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A_shared[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A_shared[vi, vj] * T.float32(2)
    for ax0, ax1 in T.grid(32, 32):
        with T.block("B_local"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(B[v0, v1])
            T.writes(B_local[v0, v1])
            B_local[v0, v1] = B[v0, v1]
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B_local[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B_local[vi, vj] + T.float32(1)
"""


def test_cache_read_input_and_intermediate():
    sch, func = run(ELEMENTWISE)
    a = sch.cache_read(sch.get_block("B"), 0, "shared")
    b = sch.cache_read(sch.get_block("C"), 0, "local")
    assert sch.get(a).name == "A_shared" and sch.get(b).name == "B_local"
    finish(sch, func, CACHE_READ_BOTH)


CACHE_READ_MULTI = """
@T.prim_func
def main(X: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    A = T.alloc_buffer((64,))
    A_global = T.alloc_buffer((64,))
    for i in range(4):
        for j in range(16):
            with T.block("A"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(X[vi])
                T.writes(A[vi])
                A[vi] = X[vi] + T.float32(1)
        for ax0 in range(16):
            with T.block("A_global"):
                v0 = T.axis.spatial(64, i * 16 + ax0)
                T.reads(A[v0])
                T.writes(A_global[v0])
                A_global[v0] = A[v0]
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(A_global[vi])
                T.writes(B[vi])
                B[vi] = A_global[vi] * T.float32(2)
    for i in range(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A_global[vi])
            T.writes(C[vi])
            C[vi] = A_global[vi]
"""

CACHE_READ_ONE_CONSUMER = """
@T.prim_func
def main(X: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    A = T.alloc_buffer((64,))
    A_global = T.alloc_buffer((64,))
    for i in range(4):
        for j in range(16):
            with T.block("A"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(X[vi])
                T.writes(A[vi])
                A[vi] = X[vi] + T.float32(1)
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * T.float32(2)
    for ax0 in range(64):
        with T.block("A_global"):
            v0 = T.axis.spatial(64, ax0)
            T.reads(A[v0])
            T.writes(A_global[v0])
            A_global[v0] = A[v0]
    for i in range(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A_global[vi])
            T.writes(C[vi])
            C[vi] = A_global[vi]
"""


def test_cache_read_inside_the_producer_loop():
    sch, func = run(MULTI_CONSUMER)
    sch.cache_read(sch.get_block("B"), 0, "global")
    finish(sch, func, CACHE_READ_MULTI)


def test_cache_read_chosen_consumers():
    sch, func = run(MULTI_CONSUMER)
    c = sch.get_block("C")
    sch.cache_read(c, 0, "global", consumer_blocks=[c])
    finish(sch, func, CACHE_READ_ONE_CONSUMER)


PAD_BLOCKIZED = """
@T.prim_func
def main(A: T.Buffer((8, 4), "float32"), P: T.Buffer((10, 4), "float32")):
    for i in range(10):
        with T.block("P_o"):
            vi = T.axis.spatial(10, i)
            T.reads(A[vi - 1, 0:4])
            T.writes(P[vi, 0:4])
            for j in range(4):
                with T.block("P"):
                    vj = T.axis.spatial(4, j)
                    T.reads(A[vi - 1, vj])
                    T.writes(P[vi, vj])
                    P[vi, vj] = T.Select(vi >= 1 and vi < 9, A[vi - 1, vj], T.float32(0))
"""

PAD_BLOCKIZED_CACHE_READ = """
@T.prim_func
def main(A: T.Buffer((8, 4), "float32"), P: T.Buffer((10, 4), "float32")):
    for i in range(10):
        with T.block("P_o"):
            vi = T.axis.spatial(10, i)
            T.reads(A[vi - 1, 0:4])
            T.writes(P[vi, 0:4])
            A_global = T.alloc_buffer((8, 4))
            for ax0, ax1 in T.grid(T.min(vi - 1, 7) - T.max(vi - 1, 0) + 1, 4):
                with T.block("A_global"):
                    v0 = T.axis.spatial(8, T.max(vi - 1, 0) + ax0)
                    v1 = T.axis.spatial(4, ax1)
                    T.reads(A[v0, v1])
                    T.writes(A_global[v0, v1])
                    A_global[v0, v1] = A[v0, v1]
            for j in range(4):
                with T.block("P"):
                    vj = T.axis.spatial(4, j)
                    T.reads(A_global[vi - 1, vj])
                    T.writes(P[vi, vj])
                    P[vi, vj] = T.Select(vi >= 1 and vi < 9, A_global[vi - 1, vj], T.float32(0))
"""


def test_cache_read_of_a_padded_input_copies_only_existing_elements():
    # the scope block's read region A[vi - 1] reaches row -1 and row 8 (guarded accesses):
    # the copy stage is clipped to the buffer, the guarded reads of the cache stay guarded
    sch, func = run(PAD_BLOCKIZED)
    sch.cache_read(sch.get_block("P"), 0, "global")
    finish(sch, func, PAD_BLOCKIZED_CACHE_READ)


def test_cache_read_errors():
    sch, _ = run(ELEMENTWISE)
    b = sch.get_block("B")
    refuses(
        sch,
        lambda: sch.cache_read(b, 3, "shared"),
        InvalidArgument,
        "block B has 1 read buffer, so read buffer index 3",
    )
    refuses(sch, lambda: sch.cache_read(b, "0", "shared"), InvalidArgument, "must be an integer")
    refuses(sch, lambda: sch.cache_read(b, 0, "sharde"), InvalidArgument, "'sharde' is not a storage scope")
    c = sch.get_block("C")
    refuses(sch, lambda: sch.cache_read(b, 0, "shared", consumer_blocks=[c]), CacheError, "block C does not read")
    refuses(
        sch,
        lambda r0=sch.get_block("root"): sch.cache_read(r0, 0, "shared"),
        InvalidArgument,
        "block root is the root block",
    )
    sch2, _ = run(MULTI_PRODUCER)
    refuses(
        sch2, lambda r0=sch2.get_block("B"): sch2.cache_read(r0, 0, "local"), CacheError, "written by blocks A0, A1"
    )
    sch4, _ = run(UPDATE_NO_INIT)
    b4 = sch4.get_block("B")
    refuses(sch4, lambda: sch4.cache_read(b4, 1, "local"), CacheError, "block B both reads and writes buffer B")
    sch3, _ = run(GEMM)
    refuses(sch3, lambda r0=sch3.get_block("C"): sch3.cache_read(r0, 2, "local"), InvalidArgument, "has 2 read buffers")


# ---------------------------------------------------------------------------------------
# cache_write

CACHE_WRITE_GEMM = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    C_local = T.alloc_buffer((16, 16), scope="local")
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B[vj, vk])
            T.writes(C_local[vi, vj])
            with T.init():
                C_local[vi, vj] = T.float32(0)
            C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vj, vk]
    for ax0, ax1 in T.grid(16, 16):
        with T.block("C_local"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(C_local[v0, v1])
            T.writes(C[v0, v1])
            C[v0, v1] = C_local[v0, v1]
"""


def test_cache_write_reduction():
    sch, func = run(GEMM)
    wb = sch.cache_write(sch.get_block("C"), 0, "local")
    assert sch.get(wb).name == "C_local"
    finish(sch, func, CACHE_WRITE_GEMM)


CACHE_WRITE_MULTI = """
@T.prim_func
def main(X: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    A = T.alloc_buffer((64,))
    A_shared = T.alloc_buffer((64,), scope="shared")
    for i in range(4):
        for j in range(16):
            with T.block("A"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(X[vi])
                T.writes(A_shared[vi])
                A_shared[vi] = X[vi] + T.float32(1)
        for ax0 in range(16):
            with T.block("A_shared"):
                v0 = T.axis.spatial(64, i * 16 + ax0)
                T.reads(A_shared[v0])
                T.writes(A[v0])
                A[v0] = A_shared[v0]
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(A[vi])
                T.writes(B[vi])
                B[vi] = A[vi] * T.float32(2)
    for i in range(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A[vi])
            T.writes(C[vi])
            C[vi] = A[vi]
"""

CACHE_WRITE_DIRECT = """
@T.prim_func
def main(X: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((64,), "float32")):
    A = T.alloc_buffer((64,))
    A_shared = T.alloc_buffer((64,), scope="shared")
    for i in range(4):
        for j in range(16):
            with T.block("A"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(X[vi])
                T.writes(A_shared[vi])
                A_shared[vi] = X[vi] + T.float32(1)
        for j in range(16):
            with T.block("B"):
                vi = T.axis.spatial(64, i * 16 + j)
                T.reads(A_shared[vi])
                T.writes(B[vi])
                B[vi] = A_shared[vi] * T.float32(2)
    for ax0 in range(64):
        with T.block("A_shared"):
            v0 = T.axis.spatial(64, ax0)
            T.reads(A_shared[v0])
            T.writes(A[v0])
            A[v0] = A_shared[v0]
    for i in range(64):
        with T.block("C"):
            vi = T.axis.spatial(64, i)
            T.reads(A[vi])
            T.writes(C[vi])
            C[vi] = A[vi]
"""


def test_cache_write_before_first_consumer():
    sch, func = run(MULTI_CONSUMER)
    sch.cache_write(sch.get_block("A"), 0, "shared")
    finish(sch, func, CACHE_WRITE_MULTI)


def test_cache_write_consumers_read_the_cache():
    sch, func = run(MULTI_CONSUMER)
    sch.cache_write(sch.get_block("A"), 0, "shared", consumer_blocks=[sch.get_block("B")])
    finish(sch, func, CACHE_WRITE_DIRECT)


def test_cache_write_chain_with_cache_read():
    sch, func = run(ELEMENTWISE)
    sch.cache_write(sch.get_block("B"), 0, "local")
    sch.cache_read(sch.get_block("C"), 0, "shared")
    sch.cache_write(sch.get_block("C"), 0, "local")
    assert [b.name for b in _pre_order(sch.func)] == ["root", "B", "B_local", "B_shared", "C", "C_local"]
    finish(sch, func)


def _pre_order(func):
    from tensorsearch.ir import Block
    from tensorsearch.schedule.tree import walk_stmts

    return [loc.node for loc in walk_stmts(func.body) if isinstance(loc.node, Block)]


def test_cache_write_errors():
    sch, _ = run(MULTI_PRODUCER)
    refuses(sch, lambda r0=sch.get_block("A0"): sch.cache_write(r0, 0, "local"), CacheError, "also written by block A1")
    refuses(
        sch,
        lambda r0=sch.get_block("A0"): sch.cache_write(r0, 1, "local"),
        InvalidArgument,
        "block A0 has 1 write buffer",
    )
    refuses(sch, lambda r0=sch.get_block("B"): sch.cache_write(r0, 0, ""), InvalidArgument, "not a storage scope")
    refuses(
        sch,
        lambda r0=sch.get_block("A1"), r1=sch.get_block("A0"): sch.cache_write(r0, 0, "local", consumer_blocks=[r1]),
        CacheError,
        "also written by block A0",
    )
    sch2, _ = run(ELEMENTWISE)
    refuses(
        sch2,
        lambda r0=sch2.get_block("B"): sch2.cache_write(r0, 0, "local", consumer_blocks=[r0]),
        CacheError,
        "consumer block B does not read buffer B",
    )
    refuses(sch2, lambda: sch2.cache_write(sch2.get_block("nope"), 0, "local"), BlockNotFound, "no block named nope")


# ---------------------------------------------------------------------------------------
# reindex

REINDEX_READ = """
@T.prim_func
def main(A: T.Buffer((16, 32), "float32"), B: T.Buffer((32, 16), "float32")):
    A_reindex = T.alloc_buffer((32, 16))
    for ax0, ax1 in T.grid(32, 16):
        with T.block("A_reindex"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(A[v1, v0])
            T.writes(A_reindex[v0, v1])
            A_reindex[v0, v1] = A[v1, v0]
    for i, j in T.grid(32, 16):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A_reindex[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A_reindex[vi, vj] * T.float32(2)
"""


def test_reindex_read():
    sch, func = run(TRANSPOSED)
    rb = sch.reindex(sch.get_block("B"), ("read", 0))
    assert sch.get(rb).name == "A_reindex"
    finish(sch, func, REINDEX_READ)


REINDEX_GEMM = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    C_reindex = T.alloc_buffer((16, 16))
    B_reindex = T.alloc_buffer((16, 16))
    for ax0, ax1 in T.grid(16, 16):
        with T.block("B_reindex"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(B[v0, v1])
            T.writes(B_reindex[v0, v1])
            B_reindex[v0, v1] = B[v0, v1]
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vi, vk], B_reindex[vj, vk])
            T.writes(C_reindex[vi, vj])
            with T.init():
                C_reindex[vi, vj] = T.float32(0)
            C_reindex[vi, vj] = C_reindex[vi, vj] + A[vi, vk] * B_reindex[vj, vk]
    for ax0, ax1 in T.grid(16, 16):
        with T.block("C_reindex"):
            v0, v1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(C_reindex[v0, v1])
            T.writes(C[v0, v1])
            C[v0, v1] = C_reindex[v0, v1]
"""


def test_reindex_gemm_read_and_write():
    sch, func = run(GEMM)
    c = sch.get_block("C")
    sch.reindex(c, ("write", 0))
    sch.reindex(c, ["read", 1])
    finish(sch, func, REINDEX_GEMM)


NOT_AFFINE_ACCESS = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi, 0:16])
            T.writes(B[vi])
            B[vi] = A[vi, vi * vi % 16] + A[vi, 0]
"""

UPDATE_NO_INIT = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi], B[vi])
            T.writes(B[vi])
            B[vi] = B[vi] + A[vi]
"""


def test_reindex_errors():
    sch, _ = run(NOT_AFFINE_ACCESS)
    b = sch.get_block("B")
    refuses(sch, lambda: sch.reindex(b, ("read", 0)), CacheError, "accesses buffer A with different indices")
    refuses(sch, lambda: sch.reindex(b, ("read", 1)), InvalidArgument, "block B has 1 read buffer")
    refuses(sch, lambda: sch.reindex(b, ("load", 0)), InvalidArgument, "buffer must be a pair")
    refuses(sch, lambda: sch.reindex(b, "A"), InvalidArgument, "buffer must be a pair")
    refuses(sch, lambda r0=sch.get_block("root"): sch.reindex(r0, ("read", 0)), InvalidArgument, "root block")
    sch2, _ = run(UPDATE_NO_INIT)
    b2 = sch2.get_block("B")
    refuses(sch2, lambda: sch2.reindex(b2, ("write", 0)), CacheError, "has no init")
    refuses(sch2, lambda: sch2.reindex(b2, ("read", 1)), CacheError, "also writes buffer B")
    sch3, _ = run(MULTI_CONSUMER)
    refuses(
        sch3, lambda r0=sch3.get_block("B"): sch3.reindex(r0, ("read", 0)), CacheError, "block A in the same loop nest"
    )


# ---------------------------------------------------------------------------------------
# set_scope and storage_align

SET_SCOPE = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    B = T.alloc_buffer((32, 32), scope="shared")
    for i, j in T.grid(32, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            T.block_attr({"buffer_dim_align": [[0, 1, 16, 3]]})
            B[vi, vj] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, vj] + T.float32(1)
"""


def test_set_scope_and_storage_align():
    sch, func = run(ELEMENTWISE)
    b = sch.get_block("B")
    sch.set_scope(b, 0, "shared")
    sch.storage_align(b, 0, axis=-1, factor=32, offset=1)
    sch.storage_align(b, 0, axis=1, factor=16, offset=3)  # replaces the entry for axis 1
    finish(sch, func, SET_SCOPE)
    sch.storage_align(b, 0, axis=0, factor=8, offset=0)
    assert dict(sch.get(b).annotations)["buffer_dim_align"] == ((0, 1, 16, 3), (0, 0, 8, 0))
    check_trace_round_trip(sch, func)


def test_set_scope_and_storage_align_errors():
    sch, _ = run(ELEMENTWISE)
    b, c = sch.get_block("B"), sch.get_block("C")
    refuses(sch, lambda: sch.set_scope(c, 0, "shared"), CacheError, "buffer C written by block C is a parameter")
    refuses(sch, lambda: sch.set_scope(b, 1, "shared"), InvalidArgument, "block B has 1 write buffer")
    refuses(sch, lambda: sch.set_scope(b, 0, "registers"), InvalidArgument, "not a storage scope")
    refuses(sch, lambda: sch.storage_align(b, 0, 2, 16, 0), InvalidArgument, "axis 2 is out of range for buffer B of 2")
    refuses(sch, lambda: sch.storage_align(b, 0, 0, 0, 0), InvalidArgument, "factor must be positive")
    refuses(sch, lambda: sch.storage_align(b, 0, 0, 16, 16), InvalidArgument, "0 <= offset < factor")
    refuses(sch, lambda: sch.storage_align(b, 0, 0, 16, -1), InvalidArgument, "0 <= offset < factor")
    refuses(sch, lambda: sch.storage_align(c, 0, 0, 16, 0), CacheError, "buffer C written by block C is not allocated")
    refuses(sch, lambda: sch.storage_align(b, 3, 0, 16, 0), InvalidArgument, "block B has 1 write buffer, so write")


# ---------------------------------------------------------------------------------------
# transform_layout

LAYOUT_INTERMEDIATE = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    B = T.alloc_buffer((2, 32, 16))
    for i, j in T.grid(32, 32):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi // 16, vj, vi % 16])
            B[vi // 16, vj, vi % 16] = A[vi, vj] * T.float32(2)
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi // 16, vj, vi % 16])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi // 16, vj, vi % 16] + T.float32(1)
"""


@pytest.mark.parametrize(
    "index_map",
    [
        lambda i, j: (i // 16, j, i % 16),
        "lambda i, j: (i // 16, j, i % 16)",
        IndexMap.from_func(lambda i, j: (i // 16, j, i % 16)),
    ],
)
def test_transform_layout_intermediate(index_map):
    sch, func = run(ELEMENTWISE)
    sch.transform_layout(sch.get_block("B"), ("write", 0), index_map)
    finish(sch, func, LAYOUT_INTERMEDIATE)


LAYOUT_PARAM = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vk, vi], B[vj, vk])
            T.writes(C[vi, vj])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vk, vi] * B[vj, vk]
"""

LAYOUT_PARAM_FUSED = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((256,), "float32")):
    for i, j, k in T.grid(16, 16, 16):
        with T.block("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(A[vk, vi], B[vj, vk])
            T.writes(C[vi * 16 + vj])
            with T.init():
                C[vi * 16 + vj] = T.float32(0)
            C[vi * 16 + vj] = C[vi * 16 + vj] + A[vk, vi] * B[vj, vk]
"""


def test_transform_layout_parameters():
    sch, func = run(GEMM)
    c = sch.get_block("C")
    sch.transform_layout(c, "A", lambda i, j: (j, i))
    assert_program(sch.func, LAYOUT_PARAM)
    sch.transform_layout(c, ("write", 0), "lambda i, j: (i * 16 + j,)")
    finish(sch, func, LAYOUT_PARAM_FUSED, results=False)
    # the same numbers once the inputs and the output are re-laid out
    a, b, c_in = random_inputs(func)
    (expected,) = interpret(func, a.copy(), b.copy(), c_in.copy())[2:]
    got = interpret(sch.func, a.T.copy(), b.copy(), c_in.reshape(256).copy())[2]
    np.testing.assert_allclose(got.reshape(16, 16), expected, rtol=1e-5, atol=1e-5)


REGION_LAYOUT = """
@T.prim_func
def main(A: T.Buffer((32,), "float32"), B: T.Buffer((2,), "float32")):
    for i in range(2):
        with T.block("B"):
            vi = T.axis.spatial(2, i)
            T.reads(A[vi * 16:vi * 16 + 16])
            T.writes(B[vi])
            B[vi] = A[vi * 16] + A[vi * 16 + 15]
"""

REGION_LAYOUT_AFTER = """
@T.prim_func
def main(A: T.Buffer((2, 16), "float32"), B: T.Buffer((2,), "float32")):
    for i in range(2):
        with T.block("B"):
            vi = T.axis.spatial(2, i)
            T.reads(A[vi, 0:16])
            T.writes(B[vi])
            B[vi] = A[vi, 0] + A[vi, 15]
"""


def test_transform_layout_maps_regions():
    sch, func = run(REGION_LAYOUT)
    sch.transform_layout(sch.get_block("B"), ("read", 0), lambda i: (i // 16, i % 16))
    finish(sch, func, REGION_LAYOUT_AFTER, results=False)


def test_transform_layout_errors():
    sch, _ = run(ELEMENTWISE)
    b = sch.get_block("B")
    refuses(
        sch, lambda: sch.transform_layout(b, ("write", 0), lambda i, j: (i // 3, j, i % 3)), CacheError, "not bijective"
    )
    refuses(
        sch, lambda: sch.transform_layout(b, ("write", 0), lambda i, j: (i,)), CacheError, "input j is not fully used"
    )
    refuses(
        sch,
        lambda: sch.transform_layout(b, ("write", 0), lambda i: (i,)),
        InvalidArgument,
        "takes 1 indices but buffer B has 2",
    )
    refuses(
        sch,
        lambda: sch.transform_layout(b, ("write", 0), lambda i, j: (j, i), pad_value=0.0),
        InvalidArgument,
        "pad_value is not supported yet",
    )
    refuses(
        sch,
        lambda: sch.transform_layout(b, ("write", 2), lambda i, j: (j, i)),
        InvalidArgument,
        "block B has 1 write buffer",
    )
    refuses(
        sch, lambda: sch.transform_layout(b, "Q", lambda i, j: (j, i)), InvalidArgument, "accesses no buffer named Q"
    )
    refuses(sch, lambda: sch.transform_layout(b, ("write", 0), "(j, i)"), InvalidArgument, "is a lambda")
    refuses(sch, lambda: sch.transform_layout(b, ("write", 0), 42), InvalidArgument, "index_map")


# ---------------------------------------------------------------------------------------
# transform_block_layout

BLOCK_LAYOUT = """
@T.prim_func
def main(A: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
    B = T.alloc_buffer((32, 32))
    for ax0 in range(1024):
        with T.block("B"):
            v0 = T.axis.spatial(1024, ax0)
            T.reads(A[v0 // 32, v0 % 32])
            T.writes(B[v0 // 32, v0 % 32])
            B[v0 // 32, v0 % 32] = A[v0 // 32, v0 % 32] * T.float32(2)
    for i, j in T.grid(32, 32):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, vj])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, vj] + T.float32(1)
"""


def test_transform_block_layout_fuse():
    sch, func = run(ELEMENTWISE)
    sch.transform_block_layout(sch.get_block("B"), lambda i, j: (i * 32 + j,))
    finish(sch, func, BLOCK_LAYOUT)


BLOCK_LAYOUT_GEMM = """
@T.prim_func
def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"), C: T.Buffer((16, 16), "float32")):
    for ax0, ax1, ax2, ax3 in T.grid(4, 16, 4, 16):
        with T.block("C"):
            v0, v1, v2, v3 = T.axis.remap("SSSR", [ax0, ax1, ax2, ax3])
            T.reads(A[v0 * 4 + v2, v3], B[v1, v3])
            T.writes(C[v0 * 4 + v2, v1])
            with T.init():
                C[v0 * 4 + v2, v1] = T.float32(0)
            C[v0 * 4 + v2, v1] = C[v0 * 4 + v2, v1] + A[v0 * 4 + v2, v3] * B[v1, v3]
"""


def test_transform_block_layout_split_and_reorder():
    sch, func = run(GEMM)
    sch.transform_block_layout(sch.get_block("C"), "lambda i, j, k: (i // 4, j, i % 4, k)")
    finish(sch, func, BLOCK_LAYOUT_GEMM)


SHARED_LOOP = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32"), C: T.Buffer((16,), "float32")):
    for i in range(16):
        with T.block("B"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
        with T.block("C"):
            vi = T.axis.spatial(16, i)
            T.reads(A[vi])
            T.writes(C[vi])
            C[vi] = A[vi]
"""

SPLIT_BINDING = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i, j in T.grid(4, 4):
        with T.block("B"):
            vi = T.axis.spatial(16, i * 4 + j)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi]
"""


def test_transform_block_layout_errors():
    sch, _ = run(GEMM)
    c = sch.get_block("C")
    refuses(
        sch,
        lambda: sch.transform_block_layout(c, lambda i, j, k: (i, j * 16 + k)),
        CacheError,
        "mixes spatial and reduce",
    )
    refuses(sch, lambda: sch.transform_block_layout(c, lambda i, j, k: (i, j)), CacheError, "input k is not fully used")
    refuses(
        sch,
        lambda: sch.transform_block_layout(c, lambda i, j: (i, j)),
        InvalidArgument,
        "takes 2 indices but block C has 3",
    )
    sch2, _ = run(SHARED_LOOP)
    refuses(
        sch2,
        lambda r0=sch2.get_block("B"): sch2.transform_block_layout(r0, lambda i: (i,)),
        LoopStructureError,
        "loop i holds more than block B",
    )
    sch3, _ = run(SPLIT_BINDING)
    refuses(
        sch3,
        lambda r0=sch3.get_block("B"): sch3.transform_block_layout(r0, lambda i: (i,)),
        NotAffineBinding,
        "trivial binding",
    )


def test_cache_write_refuses_a_block_whose_enclosing_block_writes_the_buffer():
    """Found by the compiled fuzz: after blockize the outer block's init still zeroed Z while the
    inner block's updates went to the cache, which compiled code then copied back uninitialized."""
    from tensorsearch import workloads

    func = workloads.make("GMM", (1, 4, 4, 4)).func
    sch = Schedule(func)
    _, i, _, _ = sch.get_loops(sch.get_block("Z"))
    sch.blockize(i)
    before, length = sch.func, len(sch.trace)
    with pytest.raises(CacheError, match="buffer Z is also written by the enclosing block Z_o"):
        sch.cache_write(sch.get_block("Z"), 0, "global")
    assert sch.func is before and len(sch.trace) == length + 1  # only the get_block lookup
