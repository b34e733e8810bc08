"""Placeholder: SamplingPrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class SamplingPrimitives(ScheduleState):
    pass
