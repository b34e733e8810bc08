"""The IR verifier accepts well-formed programs and names the block and rule of ill-formed ones."""

import dataclasses

import pytest

from tensorsearch.arith import VerifyError, verify
from tensorsearch.ir import (
    TRUE,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    FloatImm,
    For,
    IterType,
    IterVar,
    Range,
    Var,
    decl_buffer,
    make_prim_func,
)


def _gemm_parts(n=8):
    A = decl_buffer((n, n), "float32", "A")
    B = decl_buffer((n, n), "float32", "B")
    C = decl_buffer((n, n), "float32", "C")
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    block = Block(
        "C",
        (
            IterVar(vi, Range.from_extent(n), IterType.SPATIAL),
            IterVar(vj, Range.from_extent(n), IterType.SPATIAL),
            IterVar(vk, Range.from_extent(n), IterType.REDUCE),
        ),
        (BufferRegion(A, (Range(vi, 1), Range(vk, 1))), BufferRegion(B, (Range(vk, 1), Range(vj, 1)))),
        (BufferRegion(C, (Range(vi, 1), Range(vj, 1))),),
        BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
        init=BufferStore(C, FloatImm("float32", 0.0), (vi, vj)),
    )
    return dict(A=A, B=B, C=C, i=i, j=j, k=k, vi=vi, vj=vj, vk=vk, block=block, n=n)


def _wrap(p, block, values=None, buffers=None):
    values = values if values is not None else (p["i"], p["j"], p["k"])
    body = BlockRealize(values, TRUE, block)
    for v in (p["k"], p["j"], p["i"]):
        body = For(v, 0, p["n"], "serial", body)
    root = BlockRealize((), TRUE, Block("root", (), (), (), body))
    return make_prim_func(buffers or [p["A"], p["B"], p["C"]], root)


def test_well_formed_gemm_verifies():
    p = _gemm_parts()
    f = _wrap(p, p["block"])
    assert verify(f) is f


def test_read_outside_declared_region():
    p = _gemm_parts()
    A, vi, vk = p["A"], p["vi"], p["vk"]
    block = dataclasses.replace(p["block"], reads=(BufferRegion(A, (Range(vi, 1), Range(vk, 1))),))
    with pytest.raises(VerifyError, match="block C reads buffer B but does not declare it in its reads regions"):
        verify(_wrap(p, block))
    shifted = dataclasses.replace(
        p["block"], reads=(BufferRegion(A, (Range(vi, 1), Range(vk + 1, 1))), p["block"].reads[1])
    )
    with pytest.raises(VerifyError, match=r"block C reads A\[vi, vk\] outside its declared reads regions"):
        verify(_wrap(p, shifted))


def test_write_outside_declared_region():
    p = _gemm_parts()
    C, vi, vj = p["C"], p["vi"], p["vj"]
    block = dataclasses.replace(p["block"], writes=(BufferRegion(C, (Range(vi, 1), Range(vj + 1, 1))),))
    with pytest.raises(VerifyError, match="block C writes .* outside its declared writes regions"):
        verify(_wrap(p, block))


def test_block_uses_outer_loop_variable():
    p = _gemm_parts()
    A, B, C, vi, vj, vk, i = (p[x] for x in ("A", "B", "C", "vi", "vj", "vk", "i"))
    body = BufferStore(C, C[vi, vj] + A[i, vk] * B[vk, vj], (vi, vj))
    block = dataclasses.replace(p["block"], body=body)
    with pytest.raises(VerifyError, match="block C uses loop variable i of an outer loop directly"):
        verify(_wrap(p, block))


def test_undefined_variable():
    p = _gemm_parts()
    free = Var("x")
    with pytest.raises(VerifyError, match="block root uses variable x, which is not defined"):
        verify(_wrap(p, p["block"], values=(p["i"], p["j"], free)))


def test_reduce_iterator_selects_output():
    p = _gemm_parts()
    C, vi, vj, vk = p["C"], p["vi"], p["vj"], p["vk"]
    iters = (
        *p["block"].iter_vars[:1],
        IterVar(vj, Range.from_extent(p["n"]), IterType.REDUCE),
        p["block"].iter_vars[2],
    )
    block = dataclasses.replace(p["block"], iter_vars=iters)
    with pytest.raises(VerifyError, match="block C writes C at an index that depends on reduce iterator vj"):
        verify(_wrap(p, block))
    del C, vi, vk


def test_init_without_reduce_iterator():
    p = _gemm_parts()
    iters = tuple(dataclasses.replace(iv, iter_type=IterType.SPATIAL) for iv in p["block"].iter_vars)
    block = dataclasses.replace(p["block"], iter_vars=iters)
    with pytest.raises(VerifyError, match="block C has an init statement but no reduce iterator"):
        verify(_wrap(p, block))


def test_unknown_buffer():
    p = _gemm_parts()
    with pytest.raises(VerifyError, match="uses buffer B, which is neither a parameter nor allocated"):
        verify(_wrap(p, p["block"], buffers=[p["A"], p["C"]]))


def test_duplicate_block_names():
    p = _gemm_parts()
    f = _wrap(p, p["block"])
    inner = f.body.block.body
    # a second copy of the same loop nest re-uses the same block name (and variables)
    p2 = _gemm_parts()
    f2 = _wrap(p2, dataclasses.replace(p2["block"]))
    from tensorsearch.ir import seq

    body = seq(inner, f2.body.block.body)
    root = BlockRealize((), TRUE, Block("root", (), (), (), body))
    bad = make_prim_func([p["A"], p["B"], p["C"]], root)
    with pytest.raises(VerifyError, match="block name C is used twice"):
        verify(bad)
