"""Passes ``lower_init`` and ``lower_blocks``: from blocks to plain loops and allocations."""

from __future__ import annotations

from typing import Any

from .. import arith
from ..ir.dtype import int32
from ..ir.expr import EQ, BufferLoad, FloorDiv, FloorMod, IntImm, PrimExpr, Var, logical_and
from ..ir.functor import Mutator, StmtMutator, children, substitute
from ..ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    IfThenElse,
    IterType,
    MatchBufferRegion,
    PrimFunc,
    Stmt,
    seq,
)
from .common import LoweringError, as_dtype, is_const

BUFFER_DIM_ALIGN = "buffer_dim_align"


# ---------------------------------------------------------------------------------------
# lower_init


def _init_to_if(block: Block) -> Block:
    """``block`` with its init statement moved into the body under ``if v_k == min and ...``."""
    if block.init is None:
        return block
    conds = [
        EQ(iv.var, as_dtype(iv.dom.min, iv.var.dtype)) for iv in block.iter_vars if iv.iter_type == IterType.REDUCE
    ]
    init = IfThenElse(logical_and(*conds), block.init) if conds else block.init
    return Block(
        block.name,
        block.iter_vars,
        block.reads,
        block.writes,
        seq(init, block.body),
        None,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )


class _LowerInit(StmtMutator):
    def visit_Block(self, op: Block) -> Block:
        return _init_to_if(self.generic_visit(op))


def lower_init(func: PrimFunc) -> PrimFunc:
    """Turn every block's ``init`` into ``if v_k == min_k and ...: init`` before its body.

    The init runs when every reduce iterator is at the start of its domain, exactly the
    interpreter's (and TVM's LowerInitBlock's) semantics; a block without reduce iterators runs
    it unconditionally.
    """
    return func.with_body(_LowerInit().visit(func.body))


# ---------------------------------------------------------------------------------------
# lower_blocks


def row_major_strides(shape: tuple[PrimExpr, ...]) -> list[PrimExpr]:
    """Compact row-major strides of ``shape`` (simplified products)."""
    out: list[PrimExpr] = []
    acc: PrimExpr | None = None
    for s in reversed(shape):
        out.append(acc if acc is not None else IntImm(s.dtype, 1))
        acc = s if acc is None else arith.simplify(as_dtype(acc, s.dtype) * s)
    out.reverse()
    return out


def buffer_strides(buf: Buffer) -> list[PrimExpr]:
    return list(buf.strides) if buf.strides else row_major_strides(buf.shape)


def _aligned_strides(buf: Buffer, align: dict[int, tuple[int, int]]) -> tuple[PrimExpr, ...]:
    """Strides padded so that ``stride[axis] % factor == offset`` (TVM's storage_align)."""
    strides: list[PrimExpr] = []
    dtype = buf.shape[0].dtype if buf.shape else int32
    stride: PrimExpr = IntImm(dtype, 1)
    for dim in reversed(range(len(buf.shape))):
        if dim in align:
            factor, offset = align[dim]
            f = IntImm(stride.dtype, factor)
            o = IntImm(stride.dtype, offset)
            stride = arith.simplify(stride + FloorMod(f + o - FloorMod(stride, f), f))
        strides.append(stride)
        stride = arith.simplify(stride * as_dtype(buf.shape[dim], stride.dtype))
    strides.reverse()
    return tuple(strides)


def _collect_alignment(func: PrimFunc) -> dict[Buffer, dict[int, tuple[int, int]]]:
    out: dict[Buffer, dict[int, tuple[int, int]]] = {}

    stack: list[Any] = [func.body]
    while stack:  # statements only: no block lies inside an expression
        node = stack.pop()
        if isinstance(node, Block):
            for key, entries in node.annotations:
                if key != BUFFER_DIM_ALIGN:
                    continue
                for idx, axis, factor, offset in entries:
                    buf = node.writes[int(idx)].buffer
                    out.setdefault(buf, {})[int(axis)] = (int(factor), int(offset))
        stack.extend(c for c in children(node) if isinstance(c, Stmt))
    return out


class _MatchRewriter(Mutator):
    """Replace accesses of a matched buffer by accesses of its source region."""

    def __init__(self, mb: MatchBufferRegion) -> None:
        self.buf = mb.buffer
        self.src = mb.source.buffer
        region = mb.source.region
        self.starts = [r.min for r in region]
        self.extents = [r.extent for r in region]
        r, big = len(self.buf.shape), len(region)
        self.dims: list[int] | None = None  # source dimension of each matched dimension
        if r == big:
            self.dims = list(range(r))
        else:
            nonunit = [k for k, e in enumerate(self.extents) if not is_const(e, 1)]
            if len(nonunit) == r:
                self.dims = nonunit

    def map_indices(self, indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        out = list(self.starts)
        if self.dims is not None:
            for i, k in zip(indices, self.dims, strict=True):
                out[k] = out[k] + as_dtype(i, out[k].dtype)
            return tuple(out)
        # general reshape: row-major position in the matched buffer, unravelled over the region
        dtype = self.starts[0].dtype
        lin: PrimExpr = IntImm(dtype, 0)
        for i, s in zip(indices, self.buf.shape, strict=True):
            lin = lin * as_dtype(s, dtype) + as_dtype(i, dtype)
        for k in reversed(range(len(out))):
            e = as_dtype(self.extents[k], dtype)
            out[k] = out[k] + FloorMod(lin, e)
            lin = FloorDiv(lin, e)
        return tuple(out)

    def layout_vars(self) -> dict[Var, PrimExpr]:
        """Values of the matched buffer's symbolic strides and element offset."""
        mapping: dict[Var, PrimExpr] = {}
        src_strides = buffer_strides(self.src)
        if self.buf.strides and self.dims is not None:
            for s, k in zip(self.buf.strides, self.dims, strict=True):
                if isinstance(s, Var):
                    mapping[s] = as_dtype(src_strides[k], s.dtype)
        off = self.buf.elem_offset
        if isinstance(off, Var):
            total: PrimExpr = as_dtype(self.src.elem_offset, off.dtype)
            for st, start in zip(src_strides, self.starts, strict=True):
                total = total + as_dtype(st, off.dtype) * as_dtype(start, off.dtype)
            mapping[off] = arith.simplify(total)
        return mapping

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        op = self.generic_visit(op)
        if op.buffer is self.buf:
            return BufferLoad(self.src, self.map_indices(op.indices))
        return op

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        op = self.generic_visit(op)
        if op.buffer is self.buf:
            return BufferStore(self.src, op.value, self.map_indices(op.indices))
        return op


class _LowerBlocks(StmtMutator):  # no block lies inside an expression
    def __init__(self, align: dict[Buffer, dict[int, tuple[int, int]]]) -> None:
        self.align = align
        self.replace: dict[Buffer, Buffer] = {}

    def allocate(self, buf: Buffer, body: Stmt) -> Stmt:
        if buf in self.align:
            new = Buffer(
                buf.name,
                buf.shape,
                buf.dtype,
                _aligned_strides(buf, self.align[buf]),
                buf.elem_offset,
                buf.scope,
                buf.alignment,
                buf.offset_factor,
            )
            self.replace[buf] = new
        return Allocate(buf, body)

    def lower(self, block: Block, values: tuple[PrimExpr, ...], predicate: PrimExpr | None) -> Stmt:
        block = _init_to_if(block)
        body = self.visit(block.body)  # nested blocks first
        for mb in reversed(block.match_buffers):
            rw = _MatchRewriter(mb)
            body = substitute(rw.visit(body), rw.layout_vars())
        for buf in reversed(block.alloc_buffers):
            body = self.allocate(buf, body)
        body = substitute(body, {iv.var: v for iv, v in zip(block.iter_vars, values, strict=True)})
        if predicate is not None and not is_const(predicate, 1):
            body = IfThenElse(predicate, body)
        return body

    def visit_BlockRealize(self, op: BlockRealize) -> Stmt:
        return self.lower(op.block, tuple(self.visit(v) for v in op.iter_values), self.visit(op.predicate))

    def visit_Block(self, op: Block) -> Stmt:
        if op.iter_vars:
            raise LoweringError(f"block {op.name} has iterators but no BlockRealize binds them")
        return self.lower(op, (), None)


class _ReplaceBuffers(Mutator):
    def __init__(self, mapping: dict[Buffer, Buffer]) -> None:
        self.mapping = mapping

    def visit_Buffer(self, b: Buffer) -> Buffer:
        return self.mapping.get(b, b)


def lower_blocks(func: PrimFunc, compact: bool = True) -> PrimFunc:
    """Replace every block by plain statements.

    Block iterators are substituted by their bindings, a non-trivial predicate becomes an
    ``IfThenElse``, ``alloc_buffers`` become ``Allocate`` statements around the block's body (the
    root block's at the top of the function), matched buffers become accesses of their source
    buffer, and reads/writes/annotations are dropped.  A ``buffer_dim_align`` annotation
    (``storage_align``) gives the allocated buffer padded explicit strides.  Finally
    :func:`~tensorsearch.lower.compact.compact_buffers` moves each allocation to where its
    buffer is used and shrinks it to the region used there (``compact=False`` skips that).
    """
    lowerer = _LowerBlocks(_collect_alignment(func))
    body = lowerer.visit(func.body)
    if lowerer.replace:
        body = _ReplaceBuffers(lowerer.replace).visit(body)
    func = func.with_body(body)
    if compact:
        from .compact import compact_buffers

        func = compact_buffers(func)
    return func
