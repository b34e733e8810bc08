"""The model layer: ONNX models in, and (in the parts to come) their import, fusion, tasks and
the executor's plan. ``models`` builds the built-in models (random weights, no downloads).

Submodules load on first use, so ``import tensorsearch.graph`` does not import onnx.
"""

from importlib import import_module
from typing import Any

_SUBMODULES = ("models",)

__all__ = list(_SUBMODULES)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'tensorsearch.graph' has no attribute {name!r}")
