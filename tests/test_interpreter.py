"""The reference interpreter: exact semantics of every statement and expression kind."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsearch import interpreter
from tensorsearch.interpreter import interpret, python_source, register_intrinsic
from tensorsearch.ir import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    Broadcast,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    DataType,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IterType,
    IterVar,
    MatchBufferRegion,
    Max,
    Min,
    Mod,
    Or,
    PrimFunc,
    Ramp,
    Range,
    Select,
    StringImm,
    Var,
    call,
    const,
    decl_buffer,
    logical_and,
    make_prim_func,
    seq,
)


def rng():
    seed = np.random.SeedSequence().entropy
    return np.random.default_rng(seed)


def loops(vars_extents, body, kind=ForKind.SERIAL):
    for v, n in reversed(vars_extents):
        body = For(v, 0, n, kind, body)
    return body


def spatial(v, n):
    return IterVar(v, Range.from_extent(n), IterType.SPATIAL)


def reduce_(v, n):
    return IterVar(v, Range.from_extent(n), IterType.REDUCE)


def realize(name, iter_vars, values, body, init=None, predicate=TRUE, **kw):
    block = Block(name, tuple(iter_vars), (), (), body, init, **kw)
    return BlockRealize(tuple(values), predicate, block)


def gemm_func(n, m, k, in_dtype="float32", acc_dtype="float32"):
    A = decl_buffer((n, k), in_dtype, "A")
    B = decl_buffer((k, m), in_dtype, "B")
    C = decl_buffer((n, m), acc_dtype, "C")
    i, j, r = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    a, b = A[vi, vk], B[vk, vj]
    if in_dtype != acc_dtype:
        a, b = a.astype(acc_dtype), b.astype(acc_dtype)
    block = realize(
        "C",
        [spatial(vi, n), spatial(vj, m), reduce_(vk, k)],
        [i, j, r],
        BufferStore(C, C[vi, vj] + a * b, (vi, vj)),
        init=BufferStore(C, const(0, acc_dtype), (vi, vj)),
    )
    return make_prim_func([A, B, C], loops([(i, n), (j, m), (r, k)], block))


def elementwise(n, dtype, fn, out_dtype=None, nin=2):
    """C[i] = fn(A[i], B[i]) (or fn(A[i]) with nin=1) as a single-block program."""
    ins = [decl_buffer((n,), dtype, name) for name in "AB"[:nin]]
    C = decl_buffer((n,), out_dtype or dtype, "C")
    i, vi = Var("i"), Var("vi")
    value = fn(*[b[vi] for b in ins])
    body = realize("C", [spatial(vi, n)], [i], BufferStore(C, value, (vi,)))
    return make_prim_func([*ins, C], For(i, 0, n, ForKind.SERIAL, body))


# ---------------------------------------------------------------------------------------
# GEMM and reductions


def test_gemm_with_init_matches_numpy():
    g = rng()
    f = gemm_func(16, 12, 20)
    a = g.standard_normal((16, 20)).astype(np.float32)
    b = g.standard_normal((20, 12)).astype(np.float32)
    c = g.standard_normal((16, 12)).astype(np.float32)  # init must overwrite this
    out = interpret(f, a, b, c)
    assert out[2] is c
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # the trailing output is allocated when left out
    _, _, c2 = interpret(f, a, b)
    np.testing.assert_array_equal(c2, c)


def test_gemm_float32_is_exact_sequential_accumulation():
    g = rng()
    n = 8
    f = gemm_func(n, n, n)
    a = g.standard_normal((n, n)).astype(np.float32)
    b = g.standard_normal((n, n)).astype(np.float32)
    (_, _, c) = interpret(f, a, b)
    expected = np.zeros((n, n), np.float32)
    for i in range(n):
        for j in range(n):
            acc = np.float32(0)
            for k in range(n):
                acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
            expected[i, j] = acc
    np.testing.assert_array_equal(c, expected)


def test_int8_gemm_accumulates_in_int32_exactly():
    g = rng()
    f = gemm_func(8, 8, 32, "int8", "int32")
    a = g.integers(-128, 128, (8, 32), dtype=np.int8)
    b = g.integers(-128, 128, (32, 8), dtype=np.int8)
    a[0, :] = -128
    b[:, 0] = -128
    (_, _, c) = interpret(f, a, b)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
    assert c.dtype == np.int32


def test_int32_accumulation_wraps_around():
    f = gemm_func(1, 1, 4, "int32", "int32")
    a = np.full((1, 4), 2**30, np.int32)
    b = np.full((4, 1), 3, np.int32)
    (_, _, c) = interpret(f, a, b)
    expected = (4 * 3 * 2**30 + 2**31) % 2**32 - 2**31
    assert int(c[0, 0]) == expected


def test_float16_accumulation_is_float16_step_by_step():
    g = rng()
    n = 64
    f = gemm_func(4, 4, n, "float16", "float16")
    a = (g.standard_normal((4, n)) * 4).astype(np.float16)
    b = (g.standard_normal((n, 4)) * 4).astype(np.float16)
    (_, _, c) = interpret(f, a, b)
    expected = np.zeros((4, 4), np.float16)
    for i in range(4):
        for j in range(4):
            acc = np.float16(0)
            for k in range(n):
                acc = np.float16(acc + np.float16(a[i, k] * b[k, j]))
            expected[i, j] = acc
    np.testing.assert_array_equal(c, expected)
    # and it differs from a float64 computation rounded once
    assert not np.array_equal(c, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16))


def test_init_runs_at_first_reduction_iteration_with_nonzero_domain_min():
    A = decl_buffer((6,), "float32", "A")
    S = decl_buffer((1,), "float32", "S")
    k, vk = Var("k"), Var("vk")
    block = Block(
        "sum",
        (IterVar(vk, Range(const(2), const(4)), IterType.REDUCE),),
        (),
        (),
        BufferStore(S, S[0] + A[vk], (0,)),
        BufferStore(S, FloatImm(DataType.parse("float32"), 100.0), (0,)),
    )
    f = make_prim_func([A, S], For(k, 0, 4, ForKind.SERIAL, BlockRealize((k + 2,), TRUE, block)))
    a = rng().standard_normal(6).astype(np.float32)
    (_, s) = interpret(f, a)
    expected = np.float32(100)
    for x in a[2:6]:
        expected = np.float32(expected + x)
    assert s[0] == expected


# ---------------------------------------------------------------------------------------
# integer and float semantics


def test_uint8_overflow_wraps():
    g = rng()
    f = elementwise(64, "uint8", lambda a, b: a + b * const(3, "uint8") - const(7, "uint8"))
    a = g.integers(0, 256, 64, dtype=np.uint8)
    b = g.integers(0, 256, 64, dtype=np.uint8)
    (_, _, c) = interpret(f, a, b)
    expected = ((a.astype(np.int64) + b.astype(np.int64) * 3 - 7) % 256).astype(np.uint8)
    np.testing.assert_array_equal(c, expected)


def test_int8_wraps_and_casts():
    f = elementwise(4, "int8", lambda a, b: a * b)
    a = np.array([100, -128, 127, 5], np.int8)
    b = np.array([3, -1, 2, -30], np.int8)
    (_, _, c) = interpret(f, a, b)
    np.testing.assert_array_equal(c, (a.astype(np.int64) * b).astype(np.int8))
    # int32 -> int8 cast wraps; float -> int truncates toward zero
    f = elementwise(4, "int32", lambda a: Cast(DataType.parse("int8"), a), "int8", nin=1)
    (_, c) = interpret(f, np.array([300, -129, 127, -(2**31)], np.int32))
    np.testing.assert_array_equal(c, np.array([44, 127, 127, 0], np.int8))
    f = elementwise(4, "float32", lambda a: Cast(DataType.parse("int32"), a), "int32", nin=1)
    (_, c) = interpret(f, np.array([2.7, -2.7, -0.5, 1e3], np.float32))
    np.testing.assert_array_equal(c, np.array([2, -2, 0, 1000], np.int32))


def test_div_mod_truncate_and_floordiv_floormod_floor():
    a = np.array([7, -7, 7, -7, 0, -(2**31)], np.int32)
    b = np.array([2, 2, -2, -2, 3, -1], np.int32)
    expect = {
        Div: [3, -3, -3, 3, 0, -(2**31)],
        Mod: [1, -1, 1, -1, 0, 0],
        FloorDiv: [3, -4, -4, 3, 0, -(2**31)],
        FloorMod: [1, 1, -1, -1, 0, 0],
    }
    for op, values in expect.items():
        (_, _, c) = interpret(elementwise(6, "int32", op), a, b)
        np.testing.assert_array_equal(c, np.array(values, np.int32), err_msg=op.__name__)


@pytest.mark.parametrize("op", [Div, Mod, FloorDiv, FloorMod])
def test_integer_division_by_zero_is_an_error(op):
    f = elementwise(2, "int32", op)
    with pytest.raises(ZeroDivisionError, match="division by zero"):
        interpret(f, np.array([1, 2], np.int32), np.array([1, 0], np.int32))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-128, 127), min_size=4, max_size=4),
    st.lists(st.integers(-128, 127).filter(lambda x: x != 0), min_size=4, max_size=4),
)
def test_int8_arithmetic_matches_a_wrapping_model(xs, ys):
    def wrap(v):
        return (v + 128) % 256 - 128

    def trunc_div(x, y):
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y >= 0) else -q

    a, b = np.array(xs, np.int8), np.array(ys, np.int8)
    cases = [
        (lambda p, q: (p + q) * q - p, lambda x, y: wrap(wrap(wrap(x + y) * y) - x)),
        (lambda p, q: Div(p * q, q), lambda x, y: wrap(trunc_div(wrap(x * y), y))),
        (lambda p, q: Mod(p, q) + FloorMod(p, q), lambda x, y: wrap(x - y * trunc_div(x, y) + x % y)),
        (lambda p, q: FloorDiv(p - q, q), lambda x, y: wrap(wrap(x - y) // y)),
        (lambda p, q: Min(p, q) - Max(p, q), lambda x, y: wrap(min(x, y) - max(x, y))),
    ]
    for fn, model in cases:
        (_, _, c) = interpret(elementwise(4, "int8", fn), a, b)
        assert c.tolist() == [model(x, y) for x, y in zip(xs, ys)]


def test_bfloat16_cast_and_arithmetic():
    g = rng()
    bf16 = DataType.parse("bfloat16")
    x = g.standard_normal(32).astype(np.float32) * 100
    f = elementwise(32, "float32", lambda a: Cast(bf16, a), "bfloat16", nin=1)
    (_, c) = interpret(f, x)
    assert c.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(c.astype(np.float32), x.astype(ml_dtypes.bfloat16).astype(np.float32))
    f = elementwise(32, "bfloat16", lambda a, b: a * b + a)
    a = g.standard_normal(32).astype(ml_dtypes.bfloat16)
    b = g.standard_normal(32).astype(ml_dtypes.bfloat16)
    (_, _, c) = interpret(f, a, b)
    expected = [ml_dtypes.bfloat16(ml_dtypes.bfloat16(p * q) + p) for p, q in zip(a, b)]
    np.testing.assert_array_equal(c.astype(np.float32), np.array(expected, ml_dtypes.bfloat16).astype(np.float32))


def test_float_to_float_and_int_to_float_casts_round():
    f = elementwise(3, "float32", lambda a: Cast(DataType.parse("float16"), a), "float16", nin=1)
    x = np.array([0.1, 65519.0, 1e-8], np.float32)
    (_, c) = interpret(f, x)
    np.testing.assert_array_equal(c, x.astype(np.float16))
    f = elementwise(2, "int32", lambda a: Cast(DataType.parse("float32"), a), "float32", nin=1)
    (_, c) = interpret(f, np.array([16777217, -(2**31)], np.int32))
    np.testing.assert_array_equal(c, np.array([16777216.0, -(2.0**31)], np.float32))


def test_math_calls_computed_in_the_calls_type():
    g = rng()
    x = (g.random(16) * 2 + 0.5).astype(np.float16)
    cases = {
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "tanh": np.tanh,
        "floor": np.floor,
        "ceil": np.ceil,
        "round": np.rint,
        "abs": np.abs,
        "rsqrt": lambda v: np.float16(1) / np.sqrt(v),
        "sigmoid": lambda v: np.float16(1) / (np.float16(1) + np.exp(-v)),
        "erf": lambda v: np.array([math.erf(float(t)) for t in v]).astype(np.float16),
    }
    for op, ref in cases.items():
        f = elementwise(16, "float16", lambda a, op=op: call(op, a), nin=1)
        (_, c) = interpret(f, x)
        assert c.dtype == np.float16
        np.testing.assert_array_equal(c, ref(x).astype(np.float16), err_msg=op)
    f = elementwise(16, "float16", lambda a, b: call("pow", a, b))
    (_, _, c) = interpret(f, x, x)
    np.testing.assert_array_equal(c, np.power(x, x))


def test_select_min_max_and_bool_ops():
    g = rng()
    a = g.standard_normal(16).astype(np.float32)
    b = g.standard_normal(16).astype(np.float32)
    zero = FloatImm(DataType.parse("float32"), 0.0)
    f = elementwise(16, "float32", lambda p, q: Select(logical_and(p > zero, q < zero), Max(p, q), Min(p, q)))
    (_, _, c) = interpret(f, a, b)
    np.testing.assert_array_equal(c, np.where((a > 0) & (b < 0), np.maximum(a, b), np.minimum(a, b)))


def test_unknown_call_names_the_op_and_registered_intrinsics_run():
    f = elementwise(2, "float32", lambda a: Call(DataType.parse("float32"), "my.secret_op", (a,)), nin=1)
    with pytest.raises(NotImplementedError, match=r"my\.secret_op"):
        interpret(f, np.ones(2, np.float32))
    f = elementwise(2, "float32", lambda a: Call(DataType.parse("float32"), "test.double_it", (a,)), nin=1)
    register_intrinsic("test.double_it", lambda v: v * 2)
    (_, c) = interpret(f, np.array([1.5, -2], np.float32))
    np.testing.assert_array_equal(c, [3.0, -4.0])


def test_evaluate_runs_registered_intrinsics_and_skips_syncs():
    A = decl_buffer((3,), "int64", "A")
    i = Var("i")
    seen = []
    register_intrinsic("test.record", lambda *xs: seen.append(xs))
    int32 = DataType.parse("int32")
    body = seq(
        For(i, 0, 3, ForKind.SERIAL, Evaluate(Call(int32, "test.record", (i, A[i])))),
        Evaluate(Call(int32, "tvm_storage_sync", (StringImm("shared"),))),
    )
    a = np.array([2**62 + 1, -(2**63), 5], np.int64)
    interpret(make_prim_func([A], body), a)
    assert seen == [(0, 2**62 + 1), (1, -(2**63)), (2, 5)]


def test_unsigned_wrap_bool_buffers_and_bool_scalar_params():
    U = decl_buffer((2,), "uint32", "U")
    u32, i8 = DataType.parse("uint32"), DataType.parse("int8")
    body = seq(BufferStore(U, U[0] - U[1], (0,)), BufferStore(U, Cast(u32, Cast(i8, U[1])), (1,)))
    (u,) = interpret(make_prim_func([U], body), np.array([1, 200], np.uint32))
    assert u.tolist() == [2**32 - 199, 2**32 - 56]
    C = decl_buffer((3,), "bool", "C")
    flag, hc, i = Var("flag", "bool"), Var("C_handle", "handle"), Var("i")
    f = PrimFunc((flag, hc), For(i, 0, 3, ForKind.SERIAL, BufferStore(C, Or(flag, i > 1), (i,))), ((hc, C),))
    assert interpret(f, False)[0].tolist() == [False, False, True]
    assert interpret(f, True)[0].tolist() == [True, True, True]


def test_nan_to_int_cast_is_an_error():
    F = decl_buffer((1,), "float32", "F")
    out = decl_buffer((1,), "int32", "out")
    f = make_prim_func([F, out], BufferStore(out, Cast(DataType.parse("int32"), F[0]), (0,)))
    with pytest.raises(ValueError, match="cannot convert the floating-point value nan"):
        interpret(f, np.array([np.nan], np.float32))


# ---------------------------------------------------------------------------------------
# control flow, blocks and buffers


def test_predicate_skips_block():
    A = decl_buffer((8,), "int32", "A")
    i, vi = Var("i"), Var("vi")
    body = realize("B", [spatial(vi, 8)], [i], BufferStore(A, vi * 10, (vi,)), predicate=i % 2 < 1)
    (a,) = interpret(make_prim_func([A], For(i, 0, 8, ForKind.SERIAL, body)), np.full(8, -1, np.int32))
    np.testing.assert_array_equal(a, [0, -1, 20, -1, 40, -1, 60, -1])


@pytest.mark.parametrize("kind", list(ForKind))
def test_imperfect_split_with_predicate_and_every_loop_kind(kind):
    n, factor = 10, 4
    A = decl_buffer((n,), "float32", "A")
    B = decl_buffer((n,), "float32", "B")
    io, ii, vi = Var("io"), Var("ii"), Var("vi")
    two = FloatImm(DataType.parse("float32"), 2.0)
    body = realize(
        "B",
        [spatial(vi, n)],
        [io * factor + ii],
        BufferStore(B, A[vi] * two, (vi,)),
        predicate=io * factor + ii < n,
    )
    inner = For(ii, 0, factor, kind, body, "threadIdx.x" if kind == ForKind.THREAD_BINDING else None)
    outer = For(io, 0, (n + factor - 1) // factor, ForKind.SERIAL, inner)
    a = rng().standard_normal(n).astype(np.float32)
    (_, b) = interpret(make_prim_func([A, B], outer), a)
    np.testing.assert_array_equal(b, a * np.float32(2))


def test_loop_min_is_honored_and_if_then_else():
    A = decl_buffer((10,), "int32", "A")
    i = Var("i")
    store = IfThenElse(i % 2 < 1, BufferStore(A, i, (i,)), BufferStore(A, const(0) - i, (i,)))
    (a,) = interpret(make_prim_func([A], For(i, 3, 5, ForKind.SERIAL, store)))
    np.testing.assert_array_equal(a, [0, 0, 0, -3, 4, -5, 6, -7, 0, 0])


def test_match_buffer_view_writes_through():
    # C[4*ti:4*ti+4, 4*tj:4*tj+4] is matched to a 4x4 buffer and written in place
    C = decl_buffer((8, 8), "float32", "C")
    T = decl_buffer((4, 4), "float32", "T")
    ti, tj, vt, wt, x, y = Var("ti"), Var("tj"), Var("vt"), Var("wt"), Var("x"), Var("y")
    value = FloatImm(DataType.parse("float32"), 1.0) + Cast(DataType.parse("float32"), vt * 100 + wt * 10 + x * 4 + y)
    inner = loops([(x, 4), (y, 4)], BufferStore(T, value, (x, y)))
    src = BufferRegion(C, (Range(vt * 4, const(4)), Range(wt * 4, const(4))))
    block = realize(
        "tile",
        [spatial(vt, 2), spatial(wt, 2)],
        [ti, tj],
        inner,
        match_buffers=(MatchBufferRegion(T, src),),
    )
    (c,) = interpret(make_prim_func([C], loops([(ti, 2), (tj, 2)], block)))
    expected = np.zeros((8, 8), np.float32)
    for a in range(2):
        for b in range(2):
            for p in range(4):
                for q in range(4):
                    expected[a * 4 + p, b * 4 + q] = 1 + a * 100 + b * 10 + p * 4 + q
    np.testing.assert_array_equal(c, expected)


def test_match_buffer_drops_unit_dims_and_binds_symbolic_strides_and_offset():
    A = decl_buffer((3, 4, 6), "int32", "A")
    s0, s1, off = Var("s0"), Var("s1"), Var("off")
    M = decl_buffer((2, 3), "int32", "M", strides=(s0, s1), elem_offset=off)
    x, y = Var("x"), Var("y")
    info = decl_buffer((3,), "int32", "info")
    body = seq(
        loops([(x, 2), (y, 3)], BufferStore(M, x * 10 + y, (x, y))),
        BufferStore(info, s0, (0,)),
        BufferStore(info, s1, (1,)),
        BufferStore(info, off, (2,)),
    )
    src = BufferRegion(A, (Range(const(1), const(1)), Range(const(2), const(2)), Range(const(3), const(3))))
    block = realize("m", [], [], body, match_buffers=(MatchBufferRegion(M, src),))
    a = np.zeros((3, 4, 6), np.int32)
    (a, inf) = interpret(make_prim_func([A, info], block), a)
    np.testing.assert_array_equal(a[1, 2:4, 3:6], [[0, 1, 2], [10, 11, 12]])
    assert a.sum() == 36
    assert inf.tolist() == [6, 1, 1 * 24 + 2 * 6 + 3]


def test_alloc_buffer_intermediate_is_fresh_per_execution():
    n = 6
    A = decl_buffer((n,), "float32", "A")
    C = decl_buffer((n,), "float32", "C")
    T = decl_buffer((1,), "float32", "T", scope="local")
    i, vi = Var("i"), Var("vi")
    two = FloatImm(DataType.parse("float32"), 2.0)
    body = seq(
        # T starts at zero in every execution of the block, so T[0] + A*2 == A*2
        BufferStore(T, T[0] + A[vi] * two, (0,)),
        BufferStore(C, T[0] + FloatImm(DataType.parse("float32"), 1.0), (vi,)),
    )
    block = realize("b", [spatial(vi, n)], [i], body, alloc_buffers=(T,))
    a = rng().standard_normal(n).astype(np.float32)
    (_, c) = interpret(make_prim_func([A, C], For(i, 0, n, ForKind.SERIAL, block)), a)
    np.testing.assert_array_equal(c, a * np.float32(2) + np.float32(1))


def test_root_block_alloc_and_two_stages():
    g = rng()
    n = 8
    A = decl_buffer((n, n), "float32", "A")
    B = decl_buffer((n, n), "float32", "B")
    C = decl_buffer((n,), "float32", "C")
    i, j, vi, vj, i2, j2, wi, wj = (Var(s) for s in ["i", "j", "vi", "vj", "i2", "j2", "wi", "wj"])
    stage1 = realize("B", [spatial(vi, n), spatial(vj, n)], [i, j], BufferStore(B, A[vi, vj] * A[vi, vj], (vi, vj)))
    stage2 = realize(
        "C",
        [spatial(wi, n), reduce_(wj, n)],
        [i2, j2],
        BufferStore(C, C[wi] + B[wi, wj], (wi,)),
        init=BufferStore(C, FloatImm(DataType.parse("float32"), 0.0), (wi,)),
    )
    root = realize(
        "root",
        [],
        [],
        seq(loops([(i, n), (j, n)], stage1), loops([(i2, n), (j2, n)], stage2)),
        alloc_buffers=(B,),
    )
    a = g.standard_normal((n, n)).astype(np.float32)
    (_, c) = interpret(make_prim_func([A, C], root), a)
    expected = np.zeros(n, np.float32)
    for r in range(n):
        for q in range(n):
            expected[r] = np.float32(expected[r] + np.float32(a[r, q] * a[r, q]))
    np.testing.assert_array_equal(c, expected)


def test_allocate_statement_and_padded_strides():
    A = decl_buffer((4, 4), "int32", "A")
    P = decl_buffer((4, 4), "int32", "P", scope="shared", strides=(const(5), const(1)), elem_offset=const(3))
    x, y, x2, y2 = Var("x"), Var("y"), Var("x2"), Var("y2")
    body = Allocate(
        P,
        seq(
            loops([(x, 4), (y, 4)], BufferStore(P, A[x, y] + 1, (x, y))),
            loops([(x2, 4), (y2, 4)], BufferStore(A, P[y2, x2], (x2, y2))),
        ),
    )
    a = rng().integers(-100, 100, (4, 4), dtype=np.int32)
    expected = (a + 1).T.copy()
    (out,) = interpret(make_prim_func([A], body), a)
    np.testing.assert_array_equal(out, expected)


def test_strided_parameter_buffer_binds_strides_from_the_array():
    s0 = Var("s0")
    A = decl_buffer((3, 2), "float32", "A", strides=(s0, const(1)))
    x, y = Var("x"), Var("y")
    f = make_prim_func([A], loops([(x, 3), (y, 2)], BufferStore(A, Cast(DataType.parse("float32"), s0), (x, y))))
    big = np.zeros((3, 7), np.float32)
    interpret(f, big[:, 2:4])
    np.testing.assert_array_equal(big[:, 2:4], 7)
    assert big[:, :2].sum() == 0 and big[:, 4:].sum() == 0
    B = decl_buffer((3, 2), "float32", "B", strides=(const(2), const(1)))
    f = make_prim_func([B], Evaluate(const(0)))
    with pytest.raises(ValueError, match="buffer B has strides"):
        interpret(f, big[:, 2:4])


def test_symbolic_shapes_and_scalar_params():
    n = Var("n")
    A = decl_buffer((n,), "float32", "A")
    B = decl_buffer((n,), "float32", "B")
    alpha = Var("alpha", "float32")
    ha, hb = Var("A_handle", "handle"), Var("B_handle", "handle")
    i = Var("i")
    body = For(i, 0, n, ForKind.SERIAL, BufferStore(B, A[i] * alpha, (i,)))
    f = PrimFunc((ha, alpha, hb), body, ((ha, A), (hb, B)))
    a = rng().standard_normal(5).astype(np.float32)
    (ra, rb) = interpret(f, a, 0.5)
    assert ra is a
    np.testing.assert_array_equal(rb, a * np.float32(0.5))


def test_vectorized_ramp_load_and_store():
    n = 16
    A = decl_buffer((n,), "int32", "A")
    B = decl_buffer((n,), "int32", "B")
    io = Var("io")
    lanes = 4
    idx = Ramp(io * lanes, const(1), lanes)
    rev = Ramp(io * lanes + 3, const(-1), lanes)
    three = Broadcast(const(3), lanes)
    value = FloorDiv(A[idx] * three, Broadcast(const(2), lanes)) + A[rev]
    f = make_prim_func([A, B], For(io, 0, n // lanes, ForKind.SERIAL, BufferStore(B, value, (idx,))))
    a = rng().integers(-1000, 1000, n, dtype=np.int32)
    (_, b) = interpret(f, a)
    expected = (a * 3) // 2 + a.reshape(-1, 4)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(b, expected)


def test_vector_float16_ops_stay_float16():
    n = 8
    A = decl_buffer((n,), "float16", "A")
    B = decl_buffer((n,), "float16", "B")
    idx = Ramp(const(0), const(1), n)
    value = A[idx] * A[idx] + Broadcast(FloatImm(DataType.parse("float16"), 0.1), n)
    f = make_prim_func([A, B], BufferStore(B, value, (idx,)))
    a = (rng().standard_normal(n) * 10).astype(np.float16)
    (_, b) = interpret(f, a)
    np.testing.assert_array_equal(b, a * a + np.float16(0.1))


# ---------------------------------------------------------------------------------------
# errors


def test_out_of_bounds_load_and_store_name_the_buffer():
    A = decl_buffer((4,), "float32", "A")
    B = decl_buffer((4,), "float32", "B")
    i = Var("i")
    f = make_prim_func([A, B], For(i, 0, 4, ForKind.SERIAL, BufferStore(B, A[i + 1], (i,))))
    with pytest.raises(IndexError, match=r"index \[4\] is out of bounds for buffer A"):
        interpret(f, np.ones(4, np.float32))
    # a negative index must not wrap around
    f = make_prim_func([A, B], For(i, 0, 4, ForKind.SERIAL, BufferStore(B, A[i - 1], (i,))))
    with pytest.raises(IndexError, match=r"index \[-1\] is out of bounds for buffer A"):
        interpret(f, np.ones(4, np.float32))
    f = make_prim_func([A, B], For(i, 0, 5, ForKind.SERIAL, BufferStore(B, FloatImm(A.dtype, 1.0), (i,))))
    with pytest.raises(IndexError, match="buffer B"):
        interpret(f, np.ones(4, np.float32))
    idx = Ramp(const(2), const(1), 4)
    f = make_prim_func([A, B], BufferStore(B, A[idx], (Ramp(const(0), const(1), 4),)))
    with pytest.raises(IndexError, match="buffer A"):
        interpret(f, np.ones(4, np.float32))


def test_wrong_shape_and_dtype_messages():
    f = gemm_func(4, 4, 4)
    good = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match=r"buffer B has shape \[4, 4\] but the array has shape \[4, 5\]"):
        interpret(f, good, np.ones((4, 5), np.float32))
    with pytest.raises(ValueError, match="buffer A has dtype float32 but the array has dtype float64"):
        interpret(f, np.ones((4, 4)), good)
    with pytest.raises(ValueError, match="buffer C has 2 dimensions"):
        interpret(f, good, good, np.ones(16, np.float32))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        interpret(f, good, good, good, good)
    bf = elementwise(2, "bfloat16", lambda a: a, nin=1)
    with pytest.raises(ValueError, match="buffer A has dtype bfloat16 but the array has dtype float32"):
        interpret(bf, np.ones(2, np.float32))
    (_, c) = interpret(bf, np.ones(2, ml_dtypes.bfloat16))
    assert c.dtype == ml_dtypes.bfloat16


def test_undefined_variable_and_buffer_are_reported():
    A = decl_buffer((4,), "int32", "A")
    ghost = decl_buffer((4,), "int32", "ghost")
    i, j = Var("i"), Var("j")
    with pytest.raises(ValueError, match="variable j"):
        interpret(make_prim_func([A], For(i, 0, 4, ForKind.SERIAL, BufferStore(A, j, (i,)))))
    with pytest.raises(ValueError, match="buffer ghost"):
        interpret(make_prim_func([A], For(i, 0, 4, ForKind.SERIAL, BufferStore(A, ghost[i], (i,)))))


# ---------------------------------------------------------------------------------------
# code generation limits and caching


def test_deep_expressions_and_deep_loop_nests_compile():
    A = decl_buffer((300,), "int32", "A")
    S = decl_buffer((1,), "int32", "S")
    value = A[0]
    for k in range(1, 300):
        value = value + A[k]
    a = rng().integers(-1000, 1000, 300, dtype=np.int32)
    (_, s) = interpret(make_prim_func([A, S], BufferStore(S, value, (0,))), a)
    assert int(s[0]) == int(a.sum())
    # 24 nested loops (CPython allows only 20 statically nested blocks per function)
    vs = [Var(f"l{k}") for k in range(24)]
    flat = vs[0]
    for v in vs[1:]:
        flat = flat * 2 + v
    B = decl_buffer((2**24,), "uint8", "B")
    small = [(v, 2 if k >= 20 else 1) for k, v in enumerate(vs)]
    f = make_prim_func([B], loops(small, BufferStore(B, const(1, "uint8"), (flat,))))
    (b,) = interpret(f)
    assert int(b.sum()) == 16 and b[:16].tolist() == [1] * 16


def test_source_is_inspectable_and_cached():
    f = gemm_func(4, 4, 4)
    src = python_source(f)
    assert src.startswith("def _kernel(") and "for " in src
    assert interpreter.compile_func(f, 3) is interpreter.compile_func(f, 3)


def test_gemm_64_runs():
    # a performance smoke test (no timing is asserted)
    g = rng()
    f = gemm_func(64, 64, 64)
    a = g.standard_normal((64, 64)).astype(np.float32)
    b = g.standard_normal((64, 64)).astype(np.float32)
    (_, _, c) = interpret(f, a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
