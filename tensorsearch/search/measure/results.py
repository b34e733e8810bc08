"""What a measurement gives back: :class:`BuildResult` (a candidate built), :class:`RunResult` (a
runner's reply), :class:`MeasureResult` (a candidate's latencies, or its error, and
where and when it was timed), and :class:`MeasureStopped`, raised when a run stops mid-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...target import CpuIdentity
from .noise import latency_of


@dataclass(frozen=True)
class Prepack:
    """A candidate's stages that read only constants (a model's weights), built apart: the runner runs
    them once before the check, untimed. ``inputs``: the original parameters they read; ``params``:
    for each parameter of the timed part, an original parameter's index or a packed buffer
    (:class:`~tensorsearch.transform.ConstantSplit`)."""

    binary: bytes
    sidecar: str
    inputs: tuple[int, ...]
    params: tuple[int | tuple[str, int], ...]


@dataclass(frozen=True)
class BuildResult:
    """A candidate built: its library's (or, cross-compiled, its object file's) bytes and JSON
    sidecar, the node that built it and the seconds it took; or the error (``"build: ..."``)."""

    error: str | None
    seconds: float
    binary: bytes = b""
    is_object: bool = False  # an object file for another architecture: the runner links it
    sidecar: str = ""
    node: str | None = None
    prepack: Prepack | None = None
    cold: tuple[int, ...] = ()  # parameters of the timed part that hold constants: timed out of cache


@dataclass(frozen=True)
class RunResult:
    """A runner's reply to one call (:class:`~.runner.Runner`'s ``load_and_check`` or ``time``):
    the error (``"run: ..."``, ``"wrong result: ..."``) or None; the wall-clock window of the
    candidate's check and timing so far (``start``, ``end``); the check run's seconds (``first``;
    None from ``time``); the latencies timed (seconds per call, one per repeat); whether it ran
    under qemu; the reference kernel's slowdown beside it (None: not taken)."""

    error: str | None
    start: float
    end: float
    first: float | None = None
    latencies: tuple[float, ...] = ()
    emulated: bool = False
    disturbance: float | None = None


class MeasureStopped(RuntimeError):
    """The run stopped (:meth:`RunnerPool.stop`) while a batch was built or timed; the results
    given to ``on_result`` so far stand."""


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate: latencies (seconds per call, one per repeat), or an error."""

    latencies: tuple[float, ...]
    error: str | None
    build_seconds: float
    node: str | None = None  # the Ray node id of the runner that ran it (None: never run)
    run_start: float | None = None  # wall-clock seconds on that node: its check run began ...
    run_end: float | None = None  # ... and its timing ended
    emulated: bool = False  # run under qemu: checked, but its latency (qemu's wall time) ranks nothing
    measured_on: CpuIdentity | None = None  # the CPU of the node that timed it (None: a GPU's, emulated or never run)
    disturbance: float | None = None  # the reference kernel's slowdown beside it (.noise; None: not taken)

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.latencies) > 0

    @property
    def latency(self) -> float:
        """The fastest latency in seconds (:func:`~.noise.latency_of`); ``math.inf`` when it failed."""
        return latency_of(self.latencies) if self.ok else math.inf
