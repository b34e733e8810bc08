"""Split a stride-parity-guarded reduction (a transposed convolution) into dense stride phases.

A transposed convolution with stride ``s`` is a stride-1 convolution over the input dilated by
``s``; TVM's formulation (and ``workloads`` T2D) folds the dilation into the read as a
``Select`` on the index being a multiple of ``s``. Every output pixel then multiplies the
whole kernel, but only the taps whose parity matches the pixel's read real input; the others
multiply zeros (half of them in 1-D, 3/4 in 2-D at stride 2), and the ``Select`` keeps the
block from matching a dot-product intrinsic. T2D with stride 2, kernel 4 (int8)::

    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 4, 4, 4, 4, 4, 4):
        with T.block("conv2d_transpose_nhwc"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, (v_hh + v_rh) // 2, (v_ww + v_rw) // 2, v_rc], weight[3 - v_rh, 3 - v_rw, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc] + T.Cast("int32", T.Select((v_hh + v_rh) % 2 == 0 and (v_ww + v_rw) % 2 == 0, PadInput[v_nn, (v_hh + v_rh) // 2, (v_ww + v_rw) // 2, v_rc], T.uint8(0))) * T.Cast("int32", weight[3 - v_rh, 3 - v_rw, v_rc, v_cc])

:func:`split_stride_phases` writes each output row ``hh = 2 * h' + ph`` (and column) of a
phase ``(ph, pw)`` with only the taps ``rh = 2 * r' + t`` that make the ``Select`` true
(``t = -ph mod 2``), so the read needs no division and no guard. The first of four phase
blocks (each with its own init, writing a disjoint strided slice of the output)::

    for nn, hh, ww, cc, rh, rw, rc in T.grid(1, 2, 2, 4, 2, 2, 4):
        with T.block("conv2d_transpose_nhwc_phase_0_0"):
            v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc = T.axis.remap("SSSSRRR", [nn, hh, ww, cc, rh, rw, rc])
            T.reads(PadInput[v_nn, v_hh + v_rh, v_ww + v_rw, v_rc], weight[3 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc])
            with T.init():
                conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] = 0
            conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] = conv2d_transpose_nhwc[v_nn, v_hh * 2, v_ww * 2, v_cc] + T.Cast("int32", PadInput[v_nn, v_hh + v_rh, v_ww + v_rw, v_rc]) * T.Cast("int32", weight[3 - v_rh * 2, 3 - v_rw * 2, v_rc, v_cc])

The phase ``(1, 1)`` reads ``PadInput[v_nn, v_hh + v_rh + 1, v_ww + v_rw + 1, v_rc]`` and
``weight[2 - v_rh * 2, 2 - v_rw * 2, v_rc, v_cc]`` and writes ``[v_hh * 2 + 1, v_ww * 2 + 1]``.

Several blocks writing one buffer break the schedule's rule that a reduction block is the only
writer of its output (``decompose_reduction``, hence ``tile_with_intrin``, refuses them). With
``phase_buffers=True`` each phase block instead fills a dense buffer of its own,
``conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh, v_ww, v_cc]`` (shape ``(1, 2, 2, 4)``, allocated
in the enclosing block), and a spatial block keeping the original name gathers them::

    for nn, hh, ww, cc in T.grid(1, 4, 4, 4):
        with T.block("conv2d_transpose_nhwc"):
            v_nn, v_hh, v_ww, v_cc = T.axis.remap("SSSS", [nn, hh, ww, cc])
            T.reads(conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh // 2, v_ww // 2, v_cc], ...)
            T.writes(conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc])
            conv2d_transpose_nhwc[v_nn, v_hh, v_ww, v_cc] = T.Select(v_hh % 2 == 0 and v_ww % 2 == 0, conv2d_transpose_nhwc_phase_0_0[v_nn, v_hh // 2, v_ww // 2, v_cc], T.Select(..., conv2d_transpose_nhwc_phase_1_1[v_nn, v_hh // 2, v_ww // 2, v_cc]))

Everything is derived from the IR, not from a workload's name: the pattern is a reduction
block ``OUT[i] = OUT[i] + ...`` whose update has, as a factor (through casts and products), a
``Select(c, x, 0)`` whose condition ``c`` is a conjunction of parity terms ``e % s == 0``
(``s >= 2`` a constant, ``e`` over the block's iterators; strides may differ between terms).
Each iterator in a term is split by that term's stride; for each residue of the spatial ones
(a phase) the residues of the reduce ones that make ``c`` true are found by simplifying ``c``
(so a border shift ``(hh + rh + 1) % 2`` is handled too); the block's body, init and regions
are rewritten with ``v = s * v' + residue`` and simplified, which removes the ``Select`` and
the divisions. When an output extent is not a multiple of ``s`` the phases get
``ceil((extent - residue) / s)`` rows each, and a phase with none (an output shorter than
``s``) is dropped; likewise for the taps of a kernel extent, and a phase left without taps (a
kernel smaller than ``s``) becomes a spatial block that only stores the init value. Other
blocks (padding, producers, consumers) stay as they are, the same objects.

Limits: the block must be bound one to one to the plain serial loops around it (run the pass
before scheduling, on the function ``te`` makes), its iterator domains must start at 0 with
constant extents, each iterator may appear in parity terms of one stride only, the condition
may hold nothing but parity terms, and each phase must pin one residue per split reduce
iterator; ``phase_buffers`` also needs the output written at the spatial iterators in order.
A block with the pattern that breaks a limit raises :class:`StridePhaseError`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..arith import detect_access_regions, simplify
from ..ir import (
    EQ,
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
    FloorMod,
    For,
    ForKind,
    IntImm,
    IterType,
    IterVar,
    Mul,
    Mutator,
    PrimExpr,
    PrimFunc,
    Range,
    Select,
    SeqStmt,
    Stmt,
    Var,
    const,
    equal,
    free_vars,
    logical_and,
    post_order_visit,
    seq,
    substitute,
)

__all__ = ["StridePhaseError", "split_stride_phases"]


class StridePhaseError(ValueError):
    """A block has the stride-parity pattern but the pass cannot split it; the message says why."""


def split_stride_phases(func: PrimFunc, *, phase_buffers: bool = False, block: str | None = None) -> PrimFunc:
    """Replace every stride-parity-guarded reduction block of ``func`` (or only the one named
    ``block``) by its dense stride phases.

    The phase blocks write strided slices of the output, or, with ``phase_buffers``, dense
    buffers of their own that a block named as the original gathers into the output (then every
    block is the only writer of its output, as ``decompose_reduction`` and ``tile_with_intrin``
    need). Returns ``func`` itself when no block has the pattern (see the module docstring).
    """
    body = _Splitter(phase_buffers, block).visit(func.body)
    return func if body is func.body else func.with_body(body)


def has_stride_phases(block: Block) -> bool:
    """Whether ``block`` is a reduction guarded by a stride-parity ``Select`` (what the pass splits)."""
    return _parity_select(block) is not None


class _Splitter(Mutator):
    """Splits the blocks in place; the phase buffers go to the nearest enclosing block."""

    def __init__(self, phase_buffers: bool, only: str | None = None) -> None:
        self.phase_buffers = phase_buffers
        self.only = only
        self.allocs: list[Buffer] = []

    def _wanted(self, block: Block) -> bool:
        return (self.only is None or block.name == self.only) and _parity_select(block) is not None

    def visit_Block(self, block: Block) -> Block:
        outer, self.allocs = self.allocs, []
        try:
            new = self.generic_visit(block)
            if self.allocs:
                new = replace(new, alloc_buffers=(*new.alloc_buffers, *self.allocs))
            return new
        finally:
            self.allocs = outer

    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        stmts = [self.visit(s) for s in op.stmts]
        return op if all(a is b for a, b in zip(stmts, op.stmts)) else seq(*stmts)

    def visit_For(self, loop: For) -> Stmt:
        loops, inner = _loop_chain(loop)
        if isinstance(inner, BlockRealize) and self._wanted(inner.block):
            stmt, buffers = _split_block(loops, inner, self.phase_buffers)
            self.allocs.extend(buffers)
            return stmt
        return self.generic_visit(loop)

    def visit_BlockRealize(self, realize: BlockRealize) -> Stmt:
        if self._wanted(realize.block):
            raise StridePhaseError(f"block {realize.block.name} is not inside loops the pass can rebuild")
        return self.generic_visit(realize)


def _loop_chain(loop: For) -> tuple[list[For], Stmt]:
    """The perfectly nested loops from ``loop`` down, and the statement inside them."""
    loops: list[For] = []
    stmt: Stmt = loop
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


# --------------------------------------------------------------------------------------------
# the pattern


def _parity_terms(cond: PrimExpr) -> list[tuple[PrimExpr, int]] | None:
    """``[(e, s), ...]`` when ``cond`` is a conjunction of ``e % s == 0`` with constant ``s >= 2``."""
    if isinstance(cond, And):
        left, right = _parity_terms(cond.a), _parity_terms(cond.b)
        return None if left is None or right is None else left + right
    if not isinstance(cond, EQ) or not _is_int_const(cond.b, 0):
        return None
    mod = cond.a
    if not isinstance(mod, FloorMod) or not isinstance(mod.b, IntImm) or mod.b.value < 2:
        return None
    return [(mod.a, mod.b.value)]


def _is_int_const(e: PrimExpr, value: int) -> bool:
    return isinstance(e, IntImm | FloatImm) and e.value == value


def _parity_select(block: Block) -> Select | None:
    """The Select guarded by a stride-parity condition in a reduction block's update, if any."""
    is_reduction = block.init is not None and any(iv.iter_type == IterType.REDUCE for iv in block.iter_vars)
    if not is_reduction or not isinstance(block.body, BufferStore):
        return None
    found: list[Select] = []

    def visit(node: object) -> None:
        if isinstance(node, Select) and _parity_terms(node.condition) and free_vars(node.condition):
            found.append(node)

    post_order_visit(block.body.value, visit)
    if len(found) > 1:
        raise StridePhaseError(f"block {block.name} has {len(found)} stride-parity Selects; the pass splits one")
    return found[0] if found else None


def _check_sum_of_products(block: Block, select: Select) -> None:
    """The Select must be a zero-else factor of the summand of ``OUT[i] = OUT[i] + ...``."""
    store = block.body
    value = store.value
    is_update = (
        isinstance(value, Add)
        and isinstance(value.a, BufferLoad)
        and value.a.buffer is store.buffer
        and value.a.indices == store.indices
    )
    if not (is_update and _is_zero_factor(value.b, select) and _is_int_const(select.false_value, 0)):
        raise StridePhaseError(
            f"block {block.name} guards its update with a stride-parity Select that is not a zero factor of a sum"
        )


def _is_zero_factor(expr: PrimExpr, select: Select) -> bool:
    if expr is select:
        return True
    if isinstance(expr, Cast):
        return _is_zero_factor(expr.value, select)
    if isinstance(expr, Mul):
        return _is_zero_factor(expr.a, select) or _is_zero_factor(expr.b, select)
    return False


def _split_strides(block: Block, terms: list[tuple[PrimExpr, int]]) -> dict[Var, int]:
    """The stride by which each iterator of a parity term is split."""
    iters = {iv.var: iv for iv in block.iter_vars}
    strides: dict[Var, int] = {}
    for expr, stride in terms:
        for var in free_vars(expr):
            if var not in iters:
                raise StridePhaseError(f"block {block.name} has a stride condition on {var.name}, not an iterator")
            if strides.setdefault(var, stride) != stride:
                raise StridePhaseError(f"block {block.name} tests iterator {var.name} for two strides")
    for var in strides:
        dom = iters[var].dom
        if not (_is_int_const(dom.min, 0) and isinstance(dom.extent, IntImm)):
            raise StridePhaseError(f"block {block.name} splits iterator {var.name}, whose domain is not [0, constant)")
    return strides


def _loop_of_iter(block: Block, loops: list[For], realize: BlockRealize) -> dict[Var, For]:
    """The loop each iterator is bound to, when the binding is one to one onto plain loops."""
    by_var = {loop.loop_var: loop for loop in loops}
    bound: dict[Var, For] = {}
    for iv, value in zip(block.iter_vars, realize.iter_values, strict=True):
        loop = by_var.get(value) if isinstance(value, Var) else None
        plain = loop is not None and loop.kind == ForKind.SERIAL and not loop.annotations
        if not plain or not (_is_int_const(loop.min, 0) and simplify(EQ(loop.extent, iv.dom.extent)) == TRUE):
            break
        bound[iv.var] = loop
    if len(bound) != len(block.iter_vars) or len(loops) != len(block.iter_vars) or realize.predicate != TRUE:
        raise StridePhaseError(
            f"block {block.name} is not bound one to one to the plain loops around it; "
            "run split_stride_phases before scheduling it"
        )
    return bound


# --------------------------------------------------------------------------------------------
# phases


@dataclass(frozen=True)
class _Phase:
    """One phase: the residue of every split iterator; ``dense`` is False when it has no taps."""

    suffix: str  # "_phase_0_1": the phase block is the original's name with it, its buffer the output's
    residues: dict[Var, int]
    dense: bool


def _split_extent(extent: int, stride: int, residue: int) -> int:
    """How many of ``range(extent)`` are ``residue`` modulo ``stride``."""
    return max(0, (extent - residue + stride - 1) // stride)


def _phases(block: Block, cond: PrimExpr, strides: dict[Var, int]) -> list[_Phase]:
    kinds = {iv.var: iv for iv in block.iter_vars}
    spatial = [v for v in kinds if v in strides and kinds[v].iter_type == IterType.SPATIAL]
    reduce = [v for v in kinds if v in strides and kinds[v].iter_type == IterType.REDUCE]
    if any(kinds[v].iter_type not in (IterType.SPATIAL, IterType.REDUCE) for v in strides):
        raise StridePhaseError(f"block {block.name} has a stride condition on an opaque iterator")
    phases = []
    for rows in itertools.product(*(range(strides[v]) for v in spatial)):
        outer = dict(zip(spatial, rows))
        if any(_split_extent(kinds[v].dom.extent.value, strides[v], r) == 0 for v, r in outer.items()):
            continue  # the output has no rows of this phase
        taps = [dict(zip(reduce, t)) for t in itertools.product(*(range(strides[v]) for v in reduce))]
        live = [t for t in taps if _condition_holds(block, cond, strides, {**outer, **t})]
        if len(live) > 1:
            raise StridePhaseError(f"block {block.name}: the stride condition leaves several tap residues per phase")
        dense = bool(live) and all(_split_extent(kinds[v].dom.extent.value, strides[v], r) for v, r in live[0].items())
        suffix = "_phase_" + "_".join(str(r) for r in rows) if rows else ""  # no spatial split: one block
        phases.append(_Phase(suffix, {**outer, **(live[0] if live else {})}, dense))
    return phases


def _condition_holds(block: Block, cond: PrimExpr, strides: dict[Var, int], residues: dict[Var, int]) -> bool:
    mapping = {v: Var(v.name, v.dtype) * strides[v] + const(r, v.dtype) for v, r in residues.items()}
    value = simplify(substitute(cond, mapping))
    if not isinstance(value, IntImm):
        raise StridePhaseError(f"block {block.name}: the stride condition is not constant within a phase")
    return bool(value.value)


# --------------------------------------------------------------------------------------------
# rewriting


@dataclass(frozen=True)
class _Split:
    """A block to split: its loops, the loop each iterator is bound to, the split strides."""

    block: Block
    loops: list[For]
    loop_of: dict[Var, For]
    strides: dict[Var, int]

    @property
    def output(self) -> BufferStore:
        return self.block.body


def _split_block(loops: list[For], realize: BlockRealize, phase_buffers: bool) -> tuple[Stmt, list[Buffer]]:
    """The phase nests replacing ``loops`` (and the buffers to allocate for them)."""
    block = realize.block
    select = _parity_select(block)
    _check_sum_of_products(block, select)
    split = _Split(
        block, loops, _loop_of_iter(block, loops, realize), _split_strides(block, _parity_terms(select.condition))
    )
    phases = _phases(block, select.condition, split.strides)
    if not phase_buffers or len(phases) == 1:  # a single phase block is the only writer anyway
        return seq(*(_phase_nest(split, phase, None) for phase in phases)), []
    buffers = [_phase_buffer(split, phase) for phase in phases]
    nests = [_phase_nest(split, phase, buf) for phase, buf in zip(phases, buffers)]
    return seq(*nests, _gather_nest(split, phases, buffers)), buffers


def _phase_nest(split: _Split, phase: _Phase, target: Buffer | None) -> Stmt:
    """One phase's loops and block, ``v = s * v' + residue`` for every split iterator; the block
    writes the output's strided slice, or all of ``target`` (indexed by its spatial iterators)."""
    block = split.block
    iters = [iv for iv in block.iter_vars if phase.dense or iv.iter_type == IterType.SPATIAL]
    new_iters = [_phase_iter(iv, split.strides, phase) for iv in iters]
    mapping = {iv.var: _phase_value(iv, new, split.strides, phase) for iv, new in zip(iters, new_iters)}
    resolve = _Resolve({new.var: new.dom for new in new_iters}, split.output.buffer, target, new_iters)
    writes = tuple(resolve.visit(substitute(w, mapping)) for w in block.writes)
    if phase.dense:
        body, init = resolve.visit(substitute(block.body, mapping)), resolve.visit(substitute(block.init, mapping))
        reads = tuple(resolve.visit(substitute(r, mapping)) for r in block.reads)
    else:  # no taps: the phase's outputs keep the init value
        body, init = resolve.visit(substitute(block.init, mapping)), None
        reads = tuple(r for r in detect_access_regions(body, {})[0] if r.buffer not in {w.buffer for w in writes})
    new_block = Block(
        block.name + phase.suffix, tuple(new_iters), reads, writes, body, init, block.alloc_buffers, block.match_buffers,
        block.annotations,
    )  # fmt: skip
    return _loop_nest(split, iters, new_iters, new_block)


def _loop_nest(split: _Split, iters: list[IterVar], new_iters: list[IterVar], block: Block) -> Stmt:
    """Fresh plain loops, in the original loops' order, each binding one of ``new_iters`` over its domain."""
    loop_of = [split.loop_of[iv.var] for iv in iters]
    loop_vars = [Var(loop.loop_var.name, loop.loop_var.dtype) for loop in loop_of]
    stmt: Stmt = BlockRealize(tuple(loop_vars), TRUE, block)
    nest = sorted(zip(loop_of, loop_vars, new_iters), key=lambda t: split.loops.index(t[0]), reverse=True)
    for _, lv, new in nest:
        stmt = For(lv, const(0, lv.dtype), new.dom.extent, ForKind.SERIAL, stmt)
    return stmt


def _phase_iter(iv: IterVar, strides: dict[Var, int], phase: _Phase) -> IterVar:
    var = Var(iv.var.name, iv.var.dtype)
    if iv.var not in phase.residues:
        return IterVar(var, iv.dom, iv.iter_type)
    extent = _split_extent(iv.dom.extent.value, strides[iv.var], phase.residues[iv.var])
    return IterVar(var, Range(const(0, var.dtype), const(extent, var.dtype)), iv.iter_type)


def _phase_value(iv: IterVar, new: IterVar, strides: dict[Var, int], phase: _Phase) -> PrimExpr:
    if iv.var not in phase.residues:
        return new.var
    return new.var * strides[iv.var] + const(phase.residues[iv.var], new.var.dtype)


class _Resolve(Mutator):
    """Simplify indices and regions; replace a Select whose condition became constant by its
    branch; move accesses of ``output`` to ``target`` indexed by the spatial iterators."""

    def __init__(self, dom: dict[Var, Range], output: Buffer, target: Buffer | None, iters: list[IterVar]) -> None:
        self.dom, self.output, self.target = dom, output, target
        self.target_index = tuple(iv.var for iv in iters if iv.iter_type == IterType.SPATIAL)

    def access(self, buffer: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[Buffer, tuple[PrimExpr, ...]]:
        if buffer is self.output and self.target is not None:
            return self.target, self.target_index
        return buffer, tuple(simplify(i, self.dom) for i in indices)

    def visit_Select(self, op: Select) -> PrimExpr:
        cond = simplify(op.condition, self.dom)
        if isinstance(cond, IntImm):
            return self.visit(op.true_value if cond.value else op.false_value)
        return Select(cond, self.visit(op.true_value), self.visit(op.false_value))

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        return BufferLoad(*self.access(op.buffer, op.indices))

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        buffer, indices = self.access(op.buffer, op.indices)
        return BufferStore(buffer, self.visit(op.value), indices)

    def visit_BufferRegion(self, op: BufferRegion) -> BufferRegion:
        if op.buffer is self.output and self.target is not None:
            return _point_region(self.target, self.target_index)
        return BufferRegion(
            op.buffer, tuple(Range(simplify(r.min, self.dom), simplify(r.extent, self.dom)) for r in op.region)
        )


def _point_region(buffer: Buffer, indices: tuple[PrimExpr, ...]) -> BufferRegion:
    return BufferRegion(buffer, tuple(Range(i, const(1, i.dtype)) for i in indices))


# --------------------------------------------------------------------------------------------
# phase buffers


def _phase_buffer(split: _Split, phase: _Phase) -> Buffer:
    """The buffer one phase writes densely: one dimension per spatial iterator, its phase extent."""
    spatial = [iv for iv in split.block.iter_vars if iv.iter_type == IterType.SPATIAL]
    if split.output.indices != tuple(iv.var for iv in spatial):
        raise StridePhaseError(
            f"block {split.block.name} does not write its output at its spatial iterators in order; "
            "phase buffers need that"
        )
    shape = tuple(_phase_iter(iv, split.strides, phase).dom.extent for iv in spatial)
    out = split.output.buffer
    return Buffer(out.name + phase.suffix, shape, out.dtype)


def _gather_nest(split: _Split, phases: list[_Phase], buffers: list[Buffer]) -> Stmt:
    """The block, named as the original, that copies each output element from its phase's buffer."""
    block = split.block
    spatial = [iv for iv in block.iter_vars if iv.iter_type == IterType.SPATIAL]
    new_iters = [IterVar(Var(iv.var.name, iv.var.dtype), iv.dom, IterType.SPATIAL) for iv in spatial]
    fresh = {iv.var: new.var for iv, new in zip(spatial, new_iters)}
    strides = {fresh[v]: s for v, s in split.strides.items() if v in fresh}
    index = tuple(v // strides[v] if v in strides else v for v in fresh.values())
    value: PrimExpr = buffers[-1][index]
    for phase, buf in reversed(list(zip(phases[:-1], buffers[:-1]))):
        residues = {fresh[v]: r for v, r in phase.residues.items() if v in fresh}
        value = Select(logical_and(*(equal(v % s, residues[v]) for v, s in strides.items())), buf[index], value)
    store = BufferStore(split.output.buffer, value, tuple(fresh[v] for v in split.output.indices))
    reads = tuple(_point_region(buf, index) for buf in buffers)
    writes = tuple(substitute(w, fresh) for w in block.writes)
    return _loop_nest(split, spatial, new_iters, Block(block.name, tuple(new_iters), reads, writes, store))
