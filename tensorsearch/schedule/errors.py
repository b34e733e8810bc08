"""The ScheduleError family: one sentence naming the block, the loop and the rule broken.

Every primitive raises a subclass of :class:`ScheduleError` when its arguments or the program
do not satisfy the primitive's rule, and leaves the schedule exactly as it was.  The
``error_detail`` level of the Schedule decides how much is rendered:

* ``"detail"``: the sentence, then the relevant IR fragment (the block or loop nest);
* ``"fast"``: the sentence only;
* ``"none"``: only the primitive's name and the error class (cheapest, for the search).
"""

from __future__ import annotations

from collections.abc import Callable


class ScheduleError(ValueError):
    """A schedule primitive refused its arguments; ``sch.func`` and ``sch.trace`` are unchanged."""

    rule = "schedule rule"

    def __init__(
        self,
        message: str,
        *,
        block: str | None = None,
        loop: str | None = None,
        fragment: Callable[[], str] | str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.block = block
        self.loop = loop
        self._fragment = fragment
        self.primitive: str | None = None

    @property
    def fragment(self) -> str | None:
        """The IR fragment that shows the problem (rendered on first use)."""
        if callable(self._fragment):
            try:
                self._fragment = self._fragment()
            except Exception as err:  # rendering a fragment must never hide the error
                self._fragment = f"(fragment unavailable: {err})"
        return self._fragment

    def render(self, level: str) -> str:
        if level == "none":
            return f"{self.primitive or 'schedule primitive'} failed: {type(self).__name__}"
        if level == "detail" and self.fragment:
            return f"{self.message}\n{self.fragment}"
        return self.message

    def __str__(self) -> str:
        return self.args[0] if self.args else self.message


class InvalidArgument(ScheduleError):
    """An argument has the wrong type, value or count."""


class BlockNotFound(ScheduleError):
    """No block of that name, or a BlockRV that no longer refers to a block."""


class LoopNotFound(ScheduleError):
    """A LoopRV whose loop was removed by an earlier primitive (split, fuse, ...)."""


class NotAffineBinding(ScheduleError):
    """A block's iterator bindings are not a quasi-affine map of the loops around it."""


class LoopStructureError(ScheduleError):
    """Loops are not in the shape the primitive needs (not nested, not perfectly nested, ...)."""


class LoopKindError(ScheduleError):
    """A loop cannot take that kind (parallel, vectorized, unrolled, thread-bound)."""


class NotCompleteBlock(ScheduleError):
    """The block is not complete: it has reduce iterators, or it is not the only writer of its outputs."""


class NotReductionBlock(ScheduleError):
    """The block is not a reduction block of the form the primitive needs."""


class RegionCoverError(ScheduleError):
    """A producer does not cover the region its consumers read (or the reverse)."""


class StagePipelineError(ScheduleError):
    """The blocks in the scope do not form a stage pipeline (one writer per buffer, producers first)."""


class OutputBlockError(ScheduleError):
    """The primitive cannot move or inline a block that writes an output buffer of its scope."""


class InlineError(ScheduleError):
    """The block's body or its producers/consumers are not of the form (reverse) inlining needs."""


class CacheError(ScheduleError):
    """A cache or layout primitive cannot apply to that buffer."""


class DecisionError(ScheduleError):
    """A sampling decision is outside the candidates, or a trace's decision does not fit."""
