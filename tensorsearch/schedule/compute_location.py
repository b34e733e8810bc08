"""Placeholder: ComputeLocationPrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class ComputeLocationPrimitives(ScheduleState):
    pass
