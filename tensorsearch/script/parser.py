"""Read TVMScript-like text (see ``tensorsearch/script/__init__.py``) back into a PrimFunc.

The text is parsed with Python's ``ast`` module and walked; it is never executed.  Errors
raise :class:`ScriptError` with the line and (1-based) column of the offending part.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from ..ir.dtype import DataType, bool_, float32, handle, int32, parse_dtype
from ..ir.expr import (
    MATH_FUNCTIONS,
    And,
    Broadcast,
    BufferLoad,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Not,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Var,
    call,
    const,
)
from ..ir.printer import BOOL_OPS, CALL_OPS, CMP_OPS, INFIX_OPS, needs_implicit_root
from ..ir.stmt import (
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


class ScriptError(ValueError):
    """Malformed script text; the message reads ``line L, column C: what is wrong``."""


def _ast_op(source: str, get: Callable[[Any], Any]) -> type:
    return type(get(ast.parse(source, mode="eval").body))


# the printer's operator tables, keyed by the ast operator classes
_BIN = {_ast_op(f"a {s} b", lambda e: e.op): cls for cls, (s, _) in INFIX_OPS.items()}
_BOOL = {_ast_op(f"a {s} b", lambda e: e.op): cls for cls, (s, _) in BOOL_OPS.items()}
_CMP = {_ast_op(f"a {s} b", lambda e: e.ops[0]): cls for cls, s in CMP_OPS.items()}
_CALLS = {name: cls for cls, name in CALL_OPS.items()} | {"truncdiv": Div, "floordiv": FloorDiv, "floormod": FloorMod}
_FOR_KINDS = {k.value: k for k in ForKind}
_AXES = {t.value: t for t in IterType}
_REMAP = {"S": IterType.SPATIAL, "R": IterType.REDUCE, "O": IterType.OPAQUE}
_DTYPE_NAME = re.compile(r"^(int|uint|float|bfloat|bool|handle)\d*(x\d+)?$")
_BUFFER_KW = ("strides", "elem_offset", "scope", "align", "offset_factor")
_PLACES = {
    "var": "variable declarations such as `n = T.int32()` are only allowed at the top of the function",
    "Buffer": "T.Buffer declarations are only allowed at the top of the function",
    "func_attr": "T.func_attr is only allowed at the top of the function",
    "alloc_buffer": "T.alloc_buffer is only allowed at the top of a block or of the function",
    "block_attr": "T.block_attr is only allowed at the top of a block or of the function",
    "match_buffer": "T.match_buffer is only allowed at the top of a block or of the function",
}


def _tname(node: Any) -> str | None:
    """``"axis.spatial"`` for the expression ``T.axis.spatial``; None for anything not under ``T``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "T" and parts:
        return ".".join(reversed(parts))
    return None


def _is_lit(node: Any) -> bool:
    """A bare number such as ``4``, ``-1.5`` or ``True`` (its type comes from the context)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool)


def _lit_value(node: Any) -> Any:
    if isinstance(node, ast.UnaryOp):
        value = node.operand.value
        return -value if isinstance(node.op, ast.USub) else value
    return node.value


def _header(s: ast.stmt) -> str | None:
    """The kind of a declaration statement (``X = T.alloc_buffer(...)``, ``T.reads(...)``...)."""
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.value, ast.Call):
        name = _tname(s.value.func)
        if name and _DTYPE_NAME.match(name) and not s.value.args and not s.value.keywords:
            return "var"
        if name in ("Buffer", "alloc_buffer", "match_buffer") or (name or "").startswith("axis."):
            return name
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
        name = _tname(s.value.func)
        if name in ("where", "reads", "writes", "block_attr", "func_attr"):
            return name
    if isinstance(s, ast.With) and len(s.items) == 1 and isinstance(s.items[0].context_expr, ast.Call):
        if _tname(s.items[0].context_expr.func) == "init":
            return "init"
    return None


def _seq(items: list[Stmt]) -> Stmt:
    return items[0] if len(items) == 1 else SeqStmt(tuple(items))


class _Parser:
    def __init__(self, lines: list[str], margin: int) -> None:
        self.lines = lines
        self.margin = margin
        self.scopes: list[dict[str, Any]] = [{}]
        self.flat = False
        self.loop_doms: dict[int, tuple[PrimExpr, PrimExpr]] = {}

    # errors ---------------------------------------------------------------------------
    def err(self, node: Any, msg: str) -> ScriptError:
        line = getattr(node, "lineno", 1)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = len(text.encode()[: getattr(node, "col_offset", 0)].decode(errors="ignore"))
        return ScriptError(f"line {line}, column {col + 1 + self.margin}: {msg}")

    def guard(self, node: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn``, turning IR constructor errors into ScriptErrors at ``node``."""
        try:
            return fn(*args)
        except ScriptError:
            raise
        except (TypeError, ValueError, IndexError) as e:
            raise self.err(node, str(e)) from None

    # names ----------------------------------------------------------------------------
    def push(self) -> None:
        if not self.flat:
            self.scopes.append({})

    def pop(self) -> None:
        if not self.flat:
            self.scopes.pop()

    def lookup(self, node: ast.Name) -> Any:
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        raise self.err(node, f"undefined variable {node.id!r}")

    def define(self, node: Any, name: str, kind: type, make: Callable[[], Any], dtype: DataType | None = None) -> Any:
        old = self.scopes[-1].get(name)
        if old is not None:
            if not self.flat:
                raise self.err(node, f"{name!r} is already defined in this scope")
            if not isinstance(old, kind) or (dtype is not None and old.dtype != dtype):
                raise self.err(node, f"{name!r} is defined again with a different kind or type")
            return old  # ssa=False: the same name is the same object
        obj = self.scopes[-1][name] = self.guard(node, make)
        return obj

    def define_var(self, node: Any, name: str, dtype: DataType) -> Var:
        return self.define(node, name, Var, lambda: Var(name, dtype), dtype)

    def var(self, node: Any) -> Var:
        if not isinstance(node, ast.Name):
            raise self.err(node, "expected a variable name")
        obj = self.lookup(node)
        if not isinstance(obj, Var):
            raise self.err(node, f"{node.id!r} is a buffer, not a variable")
        return obj

    def buffer(self, node: Any) -> Buffer:
        if not isinstance(node, ast.Name):
            raise self.err(node, "expected a buffer name")
        obj = self.lookup(node)
        if not isinstance(obj, Buffer):
            raise self.err(node, f"{node.id!r} is a variable, not a buffer")
        return obj

    def target(self, node: Any) -> ast.Name:
        if not isinstance(node, ast.Name):
            raise self.err(node, "expected a single name on the left of '='")
        return node

    # literals and arguments ---------------------------------------------------------------
    def bind(
        self, call: ast.Call, fname: str, pos: tuple[str, ...], req: int | None = None, kw: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Match a call's arguments to parameter names (positional ones may also be passed by keyword)."""
        req = len(pos) if req is None else req
        for a in call.args:
            if isinstance(a, ast.Starred):
                raise self.err(a, f"T.{fname} does not take *arguments")
        if len(call.args) > len(pos):
            raise self.err(call, f"T.{fname} takes at most {len(pos)} positional arguments, got {len(call.args)}")
        out = dict(zip(pos, call.args))
        for k in call.keywords:
            if k.arg is None or (k.arg not in pos and k.arg not in kw):
                raise self.err(k, f"T.{fname} got an unexpected keyword argument {k.arg!r}")
            if k.arg in out:
                raise self.err(k, f"T.{fname} got multiple values for argument {k.arg!r}")
            out[k.arg] = k.value
        for p in pos[:req]:
            if p not in out:
                raise self.err(call, f"T.{fname} is missing its argument {p!r}")
        return out

    def str_lit(self, node: Any) -> str:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            raise self.err(node, "expected a string literal")
        return node.value

    def int_lit(self, node: Any) -> int:
        if not (_is_lit(node) and type(_lit_value(node)) is int):
            raise self.err(node, "expected an integer literal")
        return _lit_value(node)

    def dtype_name(self, node: Any, name: str) -> DataType:
        try:
            return parse_dtype(name)
        except ValueError:
            raise self.err(node, f"unknown data type {name!r}") from None

    def dtype_lit(self, node: Any) -> DataType:
        return self.dtype_name(node, self.str_lit(node))

    def lit(self, node: Any, dtype: DataType | None) -> PrimExpr:
        value = _lit_value(node)
        if dtype is None:
            dtype = bool_ if type(value) is bool else int32 if type(value) is int else float32
        return self.guard(node, const, value, dtype)

    def pair(self, left: Any, right: Any) -> tuple[PrimExpr, PrimExpr]:
        """Two operands; a bare number takes the type of the other operand."""
        a = None if _is_lit(left) else self.expr(left)
        b = None if _is_lit(right) else self.expr(right)
        if a is None:
            a = self.lit(left, None if b is None else b.dtype)
        if b is None:
            b = self.lit(right, None if _is_lit(left) else a.dtype)
        return a, b

    # expressions ------------------------------------------------------------------------
    def expr(self, node: Any) -> PrimExpr:
        return self.guard(node, self._expr, node)

    def _expr(self, n: Any) -> PrimExpr:
        if _is_lit(n):
            return self.lit(n, None)
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return StringImm(n.value)
        if isinstance(n, ast.Name):
            return self.var(n)
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            return _BIN[type(n.op)](*self.pair(n.left, n.right))
        if isinstance(n, ast.BoolOp):
            values = [self.expr(v) for v in n.values]
            out = values[0]
            for v in values[1:]:
                out = _BOOL[type(n.op)](out, v)
            return out
        if isinstance(n, ast.Compare):
            items = [n.left, *n.comparators]
            out = None
            for k, op in enumerate(n.ops):
                if type(op) not in _CMP:
                    raise self.err(n, f"unsupported comparison {type(op).__name__}")
                c = _CMP[type(op)](*self.pair(items[k], items[k + 1]))
                out = c if out is None else And(out, c)
            return out
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub | ast.UAdd | ast.Not):
            x = self.expr(n.operand)
            return -x if isinstance(n.op, ast.USub) else Not(x) if isinstance(n.op, ast.Not) else x
        if isinstance(n, ast.Subscript):
            return BufferLoad(self.buffer(n.value), tuple(self.index(i) for i in self.items(n.slice)))
        if isinstance(n, ast.Call):
            return self.call(n)
        raise self.err(n, f"unsupported expression {ast.unparse(n)!r}")

    def items(self, node: Any) -> list[Any]:
        return list(node.elts) if isinstance(node, ast.Tuple) else [node]

    def index(self, node: Any) -> PrimExpr:
        if isinstance(node, ast.Slice):
            raise self.err(node, "slices are only allowed in T.reads, T.writes and T.match_buffer")
        return self.expr(node)

    def call(self, n: ast.Call) -> PrimExpr:
        name = _tname(n.func)
        if name is None:
            raise self.err(n, f"unknown function {ast.unparse(n.func)!r}")
        if _DTYPE_NAME.match(name):
            dtype = self.dtype_name(n.func, name)
            (arg,) = self.bind(n, name, ("value",)).values()
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and dtype.is_float:
                return FloatImm(dtype, float(arg.value))
            return self.lit(arg, dtype) if _is_lit(arg) else Cast(dtype, self.expr(arg))
        if name in _CALLS:
            a = self.bind(n, name, ("a", "b"))
            return _CALLS[name](*self.pair(a["a"], a["b"]))
        if name == "Cast":
            a = self.bind(n, name, ("dtype", "value"))
            return Cast(self.dtype_lit(a["dtype"]), self.expr(a["value"]))
        if name == "Select":
            a = self.bind(n, name, ("condition", "true_value", "false_value"))
            return Select(self.expr(a["condition"]), *self.pair(a["true_value"], a["false_value"]))
        if name == "Ramp":
            a = self.bind(n, name, ("base", "stride", "lanes"))
            return Ramp(*self.pair(a["base"], a["stride"]), self.int_lit(a["lanes"]))
        if name == "Broadcast":
            a = self.bind(n, name, ("value", "lanes"))
            return Broadcast(self.expr(a["value"]), self.int_lit(a["lanes"]))
        if name == "StringImm":
            return StringImm(self.str_lit(self.bind(n, name, ("value",))["value"]))
        if name == "call" or name in MATH_FUNCTIONS:
            args = list(n.args)
            if name == "call":
                if not args:
                    raise self.err(n, "T.call needs the name of the function as its first argument")
                name = self.str_lit(args.pop(0))
            dtype = None
            for k in n.keywords:
                if k.arg != "dtype":
                    raise self.err(k, f"T.{name} got an unexpected keyword argument {k.arg!r}")
                dtype = self.dtype_lit(k.value)
            return call(name, *[self.expr(a) for a in args], dtype=dtype)
        raise self.err(n, f"unknown function T.{name}")

    def range_(self, s: Any) -> Range:
        if not isinstance(s, ast.Slice):
            lo = self.expr(s)
            return Range(lo, self.guard(s, IntImm, lo.dtype, 1))
        if s.step is not None or s.lower is None or s.upper is None:
            raise self.err(s, "a region slice needs a start and a stop and no step, such as A[0:16]")
        lo, hi = self.expr(s.lower), s.upper
        if type(lo) is IntImm and lo.value == 0:
            return Range(lo, self.expr(hi))
        if isinstance(hi, ast.BinOp) and isinstance(hi.op, ast.Add) and ast.dump(hi.left) == ast.dump(s.lower):
            return Range(lo, self.expr(hi.right))  # `m:m + extent`
        up = self.expr(hi)
        if type(lo) is IntImm and type(up) is IntImm and lo.dtype == up.dtype:
            return Range(lo, self.guard(hi, IntImm, lo.dtype, up.value - lo.value))
        return Range(lo, self.guard(hi, lambda: up - lo))

    def region(self, node: Any) -> BufferRegion:
        if not isinstance(node, ast.Subscript):
            raise self.err(node, "expected a buffer region such as A[vi, 0:16]")
        buf = self.buffer(node.value)
        return self.guard(node, BufferRegion, buf, tuple(self.range_(i) for i in self.items(node.slice)))

    def regions(self, call: ast.Call, fname: str) -> tuple[BufferRegion, ...]:
        if call.keywords:
            raise self.err(call.keywords[0], f"T.{fname} takes no keyword arguments")
        nodes = []
        for a in call.args:
            nodes.extend(a.elts if isinstance(a, ast.List | ast.Tuple) else [a])
        return tuple(self.region(a) for a in nodes)

    def ann_value(self, n: Any) -> Any:
        if isinstance(n, ast.Constant) and (n.value is None or type(n.value) in (str, int, float, bool)):
            return n.value
        if _is_lit(n):
            return _lit_value(n)
        if isinstance(n, ast.List | ast.Tuple):
            return tuple(self.ann_value(v) for v in n.elts)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "float" and len(n.args) == 1:
            return float(self.str_lit(n.args[0]))
        if isinstance(n, ast.Call) and _tname(n.func) == "region":
            return self.region(self.bind(n, "region", ("region",))["region"])
        if isinstance(n, ast.Name):
            return self.lookup(n)
        return self.expr(n)

    def annotations(self, node: Any) -> tuple[tuple[str, Any], ...]:
        if not isinstance(node, ast.Dict):
            raise self.err(node, 'expected a dictionary such as {"key": value}')
        return tuple((self.str_lit(k), self.ann_value(v)) for k, v in zip(node.keys, node.values))

    def shape(self, node: Any) -> tuple[PrimExpr, ...]:
        return tuple(self.expr(e) for e in (node.elts if isinstance(node, ast.Tuple | ast.List) else [node]))

    def buffer_decl(
        self, call: ast.Call, fname: str, name: str, source: bool = False
    ) -> tuple[Callable[[], Buffer], Any]:
        """A maker of the declared buffer, and the first argument when ``source``."""
        pos = ("source", "shape", "dtype") if source else ("shape", "dtype")
        a = self.bind(call, fname, pos, len(pos) - 1, _BUFFER_KW)
        shape = self.shape(a["shape"])
        dtype = self.dtype_lit(a["dtype"]) if "dtype" in a else float32
        strides = self.shape(a["strides"]) if "strides" in a else ()
        offset = self.expr(a["elem_offset"]) if "elem_offset" in a else IntImm(int32, 0)
        scope = self.str_lit(a["scope"]) if "scope" in a else "global"
        align = self.int_lit(a["align"]) if "align" in a else 64
        factor = self.int_lit(a["offset_factor"]) if "offset_factor" in a else 1
        return lambda: Buffer(name, shape, dtype, strides, offset, scope, align, factor), a.get("source")

    def decl_buffer(self, s: ast.Assign, fname: str, source: bool = False) -> tuple[Buffer, Any]:
        tgt = self.target(s.targets[0])
        make, src = self.buffer_decl(s.value, fname, tgt.id, source)
        region = self.region(src) if source and not isinstance(src, ast.Name) else src
        return self.define(tgt, tgt.id, Buffer, make), region

    # statements -------------------------------------------------------------------------
    def stmts(self, body: list[ast.stmt]) -> list[Stmt]:
        out = []
        for st in body:
            s = self.guard(st, self.stmt, st)
            if s is not None:
                out.append(s)
        return out

    def stmt(self, st: ast.stmt) -> Stmt | None:
        kind = _header(st)
        if kind is not None:
            raise self.err(st, _PLACES.get(kind, f"T.{kind} is only allowed directly inside a block"))
        if isinstance(st, ast.Pass):
            return None
        if isinstance(st, ast.Expr):
            v = st.value
            if isinstance(v, ast.Call) and _tname(v.func) == "evaluate":
                return Evaluate(self.expr(self.bind(v, "evaluate", ("value",))["value"]))
            return Evaluate(self.expr(v))
        if isinstance(st, ast.Assign | ast.AugAssign):
            tgt = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else getattr(st, "target", None)
            if not isinstance(tgt, ast.Subscript):
                raise self.err(st, "only buffer elements can be assigned, as in A[i, j] = value")
            buf = self.buffer(tgt.value)
            idx = tuple(self.index(i) for i in self.items(tgt.slice))
            if isinstance(st, ast.AugAssign):
                if type(st.op) not in _BIN:
                    raise self.err(st, f"unsupported operator {type(st.op).__name__}")
                load = BufferLoad(buf, idx)
                value = _BIN[type(st.op)](
                    load, self.lit(st.value, load.dtype) if _is_lit(st.value) else self.expr(st.value)
                )
            elif _is_lit(st.value):
                lanes = max([i.dtype.lanes for i in idx] + [1])
                value = self.lit(st.value, buf.dtype.with_lanes(buf.dtype.lanes * lanes))
            else:
                value = self.expr(st.value)
            return BufferStore(buf, value, idx)
        if isinstance(st, ast.For):
            return self.for_(st)
        if isinstance(st, ast.If):
            orelse = _seq(self.stmts(st.orelse)) if st.orelse else None
            return IfThenElse(self.expr(st.test), _seq(self.stmts(st.body)), orelse)
        if isinstance(st, ast.With):
            return self.with_(st)
        raise self.err(st, f"unsupported statement {type(st).__name__}")

    def for_(self, st: ast.For) -> Stmt:
        call = st.iter
        if st.orelse:
            raise self.err(st.orelse[0], "a for loop cannot have an else branch")
        name = None
        if isinstance(call, ast.Call):
            name = _tname(call.func) or (
                "serial" if isinstance(call.func, ast.Name) and call.func.id == "range" else None
            )
        if name == "grid":
            if call.keywords:
                raise self.err(call.keywords[0], "T.grid takes no keyword arguments")
            exts = [self.expr(a) for a in call.args]
            targets = st.target.elts if isinstance(st.target, ast.Tuple) else [st.target]
            if len(targets) != len(exts):
                raise self.err(st, f"T.grid has {len(exts)} extents but the loop has {len(targets)} variables")
            specs = [
                (t, self.guard(e, IntImm, e.dtype, 0), e, e.dtype, ForKind.SERIAL, None, ())
                for t, e in zip(targets, exts)
            ]
        elif name in _FOR_KINDS:
            kw = ("extent", "dtype", "annotations") + (("thread",) if name == "thread_binding" else ())
            a = self.bind(call, name, ("start", "stop"), 1, kw)
            if "extent" in a:
                if "stop" in a:
                    raise self.err(call, f"T.{name} takes either a stop or extent=, not both")
                lo, ext = self.expr(a["start"]), self.expr(a["extent"])
            elif "stop" in a:
                lo, hi = self.pair(a["start"], a["stop"])
                if type(lo) is IntImm and type(hi) is IntImm and lo.dtype == hi.dtype:
                    ext = self.guard(call, IntImm, lo.dtype, hi.value - lo.value)
                else:
                    ext = hi if type(lo) is IntImm and lo.value == 0 else self.guard(call, lambda: hi - lo)
            else:
                ext = self.expr(a["start"])
                lo = self.guard(call, IntImm, ext.dtype, 0)
            if name == "thread_binding" and "thread" not in a:
                raise self.err(call, 'T.thread_binding needs a thread tag such as thread="threadIdx.x"')
            thread = self.str_lit(a["thread"]) if "thread" in a else None
            ann = self.annotations(a["annotations"]) if "annotations" in a else ()
            dtype = self.dtype_lit(a["dtype"]) if "dtype" in a else ext.dtype
            specs = [(st.target, lo, ext, dtype, _FOR_KINDS[name], thread, ann)]
        else:
            raise self.err(
                call, "a loop must run over T.serial, T.parallel, T.vectorized, T.unroll, T.thread_binding or T.grid"
            )
        self.push()
        loop_vars, saved = [], []
        for t, lo, ext, dtype, *_ in specs:
            v = self.define_var(t, self.target(t).id, dtype)
            saved.append((id(v), self.loop_doms.get(id(v))))
            self.loop_doms[id(v)] = (lo, ext)
            loop_vars.append(v)
        body = _seq(self.stmts(st.body))
        for key, dom in reversed(saved):
            if dom is None:
                self.loop_doms.pop(key, None)
            else:
                self.loop_doms[key] = dom
        self.pop()
        for v, (_, lo, ext, _, kind, thread, ann) in reversed(list(zip(loop_vars, specs))):
            body = self.guard(st, For, v, lo, ext, kind, body, thread, ann)
        return body

    def with_(self, st: ast.With) -> Stmt:
        item = st.items[0]
        name = _tname(item.context_expr.func) if isinstance(item.context_expr, ast.Call) else None
        if len(st.items) != 1 or name not in ("block", "seq", "allocate"):
            raise self.err(st, "expected `with T.block(...)`, `with T.seq()` or `with T.allocate(...) as buf`")
        call = item.context_expr
        if name == "block":
            return self.block(st, call)
        if name == "seq":
            self.bind(call, "seq", ())
            return SeqStmt(tuple(self.stmts(st.body)))
        tgt = self.target(item.optional_vars)
        make, _ = self.buffer_decl(call, "allocate", tgt.id)
        self.push()
        buf = self.define(tgt, tgt.id, Buffer, make)
        body = _seq(self.stmts(st.body))
        self.pop()
        return Allocate(buf, body)

    def axis(self, s: ast.Assign, kind: str) -> list[tuple[Var, Range, IterType, PrimExpr]]:
        call: Any = s.value
        tgt = s.targets[0]
        if kind == "remap":
            a = self.bind(call, "axis.remap", ("kinds", "bindings"))
            kinds, bound = self.str_lit(a["kinds"]), a["bindings"]
            targets = tgt.elts if isinstance(tgt, ast.Tuple) else [tgt]
            if not isinstance(bound, ast.List | ast.Tuple) or not len(kinds) == len(bound.elts) == len(targets):
                raise self.err(
                    call,
                    'T.axis.remap needs one kind letter and one loop variable per name, as in T.axis.remap("SR", [i, k])',
                )
            found = []
            for letter, b, t in zip(kinds, bound.elts, targets):
                if letter not in _REMAP:
                    raise self.err(a["kinds"], f"unknown iterator kind {letter!r}; expected S, R or O")
                v = self.var(b)
                if id(v) not in self.loop_doms:
                    raise self.err(b, f"{b.id!r} is not the variable of an enclosing loop")
                found.append((t, v, Range(*self.loop_doms[id(v)]), _REMAP[letter]))
            return [(self.define_var(t, self.target(t).id, v.dtype), r, it, v) for t, v, r, it in found]
        if kind not in _AXES:
            raise self.err(call, f"unknown function T.axis.{kind}")
        a = self.bind(call, f"axis.{kind}", ("dom", "binding"), kw=("min", "dtype"))
        dom = a["dom"]
        if isinstance(dom, ast.Tuple | ast.List) and len(dom.elts) == 2 and "min" not in a:
            lo, hi = self.pair(*dom.elts)  # TVM's (start, stop)
            both = type(lo) is IntImm and type(hi) is IntImm and lo.dtype == hi.dtype
            ext = self.guard(dom, lambda: IntImm(lo.dtype, hi.value - lo.value) if both else hi - lo)
        else:
            ext = self.expr(dom)
            lo = self.expr(a["min"]) if "min" in a else self.guard(dom, IntImm, ext.dtype, 0)
        binding = self.expr(a["binding"])
        dtype = self.dtype_lit(a["dtype"]) if "dtype" in a else ext.dtype
        t = self.target(tgt)
        return [(self.define_var(t, t.id, dtype), Range(lo, ext), _AXES[kind], binding)]

    def block(self, st: ast.With, call: ast.Call) -> Stmt:
        name = self.str_lit(self.bind(call, "block", ("name",))["name"])
        self.push()
        iters: list[tuple[Var, Range, IterType, PrimExpr]] = []
        once: dict[str, Any] = {}
        allocs, matches, body = [], [], []
        for s in st.body:
            kind = _header(s)
            if kind in ("where", "reads", "writes", "block_attr", "init"):
                if kind in once:
                    raise self.err(s, f"block {name!r} has a second T.{kind}")
                c: Any = s.items[0].context_expr if kind == "init" else s.value
                if kind == "where":
                    once[kind] = self.expr(self.bind(c, kind, ("predicate",))["predicate"])
                elif kind == "block_attr":
                    once[kind] = self.annotations(self.bind(c, kind, ("attrs",))["attrs"])
                elif kind == "init":
                    self.bind(c, kind, ())
                    once[kind] = _seq(self.stmts(s.body))
                else:
                    once[kind] = self.regions(c, kind)
            elif kind is not None and kind.startswith("axis."):
                iters += self.axis(s, kind[5:])
            elif kind == "alloc_buffer":
                allocs.append(self.decl_buffer(s, kind)[0])
            elif kind == "match_buffer":
                buf, region = self.decl_buffer(s, kind, source=True)
                if not isinstance(region, BufferRegion):
                    raise self.err(s.value, "T.match_buffer inside a block takes a buffer region, such as A[vi, 0:16]")
                matches.append(MatchBufferRegion(buf, region))
            else:
                s = self.guard(s, self.stmt, s)
                if s is not None:
                    body.append(s)
        self.pop()
        for key in ("reads", "writes"):
            if key not in once:
                raise self.err(st, f"block {name!r} has no T.{key}(...); write T.{key}() if it {key} nothing")
        ivs = [IterVar(v, r, it) for v, r, it, _ in iters]
        block = self.guard(
            st,
            Block,
            name,
            ivs,
            once["reads"],
            once["writes"],
            _seq(body),
            once.get("init"),
            allocs,
            matches,
            once.get("block_attr", ()),
        )
        return self.guard(st, BlockRealize, tuple(b for *_, b in iters), once.get("where", TRUE), block)

    # functions ------------------------------------------------------------------------
    def func(self, fd: ast.FunctionDef) -> PrimFunc:
        opts = {"private": False, "root": True, "ssa": True}
        for d in fd.decorator_list:
            c = d if isinstance(d, ast.Call) else None
            if _tname(c.func if c else d) != "prim_func" or (c and c.args):
                raise self.err(d, "expected the decorator @T.prim_func")
            for k in c.keywords if c else ():
                if k.arg not in opts or not (isinstance(k.value, ast.Constant) and type(k.value.value) is bool):
                    raise self.err(k, f"T.prim_func takes private=, root= and ssa= with True or False, got {k.arg}=")
                opts[k.arg] = k.value.value
        self.flat = not opts["ssa"]
        a = fd.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults:
            raise self.err(fd, "a prim_func takes only plain annotated parameters")
        params, bmap = [], []
        for arg in a.args:
            ann = arg.annotation
            if isinstance(ann, ast.Call) and _tname(ann.func) == "Buffer":
                make, _ = self.buffer_decl(ann, "Buffer", arg.arg)
                buf = self.define(arg, arg.arg, Buffer, make)
                h = Var(arg.arg + "_handle", handle)
                params.append(h)
                bmap.append((h, buf))
                continue
            tname = _tname(ann)
            if tname is None or not _DTYPE_NAME.match(tname):
                raise self.err(
                    ann or arg,
                    f'parameter {arg.arg!r} needs a type such as T.int32, T.handle or T.Buffer((16,), "float32")',
                )
            params.append(self.define_var(arg, arg.arg, self.dtype_name(ann, tname)))
        stmts = fd.body
        if (
            isinstance(stmts[0], ast.Expr)
            and isinstance(stmts[0].value, ast.Constant)
            and isinstance(stmts[0].value.value, str)
        ):
            stmts = stmts[1:]  # docstring
        once: dict[str, Any] = {}
        allocs, body = [], []
        for s in stmts:
            kind = _header(s)
            if kind in ("func_attr", "block_attr"):
                if kind in once:
                    raise self.err(s, f"the function has a second T.{kind}")
                once[kind] = self.annotations(self.bind(s.value, kind, ("attrs",))["attrs"])
            elif kind == "var":
                t = self.target(s.targets[0])
                self.define_var(t, t.id, self.dtype_name(s.value.func, _tname(s.value.func)))
            elif kind in ("Buffer", "alloc_buffer"):
                buf = self.decl_buffer(s, kind)[0]
                if kind == "alloc_buffer":
                    allocs.append(buf)
            elif kind == "match_buffer":
                src = s.value.args[0] if s.value.args else s.value
                if not isinstance(src, ast.Name):
                    raise self.err(
                        src,
                        'T.match_buffer at the top of a function takes a handle parameter, as in T.match_buffer(a, (16,), "float32")',
                    )
                v = self.var(src)
                if not any(v is p for p in params):
                    raise self.err(src, f"{src.id!r} is not a parameter of the function")
                bmap.append((v, self.decl_buffer(s, kind, source=True)[0]))
            else:
                s = self.guard(s, self.stmt, s)
                if s is not None:
                    body.append(s)
        stmt = _seq(body)
        root_attrs = once.get("block_attr", ())
        if not opts["root"]:
            if allocs or root_attrs:
                raise self.err(fd, "a function with root=False cannot have T.alloc_buffer or T.block_attr at its top")
        elif needs_implicit_root(stmt, bool(allocs or root_attrs)):
            stmt = BlockRealize((), TRUE, Block("root", (), (), (), stmt, None, tuple(allocs), (), root_attrs))
        attrs = dict(once.get("func_attr", ()))
        if not opts["private"]:
            attrs.setdefault("global_symbol", fd.name)
        return self.guard(fd, PrimFunc, tuple(params), stmt, tuple(bmap), attrs)


def parse(text: str) -> PrimFunc:
    """Read the text of one ``@T.prim_func`` function (indented text is fine) into a PrimFunc."""
    if not isinstance(text, str):
        raise TypeError(f"parse() reads a string, got {type(text).__name__}")
    lines = text.replace("\r\n", "\n").split("\n")
    indents = [ln[: len(ln) - len(ln.lstrip())] for ln in lines if ln.strip()]
    margin = min(indents, key=len, default="")
    while not all(s.startswith(margin) for s in indents):
        margin = margin[:-1]
    lines = [ln[len(margin) :] if ln.strip() else "" for ln in lines]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as e:
        raise ScriptError(f"line {e.lineno or 1}, column {(e.offset or 1) + len(margin)}: {e.msg}") from None
    p = _Parser(lines, len(margin))
    funcs = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs.append(node)
        elif not isinstance(node, ast.Import | ast.ImportFrom) and not (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        ):
            raise p.err(node, "expected only a function decorated with @T.prim_func")
    if len(funcs) != 1:
        raise ScriptError(f"line 1, column 1: expected exactly one function, found {len(funcs)}")
    return p.func(funcs[0])


def parse_expr(text: str, variables: dict[str, Var]) -> PrimExpr:
    """Read one expression in script syntax; its names are the given variables.

    ``parse_expr("i // 16 + T.min(j, 3)", {"i": i, "j": j})`` builds ``FloorDiv(i, 16) + Min(j, 3)``.
    Bare numbers next to a typed operand take that operand's type, as in a script.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_expr() reads a string, got {type(text).__name__}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ScriptError(f"line {e.lineno or 1}, column {e.offset or 1}: {e.msg}") from None
    p = _Parser(text.strip().split("\n"), 0)
    for name, var in variables.items():
        if not isinstance(var, Var):
            raise TypeError(f"parse_expr: variable {name!r} must be a Var, got {type(var).__name__}")
    p.scopes = [dict(variables)]
    return p.expr(tree.body)
