"""Finding and replacing statements in an immutable program.

The IR is immutable, so a primitive rewrites a program by building new statements and
calling :func:`replace` with a map from old statements (by identity) to new ones; every
ancestor on the way up is rebuilt, everything else is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from ..ir import (
    Block,
    BlockRealize,
    For,
    Mutator,
    Node,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    Var,
    children,
    seq,
)
from ..ir.functor import Substituter
from ..ir.identity_cache import MISSING, IdentityCache


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
    t = type(node)
    if t is For or t is BlockRealize:  # the common cases: one statement field
        child = node.body if t is For else node.block
        return [child] if isinstance(child, Stmt) else []
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


def walk_nodes(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement below ``stmt`` in :func:`walk_stmts`'s order, without paths (cheaper)."""
    stack: list[Stmt] = [stmt]
    while stack:
        node = stack.pop()
        yield node
        kids = stmt_children(node)
        if kids:
            stack.extend(reversed(kids))


class _Index:
    """Every statement's parent, and every Block by name and every For by loop variable (the
    first in pre-order); paths are built from the parents when a statement is looked up."""

    __slots__ = ("blocks", "located", "loops", "parent", "shared")

    def __init__(self, body: Stmt) -> None:
        self.blocks: dict[str, Stmt] = {}
        self.loops: dict[int, Stmt] = {}
        self.parent: dict[int, Stmt | None] = {id(body): None}  # of a statement's first occurrence
        self.shared: set[int] = set()  # statements that occur more than once (they have several paths)
        self.located: dict[int, Located] = {}
        stack: list[tuple[Stmt, bool]] = [(body, False)]
        while stack:
            node, in_shared = stack.pop()  # in_shared: below a statement that occurs more than once
            t = type(node)
            if t is Block:
                self.blocks.setdefault(node.name, node)
            elif t is For:
                self.loops.setdefault(id(node.loop_var), node)
            kids = stmt_children(node)
            for child in reversed(kids):
                key = id(child)
                seen = key in self.parent
                if seen or in_shared:
                    self.shared.add(key)
                if not seen:
                    self.parent[key] = node
                stack.append((child, in_shared or seen))

    def path(self, node: Stmt) -> tuple[Stmt, ...]:
        """The statements from the body down to ``node`` (its first occurrence)."""
        out = [node]
        up = self.parent[id(node)]
        while up is not None:
            out.append(up)
            up = self.parent[id(up)]
        return tuple(reversed(out))

    def locate(self, node: Stmt | None) -> Located | None:
        if node is None:
            return None
        loc = self.located.get(id(node))
        if loc is None:
            loc = self.located[id(node)] = Located(node, self.path(node))
        return loc


_INDEXES = IdentityCache(8)


def _index(func: PrimFunc) -> _Index:
    """The index of ``func``'s body, built once for the last few programs looked into (a
    primitive and the lookups around it ask several times of one program)."""
    idx = _INDEXES.get((func.body,))
    if idx is MISSING:
        idx = _INDEXES.put((func.body,), None, _Index(func.body))
    return idx


def find_block(func: PrimFunc, name: str) -> Located | None:
    """The Block named ``name`` (its path ends ``..., BlockRealize, Block``)."""
    index = _index(func)
    return index.locate(index.blocks.get(name))


def find_loop(func: PrimFunc, var: Var) -> Located | None:
    """The For whose loop variable is ``var``."""
    index = _index(func)
    node = index.loops.get(id(var))
    return index.locate(node) if node is not None and node.loop_var is var else None


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
    def __init__(self, mapping: dict[int, Stmt | None], on_path: set[int] | None) -> None:
        self.mapping = mapping
        self.on_path = on_path  # the ancestors of the replaced statements (None: not known, visit all)

    def visit(self, node: Node):  # type: ignore[override]
        if not isinstance(node, Stmt):
            return node  # only statements hold statements
        key = id(node)
        if key in self.mapping:
            return self.mapping[key]
        if self.on_path is not None and key not in self.on_path:
            return node  # no replaced statement below
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
        return _with_fields(node, changed)

    def visit_SeqStmt(self, op: SeqStmt) -> Stmt:
        new = [self.visit(s) for s in op.stmts]
        if all(a is b for a, b in zip(new, op.stmts, strict=True)):
            return op
        return seq(*[s for s in new if s is not None])


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _with_fields(node: Stmt, changed: dict[str, object]) -> Stmt:
    """``node`` with the statement fields in ``changed`` replaced, built without running the
    class's checks again: only statements the primitive built (checked then) go in, and with
    ``check`` on the verifier sees every program a primitive makes."""
    cls = type(node)
    new = object.__new__(cls)
    for name in _field_names(cls):
        object.__setattr__(new, name, changed[name] if name in changed else getattr(node, name))
    return new


def replace(func: PrimFunc, mapping: dict[int, Stmt | None]) -> PrimFunc:
    """Rebuild ``func`` with each statement whose ``id`` is in ``mapping`` replaced.

    A statement mapped to None is removed from its SeqStmt. Only the statements on the paths
    down to the replaced ones are visited (the program's index knows the paths).
    """
    index = _index(func)
    on_path: set[int] | None = set()
    for key in mapping:
        if key not in index.parent or key in index.shared:
            on_path = None  # not in func, or in several places: visit everything
            break
        up = index.parent[key]
        while up is not None and id(up) not in on_path:
            on_path.add(id(up))
            up = index.parent[id(up)]
    body = _Replace(mapping, on_path).visit(func.body)
    return func if body is func.body else func.with_body(body)


def substitute_loop_vars(stmt: Stmt, mapping: dict[Var, PrimExpr]) -> Stmt:
    """``substitute(stmt, mapping)`` for loop variables, without entering blocks: a block sees
    the loops outside it only through its bindings (the verifier's rule), so only loop bounds,
    bindings, predicates and the statements between loops can use them.

    ``for j in range(4): with T.block("B"): vi = T.axis.spatial(16, i * 4 + j) ...`` with
    ``{i: i0 * 2 + i1}`` -> ``vi = T.axis.spatial(16, (i0 * 2 + i1) * 4 + j)``, the block untouched.
    """
    if not mapping:
        return stmt
    return _SubstituteLoopVars(mapping.get).visit(stmt)


class _SubstituteLoopVars(Substituter):
    def visit(self, node: Node) -> Any:
        t = type(node)
        if t is Block:
            return node
        if t is BlockRealize:
            values = tuple(super(_SubstituteLoopVars, self).visit(v) for v in node.iter_values)
            pred = super().visit(node.predicate)
            if pred is node.predicate and all(a is b for a, b in zip(values, node.iter_values, strict=True)):
                return node
            return BlockRealize(values, pred, node.block)
        return super().visit(node)


def stmt_uses(stmt: Node, pred: Callable[[Node], bool]) -> bool:
    """Whether any node below ``stmt`` satisfies ``pred``."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        if pred(node):
            return True
        stack.extend(children(node))
    return False
