"""Native (LLVM) modules: compile a lowered PrimFunc for a CPU, call with checked arguments, time,
save and load.

mod = build_native(func, host)        # lower, generate, optimize (O3), JIT (MCJIT)
mod(a, b, c)                          # numpy arrays matching func's buffers; outputs in place
mod.time(a, b, c, number=10, repeat=5).median
mod.save("gemm.so"); m2 = LoadedModule("gemm.so")   # another process may load it

:func:`tensorsearch.runtime.module.build` adds the intrinsic verification and the GPU path.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import itertools
import json
import math
import os
import subprocess
import tempfile
import time as _time
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from ..codegen import llvm as cg
from ..codegen import threadpool as tp
from ..ir.functor import post_order_visit
from ..ir.stmt import Block, BlockRealize, For, ForKind, PrimFunc
from ..lower import lower
from ..lower.units import lower_units, tile_xfeatures
from ..target import Hardware, arch_of, host_triple, resolve
from .params import CTYPES, Param, check_arguments, signature
from .timing import TimeResult, flush_cache_now, l3_bytes_here, time_repeats

COLD_MAX_COPIES = 256  # Module.time(cold=...): copies of the cold buffers, at most


def is_lowered(func: PrimFunc) -> bool:
    """Whether ``func`` is already in the lowered form (no blocks, one index per access)."""
    bad = []

    def visit(n: Any) -> None:
        if isinstance(n, Block | BlockRealize):
            bad.append(n)
        elif hasattr(n, "indices") and hasattr(n, "buffer") and len(n.indices) != 1:
            bad.append(n)
        elif isinstance(n, For) and n.kind in (ForKind.VECTORIZED, ForKind.THREAD_BINDING):
            bad.append(n)

    post_order_visit(func.body, visit)
    return not bad and all(len(b.shape) == 1 for b in func.buffers)


def default_threads() -> int:
    """Threads a parallel loop uses by default: ``TENSORSEARCH_NUM_THREADS``, else
    ``OMP_NUM_THREADS``, else the CPUs this process may run on."""
    for var in ("TENSORSEARCH_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return len(os.sched_getaffinity(0))


def _set_pool_default(address: int, after_fork: int) -> None:
    """Give a loaded thread pool the process's default thread count, and reset it in forked children."""
    ctypes.c_int32.from_address(address).value = default_threads()
    reset = ctypes.CFUNCTYPE(None)(after_fork)
    os.register_at_fork(after_in_child=reset)
    _POOL_RESETS.append(reset)


_POOL_RESETS: list[Any] = []  # the ctypes functions os.register_at_fork holds


@cache
def load_threadpool() -> None:
    """JIT-compile the process's thread pool (:mod:`tensorsearch.codegen.threadpool`) once and
    register its launch function for the modules that call it. Its code is never freed: its
    worker threads live as long as the process."""
    import llvmlite.binding as llvm

    cg.target_machine(resolve(None))  # initializes LLVM
    mod = llvm.parse_assembly(tp.threadpool_ir(host_triple(), shared=False))
    missing = [f.name for f in mod.functions if f.is_declaration and not f.name.startswith("llvm.")]
    missing = [name for name in missing if not _resolve_symbol(name)]
    if missing:
        raise RuntimeError(f"the thread pool needs C library functions this process lacks: {missing}")
    engine = llvm.create_mcjit_compiler(mod, cg.target_machine(resolve(None), jit=True))
    engine.finalize_object()
    llvm.add_symbol(tp.LAUNCH_SYMBOL, engine.get_function_address(tp.LAUNCH_SYMBOL))
    _set_pool_default(
        engine.get_global_value_address(tp.DEFAULT_THREADS_SYMBOL), engine.get_function_address(tp.AFTER_FORK_SYMBOL)
    )
    engine.detach()  # never disposed: worker threads may be polling its code at exit


def with_threadpool(llvm_ir: str, triple: str) -> Any:
    """The module ``llvm_ir`` with the thread pool linked in (weak symbols), for an object file
    that runs on its own."""
    import llvmlite.binding as llvm

    mod = llvm.parse_assembly(llvm_ir)
    pool = llvm.parse_assembly(tp.threadpool_ir(triple, shared=True))
    pool.data_layout = mod.data_layout
    mod.link_in(pool)
    return mod


# LLVM calls this compiler-rt/libgcc routine (not an IR declaration, so not in the list above)
# when it rounds float to bfloat itself, as in a generic intrinsic on <N x bfloat> such as
# llvm.maxnum.v8bf16 on a CPU without AVX512-BF16; libgcc has it only from GCC 13, and an
# unresolved one is a null call in MCJIT. Round to nearest even, NaNs kept quiet, as the codegen.
_TRUNCSFBF2 = """
define bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %high = lshr i32 %bits, 16
  %lsb = and i32 %high, 1
  %bias = add i32 %lsb, 32767
  %sum = add i32 %bits, %bias
  %rounded = lshr i32 %sum, 16
  %nan = fcmp uno float %x, %x
  %quiet = or i32 %high, 64
  %pick = select i1 %nan, i32 %quiet, i32 %rounded
  %short = trunc i32 %pick to i16
  %out = bitcast i16 %short to bfloat
  ret bfloat %out
}
"""


@cache
def _bf16_libcalls() -> Any:
    """Give MCJIT ``__truncsfbf2`` where the process has none; returns the engine that keeps it."""
    import llvmlite.binding as llvm

    if _resolve_symbol("__truncsfbf2"):
        return None
    mod = llvm.parse_assembly(_TRUNCSFBF2)
    mod.triple = host_triple()
    engine = llvm.create_mcjit_compiler(mod, cg.target_machine(resolve(None), jit=True))
    engine.finalize_object()
    llvm.add_symbol("__truncsfbf2", engine.get_function_address("__truncsfbf2"))
    return engine


def _resolve_symbol(name: str) -> bool:
    """Whether MCJIT can link ``name``; C library functions (malloc, free, erf) are registered first.

    LLVM searches the process's own symbols only after the first execution engine was created,
    so a process's first module calling ``aligned_alloc`` or libm would not resolve them.
    """
    import llvmlite.binding as llvm

    if llvm.address_of_symbol(name):
        return True
    for lib in _c_libraries():
        fn = getattr(lib, name, None)
        addr = None if fn is None else ctypes.cast(fn, ctypes.c_void_p).value
        if addr:
            llvm.add_symbol(name, addr)
            return True
    return False


@cache
def _c_libraries() -> tuple[ctypes.CDLL, ...]:
    libs = [ctypes.CDLL(None)]
    path = ctypes.util.find_library("m")
    if path is not None:
        libs.append(ctypes.CDLL(path))
    return tuple(libs)


class _Runnable:
    """Argument checking, calling and timing shared by JIT-compiled and loaded modules."""

    name: str
    params: list[Param]
    triple: str
    l3_bytes: int | None = None
    _cfunc: Any = None
    _repeat: Any = None
    _threads: ctypes.c_int32 | None = None

    def _setup_ctypes(self, func_addr: int, repeat_addr: int) -> None:
        argtypes = [ctypes.c_void_p if p.kind == "buffer" else CTYPES[p.dtype] for p in self.params]
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)(func_addr)  # CFUNCTYPE releases the GIL
        self._repeat = ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes, ctypes.c_int64)(repeat_addr)

    def _not_runnable(self) -> None:
        if self._cfunc is None and getattr(self, "target", None) is not None and self.target.runs_here:
            raise RuntimeError(
                f"module {self.name} was built with jit=False; save() it and load_module() the file to run it"
            )
        missing = self.target.missing_here() if getattr(self, "target", None) is not None else []
        if self._cfunc is None and missing:
            raise RuntimeError(
                f"module {self.name} was built for {self.target.name}, whose features {', '.join(missing[:4])}"
                f"{' ...' if len(missing) > 4 else ''} this CPU lacks; use .assembly or .save_object(path) instead"
            )
        if self._cfunc is None:
            arch = self.triple.split("-")[0]
            raise RuntimeError(
                f"module {self.name} was built for {arch} ({self.triple}) and cannot run on this machine "
                f"({host_triple()}); use .assembly or .save_object(path) instead"
            )

    def _convert_args(self, args: Sequence[Any]) -> list[Any]:
        self._not_runnable()
        checked = check_arguments(self.name, self.params, args)
        return [a.ctypes.data if isinstance(a, np.ndarray) else a for a in checked]

    def __call__(self, *args: Any) -> None:
        """Run on numpy arrays (checked against the function's buffers); outputs are written in place."""
        cargs = self._convert_args(args)
        self._cfunc(*cargs)

    def bind(self, *args: Any) -> Callable[[], int]:
        """A call with ``args`` checked once: each call of the result runs the function on those
        arrays (their contents may change between calls; they stay referenced by it). For an
        executor that makes the same calls many times."""
        cargs = self._convert_args(args)
        cfunc = self._cfunc

        def call() -> int:
            return cfunc(*cargs)

        call.arrays = args  # type: ignore[attr-defined]  # keep the arrays alive as long as the call
        if all(p.kind == "buffer" for p in self.params):  # what runtime.sequence chains natively
            call.native = (ctypes.cast(cfunc, ctypes.c_void_p).value, cargs)  # type: ignore[attr-defined]
        return call

    def time(
        self,
        *args: Any,
        number: int = 1,
        repeat: int = 3,
        min_repeat_ms: float = 0,
        flush_cache: bool = False,
        cold: Sequence[int] = (),
    ) -> TimeResult:
        """Seconds per call for each of ``repeat`` repeats of ``number`` back-to-back calls.

        The calls run in a compiled loop (no Python in between). With ``min_repeat_ms``,
        ``number`` grows until one repeat lasts at least that long. With ``flush_cache``, a
        buffer larger than the last-level cache is written before each repeat. With ``cold``
        (parameter positions), every call reads its own copy of those buffers, taken in turn
        from enough copies to fill the last-level cache twice, so they come from memory as a
        model's weights do, while the other buffers stay cached (:meth:`_time_cold`).
        """
        if cold:
            return self._time_cold(args, cold, number, repeat, min_repeat_ms)
        cargs = self._convert_args(args)

        def run(n: int) -> float:
            t0 = _time.perf_counter()
            self._repeat(*cargs, n)
            return _time.perf_counter() - t0

        flush = functools.partial(flush_cache_now, self.l3_bytes) if flush_cache else None
        return time_repeats(run, number, repeat, min_repeat_ms, flush)

    def _time_cold(
        self, args: Sequence[Any], cold: Sequence[int], number: int, repeat: int, min_repeat_ms: float
    ) -> TimeResult:
        """``time`` with the buffers at positions ``cold`` copied (at most ``COLD_MAX_COPIES``
        times) and each call bound to the next copy; the calls are made from Python (about a
        microsecond each, the same for every candidate of a function)."""
        from .memory import aligned_copy

        cargs = self._convert_args(args)
        bad = [i for i in cold if not 0 <= i < len(args) or not isinstance(args[i], np.ndarray)]
        if bad:
            raise ValueError(f"cold: position {bad[0]} is not a buffer argument of {self.name}")
        nbytes = sum(args[i].nbytes for i in cold)
        llc = self.l3_bytes or l3_bytes_here() or (32 << 20)
        copies = max(2, min(COLD_MAX_COPIES, math.ceil(2 * llc / max(nbytes, 1))))
        calls, keep = [], []
        for _ in range(copies):
            bound = list(cargs)
            for i in cold:
                keep.append(aligned_copy(args[i]))
                bound[i] = keep[-1].ctypes.data
            calls.append(functools.partial(self._cfunc, *bound))

        turn = iter(itertools.cycle(calls))

        def run(n: int) -> float:
            t0 = _time.perf_counter()
            for _ in range(n):
                next(turn)()
            return _time.perf_counter() - t0

        return time_repeats(run, number, repeat, min_repeat_ms)

    @property
    def num_threads(self) -> int:
        """Threads for parallel loops. 0: :func:`default_threads`, and a loop too small to pay for a
        second thread runs on the caller alone (``codegen.parallel.SERIAL_WORK``); a count set here is
        used for every parallel loop of the module, small ones included."""
        return 0 if self._threads is None else self._threads.value

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        self._not_runnable()
        if self._threads is not None:
            self._threads.value = int(value)


class Module(_Runnable):
    """A function compiled for a target; JIT-compiled when the target runs here."""

    def __init__(
        self,
        func: PrimFunc,
        lowered: PrimFunc,
        target: Hardware,
        name: str,
        build_seconds: float = 0.0,
        jit: bool = True,
    ):
        import llvmlite.binding as llvm

        self.func = func
        self.lowered = lowered
        self.target = target
        self.triple = target.triple
        self.l3_bytes = target.l3_bytes
        self.name = name
        self.params = signature(func, lowered)
        t0 = _time.perf_counter()
        text = cg.generate(lowered, target, name)
        self.parallel = cg.uses_parallel(text)
        opt = cg.optimize(text, target)
        self.llvm_ir: str = str(opt)
        self._assembly: str | None = None
        self._engine = None
        self.tile_xfeatures = tile_xfeatures(lowered)
        if target.runs_here and jit:
            for feature in self.tile_xfeatures:
                request_xfeature(feature)
            if self.parallel:
                load_threadpool()
            if "bfloat" in self.llvm_ir:
                _bf16_libcalls()
            missing = [
                f.name
                for f in opt.functions
                if f.is_declaration and not f.name.startswith("llvm.") and not _resolve_symbol(f.name)
            ]
            if missing:  # MCJIT would crash on an unresolved symbol
                raise RuntimeError(f"module {name} calls functions that are not loaded in this process: {missing}")
            engine = llvm.create_mcjit_compiler(opt, cg.target_machine(target, jit=True))
            engine.finalize_object()
            self._engine = engine
            self._setup_ctypes(engine.get_function_address(name), engine.get_function_address(name + "__repeat"))
            self._threads = ctypes.c_int32.from_address(engine.get_global_value_address(cg.NUM_THREADS_SYMBOL))
        self.build_seconds = build_seconds + (_time.perf_counter() - t0)

    def __repr__(self) -> str:
        return f"<tensorsearch Module {self.name} for {self.triple} ({self.target.cpu})>"

    @property
    def assembly(self) -> str:
        """Assembly text of the optimized module for the target."""
        if self._assembly is None:
            self._assembly = cg.emit_assembly(self.llvm_ir, self.target)
        return self._assembly

    @property
    def c_signature(self) -> str:
        """The exported function's C declaration."""
        ctype = {"float32": "float", "float64": "double", "bool": "bool"}
        args = []
        for p in self.params:
            if p.kind == "buffer":
                args.append(f"void *{p.name}")
            else:
                t = ctype.get(p.dtype) or (p.dtype + "_t")
                args.append(f"{t} {p.name}")
        return f"int32_t {self.name}({', '.join(args)});"

    def object_code(self) -> bytes:
        """The module's object file; one with parallel loops carries the thread pool (weak symbols)."""
        if not self.parallel:
            return cg.emit_object(self.llvm_ir, self.target)
        return cg.emit_object(with_threadpool(self.llvm_ir, self.triple), self.target)

    def save_object(self, path: str | os.PathLike) -> str:
        """Write a relocatable object file (any target) and the JSON sidecar ``path + '.json'``."""
        path = os.fspath(path)
        with open(path, "wb") as f:
            f.write(self.object_code())
        self._write_sidecar(path)
        return path

    def save(self, path: str | os.PathLike) -> str:
        """Write a shared library (object linked with ``cc -shared``) and its JSON sidecar. The
        library links on any machine of the target's architecture (it runs on one whose CPU has
        the target's features)."""
        path = os.fspath(path)
        if arch_of(self.triple) != arch_of(host_triple()):
            raise RuntimeError(
                f"module {self.name} was built for {self.triple}; save_object(path) writes its object file "
                "(link it with that target's toolchain)"
            )
        link_shared(self.object_code(), path)
        self._write_sidecar(path)
        return path

    def _write_sidecar(self, path: str) -> None:
        meta = {
            "format": "tensorsearch-module-1",
            "name": self.name,
            "symbol": self.name,
            "repeat_symbol": self.name + "__repeat",
            "num_threads_symbol": cg.NUM_THREADS_SYMBOL,
            "c_signature": self.c_signature,
            "params": [p.to_json() for p in self.params],
            "triple": self.triple,
            "cpu": self.target.cpu,
            "features": self.target.feature_string,
            "parallel": self.parallel,
            "l3_bytes": self.l3_bytes,
            "tile_xfeatures": list(self.tile_xfeatures),
        }
        with open(path + ".json", "w") as f:
            json.dump(meta, f, indent=1)


_ARCH_REQ_XCOMP_PERM = 0x1023  # linux/arch/x86/include/uapi/asm/prctl.h
_SYS_ARCH_PRCTL = 158  # x86-64
_GRANTED: set[int] = set()


def request_xfeature(feature: int) -> None:
    """Ask Linux, once per process, to let this process use the XSAVE feature ``feature`` (18:
    AMX's tile data, which a program must be granted before its first tile instruction, or the
    instruction kills it); RuntimeError when the kernel refuses."""
    if feature in _GRANTED:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM), ctypes.c_long(feature))
    if rc != 0:
        why = os.strerror(ctypes.get_errno())
        raise RuntimeError(
            f"Linux refused this process the tile registers: arch_prctl(ARCH_REQ_XCOMP_PERM, {feature}) failed "
            f"({why}); AMX needs a CPU that has it and Linux 5.16 or newer"
        )
    _GRANTED.add(feature)


def link_shared(object_code: bytes, path: str) -> None:
    """Link an object file of this machine's architecture into the shared library ``path``
    (``$CC``, else ``cc``)."""
    with tempfile.TemporaryDirectory() as tmp:
        obj = os.path.join(tmp, "module.o")
        with open(obj, "wb") as f:
            f.write(object_code)
        cc = os.environ.get("CC", "cc")
        cmd = [cc, "-shared", "-o", path, obj, "-lm", "-lpthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"linking {path} failed ({' '.join(cmd)}):\n{proc.stderr}")


class LoadedModule(_Runnable):
    """A module loaded from a shared library written by ``Module.save``."""

    def __init__(self, path: str) -> None:
        with open(path + ".json") as f:
            meta = json.load(f)
        if meta.get("format") != "tensorsearch-module-1":
            raise ValueError(f"{path}.json is not a tensorsearch module description")
        self.path = path
        self.name = meta["name"]
        self.params = [Param.from_json(d) for d in meta["params"]]
        self.triple = meta["triple"]
        self.l3_bytes = meta.get("l3_bytes")
        self.meta = meta
        arch = self.triple.split("-")[0]
        if arch_of(arch) != arch_of(host_triple()):
            return  # calls raise the "built for another machine" error
        for feature in meta.get("tile_xfeatures", ()):
            request_xfeature(feature)
        lib = ctypes.CDLL(os.path.abspath(path))
        self._lib = lib
        fn = ctypes.cast(getattr(lib, meta["symbol"]), ctypes.c_void_p).value
        rep = ctypes.cast(getattr(lib, meta["repeat_symbol"]), ctypes.c_void_p).value
        self._setup_ctypes(fn, rep)
        self._threads = ctypes.c_int32.in_dll(lib, meta["num_threads_symbol"])
        if meta.get("parallel"):
            address = ctypes.addressof(ctypes.c_int32.in_dll(lib, tp.DEFAULT_THREADS_SYMBOL))
            _set_pool_default(address, ctypes.cast(getattr(lib, tp.AFTER_FORK_SYMBOL), ctypes.c_void_p).value)

    def __repr__(self) -> str:
        return f"<tensorsearch LoadedModule {self.name} from {self.path}>"


def lower_native(func: PrimFunc, target: Hardware) -> PrimFunc:
    """``func`` lowered for a CPU ``target`` (its tile units first); a lowered function as it is."""
    units = func if is_lowered(func) else lower_units(func, target)
    return units if is_lowered(units) else lower(units)


def build_native(func: PrimFunc, target: Hardware, name: str | None = None, jit: bool = True) -> Module:
    """Lower ``func`` for the CPU ``target``, generate LLVM IR, optimize at O3 and JIT-compile (when
    it runs here); no intrinsic verification (see :func:`tensorsearch.runtime.module.build`)."""
    t0 = _time.perf_counter()
    lowered = lower_native(func, target)
    return Module(func, lowered, target, module_name(func, name), _time.perf_counter() - t0, jit=jit)


def module_name(func: PrimFunc, name: str | None) -> str:
    """The symbol a module of ``func`` is given: ``name``, else the function's ``global_symbol``, else main."""
    return name if name is not None else str(func.attr_dict.get("global_symbol", "main"))
