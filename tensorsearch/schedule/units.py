"""Multi-instruction units (CUDA's WMMA, Intel's AMX): finding a unit in a hardware's intrinsic
sets and building the statement sequence that computes a unit tile.

A block made by ``blockize`` is computed by a unit of an intrinsic set (e.g.
``wmma_16x16x16_f16f32`` of intrinsics/cuda-wmma-f16.yaml) when its inner block computes the
unit's ``compute`` semantics; :func:`unit_statement` builds the sequence (fragments, init, per
step the loads and the compute, then the store) or raises :class:`UnitError` saying why the tile
does not fit. ``tensorize`` checks a tile with it at schedule time (:func:`check_unit`) and the
lowering expands the annotated blocks with it (``tensorsearch.lower.gpu.lower_units`` into
CUDA templates, ``tensorsearch.lower.units.lower_units`` into LLVM calls on a CPU's tile
registers), so both make exactly the same checks.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from .. import arith
from ..ir import (
    Block,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    DataType,
    Evaluate,
    FloatImm,
    For,
    ForKind,
    IntImm,
    IterType,
    PrimExpr,
    Range,
    SeqStmt,
    Stmt,
    StringImm,
    Sub,
    Var,
    free_vars,
    post_order_visit,
)
from ..target import Hardware, Intrinsic, IntrinsicSet, Unit
from ..target.intrinsics import CudaImpl, LLVMTileCall
from .blockize import relax_regions

MEMORY_SCOPES = ("global", "shared", "local")
UNIT_ATTR = "cuda_unit"
INTRINSIC_ATTR = "cuda_intrinsic"  # a block computed by one CUDA intrinsic on fragment buffers: "set/name"

__all__ = [
    "MEMORY_SCOPES",
    "INTRINSIC_ATTR",
    "UNIT_ATTR",
    "UnitError",
    "address_of",
    "check_unit",
    "const_value",
    "find_unit",
    "unit_of_compute",
    "row_stride",
    "touches_fragments",
    "UnitPlan",
    "plan_unit",
    "register_blocking",
    "tile_config",
    "unit_statement",
]


class UnitError(ValueError):
    """A unit tile that does not fit its unit, or a unit name the hardware does not offer."""


# ---------------------------------------------------------------------------------------------
# intrinsic lookup


def find_unit(name: str, hardware: Hardware) -> tuple[IntrinsicSet, Unit]:
    """(IntrinsicSet, Unit) for the unit ``name`` among the hardware's intrinsic sets."""
    for s in hardware.intrinsic_sets:
        for u in s.units:
            if u.name == name:
                return s, u
    offered = ", ".join(u.name for s in hardware.intrinsic_sets for u in s.units) or "(none)"
    raise UnitError(f"hardware {hardware.name} offers no unit {name!r}; its units: {offered}")


def unit_of_compute(intr: Intrinsic, hardware: Hardware | None) -> tuple[IntrinsicSet, Unit] | None:
    """(IntrinsicSet, Unit) of the first unit of the hardware's sets whose ``compute`` is ``intr``;
    None when there is none (or no hardware)."""
    for iset in hardware.intrinsic_sets if hardware is not None else ():
        for u in iset.units:
            if u.compute == intr.name:
                return iset, u
    return None


def touches_fragments(block: Block) -> bool:
    """Whether ``block`` reads or writes a buffer in a fragment scope (``wmma.*``): it is then one
    instruction of a unit (a load, fill, mma or store), not a whole unit tile."""
    return any(r.buffer.scope not in MEMORY_SCOPES for r in (*block.reads, *block.writes))


def check_unit(outer: Block, unit: Unit, iset: IntrinsicSet) -> None:
    """Raise :class:`UnitError` unless block ``outer`` can be computed by ``unit`` of ``iset``.

    These are exactly the checks ``lower_units`` makes (it builds the unit's statement sequence
    the same way), so a block that passes is lowered without error; ``tensorize`` calls this.
    """
    unit_statement(outer, unit, iset)


# ---------------------------------------------------------------------------------------------
# lower_units


def _loads_in_order(e: Any, out: list[BufferLoad]) -> None:
    if isinstance(e, BufferLoad):
        out.append(e)
        return
    for f in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, f)
        if isinstance(v, PrimExpr):
            _loads_in_order(v, out)


def _shape_of(e: Any) -> Any:
    """The operation structure of ``e``: node types, dtypes and constants, loads as their dtype."""
    if isinstance(e, BufferLoad):
        return ("load", str(e.dtype))
    if isinstance(e, (IntImm, FloatImm)):
        return (type(e).__name__, str(e.dtype), e.value)
    if isinstance(e, Cast):
        return ("cast", str(e.dtype), _shape_of(e.value))
    fields = [getattr(e, f) for f in getattr(e, "__dataclass_fields__", {})]
    return (
        type(e).__name__,
        str(getattr(e, "dtype", "")),
        tuple(_shape_of(v) for v in fields if isinstance(v, PrimExpr)),
    )


def _has_block(stmt: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(stmt, lambda n: found.append(True) if isinstance(n, Block) else None)
    return bool(found)


def _single_block(stmt: Stmt) -> Block:
    found: list[Block] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, Block) else None)
    found = [b for b in found if not _has_block(b.body)]
    if len(found) != 1:
        raise UnitError(f"a unit tile must hold exactly one inner block, found {[b.name for b in found]}")
    return found[0]


def _desc_store(intr: Intrinsic) -> BufferStore:
    blk = _single_block(intr.desc_func().body)
    if not isinstance(blk.body, BufferStore):
        raise UnitError(f"the description of intrinsic {intr.name} is not one store")
    return blk.body


def _c(value: int) -> IntImm:
    return IntImm(DataType("int", 32), value)


def const_value(e: PrimExpr) -> int | None:
    e = arith.simplify(e)
    return e.value if isinstance(e, IntImm) else None


@dataclass
class _Operand:
    buffer: Buffer
    starts: list[PrimExpr]  # per buffer dimension
    shape: tuple[int, ...]  # the operand's
    dims: list[int]  # the buffer dimension of each dimension of the operand's shape
    step_dim: int | None  # the buffer dimension the unit's steps walk, if any
    step: int  # elements of that dimension one step covers


@dataclass
class UnitPlan:
    """What a unit tile runs, checked: the compute intrinsic's operands found in the tile's
    buffers, ``steps`` steps along the reduction, and the member calls in order -- ``prologue``
    (init or accumulator load), ``body`` (per step: the input loads, the compute), ``epilogue``
    (the store). Each call is ``(intrinsic, binding)``, binding each of its operands to the compute
    operand it holds. ``fragments``: the compute operands held in registers, in operand order.
    A register-blocked tile (tile registers only) repeats the unit along spatial iterators:
    ``repeats`` counts the unit tiles along each, ``axes`` says which of them index each operand,
    and ``instances`` holds each operand tile's starts per repeat key (see :meth:`keys`)."""

    where: str
    compute: Intrinsic
    operands: dict[str, _Operand]
    steps: int
    step_var: Var
    fragments: tuple[str, ...]
    prologue: list[tuple[Intrinsic, dict[str, str]]]
    body: list[tuple[Intrinsic, dict[str, str]]]
    epilogue: list[tuple[Intrinsic, dict[str, str]]]
    repeats: tuple[int, ...] = ()  # unit tiles along each repeated spatial iterator (register blocking)
    axes: dict[str, frozenset[int]] = field(default_factory=dict)  # the repeated iterators indexing each operand
    instances: dict[str, dict[tuple[int, ...], list[PrimExpr]]] = field(default_factory=dict)  # starts per key

    def keys(self, names: list[str] | tuple[str, ...] | set[str]) -> list[tuple[int, ...]]:
        """The repeat keys of a call touching compute operands ``names``: one per combination of
        the repeated iterators that index any of them (0 along the others), in row-major order."""
        used = set().union(*(self.axes.get(n, frozenset()) for n in names))
        return [
            tuple(k) for k in itertools.product(*(range(n if i in used else 1) for i, n in enumerate(self.repeats)))
        ]

    def key_of(self, name: str, key: tuple[int, ...]) -> tuple[int, ...]:
        """``key`` projected onto the repeated iterators that index operand ``name``."""
        own = self.axes.get(name, frozenset())
        return tuple(k if i in own else 0 for i, k in enumerate(key))

    def pointer(self, name: str, key: tuple[int, ...] = ()) -> PrimExpr:
        """The address of compute operand ``name``'s tile (its repeat ``key``) at the current step."""
        o = self.operands[name]
        starts = list(self.instances[name][self.key_of(name, key)] if key else o.starts)
        if o.step_dim is not None and self.steps > 1:
            starts[o.step_dim] = starts[o.step_dim] + self.step_var * o.step
        return address_of(BufferLoad(o.buffer, tuple(starts)))

    def stride(self, name: str) -> PrimExpr:
        """Operand ``name``'s row stride as an address difference (:func:`row_stride`); 1 for one row."""
        o = self.operands[name]
        if len(o.dims) < 2:
            return _c(1)
        return row_stride(BufferLoad(o.buffer, tuple(o.starts)), o.dims[0])

    def last(self, name: str, key: tuple[int, ...] = ()) -> PrimExpr:
        """The address of the last element operand ``name``'s tiles (its repeat ``key``) cover, over every step."""
        o = self.operands[name]
        ends = list(self.instances[name][self.key_of(name, key)] if key else o.starts)
        for d, k in enumerate(o.dims):
            ends[k] = ends[k] + o.shape[d] * (self.steps if k == o.step_dim else 1) - 1
        return address_of(BufferLoad(o.buffer, tuple(ends)))


def _reduce_dims(d_idx: tuple[PrimExpr, ...], reduce_vars: set[Var]) -> set[int]:
    """The dimensions of an operand's description access whose index involves a reduce iterator."""
    return {d for d, e in enumerate(d_idx) if any(v in reduce_vars for v in free_vars(e))}


def _operand_dims(
    where: str, op: Any, buf: Buffer, exts: list[int], reducible: set[int]
) -> tuple[list[int], int | None, int]:
    """(buffer dimension of each operand dimension, the stepped buffer dimension, the steps) of the
    region ``exts`` of ``buf`` holding operand ``op``: its dimensions other than 1 are the operand's
    (aligned from the right where the operand has dimensions of 1); each covers the operand's
    extent once, or several times along one dimension indexed by a reduce iterator (the steps)."""
    shape = list(op.shape)
    nonunit = [k for k, e in enumerate(exts) if e != 1]
    dims = nonunit if len(nonunit) == len(shape) else list(range(len(exts) - len(shape), len(exts)))
    fits = len(dims) == len(shape) and min(dims, default=0) >= 0 and set(nonunit) <= set(dims)
    if not fits or any(exts[k] < shape[d] for d, k in enumerate(dims)):
        raise UnitError(f"{where}: operand {op.name}'s region {exts} of {buf.name} does not fit its shape {shape}")
    step_dim, steps = None, 1
    for d, k in enumerate(dims):
        n, r = divmod(exts[k], shape[d])
        if r or (n != 1 and d not in reducible):
            raise UnitError(
                f"{where}: operand {op.name} (shape {shape}) covers {exts[k]} elements of {buf.name} dimension {k}; "
                "only a dimension indexed by a reduce iterator may cover a multiple of the operand's extent"
            )
        if n != 1:
            if step_dim is not None:
                raise UnitError(f"{where}: operand {op.name} steps along two dimensions of {buf.name}")
            step_dim, steps = k, n
    if len(shape) > 1 and dims[-1] != len(exts) - 1:
        raise UnitError(f"{where}: operand {op.name} needs unit-stride rows but uses {buf.name} dimension {dims[-1]}")
    full = [int(e.value) if isinstance(e, IntImm) else None for e in buf.shape]
    inner = dims[1:]
    if len(shape) > 2 and (inner != list(range(dims[1], len(exts))) or any(exts[k] != full[k] for k in inner[1:])):
        raise UnitError(
            f"{where}: a row of operand {op.name} (shape {shape}) must be dense in {buf.name}: "
            f"dimensions {inner[1:]} must be whole and innermost"
        )
    return dims, step_dim, steps


def plan_unit(outer: Block, unit: Unit, iset: IntrinsicSet) -> UnitPlan:
    """The checked :class:`UnitPlan` of block ``outer`` computed by ``unit`` (UnitError if it does not fit)."""
    compute: Intrinsic = iset[unit.compute]
    where = f"block {outer.name} (unit {unit.name})"
    inner = _single_block(outer.body)
    if not isinstance(inner.body, BufferStore):
        raise UnitError(f"{where}: the inner block {inner.name} is not one store")
    d_store, w_store = _desc_store(compute), inner.body
    if _shape_of(d_store.value) != _shape_of(w_store.value):
        raise UnitError(
            f"{where}: the inner block {inner.name} does not compute the semantics of {compute.name} "
            f"({compute.semantics}): operations, casts or dtypes differ"
        )
    d_loads: list[BufferLoad] = []
    w_loads: list[BufferLoad] = []
    _loads_in_order(d_store.value, d_loads)
    _loads_in_order(w_store.value, w_loads)
    pairs = [(d_store.buffer, w_store.buffer, d_store.indices, w_store.indices)] + [
        (d.buffer, w.buffer, d.indices, w.indices) for d, w in zip(d_loads, w_loads, strict=True)
    ]
    desc_params = {b: o for (_, b), o in zip(compute.desc_func().buffer_map, compute.operands, strict=True)}
    d_block = _single_block(compute.desc_func().body)
    if len(d_block.iter_vars) != len(compute.iterators):
        raise UnitError(f"the description of {compute.name} has {len(d_block.iter_vars)} block iterators")
    reduce_vars = {iv.var for iv, it in zip(d_block.iter_vars, compute.iterators, strict=True) if it.kind == "reduce"}
    w_vars: dict[str, frozenset[Var]] = {}  # the inner block's iterators indexing each operand
    for d_buf, _, _, w_idx in pairs:
        name = desc_params[d_buf].name
        w_vars[name] = w_vars.get(name, frozenset()) | {v for e in w_idx for v in free_vars(e)}
    repeated = _repeated_iterators(inner, compute, w_vars) if iset.tiles is not None else []
    regions = (
        _sub_tile_regions(inner, repeated, (0,) * len(repeated))
        if repeated
        else {r.buffer: r for r in (*outer.reads, *outer.writes)}
    )
    operands: dict[str, _Operand] = {}
    stepping: dict[str, int] = {}
    for d_buf, w_buf, d_idx, _ in pairs:
        op = desc_params[d_buf]
        if op.name in operands:
            continue
        if w_buf.dtype != op.dtype:
            raise UnitError(
                f"{where}: operand {op.name} is buffer {w_buf.name} of {w_buf.dtype}, the unit reads {op.dtype}"
            )
        region = regions.get(w_buf)
        if region is None:
            raise UnitError(
                f"{where}: operand {op.name} (buffer {w_buf.name}) has no region in the block's reads/writes"
            )
        exts = [const_value(r.extent) for r in region.region]
        if any(e is None for e in exts):
            raise UnitError(f"{where}: operand {op.name}'s region of {w_buf.name} has a non-constant extent")
        reducible = _reduce_dims(d_idx, reduce_vars)
        dims, step_dim, n = _operand_dims(where, op, w_buf, exts, reducible)
        step = op.shape[dims.index(step_dim)] if step_dim is not None else 0
        operands[op.name] = _Operand(w_buf, [r.min for r in region.region], op.shape, dims, step_dim, step)
        if reducible:
            stepping[op.name] = n
    if len(set(stepping.values())) > 1:
        covered = ", ".join(f"{name} {n}" for name, n in stepping.items())
        raise UnitError(f"{where}: the operands the reduction walks cover different numbers of steps ({covered})")
    steps = next(iter(stepping.values()), 1)
    fragments = tuple(o.name for o in compute.operands if o.scope not in MEMORY_SCOPES)
    prologue, body, epilogue = _member_calls(where, outer, unit, iset, compute)
    plan = UnitPlan(
        where, compute, operands, steps, Var("unit_k", DataType("int", 32)), fragments, prologue, body, epilogue
    )
    if repeated:
        _add_repeats(plan, inner, repeated, w_vars)
    return plan


def _repeated_iterators(
    inner: Block, compute: Intrinsic, w_vars: dict[str, frozenset[Var]]
) -> list[tuple[Var, int, int]]:
    """The inner block's iterators that walk a spatial iterator of the compute over several of its
    extents, as ``(var, unit tiles, the compute's extent)``: a register-blocked tile (two A tiles
    by two B tiles make four C tiles). An iterator is matched to the compute's by kind and by the
    operands it indexes (``w_vars``: the inner block's iterators indexing each operand); [] where
    that leaves any doubt (the plain checks then apply)."""
    indexed = _operand_iterators(compute)
    desc = {
        (frozenset(op for op, its in indexed.items() if it.name in its), IterType(it.kind)): it.extent
        for it in compute.iterators
    }
    if len(desc) != len(compute.iterators):
        return []
    out = []
    for iv in inner.iter_vars:
        ext = const_value(iv.dom.extent)
        if ext is None or ext == 1:
            continue
        e = desc.get((frozenset(op for op, vs in w_vars.items() if iv.var in vs), IterType(iv.iter_type)))
        if e is None:
            return []
        if iv.iter_type == IterType.SPATIAL and ext != e:
            if ext % e:
                return []
            out.append((iv.var, ext // e, e))
    return out


def _sub_tile_regions(inner: Block, repeated: list[tuple[Var, int, int]], key: tuple[int, ...]) -> dict:
    """The inner block's regions over the one unit tile ``key`` picks along the repeated iterators."""
    dom = {iv.var: Range(iv.dom.min, iv.dom.extent) for iv in inner.iter_vars}
    for (var, _, e), k in zip(repeated, key, strict=True):
        dom[var] = Range(arith.simplify(dom[var].min + k * e), _c(e))
    return {r.buffer: r for r in relax_regions((*inner.reads, *inner.writes), dom)}


def _add_repeats(
    plan: UnitPlan, inner: Block, repeated: list[tuple[Var, int, int]], w_vars: dict[str, frozenset[Var]]
) -> None:
    """Record on ``plan`` the repeated iterators, which of them index each operand, and the starts of
    each operand's tile per repeat key."""
    plan.repeats = tuple(n for _, n, _ in repeated)
    for name, vs in w_vars.items():
        plan.axes[name] = frozenset(i for i, (var, _, _) in enumerate(repeated) if var in vs)
    for key in plan.keys(list(plan.operands)):
        regions = _sub_tile_regions(inner, repeated, key)
        for name, o in plan.operands.items():
            plan.instances.setdefault(name, {}).setdefault(
                plan.key_of(name, key), [r.min for r in regions[o.buffer].region]
            )


def _member_calls(
    where: str, outer: Block, unit: Unit, iset: IntrinsicSet, compute: Intrinsic
) -> tuple[list, list, list]:
    """The unit's member calls: (prologue, body per step, epilogue) as in :class:`UnitPlan`."""

    def fragment_operand(intr: Intrinsic) -> str:
        frag = [o.name for o in intr.operands if o.scope not in MEMORY_SCOPES]
        if len(frag) != 1:
            raise UnitError(f"{where}: unit member {intr.name} must have exactly one fragment operand")
        return frag[0]

    loads = dict(unit.loads)
    acc = [o.name for o in compute.operands if o.role in ("accumulator", "output")]
    if len(acc) != 1:
        raise UnitError(f"{where}: the compute intrinsic {compute.name} needs exactly one accumulator operand")
    (acc_name,) = acc
    prologue: list[tuple[Intrinsic, dict[str, str]]] = []
    if outer.init is not None:
        if unit.init is None:
            raise UnitError(f"{where}: the block has an init but unit {unit.name} has no init intrinsic")
        init = iset[unit.init]
        prologue.append((init, {fragment_operand(init): acc_name}))
    elif acc_name in loads:
        ld = iset[loads[acc_name]]
        prologue.append((ld, {o.name: acc_name for o in ld.operands}))
    else:
        raise UnitError(f"{where}: the block has no init and unit {unit.name} cannot load accumulator {acc_name}")
    body = [(iset[n], {o.name: name for o in iset[n].operands}) for name, n in loads.items() if name != acc_name]
    body.append((compute, {o.name: o.name for o in compute.operands}))
    if unit.store is None:
        raise UnitError(f"{where}: unit {unit.name} has no store intrinsic")
    st = iset[unit.store]
    return prologue, body, [(st, {o.name: acc_name for o in st.operands})]


def _operand_iterators(compute: Intrinsic) -> dict[str, frozenset[str]]:
    """The iterators of ``compute`` that index each of its operands, from its description."""
    desc = compute.desc_func()
    store = _desc_store(compute)
    loads: list[BufferLoad] = []
    _loads_in_order(store.value, loads)
    names = {b: o.name for (_, b), o in zip(desc.buffer_map, compute.operands, strict=True)}
    by_var = {iv.var: it.name for iv, it in zip(_single_block(desc.body).iter_vars, compute.iterators, strict=True)}
    out: dict[str, frozenset[str]] = {}
    for buf, idx in [(store.buffer, store.indices)] + [(ld.buffer, ld.indices) for ld in loads]:
        used = {by_var[v] for e in idx for v in free_vars(e) if v in by_var}
        out[names[buf]] = out.get(names[buf], frozenset()) | used
    return out


def register_blocking(compute: Intrinsic, extents: dict[str, int]) -> dict[str, int]:
    """Unit tiles per spatial iterator of ``compute`` (a unit on tile registers) in one
    register-blocked tile: the most compute calls per tile load whose tiles fit the set's
    registers, each dividing ``extents`` (the padded workload extent of each spatial iterator).
    AMX's 8 registers: ``{"i": 2, "j": 2}`` -- two A and two B tiles a step make four C tiles, one
    load per multiply instead of two; ``{}`` where nothing larger than one tile fits."""
    frags = [o for o in compute.operands if o.scope not in MEMORY_SCOPES]
    indexed = _operand_iterators(compute)
    spatial = [it for it in compute.iterators if it.kind == IterType.SPATIAL and it.name in extents]
    best: tuple[float, int, dict[str, int]] = (0.0, 0, {})
    for counts in itertools.product(range(1, compute.tile_count + 1), repeat=len(spatial)):
        r = {it.name: n for it, n in zip(spatial, counts, strict=True)}
        if any(extents[it.name] % (n * it.extent) for it, n in zip(spatial, counts, strict=True)):
            continue
        tiles = {o.name: math.prod(r.get(it, 1) for it in indexed[o.name]) for o in frags}
        inputs = sum(n for name, n in tiles.items() if compute.operand(name).role == "input")
        if sum(tiles.values()) > compute.tile_count or not inputs:
            continue
        score = (math.prod(counts) / inputs, -sum(tiles.values()))
        if score > best[:2]:
            best = (*score, r)
    return {name: n for name, n in best[2].items() if n > 1}


def unit_statement(outer: Block, unit: Unit, iset: IntrinsicSet) -> Stmt:
    """The statements that compute block ``outer`` with ``unit``: CUDA templates for a CUDA set,
    LLVM tile calls for a CPU set with tile registers (UnitError when the tile does not fit)."""
    plan = plan_unit(outer, unit, iset)
    if iset.target == "cuda":
        return _cuda_statement(plan)
    return _tile_statement(plan, iset)


def _stepped(plan: UnitPlan, head: list[Stmt], body: list[Stmt], tail: list[Stmt]) -> Stmt:
    if plan.steps > 1:
        loop = For(plan.step_var, _c(0), _c(plan.steps), ForKind.SERIAL, SeqStmt(tuple(body)))
        return SeqStmt((*head, loop, *tail))
    return SeqStmt((*head, *body, *tail))


def _cuda_statement(plan: UnitPlan) -> Stmt:
    """CUDA: the fragment declarations, then each member's template (``cuda.template`` calls)."""
    fragments = {
        name: f"{plan.operands[name].buffer.name}_{plan.compute.operand(name).scope.split('.')[-1]}"
        for name in plan.fragments
    }
    impl = plan.compute.impl
    assert isinstance(impl, CudaImpl)
    decls = [_verbatim(impl.declare(name, var)) for name, var in fragments.items()]

    def call(intr: Intrinsic, binding: dict[str, str]) -> Stmt:
        args: list[PrimExpr] = [StringImm(f"{intr.set_name}/{intr.name}")]
        for op in intr.operands:
            src = binding[op.name]
            if op.scope in MEMORY_SCOPES:
                args += [StringImm(op.name), plan.pointer(src), StringImm(op.name + ".stride"), plan.stride(src)]
            else:
                args += [StringImm(op.name), StringImm(fragments[src])]
        return Evaluate(Call(DataType("int", 32), "cuda.template", tuple(args)))

    head = decls + [call(i, b) for i, b in plan.prologue]
    return _stepped(plan, head, [call(i, b) for i, b in plan.body], [call(i, b) for i, b in plan.epilogue])


def _tile_statement(plan: UnitPlan, iset: IntrinsicSet) -> Stmt:
    """CPU tile registers: touch the last element of each operand's tiles in memory (so buffer
    compaction keeps their whole region), load the tile configuration, then each member's LLVM
    call -- once per repeat key of the operands it touches, so a register-blocked tile loads two A
    and two B tiles a step and multiplies them into four C tiles."""
    tiles = iset.tiles
    if tiles is None:
        raise UnitError(f"{plan.where}: intrinsic set {iset.name} declares no tile registers (llvm.tiles)")
    registers = [(name, key) for name in plan.fragments for key in plan.keys([name])]
    if len(registers) > tiles.count:
        held = ", ".join(name + "".join(map(str, key)) for name, key in registers)
        raise UnitError(
            f"{plan.where}: the unit holds {len(registers)} tiles ({held}), "
            f"more than the {tiles.count} tile registers of {iset.name}"
        )
    number = {reg: k for k, reg in enumerate(registers)}
    handle = DataType("handle", 64)

    def call(intr: Intrinsic, binding: dict[str, str], key: tuple[int, ...]) -> Stmt:
        impl = intr.impl
        assert isinstance(impl, LLVMTileCall)
        args: list[PrimExpr] = []
        for kind, name in impl.args:
            src = binding[name]
            if kind == "tile":
                args.append(IntImm(DataType("int", 8), number[(src, plan.key_of(src, key))]))
            elif kind == "pointer":
                args.append(plan.pointer(src, key))
            else:
                args.append(Call(DataType("int", 64), "address_diff", _diff_args(plan.stride(src))))
        return Evaluate(Call(handle, impl.intrinsic, tuple(args)))

    def calls(members: list[tuple[Intrinsic, dict[str, str]]]) -> list[Stmt]:
        return [call(i, b, key) for i, b in members for key in plan.keys(set(b.values()))]

    touch = [Evaluate(plan.last(name, key)) for name in plan.operands for key in plan.keys([name])]
    config = tile_config(tiles.palette, [plan.compute.operand(name) for name, _ in registers])
    configure = Evaluate(Call(handle, tiles.configure, (Call(handle, "const_bytes", config),)))
    return _stepped(plan, [*touch, configure, *calls(plan.prologue)], calls(plan.body), calls(plan.epilogue))


def _diff_args(stride: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """``row_stride``'s two addresses (its ``Sub``), for the byte distance an LLVM call takes."""
    assert isinstance(stride, Sub), stride
    return stride.a, stride.b


def tile_config(palette: int, tiles: list[Any]) -> tuple[IntImm, ...]:
    """The 64 bytes ``ldtilecfg`` loads (the x86 tile configuration, the one CPU format there is):
    byte 0 the palette, bytes 16-47 each tile register's bytes per row (16 bits), bytes 48-63 its
    rows; register ``k`` holds operand ``tiles[k]`` (its first dimension the rows)."""
    cfg = [0] * 64
    cfg[0] = palette
    for k, op in enumerate(tiles):
        rows = op.shape[0] if len(op.shape) > 1 else 1
        colsb = op.numel // rows * op.dtype.bytes
        cfg[16 + 2 * k], cfg[17 + 2 * k] = colsb & 0xFF, colsb >> 8
        cfg[48 + k] = rows
    return tuple(IntImm(DataType("uint", 8), b) for b in cfg)


def address_of(load: BufferLoad) -> PrimExpr:
    """``&buf[i]``: a pointer to the element ``load`` reads."""
    return Call(DataType("handle", 64), "address_of", (load,))


def row_stride(first: BufferLoad, row_dim: int) -> PrimExpr:
    """The distance from ``first`` to the element one row (dimension ``row_dim``) further, as the
    difference of their addresses: it stays right when the buffer is compacted and flattened
    after this (the CUDA printer folds it to a number)."""
    row = list(first.indices)
    row[row_dim] = row[row_dim] + 1
    return Sub(address_of(BufferLoad(first.buffer, tuple(row))), address_of(first))


def _verbatim(text: str) -> Stmt:
    return Evaluate(Call(DataType("int", 32), "cuda.verbatim", (StringImm(text),)))
