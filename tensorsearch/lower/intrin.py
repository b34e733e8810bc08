"""Pass ``lower_intrin``: vector accesses of matched tiles become vector accesses of their source.

``Schedule.tensorize`` binds every operand region of a tensor intrinsic to a one-dimensional
matched buffer (``B_t = T.match_buffer(B[j, k, 0:16, 0:4], (64,), "int8")``) and reads or writes
it as one vector (``B_t[T.Ramp(0, 1, 64)]``). ``lower_blocks`` maps matched-buffer accesses
dimension by dimension, which cannot express "64 consecutive elements across two dimensions",
so this pass, run before it, rewrites such an access directly on the source buffer (and adds
the region it covers, in that per-dimension form, to the block's reads or writes, so that the
IR verifier accepts the intermediate program; ``lower_blocks`` drops the regions):

    B_t[Ramp(b, 1, n)]  ->  B[j, k, Broadcast(0, n), Ramp(0 + b, 1, n)]

the dimensions before the first and after the last non-unit dimension of the region stay
scalar, those in between are broadcast, and the last non-unit one carries the Ramp.  After
``flatten_buffers`` this is ``B[Ramp(start + b, 1, n)]``, one vector load, which is right
exactly when the region is one contiguous block of memory (:func:`contiguity_error`, checked by
``tensorize`` and again here).  Vector-indexed dimensions keep their full extent under
``compact_buffers``, so compaction cannot break the contiguity.  A matched buffer with any other
kind of access is left to ``lower_blocks``.
"""

from __future__ import annotations

from typing import Any

from .. import arith
from ..arith.region import contiguity_error, region_extents
from ..ir import (
    Block,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferRegion,
    BufferStore,
    IntImm,
    Mutator,
    PrimExpr,
    PrimFunc,
    Ramp,
    Range,
    StmtMutator,
    post_order_visit,
)
from .common import LoweringError, as_dtype, is_const

__all__ = ["lower_intrin"]


def _is_unit_ramp(e: PrimExpr) -> bool:
    return isinstance(e, Ramp) and is_const(e.stride, 1)


class _Rewrite(Mutator):
    def __init__(self, buf: Buffer, source: BufferRegion) -> None:
        self.buf = buf
        self.source = source
        extents = region_extents(source) or []
        nonunit = [k for k, e in enumerate(extents) if e != 1]
        last = len(extents) - 1
        self.first = nonunit[0] if nonunit else last
        self.last = nonunit[-1] if nonunit else last

    def flat_region(self) -> BufferRegion:
        """The region the rewritten accesses cover, in the same per-dimension form (for the verifier)."""
        numel = 1
        for e in region_extents(self.source) or []:
            numel *= e
        out = []
        for k, r in enumerate(self.source.region):
            if k == self.last:
                out.append(Range(r.min, IntImm(r.min.dtype, numel)))
            elif self.first <= k < self.last:
                out.append(Range(r.min, IntImm(r.min.dtype, 1)))
            else:
                out.append(r)
        return BufferRegion(self.source.buffer, tuple(out))

    def indices(self, ramp: Ramp) -> tuple[PrimExpr, ...]:
        out: list[PrimExpr] = []
        for k, r in enumerate(self.source.region):
            start = r.min
            if k == self.last:
                base = arith.simplify(start + as_dtype(ramp.base, start.dtype))
                out.append(Ramp(base, IntImm(start.dtype, 1), ramp.lanes))
            elif self.first <= k < self.last:
                out.append(Broadcast(start, ramp.lanes))
            else:
                out.append(start)
        return tuple(out)

    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        op = self.generic_visit(op)
        if op.buffer is self.buf:
            return BufferLoad(self.source.buffer, self.indices(op.indices[0]))
        return op

    def visit_BufferStore(self, op: BufferStore) -> Any:
        op = self.generic_visit(op)
        if op.buffer is self.buf:
            return BufferStore(self.source.buffer, op.value, self.indices(op.indices[0]))
        return op


def _only_unit_ramps(body: Any, buf: Buffer) -> bool:
    found: list[bool] = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad | BufferStore) and n.buffer is buf:
            found.append(len(n.indices) == 1 and _is_unit_ramp(n.indices[0]))

    post_order_visit(body, visit)
    return bool(found) and all(found)


class _LowerIntrin(StmtMutator):
    def visit_Block(self, op: Block) -> Any:
        op = self.generic_visit(op)
        keep = []
        body, init = op.body, op.init
        reads, writes = list(op.reads), list(op.writes)
        for mb in op.match_buffers:
            buf = mb.buffer
            if len(buf.shape) != 1 or not (
                _only_unit_ramps(body, buf) or (init is not None and _only_unit_ramps(init, buf))
            ):
                keep.append(mb)
                continue
            reason = contiguity_error(mb.source)
            if reason is not None:
                raise LoweringError(
                    f"block {op.name}: matched buffer {buf.name} is read as one vector but its source region "
                    f"is not contiguous: {reason}"
                )
            rw = _Rewrite(buf, mb.source)
            if any(r.buffer is mb.source.buffer for r in op.reads):
                reads.append(rw.flat_region())
            if any(r.buffer is mb.source.buffer for r in op.writes):
                writes.append(rw.flat_region())
            body = rw.visit(body)
            init = rw.visit(init) if init is not None else None
        if len(keep) == len(op.match_buffers):
            return op
        return Block(
            op.name,
            op.iter_vars,
            tuple(reads),
            tuple(writes),
            body,
            init,
            op.alloc_buffers,
            tuple(keep),
            op.annotations,
        )


def lower_intrin(func: PrimFunc) -> PrimFunc:
    """Rewrite vector (unit-stride Ramp) accesses of one-dimensional matched buffers on their source."""
    body = _LowerIntrin().visit(func.body)
    if body is func.body:
        return func
    return func.with_body(body)
