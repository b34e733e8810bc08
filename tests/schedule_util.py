"""Shared checks for schedule tests: expected IR, trace round trips, numerical equivalence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from seeds import seeded_rng

from tensorsearch.interpreter import interpret
from tensorsearch.ir import PrimFunc, assert_structural_equal, structural_hash
from tensorsearch.schedule import Schedule, ScheduleError, Trace
from tensorsearch.script import parse


def assert_program(func: PrimFunc, expected_text: str) -> None:
    """The scheduled program equals the expected one written in script syntax."""
    assert_structural_equal(func, parse(expected_text))


def check_trace_round_trip(sch: Schedule, original: PrimFunc) -> None:
    """Replaying the trace from its JSON and from its Python form reproduces sch.func exactly."""
    text = sch.trace.as_json_text()
    replayed = Schedule(original, hardware=sch.hardware)
    Trace.from_json(text).apply(replayed)
    assert_structural_equal(replayed.func, sch.func)
    assert structural_hash(replayed.func) == structural_hash(sch.func)
    assert replayed.trace.as_json_text() == text
    by_python = Schedule(original, hardware=sch.hardware)
    exec(sch.trace.as_python(), {"sch": by_python})
    assert_structural_equal(by_python.func, sch.func)


def random_inputs(func: PrimFunc, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """Fresh random (never all-zero) arrays for every buffer parameter of ``func``."""
    rng = rng or seeded_rng()
    arrays = []
    for buf in func.buffers:
        shape = tuple(int(s.value) for s in buf.shape)
        dt = buf.dtype.numpy
        if buf.dtype.is_float:
            arrays.append(rng.uniform(-1, 1, size=shape).astype(dt))
        elif buf.dtype.is_bool:
            arrays.append(rng.integers(0, 2, size=shape).astype(dt))
        else:
            info = np.iinfo(dt)
            arrays.append(rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True).astype(dt))
    return arrays


def check_same_results(before: PrimFunc, after: PrimFunc, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Both programs compute the same outputs on the same fresh random inputs."""
    inputs = random_inputs(before)
    expected = interpret(before, *[a.copy() for a in inputs])
    got = interpret(after, *[a.copy() for a in inputs])
    for buf, e, g in zip(before.buffers, expected, got, strict=True):
        if buf.dtype.is_float:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"buffer {buf.name}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"buffer {buf.name}")


def gemm_bias(n: int, m: int, k: int, relu: bool = False) -> PrimFunc:
    """``E = max(A @ B + bias, 0)`` (or without the max) in blocks C (the product), D (+ bias), E."""
    from tensorsearch import te
    from tensorsearch.ir import Max, const

    A = te.placeholder((n, k), "float32", name="A")
    B = te.placeholder((k, m), "float32", name="B")
    bias = te.placeholder((m,), "float32", name="bias")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((n, m), lambda i, j: C[i, j] + bias[j], name="D")
    if not relu:
        return te.create_prim_func([A, B, bias, D])
    E = te.compute((n, m), lambda i, j: Max(D[i, j], const(0.0, "float32")), name="E")
    return te.create_prim_func([A, B, bias, E])


class StepTally:
    """How each step of a schedule fuzz ended: *applied* (it added an instruction that changes the
    program to the trace), *idle* (it found nothing to do) or *refused* (ScheduleError, which must
    leave the schedule untouched). A fuzz asserts with :meth:`check` how much it applied, so that it
    cannot pass while every primitive refuses."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.idle: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()

    def run(self, step: Callable[[Any, Schedule], None], data: Any, sch: Schedule) -> bool:
        """``step(data, sch)``; True when it applied. A refusal is checked to have changed nothing."""
        before_func, before_len = sch.func, len(sch.trace)
        try:
            step(data, sch)
        except ScheduleError:
            assert sch.func is before_func, f"{step.__name__} raised but changed the schedule"
            # lookups made by the step itself before the failing primitive stay in the trace
            assert all(inst.kind.pure for inst in sch.trace.insts[before_len:])
            self.refused[step.__name__] += 1
            return False
        if any(not inst.kind.pure for inst in sch.trace.insts[before_len:]):
            self.applied[step.__name__] += 1
            return True
        self.idle[step.__name__] += 1
        return False

    def __str__(self) -> str:
        names = sorted({*self.applied, *self.idle, *self.refused})
        return "; ".join(
            f"{n}: {self.applied[n]} applied, {self.idle[n]} idle, {self.refused[n]} refused" for n in names
        )

    def check(self, steps: list[Callable[..., Any]], min_share: float, min_each: int = 1) -> None:
        """At least ``min_share`` of all steps run applied, and every one of ``steps`` applied at least
        ``min_each`` times."""
        total = sum(self.applied.values()) + sum(self.idle.values()) + sum(self.refused.values())
        assert total > 0, "the fuzz ran no step"
        share = sum(self.applied.values()) / total
        assert share >= min_share, (
            f"only {share:.0%} of {total} steps applied (at least {min_share:.0%} expected): {self}"
        )
        rare = sorted({s.__name__ for s in steps if self.applied[s.__name__] < min_each})
        assert not rare, f"applied fewer than {min_each} times: {', '.join(rare)}: {self}"
