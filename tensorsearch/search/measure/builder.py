"""Building candidates: a candidate lowered, compiled and linked in a Ray task (one CPU each), returning
the shared library's bytes and its JSON sidecar, or an error (see :mod:`.measurer` for the whole flow).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

from ...ir.stmt import PrimFunc
from ...runtime.backend import backend_for
from ...target import Hardware
from ...transform import ConstantSplit, layout_free_params, split_constant_stages
from .cluster import short_error, take_niceness
from .results import BuildResult, Prepack


def _build(func: PrimFunc, target: Hardware, niceness: int | None = None) -> BuildResult:
    """Lower, compile and link ``func``; return the library's bytes and sidecar, or the error.

    Code for another architecture than this node's (an aarch64 descriptor's, built on an x86
    node) is cross-compiled and shipped as an object file (``"object": True``): the runner that
    times it links it, natively or for qemu. ``niceness``: the driver's, which the worker takes
    where it may (:func:`take_niceness`)."""
    from ...target import arch_of, host_triple

    take_niceness(niceness)
    t0 = time.perf_counter()
    device = backend_for(target).device
    foreign = not device and arch_of(target.triple) != arch_of(host_triple())
    constants = () if device else layout_free_params(func)
    split = split_constant_stages(func, constants) if constants and not foreign else None
    try:
        binary, sidecar = _library(split.main if split else func, target, foreign)
        prepack = None
        if split is not None:
            pre_binary, pre_sidecar = _library(split.prepack, target, foreign)
            prepack = Prepack(pre_binary, pre_sidecar, split.prepack_inputs, split.main_params)
    except Exception as e:
        return BuildResult("build: " + short_error(e), time.perf_counter() - t0)
    import ray

    node = ray.get_runtime_context().get_node_id()  # a Ray task's: builds run nowhere else
    cold = _cold_positions(split, constants)
    return BuildResult(None, time.perf_counter() - t0, binary, foreign, sidecar, node, prepack, cold)


def _library(func: PrimFunc, target: Hardware, foreign: bool) -> tuple[bytes, str]:
    """``func`` compiled for ``target``: a shared library's (or, ``foreign``, an object file's)
    bytes and its JSON sidecar."""
    from ...runtime.module import build

    mod = build(func, target, jit=False, name="candidate" if foreign else None)  # qemu's harness has the main
    with tempfile.TemporaryDirectory(prefix="tensorsearch-build-") as tmp:
        path = os.path.join(tmp, "candidate.o" if foreign else "candidate.so")
        mod.save_object(path) if foreign else mod.save(path)
        with open(path, "rb") as f:
            binary = f.read()
        with open(path + ".json") as f:
            sidecar = f.read()
    return binary, sidecar


def _cold_positions(split: ConstantSplit | None, constants: Sequence[int]) -> tuple[int, ...]:
    """The parameters of the timed function that hold constants (a model's weights, packed or
    not): timed out of cache."""
    if split is None:
        return tuple(constants)
    return tuple(k for k, p in enumerate(split.main_params) if not isinstance(p, int) or p in constants)


@cache
def remote_build() -> Any:
    import ray

    # a build lost with its node (a system failure) runs again elsewhere; a build error is a result
    return ray.remote(num_cpus=1, max_retries=2)(_build)
