"""Passes ``check_cpu_target`` and ``unroll_loops``."""

from __future__ import annotations

from ..ir.expr import IntImm
from ..ir.functor import Mutator, Visitor, substitute
from ..ir.stmt import For, ForKind, PrimFunc, SeqStmt, Stmt, seq
from .common import LoweringError, count_nodes, rename_loop_vars
from .simplify_pass import simplify

MAX_UNROLL_EXTENT = 64  # longer UNROLLED loops stay loops (codegen asks LLVM to unroll them)
MAX_UNROLL_NODES = 4096  # extent * body size above this stays a loop too


class _CheckCpu(Visitor):
    def visit_For(self, op: For) -> None:
        if op.kind == ForKind.THREAD_BINDING:
            raise LoweringError(
                f"loop {op.loop_var.name} is bound to the GPU thread axis {op.thread_binding}: "
                "GPU thread binding needs a GPU target and cannot be lowered for a CPU "
                "(use parallel or vectorize for CPU loops)"
            )
        self.generic_visit(op)


def check_cpu_target(func: PrimFunc) -> PrimFunc:
    """Reject what a CPU cannot run: loops bound to GPU threads (``bind``) raise LoweringError."""
    _CheckCpu().visit(func.body)
    return func


class _Unroll(Mutator):
    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        return seq(*(self.visit(s) for s in op.stmts))

    def __init__(self, max_extent: int, max_nodes: int) -> None:
        self.max_extent = max_extent
        self.max_nodes = max_nodes
        self.changed = False

    def visit_For(self, op: For) -> Stmt:
        op = self.generic_visit(op)
        if op.kind != ForKind.UNROLLED or not isinstance(op.extent, IntImm) or not isinstance(op.min, IntImm):
            return op
        n = op.extent.value
        if n > self.max_extent or n * count_nodes(op.body, self.max_nodes) > self.max_nodes:
            return op
        self.changed = True
        copies = []
        for k in range(n):
            value = IntImm(op.loop_var.dtype, op.min.value + k)
            copies.append(rename_loop_vars(substitute(op.body, {op.loop_var: value})))
        return seq(*copies)


def unroll_loops(func: PrimFunc, max_extent: int = MAX_UNROLL_EXTENT, max_nodes: int = MAX_UNROLL_NODES) -> PrimFunc:
    """Unroll UNROLLED loops with constant bounds, at most ``max_extent`` iterations and
    ``max_nodes`` IR nodes in all; each copy gets the loop variable's value and fresh inner
    loop variables.  Larger UNROLLED loops stay (codegen hints LLVM to unroll them).  The
    result is simplified when anything was unrolled."""
    unroller = _Unroll(max_extent, max_nodes)
    body = unroller.visit(func.body)
    out = func.with_body(body)
    return simplify(out) if unroller.changed else out
