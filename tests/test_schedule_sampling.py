"""sample_categorical and sample_perfect_tile: determinism, replay, resampling and decision checks."""

from __future__ import annotations

import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from schedule_util import assert_program, check_same_results, check_trace_round_trip

from tensorsearch.ir import assert_structural_equal
from tensorsearch.schedule import DecisionError, InvalidArgument, LoopNotFound, Schedule, Trace
from tensorsearch.script import parse

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

# j's extent is not a constant
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

# a 48-long loop: 48 = 2^4 * 3
VEC48 = """
@T.prim_func
def main(A: T.Buffer((48,), "float32"), B: T.Buffer((48,), "float32")):
    for i in range(48):
        with T.block("B"):
            vi = T.axis.spatial(48, i)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] + T.float32(1.0)
"""


def _fails(sch: Schedule, fn, error: type, match: str) -> None:
    before, n, state = sch.func, len(sch.trace), sch._rng.getstate()
    with pytest.raises(error, match=match):
        fn()
    assert sch.func is before
    assert len(sch.trace) == n
    assert sch._rng.getstate() == state


def _tile_matmul(sch: Schedule) -> None:
    """A small design space: tile i and j in two levels, k in two, and pick an unroll depth."""
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, n=2, max_innermost_factor=4))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, n=2, max_innermost_factor=8))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, n=2, max_innermost_factor=4))
    sch.reorder(i0, j0, k0, i1, j1, k1)
    v = sch.sample_categorical(candidates=[0, 16, 64, 512], probs=[0.25, 0.25, 0.25, 0.25])
    sch.annotate(b, "meta_schedule.unroll_explicit", v)


def _decisions(sch: Schedule) -> list:
    return [inst.decision for inst in sch.trace if inst.kind.sampling]


# ---------------------------------------------------------------------------------------
# sample_categorical


def test_categorical_decision_and_value():
    sch = Schedule(parse(MATMUL))
    v = sch.sample_categorical([3, 5, 7], [1.0, 2.0, 3.0], decision=1)
    assert sch.get(v) == 5
    inst = sch.trace.insts[-1]
    assert inst.decision == 1 and inst.kind.pure and inst.kind.sampling
    assert "decision=1" in sch.trace.as_python()
    check_trace_round_trip(sch, parse(MATMUL))


def test_categorical_follows_probabilities_and_seed():
    def draws(seed: int) -> list[int]:
        sch = Schedule(parse(MATMUL), seed=seed, check=False)
        return [sch.get(sch.sample_categorical([10, 20, 30, 40], [0.0, 1, 0.0, 3])) for _ in range(200)]

    a = draws(7)
    assert a == draws(7)
    assert a != draws(8)
    assert set(a) == {20, 40}  # zero-probability candidates are never drawn
    assert 0.6 < a.count(40) / len(a) < 0.9


def test_categorical_errors():
    sch = Schedule(parse(MATMUL))
    _fails(sch, lambda: sch.sample_categorical([1, 2], [0.5]), InvalidArgument, "2 candidates but 1 probabilities")
    _fails(sch, lambda: sch.sample_categorical([], []), InvalidArgument, "candidates must be a non-empty list")
    _fails(
        sch,
        lambda: sch.sample_categorical([1, 2.5], [1, 1]),
        InvalidArgument,
        "candidates must be a non-empty list of integers",
    )
    _fails(
        sch,
        lambda: sch.sample_categorical([1, 2], [0.5, -0.1]),
        InvalidArgument,
        "probability 1 is -0.1; probabilities must be finite and non-negative",
    )
    _fails(sch, lambda: sch.sample_categorical([1, 2], [0.0, 0.0]), InvalidArgument, "the probabilities sum to 0")
    _fails(sch, lambda: sch.sample_categorical([1, 2], [math.nan, 1.0]), InvalidArgument, "probability 0 is nan")
    _fails(sch, lambda: sch.sample_categorical([1, 2], ["a", 1.0]), InvalidArgument, "probs must be a list of numbers")
    _fails(
        sch,
        lambda: sch.sample_categorical([1, 2], [1, 1], decision=2),
        DecisionError,
        "decision 2 is not the index of one of the 2 candidates",
    )
    _fails(sch, lambda: sch.sample_categorical([1, 2], [1, 1], decision=-1), DecisionError, "decision -1")
    _fails(sch, lambda: sch.sample_categorical([1, 2], [1, 1], decision="0"), DecisionError, "decision '0'")


# ---------------------------------------------------------------------------------------
# sample_perfect_tile


@pytest.mark.parametrize("n,max_inner", [(2, 16), (3, 4), (4, 1), (3, -1), (1, -1), (1, 48)])
def test_perfect_tile_is_perfect(n, max_inner):
    for seed in range(25):
        sch = Schedule(parse(VEC48), seed=seed)
        (i,) = sch.get_loops(sch.get_block("B"))
        factors = [sch.get(v) for v in sch.sample_perfect_tile(i, n=n, max_innermost_factor=max_inner)]
        assert len(factors) == n and math.prod(factors) == 48 and all(f >= 1 for f in factors)
        assert max_inner == -1 or factors[-1] <= max_inner
        assert sch.trace.insts[-1].decision == factors


def test_perfect_tile_explores_tilings():
    seen = set()
    for seed in range(60):
        sch = Schedule(parse(VEC48), seed=seed)
        (i,) = sch.get_loops(sch.get_block("B"))
        seen.add(tuple(sch.get(v) for v in sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)))
    assert len(seen) > 10
    assert {t[-1] for t in seen} == {1, 2, 3, 4, 6, 8}


def test_perfect_tile_with_decision_then_split():
    sch = Schedule(parse(VEC48))
    (i,) = sch.get_loops(sch.get_block("B"))
    t = sch.sample_perfect_tile(i, n=3, max_innermost_factor=4, decision=[3, 4, 4])
    sch.split(i, t)
    assert_program(
        sch.func,
        """
@T.prim_func
def main(A: T.Buffer((48,), "float32"), B: T.Buffer((48,), "float32")):
    for i_0, i_1, i_2 in T.grid(3, 4, 4):
        with T.block("B"):
            vi = T.axis.spatial(48, i_0 * 16 + i_1 * 4 + i_2)
            T.reads(A[vi])
            T.writes(B[vi])
            B[vi] = A[vi] + T.float32(1.0)
""",
    )
    check_trace_round_trip(sch, parse(VEC48))
    check_same_results(parse(VEC48), sch.func)


def test_perfect_tile_errors():
    sch = Schedule(parse(VEC48))
    (i,) = sch.get_loops(sch.get_block("B"))
    _fails(
        sch,
        lambda: sch.sample_perfect_tile(i, n=2, decision=[4, 4]),
        DecisionError,
        "multiplies to 16, not the loop's extent 48",
    )
    _fails(
        sch,
        lambda: sch.sample_perfect_tile(i, n=3, decision=[4, 12]),
        DecisionError,
        "is not a list of 3 positive integers",
    )
    _fails(sch, lambda: sch.sample_perfect_tile(i, n=2, decision=[-4, -12]), DecisionError, "positive integers")
    _fails(
        sch,
        lambda: sch.sample_perfect_tile(i, n=2, decision=[2, 24]),
        DecisionError,
        "innermost factor 24, more than max_innermost_factor 16",
    )
    _fails(sch, lambda: sch.sample_perfect_tile(i, n=2, decision="1,48"), DecisionError, "is not a list")
    _fails(sch, lambda: sch.sample_perfect_tile(i, n=0), InvalidArgument, "n must be a positive integer")
    _fails(
        sch,
        lambda: sch.sample_perfect_tile(i, n=2, max_innermost_factor=0),
        InvalidArgument,
        "max_innermost_factor must be a positive integer or -1",
    )
    _fails(
        sch,
        lambda: sch.sample_perfect_tile(i, n=1, max_innermost_factor=16),
        InvalidArgument,
        "a single tile exceeds max_innermost_factor 16",
    )
    b = sch.get_block("B")
    _fails(sch, lambda: sch.sample_perfect_tile(b, n=2), InvalidArgument, "expected a LoopRV")
    sch2 = Schedule(parse(TRIANGLE))
    _, j = sch2.get_loops(sch2.get_block("B"))
    _fails(sch2, lambda: sch2.sample_perfect_tile(j, n=2), InvalidArgument, "non-constant extent i \\+ 1")
    sch.split(i, [None, 4])
    _fails(sch, lambda: sch.sample_perfect_tile(i, n=2), LoopNotFound, "loop i no longer exists")


# ---------------------------------------------------------------------------------------
# traces: determinism, replay, resampling


def test_same_seed_same_decisions_and_program():
    a, b, c = (Schedule(parse(MATMUL), seed=s) for s in (11, 11, 12))
    for sch in (a, b, c):
        _tile_matmul(sch)
    assert _decisions(a) == _decisions(b)
    assert a.trace.as_json_text() == b.trace.as_json_text()
    assert_structural_equal(a.func, b.func)
    others = [Schedule(parse(MATMUL), seed=s) for s in range(12, 20)]
    for sch in others:
        _tile_matmul(sch)
    assert any(_decisions(sch) != _decisions(a) for sch in others)
    check_trace_round_trip(a, parse(MATMUL))
    check_same_results(parse(MATMUL), a.func)


def test_replay_with_recorded_decisions_reproduces_the_program():
    sch = Schedule(parse(MATMUL), seed=3)
    _tile_matmul(sch)
    for seed in (0, 99):  # the replaying schedule's own random state does not matter
        replay = Schedule(parse(MATMUL), seed=seed)
        Trace.from_json(sch.trace.as_json()).apply(replay)
        assert_structural_equal(replay.func, sch.func)
        assert _decisions(replay) == _decisions(sch)


def test_replay_with_provider_none_resamples():
    sch = Schedule(parse(MATMUL), seed=3)
    _tile_matmul(sch)
    results = set()
    for seed in range(10):
        replay = Schedule(parse(MATMUL), seed=seed)
        sch.trace.apply(replay, decision_provider=lambda inst, recorded: None)
        direct = Schedule(parse(MATMUL), seed=seed)
        _tile_matmul(direct)  # resampling = running the same steps with the replaying schedule's seed
        assert _decisions(replay) == _decisions(direct)
        assert_structural_equal(replay.func, direct.func)
        results.add(repr(_decisions(replay)))
    assert len(results) > 1


def test_replay_with_provided_decisions():
    sch = Schedule(parse(MATMUL), seed=3)
    _tile_matmul(sch)
    new = {"sample_perfect_tile": [4, 4], "sample_categorical": 3}
    replay = Schedule(parse(MATMUL))
    sch.trace.apply(replay, decision_provider=lambda inst, recorded: new[inst.kind.name])
    assert _decisions(replay) == [[4, 4], [4, 4], [4, 4], 3]
    assert dict(replay.get(replay.get_block("C")).annotations)["meta_schedule.unroll_explicit"] == 512
    check_same_results(parse(MATMUL), replay.func)


def test_replay_with_invalid_decision_fails_cleanly():
    sch = Schedule(parse(MATMUL), seed=3)
    _tile_matmul(sch)
    insts = [inst for inst in sch.trace if inst.kind.name == "sample_perfect_tile"]
    bad = sch.trace.with_decision(insts[1], [3, 5])
    replay = Schedule(parse(MATMUL))
    with pytest.raises(DecisionError, match="multiplies to 15, not the loop's extent 16"):
        bad.apply(replay)
    assert len(replay.trace) == 4  # get_block, get_loops, the first tile and its split
    bad_cat = sch.trace.with_decision(next(i for i in sch.trace if i.kind.name == "sample_categorical"), 4)
    with pytest.raises(DecisionError, match="decision 4 is not the index of one of the 4 candidates"):
        bad_cat.apply(Schedule(parse(MATMUL)))


def test_unused_samples_are_dropped_by_simplified():
    sch = Schedule(parse(MATMUL))
    i = sch.get_loops(sch.get_block("C"))[0]
    sch.sample_perfect_tile(i, n=2)
    sch.sample_categorical([1, 2], [1, 1])
    assert [inst.kind.name for inst in sch.trace.simplified()] == []


def test_failed_sample_does_not_consume_randomness():
    a, b = Schedule(parse(VEC48), seed=5), Schedule(parse(VEC48), seed=5)
    (ia,) = a.get_loops(a.get_block("B"))
    (ib,) = b.get_loops(b.get_block("B"))
    with pytest.raises(InvalidArgument):
        a.sample_perfect_tile(ia, n=1, max_innermost_factor=4)
    assert [a.get(v) for v in a.sample_perfect_tile(ia, n=3)] == [b.get(v) for v in b.sample_perfect_tile(ib, n=3)]
