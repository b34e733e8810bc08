"""Pass ``simplify``: simplified indices and conditions, no-op statements removed."""

from __future__ import annotations

from .. import arith
from ..ir.expr import BufferLoad, Call, IntImm, PrimExpr, Ramp, Range, Select, Var
from ..ir.functor import Mutator, substitute
from ..ir.stmt import Allocate, BufferStore, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Stmt, seq
from .common import EMPTY, is_const, is_noop

_NOOP_CALLS = frozenset({"tvm_storage_sync", "storage_sync", "tvm_warp_sync"})


class _Simplify(Mutator):
    def __init__(self) -> None:
        self.dom: dict[Var, Range] = {}

    def simp(self, e: PrimExpr) -> PrimExpr:
        e = self.visit(e)
        if isinstance(e, Ramp):
            return Ramp(arith.simplify(e.base, self.dom), arith.simplify(e.stride, self.dom), e.lanes)
        if e.dtype.lanes != 1:
            return e
        return arith.simplify(e, self.dom)

    # expressions: only indices and conditions are simplified; values keep their form
    def visit_BufferLoad(self, op: BufferLoad) -> PrimExpr:
        return BufferLoad(op.buffer, tuple(self.simp(i) for i in op.indices))

    def visit_Select(self, op: Select) -> PrimExpr:
        cond = self.simp(op.condition)
        if is_const(cond, 1):
            return self.visit(op.true_value)
        if is_const(cond, 0):
            return self.visit(op.false_value)
        return Select(cond, self.visit(op.true_value), self.visit(op.false_value))

    def visit_Call(self, op: Call) -> PrimExpr:
        name = op.op.removeprefix("tir.")
        if name == "if_then_else" and len(op.args) == 3:
            return self.visit(Select(*op.args))
        if name == "likely" and len(op.args) == 1:
            return self.visit(op.args[0])
        return self.generic_visit(op)

    # statements: None stands for "nothing to do"
    def visit_For(self, op: For) -> Stmt | None:
        lo = self.simp(op.min)
        ext = self.simp(op.extent)
        if isinstance(ext, IntImm) and ext.value <= 0:
            return None
        if is_const(ext, 1):
            return self.stmt(substitute(op.body, {op.loop_var: lo}))
        self.dom[op.loop_var] = Range(lo, ext)
        try:
            body = self.stmt(op.body)
        finally:
            del self.dom[op.loop_var]
        if body is None:
            return None
        return For(op.loop_var, lo, ext, op.kind, body, op.thread_binding, op.annotations)

    def visit_IfThenElse(self, op: IfThenElse) -> Stmt | None:
        cond = self.simp(op.condition)
        if is_const(cond, 1):
            return self.stmt(op.then_case)
        if is_const(cond, 0):
            return self.stmt(op.else_case)
        then = self.stmt(op.then_case)
        other = self.stmt(op.else_case)
        if then is None and other is None:
            return None
        return IfThenElse(cond, then if then is not None else EMPTY, other)

    def visit_SeqStmt(self, op: SeqStmt) -> Stmt | None:
        stmts = [s for s in (self.stmt(x) for x in op.stmts) if s is not None]
        return seq(*stmts) if stmts else None

    def visit_Allocate(self, op: Allocate) -> Stmt | None:
        body = self.stmt(op.body)
        return None if body is None else Allocate(op.buffer, body)

    def visit_Evaluate(self, op: Evaluate) -> Stmt | None:
        v = op.value
        if isinstance(v, IntImm) or (isinstance(v, Call) and v.op.removeprefix("tir.") in _NOOP_CALLS):
            return None
        return Evaluate(self.visit(v))

    def visit_BufferStore(self, op: BufferStore) -> Stmt:
        return BufferStore(op.buffer, self.visit(op.value), tuple(self.simp(i) for i in op.indices))

    def stmt(self, s: Stmt | None) -> Stmt | None:
        if s is None:
            return None
        out = self.visit(s)
        return None if is_noop(out) else out


def simplify(func: PrimFunc) -> PrimFunc:
    """Simplify every index, condition and loop bound with the enclosing loops' ranges.

    Loops of extent 0, ``if False`` without else, empty sequences and allocations and
    synchronization calls disappear; loops of extent 1 are replaced by their body; ``if True``
    by its then branch; ``Select`` with a constant condition by the chosen value (only the
    chosen value is kept, so laziness is preserved). ``if_then_else``/``likely`` calls become
    ``Select``/their argument.  Values (float arithmetic) keep their form.
    """
    body = _Simplify().stmt(func.body)
    return func.with_body(body if body is not None else EMPTY)
