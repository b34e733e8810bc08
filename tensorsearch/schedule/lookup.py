"""Lookup primitives: get_block, get_loops, get_child_blocks, get_producers, get_consumers."""

from __future__ import annotations

from ..ir import Block, BlockRealize
from .errors import BlockNotFound, InvalidArgument
from .rv import BlockRV, LoopRV
from .state import ScheduleState, primitive
from .tree import child_blocks, enclosing_block, find_block, loops_above, walk_stmts


class LookupPrimitives(ScheduleState):
    @primitive(pure=True)
    def get_block(self, name: str) -> BlockRV:
        """The block named ``name``.

        ``sch.get_block("C")`` on a GEMM returns the BlockRV of ``with T.block("C")``.
        """
        if not isinstance(name, str):
            raise InvalidArgument(f"get_block takes a block name, got {type(name).__name__} {name!r}")
        if find_block(self.func, name) is not None:
            return self._new_block_rv(name)
        names = []
        for loc in walk_stmts(self.func.body):
            if isinstance(loc.node, Block):
                if loc.node.name == name:
                    return self._new_block_rv(name)
                names.append(loc.node.name)
        raise BlockNotFound(f"no block named {name}; the program has blocks {', '.join(names)}", block=name)

    @primitive(pure=True)
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around ``block`` up to its scope block, outermost first.

        For ``for i, j, k in T.grid(...): with T.block("C")`` it returns ``[i, j, k]``.
        """
        loc = self._block(block)
        return [self._new_loop_rv(loop.loop_var) for loop in loops_above(loc.path[:-1])]

    @primitive(pure=True)
    def get_child_blocks(self, parent: BlockRV | LoopRV) -> list[BlockRV]:
        """The blocks directly inside a block or a loop (not inside a nested block), in order."""
        if isinstance(parent, BlockRV):
            node = self._block(parent).node
        elif isinstance(parent, LoopRV):
            node = self._loop(parent).node
        else:
            raise InvalidArgument(f"get_child_blocks takes a BlockRV or LoopRV, got {type(parent).__name__}")
        return [self._new_block_rv(r.block.name) for r in child_blocks(node)]

    def _siblings(self, block: BlockRV) -> tuple[Block, list[BlockRealize]]:
        loc = self._block(block)
        scope = enclosing_block(loc.path)
        if scope is None:
            raise InvalidArgument(f"block {loc.node.name} is the root block; it has no producers or consumers")
        return loc.node, child_blocks(scope)

    @primitive(pure=True)
    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks in the same scope that write a buffer ``block`` reads, in program order."""
        me, siblings = self._siblings(block)
        reads = {r.buffer for r in me.reads}
        return [
            self._new_block_rv(r.block.name)
            for r in siblings
            if r.block is not me and any(w.buffer in reads for w in r.block.writes)
        ]

    @primitive(pure=True)
    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """The blocks in the same scope that read a buffer ``block`` writes, in program order."""
        me, siblings = self._siblings(block)
        writes = {w.buffer for w in me.writes}
        return [
            self._new_block_rv(r.block.name)
            for r in siblings
            if r.block is not me and any(x.buffer in writes for x in r.block.reads)
        ]

    @primitive()
    def enter_postproc(self) -> None:
        """Mark the end of the design-space part of a trace; what follows is postprocessing.

        The primitive cache remembers no call after this point: no other replay reaches a program
        made after it (a mutant differs from its parent before it); remembering them only filled
        the cache and the heap."""
        self._postproc = True
