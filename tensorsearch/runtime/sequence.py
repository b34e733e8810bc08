"""A sequence of bound kernel calls made by one native call (a model's run, no Python between
its kernels).

    calls = [mod_a.bind(x, w, h), mod_b.bind(h, y)]     # Module.bind: arguments checked once
    run = call_sequence(calls)                           # None when a call cannot be chained
    run()                                                # mod_a(x, w, h); mod_b(h, y)

The sequence is a JIT-compiled function of no arguments that calls each kernel's address with
its bound data pointers as constants::

    define i32 @call_sequence() {
      %r0 = call i32 inttoptr (i64 <mod_a> to ptr)(ptr inttoptr (i64 <x> to ptr), ...)
      %r1 = call i32 inttoptr (i64 <mod_b> to ptr)(ptr inttoptr (i64 <h> to ptr), ...)
      ret i32 0
    }

A ctypes call costs a few microseconds (55 of them were 0.3 ms of MobileNet-V2's 4.7 ms).
Only calls whose arguments are all buffers are chained (model kernels have no scalars).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence

from ..codegen import llvm as cg
from ..target import host_triple, resolve

__all__ = ["call_sequence"]


def call_sequence(calls: Sequence[Callable[[], int]]) -> Callable[[], int] | None:
    """One native function making ``calls`` (each made by ``Module.bind``) in order; None when
    any has a scalar argument or no native address (a module not loaded in this process)."""
    natives = [getattr(c, "native", None) for c in calls]
    if not natives or any(n is None for n in natives):
        return None
    import llvmlite.binding as llvm

    lines = ["define i32 @call_sequence() {"]
    for k, (address, pointers) in enumerate(natives):
        args = ", ".join(f"ptr inttoptr (i64 {p} to ptr)" for p in pointers)
        lines.append(f"  %r{k} = call i32 inttoptr (i64 {address} to ptr)({args})")
    lines += ["  ret i32 0", "}"]
    mod = llvm.parse_assembly("\n".join(lines))
    mod.triple = host_triple()
    engine = llvm.create_mcjit_compiler(mod, cg.target_machine(resolve(None), jit=True))
    engine.finalize_object()
    cfunc = ctypes.CFUNCTYPE(ctypes.c_int32)(engine.get_function_address("call_sequence"))

    def run() -> int:
        return cfunc()

    run.keep = (engine, calls)  # type: ignore[attr-defined]  # the code and the arrays live as long as run
    return run
