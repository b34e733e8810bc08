"""Pass ``compact_buffers``: allocate each intermediate buffer where it is used, at the size used.

A schedule's ``cache_write``/``cache_read`` allocates the cache at the root with the full shape
of the cached buffer; after ``compute_at``/``reverse_compute_at`` only a small tile of it is
alive at a time (TVM's CompactBufferAllocation). This pass, run on the block-free program
before flattening, moves every ``Allocate`` down to the innermost statement that contains all
accesses of its buffer and shrinks the buffer to the region those accesses touch there:

    Allocate(Z_local, (1, 1024, 1024))          for j_0, i_0:
      for j_0, i_0:                       ->      Allocate(Z_local, (1, 8, 32))
        ... Z_local[0, i_0*8 + a, j_0*32 + b]        ... Z_local[0, a, b]

A small local accumulator then becomes a constant-size stack buffer that LLVM promotes to
registers. The allocation only moves into a ``SERIAL`` or ``PARALLEL`` loop when the regions
touched by different iterations are provably disjoint (then no value flows from one iteration
to the next, so a fresh buffer per iteration computes the same values), or when the loop is
``PARALLEL``: its iterations are independent (the ``parallel`` primitive's condition), and every
access of the buffer is inside it, so an iteration reads only what it wrote itself (a stage
``compute_at`` a tile computes the region that tile reads). That is how a tile of a fused loop
(``h_0 * 7 + w_0``, whose consecutive regions overlap in ``h``) gets its own small buffer. Never into
``VECTORIZED``/``UNROLLED`` loops (which would duplicate it or keep the loop from being
vectorized), conditionals or other loops. A dimension whose touched extent is not a constant
keeps its full extent; buffers with explicit strides or offsets (``storage_align``) stay as
they are.
"""

from __future__ import annotations

from typing import Any

from .. import arith
from ..arith import IntervalSet
from ..ir.expr import LT, BufferLoad, IntImm, PrimExpr, Range, Var
from ..ir.functor import Mutator, post_order_visit, substitute
from ..ir.stmt import Allocate, Buffer, BufferStore, For, ForKind, PrimFunc, SeqStmt, Stmt
from .common import as_dtype, is_const

_DESCEND_KINDS = (ForKind.SERIAL, ForKind.PARALLEL)


def _accesses(stmt: Stmt, buf: Buffer) -> list[tuple[PrimExpr, ...]]:
    out: list[tuple[PrimExpr, ...]] = []

    def visit(n: Any) -> None:
        if isinstance(n, BufferLoad | BufferStore) and n.buffer is buf:
            out.append(tuple(n.indices))

    post_order_visit(stmt, visit)
    return out


def _inner_domains(stmt: Stmt) -> dict[Var, Any] | None:
    """The interval of every loop variable defined inside ``stmt`` (None: unknown); the bounds
    may use variables of enclosing loops, which stay symbolic."""
    loops: list[For] = []

    def visit(n: Any) -> None:
        if isinstance(n, For):
            loops.append(n)

    post_order_visit(stmt, visit)
    out: dict[Var, Any] = {}
    # post-order lists inner loops first; outer loops' intervals are needed first
    for loop in reversed(loops):
        lo = arith.eval_int_set(loop.min, out)
        hi = arith.eval_int_set(loop.min + loop.extent - 1, out)
        if not (isinstance(lo.min_value, PrimExpr) and isinstance(hi.max_value, PrimExpr)):
            return None
        out[loop.loop_var] = IntervalSet(lo.min_value, hi.max_value)
    return out


def _bounded(v: Any) -> bool:
    return isinstance(v, PrimExpr)


def _region(buf: Buffer, stmt: Stmt, dom: dict[Var, Any]) -> list[tuple[PrimExpr, PrimExpr] | None] | None:
    """Per dimension, the inclusive bounds (over the loops inside ``stmt``, and the thread loops
    around it that ``dom`` relaxes) of the accesses."""
    full = _inner_domains(stmt)
    if full is None:
        return None
    full = {**dom.get(_RELAXED, {}), **full}
    accesses = _accesses(stmt, buf)
    if not accesses:
        return None
    out: list[tuple[PrimExpr, PrimExpr] | None] = []
    for d in range(len(buf.shape)):
        lo: PrimExpr | None = None
        hi: PrimExpr | None = None
        ok = True
        for idx in accesses:
            if idx[d].dtype.lanes != 1:
                ok = False
                break
            s = arith.eval_int_set(idx[d], full)
            if not (_bounded(s.min_value) and _bounded(s.max_value)):
                ok = False
                break
            a, b = arith.simplify(s.min_value, dom), arith.simplify(s.max_value, dom)
            lo = a if lo is None else _pick(lo, a, dom, smaller=True)
            hi = b if hi is None else _pick(hi, b, dom, smaller=False)
            if lo is None or hi is None:
                ok = False
                break
        out.append((lo, hi) if ok else None)
    return out


def _pick(x: PrimExpr, y: PrimExpr, dom: dict[Var, Any], smaller: bool) -> PrimExpr | None:
    if arith.can_prove_equal(x, y):
        return x
    if arith.can_prove(x <= y, dom):
        return x if smaller else y
    if arith.can_prove(y <= x, dom):
        return y if smaller else x
    return None


def _disjoint(buf: Buffer, loop: For, dom: dict[Var, Any]) -> bool:
    """Whether different iterations of ``loop`` touch disjoint regions of ``buf``."""
    if is_const(loop.extent, 1):
        return True
    v = loop.loop_var
    inner = dict(dom)
    inner[v] = Range(loop.min, loop.extent - 1)  # v and v + 1 both iterate
    region = _region(buf, loop.body, inner)
    if region is None:
        return False
    nxt = {v: v + IntImm(v.dtype, 1)}
    for bounds in region:
        if bounds is None:
            continue
        a, b = bounds
        if arith.can_prove(LT(b, substitute(a, nxt)), inner):
            return True
        if arith.can_prove(LT(substitute(b, nxt), a), inner):
            return True
    return False


def _shrink(buf: Buffer, stmt: Stmt, dom: dict[Var, Any]) -> Stmt:
    region = _region(buf, stmt, dom)
    if region is None:
        return Allocate(buf, stmt)
    shape: list[PrimExpr] = []
    offsets: list[PrimExpr | None] = []
    changed = False
    for extent, bounds in zip(buf.shape, region, strict=True):
        if bounds is not None:
            lo, hi = bounds
            n = arith.simplify(hi - lo + 1, dom)
            if isinstance(n, IntImm) and n.value >= 1 and (not isinstance(extent, IntImm) or n.value < extent.value):
                shape.append(IntImm(extent.dtype, n.value))
                offsets.append(lo)
                changed = True
                continue
        shape.append(extent)
        offsets.append(None)
    if not changed:
        return Allocate(buf, stmt)
    new = Buffer(buf.name, tuple(shape), buf.dtype, (), buf.elem_offset, buf.scope, buf.alignment, buf.offset_factor)

    def shift(indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        return tuple(
            i if off is None else arith.simplify(i - as_dtype(off, i.dtype), dom)
            for i, off in zip(indices, offsets, strict=True)
        )

    class _Rewrite(Mutator):
        def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
            op = self.generic_visit(op)
            return BufferLoad(new, shift(op.indices)) if op.buffer is buf else op

        def visit_BufferStore(self, op: BufferStore) -> Stmt:
            op = self.generic_visit(op)
            return BufferStore(new, op.value, shift(op.indices)) if op.buffer is buf else op

    return Allocate(new, _Rewrite().visit(stmt))


_RELAXED = "relaxed thread loops"  # a key of ``dom``: {thread var: its interval} (GPU shared buffers)


def _gpu_descent(buf: Buffer, loop: For, dom: dict[Var, Any]) -> dict[Var, Any] | None:
    """The domain inside a thread-bound ``loop`` when ``buf`` may be allocated there (GPU rules), else None.

    Every block of threads has its own ``shared`` and ``local`` memory, so a buffer moves into a
    ``blockIdx`` loop; a ``shared`` buffer serves all threads of a block, so inside a
    ``threadIdx`` loop it keeps the region of every thread (the loop is relaxed), while a
    per-thread (``local``, ``wmma.*``) buffer shrinks to one thread's region."""
    tag = loop.thread_binding or ""
    inner = dict(dom)
    if tag.startswith("blockIdx.") or (tag.startswith("threadIdx.") and buf.scope != "shared"):
        inner[loop.loop_var] = Range(loop.min, loop.extent)
        return inner
    if tag.startswith("threadIdx."):
        hi = loop.min + loop.extent - 1
        inner[_RELAXED] = {**dom.get(_RELAXED, {}), loop.loop_var: IntervalSet(loop.min, hi)}
        return inner
    return None


def _place(buf: Buffer, stmt: Stmt, dom: dict[Var, Any]) -> Stmt:
    """``stmt`` with ``Allocate(buf)`` placed around the innermost part holding every access."""
    if isinstance(stmt, SeqStmt):
        users = [k for k, s in enumerate(stmt.stmts) if _accesses(s, buf)]
        if len(users) == 1:
            k = users[0]
            stmts = list(stmt.stmts)
            stmts[k] = _place(buf, stmts[k], dom)
            return SeqStmt(tuple(stmts))
    elif isinstance(stmt, Allocate):
        return Allocate(stmt.buffer, _place(buf, stmt.body, dom))
    elif (
        isinstance(stmt, For)
        and stmt.kind in _DESCEND_KINDS
        and (stmt.kind == ForKind.PARALLEL or _disjoint(buf, stmt, dom))
    ):
        inner = dict(dom)
        inner[stmt.loop_var] = Range(stmt.min, stmt.extent)
        body = _place(buf, stmt.body, inner)
        return For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations)
    elif isinstance(stmt, For) and stmt.kind == ForKind.THREAD_BINDING and _GPU in dom:
        inner = _gpu_descent(buf, stmt, dom)
        if inner is not None:
            body = _place(buf, stmt.body, inner)
            return For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body, stmt.thread_binding, stmt.annotations)
    return _shrink(buf, stmt, dom)


_GPU = "thread-bound loops hold allocations"  # a key of ``dom`` set by compact_gpu_buffers


class _Compact(Mutator):
    def __init__(self, gpu: bool = False) -> None:
        super().__init__()
        self.root_dom: dict[Any, Any] = {_GPU: True} if gpu else {}

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        buf = op.buffer
        if buf.strides or not is_const(buf.elem_offset, 0) or not _accesses(body, buf):
            return Allocate(buf, body)
        return _place(buf, body, dict(self.root_dom))


def compact_buffers(func: PrimFunc) -> PrimFunc:
    """Move each ``Allocate`` to where its buffer is used and shrink it to the used region.

    Runs on the block-free program (after ``lower_blocks``, before ``flatten_buffers``); see
    the module docstring for when an allocation may move into a loop.
    """
    return func.with_body(_Compact().visit(func.body))


def compact_gpu_buffers(func: PrimFunc) -> PrimFunc:
    """:func:`compact_buffers` for a GPU kernel: allocations also move into thread-bound loops
    (``shared`` ones keep every thread's region; see :func:`_gpu_descent`)::

        Allocate(X_shared, (1, 4096, 4096))        for bx in blockIdx.x:
          for bx in blockIdx.x:               ->     for ty in threadIdx.y:
            for ty in threadIdx.y:                     for ko:
              for ko:                                    Allocate(X_shared, (1, 64, 32))
                X_shared[0, bx*64 + a, ko*32 + b]          X_shared[0, a, b] ...
    """
    return func.with_body(_PadSharedRows().visit(_Compact(gpu=True).visit(func.body)))


class _PadSharedRows(Mutator):
    """Shared buffers whose rows are a multiple of 64 bytes get 16 bytes more per row (TVM's
    ``storage_align`` offset for tensor cores): the rows of a 16x16 tile that threads read at once
    then start in different shared-memory banks instead of the same one. Rows stay 16-byte aligned
    (vector copies) and 16-row tiles 32-byte aligned (WMMA)."""

    def visit_Allocate(self, op: Allocate) -> Stmt:
        body = self.visit(op.body)
        buf = op.buffer
        shape = [x.value if isinstance(x, IntImm) else None for x in buf.shape]
        nbytes = max(buf.dtype.bits // 8, 1)
        if buf.scope != "shared" or len(shape) < 2 or None in shape or (shape[-1] * nbytes) % 64:
            return Allocate(buf, body)
        row = IntImm(buf.shape[-1].dtype, shape[-1] + 16 // nbytes)
        padded = Buffer(buf.name, (*buf.shape[:-1], row), buf.dtype, (), buf.elem_offset, buf.scope, buf.alignment)

        class _Use(Mutator):
            def visit_BufferLoad(self, load: BufferLoad) -> PrimExpr:
                load = self.generic_visit(load)
                return BufferLoad(padded, load.indices) if load.buffer is buf else load

            def visit_BufferStore(self, store: BufferStore) -> Stmt:
                store = self.generic_visit(store)
                return BufferStore(padded, store.value, store.indices) if store.buffer is buf else store

        return Allocate(padded, _Use().visit(body))
