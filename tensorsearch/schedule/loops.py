"""Placeholder: LoopPrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class LoopPrimitives(ScheduleState):
    pass
