"""Cutting the stages that read only constants out of a program (TVM's RewriteLayout).

A tuned schedule may stage a weight into another layout (GEMM panels, VNNI tiles) with a
``cache_read`` + ``transform_layout``: that copy runs on every call although the weight never
changes. Given which parameters hold constants, :func:`split_constant_stages` moves every
root-level statement that reads only constants (or what such statements wrote) into a *prepack*
function, run once when a model is compiled; the buffers it writes become parameters of the
main function. Before, a GEMM with a constant ``Y``::

    def main(X, Y, Z):
        Y_global = T.alloc_buffer((16, 1, 128, 8))
        for ax0, ax1 in T.grid(128, 128):
            with T.block("Y_global"): Y_global[ax1 // 8, 0, ax0, ax1 % 8] = Y[0, ax0, ax1]
        for ...:
            with T.block("Z_update"): Z[...] = Z[...] + X[...] * Y_global[...]

After::

    def prepack(Y, Y_global):                # run once: Y_global is an output
        for ax0, ax1 in T.grid(128, 128): ... Y_global[...] = Y[...]
    def main(X, Y_global, Z):                # Y is no parameter any more: only the copy read it
        for ...: ... Z[...] = Z[...] + X[...] * Y_global[...]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..ir import BlockRealize, Buffer, BufferLoad, BufferStore, PrimFunc, SeqStmt, make_prim_func, seq
from ..ir.functor import post_order_visit
from ..ir.stmt import Block, Stmt

__all__ = ["LAYOUT_FREE_ATTR", "ConstantSplit", "layout_free_params", "mark_layout_free", "split_constant_stages"]

LAYOUT_FREE_ATTR = "layout_free_buffers"  # TVM's PrimFunc attribute of the same name


def mark_layout_free(func: PrimFunc, constants: Sequence[int]) -> PrimFunc:
    """``func`` with its parameters ``constants`` marked as holding constants (a model's weights):
    a schedule may re-lay them once, ahead (:func:`split_constant_stages`), and the tuner times
    the kernel without that copy and with those buffers out of cache."""
    if not constants:
        return func
    attrs = {**func.attr_dict, LAYOUT_FREE_ATTR: tuple(int(i) for i in constants)}
    return PrimFunc(func.params, func.body, func.buffer_map, attrs)


def layout_free_params(func: PrimFunc) -> tuple[int, ...]:
    """The parameter indices :func:`mark_layout_free` marked (empty when none)."""
    return tuple(func.attr_dict.get(LAYOUT_FREE_ATTR, ()))


@dataclass(frozen=True)
class ConstantSplit:
    """The two functions and how their parameters relate to the original's.

    ``prepack_inputs``: original parameter indices the prepack reads (its first parameters);
    its remaining parameters are ``packed``, the buffers it writes. ``main_params``: for each
    parameter of ``main``, an original parameter index (int) or ``("packed", k)``.
    """

    main: PrimFunc
    prepack: PrimFunc
    prepack_inputs: tuple[int, ...]
    packed: tuple[Buffer, ...]
    main_params: tuple[int | tuple[str, int], ...]


def _touched(stmt: Stmt) -> tuple[set[Buffer], set[Buffer]]:
    loads: set[Buffer] = set()
    stores: set[Buffer] = set()

    def visit(n: object) -> None:
        if isinstance(n, BufferLoad):
            loads.add(n.buffer)
        elif isinstance(n, BufferStore):
            stores.add(n.buffer)
        elif isinstance(n, Block):
            loads.update(r.buffer for r in n.reads)
            stores.update(w.buffer for w in n.writes)

    post_order_visit(stmt, visit)
    return loads, stores


def split_constant_stages(func: PrimFunc, constants: Sequence[int]) -> ConstantSplit | None:
    """Split ``func`` (see the module docstring); None when no root-level statement reads only
    constants. ``constants`` are the indices of the parameters that hold constants."""
    root = func.body
    if not (isinstance(root, BlockRealize) and not root.block.iter_vars):
        return None
    stmts = list(root.block.body.stmts) if isinstance(root.block.body, SeqStmt) else [root.block.body]
    params = func.buffers
    if len(params) != len(func.params):
        return None  # scalar parameters: not a kernel of a model
    const_bufs = {params[i] for i in constants}
    allocs = set(root.block.alloc_buffers)
    hoisted: list[Stmt] = []
    kept: list[Stmt] = []
    made: set[Buffer] = set()
    for stmt in stmts:
        loads, stores = _touched(stmt)
        if loads - stores and loads - stores <= const_bufs | made and stores and stores <= allocs:
            hoisted.append(stmt)
            made |= stores
        else:
            kept.append(stmt)
    if not hoisted or not kept:
        return None
    rest_loads: set[Buffer] = set()
    for stmt in kept:
        loads, stores = _touched(stmt)
        if stores & made:
            return None  # the main part writes a packed buffer: it is not constant
        rest_loads |= loads | stores
    packed = tuple(b for b in root.block.alloc_buffers if b in made and b in rest_loads)
    pre_loads: set[Buffer] = set()
    for stmt in hoisted:
        pre_loads |= _touched(stmt)[0]
    prepack_inputs = tuple(i for i, b in enumerate(params) if b in pre_loads)
    temps = tuple(b for b in root.block.alloc_buffers if b in made and b not in packed)
    prepack_body = BlockRealize((), root.predicate, Block("root", (), (), (), seq(*hoisted), alloc_buffers=temps))
    name = str(func.attr_dict.get("global_symbol", "main"))
    prepack = make_prim_func([params[i] for i in prepack_inputs] + list(packed), prepack_body, name=f"{name}_prepack")
    # a constant read only by the prepack is no parameter of the main function
    kept_params = [i for i, b in enumerate(params) if not (i in constants and b not in rest_loads)]
    main_params = _insert_packed(kept_params, constants, len(packed))
    main_bufs = [params[p] if isinstance(p, int) else packed[p[1]] for p in main_params]
    allocs_left = tuple(b for b in root.block.alloc_buffers if b not in made)
    main_root = BlockRealize(
        (),
        root.predicate,
        Block("root", (), (), (), seq(*kept), alloc_buffers=allocs_left, annotations=root.block.annotations),
    )
    main = make_prim_func(main_bufs, main_root, name=name)
    return ConstantSplit(main, prepack, prepack_inputs, packed, tuple(main_params))


def _insert_packed(main_params: list[int], constants: Sequence[int], n: int) -> list[int | tuple[str, int]]:
    """The packed buffers go right after the last constant parameter (before the outputs)."""
    last = max(constants) if constants else -1
    at = len([p for p in main_params if isinstance(p, int) and p <= last])
    return main_params[:at] + [("packed", k) for k in range(n)] + main_params[at:]
