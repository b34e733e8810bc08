"""The process environment the benchmarks time in (imported before numpy by each script).

``reexec_without_openblas_overrides()`` re-executes the script without ``OPENBLAS_CORETYPE`` /
``OPENBLAS_L2_SIZE`` (set on some machines for old OpenBLAS builds; they slow a current numpy, the
reference the benchmarks time against).

``reference_clock(threads)`` is the tuner's reference kernel, which the benchmarks time beside
their rounds to tell one the host disturbed (docs/search.md, "Timing on a shared machine").

``settle()`` pauses between two samples of different thread pools (TVM's, OpenBLAS's, ours):
a pool keeps its threads spinning for a while after its work returns, and a sample taken at once
shares the cores with them (ours re-timed DIL:0 at 2.39 ms right after a TVM sample, 1.11-1.14 ms
0.2 s later; docs/tvm-comparison.md).
"""

from __future__ import annotations

import os
import sys
import time
from functools import cache

_STRIP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
SETTLE_SECONDS = 0.2  # longer than a pool's spin after its work (ours, TVM's, OpenBLAS's)


def settle() -> None:
    """Wait until the thread pool of the previous sample has stopped spinning."""
    time.sleep(SETTLE_SECONDS)


def reexec_without_openblas_overrides() -> None:
    """Re-execute this script without the OpenBLAS overrides, once, before numpy is loaded."""
    if any(k in os.environ for k in _STRIP) and "numpy" not in sys.modules:
        env = {k: v for k, v in os.environ.items() if k not in _STRIP}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


@cache
def reference_clock(threads: int):
    """The tuner's reference kernel (``tensorsearch.search.measure.noise.ReferenceClock``) on ``threads``
    threads: timed before and after a benchmark's round, it tells a round the host disturbed."""
    from tensorsearch.search.measure.noise import ReferenceClock
    from tensorsearch.target.hardware import host_identity

    clock = ReferenceClock(host_identity().cpu, threads)
    clock.module.num_threads = threads
    return clock
