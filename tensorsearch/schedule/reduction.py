"""Placeholder: ReductionPrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class ReductionPrimitives(ScheduleState):
    pass
