"""The auto-tensorization matcher (paper section 4.2): can a block be computed by an intrinsic?

``match(func, block_name, intrin)`` returns a :class:`MatchReport`. The steps:

1. **Expression pattern.** The block's update ``OUT[idx] = OUT[idx] + value`` is compared with
   the intrinsic's semantics node by node (``+`` and ``*`` commute, so several operand bindings
   may come out); casts and data types must agree. Each binding pairs every intrinsic operand
   with one workload buffer. A binding that agrees in structure but not in types is rejected
   with the reason ("operand B is float32, the intrinsic reads int8").
2. **Characteristic vectors.** For every iterator, which operands' indices it appears in (GEMM:
   i in A and C, j in B and C, k in A and B), for the workload's iterators through the binding.
3. **Iterator mapping.** Each intrinsic iterator is played by workload iterators with the same
   vector and kind: several such workload iterators are either fused onto it (the paper's
   proposal) or one of them is mapped and the others stay outer loops. Workload iterators whose
   vector no intrinsic iterator has stay outer loops. An intrinsic iterator no workload iterator
   can play makes the binding infeasible ("no workload iterator plays the role of k").
4. **Padding.** Each mapped extent is padded up to a multiple of the intrinsic's extent.
5. **Layout.** An operand the intrinsic reads as one contiguous tile (``contiguous``) or as
   dense rows (``strided_rows``) must find its tile that way in the workload buffer, and a padded
   iterator must index it alone (``PadInput[n, h * 2 + rh, w, rc]`` pads ``rc`` in place: the
   padded copy grows that dimension); otherwise the plan stages it through ``reindex`` and a
   ``transform_layout`` into the intrinsic's packed tile layout (VNNI's B[16, 4] from a [K, N]
   weight: panels ``(n // 16, k // 4, n % 16, k % 4)``), never applying the intrinsic to strided
   rows.

Every feasible mapping (best first: the fewest estimated instructions per useful call, padded
calls and the elements staging copies write (:attr:`Mapping.cost`); then no fusion, then the
fewest layout transforms) carries the whole loop plan that
:func:`tensorsearch.intrin.tile_with_intrin` performs; every
infeasible candidate carries its reason. ``str(report)`` is the printed explanation.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..arith import simplify
from ..ir import (
    Add,
    Block,
    BlockRealize,
    BufferLoad,
    BufferStore,
    Cast,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    IterType,
    IterVar,
    Max,
    Min,
    Mul,
    PrimExpr,
    PrimFunc,
    Range,
    Stmt,
    Sub,
    Var,
    free_vars,
    post_order_visit,
    substitute,
)
from ..ir.dtype import bool_
from ..ir.functor import Mutator
from .intrinsics import Intrinsic, Operand

__all__ = ["IterMapping", "MatchReport", "Mapping", "OperandPlan", "Rejection", "find_block", "match"]

_KIND = {IterType.SPATIAL: "spatial", IterType.REDUCE: "reduce"}


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class IterMapping:
    """Intrinsic iterator ``intrin_iter`` played by the (fused) ``workload_iters``."""

    intrin_iter: str
    kind: str  # spatial | reduce
    intrin_extent: int
    workload_iters: tuple[str, ...]
    workload_extent: int  # product of the workload iterators' extents

    @property
    def fused(self) -> bool:
        return len(self.workload_iters) > 1

    @property
    def padding(self) -> int:
        """How many iterations pad the workload extent to a multiple of the intrinsic extent."""
        return (-self.workload_extent) % self.intrin_extent

    @property
    def padded_extent(self) -> int:
        return self.workload_extent + self.padding

    def __str__(self) -> str:
        src = " * ".join(self.workload_iters)
        fuse = f" (fused: {src})" if self.fused else ""
        pad = f", padded by {self.padding} to {self.padded_extent}" if self.padding else ""
        return (
            f"{self.intrin_iter} ({self.kind}, extent {self.intrin_extent}) <- {' . '.join(self.workload_iters)}"
            f"{fuse} (extent {self.workload_extent}{pad}; {self.padded_extent // self.intrin_extent} tiles)"
        )


@dataclass(frozen=True)
class OperandPlan:
    """How intrinsic operand ``operand`` finds its tile in workload buffer ``buffer``.

    ``in_place``: the tile is read where it is. Otherwise ``reindex`` names the block access
    (``("read", i)`` / ``("write", i)``) staged through a ``<buffer>_reindex`` copy and
    ``index_map`` (lambda text over the reindexed buffer's dimensions, one per block iterator
    the access uses, in block order) is the ``transform_layout`` that packs each tile.
    """

    operand: str
    buffer: str
    access: tuple[str, int]
    indices: str  # the workload access, e.g. "Y[b, k, j]"
    layout: str  # contiguous | strided_rows | any
    in_place: bool
    why: str  # why the tile can (or cannot) be read in place
    index_map: str | None = None
    packed_shape: tuple[int, ...] | None = None
    reindex_dims: tuple[str, ...] = ()
    scope: str = "global"
    copied: int = 0  # elements its staging copy writes: the packed buffer, or pad_einsum's padded copy

    @property
    def needs_transform(self) -> bool:
        return not self.in_place

    def __str__(self) -> str:
        head = f"{self.operand} <- {self.indices} ({self.layout})"
        if self.in_place:
            s = f"{head}: in place; {self.why}"
        else:
            dims = ", ".join(self.reindex_dims)
            s = (
                f"{head}: LAYOUT TRANSFORM: {self.why}; reindex {self.access} to {self.buffer}_reindex[{dims}], "
                f"then transform_layout {self.index_map} (packed shape {list(self.packed_shape or ())})"
            )
        if self.scope not in ("global", "local"):
            s += f"; the intrinsic reads it from scope {self.scope}: stage it there (cache_read / the unit's load)"
        return s


@dataclass(frozen=True)
class Mapping:
    """One feasible way to compute the block with the intrinsic: the loop plan."""

    intrin: str
    block: str
    binding: tuple[tuple[str, str], ...]  # (intrinsic operand, workload buffer)
    iterators: tuple[IterMapping, ...]  # in the intrinsic's iterator order
    outer: tuple[str, ...]  # workload iterators that stay outside the intrinsic
    operands: tuple[OperandPlan, ...]
    block_iters: tuple[tuple[str, int, str], ...]  # (name, extent, kind) of the workload block
    has_init: bool = False
    notes: tuple[str, ...] = ()
    split: tuple[str, int] | None = None  # (iterator, group size): split it first (grouped convolution)

    @property
    def fused(self) -> bool:
        return any(m.fused for m in self.iterators)

    @property
    def padding(self) -> dict[str, int]:
        """Mapped (fused: ``"rh*rw*rc"``) iterator -> iterations of padding, non-zero entries."""
        return {"*".join(m.workload_iters): m.padding for m in self.iterators if m.padding}

    @property
    def needs_padding(self) -> bool:
        return any(m.padding for m in self.iterators)

    @property
    def transforms(self) -> tuple[OperandPlan, ...]:
        """The operands that need a layout transform."""
        return tuple(o for o in self.operands if o.needs_transform)

    @property
    def iter_map(self) -> dict[str, str]:
        """Workload iterator -> the intrinsic iterator it maps onto."""
        return {w: m.intrin_iter for m in self.iterators for w in m.workload_iters}

    @property
    def waste(self) -> float:
        """The fraction of the intrinsic's multiply-adds spent on padding: ``1 - useful / padded``
        over the mapped iterators (C2D with 3 input channels: ``k <- rc`` padded 3 -> 4 wastes
        0.25, ``k <- rh * rw * rc`` padded 147 -> 148 wastes 0.007)."""
        return 1 - _prod(m.workload_extent for m in self.iterators) / _prod(m.padded_extent for m in self.iterators)

    @property
    def cost(self) -> float:
        """Estimated instructions per useful intrinsic call: the padded calls plus one per element
        the staging copies write (a gather under padding guards runs about an element per
        instruction, as an intrinsic call does a whole tile), over the unpadded calls. C2D with 3
        input channels, 7x7, 112x112 outputs: ``k <- rc`` pads 3 -> 4 (1.33 calls) and copies the
        padded input and the packed weight, 224,144 elements (0.12), 1.45 in all;
        ``k <- rh * rw * rc`` wastes little (1.007) but gathers 112 * 112 * 148 elements (1.01),
        2.02."""
        outer = _prod(ext for name, ext, _ in self.block_iters if name not in self.iter_map)
        per_call = _prod(m.intrin_extent for m in self.iterators)
        useful = outer * _prod(m.workload_extent for m in self.iterators) / per_call
        padded = outer * _prod(m.padded_extent for m in self.iterators) / per_call
        return (padded + sum(o.copied for o in self.operands)) / useful

    def rank(self) -> tuple[float, int, int]:
        """Best first: the least estimated cost (padding and staging copies), then unfused, then
        the fewest layout transforms."""
        return (round(self.cost, 3), int(self.fused), len(self.transforms))

    def operand(self, name: str) -> OperandPlan:
        return next(o for o in self.operands if o.operand == name)

    def __str__(self) -> str:
        lines = [f"binding: {', '.join(f'{o} <- {b}' for o, b in self.binding)}", "iterators:"]
        lines += [f"  {m}" for m in self.iterators]
        lines.append(f"  outer loops: {', '.join(self.outer) or '(none)'}")
        lines.append("operands:")
        lines += [f"  {o}" for o in self.operands]
        inner = [f"{'*'.join(m.workload_iters)}.inner({m.intrin_extent})" for m in self.iterators]
        fused = ", ".join("*".join(m.workload_iters) for m in self.iterators if m.fused)
        lines.append(
            "loop plan: "
            + (f"split {self.split[0]} into groups of {self.split[1]} (transform_block_layout); " if self.split else "")
            + ("decompose_reduction (the init stays outside); " if self.has_init else "")
            + (f"fuse {fused} (transform_block_layout); " if self.fused else "")
            + (f"pad_einsum {self.padding}; " if self.needs_padding else "")
            + f"split each mapped loop by the intrinsic extent; inner loops {', '.join(inner)} innermost in "
            f"the intrinsic's order; blockize at the first of them; tensorize with {self.intrin}"
        )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Rejection:
    """An infeasible candidate: which binding (or ``"-"``) and the reason in words."""

    candidate: str
    reason: str

    def __str__(self) -> str:
        return f"{self.candidate}: {self.reason}" if self.candidate != "-" else self.reason


@dataclass
class MatchReport:
    """The matcher's answer for one block and one intrinsic."""

    block: str
    intrin: str
    semantics: str
    workload: str  # the block's update, as text
    feasible: list[Mapping] = field(default_factory=list)
    infeasible: list[Rejection] = field(default_factory=list)
    vectors: list[str] = field(default_factory=list)  # characteristic-vector lines, per binding

    def __bool__(self) -> bool:
        return bool(self.feasible)

    @property
    def best(self) -> Mapping | None:
        return self.feasible[0] if self.feasible else None

    def __str__(self) -> str:
        verdict = f"{len(self.feasible)} feasible mapping(s)" if self.feasible else "NO feasible mapping"
        lines = [
            f"block {self.block} vs intrinsic {self.intrin}: {verdict}",
            f"  intrinsic: {self.semantics}",
            f"  block:     {self.workload}",
        ]
        if self.vectors:
            lines.append("  characteristic vectors (the operands each iterator indexes):")
            lines += [f"    {v}" for v in self.vectors]
        for n, m in enumerate(self.feasible):
            lines.append(f"  mapping {n + 1}{' (best)' if n == 0 else ''}:")
            lines += [f"    {line}" for line in str(m).splitlines()]
        if self.infeasible:
            lines.append("  infeasible:")
            lines += [f"    - {r}" for r in self.infeasible]
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Step 1: the expression pattern


class _NoMatch(Exception):
    pass


COMMUTATIVE = (Add, Mul, Min, Max)  # the operations whose operands match in either order


def non_plain_padded_index(indices: Any, padded: Any) -> PrimExpr | None:
    """The first of ``indices`` a padded iterator (``padded(var)`` true) appears in other than
    alone (``h * 2 + rh`` when ``rh`` is padded), or None. ``pad_einsum`` grows only the
    dimensions a padded iterator indexes alone."""
    return next((i for i in indices if not isinstance(i, Var) and any(padded(v) for v in free_vars(i))), None)


def _describe(e: PrimExpr) -> str:
    return type(e).__name__ if not isinstance(e, BufferLoad) else f"a load of {e.buffer.name}"


def _match_expr(p: PrimExpr, w: PrimExpr, bind: dict[str, BufferLoad], diffs: list[str]) -> list[tuple[dict, list]]:
    """All (binding, dtype differences) under which workload ``w`` has the shape of pattern ``p``."""
    if isinstance(p, Cast) and isinstance(w, Cast):
        d = (
            diffs
            if p.dtype == w.dtype
            else [*diffs, f"the intrinsic casts to {p.dtype} where the block casts to {w.dtype}"]
        )
        return _match_expr(p.value, w.value, bind, d)
    if isinstance(p, Cast):
        return _match_expr(p.value, w, bind, [*diffs, f"the intrinsic casts to {p.dtype} where the block has no cast"])
    if isinstance(w, Cast):
        return _match_expr(p, w.value, bind, [*diffs, f"the block casts to {w.dtype} where the intrinsic has no cast"])
    if isinstance(p, BufferLoad):
        if not isinstance(w, BufferLoad):
            return []
        name = p.buffer.name
        if name in bind:
            return [(bind, diffs)] if bind[name].buffer is w.buffer else []
        if any(b.buffer is w.buffer for b in bind.values()):
            return []
        return [({**bind, name: w}, diffs)]
    if isinstance(p, IntImm | FloatImm):
        return [(bind, diffs)] if isinstance(w, IntImm | FloatImm) and float(w.value) == float(p.value) else []
    if type(p) is not type(w) or not isinstance(p, (Sub, *COMMUTATIVE)):
        return []
    orders = [(w.a, w.b)] + ([(w.b, w.a)] if isinstance(p, COMMUTATIVE) else [])
    out = []
    for wa, wb in orders:
        for b1, d1 in _match_expr(p.a, wa, bind, diffs):
            out += _match_expr(p.b, wb, b1, d1)
    return out


def _split_update(store: BufferStore) -> PrimExpr | None:
    """``value`` of ``OUT[idx] = OUT[idx] + value`` (either order), else None."""
    v = store.value
    if isinstance(v, Add):
        for acc, rest in ((v.a, v.b), (v.b, v.a)):
            if isinstance(acc, BufferLoad) and acc.buffer is store.buffer and acc.indices == store.indices:
                return rest
    return None


# --------------------------------------------------------------------------------------------
# Helpers


def find_block(func: PrimFunc, name: str) -> tuple[BlockRealize, Block]:
    """The realize and block named ``name`` in ``func`` (ValueError naming the blocks otherwise)."""
    found: list[BlockRealize] = []
    names: list[str] = []

    def visit(n: Any) -> None:
        if isinstance(n, BlockRealize):
            names.append(n.block.name)
            if n.block.name == name:
                found.append(n)

    post_order_visit(func.body, visit)
    if not found:
        known = ", ".join(x for x in names if x != "root")
        raise ValueError(f"the function has no block {name!r}; its blocks are: {known}")
    return found[0], found[0].block


def _int(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _text(load: BufferLoad | BufferStore) -> str:
    return f"{load.buffer.name}[{', '.join(map(str, load.indices))}]"


def _access_of(blk: Block, buf: Any, written: bool) -> tuple[str, int]:
    regions = blk.writes if written else blk.reads
    for i, r in enumerate(regions):
        if r.buffer is buf:
            return ("write" if written else "read", i)
    return ("write" if written else "read", 0)


def _vec_text(vec: tuple[bool, ...], names: list[str]) -> str:
    on = [n for n, b in zip(names, vec, strict=True) if b]
    return "(" + ", ".join(on) + ")" if on else "(no operand)"


def _strides(shape: list[int]) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return list(reversed(out))


# --------------------------------------------------------------------------------------------
# The matcher


def match(func: PrimFunc, block_name: str, intrin: Intrinsic) -> MatchReport:
    """Match block ``block_name`` of ``func`` against ``intrin``; see the module docstring."""
    realize, blk = find_block(func, block_name)
    store = blk.body
    report = MatchReport(block_name, intrin.name, intrin.semantics, str(store).strip() if store is not None else "")
    if isinstance(store, BufferStore):
        report.workload = f"{_text(store)} = {store.value}"
    _match_block(report, func, realize, blk, intrin)
    if not report.feasible:
        for name, size in _grouped_iterators(blk):
            _match_groups(report, func, blk, intrin, name, size)
    report.feasible.sort(key=Mapping.rank)
    return report


def _match_block(report: MatchReport, func: PrimFunc, realize: BlockRealize, blk: Block, intrin: Intrinsic) -> None:
    """Add the feasible mappings of ``blk`` onto ``intrin`` to ``report``, and why the others fail."""
    block_name = blk.name
    sem = intrin._ir()
    store = blk.body
    if not isinstance(store, BufferStore):
        report.infeasible.append(
            Rejection("-", f"block {block_name}'s body is not one buffer store; the matcher needs OUT[...] = value")
        )
        return
    out_op = intrin.output
    if intrin.accumulate:
        wvalue = _split_update(store)
        if wvalue is None:
            report.infeasible.append(
                Rejection(
                    "-",
                    f"intrinsic {intrin.name} accumulates ({out_op.name}[...] += ...) but block {block_name} does not "
                    f"update {store.buffer.name} as {_text(store)} = {_text(store)} + value",
                )
            )
            return
    else:
        wvalue = store.value
        if blk.init is not None or _split_update(store) is not None:
            report.infeasible.append(
                Rejection(
                    "-",
                    f"intrinsic {intrin.name} writes {out_op.name} with '=' but block {block_name} accumulates "
                    f"into {store.buffer.name}",
                )
            )
            return
    out_load = BufferLoad(store.buffer, store.indices)
    start = {out_op.name: out_load}
    results = _match_expr(sem.value, wvalue, start, [])
    if not results:
        report.infeasible.append(
            Rejection(
                "-",
                f"the expression pattern differs: block {block_name} computes {wvalue} but intrinsic {intrin.name} "
                f"computes {sem.value} (the same operations over loads, with casts, are needed)",
            )
        )
        return
    seen: set[tuple] = set()
    for bind, diffs in results:
        key = tuple(sorted((k, id(v.buffer)) for k, v in bind.items()))
        if key in seen:
            continue
        seen.add(key)
        _candidate(report, func, realize, blk, intrin, bind, diffs)


def _grouped_iterators(blk: Block) -> list[tuple[str, int]]:
    """Spatial iterators some index uses through ``v // c`` (``c`` > 1 dividing the extent):
    grouped convolution's output channel, whose group ``cc // 32`` selects the input channels."""
    found: dict[str, int] = {}

    def visit(n: Any) -> None:
        if isinstance(n, FloorDiv) and isinstance(n.a, Var) and isinstance(n.b, IntImm) and n.b.value > 1:
            found.setdefault(n.a.name, n.b.value)

    post_order_visit(blk.body, visit)
    out = []
    for iv in blk.iter_vars:
        size = found.get(iv.var.name)
        ext = _int(iv.dom.extent)
        if size and iv.iter_type == IterType.SPATIAL and ext and ext % size == 0 and ext > size:
            out.append((iv.var.name, size))
    return out


def split_iterator(blk: Block, name: str, size: int) -> tuple[Block, tuple[Var, ...]]:
    """``blk`` with iterator ``name`` split into ``(name // size, name % size)``, as
    ``transform_block_layout`` with :func:`group_split_map` makes it (iterators ``v0, v1, ...``),
    and the new iterators."""
    new_iters: list[IterVar] = []
    back: dict[Var, PrimExpr] = {}
    for iv in blk.iter_vars:
        ext = _int(iv.dom.extent)
        parts = [ext // size, size] if iv.var.name == name else [ext]
        vs = []
        for extent in parts:
            v = Var(f"v{len(new_iters)}", iv.var.dtype)
            dt = iv.dom.extent.dtype
            new_iters.append(IterVar(v, Range(IntImm(dt, 0), IntImm(dt, extent)), iv.iter_type))
            vs.append(v)
        back[iv.var] = vs[0] * size + vs[1] if len(vs) == 2 else vs[0]
    dom = {iv.var: iv.dom for iv in new_iters}

    def rewrite(node: Any) -> Any:
        return _simplify_indices(substitute(node, back), dom)

    split = replace(
        blk,
        iter_vars=tuple(new_iters),
        reads=tuple(rewrite(r) for r in blk.reads),
        writes=tuple(rewrite(r) for r in blk.writes),
        body=rewrite(blk.body),
        init=None if blk.init is None else rewrite(blk.init),
    )
    return split, tuple(iv.var for iv in new_iters)


def _simplify_indices(node: Any, dom: dict[Var, Range]) -> Any:
    """``node`` with every load's and store's indices and every range simplified over ``dom``."""

    class _Simplify(Mutator):
        def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
            return BufferLoad(op.buffer, tuple(simplify(self.visit(i), dom) for i in op.indices))

        def visit_BufferStore(self, op: BufferStore) -> Stmt:
            return BufferStore(op.buffer, self.visit(op.value), tuple(simplify(self.visit(i), dom) for i in op.indices))

        def visit_Range(self, op: Range) -> Range:
            return Range(simplify(op.min, dom), simplify(op.extent, dom))

    return _Simplify().visit(node)


def group_split_map(blk: Block, name: str, size: int) -> str:
    """The ``transform_block_layout`` map (lambda text) that splits iterator ``name`` in groups."""
    names = [iv.var.name for iv in blk.iter_vars]
    out = [f"{n} // {size}, {n} % {size}" if n == name else n for n in names]
    return f"lambda {', '.join(names)}: ({', '.join(out)})"


def _match_groups(report: MatchReport, func: PrimFunc, blk: Block, intrin: Intrinsic, name: str, size: int) -> None:
    """Add the mappings of the block with iterator ``name`` split in groups of ``size``."""
    split, values = split_iterator(blk, name, size)
    sub = MatchReport(blk.name, intrin.name, intrin.semantics, report.workload)
    _match_block(sub, func, BlockRealize(values, IntImm(bool_, 1), split), split, intrin)
    why = f"{name} split into groups of {size} ({group_split_map(blk, name, size)})"
    report.feasible += [replace(m, split=(name, size), notes=(*m.notes, f"per group: {why}")) for m in sub.feasible]
    report.infeasible += [Rejection(f"per group ({why}); {r.candidate}", r.reason) for r in sub.infeasible]
    report.vectors += [f"per group: {v}" for v in sub.vectors]


def _candidate(
    report: MatchReport,
    func: PrimFunc,
    realize: BlockRealize,
    blk: Block,
    intrin: Intrinsic,
    bind: dict[str, BufferLoad],
    diffs: list[str],
) -> None:
    names = [o.name for o in intrin.operands]
    label = "binding " + ", ".join(f"{o} <- {bind[o].buffer.name}" for o in names)
    # dtypes -------------------------------------------------------------------------------
    reasons = []
    for o in intrin.operands:
        got = bind[o.name].buffer.dtype
        if got != o.dtype:
            reasons.append(
                f"operand {o.name} is {got} (workload buffer {bind[o.name].buffer.name}), the intrinsic "
                f"{'reads' if o.role == 'input' else 'writes'} {o.dtype}"
            )
    reasons += [f"{d} (block {blk.name})" for d in dict.fromkeys(diffs)]
    if reasons:
        report.infeasible.append(Rejection(label, "; ".join(reasons)))
        return
    # characteristic vectors ---------------------------------------------------------------
    wvec: dict[str, tuple[bool, ...]] = {}
    for iv in blk.iter_vars:
        wvec[iv.var.name] = tuple(any(v is iv.var for idx in bind[o].indices for v in free_vars(idx)) for o in names)
    loads = {o.name: None for o in intrin.operands}
    sem = intrin._ir()

    def grab(n: Any) -> None:
        if isinstance(n, BufferLoad) and n.buffer.name in loads:
            loads[n.buffer.name] = n

    post_order_visit(sem.value, grab)
    loads[intrin.output.name] = BufferLoad(sem.store.buffer, sem.store.indices)
    ivars = {
        it.name: next(iv.var for iv in sem.block.iter_vars if iv.var.name == "v_" + it.name) for it in intrin.iterators
    }
    pvec = {
        it.name: tuple(any(v is ivars[it.name] for idx in loads[o].indices for v in free_vars(idx)) for o in names)
        for it in intrin.iterators
    }
    report.vectors.append(
        f"{label}: intrinsic "
        + ", ".join(
            f"{t} {_KIND[it.kind]} {_vec_text(pvec[t], names)}" for t, it in ((i.name, i) for i in intrin.iterators)
        )
        + "; workload "
        + ", ".join(
            f"{iv.var.name} {_KIND.get(iv.iter_type, 'opaque')} {_vec_text(wvec[iv.var.name], names)}"
            for iv in blk.iter_vars
        )
    )
    # extents ------------------------------------------------------------------------------
    extents: dict[str, int] = {}
    for iv in blk.iter_vars:
        lo, ext = _int(iv.dom.min), _int(iv.dom.extent)
        if lo != 0 or ext is None:
            report.infeasible.append(
                Rejection(
                    label,
                    f"block {blk.name}'s iterator {iv.var.name} has domain {iv.dom}; the matcher needs [0, constant)",
                )
            )
            return
        extents[iv.var.name] = ext
        if iv.iter_type not in _KIND:
            report.infeasible.append(
                Rejection(
                    label, f"block {blk.name}'s iterator {iv.var.name} is {iv.iter_type}, neither spatial nor reduce"
                )
            )
            return
    # candidates per intrinsic iterator ------------------------------------------------------
    choices: list[list[tuple[str, ...]]] = []
    for it in intrin.iterators:
        cands = [iv.var.name for iv in blk.iter_vars if wvec[iv.var.name] == pvec[it.name] and iv.iter_type == it.kind]
        if not cands:
            same_vec = [iv.var.name for iv in blk.iter_vars if wvec[iv.var.name] == pvec[it.name]]
            have = "; ".join(
                f"{iv.var.name} ({_KIND.get(iv.iter_type, '?')}) indexes {_vec_text(wvec[iv.var.name], names)}"
                for iv in blk.iter_vars
            )
            off = [n for n, b in zip(names, pvec[it.name], strict=True) if not b]
            why = (
                f"no workload iterator plays the role of {it.name}: it is a {_KIND[it.kind]} iterator that indexes "
                f"{_vec_text(pvec[it.name], names)}"
                + (f" but not {', '.join(off)}" if off else "")
                + (f" (iterators {', '.join(same_vec)} have that vector but the wrong kind)" if same_vec else "")
                + "".join(
                    f"; {iv.var.name} has the kind but also indexes "
                    + ", ".join(
                        n for n, a, b in zip(names, wvec[iv.var.name], pvec[it.name], strict=True) if a and not b
                    )
                    + f", which {it.name} must not index, so it cannot play {it.name}"
                    for iv in blk.iter_vars
                    if iv.iter_type == it.kind
                    and all(a or not b for a, b in zip(wvec[iv.var.name], pvec[it.name], strict=True))
                    and wvec[iv.var.name] != pvec[it.name]
                )
                + f"; block {blk.name}'s iterators: {have}"
            )
            report.infeasible.append(Rejection(label, why))
            return
        opts = [tuple(cands)] if len(cands) == 1 else [tuple(cands)] + [(c,) for c in cands]
        choices.append(opts)
    for combo in itertools.product(*choices):
        used = [w for ws in combo for w in ws]
        if len(set(used)) != len(used):
            continue
        iters = tuple(
            IterMapping(
                it.name,
                _KIND[it.kind],
                it.extent,
                ws,
                _prod(extents[w] for w in ws),
            )
            for it, ws in zip(intrin.iterators, combo, strict=True)
        )
        m = _plan(func, realize, blk, intrin, bind, iters, extents, label)
        if isinstance(m, Rejection):
            report.infeasible.append(m)
        else:
            report.feasible.append(m)


def fused_index(names: tuple[str, ...], extents: dict[str, int]) -> str:
    """The row-major index of fused iterators, outer first, as text: ``rh * 21 + rw * 3 + rc``."""
    terms, stride = [], 1
    for w in reversed(names):
        terms.append(w if stride == 1 else f"{w} * {stride}")
        stride *= extents[w]
    return " + ".join(reversed(terms))


def _prod(xs: Any) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _plan(
    func: PrimFunc,
    realize: BlockRealize,
    blk: Block,
    intrin: Intrinsic,
    bind: dict[str, BufferLoad],
    iters: tuple[IterMapping, ...],
    extents: dict[str, int],
    label: str,
) -> Mapping | Rejection:
    mapped = {w: m for m in iters for w in m.workload_iters}
    var_of = {iv.var.name: iv.var for iv in blk.iter_vars}
    order = [iv.var.name for iv in blk.iter_vars]
    padded = {w for m in iters for w in m.workload_iters if m.padding}
    sem = intrin._ir()
    plans = []
    for o in intrin.operands:
        load = bind[o.name]
        # the intrinsic's indices of this operand
        pload = _intrin_load(sem, o)
        by_iter = {m.intrin_iter: m for m in iters}
        layout = "strided_rows" if o.scope == intrin.tile_scope else o.layout  # a unit loads it by rows
        if all(isinstance(e, Var) and e.name.startswith("v_") for e in pload.indices):
            pits = [e.name[2:] for e in pload.indices]
            dims = [by_iter[t] for t in pits]
            plan = _operand_plan(blk, o, load, dims, mapped, padded, var_of, order, extents, layout)
        else:  # a packed layout such as AMX's B[k // 4, j, k % 4]
            plan = _packed_plan(blk, o, load, pload.indices, by_iter, var_of, order, extents, layout)
        plans.append(plan)
    notes = []
    if any(m.fused for m in iters):
        notes.append(
            "fusing several workload iterators onto one intrinsic iterator stages every operand they index "
            "through a reindexed (im2col-like) copy"
        )
    return Mapping(
        intrin=intrin.name,
        block=blk.name,
        binding=tuple((o.name, bind[o.name].buffer.name) for o in intrin.operands),
        iterators=iters,
        outer=tuple(w for w in order if w not in mapped),
        operands=tuple(plans),
        block_iters=tuple((iv.var.name, extents[iv.var.name], _KIND[iv.iter_type]) for iv in blk.iter_vars),
        has_init=blk.init is not None,
        notes=tuple(notes),
    )


def _intrin_load(sem: Any, o: Operand) -> BufferLoad:
    if o.is_written:
        return BufferLoad(sem.store.buffer, sem.store.indices)
    found: list[BufferLoad] = []
    post_order_visit(
        sem.value, lambda n: found.append(n) if isinstance(n, BufferLoad) and n.buffer.name == o.name else None
    )
    return found[0]


def _packed_plan(
    blk: Block,
    o: Operand,
    load: BufferLoad,
    indices: tuple[PrimExpr, ...],  # the intrinsic's index of each dimension of the operand
    by_iter: dict[str, IterMapping],
    var_of: dict[str, Var],
    order: list[str],
    extents: dict[str, int],
    layout: str,
) -> OperandPlan:
    """An operand the intrinsic reads in a packed layout (an index is not one iterator, as AMX's
    ``B[k // 4, j, k % 4]``) is always staged: reindexed, then laid out as the tiles' indices along
    the spatial iterators, followed by the intrinsic's own indices, with each spatial iterator its
    position in the tile and each reduce iterator whole (a unit walks it in steps). For a GEMM's
    ``Y[k, j]`` and AMX's B that is ``(j // 16, k // 4, j % 16, k % 4)``: each 16-column panel's
    tiles follow each other, 64 bytes a row."""
    buf = load.buffer
    used = [n for n in order if any(v is var_of[n] for idx in load.indices for v in free_vars(idx))]
    names = list(dict.fromkeys(v.name[2:] for e in indices for v in free_vars(e)))
    dims = [by_iter[n] for n in names]
    spatial = [m for m in dims if m.kind == "spatial"]

    def par(m: IterMapping) -> str:
        e = fused_index(m.workload_iters, extents)
        return f"({e})" if m.fused else e

    texts = {f"v_{m.intrin_iter}": f"{par(m)} % {m.intrin_extent}" for m in spatial}
    texts.update({f"v_{m.intrin_iter}": par(m) for m in dims if m.kind != "spatial"})
    bounds = {f"v_{m.intrin_iter}": m.intrin_extent if m.kind == "spatial" else m.padded_extent for m in dims}
    fused_away = {w for m in dims for w in m.workload_iters}
    rest = [n for n in used if n not in fused_away]
    new = rest + [f"{par(m)} // {m.intrin_extent}" for m in spatial] + [_index_text(e, texts) for e in indices]
    pshape = (
        [extents[n] for n in rest]
        + [m.padded_extent // m.intrin_extent for m in spatial]
        + [_index_extent(e, bounds) for e in indices]
    )
    imap = f"lambda {', '.join(used)}: ({', '.join(new)}{',' if len(new) == 1 else ''})"
    packed = ", ".join(_index_text(e, {k: k[2:] for k in texts}) for e in indices)
    return OperandPlan(
        operand=o.name,
        buffer=buf.name,
        access=_access_of(blk, buf, o.is_written),
        indices=_text(load),
        layout=layout,
        in_place=False,
        why=f"the intrinsic reads {o.name} packed as {o.name}[{packed}]",
        index_map=imap,
        packed_shape=tuple(pshape),
        reindex_dims=tuple(used),
        scope=o.scope,
        copied=_prod(pshape),
    )


def _index_text(e: PrimExpr, names: dict[str, str]) -> str:
    """An intrinsic index as lambda text, its iterators ``v_<name>`` written as ``names`` gives."""
    if isinstance(e, Var):
        return names[e.name]
    if isinstance(e, IntImm):
        return str(e.value)
    ops = {FloorDiv: "//", FloorMod: "%", Add: "+", Sub: "-", Mul: "*"}
    a, b = (_index_text(x, names) for x in (e.a, e.b))
    wrap = (lambda t: t) if isinstance(e, Add | Sub) else (lambda t: t if t.isidentifier() or t.isdigit() else f"({t})")
    return f"{wrap(a)} {ops[type(e)]} {wrap(b)}"


def _index_extent(e: PrimExpr, bounds: dict[str, int]) -> int:
    """How many values an intrinsic index takes with each iterator ``v`` over ``[0, bounds[v])``."""

    def hi(x: PrimExpr) -> int:
        if isinstance(x, Var):
            return bounds[x.name] - 1
        if isinstance(x, IntImm):
            return x.value
        if isinstance(x, FloorDiv):
            return hi(x.a) // x.b.value
        if isinstance(x, FloorMod):
            return min(hi(x.a), x.b.value - 1)
        if isinstance(x, Mul):
            return hi(x.a) * hi(x.b)
        return hi(x.a) + hi(x.b) if isinstance(x, Add) else hi(x.a)

    return hi(e) + 1


def _operand_plan(
    blk: Block,
    o: Operand,
    load: BufferLoad,
    dims: list[IterMapping],  # the mapping of each intrinsic dimension's iterator
    mapped: dict[str, IterMapping],
    padded: set[str],
    var_of: dict[str, Var],
    order: list[str],
    extents: dict[str, int],
    layout: str,
) -> OperandPlan:
    buf = load.buffer
    access = _access_of(blk, buf, o.is_written)
    text = _text(load)
    used = [n for n in order if any(v is var_of[n] for idx in load.indices for v in free_vars(idx))]
    shape = [_int(s) for s in buf.shape]
    base = dict(operand=o.name, buffer=buf.name, access=access, indices=text, layout=layout, scope=o.scope)

    def transform(why: str) -> OperandPlan:
        ext = {n: extents[n] for n in used}
        fused_away = {w for m in dims for w in m.workload_iters}
        rest = [n for n in used if n not in fused_away]

        def expr(m: IterMapping) -> str:
            return fused_index(m.workload_iters, extents)

        def par(m: IterMapping) -> str:
            e = expr(m)
            return f"({e})" if m.fused else e

        tile = [expr(m) for m in dims]
        if layout == "contiguous":
            # panels: every tile dimension split into (tile index, position in the tile), the tile
            # indices first in the intrinsic's dimension order, so a tile is one contiguous block
            # and the tiles along the last (reduction) dimension follow each other in memory (the
            # layout [k // 4, j, k % 4] would put consecutive tiles of a panel 4 KiB apart for
            # 1024 columns, where they collide in the L1 cache)
            outer = [f"{par(m)} // {m.intrin_extent}" for m in dims]
            inner = [f"{par(m)} % {m.intrin_extent}" for m in dims]
            new = rest + outer + inner
            pshape = (
                [ext[n] for n in rest]
                + [m.padded_extent // m.intrin_extent for m in dims]
                + [m.intrin_extent for m in dims]
            )
        else:
            new = rest + tile
            pshape = [ext[n] for n in rest] + [m.padded_extent for m in dims]
        imap = f"lambda {', '.join(used)}: ({', '.join(new)}{',' if len(new) == 1 else ''})"
        return OperandPlan(
            **base,
            in_place=False,
            why=why,
            index_map=imap,
            packed_shape=tuple(pshape),
            reindex_dims=tuple(used),
            copied=_prod(pshape),
        )

    if layout == "any":
        return OperandPlan(**base, in_place=True, why="the intrinsic puts no layout constraint on it")
    if any(m.fused for m in dims):
        return transform("its tile spans fused workload iterators")
    if None in shape:
        return transform(f"buffer {buf.name} has a symbolic shape")
    pos: list[int] = []
    plain = True
    for m in dims:
        w = m.workload_iters[0]
        var = var_of[w]
        where = [p for p, idx in enumerate(load.indices) if any(v is var for v in free_vars(idx))]
        if len(where) != 1:
            return transform(f"iterator {w} appears in {len(where)} dimensions of {buf.name}")
        p = where[0]
        idx = load.indices[p]
        others = [v.name for v in free_vars(idx) if v.name in mapped and v is not var]
        if others:
            return transform(f"dimension {p} of {buf.name} mixes mapped iterators {w} and {', '.join(others)}")
        step = simplify(substitute(idx, {var: var + 1}) - idx)
        if _int(step) != 1:
            return transform(f"iterator {w} steps dimension {p} of {buf.name} by {step}, not 1")
        if not (isinstance(idx, Var) and idx is var):
            plain = False
        pos.append(p)
    pad_dims = [i for i in load.indices if any(v.name in padded for v in free_vars(i))]
    if non_plain_padded_index(load.indices, lambda v: v.name in padded) is not None or (
        pad_dims and o.is_written and not all(isinstance(i, Var | IntImm) for i in load.indices)
    ):
        return transform(f"padding (pad_einsum) needs each padded iterator to index {buf.name} alone")
    # the buffer as the tile sees it (padding grows the dimensions of padded plain iterators)
    eff = list(shape)
    for p, idx in enumerate(load.indices):
        if isinstance(idx, Var) and idx.name in mapped and mapped[idx.name].padding:
            eff[p] = mapped[idx.name].padded_extent
    copied = _prod(eff) if pad_dims else 0  # pad_einsum's padded copy
    r, ndim = len(dims), len(eff)
    strides = _strides(eff)
    if layout == "contiguous":
        want = list(range(ndim - r, ndim))
        if pos != want:
            rows = ", ".join(f"{m.intrin_iter}->{buf.name} dim {p}" for m, p in zip(dims, pos, strict=True))
            return transform(
                f"the intrinsic reads its {list(o.shape)} tile as one contiguous block, but in {buf.name} "
                f"(shape {shape}) the tile's dimensions fall on {rows}: its rows are strided, not dense"
            )
        for d in range(1, r):
            if eff[pos[d]] != o.shape[d] and math.prod(o.shape[:d]) > 1:  # one row is dense at any extent
                return transform(
                    f"dimension {pos[d]} of {buf.name} has extent {eff[pos[d]]}, not the tile's {o.shape[d]}, "
                    f"so the {list(o.shape)} tile's rows are strided"
                )
        if o.alignment > o.dtype.bytes:
            el = o.alignment // o.dtype.bytes
            step = o.shape[0] * strides[pos[0]]
            bad = [p for p in range(ndim) if p not in pos and strides[p] % el] + ([pos[0]] if step % el else [])
            if bad or not plain:
                return transform(
                    f"the intrinsic needs {o.alignment}-byte alignment, which the tile's offset in {buf.name} "
                    "does not guarantee"
                )
        return OperandPlan(
            **base,
            in_place=True,
            copied=copied,
            why=f"each {list(o.shape)} tile is a dense block of dims {pos} of {buf.name}",
        )
    # strided_rows: dense innermost dimension, increasing dimension order
    if pos != sorted(pos) or pos[-1] != ndim - 1:
        return transform(f"the intrinsic reads dense rows, but the tile's last dimension is not {buf.name}'s innermost")
    if r > 1:
        rs = strides[pos[-2]]
        if (isinstance(o.row_stride, int) and rs != o.row_stride) or rs % o.row_stride_multiple:
            return transform(f"{buf.name}'s row stride {rs} does not meet the intrinsic's row stride rule")
    return OperandPlan(**base, in_place=True, copied=copied, why=f"rows are dims {pos} of {buf.name}, innermost dense")
