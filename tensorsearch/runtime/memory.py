"""Arrays aligned for vector loads.

numpy places a large array 16 bytes past a page boundary, so every 64-byte AVX-512 load of it
straddles two cache lines; a streaming kernel (a depthwise convolution) ran 1.4x slower on such
arrays than on 64-byte aligned ones (TVM's NDArrays are aligned so). The tuner's runner, the
graph executor and the benchmarks allocate through these::

    x = aligned_copy(np.random.rand(1, 112, 112, 64).astype("float32"))
    y = aligned_empty((1, 56, 56, 64), "float32")
    assert x.ctypes.data % 64 == 0 and y.ctypes.data % 64 == 0
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGNMENT = 64  # bytes: a cache line, and an AVX-512 vector


def aligned_empty(shape: Any, dtype: Any, align: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts at a multiple of ``align`` bytes."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + nbytes].view(dtype).reshape(shape)


def aligned_zeros(shape: Any, dtype: Any, align: int = ALIGNMENT) -> np.ndarray:
    """:func:`aligned_empty` filled with zeros."""
    out = aligned_empty(shape, dtype, align)
    out.fill(0)
    return out


def aligned_copy(a: np.ndarray, align: int = ALIGNMENT) -> np.ndarray:
    """A C-contiguous copy of ``a`` whose data starts at a multiple of ``align`` bytes."""
    a = np.asarray(a)
    out = aligned_empty(a.shape, a.dtype, align)
    out[...] = a
    return out
