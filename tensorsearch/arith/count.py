"""Counting the arithmetic of a program: operations on data, and multiply-accumulates.

count_ops(workloads.get("GMM", 0, "float32").func)    # 2 * 128**3 (a multiply-add is 2)
count_macs(workloads.get("GMM", 0, "float32").func)   # 128**3
"""

from __future__ import annotations

from ..ir import (
    Add,
    Block,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    PrimExpr,
    PrimFunc,
    Select,
    Stmt,
    Sub,
    Var,
)
from ..ir.expr import Node
from ..ir.functor import children

__all__ = ["count_macs", "count_ops"]


def _walk_stores(func: PrimFunc, visit) -> None:
    """Call ``visit(store, iterations)`` for every store in the body (not the reduction inits)."""

    def walk(node: Node, iters: int) -> None:
        if isinstance(node, For):
            extent = node.extent.value if isinstance(node.extent, IntImm) else 1
            walk(node.body, iters * extent)
        elif isinstance(node, Block):
            walk(node.body, iters)  # the init stores constants (or copies): nothing to count
        elif isinstance(node, BufferStore):
            visit(node, iters)
        elif isinstance(node, Stmt):
            for child in children(node):
                if isinstance(child, Stmt):
                    walk(child, iters)

    walk(func.body, 1)


def count_ops(func: PrimFunc) -> int:
    """Arithmetic operations on data in one run of an unscheduled program: for every store, the
    arithmetic nodes of its value times the iterations of the loops around it. A multiply-add
    counts 2; index arithmetic (``h + rh`` inside a load's indices), casts, the conditions and
    choices of padding selects, and stores of constants (a reduction's init) count nothing.

    >>> from tensorsearch import workloads
    >>> wl = workloads.get("GMM", 0, "float32")  # 1 x 128 x 128 x 128
    >>> count_ops(wl.func) == 2 * 128**3 == wl.flops
    True
    """
    total = 0

    def visit(store: BufferStore, iters: int) -> None:
        nonlocal total
        total += iters * _data_ops(store.value)

    _walk_stores(func, visit)
    return total


def count_macs(func: PrimFunc) -> int:
    """Multiply-accumulates in one run of an unscheduled program: the iterations of every store
    of the form ``C[i] = C[i] + a * b`` (casts around the operands allowed), as a convolution or
    matmul stage is written."""
    total = 0

    def visit(store: BufferStore, iters: int) -> None:
        nonlocal total
        if _is_mac(store):
            total += iters

    _walk_stores(func, visit)
    return total


def _strip_cast(e: PrimExpr) -> PrimExpr:
    while isinstance(e, Cast):
        e = e.value
    return e


def _is_mac(store: BufferStore) -> bool:
    v = store.value
    if not isinstance(v, Add):
        return False
    for acc, term in ((v.a, v.b), (v.b, v.a)):
        if (
            isinstance(acc, BufferLoad)
            and acc.buffer is store.buffer
            and acc.indices == store.indices
            and isinstance(_strip_cast(term), Mul)
        ):
            return True
    return False


_DATA_OPS = (Add, Sub, Mul, Div, Mod, FloorDiv, FloorMod, Min, Max)


def _data_ops(value: PrimExpr) -> int:
    """Arithmetic nodes of a stored value, not looking into load indices or select conditions."""
    if isinstance(value, BufferLoad | IntImm | FloatImm | Var):
        return 0
    if isinstance(value, Select):
        return max(_data_ops(value.true_value), _data_ops(value.false_value))
    own = 1 if isinstance(value, _DATA_OPS) or (isinstance(value, Call) and value.op != "reinterpret") else 0
    return own + sum(_data_ops(c) for c in children(value) if isinstance(c, PrimExpr))
