"""Postprocessors: turn a sampled design-space schedule into a concrete, buildable program.

They run after ``sch.enter_postproc()`` and are ordinary traced primitives, so a candidate's trace
replays to the very program that was measured. Each ``apply(sch)`` returns False (or raises a
ScheduleError) to reject the candidate. In order (TVM's CPU postprocessors):

* ``DisallowDynamicLoop``: every loop extent is a constant;
* ``RewriteReductionBlock``: each block with an init is ``decompose_reduction``-ed at its
  outermost reduction loop, so the init runs once per output tile;
* ``RewriteTensorize``: each block annotated ``meta_schedule.auto_tensorize = NAME`` is
  ``tensorize``-d with that intrinsic (the annotation is removed; the init block of a tensorized
  reduction only loses it);
* ``RewriteParallelVectorizeUnroll``: the root block's annotations become loop kinds: the
  outermost spatial loops of each loop nest are fused and made ``parallel`` up to the sampled
  extent, the innermost spatial loop of each block is ``vectorize``-d when its extent is at most
  the vectorize extent, and every serial loop whose body runs at most the sampled unroll step
  (the product of the extents below it) is ``unroll``-ed.
"""

from __future__ import annotations

from typing import Any

from ...ir import Block, BlockRealize, For, ForKind, IntImm, Var
from ...ir.functor import free_vars
from ...ir.stmt import IterType
from ...schedule import BlockRV, Schedule, ScheduleError
from ...schedule.tree import find_block, loops_above, stmt_children, walk_nodes
from ..space.rule import AUTO_TENSORIZE, PARALLEL, UNROLL, VECTORIZE
from .common import Postproc, block_names, blocks


def _reduce_loop_vars(realize: BlockRealize) -> set[Var]:
    out: set[Var] = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
        if iv.iter_type == IterType.REDUCE:
            out.update(free_vars(value))
    return out


class RewriteReductionBlock(Postproc):
    name = "RewriteReductionBlock"

    def apply(self, sch: Schedule) -> bool:
        for block in blocks(sch, lambda b: b.init is not None):
            realize, _ = sch._block_realize(block)
            reduce_vars = _reduce_loop_vars(realize)
            loops = sch.get_loops(block)
            first = next((lp for lp in loops if sch.get(lp).loop_var in reduce_vars), None)
            if first is None:
                continue  # the reduction is inside the block (a blockized tile): nothing to split
            sch.decompose_reduction(block, first)
        return True


class RewriteTensorize(Postproc):
    name = "RewriteTensorize"

    def apply(self, sch: Schedule) -> bool:
        for block in blocks(sch, lambda b: AUTO_TENSORIZE in dict(b.annotations)):
            intrin = dict(sch.get(block).annotations)[AUTO_TENSORIZE]
            sch.unannotate(block, AUTO_TENSORIZE)
            takes_init = _unit_zeroes_its_tile(sch, str(intrin))
            if (sch.get(block).init is None or takes_init) and not _writes_only_constants(sch.get(block)):
                sch.tensorize(block, str(intrin))
        return True


def _unit_zeroes_its_tile(sch: Schedule, name: str) -> bool:
    """Whether ``name`` is the compute intrinsic of a unit on tile registers with an init
    intrinsic: its tile spans the reduction (``tile_with_intrin``), and the unit zeroes the
    accumulator tile itself, so the tile keeps its init."""
    sets = sch.hardware.intrinsic_sets if sch.hardware is not None else ()
    return any(s.tiles is not None and any(u.compute == name and u.init for u in s.units) for s in sets)


def _writes_only_constants(block: Block) -> bool:
    """The init block a decomposed tile reduction leaves (it only stores constants)."""
    loads: list[Any] = []
    from ...ir import BufferLoad
    from ...ir.functor import post_order_visit

    post_order_visit(block.body, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    return not loads


class RewriteParallelVectorizeUnroll(Postproc):
    name = "RewriteParallelVectorizeUnroll"

    def __init__(self, vector_bits: int = 0) -> None:
        self.vector_bits = vector_bits

    def apply(self, sch: Schedule) -> bool:
        root = sch.get_block("root")
        anns = dict(sch.get(root).annotations)
        par = anns.get(PARALLEL)
        vec = anns.get(VECTORIZE)
        unroll = anns.get(UNROLL)
        for key in (PARALLEL, VECTORIZE, UNROLL):
            if key in anns:
                sch.unannotate(root, key)
        leaves = [n for n in block_names(sch) if _is_leaf(sch, n)]
        if par:
            for child in sch.get_child_blocks(root):  # the blocks of the root scope own the outer loops
                self._parallelize(sch, child, int(par))
        if vec:
            for name in leaves:
                self._vectorize(sch, sch.get_block(name), int(vec), self.vector_bits)
        if unroll:
            self._unroll(sch, int(unroll))
        return True

    @staticmethod
    def _parallelize(sch: Schedule, block: BlockRV, limit: int) -> None:
        loops = sch.get_loops(block)
        if not loops or sch.get(loops[0]).kind != ForKind.SERIAL:
            return  # already parallel (a nest shared with an earlier block) or otherwise claimed
        chain = [loops[0]]
        for lp in loops[1:]:
            if sch.get(chain[-1]).body is not sch.get(lp):
                break
            chain.append(lp)
        count, product = 0, 1
        for lp in chain:  # fuse outer loops until their product reaches the parallel extent
            ext = sch.get(lp).extent
            if not isinstance(ext, IntImm) or product >= limit:
                break
            product *= ext.value
            count += 1
        while count > 0:
            try:
                target = sch.fuse(chain[:count]) if count > 1 else chain[0]
                if sch.get(target).extent.value > 1:
                    sch.parallel(target)
                return
            except ScheduleError:
                count -= 1

    @staticmethod
    def _vectorize(sch: Schedule, block: BlockRV, limit: int, vector_bits: int = 0) -> None:
        """Vectorize the block's innermost loop; a loop longer than one machine vector is split
        into whole vectors first (outer part unrolled), so that each vector access stays within
        one aligned group of lanes (a panel of a packed buffer, say)."""
        if sch.get(block).match_buffers:
            return  # tensorized
        loops = sch.get_loops(block)
        if not loops:
            return
        inner = sch.get(loops[-1])
        realize, _ = sch._block_realize(block)
        if inner.body is not realize or inner.kind != ForKind.SERIAL or not isinstance(inner.extent, IntImm):
            return
        ext = inner.extent.value
        if not 1 < ext <= limit:
            return
        store = realize.block.body
        bits = store.buffer.dtype.bits if hasattr(store, "buffer") else 32
        lanes = vector_bits // bits if vector_bits else 0
        try:
            if lanes > 1 and ext > lanes and ext % lanes == 0:
                outer, vec = sch.split(loops[-1], [None, lanes])
                sch.vectorize(vec)
                sch.unroll(outer)
            else:
                sch.vectorize(loops[-1])
        except ScheduleError:
            pass

    @staticmethod
    def _unroll(sch: Schedule, max_step: int) -> None:
        """Unroll every serial loop whose whole body runs at most ``max_step`` steps (a vectorized
        loop and a tensorized tile count as one step), as TVM's ``auto_unroll_max_step``."""
        small: list[Var] = []

        def steps(node: Any) -> int:
            if isinstance(node, For):
                inner = steps(node.body)
                if node.kind == ForKind.VECTORIZED:
                    return inner
                ext = node.extent.value if isinstance(node.extent, IntImm) else max_step + 1
                total = ext * inner
                if node.kind == ForKind.SERIAL and ext > 1 and total <= max_step:
                    small.append(node.loop_var)
                return total
            if isinstance(node, BlockRealize):
                return steps(node.block.body)
            kids = stmt_children(node)
            return sum(steps(k) for k in kids) if kids else 1

        steps(sch.func.body)
        if not small:
            return
        by_var = {}
        wanted = set(small)
        for name in block_names(sch):
            loc = find_block(sch.func, name)
            if loc is None or wanted.isdisjoint(lp.loop_var for lp in loops_above(loc.path[:-1])):
                continue  # no loop left to unroll above it: no need for its loops' random variables
            for lp in sch.get_loops(sch.get_block(name)):
                var = sch.get(lp).loop_var
                by_var.setdefault(var, lp)
                wanted.discard(var)
        for var in small:
            if var in by_var:
                sch.unroll(by_var[var])


def _is_leaf(sch: Schedule, name: str) -> bool:
    """A block with no block inside it (a tensorized block counts: its tile is gone)."""
    loc = find_block(sch.func, name)  # a question about the program: nothing for the trace
    return loc is not None and not any(isinstance(node, BlockRealize) for node in walk_nodes(loc.node.body))
