"""The rules a hardware gets: the registry of rule names a descriptor's ``search: rules:`` may
list (:data:`RULES`), and :func:`rules_for`, its list or the defaults of its kind (CPU rules from
:mod:`.cpu`, GPU rules from :mod:`.gpu`).
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
from .gpu import gpu_rules_for
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


def rules_for(hardware: Hardware) -> list[ScheduleRule]:
    """The rules for a hardware descriptor: its YAML's ``search.rules`` list, else the defaults
    for its kind (CPU: SplitStridePhases, AutoInline, AddRFactor, MultiLevelTilingWithIntrin (when
    it lists intrinsics), MultiLevelTiling, ParallelizeVectorizeUnroll, RandomComputeLocation,
    TileLayoutCopy). A rule name or parameter the search does not know is a SearchSpaceError
    naming the file and the key (``x.yaml: search.rules[2].MultiLevelTiling: ...``)."""
    if hardware.kind == "gpu" and not (hardware.search and hardware.search.rules):
        return gpu_rules_for(hardware)
    spec = hardware.search
    listed = spec.rules if spec is not None and spec.rules else None
    if listed is None:
        listed = tuple((name, ()) for name in RULES if name != "MultiLevelTilingWithIntrin" or hardware.intrinsics)
    return [_make_rule(hardware, pos, name, dict(params)) for pos, (name, params) in enumerate(listed)]


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
