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

A code generator or evaluator that returns a value per node is an :class:`ExprFunctor` and/or a
:class:`StmtFunctor` with the type it returns::

    class Printer(ExprFunctor[str]):
        def visit_Add(self, e: Add) -> str:
            return f"({self.visit_expr(e.a)} + {self.visit_expr(e.b)})"
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any, Generic, TypeVar

from .expr import FloatImm, IntImm, Node, PrimExpr, Var
from .stmt import Buffer, Stmt

T = TypeVar("T")

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


# ---------------------------------------------------------------------------------------
# typed functors


def _find_method(functor_cls: type, node_cls: type, fallback: str) -> Callable[..., Any]:
    """The ``visit_<Class>`` function of ``functor_cls`` for the node's class or its nearest IR
    base class, else the functor's ``fallback`` method."""
    for cls in node_cls.__mro__:
        if cls is Node or cls is object:
            break
        fn = getattr(functor_cls, "visit_" + cls.__name__, None)
        if fn is not None:
            return fn
    return getattr(functor_cls, fallback)


class ExprFunctor(Generic[T]):
    """Maps an expression to a ``T`` by the ``visit_<Class>`` method for its class (or its nearest
    IR base class: ``visit_BinaryOp`` catches every binary arithmetic node). The method for each
    node class is looked up once per functor class and kept in that class's table; an expression
    with no method goes to :meth:`unsupported_expr`."""

    _expr_methods: dict[type, Callable[..., Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._expr_methods = {}

    def visit_expr(self, e: PrimExpr) -> T:
        return (self._expr_methods.get(type(e)) or self.expr_method(type(e)))(self, e)

    @classmethod
    def expr_method(cls, node_cls: type) -> Callable[..., T]:
        """The function (taking the functor and the node) this functor class runs for an
        expression of ``node_cls``; a caller that wraps every visit calls it directly, one
        Python frame less per level of a deep expression."""
        fn = cls._expr_methods.get(node_cls)
        if fn is None:
            fn = cls._expr_methods[node_cls] = _find_method(cls, node_cls, "unsupported_expr")
        return fn

    def unsupported_expr(self, e: PrimExpr) -> T:
        raise TypeError(
            f"{type(self).__name__} has no visit_{type(e).__name__}: {type(e).__name__} expressions are not supported"
        )


class StmtFunctor(Generic[T]):
    """Maps a statement to a ``T`` by the ``visit_<Class>`` method for its class (or its nearest
    IR base class), looked up once per functor class and node class; a statement with no method
    goes to :meth:`unsupported_stmt`."""

    _stmt_methods: dict[type, Callable[..., Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._stmt_methods = {}

    def visit_stmt(self, s: Stmt) -> T:
        return (self._stmt_methods.get(type(s)) or self.stmt_method(type(s)))(self, s)

    @classmethod
    def stmt_method(cls, node_cls: type) -> Callable[..., T]:
        """The function (taking the functor and the node) this functor class runs for a statement
        of ``node_cls``, looked up once."""
        fn = cls._stmt_methods.get(node_cls)
        if fn is None:
            fn = cls._stmt_methods[node_cls] = _find_method(cls, node_cls, "unsupported_stmt")
        return fn

    def unsupported_stmt(self, s: Stmt) -> T:
        raise TypeError(
            f"{type(self).__name__} has no visit_{type(s).__name__}: {type(s).__name__} statements are not supported"
        )
