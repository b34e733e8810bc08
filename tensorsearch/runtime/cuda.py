"""CUDA modules: a GPU-scheduled PrimFunc compiled by nvcc to a cubin, run and timed with pycuda.

::

    mod = ts.build(sch.func, "nvidia-sm90")   # a CudaModule (nvcc needed; no GPU needed)
    mod.source, mod.grid, mod.block          # CUDA C text; (64, 1, 1), (32, 4, 1)
    mod(a, b, c)                             # numpy arrays, copied to the GPU; outputs copied back
    mod.time(a, b, c, number=10, repeat=5)   # seconds per launch, measured with CUDA events
    mod.save("gemm.cubin"); ts.runtime.load_module("gemm.cubin")

Running needs pycuda (the ``cuda`` extra: ``pip install 'tensorsearch[cuda]'``) and a GPU of the
descriptor's major compute capability (and at least its minor: a cubin runs on no other); without them a call raises
:class:`CudaRuntimeError` saying which is missing, and everything else (source, cubin, PTX,
save) still works. The launch uses the extents the kernel's ``blockIdx.*``/``threadIdx.*``
loops are bound with. Arguments are checked as a CPU module checks them.
"""

from __future__ import annotations

import atexit
import json
import os
import time as _time
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from ..codegen import cuda as cg
from ..ir.stmt import PrimFunc
from ..target import Hardware
from .params import Param, check_arguments, signature
from .timing import TimeResult, time_repeats

SIDECAR_FORMAT = "tensorsearch-cuda-module-1"


class CudaRuntimeError(RuntimeError):
    """A CUDA module that cannot run here: no pycuda, no GPU, or a GPU older than its build."""


@cache
def cuda_driver() -> Any:
    """pycuda.driver, initialised, with device 0's primary context current on this thread."""
    try:
        import pycuda.driver as drv
    except ImportError:
        raise CudaRuntimeError("running a CUDA module needs pycuda: pip install 'tensorsearch[cuda]'") from None
    try:
        drv.init()
        if drv.Device.count() == 0:
            raise CudaRuntimeError("running a CUDA module needs a GPU, and the CUDA driver found none")
        context = drv.Device(0).retain_primary_context()
    except drv.Error as err:
        raise CudaRuntimeError(f"running a CUDA module needs a GPU and its driver: {err}") from None
    context.push()
    atexit.register(context.pop)
    return drv


def device_compute_capability() -> tuple[int, int]:
    """The compute capability of GPU 0 (CudaRuntimeError when it cannot be run on)."""
    return cuda_driver().Device(0).compute_capability()


class CudaModule:
    """A kernel compiled for a GPU descriptor: ``source``, ``cubin``, ``grid``/``block``, and
    (where pycuda and a GPU are present) calls and timing."""

    def __init__(self, name: str, params: list[Param], kernel: cg.CudaKernel, cubin: bytes, sm: str) -> None:
        self.name = name
        self.params = params
        self.kernel = kernel
        self.cubin = cubin
        self.sm = sm
        self.grid = kernel.dims("blockIdx")
        self.block = kernel.dims("threadIdx")
        self.build_seconds = 0.0
        self.registers = 0  # a thread's, as ptxas reported them (0: unknown)
        self._function: Any = None

    def __repr__(self) -> str:
        return f"<tensorsearch CudaModule {self.name} for {self.sm}, grid {self.grid}, block {self.block}>"

    @property
    def source(self) -> str:
        return self.kernel.source

    # files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> str:
        """Write the cubin to ``path`` and its description (kernel, launch, parameters) to ``path + '.json'``."""
        path = os.fspath(path)
        with open(path, "wb") as f:
            f.write(self.cubin)
        with open(path + ".json", "w") as f:
            json.dump(self.sidecar(), f, indent=1)
        return path

    def sidecar(self) -> dict[str, Any]:
        return {
            "format": SIDECAR_FORMAT,
            "name": self.name,
            "symbol": self.kernel.name,
            "sm": self.sm,
            "launch": dict(self.kernel.launch),
            "params": [p.to_json() for p in self.params],
            "registers": self.registers,
        }

    @staticmethod
    def from_cubin(cubin: bytes, meta: dict[str, Any], source: str = "") -> CudaModule:
        """The module that :meth:`save` wrote (its cubin bytes and sidecar)."""
        if meta.get("format") != SIDECAR_FORMAT:
            raise ValueError(f"not a tensorsearch CUDA module description (format {meta.get('format')!r})")
        kernel = cg.CudaKernel(meta["symbol"], source, tuple(sorted(meta["launch"].items())))
        params = [Param.from_json(d) for d in meta["params"]]
        module = CudaModule(meta["name"], params, kernel, cubin, meta["sm"])
        module.registers = int(meta.get("registers", 0))
        return module

    # running -----------------------------------------------------------------------------
    def _loaded(self) -> Any:
        if self._function is None:
            drv = cuda_driver()
            have = device_compute_capability()
            digits = self.sm.removeprefix("sm_")
            want = (int(digits[:-1]), int(digits[-1]))
            if have[0] != want[0] or have[1] < want[1]:  # a cubin runs on its major version's later minors only
                raise CudaRuntimeError(
                    f"module {self.name} was built for {self.sm} and cannot run on this GPU "
                    f"(sm_{have[0]}{have[1]}); build it for a descriptor of this GPU"
                )
            module = drv.module_from_buffer(self.cubin)
            function = module.get_function(self.kernel.name)
            function.prepare("".join("P" if p.kind == "buffer" else _SCALAR_CODES[p.dtype] for p in self.params))
            self._function = (module, function)
        return self._function[1]

    def _upload(self, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Device copies of the (checked) array arguments, typed scalars for the others, and the allocations."""
        drv = cuda_driver()
        values, allocations = [], []
        for p, a in zip(self.params, args, strict=True):
            if p.kind == "scalar":
                values.append(np.dtype(p.dtype).type(a))
                continue
            dev = drv.mem_alloc(max(a.nbytes, 1))
            drv.memcpy_htod(dev, a)
            values.append(dev)
            allocations.append(dev)
        return values, allocations

    def _launch(self, function: Any, values: list[Any]) -> None:
        function.prepared_call(self.grid, self.block, *values)

    def __call__(self, *args: Any) -> None:
        """Run once on numpy arrays; written buffers are copied back into them."""
        check_arguments(self.name, self.params, args)
        function = self._loaded()
        values, _allocs = self._upload(args)
        self._launch(function, values)
        drv = cuda_driver()
        drv.Context.synchronize()
        for p, a, v in zip(self.params, args, values, strict=True):
            if p.kind == "buffer" and p.written:
                drv.memcpy_dtoh(a, v)

    def time(self, *args: Any, number: int = 1, repeat: int = 3, min_repeat_ms: float = 0) -> TimeResult:
        """Seconds per launch for each of ``repeat`` repeats of ``number`` back-to-back launches,
        measured with CUDA events around each repeat (the inputs are copied to the GPU once). With
        ``min_repeat_ms``, ``number`` grows until one repeat lasts at least that long."""
        check_arguments(self.name, self.params, args)
        function = self._loaded()
        values, _allocs = self._upload(args)
        drv = cuda_driver()

        def run(n: int) -> float:
            start, end = drv.Event(), drv.Event()
            start.record()
            for _ in range(n):
                self._launch(function, values)
            end.record()
            end.synchronize()
            return start.time_till(end) * 1e-3

        return time_repeats(run, number, repeat, min_repeat_ms)  # its warm-up loads the code onto the GPU


_SCALAR_CODES = {
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
}


def build_cuda(func: PrimFunc, hw: Hardware, name: str | None = None) -> CudaModule:
    """Lower ``func`` for the GPU, print its CUDA C and compile it with nvcc for ``hw``'s architecture."""
    t0 = _time.perf_counter()
    lowered = cg.lower_gpu(func, hw)
    kernel = cg.generate_kernel(lowered, hw, name or str(func.attr_dict.get("global_symbol", "main")))
    cubin, registers = cg.compile_cubin(kernel.source, hw)
    threads = kernel.dims("threadIdx")
    per_block = registers * threads[0] * threads[1] * threads[2]
    if per_block > hw.gpu.registers_per_block:
        raise cg.CudaCodegenError(
            f"kernel {kernel.name} uses {registers} registers a thread: {per_block} for its block of "
            f"{'x'.join(map(str, threads))} threads, more than the {hw.gpu.registers_per_block} of {hw.name}"
        )
    # the stores a unit makes are template calls after lowering: the scheduled blocks say what is written
    module = CudaModule(kernel.name, signature(func), kernel, cubin, hw.gpu.sm)
    module.registers = registers
    module.build_seconds = _time.perf_counter() - t0
    return module


def load_cuda_module(path: str) -> CudaModule:
    """Load what :meth:`CudaModule.save` wrote."""
    with open(path + ".json") as f:
        meta = json.load(f)
    with open(path, "rb") as f:
        return CudaModule.from_cubin(f.read(), meta)
