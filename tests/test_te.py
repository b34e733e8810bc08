"""The compute DSL: the blocks it emits and the errors it gives."""

import numpy as np
import pytest
from seeds import seeded_rng

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
    rng = seeded_rng()
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
    a = seeded_rng().standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(interpret(f, a)[1], a * 2 + 1, rtol=1e-6)


def test_padding_with_if_then_else_and_max_reduction():
    A = te.placeholder((6,), "float32", name="A")
    P = te.compute((8,), lambda i: te.if_then_else(te.all(i >= 1, i < 7), A[i - 1], -1e9), name="P")
    r = te.reduce_axis((0, 3), name="r")
    M = te.compute((6,), lambda i: te.max(P[i + r], axis=r), name="M")
    f = verify(te.create_prim_func([A, M]))
    a = seeded_rng().standard_normal(6).astype(np.float32)
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


def _fma_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` summed in order, each step one fused multiply-add (float64 holds a float32
    product exactly; these sums never fall on a float32 halfway point)."""
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k in range(a.shape[1]):
        c = (np.outer(a[:, k].astype(np.float64), b[k]) + c).astype(np.float32)
    return c


@pytest.mark.slow
def test_fma_sum_is_an_ordered_chain_of_fused_multiply_adds():
    from tensorsearch import build, hardware
    from tensorsearch.ir import Call, structural_equal
    from tensorsearch.script import parse
    from tensorsearch.search.model import default_schedule

    a_t, b_t = te.placeholder((4, 300), name="A"), te.placeholder((300, 32), name="B")
    k = te.reduce_axis((0, 300), name="k")
    c_t = te.compute((4, 32), lambda i, j: te.fma_sum(a_t[i, k], b_t[k, j], axis=k), name="C")
    func = te.create_prim_func([a_t, b_t, c_t])
    block = func.body.block.body.body.body.body.block  # for i, j, k: block C
    assert isinstance(block.body.value, Call) and block.body.value.op == "fma"
    assert block.body.value.args[2].buffer is block.body.buffer  # C = fma(A, B, C)
    assert "C[v_i, v_j] = T.fma(A[v_i, v_k], B[v_k, v_j], C[v_i, v_j])" in str(func)
    assert structural_equal(parse(str(func)), func)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 300)).astype(np.float32)
    b = rng.standard_normal((300, 32)).astype(np.float32)
    want = _fma_chain(a, b)
    assert (want != (a.astype(np.float64) @ b).astype(np.float32)).any()  # the order shows
    np.testing.assert_array_equal(interpret(func, a, b, np.zeros((4, 32), np.float32))[-1], want)
    hw = hardware.load("host")
    scheduled = default_schedule(func, hw)  # tiled, k split in order, j vectorized
    c = np.zeros((4, 32), np.float32)
    build(scheduled, hw.with_fp_contract())(a, b, c)
    np.testing.assert_array_equal(c, want)
    with pytest.raises(TEError, match="two float operands"):
        te.fma_sum(te.placeholder((4,), "int32", name="I")[k], 2, axis=k)
