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

from .expr import Node, PrimExpr, Var
from .stmt import Buffer

_LEAVES = (Var, Buffer)


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _map_value(value: Any, fn: Callable[[Node], Any]) -> Any:
    if isinstance(value, Node):
        return fn(value)
    if isinstance(value, tuple):
        new = tuple(_map_value(v, fn) for v in value)
        if all(a is b for a, b in zip(new, value, strict=True)):
            return value
        return new
    return value


def map_children(node: Node, fn: Callable[[Node], Any]) -> Node:
    """Apply ``fn`` to each child node (inside tuples too) and rebuild ``node`` if any changed."""
    if isinstance(node, _LEAVES):
        return node
    names = _field_names(type(node))
    values = [getattr(node, n) for n in names]
    new_values = [_map_value(v, fn) for v in values]
    if all(a is b for a, b in zip(new_values, values, strict=True)):
        return node
    return type(node)(*new_values)


def children(node: Node) -> list[Node]:
    """The direct child nodes of ``node`` in field order."""
    out: list[Node] = []

    def collect(v: Any) -> None:
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
            for x in v:
                collect(x)

    if not isinstance(node, _LEAVES):
        for n in _field_names(type(node)):
            collect(getattr(node, n))
    return out


def _dispatch(functor: Any, node: Node) -> Callable[[Node], Any] | None:
    """The ``visit_<Class>`` method for the node's class or its nearest IR base class."""
    for cls in type(node).__mro__:
        if cls is Node or cls is object:
            return None
        method = getattr(functor, "visit_" + cls.__name__, None)
        if method is not None:
            return method
    return None


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

    return _Substitute(lookup).visit(node)


class _Substitute(Mutator):
    def __init__(self, lookup: Callable[[Var], PrimExpr | None]) -> None:
        self.lookup = lookup

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

    def visit_Var(self, var: Var) -> None:
        if var not in self.defined:
            self.seen.setdefault(var, None)
