"""The compute DSL: the blocks it emits and the errors it gives."""

import numpy as np
import pytest

from tensorsearch import interpret, te
from tensorsearch.arith import verify
from tensorsearch.ir import IterType
from tensorsearch.te import TEError


def _gemm(n=16, m=8, k=12):
    A = te.placeholder((n, k), "float32", name="A")
    B = te.placeholder((k, m), "float32", name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def test_gemm_block_signature():
    f = verify(te.create_prim_func(list(_gemm())))
    root = f.body.block
    assert root.name == "root" and root.alloc_buffers == ()
    loop = root.body
    assert [loop.loop_var.name, loop.body.loop_var.name, loop.body.body.loop_var.name] == ["i", "j", "k"]
    block = loop.body.body.body.block
    assert block.name == "C"
    assert [iv.iter_type for iv in block.iter_vars] == [IterType.SPATIAL, IterType.SPATIAL, IterType.REDUCE]
    assert [iv.dom.extent.value for iv in block.iter_vars] == [16, 8, 12]
    assert [r.buffer.name for r in block.reads] == ["A", "B"]
    assert [r.buffer.name for r in block.writes] == ["C"]
    assert block.init is not None


def test_gemm_runs_like_numpy():
    f = te.create_prim_func(list(_gemm()))
    rng = np.random.default_rng()
    a = rng.standard_normal((16, 12), dtype=np.float32)
    b = rng.standard_normal((12, 8), dtype=np.float32)
    c = interpret(f, a, b)[2]
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_intermediate_stage_becomes_allocated_buffer():
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    f = verify(te.create_prim_func([A, C]))
    assert [b.name for b in f.body.block.alloc_buffers] == ["B"]
    a = np.random.default_rng().standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(interpret(f, a)[1], a * 2 + 1, rtol=1e-6)


def test_padding_with_if_then_else_and_max_reduction():
    A = te.placeholder((6,), "float32", name="A")
    P = te.compute((8,), lambda i: te.if_then_else(te.all(i >= 1, i < 7), A[i - 1], -1e9), name="P")
    r = te.reduce_axis((0, 3), name="r")
    M = te.compute((6,), lambda i: te.max(P[i + r], axis=r), name="M")
    f = verify(te.create_prim_func([A, M]))
    a = np.random.default_rng().standard_normal(6).astype(np.float32)
    padded = np.concatenate([[-1e9], a, [-1e9]]).astype(np.float32)
    expected = np.max(np.stack([padded[s : s + 6] for s in range(3)]), axis=0)
    np.testing.assert_array_equal(interpret(f, a)[1], expected)


def test_errors_name_the_stage():
    A = te.placeholder((4, 4), "float32", name="A")
    with pytest.raises(TEError, match="te.compute 'C': the function takes 1 arguments but the shape has 2 dimensions"):
        te.compute((4, 4), lambda i: A[i, i], name="C")
    with pytest.raises(TEError, match="tensor A has 2 dimensions but is indexed with 1 indices"):
        te.compute((4,), lambda i: A[i], name="C")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(TEError, match="te.compute 'D': a reduction \\(te.sum\\) must be the whole expression"):
        te.compute((4,), lambda i: te.sqrt(te.sum(A[i, k], axis=k)), name="D")
    with pytest.raises(
        TEError, match="te.compute 'E': the expression uses variable k, which is a reduce axis not reduced over"
    ):
        te.compute((4,), lambda i: A[i, k], name="E")
    with pytest.raises(TEError, match="te.compute 'F': operands of \\+ have different data types: float32 and int32"):
        te.compute((4,), lambda i: A[i, i] + i, name="F")
    with pytest.raises(TEError, match="placeholder 'X': every extent of the shape must be positive"):
        te.placeholder((4, 0), name="X")
    with pytest.raises(TEError, match="reduce_axis 'r': the domain \\[3, 3\\) is empty"):
        te.reduce_axis((3, 3), name="r")
    B = te.placeholder((4,), "float32", name="B")
    C = te.compute((4,), lambda i: A[i, i] + B[i], name="C")
    with pytest.raises(TEError, match="placeholder B is read by stage C but is not among the arguments"):
        te.create_prim_func([A, C])
