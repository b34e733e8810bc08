"""One strategy per target kind: how a program is lowered, compiled and run for a hardware.

A :class:`Backend` is a frozen table: the lowering pipeline (``lower``), the code generator and
compiler (``build``, which gives a runnable module of ``module_type``), and whether its code runs
on a device rather than the host CPU. :data:`BACKENDS` holds one per descriptor ``kind``;
:func:`backend_for` looks a hardware's up. This module (with ``search.kind``, which builds the
search's strategy from it) is the only place a kind name is looked at: the layer test checks it.

::

    from tensorsearch.runtime.backend import backend_for
    backend = backend_for(hw)          # BACKENDS[hw.kind]
    module = backend.build(func, hw)   # Module (LLVM, JIT) or CudaModule (nvcc, pycuda)
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ir.stmt import PrimFunc
from ..lower.gpu import lower_gpu
from ..target import Hardware
from .cuda import CudaModule, build_cuda
from .native import Module, lower_native, module_name
from .verify import verify_calls

__all__ = ["BACKENDS", "Backend", "backend_for"]


def _build_native(
    func: PrimFunc,
    hw: Hardware,
    name: str | None = None,
    jit: bool = True,
    verify_intrinsics: bool = True,
    started: float | None = None,
) -> Module:
    """Lower with the CPU pipeline, verify the intrinsics it calls, generate LLVM IR and JIT it."""
    t0 = _time.perf_counter() if started is None else started
    lowered = lower_native(func, hw)
    if verify_intrinsics:
        t1 = _time.perf_counter()
        verify_calls(lowered, hw, stacklevel=4)
        t0 += _time.perf_counter() - t1  # a one-time check, not this program's build time
    return Module(func, lowered, hw, module_name(func, name), _time.perf_counter() - t0, jit=jit)


def _build_cuda(
    func: PrimFunc,
    hw: Hardware,
    name: str | None = None,
    jit: bool = True,
    verify_intrinsics: bool = True,
    started: float | None = None,
) -> CudaModule:
    """Lower with the GPU pipeline, print CUDA C and compile it with nvcc (``jit``, ``verify_intrinsics``
    and ``started`` do not apply: CUDA intrinsics are never verified, the module times its own build)."""
    return build_cuda(func, hw, name)


@dataclass(frozen=True)
class Backend:
    """How programs for one kind of hardware are lowered, compiled and run.

    ``lower(func, hw)``: the lowering pipeline (``lower_native``: CPU target check, units, the
    :data:`~tensorsearch.lower.PIPELINE`; ``lower_gpu``: :data:`~tensorsearch.lower.gpu.GPU_PIPELINE`).
    ``build(func, hw, name, jit, verify_intrinsics, started)``: a runnable ``module_type``.
    ``device``: its code runs on an accelerator (one per runner, Ray resource ``GPU``), not on the
    host CPU, so no CPU checks apply, nothing is cross-compiled and no layout-free constants are
    packed ahead."""

    kind: str
    lower: Callable[[PrimFunc, Hardware], PrimFunc]
    build: Callable[..., Any]
    module_type: type
    device: bool


BACKENDS: dict[str, Backend] = {
    "cpu": Backend("cpu", lower_native, _build_native, Module, device=False),
    "gpu": Backend("gpu", lower_gpu, _build_cuda, CudaModule, device=True),
}


def backend_for(hardware: Hardware) -> Backend:
    """The backend of ``hardware``'s kind."""
    return BACKENDS[hardware.kind]
