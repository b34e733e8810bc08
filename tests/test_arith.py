"""Tests of tensorsearch.arith: simplifier, bounds, interval sets and access regions."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsearch.arith import (
    NEG_INF,
    POS_INF,
    Analyzer,
    IntervalSet,
    can_prove,
    can_prove_equal,
    const_int_bound,
    detect_access_regions,
    eval_int_set,
    intersect,
    region_from_points,
    simplify,
    union,
)
from tensorsearch.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    TRUE,
    Add,
    And,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    IterVar,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    Ramp,
    Range,
    Select,
    SeqStmt,
    Sub,
    Var,
    decl_buffer,
    equal,
    max_,
    min_,
    structural_equal,
)

i, j, k, x, n = Var("i"), Var("j"), Var("k"), Var("x"), Var("n")
DOM = {i: Range(0, 16), j: Range(0, 8), k: Range(-4, 8)}  # k in [-4, 4)
LO_HI = {i: (0, 15), j: (0, 7), k: (-4, 3)}


def c(v: int) -> IntImm:
    return IntImm("int32", v)


T, F = IntImm("bool", 1), IntImm("bool", 0)


def ev(e, env):
    """Evaluate an integer/bool expression with Python ints (floor semantics for // and %)."""
    t = type(e)
    if t is IntImm:
        return e.value
    if t is Var:
        return env[e]
    if t is Select:
        return ev(e.true_value, env) if ev(e.condition, env) else ev(e.false_value, env)
    if t is Not:
        return int(not ev(e.a, env))
    if t is Cast:
        return ev(e.value, env)
    a, b = ev(e.a, env), ev(e.b, env)
    if t is Div:
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b > 0) else -q
    if t is Mod:
        return a - ev(Div(e.a, e.b), env) * b
    ops = {
        Add: lambda: a + b, Sub: lambda: a - b, Mul: lambda: a * b, FloorDiv: lambda: a // b,
        FloorMod: lambda: a % b, Min: lambda: min(a, b), Max: lambda: max(a, b), And: lambda: int(a and b),
        Or: lambda: int(a or b), LT: lambda: int(a < b), LE: lambda: int(a <= b), GT: lambda: int(a > b),
        GE: lambda: int(a >= b), EQ: lambda: int(a == b), NE: lambda: int(a != b),
    }  # fmt: skip
    return ops[t]()


# -- concrete rewrites ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (i * 4 + j + i * 2 - j, i * 6),
        ((i * 8 + j) // 8, i),
        ((i * 8 + j) % 8, j),
        ((i * 4) // 2, i * 2),
        (x % 1, c(0)),
        (x // 1, x),
        ((x // 4) // 8, x // 32),
        ((x // 4) * 4 + x % 4, x),
        ((x // 3 % 7) * 3 + x % 3, x % 21),  # a fused index split back (rh * 21 + rw * 3 + rc)
        ((x // 21) * 21 + (x // 3 % 7) * 3 + x % 3, x),
        (((x // 3 % 7) * 3 + x % 3) * 2 + 5, (x % 21) * 2 + 5),
        ((x % 8) % 4, x % 4),
        ((x + 7) % 4, (x + 3) % 4),
        ((x * 6) // 4, (x * 3) // 2),
        ((x * 8 + 9) // 8, x + 1),
        (min_(i + 4, i), i),
        (max_(i, 16), c(16)),
        (min_(i, 15), i),
        (Select(i < 16, i, j), i),
        (c(7) // c(2) + c(-7) // c(2) + c(-7) % c(3), c(3 - 4 + 2)),
        (Div(c(-7), c(2)) + Mod(c(-7), c(2)), c(-3 - 1)),
        (Div(i * 4 + 3, c(4)), i),
        (x - x, c(0)),
        ((x + 1) * 3 - x * 3, c(3)),
        ((i * 2) * j - i * (j * 2), c(0)),
        (16 - j, 16 - j),
    ],
)
def test_rewrites(before, after):
    got = simplify(before, DOM)
    assert structural_equal(got, simplify(after)), (before, got)
    assert simplify(got, DOM) == got


def test_exact_forms():
    assert simplify(i * 4 + j + i * 2 - j) == Mul(i, c(6))
    assert simplify(j + i - j + i * 2) == Mul(i, c(3))
    assert simplify(x * 8 + 9) == Add(Mul(x, c(8)), c(9))
    assert simplify(0 - j) == Mul(j, c(-1))
    assert simplify(i - j + 3) == Add(Sub(i, j), c(3))
    # first-appearance order, positive terms first
    assert simplify(j * 2 + i) == Add(Mul(j, c(2)), i)
    assert simplify(i + 1 - 1) is i


def test_comparisons():
    assert simplify(i < 16, DOM) == T
    assert simplify(i >= 16, DOM) == F
    assert simplify(equal(j, 9), DOM) == F
    assert simplify(Not(i < 16), DOM) == F
    assert simplify(x + 1 <= 16) == LE(x, c(15))
    assert simplify(x > 5) == LT(c(5), x)
    assert simplify(x * 2 < 7) == LT(x, c(4))
    assert simplify(x * 2 <= 7) == LE(x, c(3))
    assert simplify(equal(x * 2, 7)) == F
    assert simplify(equal(3, x)) == EQ(x, c(3))
    assert simplify(Not(x < n)) == LE(n, x)
    assert simplify(x < x + 1) == T
    assert simplify(And(x < n, T)) == LT(x, n)
    assert simplify(Or(x < n, i < 16), DOM) == T
    assert simplify(And(x < n, x < n)) == LT(x, n)
    assert simplify(Not(Not(x < n))) == LT(x, n)


def test_floats_and_casts():
    f = Var("f", "float32")
    a, b = FloatImm("float32", 1.0), FloatImm("float32", 0.1)
    assert simplify(a + b) == FloatImm("float32", float(__import__("numpy").float32(1.1)))
    assert simplify(f + b + b) == f + b + b  # no reassociation of floats
    assert simplify(Cast("int32", FloatImm("float32", -2.7))) == c(-2)
    assert simplify(Cast("float32", c(3))) == FloatImm("float32", 3.0)
    assert simplify(Cast("int32", i + 0)) is i
    assert simplify(Cast("int8", c(200))) == IntImm("int8", -56)
    assert simplify(Select(GT(c(1), c(0)), f, f * a)) is f


def test_vectors():
    one = c(1)
    r = Ramp(x * 4, one, 4)
    from tensorsearch.ir import Broadcast

    assert simplify(r + Broadcast(c(2), 4)) == Ramp(x * 4 + 2, one, 4)
    assert simplify(r * Broadcast(c(2), 4)) == Ramp(x * 8, c(2), 4)


def test_bounds_and_prover():
    assert const_int_bound(i * 4 + 3, {i: Range(0, 8)}) == (3, 31)
    assert const_int_bound(x % 8) == (0, 7)
    assert const_int_bound(i // 4 - j, DOM) == (-7, 3)
    lo, hi = const_int_bound(x)
    assert lo == -(2**31) and hi == 2**31 - 1
    assert const_int_bound(Var("f", "float32") < 1.0) == (0, 1)
    assert can_prove(i * 4 + j < 64, {i: Range(0, 16), j: Range(0, 4)})
    assert not can_prove(i * 4 + j < 63, {i: Range(0, 16), j: Range(0, 4)})
    assert not can_prove(Var("i") < 16, DOM)  # a different Var named i is unbounded
    assert can_prove_equal((x // 4) * 4 + x % 4, x)
    assert not can_prove_equal(x // 4 * 4, x)
    ana = Analyzer()
    ana.bind(i, 16)
    assert ana.can_prove(i < 16) and ana.const_int_bound(i * 2) == (0, 30)
    assert ana.simplify(i // 16) == c(0)
    assert ana.eval_int_set(i * 2) == IntervalSet(c(0), c(30))
    # symbolic domains
    assert can_prove(j < n + 4, {j: Range(n, 4)})
    assert simplify((j - n) // 4, {j: Range(n, 4)}) == c(0)
    with pytest.raises(TypeError):
        can_prove(i + 1)
    with pytest.raises(TypeError):
        const_int_bound(FloatImm("float32", 1.0))


def test_int_sets():
    t = Var("t")
    assert eval_int_set(i * 4 + j, {j: Range(0, 4)}) == IntervalSet(i * 4, i * 4 + 3)
    assert eval_int_set((k * 16 + t) // 4, {t: Range(0, 16)}) == IntervalSet(k * 4, k * 4 + 3)
    assert eval_int_set(x % 8, {x: Range(n, 100)}) == IntervalSet(c(0), c(7))
    assert eval_int_set(x - n, {x: Range(0, 4), n: Range(0, 8)}) == IntervalSet(c(-7), c(3))
    assert eval_int_set(Ramp(x * 4, c(1), 4), {}) == IntervalSet(x * 4, x * 4 + 3)
    assert eval_int_set(j, {j: Range(i, 4), i: Range(0, 8)}) == IntervalSet(c(0), c(10))
    assert eval_int_set(x * n, {x: Range(0, 4)}) == IntervalSet(Min(c(0), n * 3), Max(c(0), n * 3))
    assert eval_int_set(x * 2, {x: IntervalSet(c(0), POS_INF)}) == IntervalSet(c(0), POS_INF)
    assert eval_int_set(0 - x, {x: IntervalSet(c(0), POS_INF)}) == IntervalSet(NEG_INF, c(0))
    s = eval_int_set(x + n, {x: Range(0, 4)})
    assert s.extent() == c(4) and not s.is_single_point and eval_int_set(n).is_single_point
    pts = [IntervalSet.single_point(e) for e in (i, i + 2, i + 1)]
    assert union(pts) == IntervalSet(i, i + 2)
    assert union([IntervalSet.single_point(i), IntervalSet.single_point(j)]) == IntervalSet(Min(i, j), Max(i, j))
    assert intersect(IntervalSet(c(0), c(15)), IntervalSet(i, i + 31)) == IntervalSet(Max(c(0), i), Min(c(15), i + 31))
    assert intersect(IntervalSet.everything(), IntervalSet(c(0), c(3))) == IntervalSet(c(0), c(3))
    with pytest.raises(ValueError):
        IntervalSet.everything().extent()


def _regions(rs):
    return [(r.buffer.name, [(simplify(rg.min), simplify(rg.extent)) for rg in r.region]) for r in rs]


def test_detect_access_regions():
    A, B, C = (decl_buffer((64, 64), name=nm) for nm in "ABC")
    vi, vj, kk = Var("vi"), Var("vj"), Var("k")
    body = For(kk, 0, 16, "serial", BufferStore(C, C[vi, vj] + A[vi, kk] * B[kk, vj], (vi, vj)))
    reads, writes = detect_access_regions(body, {})
    assert [r.buffer for r in reads] == [C, A, B] and [w.buffer for w in writes] == [C]
    assert reads[1] == BufferRegion(A, (Range(vi, 1), Range(0, 16)))
    assert writes[0] == BufferRegion(C, (Range(vi, 1), Range(vj, 1)))
    # relaxing vi over its range
    reads, _ = detect_access_regions(body, {vi: Range(0, 4)})
    assert reads[1] == BufferRegion(A, (Range(0, 4), Range(0, 16)))
    # nested block: declared regions with iter_values substituted
    bi, bj, li, lj = Var("bi"), Var("bj"), Var("li"), Var("lj")
    ivs = (IterVar(bi, Range(0, 64), "spatial"), IterVar(bj, Range(0, 64), "spatial"))
    blk = Block(
        "inner", ivs, (BufferRegion(A, (Range(bi, 1), Range(bj, 1))),),
        (BufferRegion(C, (Range(bi, 1), Range(bj, 1))),), BufferStore(C, A[bi, bj], (bi, bj)),
    )  # fmt: skip
    loops = For(li, 0, 4, "serial", For(lj, 0, 8, "serial", BlockRealize((vi * 4 + li, lj * 2), TRUE, blk)))
    reads, writes = detect_access_regions(loops, {})
    assert reads == [BufferRegion(A, (Range(vi * 4, 4), Range(0, 15)))]
    assert writes == [BufferRegion(C, (Range(vi * 4, 4), Range(0, 15)))]
    # a block without declared regions is walked; its alloc_buffers are left out
    D = decl_buffer((4,), name="D")
    blk2 = Block(
        "b2", ivs, (), (), SeqStmt((BufferStore(D, A[bi, 0], (0,)), BufferStore(C, D[0], (bi, bj)))), alloc_buffers=(D,)
    )
    reads, writes = detect_access_regions(BlockRealize((vi, vj), TRUE, blk2), {})
    assert reads == [BufferRegion(A, (Range(vi, 1), Range(0, 1)))]
    assert writes == [BufferRegion(C, (Range(vi, 1), Range(vj, 1)))]
    # hull of neighbouring accesses, Ramp lanes, if conditions, incomparable bounds
    V = decl_buffer((64,), name="V")
    s = SeqStmt((BufferStore(V, V[x] + V[x + 2], (x + 1,)), IfThenElse(V[n] > 0.0, BufferStore(V, V[x], (n,)))))
    reads, writes = detect_access_regions(s)
    assert reads == [BufferRegion(V, (Range(Min(x, n), Max(x + 2, n) - Min(x, n) + 1),))]
    assert writes == [BufferRegion(V, (Range(Min(x + 1, n), Max(x + 1, n) - Min(x + 1, n) + 1),))]
    r = Ramp(x * 4, c(1), 4)
    reads, _ = detect_access_regions(BufferStore(V, V[r], (r,)))
    assert reads == [BufferRegion(V, (Range(x * 4, 4),))]
    assert region_from_points(V, [(x,), (x + 1,), (x + 2,)]) == BufferRegion(V, (Range(x, 3),))


# -- properties ---------------------------------------------------------------------------

VARS = [i, j, k]
leaves = st.one_of(st.sampled_from(VARS), st.integers(-8, 8).map(c))


def _extend(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]),
        pair.map(lambda p: p[0] - p[1]),
        st.tuples(children, st.integers(-4, 4)).map(lambda p: p[0] * p[1]),
        st.tuples(children, st.integers(1, 9)).map(lambda p: p[0] // p[1]),
        st.tuples(children, st.integers(1, 9)).map(lambda p: p[0] % p[1]),
        pair.map(lambda p: min_(p[0], p[1])),
        pair.map(lambda p: max_(p[0], p[1])),
        st.tuples(st.sampled_from(VARS), st.sampled_from(VARS)).map(lambda p: p[0] * p[1]),
        st.tuples(children, children, children, children).map(lambda p: Select(p[0] < p[1], p[2], p[3])),
    )


exprs = st.recursive(leaves, _extend, max_leaves=10)
points = st.lists(st.tuples(*(st.integers(lo, hi) for lo, hi in LO_HI.values())), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(exprs, points)
@pytest.mark.slow
def test_simplify_preserves_value(e, pts):
    s = simplify(e, DOM)
    assert simplify(s, DOM) == s
    s0 = simplify(e)
    assert simplify(s0) == s0
    lo, hi = const_int_bound(e, DOM)
    for p in pts:
        env = dict(zip(VARS, p))
        v = ev(e, env)
        assert ev(s, env) == v, (e, s, env)
        assert lo <= v <= hi
        wide = {var: val * 5 - 17 for var, val in env.items()}  # outside DOM: only s0 must agree
        assert ev(s0, wide) == ev(e, wide), (e, s0, wide)


@settings(max_examples=200, deadline=None)
@given(exprs, points, st.sampled_from([(i, j, k), (i, j), (j,), ()]))
@pytest.mark.slow
def test_int_set_contains_values(e, pts, relaxed):
    dom = {v: DOM[v] for v in relaxed}
    st_ = eval_int_set(e, dom)
    for p in pts:
        env = dict(zip(VARS, p))
        v = ev(e, env)
        lo = -math.inf if st_.min_value is NEG_INF else ev(st_.min_value, env)
        hi = math.inf if st_.max_value is POS_INF else ev(st_.max_value, env)
        assert lo <= v <= hi, (e, st_, env)
    if len(relaxed) == 3 and st_.is_bounded:
        assert isinstance(st_.min_value, IntImm) and isinstance(st_.max_value, IntImm)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-5, 5), min_size=3, max_size=3),
    st.integers(-9, 9),
    points,
    st.sampled_from([(i, j), (j, k), (i, j, k), (k,)]),
)
@pytest.mark.slow
def test_int_set_of_a_linear_form_is_exact(coefs, const, pts, relaxed):
    # sum(c * v) + const: each relaxed variable's term goes to the end of its range that gives
    # the least (greatest) value, the others stay symbolic; both ends are reached
    e = c(const)
    for v, coef in zip(VARS, coefs):
        e = e + v * coef
    bounds = eval_int_set(e, {v: DOM[v] for v in relaxed})
    for p in pts:
        env = dict(zip(VARS, p))
        values = []
        for inner in itertools.product(*(range(LO_HI[v][0], LO_HI[v][1] + 1) for v in relaxed)):
            values.append(ev(e, {**env, **dict(zip(relaxed, inner))}))
        assert (ev(bounds.min_value, env), ev(bounds.max_value, env)) == (min(values), max(values)), (e, bounds)


@settings(max_examples=200, deadline=None)
@given(exprs, exprs, st.sampled_from([LT, LE, GT, GE, EQ, NE]), points)
@pytest.mark.slow
def test_prover_is_sound(a, b, op, pts):
    cond = op(a, b)
    s = simplify(cond, DOM)
    proved = can_prove(cond, DOM)
    for p in pts:
        env = dict(zip(VARS, p))
        assert ev(s, env) == ev(cond, env), (cond, s, env)
        if proved:
            assert ev(cond, env)
