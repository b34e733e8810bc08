"""Placeholder: CachePrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class CachePrimitives(ScheduleState):
    pass
