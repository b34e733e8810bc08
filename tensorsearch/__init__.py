"""tensorsearch: TensorIR and an auto-scheduler for tensorized programs, in pure Python.

    import numpy as np
    import tensorsearch as ts
    wl = ts.workloads.get("GMM", 0, "float32")
    print(wl.func.script())
    outputs = ts.interpret(wl.func, *wl.make_inputs(np.random.default_rng()))
    sch = ts.Schedule(wl.func)                      # schedule primitives; sch.trace is a ts.Trace
    print(ts.intrin.match(wl.func, "Z", ts.hardware.load("x86-znver4").intrinsics[0]))  # why VNNI rejects float32

Submodules load on first use, so ``import tensorsearch`` stays cheap.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "arith",
    "cli",
    "codegen",
    "graph",
    "hardware",
    "interpreter",
    "intrin",
    "ir",
    "lower",
    "runtime",
    "schedule",
    "script",
    "search",
    "target",
    "te",
    "transform",
    "workloads",
)
# public names of submodules: functions, and the classes a schedule is written with
_FUNCTIONS = {
    "Schedule": "schedule",
    "Trace": "schedule",
    "build": "runtime",
    "compile_best": "search",
    "compile_model": "search",
    "interpret": "interpreter",
    "structural_equal": "ir",
    "structural_hash": "ir",
    "tune": "search",
    "tune_model": "search",
    "verify": "arith",
}

__all__ = [*_SUBMODULES, *_FUNCTIONS]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    if name in _FUNCTIONS:
        return getattr(import_module(f".{_FUNCTIONS[name]}", __name__), name)
    raise AttributeError(f"module 'tensorsearch' has no attribute {name!r}")
