"""What the intrinsic layer reads of a hardware descriptor: the traits :meth:`.Requirements.why_not`
and :meth:`.Intrinsic.why_not` check and :func:`.resolve_sets` loads a descriptor's sets by (a
:class:`~.hardware.Hardware` has them all), so that :mod:`.intrinsics` needs no import of :mod:`.hardware`.
"""

from __future__ import annotations

from typing import Any, Protocol


class HardwareTraits(Protocol):
    """A hardware descriptor as an intrinsic's requirements see it."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...  # "cpu" or "gpu"

    @property
    def arch(self) -> str: ...

    @property
    def memory_scopes(self) -> tuple[str, ...]: ...

    @property
    def gpu(self) -> Any: ...  # its compute_capability is checked; None on a CPU

    @property
    def source(self) -> str | None: ...  # the descriptor's file: sets named by a path are found beside it

    def has_feature(self, feature: str) -> bool: ...
