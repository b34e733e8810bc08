"""Walking and rewriting IR.

Every node's children are its dataclass fields.  :func:`map_children` rebuilds a node from
rewritten children (returning the same object when nothing changed), and the two classes
below dispatch on the node's class name::

    class RenameLoads(Mutator):
        def visit_BufferLoad(self, op):
            op = self.generic_visit(op)          # rewrite the indices first
            return BufferLoad(new_buffer, op.indices) if op.buffer is old_buffer else op

Buffers and variables are leaves: ``generic_visit`` does not descend into a Buffer's shape.
A Mutator that wants to replace buffers defines ``visit_Buffer``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from .expr import FloatImm, IntImm, Node, PrimExpr, Var
from .stmt import Buffer, Stmt

_LEAVES = (Var, Buffer)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _map_value(value: Any, fn: Callable[[Node], Any]) -> Any:
    if isinstance(value, Node):
        return fn(value)
    if isinstance(value, tuple):
        new = []
        changed = False
        for v in value:
            w = _map_value(v, fn)
            changed = changed or w is not v
            new.append(w)
        return tuple(new) if changed else value
    return value


def map_children(node: Node, fn: Callable[[Node], Any]) -> Node:
    """Apply ``fn`` to each child node (inside tuples too) and rebuild ``node`` if any changed."""
    if isinstance(node, _LEAVES):
        return node
    new_values = []
    changed = False
    for n in _field_names(type(node)):
        v = getattr(node, n)
        w = fn(v) if isinstance(v, Node) else _map_value(v, fn) if isinstance(v, tuple) else v
        changed = changed or w is not v
        new_values.append(w)
    return type(node)(*new_values) if changed else node


def _collect(v: Any, out: list[Node]) -> None:
    if isinstance(v, Node):
        out.append(v)
    elif isinstance(v, tuple):
        for x in v:
            _collect(x, out)


def children(node: Node) -> list[Node]:
    """The direct child nodes of ``node`` in field order."""
    out: list[Node] = []
    if not isinstance(node, _LEAVES):
        for n in _field_names(type(node)):
            v = getattr(node, n)
            if isinstance(v, Node):
                out.append(v)
            elif isinstance(v, tuple):
                _collect(v, out)
    return out


def _lookup_name(functor_cls: type, node_cls: type) -> str | None:
    for cls in node_cls.__mro__:
        if cls is Node or cls is object:
            return None
        if getattr(functor_cls, "visit_" + cls.__name__, None) is not None:
            return "visit_" + cls.__name__
    return None


def _dispatch_name(functor_cls: type, node_cls: type) -> str | None:
    """The name of the ``visit_<Class>`` method a functor class has for a node class (its own
    class or nearest IR base class), or None; remembered in a table on the functor class (so a
    class made inside a function takes its table with it when it goes)."""
    table = functor_cls.__dict__.get("_visit_names")
    if table is None:
        table = {}
        try:
            functor_cls._visit_names = table  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            return _lookup_name(functor_cls, node_cls)
    name = table.get(node_cls, _lookup_name)
    if name is _lookup_name:
        name = table[node_cls] = _lookup_name(functor_cls, node_cls)
    return name


def _dispatch(functor: Any, node: Node) -> Callable[[Node], Any] | None:
    """The ``visit_<Class>`` method for the node's class or its nearest IR base class (visit
    methods are looked up on the functor's class)."""
    name = _dispatch_name(type(functor), type(node))
    return None if name is None else getattr(functor, name)


class Visitor:
    """Read-only traversal; define ``visit_<ClassName>`` and call ``generic_visit`` to recurse.

    A node whose class has no method is dispatched to its base classes' methods
    (``visit_BinaryOp`` catches every binary arithmetic node).
    """

    def visit(self, node: Node) -> Any:
        method = _dispatch(self, node)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        for child in children(node):
            self.visit(child)


class Mutator:
    """Rewriting traversal; ``visit_<ClassName>`` returns the replacement node."""

    def visit(self, node: Node) -> Any:
        method = _dispatch(self, node)
        if method is not None:
            return method(node)
        return self.generic_visit(node)

    def generic_visit(self, node: Node) -> Any:
        return map_children(node, self.visit)


class StmtMutator(Mutator):
    """A Mutator that visits statements only: expressions, regions and the other non-statement
    nodes are kept as they are (no statement lies inside them), so a pass that rewrites blocks
    or loops does not walk every expression."""

    def visit(self, node: Node) -> Any:
        if not isinstance(node, Stmt):
            return node
        return super().visit(node)


def post_order_visit(node: Node, fn: Callable[[Node], None]) -> None:
    """Call ``fn`` on every node below and including ``node``, children first."""
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            fn(current)
            continue
        stack.append((current, True))
        for child in reversed(children(current)):
            stack.append((child, False))


def substitute(node: Node, mapping: dict[Var, PrimExpr] | Callable[[Var], PrimExpr | None]) -> Any:
    """Replace variables by expressions (a dict, or a function returning None to keep a var)."""
    lookup = mapping.get if isinstance(mapping, dict) else mapping
    if isinstance(mapping, dict) and not mapping:
        return node

    return Substituter(lookup).visit(node)


class Substituter(Mutator):
    """The Mutator behind :func:`substitute`: every variable ``lookup`` maps is replaced; a
    subclass may keep some variables where they are defined (loop or block bindings)."""

    def __init__(self, lookup: Callable[[Var], PrimExpr | None]) -> None:
        self.lookup = lookup

    def visit(self, node: Node) -> Any:
        if isinstance(node, Var):  # a Var subclass (te's ReduceAxis) too
            return self.visit_Var(node)
        t = type(node)
        if t is IntImm or t is FloatImm:  # constants hold nothing to substitute
            return node
        return map_children(node, self.visit)  # no other visit_ method: every other node is generic

    def visit_Var(self, var: Var) -> PrimExpr:
        new = self.lookup(var)
        return var if new is None else new


def free_vars(node: Node) -> list[Var]:
    """Variables used in ``node`` that no loop, block or allocation inside it defines, in first-use order."""
    collect = _CollectFreeVars()
    collect.visit(node)
    return [v for v in collect.seen if v not in collect.defined]


class _CollectFreeVars(Visitor):
    def __init__(self) -> None:
        self.defined: set[Var] = set()
        self.seen: dict[Var, None] = {}

    def visit_For(self, op: Any) -> None:
        self.defined.add(op.loop_var)
        self.generic_visit(op)

    def visit_Block(self, op: Any) -> None:
        for iv in op.iter_vars:
            self.defined.add(iv.var)
        self.generic_visit(op)

    def visit(self, node: Node) -> Any:
        if isinstance(node, Var):  # a Var subclass (te's ReduceAxis) too
            return self.visit_Var(node)
        t = type(node)
        if t is IntImm or t is FloatImm:  # constants hold no variable
            return None
        return super().visit(node)

    def visit_Var(self, var: Var) -> None:
        if var not in self.defined:
            self.seen.setdefault(var, None)
