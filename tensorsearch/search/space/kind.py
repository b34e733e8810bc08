"""One search strategy per target kind: the rules, postprocessors and mutators a design space
gets, with the kind's :class:`~tensorsearch.runtime.backend.Backend` (lowering, code generator,
module type) it is built from.

:data:`SEARCH_KINDS` holds one :class:`SearchKind` per descriptor ``kind``; :func:`search_kind_for`
looks a hardware's up. This module and ``runtime.backend`` are the only places a kind name is
looked at (the layer test checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ...runtime.backend import BACKENDS, Backend
from ...target import Hardware
from ..postproc.common import Postproc
from ..postproc.gpu import gpu_postprocs_for
from ..postproc.registry import cpu_postprocs_for
from .gpu import gpu_rules_for
from .registry import cpu_rules_for, listed_rules
from .rule import ScheduleRule

__all__ = ["SEARCH_KINDS", "SearchKind", "postprocs_for", "rules_for", "search_kind_for"]


@dataclass(frozen=True)
class SearchKind:
    """What the search of one kind of hardware uses: ``default_rules(hw)`` (when its YAML lists
    no ``search.rules``), ``postprocs(hw)``, ``mutator_probs`` (the mutators' default
    probabilities, by name; None: ``SearchConfig``'s own) and ``backend``."""

    backend: Backend
    default_rules: Callable[[Hardware], list[ScheduleRule]]
    postprocs: Callable[[Hardware], list[Postproc]]
    mutator_probs: tuple[tuple[str, float], ...] | None = None


SEARCH_KINDS: dict[str, SearchKind] = {
    "cpu": SearchKind(BACKENDS["cpu"], cpu_rules_for, cpu_postprocs_for),
    # a GPU design space's tile and thread choices are categorical: only MutateSplitChoice
    "gpu": SearchKind(BACKENDS["gpu"], gpu_rules_for, gpu_postprocs_for, (("MutateSplitChoice", 1.0),)),
}


def search_kind_for(hardware: Hardware) -> SearchKind:
    """The search strategy of ``hardware``'s kind."""
    return SEARCH_KINDS[hardware.kind]


def rules_for(hardware: Hardware) -> list[ScheduleRule]:
    """The rules for a hardware descriptor: its YAML's ``search.rules`` list
    (:func:`.registry.listed_rules`), else the defaults of its kind."""
    listed = listed_rules(hardware)
    return search_kind_for(hardware).default_rules(hardware) if listed is None else listed


def postprocs_for(hardware: Hardware) -> list[Postproc]:
    """The postprocessors of the hardware's kind, in order."""
    return search_kind_for(hardware).postprocs(hardware)
