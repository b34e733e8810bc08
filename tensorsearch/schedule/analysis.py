"""Block analyses shared by schedule primitives (TVM's ``tir/schedule/analysis``).

Every checker returns ``None`` when the property holds, else a *reason*: a short clause that
completes a sentence such as ``f"block {name} is not a complete block: {reason}"``::

    from tensorsearch.schedule.analysis import is_complete_block, check_stage_pipeline
    reason = is_complete_block(func, "C")       # "its iterator vk is a reduce iterator, not spatial"
    reason = check_stage_pipeline(root_block)   # None when the scope is a stage pipeline

Blocks may be passed as Block nodes or by name; ``scope`` arguments accept either the PrimFunc
(the block's scope is then found) or the scope Block itself.

Definitions (as in TVM):

* **producers / consumers** of a block: the blocks of the same scope with a read-after-write
  dependency on it, in program order -- producers are earlier blocks writing a buffer it reads,
  consumers are later blocks reading a buffer it writes;
* **dominant** block: the only block of its scope that writes each of its output buffers;
* **complete** block: all iterators spatial, dominant, and it reads none of the buffers it writes;
* **reduction** block: has an ``init``, its bindings are quasi-affine maps of the loops around it,
  its iterators are spatial or reduce, it is dominant, and no reduce iterator indexes an output;
* **stage pipeline** scope: no write-after-read dependency between its child blocks (every block
  reading a buffer comes after the blocks writing it), and the *region cover* property holds: for
  each consumer, the producers' write regions under their lowest common loop cover what the
  consumer reads there (reads are clipped to the buffer's shape first).
* **output** block: in the function's root scope, a block writing a parameter buffer; in a nested
  scope, a block writing a buffer that the scope block does not allocate.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..arith import NEG_INF, POS_INF, IntervalSet, can_prove, simplify
from ..arith import union as set_union
from ..arith.int_set import eval_int_sets
from ..arith.iter_map import affine_binding_error
from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    For,
    IntImm,
    IterType,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Var,
    children,
    free_vars,
    post_order_visit,
    substitute,
)
from ..ir.identity_cache import MISSING, IdentityCache
from .tree import Located, enclosing_block, loops_above, walk_stmts

__all__ = [
    "affine_binding_reason",
    "block_scope",
    "check_region_cover",
    "check_stage_pipeline",
    "check_write_after_read",
    "child_block_paths",
    "consumers_of",
    "is_complete_block",
    "is_dominant_block",
    "is_output_block",
    "is_reduction_block",
    "locate_block",
    "loop_domains",
    "loop_iter_type",
    "producers_of",
    "region_covers",
    "relax_region",
    "show_sets",
    "unbind_region",
    "writers_of",
]

Scope = PrimFunc | Block
BlockRef = Block | str


# ---------------------------------------------------------------------------------------
# locating blocks and scopes


def locate_block(root: Scope | Stmt, block: BlockRef) -> Located:
    """The located Block (path from ``root``'s body or ``root`` itself down to the Block).

    Raises KeyError when no such block is below ``root``.
    """
    start = root.body if isinstance(root, PrimFunc) else root
    for loc in walk_stmts(start):
        node = loc.node
        if isinstance(node, Block) and (node is block if isinstance(block, Block) else node.name == block):
            return loc
    name = block.name if isinstance(block, Block) else block
    raise KeyError(f"no block named {name}")


def block_scope(scope: Scope, block: BlockRef) -> tuple[Block, Located]:
    """(the scope Block of ``block``, the located block).  A root block has no scope: ValueError."""
    loc = locate_block(scope, block)
    parent = enclosing_block(loc.path)
    if parent is None:
        raise ValueError(f"block {loc.node.name} is the root block; it has no scope")
    return parent, loc


def _scope_block(scope: Scope, block: BlockRef) -> tuple[Block, Block]:
    parent, loc = block_scope(scope, block)
    return parent, loc.node


_SCOPES = IdentityCache(8)


def child_block_paths(scope: Block) -> list[tuple[BlockRealize, tuple[Stmt, ...]]]:
    """The BlockRealizes directly inside ``scope`` (its init, then its body) in program order, with paths from ``scope``.

    Remembered for the last few scopes (by identity; the entry keeps the scope alive): one
    primitive's checks ask for the same scope's blocks several times. Do not change the list."""
    found = _SCOPES.get((scope,))
    if found is MISSING:
        found = _SCOPES.put((scope,), None, _child_block_paths(scope))
    return found


def _child_block_paths(scope: Block) -> list[tuple[BlockRealize, tuple[Stmt, ...]]]:
    found: list[tuple[BlockRealize, tuple[Stmt, ...]]] = []
    stack: list[tuple[Stmt, tuple[Stmt, ...]]] = [(scope.body, (scope, scope.body))]
    if scope.init is not None:  # blockize puts the init block of a reduction in the outer init
        stack.append((scope.init, (scope, scope.init)))
    while stack:
        node, path = stack.pop()
        if isinstance(node, BlockRealize):
            found.append((node, path))
            continue
        kids = [c for c in children(node) if isinstance(c, Stmt)]
        for child in reversed(kids):
            stack.append((child, (*path, child)))
    return found


def loop_domains(loops: Iterable[For]) -> dict[Var, Range]:
    """``{loop_var: Range(min, extent)}`` of the given loops."""
    return {loop.loop_var: Range(loop.min, loop.extent) for loop in loops}


# ---------------------------------------------------------------------------------------
# producers, consumers, writers


def writers_of(scope: Block, buffer: Buffer) -> list[Block]:
    """The child blocks of ``scope`` that declare a write of ``buffer``, in program order."""
    return [r.block for r, _ in child_block_paths(scope) if any(w.buffer is buffer for w in r.block.writes)]


def _raw_neighbours(scope: Scope, block: BlockRef, producers: bool) -> list[Block]:
    parent, me = _scope_block(scope, block)
    blocks = [r.block for r, _ in child_block_paths(parent)]
    pos = next(i for i, b in enumerate(blocks) if b is me)
    if producers:
        reads = {r.buffer for r in me.reads}
        return [b for b in blocks[:pos] if any(w.buffer in reads for w in b.writes)]
    writes = {w.buffer for w in me.writes}
    return [b for b in blocks[pos + 1 :] if any(r.buffer in writes for r in b.reads)]


def producers_of(scope: Scope, block: BlockRef) -> list[Block]:
    """Earlier blocks of the same scope that write a buffer ``block`` reads (read-after-write)."""
    return _raw_neighbours(scope, block, producers=True)


def consumers_of(scope: Scope, block: BlockRef) -> list[Block]:
    """Later blocks of the same scope that read a buffer ``block`` writes (read-after-write)."""
    return _raw_neighbours(scope, block, producers=False)


# ---------------------------------------------------------------------------------------
# block kinds


def is_dominant_block(scope: Scope, block: BlockRef) -> str | None:
    """None when ``block`` is the only writer of each of its outputs in its scope, else the reason."""
    parent, me = _scope_block(scope, block)
    for w in me.writes:
        others = [b.name for b in writers_of(parent, w.buffer) if b is not me]
        if others:
            return (
                f"block {others[0]} also writes buffer {w.buffer.name} "
                "(the block must be the only writer of its outputs in its scope)"
            )
    return None


def is_complete_block(scope: Scope, block: BlockRef) -> str | None:
    """None when ``block`` is a complete block (TVM's IsCompleteBlock), else the first violated rule.

    1) all iterators are spatial (data parallel); 2) dominant: the only writer of its outputs in
    the scope; 3) it reads none of the buffers it writes.
    """
    _, me = _scope_block(scope, block)
    for iv in me.iter_vars:
        if iv.iter_type != IterType.SPATIAL:
            return f"its iterator {iv.var.name} is a {iv.iter_type.value} iterator, not spatial"
    reason = is_dominant_block(scope, me)
    if reason is not None:
        return reason
    written = {w.buffer for w in me.writes}
    for r in me.reads:
        if r.buffer in written:
            return f"it reads buffer {r.buffer.name}, which it also writes"
    return None


def is_reduction_block(scope: Scope, block: BlockRef) -> str | None:
    """None when ``block`` is a reduction block (TVM's IsReductionBlock), else the first violated rule.

    1) it has an ``init`` statement; 2) its bindings are quasi-affine maps of the loops between
    its scope and itself; 3) its iterators are spatial or reduce; 4) dominant; 5) no reduce
    iterator indexes an output buffer.
    """
    parent, loc = block_scope(scope, block)
    me = loc.node
    if me.init is None:
        return "it has no init statement"
    realize = loc.path[-2]
    assert isinstance(realize, BlockRealize)
    reason = affine_binding_reason(realize, loop_domains(loops_above(loc.path[:-1])))
    if reason is not None:
        return reason
    for iv in me.iter_vars:
        if iv.iter_type not in (IterType.SPATIAL, IterType.REDUCE):
            return f"its iterator {iv.var.name} is {iv.iter_type.value}, neither spatial nor reduce"
    reason = is_dominant_block(parent, me)
    if reason is not None:
        return reason
    reduce_vars = {iv.var for iv in me.iter_vars if iv.iter_type == IterType.REDUCE}
    written = {w.buffer for w in me.writes}
    indices: list[PrimExpr] = []
    for w in me.writes:
        for r in w.region:
            indices += [r.min, r.extent]

    def collect(node: object) -> None:
        if isinstance(node, BufferStore) and node.buffer in written:
            indices.extend(node.indices)

    post_order_visit(me.body, collect)
    for e in indices:
        bad = [v for v in free_vars(e) if v in reduce_vars]
        if bad:
            return f"its reduce iterator {bad[0].name} indexes an output buffer"
    return None


def affine_binding_reason(realize: BlockRealize, loops: dict[Var, Range]) -> str | None:
    """None when the block's bindings are an affine map of ``loops`` (``arith.iter_map.affine_binding_error``)."""
    return affine_binding_error(realize, loops)


def is_output_block(func: PrimFunc, scope: Block, block: Block) -> Buffer | None:
    """The output buffer ``block`` writes, or None (TVM's IsOutputBlock).

    In the function's root scope an output is a parameter buffer; in a nested scope, any buffer
    the scope block does not allocate.
    """
    root = func.body.block if isinstance(func.body, BlockRealize) else None
    if scope is root:
        params = set(func.buffers)
        for w in block.writes:
            if w.buffer in params:
                return w.buffer
        return None
    for w in block.writes:
        if w.buffer not in scope.alloc_buffers:
            return w.buffer
    return None


def loop_iter_type(loop: For, memo: dict[int, tuple[PrimExpr, frozenset]] | None = None) -> IterType:
    """TVM's GetLoopIterType: how the blocks directly under ``loop`` use its variable.

    Spatial when it only appears in bindings of spatial iterators (or nowhere), reduce when only
    in bindings of reduce iterators, opaque otherwise. ``memo`` (by the binding's identity)
    keeps the variables of each binding across calls for the loops of one nest.
    """
    memo = {} if memo is None else memo
    n_spatial = n_reduce = n_other = 0
    stack: list[Stmt] = [loop.body]
    while stack:
        node = stack.pop()
        if isinstance(node, BlockRealize):
            for iv, value in zip(node.block.iter_vars, node.iter_values, strict=True):
                hit = memo.get(id(value))
                if hit is None:
                    hit = memo[id(value)] = (value, frozenset(free_vars(value)))
                if loop.loop_var in hit[1]:
                    if iv.iter_type == IterType.SPATIAL:
                        n_spatial += 1
                    elif iv.iter_type == IterType.REDUCE:
                        n_reduce += 1
                    else:
                        n_other += 1
            continue
        stack.extend(c for c in children(node) if isinstance(c, Stmt))
    if n_other or (n_spatial and n_reduce):
        return IterType.OPAQUE
    return IterType.REDUCE if n_reduce else IterType.SPATIAL


# ---------------------------------------------------------------------------------------
# regions


def unbind_region(region: BufferRegion, realize: BlockRealize) -> BufferRegion:
    """The region with the block's iterators replaced by their bindings (loop variables)."""
    binding = {iv.var: v for iv, v in zip(realize.block.iter_vars, realize.iter_values, strict=True)}
    return BufferRegion(region.buffer, tuple(substitute(r, binding) for r in region.region))


def relax_region(region: BufferRegion, relax: dict[Var, Range]) -> list[IntervalSet]:
    """Per dimension, the inclusive interval the region spans when the vars of ``relax`` vary."""
    exprs = []
    for r in region.region:
        exprs += [r.min, r.min + r.extent - 1]
    bounds = eval_int_sets(exprs, relax)
    return [IntervalSet(lo.min_value, hi.max_value) for lo, hi in zip(bounds[::2], bounds[1::2], strict=True)]


def _clip(s: IntervalSet, extent: PrimExpr, dom: dict) -> IntervalSet:
    """``s`` within ``[0, extent - 1]`` where that is provable."""
    zero = IntImm(extent.dtype, 0)
    top = simplify(extent - 1)
    lo = zero if s.min_value is NEG_INF or can_prove(s.min_value <= zero, dom) else s.min_value
    hi = top if s.max_value is POS_INF or can_prove(s.max_value >= top, dom) else s.max_value
    return IntervalSet(lo, hi)


def region_covers(
    produced: list[IntervalSet], consumed: list[IntervalSet], buffer: Buffer, dom: dict | None = None
) -> bool:
    """Whether ``produced`` provably covers ``consumed`` (clipped to the buffer's shape) in every dim."""
    dom = dom or {}
    for p, c, extent in zip(produced, consumed, buffer.shape, strict=True):
        if not p.is_bounded:
            return False
        if p.min_value == c.min_value and p.max_value == c.max_value:
            continue  # the same interval (clipping only shrinks what is read)
        c = _clip(c, extent, dom)
        if not (can_prove(p.min_value <= c.min_value, dom) and can_prove(p.max_value >= c.max_value, dom)):
            return False
    return True


def _hull_sets(a: list[IntervalSet], b: list[IntervalSet], dom: dict) -> list[IntervalSet]:
    return [set_union([x, y], dom) for x, y in zip(a, b, strict=True)]


def check_region_cover(scope: Block) -> str | None:
    """None when every consumer in ``scope`` reads only what its producers write, else the reason.

    For each consumer and each producer of a buffer it reads, the two are grouped by their lowest
    common loop; the producers' write regions, relaxed over the loops below that loop, must cover
    the consumer's read region relaxed the same way (TVM's region cover property).
    """
    items = child_block_paths(scope)
    for j, (consumer, cpath) in enumerate(items):
        for read in consumer.block.reads:
            buf = read.buffer
            groups: dict[int, tuple[For | None, list[tuple[BlockRealize, tuple[Stmt, ...]]]]] = {}
            for producer, ppath in items[:j]:
                if not any(w.buffer is buf for w in producer.block.writes):
                    continue
                lca = _lowest_common_loop(cpath, ppath)
                groups.setdefault(id(lca), (lca, []))[1].append((producer, ppath))
            for lca, producers in groups.values():
                reason = _cover_reason(consumer, cpath, read, lca, producers)
                if reason is not None:
                    return reason
    return None


def _lowest_common_loop(a: tuple[Stmt, ...], b: tuple[Stmt, ...]) -> For | None:
    lca = None
    for x, y in zip(a, b, strict=False):
        if x is not y:
            break
        if isinstance(x, For):
            lca = x
    return lca


def _loops_below(path: tuple[Stmt, ...], lca: For | None) -> list[For]:
    loops = [n for n in path if isinstance(n, For)]
    if lca is None:
        return loops
    return loops[next(i for i, n in enumerate(loops) if n is lca) + 1 :]


def _cover_reason(
    consumer: BlockRealize,
    cpath: tuple[Stmt, ...],
    read: BufferRegion,
    lca: For | None,
    producers: list[tuple[BlockRealize, tuple[Stmt, ...]]],
) -> str | None:
    buf = read.buffer
    loops = [n for n in cpath if isinstance(n, For)]
    outer = [] if lca is None else loops[: next(i for i, n in enumerate(loops) if n is lca) + 1]
    dom = loop_domains(outer)
    produced: list[IntervalSet] | None = None
    for producer, ppath in producers:
        below = _loops_below(ppath, lca)
        for w in producer.block.writes:
            if w.buffer is buf:
                sets = _relaxed_access(w, producer, below)
                produced = sets if produced is None else _hull_sets(produced, sets, dom)
    assert produced is not None
    if _whole_buffer(produced, buf):
        return None  # whatever the consumer reads inside the buffer is written
    consumed = _relaxed_access(read, consumer, _loops_below(cpath, lca))
    if region_covers(produced, consumed, buf, dom):
        return None
    names = ", ".join(p.block.name for p, _ in producers)
    where = f"under loop {lca.loop_var.name}" if lca is not None else "in the scope"
    return (
        f"block {consumer.block.name} reads {show_sets(buf, consumed)} but its producer(s) {names} "
        f"write only {show_sets(buf, produced)} {where} (region cover)"
    )


_RELAXED = IdentityCache(1024)


def _relaxed_access(region: BufferRegion, realize: BlockRealize, loops: list[For]) -> list[IntervalSet]:
    """``relax_region`` of a block's access through its bindings over ``loops``, remembered by the
    identity of the region and the realize and by the loops' variables and bounds: the
    stage-pipeline check asks again at each primitive of a candidate for the accesses the
    primitive did not move. Do not change the list."""
    bounds = tuple((lp.loop_var, lp.min, lp.extent) for lp in loops)
    sets = _RELAXED.get((region, realize), bounds)
    if sets is MISSING:
        sets = _RELAXED.put(
            (region, realize), bounds, relax_region(unbind_region(region, realize), loop_domains(loops))
        )
    return sets


def _whole_buffer(sets: list[IntervalSet], buf: Buffer) -> bool:
    """Whether ``sets`` are the constant intervals ``[0, extent - 1]`` of every dimension of ``buf``."""
    for s, extent in zip(sets, buf.shape, strict=True):
        lo, hi = s.min_value, s.max_value
        if not (type(lo) is IntImm and lo.value == 0 and type(hi) is IntImm and type(extent) is IntImm):
            return False
        if hi.value != extent.value - 1:
            return False
    return True


def show_sets(buf: Buffer, sets: list[IntervalSet]) -> str:
    """``B[i, 0:16]``: the region of ``buf`` the per-dimension inclusive interval sets span."""
    parts = []
    for s in sets:
        if s.is_single_point:
            parts.append(str(s.min_value))
        else:
            lo = "-inf" if s.min_value is NEG_INF else str(s.min_value)
            hi = "+inf" if s.max_value is POS_INF else str(simplify(s.max_value + 1))
            parts.append(f"{lo}:{hi}")
    return f"{buf.name}[{', '.join(parts)}]"


def check_write_after_read(scope: Block) -> str | None:
    """None when no child block of ``scope`` writes a buffer that an earlier child block reads."""
    if not isinstance(scope, Block):
        raise TypeError(f"check_write_after_read takes the scope Block, got {type(scope).__name__}")
    readers: dict[Buffer, Block] = {}
    for realize, _ in child_block_paths(scope):
        block = realize.block
        for w in block.writes:
            reader = readers.get(w.buffer)
            if reader is not None and reader is not block:
                return (
                    f"block {block.name} writes buffer {w.buffer.name} after block {reader.name} reads it "
                    "(a write-after-read dependency: producers must come before consumers)"
                )
        for r in block.reads:
            readers.setdefault(r.buffer, block)
    return None


def check_stage_pipeline(scope: Block) -> str | None:
    """None when the child blocks of ``scope`` form a stage pipeline, else the reason.

    A stage pipeline has no write-after-read dependency (:func:`check_write_after_read`) and
    satisfies the region cover property (:func:`check_region_cover`).  Several writers of one
    buffer (write-after-write) are allowed, as in TVM: ``decompose_reduction`` produces an init
    block and an update block writing the same buffer.
    """
    if not isinstance(scope, Block):
        raise TypeError(f"check_stage_pipeline takes the scope Block, got {type(scope).__name__}")
    return check_write_after_read(scope) or check_region_cover(scope)
