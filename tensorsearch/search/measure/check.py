"""The reference a candidate is checked against: fixed random inputs, the expected outputs (the
workload's reference, or the unscheduled function compiled), and the tolerance rule
(:class:`ToleranceCheck`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ir.dtype import numpy_dtype, parse_dtype
from ...ir.functor import post_order_visit
from ...ir.stmt import Block, IterType, PrimFunc
from ...workloads import Workload


def _reduction_size(func: PrimFunc) -> int:
    """The largest product of reduction-iterator extents over the blocks (at least 1)."""
    from ...ir.expr import IntImm

    best = [1]

    def visit(n: Any) -> None:
        if isinstance(n, Block):
            size = 1
            for iv in n.iter_vars:
                if iv.iter_type == IterType.REDUCE and isinstance(iv.dom.extent, IntImm):
                    size *= iv.dom.extent.value
            best[0] = max(best[0], size)

    post_order_visit(func.body, visit)
    return best[0]


def _random_input(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Like Workload.make_inputs: floats in [-1, 1), int8/uint8 over their range, other ints small."""
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if dtype == np.int8:
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-8 if np.issubdtype(dtype, np.signedinteger) else 0, 9, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


ROUNDING_FLIPS = 1e-3  # integer outputs of float arithmetic: the share of elements that may be 1 off


class ToleranceCheck:
    """Workload.check's rule for a bare function: exact for integers, else rtol = atol = base * widen,
    atol scaled by the largest expected magnitude (base 1e-5, or 1e-2 for 16-bit floats). With
    ``float_math`` (the function computes in floating point), an integer output may differ by 1
    in at most ``ROUNDING_FLIPS`` of its elements: a value rounded to an integer (a quantize
    after a float layer norm) lands on the other side of a .5 when a candidate sums in another
    order (one element in 98304 of int8 BERT's layer norm, in every candidate)."""

    def __init__(self, names: list[str], widen: float, float_math: bool = False) -> None:
        self.names = names
        self.widen = widen
        self.float_math = float_math

    def __call__(self, actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
        for got, want, name in zip(actual, expected, self.names, strict=True):
            if got.shape != want.shape:
                raise AssertionError(f"output {name} has shape {got.shape}, expected {want.shape}")
            if not np.issubdtype(want.dtype, np.inexact):
                self._integers(got, want, name)
                continue
            base = 1e-2 if want.dtype.itemsize <= 2 else 1e-5
            tol = base * self.widen
            scale = max(1.0, float(np.abs(want.astype(np.float64)).max()))
            np.testing.assert_allclose(
                got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * scale, err_msg=f"output {name}"
            )

    def _integers(self, got: np.ndarray, want: np.ndarray, name: str) -> None:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64)) if want.dtype != np.bool_ else got != want
        flips = int(np.count_nonzero(diff))
        if self.float_math and flips <= ROUNDING_FLIPS * want.size and (flips == 0 or diff.max() <= 1):
            return
        np.testing.assert_array_equal(got, want, err_msg=f"output {name}")


def make_reference(
    func: PrimFunc, workload: Workload | None, seed: int
) -> tuple[list[np.ndarray], list[int], list[np.ndarray], Any]:
    """(inputs, output positions, expected outputs, checker) for the candidates of ``func``."""
    from ...runtime.module import build, signature

    if workload is not None:
        inputs = workload.make_inputs(seed)
        n_in, n_out = len(workload.inputs), len(workload.outputs)
        if len(func.params) != n_in + n_out:
            raise ValueError(
                f"the function takes {len(func.params)} parameters but workload {workload.key} has "
                f"{n_in} inputs and {n_out} outputs"
            )
        return inputs, list(range(n_in, n_in + n_out)), workload.reference(*inputs), workload.check

    params = signature(func)
    scalars = [p.name for p in params if p.kind != "buffer"]
    if scalars:
        raise ValueError(f"cannot measure a function with scalar parameters ({', '.join(scalars)}) without a workload")
    if any(s is None for p in params for s in p.shape):
        raise ValueError("cannot measure a function with symbolic buffer shapes without a workload")
    rng = np.random.default_rng(seed)
    out_positions = [k for k, p in enumerate(params) if p.written]
    if not out_positions:
        raise ValueError("the function writes none of its parameters, so there is nothing to measure")
    args = []
    for p in params:
        dt = numpy_dtype(parse_dtype(p.dtype))
        shape = tuple(int(s) for s in p.shape)
        args.append(np.zeros(shape, dt) if p.written else _random_input(shape, dt, rng))
    build(func, None)(*args)  # the unscheduled function, compiled as is for the host
    inputs = [a for k, a in enumerate(args) if k not in out_positions]
    expected = [args[k] for k in out_positions]
    widen = max(1.0, math.sqrt(_reduction_size(func)) / 8)
    names = [params[k].name for k in out_positions]
    return inputs, out_positions, expected, ToleranceCheck(names, widen, computes_in_float(func))


def computes_in_float(func: PrimFunc) -> bool:
    """Whether any buffer of ``func`` (a parameter or one a block allocates) holds floats."""
    buffers = list(func.buffers)
    post_order_visit(func.body, lambda n: buffers.extend(n.alloc_buffers) if isinstance(n, Block) else None)
    return any(b.dtype.is_float for b in buffers)
