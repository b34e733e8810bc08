"""Compiled modules: build, call with checked arguments, time, save and load.

mod = build(func)                     # lower, generate, optimize (O3), JIT (MCJIT)
mod(a, b, c)                          # numpy arrays matching func's buffers; outputs in place
mod.time(a, b, c, number=10, repeat=5).median
mod.save("gemm.so"); m2 = load_module("gemm.so")     # another process may load it

:func:`build` picks the module kind from the target: a CPU gives a native (LLVM) module
(:mod:`tensorsearch.runtime.native`), a GPU a CUDA module (:mod:`tensorsearch.runtime.cuda`).
"""

from __future__ import annotations

import json
import os
import time as _time

from ..ir.dtype import DataType, numpy_dtype
from ..ir.stmt import PrimFunc
from ..target import Hardware, host_triple, resolve
from .backend import backend_for
from .cuda import SIDECAR_FORMAT, CudaModule, load_cuda_module
from .native import (
    LoadedModule,
    Module,
    default_threads,
    is_lowered,
    link_shared,
    load_threadpool,
    request_xfeature,
)
from .params import Param, signature


def load_module(path: str | os.PathLike) -> LoadedModule | CudaModule:
    """Load a shared library written by ``Module.save``, or a cubin written by ``CudaModule.save``
    (its ``.json`` sidecar must be next to it)."""
    path = os.fspath(path)
    with open(path + ".json") as f:
        if json.load(f).get("format") == SIDECAR_FORMAT:
            return load_cuda_module(path)
    return LoadedModule(path)


def build(
    func: PrimFunc,
    target: Hardware | str | os.PathLike | None = None,
    name: str | None = None,
    jit: bool = True,
    *,
    verify_intrinsics: bool = True,
) -> Module | CudaModule:
    """Lower, generate LLVM IR, optimize at O3 for ``target`` and JIT-compile (when it runs here).

    ``target``: None (the host), a hardware descriptor name or path, or a
    :class:`~tensorsearch.target.Hardware`. ``jit=False`` skips the JIT (the module can
    still ``save`` and ``save_object``; calling it raises), for a builder that only writes files.
    A GPU descriptor (``kind: gpu``) gives a :class:`~tensorsearch.runtime.cuda.CudaModule`
    instead: CUDA C compiled by nvcc to a cubin, run with pycuda.

    Before compiling, every tensor intrinsic the program calls is verified against its semantics
    (:mod:`tensorsearch.runtime.verify`, cached): one that computes something else raises
    :class:`~tensorsearch.runtime.verify.IntrinsicVerifyError` naming its file, and one this
    machine cannot run is warned about (``IntrinsicNotVerified``). ``verify_intrinsics=False``
    skips that (the verification's own build does).
    """
    if not isinstance(func, PrimFunc):
        raise TypeError(f"build needs a PrimFunc, got {type(func).__name__}")
    t0 = _time.perf_counter()
    tgt = resolve(target)
    return backend_for(tgt).build(func, tgt, name, jit=jit, verify_intrinsics=verify_intrinsics, started=t0)


__all__ = [
    "DataType",
    "LoadedModule",
    "Module",
    "Param",
    "build",
    "default_threads",
    "host_triple",
    "is_lowered",
    "link_shared",
    "load_module",
    "load_threadpool",
    "numpy_dtype",
    "request_xfeature",
    "signature",
]
