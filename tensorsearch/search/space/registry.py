"""The registry of rule names a descriptor's ``search: rules:`` may list (:data:`RULES`):
:func:`listed_rules`, a descriptor's list, and :func:`cpu_rules_for`, a CPU's defaults
(:func:`.kind.rules_for` picks between them and the GPU's defaults).
"""

from __future__ import annotations

from typing import Any

from ...target import Hardware
from .cpu import (
    AddRFactor,
    AutoInline,
    MultiLevelTiling,
    MultiLevelTilingWithIntrin,
    ParallelizeVectorizeUnroll,
    RandomComputeLocation,
    SplitStridePhases,
    TileLayoutCopy,
)
from .rule import ScheduleRule, SearchSpaceError

RULES: dict[str, type[ScheduleRule]] = {
    r.name: r
    for r in (
        SplitStridePhases,
        AutoInline,
        AddRFactor,
        MultiLevelTilingWithIntrin,
        MultiLevelTiling,
        ParallelizeVectorizeUnroll,
        RandomComputeLocation,
        TileLayoutCopy,
    )
}


def listed_rules(hardware: Hardware) -> list[ScheduleRule] | None:
    """The rules its YAML's ``search.rules`` lists, None when it lists none. A rule name or
    parameter the search does not know is a SearchSpaceError naming the file and the key
    (``x.yaml: search.rules[2].MultiLevelTiling: ...``)."""
    spec = hardware.search
    if spec is None or not spec.rules:
        return None
    return [_make_rule(hardware, pos, name, dict(params)) for pos, (name, params) in enumerate(spec.rules)]


def cpu_rules_for(hardware: Hardware) -> list[ScheduleRule]:
    """The default rules of a CPU: SplitStridePhases, AutoInline, AddRFactor,
    MultiLevelTilingWithIntrin (when it lists intrinsics), MultiLevelTiling,
    ParallelizeVectorizeUnroll, RandomComputeLocation, TileLayoutCopy."""
    names = [name for name in RULES if name != "MultiLevelTilingWithIntrin" or hardware.intrinsics]
    return [_make_rule(hardware, pos, name, {}) for pos, name in enumerate(names)]


def _make_rule(hardware: Hardware, pos: int, name: str, kwargs: dict[str, Any]) -> ScheduleRule:
    where = f"{hardware.source or hardware.name}: search.rules[{pos}]"
    cls = RULES.get(name)
    if cls is None:
        raise SearchSpaceError(f"{where}: unknown schedule rule {name!r}; the rules are: {', '.join(RULES)}")
    try:
        cls.check_params(kwargs)
        if cls is MultiLevelTilingWithIntrin:
            return cls(intrinsics=hardware.intrinsics, **kwargs)
        if cls in (AddRFactor, ParallelizeVectorizeUnroll):
            return cls(cores=hardware.cores, **kwargs)
        if cls is MultiLevelTiling:
            return cls(vector_bits=hardware.vector_bits, **kwargs)
        return cls(**kwargs)
    except SearchSpaceError as err:
        raise SearchSpaceError(f"{where}.{name}: {err}") from None
