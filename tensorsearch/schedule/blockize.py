"""Blockize: turn the subtree under a loop into a new outer block (TVM's ``blockize``)."""

from __future__ import annotations

from typing import Any

from ..arith import eval_int_set, simplify
from ..arith.iter_map import SubspaceDivision, subspace_divide
from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    For,
    IntImm,
    IterType,
    IterVar,
    Mutator,
    Node,
    PrimExpr,
    Range,
    Stmt,
    Var,
    substitute,
)
from ..ir.functor import free_vars
from .errors import InvalidArgument, LoopStructureError, NotAffineBinding
from .rv import BlockRV, LoopRV
from .state import ScheduleState, primitive
from .tree import child_blocks, find_block, loops_above, replace


class _SubstSimplify(Mutator):
    """Substitute vars; simplify the integer expressions that changed."""

    def __init__(self, mapping: dict[Var, PrimExpr], dom: dict[Var, Range]) -> None:
        self.mapping = mapping
        self.dom = dom

    def visit(self, node: Node) -> Any:
        if isinstance(node, Buffer):
            return node
        if isinstance(node, PrimExpr):
            if node.dtype.is_integer and node.dtype.lanes == 1 and not isinstance(node, BufferLoad):
                new = substitute(node, self.mapping)
                return node if new is node else simplify(new, self.dom)
            return super().visit(node)
        return super().visit(node)


def relax_regions(regions: tuple[BufferRegion, ...], dom: dict[Var, Range]) -> tuple[BufferRegion, ...]:
    """Each region relaxed over the vars of ``dom`` (an unbounded side falls back to the buffer's edge)."""
    out = []
    for region in regions:
        ranges = []
        for r, dim in zip(region.region, region.buffer.shape, strict=True):
            lo = eval_int_set(r.min, dom)
            hi = eval_int_set(simplify(r.min + r.extent - 1), dom)
            if not (lo.is_bounded and hi.is_bounded):
                ranges.append(Range(IntImm(dim.dtype, 0), dim))
                continue
            mn = simplify(lo.min_value)
            ranges.append(Range(mn, simplify(hi.max_value - mn + 1)))
        out.append(BufferRegion(region.buffer, tuple(ranges)))
    return tuple(out)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


class BlockizePrimitives(ScheduleState):
    @primitive()
    def blockize(self, target: LoopRV | list[BlockRV], preserve_unit_iters: bool = True) -> BlockRV:
        """Make the subtree under loop ``target`` the body of a new outer block ``<block>_o``.

        The single block under ``target`` has its bindings divided into a part over the loops
        outside ``target`` (bound to the new block's iterators ``v_o``) and a part over the
        loops from ``target`` inward (the block's new iterators ``v_i``); the outer block reads
        and writes the tile the inner block touches.  An ``init`` moves to the outer block as
        a loop nest over the inner spatial loops running a ``<block>_init`` block.

        Before (GEMM 64x64x64 tiled by 16)::

            for i0, j0, k0, i1, j1, k1 in T.grid(4, 4, 4, 16, 16, 16):
                with T.block("C"):
                    vi = T.axis.spatial(64, i0 * 16 + i1)
                    vj = T.axis.spatial(64, j0 * 16 + j1)
                    vk = T.axis.reduce(64, k0 * 16 + k1)
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        ``sch.blockize(i1)``::

            for i0, j0, k0 in T.grid(4, 4, 4):
                with T.block("C_o"):
                    vi_o, vj_o, vk_o = T.axis.remap("SSR", [i0, j0, k0])
                    T.reads(A[vi_o * 16:vi_o * 16 + 16, vk_o * 16:vk_o * 16 + 16],
                            B[vk_o * 16:vk_o * 16 + 16, vj_o * 16:vj_o * 16 + 16])
                    T.writes(C[vi_o * 16:vi_o * 16 + 16, vj_o * 16:vj_o * 16 + 16])
                    with T.init():
                        for i1_1, j1_1 in T.grid(16, 16):
                            with T.block("C_init"):
                                vi_i_init, vj_i_init = T.axis.remap("SS", [i1_1, j1_1])
                                T.reads()
                                T.writes(C[vi_o * 16 + vi_i_init, vj_o * 16 + vj_i_init])
                                C[vi_o * 16 + vi_i_init, vj_o * 16 + vj_i_init] = T.float32(0.0)
                    for i1, j1, k1 in T.grid(16, 16, 16):
                        with T.block("C"):
                            vi_i, vj_i, vk_i = T.axis.remap("SSR", [i1, j1, k1])
                            T.reads(C[...], A[...], B[...])
                            T.writes(C[vi_o * 16 + vi_i, vj_o * 16 + vj_i])
                            C[vi_o * 16 + vi_i, vj_o * 16 + vj_i] = C[...] + A[...] * B[...]

        Only the loop form is supported (not a list of blocks).
        """
        loop, realize, inner_loops = self._blockize_site(target, preserve_unit_iters)
        block = realize.block
        block_loc = find_block(self.func, block.name)
        assert block_loc is not None
        loop_dom = {f.loop_var: Range(f.min, f.extent) for f in loops_above(block_loc.path[:-1])}
        div = self._divide_bindings(loop, realize, loop_dom, {f.loop_var for f in inner_loops}, preserve_unit_iters)
        outer_ivs, outer_values, inner_ivs, inner_values, subst, inner_dom = self._split_iterators(
            block, div, loop_dom, preserve_unit_iters
        )
        # the inner block, rewritten in terms of the new iterators
        dom_all = {**{iv.var: iv.dom for iv in outer_ivs}, **inner_dom}
        mut = _SubstSimplify(subst, dom_all)
        reads = tuple(mut.visit(r) for r in block.reads)
        writes = tuple(mut.visit(w) for w in block.writes)
        body = mut.visit(block.body)
        init = mut.visit(block.init) if block.init is not None else None
        inner_reads = reads
        if init is not None and any(iv.iter_type == IterType.REDUCE for iv in outer_ivs):
            read_bufs = {r.buffer for r in reads}
            inner_reads = tuple(w for w in writes if w.buffer not in read_bufs) + reads
        inner_block = Block(
            block.name,
            tuple(inner_ivs),
            inner_reads,
            writes,
            body,
            None,
            tuple(mut.visit(b) for b in block.alloc_buffers),
            tuple(mut.visit(m) for m in block.match_buffers),
            block.annotations,
        )
        inner_realize = BlockRealize(tuple(inner_values), div.inner_predicate, inner_block)
        nest: Stmt = inner_realize
        for f in reversed(inner_loops):
            nest = For(f.loop_var, f.min, f.extent, f.kind, nest, f.thread_binding, f.annotations)

        # the outer block
        outer_name = self._unique_block_name(block.name + "_o")
        outer_init = None
        if init is not None:
            outer_init = self._outer_init(init, inner_realize, inner_loops, writes, block.name + "_init")
        outer_block = Block(
            outer_name,
            tuple(outer_ivs),
            relax_regions(reads, inner_dom),
            relax_regions(writes, inner_dom),
            nest,
            outer_init,
        )
        outer_realize = BlockRealize(tuple(outer_values), div.outer_predicate, outer_block)
        self.func = replace(self.func, {id(loop): outer_realize})
        return self._new_block_rv(outer_name)

    def _blockize_site(self, target: LoopRV, preserve_unit_iters: bool) -> tuple[For, BlockRealize, list[For]]:
        """Check blockize's arguments: the subtree under loop ``target`` is a chain of loops down
        to exactly one block. Returns the loop, the block's realize and the chain of loops."""
        if isinstance(target, list | tuple):
            raise InvalidArgument(
                "blockize: target must be a LoopRV; blockizing a list of blocks is not supported, only the loop form"
            )
        if not isinstance(target, LoopRV):
            raise InvalidArgument(f"blockize: target must be a LoopRV, got {type(target).__name__}")
        if not isinstance(preserve_unit_iters, bool):
            raise InvalidArgument(f"blockize: preserve_unit_iters must be a bool, got {preserve_unit_iters!r}")
        loop_loc = self._loop(target)
        loop: For = loop_loc.node
        name = loop.loop_var.name

        # Step 1: the subtree must be a chain of loops down to exactly one block.
        realizes = child_blocks(loop)
        if len(realizes) != 1:
            names = ", ".join(r.block.name for r in realizes) or "none"
            raise LoopStructureError(
                f"cannot blockize loop {name}: the subtree under it must contain exactly one block, "
                f"it contains {len(realizes)} ({names})",
                loop=name,
                fragment=self._fragment(loop),
            )
        realize = realizes[0]
        block = realize.block
        inner_loops: list[For] = []
        node: Stmt = loop
        while isinstance(node, For):
            inner_loops.append(node)
            node = node.body
        if node is not realize:
            raise LoopStructureError(
                f"cannot blockize loop {name}: the path from it to block {block.name} must consist of loops only, "
                f"found a {type(node).__name__}",
                loop=name,
                block=block.name,
                fragment=self._fragment(loop),
            )
        return loop, realize, inner_loops

    def _divide_bindings(
        self,
        loop: For,
        realize: BlockRealize,
        loop_dom: dict[Var, Range],
        inner_vars: set[Var],
        preserve_unit_iters: bool,
    ) -> SubspaceDivision:
        """The block's bindings divided into a part over the loops outside ``loop`` and a part
        over the loops from ``loop`` inward (:func:`~tensorsearch.arith.subspace_divide`)."""
        name, block = loop.loop_var.name, realize.block
        div = subspace_divide(
            list(realize.iter_values), loop_dom, inner_vars, realize.predicate, preserve_unit_iters=preserve_unit_iters
        )
        if div.parts is None:
            which = ""
            if div.index is not None:
                iv = block.iter_vars[div.index]
                which = f" of iterator {iv.var.name}"
            raise NotAffineBinding(
                f"cannot blockize block {block.name} at loop {name}: the binding{which} cannot be divided into a part "
                f"over the loops outside {name} and a part over the loops inside it: {div.error}",
                block=block.name,
                loop=name,
                fragment=self._fragment(realize),
            )
        return div

    def _split_iterators(
        self, block: Block, div: SubspaceDivision, loop_dom: dict[Var, Range], preserve_unit_iters: bool
    ) -> tuple[list[IterVar], list[PrimExpr], list[IterVar], list[PrimExpr], dict[Var, PrimExpr], dict[Var, Range]]:
        """The iterators and bindings of the outer (``v_o``) and inner (``v_i``) blocks, the
        substitution of each old iterator by them, and the inner iterators' domains. An
        iterator whose inner part has extent 1 gets no inner iterator."""
        outer_ivs: list[IterVar] = []
        outer_values: list[PrimExpr] = []
        inner_ivs: list[IterVar] = []
        inner_values: list[PrimExpr] = []
        subst: dict[Var, PrimExpr] = {}
        inner_dom: dict[Var, Range] = {}
        for iv, (o, o_ext, i, i_ext) in zip(block.iter_vars, div.parts, strict=True):
            dt = iv.var.dtype
            o_lo = self._lower(o, loop_dom)
            outer = IterVar(Var(iv.var.name + "_o", dt), Range(IntImm(dt, o_lo), IntImm(dt, o_ext)), iv.iter_type)
            outer_ivs.append(outer)
            outer_values.append(o)
            if i_ext == 1:
                if o_ext == 1 and not preserve_unit_iters:
                    subst[iv.var] = IntImm(dt, o_lo) if o_lo else IntImm(dt, 0)
                else:
                    subst[iv.var] = outer.var
                continue
            i_lo = self._lower(i, loop_dom)
            inner = IterVar(Var(iv.var.name + "_i", dt), Range(IntImm(dt, i_lo), IntImm(dt, i_ext)), iv.iter_type)
            inner_ivs.append(inner)
            inner_values.append(i)
            inner_dom[inner.var] = inner.dom
            subst[iv.var] = inner.var if o_ext == 1 else outer.var * i_ext + inner.var
        return outer_ivs, outer_values, inner_ivs, inner_values, subst, inner_dom

    @staticmethod
    def _lower(e: PrimExpr, dom: dict[Var, Range]) -> int:
        if isinstance(e, IntImm):
            return e.value
        s = eval_int_set(e, dom)
        lo = simplify(s.min_value)
        return lo.value if isinstance(lo, IntImm) else 0

    def _outer_init(
        self,
        init: Stmt,
        inner_realize: BlockRealize,
        inner_loops: list[For],
        writes: tuple[BufferRegion, ...],
        base_name: str,
    ) -> Stmt:
        """A loop nest over the inner loops that the init's spatial iterators use, running the init."""
        used = set(free_vars(init))
        subst: dict[Var, PrimExpr] = {}
        ivs: list[IterVar] = []
        values: list[PrimExpr] = []
        for iv, value in zip(inner_realize.block.iter_vars, inner_realize.iter_values, strict=True):
            if iv.iter_type == IterType.SPATIAL and iv.var in used:
                new = Var(iv.var.name + "_init", iv.var.dtype)
                subst[iv.var] = new
                ivs.append(IterVar(new, iv.dom, iv.iter_type))
                values.append(value)
        name = self._unique_block_name(base_name)
        block = Block(name, tuple(ivs), (), tuple(substitute(w, subst) for w in writes), substitute(init, subst))
        stmt: Stmt = BlockRealize(tuple(values), inner_realize.predicate, block)
        value_vars: set[Var] = set()
        for v in (*values, inner_realize.predicate):
            value_vars.update(free_vars(v))
        loop_subst: dict[Var, PrimExpr] = {}
        for f in reversed(inner_loops):
            if f.loop_var in value_vars:
                new_var = Var(f.loop_var.name, f.loop_var.dtype)
                loop_subst[f.loop_var] = new_var
                stmt = For(new_var, f.min, f.extent, f.kind, stmt, f.thread_binding, f.annotations)
        return substitute(stmt, loop_subst)
