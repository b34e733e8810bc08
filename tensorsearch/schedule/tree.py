"""Finding and replacing statements in an immutable program.

The IR is immutable, so a primitive rewrites a program by building new statements and
calling :func:`replace` with a map from old statements (by identity) to new ones; every
ancestor on the way up is rebuilt, everything else is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..ir import (
    Block,
    BlockRealize,
    Buffer,
    For,
    Mutator,
    Node,
    PrimExpr,
    PrimFunc,
    Stmt,
    Var,
    children,
)


@dataclass(frozen=True)
class Located:
    """A statement and its ancestors from the function body down (``path[-1] is node``)."""

    node: Stmt
    path: tuple[Stmt, ...]

    @property
    def parent(self) -> Stmt | None:
        return self.path[-2] if len(self.path) > 1 else None


def walk_stmts(stmt: Stmt, path: tuple[Stmt, ...] = ()) -> Iterator[Located]:
    """Every statement below ``stmt`` (pre-order) with its path; expressions are skipped."""
    stack: list[tuple[Stmt, tuple[Stmt, ...]]] = [(stmt, (*path, stmt))]
    while stack:
        node, p = stack.pop()
        yield Located(node, p)
        kids = [c for c in children(node) if isinstance(c, Stmt)]
        for child in reversed(kids):
            stack.append((child, (*p, child)))


def find_block(func: PrimFunc, name: str) -> Located | None:
    """The Block named ``name`` (its path ends ``..., BlockRealize, Block``)."""
    for loc in walk_stmts(func.body):
        if isinstance(loc.node, Block) and loc.node.name == name:
            return loc
    return None


def find_loop(func: PrimFunc, var: Var) -> Located | None:
    """The For whose loop variable is ``var``."""
    for loc in walk_stmts(func.body):
        if isinstance(loc.node, For) and loc.node.loop_var is var:
            return loc
    return None


def enclosing_block(path: tuple[Stmt, ...]) -> Block | None:
    """The nearest Block strictly above the last node of ``path`` (its scope block)."""
    for node in reversed(path[:-1]):
        if isinstance(node, Block):
            return node
    return None


def loops_above(path: tuple[Stmt, ...]) -> list[For]:
    """The loops between the scope block and the last node of ``path``, outermost first."""
    loops: list[For] = []
    for node in reversed(path[:-1]):
        if isinstance(node, Block):
            break
        if isinstance(node, For):
            loops.append(node)
    return loops[::-1]


def child_blocks(stmt: Stmt) -> list[BlockRealize]:
    """The BlockRealizes directly inside ``stmt`` (not inside a nested block), in program order."""
    found: list[BlockRealize] = []
    start = stmt.body if isinstance(stmt, Block) else stmt
    stack = [start]
    while stack:
        node = stack.pop()
        if isinstance(node, BlockRealize):
            found.append(node)
            continue
        kids = [c for c in children(node) if isinstance(c, Stmt)]
        stack.extend(reversed(kids))
    return found


def replace(func: PrimFunc, mapping: dict[int, Stmt | None]) -> PrimFunc:
    """Rebuild ``func`` with each statement whose ``id`` is in ``mapping`` replaced.

    A statement mapped to None is removed from its SeqStmt.
    """
    from ..ir import SeqStmt, seq

    class _Replace(Mutator):
        def visit(self, node: Node):  # type: ignore[override]
            if isinstance(node, PrimExpr | Buffer):
                return node
            key = id(node)
            if key in mapping:
                return mapping[key]
            return super().visit(node)

        def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
            new = [self.visit(s) for s in op.stmts]
            if all(a is b for a, b in zip(new, op.stmts, strict=True)):
                return op
            return seq(*[s for s in new if s is not None])

    body = _Replace().visit(func.body)
    return func if body is func.body else func.with_body(body)


def stmt_uses(stmt: Node, pred: Callable[[Node], bool]) -> bool:
    """Whether any node below ``stmt`` satisfies ``pred``."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if pred(node):
            return True
        stack.extend(children(node))
    return False
