"""Cache and layout primitives: cache_read, cache_write, reindex, set_scope, storage_align,
transform_layout and transform_block_layout (TVM's ``cache_read_write.cc``, ``set_scope.cc``,
``storage_align.cc`` and ``layout_transformation.cc``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..arith import can_prove, eval_int_set, simplify
from ..arith.int_set import eval_int_sets
from ..arith.iter_map import affine_binding_error
from ..ir import (
    TRUE,
    Add,
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    IterType,
    IterVar,
    MatchBufferRegion,
    Max,
    Min,
    Mul,
    Mutator,
    Node,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Sub,
    Var,
    free_vars,
    post_order_visit,
    seq,
    substitute,
)
from .analysis import loop_domains
from .errors import CacheError, InvalidArgument, LoopStructureError, NotAffineBinding
from .index_map import IndexMap, IndexMapError, index_map_to_json
from .rv import BlockRV
from .state import ScheduleState, primitive
from .tree import Located, child_blocks, enclosing_block, find_block, loops_above, replace, walk_nodes

_SCOPE_RE = re.compile(
    r"^(global|shared|shared\.dyn|local|warp|wmma\.(matrix_a|matrix_b|accumulator)"
    r"|global\.[A-Za-z0-9_.]+|shared\.[A-Za-z0-9_.]+|local\.[A-Za-z0-9_.]+|texture[A-Za-z0-9_.-]*|m\.[A-Za-z0-9_.]+)$"
)

BUFFER_DIM_ALIGN = "buffer_dim_align"


# ---------------------------------------------------------------------------------------
# helpers


def _check_scope(storage_scope: Any) -> str:
    if not isinstance(storage_scope, str) or not _SCOPE_RE.match(storage_scope):
        raise InvalidArgument(
            f"storage_scope {storage_scope!r} is not a storage scope "
            "(expected global, shared, shared.dyn, local, warp, wmma.matrix_a, wmma.matrix_b, wmma.accumulator, ...)"
        )
    return storage_scope


def _zero(dtype: Any) -> IntImm:
    return IntImm(dtype, 0)


def _is_one(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _point_region(buffer: Buffer, indices: tuple[PrimExpr, ...] | list[PrimExpr]) -> BufferRegion:
    return BufferRegion(buffer, tuple(Range(i, IntImm(i.dtype, 1)) for i in indices))


def _compact(buffer: Buffer, name: str, scope: str | None = None, shape: Any = None) -> Buffer:
    return Buffer(
        name,
        tuple(buffer.shape if shape is None else shape),
        buffer.dtype,
        scope=buffer.scope if scope is None else scope,
        alignment=buffer.alignment,
        offset_factor=buffer.offset_factor,
    )


def _all_buffer_names(func: PrimFunc) -> set[str]:
    names = {b.name for _, b in func.buffer_map}
    for node in walk_nodes(func.body):  # statements: no buffer is declared inside an expression
        if isinstance(node, Block):
            names.update(b.name for b in node.alloc_buffers)
            names.update(m.buffer.name for m in node.match_buffers)
        elif isinstance(node, Allocate):
            names.add(node.buffer.name)
    return names


def _unique_buffer_name(func: PrimFunc, base: str) -> str:
    names = _all_buffer_names(func)
    if base not in names:
        return base
    n = 1
    while f"{base}_{n}" in names:
        n += 1
    return f"{base}_{n}"


class _SwapBuffers(Mutator):
    """Replace buffers (same shape) everywhere: loads, stores, regions, allocations, matches."""

    def __init__(self, mapping: dict[Buffer, Buffer]) -> None:
        self.mapping = mapping

    def visit_Buffer(self, buf: Buffer) -> Buffer:
        return self.mapping.get(buf, buf)


def _swap(node: Any, mapping: dict[Buffer, Buffer]) -> Any:
    return _SwapBuffers(mapping).visit(node)


def _region_of(regions: tuple[BufferRegion, ...], buf: Buffer) -> BufferRegion | None:
    for r in regions:
        if r.buffer is buf:
            return r
    return None


def _reads_buffer(block: Block, buf: Buffer) -> bool:
    return any(r.buffer is buf for r in block.reads)


def _writes_buffer(block: Block, buf: Buffer) -> bool:
    return any(r.buffer is buf for r in block.writes)


class _InsertState:
    def __init__(self) -> None:
        self.visited_block = False
        self.visited_related = False
        self.seq: SeqStmt | None = None
        self.pos = -1


def _detect_location(body: Stmt, writer: Block, related: list[Block]) -> tuple[SeqStmt | None, int]:
    """TVM's CacheLocDetector: the sequence and position right before the first related block after the writer."""
    st = _InsertState()
    related_ids = {id(b) for b in related}

    def visit(s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            previous = st.visited_block
            st.visited_block = False
            for i, child in enumerate(s.stmts):
                if st.pos != -1:
                    break
                visit(child)
                if st.visited_block and st.visited_related and st.pos == -1:
                    st.pos, st.seq = i, s
                    break
                if st.visited_related:
                    break
            st.visited_block = st.visited_block or previous
        elif isinstance(s, BlockRealize):
            if s.block is writer:
                st.visited_block = True
            elif id(s.block) in related_ids:
                st.visited_related = True
        elif isinstance(s, For | Allocate):
            visit(s.body)
        elif isinstance(s, IfThenElse):
            visit(s.then_case)
            if s.else_case is not None:
                visit(s.else_case)

    visit(body)
    return st.seq, st.pos


def _relaxed_region(region: BufferRegion, realize: BlockRealize, path: tuple[Stmt, ...], above: Stmt) -> BufferRegion:
    """``region`` (in the block's iterators) in terms of the loops above ``above`` (the loops below relaxed)."""
    binding = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values, strict=True)}
    start = next(k for k, n in enumerate(path) if n is above)
    dom = {n.loop_var: Range(n.min, n.extent) for n in path[start + 1 :] if isinstance(n, For)}
    outer = {n.loop_var: Range(n.min, n.extent) for n in path[: start + 1] if isinstance(n, For)}
    exprs = []
    for r in region.region:
        exprs += [substitute(r.min, binding), substitute(r.min + r.extent - 1, binding)]
    sets = eval_int_sets(exprs, dom)  # one evaluator for them all
    bounds = [(lo.min_value, hi.max_value) for lo, hi in zip(sets[::2], sets[1::2], strict=True)]
    return _clipped_region(region.buffer, bounds, outer)


def _clipped_region(buffer: Buffer, bounds: list[tuple[PrimExpr, PrimExpr]], dom: dict[Var, Range]) -> BufferRegion:
    """The region ``[lo, hi]`` per dimension, clipped to the buffer's shape.

    A guarded access (padding: ``T.Select(1 <= i, A[i - 1], 0)``) may reach past the buffer's
    edges; a copy stage must copy only the elements that exist.  ``dom`` holds the ranges of
    the variables the bounds may use.
    """
    ranges = []
    for (lo, hi), dim in zip(bounds, buffer.shape, strict=True):
        if not can_prove(lo >= 0, dom):
            lo = simplify(Max(lo, _zero(lo.dtype)))
        if not can_prove(hi < dim, dom):
            hi = simplify(Min(hi, dim - 1))
        ranges.append(Range(lo, simplify(hi - lo + 1)))
    return BufferRegion(buffer, tuple(ranges))


def _copy_stage(name: str, src: Buffer, dst: Buffer, region: BufferRegion) -> Stmt:
    """Loops over ``region`` around a block ``dst[v] = src[v]`` (unit loops are left out)."""
    iters, values, loops = [], [], []
    for k, (r, dim) in enumerate(zip(region.region, src.shape, strict=True)):
        v = Var(f"v{k}", dim.dtype)
        iters.append(IterVar(v, Range(_zero(dim.dtype), dim), IterType.SPATIAL))
        if _is_one(simplify(r.extent)):
            values.append(simplify(r.min))
        else:
            ax = Var(f"ax{len(loops)}", r.extent.dtype)
            loops.append((ax, simplify(r.extent)))
            values.append(simplify(r.min + ax))
    vs = tuple(iv.var for iv in iters)
    block = Block(
        name,
        tuple(iters),
        (_point_region(src, vs),),
        (_point_region(dst, vs),),
        BufferStore(dst, BufferLoad(src, vs), vs),
    )
    stmt: Stmt = BlockRealize(tuple(values), TRUE, block)
    for ax, ext in reversed(loops):
        stmt = For(ax, _zero(ext.dtype), ext, ForKind.SERIAL, stmt)
    return stmt


class _Rebuild(Mutator):
    """Rewrite some block realizes (by identity) and insert a statement into one sequence."""

    def __init__(self, realizes: dict[int, Stmt], seq_node: Stmt | None, pos: int, stage: Stmt | None) -> None:
        self.realizes = realizes
        self.seq_node = seq_node
        self.pos = pos
        self.stage = stage

    def visit(self, node: Node) -> Any:  # type: ignore[override]
        if isinstance(node, PrimExpr | Buffer):
            return node
        if id(node) in self.realizes:
            return self.realizes[id(node)]
        if node is self.seq_node:
            assert isinstance(node, SeqStmt)
            stmts = [self.visit(s) for s in node.stmts]
            stmts.insert(self.pos, self.stage)
            return seq(*stmts)
        return super().visit(node)


def _loads_and_stores(stmt: Stmt | None, buf: Buffer) -> list[tuple[PrimExpr, ...]]:
    found: list[tuple[PrimExpr, ...]] = []
    if stmt is None:
        return found

    def visit(n: Node) -> None:
        if isinstance(n, BufferLoad | BufferStore) and n.buffer is buf:
            found.append(n.indices)

    post_order_visit(stmt, visit)
    return found


def _is_affine(e: PrimExpr, allowed: set[Var]) -> bool:
    if isinstance(e, Var):
        return e in allowed
    if isinstance(e, IntImm):
        return True
    if isinstance(e, Add | Sub):
        return _is_affine(e.a, allowed) and _is_affine(e.b, allowed)
    if isinstance(e, Mul):
        return (isinstance(e.a, IntImm) and _is_affine(e.b, allowed)) or (
            isinstance(e.b, IntImm) and _is_affine(e.a, allowed)
        )
    return False


def _norm_buffer_arg(block: Block, buffer: Any, primitive_name: str) -> tuple[str, int, Buffer]:
    """``("read"|"write", index)`` or a buffer name -> (kind, index, Buffer)."""
    if isinstance(buffer, str):
        hits = [("read", k, r.buffer) for k, r in enumerate(block.reads) if r.buffer.name == buffer]
        hits += [("write", k, r.buffer) for k, r in enumerate(block.writes) if r.buffer.name == buffer]
        if not hits:
            names = sorted({r.buffer.name for r in (*block.reads, *block.writes)})
            raise InvalidArgument(
                f"{primitive_name}: block {block.name} accesses no buffer named {buffer}; it accesses {', '.join(names)}",
                block=block.name,
            )
        # prefer the write (the buffer the block produces), as the name is the same buffer anyway
        kind, k, buf = hits[-1] if any(h[0] == "write" for h in hits) else hits[0]
        return kind, k, buf
    if (
        not isinstance(buffer, list | tuple)
        or len(buffer) != 2
        or buffer[0] not in ("read", "write")
        or isinstance(buffer[1], bool)
        or not isinstance(buffer[1], int)
    ):
        raise InvalidArgument(
            f'{primitive_name}: buffer must be a pair ("read" or "write", index) or a buffer name, got {buffer!r}',
            block=block.name,
        )
    kind, index = buffer[0], buffer[1]
    regions = block.reads if kind == "read" else block.writes
    return kind, _check_index(block, index, kind, primitive_name), regions[index].buffer


def _check_index(block: Block, index: Any, kind: str, primitive_name: str) -> int:
    regions = block.reads if kind == "read" else block.writes
    if isinstance(index, bool) or not isinstance(index, int):
        raise InvalidArgument(f"{primitive_name}: the {kind} buffer index must be an integer, got {index!r}")
    if not 0 <= index < len(regions):
        raise InvalidArgument(
            f"{primitive_name}: block {block.name} has {len(regions)} {kind} buffer"
            f"{'' if len(regions) == 1 else 's'}, so {kind} buffer index {index} is out of range",
            block=block.name,
        )
    return index


def _coerce_index_map(value: Any, ndim: int, what: str) -> IndexMap:
    try:
        imap = IndexMap.coerce(value)
    except IndexMapError as err:
        raise InvalidArgument(f"index_map: {err}") from None
    if imap.ndim_in != ndim:
        raise InvalidArgument(f"index_map {imap.to_text()} takes {imap.ndim_in} indices but {what} has {ndim}")
    return imap


def _index_map_from_json(value: Any) -> Any:
    return IndexMap.from_text(value) if isinstance(value, str) else value


def _alloc_site(func: PrimFunc, buf: Buffer) -> Block | None:
    found: list[Block] = []

    def visit(n: Node) -> None:
        if isinstance(n, Block) and buf in n.alloc_buffers:
            found.append(n)

    post_order_visit(func.body, visit)
    return found[0] if found else None


class _RelayoutBuffer(Mutator):
    """Give ``old`` a new layout: ``new`` everywhere, indices and regions mapped by ``imap``."""

    def __init__(self, old: Buffer, new: Buffer, imap: IndexMap) -> None:
        self.old, self.new, self.imap = old, new, imap
        self.dom: dict[Var, Range] = {}

    def visit_Buffer(self, buf: Buffer) -> Buffer:
        return self.new if buf is self.old else buf

    def visit_For(self, op: For) -> Stmt:
        self.dom[op.loop_var] = Range(op.min, op.extent)
        try:
            return self.generic_visit(op)
        finally:
            del self.dom[op.loop_var]

    def visit_Block(self, op: Block) -> Stmt:
        saved = dict(self.dom)
        self.dom.update({iv.var: iv.dom for iv in op.iter_vars})
        try:
            return self.generic_visit(op)
        finally:
            self.dom = saved

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        indices = tuple(self.visit(i) for i in op.indices)
        if op.buffer is not self.old:
            return (
                op if all(a is b for a, b in zip(indices, op.indices, strict=True)) else BufferLoad(op.buffer, indices)
            )
        return BufferLoad(self.new, self.imap.map_indices(indices, self.dom))

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        value = self.visit(op.value)
        indices = tuple(self.visit(i) for i in op.indices)
        if op.buffer is not self.old:
            return BufferStore(op.buffer, value, indices)
        return BufferStore(self.new, value, self.imap.map_indices(indices, self.dom))

    def visit_BufferRegion(self, op: BufferRegion) -> BufferRegion:
        if op.buffer is not self.old:
            return op
        if all(_is_one(simplify(r.extent)) for r in op.region):
            return _point_region(self.new, self.imap.map_indices([r.min for r in op.region], self.dom))
        rel: dict[Var, Range] = {}
        points = []
        for k, r in enumerate(op.region):
            if _is_one(simplify(r.extent)):
                points.append(r.min)
            else:
                t = Var(f"t{k}", r.min.dtype)
                rel[t] = Range(_zero(r.min.dtype), r.extent)
                points.append(r.min + t)
        mapped = self.imap.map_indices(points)
        ranges = []
        for e in mapped:
            st = eval_int_set(e, rel)
            ranges.append(Range(simplify(st.min_value, self.dom), simplify(st.max_value - st.min_value + 1, self.dom)))
        return BufferRegion(self.new, tuple(ranges))

    def visit_MatchBufferRegion(self, op: MatchBufferRegion) -> MatchBufferRegion:
        if op.source.buffer is self.old:
            raise CacheError(
                f"buffer {self.old.name} is matched by match_buffer {op.buffer.name}; its layout cannot be transformed"
            )
        return self.generic_visit(op)


def _iter_type_of(expr: PrimExpr, kinds: dict[Var, IterType]) -> IterType:
    used = {kinds[v] for v in free_vars(expr) if v in kinds}
    if used == {IterType.REDUCE}:
        return IterType.REDUCE
    if used <= {IterType.SPATIAL}:
        return IterType.SPATIAL
    return IterType.OPAQUE


class _SimplifyAccesses(Mutator):
    def __init__(self, dom: dict[Var, Range]) -> None:
        self.dom = dom

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        return BufferLoad(op.buffer, tuple(simplify(self.visit(i), self.dom) for i in op.indices))

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        return BufferStore(
            op.buffer, self.visit(op.value), tuple(simplify(self.visit(i), self.dom) for i in op.indices)
        )

    def visit_Range(self, op: Range) -> Range:
        return Range(simplify(op.min, self.dom), simplify(op.extent, self.dom))


# ---------------------------------------------------------------------------------------
# primitives


class CachePrimitives(ScheduleState):
    def _scope_of(self, loc: Located, primitive_name: str) -> Block:
        scope = enclosing_block(loc.path)
        if scope is None:
            raise InvalidArgument(f"{primitive_name}: block {loc.node.name} is the root block", block=loc.node.name)
        return scope

    def _consumer_list(
        self, consumer_blocks: Any, scope: Block, buf: Buffer, primitive_name: str
    ) -> list[Block] | None:
        if consumer_blocks is None:
            return None
        if not isinstance(consumer_blocks, list | tuple):
            raise InvalidArgument(f"{primitive_name}: consumer_blocks must be a list of BlockRVs or None")
        children = {id(r.block) for r in child_blocks(scope)}
        out = []
        for rv in consumer_blocks:
            node = self._block(rv).node
            if id(node) not in children:
                raise CacheError(
                    f"{primitive_name}: consumer block {node.name} is not in scope {scope.name} of the cached block",
                    block=node.name,
                )
            if not _reads_buffer(node, buf):
                raise CacheError(
                    f"{primitive_name}: consumer block {node.name} does not read buffer {buf.name}", block=node.name
                )
            out.append(node)
        return out

    @primitive()
    def cache_read(
        self,
        block: BlockRV,
        read_buffer_index: int,
        storage_scope: str,
        consumer_blocks: list[BlockRV] | None = None,
    ) -> BlockRV:
        """Copy the buffer ``block`` reads into a new buffer of ``storage_scope``; consumers read the copy.

        The new block ``<buffer>_<scope>`` copies the region its producer writes (or the whole
        buffer when the buffer is an input of the scope) into ``<buffer>_<scope>``, allocated in the
        scope block.  It goes right after the producer, before the first consumer (at the start of
        the scope for an input).  ``consumer_blocks`` limits which consumers read the copy. ::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0

            sch.cache_read(sch.get_block("B"), 0, "shared")

            A_shared = T.alloc_buffer((64, 64), scope="shared")
            for ax0, ax1 in T.grid(64, 64):
                with T.block("A_shared"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    A_shared[v0, v1] = A[v0, v1]
            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A_shared[vi, vj] * 2.0

        Rules: the index names a read region of the block; the scope is a storage scope; the
        buffer has at most one producer in the scope, and the block does not write it itself.
        """
        loc = self._block(block)
        blk = loc.node
        scope = self._scope_of(loc, "cache_read")
        idx = _check_index(blk, read_buffer_index, "read", "cache_read")
        _check_scope(storage_scope)
        buf = blk.reads[idx].buffer
        children = child_blocks(scope)
        writers = [r.block for r in children if _writes_buffer(r.block, buf)]
        if len(writers) > 1:
            raise CacheError(
                f"cache_read: buffer {buf.name} is written by blocks {', '.join(w.name for w in writers)} in scope "
                f"{scope.name}; it needs a single producer",
                block=blk.name,
            )
        if _writes_buffer(blk, buf):
            raise CacheError(
                f"cache_read: block {blk.name} both reads and writes buffer {buf.name}; a read cache would not see its writes",
                block=blk.name,
                fragment=self._fragment(blk),
            )
        consumers = self._consumer_list(consumer_blocks, scope, buf, "cache_read")
        if consumers is None:
            consumers = [r.block for r in children if _reads_buffer(r.block, buf) and r.block not in writers]
        cache = _compact(buf, _unique_buffer_name(self.func, f"{buf.name}_{storage_scope}"), storage_scope)
        name = self._unique_block_name(f"{buf.name}_{storage_scope}")
        if not writers:
            region = _region_of(scope.reads, buf) or buf.full_region()
            # the scope's read region may cover guarded accesses past the buffer's edges
            scope_dom = {iv.var: iv.dom for iv in scope.iter_vars}
            region = _clipped_region(buf, [(r.min, simplify(r.min + r.extent - 1)) for r in region.region], scope_dom)
            stage = _copy_stage(name, buf, cache, region)
            seq_node: Stmt | None = scope.body if isinstance(scope.body, SeqStmt) else None
            pos = 0
        else:
            writer = writers[0]
            seq_node, pos = _detect_location(scope.body, writer, consumers)
            if seq_node is None:
                raise CacheError(
                    f"cache_read: no consumer of buffer {buf.name} follows its producer {writer.name} in scope {scope.name}",
                    block=blk.name,
                )
            wloc = find_block(self.func, writer.name)
            assert wloc is not None
            wrealize = wloc.path[-2]
            assert isinstance(wrealize, BlockRealize)
            wregion = _region_of(writer.writes, buf)
            assert wregion is not None
            stage = _copy_stage(name, buf, cache, _relaxed_region(wregion, wrealize, wloc.path, seq_node))
        realizes = {}
        for r in children:
            if any(r.block is c for c in consumers):
                realizes[id(r)] = _swap(r, {buf: cache})
        new_body = _Rebuild(realizes, seq_node, pos, stage).visit(scope.body)
        if seq_node is None:
            new_body = seq(stage, new_body)
        new_scope = dataclasses.replace(scope, body=new_body, alloc_buffers=(*scope.alloc_buffers, cache))
        self.func = replace(self.func, {id(scope): new_scope})
        return self._new_block_rv(name)

    @primitive()
    def cache_write(
        self,
        block: BlockRV,
        write_buffer_index: int,
        storage_scope: str,
        consumer_blocks: list[BlockRV] | None = None,
    ) -> BlockRV:
        """Make ``block`` write a new buffer of ``storage_scope``, copied back to the original buffer.

        The block's accesses of the buffer go to ``<buffer>_<scope>`` (allocated in the scope
        block); a new block named ``<buffer>_<scope>`` copies the region the block writes back
        into the original buffer, right after the block (before its first consumer, or at the
        end of the scope).  Consumers listed in ``consumer_blocks`` read the cache directly. ::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0

            sch.cache_write(sch.get_block("B"), 0, "local")

            B_local = T.alloc_buffer((64, 64), scope="local")
            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B_local[vi, vj] = A[vi, vj] * 2.0
            for ax0, ax1 in T.grid(64, 64):
                with T.block("B_local"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    B[v0, v1] = B_local[v0, v1]

        Rules: the index names a write region of the block; the scope is a storage scope; the
        block is the only writer of the buffer in its scope.
        """
        loc = self._block(block)
        blk = loc.node
        scope = self._scope_of(loc, "cache_write")
        idx = _check_index(blk, write_buffer_index, "write", "cache_write")
        _check_scope(storage_scope)
        buf = blk.writes[idx].buffer
        children = child_blocks(scope)
        others = [r.block for r in children if r.block is not blk and _writes_buffer(r.block, buf)]
        if others:
            raise CacheError(
                f"cache_write: buffer {buf.name} is also written by block {others[0].name} in scope {scope.name}; "
                f"block {blk.name} must be its only producer",
                block=blk.name,
            )
        for outer in loc.path[:-1]:
            if isinstance(outer, Block) and outer.name != "root" and _writes_buffer(outer, buf):
                raise CacheError(
                    f"cache_write: buffer {buf.name} is also written by the enclosing block {outer.name} "
                    f"(its init or its own writes); redirecting only block {blk.name}'s writes would split them",
                    block=blk.name,
                )
        direct = self._consumer_list(consumer_blocks, scope, buf, "cache_write") or []
        consumers = [r.block for r in children if r.block is not blk and _reads_buffer(r.block, buf)]
        related = [c for c in consumers if not any(c is d for d in direct)]
        cache = _compact(buf, _unique_buffer_name(self.func, f"{buf.name}_{storage_scope}"), storage_scope)
        name = self._unique_block_name(f"{buf.name}_{storage_scope}")
        realize = loc.path[-2]
        assert isinstance(realize, BlockRealize)
        region = _region_of(blk.writes, buf)
        assert region is not None
        seq_node: Stmt | None
        if related:
            seq_node, pos = _detect_location(scope.body, blk, related)
            if seq_node is None:
                raise CacheError(
                    f"cache_write: a consumer of buffer {buf.name} runs before block {blk.name} in scope {scope.name}",
                    block=blk.name,
                )
            above: Stmt = seq_node
        else:
            seq_node = scope.body if isinstance(scope.body, SeqStmt) else None
            pos = len(scope.body.stmts) if isinstance(scope.body, SeqStmt) else 1
            above = scope
        stage = _copy_stage(name, cache, buf, _relaxed_region(region, realize, loc.path, above))
        realizes = {id(realize): _swap(realize, {buf: cache})}
        for r in children:
            if any(r.block is d for d in direct):
                realizes[id(r)] = _swap(r, {buf: cache})
        new_body = _Rebuild(realizes, seq_node, pos, stage).visit(scope.body)
        if seq_node is None:
            new_body = seq(new_body, stage)
        new_scope = dataclasses.replace(scope, body=new_body, alloc_buffers=(*scope.alloc_buffers, cache))
        self.func = replace(self.func, {id(scope): new_scope})
        return self._new_block_rv(name)

    @primitive()
    def reindex(self, block: BlockRV, buffer: tuple[str, int]) -> BlockRV:
        """Stage a buffer through a new buffer indexed directly by the block's iterators.

        ``buffer`` is ``("read", i)`` or ``("write", i)``.  The new buffer ``<buffer>_reindex``
        has one dimension per block iterator that the access uses, in iterator order; a copy
        block of that name goes right before (read) or after (write) the block's loop nest. ::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vj, vi] * 2.0

            sch.reindex(sch.get_block("B"), ("read", 0))

            A_reindex = T.alloc_buffer((64, 64))
            for ax0, ax1 in T.grid(64, 64):
                with T.block("A_reindex"):
                    v0, v1 = T.axis.remap("SS", [ax0, ax1])
                    A_reindex[v0, v1] = A[v1, v0]
            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A_reindex[vi, vj] * 2.0

        Rules: the block is a leaf with affine bindings and no predicate; every access of the
        buffer in the block uses the same indices (of a write: affine in the block's iterators;
        of a read: any expression of them that stays in the buffer's bounds); a read is
        not also written by the block, and a written buffer read by the block needs an init;
        no other block in the same loop nest accesses the buffer.
        """
        loc, realize, scope, kind, buf, first = self._reindex_site(block, buffer)
        blk = loc.node
        _check_reindex_access(blk, kind, buf, first)
        body, top = _reindex_nest(loc, scope, realize, kind, buf)
        used: set[Var] = set()
        for e in first:
            used.update(free_vars(e))
        covered = [iv for iv in blk.iter_vars if iv.var in used]
        new_buf = _compact(
            buf,
            _unique_buffer_name(self.func, f"{buf.name}_reindex"),
            shape=[iv.dom.extent for iv in covered] or [IntImm(buf.shape[0].dtype if buf.shape else "int32", 1)],
        )
        new_idx = tuple(simplify(iv.var - iv.dom.min) for iv in covered) or (IntImm(new_buf.shape[0].dtype, 0),)
        new_block = _reindexed_block(blk, buf, new_buf, new_idx)
        name = self._unique_block_name(f"{buf.name}_reindex")
        stage = _reindex_stage(name, kind, covered, (buf, first), (new_buf, new_idx))
        self.func = _reindex_rewrite(self.func, scope, (body, top), (blk, new_block), stage, new_buf, kind)
        return self._new_block_rv(name)

    def _reindex_site(
        self, block: BlockRV, buffer: tuple[str, int]
    ) -> tuple[Located, BlockRealize, Block, str, Buffer, tuple[PrimExpr, ...]]:
        """Check reindex's arguments: a leaf block without predicate, with an affine binding, that
        accesses the buffer everywhere at the same indices. Returns the block's location, realize,
        scope block, ``"read"`` or ``"write"``, the buffer and its indices."""
        loc = self._block(block)
        blk = loc.node
        realize = loc.path[-2]
        assert isinstance(realize, BlockRealize)
        if isinstance(buffer, str):
            raise InvalidArgument(f'reindex: buffer must be a pair ("read" or "write", index), got {buffer!r}')
        scope = self._scope_of(loc, "reindex")
        kind, _, buf = _norm_buffer_arg(blk, buffer, "reindex")
        if child_blocks(blk) or (blk.init is not None and child_blocks(blk.init)):
            raise CacheError(f"reindex: block {blk.name} is not a leaf block (it has blocks inside)", block=blk.name)
        if realize.predicate != TRUE:
            raise CacheError(
                f"reindex: block {blk.name} has the predicate {realize.predicate}; reindex needs a block without one",
                block=blk.name,
            )
        reason = affine_binding_error(realize, loop_domains(loops_above(loc.path[:-1])))
        if reason is not None:
            raise NotAffineBinding(
                f"reindex: block {blk.name} does not have an affine binding: {reason}", block=blk.name
            )
        accesses = _loads_and_stores(blk.body, buf) + _loads_and_stores(blk.init, buf)
        if not accesses:
            raise CacheError(f"reindex: block {blk.name} has no load or store of buffer {buf.name}", block=blk.name)
        first = accesses[0]
        for other in accesses[1:]:
            if other != first:
                raise CacheError(
                    f"reindex: block {blk.name} accesses buffer {buf.name} with different indices "
                    f"[{', '.join(map(str, first))}] and [{', '.join(map(str, other))}]",
                    block=blk.name,
                    fragment=self._fragment(blk),
                )
        return loc, realize, scope, kind, buf, first

    @primitive()
    def set_scope(self, block: BlockRV, buffer_index: int, storage_scope: str) -> None:
        """Change the storage scope of the ``buffer_index``-th buffer ``block`` writes.

        ::

            B = T.alloc_buffer((64, 64))
            ...
            sch.set_scope(sch.get_block("B"), 0, "shared")

            B = T.alloc_buffer((64, 64), scope="shared")

        Rules: the index names a write region of the block; the buffer is allocated by a block
        (not a parameter of the function); the scope is a storage scope.  Buffers matched to a
        region of it with match_buffer take the new scope too.
        """
        loc = self._block(block)
        blk = loc.node
        idx = _check_index(blk, buffer_index, "write", "set_scope")
        _check_scope(storage_scope)
        buf = blk.writes[idx].buffer
        if any(b is buf for _, b in self.func.buffer_map):
            raise CacheError(
                f"set_scope: buffer {buf.name} written by block {blk.name} is a parameter of the function; "
                "only buffers allocated by a block can change scope",
                block=blk.name,
            )
        if _alloc_site(self.func, buf) is None:
            raise CacheError(
                f"set_scope: buffer {buf.name} written by block {blk.name} is not allocated by any block",
                block=blk.name,
            )
        if buf.scope == storage_scope:
            return
        mapping: dict[Buffer, Buffer] = {
            buf: Buffer(
                buf.name,
                buf.shape,
                buf.dtype,
                buf.strides,
                buf.elem_offset,
                storage_scope,
                buf.alignment,
                buf.offset_factor,
            )
        }

        def visit(n: Node) -> None:
            if isinstance(n, MatchBufferRegion) and n.source.buffer is buf:
                m = n.buffer
                mapping[m] = Buffer(
                    m.name, m.shape, m.dtype, m.strides, m.elem_offset, storage_scope, m.alignment, m.offset_factor
                )

        post_order_visit(self.func.body, visit)
        self.func = self.func.with_body(_swap(self.func.body, mapping))

    @primitive()
    def storage_align(self, block: BlockRV, buffer_index: int, axis: int, factor: int, offset: int) -> None:
        """Ask that ``stride[axis] % factor == offset`` for the ``buffer_index``-th buffer ``block`` writes.

        The request is recorded, as in TVM, as the block annotation ``buffer_dim_align``: a list
        of ``[buffer_index, axis, factor, offset]`` entries applied when the buffer is lowered
        (a second request for the same buffer and axis replaces the first). ::

            sch.storage_align(sch.get_block("B"), 0, axis=0, factor=32, offset=1)

            with T.block("B"):
                ...
                T.block_attr({"buffer_dim_align": [[0, 0, 32, 1]]})

        Rules: the index names a write region of the block; the buffer is allocated by a block,
        not a parameter; ``-ndim <= axis < ndim``; ``factor > 0``; ``0 <= offset < factor``.
        """
        loc = self._block(block)
        blk = loc.node
        idx = _check_index(blk, buffer_index, "write", "storage_align")
        buf = blk.writes[idx].buffer
        for arg, value in (("axis", axis), ("factor", factor), ("offset", offset)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"storage_align: {arg} must be an integer, got {value!r}")
        if any(b is buf for _, b in self.func.buffer_map) or _alloc_site(self.func, buf) is None:
            raise CacheError(
                f"storage_align: buffer {buf.name} written by block {blk.name} is not allocated by a block "
                "(a parameter's layout is fixed)",
                block=blk.name,
            )
        ndim = len(buf.shape)
        if not -ndim <= axis < ndim:
            raise InvalidArgument(
                f"storage_align: axis {axis} is out of range for buffer {buf.name} of {ndim} dimensions "
                f"written by block {blk.name}",
                block=blk.name,
            )
        axis = axis + ndim if axis < 0 else axis
        if factor <= 0:
            raise InvalidArgument(
                f"storage_align: factor must be positive, got {factor} (block {blk.name})", block=blk.name
            )
        if not 0 <= offset < factor:
            raise InvalidArgument(
                f"storage_align: offset must satisfy 0 <= offset < factor ({factor}), got {offset} (block {blk.name})",
                block=blk.name,
            )
        ann = dict(blk.annotations)
        entries = [tuple(e) for e in ann.get(BUFFER_DIM_ALIGN, ())]
        entry = (idx, axis, factor, offset)
        for n, e in enumerate(entries):
            if e[0] == idx and e[1] == axis:
                entries[n] = entry
                break
        else:
            entries.append(entry)
        ann[BUFFER_DIM_ALIGN] = tuple(entries)
        new_block = Block(
            blk.name,
            blk.iter_vars,
            blk.reads,
            blk.writes,
            blk.body,
            blk.init,
            blk.alloc_buffers,
            blk.match_buffers,
            ann,
        )
        self.func = replace(self.func, {id(blk): new_block})

    @primitive(to_json={"index_map": index_map_to_json}, from_json={"index_map": _index_map_from_json})
    def transform_layout(
        self,
        block: BlockRV,
        buffer: tuple[str, int] | str,
        index_map: IndexMap | Any,
        pad_value: Any = None,
    ) -> None:
        """Re-lay a buffer out: new shape ``index_map.map_shape(shape)``, every access mapped.

        ``buffer`` is ``("read", i)``, ``("write", i)`` or the name of a buffer the block
        accesses; ``index_map`` is an IndexMap, a function or the text of a lambda.  Loads,
        stores, read/write regions and the allocation (or the parameter, whose shape changes)
        all follow the map. ::

            sch.transform_layout(sch.get_block("B"), ("write", 0), lambda i, j: (i // 16, j, i % 16))

            B = T.alloc_buffer((4, 64, 16))
            ...     B[vi // 16, vj, vi % 16] = A[vi, vj] * 2.0
            ...     C[vi, vj] = B[vi // 16, vj, vi % 16] + 1.0

        Rules: the map takes as many indices as the buffer has dimensions and is a bijection of
        the buffer's domain (padding with ``pad_value`` is not supported yet); the buffer is not
        the source of a match_buffer.
        """
        loc = self._block(block)
        blk = loc.node
        _, _, buf = _norm_buffer_arg(blk, buffer, "transform_layout")
        imap = _coerce_index_map(index_map, len(buf.shape), f"buffer {buf.name}")
        if pad_value is not None:
            raise InvalidArgument(
                f"transform_layout: pad_value is not supported yet (buffer {buf.name} of block {blk.name})",
                block=blk.name,
            )
        if buf.strides:
            raise CacheError(f"transform_layout: buffer {buf.name} has explicit strides; its layout is fixed")
        try:
            imap.inverse(buf.shape)
            new_shape = imap.map_shape(buf.shape)
        except IndexMapError as err:
            raise CacheError(
                f"transform_layout: {err}; buffer {buf.name} of block {blk.name} would need padding, which is not supported",
                block=blk.name,
            ) from None
        new_buf = _compact(buf, buf.name, shape=new_shape)
        rewriter = _RelayoutBuffer(buf, new_buf, imap)
        body = rewriter.visit(self.func.body)
        bmap = tuple((v, new_buf if b is buf else b) for v, b in self.func.buffer_map)
        self.func = PrimFunc(self.func.params, body, bmap, self.func.attrs)

    @primitive(to_json={"index_map": index_map_to_json}, from_json={"index_map": _index_map_from_json})
    def transform_block_layout(self, block: BlockRV, index_map: IndexMap | Any) -> None:
        """Remap the iteration space of ``block``: its iterators become the map's outputs.

        The loops around the block are replaced by one loop per new iterator, and the block's
        body reads its old iterators through the inverse map. ::

            for i, j in T.grid(16, 16):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0

            sch.transform_block_layout(sch.get_block("B"), lambda i, j: (i * 16 + j,))

            for ax0 in range(256):
                with T.block("B"):
                    v0 = T.axis.spatial(256, ax0)
                    B[v0 // 16, v0 % 16] = A[v0 // 16, v0 % 16] * 2.0

        Rules: the loops above the block (in its scope) contain only the block and start at 0;
        the binding is trivial (the i-th iterator is bound to the i-th loop, over exactly that
        loop's range) with no predicate; the map takes one index per iterator, is a bijection
        of the iteration domain, and no new iterator mixes spatial and reduce iterators.
        """
        loc = self._block(block)
        blk = loc.node
        realize = loc.path[-2]
        assert isinstance(realize, BlockRealize)
        imap = _coerce_index_map(index_map, len(blk.iter_vars), f"block {blk.name}")
        self._scope_of(loc, "transform_block_layout")
        loops = loops_above(loc.path[:-1])
        for lp in loops:
            if not (isinstance(lp.min, IntImm) and lp.min.value == 0):
                raise LoopStructureError(
                    f"transform_block_layout: loop {lp.loop_var.name} above block {blk.name} does not start at 0",
                    loop=lp.loop_var.name,
                    block=blk.name,
                )
        if loops:
            k = next(n for n, node in enumerate(loc.path) if node is loops[0])
            for node in loc.path[k:-2]:
                if isinstance(node, For) and not isinstance(node.body, For | BlockRealize):
                    raise LoopStructureError(
                        f"transform_block_layout: loop {node.loop_var.name} holds more than block {blk.name}; "
                        "the block must be the only statement under its loops",
                        loop=node.loop_var.name,
                        block=blk.name,
                        fragment=self._fragment(loops[0]),
                    )
        trivial = (
            len(loops) == len(blk.iter_vars)
            and realize.predicate == TRUE
            and all(
                v is lp.loop_var
                and isinstance(iv.dom.min, IntImm)
                and iv.dom.min.value == 0
                and simplify(iv.dom.extent) == simplify(lp.extent)
                for iv, v, lp in zip(blk.iter_vars, realize.iter_values, loops, strict=False)
            )
        )
        if not trivial:
            raise NotAffineBinding(
                f"transform_block_layout: block {blk.name} does not have a trivial binding "
                "(each iterator bound to its own loop, in order, over the loop's range, with no predicate)",
                block=blk.name,
                fragment=self._fragment(realize),
            )
        extents = [iv.dom.extent for iv in blk.iter_vars]
        try:
            inverse = imap.inverse(extents)
            new_extents = imap.map_shape(extents)
        except IndexMapError as err:
            raise CacheError(f"transform_block_layout: {err} (block {blk.name})", block=blk.name) from None
        old_vars = [iv.var for iv in blk.iter_vars]
        kinds = {iv.var: iv.iter_type for iv in blk.iter_vars}
        mapped = imap.map_indices(old_vars)
        new_iters = []
        for n, (e, ext) in enumerate(zip(mapped, new_extents, strict=True)):
            kind = _iter_type_of(e, kinds)
            if kind == IterType.OPAQUE:
                raise CacheError(
                    f"transform_block_layout: new iterator {e} of block {blk.name} mixes spatial and reduce iterators",
                    block=blk.name,
                )
            new_iters.append(IterVar(Var(f"v{n}", ext.dtype), Range(_zero(ext.dtype), ext), kind))
        new_vars = [iv.var for iv in new_iters]
        dom = {iv.var: iv.dom for iv in new_iters}
        back = dict(zip(old_vars, inverse.map_indices(new_vars, dom), strict=True))
        simp = _SimplifyAccesses(dom)

        def rewrite(node: Any) -> Any:
            return simp.visit(substitute(node, back))

        new_block = Block(
            blk.name,
            tuple(new_iters),
            tuple(rewrite(r) for r in blk.reads),
            tuple(rewrite(r) for r in blk.writes),
            rewrite(blk.body),
            None if blk.init is None else rewrite(blk.init),
            blk.alloc_buffers,
            tuple(rewrite(m) for m in blk.match_buffers),
            blk.annotations,
        )
        loop_vars = [Var(f"ax{n}", ext.dtype) for n, ext in enumerate(new_extents)]
        stmt: Stmt = BlockRealize(tuple(loop_vars), TRUE, new_block)
        for lv, ext in reversed(list(zip(loop_vars, new_extents, strict=True))):
            stmt = For(lv, _zero(ext.dtype), ext, ForKind.SERIAL, stmt)
        target = loops[0] if loops else realize
        self.func = replace(self.func, {id(target): stmt})


__all__ = ["BUFFER_DIM_ALIGN", "CachePrimitives", "IndexMap"]


def _check_reindex_access(blk: Block, kind: str, buf: Buffer, first: tuple[PrimExpr, ...]) -> None:
    """The access reindex stages is copyable: a write's indices are affine in the iterators,
    every index stays in the buffer's bounds, a read buffer is not written by the block, and a
    written buffer the block reads has an init."""
    iter_set = {iv.var for iv in blk.iter_vars}
    for e in first:
        # a read copy is a gather, right for any index; a written copy scatters back, so the
        # indices must be affine (a fused iterator's split, ``k // 9``, is fine to read)
        if kind == "write" and not _is_affine(e, iter_set):
            raise CacheError(
                f"reindex: index {e} of buffer {buf.name} in block {blk.name} is not an affine expression of its iterators",
                block=blk.name,
            )
    iter_dom = {iv.var: iv.dom for iv in blk.iter_vars}
    for e, extent in zip(first, buf.shape, strict=True):
        bounds = eval_int_set(e, iter_dom)
        if not (can_prove(bounds.min_value >= 0, iter_dom) and can_prove(bounds.max_value < extent, iter_dom)):
            raise CacheError(
                f"reindex: index {e} of buffer {buf.name} in block {blk.name} can leave the buffer's bounds "
                f"[0, {extent}) (the block guards the access); a copy stage would access outside the buffer",
                block=blk.name,
            )
    if kind == "read" and _writes_buffer(blk, buf):
        raise CacheError(
            f"reindex: block {blk.name} also writes buffer {buf.name}; reindex it as a write", block=blk.name
        )
    if kind == "write" and blk.init is None:
        loads: list[BufferLoad] = []
        post_order_visit(blk.body, lambda n: loads.append(n) if isinstance(n, BufferLoad) and n.buffer is buf else None)
        if loads or _reads_buffer(blk, buf):
            raise CacheError(
                f"reindex: block {blk.name} reads buffer {buf.name}, which it writes, and has no init; "
                "the reindexed buffer would start undefined",
                block=blk.name,
            )


def _reindex_nest(loc: Located, scope: Block, realize: BlockRealize, kind: str, buf: Buffer) -> tuple[Stmt, Stmt]:
    """The scope's body and its top-level statement holding the block, checked to hold no other
    block that accesses ``buf`` (writes it, for a read)."""
    blk = realize.block
    k = next(n for n, node in enumerate(loc.path) if node is scope)
    body = loc.path[k + 1]
    top = loc.path[k + 2] if isinstance(body, SeqStmt) else body
    others = [] if top is realize else [r.block for r in child_blocks(top)]
    for ob in others:
        if ob is blk:
            continue
        touches = _writes_buffer(ob, buf) if kind == "read" else (_writes_buffer(ob, buf) or _reads_buffer(ob, buf))
        if touches:
            raise CacheError(
                f"reindex: block {ob.name} in the same loop nest as block {blk.name} also accesses buffer {buf.name}",
                block=blk.name,
            )
    return body, top


def _reindexed_block(blk: Block, buf: Buffer, new_buf: Buffer, new_idx: tuple[PrimExpr, ...]) -> Block:
    """``blk`` with every access of ``buf`` redirected to ``new_buf[new_idx]``."""

    class _Redirect(Mutator):
        def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
            op = self.generic_visit(op)
            return BufferLoad(new_buf, new_idx) if op.buffer is buf else op

        def visit_BufferStore(self, op: BufferStore) -> Stmt:
            op = self.generic_visit(op)
            return BufferStore(new_buf, op.value, new_idx) if op.buffer is buf else op

    redirect = _Redirect()
    return Block(
        blk.name,
        blk.iter_vars,
        tuple(_point_region(new_buf, new_idx) if r.buffer is buf else r for r in blk.reads),
        tuple(_point_region(new_buf, new_idx) if r.buffer is buf else r for r in blk.writes),
        redirect.visit(blk.body),
        None if blk.init is None else redirect.visit(blk.init),
        blk.alloc_buffers,
        blk.match_buffers,
        blk.annotations,
    )


def _reindex_stage(
    name: str,
    kind: str,
    covered: list[IterVar],
    old: tuple[Buffer, tuple[PrimExpr, ...]],
    new: tuple[Buffer, tuple[PrimExpr, ...]],
) -> Stmt:
    """The copy stage ``name`` between ``buf[first]`` and ``new_buf[new_idx]`` (into the new buffer
    for a read, back from it for a write), one loop per covered iterator."""
    (buf, first), (new_buf, new_idx) = old, new
    subst, iters, loops, values = {}, [], [], []
    for n, iv in enumerate(covered):
        w = Var(f"v{n}", iv.var.dtype)
        subst[iv.var] = w
        iters.append(IterVar(w, iv.dom, IterType.SPATIAL))
        ax = Var(f"ax{n}", iv.var.dtype)
        loops.append((ax, iv.dom.extent))
        values.append(simplify(ax + iv.dom.min))
    old_idx = tuple(simplify(substitute(e, subst)) for e in first)
    stage_idx = tuple(simplify(substitute(e, subst)) for e in new_idx)
    if kind == "read":
        store = BufferStore(new_buf, BufferLoad(buf, old_idx), stage_idx)
        reads, writes = (_point_region(buf, old_idx),), (_point_region(new_buf, stage_idx),)
    else:
        store = BufferStore(buf, BufferLoad(new_buf, stage_idx), old_idx)
        reads, writes = (_point_region(new_buf, stage_idx),), (_point_region(buf, old_idx),)
    stage: Stmt = BlockRealize(tuple(values), TRUE, Block(name, tuple(iters), reads, writes, store))
    for ax, ext in reversed(loops):
        stage = For(ax, _zero(ext.dtype), ext, ForKind.SERIAL, stage)
    return stage


def _reindex_rewrite(
    func: PrimFunc,
    scope: Block,
    nest: tuple[Stmt, Stmt],
    blocks: tuple[Block, Block],
    stage: Stmt,
    new_buf: Buffer,
    kind: str,
) -> PrimFunc:
    """``func`` with the block replaced, the copy stage put before (read) or after (write) its
    loop nest, and the new buffer allocated in the scope block."""
    (body, top), (blk, new_block) = nest, blocks
    new_top = replace(func.with_body(top), {id(blk): new_block}).body
    pieces = [stage, new_top] if kind == "read" else [new_top, stage]
    if isinstance(body, SeqStmt):
        stmts = list(body.stmts)
        at = next(n for n, s in enumerate(stmts) if s is top)
        new_body = seq(*stmts[:at], *pieces, *stmts[at + 1 :])
    else:
        new_body = seq(*pieces)
    new_scope = Block(
        scope.name,
        scope.iter_vars,
        scope.reads,
        scope.writes,
        new_body,
        scope.init,
        (*scope.alloc_buffers, new_buf),
        scope.match_buffers,
        scope.annotations,
    )
    return replace(func, {id(scope): new_scope})
