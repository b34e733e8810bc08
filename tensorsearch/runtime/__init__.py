"""Runtime: build PrimFuncs into callable native modules, time them, save and load them.

    import tensorsearch as ts
    mod = ts.runtime.build(func)            # target=None: the host
    mod(a, b, c)                            # checked numpy arguments, outputs written in place
    print(mod.time(a, b, c, number=10, repeat=5))
    mod.save("f.so"); ts.runtime.load_module("f.so")(a, b, c)

See docs/codegen.md.
"""

from .cuda import CudaModule, CudaRuntimeError
from .memory import aligned_copy, aligned_empty, aligned_zeros
from .module import (
    LoadedModule,
    Module,
    Param,
    build,
    default_threads,
    is_lowered,
    load_module,
    load_threadpool,
    signature,
)
from .timing import TimeResult, flush_cache_now

__all__ = [
    "CudaModule",
    "CudaRuntimeError",
    "LoadedModule",
    "Module",
    "Param",
    "TimeResult",
    "aligned_copy",
    "aligned_empty",
    "aligned_zeros",
    "build",
    "default_threads",
    "flush_cache_now",
    "is_lowered",
    "load_module",
    "load_threadpool",
    "signature",
]
