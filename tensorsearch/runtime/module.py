"""Compiled modules: build, call with checked arguments, time, save and load.

mod = build(func)                     # lower, generate, optimize (O3), JIT (MCJIT)
mod(a, b, c)                          # numpy arrays matching func's buffers; outputs in place
mod.time(a, b, c, number=10, repeat=5).median
mod.save("gemm.so"); m2 = load_module("gemm.so")     # another process may load it
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
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from ..codegen import llvm as cg
from ..codegen import threadpool as tp
from ..ir.dtype import DataType, numpy_dtype, parse_dtype
from ..ir.expr import IntImm
from ..ir.functor import post_order_visit
from ..ir.stmt import Block, BlockRealize, BufferStore, For, ForKind, PrimFunc
from ..lower.units import lower_units, tile_xfeatures
from ..target import Hardware, arch_of, host_triple, resolve
from .timing import TimeResult, flush_cache_now, l3_bytes_here, time_repeats

if TYPE_CHECKING:
    from .cuda import CudaModule

COLD_MAX_COPIES = 256  # Module.time(cold=...): copies of the cold buffers, at most

_CTYPES = {
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
            if str(p.dtype) not in _CTYPES:
                raise TypeError(f"scalar parameter {p.name} of type {p.dtype} cannot be passed from Python")
            out.append(Param(p.name, "scalar", str(p.dtype)))
        else:
            shape = tuple(s.value if isinstance(s, IntImm) else None for s in b.shape)
            out.append(Param(b.name, "buffer", str(b.dtype), shape, b.name in written))
    return out


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
        argtypes = [ctypes.c_void_p if p.kind == "buffer" else _CTYPES[p.dtype] for p in self.params]
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
        second thread runs on the caller alone (``codegen.llvm.SERIAL_WORK``); a count set here is
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


def load_module(path: str | os.PathLike) -> LoadedModule | CudaModule:
    """Load a shared library written by ``Module.save``, or a cubin written by ``CudaModule.save``
    (its ``.json`` sidecar must be next to it)."""
    from .cuda import SIDECAR_FORMAT, load_cuda_module

    path = os.fspath(path)
    with open(path + ".json") as f:
        if json.load(f).get("format") == SIDECAR_FORMAT:
            return load_cuda_module(path)
    return LoadedModule(path)


def lower_for_codegen(func: PrimFunc) -> PrimFunc:
    if is_lowered(func):
        return func
    from ..lower import lower

    return lower(func)


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
    if tgt.kind == "gpu":
        from .cuda import build_cuda

        return build_cuda(func, tgt, name)
    lowered = lower_for_codegen(func if is_lowered(func) else lower_units(func, tgt))
    if verify_intrinsics:
        from .verify import verify_calls  # verify builds programs with this function

        t1 = _time.perf_counter()
        verify_calls(lowered, tgt, stacklevel=3)
        t0 += _time.perf_counter() - t1  # a one-time check, not this program's build time
    if name is None:
        name = str(func.attr_dict.get("global_symbol", "main"))
    return Module(func, lowered, tgt, name, _time.perf_counter() - t0, jit=jit)


__all__ = ["DataType", "LoadedModule", "Module", "Param", "build", "is_lowered", "load_module", "signature"]
