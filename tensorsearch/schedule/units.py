"""Multi-instruction units (WMMA): finding a unit in a hardware's intrinsic sets and building the
statement sequence that computes a unit tile.

A block made by ``blockize`` is computed by a unit of an intrinsic set (e.g.
``wmma_16x16x16_f16f32`` of intrinsics/cuda-wmma-f16.yaml) when its inner block computes the
unit's ``compute`` semantics; :func:`unit_statement` builds the sequence (fragments, init, per
step the loads and the compute, then the store) or raises :class:`UnitError` saying why the tile
does not fit. ``tensorize`` checks a tile with it at schedule time (:func:`check_unit`) and the
CUDA lowering (``tensorsearch.codegen.cuda.lower_units``) expands the annotated blocks with it,
so both make exactly the same checks.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    PrimExpr,
    SeqStmt,
    Stmt,
    StringImm,
    Sub,
    Var,
    post_order_visit,
)
from ..target import Hardware, Intrinsic, IntrinsicSet, Unit
from ..target.intrinsics import CudaImpl

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
    dims: list[int]  # buffer dimension of each description dimension
    iters: list[str]  # intrinsic iterator of each description dimension


def unit_statement(outer: Block, unit: Unit, iset: IntrinsicSet) -> Stmt:
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
    pairs = [(d_store.buffer, w_store.buffer, d_store.indices)] + [
        (d.buffer, w.buffer, d.indices) for d, w in zip(d_loads, w_loads, strict=True)
    ]
    desc_params = {b: o for (_, b), o in zip(compute.desc_func().buffer_map, compute.operands, strict=True)}
    d_block = _single_block(compute.desc_func().body)
    if len(d_block.iter_vars) != len(compute.iterators):
        raise UnitError(f"the description of {compute.name} has {len(d_block.iter_vars)} block iterators")
    loop_iter = {iv.var: it.name for iv, it in zip(d_block.iter_vars, compute.iterators, strict=True)}
    extents = {it.name: it.extent for it in compute.iterators}
    kinds = {it.name: it.kind for it in compute.iterators}
    regions = {r.buffer: r for r in (*outer.reads, *outer.writes)}
    operands: dict[str, _Operand] = {}
    steps: dict[str, int] = {}
    for d_buf, w_buf, d_idx in pairs:
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
        dims = [k for k, e in enumerate(exts) if e != 1]
        iters = [loop_iter.get(i, None) if isinstance(i, Var) else None for i in d_idx]
        if None in iters or len(dims) > len(iters):
            raise UnitError(
                f"{where}: operand {op.name}'s region {exts} of {w_buf.name} does not fit its shape {list(op.shape)}"
            )
        # unit-extent intrinsic dimensions may be dropped too: align from the right
        dims = [k for k in range(len(exts))][len(exts) - len(iters) :] if len(dims) < len(iters) else dims
        for k, it in zip(dims, iters, strict=True):
            n, r = divmod(exts[k], extents[it])
            if r or (n != 1 and kinds[it] != "reduce"):
                kind = getattr(kinds[it], "value", kinds[it])
                raise UnitError(
                    f"{where}: iterator {it} (extent {extents[it]}, {kind}) covers {exts[k]} elements of "
                    f"{w_buf.name} dimension {k}; only a reduce iterator may cover a multiple"
                )
            if steps.setdefault(it, n) != n:
                raise UnitError(f"{where}: iterator {it} covers different extents in different operands")
        if dims[-1] != len(exts) - 1:
            raise UnitError(
                f"{where}: operand {op.name} needs unit-stride rows but uses {w_buf.name} dimension {dims[-1]}"
            )
        operands[op.name] = _Operand(w_buf, [r.min for r in region.region], dims, iters)
    reduce_steps = {it: n for it, n in steps.items() if n > 1}
    step_var = Var("unit_k", DataType("int", 32))

    def stride(o: _Operand) -> PrimExpr:
        """The operand's row stride (:func:`row_stride`; 1 for a single row)."""
        if len(o.dims) < 2:
            return _c(1)
        return row_stride(BufferLoad(o.buffer, tuple(o.starts)), o.dims[-2])

    def pointer(o: _Operand) -> PrimExpr:
        starts = list(o.starts)
        for k, it in zip(o.dims, o.iters, strict=True):
            if it in reduce_steps:
                starts[k] = starts[k] + step_var * extents[it]
        return address_of(BufferLoad(o.buffer, tuple(starts)))

    fragments = {
        op.name: f"{operands[op.name].buffer.name}_{op.scope.split('.')[-1]}"
        for op in compute.operands
        if op.scope not in MEMORY_SCOPES
    }
    stmts: list[Stmt] = []
    impl = compute.impl
    assert isinstance(impl, CudaImpl)
    for name, var in fragments.items():
        stmts.append(_verbatim(impl.declare(name, var)))

    def call(intr: Intrinsic, binding: dict[str, str]) -> Stmt:
        """``intr``'s template; binding maps its operands to compute operands."""
        args: list[PrimExpr] = [StringImm(f"{intr.set_name}/{intr.name}")]
        for op in intr.operands:
            src = binding[op.name]
            if op.scope in MEMORY_SCOPES:
                o = operands[src]
                args += [StringImm(op.name), pointer(o), StringImm(op.name + ".stride"), stride(o)]
            else:
                args += [StringImm(op.name), StringImm(fragments[src])]
        return Evaluate(Call(DataType("int", 32), "cuda.template", tuple(args)))

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
    if outer.init is not None:
        if unit.init is None:
            raise UnitError(f"{where}: the block has an init but unit {unit.name} has no init intrinsic")
        init = iset[unit.init]
        stmts.append(call(init, {fragment_operand(init): acc_name}))
    elif acc_name in loads:
        pass
    else:
        raise UnitError(f"{where}: the block has no init and unit {unit.name} cannot load accumulator {acc_name}")
    body: list[Stmt] = []
    for name, intr_name in loads.items():
        ld = iset[intr_name]
        binding = {o.name: name for o in ld.operands}
        (body if name != acc_name else stmts).append(call(ld, binding))
    body.append(call(compute, {o.name: o.name for o in compute.operands}))
    if len(reduce_steps) > 1:
        raise UnitError(f"{where}: only one reduce iterator may cover a multiple of its extent")
    if reduce_steps:
        (n,) = reduce_steps.values()
        stmts.append(For(step_var, _c(0), _c(n), ForKind.SERIAL, SeqStmt(tuple(body))))
    else:
        stmts.extend(body)
    if unit.store is None:
        raise UnitError(f"{where}: unit {unit.name} has no store intrinsic")
    st = iset[unit.store]
    stmts.append(call(st, {o.name: acc_name for o in st.operands}))
    return SeqStmt(tuple(stmts))


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
