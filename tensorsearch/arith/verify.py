"""The IR verifier: rejects ill-formed programs with one sentence naming the block and the rule.

Rules checked by :func:`verify`:

* every variable is defined before use (function parameters and the variables in parameter
  buffers' shapes, loop variables, block iterators);
* a block's own statements (body, init, regions) use no loop variable from outside the
  block: they see the outside world only through their iterators;
* every buffer is a parameter, allocated by an enclosing block or an ``Allocate``, or matched;
* block names are unique; a block iterator's binding has the iterator's type;
* a block's loads lie inside its declared read (or write) regions and its stores inside its
  declared write regions (checked with the arithmetic analyzer over the block's iterator
  domains and the loops inside the block);
* iterator kinds agree with their use: no write index depends on a reduce iterator, and a
  block with an ``init`` statement has at least one reduce iterator.
"""

from __future__ import annotations

from typing import Any

from ..ir.expr import BufferLoad, Node, PrimExpr, Range, Var
from ..ir.functor import Visitor, children
from ..ir.stmt import Allocate, Block, BlockRealize, Buffer, BufferRegion, BufferStore, For, IterType, PrimFunc
from .int_set import eval_int_set
from .simplify import can_prove


class VerifyError(ValueError):
    """An ill-formed program; the message names the block (or function) and the rule broken."""


def verify(func: PrimFunc) -> PrimFunc:
    """Check that ``func`` is well formed; return it unchanged or raise VerifyError."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"verify takes a PrimFunc, got {type(func).__name__}")
    _Verifier(func).run()
    return func


def _block_label(block: Block | None) -> str:
    return f"block {block.name}" if block is not None else "the function body"


class _Verifier(Visitor):
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.params: set[Var] = set()  # parameters and the variables of parameter buffers' shapes
        self.block_iters: set[Var] = set()  # iterators of the enclosing blocks
        self.loops: dict[Var, Range] = {}  # loops between the innermost block and here
        self.hidden_loops: set[Var] = set()  # loops outside the innermost block
        self.buffers: list[set[Buffer]] = [set()]
        self.block: Block | None = None
        self.block_names: set[str] = set()

    def visible(self, var: Var) -> bool:
        return var in self.loops or var in self.block_iters or var in self.params

    def has_buffer(self, buf: Buffer) -> bool:
        return any(buf in s for s in self.buffers)

    def run(self) -> None:
        self.params.update(self.func.params)
        for _, buf in self.func.buffer_map:
            self.buffers[0].add(buf)
            for e in (*buf.shape, *buf.strides, buf.elem_offset):
                _collect_vars(e, self.params)
        self.visit(self.func.body)

    def where(self) -> str:
        return _block_label(self.block)

    # expressions ----------------------------------------------------------------------
    def visit_Var(self, var: Var) -> None:
        if self.visible(var):
            return
        if var in self.hidden_loops:
            raise VerifyError(
                f"{self.where()} uses loop variable {var.name} of an outer loop directly; "
                "a block sees outer loops only through its iterator bindings"
            )
        raise VerifyError(f"{self.where()} uses variable {var.name}, which is not defined")

    def check_buffer(self, buf: Buffer) -> None:
        if not self.has_buffer(buf):
            raise VerifyError(
                f"{self.where()} uses buffer {buf.name}, which is neither a parameter nor allocated or matched in an enclosing block"
            )

    def visit_BufferLoad(self, op: BufferLoad) -> None:
        self.check_buffer(op.buffer)
        self.generic_visit(op)

    def visit_BufferStore(self, op: BufferStore) -> None:
        self.check_buffer(op.buffer)
        self.generic_visit(op)

    def visit_BufferRegion(self, op: BufferRegion) -> None:
        self.check_buffer(op.buffer)
        self.generic_visit(op)

    # statements -----------------------------------------------------------------------
    def visit_For(self, op: For) -> None:
        self.visit(op.min)
        self.visit(op.extent)
        if self.visible(op.loop_var) or op.loop_var in self.hidden_loops:
            raise VerifyError(f"{self.where()} defines loop variable {op.loop_var.name} twice")
        self.loops[op.loop_var] = Range(op.min, op.extent)
        try:
            self.visit(op.body)
        finally:
            del self.loops[op.loop_var]

    def visit_Allocate(self, op: Allocate) -> None:
        self.buffers.append({op.buffer})
        try:
            self.visit(op.body)
        finally:
            self.buffers.pop()

    def visit_BlockRealize(self, op: BlockRealize) -> None:
        block = op.block
        for value in (*op.iter_values, op.predicate):
            self.visit(value)
        for iv, value in zip(block.iter_vars, op.iter_values, strict=True):
            if iv.var.dtype != value.dtype:
                raise VerifyError(
                    f"block {block.name} binds iterator {iv.var.name} of type {iv.var.dtype} to {value} of type {value.dtype}"
                )
        self.visit_block(block)

    def visit_Block(self, op: Block) -> None:  # a Block outside a BlockRealize
        raise VerifyError(f"block {op.name} appears without a BlockRealize binding its iterators")

    def visit_block(self, block: Block) -> None:
        if block.name in self.block_names:
            raise VerifyError(f"block name {block.name} is used twice; block names must be unique")
        self.block_names.add(block.name)
        saved = (self.block_iters, self.loops, self.hidden_loops, self.block)
        for iv in block.iter_vars:
            self.visit(iv.dom.min)
            self.visit(iv.dom.extent)
        self.block_iters = self.block_iters | {iv.var for iv in block.iter_vars}
        self.hidden_loops = self.hidden_loops | set(self.loops)
        self.loops = {}
        self.block = block
        self.buffers.append(set(block.alloc_buffers))
        try:
            for mb in block.match_buffers:
                self.visit(mb.source)
                self.buffers[-1].add(mb.buffer)
            for region in (*block.reads, *block.writes):
                self.visit(region)
            self.check_iter_kinds(block)
            if block.init is not None:
                self.visit(block.init)
            self.visit(block.body)
            self.check_regions(block)
        finally:
            self.buffers.pop()
            self.block_iters, self.loops, self.hidden_loops, self.block = saved

    # block rules ----------------------------------------------------------------------
    def check_iter_kinds(self, block: Block) -> None:
        reduce_vars = {iv.var for iv in block.iter_vars if iv.iter_type == IterType.REDUCE}
        if block.init is not None and not reduce_vars:
            raise VerifyError(f"block {block.name} has an init statement but no reduce iterator")
        if not reduce_vars:
            return
        for region in block.writes:
            for r in region.region:
                used: set[Var] = set()
                _collect_vars(r.min, used)
                _collect_vars(r.extent, used)
                bad = used & reduce_vars
                if bad:
                    name = sorted(v.name for v in bad)[0]
                    raise VerifyError(
                        f"block {block.name} writes {region.buffer.name} at an index that depends on reduce iterator {name}; "
                        "a reduce iterator may not select the output element"
                    )

    def check_regions(self, block: Block) -> None:

        reads: dict[Buffer, list[BufferRegion]] = {}
        writes: dict[Buffer, list[BufferRegion]] = {}
        for r in block.reads:
            reads.setdefault(r.buffer, []).append(r)
        for r in block.writes:
            writes.setdefault(r.buffer, []).append(r)
        local = set(block.alloc_buffers) | {mb.buffer for mb in block.match_buffers}
        dom: dict[Var, Range] = {iv.var: iv.dom for iv in block.iter_vars}
        for access, loops in _accesses(block):
            buf = access.buffer
            if buf in local:
                continue
            is_store = isinstance(access, BufferStore)
            allowed = writes.get(buf, []) if is_store else reads.get(buf, []) + writes.get(buf, [])
            kind = "writes" if is_store else "reads"
            if not allowed:
                raise VerifyError(
                    f"block {block.name} {kind} buffer {buf.name} but does not declare it in its {kind} regions"
                )
            if not any(_inside(access.indices, region, loops, {**dom, **loops}) for region in allowed):
                idx = ", ".join(str(i) for i in access.indices)
                raise VerifyError(f"block {block.name} {kind} {buf.name}[{idx}] outside its declared {kind} regions")


def _inside(
    indices: tuple[PrimExpr, ...], region: BufferRegion, loops: dict[Var, Range], env: dict[Var, Range]
) -> bool:
    """Whether every index, relaxed over the loops inside the block, provably lies in ``region``."""
    for index, rng in zip(indices, region.region, strict=True):
        s = eval_int_set(index, loops)
        lo_ok = can_prove(s.min_value >= rng.min, env)
        hi_ok = can_prove(s.max_value < rng.min + rng.extent, env)
        if not (lo_ok and hi_ok):
            return False
    return True


def _accesses(block: Block) -> list[tuple[BufferLoad | BufferStore, dict[Var, Range]]]:
    """Loads and stores of the block's own statements (not of nested blocks), with the loops around each."""
    found: list[tuple[Any, dict[Var, Range]]] = []

    def walk(node: Node, loops: dict[Var, Range]) -> None:
        if isinstance(node, BlockRealize):
            for v in node.iter_values:
                walk(v, loops)
            walk(node.predicate, loops)
            return
        if isinstance(node, For):
            walk(node.body, {**loops, node.loop_var: Range(node.min, node.extent)})
            return
        if isinstance(node, BufferLoad | BufferStore):
            found.append((node, loops))
        for child in children(node):
            if not isinstance(child, Buffer):
                walk(child, loops)

    if block.init is not None:
        walk(block.init, {})
    walk(block.body, {})
    return found


def _collect_vars(expr: Node, out: set[Var]) -> None:
    class _C(Visitor):
        def visit_Var(self, v: Var) -> None:
            out.add(v)

    _C().visit(expr)
