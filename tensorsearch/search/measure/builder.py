"""Building candidates: a candidate lowered, compiled and linked in a Ray task (one CPU each), returning
the shared library's bytes and its JSON sidecar, or an error (see :mod:`.measurer` for the whole flow).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from ...ir.stmt import PrimFunc
from ...runtime.backend import backend_for
from ...target import Hardware
from ...transform import ConstantSplit, layout_free_params, split_constant_stages
from .cluster import ray_error_line, short_error, take_niceness, work_nodes
from .results import BuildResult, Prepack

if TYPE_CHECKING:
    from .pool import RunnerPool


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


class RayBuilder:
    """The :class:`~.interfaces.Builder` of Ray tasks: every candidate built in its own task (one
    CPU each, at most one per cluster CPU in flight, on the nodes :func:`work_nodes` names);
    a task still running ``timeout_s`` after it was submitted is cancelled. ``task``: the Ray
    remote function to build with (called as ``task(func, target, niceness)``, returning a
    :class:`BuildResult`; default :func:`remote_build`'s)."""

    def __init__(self, task: Any = None) -> None:
        self.task = task

    def build(
        self, funcs: Sequence[PrimFunc], target: Hardware, timeout_s: float, pool: RunnerPool
    ) -> list[BuildResult]:
        import ray

        nodes, placement = work_nodes(ray.nodes())
        slots = max(1, int(sum(n["Resources"]["CPU"] for n in nodes)))
        task = (self.task if self.task is not None else remote_build()).options(**placement)
        results: list[BuildResult | None] = [None] * len(funcs)
        queue = deque(range(len(funcs)))
        running: dict[Any, tuple[int, float]] = {}  # ref -> (index, deadline)
        while queue or running:
            if pool.stopping:
                for ref in running:
                    ray.cancel(ref, force=True)
                pool.check_stopping("building candidates")
            while queue and len(running) < slots:
                i = queue.popleft()
                ref = task.remote(funcs[i], target, pool.niceness)
                running[ref] = (i, time.monotonic() + timeout_s)
            wait_s = max(0.0, min(d for _, d in running.values()) - time.monotonic())
            ray.wait(list(running), num_returns=1, timeout=min(wait_s, pool.REFRESH_S))
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0, fetch_local=False)
            for ref in ready:
                i, _ = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # the build worker died (e.g. a crash inside LLVM)
                    results[i] = BuildResult("build: " + short_error(ray_error_line(e)), 0.0)
            now = time.monotonic()
            for ref, (i, deadline) in list(running.items()):
                if now >= deadline:
                    ray.cancel(ref, force=True)
                    del running[ref]
                    results[i] = BuildResult(f"build timed out after {timeout_s:g} s", timeout_s)
        return [r for r in results if r is not None]


@cache
def remote_build() -> Any:
    import ray

    # a build lost with its node (a system failure) runs again elsewhere; a build error is a result
    return ray.remote(num_cpus=1, max_retries=2)(_build)
