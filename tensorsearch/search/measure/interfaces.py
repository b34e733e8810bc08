"""The measurement's seams: a :class:`Builder` (candidates in, :class:`~.results.BuildResult`
out; :class:`~.builder.RayBuilder` by default) and a :class:`Runner` (what the runner pool
starts on each node: load and check a build, time it; :class:`~.runner.Runner`, a Ray actor, by
default). A :class:`~.measurer.Measurer` takes a builder (``builder=``); a
:class:`~.pool.RunnerPool` starts its ``actor_class`` (a Ray actor class of a :class:`Runner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ...ir.stmt import PrimFunc
from ...target import Hardware
from .results import BuildResult, Prepack, RunResult

if TYPE_CHECKING:
    from .pool import RunnerPool


class Builder(Protocol):
    """Builds a batch of candidates for ``target``: one :class:`BuildResult` per function, in
    order, a failure as its ``error`` (never an exception for a bad candidate). A build running
    longer than ``timeout_s`` is ``"build timed out after ... s"``. ``pool``: the runners the
    batch will time on (its ``niceness`` for the workers; :meth:`RunnerPool.check_stopping`
    between builds)."""

    def build(
        self, funcs: Sequence[PrimFunc], target: Hardware, timeout_s: float, pool: RunnerPool
    ) -> list[BuildResult]: ...


class Runner(Protocol):
    """A node's runner (one call at a time): :meth:`load_and_check` a build once (its reply's
    ``first``: the check run's seconds), then :meth:`time` it; :meth:`ready` says what the node
    can run (the pool refuses a node that cannot run the descriptor's code)."""

    def load_and_check(
        self,
        binary: bytes,
        is_object: bool,
        sidecar: str,
        check: bool,
        inputs: list[Any],
        out_positions: list[int],
        expected: list[Any],
        checker: Any,
        timeout_s: float = 600.0,
        prepack: Prepack | None = None,
        cold: Sequence[int] = (),
    ) -> RunResult: ...

    def time(
        self,
        number: int,
        repeat: int,
        min_repeat_ms: float,
        flush_cache: bool = False,
        retake_below: float | None = None,
    ) -> RunResult: ...

    def ready(self) -> dict[str, Any]: ...

    def crash_report(self, token: str) -> str | None: ...

    def close(self) -> None: ...
