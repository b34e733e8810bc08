"""The process environment the benchmarks time in (imported before numpy by each script).

``reexec_without_openblas_overrides()`` re-executes the script without ``OPENBLAS_CORETYPE`` /
``OPENBLAS_L2_SIZE`` (set on some machines for old OpenBLAS builds; they slow a current numpy, the
reference the benchmarks time against). libgomp keeps its own wait policy (spin a little, then
sleep): ``OMP_WAIT_POLICY=passive`` made every parallel region wake sleeping threads, doubling the
latency of sub-millisecond kernels (docs/codegen.md).
"""

from __future__ import annotations

import os
import sys

_STRIP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def reexec_without_openblas_overrides() -> None:
    """Re-execute this script without the OpenBLAS overrides, once, before numpy is loaded."""
    if any(k in os.environ for k in _STRIP) and "numpy" not in sys.modules:
        env = {k: v for k, v in os.environ.items() if k not in _STRIP}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
