"""Expressions of TensorIR.

Every node is an immutable dataclass.  ``==`` on nodes is *syntactic* equality (fields compared
recursively, variables and buffers by identity); alpha-equivalence is
:func:`tensorsearch.ir.structural_equal`.  Arithmetic operators build nodes::

    i = Var("i", "int32")
    e = i * 4 + 1          # Add(Mul(i, IntImm(int32, 4)), IntImm(int32, 1))
    e // 2, e % 2          # FloorDiv, FloorMod
    e / 2                  # Div: truncating for integers, true division for floats

``==`` is kept for structural identity of nodes, so build comparisons with :func:`equal`
and :func:`not_equal` (or the ``EQ``/``NE`` classes); ``<``, ``<=``, ``>``, ``>=`` build nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .dtype import DataType, bool_, int32, parse_dtype

if TYPE_CHECKING:
    from .stmt import Buffer


class Node:
    """Marker base of every IR node: immutable, children reachable through dataclass fields."""

    __slots__ = ()

    def __str__(self) -> str:
        from .printer import node_to_str

        return node_to_str(self)


def _binary_dtype(op: str, a: PrimExpr, b: PrimExpr) -> DataType:
    if a.dtype != b.dtype:
        raise TypeError(f"operands of {op} have different data types: {a.dtype} and {b.dtype} (in {a} {op} {b})")
    return a.dtype


class PrimExpr(Node):
    """Base of scalar and vector expressions; ``dtype`` is the value's data type."""

    __slots__ = ()
    dtype: DataType

    # arithmetic sugar ------------------------------------------------------------------
    def __add__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return Add(a, b)

    def __radd__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return Add(a, b)

    def __sub__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return Sub(a, b)

    def __rsub__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return Sub(a, b)

    def __mul__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return Mul(a, b)

    def __rmul__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return Mul(a, b)

    def __truediv__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return Div(a, b)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return Div(a, b)

    def __floordiv__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return FloorDiv(a, b)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return FloorDiv(a, b)

    def __mod__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return FloorMod(a, b)

    def __rmod__(self, other: Any) -> PrimExpr:
        b, a = _pair(self, other)
        return FloorMod(a, b)

    def __neg__(self) -> PrimExpr:
        zero = const(0, self.dtype)
        return Sub(zero, self)

    def __lt__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return LT(a, b)

    def __le__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return LE(a, b)

    def __gt__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return GT(a, b)

    def __ge__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return GE(a, b)

    def __and__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return And(a, b)

    def __or__(self, other: Any) -> PrimExpr:
        a, b = _pair(self, other)
        return Or(a, b)

    def __invert__(self) -> PrimExpr:
        return Not(self)

    def __bool__(self) -> bool:
        raise TypeError(
            f"the truth value of the expression {self} is unknown until the program runs; "
            "use ir.Select or te.if_then_else instead of Python's if/and/or"
        )

    def astype(self, dtype: str | DataType) -> PrimExpr:
        dtype = parse_dtype(dtype)
        return self if dtype == self.dtype else Cast(dtype, self)


def _pair(a: PrimExpr, b: Any) -> tuple[PrimExpr, PrimExpr]:
    """Convert ``b`` (a Python number or an expression) to an expression that fits ``a``."""
    if isinstance(b, PrimExpr):
        return a, b
    return a, const(b, a.dtype.element_of()) if a.dtype.lanes == 1 else Broadcast(
        const(b, a.dtype.element_of()), a.dtype.lanes
    )


# ---------------------------------------------------------------------------------------
# leaves


@dataclass(frozen=True, eq=False, slots=True)
class Var(PrimExpr):
    """A variable; equality and hashing are by identity, the name is only a hint."""

    name: str
    dtype: DataType = int32

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a variable needs a non-empty string name, got {self.name!r}")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Var({self.name!r}, {self.dtype})"


_INT_BOUNDS: dict[Any, tuple[int, int]] = {}  # DataType -> (min, max) of the integer types IntImm accepted


@dataclass(frozen=True, slots=True)
class IntImm(PrimExpr):
    """An integer (or bool) constant; the value is kept inside the type's range."""

    dtype: DataType
    value: int

    def __post_init__(self) -> None:
        bounds = _INT_BOUNDS.get(self.dtype) if type(self.value) is int and type(self.dtype) is DataType else None
        if bounds is not None and bounds[0] <= self.value <= bounds[1]:
            return  # the common case: a checked DataType and an int that fits (nothing to convert)
        dtype = parse_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if not (dtype.is_integer or dtype.is_bool) or dtype.lanes != 1:
            raise TypeError(f"IntImm needs a scalar integer or bool type, got {dtype}")
        value = int(self.value)
        if not dtype.min_value() <= value <= dtype.max_value():
            raise ValueError(f"constant {value} does not fit in {dtype}")
        object.__setattr__(self, "value", value)
        if type(dtype) is DataType:
            _INT_BOUNDS[dtype] = (dtype.min_value(), dtype.max_value())

    def __repr__(self) -> str:
        return f"IntImm({self.dtype}, {self.value})"


@dataclass(frozen=True, slots=True)
class FloatImm(PrimExpr):
    """A floating-point constant."""

    dtype: DataType
    value: float

    def __post_init__(self) -> None:
        dtype = parse_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if not dtype.is_float or dtype.lanes != 1:
            raise TypeError(f"FloatImm needs a scalar float type, got {dtype}")
        object.__setattr__(self, "value", float(self.value))

    def __repr__(self) -> str:
        return f"FloatImm({self.dtype}, {self.value})"


@dataclass(frozen=True, slots=True)
class StringImm(PrimExpr):
    """A string constant, only meaningful as an argument of a Call."""

    value: str

    @property
    def dtype(self) -> DataType:
        return DataType("handle", 64)


def const(value: int | float | bool, dtype: str | DataType = "int32") -> PrimExpr:
    """A constant of the given scalar type."""
    dtype = parse_dtype(dtype)
    if dtype.lanes != 1:
        return Broadcast(const(value, dtype.element_of()), dtype.lanes)
    if dtype.is_float:
        return FloatImm(dtype, float(value))
    if isinstance(value, float) and not float(value).is_integer():
        raise TypeError(f"cannot make a {dtype} constant from the non-integral number {value}")
    return IntImm(dtype, int(value))


def convert(value: Any, dtype: str | DataType | None = None) -> PrimExpr:
    """Turn a Python number (or an expression) into an expression."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(bool_, int(value))
    if isinstance(value, int):
        return const(value, dtype or "int32")
    if isinstance(value, float):
        return const(value, dtype or "float32")
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        from .dtype import from_numpy

        return const(value.item(), from_numpy(value.dtype))
    raise TypeError(f"cannot convert {type(value).__name__} {value!r} to an expression")


# ---------------------------------------------------------------------------------------
# arithmetic


@dataclass(frozen=True, slots=True)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    symbol = "?"

    def __post_init__(self) -> None:
        _binary_dtype(self.symbol, self.a, self.b)

    @property
    def dtype(self) -> DataType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Add(BinaryOp):
    symbol = "+"


@dataclass(frozen=True, slots=True)
class Sub(BinaryOp):
    symbol = "-"


@dataclass(frozen=True, slots=True)
class Mul(BinaryOp):
    symbol = "*"


@dataclass(frozen=True, slots=True)
class Div(BinaryOp):
    """``a / b``: truncating division for integers (as in C), true division for floats."""

    symbol = "/"


@dataclass(frozen=True, slots=True)
class Mod(BinaryOp):
    """Truncating remainder (sign follows ``a``, as in C)."""

    symbol = "truncmod"


@dataclass(frozen=True, slots=True)
class FloorDiv(BinaryOp):
    symbol = "//"


@dataclass(frozen=True, slots=True)
class FloorMod(BinaryOp):
    symbol = "%"


@dataclass(frozen=True, slots=True)
class Min(BinaryOp):
    symbol = "min"


@dataclass(frozen=True, slots=True)
class Max(BinaryOp):
    symbol = "max"


@dataclass(frozen=True, slots=True)
class CmpOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    symbol = "?"

    def __post_init__(self) -> None:
        _binary_dtype(self.symbol, self.a, self.b)

    @property
    def dtype(self) -> DataType:
        return bool_.with_lanes(self.a.dtype.lanes)


@dataclass(frozen=True, slots=True)
class EQ(CmpOp):
    symbol = "=="


@dataclass(frozen=True, slots=True)
class NE(CmpOp):
    symbol = "!="


@dataclass(frozen=True, slots=True)
class LT(CmpOp):
    symbol = "<"


@dataclass(frozen=True, slots=True)
class LE(CmpOp):
    symbol = "<="


@dataclass(frozen=True, slots=True)
class GT(CmpOp):
    symbol = ">"


@dataclass(frozen=True, slots=True)
class GE(CmpOp):
    symbol = ">="


def _require_bool(op: str, *values: PrimExpr) -> None:
    for v in values:
        if not v.dtype.is_bool:
            raise TypeError(f"operand of {op} must be bool, got {v.dtype} ({v})")


@dataclass(frozen=True, slots=True)
class And(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    symbol = "and"

    def __post_init__(self) -> None:
        _require_bool("and", self.a, self.b)

    @property
    def dtype(self) -> DataType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Or(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    symbol = "or"

    def __post_init__(self) -> None:
        _require_bool("or", self.a, self.b)

    @property
    def dtype(self) -> DataType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Not(PrimExpr):
    a: PrimExpr

    def __post_init__(self) -> None:
        _require_bool("not", self.a)

    @property
    def dtype(self) -> DataType:
        return self.a.dtype


@dataclass(frozen=True, slots=True)
class Select(PrimExpr):
    """``true_value if condition else false_value``.

    Only the chosen value is evaluated, so a value may read out of bounds where the condition
    is false (padding relies on this); code generators must keep that guarantee, e.g. by
    branching or masking when a value contains a load.
    """

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    def __post_init__(self) -> None:
        _require_bool("Select's condition", self.condition)
        _binary_dtype("Select", self.true_value, self.false_value)

    @property
    def dtype(self) -> DataType:
        return self.true_value.dtype


@dataclass(frozen=True, slots=True)
class Cast(PrimExpr):
    """Convert ``value`` to ``dtype`` (float to int truncates toward zero, ints wrap)."""

    dtype: DataType
    value: PrimExpr

    def __post_init__(self) -> None:
        dtype = parse_dtype(self.dtype)
        object.__setattr__(self, "dtype", dtype)
        if dtype.lanes != self.value.dtype.lanes:
            raise TypeError(f"Cast to {dtype} from {self.value.dtype} changes the number of lanes")


@dataclass(frozen=True, slots=True)
class BufferLoad(PrimExpr):
    """``buffer[indices]``; a Ramp index loads a vector."""

    buffer: Buffer
    indices: tuple[PrimExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))
        if len(self.indices) != len(self.buffer.shape):
            raise IndexError(
                f"buffer {self.buffer.name} has {len(self.buffer.shape)} dimensions but is indexed with {len(self.indices)}"
            )

    @property
    def dtype(self) -> DataType:
        lanes = 1
        for i in self.indices:
            lanes = max(lanes, i.dtype.lanes)
        return self.buffer.dtype.with_lanes(self.buffer.dtype.lanes * lanes)


@dataclass(frozen=True, slots=True)
class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes - 1) * stride]``."""

    base: PrimExpr
    stride: PrimExpr
    lanes: int

    def __post_init__(self) -> None:
        _binary_dtype("Ramp", self.base, self.stride)
        if self.lanes < 2:
            raise ValueError(f"a Ramp needs at least 2 lanes, got {self.lanes}")

    @property
    def dtype(self) -> DataType:
        return self.base.dtype.with_lanes(self.lanes)


@dataclass(frozen=True, slots=True)
class Broadcast(PrimExpr):
    """A scalar repeated ``lanes`` times."""

    value: PrimExpr
    lanes: int

    def __post_init__(self) -> None:
        if self.lanes < 2:
            raise ValueError(f"a Broadcast needs at least 2 lanes, got {self.lanes}")

    @property
    def dtype(self) -> DataType:
        return self.value.dtype.with_lanes(self.lanes)


@dataclass(frozen=True, slots=True)
class Call(PrimExpr):
    """A call of a named intrinsic, such as ``exp``, ``sqrt`` or ``llvm.x86.avx512.vpdpbusd.512``."""

    dtype: DataType
    op: str
    args: tuple[PrimExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        object.__setattr__(self, "args", tuple(convert(a) for a in self.args))


# math functions known to the interpreter and code generators
MATH_FUNCTIONS = (
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "abs",
    "fabs",
    "floor",
    "ceil",
    "round",
    "erf",
    "pow",
    "fma",  # fma(a, b, c) = a * b + c rounded once (te.fma_sum)
)


def call(op: str, *args: Any, dtype: str | DataType | None = None) -> Call:
    """``call("exp", x)``: a call whose type defaults to that of its first argument."""
    converted = tuple(convert(a) for a in args)
    if dtype is None:
        if not converted:
            raise TypeError(f"call of {op} without arguments needs an explicit dtype")
        dtype = converted[0].dtype
    return Call(parse_dtype(dtype), op, converted)


def equal(a: Any, b: Any) -> PrimExpr:
    a = convert(a)
    a, b = _pair(a, b)
    return EQ(a, b)


def not_equal(a: Any, b: Any) -> PrimExpr:
    a = convert(a)
    a, b = _pair(a, b)
    return NE(a, b)


def min_(a: Any, b: Any) -> PrimExpr:
    a = convert(a)
    a, b = _pair(a, b)
    return Min(a, b)


def max_(a: Any, b: Any) -> PrimExpr:
    a = convert(a)
    a, b = _pair(a, b)
    return Max(a, b)


def logical_and(*conds: PrimExpr) -> PrimExpr:
    """Conjunction of one or more conditions (True when given none)."""
    result: PrimExpr | None = None
    for c in conds:
        c = convert(c)
        result = c if result is None else And(result, c)
    return result if result is not None else IntImm(bool_, 1)


@dataclass(frozen=True, slots=True)
class Range(Node):
    """The half-open integer interval ``[min, min + extent)``."""

    min: PrimExpr
    extent: PrimExpr

    def __post_init__(self) -> None:
        object.__setattr__(self, "min", convert(self.min))
        object.__setattr__(
            self, "extent", convert(self.extent, self.min.dtype if isinstance(self.min, PrimExpr) else None)
        )

    @staticmethod
    def from_extent(extent: Any, dtype: str | DataType = "int32") -> Range:
        return Range(const(0, dtype), convert(extent, dtype))

    @staticmethod
    def from_min_extent(min_value: Any, extent: Any) -> Range:
        return Range(convert(min_value), convert(extent))
