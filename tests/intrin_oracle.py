"""numpy models of the LLVM intrinsics that the shipped VNNI intrinsic's implementation calls, so
the interpreter can run tensorized int8 programs on any CPU (the compiled checks need VNNI).

``register()`` gives :func:`tensorsearch.interpret` ``reinterpret`` (a bit cast: 4 bytes -> one
int32, int32 lanes -> their bytes) and ``llvm.x86.avx512.vpdpbusd.512`` (per int32 lane: the
accumulator plus the dot product of 4 unsigned bytes of the first operand with 4 signed bytes of
the second).
"""

from __future__ import annotations

import numpy as np

from tensorsearch.interpreter import register_intrinsic


def _reinterpret(value):
    arr = np.asarray(value)
    if arr.ndim == 1 and arr.dtype.itemsize == 1 and arr.size == 4:
        return int(arr.astype(np.uint8).view(np.int32)[0])  # uint8x4 -> int32
    return arr.astype(np.int32).view(np.uint8)  # int32xN -> its 4N bytes


def _vpdpbusd(acc, a, b):
    ua = np.asarray(a).astype(np.uint8).astype(np.int64).reshape(16, 4)
    sb = np.asarray(b).astype(np.uint8).view(np.int8).astype(np.int64).reshape(16, 4)
    total = np.asarray(acc).astype(np.int64) + (ua * sb).sum(axis=1)
    return total.astype(np.int32)  # wraps like the instruction


def register() -> None:
    register_intrinsic("reinterpret", _reinterpret)
    register_intrinsic("llvm.x86.avx512.vpdpbusd.512", _vpdpbusd)
