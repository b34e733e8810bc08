"""Placeholder: BlockizePrimitives are being written."""

from __future__ import annotations

from .state import ScheduleState


class BlockizePrimitives(ScheduleState):
    pass
