"""Compute-location primitives: compute_at, reverse_compute_at, compute_inline,
reverse_compute_inline and sample_compute_location (TVM semantics).

``sample_compute_location`` returns a LoopRV; its decision ``-1`` ("compute root") and ``-2``
("compute inline") return special LoopRVs that stand for no loop: passed to ``compute_at`` (or
``reverse_compute_at``) the first leaves the block where it is and the second inlines it
(``compute_inline`` / ``reverse_compute_inline``), as TVM's ``LoopRV.RootMarker`` and
``LoopRV.InlineMark``.  Any other primitive given such a LoopRV raises LoopNotFound.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace as dc_replace
from typing import Any

from ..arith import IntervalSet, can_prove, can_prove_equal, const_int_bound, detect_access_regions, simplify
from ..arith import union as set_union
from ..ir import (
    TRUE,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    For,
    ForKind,
    IntImm,
    IterType,
    MatchBufferRegion,
    Mutator,
    Node,
    PrimExpr,
    PrimFunc,
    Range,
    SeqStmt,
    Stmt,
    Var,
    children,
    free_vars,
    logical_and,
    post_order_visit,
    seq,
    substitute,
)
from ..ir.identity_cache import MISSING, IdentityCache
from .analysis import (
    check_region_cover,
    check_write_after_read,
    child_block_paths,
    consumers_of,
    is_complete_block,
    is_output_block,
    is_reduction_block,
    loop_domains,
    loop_iter_type,
    producers_of,
    region_covers,
    relax_region,
    show_sets,
    unbind_region,
)
from .errors import (
    DecisionError,
    InlineError,
    InvalidArgument,
    LoopStructureError,
    NotCompleteBlock,
    OutputBlockError,
    RegionCoverError,
    ScheduleError,
    StagePipelineError,
)
from .rv import BlockRV, LoopRV
from .state import ScheduleState, primitive
from .tree import Located, enclosing_block, find_loop, loops_above, replace, walk_nodes

# The loop variables that the special LoopRVs of sample_compute_location stand for.
ROOT_MARK = Var("compute_root")
INLINE_MARK = Var("compute_inline")


# ---------------------------------------------------------------------------------------
# shared helpers


def _scope_of(loc: Located, primitive_name: str) -> Block:
    scope = enclosing_block(loc.path)
    if scope is None:
        raise InvalidArgument(f"{primitive_name} cannot operate on the root block {loc.node.name}", block=loc.node.name)
    return scope


def _require_stage_pipeline(scope: Block, block: Block, primitive_name: str) -> None:
    reason = check_write_after_read(scope)
    if reason is not None:
        raise StagePipelineError(
            f"cannot {primitive_name} block {block.name}: its scope {scope.name} is not a stage pipeline: {reason}",
            block=block.name,
        )
    reason = check_region_cover(scope)
    if reason is not None:
        raise RegionCoverError(
            f"cannot {primitive_name} block {block.name}: its scope {scope.name} is not a stage pipeline: {reason}",
            block=block.name,
        )


def _removal_root(loc: Located, primitive_name: str) -> Stmt:
    """The statement to delete to remove the block: its realize and the loops holding only it."""
    path = loc.path
    node = path[-2]
    i = len(path) - 3
    while i >= 0 and isinstance(path[i], For):
        node = path[i]
        i -= 1
    if i < 0 or not isinstance(path[i], SeqStmt):
        raise LoopStructureError(
            f"cannot {primitive_name} block {loc.node.name}: it is the only statement of its scope "
            "(or of a branch), so removing it would leave an empty body",
            block=loc.node.name,
        )
    return node


def _recompute_reads(block: Block) -> Block:
    """The block with its read regions detected from its body (written buffers left out)."""
    reads, _ = detect_access_regions(block)
    written = {w.buffer for w in block.writes}
    return dc_replace(block, reads=tuple(r for r in reads if r.buffer not in written))


def _uses_buffer(node: Node, buffer: Buffer) -> bool:
    """Whether anything below ``node`` loads, stores or names a region of ``buffer``; a block
    below it whose regions do not name the buffer is not entered (they cover its accesses)."""
    stack = [node]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is BufferLoad or t is BufferStore or t is BufferRegion:
            if n.buffer is buffer:
                return True
        elif t is MatchBufferRegion:
            if n.source.buffer is buffer:
                return True
        elif t is Block and n is not node and not _names_buffer(n, buffer):
            continue
        stack.extend(children(n))
    return False


def _names_buffer(block: Block, buffer: Buffer) -> bool:
    return any(r.buffer is buffer for r in (*block.reads, *block.writes)) or any(
        m.source.buffer is buffer for m in block.match_buffers
    )


def _drop_unused_alloc(func: PrimFunc, buffer: Buffer) -> PrimFunc:
    """Remove ``buffer`` from the alloc_buffers of the block allocating it when nothing uses it."""
    owner = None
    for node in walk_nodes(func.body):
        if isinstance(node, Block) and buffer in node.alloc_buffers:
            owner = node
            break
    if owner is None:
        return func
    if _uses_buffer(dc_replace(owner, alloc_buffers=()), buffer):
        return func
    new_owner = dc_replace(owner, alloc_buffers=tuple(b for b in owner.alloc_buffers if b is not buffer))
    return replace(func, {id(owner): new_owner})


class _RemoveAndRewrite(Mutator):
    """Remove one statement, rewrite loads or stores, and refresh the regions of changed blocks."""

    def __init__(self, remove: Stmt, scope: Block, buffer: Buffer) -> None:
        self.remove = remove
        self.scope = scope
        self.buffer = buffer
        self.opaque = False

    def visit(self, node: Node) -> Any:
        if node is self.remove:
            return None
        return super().visit(node)

    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        new = [self.visit(s) for s in op.stmts]
        if all(a is b for a, b in zip(new, op.stmts, strict=True)):
            return op
        return seq(*[s for s in new if s is not None])

    def visit_Buffer(self, op: Buffer) -> Buffer:
        return op

    def visit_MatchBufferRegion(self, op: MatchBufferRegion) -> MatchBufferRegion:
        if op.source.buffer is self.buffer:
            self.opaque = True
        return op

    def visit_For(self, op: For) -> Stmt:
        body = self.visit(op.body)  # loop bounds read no buffer
        return op if body is op.body else dc_replace(op, body=body)

    def visit_BlockRealize(self, op: BlockRealize) -> Stmt:
        block = self.visit(op.block)  # bindings and predicates read no buffer
        return op if block is op.block else dc_replace(op, block=block)

    def visit_Block(self, op: Block) -> Block:
        if op is not self.scope and not _names_buffer(op, self.buffer):
            return op  # its regions cover every access inside it: nothing to rewrite
        new = self.generic_visit(op)
        if new is op or op is self.scope:
            return new
        return self.refresh(new)

    def refresh(self, block: Block) -> Block:
        return _recompute_reads(block)


# ---------------------------------------------------------------------------------------
# compute_at / reverse_compute_at


def _subtrees(loop: For) -> list[Stmt]:
    return list(loop.body.stmts) if isinstance(loop.body, SeqStmt) else [loop.body]


def _contains(stmt: Stmt, blocks: set[int]) -> bool:
    return any(type(node) is Block and id(node) in blocks for node in walk_nodes(stmt))


def _linear_in(expr: PrimExpr, var: Var) -> tuple[int, PrimExpr] | None:
    """(a, c) with ``expr == a * var + c`` and a constant a >= 1, or None."""
    zero, one = IntImm(var.dtype, 0), IntImm(var.dtype, 1)
    c = simplify(substitute(expr, {var: zero}))
    a = simplify(substitute(expr, {var: one}) - c)
    if not isinstance(a, IntImm) or a.value < 1 or var in free_vars(c):
        return None
    if not can_prove_equal(expr, a * var + c):
        return None
    return a.value, c


def _block_var_domains(
    block: Block,
    provided: dict[Buffer, list[BufferRegion]],
    required: dict[Buffer, list[list[IntervalSet]]],
    dom: dict[Var, Range],
) -> dict[Var, IntervalSet]:
    """For each iterator that some provided dimension determines, the values needed to cover ``required``."""
    iters = {iv.var for iv in block.iter_vars}
    out: dict[Var, IntervalSet] = {}
    for buf, reqs in required.items():
        need = reqs[0]
        for other in reqs[1:]:
            need = [set_union([x, y], dom) for x, y in zip(need, other, strict=True)]
        for region in provided.get(buf, []):
            for rng, req in zip(region.region, need, strict=True):
                if not req.is_bounded:
                    continue
                used = [v for v in free_vars(rng.min) if v in iters]
                if len(used) != 1 or not isinstance(rng.extent, IntImm):
                    continue
                v = used[0]
                lin = _linear_in(rng.min, v)
                if lin is None:
                    continue
                a, c = lin
                if a > 1 and rng.extent.value < a:
                    continue  # the instances leave holes: keep the full domain
                lo = simplify((req.min_value - c) // a if a > 1 else req.min_value - c, dom)
                hi = simplify((req.max_value - c) // a if a > 1 else req.max_value - c, dom)
                new = IntervalSet(lo, hi)
                out[v] = new if v not in out else set_union([out[v], new], dom)
    return out


def _check_reads_written(
    realize: BlockRealize,
    loop_vars: list[tuple[Var, PrimExpr]],
    written: dict[Buffer, list[list[IntervalSet]]],
    env: dict[Var, Range],
    lname: str,
) -> None:
    """reverse_compute_at: the moved block reads under the loop only what its producers write in the
    same iteration (region cover), else a RegionCoverError.

    The domain of the block is solved to cover what the producers write in one iteration, which is
    all compute_at needs (its block writes).  A consumer must also read nothing more: a window (a
    convolution's PadInput[v:v + 3] when the loop writes one row) or a dimension no iterator solves
    would read rows that later iterations write.
    """
    block = realize.block
    relax = {ax: Range(IntImm(ax.dtype, 0), extent) for ax, extent in loop_vars}
    for read in block.reads:
        regions = written.get(read.buffer)
        if not regions:
            continue
        produced = regions[0]
        for other in regions[1:]:
            produced = [set_union([x, y], env) for x, y in zip(produced, other, strict=True)]
        consumed = relax_region(unbind_region(read, realize), relax)
        if not region_covers(produced, consumed, read.buffer, env):
            raise RegionCoverError(
                f"cannot reverse_compute_at block {block.name} at loop {lname}: under the loop the block would "
                f"read {show_sets(read.buffer, consumed)} but its producers write only "
                f"{show_sets(read.buffer, produced)} in an iteration (region cover): it may read only what they "
                "write in the same iteration",
                block=block.name,
                loop=lname,
            )


def _check_producers_finished(
    block: Block,
    producers: list[Block],
    realizes: dict[int, tuple[BlockRealize, list[Node]]],
    outer_loops: list[For],
    lname: str,
) -> None:
    """reverse_compute_at: when the block reduces, no loop at or above the target reduces a producer,
    else a LoopStructureError.

    Under such a loop a producer's output is a partial sum: the moved block would read it before the
    reduction ends, once per iteration of that loop (rfactor's write-back placed under ``rw`` added
    three partial sums into its result).  A spatial block (a write cache's copy, a ReLU) is left
    alone: it rewrites its output in every iteration and the last one writes the finished value."""
    if all(iv.iter_type != IterType.REDUCE for iv in block.iter_vars):
        return
    outer = {id(loop.loop_var): loop.loop_var.name for loop in outer_loops}
    for producer in producers:
        realize, _ = realizes[id(producer)]
        for iv, value in zip(producer.iter_vars, realize.iter_values, strict=True):
            if iv.iter_type != IterType.REDUCE:
                continue
            reducing = [outer[id(v)] for v in free_vars(value) if id(v) in outer]
            if reducing:
                raise LoopStructureError(
                    f"cannot reverse_compute_at block {block.name} at loop {lname}: loop {reducing[0]} reduces "
                    f"its producer {producer.name} (iterator {iv.var.name}), so the block would read partial sums",
                    block=block.name,
                    loop=lname,
                )


def _thread_loops_shared(block: Block, outer_loops: list[For]) -> list[For]:
    """The ``threadIdx`` loops above the target loop when ``block`` writes only ``shared`` buffers:
    all threads of a thread block share them, so the copy computes what every thread needs
    (TVM relaxes them the same way), and a cooperative fetch may bind its own loops to them."""
    if not block.writes or any(w.buffer.scope != "shared" for w in block.writes):
        return []
    return [f for f in outer_loops if (f.thread_binding or "").startswith("threadIdx.")]


def _remember_recent(fn: Callable[..., PrimFunc]) -> Callable[..., PrimFunc]:
    """``fn(func, loc, ...)`` remembered for its last few successful calls by the identity of the
    program and of the located statements, so that a legality check that builds the result
    (``sample_compute_location``'s) and the primitive that then applies it build it once. A
    refusal is not remembered: it runs again and raises."""
    recent = IdentityCache(32)

    @functools.wraps(fn)
    def wrapper(func: PrimFunc, *args: Any) -> PrimFunc:
        nodes = (func, *(a.node for a in args if isinstance(a, Located)))
        flags = tuple(a for a in args if not isinstance(a, Located))
        out = recent.get(nodes, flags)
        if out is MISSING:
            out = recent.put(nodes, flags, fn(func, *args))
        return out

    return wrapper


@_remember_recent
def _compute_at_func(
    func: PrimFunc,
    loc: Located,
    loop_loc: Located,
    preserve_unit_loops: bool,
    index: int,
    is_compute_at: bool,
) -> PrimFunc:
    """The program after (reverse_)compute_at, or a ScheduleError."""
    name = "compute_at" if is_compute_at else "reverse_compute_at"
    block = loc.node
    loop = loop_loc.node
    assert isinstance(block, Block) and isinstance(loop, For)
    lname = loop.loop_var.name
    scope = _scope_of(loc, name)
    _check_compute_at(func, scope, loc, loop_loc, name, is_compute_at)
    subtrees = _subtrees(loop)
    position, producers, required_blocks, under = _insert_position(scope, block, loop, index, name, is_compute_at)
    # the regions the block provides and the regions the others require under the loop
    realizes = {id(r.block): (r, p) for r, p in child_block_paths(scope)}
    outer_loops = [*loops_above(loop_loc.path), loop]
    if is_compute_at:
        touched = {w.buffer for w in block.writes}
        provided = {b: [w for w in block.writes if w.buffer is b] for b in touched}
    else:
        _check_producers_finished(block, under, realizes, outer_loops, lname)
        touched = {w.buffer for p in producers for w in p.writes} & {r.buffer for r in block.reads}
        provided = {b: [r for r in block.reads if r.buffer is b] for b in touched}
    required: dict[Buffer, list[list[IntervalSet]]] = {}
    shared_by_threads = _thread_loops_shared(block, outer_loops) if is_compute_at else []
    for other in required_blocks:
        realize, path = realizes[id(other)]
        inner = [n for n in path[next(i for i, n in enumerate(path) if n is loop) + 1 :] if isinstance(n, For)]
        relax = loop_domains(inner + shared_by_threads)
        regions = other.reads if is_compute_at else other.writes
        for region in regions:
            if region.buffer in touched:
                required.setdefault(region.buffer, []).append(relax_region(unbind_region(region, realize), relax))
    nest = _compute_at_nest(
        block, provided, required, loop_domains(outer_loops), preserve_unit_loops, is_compute_at, lname
    )
    new_loop = dc_replace(loop, body=seq(*subtrees[:position], nest, *subtrees[position:]))
    remove = _removal_root(loc, name)
    return replace(func, {id(remove): None, id(loop): new_loop})


def _check_compute_at(
    func: PrimFunc, scope: Block, loc: Located, loop_loc: Located, name: str, is_compute_at: bool
) -> None:
    """(reverse_)compute_at's checks: the scope is a stage pipeline, the block is complete or a
    reduction block, the loop is in the same scope and no ancestor of the block, and (for
    compute_at) the block is no output block."""
    block, loop = loc.node, loop_loc.node
    lname = loop.loop_var.name
    # 1. the scope is a stage pipeline
    _require_stage_pipeline(scope, block, name)
    # 2. the block is complete or a reduction block
    complete = is_complete_block(scope, block)
    if complete is not None:
        reduction = is_reduction_block(scope, block)
        if reduction is not None:
            raise NotCompleteBlock(
                f"cannot {name} block {block.name}: the block is not a complete block or reduction block "
                f"(not complete: {complete}; not a reduction: {reduction})",
                block=block.name,
                fragment=lambda: str(block),
            )
    # 3. the loop is in the same scope and is not an ancestor of the block
    if enclosing_block(loop_loc.path) is not scope:
        raise LoopStructureError(
            f"cannot {name} block {block.name} at loop {lname}: the block and the loop are not in the same scope",
            block=block.name,
            loop=lname,
        )
    if any(n is loop for n in loc.path):
        raise LoopStructureError(
            f"cannot {name} block {block.name} at loop {lname}: the loop is an ancestor of the block itself",
            block=block.name,
            loop=lname,
        )
    # 4. compute_at: the block is not an output block
    if is_compute_at:
        out = is_output_block(func, scope, block)
        if out is not None:
            raise OutputBlockError(
                f"cannot compute_at block {block.name}: the block is an output block (it writes {out.name}, "
                "an output of its scope)",
                block=block.name,
            )


def _insert_position(
    scope: Block, block: Block, loop: For, index: int, name: str, is_compute_at: bool
) -> tuple[int, list[Block], list[Block], list[Block]]:
    """Where to insert the block under the loop: after the producers, before the consumers
    (``index`` -1 and -2 pick the last and the first such position). The consumers (compute_at)
    or producers (reverse_compute_at) must all be under the loop. Returns the position, the
    producers, the blocks the block must follow and those of them under the loop."""
    lname = loop.loop_var.name
    producers = producers_of(scope, block)
    consumers = consumers_of(scope, block)
    subtrees = _subtrees(loop)
    prod_ids = {id(b) for b in producers}
    cons_ids = {id(b) for b in consumers}
    last_producer, first_consumer = -1, len(subtrees)
    for pos, sub in enumerate(subtrees):
        if _contains(sub, prod_ids):
            last_producer = pos
        if first_consumer == len(subtrees) and _contains(sub, cons_ids):
            first_consumer = pos
    required_blocks = consumers if is_compute_at else producers
    role = "consumer" if is_compute_at else "producer"
    under = [b for b in required_blocks if _contains(loop, {id(b)})]
    if not required_blocks:
        raise LoopStructureError(
            f"cannot {name} block {block.name} at loop {lname}: the block has no {role}s to follow",
            block=block.name,
            loop=lname,
        )
    missing = [b.name for b in required_blocks if b not in under]
    if missing:
        raise LoopStructureError(
            f"cannot {name} block {block.name} at loop {lname}: all the {role}s of the block must be under "
            f"the loop, but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not",
            block=block.name,
            loop=lname,
        )
    if last_producer >= first_consumer:
        raise LoopStructureError(
            f"cannot {name} block {block.name} at loop {lname}: no position under the loop comes after all "
            "the producers of the block and before all its consumers",
            block=block.name,
            loop=lname,
        )
    if index == -1:
        position = first_consumer
    elif index == -2:
        position = last_producer + 1
    elif last_producer + 1 <= index <= first_consumer:
        position = index
    else:
        raise InvalidArgument(
            f"cannot {name} block {block.name} at loop {lname}: index {index} is not a valid insertion "
            f"position; valid are -1, -2 and {last_producer + 1}..{first_consumer}",
            block=block.name,
            loop=lname,
        )
    return position, producers, required_blocks, under


def _compute_at_nest(
    block: Block,
    provided: dict[Buffer, list[BufferRegion]],
    required: dict[Buffer, list[list[IntervalSet]]],
    env: dict[Var, Range],
    preserve_unit_loops: bool,
    is_compute_at: bool,
    lname: str,
) -> Stmt:
    """The block under new loops over the domain of each iterator the ``required`` regions need
    (its whole domain when they need more), bound to them, guarded by a predicate where the
    loops cover more than the domain."""
    needed = _block_var_domains(block, provided, required, env)
    loop_vars: list[tuple[Var, PrimExpr]] = []
    bindings: list[PrimExpr] = []
    predicates: list[PrimExpr] = []
    for iv in block.iter_vars:
        d0 = iv.dom.min
        d1 = simplify(iv.dom.min + iv.dom.extent - 1)
        lo, hi, bounded = d0, d1, False
        want = needed.get(iv.var)
        if want is not None:
            inside = can_prove(want.min_value >= d0, env) and can_prove(want.max_value <= d1, env)
            around = can_prove(want.min_value <= d0, env) and can_prove(want.max_value >= d1, env)
            if inside or not around:
                lo, hi, bounded = want.min_value, want.max_value, not inside
        extent = simplify(hi - lo + 1, env)
        if not isinstance(extent, IntImm):
            top = const_int_bound(extent, env)[1]
            if not isinstance(top, int):
                lo, hi, bounded, extent = d0, d1, False, simplify(d1 - d0 + 1)
            else:
                extent = IntImm(extent.dtype, top)
                bounded = True
        if extent.value == 1 and not preserve_unit_loops:
            value = simplify(lo, env)
            var_dom: dict[Var, Range] = {}
        else:
            ax = Var(f"ax{len(loop_vars)}", iv.var.dtype)
            loop_vars.append((ax, extent))
            var_dom = {ax: Range(IntImm(ax.dtype, 0), extent)}
            value = simplify(lo + ax, {**env, **var_dom})
        bindings.append(value)
        if bounded:
            full = {**env, **var_dom}
            for cond in (value >= d0, value <= d1, value <= hi):
                if not can_prove(cond, full):
                    predicates.append(simplify(cond, full))
    predicate = simplify(logical_and(*predicates)) if predicates else TRUE
    nest: Stmt = BlockRealize(tuple(bindings), predicate, block)
    if not is_compute_at:
        _check_reads_written(nest, loop_vars, required, env, lname)
    for ax, extent in reversed(loop_vars):
        nest = For(ax, IntImm(ax.dtype, 0), extent, ForKind.SERIAL, nest)
    return nest


# ---------------------------------------------------------------------------------------
# compute_inline / reverse_compute_inline


def _inline_body_reason(block: Block) -> str | None:
    store = block.body
    if not isinstance(store, BufferStore):
        return "its body is not a single BufferStore"
    iters = [iv.var for iv in block.iter_vars]
    idx = store.indices
    if not all(isinstance(i, Var) and i in iters for i in idx) or len(set(idx)) != len(idx):
        return "the store indices are not distinct iterators of the block"
    if any(v not in idx for v in free_vars(store.value)):
        return "the stored value uses a variable that is not a store index"
    if _uses_buffer(store.value, store.buffer):
        return f"the stored value reads {store.buffer.name} itself"
    return None


@_remember_recent
def _compute_inline_func(func: PrimFunc, loc: Located) -> PrimFunc:
    block = loc.node
    assert isinstance(block, Block)
    scope = _scope_of(loc, "compute_inline")
    if block.init is not None:
        raise NotCompleteBlock(
            f"cannot inline block {block.name}: the block has an init statement (a reduction cannot be inlined)",
            block=block.name,
        )
    if len(block.writes) != 1:
        raise InlineError(
            f"cannot inline block {block.name}: the block is allowed to write only a single buffer region, "
            f"but it writes {len(block.writes)}",
            block=block.name,
        )
    buffer = block.writes[0].buffer
    _require_stage_pipeline(scope, block, "compute_inline")
    out = is_output_block(func, scope, block)
    if out is not None:
        raise OutputBlockError(
            f"cannot inline block {block.name}: the block is an output block (it writes {out.name}, "
            "an output of its scope)",
            block=block.name,
        )
    reason = is_complete_block(scope, block)
    if reason is not None:
        raise NotCompleteBlock(
            f"cannot inline block {block.name}: it is not a complete block: {reason}", block=block.name
        )
    reason = _inline_body_reason(block)
    if reason is not None:
        raise InlineError(
            f"cannot inline block {block.name}: {reason} (the body must be A[i, j, ...] = f(i, j, ...) "
            "with distinct iterators i, j, ... as indices)",
            block=block.name,
            fragment=lambda: str(block),
        )
    store = block.body
    assert isinstance(store, BufferStore)
    index_vars = list(store.indices)

    class Inliner(_RemoveAndRewrite):
        def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
            op = self.generic_visit(op)
            if op.buffer is not buffer:
                return op
            return substitute(store.value, dict(zip(index_vars, op.indices, strict=True)))

    inliner = Inliner(_removal_root(loc, "compute_inline"), scope, buffer)
    new_scope = inliner.visit(scope)
    if inliner.opaque or _uses_buffer(dc_replace(new_scope, alloc_buffers=()), buffer):
        raise InlineError(
            f"cannot inline block {block.name}: buffer {buffer.name} is accessed opaquely or matched by a block",
            block=block.name,
        )
    if buffer in new_scope.alloc_buffers:  # the scope owns it, and nothing in it uses it now
        new_scope = dc_replace(new_scope, alloc_buffers=tuple(b for b in new_scope.alloc_buffers if b is not buffer))
        return replace(func, {id(scope): new_scope})
    return _drop_unused_alloc(replace(func, {id(scope): new_scope}), buffer)


def _index_inverse(index: PrimExpr, iters: dict[Var, IterType]) -> tuple[Var, PrimExpr] | None:
    """(v, c) when ``index == v + c`` for an iterator v and a constant c."""
    used = [v for v in free_vars(index) if v in iters]
    if len(used) != 1 or len(free_vars(index)) != 1:
        return None
    v = used[0]
    lin = _linear_in(index, v)
    if lin is None or lin[0] != 1 or not isinstance(lin[1], IntImm):
        return None
    return v, lin[1]


def _reverse_compute_inline_func(func: PrimFunc, loc: Located) -> PrimFunc:
    consumer = loc.node
    realize = loc.path[-2]
    assert isinstance(consumer, Block) and isinstance(realize, BlockRealize)
    name = consumer.name
    scope = _scope_of(loc, "reverse_compute_inline")
    _require_stage_pipeline(scope, consumer, "reverse_compute_inline")
    children = child_block_paths(scope)
    written_in_scope = {w.buffer for r, _ in children for w in r.block.writes}
    inputs = []
    for r in consumer.reads:
        if r.buffer in written_in_scope and r.buffer not in inputs:
            inputs.append(r.buffer)
    if len(inputs) != 1:
        raise InlineError(
            f"cannot reverse-inline block {name}: the block is allowed to read only a single buffer that another "
            f"block of its scope writes, but it reads {len(inputs)}",
            block=name,
        )
    buffer = inputs[0]
    reason = is_complete_block(scope, consumer)
    if reason is not None:
        raise NotCompleteBlock(f"cannot reverse-inline block {name}: it is not a complete block: {reason}", block=name)
    writers = [(r, p) for r, p in children if any(w.buffer is buffer for w in r.block.writes)]
    readers = [
        r.block.name for r, _ in children if r.block is not consumer and any(x.buffer is buffer for x in r.block.reads)
    ]
    if len(writers) != 1 or is_complete_block(scope, writers[0][0].block) is not None or readers:
        raise InlineError(
            f"cannot reverse-inline block {name}: the consumer block to be inlined is required to have only a single "
            f"producer block of {buffer.name}, and the producer block should be a complete block who has only a single consumer",
            block=name,
        )
    prod_realize, _ = writers[0]
    producer = prod_realize.block
    if buffer in func.buffers:
        raise OutputBlockError(
            f"cannot reverse-inline block {name}: its producer {producer.name} writes the output buffer {buffer.name}",
            block=name,
        )

    def body_error(why: str) -> InlineError:
        return InlineError(
            f"cannot reverse-inline block {name}: {why} (the body must be B[...] = g(A[f(i, j, ...)], ...) where "
            "f maps the iterators bijectively and the producer's body is a single BufferStore)",
            block=name,
            fragment=lambda: str(consumer),
        )

    if not (isinstance(realize.predicate, IntImm) and realize.predicate.value == 1):
        raise body_error("the block has a predicate")
    store = consumer.body
    if not isinstance(store, BufferStore):
        raise body_error("its body is not a single BufferStore")
    loads: list[BufferLoad] = []
    post_order_visit(store, lambda n: loads.append(n) if isinstance(n, BufferLoad) and n.buffer is buffer else None)
    if not loads:
        raise body_error(f"its body does not read {buffer.name}")
    if any(x.indices != loads[0].indices for x in loads[1:]):
        raise body_error(f"it reads {buffer.name} at different indices")
    pstore = producer.body
    if not isinstance(pstore, BufferStore) or pstore.buffer is not buffer:
        raise body_error(f"the body of its producer {producer.name} is not a single BufferStore to {buffer.name}")
    iters = {iv.var: iv.iter_type for iv in consumer.iter_vars}
    sub: dict[Var, PrimExpr] = {}
    for index, pindex in zip(loads[0].indices, pstore.indices, strict=True):
        inv = _index_inverse(index, iters)
        if inv is None or inv[0] in sub:
            raise body_error(f"the index {index} of {buffer.name} is not a distinct iterator plus a constant")
        v, c = inv
        sub[v] = simplify(pindex - c)
    for iv in consumer.iter_vars:
        if iv.var not in sub:
            if isinstance(iv.dom.extent, IntImm) and iv.dom.extent.value == 1:
                sub[iv.var] = iv.dom.min
            else:
                raise body_error(f"its iterator {iv.var.name} does not index {buffer.name}")
    # the producer must produce every value the consumer needs
    pdom = {iv.var: iv.dom for iv in producer.iter_vars}
    conds = []
    for iv in consumer.iter_vars:
        e = sub[iv.var]
        if can_prove(e > iv.dom.min, pdom) or can_prove(e < iv.dom.min + iv.dom.extent - 1, pdom):
            raise body_error(f"the producer {producer.name} does not cover the domain of iterator {iv.var.name}")
        for cond in (e >= iv.dom.min, e < iv.dom.min + iv.dom.extent):
            if not can_prove(cond, pdom):
                conds.append(cond)
    new_value = _replace_loads(store.value, buffer, pstore.value, sub)
    new_indices = tuple(simplify(substitute(i, sub), pdom) for i in store.indices)
    new_store = BufferStore(store.buffer, new_value, new_indices)
    new_block = dc_replace(producer, body=new_store)
    reads, writes = detect_access_regions(new_block)
    written = {w.buffer for w in writes}
    new_block = dc_replace(new_block, reads=tuple(r for r in reads if r.buffer not in written), writes=tuple(writes))
    predicate = prod_realize.predicate
    if conds:
        binding = {iv.var: v for iv, v in zip(producer.iter_vars, prod_realize.iter_values, strict=True)}
        extra = simplify(substitute(logical_and(*conds), binding))
        predicate = extra if isinstance(predicate, IntImm) and predicate.value == 1 else simplify(predicate & extra)
    new_realize = BlockRealize(prod_realize.iter_values, predicate, new_block)
    remove = _removal_root(loc, "reverse_compute_inline")

    class Rewriter(_RemoveAndRewrite):
        def visit(self, node: Node) -> Any:
            if node is prod_realize:
                return new_realize
            return super().visit(node)

    rewriter = Rewriter(remove, scope, buffer)
    new_scope = rewriter.visit(scope)
    if rewriter.opaque or _uses_buffer(dc_replace(new_scope, alloc_buffers=()), buffer):
        raise InlineError(
            f"cannot reverse-inline block {name}: buffer {buffer.name} is accessed opaquely or matched by a block",
            block=name,
        )
    return _drop_unused_alloc(replace(func, {id(scope): new_scope}), buffer)


def _replace_loads(expr: PrimExpr, buffer: Buffer, value: PrimExpr, sub: dict[Var, PrimExpr]) -> PrimExpr:
    """``expr`` with its (consumer-variable) parts substituted and its loads of ``buffer`` replaced by ``value``."""

    class R(Mutator):
        def visit_Buffer(self, op: Buffer) -> Buffer:
            return op

        def visit_Var(self, op: Var) -> PrimExpr:
            return sub.get(op, op)

        def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
            if op.buffer is buffer:
                return value
            return self.generic_visit(op)

    return R().visit(expr)


# ---------------------------------------------------------------------------------------
# the primitives


class ComputeLocationPrimitives(ScheduleState):
    def _location_mark(self, loop: Any) -> Var | None:
        """ROOT_MARK or INLINE_MARK when ``loop`` is a special LoopRV of sample_compute_location."""
        if isinstance(loop, LoopRV):
            var = self._symtab.get(loop)
            if var is ROOT_MARK or var is INLINE_MARK:
                return var
        return None

    def _check_location_args(self, name: str, preserve_unit_loops: Any, index: Any) -> None:
        if not isinstance(preserve_unit_loops, bool):
            raise InvalidArgument(f"{name}: preserve_unit_loops must be a bool, got {preserve_unit_loops!r}")
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidArgument(f"{name}: index must be an integer, got {index!r}")

    @primitive()
    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False, index: int = -1) -> None:
        """Move a producer block under a loop of its consumers, computing only what they read there.

        The block's loops are regenerated to cover exactly the region its consumers read under
        ``loop`` (their read regions relaxed over the loops inside ``loop``); unit loops are
        dropped unless ``preserve_unit_loops``.  ``index`` is the insertion position among the
        statements of the loop body: -1 the last valid one (before the first consumer), -2 the
        first (after the last producer).  Requirements: the scope is a stage pipeline; the block
        is a complete block or a reduction block, not an output block; the loop is in the same
        scope and not an ancestor of the block; all consumers are under the loop.  Given the
        root or inline LoopRV of ``sample_compute_location`` it does nothing or inlines.

        Before::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0
            for i, j in T.grid(64, 64):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = B[vi, vj] + 1.0

        ``sch.compute_at(sch.get_block("B"), sch.get_loops(sch.get_block("C"))[0])``::

            for i in range(64):
                for ax0 in range(64):
                    with T.block("B"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial(64, ax0)
                        B[vi, vj] = A[vi, vj] * 2.0
                for j in range(64):
                    with T.block("C"):
                        ...
        """
        mark = self._location_mark(loop)
        self._check_location_args("compute_at", preserve_unit_loops, index)
        if mark is ROOT_MARK:
            self._block(block)
            return
        if mark is INLINE_MARK:
            self.func = _compute_inline_func(self.func, self._block(block))
            return
        self.func = _compute_at_func(self.func, self._block(block), self._loop(loop), preserve_unit_loops, index, True)

    @primitive()
    def reverse_compute_at(
        self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False, index: int = -1
    ) -> None:
        """Move a consumer block under a loop of its producers, consuming what they wrote there.

        The block's loops are regenerated to cover the region its producers write under
        ``loop``.  Requirements as for ``compute_at``, with all producers (instead of consumers)
        under the loop; output blocks may move.  The block may read under the loop only what its
        producers write in the same iteration (region cover, so the scope stays a stage
        pipeline): a block reading a window across iterations, such as a convolution under the
        row loop of its padding stage, is refused with a RegionCoverError rather than placed
        where it would read rows that later iterations write.

        Before::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0
            for i, j in T.grid(64, 64):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = T.max(B[vi, vj], 0.0)

        ``sch.reverse_compute_at(sch.get_block("C"), sch.get_loops(sch.get_block("B"))[0])``::

            for i in range(64):
                for j in range(64):
                    with T.block("B"):
                        ...
                for ax0 in range(64):
                    with T.block("C"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial(64, ax0)
                        C[vi, vj] = T.max(B[vi, vj], 0.0)
        """
        mark = self._location_mark(loop)
        self._check_location_args("reverse_compute_at", preserve_unit_loops, index)
        if mark is ROOT_MARK:
            self._block(block)
            return
        if mark is INLINE_MARK:
            self.func = _reverse_compute_inline_func(self.func, self._block(block))
            return
        self.func = _compute_at_func(self.func, self._block(block), self._loop(loop), preserve_unit_loops, index, False)

    @primitive()
    def compute_inline(self, block: BlockRV) -> None:
        """Inline a block into its consumers: every load of its buffer becomes its expression.

        The block must be complete, not an output block, write a single buffer, and have a body
        ``A[i, j, ...] = f(i, j, ...)`` with distinct iterators as indices.  The block and the
        loops holding only it are removed; the consumers' read regions are recomputed; the
        buffer's allocation is dropped when nothing uses it any more.

        Before::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0
            for i, j in T.grid(64, 64):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = B[vi, vj] + 1.0

        ``sch.compute_inline(sch.get_block("B"))``::

            for i, j in T.grid(64, 64):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads(A[vi, vj])
                    C[vi, vj] = A[vi, vj] * 2.0 + 1.0
        """
        self.func = _compute_inline_func(self.func, self._block(block))

    @primitive()
    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Inline a consumer block into its single producer.

        The producer's store ``B[f(v)] = e`` becomes ``C[...] = g(e)`` where the consumer was
        ``C[...] = g(B[h(u)])``: the consumer reads the producer's buffer (the only buffer of the
        scope it reads) at indices that are distinct iterators (plus constants), the consumer and
        the producer are complete, the producer has no other consumer, and the consumer has no
        predicate.  A predicate is added to the producer when it computes more than the consumer
        needs.

        Before::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    B[vi, vj] = A[vi, vj] * 2.0
            for i, j in T.grid(64, 64):
                with T.block("C"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = B[vi, vj] + 1.0

        ``sch.reverse_compute_inline(sch.get_block("C"))``::

            for i, j in T.grid(64, 64):
                with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    T.reads(A[vi, vj])
                    T.writes(C[vi, vj])
                    C[vi, vj] = A[vi, vj] * 2.0 + 1.0
        """
        self.func = _reverse_compute_inline_func(self.func, self._block(block))

    def _compute_location_options(self, loc: Located) -> list[tuple[int, Var, Callable[[], bool]]]:
        """TVM's CollectComputeLocation, lazily: (decision, loop var or mark, legality check) for
        every location the loop structure allows, sorted by decision. A check runs the primitive's
        whole validation, so the sampler runs only the checks it needs."""
        func = self.func

        def can_inline() -> bool:
            try:
                _compute_inline_func(func, loc)
            except ScheduleError:
                return False
            return True

        def can_compute_at(loop: For) -> bool:
            loop_loc = find_loop(func, loop.loop_var)
            try:
                # preserve_unit_loops does not change legality; False is what RandomComputeLocation
                # then applies, so that compute_at finds the program this check built
                _compute_at_func(func, loc, loop_loc, False, -1, True)
            except ScheduleError:
                return False
            return True

        out: list[tuple[int, Var, Callable[[], bool]]] = [(-2, INLINE_MARK, can_inline), (-1, ROOT_MARK, lambda: True)]
        scope = enclosing_block(loc.path)
        if scope is None:
            return out
        consumers = consumers_of(scope, loc.node)
        if not consumers:
            return out
        paths = {id(r.block): p for r, p in child_block_paths(scope)}
        cpaths = [paths[id(c)] for c in consumers]
        boundary = None  # the deepest For (or Block) that is an ancestor of every consumer
        for nodes in zip(*cpaths, strict=False):
            if any(n is not nodes[0] for n in nodes):
                break
            if isinstance(nodes[0], For | Block):
                boundary = nodes[0]
        if len(consumers) == 1:
            boundary = next(n for n in reversed(cpaths[0][:-1]) if isinstance(n, For | Block))
        if not isinstance(boundary, For):
            return out
        loops = [n for n in cpaths[0] if isinstance(n, For)]
        n_candidate = next(i for i, n in enumerate(loops) if n is boundary) + 1
        memo: dict = {}
        types = [loop_iter_type(loops[i], memo) for i in range(n_candidate)]
        last_datapar = max((i for i, t in enumerate(types) if t == IterType.SPATIAL), default=-1)
        visited_reduce = False
        for i in range(n_candidate):
            loop = loops[i]
            if isinstance(loop.extent, IntImm) and loop.extent.value == 1:
                continue
            if types[i] == IterType.SPATIAL:
                if visited_reduce:
                    break
            else:
                visited_reduce = True
                if i > last_datapar:
                    break
            out.append((i, loop.loop_var, functools.partial(can_compute_at, loop)))
        return out

    @primitive(pure=True, sampling=True)
    def sample_compute_location(self, block: BlockRV, decision: int | None = None) -> LoopRV:
        """Sample a loop to compute ``block`` at (TVM semantics).

        The candidates are "inline" (decision -2, when compute_inline is legal), "root" (-1), and
        each loop ``i`` above the block's first consumer, down to the innermost loop holding all
        its consumers, where compute_at is legal (decision ``i``; unit loops, spatial loops after
        a reduction loop and trailing reduction loops are skipped).  Returns the LoopRV of the
        chosen loop, or a special LoopRV for root/inline that ``compute_at`` understands.  A given
        decision that is not a candidate falls back to the nearest candidate below it.

        ``loc = sch.sample_compute_location(sch.get_block("B")); sch.compute_at(sch.get_block("B"), loc)``
        """
        loc = self._block(block)
        options = self._compute_location_options(loc)
        if decision is None:
            # legal options in random order: the first legal one is uniform over the legal ones
            order = list(range(len(options)))
            self._rng.shuffle(order)
        else:
            if isinstance(decision, bool) or not isinstance(decision, int):
                raise DecisionError(
                    f"sample_compute_location of block {loc.node.name}: the decision must be an integer, got {decision!r}"
                )
            order = [k for k in reversed(range(len(options))) if options[k][0] <= decision]
            order.append(1)  # the root, always legal
        pick = next(k for k in order if options[k][2]())
        self._decide(options[pick][0])
        return self._new_loop_rv(options[pick][1])
