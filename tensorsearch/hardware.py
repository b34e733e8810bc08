"""The public name of the hardware descriptors: ``tensorsearch.hardware.load("x86-znver4")``.

The descriptors live in the target layer (:mod:`tensorsearch.target.hardware`); this module is
the user-facing spelling of it, and nothing inside the package imports it.
"""

from .target.hardware import (
    GPU,
    Caches,
    CpuIdentity,
    Hardware,
    HardwareWarning,
    SearchSpec,
    available,
    host,
    host_identity,
    load,
    parse,
    resolve,
)
from .target.reader import HardwareError, read_yaml


def search_path() -> list:
    """The directories searched for hardware descriptors, in order (see docs/hardware-yaml.md)."""
    from .target.reader import search_path as _search_path

    return _search_path("hardware")


__all__ = [
    "GPU",
    "Caches",
    "CpuIdentity",
    "Hardware",
    "HardwareError",
    "HardwareWarning",
    "SearchSpec",
    "available",
    "host",
    "host_identity",
    "load",
    "parse",
    "read_yaml",
    "resolve",
    "search_path",
]
