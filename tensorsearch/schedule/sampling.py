"""Sampling primitives: random decisions recorded in the trace (TVM semantics).

Each takes a final ``decision`` argument: None samples afresh with the schedule's random state,
a value replays that decision (a DecisionError when it does not fit).
"""

from __future__ import annotations

import math
from typing import Any

from ..arith import simplify
from ..ir import IntImm
from .errors import DecisionError, InvalidArgument
from .rv import ExprRV, LoopRV
from .state import ScheduleState, primitive


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def prime_factors(n: int) -> list[int]:
    """The prime factors of ``n`` with multiplicity, ascending (12 -> [2, 2, 3])."""
    out = []
    p = 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _divisors(n: int) -> list[int]:
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d != n // d:
                large.append(n // d)
        d += 1
    return small + large[::-1]


class SamplingPrimitives(ScheduleState):
    @primitive(pure=True, sampling=True)
    def sample_categorical(self, candidates: list[int], probs: list[float], decision: int | None = None) -> ExprRV:
        """Sample one of ``candidates`` with the given (unnormalized) probabilities.

        The decision is the index of the chosen candidate. ::

            v = sch.sample_categorical(candidates=[0, 16, 64, 512], probs=[0.25] * 4)
            sch.get(v)   # e.g. 64 (decision 2)
        """
        if not isinstance(candidates, list | tuple) or not candidates or not all(_is_int(c) for c in candidates):
            raise InvalidArgument(
                f"sample_categorical: candidates must be a non-empty list of integers, got {candidates!r}"
            )
        if not isinstance(probs, list | tuple) or not all(
            isinstance(p, int | float) and not isinstance(p, bool) for p in probs
        ):
            raise InvalidArgument(f"sample_categorical: probs must be a list of numbers, got {probs!r}")
        if len(probs) != len(candidates):
            raise InvalidArgument(
                f"sample_categorical: {len(candidates)} candidates but {len(probs)} probabilities; they must match"
            )
        for pos, p in enumerate(probs):
            if not math.isfinite(p) or p < 0:
                raise InvalidArgument(
                    f"sample_categorical: probability {pos} is {p}; probabilities must be finite and non-negative"
                )
        if not sum(probs) > 0:
            raise InvalidArgument("sample_categorical: the probabilities sum to 0; at least one must be positive")
        n = len(candidates)
        if decision is None:
            index = self._rng.choices(range(n), weights=[float(p) for p in probs])[0]
        else:
            if not _is_int(decision) or not 0 <= decision < n:
                raise DecisionError(
                    f"sample_categorical: decision {decision!r} is not the index of one of the {n} candidates (0 to {n - 1})"
                )
            index = decision
        self._decide(index)
        return self._new_expr_rv(candidates[index])

    @primitive(pure=True, sampling=True)
    def sample_perfect_tile(
        self, loop: LoopRV, n: int, max_innermost_factor: int = 16, decision: list[int] | None = None
    ) -> list[ExprRV]:
        """Sample ``n`` tile sizes whose product is exactly the loop's (constant) extent.

        The innermost size is at most ``max_innermost_factor`` (-1: no bound); the decision is
        the list of sizes, outermost first. ::

            # for i in range(64)
            t = sch.sample_perfect_tile(i, n=3, max_innermost_factor=8)   # e.g. [4, 2, 8]
            i0, i1, i2 = sch.split(i, factors=t)
        """
        node = self._loop(loop).node
        name = node.loop_var.name
        if not _is_int(n) or n < 1:
            raise InvalidArgument(f"sample_perfect_tile: n must be a positive integer, got {n!r}")
        if not _is_int(max_innermost_factor) or (max_innermost_factor < 1 and max_innermost_factor != -1):
            raise InvalidArgument(
                f"sample_perfect_tile: max_innermost_factor must be a positive integer or -1, got {max_innermost_factor!r}"
            )
        extent_expr = simplify(node.extent)
        if not isinstance(extent_expr, IntImm):
            raise InvalidArgument(
                f"sample_perfect_tile: loop {name} has the non-constant extent {node.extent}; perfect tiles need a constant extent",
                loop=name,
            )
        extent = extent_expr.value
        limit = extent if max_innermost_factor == -1 else max_innermost_factor
        if decision is not None:
            if (
                not isinstance(decision, list | tuple)
                or len(decision) != n
                or not all(_is_int(f) and f > 0 for f in decision)
            ):
                raise DecisionError(
                    f"sample_perfect_tile: decision {decision!r} for loop {name} is not a list of {n} positive integers",
                    loop=name,
                )
            if math.prod(decision) != extent:
                raise DecisionError(
                    f"sample_perfect_tile: decision {list(decision)} for loop {name} multiplies to {math.prod(decision)}, "
                    f"not the loop's extent {extent}",
                    loop=name,
                )
            if decision[-1] > limit:
                raise DecisionError(
                    f"sample_perfect_tile: decision {list(decision)} for loop {name} has innermost factor {decision[-1]}, "
                    f"more than max_innermost_factor {max_innermost_factor}",
                    loop=name,
                )
            factors = [int(f) for f in decision]
        elif n == 1:
            if extent > limit:
                raise InvalidArgument(
                    f"sample_perfect_tile: loop {name} has extent {extent}, so a single tile exceeds max_innermost_factor {max_innermost_factor}",
                    loop=name,
                )
            factors = [extent]
        else:
            innermost = self._rng.choice([d for d in _divisors(extent) if d <= limit])
            outer = [1] * (n - 1)
            for p in prime_factors(extent // innermost):
                outer[self._rng.randrange(n - 1)] *= p
            factors = [*outer, innermost]
        self._decide(factors)
        return [self._new_expr_rv(f) for f in factors]
