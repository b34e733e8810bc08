"""Finding and replacing statements in an immutable program.

The IR is immutable, so a primitive rewrites a program by building new statements and
calling :func:`replace` with a map from old statements (by identity) to new ones; every
ancestor on the way up is rebuilt, everything else is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from functools import cache

from ..ir import (
    Block,
    BlockRealize,
    For,
    Mutator,
    Node,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    children,
    seq,
)


@dataclass(frozen=True)
class Located:
    """A statement and its ancestors from the function body down (``path[-1] is node``)."""

    node: Stmt
    path: tuple[Stmt, ...]

    @property
    def parent(self) -> Stmt | None:
        return self.path[-2] if len(self.path) > 1 else None


@cache
def _stmt_fields(cls: type) -> tuple[str, ...]:
    """The fields of a statement class that hold statements (``body``, ``stmts``, ``block``, ...)."""
    return tuple(f.name for f in fields(cls) if "Stmt" in str(f.type) or "Block" in str(f.type))


def stmt_children(node: Stmt) -> list[Stmt]:
    """The statements directly below ``node``, in field order (expressions are not visited)."""
    out: list[Stmt] = []
    for name in _stmt_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, Stmt):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if isinstance(v, Stmt))
    return out


def walk_stmts(stmt: Stmt, path: tuple[Stmt, ...] = ()) -> Iterator[Located]:
    """Every statement below ``stmt`` (pre-order) with its path; expressions are skipped."""
    stack: list[tuple[Stmt, tuple[Stmt, ...]]] = [(stmt, (*path, stmt))]
    while stack:
        node, p = stack.pop()
        yield Located(node, p)
        for child in reversed(stmt_children(node)):
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
        stack.extend(reversed(stmt_children(node)))
    return found


class _Replace(Mutator):
    def __init__(self, mapping: dict[int, Stmt | None]) -> None:
        self.mapping = mapping

    def visit(self, node: Node):  # type: ignore[override]
        if not isinstance(node, Stmt):
            return node  # only statements hold statements
        key = id(node)
        if key in self.mapping:
            return self.mapping[key]
        return super().visit(node)

    def generic_visit(self, node: Node) -> Node:
        changed = {}
        for name in _stmt_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, Stmt):
                new = self.visit(value)
            elif isinstance(value, tuple) and value and isinstance(value[0], Stmt):
                new = tuple(self.visit(v) for v in value)
                if all(a is b for a, b in zip(new, value, strict=True)):
                    new = value
            else:
                continue
            if new is not value:
                changed[name] = new
        if not changed:
            return node
        return type(node)(*[changed.get(f.name, getattr(node, f.name)) for f in fields(type(node))])

    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        new = [self.visit(s) for s in op.stmts]
        if all(a is b for a, b in zip(new, op.stmts, strict=True)):
            return op
        return seq(*[s for s in new if s is not None])


def replace(func: PrimFunc, mapping: dict[int, Stmt | None]) -> PrimFunc:
    """Rebuild ``func`` with each statement whose ``id`` is in ``mapping`` replaced.

    A statement mapped to None is removed from its SeqStmt.
    """
    body = _Replace(mapping).visit(func.body)
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
