"""The GPU design space: tensor-core tiling, thread binding, cooperative fetch, resource checks.

Rules (TVM MetaSchedule's names; the default for a ``kind: gpu`` descriptor, in this order):

* ``MultiLevelTilingTensorCore``: a GEMM-like block (two spatial loops, one reduction loop, each a
  multiple of 16) whose dtypes a WMMA unit of the hardware's YAML computes is tiled as TVM tiles
  it for tensor cores. Before (GEMM, float16 x float16 -> float32)::

      for b, i, j, k in T.grid(1, 4096, 4096, 4096):  Z[b, i, j] += f32(X[b, i, k]) * f32(Y[b, k, j])

  After (``Bi, Wi, Ti, Bj, Wj, Tj, K0, K1``: warps, warp tiles and k steps drawn by ``sample_categorical``)::

      for bx in T.thread_binding(Bi * Bj, "blockIdx.x"):            # a thread block's tile of Z
        for ty in T.thread_binding(Wi * Wj, "threadIdx.y"):         # a warp's tile
          for i2, j2: Z_acc[...] = 0                                # wmma fill, Ti x Tj fragments
          for k0 in range(K0):
            X_shared, Y_shared = X[...], Y[...]                     # cooperative fetch (postproc)
            for k1 in T.unroll(K1):
              X_frag[...] = X_shared[...]; Y_frag[...] = Y_shared[...]   # wmma load
              for i2, j2 in T.unroll(Ti, Tj): Z_acc[...] += X_frag * Y_frag   # wmma mma
          Z[...] = Z_acc[...]                                       # wmma store

  Each of fill, load, mma and store is one intrinsic of the unit, tensorized on a fragment buffer
  (``wmma.accumulator``, ``wmma.matrix_a``, ``wmma.matrix_b``) and checked against its semantics.
  A block the unit does not fit (dtypes, layout, extents) is left to the next rule.
* ``MultiLevelTilingGPU``: a reduction no unit computes (float32; float16 shapes no 16x16 tile
  divides) is tiled ``SSRSRS`` over thread blocks and threads, with a ``local`` write cache and
  ``shared`` read caches (its docstring shows the IR);
* ``AutoInline`` (``disallow_select=False``): a padding or elementwise producer is inlined where
  it is read, since a GPU program here is one kernel;
* ``AutoBind``: a block with no thread binding yet has its outer spatial loops fused and split
  over ``blockIdx.x`` x ``threadIdx.x`` (threads per block sampled from 32..1024), so every
  program runs on the GPU, fast or not.

Postprocessors: ``DisallowDynamicLoop``; ``RewriteCooperativeFetch`` (the shared-memory copies
the tiling marked are fused and split over the thread block's ``threadIdx.y`` x ``threadIdx.x``
threads, once the sampled warp count is known; a copy that does not divide among them gets a
guarded last round); ``VerifyGPUCode`` (TVM's name): a candidate whose
thread block needs more threads, shared memory or registers (estimated from its fragments) than
the descriptor's ``gpu:`` limits is rejected before it is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...ir import IntImm
from ...schedule import BlockRV, Schedule, ScheduleError
from ...target import Hardware, IntrinsicSet, Unit
from .cpu import AutoInline
from .rule import COOPERATIVE_FETCH, ScheduleRule, extent, is_reduction, iter_kinds, trivially_bound


def _unit_for(hw: Hardware, sch: Schedule, block: BlockRV) -> tuple[IntrinsicSet, Unit] | None:
    """The first WMMA unit whose compute intrinsic reads the block's input dtypes and accumulates in
    its output dtype."""
    blk = sch.get(block)
    if len(blk.writes) != 1:
        return None
    out = blk.writes[0].buffer
    inputs = [r.buffer.dtype for r in blk.reads if r.buffer is not out]
    for iset in hw.intrinsic_sets:
        for unit in iset.units:
            compute = iset[unit.compute]
            ins = [o.dtype for o in compute.operands if o.role == "input"]
            acc = [o.dtype for o in compute.operands if o.role in ("accumulator", "output")]
            if ins == inputs and acc == [out.dtype]:
                return iset, unit
    return None


def _gemm_loops(sch: Schedule, block: BlockRV) -> tuple[list[Any], Any, Any, Any] | None:
    """(unit loops, i, j, k) when the block's loops are unit loops, two spatial loops and one
    reduction loop, each a multiple of 16; else None."""
    kinds = iter_kinds(sch, block)
    units, spatial, reduce = [], [], []
    for loop in sch.get_loops(block):
        if extent(sch, loop) == 1:
            units.append(loop)
        elif kinds.get(sch.get(loop).loop_var) == "R":
            reduce.append(loop)
        else:
            spatial.append(loop)
    if len(spatial) != 2 or len(reduce) != 1 or any(extent(sch, lp) % 16 for lp in (*spatial, *reduce)):
        return None
    return units, spatial[0], spatial[1], reduce[0]


def _tile_16x16(sch: Schedule, block: BlockRV) -> BlockRV:
    """Split the block's two innermost loops into 16 x 16 tiles, unroll over the tiles, and blockize one."""
    *_, a, b = sch.get_loops(block)
    a0, a1 = sch.split(a, [None, 16])
    b0, b1 = sch.split(b, [None, 16])
    sch.reorder(a0, b0, a1, b1)
    for loop in (a0, b0):
        sch.unroll(loop)
    return sch.blockize(a1)


def _store_to_shared(iset: IntrinsicSet, store: Any) -> Any:
    """The intrinsic of the set that does what ``store`` does, into shared memory."""
    src, dst = store.operands
    for intr in iset:
        ops = intr.operands
        if (
            len(ops) == 2
            and (ops[0].scope, ops[0].dtype, ops[1].dtype) == (src.scope, src.dtype, dst.dtype)
            and ops[1].scope == "shared"
        ):
            return intr
    raise ScheduleError(f"intrinsic set {iset.name} has no {store.name} into shared memory")


@dataclass(frozen=True)
class Gemm:
    """What :func:`as_gemm` made: the copies that reindex the operands (to inline into the shared
    fetches; a padding producer first) and the copy of the output back to its layout."""

    input_copies: tuple[BlockRV, ...]
    output_copy: BlockRV


def as_gemm(sch: Schedule, block: BlockRV) -> Gemm | None:
    """Make a contraction of two operands (a convolution) a GEMM over reindexed buffers, as TVM's
    tensor-core rule does; None when the block is not one. Before (C2D, NHWC)::

        for n, h, w, co, rh, rw, ci in T.grid(...):
            out[n, h, w, co] += f32(pad[n, h + rh, w + rw, ci]) * f32(weight[rh, rw, ci, co])

    After: ``A[m, k] = pad[...]`` (im2col), ``B[k, co] = weight[...]`` and
    ``out[...] = C[m, co]`` are copies, the block is ``C[m, co] += f32(A[m, k]) * f32(B[k, co])``
    with ``m`` = (n, h, w) and ``k`` = (rh, rw, ci) fused."""
    blk = sch.get(block)
    out = blk.writes[0].buffer
    reads = [r for r in blk.reads if r.buffer is not out]
    if len(reads) != 2 or len(blk.writes) != 1:
        return None
    extent = {iv.var: iv.dom.extent.value for iv in blk.iter_vars if isinstance(iv.dom.extent, IntImm)}
    if len(extent) != len(blk.iter_vars):
        return None
    used = [_vars_of(r) for r in (*reads, blk.writes[0])]
    spatial = [iv.var for iv in blk.iter_vars if iv.iter_type.value == "spatial"]
    groups = {
        "i": [v for v in spatial if v in used[0] and v not in used[1]],
        "j": [v for v in spatial if v in used[1] and v not in used[0]],
        "k": [iv.var for iv in blk.iter_vars if iv.iter_type.value == "reduce"],
    }
    shared_batch = [v for v in spatial if v in used[0] and v in used[1]]
    if any(extent[v] != 1 for v in shared_batch) or not all(groups.values()):
        return None
    if any(v not in used[0] or v not in used[1] for v in groups["k"]):
        return None
    copies = []
    for where, rows, cols in ((("read", 0), "i", "k"), (("read", 1), "k", "j"), (("write", 0), "i", "j")):
        index = 0 if where[0] == "write" else where[1]
        dims = [iv.var for iv in blk.iter_vars if iv.var in used[2 if where[0] == "write" else index]]
        lam = _fuse_map(dims, [groups[rows], groups[cols]], extent)
        copy = sch.reindex(block, where)
        sch.transform_layout(block, where, lam)
        sch.transform_block_layout(copy, lam)
        copies.append(copy)
    sch.transform_block_layout(block, _fuse_map([iv.var for iv in blk.iter_vars], [groups[g] for g in "ijk"], extent))
    inputs = [*_padding_producers(sch, copies[0]), copies[0], copies[1]]
    return Gemm(tuple(inputs), copies[2])


def _vars_of(region: Any) -> set[Any]:
    from ...ir.functor import free_vars

    return {v for r in region.region for v in free_vars(r.min)}


def _fuse_map(dims: list[Any], groups: list[list[Any]], extent: dict[Any, int]) -> str:
    """``lambda d0, d1, ...: (fused group 0, fused group 1, ...)`` over ``dims`` (row-major fusion)."""
    names = {v: f"d{n}" for n, v in enumerate(dims)}
    outs = []
    for group in groups:
        expr = "0"
        for v in group:
            expr = f"({expr}) * {extent[v]} + {names[v]}" if expr != "0" else names[v]
        outs.append(expr)
    return f"lambda {', '.join(names.values())}: ({', '.join(outs)},)"


def _padding_producers(sch: Schedule, copy: BlockRV) -> list[BlockRV]:
    """The blocks that compute what ``copy`` reads (a padding stage), to inline before it."""
    try:
        return [p for p in sch.get_producers(copy)]
    except ScheduleError:
        return []


class MultiLevelTilingTensorCore(ScheduleRule):
    """Tile a GEMM-like block for a WMMA unit of the hardware (module doc)."""

    name = "MultiLevelTilingTensorCore"
    # the choices for each of i and j (warps of a thread block, 16x16 tiles of a warp) and for k
    # (16-wide steps per shared-memory slice); each sampled by sample_categorical among those
    # that divide the loop: at most 16 warps and 16 accumulator fragments a warp
    params = {"warps": [1, 2, 4], "warp_tiles": [1, 2, 4], "k_tiles": [1, 2, 4]}

    def __init__(self, hardware: Hardware | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.hardware = hardware

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if self.hardware is None or not is_reduction(sch, block) or not trivially_bound(sch, block):
            return [sch]
        unit = _unit_for(self.hardware, sch, block)
        if unit is None:
            return [sch]
        fork = sch.copy()
        try:
            gemm = None
            if _gemm_loops(fork, block) is None:  # a convolution: made a GEMM over reindexed buffers
                gemm = as_gemm(fork, block)
                if gemm is None or _gemm_loops(fork, block) is None:
                    return [sch]
            self._tile(fork, block, *unit, gemm)
        except ScheduleError:
            return [sch]  # the unit does not fit this block (a layout, a transposed operand)
        return [fork]

    def _split(self, sch: Schedule, loop: Any, *choices: str) -> list[Any]:
        """``loop`` split into an outer loop and one loop per choice list, each of a size sampled
        among the list's sizes that divide what is left of the loop."""
        left, factors = extent(sch, loop), []
        for key in choices:
            sizes = [c for c in self.config[key] if left % c == 0] or [1]
            factors.append(sch.sample_categorical(sizes, [1.0] * len(sizes)))
            left //= max(sizes)  # a bound: the sizes sampled later must divide whatever was chosen
        return sch.split(loop, [None, *factors])

    def _tile(self, sch: Schedule, block: BlockRV, iset: IntrinsicSet, unit: Unit, gemm: Gemm | None) -> None:
        compute = iset[unit.compute]
        scope = {o.name: o.scope for o in compute.operands}
        a_name, b_name = [o.name for o in compute.operands if o.role == "input"]
        (c_name,) = [o.name for o in compute.operands if o.role in ("accumulator", "output")]
        copy_out = None
        if gemm is not None:  # accumulators go out through shared memory, copied to the output's layout
            copy_out = sch.cache_write(block, 0, "shared")
            sch.reverse_compute_inline(gemm.output_copy)
        store = sch.cache_write(block, 0, scope[c_name])
        shared = [sch.cache_read(block, k, "shared") for k in (0, 1)]
        frags = [sch.cache_read(block, 0, scope[a_name]), sch.cache_read(block, 1, scope[b_name])]
        if gemm is not None:  # the shared copies read the operands through the reindexing (im2col)
            for producer in gemm.input_copies:
                sch.compute_inline(producer)
        units, i, j, k = _gemm_loops(sch, block)
        (i_o, i16), (j_o, j16), (k_o, k16) = (sch.split(lp, [None, 16]) for lp in (i, j, k))
        i0, i1, i2 = self._split(sch, i_o, "warps", "warp_tiles")
        j0, j1, j2 = self._split(sch, j_o, "warps", "warp_tiles")
        k0, k1 = self._split(sch, k_o, "k_tiles")
        sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2, i16, j16, k16)
        sch.bind(sch.fuse(*units, i0, j0), "blockIdx.x")
        warp = sch.fuse(i1, j1)
        sch.bind(warp, "threadIdx.y")
        for loop in (k1, i2, j2):
            sch.unroll(loop)
        tile = sch.blockize(i16)
        sch.tensorize(sch.decompose_reduction(tile, k0), unit.init)
        sch.tensorize(tile, unit.compute)
        for frag, name in zip(frags, (a_name, b_name), strict=True):
            sch.compute_at(frag, k1)
            sch.tensorize(_tile_16x16(sch, frag), dict(unit.loads)[name])
        for cache in shared:
            sch.compute_at(cache, k0)
            sch.annotate(cache, COOPERATIVE_FETCH, 1)
        sch.reverse_compute_at(store, warp)
        if copy_out is None:
            sch.tensorize(_tile_16x16(sch, store), unit.store)
            return
        sch.tensorize(_tile_16x16(sch, store), _store_to_shared(iset, iset[unit.store]).name)
        sch.reverse_compute_at(copy_out, warp)
        loops = sch.get_loops(copy_out)
        below = next(n for n, lp in enumerate(loops) if sch.get(lp) is sch.get(warp)) + 1
        fused = sch.fuse(*loops[below:])  # the warp's tile, copied by its lanes
        _, lanes = sch.split(fused, [None, self.hardware.gpu.warp_size])
        sch.bind(lanes, "threadIdx.x")


class MultiLevelTilingGPU(ScheduleRule):
    """Tile a reduction no tensor-core unit computes ``SSRSRS`` for a GPU (TVM's GPU structure
    without virtual threads): each spatial loop split in 4 by ``sample_perfect_tile`` (thread
    block, thread, then two levels a thread runs), each reduction loop in 2; the first spatial
    level fused and bound to ``blockIdx.x``, the second to ``threadIdx.x``; a ``local`` write cache
    per thread; the inputs staged through ``shared`` memory per outer reduction step (cooperative
    fetch). Before (GEMM)::

        for b, i, j, k in T.grid(1, 1024, 1024, 1024):  Z[b, i, j] += X[b, i, k] * Y[b, k, j]

    After::

        for bx in T.thread_binding(I0 * J0, "blockIdx.x"):
          for tx in T.thread_binding(I1 * J1, "threadIdx.x"):
            for k0:
              X_shared, Y_shared = X[...], Y[...]          # all threads of the block
              for k1, i2, j2, ..., i3, j3: Z_local[...] += X_shared[...] * Y_shared[...]
            Z[...] = Z_local[...]
    """

    name = "MultiLevelTilingGPU"
    params = {"max_innermost_factor": 4, "max_reduction_step": 16}

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        blk = sch.get(block)
        if not is_reduction(sch, block) or not trivially_bound(sch, block) or blk.annotations:
            return [sch]
        if any(sch.get(lp).thread_binding for lp in sch.get_loops(block)):
            return [sch]  # a rule before this one bound it (the tensor cores)
        fork = sch.copy()
        try:
            self._tile(fork, block)
        except ScheduleError:
            return [sch]
        return [fork]

    def _tile(self, sch: Schedule, block: BlockRV) -> None:
        kinds = iter_kinds(sch, block)
        spatial: list[list[Any]] = [[], [], [], []]
        reduce: list[list[Any]] = [[], []]
        units = []
        for loop in sch.get_loops(block):
            if extent(sch, loop) == 1:
                units.append(loop)
            elif kinds.get(sch.get(loop).loop_var) == "R":
                step = self.config["max_reduction_step"]
                for level, part in zip(reduce, sch.split(loop, sch.sample_perfect_tile(loop, 2, step)), strict=True):
                    level.append(part)
            else:
                inner = self.config["max_innermost_factor"]
                for level, part in zip(spatial, sch.split(loop, sch.sample_perfect_tile(loop, 4, inner)), strict=True):
                    level.append(part)
        if not spatial[0] or not reduce[0]:
            raise ScheduleError("nothing to tile")
        sch.reorder(*units, *spatial[0], *spatial[1], *reduce[0], *spatial[2], *reduce[1], *spatial[3])
        sch.bind(sch.fuse(*units, *spatial[0]), "blockIdx.x")
        thread = sch.fuse(*spatial[1])
        sch.bind(thread, "threadIdx.x")
        out = sch.get(block).writes[0].buffer
        reads = [n for n, r in enumerate(sch.get(block).reads) if r.buffer is not out]
        sch.reverse_compute_at(sch.cache_write(block, 0, "local"), thread)
        for index in reads:
            cache = sch.cache_read(block, index, "shared")
            sch.compute_at(cache, reduce[0][-1])
            sch.annotate(cache, COOPERATIVE_FETCH, 1)
        sch.annotate(block, "meta_schedule.tiling_structure", "SSRSRS")


class AutoBind(ScheduleRule):
    """Bind a block that runs on no thread yet: its outer spatial loops fused, split over
    ``blockIdx.x`` x ``threadIdx.x`` (module doc)."""

    name = "AutoBind"
    params = {"thread_extents": [32, 64, 128, 256, 512, 1024]}

    def __init__(self, max_threads: int = 1024, **params: Any) -> None:
        super().__init__(**params)
        self.max_threads = max_threads

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        loops = sch.get_loops(block)
        if not loops or any(sch.get(lp).thread_binding for lp in loops) or sch.get(block).name == "root":
            return [sch]
        kinds = iter_kinds(sch, block)
        spatial = []
        for loop in loops:
            if kinds.get(sch.get(loop).loop_var) == "R":
                break
            spatial.append(loop)
        if not spatial:
            return [sch]
        fork = sch.copy()
        try:
            fused = fork.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            fits = [t for t in self.config["thread_extents"] if t <= self.max_threads]
            threads = [t for t in fits if extent(fork, fused) % t == 0] or fits[:1]  # whole blocks when possible
            n = fork.sample_categorical(threads, [1.0] * len(threads))
            bx, tx = fork.split(fused, [None, n])
            fork.bind(bx, "blockIdx.x")
            fork.bind(tx, "threadIdx.x")
        except ScheduleError:
            return [sch]
        return [fork]


# --------------------------------------------------------------------------------------------
# postprocessors


def gpu_rules_for(hardware: Hardware) -> list[ScheduleRule]:
    """The rules of a GPU design space, in order (module doc)."""
    return [
        MultiLevelTilingTensorCore(hardware=hardware),
        MultiLevelTilingGPU(),
        AutoInline(disallow_select=False),  # one kernel: a padding stage is computed where it is read
        AutoBind(max_threads=hardware.gpu.max_threads_per_block),
    ]
