"""Pass ``flatten_buffers``: every buffer becomes one-dimensional."""

from __future__ import annotations

from .. import arith
from ..ir.dtype import DataType, int32, int64
from ..ir.expr import Broadcast, BufferLoad, IntImm, PrimExpr, Ramp, Var
from ..ir.functor import Mutator
from ..ir.stmt import Allocate, Buffer, BufferStore, PrimFunc, Stmt
from .blocks import buffer_strides
from .common import LoweringError, as_dtype

_INT32_MAX = 2**31 - 1


class _Layout:
    """How a multi-dimensional buffer maps onto its flat replacement."""

    def __init__(self, buf: Buffer, flat: Buffer, strides: list[PrimExpr], offset: PrimExpr, wide: bool) -> None:
        self.buf = buf
        self.flat = flat
        self.strides = strides
        self.offset = offset
        self.wide = wide  # the flat size does not fit in int32: index in int64


def _static(e: PrimExpr) -> int | None:
    return e.value if isinstance(e, IntImm) else None


def _flat_size(buf: Buffer, strides: list[PrimExpr]) -> PrimExpr:
    """Elements the flat buffer holds: the element offset plus the span of the strided shape."""
    if not buf.shape:
        return IntImm(int32, 1)
    dtype = int64 if any(s.dtype == int64 for s in buf.shape) else int32
    if not buf.strides and _static(buf.elem_offset) == 0:
        size: PrimExpr = IntImm(int64, 1)
        for s in buf.shape:
            size = size * as_dtype(s, int64)
    else:
        size = as_dtype(buf.elem_offset, int64) + IntImm(int64, 1)
        for s, st in zip(buf.shape, strides, strict=True):
            size = size + (as_dtype(s, int64) - IntImm(int64, 1)) * as_dtype(st, int64)
    size = arith.simplify(size)
    value = _static(size)
    if value is not None:
        return IntImm(int64 if value > _INT32_MAX else dtype, value)
    return arith.simplify(as_dtype(size, dtype)) if dtype != int64 else size


def _layout(buf: Buffer) -> _Layout:
    if buf.dtype.lanes != 1:
        raise LoweringError(f"buffer {buf.name} has the vector element type {buf.dtype}, which is not supported")
    strides = buffer_strides(buf)
    size = _flat_size(buf, strides)
    flat = Buffer(buf.name, (size,), buf.dtype, (), IntImm(size.dtype, 0), buf.scope, buf.alignment, 1)
    wide = size.dtype == int64
    return _Layout(buf, flat, strides, buf.elem_offset, wide)


def _index_dtype(layout: _Layout, indices: tuple[PrimExpr, ...]) -> DataType:
    if layout.wide or any(i.dtype.element_of() == int64 for i in indices):
        return int64
    return int32


def _term(index: PrimExpr, stride: PrimExpr, dtype: DataType) -> PrimExpr:
    """``index * stride`` where ``index`` may be a Ramp or Broadcast."""
    st = as_dtype(stride, dtype)
    if isinstance(index, Ramp):
        return Ramp(as_dtype(index.base, dtype) * st, as_dtype(index.stride, dtype) * st, index.lanes)
    if isinstance(index, Broadcast):
        return Ramp(as_dtype(index.value, dtype) * st, IntImm(dtype, 0), index.lanes)
    if index.dtype.lanes != 1:
        raise LoweringError(f"cannot flatten the vector index {index}: only Ramp and Broadcast indices are supported")
    return as_dtype(index, dtype) * st


def _add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if isinstance(a, Ramp) and isinstance(b, Ramp):
        if a.lanes != b.lanes:
            raise LoweringError(f"cannot flatten indices with {a.lanes} and {b.lanes} lanes")
        return Ramp(a.base + b.base, a.stride + b.stride, a.lanes)
    if isinstance(a, Ramp):
        return Ramp(a.base + b, a.stride, a.lanes)
    if isinstance(b, Ramp):
        return Ramp(a + b.base, b.stride, b.lanes)
    return a + b


def _simplify_index(e: PrimExpr) -> PrimExpr:
    if isinstance(e, Ramp):
        return Ramp(arith.simplify(e.base), arith.simplify(e.stride), e.lanes)
    return arith.simplify(e)


class _Flatten(Mutator):
    def __init__(self, layouts: dict[Buffer, _Layout]) -> None:
        self.layouts = layouts

    def layout(self, buf: Buffer) -> _Layout:
        layout = self.layouts.get(buf)
        if layout is None:
            raise LoweringError(f"buffer {buf.name} is used but neither a parameter nor allocated")
        return layout

    def flat_index(self, layout: _Layout, indices: tuple[PrimExpr, ...]) -> PrimExpr:
        dtype = _index_dtype(layout, indices)
        total: PrimExpr = as_dtype(layout.offset, dtype)
        for i, st in zip(indices, layout.strides, strict=True):
            total = _add(total, _term(i, st, dtype))
        return _simplify_index(total)

    def visit_Allocate(self, op: Allocate) -> Stmt:
        layout = _layout(op.buffer)
        self.layouts[op.buffer] = layout
        return Allocate(layout.flat, self.visit(op.body))

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        indices = tuple(self.visit(i) for i in op.indices)
        layout = self.layout(op.buffer)
        return BufferLoad(layout.flat, (self.flat_index(layout, indices),))

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        indices = tuple(self.visit(i) for i in op.indices)
        value = self.visit(op.value)
        layout = self.layout(op.buffer)
        return BufferStore(layout.flat, value, (self.flat_index(layout, indices),))


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    """Make every buffer one-dimensional.

    An access ``B[i, j]`` becomes ``B_flat[elem_offset + i * stride0 + j * stride1]`` with the
    buffer's explicit strides, or row-major ones.  Parameter buffers become flat buffers of
    the same name, dtype and scope with shape ``(prod(shape),)``; allocated buffers become
    flat buffers holding their element offset plus their strided span.  Indices are int32
    unless an index is int64 or the buffer has more than 2**31 - 1 elements.
    """
    layouts: dict[Buffer, _Layout] = {}
    bmap = []
    defined = set(func.params)
    for param, buf in func.buffer_map:
        free = [v.name for s in buf.shape for v in _vars(s) if v not in defined]
        if free:
            raise LoweringError(
                f"parameter buffer {buf.name} has a shape with the free variable {free[0]}; "
                "lowering needs shapes that are constants or scalar parameters"
            )
        if buf.strides or _static(buf.elem_offset) != 0:
            raise LoweringError(
                f"parameter buffer {buf.name} has explicit strides or an element offset; "
                "lowered parameters are compact row-major arrays"
            )
        layout = _layout(buf)
        layouts[buf] = layout
        bmap.append((param, layout.flat))
    body = _Flatten(layouts).visit(func.body)
    return type(func)(func.params, body, tuple(bmap), func.attrs)


def _vars(e: PrimExpr) -> list[Var]:
    from ..ir.functor import free_vars

    return free_vars(e)
