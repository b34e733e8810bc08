"""Loop primitives: split, fuse, reorder, add_unit_loop, loop kinds and annotations (TVM semantics).

``split``/``fuse`` replace loops by new ones (old LoopRVs of those loops then raise LoopNotFound);
``reorder``, ``parallel``, ``vectorize``, ``unroll``, ``bind`` and ``annotate`` keep every loop
variable, so every LoopRV stays valid.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

from ..arith import can_prove, can_prove_equal, simplify, simplify_all
from ..arith.iter_map import affine_binding_error
from ..ir import (
    THREAD_TAGS,
    Block,
    BlockRealize,
    For,
    ForKind,
    IntImm,
    IterType,
    Mutator,
    PrimExpr,
    Range,
    Stmt,
    Var,
    const,
    free_vars,
)
from .errors import InvalidArgument, LoopKindError, LoopStructureError, NotAffineBinding
from .rv import BlockRV, ExprRV, LoopRV
from .state import ScheduleState, primitive
from .tree import Located, enclosing_block, loops_above, replace, substitute_loop_vars, walk_stmts

# --------------------------------------------------------------------------------------
# helpers


def _dom(loops: list[For]) -> dict[Var, Range]:
    return {loop.loop_var: Range(loop.min, loop.extent) for loop in loops}


def _is_const(expr: PrimExpr, value: int | None = None) -> bool:
    return isinstance(expr, IntImm) and (value is None or expr.value == value)


def _uses(expr: Any, var: Var) -> bool:
    return var in free_vars(expr)


def _conjoin(old: PrimExpr, new: PrimExpr) -> PrimExpr:
    return new if _is_const(old, 1) and old.dtype.is_bool else old & new


def _spatial_only(block: Block) -> bool:
    """Every iterator of ``block`` is spatial and it reads no buffer it writes: the value it
    writes at a point depends on the point alone, so writing a point twice writes it the same."""
    written = {r.buffer.name for r in block.writes}
    return all(iv.iter_type == IterType.SPATIAL for iv in block.iter_vars) and not any(
        r.buffer.name in written for r in block.reads
    )


def _realizes(stmt: Stmt, path: tuple[Stmt, ...], nested: bool) -> Iterator[Located]:
    """The BlockRealizes under ``stmt`` (first-level only unless ``nested``), skipping init statements.

    ``path`` is the path of ``stmt``'s parent, so the yielded paths start at the function body.
    """
    for loc in walk_stmts(stmt, path):
        if not isinstance(loc.node, BlockRealize):
            continue
        parent_block = enclosing_block(loc.path)
        if parent_block is not None and parent_block.init is not None and _inside_init(loc.path, parent_block):
            continue
        if not nested and any(isinstance(n, Block) for n in loc.path[len(path) : -1]):
            continue
        yield loc


def _inside_init(path: tuple[Stmt, ...], block: Block) -> bool:
    pos = max(i for i, n in enumerate(path[:-1]) if n is block)
    return pos + 1 < len(path) and path[pos + 1] is block.init


_COOPERATIVE_ONLY = (
    " (only a copy into shared memory that does not depend on the outer loop, with the same extent, may be "
    "bound again inside it: a cooperative fetch)"
)


def _cooperative_copy(inner: For, outer: For) -> bool:
    """Whether binding ``inner`` to the thread axis ``outer`` is bound to is a cooperative fetch:
    the same extent, and every block under ``inner`` writes only ``shared`` buffers at places that
    do not depend on ``outer``. Run serially, each iteration of ``outer`` makes the whole copy
    (the same values); on the GPU each thread makes its part of it once (TVM allows the same)."""
    if not (inner.extent == outer.extent or can_prove_equal(inner.extent, outer.extent)):
        return False
    realizes = [n for n in (loc.node for loc in walk_stmts(inner.body)) if isinstance(n, BlockRealize)]
    if not realizes:
        return False
    for r in realizes:
        if not r.block.writes or any(w.buffer.scope != "shared" for w in r.block.writes):
            return False
        if any(outer.loop_var in free_vars(v) for v in r.iter_values):
            return False
    return True


class _RewriteRealizes(Mutator):
    """Apply ``fn(realize, dom)`` to first-level BlockRealizes, tracking the loops passed on the way."""

    def __init__(self, dom: dict[Var, Range], fn: Callable[[BlockRealize, dict[Var, Range]], BlockRealize]) -> None:
        self.dom = dict(dom)
        self.fn = fn

    def visit(self, node: Any) -> Any:
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    def visit_For(self, op: For) -> Stmt:
        self.dom[op.loop_var] = Range(op.min, op.extent)
        try:
            return self.generic_visit(op)
        finally:
            del self.dom[op.loop_var]

    def visit_BlockRealize(self, op: BlockRealize) -> Stmt:
        return self.fn(op, self.dom)


def _simplify_realize(realize: BlockRealize, dom: dict[Var, Range], touched: set[Var]) -> BlockRealize:
    """Simplify the bindings and predicate of a realize whose expressions use a variable in ``touched``."""
    exprs = (*realize.iter_values, realize.predicate)
    which = [k for k, e in enumerate(exprs) if not touched.isdisjoint(free_vars(e))]
    new = list(exprs)
    for k, e in zip(which, simplify_all([exprs[k] for k in which], dom), strict=True):
        new[k] = e  # one context: the bindings share the substituted loop expressions
    values, pred = tuple(new[:-1]), new[-1]
    if all(a is b for a, b in zip(values, realize.iter_values, strict=True)) and pred is realize.predicate:
        return realize
    return BlockRealize(values, pred, realize.block)


def _simplify_loop_bounds(stmt: Stmt, dom: dict[Var, Range], touched: set[Var]) -> Stmt:
    """Simplify the min/extent of loops (outside blocks) that use a variable in ``touched``."""

    class _M(Mutator):
        def visit(self, node: Any) -> Any:
            if isinstance(node, PrimExpr | BlockRealize):
                return node
            return super().visit(node)

        def visit_For(self, op: For) -> Stmt:
            new = self.generic_visit(op)
            mn, ext = new.min, new.extent
            if set(free_vars(mn)) & touched:
                mn = simplify(mn, dom)
            if set(free_vars(ext)) & touched:
                ext = simplify(ext, dom)
            if mn is new.min and ext is new.extent:
                return new
            return dataclasses.replace(new, min=mn, extent=ext)

    return _M().visit(stmt)


def _variadic(list_arg: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Let a primitive whose first argument is a list also take the list's items positionally."""

    def wrap(prim: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(prim)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if args:
                if list_arg in kwargs:
                    raise InvalidArgument(f"{prim.__name__}: {list_arg} given both positionally and by keyword")
                if len(args) == 1 and isinstance(args[0], list | tuple):
                    kwargs[list_arg] = list(args[0])
                else:
                    kwargs[list_arg] = list(args)
            return prim(self, **kwargs)

        method.instruction_kind = prim.instruction_kind  # type: ignore[attr-defined]
        return method

    return wrap


_PARTICIPLE = {"split": "split", "fuse": "fused"}
_KIND_VERB = {ForKind.PARALLEL: "parallelize", ForKind.VECTORIZED: "vectorize", ForKind.THREAD_BINDING: "bind"}


def _ann_value(value: Any, resolve: Callable[[ExprRV], int]) -> Any:
    if isinstance(value, ExprRV):
        return resolve(value)
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_ann_value(v, resolve) for v in value]
    raise InvalidArgument(
        f"ann_val must be an int, float, str, bool, ExprRV or a list of them, got {type(value).__name__} {value!r}"
    )


# --------------------------------------------------------------------------------------
# primitives


class LoopPrimitives(ScheduleState):
    # --- split / fuse / reorder -----------------------------------------------------------
    @primitive()
    def split(self, loop: LoopRV, factors: list[int | ExprRV | None], preserve_unit_iters: bool = True) -> list[LoopRV]:
        """Split a loop into nested loops of the given extents, outermost first.

        At most one factor may be None; it is inferred as ``ceil(extent / product of the others)``.
        When the product exceeds the extent, every block under the loop gets the predicate
        ``fused < extent``. The loop must start at 0 and have no annotation or thread binding.
        ``preserve_unit_iters=False`` drops the variables of unit loops from the bindings. ::

            for i in range(128):                      for i_0, i_1 in T.grid(4, 32):
                with T.block("B"):                        with T.block("B"):
                    vi = T.axis.spatial(128, i)   =>          vi = T.axis.spatial(128, i_0 * 32 + i_1)
                    B[vi] = A[vi] * 2.0                       B[vi] = A[vi] * 2.0

            i_0, i_1 = sch.split(i, factors=[None, 32])
        """
        loc = self._loop(loop)
        node: For = loc.node
        name = node.loop_var.name
        if not isinstance(factors, list | tuple) or not factors:
            raise InvalidArgument(
                f"cannot split loop {name}: factors must be a non-empty list of integers, ExprRVs or None, got {factors!r}",
                loop=name,
            )
        if not isinstance(preserve_unit_iters, bool):
            raise InvalidArgument(f"split: preserve_unit_iters must be a bool, got {preserve_unit_iters!r}")
        values: list[int | None] = []
        for pos, f in enumerate(factors):
            if f is None:
                values.append(None)
                continue
            if not isinstance(f, ExprRV) and (isinstance(f, bool) or not isinstance(f, int)):
                raise InvalidArgument(
                    f"cannot split loop {name}: factor {pos} is {f!r}; a factor must be an integer, an ExprRV or None",
                    loop=name,
                )
            v = self._value(f)
            if v <= 0:
                raise InvalidArgument(
                    f"cannot split loop {name}: factor {pos} is {v}; factors must be positive", loop=name
                )
            values.append(v)
        if values.count(None) > 1:
            raise InvalidArgument(
                f"cannot split loop {name}: {values.count(None)} factors are None; at most one factor can be inferred",
                loop=name,
            )
        self._check_plain_loop(node, "split")
        self._check_starts_at_zero(node, "split")
        dtype = node.loop_var.dtype
        outer = _dom(loops_above(loc.path))
        product = 1
        for v in values:
            product *= v if v is not None else 1
        # a perfect tiling: constant factors that multiply to the loop's constant extent
        perfect = None not in values and isinstance(node.extent, IntImm) and node.extent.value == product
        if None in values:
            inferred = simplify((node.extent + (product - 1)) // const(product, dtype), outer)
            exprs = [const(v, dtype) if v is not None else inferred for v in values]
        else:
            if not perfect and not can_prove(const(product, dtype) >= node.extent, outer):
                raise InvalidArgument(
                    f"cannot split loop {name}: the product of the factors, {product}, is less than the loop's extent {node.extent}",
                    loop=name,
                    fragment=self._fragment(node),
                )
            exprs = [const(v, dtype) for v in values]
        new_vars = [Var(f"{name}_{i}", dtype) for i in range(len(exprs))]
        value: PrimExpr | None = None
        for var, f in zip(new_vars, exprs, strict=True):
            term = var if preserve_unit_iters or not _is_const(f, 1) else const(0, dtype)
            value = term if value is None else value * f + term
        assert value is not None
        dom = {**outer, **{v: Range(const(0, dtype), f) for v, f in zip(new_vars, exprs, strict=True)}}
        body = substitute_loop_vars(node.body, {node.loop_var: value})
        guard = value < node.extent
        need_guard = not perfect and not can_prove(guard, dom)  # a perfect tiling needs no guard
        touched = set(new_vars)

        def fix(realize: BlockRealize, d: dict[Var, Range]) -> BlockRealize:
            if need_guard:
                realize = BlockRealize(realize.iter_values, _conjoin(realize.predicate, guard), realize.block)
            return _simplify_realize(realize, d, touched)

        body = _RewriteRealizes(dom, fix).visit(body)
        body = _simplify_loop_bounds(body, dom, touched)
        for var, f in reversed(list(zip(new_vars, exprs, strict=True))):
            body = For(var, const(0, dtype), f, ForKind.SERIAL, body)
        self.func = replace(self.func, {id(node): body})
        return [self._new_loop_rv(v) for v in new_vars]

    @_variadic("loops")
    @primitive()
    def fuse(self, loops: list[LoopRV], preserve_unit_iters: bool = True) -> LoopRV:
        """Fuse perfectly nested loops (outermost first) into one loop named ``<a>_<b>_fused``.

        Each loop must be the only statement in the body of the previous one, start at 0 and
        have no annotation or thread binding; ``sch.fuse(i, j)`` and ``sch.fuse([i, j])`` both work. ::

            for i, j in T.grid(16, 8):                for i_j_fused in range(128):
                with T.block("B"):                        with T.block("B"):
                    vi, vj = T.axis.remap("SS", [i, j]) =>    vi = T.axis.spatial(16, i_j_fused // 8)
                    ...                                       vj = T.axis.spatial(8, i_j_fused % 8)

            f = sch.fuse(i, j)
        """
        if not isinstance(loops, list | tuple) or not loops:
            raise InvalidArgument(f"fuse takes one or more LoopRVs, got {loops!r}")
        if not isinstance(preserve_unit_iters, bool):
            raise InvalidArgument(f"fuse: preserve_unit_iters must be a bool, got {preserve_unit_iters!r}")
        locs = [self._loop(rv) for rv in loops]
        nodes: list[For] = [loc.node for loc in locs]
        names = [n.loop_var.name for n in nodes]
        for pos, (loc, node) in enumerate(zip(locs, nodes, strict=True)):
            self._check_plain_loop(node, "fuse")
            if pos > 0:
                outer = nodes[pos - 1]
                parent = next((n for n in reversed(loc.path[:-1]) if isinstance(n, For | Block)), None)
                if parent is not outer:
                    raise LoopStructureError(
                        f"cannot fuse loops {outer.loop_var.name} and {node.loop_var.name}: loop {node.loop_var.name} "
                        f"is not directly inside loop {outer.loop_var.name} (the loops must be perfectly nested, outermost first)",
                        loop=node.loop_var.name,
                        fragment=self._fragment(outer),
                    )
                if outer.body is not node:
                    raise LoopStructureError(
                        f"cannot fuse loops {outer.loop_var.name} and {node.loop_var.name}: loop {node.loop_var.name} "
                        f"is not the only statement in loop {outer.loop_var.name} (the loops must be perfectly nested)",
                        loop=node.loop_var.name,
                        fragment=self._fragment(outer),
                    )
            self._check_starts_at_zero(node, "fuse")
            used = set(free_vars(node.extent)) & {n.loop_var for n in nodes[:pos]}
            if used:
                dep = sorted(v.name for v in used)[0]
                raise LoopStructureError(
                    f"cannot fuse loop {node.loop_var.name}: its extent {node.extent} depends on loop {dep}, which is fused with it",
                    loop=node.loop_var.name,
                )
        dtype = nodes[0].loop_var.dtype
        fused = Var("_".join(names) + "_fused", dtype)
        total: PrimExpr = const(1, dtype)
        for n in nodes:
            total = total * n.extent
        outer_dom = _dom(loops_above(locs[0].path))
        total = simplify(total, outer_dom)
        mapping: dict[Var, PrimExpr] = {}
        rest: PrimExpr = fused
        for n in reversed(nodes):
            if not preserve_unit_iters and _is_const(n.extent, 1):
                mapping[n.loop_var] = const(0, dtype)
                continue
            mapping[n.loop_var] = rest % n.extent
            rest = rest // n.extent
        dom = {**outer_dom, fused: Range(const(0, dtype), total)}
        touched = {fused}
        body = substitute_loop_vars(nodes[-1].body, mapping)
        body = _RewriteRealizes(dom, lambda r, d: _simplify_realize(r, d, touched)).visit(body)
        body = _simplify_loop_bounds(body, dom, touched)
        new = For(fused, const(0, dtype), total, ForKind.SERIAL, body)
        self.func = replace(self.func, {id(nodes[0]): new})
        return self._new_loop_rv(fused)

    @_variadic("ordered_loops")
    @primitive()
    def reorder(self, ordered_loops: list[LoopRV]) -> None:
        """Reorder loops of one chain of single-child loops; unlisted loops keep their places.

        The listed loops take, in the given order, the positions they occupied; the loops between
        the outermost and the innermost listed loop must each be the only statement of their
        parent, and the blocks below must have affine bindings and only spatial/reduce iterators. ::

            for i, j, k in T.grid(...):       for k, i, j in T.grid(...):
                with T.block("C"): ...   =>       with T.block("C"): ...

            sch.reorder(k, i, j)
        """
        if not isinstance(ordered_loops, list | tuple):
            raise InvalidArgument(f"reorder takes LoopRVs, got {ordered_loops!r}")
        locs = [self._loop(rv) for rv in ordered_loops]
        seen: set[Var] = set()
        for loc in locs:
            var = loc.node.loop_var
            if var in seen:
                raise InvalidArgument(
                    f"cannot reorder: loop {var.name} appears more than once in ordered_loops", loop=var.name
                )
            seen.add(var)
        if len(locs) < 2:
            return
        names = ", ".join(loc.node.loop_var.name for loc in locs)
        scope = enclosing_block(locs[0].path)
        for loc in locs[1:]:
            if enclosing_block(loc.path) is not scope:
                raise LoopStructureError(
                    f"cannot reorder loops {names}: loops {locs[0].node.loop_var.name} and {loc.node.loop_var.name} "
                    "are not under the same block scope"
                )
        bottom = max(locs, key=lambda lc: len(lc.path))
        top = min(locs, key=lambda lc: len(lc.path))
        path = bottom.path
        for loc in locs:
            if path[len(loc.path) - 1] is not loc.node:
                raise LoopStructureError(
                    f"cannot reorder loops {names}: loops {loc.node.loop_var.name} and {bottom.node.loop_var.name} "
                    "are in different subtrees (the loops must lie on one chain of nested loops)",
                    fragment=self._fragment(top.node),
                )
        chain: list[For] = []
        for k in range(len(top.path) - 1, len(path)):
            node = path[k]
            if chain and (chain[-1].body is not node or not isinstance(node, For)):
                raise LoopStructureError(
                    f"cannot reorder loops {names}: the body of loop {chain[-1].loop_var.name} is not the single loop "
                    "below it (there is a non-single-branch statement between the loops)",
                    loop=chain[-1].loop_var.name,
                    fragment=self._fragment(chain[-1]),
                )
            chain.append(node)
        listed = {loc.node.loop_var for loc in locs}
        queue = iter(loc.node for loc in locs)
        new_chain = [next(queue) if loop.loop_var in listed else loop for loop in chain]
        inner: set[Var] = set()
        for loop in reversed(new_chain):
            used = (set(free_vars(loop.min)) | set(free_vars(loop.extent))) & inner
            if used:
                dep = sorted(v.name for v in used)[0]
                raise LoopStructureError(
                    f"cannot reorder loops {names}: the range of loop {loop.loop_var.name} depends on loop {dep}, "
                    "which would be inside it in the new order",
                    loop=loop.loop_var.name,
                )
            inner.add(loop.loop_var)
        for rloc in _realizes(bottom.node, bottom.path[:-1], nested=False):
            realize = rloc.node
            assert isinstance(realize, BlockRealize)
            for iv in realize.block.iter_vars:
                if iv.iter_type not in (IterType.SPATIAL, IterType.REDUCE):
                    raise LoopStructureError(
                        f"cannot reorder loops {names}: block {realize.block.name} under them has the {iv.iter_type.value} "
                        f"iterator {iv.var.name}; only blocks with spatial and reduce iterators can be reordered",
                        block=realize.block.name,
                    )
            err = affine_binding_error(realize, _dom(loops_above(rloc.path)))
            if err is not None:
                raise NotAffineBinding(
                    f"cannot reorder loops {names}: {err}; the blocks under reordered loops must have affine bindings",
                    block=realize.block.name,
                )
        body: Stmt = bottom.node.body
        for loop in reversed(new_chain):
            body = dataclasses.replace(loop, body=body)
        self.func = replace(self.func, {id(top.node): body})

    @primitive()
    def add_unit_loop(self, block_or_loop: BlockRV | LoopRV) -> LoopRV:
        """Add a loop of extent 1 (variable ``u``) directly above a block or a loop. ::

        with T.block("B"): ...   =>   for u in range(1):
                                          with T.block("B"): ...

        u = sch.add_unit_loop(block)
        """
        if isinstance(block_or_loop, BlockRV):
            realize, loc = self._block_realize(block_or_loop)
            if enclosing_block(loc.path) is None:
                raise InvalidArgument(
                    f"cannot add a unit loop above block {loc.node.name}: it is the root block", block=loc.node.name
                )
            target: Stmt = realize
        elif isinstance(block_or_loop, LoopRV):
            target = self._loop(block_or_loop).node
        else:
            raise InvalidArgument(
                f"add_unit_loop: block_or_loop must be a BlockRV or a LoopRV, got {type(block_or_loop).__name__}"
            )
        var = Var("u", "int32")
        self.func = replace(self.func, {id(target): For(var, 0, 1, ForKind.SERIAL, target)})
        return self._new_loop_rv(var)

    # --- loop kinds -----------------------------------------------------------------------
    @primitive()
    def parallel(self, loop: LoopRV) -> None:
        """Make a loop parallel (a CPU thread per iteration group).

        Every block under it must have affine bindings, and the loop may be bound only to
        spatial block iterators (a reduction cannot run in parallel). ::

            for i in range(128):   =>   for i in T.parallel(128):

            sch.parallel(i)
        """
        self._set_kind(loop, ForKind.PARALLEL, None)

    @primitive()
    def vectorize(self, loop: LoopRV) -> None:
        """Make a loop vectorized; same rules as ``parallel``, and the extent must be a constant. ::

        for j in range(16):   =>   for j in T.vectorized(16):

        sch.vectorize(j)
        """
        self._set_kind(loop, ForKind.VECTORIZED, None)

    @primitive()
    def bind(self, loop: LoopRV, thread_axis: str) -> None:
        """Bind a loop to a GPU thread axis (``blockIdx.x``, ``threadIdx.y``, ``vthread.x``, ...).

        Same rules as ``parallel``, except that a reduce iterator may be bound to ``threadIdx.*``
        (cross-thread reduction); loops bound to one thread axis in a kernel must have equal extents. ::

            for i in range(128):   =>   for i in T.thread_binding(128, thread="blockIdx.x"):

            sch.bind(i, "blockIdx.x")
        """
        if not isinstance(thread_axis, str) or thread_axis not in THREAD_TAGS:
            raise InvalidArgument(f"bind: thread_axis must be one of {', '.join(THREAD_TAGS)}, got {thread_axis!r}")
        self._set_kind(loop, ForKind.THREAD_BINDING, thread_axis)

    @primitive()
    def unroll(self, loop: LoopRV) -> None:
        """Mark a loop to be unrolled (any loop can be). ::

        for k in range(4):   =>   for k in T.unroll(4):

        sch.unroll(k)
        """
        self._set_kind(loop, ForKind.UNROLLED, None)

    # --- annotations ----------------------------------------------------------------------
    @primitive()
    def annotate(self, block_or_loop: BlockRV | LoopRV, ann_key: str, ann_val: Any) -> None:
        """Set the annotation ``ann_key`` of a block or loop to ``ann_val`` (an int, float, str,
        bool, ExprRV (its value) or a list of them). ::

            for i in range(128):   =>   for i in T.serial(128, annotations={"pragma_unroll": 1}):

            sch.annotate(i, "pragma_unroll", 1)
        """
        node = self._annotation_target(block_or_loop, "annotate")
        if not isinstance(ann_key, str) or not ann_key:
            raise InvalidArgument(f"annotate: ann_key must be a non-empty string, got {ann_key!r}")
        value = _ann_value(ann_val, self._value)
        anns = dict(node.annotations)
        anns[ann_key] = value
        self.func = replace(self.func, {id(node): dataclasses.replace(node, annotations=anns)})

    @primitive()
    def unannotate(self, block_or_loop: BlockRV | LoopRV, ann_key: str) -> None:
        """Remove the annotation ``ann_key`` of a block or loop (it must exist). ::

        sch.unannotate(i, "pragma_unroll")
        """
        node = self._annotation_target(block_or_loop, "unannotate")
        if not isinstance(ann_key, str):
            raise InvalidArgument(f"unannotate: ann_key must be a string, got {ann_key!r}")
        anns = dict(node.annotations)
        what = f"block {node.name}" if isinstance(node, Block) else f"loop {node.loop_var.name}"
        if ann_key not in anns:
            have = ", ".join(sorted(anns)) or "none"
            raise InvalidArgument(
                f"cannot unannotate {what}: it has no annotation {ann_key!r} (its annotations: {have})",
                fragment=self._fragment(node),
            )
        del anns[ann_key]
        self.func = replace(self.func, {id(node): dataclasses.replace(node, annotations=anns)})

    # --- internals ------------------------------------------------------------------------
    def _annotation_target(self, rv: Any, prim: str) -> Block | For:
        if isinstance(rv, BlockRV):
            return self._block(rv).node
        if isinstance(rv, LoopRV):
            return self._loop(rv).node
        raise InvalidArgument(f"{prim}: block_or_loop must be a BlockRV or a LoopRV, got {type(rv).__name__}")

    def _check_plain_loop(self, node: For, prim: str) -> None:
        name = node.loop_var.name
        if node.thread_binding is not None:
            raise LoopKindError(
                f"cannot {prim} loop {name}: it is bound to {node.thread_binding}; only loops without thread binding can be {_PARTICIPLE[prim]}",
                loop=name,
                fragment=self._fragment(node),
            )
        if node.annotations:
            keys = ", ".join(k for k, _ in node.annotations)
            raise LoopKindError(
                f"cannot {prim} loop {name}: it has annotations ({keys}); only loops without annotations can be {_PARTICIPLE[prim]}",
                loop=name,
                fragment=self._fragment(node),
            )

    def _check_starts_at_zero(self, node: For, prim: str) -> None:
        if not _is_const(simplify(node.min), 0):
            raise LoopStructureError(
                f"cannot {prim} loop {node.loop_var.name}: it starts at {node.min}; only loops starting at 0 are supported",
                loop=node.loop_var.name,
                fragment=self._fragment(node),
            )

    def _set_kind(self, loop_rv: LoopRV, kind: ForKind, thread: str | None) -> None:
        loc = self._loop(loop_rv)
        node: For = loc.node
        name = node.loop_var.name
        if kind != ForKind.UNROLLED:
            verb = _KIND_VERB[kind]
            what = f"bind loop {name} to {thread}" if thread else f"{verb} loop {name}"
            if kind == ForKind.VECTORIZED and not _is_const(simplify(node.extent)):
                raise LoopKindError(
                    f"cannot vectorize loop {name}: its extent {node.extent} is not a constant",
                    loop=name,
                    fragment=self._fragment(node),
                )
            self._check_parallelizable(loc, what, thread, kind)
            if thread is not None:
                self._check_thread_extent(loc, thread)
        new = dataclasses.replace(node, kind=kind, thread_binding=thread)
        self.func = replace(self.func, {id(node): new})

    def _check_parallelizable(self, loc: Located, what: str, thread: str | None, kind: ForKind) -> None:
        """Every block under the loop has affine bindings and binds the loop to spatial iterators
        only. ``parallel`` and ``bind`` also take a block of spatial iterators only whose bindings
        overlap (a padded or packed copy ``compute_at`` a tile, which re-reads a halo; a GPU's
        shared-memory fetch of a convolution's sliding window): two threads then write the same
        value to the same element, as TVM allows."""
        node: For = loc.node
        var = node.loop_var
        for rloc in _realizes(node, loc.path[:-1], nested=True):
            realize = rloc.node
            assert isinstance(realize, BlockRealize)
            block = realize.block
            overlap_ok = kind in (ForKind.PARALLEL, ForKind.THREAD_BINDING) and _spatial_only(block)
            err = None if overlap_ok else affine_binding_error(realize, _dom(loops_above(rloc.path)))
            if err is not None:
                raise NotAffineBinding(
                    f"cannot {what}: {err}; the blocks under the loop must have affine bindings",
                    block=block.name,
                    loop=var.name,
                    fragment=self._fragment(realize),
                )
            for iv, value in zip(block.iter_vars, realize.iter_values, strict=True):
                if iv.iter_type == IterType.SPATIAL or not _uses(value, var):
                    continue
                if iv.iter_type == IterType.REDUCE:
                    if thread is not None and thread.startswith("threadIdx."):
                        continue  # cross-thread reduction
                    rule = (
                        "a reduction can be bound only to threadIdx (cross-thread reduction)"
                        if thread is not None
                        else "a reduction cannot run in parallel"
                    )
                    raise LoopKindError(
                        f"cannot {what}: block {block.name}'s reduce iterator {iv.var.name} is bound to it; {rule}",
                        block=block.name,
                        loop=var.name,
                        fragment=self._fragment(realize),
                    )
                raise LoopKindError(
                    f"cannot {what}: block {block.name}'s opaque iterator {iv.var.name} is bound to it; "
                    "nothing is known about the dependences between its iterations",
                    block=block.name,
                    loop=var.name,
                    fragment=self._fragment(realize),
                )

    def _check_thread_extent(self, loc: Located, thread: str) -> None:
        node: For = loc.node
        name = node.loop_var.name
        ancestors = [n for n in loc.path[:-1] if isinstance(n, For)]
        for a in ancestors:
            if a.thread_binding == thread and not _cooperative_copy(node, a):
                raise LoopKindError(
                    f"cannot bind loop {name} to {thread}: it is inside loop {a.loop_var.name}, which is already bound to "
                    f"{thread}{_COOPERATIVE_ONLY if thread.startswith('threadIdx.') else ''}",
                    loop=name,
                )
        for sub in walk_stmts(node.body):
            if isinstance(sub.node, For) and sub.node.thread_binding == thread:
                raise LoopKindError(
                    f"cannot bind loop {name} to {thread}: loop {sub.node.loop_var.name} inside it is already bound to {thread}",
                    loop=name,
                )
        kernel = next((a for a in ancestors if a.thread_binding is not None), node)
        for sub in walk_stmts(kernel):
            other = sub.node
            if not isinstance(other, For) or other is node or other.thread_binding != thread:
                continue
            if not (other.extent == node.extent or can_prove_equal(other.extent, node.extent)):
                raise LoopKindError(
                    f"cannot bind loop {name} to {thread}: loop {other.loop_var.name} in the same kernel is bound to "
                    f"{thread} with extent {other.extent} but loop {name} has extent {node.extent}; "
                    "all loops bound to one thread axis in a kernel must have the same extent",
                    loop=name,
                )
