"""Timing results and cache flushing for ``Module.time``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np


@dataclass(frozen=True)
class TimeResult:
    """Seconds per call of each repeat (``results``) and the calls per repeat (``number``)."""

    results: tuple[float, ...]
    number: int = 1

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def std(self) -> float:
        return statistics.pstdev(self.results) if len(self.results) > 1 else 0.0

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative range of the repeats."""
        m = self.median
        return (self.max - self.min) / m if m > 0 else 0.0

    def __str__(self) -> str:
        return (
            f"median {_fmt(self.median)}, mean {_fmt(self.mean)}, std {_fmt(self.std)}, "
            f"spread {self.spread:.1%} ({len(self.results)} repeats x {self.number} calls)"
        )


def time_repeats(
    run: Callable[[int], float],
    number: int,
    repeat: int,
    min_repeat_ms: float = 0,
    before_repeat: Callable[[], None] | None = None,
) -> TimeResult:
    """Time ``repeat`` repeats of ``run(number)`` (which makes ``number`` calls and returns the
    seconds they took) after one warm-up call. With ``min_repeat_ms``, ``number`` first grows
    until one repeat lasts at least that long; ``before_repeat`` runs untimed before each repeat."""
    if number < 1 or repeat < 1:
        raise ValueError("number and repeat must be at least 1")
    run(1)
    while min_repeat_ms > 0 and (ms := run(number) * 1e3) < min_repeat_ms:
        number = max(number * 2, math.ceil(number * min_repeat_ms / max(ms, 1e-3) * 1.1))
    results = []
    for _ in range(repeat):
        if before_repeat is not None:
            before_repeat()
        results.append(run(number) / number)
    return TimeResult(tuple(results), number)


def _fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds * 1e9:.1f} ns"


@cache
def l3_bytes_here() -> int | None:
    """The largest CPU cache of this machine (sysfs), or None where sysfs does not say."""
    import glob

    best = None
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(d + "/level") as f:
                level = int(f.read())
            with open(d + "/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * mult
        if level >= 2 and (best is None or size > best):
            best = size
    return best


@cache
def _flush_buffer(nbytes: int) -> np.ndarray:
    return np.ones(nbytes // 8, dtype=np.int64)


def flush_cache_now(l3_bytes: int | None = None) -> None:
    """Write a buffer twice the size of the last-level cache (at least 64 MiB, at most 1 GiB)."""
    size = l3_bytes or l3_bytes_here() or (32 << 20)
    nbytes = min(max(2 * size, 64 << 20), 1 << 30)
    buf = _flush_buffer(nbytes)
    buf += 1
