"""``tile_with_intrin``: perform a matcher mapping with schedule primitives (recorded in the trace).

    sch = Schedule(workloads.make("GMM", (1, 64, 64, 64), "int8").func)
    outer = tile_with_intrin(sch, sch.get_block("Z"), hw.intrinsic("vnni_dot_16x4_u8i8i32"))
    sch.tensorize(outer, "vnni_dot_16x4_u8i8i32")

The steps, each an ordinary traced primitive: ``reindex`` every operand the plan stages (a
layout transform, or padding of a buffer not indexed by plain iterators); ``pad_einsum`` when an
extent is not a multiple of the intrinsic's; ``transform_layout`` of each staged buffer into the
intrinsic's packed tile layout; ``decompose_reduction`` at the outermost loop when the block has an
init (the init stays outside the tensorized region); ``split`` of each mapped loop by the
intrinsic's extent; ``reorder`` so that the inner loops come last in the intrinsic's iterator
order; ``blockize`` at the first inner loop. The returned block's body is the inner block computing
the intrinsic's semantics on one tile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import Var
from .matcher import Mapping, match
from .schema import Intrinsic

if TYPE_CHECKING:  # the schedule package is imported lazily (it may import this package)
    from ..schedule import BlockRV, LoopRV, Schedule

__all__ = ["tile_with_intrin"]


def _access(sch: Schedule, block: BlockRV, buffer_prefix: str, written: bool) -> tuple[str, int]:
    from ..schedule import InvalidArgument

    blk = sch.get(block)
    regions = blk.writes if written else blk.reads
    kind = "write" if written else "read"
    exact = [i for i, r in enumerate(regions) if r.buffer.name == buffer_prefix]
    if exact:
        return (kind, exact[0])
    near = [i for i, r in enumerate(regions) if r.buffer.name.startswith(buffer_prefix)]
    if not near:
        raise InvalidArgument(
            f"tile_with_intrin: block {blk.name} no longer {kind}s a buffer named {buffer_prefix}*", block=blk.name
        )
    return (kind, near[0])


def tile_with_intrin(
    sch: Schedule,
    block: BlockRV,
    intrin: Intrinsic,
    mapping: Mapping | int | None = None,
    decompose_init: bool = True,
) -> BlockRV:
    """Tile ``block`` so that its innermost loops compute ``intrin``; return the blockized block.

    ``mapping`` is one of ``match(...).feasible`` (or its index); by default the best unfused
    one. ``decompose_init=False`` keeps the init in the returned (outer) block, for a caller
    that tiles it further and decomposes the reduction later (the search's postprocessor). Raises :class:`~tensorsearch.schedule.InvalidArgument` naming the block, the intrinsic
    and the matcher's reasons when no mapping applies; on any failure the schedule is left as it
    was.
    """
    from ..schedule import InvalidArgument, ScheduleError

    blk = sch.get(block)
    report = match(sch.func, blk.name, intrin)
    if isinstance(mapping, int):
        if not 0 <= mapping < len(report.feasible):
            raise InvalidArgument(
                f"tile_with_intrin: block {blk.name} has {len(report.feasible)} feasible mappings onto "
                f"{intrin.name}; mapping index {mapping} is out of range",
                block=blk.name,
            )
        mapping = report.feasible[mapping]
    if mapping is None:
        usable = [m for m in report.feasible if not m.fused]
        if not usable:
            why = "; ".join(str(r) for r in report.infeasible) or "only fused mappings exist"
            raise InvalidArgument(
                f"tile_with_intrin: block {blk.name} cannot be computed by intrinsic {intrin.name}: {why}",
                block=blk.name,
            )
        mapping = usable[0]
    if mapping.fused:
        raise InvalidArgument(
            f"tile_with_intrin: block {blk.name}: the mapping fuses "
            + ", ".join("*".join(m.workload_iters) for m in mapping.iterators if m.fused)
            + f" onto intrinsic {intrin.name}'s iterators; only unfused mappings are performed (pick another)",
            block=blk.name,
        )
    snap = sch._snapshot()
    try:
        return _apply(sch, block, intrin, mapping, decompose_init)
    except ScheduleError:
        sch._restore(snap)
        raise


def _apply(sch: Schedule, block: BlockRV, intrin: Intrinsic, mapping: Mapping, decompose_init: bool) -> BlockRV:
    from ..schedule import InvalidArgument

    stage = [o for o in mapping.operands if o.needs_transform]
    staged: dict[str, str] = {}
    for o in stage:
        access = _access(sch, block, o.buffer, o.access[0] == "write")
        rb = sch.reindex(block, access)
        staged[o.operand] = sch.get(rb).name
    if mapping.needs_padding:
        pads = [
            next((m.intrin_extent for m in mapping.iterators if name in m.workload_iters and m.padding), 1)
            for name, _, _ in mapping.block_iters
        ]
        sch.pad_einsum(block, pads)
    for o in stage:
        if o.index_map is None:
            continue
        access = _access(sch, block, staged[o.operand], o.access[0] == "write")
        sch.transform_layout(block, access, o.index_map)
    if decompose_init and sch.get(block).init is not None:
        sch.decompose_reduction(block, sch.get_loops(block)[0])
    loops = sch.get_loops(block)
    realize, _ = sch._block_realize(block)
    by_var = {sch.get(lp).loop_var: lp for lp in loops}
    loop_of: dict[str, LoopRV] = {}
    cur = sch.get(block)
    for iv, value in zip(cur.iter_vars, realize.iter_values, strict=True):
        name = next(n for n, _, _ in mapping.block_iters if iv.var.name == n)
        if not (isinstance(value, Var) and value in by_var):
            raise InvalidArgument(
                f"tile_with_intrin: block {cur.name}'s iterator {name} is bound to {value}, not to one loop; "
                "the mapping needs each mapped iterator bound to its own loop",
                block=cur.name,
            )
        loop_of[name] = by_var[value]
    inner: list[LoopRV] = []
    split_outer: dict[str, LoopRV] = {}
    for m in mapping.iterators:
        w = m.workload_iters[0]
        lo, li = sch.split(loop_of[w], [None, m.intrin_extent])
        split_outer[w] = lo
        inner.append(li)
    order = [split_outer.get(lp_name, loop_of[lp_name]) for lp_name in loop_of] + inner
    sch.reorder(order)
    return sch.blockize(inner[0])
