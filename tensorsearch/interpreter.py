"""Reference interpreter: run any PrimFunc on numpy arrays with exact semantics.

::

    A, B, C = interpret(func, a, b)        # C is allocated with zeros and returned
    print(python_source(func))             # the Python code that runs it

The function is compiled once into Python source (nested ``for`` loops over ``range``, a local
variable per IR variable, numpy arrays indexed with tuples) and cached per PrimFunc object.

Values in the generated code:

* integer scalars (any width, signed or unsigned) are Python ints kept in their type's range.
  Add, Sub and Mul are ring operations, so they are computed on unbounded Python ints and wrapped
  (two's complement) only where a value is observed and a static interval analysis cannot prove
  that it is already in range;
* floating-point scalars are numpy scalars of the exact type (``np.float16``, ``np.float32``,
  ``ml_dtypes.bfloat16``, ``np.float64``), so every operation rounds to that type;
* bool scalars are Python bools (or ``np.bool_``);
* vectors (``lanes > 1``) are 1-D numpy arrays of the element type.

Every buffer index is checked against the buffer's shape (the check is left out where the interval
analysis proves it in range), so an out-of-bounds access raises an IndexError naming the buffer.
"""

from __future__ import annotations

import linecache
import math
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ir.dtype import DataType
from .ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Sub,
    Var,
)
from .ir.functor import ExprFunctor, StmtFunctor
from .ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    IterType,
    PrimFunc,
    SeqStmt,
    Stmt,
)

__all__ = [
    "CompiledFunc",
    "clear_cache",
    "compile_func",
    "interpret",
    "python_source",
    "register_intrinsic",
]

# ---------------------------------------------------------------------------------------
# public API


def interpret(func: PrimFunc, *args: Any) -> list[np.ndarray]:
    """Run ``func`` on numpy arrays and return the arrays of all its buffer parameters.

    ``args`` correspond to ``func.params`` in order: buffer parameters take numpy arrays of
    exactly the buffer's shape and dtype (written in place), scalar parameters take Python
    numbers.  Trailing buffer parameters that are not given are allocated with zeros.
    """
    return compile_func(func, len(args))(*args)


def python_source(func: PrimFunc, num_args: int | None = None) -> str:
    """The Python source that :func:`interpret` runs for ``func`` given ``num_args`` arguments."""
    return compile_func(func, num_args).source


def compile_func(func: PrimFunc, num_args: int | None = None) -> CompiledFunc:
    """Compile (or fetch from the cache) ``func`` for calls with ``num_args`` arguments."""
    if not isinstance(func, PrimFunc):
        raise TypeError(f"interpret expects a PrimFunc, got {type(func).__name__}")
    nparams = len(func.params)
    if num_args is None:
        num_args = nparams
    if num_args > nparams:
        raise TypeError(f"the function takes {nparams} arguments but {num_args} were given")
    key = (id(func), num_args)
    entry = _CACHE.get(key)
    if entry is not None and entry[0] is func:
        _CACHE.move_to_end(key)
        return entry[1]
    compiled = _Compiler(func, num_args).compile()
    _CACHE[key] = (func, compiled)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return compiled


def clear_cache() -> None:
    _CACHE.clear()


def register_intrinsic(op: str, fn: Callable[..., Any]) -> None:
    """Give the interpreter an implementation of the Call op ``op``.

    ``fn`` receives the evaluated arguments (Python ints for integer scalars, numpy scalars for
    floats, 1-D numpy arrays for vectors, str for StringImm) and returns the call's value.
    """
    _INTRINSICS[op] = fn


@dataclass(frozen=True)
class CompiledFunc:
    """A PrimFunc compiled to Python; call it like :func:`interpret`."""

    func: PrimFunc
    num_args: int
    source: str
    kernel: Callable[..., list[np.ndarray]]

    def __call__(self, *args: Any) -> list[np.ndarray]:
        if len(args) != self.num_args:
            raise TypeError(f"this compiled function takes {self.num_args} arguments, got {len(args)}")
        with np.errstate(all="ignore"):
            return self.kernel(*args)


_CACHE_SIZE = 512
_CACHE: OrderedDict[tuple[int, int], tuple[PrimFunc, CompiledFunc]] = OrderedDict()
_INTRINSICS: dict[str, Callable[..., Any]] = {}

# ---------------------------------------------------------------------------------------
# runtime helpers used by the generated code


def _oob(name: str, index: tuple, shape: tuple) -> Any:
    index = tuple(i.tolist() if isinstance(i, np.ndarray) else i for i in index)
    raise IndexError(f"index {list(index)} is out of bounds for buffer {name} of shape {list(shape)}")


def _zero_div(what: str) -> Any:
    raise ZeroDivisionError(f"integer division by zero in {what}")


def _truncdiv(a: int, b: int) -> int:
    if b == 0:
        _zero_div("truncdiv (Div)")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _truncmod(a: int, b: int) -> int:
    if b == 0:
        _zero_div("truncmod (Mod)")
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        _zero_div("floordiv (FloorDiv)")
    return a // b


def _floormod(a: int, b: int) -> int:
    if b == 0:
        _zero_div("floormod (FloorMod)")
    return a % b


def _vcheck_zero(b: np.ndarray, what: str) -> None:
    if np.any(b == 0):
        _zero_div(what)


def _vtruncdiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _vcheck_zero(b, "truncdiv (Div)")
    q = np.floor_divide(a, b)
    r = a - q * b
    adjust = (r != 0) & ((r < 0) != (b < 0))
    return np.where(adjust, q + np.ones_like(q), q)


def _vtruncmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _vcheck_zero(b, "truncmod (Mod)")
    return np.fmod(a, b)


def _vfloordiv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _vcheck_zero(b, "floordiv (FloorDiv)")
    return np.floor_divide(a, b)


def _vfloormod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    _vcheck_zero(b, "floormod (FloorMod)")
    return np.mod(a, b)


def _wrap(x: int, bits: int, signed: bool) -> int:
    mask = (1 << bits) - 1
    if signed:
        half = 1 << (bits - 1)
        return ((x + half) & mask) - half
    return x & mask


def _f2i(x: Any) -> int:
    try:
        return int(x)
    except (ValueError, OverflowError):
        raise ValueError(f"cannot convert the floating-point value {x} to an integer") from None


def _i2f(x: int, src: np.dtype, target: type) -> Any:
    """Round a (possibly huge) integer to a float type with a single rounding."""
    return np.array(x, dtype=src).astype(target)[()]


def _ramp(base: Any, stride: Any, lanes: int, dtype: np.dtype, bits: int, kind: str) -> np.ndarray:
    if kind == "i" or kind == "u":
        return np.array([_wrap(base + k * stride, bits, kind == "i") for k in range(lanes)], dtype=dtype)
    t = dtype.type
    return np.array([base + t(k) * stride for k in range(lanes)], dtype=dtype)


def _vcheck(arr: np.ndarray, idx: tuple, name: str) -> None:
    for i, n in zip(idx, arr.shape):
        if isinstance(i, np.ndarray):
            if i.size and (int(i.min()) < 0 or int(i.max()) >= n):
                _oob(name, idx, arr.shape)
        elif not 0 <= i < n:
            _oob(name, idx, arr.shape)


def _vload(arr: np.ndarray, idx: tuple, name: str) -> np.ndarray:
    _vcheck(arr, idx, name)
    return arr[idx]


def _vstore(arr: np.ndarray, idx: tuple, value: Any, name: str) -> None:
    _vcheck(arr, idx, name)
    arr[idx] = value


def _vfma(a: Any, b: Any, c: Any, t: type) -> Any:
    """``fma(a, b, c)`` in float32: the product is exact in float64 and the sum is rounded to
    float64, then to ``t``; that double rounding can differ from one rounding in the last bit,
    in the rare sums that fall within float64's precision of a float32 halfway point (for a
    float64 ``t`` the product is rounded too)."""
    wide = np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)
    return t(wide) if wide.ndim == 0 else wide.astype(t)


def _verf(x: Any, t: type) -> Any:
    if isinstance(x, np.ndarray):
        return np.array([math.erf(float(v)) for v in x]).astype(x.dtype)
    return t(math.erf(float(x)))


def _ipow(a: int, b: int) -> int:
    if b < 0:
        raise ValueError(f"integer pow with a negative exponent {b}")
    return a**b


def _call_extern(op: str, *args: Any) -> Any:
    fn = _INTRINSICS.get(op)
    if fn is None:
        raise NotImplementedError(
            f"the interpreter has no implementation of the call {op!r}; "
            "register one with tensorsearch.interpreter.register_intrinsic"
        )
    return fn(*args)


def _check_array(arr: Any, name: str, dtype: np.dtype, dtname: str, ndim: int) -> None:
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"buffer {name} needs a numpy array, got {type(arr).__name__}")
    if arr.dtype != dtype:
        raise ValueError(f"buffer {name} has dtype {dtname} but the array has dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"buffer {name} has {ndim} dimensions but the array has shape {list(arr.shape)}")


def _shape_mismatch(name: str, expected: tuple, got: tuple) -> Any:
    raise ValueError(f"buffer {name} has shape {list(expected)} but the array has shape {list(got)}")


def _elem_strides(arr: np.ndarray) -> tuple[int, ...]:
    item = arr.itemsize
    out = []
    for s in arr.strides:
        if s % item:
            raise ValueError(f"array strides {arr.strides} are not a multiple of the element size {item}")
        out.append(s // item)
    return tuple(out)


def _check_strides(name: str, arr: np.ndarray, expected: tuple) -> None:
    actual = _elem_strides(arr)
    for n, a, e in zip(arr.shape, actual, expected):
        if n > 1 and a != e:
            raise ValueError(f"buffer {name} has strides {list(expected)} but the array has strides {list(actual)}")


def _scalar_int(x: Any, name: str, dtname: str, lo: int, hi: int) -> int:
    if isinstance(x, float | np.floating) or not isinstance(x, int | np.integer | bool | np.bool_):
        raise TypeError(f"scalar parameter {name} of type {dtname} needs an integer, got {x!r}")
    v = int(x)
    if not lo <= v <= hi:
        raise ValueError(f"scalar parameter {name}: {v} does not fit in {dtname}")
    return v


def _alloc(shape: tuple, dtype: np.dtype, strides: tuple | None, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-filled storage for a buffer with explicit strides and element offset: (view, base)."""
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides = []
        acc = 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    strides = tuple(int(s) for s in strides)
    if any(s < 0 for s in strides) or offset < 0:
        raise ValueError(f"negative strides {strides} or element offset {offset} are not supported")
    span = 0 if any(n == 0 for n in shape) else sum((n - 1) * st for n, st in zip(shape, strides)) + 1
    base = np.zeros(offset + span, dtype=dtype)
    item = base.itemsize
    view = np.lib.stride_tricks.as_strided(base[offset:], shape, tuple(st * item for st in strides))
    return view, base


def _match_view(parent: np.ndarray, starts: tuple, extents: tuple, name: str, pname: str) -> np.ndarray:
    for k, (s, e, n) in enumerate(zip(starts, extents, parent.shape)):
        if s < 0 or e < 0 or s + e > n:
            raise IndexError(
                f"match_buffer {name}: region [{s}, {s + e}) of dimension {k} is out of bounds "
                f"for buffer {pname} of shape {list(parent.shape)}"
            )
    return parent[tuple(slice(s, s + e) for s, e in zip(starts, extents))]


def _reshape_view(view: np.ndarray, shape: tuple, name: str) -> np.ndarray:
    shape = tuple(int(s) for s in shape)
    if view.shape == shape:
        return view
    if math.prod(view.shape) != math.prod(shape):
        raise ValueError(f"match_buffer {name} of shape {list(shape)} cannot view a region of shape {list(view.shape)}")
    try:
        return np.reshape(view, shape, copy=False)
    except TypeError:  # numpy < 2.1 has no copy argument
        out = view.view()
        try:
            out.shape = shape
        except AttributeError:
            pass
        else:
            return out
    except ValueError:
        pass
    raise ValueError(
        f"match_buffer {name} of shape {list(shape)} cannot view a region of shape {list(view.shape)} "
        f"with strides {list(view.strides)} without copying"
    )


def _elem_offset(view: np.ndarray, base: np.ndarray) -> int:
    diff = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return diff // view.itemsize


_HELPERS: dict[str, Any] = {
    name: obj for name, obj in globals().items() if name.startswith("_") and callable(obj) and not name.startswith("__")
}

# ---------------------------------------------------------------------------------------
# the compiler


@dataclass(slots=True)
class _Val:
    """Generated code of an expression; ``lo``/``hi`` bound an integer scalar's (unwrapped) value."""

    code: str
    lo: int | None = None
    hi: int | None = None
    depth: int = 1


_SIMPLE = re.compile(r"^-?[A-Za-z_0-9]+$")
_MAX_DEPTH = 40  # hoist deeper expressions into temporaries (Python's parser nests at most ~200 levels)
_MAX_FOR_NESTING = 16
_NOOP_CALLS = frozenset(
    {"tvm_storage_sync", "storage_sync", "tvm_warp_sync"}
)  # CPython allows 20 statically nested loops per function


def _range_of(dtype: DataType) -> tuple[int, int]:
    return int(dtype.min_value()), int(dtype.max_value())


class _Compiler(ExprFunctor[_Val], StmtFunctor[None]):
    def __init__(self, func: PrimFunc, num_args: int) -> None:
        self.func = func
        self.num_args = num_args
        self.lines: list[str] = []
        self.level = 1
        self.ns: dict[str, Any] = {"np": np, "math": math, "_INTRINSICS": _INTRINSICS, **_HELPERS}
        self.consts: dict[tuple, str] = {}
        self.counter = 0
        self.vars: dict[Var, str] = {}
        self.var_range: dict[Var, tuple[int, int]] = {}
        self.bufs: dict[Buffer, str] = {}
        self.buf_base: dict[Buffer, str] = {}
        self.pre: list[str] = []
        self.lazy = 0
        self.for_nesting = 0
        self.statement_call: PrimExpr | None = None

    # -- naming -----------------------------------------------------------------------
    def fresh(self, prefix: str, hint: str = "") -> str:
        self.counter += 1
        hint = re.sub(r"\W", "_", hint)[:24]
        return f"{prefix}{self.counter}_{hint}" if hint else f"{prefix}{self.counter}"

    def glob(self, prefix: str, value: Any, key: tuple | None = None) -> str:
        if key is not None and key in self.consts:
            return self.consts[key]
        name = self.fresh(prefix)
        self.ns[name] = value
        if key is not None:
            self.consts[key] = name
        return name

    def dtype_obj(self, dtype: DataType) -> str:
        return self.glob("_D", dtype.numpy, ("dtype", str(dtype.element_of())))

    def scalar_type(self, dtype: DataType) -> str:
        return self.glob("_T", dtype.numpy.type, ("type", str(dtype.element_of())))

    def float_const(self, dtype: DataType, value: float) -> str:
        t = dtype.numpy.type
        return self.glob("_c", t(value), ("const", str(dtype), repr(float(value))))

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def flush_pre(self) -> None:
        for line in self.pre:
            self.emit(line)
        self.pre = []

    def bind_var(self, var: Var, rng: tuple[int, int] | None = None) -> str:
        name = self.fresh("v", var.name)
        self.vars[var] = name
        if rng is not None:
            self.var_range[var] = rng
        else:
            self.var_range.pop(var, None)
        return name

    def alias_var(self, var: Var, val: _Val) -> None:
        self.vars[var] = val.code
        if val.lo is not None:
            self.var_range[var] = (val.lo, val.hi)
        else:
            self.var_range.pop(var, None)

    def buf(self, buffer: Buffer) -> str:
        name = self.bufs.get(buffer)
        if name is None:
            raise ValueError(
                f"buffer {buffer.name} is used but is neither a parameter nor allocated by an enclosing block or Allocate"
            )
        return name

    # -- driver -----------------------------------------------------------------------
    def compile(self) -> CompiledFunc:
        func = self.func
        params = list(func.params)
        bmap = dict(func.buffer_map)
        pnames = [f"p{k}" for k in range(len(params))]
        sym = func.attr_dict.get("global_symbol", "main")
        self.lines.append(f"def _kernel({', '.join(pnames[: self.num_args])}):")
        for k in range(self.num_args, len(params)):
            if params[k] not in bmap:
                raise TypeError(f"missing a value for the scalar parameter {params[k].name}")
        # scalar parameters first: buffer shapes may use them
        for k, p in enumerate(params):
            if p in bmap:
                continue
            self.bind_scalar_param(p, pnames[k])
        given = [(k, p) for k, p in enumerate(params) if p in bmap and k < self.num_args]
        missing = [(k, p) for k, p in enumerate(params) if p in bmap and k >= self.num_args]
        for k, p in given:
            self.bind_param_buffer(bmap[p], pnames[k])
        for k, p in missing:
            self.alloc_param_buffer(bmap[p], pnames[k])
        self.stmt(func.body)
        self.emit(f"return [{', '.join(pnames[k] for k, p in enumerate(params) if p in bmap)}]")
        source = "\n".join(self.lines) + "\n"
        filename = f"<tensorsearch.interpreter {sym} #{id(self)}>"
        code = compile(source, filename, "exec")
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(code, self.ns)
        return CompiledFunc(func, self.num_args, source, self.ns["_kernel"])

    def bind_scalar_param(self, p: Var, pname: str) -> None:
        dt = p.dtype
        name = self.bind_var(p, _range_of(dt) if dt.is_integer else None)
        if dt.lanes != 1 or dt.is_handle:
            raise NotImplementedError(f"scalar parameter {p.name} of type {dt} is not supported")
        if dt.is_integer:
            lo, hi = _range_of(dt)
            self.emit(f"{name} = _scalar_int({pname}, {p.name!r}, {str(dt)!r}, {lo}, {hi})")
        elif dt.is_bool:
            self.emit(f"{name} = bool({pname})")
        else:
            self.emit(f"{name} = {self.scalar_type(dt)}({pname})")

    def _check_buffer_dtype(self, b: Buffer) -> None:
        if b.dtype.lanes != 1:
            raise NotImplementedError(f"buffer {b.name} has the vector element type {b.dtype}, which is not supported")

    def bind_param_buffer(self, b: Buffer, pname: str) -> None:
        self._check_buffer_dtype(b)
        name = self.fresh("b", b.name)
        self.emit(f"_check_array({pname}, {b.name!r}, {self.dtype_obj(b.dtype)}, {str(b.dtype)!r}, {len(b.shape)})")
        self.emit(f"{name} = {pname}")
        self.bufs[b] = name
        self.buf_base[b] = name
        self.bind_layout(b, name)

    def bind_layout(self, b: Buffer, name: str) -> None:
        """Bind undefined Vars in ``b``'s shape, strides and elem_offset from the array ``name``; check the rest."""
        expected = []
        for k, s in enumerate(b.shape):
            if isinstance(s, Var) and s not in self.vars:
                v = self.bind_var(s, (0, _range_of(s.dtype)[1]))
                self.emit(f"{v} = {name}.shape[{k}]")
                expected.append(v)
            else:
                expected.append(self.canon_code(s))
        if expected:
            self.flush_pre()
            tup = f"({', '.join(expected)},)"
            self.emit(f"if {name}.shape != {tup}:")
            self.emit(f"    _shape_mismatch({b.name!r}, {tup}, {name}.shape)")
        if b.strides:
            exp_strides = []
            for k, s in enumerate(b.strides):
                if isinstance(s, Var) and s not in self.vars:
                    v = self.bind_var(s, _range_of(s.dtype))
                    self.emit(f"{v} = _elem_strides({name})[{k}]")
                    exp_strides.append(v)
                else:
                    exp_strides.append(self.canon_code(s))
            self.flush_pre()
            self.emit(f"_check_strides({b.name!r}, {name}, ({', '.join(exp_strides)},))")
        off = b.elem_offset
        if isinstance(off, Var) and off not in self.vars:
            v = self.bind_var(off, _range_of(off.dtype))
            base = self.buf_base.get(b, name)
            self.emit(f"{v} = _elem_offset({name}, {base})" if base != name else f"{v} = 0")

    def alloc_param_buffer(self, b: Buffer, pname: str) -> None:
        self._check_buffer_dtype(b)
        for s in b.shape:
            for var in _vars_in(s):
                if var not in self.vars:
                    raise ValueError(
                        f"cannot allocate buffer {b.name}: its shape uses {var.name}, which no given argument determines"
                    )
        shape = ", ".join(self.canon_code(s) for s in b.shape)
        self.flush_pre()
        self.emit(f"{pname} = np.zeros(({shape}{',' if b.shape else ''}), {self.dtype_obj(b.dtype)})")
        name = self.fresh("b", b.name)
        self.emit(f"{name} = {pname}")
        self.bufs[b] = name
        self.buf_base[b] = name
        # strides/elem_offset of a freshly allocated compact array
        self.bind_layout(b, name)

    def alloc_buffer(self, b: Buffer) -> None:
        """A fresh zero-filled allocation of ``b`` (Allocate, Block.alloc_buffers)."""
        self._check_buffer_dtype(b)
        name = self.fresh("b", b.name)
        shape = ", ".join(self.canon_code(s) for s in b.shape)
        shape_tup = f"({shape}{',' if b.shape else ''})"
        dt = self.dtype_obj(b.dtype)
        explicit_strides = bool(b.strides) and not all(isinstance(s, Var) and s not in self.vars for s in b.strides)
        off = b.elem_offset
        explicit_offset = not (isinstance(off, Var) and off not in self.vars) and not (
            isinstance(off, IntImm) and off.value == 0
        )
        if explicit_strides or explicit_offset:
            strides = f"({', '.join(self.canon_code(s) for s in b.strides)},)" if explicit_strides else "None"
            offset = self.canon_code(off) if explicit_offset else "0"
            base = self.fresh("base", b.name)
            self.flush_pre()
            self.emit(f"{name}, {base} = _alloc({shape_tup}, {dt}, {strides}, {offset})")
            self.buf_base[b] = base
        else:
            self.flush_pre()
            self.emit(f"{name} = np.zeros({shape_tup}, {dt})")
            self.buf_base[b] = name
        self.bufs[b] = name
        # bind stride/offset Vars that the allocation leaves free
        for k, s in enumerate(b.strides):
            if isinstance(s, Var) and s not in self.vars:
                v = self.bind_var(s, _range_of(s.dtype))
                self.emit(f"{v} = _elem_strides({name})[{k}]")
        if isinstance(off, Var) and off not in self.vars:
            v = self.bind_var(off, _range_of(off.dtype))
            self.emit(f"{v} = 0")

    # -- statements -------------------------------------------------------------------
    def body(self, stmt: Stmt | None) -> None:
        """Emit ``stmt`` one level deeper; emit ``pass`` if it produced nothing."""
        self.level += 1
        start = len(self.lines)
        if stmt is not None:
            self.stmt(stmt)
        if len(self.lines) == start:
            self.emit("pass")
        self.level -= 1

    def stmt(self, s: Stmt) -> None:
        (self._stmt_methods.get(type(s)) or self.stmt_method(type(s)))(self, s)

    def unsupported_stmt(self, s: Stmt) -> None:
        raise NotImplementedError(f"the interpreter does not support the statement {type(s).__name__}")

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def visit_For(self, s: For) -> None:
        if self.for_nesting >= _MAX_FOR_NESTING:
            fname = self.fresh("_nest")
            self.emit(f"def {fname}():")
            saved = self.for_nesting
            self.for_nesting = 0
            self.level += 1
            self.visit_For(s)
            self.level -= 1
            self.for_nesting = saved
            self.emit(f"{fname}()")
            return
        lo = self.canon(self.expr(s.min), s.min.dtype)
        ext = self.canon(self.expr(s.extent), s.extent.dtype)
        if not _SIMPLE.match(lo.code):
            tmp = self.fresh("_t")
            self.pre.append(f"{tmp} = {lo.code}")
            lo = _Val(tmp, lo.lo, lo.hi)
        self.flush_pre()
        rng = (lo.lo, lo.hi + max(ext.hi - 1, 0))
        name = self.bind_var(s.loop_var, rng)
        if isinstance(s.min, IntImm) and s.min.value == 0:
            self.emit(f"for {name} in range({ext.code}):")
        else:
            self.emit(f"for {name} in range({lo.code}, {lo.code} + {ext.code}):")
        self.for_nesting += 1
        self.body(s.body)
        self.for_nesting -= 1

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.expr(s.condition)
        self.flush_pre()
        self.emit(f"if {self.truth(cond, s.condition)}:")
        self.body(s.then_case)
        if s.else_case is not None:
            self.emit("else:")
            self.body(s.else_case)

    def visit_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, IntImm | FloatImm):
            return
        if isinstance(s.value, Call) and s.value.op.removeprefix("tir.") in _NOOP_CALLS:
            return  # synchronization is meaningless when threads run one after another
        self.statement_call = s.value  # its result is dropped, so it is not converted
        val = self.expr(s.value)
        self.statement_call = None
        self.flush_pre()
        self.emit(val.code)

    def visit_Allocate(self, s: Allocate) -> None:
        self.alloc_buffer(s.buffer)
        self.stmt(s.body)

    def visit_BufferStore(self, s: BufferStore) -> None:
        b = s.buffer
        bname = self.buf(b)
        vector = s.value.dtype.lanes > 1 or any(i.dtype.lanes > 1 for i in s.indices)
        value = self.expr(s.value)
        if b.dtype.is_integer and not vector:
            value = self.canon(value, b.dtype)
        if vector:
            idx = [self.index(i) for i in s.indices]
            self.flush_pre()
            tup = f"({', '.join(v.code for v in idx)}{',' if idx else ''})"
            self.emit(f"_vstore({bname}, {tup}, {value.code}, {b.name!r})")
            return
        idx = []
        for i in s.indices:
            v = self.index(i)
            if not _SIMPLE.match(v.code) and self.needs_check(v, b, len(idx)):
                tmp = self.fresh("_i")
                self.pre.append(f"{tmp} = {v.code}")
                v = _Val(tmp, v.lo, v.hi)
            idx.append(v)
        self.flush_pre()
        conds = self.bound_conds(b, bname, idx)
        if conds:
            self.emit(f"if not ({' and '.join(conds)}):")
            self.emit(f"    _oob({b.name!r}, ({', '.join(v.code for v in idx)},), {bname}.shape)")
        sub = ", ".join(v.code for v in idx) if idx else "()"
        self.emit(f"{bname}[{sub}] = {value.code}")

    def visit_BlockRealize(self, s: BlockRealize) -> None:
        pred = s.predicate
        if isinstance(pred, IntImm) and pred.value == 0:
            return
        guarded = not (isinstance(pred, IntImm) and pred.value == 1)
        if guarded:
            cond = self.expr(pred)
            self.flush_pre()
            self.emit(f"if {self.truth(cond, pred)}:")
            self.level += 1
        start = len(self.lines)
        self.emit(f"# block {s.block.name}")
        for iv, value in zip(s.block.iter_vars, s.iter_values):
            val = self.expr(value)
            if iv.var.dtype.is_integer:
                val = self.canon(val, iv.var.dtype)
            self.flush_pre()
            if _SIMPLE.match(val.code):
                self.alias_var(iv.var, val)
            else:
                name = self.bind_var(iv.var, (val.lo, val.hi) if val.lo is not None else None)
                self.emit(f"{name} = {val.code}")
        self.block_body(s.block)
        if len(self.lines) == start:
            self.emit("pass")
        if guarded:
            self.level -= 1

    def visit_Block(self, s: Block) -> None:
        if s.iter_vars:
            raise ValueError(f"block {s.name} has iterators but no BlockRealize binds them")
        self.block_body(s)

    def block_body(self, block: Block) -> None:
        for b in block.alloc_buffers:
            self.alloc_buffer(b)
        for m in block.match_buffers:
            self.match_buffer(m.buffer, m.source)
        if block.init is not None:
            conds = []
            for iv in block.iter_vars:
                if iv.iter_type == IterType.REDUCE:
                    v = self.expr(iv.var)
                    dmin = self.canon(self.expr(iv.dom.min), iv.dom.min.dtype)
                    conds.append(f"{v.code} == {dmin.code}")
            self.flush_pre()
            if conds:
                self.emit(f"if {' and '.join(conds)}:")
                self.body(block.init)
            else:
                self.stmt(block.init)
        self.stmt(block.body)

    def match_buffer(self, b: Buffer, source: Any) -> None:
        self._check_buffer_dtype(b)
        parent = source.buffer
        pname = self.buf(parent)
        starts = [self.canon(self.expr(r.min), r.min.dtype).code for r in source.region]
        extents = [self.canon(self.expr(r.extent), r.extent.dtype).code for r in source.region]
        self.flush_pre()
        view = self.fresh("view", b.name)
        name = self.fresh("b", b.name)
        self.emit(
            f"{view} = _match_view({pname}, ({', '.join(starts)}{',' if starts else ''}), "
            f"({', '.join(extents)}{',' if extents else ''}), {b.name!r}, {parent.name!r})"
        )
        # bind shape Vars that only the region determines
        free = [k for k, s in enumerate(b.shape) if isinstance(s, Var) and s not in self.vars]
        if free:
            if len(b.shape) == len(source.region):
                dims = list(range(len(b.shape)))
            else:
                dims = [
                    k for k, r in enumerate(source.region) if not (isinstance(r.extent, IntImm) and r.extent.value == 1)
                ]
                if len(dims) != len(b.shape):
                    raise NotImplementedError(
                        f"match_buffer {b.name}: cannot tell which region dimensions its symbolic shape takes"
                    )
            for k in free:
                var = b.shape[k]
                v = self.bind_var(var, (0, _range_of(var.dtype)[1]))
                self.emit(f"{v} = {view}.shape[{dims[k]}]")
        shape = ", ".join(self.canon_code(s) for s in b.shape)
        self.flush_pre()
        self.emit(f"{name} = _reshape_view({view}, ({shape}{',' if b.shape else ''}), {b.name!r})")
        self.bufs[b] = name
        self.buf_base[b] = self.buf_base[parent]
        self.bind_layout(b, name)

    # -- expressions ------------------------------------------------------------------
    def canon_code(self, e: PrimExpr) -> str:
        v = self.expr(e)
        if e.dtype.is_integer and e.dtype.lanes == 1:
            v = self.canon(v, e.dtype)
        return v.code

    def expr(self, e: PrimExpr) -> _Val:
        v = (self._expr_methods.get(type(e)) or self.expr_method(type(e)))(self, e)
        if v.depth > _MAX_DEPTH and not self.lazy:
            tmp = self.fresh("_h")
            self.pre.append(f"{tmp} = {v.code}")
            v = _Val(tmp, v.lo, v.hi, 1)
        return v

    def unsupported_expr(self, e: PrimExpr) -> _Val:
        raise NotImplementedError(f"the interpreter does not support the expression {type(e).__name__}")

    def canon(self, v: _Val, dtype: DataType) -> _Val:
        """Wrap an integer scalar into ``dtype``'s range unless it provably is already."""
        if not (dtype.is_integer and dtype.lanes == 1):
            return v
        lo, hi = _range_of(dtype)
        if v.lo is not None and lo <= v.lo and v.hi <= hi:
            return v
        mask = (1 << dtype.bits) - 1
        if dtype.is_uint:
            return _Val(f"(({v.code}) & {mask})", lo, hi, v.depth + 1)
        half = 1 << (dtype.bits - 1)
        return _Val(f"(((({v.code}) + {half}) & {mask}) - {half})", lo, hi, v.depth + 1)

    def truth(self, v: _Val, e: PrimExpr) -> str:
        if e.dtype.lanes != 1:
            raise TypeError(f"a condition must be a scalar bool, got {e.dtype}")
        return v.code

    def visit_IntImm(self, e: IntImm) -> _Val:
        if e.dtype.is_bool:
            return _Val("True" if e.value else "False")
        return _Val(str(e.value) if e.value >= 0 else f"({e.value})", e.value, e.value)

    def visit_FloatImm(self, e: FloatImm) -> _Val:
        return _Val(self.float_const(e.dtype, e.value))

    def visit_StringImm(self, e: StringImm) -> _Val:
        return _Val(repr(e.value))

    def visit_Var(self, e: Var) -> _Val:
        name = self.vars.get(e)
        if name is None:
            raise ValueError(f"variable {e.name} ({e.dtype}) is used but not defined by a loop, block or parameter")
        if e.dtype.is_integer and e.dtype.lanes == 1:
            lo, hi = self.var_range.get(e, _range_of(e.dtype))
            return _Val(name, lo, hi)
        return _Val(name)

    # arithmetic
    def _binary(self, e: Any, pyop: str) -> _Val:
        a = self.expr(e.a)
        b = self.expr(e.b)
        return _Val(f"({a.code} {pyop} {b.code})", depth=max(a.depth, b.depth) + 1)

    def visit_Add(self, e: Add) -> _Val:
        return self._ring(e, "+")

    def visit_Sub(self, e: Sub) -> _Val:
        return self._ring(e, "-")

    def visit_Mul(self, e: Mul) -> _Val:
        return self._ring(e, "*")

    def _ring(self, e: Any, op: str) -> _Val:
        dt = e.dtype
        if not (dt.is_integer and dt.lanes == 1):
            if dt.is_bool:
                raise TypeError(f"arithmetic {op} on bool values is not supported")
            return self._binary(e, op)
        a = self.expr(e.a)
        b = self.expr(e.b)
        if op == "*":
            a, b = self.canon(a, dt), self.canon(b, dt)
            corners = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
            lo, hi = min(corners), max(corners)
        elif op == "+":
            lo, hi = a.lo + b.lo, a.hi + b.hi
        else:
            lo, hi = a.lo - b.hi, a.hi - b.lo
        # keep the unbounded intermediate from growing without limit
        limit = 1 << (2 * dt.bits + 4)
        val = _Val(f"({a.code} {op} {b.code})", lo, hi, max(a.depth, b.depth) + 1)
        if lo < -limit or hi > limit:
            val = self.canon(val, dt)
        return val

    def _int_div(self, e: Any, kind: str) -> _Val:
        dt = e.dtype
        a = self.canon(self.expr(e.a), dt)
        b = self.canon(self.expr(e.b), dt)
        depth = max(a.depth, b.depth) + 1
        floor_ok = b.lo > 0 and (kind.startswith("floor") or a.lo >= 0)
        if floor_ok:
            if kind.endswith("div"):
                cands = (a.lo // b.lo, a.lo // b.hi, a.hi // b.lo, a.hi // b.hi)
                return _Val(f"({a.code} // {b.code})", min(cands), max(cands), depth)
            lo = 0
            hi = b.hi - 1
            if a.lo >= 0:
                hi = min(hi, a.hi)
            return _Val(f"({a.code} % {b.code})", lo, hi, depth)
        ma = max(abs(a.lo), abs(a.hi))
        mb = max(abs(b.lo), abs(b.hi))
        helper = {"truncdiv": "_truncdiv", "truncmod": "_truncmod", "floordiv": "_floordiv", "floormod": "_floormod"}[
            kind
        ]
        code = f"{helper}({a.code}, {b.code})"
        if kind.endswith("div"):
            return _Val(code, -ma, ma, depth)
        return _Val(code, -max(mb - 1, 0), max(mb - 1, 0), depth)

    def _float_div(self, e: Any, kind: str) -> _Val:
        a = self.expr(e.a)
        b = self.expr(e.b)
        depth = max(a.depth, b.depth) + 2
        if kind == "div":
            return _Val(f"({a.code} / {b.code})", depth=depth)
        if kind == "truncmod":
            return _Val(f"np.fmod({a.code}, {b.code})", depth=depth)
        if kind == "floordiv":
            return _Val(f"np.floor({a.code} / {b.code})", depth=depth)
        # floormod: a - floor(a / b) * b, each step rounded to the type
        if _SIMPLE.match(a.code) and _SIMPLE.match(b.code):
            return _Val(f"({a.code} - np.floor({a.code} / {b.code}) * {b.code})", depth=depth)
        return _Val(f"_ffloormod({a.code}, {b.code})", depth=depth)

    def _div(self, e: Any, kind: str) -> _Val:
        dt = e.dtype
        if dt.is_float:
            return self._float_div(e, kind)
        if not dt.is_integer:
            raise TypeError(f"division of {dt} values is not supported")
        if dt.lanes == 1:
            return self._int_div(e, kind)
        a = self.expr(e.a)
        b = self.expr(e.b)
        helper = {"div": "_vtruncdiv", "truncmod": "_vtruncmod", "floordiv": "_vfloordiv", "floormod": "_vfloormod"}[
            kind
        ]
        return _Val(f"{helper}({a.code}, {b.code})", depth=max(a.depth, b.depth) + 1)

    def visit_Div(self, e: Div) -> _Val:
        if e.dtype.is_integer and e.dtype.lanes == 1:
            return self._int_div(e, "truncdiv")
        return self._div(e, "div")

    def visit_Mod(self, e: Mod) -> _Val:
        return self._div(e, "truncmod")

    def visit_FloorDiv(self, e: FloorDiv) -> _Val:
        return self._div(e, "floordiv")

    def visit_FloorMod(self, e: FloorMod) -> _Val:
        return self._div(e, "floormod")

    def _minmax(self, e: Any, fn: str) -> _Val:
        dt = e.dtype
        a = self.expr(e.a)
        b = self.expr(e.b)
        depth = max(a.depth, b.depth) + 1
        if dt.lanes > 1:
            return _Val(f"np.{'minimum' if fn == 'min' else 'maximum'}({a.code}, {b.code})", depth=depth)
        if dt.is_integer:
            a, b = self.canon(a, dt), self.canon(b, dt)
            if fn == "min":
                lo, hi = min(a.lo, b.lo), min(a.hi, b.hi)
            else:
                lo, hi = max(a.lo, b.lo), max(a.hi, b.hi)
            return _Val(f"{fn}({a.code}, {b.code})", lo, hi, depth)
        return _Val(f"{fn}({a.code}, {b.code})", depth=depth)

    def visit_Min(self, e: Min) -> _Val:
        return self._minmax(e, "min")

    def visit_Max(self, e: Max) -> _Val:
        return self._minmax(e, "max")

    def _cmp(self, e: Any, op: str) -> _Val:
        dt = e.a.dtype
        a = self.canon(self.expr(e.a), dt)
        b = self.canon(self.expr(e.b), dt)
        return _Val(f"({a.code} {op} {b.code})", depth=max(a.depth, b.depth) + 1)

    def visit_EQ(self, e: EQ) -> _Val:
        return self._cmp(e, "==")

    def visit_NE(self, e: NE) -> _Val:
        return self._cmp(e, "!=")

    def visit_LT(self, e: LT) -> _Val:
        return self._cmp(e, "<")

    def visit_LE(self, e: LE) -> _Val:
        return self._cmp(e, "<=")

    def visit_GT(self, e: GT) -> _Val:
        return self._cmp(e, ">")

    def visit_GE(self, e: GE) -> _Val:
        return self._cmp(e, ">=")

    def visit_And(self, e: And) -> _Val:
        a = self.expr(e.a)
        if e.dtype.lanes > 1:
            b = self.expr(e.b)
            return _Val(f"np.logical_and({a.code}, {b.code})", depth=max(a.depth, b.depth) + 1)
        self.lazy += 1
        b = self.expr(e.b)
        self.lazy -= 1
        return _Val(f"({a.code} and {b.code})", depth=max(a.depth, b.depth) + 1)

    def visit_Or(self, e: Or) -> _Val:
        a = self.expr(e.a)
        if e.dtype.lanes > 1:
            b = self.expr(e.b)
            return _Val(f"np.logical_or({a.code}, {b.code})", depth=max(a.depth, b.depth) + 1)
        self.lazy += 1
        b = self.expr(e.b)
        self.lazy -= 1
        return _Val(f"({a.code} or {b.code})", depth=max(a.depth, b.depth) + 1)

    def visit_Not(self, e: Not) -> _Val:
        a = self.expr(e.a)
        if e.dtype.lanes > 1:
            return _Val(f"np.logical_not({a.code})", depth=a.depth + 1)
        return _Val(f"(not {a.code})", depth=a.depth + 1)

    def visit_Select(self, e: Select) -> _Val:
        dt = e.dtype
        c = self.expr(e.condition)
        if e.condition.dtype.lanes > 1:
            t = self.expr(e.true_value)
            f = self.expr(e.false_value)
            code = f"np.where({c.code}, {t.code}, {f.code}).astype({self.dtype_obj(dt)}, copy=False)"
            return _Val(code, depth=max(c.depth, t.depth, f.depth) + 1)
        self.lazy += 1
        t = self.canon(self.expr(e.true_value), dt)
        f = self.canon(self.expr(e.false_value), dt)
        self.lazy -= 1
        depth = max(c.depth, t.depth, f.depth) + 1
        code = f"({t.code} if {c.code} else {f.code})"  # one condition for all lanes: only one side runs
        if dt.is_integer and dt.lanes == 1:
            return _Val(code, min(t.lo, f.lo), max(t.hi, f.hi), depth)
        return _Val(code, depth=depth)

    def visit_Cast(self, e: Cast) -> _Val:
        src = e.value.dtype
        dst = e.dtype
        v = self.expr(e.value)
        if src == dst:
            return v
        depth = v.depth + 1
        if dst.lanes > 1:
            if dst.is_bool:
                return _Val(f"({v.code} != 0)", depth=depth)
            return _Val(f"{v.code}.astype({self.dtype_obj(dst)})", depth=depth)
        if dst.is_integer:
            if src.is_integer:
                return self.canon(self.canon(v, src), dst)
            if src.is_bool:
                return _Val(f"int({v.code})", 0, 1, depth)
            if src.is_float:
                lo, hi = _range_of(dst)
                return self.canon(_Val(f"_f2i({v.code})", lo - 1, hi + 1, depth), dst)
        if dst.is_bool:
            if src.is_integer:
                v = self.canon(v, src)
            return _Val(f"({v.code} != 0)", depth=depth)
        if dst.is_float:
            t = self.scalar_type(dst)
            if src.is_integer:
                v = self.canon(v, src)
                if -(1 << 53) <= v.lo and v.hi <= (1 << 53):
                    return _Val(f"{t}({v.code})", depth=depth)
                return _Val(f"_i2f({v.code}, {self.dtype_obj(src)}, {t})", depth=depth)
            if src.is_bool:
                return _Val(f"{t}(1 if {v.code} else 0)", depth=depth)
            if src.is_float:
                return _Val(f"{t}({v.code})", depth=depth)
        raise NotImplementedError(f"the interpreter cannot cast {src} to {dst}")

    def visit_Broadcast(self, e: Broadcast) -> _Val:
        v = self.expr(e.value)
        if e.value.dtype.is_integer:
            v = self.canon(v, e.value.dtype)
        return _Val(f"np.full({e.lanes}, {v.code}, {self.dtype_obj(e.dtype)})", depth=v.depth + 1)

    def visit_Ramp(self, e: Ramp) -> _Val:
        dt = e.base.dtype
        base = self.canon(self.expr(e.base), dt)
        stride = self.canon(self.expr(e.stride), dt)
        if dt.lanes != 1:
            raise NotImplementedError("a Ramp of vectors is not supported")
        kind = "i" if dt.is_int else "u" if dt.is_uint else "f"
        return _Val(
            f"_ramp({base.code}, {stride.code}, {e.lanes}, {self.dtype_obj(dt)}, {dt.bits}, {kind!r})",
            depth=max(base.depth, stride.depth) + 1,
        )

    def index(self, i: PrimExpr) -> _Val:
        v = self.expr(i)
        if not i.dtype.is_integer:
            raise TypeError(f"buffer index {i} has the non-integer type {i.dtype}")
        return self.canon(v, i.dtype)

    @staticmethod
    def _extent(b: Buffer, k: int) -> int | None:
        s = b.shape[k]
        return s.value if isinstance(s, IntImm) else None

    def needs_check(self, v: _Val, b: Buffer, k: int) -> bool:
        n = self._extent(b, k)
        return n is None or v.lo < 0 or v.hi >= n

    def bound_conds(self, b: Buffer, bname: str, idx: list[_Val]) -> list[str]:
        conds = []
        for k, v in enumerate(idx):
            n = self._extent(b, k)
            n_code = str(n) if n is not None else f"{bname}.shape[{k}]"
            if n is not None and v.lo >= 0 and v.hi < n:
                continue
            conds.append(f"{v.code} < {n_code}" if v.lo >= 0 else f"0 <= {v.code} < {n_code}")
        return conds

    def visit_BufferLoad(self, e: BufferLoad) -> _Val:
        b = e.buffer
        bname = self.buf(b)
        dt = b.dtype
        if e.dtype.lanes > 1:
            idx = [self.index(i) for i in e.indices]
            tup = f"({', '.join(v.code for v in idx)}{',' if idx else ''})"
            return _Val(f"_vload({bname}, {tup}, {b.name!r})", depth=max([v.depth for v in idx] + [0]) + 1)
        idx = [self.index(i) for i in e.indices]
        depth = max([v.depth for v in idx] + [0]) + 2
        use_item = dt.is_integer or dt.is_bool
        checked = []
        plain = []
        for k, v in enumerate(idx):
            plain.append(v.code)
            if self.needs_check(v, b, k) and not _SIMPLE.match(v.code):
                tmp = self.fresh("_i")
                checked.append(_Val(f"({tmp} := {v.code})", v.lo, v.hi))
                idx[k] = _Val(tmp, v.lo, v.hi)
            else:
                checked.append(v)
        sub = ", ".join(v.code for v in idx)
        if use_item:
            load = f"{bname}.item({sub})"
        else:
            load = f"{bname}[{sub if idx else '()'}]"
        conds = self.bound_conds(b, bname, checked)
        if conds:
            load = f"({load} if {' and '.join(conds)} else _oob({b.name!r}, ({', '.join(plain)},), {bname}.shape))"
        if dt.is_integer:
            lo, hi = _range_of(dt)
            return _Val(load, lo, hi, depth)
        return _Val(load, depth=depth)

    # calls
    def visit_Call(self, e: Call) -> _Val:
        op = e.op[4:] if e.op.startswith("tir.") else e.op
        dt = e.dtype
        if op == "if_then_else":
            c = self.expr(e.args[0])
            self.lazy += 1
            t = self.canon(self.expr(e.args[1]), dt)
            f = self.canon(self.expr(e.args[2]), dt)
            self.lazy -= 1
            depth = max(c.depth, t.depth, f.depth) + 1
            if dt.lanes > 1 or e.args[0].dtype.lanes > 1:
                return _Val(f"np.where({c.code}, {t.code}, {f.code})", depth=depth)
            code = f"({t.code} if {c.code} else {f.code})"
            if dt.is_integer:
                return _Val(code, min(t.lo, f.lo), max(t.hi, f.hi), depth)
            return _Val(code, depth=depth)
        if op == "likely":
            return self.expr(e.args[0])
        args = []
        for a in e.args:
            v = self.expr(a)
            if a.dtype.is_integer:
                v = self.canon(v, a.dtype)
            args.append(v)
        depth = max([a.depth for a in args] + [0]) + 2
        codes = [a.code for a in args]
        if dt.is_float:
            math_code = self._float_math(op, dt, codes, e)
            if math_code is not None:
                return _Val(math_code, depth=depth)
        elif dt.is_integer:
            int_code = self._int_math(op, dt, args, e)
            if int_code is not None:
                return int_code
        # anything else goes to a registered intrinsic (checked when the call runs)
        code = f"_call_extern({op!r}{''.join(', ' + c for c in codes)})"
        if e is self.statement_call:
            return _Val(code, depth=depth)
        if dt.is_integer and dt.lanes == 1:
            lo, hi = _range_of(dt)
            return self.canon(_Val(f"int({code})", lo - 1, hi + 1, depth), dt)
        if dt.is_float and dt.lanes == 1:
            return _Val(f"{self.scalar_type(dt)}({code})", depth=depth)
        return _Val(code, depth=depth)

    def _float_math(self, op: str, dt: DataType, codes: list[str], e: Call) -> str | None:
        t = self.scalar_type(dt)
        one = self.float_const(dt.element_of(), 1.0)
        argdt = e.args[0].dtype if e.args else dt
        # math is done in the call's type: convert arguments of another float type first
        if e.args and argdt.is_float and argdt.element_of() != dt.element_of():
            codes = [self._to_float(c, dt) for c in codes]
        simple = {"exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "tanh": "np.tanh", "floor": "np.floor",
                  "ceil": "np.ceil", "round": "np.rint", "nearbyint": "np.rint", "trunc": "np.trunc",
                  "exp2": "np.exp2", "log2": "np.log2", "log10": "np.log10", "sin": "np.sin", "cos": "np.cos",
                  "tan": "np.tan", "log1p": "np.log1p", "expm1": "np.expm1"}  # fmt: skip
        if op in ("abs", "fabs") and len(codes) == 1:
            return f"np.abs({codes[0]})" if dt.lanes > 1 else f"abs({codes[0]})"
        if op in simple and len(codes) == 1:
            return f"{simple[op]}({codes[0]})"
        if op == "rsqrt" and len(codes) == 1:
            return f"({one} / np.sqrt({codes[0]}))"
        if op == "sigmoid" and len(codes) == 1:
            return f"({one} / ({one} + np.exp(-{codes[0]})))"
        if op == "erf" and len(codes) == 1:
            return f"_verf({codes[0]}, {t})"
        if op in ("pow", "power") and len(codes) == 2:
            return f"np.power({codes[0]}, {codes[1]})"
        if op == "fmod" and len(codes) == 2:
            return f"np.fmod({codes[0]}, {codes[1]})"
        if op == "fma" and len(codes) == 3:
            return f"_vfma({codes[0]}, {codes[1]}, {codes[2]}, {t})"
        return None

    def _to_float(self, code: str, dt: DataType) -> str:
        if dt.lanes > 1:
            return f"{code}.astype({self.dtype_obj(dt)})"
        return f"{self.scalar_type(dt)}({code})"

    def _int_math(self, op: str, dt: DataType, args: list[_Val], e: Call) -> _Val | None:
        if dt.lanes > 1:
            if op == "abs" and len(args) == 1:
                return _Val(f"np.abs({args[0].code})")
            return None
        if not all(a.dtype.element_of() == dt.element_of() for a in e.args):
            return None
        if op == "abs" and len(args) == 1:
            a = args[0]
            m = max(abs(a.lo), abs(a.hi))
            return self.canon(_Val(f"abs({a.code})", 0, m, a.depth + 1), dt)
        if op in ("pow", "power") and len(args) == 2:
            lo, hi = _range_of(dt)
            return _Val(f"_wrap(_ipow({args[0].code}, {args[1].code}), {dt.bits}, {dt.is_int})", lo, hi, 2)
        bitwise = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
        if op in bitwise and len(args) == 2:
            lo, hi = _range_of(dt)
            return _Val(f"({args[0].code} {bitwise[op]} {args[1].code})", lo, hi, 2)
        if op == "bitwise_not" and len(args) == 1:
            return self.canon(_Val(f"(~{args[0].code})", -(1 << dt.bits), 1 << dt.bits, 2), dt)
        if op == "shift_left" and len(args) == 2:
            lo, hi = _range_of(dt)
            return self.canon(_Val(f"({args[0].code} << ({args[1].code} % {dt.bits}))", lo - 1, hi + 1, 2), dt)
        if op == "shift_right" and len(args) == 2:
            lo, hi = _range_of(dt)
            return _Val(f"({args[0].code} >> ({args[1].code} % {dt.bits}))", lo, hi, 2)
        if op in ("floor", "ceil", "round", "nearbyint", "trunc") and len(args) == 1:
            return args[0]
        return None


def _ffloormod(a: Any, b: Any) -> Any:
    return a - np.floor(a / b) * b


_HELPERS["_ffloormod"] = _ffloormod


def _vars_in(e: PrimExpr) -> list[Var]:
    from .ir.functor import post_order_visit

    out: list[Var] = []
    post_order_visit(e, lambda n: out.append(n) if isinstance(n, Var) else None)
    return out
