"""Print TensorIR as TVMScript-like text; the syntax is described in ``tensorsearch/script/__init__.py``.

Names: every printed variable or buffer gets a valid Python identifier that no other visible
object has (``A``, ``A_1``, ...), chosen in printing order, so the text is deterministic and
reading it back and printing again gives the same text.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from .dtype import DataType, int32
from .expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    MATH_FUNCTIONS,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Node,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Sub,
    Var,
)
from .functor import ExprFunctor, StmtFunctor
from .stmt import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterType,
    IterVar,
    MatchBufferRegion,
    PrimFunc,
    SeqStmt,
    Stmt,
)

# Operator tables, shared with the parser: class -> (printed symbol, Python precedence).
INFIX_OPS = {Add: ("+", 6), Sub: ("-", 6), Mul: ("*", 7), Div: ("/", 7), FloorDiv: ("//", 7), FloorMod: ("%", 7)}
BOOL_OPS = {And: ("and", 2), Or: ("or", 1)}
CMP_OPS = {EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
CALL_OPS = {Mod: "truncmod", Min: "min", Max: "max"}  # printed as T.truncmod(a, b), ...
_NOT, _CMP, _UNARY, _ATOM = 3, 4, 8, 10
_AXIS_LETTER = {IterType.SPATIAL: "S", IterType.REDUCE: "R"}
_ZERO32 = IntImm(int32, 0)
_RESERVED = frozenset(keyword.kwlist) | {"T"}


def _sanitize(name: str) -> str:
    """A valid ASCII identifier for ``name``; idempotent on its own results."""
    s = re.sub(r"[^0-9A-Za-z_]", "_", name) or "v"
    if s[0].isdigit():
        s = "_" + s
    return s + "_" if s in _RESERVED else s


def _str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _float(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return _str(repr(value))
    return repr(value)


def _int(dtype: DataType, value: int) -> str:
    if dtype == int32:
        return str(value)
    if dtype.is_bool:
        return "True" if value else "False"
    return f"T.{dtype}({value})"


def _tuple(items: list[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _is_zero(e: PrimExpr, dtype: DataType) -> bool:
    return type(e) is IntImm and e.value == 0 and e.dtype == dtype


def _walk(root: Any, fn: Any) -> None:
    """Call ``fn`` on every node reachable from ``root``, buffers' fields included (each var/buffer once)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, Node):
            if isinstance(x, Var | Buffer):
                if id(x) in seen:
                    continue
                seen.add(id(x))
            fn(x)
            if not isinstance(x, Var):
                stack.extend(getattr(x, f.name) for f in fields(x))


def _any(root: Any, pred: Callable[[Node], bool]) -> bool:
    found: list[bool] = []
    _walk(root, lambda n: found.append(True) if pred(n) else None)
    return bool(found)


def contains_block(stmt: Any) -> bool:
    return _any(stmt, lambda n: isinstance(n, Block))


def is_root_realize(stmt: Any) -> bool:
    return isinstance(stmt, BlockRealize) and stmt.block.name == "root"


def needs_implicit_root(body: Stmt, has_root_decls: bool) -> bool:
    """The parser's rule: wrap the function body in a root block when this holds."""
    return has_root_decls or (contains_block(body) and not is_root_realize(body))


def _plain_root(body: Stmt) -> Block | None:
    """The root block when ``body`` is one the parser would re-create from its contents."""
    if not is_root_realize(body) or body.iter_values or body.predicate != TRUE:
        return None
    b = body.block
    if b.iter_vars or b.reads or b.writes or b.init is not None or b.match_buffers:
        return None
    return b if needs_implicit_root(b.body, bool(b.alloc_buffers or b.annotations)) else None


class _Printer(ExprFunctor[tuple[str, int]], StmtFunctor[None]):
    """One printing pass. ``mode`` is "ssa" (names scoped like Python), "flat" (one namespace for
    the whole function, used when a variable or buffer is defined twice or used outside its
    scope) or "lenient" (for ``str(node)``: undefined objects are named on first use)."""

    def __init__(self, mode: str = "ssa") -> None:
        self.flat = mode != "ssa"
        self.lenient = mode == "lenient"
        self.names: dict[int, str] = {}
        self.visible: set[str] = set()
        self.scopes: list[list[int]] = [[]]
        self.defined: set[int] = set()
        self.missing: list[Any] = []
        self.missing_ids: set[int] = set()
        self.redefined = False
        self.loops: dict[int, For] = {}
        self.lines: list[str] = []
        self.depth = 0

    # names ----------------------------------------------------------------------------
    def push(self) -> None:
        self.scopes.append([])

    def pop(self) -> None:
        keys = self.scopes.pop()
        if not self.flat:
            for k in keys:
                name = self.names.pop(k, None)
                if name is not None:
                    self.visible.discard(name)

    def define(self, obj: Var | Buffer, outer: bool = False) -> str:
        key = id(obj)
        if self.flat and key in self.names:
            return self.names[key]
        if key in self.defined:
            self.redefined = True
        self.defined.add(key)
        base = name = _sanitize(obj.name)
        k = 0
        while name in self.visible:
            k += 1
            name = f"{base}_{k}"
        self.names[key] = name
        self.visible.add(name)
        (self.scopes[0] if outer else self.scopes[-1]).append(key)
        return name

    def use(self, obj: Var | Buffer) -> str:
        name = self.names.get(id(obj))
        if name is not None:
            return name
        if self.lenient:
            return self.define(obj, outer=True)
        if id(obj) not in self.missing_ids:
            self.missing_ids.add(id(obj))
            self.missing.append(obj)
        return _sanitize(obj.name)

    # expressions ----------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        return self._expr(e)[0]

    def _wrap(self, e: PrimExpr, prec: int, strict: bool = False) -> str:
        text, p = self._expr(e)
        return f"({text})" if p < prec or (strict and p == prec) else text

    def _call(self, name: str, *args: str) -> tuple[str, int]:
        return f"T.{name}({', '.join(args)})", _ATOM

    def _expr(self, e: PrimExpr) -> tuple[str, int]:
        return (self._expr_methods.get(type(e)) or self.expr_method(type(e)))(self, e)

    def visit_Var(self, e: Var) -> tuple[str, int]:
        if type(e) is not Var:  # a Var subclass (te's ReduceAxis) is no script variable
            return self.unsupported_expr(e)
        return self.use(e), _ATOM

    def visit_IntImm(self, e: IntImm) -> tuple[str, int]:
        return _int(e.dtype, e.value), _UNARY if e.value < 0 and e.dtype == int32 else _ATOM

    def visit_FloatImm(self, e: FloatImm) -> tuple[str, int]:
        return self._call(str(e.dtype), _float(e.value))

    def visit_StringImm(self, e: StringImm) -> tuple[str, int]:
        return _str(e.value), _ATOM

    def visit_BinaryOp(self, e: BinaryOp) -> tuple[str, int]:
        t = type(e)
        if t in INFIX_OPS:
            sym, p = INFIX_OPS[t]
            return f"{self._wrap(e.a, p)} {sym} {self._wrap(e.b, p, True)}", p
        return self._call(CALL_OPS[t], self.expr(e.a), self.expr(e.b))

    def _bool_op(self, e: And | Or) -> tuple[str, int]:
        sym, p = BOOL_OPS[type(e)]
        return f"{self._wrap(e.a, p)} {sym} {self._wrap(e.b, p, True)}", p

    visit_And = visit_Or = _bool_op

    def visit_CmpOp(self, e: CmpOp) -> tuple[str, int]:
        return f"{self._wrap(e.a, _CMP, True)} {CMP_OPS[type(e)]} {self._wrap(e.b, _CMP, True)}", _CMP

    def visit_Not(self, e: Not) -> tuple[str, int]:
        return f"not {self._wrap(e.a, _NOT)}", _NOT

    def visit_Select(self, e: Select) -> tuple[str, int]:
        return self._call("Select", *map(self.expr, (e.condition, e.true_value, e.false_value)))

    def visit_Cast(self, e: Cast) -> tuple[str, int]:
        return self._call("Cast", _str(str(e.dtype)), self.expr(e.value))

    def visit_BufferLoad(self, e: BufferLoad) -> tuple[str, int]:
        return self.subscript(e.buffer, [self.expr(i) for i in e.indices]), _ATOM

    def visit_Ramp(self, e: Ramp) -> tuple[str, int]:
        return self._call("Ramp", self.expr(e.base), self.expr(e.stride), str(e.lanes))

    def visit_Broadcast(self, e: Broadcast) -> tuple[str, int]:
        return self._call("Broadcast", self.expr(e.value), str(e.lanes))

    def visit_Call(self, e: Call) -> tuple[str, int]:
        args = [self.expr(a) for a in e.args]
        if e.op in MATH_FUNCTIONS and e.args and e.args[0].dtype == e.dtype:
            return self._call(e.op, *args)
        return self._call("call", _str(e.op), *args, f"dtype={_str(str(e.dtype))}")

    def unsupported_expr(self, e: PrimExpr) -> tuple[str, int]:
        if self.lenient:
            return repr(e), _ATOM
        raise TypeError(f"cannot print expression of type {type(e).__name__}")

    def subscript(self, buffer: Buffer, items: list[str]) -> str:
        return f"{self.use(buffer)}[{', '.join(items) if items else '()'}]"

    def range_(self, r: Range, point: bool = True) -> str:
        """``min`` for a unit range (when ``point``), ``0:extent``, ``2:10``, or ``m:m + extent``."""
        lo, ext = r.min, r.extent
        if point and type(ext) is IntImm and ext.value == 1 and ext.dtype == lo.dtype:
            return self.expr(lo)
        if type(lo) is IntImm and lo.value == 0:
            return f"{self.expr(lo)}:{self.expr(ext)}"
        if type(lo) is IntImm and type(ext) is IntImm and lo.dtype == ext.dtype:
            hi = lo.value + ext.value
            if lo.dtype.min_value() <= hi <= lo.dtype.max_value():
                return f"{self.expr(lo)}:{_int(lo.dtype, hi)}"
        return f"{self.expr(lo)}:{self._wrap(lo, 6)} + {self._wrap(ext, 6, True)}"

    def region(self, br: BufferRegion) -> str:
        return self.subscript(br.buffer, [self.range_(r) for r in br.region])

    def ann_value(self, v: Any) -> str:
        if isinstance(v, bool) or v is None:
            return str(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({_str(repr(v))})"
        if isinstance(v, str):
            return _str(v)
        if isinstance(v, tuple):
            return f"[{', '.join(map(self.ann_value, v))}]"
        if isinstance(v, IntImm):
            return f"T.{v.dtype}({_int(v.dtype, v.value) if v.dtype.is_bool else v.value})"
        if isinstance(v, StringImm):
            return f"T.StringImm({_str(v.value)})"
        if isinstance(v, PrimExpr):
            return self.expr(v)
        if isinstance(v, Buffer):
            return self.use(v)
        if isinstance(v, BufferRegion):
            return f"T.region({self.region(v)})"
        if self.lenient:
            return repr(v)
        raise TypeError(f"cannot print an annotation value of type {type(v).__name__}")

    def annotations(self, pairs: Any) -> str:
        return "{" + ", ".join(f"{_str(k)}: {self.ann_value(v)}" for k, v in pairs) + "}"

    def buffer_args(self, b: Buffer, source: str | None = None) -> str:
        args = [] if source is None else [source]
        args += [_tuple([self.expr(s) for s in b.shape]), _str(str(b.dtype))]
        if b.strides:
            args.append(f"strides={_tuple([self.expr(s) for s in b.strides])}")
        if b.elem_offset != _ZERO32:
            args.append(f"elem_offset={self.expr(b.elem_offset)}")
        if b.scope != "global":
            args.append(f"scope={_str(b.scope)}")
        if b.alignment != 64:
            args.append(f"align={b.alignment}")
        if b.offset_factor != 1:
            args.append(f"offset_factor={b.offset_factor}")
        return f"({', '.join(args)})"

    # statements -----------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def body(self, s: Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def seq_items(self, stmts: tuple[Stmt, ...]) -> None:
        if not stmts:
            self.line("pass")
        for s in stmts:
            if isinstance(s, SeqStmt):
                self.line("with T.seq():")
                self.depth += 1
                self.seq_items(s.stmts)
                self.depth -= 1
            else:
                self.stmt(s)

    def stmt(self, s: Stmt) -> None:
        (self._stmt_methods.get(type(s)) or self.stmt_method(type(s)))(self, s)

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        # a flat list of >= 2 non-sequence statements prints bare; anything else needs T.seq
        self.seq_items((s,) if len(s.stmts) == 1 else s.stmts)

    def visit_BufferStore(self, s: BufferStore) -> None:
        self.line(f"{self.subscript(s.buffer, [self.expr(i) for i in s.indices])} = {self.expr(s.value)}")

    def visit_Evaluate(self, s: Evaluate) -> None:
        self.line(f"T.evaluate({self.expr(s.value)})")

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.line(f"if {self.expr(s.condition)}:")
        self.body(s.then_case)
        e = s.else_case
        while type(e) is IfThenElse:
            self.line(f"elif {self.expr(e.condition)}:")
            self.body(e.then_case)
            e = e.else_case
        if e is not None:
            self.line("else:")
            self.body(e)

    def visit_For(self, s: For) -> None:
        self.for_(s)

    def visit_BlockRealize(self, s: BlockRealize) -> None:
        self.block(s.block, s)

    def visit_Block(self, s: Block) -> None:
        self.block(s, None)

    def visit_Allocate(self, s: Allocate) -> None:
        args = self.buffer_args(s.buffer)
        self.push()
        self.line(f"with T.allocate{args} as {self.define(s.buffer)}:")
        self.body(s.body)
        self.pop()

    def unsupported_stmt(self, s: Stmt) -> None:
        if self.lenient:
            self.line(repr(s))
        else:
            raise TypeError(f"cannot print statement of type {type(s).__name__}")

    def _grid_chain(self, s: For) -> list[For]:
        def plain(f: Any) -> bool:
            return (
                type(f) is For
                and f.kind == ForKind.SERIAL
                and not f.annotations
                and _is_zero(f.min, f.extent.dtype)
                and f.loop_var.dtype == f.extent.dtype
            )

        chain: list[For] = []
        outer: set[int] = set()
        f: Any = s
        while plain(f):
            if _any(f.extent, lambda n: id(n) in outer):
                break
            chain.append(f)
            outer.add(id(f.loop_var))
            f = f.body
        return chain

    def for_(self, s: For) -> None:
        chain = self._grid_chain(s)
        if len(chain) >= 2:
            head = f"T.grid({', '.join(self.expr(f.extent) for f in chain)})"
        else:
            chain = [s]
            args = self.loop_args(s.min, s.extent, "extent")
            if s.loop_var.dtype != s.extent.dtype:
                args.append(f"dtype={_str(str(s.loop_var.dtype))}")
            if s.thread_binding is not None:
                args.append(f"thread={_str(s.thread_binding)}")
            if s.annotations:
                args.append(f"annotations={self.annotations(s.annotations)}")
            head = f"T.{s.kind.value}({', '.join(args)})"
        self.push()
        saved = [(id(f.loop_var), self.loops.get(id(f.loop_var))) for f in chain]
        names = []
        for f in chain:
            names.append(self.define(f.loop_var))
            self.loops[id(f.loop_var)] = f
        self.line(f"for {', '.join(names)} in {head}:")
        self.body(chain[-1].body)
        for key, f in reversed(saved):
            if f is None:
                self.loops.pop(key, None)
            else:
                self.loops[key] = f
        self.pop()

    def loop_args(self, lo: PrimExpr, ext: PrimExpr, kw: str) -> list[str]:
        """``[extent]`` from 0, ``[start, stop]`` for constants, else ``[min, kw=extent]``."""
        if _is_zero(lo, ext.dtype):
            return [self.expr(ext)]
        if type(lo) is IntImm and type(ext) is IntImm and lo.dtype == ext.dtype:
            hi = lo.value + ext.value
            if lo.dtype.min_value() <= hi <= lo.dtype.max_value():
                return [self.expr(lo), _int(lo.dtype, hi)]
        return [self.expr(lo), f"{kw}={self.expr(ext)}"]

    def _remap(self, b: Block, values: tuple[PrimExpr, ...] | None) -> str | None:
        if values is None or len(values) < 2:
            return None
        letters = []
        for iv, v in zip(b.iter_vars, values):
            f = self.loops.get(id(v)) if type(v) is Var else None
            if (
                f is None
                or iv.iter_type not in _AXIS_LETTER
                or iv.var.dtype != v.dtype
                or iv.dom.min != f.min
                or iv.dom.extent != f.extent
            ):
                return None
            letters.append(_AXIS_LETTER[iv.iter_type])
        return "".join(letters)

    def axis(self, iv: IterVar, value: PrimExpr | None) -> str:
        dom = iv.dom
        if _is_zero(dom.min, dom.extent.dtype):
            args = [self.expr(dom.extent)]
        else:
            args = [self.expr(dom.extent), f"min={self.expr(dom.min)}"]
        if value is not None:
            args.insert(1, self.expr(value))
        if iv.var.dtype != dom.extent.dtype:
            args.append(f"dtype={_str(str(iv.var.dtype))}")
        return f"T.axis.{iv.iter_type.value}({', '.join(args)})"

    def block(self, b: Block, realize: BlockRealize | None) -> None:
        self.line(f"with T.block({_str(b.name)}):")
        self.depth += 1
        self.push()
        values = realize.iter_values if realize is not None else None
        kinds = self._remap(b, values)
        if kinds is not None:
            bound = [self.expr(v) for v in values]
            names = [self.define(iv.var) for iv in b.iter_vars]
            self.line(f"{', '.join(names)} = T.axis.remap({_str(kinds)}, [{', '.join(bound)}])")
        else:
            for k, iv in enumerate(b.iter_vars):
                rhs = self.axis(iv, None if values is None else values[k])
                self.line(f"{self.define(iv.var)} = {rhs}")
        if realize is not None and realize.predicate != TRUE:
            self.line(f"T.where({self.expr(realize.predicate)})")
        self.line(f"T.reads({', '.join(map(self.region, b.reads))})")
        self.line(f"T.writes({', '.join(map(self.region, b.writes))})")
        if b.annotations:
            self.line(f"T.block_attr({self.annotations(b.annotations)})")
        for buf in b.alloc_buffers:
            args = self.buffer_args(buf)
            self.line(f"{self.define(buf)} = T.alloc_buffer{args}")
        for m in b.match_buffers:
            args = self.buffer_args(m.buffer, self.region(m.source))
            self.line(f"{self.define(m.buffer)} = T.match_buffer{args}")
        if b.init is not None:
            self.line("with T.init():")
            self.body(b.init)
        self.stmt(b.body)
        self.pop()
        self.depth -= 1

    # functions ------------------------------------------------------------------------
    def func(self, f: PrimFunc, name: str | None, decls: list[Any]) -> str:
        attrs = dict(f.attrs)
        symbol = attrs.get("global_symbol")
        fname = name or (symbol if isinstance(symbol, str) and symbol.isidentifier() else "main")
        deco = []
        if "global_symbol" not in attrs:
            deco.append("private=True")
        elif symbol == fname:
            del attrs["global_symbol"]
        # buffer parameters print as `A: T.Buffer(...)` while they can; the rest as match_buffer
        used: set[int] = set()
        _walk((f.body, tuple(b for _, b in f.buffer_map)), lambda n: used.add(id(n)) if isinstance(n, Var) else None)
        position = {id(p): k for k, p in enumerate(f.params)}
        in_sig: dict[int, Buffer] = {}
        last = -1
        for v, b in f.buffer_map:
            refs = _any((b.shape, b.strides, b.elem_offset), lambda n: isinstance(n, Var | Buffer))
            k = position.get(id(v), -1)
            if refs or k <= last or id(v) in used or id(v) in in_sig or not v.dtype.is_handle:
                break
            if sum(p is v for p in f.params) != 1 or sum(w is v for w, _ in f.buffer_map) != 1:
                break
            in_sig[id(v)] = b
            last = k
        params = []
        for p in f.params:
            b = in_sig.get(id(p))
            if b is not None:
                args = self.buffer_args(b)
                params.append(f"{self.define(b)}: T.Buffer{args}")
            else:
                params.append(f"{self.define(p)}: T.{p.dtype}")
        self.depth = 1
        if attrs:
            self.line(f"T.func_attr({self.annotations(tuple(attrs.items()))})")
        for d in sorted(decls, key=lambda o: isinstance(o, Buffer)):
            if isinstance(d, Var):
                self.line(f"{self.define(d)} = T.{d.dtype}()")
            else:
                args = self.buffer_args(d)
                self.line(f"{self.define(d)} = T.Buffer{args}")
        for v, b in f.buffer_map:
            if id(v) not in in_sig:
                args = self.buffer_args(b, self.use(v))
                self.line(f"{self.define(b)} = T.match_buffer{args}")
        body = f.body
        root = _plain_root(body)
        if root is not None:
            for buf in root.alloc_buffers:
                args = self.buffer_args(buf)
                self.line(f"{self.define(buf)} = T.alloc_buffer{args}")
            if root.annotations:
                self.line(f"T.block_attr({self.annotations(root.annotations)})")
            body = root.body
        elif needs_implicit_root(body, False):
            deco.append("root=False")
        self.stmt(body)
        if self.flat:
            deco.append("ssa=False")
        head = ["@T.prim_func" + (f"({', '.join(deco)})" if deco else ""), f"def {fname}({', '.join(params)}):"]
        return "\n".join(head + self.lines) + "\n"


def script(func: PrimFunc, name: str | None = None) -> str:
    """The function as TVMScript-like text; ``name`` overrides the printed function name."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"script() prints a PrimFunc, got {type(func).__name__}")
    flat, decls = False, []
    for _ in range(64):
        p = _Printer("flat" if flat else "ssa")
        text = p.func(func, name, decls)
        if not flat and (p.redefined or any(id(m) in p.defined for m in p.missing)):
            flat, decls = True, []  # a definition is repeated or used out of scope: one namespace
            continue
        if not p.missing:
            return text
        decls = decls + p.missing  # free variables and buffers, declared at the top
    raise RuntimeError("the printer did not converge on the declarations of free variables")


def node_to_str(node: Any) -> str:
    """Any node as text: expressions inline, statements as indented lines. Never raises."""
    try:
        if isinstance(node, PrimFunc):
            return script(node)
        p = _Printer("lenient")
        if isinstance(node, PrimExpr):
            return p.expr(node)
        if isinstance(node, Stmt):
            p.stmt(node)
            return "\n".join(p.lines)
        if isinstance(node, Buffer):
            args = p.buffer_args(node)
            return f"{p.define(node)}: T.Buffer{args}"
        if isinstance(node, BufferRegion):
            return p.region(node)
        if isinstance(node, MatchBufferRegion):
            args = p.buffer_args(node.buffer, p.region(node.source))
            return f"{p.define(node.buffer)} = T.match_buffer{args}"
        if isinstance(node, IterVar):
            rhs = p.axis(node, None)
            return f"{p.define(node.var)} = {rhs}"
        if isinstance(node, Range):
            return p.range_(node, point=False)
    except Exception:  # str() of a node must not fail: it is used in error messages
        pass
    return repr(node)
