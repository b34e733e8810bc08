"""How candidates are measured: :class:`MeasureConfig`, one frozen object that the
:class:`~.measurer.Measurer`, :func:`~tensorsearch.search.tuning.tuner.tune` and
:func:`~tensorsearch.search.tuning.scheduler.tune_model` take (their older keyword arguments
make one, :func:`measure_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class MeasureConfig:
    """``timeout_s``: a candidate whose check run (or timing, plus three times its expected time)
    lasts longer is ``"run: timed out"``; ``build_timeout_s``: a build running longer is cancelled;
    ``fp_contract``: ``a * b + c`` compiled into FMA; ``number`` (None: grow until a repeat takes
    ``min_repeat_ms``) and ``repeat``: passed to ``mod.time``; ``check``: compare a candidate's
    outputs with the reference's on its first measurement; ``flush_cache``: every timed call after
    the caches are flushed (one call a repeat); ``allow_other_cpu``: time on nodes whose CPU is
    not the descriptor's too (see :class:`~.measurer.Measurer`)."""

    timeout_s: float = 10.0
    build_timeout_s: float = 120.0
    fp_contract: bool = True
    number: int | None = None
    repeat: int = 3
    check: bool = True
    min_repeat_ms: float = 20.0
    flush_cache: bool = False
    allow_other_cpu: bool = False

    def __post_init__(self) -> None:
        if (self.number is not None and self.number < 1) or self.repeat < 1:
            raise ValueError(f"number and repeat must be at least 1, got number={self.number}, repeat={self.repeat}")
        object.__setattr__(self, "timeout_s", float(self.timeout_s))
        object.__setattr__(self, "build_timeout_s", float(self.build_timeout_s))
        object.__setattr__(self, "min_repeat_ms", float(self.min_repeat_ms))
        object.__setattr__(self, "repeat", int(self.repeat))


_DEFAULTS = {f.name: f.default for f in fields(MeasureConfig)}


def measure_config(config: MeasureConfig | None, **kwargs: Any) -> MeasureConfig:
    """``config``, or one made of the older keyword arguments (``timeout_s=...``, ...); both at
    once only where every keyword argument keeps its default (else ValueError: which wins is
    not guessed)."""
    if config is None:
        return MeasureConfig(**kwargs)
    changed = sorted(k for k, v in kwargs.items() if v != _DEFAULTS[k])
    if changed:
        raise ValueError(f"give a MeasureConfig or the keyword arguments {', '.join(changed)}, not both")
    return config
