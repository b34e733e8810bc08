"""The parameters of a compiled function and the check of a call's arguments against them, shared
by CPU and CUDA modules.

    params = signature(func)                  # [Param("A", "buffer", "float32", (64, 64)), ...]
    check_arguments("gemm", params, (a, b, c))  # TypeError / ValueError naming the argument
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.dtype import numpy_dtype, parse_dtype
from ..ir.expr import IntImm
from ..ir.functor import post_order_visit
from ..ir.stmt import BufferStore, PrimFunc

CTYPES = {
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "bool": ctypes.c_bool,
}


@dataclass(frozen=True)
class Param:
    """One parameter of a compiled function: a buffer (shape, dtype) or a scalar (dtype)."""

    name: str
    kind: str  # "buffer" or "scalar"
    dtype: str
    shape: tuple[int | None, ...] = ()
    written: bool = False

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "written": self.written,
        }

    @staticmethod
    def from_json(d: dict) -> Param:
        return Param(d["name"], d["kind"], d["dtype"], tuple(d["shape"]), bool(d.get("written", False)))


def signature(func: PrimFunc, lowered: PrimFunc | None = None) -> list[Param]:
    """The parameters of ``func`` (the original, un-lowered function) as the runtime checks them."""
    written: set[str] = set()

    def visit(n: Any) -> None:
        if isinstance(n, BufferStore):
            written.add(n.buffer.name)

    post_order_visit((lowered or func).body, visit)
    bmap = dict(func.buffer_map)
    out = []
    for p in func.params:
        b = bmap.get(p)
        if b is None:
            if str(p.dtype) not in CTYPES:
                raise TypeError(f"scalar parameter {p.name} of type {p.dtype} cannot be passed from Python")
            out.append(Param(p.name, "scalar", str(p.dtype)))
        else:
            shape = tuple(s.value if isinstance(s, IntImm) else None for s in b.shape)
            out.append(Param(b.name, "buffer", str(b.dtype), shape, b.name in written))
    return out


def check_arguments(name: str, params: Sequence[Param], args: Sequence[Any]) -> list[Any]:
    """``args`` checked against ``params`` (count, scalar or C-contiguous numpy array of the right
    dtype and shape, written buffers writeable and not overlapping another); TypeError or
    ValueError naming the argument otherwise. Shared by CPU and CUDA modules."""
    if len(args) != len(params):
        names = ", ".join(p.name for p in params)
        raise TypeError(f"{name} takes {len(params)} arguments ({names}), got {len(args)}")
    arrays: list[tuple[Param, np.ndarray]] = []
    for k, (p, a) in enumerate(zip(params, args, strict=True)):
        if p.kind == "scalar":
            if isinstance(a, np.ndarray) or not np.isscalar(a):
                raise TypeError(f"argument {k} ({p.name}) must be a {p.dtype} scalar, got {type(a).__name__}")
            continue
        if not isinstance(a, np.ndarray):
            raise TypeError(f"argument {k} (buffer {p.name}) must be a numpy array, got {type(a).__name__}")
        want = numpy_dtype(parse_dtype(p.dtype))
        if a.dtype != want:
            raise ValueError(f"buffer {p.name}: expected dtype {p.dtype}, got {a.dtype}")
        if a.ndim != len(p.shape) or any(s is not None and s != d for s, d in zip(p.shape, a.shape, strict=False)):
            raise ValueError(f"buffer {p.name}: expected shape {p.shape}, got {a.shape}")
        if not a.flags.c_contiguous:
            raise ValueError(f"buffer {p.name}: the array must be C-contiguous (use np.ascontiguousarray)")
        if p.written and not a.flags.writeable:
            raise ValueError(f"buffer {p.name} is written by {name} but the array is read-only")
        arrays.append((p, a))
    for i in range(len(arrays)):
        for j in range(i + 1, len(arrays)):
            (p, a), (q, b) = arrays[i], arrays[j]
            if (p.written or q.written) and a.size and b.size and np.may_share_memory(a, b):
                raise ValueError(f"buffers {p.name} and {q.name} overlap in memory; pass separate arrays")
    return list(args)
