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
the intrinsic's semantics on one tile. A unit on tile registers (AMX) walks the reduction itself:
its tile is blockized above the reduction's outer loop (16 x 16 over all of ``k``), whose
iterations become the unit's steps.

A *fused* mapping (several workload iterators playing one intrinsic iterator, e.g. a
convolution's ``rh, rw, rc`` as VNNI's ``k``) first merges the block's fused iterators into one
with ``transform_block_layout``, then tiles the merged block as an unfused mapping; each operand
the merged iterator indexes is gathered (``reindex``, the im2col copy) and padded, and the gather
is inlined into the padding copy, so it is copied once. C2D with 3 input channels
(``k <- rh * rw * rc``, 147 padded to 148), before::

    conv2d_nhwc[nn, hh, ww, cc] += PadInput[nn, hh * 2 + rh, ww * 2 + rw, rc] * weight[rh, rw, rc, cc]

after ``transform_block_layout`` (``v0 .. v3`` spatial (1, 112, 112, 64), ``v4`` reduce (147))::

    conv2d_nhwc[0, v1, v2, v3] += PadInput[0, v1 * 2 + v4 // 21, v2 * 2 + v4 // 3 % 7, v4 % 3] * weight[v4 // 21, v4 // 3 % 7, v4 % 3, v3]

and after the tiling's staging, one copy per operand in the intrinsic's layout (here for a 3x3
kernel over 3 channels, 27 padded to 28; tests/test_intrin_match.py has the whole program)::

    PadInput_reindex_pad[v0 // 4, v0 % 4] = T.Select(v0 < 27, PadInput[0, v0 // 9, v0 // 3 % 3, v0 % 3], T.uint8(0))
    weight_reindex_pad[0, v1 // 4, v0, v1 % 4] = T.Select(v1 < 27, weight[v1 // 9, v1 // 3 % 3, v1 % 3, v0], T.int8(0))

Grouped convolution (``cc // 32`` selects the input channels) is split first, ``cc`` into
``(cc // 32, cc % 32)``, by the same primitive (the matcher's per-group mappings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ir import IntImm, Var
from ..target.intrinsics import Intrinsic, LLVMTileCall
from ..target.matcher import Mapping, fused_index, group_split_map, match
from .errors import InvalidArgument, ScheduleError
from .rv import BlockRV, LoopRV
from .units import register_blocking

if TYPE_CHECKING:
    from .schedule import Schedule

__all__ = ["tile_with_intrin"]


def _access(sch: Schedule, block: BlockRV, buffer_prefix: str, written: bool) -> tuple[str, int]:

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

    ``mapping`` is one of ``match(...).feasible`` (or its index); by default the best (the
    matcher's rank: the least estimated cost of padding and staging copies, then unfused, then
    the fewest layout transforms). ``decompose_init=False`` keeps the init in the returned (outer) block, for a caller
    that tiles it further and decomposes the reduction later (the search's postprocessor). Raises :class:`~tensorsearch.schedule.InvalidArgument` naming the block, the intrinsic
    and the matcher's reasons when no mapping applies; on any failure the schedule is left as it
    was.
    """

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
        if not report.feasible:
            why = "; ".join(str(r) for r in report.infeasible)
            raise InvalidArgument(
                f"tile_with_intrin: block {blk.name} cannot be computed by intrinsic {intrin.name}: {why}",
                block=blk.name,
            )
        mapping = report.feasible[0]
    snap = sch._snapshot()
    try:
        if mapping.split:
            mapping = _split_groups(sch, block, intrin, mapping)
        if mapping.fused:
            mapping = _fuse(sch, block, intrin, mapping)
        return _apply(sch, block, intrin, mapping, decompose_init)
    except ScheduleError:
        sch._restore(snap)
        raise


def _split_groups(sch: Schedule, block: BlockRV, intrin: Intrinsic, mapping: Mapping) -> Mapping:
    """Split the grouped iterator (``transform_block_layout``, grouped convolution's ``cc`` into
    ``(cc // 32, cc % 32)``) and return the split block's mapping that maps the same iterators."""

    name, size = mapping.split
    sch.transform_block_layout(block, group_split_map(sch.get(block), name, size))
    report = match(sch.func, sch.get(block).name, intrin)
    for m in report.feasible:
        if m.iter_map == mapping.iter_map and not m.split:
            return m
    raise InvalidArgument(
        f"tile_with_intrin: after splitting {name} of block {sch.get(block).name} into groups of {size}, "
        f"intrinsic {intrin.name} no longer maps onto it the same way",
        block=sch.get(block).name,
    )


def _merge_map(dims: tuple[str, ...], groups: list[tuple[str, ...]], extents: dict[str, int]) -> str:
    """The index map (lambda text) over ``dims`` that merges each group of fused dims into one,
    at the place of the group's first dim; other dims stay."""
    out = []
    for d in dims:
        group = _group(d, groups)
        if d == next(x for x in dims if x in group):
            out.append(fused_index(tuple(x for x in dims if x in group), extents))
    return f"lambda {', '.join(dims)}: ({', '.join(out)}{',' if len(out) == 1 else ''})"


def _fuse(sch: Schedule, block: BlockRV, intrin: Intrinsic, mapping: Mapping) -> Mapping:
    """Merge the block's fused iterators into one (``transform_block_layout``, see the module
    docstring) and return the unfused mapping of the merged block that maps the same iterators."""

    extents = {name: ext for name, ext, _ in mapping.block_iters}
    groups = [m.workload_iters for m in mapping.iterators if m.fused]
    names = tuple(name for name, _, _ in mapping.block_iters)
    sch.transform_block_layout(block, _merge_map(names, groups, extents))
    # the merged block's iterators: one per unfused iterator and one per group, in the old order
    slots = [n for n in names if next(x for x in names if x in _group(n, groups)) == n]
    renamed = dict(zip(slots, (iv.var.name for iv in sch.get(block).iter_vars), strict=True))
    want = {m.intrin_iter: renamed[m.workload_iters[0]] for m in mapping.iterators}
    report = match(sch.func, sch.get(block).name, intrin)
    for m in report.feasible:
        if not m.fused and {it.intrin_iter: it.workload_iters[0] for it in m.iterators} == want:
            return m
    raise InvalidArgument(
        f"tile_with_intrin: after fusing {', '.join('*'.join(g) for g in groups)} of block {sch.get(block).name}, "
        f"intrinsic {intrin.name} no longer maps onto it ({'; '.join(str(r) for r in report.infeasible) or 'no mapping'})",
        block=sch.get(block).name,
    )


def _feeds(sch: Schedule, producer: BlockRV, consumer: BlockRV) -> bool:
    """Whether ``consumer`` reads what ``producer`` writes."""
    written = {r.buffer.name for r in sch.get(producer).writes}
    return any(r.buffer.name in written for r in sch.get(consumer).reads)


def _inline_copies(sch: Schedule, copies: list[BlockRV]) -> None:
    """Inline each staged copy into the padding copy that ``pad_einsum`` made of it, so an operand
    is gathered and padded in one pass (``A_reindex_pad[k] = Select(k < 27, A[k // 9, ...], 0)``);
    a copy that cannot be inlined stays (the schedule is unchanged by the refusal)."""

    for rb in copies:
        try:
            sch.compute_inline(rb)
        except ScheduleError:
            continue


def _group(name: str, groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return next((g for g in groups if name in g), (name,))


def _apply(sch: Schedule, block: BlockRV, intrin: Intrinsic, mapping: Mapping, decompose_init: bool) -> BlockRV:

    stage = [o for o in mapping.operands if o.needs_transform]
    staged: dict[str, str] = {}
    copies: list[BlockRV] = []
    for o in stage:
        access = _access(sch, block, o.buffer, o.access[0] == "write")
        rb = sch.reindex(block, access)
        staged[o.operand] = sch.get(rb).name
        if o.access[0] == "read":
            copies.append(rb)
    if mapping.needs_padding:
        pads = [
            next((m.intrin_extent for m in mapping.iterators if name in m.workload_iters and m.padding), 1)
            for name, _, _ in mapping.block_iters
        ]
        sch.pad_einsum(block, pads)
        _inline_copies(sch, [rb for rb in copies if not _feeds(sch, rb, block)])
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
    blocking: dict[str, int] = {}
    if isinstance(intrin.impl, LLVMTileCall):  # as many unit tiles per block as the tile registers hold
        extents = {m.intrin_iter: sch.get(loop_of[m.workload_iters[0]]).extent for m in mapping.iterators}
        blocking = register_blocking(intrin, {k: v.value for k, v in extents.items() if isinstance(v, IntImm)})
    inner: list[LoopRV] = []
    split_outer: dict[str, LoopRV] = {}
    for m in mapping.iterators:
        w = m.workload_iters[0]
        lo, li = sch.split(loop_of[w], [None, m.intrin_extent * blocking.get(m.intrin_iter, 1)])
        split_outer[w] = lo
        inner.append(li)
    outer = [split_outer.get(lp_name, loop_of[lp_name]) for lp_name in loop_of]
    if isinstance(intrin.impl, LLVMTileCall):  # a unit on tile registers walks the reduction itself
        steps = [split_outer[m.workload_iters[0]] for m in mapping.iterators if m.kind == "reduce"]
        sch.reorder([lp for lp in outer if lp not in steps] + steps + inner)
        return sch.blockize(steps[0])
    sch.reorder(outer + inner)
    return sch.blockize(inner[0])
