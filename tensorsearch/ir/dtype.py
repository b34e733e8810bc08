"""Data types: a scalar kind, a bit width and a number of vector lanes.

``DataType.parse("float32x4")`` gives float32 with 4 lanes; ``str()`` prints it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import numpy as np

_CODES = ("int", "uint", "float", "bfloat", "bool", "handle")
_ALLOWED_BITS = {
    "int": (8, 16, 32, 64),
    "uint": (8, 16, 32, 64),
    "float": (16, 32, 64),
    "bfloat": (16,),
    "bool": (1,),
    "handle": (64,),
}
_PATTERN = re.compile(r"^(int|uint|float|bfloat|bool|handle)(\d*)(?:x(\d+))?$")


@dataclass(frozen=True, slots=True)
class DataType:
    """A scalar or vector data type such as ``int8``, ``float16`` or ``float32x16``."""

    code: str
    bits: int
    lanes: int = 1

    def __post_init__(self) -> None:
        if self.code not in _CODES:
            raise ValueError(f"unknown data type code {self.code!r}; expected one of {_CODES}")
        if self.bits not in _ALLOWED_BITS[self.code]:
            raise ValueError(f"data type {self.code} cannot have {self.bits} bits")
        if self.lanes < 1:
            raise ValueError(f"data type lanes must be >= 1, got {self.lanes}")

    @staticmethod
    def parse(text: str | DataType) -> DataType:
        return parse_dtype(text)

    def __str__(self) -> str:
        base = "bool" if self.code == "bool" else ("handle" if self.code == "handle" else f"{self.code}{self.bits}")
        return base if self.lanes == 1 else f"{base}x{self.lanes}"

    def __repr__(self) -> str:
        return f"DataType({str(self)!r})"

    @property
    def is_int(self) -> bool:
        return self.code == "int"

    @property
    def is_uint(self) -> bool:
        return self.code == "uint"

    @property
    def is_integer(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self.code in ("int", "uint")

    @property
    def is_float(self) -> bool:
        """IEEE float or bfloat."""
        return self.code in ("float", "bfloat")

    @property
    def is_bool(self) -> bool:
        return self.code == "bool"

    @property
    def is_handle(self) -> bool:
        return self.code == "handle"

    @property
    def is_vector(self) -> bool:
        return self.lanes > 1

    @property
    def bytes(self) -> int:
        """Bytes of one element of the scalar type (bool counts as one byte)."""
        return max(self.bits, 8) // 8

    def element_of(self) -> DataType:
        """The scalar type of one lane."""
        return DataType(self.code, self.bits, 1) if self.lanes != 1 else self

    def with_lanes(self, lanes: int) -> DataType:
        return DataType(self.code, self.bits, lanes)

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of one element (bfloat16 comes from ml_dtypes)."""
        return numpy_dtype(self.element_of())

    def min_value(self) -> int | float:
        if self.is_int:
            return -(1 << (self.bits - 1))
        if self.is_uint or self.is_bool:
            return 0
        return float(-np.finfo(self.numpy).max)

    def max_value(self) -> int | float:
        if self.is_int:
            return (1 << (self.bits - 1)) - 1
        if self.is_uint:
            return (1 << self.bits) - 1
        if self.is_bool:
            return 1
        return float(np.finfo(self.numpy).max)


@cache
def _parse(text: str) -> DataType:
    m = _PATTERN.match(text)
    if m is None:
        raise ValueError(f"cannot parse data type {text!r}; expected a name such as int8, float32 or float32x4")
    code, bits, lanes = m.group(1), m.group(2), m.group(3)
    default_bits = {"bool": 1, "handle": 64}.get(code)
    if bits == "":
        if default_bits is None:
            raise ValueError(f"data type {text!r} needs a bit width, such as {code}32")
        nbits = default_bits
    else:
        nbits = int(bits)
    try:
        return DataType(code, nbits, int(lanes) if lanes else 1)
    except ValueError as err:
        raise ValueError(f"invalid data type {text!r}: {err}") from None


def parse_dtype(text: str | DataType) -> DataType:
    """Accept a DataType or its name and return the DataType."""
    if isinstance(text, DataType):
        return text
    if isinstance(text, np.dtype) or (isinstance(text, type) and issubclass(text, np.generic)):
        return from_numpy(np.dtype(text))
    if not isinstance(text, str):
        raise TypeError(f"expected a data type name, got {type(text).__name__} {text!r}")
    return _parse(text)


def numpy_dtype(dtype: DataType) -> np.dtype:
    if dtype.code == "bfloat":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if dtype.code == "bool":
        return np.dtype(np.bool_)
    if dtype.code == "handle":
        raise TypeError("the handle type has no numpy equivalent")
    return np.dtype(f"{dtype.code}{dtype.bits}")


def from_numpy(dtype: np.dtype) -> DataType:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return DataType("bool", 1)
    if dtype.name == "bfloat16":
        return DataType("bfloat", 16)
    return _parse(dtype.name)


int8 = DataType("int", 8)
int16 = DataType("int", 16)
int32 = DataType("int", 32)
int64 = DataType("int", 64)
uint8 = DataType("uint", 8)
uint16 = DataType("uint", 16)
uint32 = DataType("uint", 32)
uint64 = DataType("uint", 64)
float16 = DataType("float", 16)
bfloat16 = DataType("bfloat", 16)
float32 = DataType("float", 32)
float64 = DataType("float", 64)
bool_ = DataType("bool", 1)
handle = DataType("handle", 64)
