"""Reduction primitives: decompose_reduction, rfactor, pad_einsum (TVM's semantics and rules).

* ``decompose_reduction(block, loop)`` splits a reduction block's ``init`` out into its own block
  ``<name>_init`` placed just before ``loop``; the update block loses its init and is renamed
  ``<name>_update`` (as current TVM does; BlockRVs of the block follow it).
* ``rfactor(loop, factor_axis)`` factors the reduction over ``loop`` out into a new block
  ``<name>_rf`` that computes partial results into ``<buffer>_rf``; the original block then
  reduces those partial results.
* ``pad_einsum(block, padding)`` pads the iteration space of an einsum-like block up to multiples
  of ``padding``, with zero-padded copies of its inputs and a padded output copied back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .. import arith
from ..arith.iter_map import affine_binding_error
from ..ir import (
    TRUE,
    Add,
    And,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Cast,
    FloatImm,
    For,
    ForKind,
    IntImm,
    IterType,
    IterVar,
    Max,
    Min,
    Mul,
    Node,
    PrimExpr,
    Range,
    Select,
    SeqStmt,
    Stmt,
    Var,
    const,
    free_vars,
    map_children,
    post_order_visit,
    seq,
    substitute,
)
from ..target.matcher import non_plain_padded_index
from .analysis import loop_domains
from .errors import InvalidArgument, LoopKindError, LoopStructureError, NotAffineBinding, NotReductionBlock
from .rv import BlockRV, LoopRV
from .state import ScheduleState, primitive
from .tree import (
    Located,
    child_blocks,
    enclosing_block,
    find_block,
    find_loop,
    loops_above,
    replace,
    stmt_uses,
    walk_stmts,
)

# ---------------------------------------------------------------------------------------
# helpers


def _uses(expr: Node, variables: set[Var]) -> bool:
    return stmt_uses(expr, lambda node: type(node) is Var and node in variables)


def _vars_of(expr: Node) -> set[Var]:
    out: set[Var] = set()
    post_order_visit(expr, lambda n: out.add(n) if isinstance(n, Var) else None)
    return out


def _conjuncts(pred: PrimExpr) -> list[PrimExpr]:
    if isinstance(pred, And):
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    if isinstance(pred, IntImm) and pred.value == 1:
        return []
    return [pred]


def _and_all(conds: list[PrimExpr]) -> PrimExpr:
    result: PrimExpr = TRUE
    for c in conds:
        result = c if result is TRUE else And(result, c)
    return result


def _names(items: Any) -> str:
    return ", ".join(items)


def _scope_of(loc: Located) -> Block | None:
    return enclosing_block(loc.path)


def _unique_buffer_name(func: Any, base: str) -> str:
    names = {b.name for b in func.buffers}
    for sloc in walk_stmts(func.body):
        if isinstance(sloc.node, Block):
            names.update(b.name for b in sloc.node.alloc_buffers)
            names.update(m.buffer.name for m in sloc.node.match_buffers)
    if base not in names:
        return base
    n = 1
    while f"{base}_{n}" in names:
        n += 1
    return f"{base}_{n}"


_COMBINER_FORMS = "C[...] = C[...] + x, C[...] = T.max(C[...], x) or C[...] = T.min(C[...], x)"


def _identity(kind: type, dtype: Any) -> PrimExpr:
    if kind is Add:
        return const(0, dtype)
    if kind is Max:
        return const(dtype.min_value(), dtype)
    return const(dtype.max_value(), dtype)


class ReductionPrimitives(ScheduleState):
    # -----------------------------------------------------------------------------------
    # shared checks

    def _check_reduction_block(self, primitive_name: str, loc: Located, realize: BlockRealize) -> None:
        """TVM's CheckReductionBlock: init, only spatial/reduce iterators, affine bindings,
        output indices free of reduce iterators, and the only writer of its outputs in the scope."""
        block = loc.node
        frag = self._fragment(block)
        if block.init is None:
            raise NotReductionBlock(
                f"{primitive_name} needs a reduction block, but block {block.name} has no init statement",
                block=block.name,
                fragment=frag,
            )
        if not any(iv.iter_type == IterType.REDUCE for iv in block.iter_vars):
            raise NotReductionBlock(
                f"{primitive_name} needs a reduction block, but block {block.name} has no reduce iterator",
                block=block.name,
                fragment=frag,
            )
        for iv in block.iter_vars:
            if iv.iter_type not in (IterType.SPATIAL, IterType.REDUCE):
                raise NotReductionBlock(
                    f"{primitive_name} needs a reduction block, but iterator {iv.var.name} of block {block.name} "
                    f"is {iv.iter_type.value}; a reduction block has only spatial and reduce iterators",
                    block=block.name,
                    fragment=frag,
                )
        reduce_vars = {iv.var for iv in block.iter_vars if iv.iter_type == IterType.REDUCE}
        for w in block.writes:
            for r in w.region:
                if _uses(r.min, reduce_vars) or _uses(r.extent, reduce_vars):
                    raise NotReductionBlock(
                        f"{primitive_name} needs a reduction block, but block {block.name} writes {w.buffer.name} "
                        "at an index that depends on a reduce iterator",
                        block=block.name,
                        fragment=frag,
                    )
        loops = loops_above(loc.path[:-1])
        reason = affine_binding_error(realize, loop_domains(loops))
        if reason is not None:
            raise NotAffineBinding(
                f"{primitive_name} needs an affine binding: {reason}",
                block=block.name,
                fragment=self._fragment(realize),
            )
        scope = _scope_of(loc)
        if scope is not None:
            written = {w.buffer for w in block.writes}
            for other in child_blocks(scope):
                if other.block is block:
                    continue
                clash = [w.buffer.name for w in other.block.writes if w.buffer in written]
                if clash:
                    raise NotReductionBlock(
                        f"{primitive_name} needs block {block.name} to be the only writer of {clash[0]} in its scope, "
                        f"but block {other.block.name} writes it too",
                        block=block.name,
                        fragment=self._fragment(scope),
                    )

    # -----------------------------------------------------------------------------------
    # decompose_reduction

    @primitive()
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Split the init of a reduction block out into a block ``<name>_init`` placed before ``loop``.

        The init block runs under the loops above ``loop`` and under fresh copies (``i_init``) of
        the loops at or below ``loop`` that its spatial iterators are bound to; the update block
        keeps the reduction without its init, reads its output, and is renamed ``<name>_update``
        (the BlockRV ``block`` follows it).  ``loop`` must be an ancestor of the block and no loop
        above it may be bound to a reduce iterator.  Returns the init block.

        Before::

            for i, j, k in T.grid(32, 32, 32):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        ``sch.decompose_reduction(sch.get_block("C"), k)``::

            for i, j in T.grid(32, 32):
                with T.block("C_init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads()
                    T.writes(C[vi, vj])
                    C[vi, vj] = T.float32(0.0)
                for k in T.serial(32):
                    with T.block("C_update"):
                        vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                        T.reads(C[vi, vj], A[vi, vk], B[vk, vj])
                        T.writes(C[vi, vj])
                        C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
        """
        realize, loc = self._block_realize(block)
        blk: Block = loc.node
        loop_node: For = self._loop(loop).node
        loops = loops_above(loc.path[:-1])
        pos = next((n for n, lp in enumerate(loops) if lp is loop_node), None)
        if pos is None:
            raise LoopStructureError(
                f"decompose_reduction needs loop {loop_node.loop_var.name} to be an ancestor of block {blk.name}",
                block=blk.name,
                loop=loop_node.loop_var.name,
                fragment=self._fragment(loop_node),
            )
        self._check_reduction_block("decompose_reduction", loc, realize)
        # no loop above `loop` may be bound to a reduce iterator
        for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
            if iv.iter_type != IterType.REDUCE:
                continue
            for higher in loops[:pos]:
                if _uses(value, {higher.loop_var}):
                    raise LoopStructureError(
                        f"decompose_reduction needs loop {loop_node.loop_var.name} to be higher than all the loops "
                        f"related to reduce iterators of block {blk.name}, but loop {higher.loop_var.name} above it "
                        f"is bound to reduce iterator {iv.var.name}",
                        block=blk.name,
                        loop=loop_node.loop_var.name,
                        fragment=self._fragment(loops[0]),
                    )

        # a loop at or below `loop` bound to no iterator repeats the whole reduction, whose init
        # then re-runs every time; a single init block before `loop` would change the result
        bound_vars = set().union(*(_vars_of(v) for v in realize.iter_values))
        for lp in loops[pos:]:
            if lp.loop_var not in bound_vars and not (isinstance(lp.extent, IntImm) and lp.extent.value == 1):
                raise LoopStructureError(
                    f"decompose_reduction cannot decompose block {blk.name} at loop {loop_node.loop_var.name}: loop "
                    f"{lp.loop_var.name}{'' if lp is loop_node else ' below it'} is bound to no iterator of the block, "
                    "so the reduction repeats inside it and a single init before the loop would change the result",
                    block=blk.name,
                    loop=lp.loop_var.name,
                    fragment=self._fragment(loops[pos]),
                )

        init_name = self._unique_block_name(f"{blk.name}_init")
        update_name = self._unique_block_name(f"{blk.name}_update")
        # step 1: the init block's iterators (copies of the spatial ones) and bindings
        var_map: dict[Var, PrimExpr] = {}
        init_iters: list[IterVar] = []
        init_values: list[PrimExpr] = []
        for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
            if iv.iter_type != IterType.SPATIAL:
                continue
            new_var = Var(iv.var.name, iv.var.dtype)
            init_iters.append(IterVar(new_var, iv.dom, IterType.SPATIAL))
            init_values.append(value)
            var_map[iv.var] = new_var
        init_body = substitute(blk.init, var_map)
        init_writes = tuple(
            BufferRegion(
                w.buffer, tuple(Range(substitute(r.min, var_map), substitute(r.extent, var_map)) for r in w.region)
            )
            for w in blk.writes
        )
        init_reads, _ = arith.detect_access_regions(init_body)
        # step 2: loops at or below `loop` that the init bindings use are copied, the others dropped
        chosen: list[For] = []
        discarded: set[Var] = set()
        for lp in reversed(loops[pos:]):
            if any(_uses(v, {lp.loop_var}) for v in init_values):
                chosen.append(lp)
            else:
                discarded.add(lp.loop_var)
        chosen.reverse()
        predicate = _and_all([c for c in _conjuncts(realize.predicate) if not _uses(c, discarded)])
        loop_map = {lp.loop_var: Var(f"{lp.loop_var.name}_init", lp.loop_var.dtype) for lp in chosen}
        init_block = Block(
            init_name,
            tuple(init_iters),
            tuple(init_reads),
            init_writes,
            init_body,
            annotations=blk.annotations,
        )
        body: Stmt = BlockRealize(
            tuple(substitute(v, loop_map) for v in init_values), substitute(predicate, loop_map), init_block
        )
        for lp in reversed(chosen):
            body = For(loop_map[lp.loop_var], lp.min, lp.extent, lp.kind, body, lp.thread_binding)
        # step 3: the update block: no init, its outputs added in front of its reads
        read_bufs = {r.buffer for r in blk.reads}
        new_reads = tuple(w for w in blk.writes if w.buffer not in read_bufs) + blk.reads
        update_block = dataclasses.replace(blk, name=update_name, init=None, reads=new_reads)
        func = replace(self.func, {id(blk): update_block})
        new_loop = find_loop(func, loop_node.loop_var)
        assert new_loop is not None
        self.func = replace(func, {id(new_loop.node): seq(body, new_loop.node)})
        for rv, value in list(self._symtab.items()):
            if isinstance(rv, BlockRV) and value == blk.name:
                self._rename_block(rv, update_name)
        return self._new_block_rv(init_name)

    # -----------------------------------------------------------------------------------
    # rfactor

    @primitive()
    def rfactor(self, loop: LoopRV, factor_axis: int) -> BlockRV:
        """Factor the reduction over ``loop`` out into a block ``<name>_rf`` (TVM's rfactor).

        The rfactor block runs under copies of all the loops around the block and reduces into a
        new buffer ``<buffer>_rf`` whose extra dimension, at position ``factor_axis`` (negative
        counts from the end, in [-(ndim + 1), ndim]), is a spatial iterator over ``loop``.  The
        original block keeps its name, stays under ``loop`` and the spatial loops, and reduces the
        partial results over that dimension.  The combiner must be ``+``, ``T.max`` or ``T.min``.
        ``loop`` must be serial, contain only this block, and be bound to reduce iterators only.
        Returns the rfactor block.

        When no reduce iterator is left in the rfactor block (``loop`` was the whole reduction),
        its partial results are single terms and it becomes a plain store without init.

        Before::

            for i, ko, ki in T.grid(32, 4, 8):
                with T.block("B"):
                    vi = T.axis.spatial(32, i)
                    vk = T.axis.reduce(32, ko * 8 + ki)
                    T.reads(A[vi, vk])
                    T.writes(B[vi])
                    with T.init():
                        B[vi] = T.float32(0.0)
                    B[vi] = B[vi] + A[vi, vk]

        ``sch.rfactor(ki, 0)``::

            B_rf = T.alloc_buffer((8, 32), "float32")
            for i, ko, ki in T.grid(32, 4, 8):
                with T.block("B_rf"):
                    vki, vi, vko = T.axis.remap("SSR", [ki, i, ko])
                    T.reads(A[vi, vko * 8 + vki])
                    T.writes(B_rf[vki, vi])
                    with T.init():
                        B_rf[vki, vi] = T.float32(0.0)
                    B_rf[vki, vi] = B_rf[vki, vi] + A[vi, vko * 8 + vki]
            for i, ki in T.grid(32, 8):
                with T.block("B"):
                    vki, vi = T.axis.remap("RS", [ki, i])
                    T.reads(B_rf[vki, vi])
                    T.writes(B[vi])
                    with T.init():
                        B[vi] = T.float32(0.0)
                    B[vi] = B[vi] + B_rf[vki, vi]
        """
        site = self._rfactor_check(loop, factor_axis)
        blk = site.realize.block
        buffer = blk.body.buffer
        rf_buffer = _rfactor_buffer(self.func, buffer, site.axis, site.rf_loop.extent)
        rf_block, rf_nest, rf_load, extra = self._rfactor_nest(site, rf_buffer)
        wb_realize = _rfactor_writeback(site, rf_buffer, rf_load, extra)
        self._rfactor_rewrite(site, rf_nest, wb_realize, rf_buffer)
        return self._new_block_rv(rf_block.name)

    def _rfactor_check(self, loop: LoopRV, factor_axis: int) -> _RFactorSite:
        """Check rfactor's arguments: ``loop`` holds exactly one reduction block, is serial and
        bound to reduce iterators only, the loops around the block are as TVM requires, the
        reduction has a recognised combiner and ``factor_axis`` fits the output buffer."""
        if isinstance(factor_axis, bool) or not isinstance(factor_axis, int):
            raise InvalidArgument(
                f"rfactor: factor_axis must be an integer, got {type(factor_axis).__name__} {factor_axis!r}"
            )
        rf_loop: For = self._loop(loop).node
        lname = rf_loop.loop_var.name
        kids = child_blocks(rf_loop)
        if len(kids) != 1:
            names = _names(r.block.name for r in kids)
            raise LoopStructureError(
                f"rfactor needs loop {lname} to contain exactly one block, but it contains {len(kids)}"
                + (f" ({names})" if kids else ""),
                loop=lname,
                fragment=self._fragment(rf_loop),
            )
        realize = kids[0]
        blk = realize.block
        loc = find_block(self.func, blk.name)
        assert loc is not None
        self._check_reduction_block("rfactor", loc, realize)
        if rf_loop.kind != ForKind.SERIAL:
            raise LoopKindError(
                f"rfactor needs loop {lname} to be serial, but it is {rf_loop.kind.value}",
                block=blk.name,
                loop=lname,
                fragment=self._fragment(rf_loop),
            )
        loops = loops_above(loc.path[:-1])
        reduce_vars = self._rfactor_check_loops(realize, rf_loop, loops)
        matched = _match_combiner(blk)
        if matched is None:
            raise NotReductionBlock(
                f"rfactor of loop {lname} cannot recognize the reduction of block {blk.name}: the init must store a constant and "
                f"the update must have the form {_COMBINER_FORMS} (x not reading C)",
                block=blk.name,
                loop=lname,
                fragment=self._fragment(blk),
            )
        buffer = blk.body.buffer
        ndim = len(buffer.shape)
        if not -(ndim + 1) <= factor_axis <= ndim:
            raise InvalidArgument(
                f"rfactor of loop {lname}: the write buffer {buffer.name} of block {blk.name} has {ndim} dimension(s), so "
                f"factor_axis must be in [{-(ndim + 1)}, {ndim}], got {factor_axis}",
                block=blk.name,
                loop=lname,
            )
        axis = factor_axis + ndim + 1 if factor_axis < 0 else factor_axis
        return _RFactorSite(loc, realize, rf_loop, loops, reduce_vars, matched[0], matched[1], axis)

    def _rfactor_check_loops(self, realize: BlockRealize, rf_loop: For, loops: list[For]) -> set[Var]:
        """The loop properties TVM checks for rfactor: the block comes first under its outermost
        loop, ``rf_loop`` is bound to reduce iterators only, no loop is bound to both kinds, the
        outermost reduction loop holds only this block, and a loop under a reduction loop that is
        bound to no iterator has extent 1. Returns the loop variables the reduce iterators use."""
        blk = realize.block
        lname = rf_loop.loop_var.name
        data_par_vars: set[Var] = set()
        reduce_vars: set[Var] = set()
        for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
            (reduce_vars if iv.iter_type == IterType.REDUCE else data_par_vars).update(_vars_of(value))
        first = child_blocks(loops[0])[0]
        if first.block is not blk:
            raise LoopStructureError(
                f"rfactor needs block {blk.name} to be the first block under its outermost loop "
                f"{loops[0].loop_var.name}, but block {first.block.name} comes first",
                block=blk.name,
                loop=loops[0].loop_var.name,
                fragment=self._fragment(loops[0]),
            )
        if rf_loop.loop_var in data_par_vars:
            raise LoopStructureError(
                f"rfactor cannot factor loop {lname}: it is bound to a spatial iterator of block {blk.name}; "
                "the rfactor loop must be bound to reduce iterators only",
                block=blk.name,
                loop=lname,
                fragment=self._fragment(rf_loop),
            )
        if rf_loop.loop_var not in reduce_vars:
            raise LoopStructureError(
                f"rfactor cannot factor loop {lname}: it is not bound to any reduce iterator of block {blk.name}",
                block=blk.name,
                loop=lname,
                fragment=self._fragment(rf_loop),
            )
        met_reduction = False
        for lp in loops:
            v = lp.loop_var
            if v in data_par_vars and v in reduce_vars:
                raise LoopStructureError(
                    f"rfactor cannot apply to block {blk.name}: loop {v.name} is bound to both a spatial and a "
                    "reduce iterator",
                    block=blk.name,
                    loop=v.name,
                    fragment=self._fragment(lp),
                )
            if v in reduce_vars:
                if not met_reduction and len(child_blocks(lp)) != 1:
                    raise LoopStructureError(
                        f"rfactor needs the outermost reduction loop {v.name} of block {blk.name} to contain only "
                        "that block",
                        block=blk.name,
                        loop=v.name,
                        fragment=self._fragment(lp),
                    )
                met_reduction = True
            elif (
                v not in data_par_vars
                and met_reduction
                and not (isinstance(lp.extent, IntImm) and lp.extent.value == 1)
            ):
                raise LoopStructureError(
                    f"rfactor cannot apply to block {blk.name}: loop {v.name} under a reduction loop is not bound "
                    "to any iterator and has an extent other than 1",
                    block=blk.name,
                    loop=v.name,
                    fragment=self._fragment(lp),
                )
        return reduce_vars

    def _rfactor_nest(self, site: _RFactorSite, rf_buffer: Buffer) -> tuple[Block, Stmt, BufferLoad, IterVar]:
        """The rfactor block under fresh copies of every loop around the block: its iterators are
        the factored loop (spatial, first), the block's spatial iterators, the reduce iterators
        the factored loop does not touch, and one reduce iterator per loop of the ones it does.
        Returns the block, its loop nest, its load of ``rf_buffer`` and its factored iterator."""
        realize, rf_loop, loops = site.realize, site.rf_loop, site.loops
        blk = realize.block
        update = blk.body
        lname = rf_loop.loop_var.name
        loop_of = {lp.loop_var: lp for lp in loops}
        extra = IterVar(Var(f"v{lname}", rf_loop.loop_var.dtype), Range(rf_loop.min, rf_loop.extent), IterType.SPATIAL)
        loop2iter: dict[Var, PrimExpr] = {rf_loop.loop_var: extra.var}
        rf_iters: list[IterVar] = [extra]
        rf_values: list[PrimExpr] = [rf_loop.loop_var]
        rf_map: dict[Var, PrimExpr] = {}
        for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
            if iv.iter_type == IterType.SPATIAL or not _uses(value, {rf_loop.loop_var}):
                rf_iters.append(iv)
                rf_values.append(value)
                continue
            for v in free_vars(value):
                lp = loop_of.get(v)
                if lp is None or v in loop2iter:
                    continue
                new_iv = IterVar(Var(f"v{v.name}", v.dtype), Range(lp.min, lp.extent), IterType.REDUCE)
                loop2iter[v] = new_iv.var
                rf_iters.append(new_iv)
                rf_values.append(v)
            rf_map[iv.var] = arith.simplify(substitute(value, loop2iter))
        rf_indices = list(update.indices)
        rf_indices.insert(site.axis, extra.var)
        rf_load = BufferLoad(rf_buffer, tuple(rf_indices))
        rf_update: Stmt = substitute(
            BufferStore(rf_buffer, site.combiner(rf_load, site.rhs), tuple(rf_indices)), rf_map
        )
        rf_init: Stmt | None = BufferStore(rf_buffer, _identity(site.combiner, update.buffer.dtype), tuple(rf_indices))
        if not any(iv.iter_type == IterType.REDUCE for iv in rf_iters):
            # nothing left to reduce: each partial result is a single term
            rf_update, rf_init = substitute(BufferStore(rf_buffer, site.rhs, tuple(rf_indices)), rf_map), None

        def regions(of: tuple[BufferRegion, ...]) -> tuple[BufferRegion, ...]:
            return _rf_regions(of, update.buffer, rf_buffer, site.axis, extra.var, rf_map)

        rf_block = Block(
            self._unique_block_name(f"{blk.name}_rf"),
            tuple(rf_iters),
            regions(blk.reads),
            regions(blk.writes),
            rf_update,
            rf_init,
            annotations=blk.annotations,
        )
        new_loop_vars = {lp.loop_var: Var(lp.loop_var.name, lp.loop_var.dtype) for lp in loops}
        rf_body: Stmt = BlockRealize(
            tuple(substitute(v, new_loop_vars) for v in rf_values),
            substitute(realize.predicate, new_loop_vars),
            rf_block,
        )
        for lp in reversed(loops):
            rf_body = dataclasses.replace(lp, loop_var=new_loop_vars[lp.loop_var], body=rf_body)
        return rf_block, rf_body, rf_load, extra

    def _rfactor_rewrite(self, site: _RFactorSite, rf_nest: Stmt, wb_realize: BlockRealize, rf_buffer: Buffer) -> None:
        """Put the rfactor nest before the block's outermost loop, replace the block by the
        write-back block under the loops that are not reduction loops (and the factored loop),
        and allocate ``rf_buffer`` in the scope block."""
        loop_ids = {id(lp) for lp in site.loops}

        def rebuild(node: Node) -> Node:
            if not isinstance(node, Stmt):
                return node
            if node is site.realize:
                return wb_realize
            if isinstance(node, For):
                if id(node) not in loop_ids:
                    return node
                body = rebuild(node.body)
                if node is site.rf_loop or node.loop_var not in site.reduce_vars:
                    return dataclasses.replace(node, body=body)
                return body
            if isinstance(node, BlockRealize):
                return node
            if isinstance(node, SeqStmt):
                return seq(*[rebuild(s) for s in node.stmts])
            return map_children(node, rebuild)

        outer = site.loops[0]
        func = replace(self.func, {id(outer): seq(rf_nest, rebuild(outer))})
        scope = _scope_of(site.loc)
        if scope is None:
            raise InvalidArgument(
                f"rfactor needs block {site.realize.block.name} to be inside a scope block that can hold {rf_buffer.name}"
            )
        new_scope = find_block(func, scope.name)
        assert new_scope is not None
        self.func = replace(
            func,
            {
                id(new_scope.node): dataclasses.replace(
                    new_scope.node, alloc_buffers=(*new_scope.node.alloc_buffers, rf_buffer)
                )
            },
        )

    # -----------------------------------------------------------------------------------
    # pad_einsum

    @primitive()
    def pad_einsum(self, block: BlockRV, padding: list[int]) -> None:
        """Pad the iteration space of an einsum-like block to multiples of ``padding``.

        ``padding`` has one positive integer per block iterator.  Each iterator whose extent is
        not a multiple of its padding grows to the next multiple, together with the loop it is
        bound to.  Every input indexed by a padded iterator is copied into ``<A>_pad`` (zero
        outside the original bounds) by a block ``A_pad`` placed before the block's loop nest;
        every output indexed by one is computed into ``<C>_pad`` and copied back by a block
        ``C_pad`` after the nest.  The block must access every buffer once, one element at a time;
        a padded iterator may index a buffer only as a whole index (``A[n, h * 2 + rh, w, rc]``
        can pad ``rc``, whose copy ``A_pad`` grows that dimension, but not ``rh``), and an output
        it indexes only with plain iterators or constants.  A padded reduce iterator needs the
        update ``C = C + x * y * ...`` with one factor indexed by that iterator (so padding adds
        zeros).
        Supported (a subset of TVM's): each padded iterator is bound directly to a loop of extent
        equal to its domain, and the block's outermost loop holds no other block.

        Before (``A: (30, 30)``, ``B: (30, 30)``, ``C: (30, 30)``)::

            for i, j, k in T.grid(30, 30, 30):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A[vi, vk], B[vk, vj])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = T.float32(0.0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

        ``sch.pad_einsum(sch.get_block("C"), [32, 32, 32])``::

            A_pad = T.alloc_buffer((32, 32), "float32")
            B_pad = T.alloc_buffer((32, 32), "float32")
            C_pad = T.alloc_buffer((32, 32), "float32")
            for i0, i1 in T.grid(32, 32):
                with T.block("A_pad"):
                    v0, v1 = T.axis.remap("SS", [i0, i1])
                    T.reads(A[v0, v1])
                    T.writes(A_pad[v0, v1])
                    A_pad[v0, v1] = T.Select(v0 < 30 and v1 < 30, A[v0, v1], T.float32(0.0))
            ...  # B_pad alike
            for i, j, k in T.grid(32, 32, 32):
                with T.block("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    T.reads(A_pad[vi, vk], B_pad[vk, vj])
                    T.writes(C_pad[vi, vj])
                    with T.init():
                        C_pad[vi, vj] = T.float32(0.0)
                    C_pad[vi, vj] = C_pad[vi, vj] + A_pad[vi, vk] * B_pad[vk, vj]
            for i0, i1 in T.grid(30, 30):
                with T.block("C_pad"):
                    v0, v1 = T.axis.remap("SS", [i0, i1])
                    T.reads(C_pad[v0, v1])
                    T.writes(C[v0, v1])
                    C[v0, v1] = C_pad[v0, v1]
        """
        site = self._einsum_site(block, padding)
        blk = site.realize.block
        padded, padded_loops = self._padded_iterators(site, padding)
        if not padded:
            return
        self._check_einsum_padding(site, padded)
        buffer_map, before, after, allocs = _padded_copies(self.func, site, padded)
        new_block = _padded_block(blk, buffer_map, padded)
        self._pad_einsum_rewrite(site, new_block, padded_loops, (before, after), allocs)

    def _einsum_site(self, block: BlockRV, padding: list[int]) -> _EinsumSite:
        """Check pad_einsum's arguments and that the block is an einsum: one padding per
        iterator, a scope block, each buffer accessed in one single-element region and at those
        indices only, and a body that is one store."""
        realize, loc = self._block_realize(block)
        blk: Block = loc.node
        frag = self._fragment(blk)
        n_iters = len(blk.iter_vars)
        if (
            not isinstance(padding, list | tuple)
            or len(padding) != n_iters
            or not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in padding)
        ):
            raise InvalidArgument(
                f"pad_einsum: the padding of block {blk.name} must be a list of {n_iters} positive integers "
                f"(one per iterator), got {padding!r}",
                block=blk.name,
                fragment=frag,
            )
        scope = _scope_of(loc)
        if scope is None:
            raise InvalidArgument(f"pad_einsum needs block {blk.name} to be inside a scope block", block=blk.name)
        # the einsum pattern: each buffer once, unit regions at plain iterators or constants
        accesses: dict[Buffer, tuple[PrimExpr, ...]] = {}
        inputs: list[Buffer] = []
        outputs: list[Buffer] = []
        not_einsum = _einsum_error(blk, frag)
        for regions, into in ((blk.reads, inputs), (blk.writes, outputs)):
            for br in regions:
                if br.buffer in accesses:
                    raise not_einsum(f"accesses buffer {br.buffer.name} in more than one region")
                if not all(isinstance(r.extent, IntImm) and r.extent.value == 1 for r in br.region):
                    raise not_einsum(f"accesses {br.buffer.name} with a region that is not a single element")
                idx = [r.min for r in br.region]
                accesses[br.buffer] = tuple(idx)
                into.append(br.buffer)
        for node in _nodes(blk.body) + (_nodes(blk.init) if blk.init is not None else []):
            if isinstance(node, BufferLoad | BufferStore):
                expected = accesses.get(node.buffer)
                if expected is None or node.indices != expected:
                    raise not_einsum(
                        f"accesses {node.buffer.name}[{', '.join(str(i) for i in node.indices)}] outside the plain "
                        "iterator indices of its regions"
                    )
            elif isinstance(node, Stmt) and not isinstance(node, BufferStore):
                raise not_einsum("has a body that is not a single store")
        if not isinstance(blk.body, BufferStore):
            raise not_einsum("has a body that is not a single store")
        return _EinsumSite(realize, loc, scope, accesses, inputs, outputs, frag)

    def _padded_iterators(self, site: _EinsumSite, padding: list[int]) -> tuple[dict[Var, PrimExpr], dict[Var, int]]:
        """Which iterators grow: ``({iterator: padded extent}, {loop var: padded extent})`` for
        each iterator whose extent is not a multiple of its padding; such an iterator must have a
        constant extent and be bound directly to a loop over its whole domain."""
        realize, blk = site.realize, site.realize.block
        loops = loops_above(site.loc.path[:-1])
        loop_of = {lp.loop_var: lp for lp in loops}
        padded: dict[Var, PrimExpr] = {}  # iterator -> padded extent
        padded_loops: dict[Var, int] = {}
        for iv, value, pad in zip(blk.iter_vars, realize.iter_values, padding, strict=True):
            extent = iv.dom.extent
            if pad == 1:
                continue
            if not isinstance(extent, IntImm):
                raise InvalidArgument(
                    f"pad_einsum supports only constant iterator extents, but iterator {iv.var.name} of block "
                    f"{blk.name} has extent {extent}",
                    block=blk.name,
                    fragment=site.frag,
                )
            new_extent = -(-extent.value // pad) * pad
            if new_extent == extent.value:
                continue
            lp = loop_of.get(value) if isinstance(value, Var) else None
            if (
                lp is None
                or sum(_uses(v, {lp.loop_var}) for v in realize.iter_values) != 1
                or not (isinstance(iv.dom.min, IntImm) and iv.dom.min.value == 0)
                or not (isinstance(lp.min, IntImm) and lp.min.value == 0)
                or not (isinstance(lp.extent, IntImm) and lp.extent.value == extent.value)
            ):
                raise LoopStructureError(
                    f"pad_einsum supports only padded iterators bound directly to a loop over their whole domain, "
                    f"but iterator {iv.var.name} of block {blk.name} is bound to {value}",
                    block=blk.name,
                    fragment=site.frag,
                )
            padded[iv.var] = IntImm(extent.dtype, new_extent)
            padded_loops[lp.loop_var] = new_extent
        return padded, padded_loops

    def _check_einsum_padding(self, site: _EinsumSite, padded: dict[Var, PrimExpr]) -> None:
        """Padding keeps the result: padded iterators index buffers whole, the block's loop nest
        holds no other block, a padded reduce iterator indexes a factor of ``C = C + x * y * ...``
        (so it adds zeros) and a padded spatial iterator indexes every output."""
        realize, blk = site.realize, site.realize.block
        not_einsum = _einsum_error(blk, site.frag)
        _check_padded_indices(site.accesses, site.outputs, padded, not_einsum)
        top = _top_under(site.loc.path, site.scope)
        others = [r.block.name for r in child_blocks(top) if r is not realize]
        if others:
            raise LoopStructureError(
                f"pad_einsum needs the loop nest of block {blk.name} to hold no other block, but it also holds "
                f"{_names(others)}",
                block=blk.name,
                fragment=self._fragment(top),
            )
        # padding a reduce iterator must only add zero terms
        store: BufferStore = blk.body
        padded_reduce = [iv.var for iv in blk.iter_vars if iv.var in padded and iv.iter_type == IterType.REDUCE]
        if padded_reduce:
            lhs = BufferLoad(store.buffer, store.indices)
            value = store.value
            rhs = None
            if isinstance(value, Add):
                rhs = value.b if value.a == lhs else value.a if value.b == lhs else None
            factors = _factors(rhs) if rhs is not None else None
            if factors is None:
                raise not_einsum(
                    "pads reduce iterators but its update is not C[...] = C[...] + x * y * ... with buffer loads x, y"
                )
            for var in padded_reduce:
                if not any(var in f.indices for f in factors):
                    raise not_einsum(
                        f"pads reduce iterator {var.name}, which indexes none of the multiplied operands, so padding "
                        "would not add zeros"
                    )
        for out in site.outputs:
            for iv in blk.iter_vars:
                if iv.var in padded and iv.iter_type == IterType.SPATIAL and iv.var not in site.accesses[out]:
                    raise not_einsum(f"pads spatial iterator {iv.var.name}, which does not index its output {out.name}")

    def _pad_einsum_rewrite(
        self,
        site: _EinsumSite,
        new_block: Block,
        padded_loops: dict[Var, int],
        copies: tuple[list[Stmt], list[Stmt]],
        allocs: list[Buffer],
    ) -> None:
        """Replace the block by ``new_block``, grow its padded loops, put the input copies before
        and the output copies after its loop nest, and allocate the padded buffers in the scope."""
        blk, scope = site.realize.block, site.scope
        before, after = copies
        func = replace(self.func, {id(blk): new_block})
        for var, extent in padded_loops.items():
            lp_loc = find_loop(func, var)
            assert lp_loc is not None
            lp = lp_loc.node
            func = replace(func, {id(lp): dataclasses.replace(lp, extent=IntImm(lp.extent.dtype, extent))})
        new_top = find_block(func, blk.name)
        assert new_top is not None
        scope_loc = find_block(func, scope.name)
        assert scope_loc is not None
        top_stmt = _top_under(new_top.path, scope_loc.node)
        func = replace(func, {id(top_stmt): seq(*before, top_stmt, *after)})
        scope_loc = find_block(func, scope.name)
        assert scope_loc is not None
        self.func = replace(
            func,
            {
                id(scope_loc.node): dataclasses.replace(
                    scope_loc.node, alloc_buffers=(*scope_loc.node.alloc_buffers, *allocs)
                )
            },
        )


@dataclasses.dataclass(frozen=True)
class _RFactorSite:
    """What rfactor's checks found: the block (located, and its realize), the factored loop, the
    loops around the block, the loop variables its reduce iterators use, the combiner with the
    update's other operand, and the position of the new dimension in the rfactor buffer."""

    loc: Located
    realize: BlockRealize
    rf_loop: For
    loops: list[For]
    reduce_vars: set[Var]
    combiner: type
    rhs: PrimExpr
    axis: int


def _match_combiner(blk: Block) -> tuple[type, PrimExpr] | None:
    """``(Add, x)`` for a block with init ``C[...] = const`` and body ``C[...] = C[...] + x`` (or
    ``T.max``/``T.min``, either operand order, ``x`` not reading C); None for any other block."""
    init, update = blk.init, blk.body
    if not (
        isinstance(init, BufferStore)
        and isinstance(update, BufferStore)
        and init.buffer is update.buffer
        and init.indices == update.indices
        and isinstance(init.value, IntImm | FloatImm)
        and type(update.value) in (Add, Max, Min)
    ):
        return None
    lhs = BufferLoad(update.buffer, update.indices)
    a, b = update.value.a, update.value.b
    other = b if a == lhs else a if b == lhs else None
    if other is None or any(isinstance(n, BufferLoad) and n.buffer is update.buffer for n in _nodes(other)):
        return None
    return type(update.value), other


def _rfactor_buffer(func: Any, buffer: Buffer, axis: int, extent: PrimExpr) -> Buffer:
    """``<buffer>_rf``: ``buffer`` with a dimension of ``extent`` inserted at ``axis``, compact."""
    rf_shape = list(buffer.shape)
    rf_shape.insert(axis, extent)
    return dataclasses.replace(
        buffer,
        name=_unique_buffer_name(func, f"{buffer.name}_rf"),
        shape=tuple(rf_shape),
        strides=(),
        elem_offset=IntImm(buffer.elem_offset.dtype, 0),
    )


def _rf_regions(
    regions: tuple[BufferRegion, ...],
    buffer: Buffer,
    rf_buffer: Buffer,
    axis: int,
    extra: Var,
    rf_map: dict[Var, PrimExpr],
) -> tuple[BufferRegion, ...]:
    """The rfactor block's regions: ``buffer`` becomes ``rf_buffer`` with ``[extra]`` inserted at
    ``axis``, and every bound is rewritten through ``rf_map``."""
    out = []
    for br in regions:
        region = list(br.region)
        buf = br.buffer
        if buf is buffer:
            region.insert(axis, Range(extra, IntImm(extra.dtype, 1)))
            buf = rf_buffer
        out.append(
            BufferRegion(
                buf,
                tuple(
                    Range(arith.simplify(substitute(r.min, rf_map)), arith.simplify(substitute(r.extent, rf_map)))
                    for r in region
                ),
            )
        )
    return tuple(out)


def _rfactor_writeback(site: _RFactorSite, rf_buffer: Buffer, rf_load: BufferLoad, extra: IterVar) -> BlockRealize:
    """The write-back block: the original block's name and spatial iterators, reducing the
    partial results of ``rf_buffer`` over a reduce iterator of the factored loop."""
    realize, rf_loop = site.realize, site.rf_loop
    blk = realize.block
    update, buffer = blk.body, blk.body.buffer
    wb_extra = IterVar(
        Var(f"v{rf_loop.loop_var.name}", rf_loop.loop_var.dtype), Range(rf_loop.min, rf_loop.extent), IterType.REDUCE
    )
    wb_map: dict[Var, PrimExpr] = {extra.var: wb_extra.var}
    wb_iters: list[IterVar] = [wb_extra]
    wb_values: list[PrimExpr] = [rf_loop.loop_var]
    for iv, value in zip(blk.iter_vars, realize.iter_values, strict=True):
        if iv.iter_type == IterType.SPATIAL:
            new_var = Var(iv.var.name, iv.var.dtype)
            wb_iters.append(IterVar(new_var, iv.dom, IterType.SPATIAL))
            wb_values.append(value)
            wb_map[iv.var] = new_var
    wb_lhs = substitute(BufferLoad(buffer, update.indices), wb_map)
    wb_rhs = substitute(rf_load, wb_map)
    wb_pred = _and_all([c for c in _conjuncts(realize.predicate) if not _uses(c, site.reduce_vars)])
    wb_block = Block(
        blk.name,
        tuple(wb_iters),
        (BufferRegion(rf_buffer, tuple(Range(i, IntImm(i.dtype, 1)) for i in wb_rhs.indices)),),
        (BufferRegion(buffer, tuple(Range(i, IntImm(i.dtype, 1)) for i in wb_lhs.indices)),),
        BufferStore(buffer, site.combiner(wb_lhs, wb_rhs), wb_lhs.indices),
        BufferStore(buffer, blk.init.value, wb_lhs.indices),
        annotations=blk.annotations,
    )
    return BlockRealize(tuple(wb_values), wb_pred, wb_block)


@dataclasses.dataclass(frozen=True)
class _EinsumSite:
    """What pad_einsum's checks found: the block's realize and location, its scope block, the
    indices of each buffer it accesses, its input and output buffers, and its IR fragment."""

    realize: BlockRealize
    loc: Located
    scope: Block
    accesses: dict[Buffer, tuple[PrimExpr, ...]]
    inputs: list[Buffer]
    outputs: list[Buffer]
    frag: Callable[[], str]


def _einsum_error(blk: Block, frag: Callable[[], str]) -> Callable[[str], NotReductionBlock]:
    """The error pad_einsum raises when ``blk`` is no einsum it can pad, saying ``why``."""

    def not_einsum(why: str) -> NotReductionBlock:
        return NotReductionBlock(
            f"pad_einsum needs an einsum block, but block {blk.name} {why}", block=blk.name, fragment=frag
        )

    return not_einsum


def _fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_1``, ``base_2``, ... the first not in ``taken`` (which then holds it)."""
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _padded_copies(
    func: Any, site: _EinsumSite, padded: dict[Var, PrimExpr]
) -> tuple[dict[Buffer, Buffer], list[Stmt], list[Stmt], list[Buffer]]:
    """The padded buffer ``<A>_pad`` of each buffer a padded iterator indexes, with the copy nests
    that fill the inputs' (before the block) and write back the outputs' (after it): returns
    ``(buffer -> padded buffer, copies before, copies after, padded buffers)``."""
    buffer_map: dict[Buffer, Buffer] = {}
    before: list[Stmt] = []
    after: list[Stmt] = []
    allocs: list[Buffer] = []
    block_names: set[str] = set()
    func_names = {b.name for b in func.buffers}
    for sloc in walk_stmts(func.body):
        if isinstance(sloc.node, Block):
            block_names.add(sloc.node.name)
            func_names.update(b.name for b in sloc.node.alloc_buffers)
    for buf in site.inputs + site.outputs:
        idx = site.accesses[buf]
        if not any(isinstance(i, Var) and i in padded for i in idx):
            continue
        shape = tuple(
            padded[i] if isinstance(i, Var) and i in padded else dim for i, dim in zip(idx, buf.shape, strict=True)
        )
        pbuf = Buffer(_fresh_name(f"{buf.name}_pad", func_names), shape, buf.dtype, scope=buf.scope)
        buffer_map[buf] = pbuf
        allocs.append(pbuf)
        is_read = buf in site.inputs
        name = _fresh_name(pbuf.name, block_names)
        if is_read:
            before.append(_copy_nest(name, buf, pbuf, pbuf.shape, True))
        else:
            after.append(_copy_nest(name, buf, pbuf, buf.shape, False))
    return buffer_map, before, after, allocs


def _padded_block(blk: Block, buffer_map: dict[Buffer, Buffer], padded: dict[Var, PrimExpr]) -> Block:
    """``blk`` with its padded iterators' domains grown and its padded buffers swapped in."""

    def swap(node: Node) -> Node:
        if isinstance(node, BufferLoad) and node.buffer in buffer_map:
            return BufferLoad(buffer_map[node.buffer], tuple(swap(i) for i in node.indices))
        if isinstance(node, BufferStore) and node.buffer in buffer_map:
            return BufferStore(buffer_map[node.buffer], swap(node.value), node.indices)
        if isinstance(node, BufferRegion) and node.buffer in buffer_map:
            return BufferRegion(buffer_map[node.buffer], node.region)
        if isinstance(node, Var | Buffer):
            return node
        return map_children(node, swap)

    return dataclasses.replace(
        blk,
        iter_vars=tuple(
            IterVar(iv.var, Range(iv.dom.min, padded[iv.var]), iv.iter_type) if iv.var in padded else iv
            for iv in blk.iter_vars
        ),
        reads=tuple(swap(r) for r in blk.reads),
        writes=tuple(swap(w) for w in blk.writes),
        body=swap(blk.body),
        init=swap(blk.init) if blk.init is not None else None,
    )


def _top_under(path: tuple[Stmt, ...], scope: Block) -> Stmt:
    """The statement of ``path`` directly in the scope block's body (skipping SeqStmts)."""
    start = next(n for n, p in enumerate(path) if p is scope) + 1
    return next(p for p in path[start:] if not isinstance(p, SeqStmt))


def _nodes(node: Node) -> list[Node]:
    out: list[Node] = []
    post_order_visit(node, out.append)
    return out


def _check_padded_indices(
    accesses: dict[Buffer, tuple[PrimExpr, ...]], outputs: list[Buffer], padded: dict[Var, PrimExpr], err
) -> None:
    """A padded iterator may index a buffer only as a whole index (``A[n, h * 2 + rh, w, rc]``
    pads ``rc``, never ``rh``: the padded copy grows the dimensions ``rc`` indexes alone); an
    output a padded iterator indexes is copied back whole, so its indices are plain iterators or
    constants."""
    for buf, idx in accesses.items():
        bad = non_plain_padded_index(idx, padded.__contains__)
        if bad is not None:
            name = next(v.name for v in free_vars(bad) if v in padded)
            raise err(f"pads iterator {name}, which indexes {buf.name} inside the expression {bad}, not alone")
        touched = any(v in padded for i in idx for v in free_vars(i))
        if touched and buf in outputs and not all(isinstance(i, Var | IntImm) for i in idx):
            raise err(
                f"pads its output {buf.name}, which it writes at indices that are not plain iterators or constants"
            )


def _factors(expr: PrimExpr) -> list[BufferLoad] | None:
    """The loads of a product of (possibly cast) buffer loads, or None for any other expression."""
    if isinstance(expr, Mul):
        a, b = _factors(expr.a), _factors(expr.b)
        return None if a is None or b is None else a + b
    if isinstance(expr, Cast):
        return _factors(expr.value)
    if isinstance(expr, BufferLoad):
        return [expr]
    return None


def _copy_nest(name: str, buf: Buffer, pbuf: Buffer, extents: tuple[PrimExpr, ...], is_read: bool) -> Stmt:
    """``pbuf[v] = buf[v]`` (zero outside ``buf``) when reading, ``buf[v] = pbuf[v]`` when writing back."""
    loop_vars = [Var(f"i{d}", e.dtype) for d, e in enumerate(extents)]
    iters = [
        IterVar(Var(f"v{d}", e.dtype), Range(IntImm(e.dtype, 0), e), IterType.SPATIAL) for d, e in enumerate(extents)
    ]
    idx = tuple(iv.var for iv in iters)
    unit = tuple(Range(v, IntImm(v.dtype, 1)) for v in idx)
    if is_read:
        conds = [
            v < dim
            for v, dim, pdim in zip(idx, buf.shape, pbuf.shape, strict=True)
            if not arith.can_prove_equal(dim, pdim)
        ]
        load = BufferLoad(buf, idx)
        value = Select(_and_all(conds), load, const(0, load.dtype)) if conds else load
        body = BufferStore(pbuf, value, idx)
        reads, writes = (BufferRegion(buf, unit),), (BufferRegion(pbuf, unit),)
    else:
        body = BufferStore(buf, BufferLoad(pbuf, idx), idx)
        reads, writes = (BufferRegion(pbuf, unit),), (BufferRegion(buf, unit),)
    stmt: Stmt = BlockRealize(tuple(loop_vars), TRUE, Block(name, tuple(iters), reads, writes, body))
    for v, e in reversed(list(zip(loop_vars, extents, strict=True))):
        stmt = For(v, IntImm(e.dtype, 0), e, ForKind.SERIAL, stmt)
    return stmt
