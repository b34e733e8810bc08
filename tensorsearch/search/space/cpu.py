"""The CPU schedule rules (TVM names; a hardware YAML may list them with parameters under
``search: rules:``, see docs/search.md). A rule takes a schedule and one of its blocks and returns
the schedules it makes of them (none changed, one, or several: a fork of the design space):

* ``AutoInline``: inline spatial, non-output producers (padding, casts) into their consumers;
* ``AddRFactor``: for a reduction with little parallelism, a second space with the reduction
  split and ``rfactor``-ed;
* ``MultiLevelTilingWithIntrin``: a block the matcher maps onto one of the hardware's intrinsics
  is tiled with it (``tile_with_intrin``), its outer block tiled as below and marked
  ``meta_schedule.auto_tensorize`` for the tensorize postprocessor; no intrinsic name appears in
  Python, the candidates are whatever the YAML lists;
* ``MultiLevelTiling``: structure ``SSRSRS``: each spatial loop split in 4 by
  ``sample_perfect_tile``, each reduction loop in 2, reordered ``S0 S1 R0 S2 R1 S3``; optionally a
  write cache (``cache_write`` + ``reverse_compute_at`` under level 1 or 2, or the block's
  element-wise epilogue computed there instead), one space each;
* ``ParallelizeVectorizeUnroll``: annotates the root block with the parallel extent, the
  vectorize extent and a sampled unroll step, rewritten into primitives by the postprocessor;
* ``RandomComputeLocation``: a block no rule tiled is computed at a sampled loop of its consumer;
* ``SplitStridePhases`` (a transposed convolution's stride-parity ``Select`` split into dense
  phase blocks) and ``TileLayoutCopy`` (a copy into a packed layout tiled by the layout's own
  tiles): not in TVM.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from ...ir import BufferLoad, BufferStore, IntImm, Select, Var, post_order_visit
from ...ir.functor import free_vars
from ...ir.stmt import Block, IterType
from ...lower.common import is_const
from ...schedule import BlockRV, Schedule, ScheduleError, tile_with_intrin
from ...target import Intrinsic, match
from .rule import (
    AUTO_TENSORIZE,
    PARALLEL,
    TILING_STRUCTURE,
    UNROLL,
    VECTORIZE,
    ScheduleRule,
    SearchSpaceError,
    any_tensorized,
    extent,
    in_intrinsic_tile,
    is_reduction,
    iter_kinds,
    trivially_bound,
)

# --------------------------------------------------------------------------------------------
# block facts only the CPU rules ask


def _perfectly_nested(sch: Schedule, block: BlockRV) -> bool:
    """Whether each loop above the block holds only the next one (nothing computed at a loop in
    between), so that tiling may reorder them all."""
    loops = [sch.get(lp) for lp in sch.get_loops(block)]
    return all(outer.body is inner for outer, inner in itertools.pairwise(loops))


def _reuses_reads(sch: Schedule, block: BlockRV) -> bool:
    """Whether some read of the block misses one of its spatial iterators (of extent above 1):
    the same element serves several outputs, which is what tiling exploits (TVM's
    NeedsMultiLevelTiling). A softmax's row max or sum reads each element for one output only."""
    blk = sch.get(block)
    spatial = {iv.var for iv in blk.iter_vars if iv.iter_type != IterType.REDUCE and not is_const(iv.dom.extent, 1)}
    written = {r.buffer for r in blk.writes}
    for region in blk.reads:
        if region.buffer in written:
            continue
        used: set[Var] = set()
        for rng in region.region:
            used |= set(free_vars(rng.min))
        if spatial - used:
            return True
    return False


def _reduces_rows(sch: Schedule, block: BlockRV) -> bool:
    """Whether the block reduces along a read's last (contiguous) dimension, as a softmax's or a
    layer norm's row reduction does: left untiled, LLVM vectorizes the row loop itself."""
    blk = sch.get(block)
    reduce = {iv.var for iv in blk.iter_vars if iv.iter_type == IterType.REDUCE}
    return any(r.region and set(free_vars(r.region[-1].min)) & reduce for r in blk.reads)


def _is_output(sch: Schedule, block: BlockRV) -> bool:
    params = {b.name for b in sch.func.buffers}
    return any(r.buffer.name in params for r in sch.get(block).writes)


def _loads_and_lane(blk: Block) -> tuple[dict[str, BufferLoad], Any]:
    """The first load of each buffer in ``blk``'s body, and the last index of its first store
    (the output's vector-lane iterator when it is a plain iterator), in one walk."""
    loads: dict[str, BufferLoad] = {}
    stores: list[BufferStore] = []

    def visit(node: Any) -> None:
        if isinstance(node, BufferLoad):
            loads.setdefault(node.buffer.name, node)
        elif isinstance(node, BufferStore):
            stores.append(node)

    post_order_visit(blk.body, visit)
    return loads, (stores[0].indices[-1] if stores and stores[0].indices else None)


def _lane_dim(load: BufferLoad, lane: Var, kinds: dict[Var, IterType]) -> int | None:
    """The one dimension of ``load`` indexed by ``lane`` itself, where another dimension holds a
    reduction iterator (``Y[k, j]``: 1); None otherwise."""
    dims = [d for d, i in enumerate(load.indices) if lane in free_vars(i)]
    if len(load.indices) < 2 or len(dims) != 1 or load.indices[dims[0]] is not lane:
        return None
    others = [i for d, i in enumerate(load.indices) if d != dims[0]]
    return dims[0] if any(kinds.get(v) == IterType.REDUCE for i in others for v in free_vars(i)) else None


def _panel_map(rank: int, lane_dim: int, lanes: int) -> str:
    """The index map of a read packed into ``lanes``-wide panels of dimension ``lane_dim``:
    ``(rank=3, lane_dim=2, 16)`` -> ``lambda d0, d1, d2: (d2 // 16, d0, d1, d2 % 16)``."""
    dims = [f"d{i}" for i in range(rank)]
    rest = [d for i, d in enumerate(dims) if i != lane_dim]
    lane = dims[lane_dim]
    return f"lambda {', '.join(dims)}: ({lane} // {lanes}, {', '.join(rest)}, {lane} % {lanes})"


def _elementwise_consumer(sch: Schedule, block: BlockRV) -> BlockRV | None:
    """The block's one consumer when it is an epilogue that can serve as its write cache (TVM's
    ``ReuseType::kMayReuse`` with an element-wise match): a spatial block, its loops bound one
    to one, that reads the block's output only at its own iterators and writes a buffer of the
    same shape. Computed under a tile, it applies bias, activation or requantization to the tile
    while it is in cache, instead of re-reading the whole output afterwards. None otherwise."""
    from ...ir import BufferLoad

    try:
        consumers = sch.get_consumers(block)
    except ScheduleError:
        return None
    if len(consumers) != 1 or is_reduction(sch, consumers[0]) or not trivially_bound(sch, consumers[0]):
        return None
    blk, epi = sch.get(block), sch.get(consumers[0])
    if len(blk.writes) != 1 or len(epi.writes) != 1:
        return None
    out = blk.writes[0].buffer
    if tuple(out.shape) != tuple(epi.writes[0].buffer.shape):
        return None
    if len(epi.iter_vars) != len(out.shape):
        return None

    def at_own_point(load: BufferLoad) -> bool:  # a unit iterator may be read as the constant 0
        return all(
            index == iv.var or (is_const(index, 0) and is_const(iv.dom.extent, 1))
            for index, iv in zip(load.indices, epi.iter_vars, strict=True)
        )

    loads: list[BufferLoad] = []
    post_order_visit(epi.body, lambda n: loads.append(n) if isinstance(n, BufferLoad) and n.buffer == out else None)
    if not loads or not all(at_own_point(ld) for ld in loads):
        return None
    return consumers[0]


def _is_plain_copy(block: Block) -> bool:
    """Whether the block only copies another buffer of its shape and dtype, element for element
    (``B[v0, v1] = A[v0, v1]``)."""
    store = block.body
    if not (isinstance(store, BufferStore) and isinstance(store.value, BufferLoad)):
        return False
    load, ivs = store.value, [iv.var for iv in block.iter_vars]
    same_indices = len(load.indices) == len(store.indices) == len(ivs) and all(
        a == v and b == v for a, b, v in zip(load.indices, store.indices, ivs, strict=True)
    )
    return (
        same_indices
        and load.buffer.dtype == store.buffer.dtype
        and tuple(load.buffer.shape) == tuple(store.buffer.shape)
    )


def _feeds_reduction(sch: Schedule, block: BlockRV) -> bool:
    """Whether a consumer of the block is a reduction (or one cannot be told)."""
    try:
        return any(is_reduction(sch, c) for c in sch.get_consumers(block))
    except ScheduleError:
        return True


def _has_select(block: Block) -> bool:
    """Whether the block's body computes a ``Select`` (padding, a masked copy)."""
    found = []
    post_order_visit(block.body, lambda n: found.append(n) if isinstance(n, Select) else None)
    return bool(found)


# --------------------------------------------------------------------------------------------
# rules


class SplitStridePhases(ScheduleRule):
    """Split a transposed convolution's stride-parity ``Select`` into dense phase blocks
    (``sch.split_stride_phases``), each then tiled (and tensorized) like any convolution; the
    multiplications by the ``Select``'s zeros (3/4 of them at stride 2) are gone. Not in TVM."""

    name = "SplitStridePhases"
    params = {}
    rewrites_program = True

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        from ...transform import has_stride_phases

        if not has_stride_phases(sch.get(block)):
            return [sch]
        try:
            sch.split_stride_phases(block)
        except ScheduleError:
            pass  # the schedule is as it was
        return [sch]


class AutoInline(ScheduleRule):
    """Inline a spatial, non-output block into its consumers (``compute_inline``), else its
    single producer's epilogue into the producer (``reverse_compute_inline``); silently keeps the
    block when neither is legal. Nothing is inlined into a block tiled for a tensor intrinsic: the
    intrinsic reads and writes buffers directly, so a padding ``Select`` or an epilogue cast would
    leave the tile no longer matching it.

    Two exceptions, both ours: a plain copy (``B[v0, v1] = A[v0, v1]``, the ``PadInput`` of a
    convolution without padding) is inlined into an intrinsic's tile too, where it only renames
    the buffer the tile reads, instead of copying the whole input in a pass of its own; and
    ``disallow_select`` (TVM's ``disallow_if_then_else``, on for CPUs there too) keeps a block
    whose value is a ``Select`` (a convolution's ``PadInput``) out of a reduction consumer only:
    inlined there, the bounds test runs on every multiply-add of the hot loop, while inlined into
    a copy (the channel padding ``tile_with_intrin`` adds) it runs once an element, in one pass
    instead of two. A kept block gets a sampled compute location (RandomComputeLocation)."""

    name = "AutoInline"
    params = {"into_consumer": True, "into_producer": True, "disallow_select": True}

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        if is_reduction(sch, block) or dict(blk.annotations).get(TILING_STRUCTURE) or blk.name == "root":
            return [sch]

        def tensorized(neighbours: Any) -> bool:
            try:
                return any_tensorized(sch, neighbours(block))
            except ScheduleError:
                return False

        selects = self.config["disallow_select"] and _has_select(blk) and _feeds_reduction(sch, block)
        if (
            self.config["into_consumer"]
            and not selects
            and not _is_output(sch, block)
            and (_is_plain_copy(blk) or not tensorized(sch.get_consumers))
        ):
            try:
                sch.compute_inline(block)
                return [sch]
            except ScheduleError:
                pass
        if self.config["into_producer"] and not tensorized(sch.get_producers):
            try:
                sch.reverse_compute_inline(block)
            except ScheduleError:
                pass
        return [sch]


class AddRFactor(ScheduleRule):
    """A reduction whose spatial extent is smaller than the machine's parallelism gets a second
    design space: its reduction loops fused, split in two by ``sample_perfect_tile`` and the inner
    part ``rfactor``-ed, so the partial sums run in parallel."""

    name = "AddRFactor"
    params = {"max_jobs_per_core": 16, "max_innermost_factor": 64}

    def __init__(self, cores: int = 1, **params: Any) -> None:
        super().__init__(**params)
        self.cores = cores

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if not is_reduction(sch, block) or not trivially_bound(sch, block):
            return [sch]
        kinds = iter_kinds(sch, block)
        loops = sch.get_loops(block)
        spatial = math.prod(extent(sch, lp) for lp in loops if kinds.get(sch.get(lp).loop_var) == "S")
        reduce = [lp for lp in loops if kinds.get(sch.get(lp).loop_var) == "R"]
        if not reduce or spatial >= self.config["max_jobs_per_core"] * self.cores:
            return [sch]
        if math.prod(extent(sch, lp) for lp in reduce) < 64:
            return [sch]
        # the reduction loops must be innermost and consecutive to fuse them
        if loops[-len(reduce) :] != reduce:
            return [sch]
        fork = sch.copy()
        try:
            fused = fork.fuse(reduce) if len(reduce) > 1 else reduce[0]
            tiles = fork.sample_perfect_tile(fused, n=2, max_innermost_factor=self.config["max_innermost_factor"])
            _, inner = fork.split(fused, tiles)
            rf = fork.rfactor(inner, 0)
            fork.annotate(rf, "meta_schedule.random_compute_producer", 1)
        except ScheduleError:
            return [sch]
        return [sch, fork]


class MultiLevelTiling(ScheduleRule):
    """Tile a reduction block ``SSRSRS`` (TVM's CPU structure), with an optional write cache.

    Before (GEMM)::

        for b, i, j, k in T.grid(1, 1024, 1024, 1024):  Z[...] += X[...] * Y[...]

    After (one design space; the tile sizes are sampled)::

        for b_0, i_0, j_0, b_1, i_1, j_1, k_0, b_2, i_2, j_2, k_1, b_3, i_3, j_3 in ...:  Z[...] += ...

    A reduction none of whose reads is shared between outputs (a softmax's row sum) also keeps an
    untiled space, the first when it reduces rows (``_reuses_reads``, ``_reduces_rows``).
    """

    name = "MultiLevelTiling"
    params = {
        "structure": "SSRSRS",
        "max_innermost_factor": 64,
        "cache_write_levels": [1, 2],
        "cache_write_scope": "global",
        "cache_write_optional": True,
        "pack_reads": True,
        "pad_awkward": True,
    }

    def __init__(self, vector_bits: int = 0, **params: Any) -> None:
        super().__init__(**params)
        self.vector_bits = vector_bits

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        super().check_params(params)
        structure = params.get("structure", cls.params["structure"])
        if not structure or set(structure) - {"S", "R"} or "S" not in structure:
            raise SearchSpaceError(
                f"rule {cls.name} parameter structure must be a string of S and R with at least one S, got {structure!r}"
            )
        for level in params.get("cache_write_levels", cls.params["cache_write_levels"]):
            if not 1 <= level <= structure.count("S"):
                raise SearchSpaceError(
                    f"rule {cls.name} parameter cache_write_levels: {level!r} is not a spatial level "
                    f"1..{structure.count('S')} of structure {structure}"
                )

    def applies(self, sch: Schedule, block: BlockRV) -> bool:
        blk = sch.get(block)
        if dict(blk.annotations).get(TILING_STRUCTURE) or not is_reduction(sch, block):
            return False
        if in_intrinsic_tile(sch, block):
            return False
        return trivially_bound(sch, block) and _perfectly_nested(sch, block)

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if not self.applies(sch, block):
            return [sch]
        variants = [sch]
        if self.config["pad_awkward"] and self.vector_bits:
            padded = self._pad_awkward(sch.copy(), block)
            variants += [padded] if padded is not None else []
        spaces = []
        for variant in variants:
            spaces += self.tile(variant.copy(), block)
            if self.config["pack_reads"] and self.vector_bits:
                packed = variant.copy()
                if self._pack_reads(packed, block):
                    spaces += self.tile(packed, block)
        if not _reuses_reads(sch, block):  # also untiled, for RandomComputeLocation
            spaces.insert(0 if _reduces_rows(sch, block) else len(spaces), sch)
        return spaces

    def _pad_awkward(self, sch: Schedule, block: BlockRV) -> Schedule | None:
        """``sch`` with the block's iteration space padded (``pad_einsum``) where an extent tiles
        badly, or None when none does (or padding is refused). Tiles are divisors, so a prime
        extent (ViT's 197 tokens) leaves tiles of 1 or all: the last spatial iterator (the vector
        one) is padded to a multiple of the vector lanes, any other extent above 8 with no divisor
        from 2 to 8 to a multiple of 8, when that adds at most an eighth of the iterations.

        Before (``197 x 197 x 64``)::   for i, j, k in T.grid(197, 197, 64): C[i, j] += A[i, k] * B[k, j]
        After (float32, 16 lanes)::     A_pad, B_pad copies; for i, j, k in T.grid(200, 208, 64): C_pad ...; C copy
        """
        blk = sch.get(block)
        lanes = max(1, self.vector_bits // blk.writes[0].buffer.dtype.bits) if blk.writes else 1
        spatial = [iv for iv in blk.iter_vars if iv.iter_type == IterType.SPATIAL]
        pads, before, after = [], 1, 1
        for iv in blk.iter_vars:
            extent = iv.dom.extent.value if isinstance(iv.dom.extent, IntImm) else 1
            multiple = 1
            if spatial and iv is spatial[-1] and extent > lanes and extent % lanes:
                multiple = lanes
            elif extent > 8 and not any(extent % d == 0 for d in range(2, 9)):
                multiple = 8
            pads.append(multiple)
            before, after = before * extent, after * -(-extent // multiple) * multiple
        if after == before or after > before * 9 // 8:
            return None
        try:
            sch.pad_einsum(block, pads)
        except ScheduleError:
            return None
        return sch

    def _pack_reads(self, sch: Schedule, block: BlockRV) -> bool:
        """Stage each read that holds the output's last iterator (its vector lanes) in one
        dimension and a reduction iterator in another (GEMM's ``Y[k, j]``; attention's
        ``K[b, h, j, k]``, read transposed) into vector-wide panels ``(j // L, <the other
        dimensions>, j % L)`` (``L`` lanes): a vector of ``j`` becomes adjacent, and the rows of
        a panel too, instead of one buffer row apart. Returns whether any read was staged."""
        blk = sch._block_realize(block)[0].block
        kinds = {iv.var: iv.iter_type for iv in blk.iter_vars}
        loads, lane = _loads_and_lane(blk)
        if not (isinstance(lane, Var) and kinds.get(lane) == IterType.SPATIAL):
            return False
        out_buf = blk.writes[0].buffer.name if blk.writes else None
        staged = False
        for name in [r.buffer.name for r in blk.reads]:
            load = loads.get(name)
            dim = None if load is None or name == out_buf else _lane_dim(load, lane, kinds)
            if dim is None:
                continue
            ext = load.buffer.shape[dim]
            lanes = max(1, self.vector_bits // load.buffer.dtype.bits)
            if not isinstance(ext, IntImm) or ext.value % lanes or ext.value <= lanes:
                continue
            index = next(i for i, r in enumerate(sch.get(block).reads) if r.buffer.name == name)
            try:
                pack = sch.cache_read(block, index, "global")
                sch.transform_layout(pack, ("write", 0), _panel_map(len(load.indices), dim, lanes))
            except ScheduleError:
                return False
            staged = True
        return staged

    def tile(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        """Tile ``block`` (its loops bound one to one to its iterators) and fork the write cache."""
        structure = self.config["structure"]
        kinds = iter_kinds(sch, block)
        groups: list[list[Any]] = [[] for _ in structure]
        s_levels = [p for p, c in enumerate(structure) if c == "S"]
        r_levels = [p for p, c in enumerate(structure) if c == "R"]
        unit: list[Any] = []
        for loop in sch.get_loops(block):
            var = sch.get(loop).loop_var
            levels = r_levels if kinds.get(var) == "R" else s_levels
            if extent(sch, loop) == 1 and levels and kinds.get(var) == "R":
                groups[levels[0]].insert(0, loop)  # a unit reduction loop outermost would stop the parallel fuse
                continue
            if extent(sch, loop) == 1 or not levels:
                unit.append(loop)
                continue
            if len(levels) == 1:
                groups[levels[0]].append(loop)
                continue
            tiles = sch.sample_perfect_tile(
                loop, n=len(levels), max_innermost_factor=self.config["max_innermost_factor"]
            )
            for level, part in zip(levels, sch.split(loop, tiles), strict=True):
                groups[level].append(part)
        order = unit + [lp for g in groups for lp in g]
        sch.reorder(order)
        sch.annotate(block, TILING_STRUCTURE, structure)
        spaces = [sch] if self.config["cache_write_optional"] else []
        if not self.config["cache_write_levels"]:
            return spaces or [sch]
        epilogue = _elementwise_consumer(sch, block)
        for level in self.config["cache_write_levels"]:
            fork = sch.copy()
            anchor_group = groups[s_levels[level - 1]]
            anchor = anchor_group[-1] if anchor_group else None
            if anchor is None:
                continue
            try:
                cw = epilogue or fork.cache_write(block, 0, self.config["cache_write_scope"])
                fork.reverse_compute_at(cw, anchor, preserve_unit_loops=True)
            except ScheduleError:
                continue
            spaces.append(fork)
        return spaces or [sch]


class MultiLevelTilingWithIntrin(MultiLevelTiling):
    """Map a block onto one of the hardware's tensor intrinsics, then tile its outer block.

    ``tile_with_intrin`` makes the block's innermost loops one intrinsic tile and blockizes them;
    the outer block is tiled ``SSRSRS`` and marked ``meta_schedule.auto_tensorize = <intrinsic>``
    so that the tensorize postprocessor calls ``sch.tensorize`` once the reduction init has been
    split off. The first intrinsic (in the YAML's order) that applies wins; the design space forks
    over its best ``mappings`` feasible mappings that ``tile_with_intrin`` can apply (a mapping
    whose staging copy ``reindex`` refuses is passed over) in the matcher's rank (the fewest instructions
    per useful call, padding and staging copies counted; then unfused, fewest layout transforms:
    C2D with 3 input channels gets ``k <- rc``, 3 padded to 4 with the input read in place, and
    ``k <- rh * rw * rc`` fused, 147 padded to 148 and gathered). A block no intrinsic fits is left
    to the next rule."""

    name = "MultiLevelTilingWithIntrin"
    params = {**MultiLevelTiling.params, "intrinsics": [""], "mappings": 2}

    def __init__(self, intrinsics: Sequence[Intrinsic] = (), **params: Any) -> None:
        names = params.pop("intrinsics", None)
        super().__init__(**params)
        offered = list(intrinsics)
        if names is not None:
            by_name = {i.name: i for i in offered}
            missing = [n for n in names if n not in by_name]
            if missing:
                raise SearchSpaceError(
                    f"rule {self.name} parameter intrinsics names {', '.join(missing)}, which the hardware does not offer "
                    f"(it offers: {', '.join(by_name) or 'none'})"
                )
            offered = [by_name[n] for n in names]
        self.intrinsics = offered

    @classmethod
    def check_params(cls, params: dict[str, Any]) -> None:
        super().check_params(params)
        mappings = params.get("mappings", cls.params["mappings"])
        if isinstance(mappings, bool) or not isinstance(mappings, int) or mappings < 1:
            raise SearchSpaceError(f"rule {cls.name} parameter mappings must be a positive integer, got {mappings!r}")

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if not self.intrinsics or not self.applies(sch, block):
            return [sch]
        for intrin in self.intrinsics:
            report = match(sch.func, sch.get(block).name, intrin)
            spaces, mapped = [], 0
            for index in range(len(report.feasible)):  # the best `mappings` that the primitives can apply
                if mapped == self.config["mappings"]:
                    break
                fork = sch.copy()
                try:
                    outer = tile_with_intrin(fork, block, intrin, index, decompose_init=False)
                except ScheduleError:
                    continue
                mapped += 1
                fork.annotate(outer, AUTO_TENSORIZE, intrin.name)
                spaces += self.tile(fork, outer)
            if spaces:
                return spaces
        return [sch]


class ParallelizeVectorizeUnroll(ScheduleRule):
    """Annotate the root block (once): the parallel extent (a sampled multiple of the cores), the
    largest vectorized extent, and a sampled explicit-unroll step; the postprocessor rewrites
    them into ``parallel``/``vectorize``/``unroll`` on every block's loops."""

    name = "ParallelizeVectorizeUnroll"
    params = {
        "max_jobs_per_core": 16,
        "max_vectorize_extent": 64,
        "unroll_max_steps": [0, 16, 64, 512],
        "parallel_jobs_per_core": [1, 4, 16],
    }

    def __init__(self, cores: int = 1, **params: Any) -> None:
        super().__init__(**params)
        self.cores = cores

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if sch.get(block).name != "root" or dict(sch.get(block).annotations).get(UNROLL) is not None:
            return [sch]
        jobs = sorted(
            {min(j, self.config["max_jobs_per_core"]) * self.cores for j in self.config["parallel_jobs_per_core"]}
        )
        if jobs:
            par = sch.sample_categorical(jobs, [1.0] * len(jobs))
            sch.annotate(block, PARALLEL, par)
        if self.config["max_vectorize_extent"] > 1:
            sch.annotate(block, VECTORIZE, self.config["max_vectorize_extent"])
        steps = self.config["unroll_max_steps"]
        if steps:
            step = sch.sample_categorical(list(steps), [1.0] * len(steps))
            sch.annotate(block, UNROLL, step)
        return [sch]


class RandomComputeLocation(ScheduleRule):
    """Compute a block that no rule tiled at a sampled loop of its consumers (above all of them:
    ``sample_compute_location`` + ``compute_at``; the sample may choose the root).

    A copy into a packed layout (what ``tile_with_intrin`` and read packing insert) stays at the
    root: packed once, it is reused by every tile, and TileLayoutCopy tiles its own loops, which
    a trace can only replay when the loops above it do not change with the sampled location. So
    does any block an intrinsic reads (``pad_einsum``'s padded copy of a convolution's input):
    inlined, the tile would read a ``Select`` the intrinsic does not compute."""

    name = "RandomComputeLocation"
    params = {}

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        if blk.name == "root" or dict(blk.annotations).get(TILING_STRUCTURE) or _is_output(sch, block):
            return [sch]
        if _layout_copy_factors(sch, block) is not None:
            return [sch]
        if not sch.get_loops(block):
            return [sch]
        try:
            consumers = sch.get_consumers(block)
        except ScheduleError:
            return [sch]
        if not consumers or any_tensorized(sch, consumers):
            return [sch]
        fork = sch.copy()
        try:
            loc = fork.sample_compute_location(block)
            fork.compute_at(block, loc)
        except ScheduleError:
            return [sch]
        return [fork]


def _layout_copy_factors(sch: Schedule, block: BlockRV) -> dict[Var, int] | None:
    """For a spatial block that only copies into a layout with ``v // c`` and ``v % c`` indices
    (``dst[..., v // c, ..., v % c] = src[...]``), each such iterator ``v`` with its ``c``, in the
    destination's order; None for any other block."""
    from ...ir import FloorDiv, FloorMod

    blk = sch.get(block)
    body = blk.body
    if blk.name == "root" or is_reduction(sch, block):
        return None
    if not (isinstance(body, BufferStore) and isinstance(body.value, BufferLoad)):
        return None
    factors: dict[Var, int] = {}
    for idx in body.indices:
        if isinstance(idx, FloorMod) and isinstance(idx.a, Var) and isinstance(idx.b, IntImm):
            factors[idx.a] = idx.b.value
        elif not isinstance(idx, Var | FloorDiv):
            return None
    return factors or None


class TileLayoutCopy(ScheduleRule):
    """Tile a copy into a packed layout by the layout's own tiles (not in TVM; our addition).

    A spatial block that only copies ``dst[f(v)] = src[g(v)]`` where ``f`` splits iterators
    with ``v // c`` and ``v % c`` (a ``transform_layout`` into panels, as ``tile_with_intrin`` and
    read packing make) gets each such loop split by ``c``; the outer parts keep the order of the
    source's dimensions and the inner parts follow the destination's, unrolled, so each tile of
    the destination is written whole from a few source rows (LLVM turns it into shuffles).
    Before (VNNI's packing of ``Y[k, j]``)::

        for b, j, k in T.grid(1, 1024, 1024):  Y_p[b, j // 16, k // 4, j % 16, k % 4] = Y[b, k, j]

    After::

        for b, k_0, j_0 in T.grid(1, 256, 64):
            for j_1 in T.unroll(16):
                for k_1 in T.unroll(4):  Y_p[...] = Y[b, k_0 * 4 + k_1, j_0 * 16 + j_1]
    """

    name = "TileLayoutCopy"
    params = {"max_tile": 256}

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        factors = _layout_copy_factors(sch, block)
        if not factors or math.prod(factors.values()) > self.config["max_tile"] or not trivially_bound(sch, block):
            return [sch]
        order_dst = list(factors)
        realize, _ = sch._block_realize(block)
        loop_of = {iv.var: v for iv, v in zip(blk.iter_vars, realize.iter_values, strict=True)}
        src_order = [v for idx in blk.body.value.indices for v in free_vars(idx) if v in loop_of]
        own = set(loop_of.values())  # the block's own loops (not those of a compute_at location)
        loops = {sch.get(lp).loop_var: lp for lp in sch.get_loops(block) if sch.get(lp).loop_var in own}
        fork = sch.copy()
        try:
            outer, inner = {}, {}
            for v, c in factors.items():
                lp = loops[loop_of[v]]
                if extent(fork, lp) % c:
                    return [sch]
                outer[v], inner[v] = fork.split(lp, [None, c])
            rest = [lp for var, lp in loops.items() if var not in {loop_of[v] for v in factors}]
            ordered = rest + [outer[v] for v in src_order if v in outer] + [inner[v] for v in order_dst]
            fork.reorder(ordered)
            for v in order_dst:
                fork.unroll(inner[v])
        except (ScheduleError, KeyError):
            return [sch]
        return [fork]
