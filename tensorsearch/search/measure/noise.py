"""Timing on a shared machine: the latency statistic, the reference kernel, and how disturbed a run was.

On a CPU, noise only ever adds time: another process on a core, a sibling hyperthread, a
frequency dip. So a candidate's latency is the **fastest** of its timed repeats (each repeat is
back-to-back calls lasting at least 20 ms), and a candidate timed again (the tuner's finalists)
keeps the fastest of all its samples: a re-timing under load can never make a record slower.
Every figure the tuner shows (progress bar, curve, summary, ``TuneResult``, ``tensorsearch
show``, the model's task table) is this one statistic, named ``min`` where it is printed.

The fastest repeat cannot help when every repeat was slowed (a neighbour that spins for the
whole run). So each runner times a **reference kernel** beside every candidate, just before and
just after it: a parallel loop of dependent multiply-adds whose data stay in L1, which only a
lack of CPU can slow down. Its time over the quietest time it has taken on this machine is the
candidate's *disturbance* (1.0: the machine was as quiet as it has been seen). A candidate
timed with a disturbance above ``DISTURBED`` is timed once more (unless it is too slow to become
the best even on a quiet host), and keeps all its samples; if it is still disturbed, its record
says so. The quietest reference time is kept per CPU
model and thread count in the cache directory (``$TENSORSEARCH_CACHE/reference``, else
``~/.cache/tensorsearch/reference``), so a run on a machine that is busy from the start still
knows what quiet looked like. :class:`HostConditions` sums up a run: how many timings were
disturbed and by how much, and whether its best can be trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LATENCY_STATISTIC = "min"  # how a candidate's repeats make its latency (the name printed beside it)
DISTURBED = 1.25  # a timing whose reference ran this much slower than quiet is disturbed
UNTRUSTED_SHARE = 0.25  # a run with more of its timings disturbed than this warns

REFERENCE = """
@T.prim_func
def reference(A: T.Buffer((4096,), "float32")):
    for t in T.parallel(64):
        for r in T.serial(2048):
            for j in T.serial(64):
                A[t * 64 + j] = A[t * 64 + j] * T.float32(0.999) + T.float32(0.001)
"""


def latency_of(samples: Iterable[float]) -> float:
    """A candidate's latency from its timed repeats: the fastest (``LATENCY_STATISTIC``);
    ``math.inf`` without samples."""
    return min(samples, default=math.inf)


def reference_dir() -> Path:
    """Where the quietest reference times are kept (see the module docstring)."""
    root = os.environ.get("TENSORSEARCH_CACHE")
    if root:
        return Path(root).expanduser() / "reference"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tensorsearch" / "reference"


class ReferenceClock:
    """The reference kernel, built once in a runner's process and timed beside its candidates."""

    REPEATS = 3
    CALLS = 4  # calls per repeat: about 1 ms of work on 2 threads

    def __init__(self, cpu: str, threads: int) -> None:
        import numpy as np

        from ...runtime import build
        from ...script import parse

        self.module = build(parse(REFERENCE))
        self.data = np.random.default_rng(0).uniform(0.5, 1.5, 4096).astype(np.float32)
        digest = hashlib.sha256(f"{REFERENCE}{cpu}{threads}".encode()).hexdigest()[:16]
        self.path = reference_dir() / f"{cpu.replace('/', '_')}-{threads}t-{digest}.json"
        self.quiet = self._load()

    def _load(self) -> float:
        try:
            return float(json.loads(self.path.read_text())["quiet_seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            return math.inf

    def _save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"quiet_seconds": self.quiet}))
            tmp.replace(self.path)
        except OSError:
            pass  # a read-only cache only costs the next run its memory of a quiet machine

    def seconds(self) -> float:
        """The reference's time now: its fastest repeat."""
        return self.module.time(self.data, number=self.CALLS, repeat=self.REPEATS).min

    def disturbance(self, *seconds: float) -> float:
        """How much slower than quiet the reference ran in ``seconds`` (their mean over the
        quietest time seen, at least 1); a new quietest time is remembered."""
        fastest = min(seconds)
        if fastest < self.quiet:
            self.quiet = fastest
            self._save()
        return max(1.0, statistics.fmean(seconds) / self.quiet)


@dataclass(frozen=True)
class HostConditions:
    """How disturbed the host was while a run timed its candidates (see the module docstring)."""

    timings: int  # candidates timed with a reference beside them
    disturbed: int  # of those, how many were still disturbed after their second timing
    median: float  # the median disturbance (1.0: quiet)
    worst: float  # the largest

    @classmethod
    def of(cls, disturbances: Sequence[float | None]) -> HostConditions:
        known = [d for d in disturbances if d is not None]
        if not known:
            return cls(0, 0, 1.0, 1.0)
        return cls(len(known), sum(d > DISTURBED for d in known), statistics.median(known), max(known))

    @property
    def trusted(self) -> bool:
        """Whether few enough timings were disturbed for the run's best to stand."""
        return self.disturbed <= UNTRUSTED_SHARE * self.timings

    def line(self) -> str:
        """One line for a summary: ``host: quiet (48 timings, reference at most 1.08x its quiet time)``."""
        if not self.timings:
            return "host: not measured (no reference timings)"
        state = "quiet" if not self.disturbed else f"disturbed in {self.disturbed} of {self.timings} timings"
        return (
            f"host: {state} (reference at {self.median:.2f}x its quiet time by the median, "
            f"at most {self.worst:.2f}x, over {self.timings} timings)"
        )

    def warning(self) -> str | None:
        """The warning a run gives when its best cannot be trusted, else None."""
        if self.trusted:
            return None
        return (
            f"the host was busy while this run timed its candidates: {self.disturbed} of {self.timings} timings "
            f"ran with the reference kernel over {DISTURBED}x its quiet time (median {self.median:.2f}x); "
            "latencies are inflated and the best may be wrong: re-time on a quieter machine "
            "(or with fewer other jobs running)"
        )

    def to_json(self) -> dict[str, Any]:
        return {"timings": self.timings, "disturbed": self.disturbed, "median": self.median, "worst": self.worst}
