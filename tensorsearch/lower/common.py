"""Helpers shared by the lowering passes."""

from __future__ import annotations

from ..ir.dtype import DataType
from ..ir.expr import Cast, IntImm, Node, PrimExpr, Var
from ..ir.functor import Mutator, Visitor
from ..ir.stmt import For, SeqStmt, Stmt


class LoweringError(ValueError):
    """A program that cannot be lowered for the target, or a pass that produced ill-formed IR."""


def as_dtype(e: PrimExpr, dtype: DataType) -> PrimExpr:
    """``e`` converted to the integer type ``dtype`` (constants are re-typed, not cast)."""
    if e.dtype == dtype:
        return e
    if isinstance(e, IntImm):
        return IntImm(dtype, e.value)
    return Cast(dtype, e)


def is_const(e: PrimExpr, value: int | None = None) -> bool:
    return isinstance(e, IntImm) and (value is None or e.value == value)


EMPTY = SeqStmt(())


def is_noop(s: Stmt | None) -> bool:
    return s is None or (isinstance(s, SeqStmt) and not s.stmts)


def uses_var(node: Node, var: Var) -> bool:
    found = False

    class _Find(Visitor):
        def visit_Var(self, v: Var) -> None:
            nonlocal found
            if v is var:
                found = True

    _Find().visit(node)
    return found


def contains(node: Node, types: tuple[type, ...]) -> bool:
    found = False

    class _Find(Visitor):
        def visit(self, n: Node) -> None:
            nonlocal found
            if found:
                return
            if isinstance(n, types):
                found = True
                return
            super().visit(n)

    _Find().visit(node)
    return found


def rename_loop_vars(stmt: Stmt) -> Stmt:
    """A copy of ``stmt`` in which every loop defines a fresh variable (for duplicated code)."""

    class _Rename(Mutator):
        def __init__(self) -> None:
            self.map: dict[Var, Var] = {}

        def visit_Var(self, v: Var) -> PrimExpr:
            return self.map.get(v, v)

        def visit_For(self, op: For) -> Stmt:
            new = Var(op.loop_var.name, op.loop_var.dtype)
            self.map[op.loop_var] = new
            try:
                body = self.visit(op.body)
            finally:
                del self.map[op.loop_var]
            return For(new, self.visit(op.min), self.visit(op.extent), op.kind, body, op.thread_binding, op.annotations)

    return _Rename().visit(stmt)


def count_nodes(node: Node, limit: int) -> int:
    """The number of IR nodes in ``node``, counting stops a little past ``limit``."""
    n = 0

    class _Count(Visitor):
        def visit(self, x: Node) -> None:
            nonlocal n
            if n > limit:
                return
            n += 1
            super().visit(x)

    _Count().visit(node)
    return n
