"""What the schedule rules share: the annotations a rule leaves for the postprocessors, the facts
about a block that rules ask, the :class:`ScheduleRule` base and :class:`SearchSpaceError`.

The bottom of the design space: it imports nothing else of the search, and the CPU and GPU rules
(:mod:`.cpu`, :mod:`.gpu`), the postprocessors (:mod:`..postproc`), the mutators and the analytic
traces (:mod:`.heuristics`) import it.
"""

from __future__ import annotations

from typing import Any

from ...ir import IntImm, Var
from ...ir.functor import free_vars
from ...ir.stmt import Block, IterType
from ...schedule import BlockRV, Schedule

# annotations a rule leaves on a block or loop for a postprocessor (or a mutator) to read
TILING_STRUCTURE = "meta_schedule.tiling_structure"
AUTO_TENSORIZE = "meta_schedule.auto_tensorize"
PARALLEL = "meta_schedule.parallel"
VECTORIZE = "meta_schedule.vectorize"
UNROLL = "meta_schedule.unroll_explicit"
COOPERATIVE_FETCH = "meta_schedule.cooperative_fetch"
THREAD_EXTENTS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


class SearchSpaceError(ValueError):
    """A rule set or rule parameter that cannot be used (names the rule and the parameter)."""


# --------------------------------------------------------------------------------------------
# block facts the rules need


def iter_kinds(sch: Schedule, block: BlockRV) -> dict[Var, str]:
    """loop var -> "S" or "R": the kind of the block iterators each loop is bound to ("R" wins)."""
    realize, _ = sch._block_realize(block)
    blk = realize.block
    kinds: dict[Var, str] = {}
    for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
        kind = "R" if iv.iter_type == IterType.REDUCE else "S"
        for v in free_vars(value):
            if kinds.get(v) != "R":
                kinds[v] = kind
    return kinds


def is_reduction(sch: Schedule, block: BlockRV) -> bool:
    return any(iv.iter_type == IterType.REDUCE for iv in sch.get(block).iter_vars)


def trivially_bound(sch: Schedule, block: BlockRV) -> bool:
    """Every iterator bound to one distinct loop variable (or a unit one to a constant), all
    loops of constant extent."""
    realize, _ = sch._block_realize(block)
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    loop_vars = {lp.loop_var for lp in loops}
    seen = set()
    for value in realize.iter_values:
        if isinstance(value, IntImm):
            continue  # a unit iterator bound to its only value
        if not (isinstance(value, Var) and value in loop_vars) or value in seen:
            return False
        seen.add(value)
    return all(isinstance(lp.extent, IntImm) for lp in loops)


def any_tensorized(sch: Schedule, blocks: list[BlockRV]) -> bool:
    """Whether one of ``blocks`` is (or, annotated for auto-tensorize, will be) an intrinsic's
    tile: an intrinsic reads its operands directly, so nothing can be inlined into or out of it."""
    return any(in_intrinsic_tile(sch, b) or dict(sch.get(b).annotations).get(AUTO_TENSORIZE) for b in blocks)


def in_intrinsic_tile(sch: Schedule, block: BlockRV) -> bool:
    """Whether the block is the inner block of a tile marked for tensorization."""
    path = sch._block(block).path
    return any(isinstance(n, Block) and dict(n.annotations).get(AUTO_TENSORIZE) for n in path[:-1])


def extent(sch: Schedule, loop: Any) -> int:
    ext = sch.get(loop).extent
    return ext.value if isinstance(ext, IntImm) else -1


# --------------------------------------------------------------------------------------------
# the base of every rule


class ScheduleRule:
    """A rule: ``apply(sch, block)`` returns the schedules it makes (``[sch]`` when it does not apply).

    Rules may change ``sch`` in place when they return exactly it; a rule that forks copies."""

    name = "ScheduleRule"
    params: dict[str, Any] = {}
    rewrites_program = False  # True: applied once to every block before the others (returns one schedule)

    def __init__(self, **params: Any) -> None:
        self.check_params(params)
        self.config = {**type(self).params, **{k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}}

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        """SearchSpaceError naming the parameter when ``params`` has an unknown name or wrong type."""
        allowed = cls.params
        for key, value in params.items():
            if key not in allowed:
                known = ", ".join(allowed) or "none"
                raise SearchSpaceError(f"rule {cls.name} has no parameter {key!r}; its parameters are: {known}")
            default = allowed[key]
            if isinstance(default, list):
                ok = isinstance(value, list | tuple) and all(
                    isinstance(v, type(default[0])) and not isinstance(v, bool) for v in value
                )
                what = f"a list of {type(default[0]).__name__}"
            else:
                ok = isinstance(value, type(default)) and (isinstance(default, bool) or not isinstance(value, bool))
                what = f"a {type(default).__name__}"
            if not ok:
                raise SearchSpaceError(f"rule {cls.name} parameter {key} must be {what}, got {value!r}")

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config.items())
        return f"{self.name}({args})"
