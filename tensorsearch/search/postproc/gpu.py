"""The GPU postprocessors: the cooperative fetch of shared-memory copies made real (warps and
lanes), and candidates whose thread block exceeds the descriptor's ``gpu:`` limits refused
(threads, shared memory, registers estimated from the WMMA fragments).
"""

from __future__ import annotations

import contextlib
from typing import Any

from ...ir import BufferLoad, BufferStore, IntImm
from ...schedule import BlockRV, Schedule, ScheduleError
from ...target import Hardware
from ..space.rule import COOPERATIVE_FETCH, THREAD_EXTENTS, extent
from .common import DisallowDynamicLoop, Postproc, blocks


def _own_loops(sch: Schedule, block: BlockRV) -> list[Any]:
    """The innermost loops around ``block`` that hold nothing else: the copy's own loop nest
    (how many there are depends on the sampled tile sizes: a unit region gets no loop)."""
    from ...ir import BlockRealize
    from ...schedule.tree import walk_nodes

    name = sch.get(block).name
    own = []
    for loop in reversed(sch.get_loops(block)):
        node = sch.get(loop)
        names = {n.block.name for n in walk_nodes(node.body) if isinstance(n, BlockRealize)}
        if names != {name} or node.thread_binding:
            break
        own.insert(0, loop)
    return own


def _thread_extent(sch: Schedule, tag: str) -> int | None:
    """The extent of the loops bound to ``tag`` (None: no loop is)."""
    from ...ir import For
    from ...schedule.tree import walk_nodes

    for node in walk_nodes(sch.func.body):
        if isinstance(node, For) and node.thread_binding == tag and isinstance(node.extent, IntImm):
            return node.extent.value
    return None


class RewriteCooperativeFetch(Postproc):
    """Fuse a marked shared-memory copy's loops and split them over the thread block's warps
    (``threadIdx.y``) and lanes (``threadIdx.x`` = the warp size)."""

    name = "RewriteCooperativeFetch"

    def __init__(self, warp_size: int = 32) -> None:
        self.warp_size = warp_size

    def apply(self, sch: Schedule) -> bool:
        warps = _thread_extent(sch, "threadIdx.y") or 1
        lanes = _thread_extent(sch, "threadIdx.x") or self.warp_size  # WMMA kernels: one warp per unit
        for block in list(blocks(sch)):
            if COOPERATIVE_FETCH not in dict(sch.get(block).annotations):
                continue
            copy_loops = _own_loops(sch, block)
            if not copy_loops:
                sch.unannotate(block, COOPERATIVE_FETCH)
                continue
            threads = warps * lanes
            total = 1
            for loop in copy_loops:
                total *= extent(sch, loop)
            bits = sch.get(block).writes[0].buffer.dtype.bits
            plain = isinstance(sch.get(block).body, BufferStore) and isinstance(sch.get(block).body.value, BufferLoad)
            width = 1
            if plain and total % threads == 0:  # else the last round is guarded: elements one at a time
                width = self._vector_width(bits, total // threads, extent(sch, copy_loops[-1]))
            vec = None
            if width > 1:  # each thread copies whole vectors of one row: split the row first
                col, vec = sch.split(copy_loops[-1], [None, width])
                copy_loops = [*copy_loops[:-1], col]
            fused = sch.fuse(*copy_loops) if len(copy_loops) > 1 else copy_loops[0]
            if warps > 1:
                _, ty, tx = sch.split(fused, [None, warps, lanes])
                sch.bind(ty, "threadIdx.y")
            else:
                _, tx = sch.split(fused, [None, lanes])
            sch.bind(tx, "threadIdx.x")
            if vec is not None:
                with contextlib.suppress(ScheduleError):  # bindings the vectorizer refuses: the loop stays serial
                    sch.vectorize(vec)
            sch.unannotate(block, COOPERATIVE_FETCH)
        return True

    @staticmethod
    def _vector_width(bits: int, per_thread: int, row: int) -> int:
        """Elements per thread and access: the widest of 128, 64 and 32 bits that divides each
        thread's share and the copy's rows (so every vector stays inside one row)."""
        for width in (128, 64, 32):
            lanes = max(width // bits, 1)
            if per_thread % lanes == 0 and row % lanes == 0:
                return lanes
        return 1

    def __repr__(self) -> str:
        return f"{self.name}()"


class VerifyGPUCode(Postproc):
    """Reject a candidate whose thread block exceeds the descriptor's ``gpu:`` limits (module doc)."""

    name = "VerifyGPUCode"

    def __init__(self, hardware: Hardware) -> None:
        self.hardware = hardware

    def apply(self, sch: Schedule) -> bool:
        return gpu_limits_error(sch.func, self.hardware) is None

    def __repr__(self) -> str:
        return f"{self.name}()"


def gpu_limits_error(func: Any, hw: Hardware) -> str | None:
    """Why ``func``'s thread block does not fit ``hw``'s limits (threads, shared memory, registers),
    or None. Registers are estimated from the WMMA fragments a thread holds (8 32-bit registers a
    float32 accumulator, 4 a float16 fragment) plus 32 for addresses and loop counters."""
    from ...ir import Allocate, For
    from ...ir.functor import post_order_visit
    from ...lower.gpu import lower_gpu

    gpu = hw.gpu
    low = lower_gpu(func, hw)
    extents: dict[str, int] = {}
    shared = 0
    registers = 32
    fragments = False

    def visit(n: Any) -> None:
        nonlocal shared, registers, fragments
        if isinstance(n, For) and (n.thread_binding or "").startswith("threadIdx.") and isinstance(n.extent, IntImm):
            extents[n.thread_binding] = n.extent.value
        elif isinstance(n, Allocate):
            size = 1
            for x in n.buffer.shape:
                size *= x.value if isinstance(x, IntImm) else 1
            if n.buffer.scope == "shared":
                shared += size * n.buffer.dtype.bits // 8
            elif n.buffer.scope.startswith("wmma."):
                fragments = True
                registers += size // 32 * n.buffer.dtype.bits // 32  # 32 lanes share a fragment

    post_order_visit(low.body, visit)
    if fragments:
        extents.setdefault("threadIdx.x", gpu.warp_size)
    threads = 1
    for tag in THREAD_EXTENTS:
        threads *= extents.get(tag, 1)
    if threads > gpu.max_threads_per_block:
        return f"{threads} threads per block, more than {gpu.max_threads_per_block}"
    if shared > gpu.max_shared_memory_per_block:
        return f"{shared} bytes of shared memory per block, more than {gpu.max_shared_memory_per_block}"
    if registers > gpu.registers_per_thread or registers * threads > gpu.registers_per_block:
        return f"about {registers} registers per thread, more than the {gpu.registers_per_thread} allowed"
    return None


def gpu_postprocs_for(hardware: Hardware) -> list[Any]:
    return [DisallowDynamicLoop(), RewriteCooperativeFetch(hardware.gpu.warp_size), VerifyGPUCode(hardware)]
