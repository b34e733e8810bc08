"""``tensorize``: replace a blockized tile computation by a tensor intrinsic (paper section 4.1).

``sch.tensorize(block_or_loop, "vnni_dot_16x4_u8i8i32")`` takes an outer block as ``blockize``
makes it (its body: loops around one inner block) -- or a loop, which is blockized first -- and
checks that the tile computes exactly the intrinsic's semantics (``intrin.desc_func()``):

* the inner block's body is the description's statement up to a renaming of buffers and
  iterators: the same operations, casts, dtypes and constants, the accumulator pattern
  ``C[idx] = C[idx] + value``, no init inside the tile;
* every iterator of the tile maps one-to-one onto an intrinsic iterator of the same kind
  (spatial/reduce) and extent, the inner loops cover exactly those extents, no predicate;
* every operand's access is the description's access (dimension order kept, other dimensions
  fixed within the tile), so its region has the operand's shape; the buffer has the operand's
  dtype and scope;
* layout safety: an operand declared ``contiguous`` is a region that is one contiguous block of
  memory (VNNI's B[16, 4] int8 tile must be 64 consecutive bytes); an operand with ``row_stride``
  has unit-stride rows at an allowed stride.

Any violation raises :class:`TensorizeError` naming the block, the operand or iterator, the
dtype and the rule, and leaves the schedule unchanged.  On success the outer block keeps its
iterators, reads, writes and init; each operand region is bound to a one-dimensional matched
buffer ``<buffer>_<operand>`` and the body becomes the implementation read from ``intrin.impl``
(no intrinsic has Python code of its own)::

    C_C = T.match_buffer(C[vi, vj_o * 16:vj_o * 16 + 16], (16,), "int32")
    A_A = T.match_buffer(A[vi, vk_o * 4:vk_o * 4 + 4], (4,), "uint8")
    B_B = T.match_buffer(B[vj_o, vk_o, 0:16, 0:4], (64,), "int8")
    C_C[T.Ramp(0, 1, 16)] = T.call("llvm.x86.avx512.vpdpbusd.512", C_C[T.Ramp(0, 1, 16)],
        T.reinterpret(T.Broadcast(T.reinterpret(A_A[T.Ramp(0, 1, 4)], int32), 16), uint8x64),
        B_B[T.Ramp(0, 1, 64)])

``tensorsearch.lower.intrin.lower_intrin`` turns the tile vectors into vector accesses of the
source buffers, and the LLVM backend emits the call with the declared vector types.  The
interpreter cannot run the ``llvm.*`` call: check a tensorized program by building it.

The intrinsic is named by a string (stored in the trace) and looked up in the intrinsics
passed to ``tensorize`` before (an :class:`~tensorsearch.intrin.Intrinsic` object may be passed
too; it is remembered by name in this process) and then in every intrinsic set on
:func:`tensorsearch.intrin.search_path`.

**Units.** ``sch.tensorize(tile, "wmma_16x16x16_f16f32")`` names a multi-instruction unit
of an intrinsic set (``units`` in intrinsics/cuda-wmma-f16.yaml, or the AMX units of
intrinsics/x86-amx.yaml); naming the unit's compute intrinsic (``"wmma_mma_16x16x16_f16f32"``,
``"amx_tdpbusd_16x16x64"``) selects that unit too.  The tile is checked by
:func:`tensorsearch.schedule.units.check_unit`, the very checks the lowering makes (semantics,
dtypes, tile shapes, tile registers); a mismatch raises :class:`TensorizeError` and leaves the
schedule unchanged.  On success the block is annotated ``cuda_unit = <unit name>`` exactly as
``sch.annotate(tile, "cuda_unit", name)`` does (the name is historical: CPU units use it too),
and the CUDA generator or, for a CPU, ``tensorsearch.build`` lowers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import arith
from ..arith.region import contiguity_error, region_strides
from ..ir import (
    Block,
    BlockRealize,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    Call,
    Cast,
    DataType,
    FloatImm,
    For,
    IntImm,
    MatchBufferRegion,
    PrimExpr,
    Ramp,
    Range,
    Var,
    const,
    structural_equal,
    substitute,
)
from ..ir.functor import free_vars
from ..target import Hardware, Intrinsic, IntrinsicSet, Unit
from ..target.intrinsics import CudaImpl, LLVMImpl
from ..target.matcher import COMMUTATIVE
from .errors import InvalidArgument, ScheduleError
from .rv import BlockRV, LoopRV
from .state import ScheduleState, primitive
from .tree import replace
from .units import INTRINSIC_ATTR, UNIT_ATTR, UnitError, check_unit, find_unit, touches_fragments, unit_of_compute

__all__ = ["IntrinsicRef", "TensorizeError", "TensorizePrimitives"]


class TensorizeError(ScheduleError):
    """The tile does not compute the intrinsic's semantics, or its layout does not fit the intrinsic."""


# --------------------------------------------------------------------------------------------
# Naming intrinsics in traces


@dataclass(frozen=True)
class IntrinsicRef:
    """How a trace names an intrinsic: its name, its set and the digest of its definition.

    A replay resolves the name through the schedule's hardware and refuses a definition whose
    digest differs (the trace was made with another version of the intrinsic)."""

    name: str
    set_name: str = ""
    digest: str = ""


def _intrin_to_json(value: Any) -> Any:
    if isinstance(value, Intrinsic | IntrinsicRef):
        return {"name": value.name, "set": value.set_name, "digest": value.digest}
    return value


def _intrin_from_json(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return IntrinsicRef(value["name"], str(value.get("set", "")), str(value.get("digest", "")))
    return value


def _resolve(hardware: Hardware | None, intrin: str | IntrinsicRef) -> Intrinsic | tuple[IntrinsicSet, Unit]:
    """The intrinsic (or unit) ``intrin`` names, from the hardware the schedule was given."""
    name = intrin.name if isinstance(intrin, IntrinsicRef) else intrin
    if hardware is None:
        raise InvalidArgument(
            f"tensorize: intrinsic {name!r} is named, but the schedule has no hardware to look it up in; "
            "make it with Schedule(func, hardware=...) or pass the Intrinsic object"
        )
    found = [i for i in hardware.intrinsics if i.name == name]
    if not found:
        try:
            return find_unit(name, hardware)
        except UnitError:
            offered = [i.name for i in hardware.intrinsics] + [u.name for s in hardware.intrinsic_sets for u in s.units]
            raise InvalidArgument(
                f"tensorize: hardware {hardware.name} offers no intrinsic or unit {name!r}; "
                f"it offers: {', '.join(offered) or '(none)'}"
            ) from None
    intr = found[0]
    if isinstance(intrin, IntrinsicRef) and intrin.digest and intrin.digest != intr.digest:
        raise InvalidArgument(
            f"tensorize: the trace's intrinsic {name} (set {intrin.set_name}, digest {intrin.digest}) differs from "
            f"the one hardware {hardware.name} offers ({intr.source}, digest {intr.digest}): its definition changed"
        )
    return intr


# --------------------------------------------------------------------------------------------
# Matching the tile against the description


class _Mismatch(Exception):
    pass


class _Matcher:
    """Structural match of the tile's statement against the description's, binding buffers."""

    def __init__(self) -> None:
        self.buffers: dict[Buffer, Buffer] = {}  # description buffer -> workload buffer
        self.accesses: dict[Buffer, list[tuple[tuple[PrimExpr, ...], tuple[PrimExpr, ...]]]] = {}

    def fail(self, desc: PrimExpr, got: PrimExpr, why: str) -> _Mismatch:
        return _Mismatch(f"{why}: the intrinsic computes {desc} where the block computes {got}")

    def bind(self, d: Buffer, w: Buffer, d_idx: tuple[PrimExpr, ...], w_idx: tuple[PrimExpr, ...]) -> None:
        prev = self.buffers.get(d)
        if prev is not None and prev is not w:
            raise _Mismatch(
                f"operand {d.name} is read from two buffers ({prev.name} and {w.name}); it must be one buffer"
            )
        for other_d, other_w in self.buffers.items():
            if other_w is w and other_d is not d:
                raise _Mismatch(f"buffer {w.name} plays both operand {other_d.name} and operand {d.name}")
        self.buffers[d] = w
        self.accesses.setdefault(d, []).append((d_idx, w_idx))

    def expr(self, d: PrimExpr, w: PrimExpr) -> None:
        if isinstance(d, BufferLoad):
            if not isinstance(w, BufferLoad):
                raise self.fail(d, w, f"operand {d.buffer.name} must be read directly")
            self.bind(d.buffer, w.buffer, d.indices, w.indices)
            return
        if type(d) is not type(w):
            raise self.fail(d, w, f"the operation differs ({type(d).__name__} vs {type(w).__name__})")
        if isinstance(d, Cast):
            if d.dtype != w.dtype:
                raise self.fail(d, w, f"the cast differs (to {d.dtype} vs to {w.dtype})")
            self.expr(d.value, w.value)
            return
        if isinstance(d, IntImm | FloatImm):
            if d.dtype != w.dtype or d.value != w.value:
                raise self.fail(d, w, "the constant differs")
            return
        if hasattr(d, "a") and hasattr(d, "b"):
            if d.dtype != w.dtype:
                raise self.fail(d, w, f"the type differs ({d.dtype} vs {w.dtype})")
            self.expr(d.a, w.a)
            self.expr(d.b, w.b)
            return
        raise self.fail(d, w, f"unsupported expression {type(d).__name__} in the description")


def _is_zero(e: PrimExpr) -> bool:
    e = arith.simplify(e)
    return isinstance(e, IntImm) and e.value == 0


class TensorizePrimitives(ScheduleState):
    @primitive(to_json={"intrin": _intrin_to_json}, from_json={"intrin": _intrin_from_json})
    def tensorize(self, block_or_loop: BlockRV | LoopRV, intrin: str | Intrinsic | IntrinsicRef) -> None:
        """Replace the tile computed by ``block_or_loop`` by tensor intrinsic ``intrin`` (see module doc).

        ``block_or_loop`` is an outer block made by ``blockize`` (or ``tile_with_intrin``), or a
        loop, which is blockized first.  ``intrin`` is an :class:`~tensorsearch.target.Intrinsic`,
        or the name of an intrinsic or unit that the schedule's hardware offers; the trace
        records the name, the set and the digest of the definition
        (``{"name": ..., "set": ..., "digest": ...}``, which is accepted here too).
        """
        unit: tuple[IntrinsicSet, Unit] | None = None
        intrin = _intrin_from_json(intrin)  # the trace's JSON form, as ``as_python`` writes it
        if isinstance(intrin, Intrinsic):
            intr = intrin
        elif isinstance(intrin, str | IntrinsicRef):
            found = _resolve(self.hardware, intrin)
            if isinstance(found, tuple):
                unit = found
            else:
                intr = found
                self._record_arg("intrin", intr)  # the trace names its set and digest
        else:
            raise InvalidArgument(f"tensorize: intrin must be an intrinsic name or Intrinsic, got {intrin!r}")
        if isinstance(block_or_loop, LoopRV):
            block_rv = self.blockize(block_or_loop)
        elif isinstance(block_or_loop, BlockRV):
            block_rv = block_or_loop
        else:
            raise InvalidArgument(f"tensorize: expected a BlockRV or LoopRV, got {type(block_or_loop).__name__}")
        realize, loc = self._block_realize(block_rv)
        outer: Block = loc.node
        if unit is None and isinstance(intr.impl, CudaImpl) and touches_fragments(outer):
            # one CUDA instruction on fragment buffers (load, fill, mma, store)
            match_intrinsic(outer, intr, self._tensorize_error(outer, intr))
            self.annotate(block_rv, INTRINSIC_ATTR, f"{intr.set_name}/{intr.name}")
            return
        if unit is None and not isinstance(intr.impl, LLVMImpl):
            unit = unit_of_compute(intr, self.hardware)  # None: reported by _tensorized
        if unit is not None:
            iset, u = unit
            try:
                check_unit(outer, u, iset)
            except UnitError as e:
                msg = str(e).removeprefix(f"block {outer.name} (unit {u.name}): ")
                raise TensorizeError(
                    f"cannot tensorize block {outer.name} with unit {u.name}: {msg}",
                    block=outer.name,
                    fragment=self._fragment(outer),
                ) from None
            self.annotate(block_rv, UNIT_ATTR, u.name)
            return
        new_block = self._tensorized(outer, intr)
        self.func = replace(self.func, {id(realize): BlockRealize(realize.iter_values, realize.predicate, new_block)})

    def _tensorize_error(self, outer: Block, intr: Intrinsic) -> Callable[[str], TensorizeError]:
        def err(msg: str) -> TensorizeError:
            return TensorizeError(
                f"cannot tensorize block {outer.name} with {intr.name}: {msg}",
                block=outer.name,
                fragment=self._fragment(outer),
            )

        return err

    # ------------------------------------------------------------------------------------
    def _tensorized(self, outer: Block, intr: Intrinsic) -> Block:
        err = self._tensorize_error(outer, intr)
        if not isinstance(intr.impl, LLVMImpl):
            raise err(
                f"the intrinsic is implemented for target {intr.target} and is not the compute intrinsic of a "
                "unit; only LLVM vector intrinsics and units (or their compute intrinsics) can be tensorized"
            )
        regions = match_intrinsic(outer, intr, err)
        # The implementation.
        tiles: dict[str, Buffer] = {}
        match: list[MatchBufferRegion] = []
        for op in intr.operands:
            region = regions[op.name]
            tile = Buffer(f"{region.buffer.name}_{op.name}", (IntImm(_i32(), op.numel),), op.dtype, scope=op.scope)
            tiles[op.name] = tile
            match.append(MatchBufferRegion(tile, region))
        body = _impl_stmt(intr, tiles)
        return Block(
            outer.name,
            outer.iter_vars,
            outer.reads,
            outer.writes,
            body,
            outer.init,
            outer.alloc_buffers,
            (*outer.match_buffers, *match),
            outer.annotations,
        )


def match_intrinsic(outer: Block, intr: Intrinsic, err: Callable[[str], Exception]) -> dict[str, BufferRegion]:
    """The region of each of ``intr``'s operands in the tile ``outer`` computes (module doc), or
    ``err(reason)`` raised when the tile does not compute the intrinsic's semantics."""
    # The tile: loops down to one inner block.
    loops: list[For] = []
    node: Any = outer.body
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    if not isinstance(node, BlockRealize):
        raise err(
            f"its body must be loops around one inner block (as blockize makes it), found a {type(node).__name__}"
        )
    inner = node.block
    if inner.init is not None:
        raise err(f"the inner block {inner.name} has an init; blockize moves it to the outer block")
    if not _is_true(node.predicate):
        raise err(f"the inner block {inner.name} has the predicate {node.predicate}; the tile must be complete")
    if inner.match_buffers or inner.alloc_buffers:
        raise err(f"the inner block {inner.name} matches or allocates buffers")
    desc = intr.desc_block()
    d_store = desc.body
    w_store = inner.body
    if not isinstance(w_store, BufferStore):
        raise err(f"the inner block {inner.name} must be one store, found a {type(w_store).__name__}")
    assert isinstance(d_store, BufferStore)
    # the tile's commutative operations in every operand order (the description's `A[k] * B[i, k]`
    # against a tile that reads `B[...] * A[...]`, as the matcher's swapped bindings make them)
    first: str | None = None
    for value in _commuted(w_store.value):
        try:
            return _match_store(inner, loops, desc, intr, BufferStore(w_store.buffer, value, w_store.indices))
        except _TileMismatch as e:
            first = first or str(e)
    raise err(first)


class _TileMismatch(Exception):
    """One operand order of the tile does not compute the description (the reason)."""


def _commuted(value: PrimExpr, limit: int = 8) -> list[PrimExpr]:
    """``value`` first, then the same expression with the operands of its commutative operations
    (the matcher's: ``+ * min max``) swapped, at most ``limit`` orders."""
    if isinstance(value, Cast):
        return [Cast(value.dtype, v) for v in _commuted(value.value, limit)]
    if not isinstance(value, COMMUTATIVE):
        return [value]
    out: list[PrimExpr] = []
    for a in _commuted(value.a, limit):
        for b in _commuted(value.b, limit):
            out += [type(value)(a, b), type(value)(b, a)]
    unique: list[PrimExpr] = []
    for v in out:
        if not any(v is u or structural_equal(v, u) for u in unique):
            unique.append(v)
    return unique[:limit]


def _match_store(
    inner: Block, loops: list[For], desc: Block, intr: Intrinsic, w_store: BufferStore
) -> dict[str, BufferRegion]:
    """The regions of the intrinsic's operands when the tile's store ``w_store`` (one operand
    order) computes the description; raises :class:`_TileMismatch` otherwise."""
    m = _match_statement(inner, desc, intr, w_store)
    by_op = _operand_buffers(m, inner, intr)
    # Iterators: the tile's iterators map one-to-one onto the intrinsic's; those of extent 1 on
    # either side are fixed at their start (blockize drops such a loop of the tile).
    accesses = _fix_unit_iterators(m.accesses, desc, inner)
    mapping = _iterator_mapping(accesses, m, inner, desc, intr)
    _check_tile_loops(loops, intr)
    regions = _operand_regions(accesses, by_op, mapping, inner, intr)
    _check_layouts(regions, intr)
    return regions


def _match_statement(inner: Block, desc: Block, intr: Intrinsic, w_store: BufferStore) -> _Matcher:
    """Match the tile's store against the description's (output dtype, statement structure, the
    accumulation's form); returns the matcher holding the buffer and access correspondence."""
    err = _TileMismatch
    d_store = desc.body
    out_op = intr.output
    if w_store.buffer.dtype != out_op.dtype:
        raise err(
            f"operand {out_op.name} is buffer {w_store.buffer.name} of dtype {w_store.buffer.dtype}, but the "
            f"intrinsic writes {out_op.dtype} (the dtypes must match)"
        )
    # Statement structure, buffer correspondence.
    m = _Matcher()
    try:
        m.bind(d_store.buffer, w_store.buffer, d_store.indices, w_store.indices)
        if intr.accumulate:
            d_val, w_val = d_store.value, w_store.value
            if type(w_val) is not type(d_val):
                raise _Mismatch(
                    f"the block must accumulate into {w_store.buffer.name} "
                    f"({w_store.buffer.name}[...] = {w_store.buffer.name}[...] + value), found {w_val}"
                )
            acc, rest = w_val.a, w_val.b
            if not (isinstance(acc, BufferLoad) and acc.buffer is w_store.buffer):
                if isinstance(rest, BufferLoad) and rest.buffer is w_store.buffer:
                    acc, rest = rest, acc
                else:
                    raise _Mismatch(
                        f"the block must accumulate into {w_store.buffer.name}, but its value {w_val} "
                        f"does not add {w_store.buffer.name}'s own element"
                    )
            if len(acc.indices) != len(w_store.indices) or not all(
                _is_zero(a - b) for a, b in zip(acc.indices, w_store.indices, strict=True)
            ):
                raise _Mismatch(f"the accumulator {w_store.buffer.name} is read at another element than written")
            if w_store.buffer.dtype != w_val.dtype:
                raise _Mismatch(f"the accumulation type {w_val.dtype} is not {w_store.buffer.dtype}")
            m.expr(d_val.b, rest)
        else:
            m.expr(d_store.value, w_store.value)
    except _Mismatch as e:
        raise err(f"the inner block {inner.name} does not compute the intrinsic's semantics ({e})") from None
    return m


def _operand_buffers(m: _Matcher, inner: Block, intr: Intrinsic) -> dict[str, Buffer]:
    """The tile's buffer of each intrinsic operand, checked for the operand's dtype and scope."""
    err = _TileMismatch
    ops = {o.name: o for o in intr.operands}
    by_op: dict[str, Buffer] = {}
    for op_name, d_buf in intr.buffers.items():
        w_buf = m.buffers.get(d_buf)
        if w_buf is None:
            raise err(f"operand {op_name} is not used by the inner block {inner.name}")
        op = ops[op_name]
        if w_buf.dtype != op.dtype:
            raise err(
                f"operand {op_name} is buffer {w_buf.name} of dtype {w_buf.dtype}, but the intrinsic "
                f"{'writes' if op.is_written else 'reads'} {op.dtype} (the dtypes must match)"
            )
        if w_buf.scope != op.scope:
            raise err(
                f"operand {op_name} is buffer {w_buf.name} in scope {w_buf.scope}, the intrinsic needs {op.scope}"
            )
        by_op[op_name] = w_buf
    return by_op


def _iterator_mapping(
    accesses: dict[Buffer, list], m: _Matcher, inner: Block, desc: Block, intr: Intrinsic
) -> dict[Var, Var]:
    """The tile's iterator that plays each iterator of the description, read off the accesses;
    every intrinsic iterator of extent other than 1 is played by exactly one tile iterator of
    the same kind and extent, and no other tile iterator has an extent other than 1."""
    err = _TileMismatch
    d_bufs = intr.buffers
    inner_vars = {iv.var: iv for iv in inner.iter_vars}
    d_iters = {iv.var: (iv, it) for iv, it in zip(desc.iter_vars, intr.iterators, strict=True)}
    mapping: dict[Var, Var] = {}
    zero = {v: IntImm(v.dtype, 0) for v in inner_vars}
    for d_buf, pairs in accesses.items():
        for d_idx, w_idx in pairs:
            parts = [arith.simplify(e - substitute(e, zero)) for e in w_idx]
            used = [p for p in parts if not _is_zero(p)]
            d_used = [e for e in d_idx if not _is_zero(e)]
            if len(used) != len(d_used):
                continue  # reported with the access check below
            for d_e, w_e in zip(d_used, used, strict=True):
                if isinstance(d_e, Var) and d_e in d_iters:
                    it = d_iters[d_e][1]
                    vs = [v for v in free_vars(w_e) if v in inner_vars]
                    if len(vs) != 1:
                        raise err(
                            f"operand {_op_of(d_bufs, d_buf)}: the index part {w_e} must use exactly one iterator "
                            f"of the tile for intrinsic iterator {it.name}, it uses {len(vs)}"
                        )
                    prev = mapping.get(d_e)
                    if prev is not None and prev is not vs[0]:
                        op_name = _op_of(d_bufs, d_buf)
                        shown = ", ".join(str(e) for e in w_idx)
                        want_txt = ", ".join(str(e) for e in d_idx)
                        raise err(
                            f"operand {op_name} is accessed as {m.buffers[d_buf].name}[{shown}], where {vs[0].name} "
                            f"plays intrinsic iterator {it.name}, but {prev.name} plays it elsewhere: the access "
                            f"is not the intrinsic's {op_name}[{want_txt}] with the dimensions in the same order "
                            "(a transposed or differently laid out operand needs transform_layout first)"
                        )
                    mapping[d_e] = vs[0]
    for d_var, (_div, it) in d_iters.items():
        if d_var not in mapping and it.extent != 1:
            raise err(f"no iterator of the tile plays the role of intrinsic iterator {it.name}")
    if len(set(mapping.values())) != len(mapping):
        raise err("two intrinsic iterators are played by the same iterator of the tile")
    for d_var, w_var in mapping.items():
        it = d_iters[d_var][1]
        w_iv = inner_vars[w_var]
        lo = arith.simplify(w_iv.dom.min)
        ext = arith.simplify(w_iv.dom.extent)
        if w_iv.iter_type != it.kind:
            raise err(
                f"iterator {w_var.name} of block {inner.name} is {w_iv.iter_type.value} but plays intrinsic "
                f"iterator {it.name}, which is {it.kind.value}"
            )
        if not (isinstance(ext, IntImm) and ext.value == it.extent and _is_zero(lo)):
            raise err(
                f"iterator {w_var.name} of block {inner.name} has extent {ext} (starting at {lo}) but plays intrinsic "
                f"iterator {it.name} of extent {it.extent} (the tile extents must equal the intrinsic's)"
            )
    extra_ext = [
        iv.var.name for iv in inner.iter_vars if iv.var not in mapping.values() and not _is_const(iv.dom.extent, 1)
    ]
    if extra_ext:
        raise err(f"iterators {', '.join(extra_ext)} of block {inner.name} play no intrinsic iterator")
    return mapping


def _check_tile_loops(loops: list[For], intr: Intrinsic) -> None:
    """The tile's loops have constant extents and run exactly as many iterations as the
    intrinsic's iterators."""
    err = _TileMismatch
    loop_product = 1
    for f in loops:
        e = arith.simplify(f.extent)
        if not isinstance(e, IntImm):
            raise err(f"loop {f.loop_var.name} of the tile has the non-constant extent {f.extent}")
        loop_product *= e.value
    want = 1
    for it in intr.iterators:
        want *= it.extent
    if loop_product != want:
        raise err(
            f"the tile's loops run {loop_product} iterations but the intrinsic's iterators "
            f"({', '.join(f'{it.name}={it.extent}' for it in intr.iterators)}) run {want}"
        )


def _operand_regions(
    accesses: dict[Buffer, list], by_op: dict[str, Buffer], mapping: dict[Var, Var], inner: Block, intr: Intrinsic
) -> dict[str, BufferRegion]:
    """The region of each operand in the tile's buffer; every access must be the description's
    with the dimensions in the same order."""
    err = _TileMismatch
    ops = {o.name: o for o in intr.operands}
    inner_vars = {iv.var: iv for iv in inner.iter_vars}
    zero = {v: IntImm(v.dtype, 0) for v in inner_vars}
    d_bufs = intr.buffers
    to_w = dict(mapping)
    regions: dict[str, BufferRegion] = {}
    for op_name, d_buf in d_bufs.items():
        w_buf = by_op[op_name]
        op = ops[op_name]
        first: tuple[PrimExpr, ...] | None = None
        for d_idx, w_idx in accesses[d_buf]:
            starts = tuple(arith.simplify(substitute(e, zero)) for e in w_idx)
            parts = [arith.simplify(e - s) for e, s in zip(w_idx, starts, strict=True)]
            used = [k for k, p in enumerate(parts) if not _is_zero(p)]
            d_parts = [substitute(e, to_w) for e in d_idx]
            d_used = [k for k, e in enumerate(d_idx) if not _is_zero(e)]
            ok = len(used) == len(d_used) and all(
                _is_zero(parts[wk] - d_parts[dk]) for wk, dk in zip(used, d_used, strict=True)
            )
            if not ok or any(v in inner_vars for s in starts for v in free_vars(s)):
                shown = ", ".join(str(e) for e in w_idx)
                want_txt = ", ".join(str(e) for e in d_idx)
                raise err(
                    f"operand {op_name} is accessed as {w_buf.name}[{shown}], which is not the intrinsic's access "
                    f"{op_name}[{want_txt}] with the dimensions in the same order (a transposed or "
                    "differently laid out operand needs transform_layout first)"
                )
            if first is None:
                first = starts
                ranges = []
                for k, s in enumerate(starts):
                    if k in used:
                        ext = op.shape[d_used[used.index(k)]]
                    else:
                        ext = 1
                    ranges.append(Range(s, IntImm(s.dtype, ext)))
                regions[op_name] = BufferRegion(w_buf, tuple(ranges))
    return regions


def _check_layouts(regions: dict[str, BufferRegion], intr: Intrinsic) -> None:
    """Layout safety: an operand that must be contiguous is one block of memory, and one with a
    row stride has unit-stride rows."""
    err = _TileMismatch
    for op in intr.operands:
        region = regions[op.name]
        if op.contiguous or (op.numel > 1 and isinstance(intr.impl, LLVMImpl)):
            reason = contiguity_error(region)
            if reason is not None:
                raise err(
                    f"operand {op.name} ({op.dtype}, shape {list(op.shape)}) must be one contiguous block of "
                    f"memory (layout rule: contiguous), but in buffer {region.buffer.name} {reason}"
                )
        elif op.row_stride is not None:
            strides = region_strides(region.buffer)
            if strides is None or strides[-1] != 1:
                raise err(f"operand {op.name} needs unit-stride rows in buffer {region.buffer.name}")


def _i32() -> DataType:
    return DataType("int", 32)


def _is_true(e: PrimExpr) -> bool:
    return isinstance(e, IntImm) and e.value == 1


def _is_const(e: PrimExpr, value: int) -> bool:
    e = arith.simplify(e)
    return isinstance(e, IntImm) and e.value == value


def _fix_unit_iterators(accesses: dict[Buffer, list[Any]], desc: Block, inner: Block) -> dict[Buffer, list[Any]]:
    """The (description, tile) index pairs of each operand with every iterator of extent 1 replaced
    by its start: ``B[k, i]`` of an intrinsic with ``k`` of extent 1 is ``B[0, i]``."""
    fixed = {iv.var: iv.dom.min for b in (desc, inner) for iv in b.iter_vars if _is_const(iv.dom.extent, 1)}
    if not fixed:
        return accesses

    def fix(idx: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        return tuple(arith.simplify(substitute(e, fixed)) for e in idx)

    return {buf: [(fix(d), fix(w)) for d, w in pairs] for buf, pairs in accesses.items()}


def _op_of(d_bufs: dict[str, Buffer], buf: Buffer) -> str:
    for n, b in d_bufs.items():
        if b is buf:
            return n
    return buf.name


def _vector(tile: Buffer, lanes: int) -> PrimExpr:
    if lanes == 1:
        return BufferLoad(tile, (IntImm(_i32(), 0),))
    return BufferLoad(tile, (Ramp(IntImm(_i32(), 0), IntImm(_i32(), 1), lanes),))


def _reinterpret(value: PrimExpr, dtype: DataType) -> PrimExpr:
    if value.dtype == dtype:
        return value
    return Call(dtype, "reinterpret", (value,))


def _step(value: PrimExpr, kind: str, arg: Any) -> PrimExpr:
    """One ``then`` step of an LLVM argument: reinterpret (bits), cast (values) or broadcast."""
    if kind == "reinterpret":
        return _reinterpret(value, arg)
    if kind == "cast":
        return value if value.dtype == arg else Cast(arg, value)
    return Broadcast(value, arg)


def _impl_stmt(intr: Intrinsic, tiles: dict[str, Buffer]) -> BufferStore:
    """``store[...] = intrinsic(args...)`` built from ``intr.impl`` (an LLVMImpl)."""
    impl = intr.impl
    assert isinstance(impl, LLVMImpl)
    args: list[PrimExpr] = []
    for a in impl.args:
        if a.operand is None:
            assert a.constant_dtype is not None and a.constant is not None
            args.append(const(a.constant, a.constant_dtype))
            continue
        op = intr.operand(a.operand)
        assert a.load is not None
        v = _vector(tiles[op.name], op.numel)
        v = _reinterpret(v, a.load)
        for kind, arg in a.steps:
            v = _step(v, kind, arg)
        args.append(v)
    value: PrimExpr = Call(impl.returns, impl.intrinsic, tuple(args))
    store_op = intr.operand(impl.store)
    tile = tiles[store_op.name]
    value = _reinterpret(value, store_op.vector_type)
    if impl.accumulate:
        value = _vector(tile, store_op.numel) + value
    lanes = store_op.numel
    idx = IntImm(_i32(), 0) if lanes == 1 else Ramp(IntImm(_i32(), 0), IntImm(_i32(), 1), lanes)
    return BufferStore(tile, value, (idx,))
