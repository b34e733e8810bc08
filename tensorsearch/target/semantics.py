"""An intrinsic's semantics: one statement of text, checked and built into a one-block PrimFunc.

The text is read with Python's ``ast`` module and walked (it is never executed), exactly like the
script parser. Grammar::

    statement := OUT[index, ...] = value        # OUT has role output
               | OUT[index, ...] += value       # OUT has role accumulator (a reduction)
    value     := OPERAND[index, ...] | number | value (+ | - | *) value | -value | (value)
               | cast(DTYPE, value) | DTYPE(value) | min(value, value) | max(value, value)
    index     := ITERATOR | integer | index (+ | -) index | integer * index | index * integer
               | index // integer | index % integer    # a packed layout: B[k // 4, j, k % 4]

A bare number takes the type of the other operand (or of OUT when the whole value is a number);
operands of ``+ - *`` must have the same type (write the casts). Every mistake raises the caller's
error class with the key path of ``semantics`` and the column of the offending part.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ir import (
    TRUE,
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    DataType,
    For,
    ForKind,
    IntImm,
    IterType,
    IterVar,
    Max,
    Min,
    PrimExpr,
    PrimFunc,
    Range,
    Var,
    const,
    make_prim_func,
    parse_dtype,
)
from ..ir.dtype import int32
from .operands import Iterator, Operand

if TYPE_CHECKING:
    from .reader import Ctx

_FUNCS = ("cast", "min", "max")


@dataclass(frozen=True)
class SemanticsIR:
    """The semantics built into IR over the description's own buffers (see ``Intrinsic.desc_func``)."""

    func: PrimFunc
    block: Block
    buffers: tuple[tuple[str, Buffer], ...]  # operand name -> buffer, in operand order
    store: BufferStore  # the block body: OUT[idx] = value, or OUT[idx] = OUT[idx] + value
    value: PrimExpr  # the right-hand side (without the accumulator's own load)
    accumulate: bool


def _is_dtype(name: str) -> bool:
    try:
        parse_dtype(name)
    except ValueError:
        return False
    return True


class _Builder:
    def __init__(self, text: str, operands: tuple[Operand, ...], iterators: tuple[Iterator, ...], ctx: Ctx):
        self.text = text
        self.ctx = ctx
        self.operands = {o.name: o for o in operands}
        self.buffers = {o.name: Buffer(o.name, o.shape, o.dtype, scope=o.scope) for o in operands}
        self.iterators = {it.name: it for it in iterators}
        self.vars = {it.name: Var("v_" + it.name, int32) for it in iterators}
        self.used_iters: set[str] = set()
        self.read: set[str] = set()
        self.target: str | None = None
        self.multiline = "\n" in text

    # errors ----------------------------------------------------------------------------
    def err(self, node: Any, msg: str) -> Exception:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1
        where = f"line {line}, column {col}" if self.multiline else f"column {col}"
        return self.ctx.message(f"{where}: {msg} (in {self.text!r})", self.text)

    def src(self, node: Any) -> str:
        return ast.unparse(node)

    # indices ---------------------------------------------------------------------------
    def index(self, n: Any) -> tuple[PrimExpr, int, int, bool]:
        """(expression, min, max, is_constant) of an affine index."""
        if isinstance(n, ast.Name):
            if n.id in self.iterators:
                self.used_iters.add(n.id)
                return self.vars[n.id], 0, self.iterators[n.id].extent - 1, False
            if n.id in self.operands:
                raise self.err(n, f"operand {n.id} is used as an index; an index is made of iterators and integers")
            declared = ", ".join(self.iterators) or "(none)"
            raise self.err(n, f"iterator {n.id!r} is not declared; the declared iterators are: {declared}")
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return IntImm(int32, n.value), n.value, n.value, True
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            e, lo, hi, c = self.index(n.operand)
            return -e, -hi, -lo, c
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub | ast.Mult):
            a, alo, ahi, ac = self.index(n.left)
            b, blo, bhi, bc = self.index(n.right)
            if isinstance(n.op, ast.Add):
                return a + b, alo + blo, ahi + bhi, ac and bc
            if isinstance(n.op, ast.Sub):
                return a - b, alo - bhi, ahi - blo, ac and bc
            if not (ac or bc):
                raise self.err(n, f"index {self.src(n)!r} is not affine: one side of '*' must be an integer")
            products = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
            return a * b, min(products), max(products), ac and bc
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv | ast.Mod):
            return self.packed_index(n)
        raise self.err(n, f"unsupported index {self.src(n)!r}; an index is an affine form of iterators")

    def packed_index(self, n: ast.BinOp) -> tuple[PrimExpr, int, int, bool]:
        """``index // c`` or ``index % c`` (a positive integer ``c``, an index that is never
        negative): how a packed layout such as AMX's B tile ``B[k // 4, j, k % 4]`` is indexed."""
        sym = "//" if isinstance(n.op, ast.FloorDiv) else "%"
        a, lo, hi, ac = self.index(n.left)
        if not (isinstance(n.right, ast.Constant) and type(n.right.value) is int and n.right.value > 0):
            raise self.err(n, f"index {self.src(n)!r}: the right side of '{sym}' must be a positive integer")
        if lo < 0:
            raise self.err(n, f"index {self.src(n)!r}: the left side of '{sym}' may be negative")
        c = n.right.value
        if sym == "//":
            return a // c, lo // c, hi // c, ac
        return a % c, (lo if hi < c else 0), (hi if hi < c else c - 1), ac

    def access(self, n: ast.Subscript) -> tuple[str, Buffer, tuple[PrimExpr, ...]]:
        if not isinstance(n.value, ast.Name):
            raise self.err(n, f"expected an operand name before '[', found {self.src(n.value)!r}")
        name = n.value.id
        if name not in self.operands:
            if name in self.iterators:
                raise self.err(n, f"iterator {name} is indexed like an operand")
            declared = ", ".join(self.operands) or "(none)"
            raise self.err(n.value, f"operand {name!r} is not declared; the declared operands are: {declared}")
        op = self.operands[name]
        items = list(n.slice.elts) if isinstance(n.slice, ast.Tuple) else [n.slice]
        if len(items) != len(op.shape):
            raise self.err(
                n,
                f"operand {name} has {len(op.shape)} dimensions (shape {list(op.shape)}) but is indexed with {len(items)}",
            )
        indices = []
        for d, item in enumerate(items):
            if isinstance(item, ast.Slice):
                raise self.err(item, "slices are not allowed in the semantics; index with iterators")
            e, lo, hi, _ = self.index(item)
            if lo != 0 or hi != op.shape[d] - 1:
                raise self.err(
                    item,
                    f"shape mismatch: index {self.src(item)!r} of operand {name} spans {lo}..{hi} but dimension {d} "
                    f"of its shape {list(op.shape)} is 0..{op.shape[d] - 1}; each index must cover its dimension "
                    "(check the iterator extents and the operand shape)",
                )
            indices.append(e)
        return name, self.buffers[name], tuple(indices)

    # values ----------------------------------------------------------------------------
    def want_dtype(self) -> DataType:
        """The type of the written operand (what a cast in the value usually targets)."""
        return self.operands[self.target].dtype if self.target is not None else int32

    def literal(self, n: Any) -> bool:
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd):
            n = n.operand
        return isinstance(n, ast.Constant) and type(n.value) in (int, float)

    def number(self, n: Any, dtype: DataType | None) -> PrimExpr:
        value = n.operand.value if isinstance(n, ast.UnaryOp) else n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            value = -value
        if dtype is None:
            raise self.err(n, f"cannot tell the type of the number {value}; write a cast such as int32({value})")
        if isinstance(value, float) and not dtype.is_float:
            raise self.err(n, f"the number {value} is a float but the value here is {dtype}")
        try:
            return const(value, dtype)
        except (TypeError, ValueError) as e:
            raise self.err(n, f"the number {value} does not fit {dtype}: {e}") from None

    def pair(self, left: Any, right: Any) -> tuple[PrimExpr, PrimExpr]:
        a = None if self.literal(left) else self.value(left)
        b = None if self.literal(right) else self.value(right)
        if a is None:
            a = self.number(left, None if b is None else b.dtype)
        if b is None:
            b = self.number(right, a.dtype)
        return a, b

    def value(self, n: Any, want: DataType | None = None) -> PrimExpr:
        if self.literal(n):
            return self.number(n, want)
        if isinstance(n, ast.Subscript):
            name, buf, idx = self.access(n)
            if name == self.target:
                raise self.err(n, f"the semantics reads {name}, the operand it writes; use '+=' to accumulate")
            self.read.add(name)
            return BufferLoad(buf, idx)
        if isinstance(n, ast.Name):
            if n.id in self.operands:
                raise self.err(n, f"operand {n.id} needs indices, such as {n.id}[i, k]")
            if n.id in self.iterators:
                raise self.err(n, f"iterator {n.id} is used as a value; iterators may only index operands")
            raise self.err(n, f"{n.id!r} is neither a declared operand nor a declared iterator")
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add | ast.Sub | ast.Mult):
            a, b = self.pair(n.left, n.right)
            if a.dtype != b.dtype:
                sym = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}[type(n.op)]
                raise self.err(
                    n,
                    f"the operands of '{sym}' have different types: {self.src(n.left)} is {a.dtype} and "
                    f"{self.src(n.right)} is {b.dtype}; write the casts, e.g. cast({self.want_dtype()}, {self.src(n.left)})",
                )
            return a + b if isinstance(n.op, ast.Add) else a - b if isinstance(n.op, ast.Sub) else a * b
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -self.value(n.operand, want)
        if isinstance(n, ast.Call):
            return self.call(n)
        raise self.err(n, f"unsupported expression {self.src(n)!r}")

    def dtype_arg(self, n: Any) -> DataType:
        name = n.id if isinstance(n, ast.Name) else n.value if isinstance(n, ast.Constant) else None
        if not isinstance(name, str) or not _is_dtype(name):
            raise self.err(n, f"expected a data type such as int32 or float16, found {self.src(n)!r}")
        return parse_dtype(name)

    def call(self, n: ast.Call) -> PrimExpr:
        fname = n.func.id if isinstance(n.func, ast.Name) else None
        if n.keywords:
            raise self.err(n.keywords[0], "keyword arguments are not allowed in the semantics")
        if fname == "cast":
            if len(n.args) != 2:
                raise self.err(
                    n, f"cast takes a type and a value, as in cast(int32, A[i]); found {len(n.args)} arguments"
                )
            dtype = self.dtype_arg(n.args[0])
            return Cast(dtype, self.value(n.args[1], dtype))
        if fname is not None and _is_dtype(fname):
            if len(n.args) != 1:
                raise self.err(n, f"{fname}(...) takes one value; found {len(n.args)} arguments")
            dtype = parse_dtype(fname)
            if self.literal(n.args[0]):
                return self.number(n.args[0], dtype)
            return Cast(dtype, self.value(n.args[0], dtype))
        if fname in ("min", "max"):
            if len(n.args) != 2:
                raise self.err(n, f"{fname} takes two values; found {len(n.args)} arguments")
            a, b = self.pair(n.args[0], n.args[1])
            if a.dtype != b.dtype:
                raise self.err(n, f"the arguments of {fname} have different types: {a.dtype} and {b.dtype}")
            return Min(a, b) if fname == "min" else Max(a, b)
        known = ", ".join(_FUNCS)
        raise self.err(n.func, f"unknown function {self.src(n.func)!r}; known: {known} and data type names (int32(x))")

    # the statement ---------------------------------------------------------------------
    def build(self, name: str) -> SemanticsIR:
        text = self.text.strip()
        try:
            tree = ast.parse(text, mode="exec")
        except SyntaxError as e:
            where = f"line {e.lineno or 1}, column {e.offset or 1}" if self.multiline else f"column {e.offset or 1}"
            raise self.ctx.message(f"{where}: bad expression: {e.msg} (in {self.text!r})", self.text) from None
        form = "`OUT[i, j] = value` or `OUT[i, j] += value`"
        if len(tree.body) != 1:
            raise self.ctx.message(f"expected one statement, {form}; found {len(tree.body)}", self.text)
        st = tree.body[0]
        if isinstance(st, ast.AugAssign) and isinstance(st.op, ast.Add):
            accumulate, target, rhs = True, st.target, st.value
        elif isinstance(st, ast.Assign) and len(st.targets) == 1:
            accumulate, target, rhs = False, st.targets[0], st.value
        else:
            raise self.err(st, f"expected {form}")
        if not isinstance(target, ast.Subscript):
            raise self.err(target, f"expected {form}: the left side must be an operand with indices")
        out, buf, out_idx = self.access(target)
        op = self.operands[out]
        self.target = out
        want_role = "accumulator" if accumulate else "output"
        if op.role != want_role:
            how = "'+=' writes an accumulator" if accumulate else "'=' writes an output (use '+=' for an accumulator)"
            raise self.err(target, f"operand {out} has role {op.role} but {how}; expected role {want_role}")
        for other in self.operands.values():
            if other.name != out and other.role != "input":
                raise self.err(target, f"operand {other.name} has role {other.role} but the semantics writes {out}")
        target_iters = set(self.used_iters)
        value = self.value(rhs, op.dtype)
        if value.dtype != op.dtype:
            raise self.err(
                rhs, f"the value has type {value.dtype} but {out} is {op.dtype}; write cast({op.dtype}, ...)"
            )
        for it in self.iterators.values():
            if it.name not in self.used_iters:
                raise self.ctx.message(f"iterator {it.name} is declared but never used (in {self.text!r})", it.name)
            if it.kind == IterType.SPATIAL and it.name not in target_iters:
                raise self.ctx.message(
                    f"spatial iterator {it.name} does not index the written operand {out}; "
                    f"declare it kind reduce or index {out} with it (in {self.text!r})",
                    it.name,
                )
            if it.kind == IterType.REDUCE and it.name in target_iters:
                raise self.ctx.message(
                    f"reduce iterator {it.name} indexes the written operand {out}; "
                    f"a reduce iterator may not select the output element (in {self.text!r})",
                    it.name,
                )
            if it.kind == IterType.REDUCE and not accumulate:
                raise self.ctx.message(
                    f"reduce iterator {it.name} needs an accumulating semantics: {out}[...] += ... (in {self.text!r})",
                    it.name,
                )
        for o in self.operands.values():
            if o.role == "input" and o.name not in self.read:
                raise self.ctx.message(f"operand {o.name} is declared but the semantics never reads it", o.name)
        return self.make(name, out, buf, out_idx, value, accumulate)

    def make(
        self, name: str, out: str, buf: Buffer, idx: tuple[PrimExpr, ...], value: PrimExpr, accumulate: bool
    ) -> SemanticsIR:
        store = BufferStore(buf, BufferLoad(buf, idx) + value if accumulate else value, idx)
        order = list(self.operands)
        read = [n for n in order if n in self.read or (accumulate and n == out)]
        reads = tuple(self.buffers[n].full_region() for n in read)
        iter_vars = tuple(
            IterVar(self.vars[it.name], Range(IntImm(int32, 0), IntImm(int32, it.extent)), it.kind)
            for it in self.iterators.values()
        )
        block = Block(name, iter_vars, reads, (buf.full_region(),), store)
        loop_vars = [Var(it.name, int32) for it in self.iterators.values()]
        stmt: Any = BlockRealize(tuple(loop_vars), TRUE, block)
        for lv, it in reversed(list(zip(loop_vars, self.iterators.values(), strict=True))):
            stmt = For(lv, IntImm(int32, 0), IntImm(int32, it.extent), ForKind.SERIAL, stmt)
        root = Block("root", (), (), (), stmt)
        buffers = tuple((n, self.buffers[n]) for n in order)
        func = make_prim_func([b for _, b in buffers], BlockRealize((), TRUE, root), name=name)
        return SemanticsIR(func, block, buffers, store, value, accumulate)


def build_semantics(
    text: str, operands: tuple[Operand, ...], iterators: tuple[Iterator, ...], name: str, ctx: Ctx
) -> SemanticsIR:
    """Check ``text`` against the declared operands and iterators and build its one-block PrimFunc."""
    return _Builder(text, operands, iterators, ctx).build(name)
