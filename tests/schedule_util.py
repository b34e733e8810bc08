"""Shared checks for schedule tests: expected IR, trace round trips, numerical equivalence."""

from __future__ import annotations

import numpy as np

from tensorsearch.interpreter import interpret
from tensorsearch.ir import PrimFunc, assert_structural_equal, structural_hash
from tensorsearch.schedule import Schedule, Trace
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
    rng = rng or np.random.default_rng()
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
