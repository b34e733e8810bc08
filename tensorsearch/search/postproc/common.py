"""What the postprocessors share: the :class:`Postproc` base, the walk over a schedule's blocks
that survives rewrites (:func:`blocks`), and :class:`DisallowDynamicLoop`, which CPUs and GPUs both run.
"""

from __future__ import annotations

from typing import Any

from ...ir import Block, For, IntImm
from ...schedule import Schedule, ScheduleError
from ...schedule.tree import find_block, walk_nodes


class Postproc:
    name = "Postproc"

    def apply(self, sch: Schedule) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.name}()"


def block_names(sch: Schedule) -> list[str]:
    return [node.name for node in walk_nodes(sch.func.body) if isinstance(node, Block) and node.name != "root"]


def blocks(sch: Schedule, want: Any = None):
    """Every non-root block of ``sch`` that still exists when its turn comes (a rewrite of one block
    may remove or rename another) and, given ``want``, for which ``want(block)`` holds then (asked
    of the program directly, so the trace gets no lookup of a block the postprocessor skips)."""
    for name in block_names(sch):
        if want is not None:
            loc = find_block(sch.func, name)
            if loc is None or not want(loc.node):
                continue
        try:
            yield sch.get_block(name)
        except ScheduleError:
            continue


class DisallowDynamicLoop(Postproc):
    name = "DisallowDynamicLoop"

    def apply(self, sch: Schedule) -> bool:
        return all(isinstance(node.extent, IntImm) for node in walk_nodes(sch.func.body) if isinstance(node, For))
