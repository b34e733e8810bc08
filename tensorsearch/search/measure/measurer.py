"""Measuring candidates on Ray: parallel builds, one runner actor per node, isolated failures.

::

    init_ray()                                   # an embedded local cluster (or init_ray("10.0.0.1:6379"))
    wl = workloads.make("GMM", (1, 64, 64, 64), "float32")
    with Measurer(wl.func, "x86-emeraldrapids", workload=wl) as m:
        results = m.measure([sch1.func, sch2.func])
    results[0].ok, results[0].latency            # True, 2.1e-05 (the fastest repeat, seconds per call)
    results[1].error                             # e.g. "wrong result: Not equal to tolerance ...; ..."

How a batch is measured (:meth:`Measurer.measure`):

1. **Build.** Every candidate is lowered, compiled and linked in its own Ray task (one CPU each,
   at most as many in flight as the cluster has CPUs, spread over the cluster by Ray). A task
   returns the shared library's bytes and its JSON sidecar, so nodes need no shared file system.
   A task still running ``build_timeout_s`` after it was submitted is cancelled (its worker
   killed). All builds of the batch finish before any timing starts.
2. **Run.** Each alive node with CPUs gets one runner actor (:class:`RunnerPool`), pinned there
   (hard node affinity), shared by every task of a run. It holds no Ray CPU (so builds can
   still be scheduled) but owns the node's CPUs for timing by protocol: the driver sends one
   candidate at a time to each runner and waits for it, and no build of its batch runs while
   timing, so timings never overlap on a node (each result keeps its node and the wall-clock start and end
   of its check and timing). Runners of different nodes measure different candidates in
   parallel. A runner reports its node's triple, CPU (:class:`~tensorsearch.target.CpuIdentity`)
   and CPU features when it starts; a node that cannot run the descriptor's code is not used
   (one warning); nor is one whose ``tensorsearch.hardware`` label names other descriptors; nor,
   unless the pool is made with ``allow_other_cpu``, one whose CPU is not the descriptor's
   (``Hardware.why_not_machine``: timings belong to the machine that took them; allowed, such a
   node times with one warning). Every result carries the CPU of the node that timed it
   (``MeasureResult.measured_on``), which the tuner keeps in its record. Several Measurers may share a pool
   from several threads (the model scheduler's concurrent tasks): each takes idle runners only,
   so a node still times one candidate at a time. A node labelled ``tensorsearch.role=timing``
   is set apart for timing: builds (and the search's actors) go to the other nodes, so nothing
   else runs where a candidate is timed even while other tasks build and search (the label is
   ignored when every node has it). A node labelled
   ``tensorsearch.emulates=aarch64`` runs aarch64 candidates (cross-compiled objects) under
   qemu when no node runs them natively: checked, with their timings flagged ``emulated``
   (ranking nothing). The pool looks at the cluster
   again at every batch and every 5 s while one is timed: a node that joined gets a runner; a
   runner that died with its node has its candidate timed on another node (an infrastructure
   event, never the candidate's failure; a candidate whose runner dies while its node stays up
   crashed it). A build lost with its node runs again elsewhere (Ray retries system failures).
   Runners start with ``TENSORSEARCH_NUM_THREADS`` = the node's CPUs, the thread pool's default
   (Ray sets ``OMP_NUM_THREADS`` to 1 for an actor without CPUs, which would make parallel loops
   serial; docs/codegen.md).
   The build tasks, the runners and the search's actors run at the driver's niceness: a local
   cluster is started with Ray's ``worker_niceness`` at 0 (Ray adds it to the niceness its
   processes inherit from the driver; its default, 15, left them ~2% of a core beside a busy
   neighbour), and on a cluster joined each sets its own niceness to the driver's when it
   starts, which lowering it takes root or CAP_SYS_NICE for: a runner that may not says so
   (one warning per node, and an event: its timings run at lowered priority).
   For a GPU descriptor every GPU of the cluster gets a runner instead (``num_gpus=1``: Ray
   gives it its own device), and the candidates are CUDA modules (a cubin and its launch),
   checked and timed the same way (with CUDA events).
3. **Check.** The runner writes the library to a local temporary directory, loads it and runs it
   once on fixed random inputs (``workload.make_inputs(seed)``) with outputs freshly filled with
   random garbage (so a kernel that skips part of its output is caught), and compares with
   reference outputs computed once per Measurer (``workload.reference`` when a workload is
   given, else the unscheduled function compiled as is), by ``workload.check`` or the same
   tolerance rule. A mismatch is the error ``"wrong result: ..."``. A candidate is checked on its
   first measurement by this Measurer (by structural hash) and only run on later ones.
4. **Time.** ``mod.time(number, repeat)``; when ``number`` is None it grows until one repeat
   takes at least ``min_repeat_ms`` (20 ms). The latencies are seconds per call, one per repeat;
   the candidate's latency is the fastest (noise only adds time; :mod:`.noise`). On a CPU the
   runner times a reference kernel just before and after, and the result carries its slowdown
   over the quietest it has run on this machine (``disturbance``); a candidate timed with the
   reference over ``noise.DISTURBED`` times slower is timed once more, keeping both timings'
   samples and the lesser disturbance, unless even its quiet estimate (fastest repeat over
   disturbance) is over half of ``slow_after`` (the tuner's: twice its best so far), too slow
   to become the best.
   A model's kernel (its weights marked ``layout_free_buffers``, :func:`~tensorsearch.transform.
   mark_layout_free`) is timed as the model runs it: the build cuts the candidate's stages that
   read only weights into a prepack, which the runner runs once before the check, untimed, and
   every call reads the weights (packed or not) cold, from the next of enough copies to fill the
   last-level cache twice (``Module.time(cold=...)``; docs/models.md).
   ``measure(..., slow_after=s)``: a candidate whose check run took longer than ``s`` seconds
   is not timed again; its one latency is that run's (the tuner passes 4x its best so far: such
   a candidate cannot become the best, and timing a 5 s convolution four more times took most of
   a C3D run's wall time).

Failures are results, never exceptions: a build error is ``"build: <error>"``; a candidate that
kills its runner (segfault, illegal instruction, abort) is ``"run: crashed (...)"``; one whose
first run lasts more than ``timeout_s`` (or whose timing lasts ``timeout_s`` plus three times the
expected time) is ``"run: timed out after X s"``. In both cases the runner is replaced by a
fresh one on the same node and the batch goes on with the next candidate.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ...ir.dtype import numpy_dtype, parse_dtype
from ...ir.functor import post_order_visit
from ...ir.stmt import Block, IterType, PrimFunc
from ...target import CpuIdentity, Hardware, load
from ...transform import ConstantSplit, layout_free_params, split_constant_stages
from ...workloads import Workload
from .noise import DISTURBED, ReferenceClock, latency_of

__all__ = ["MeasureResult", "MeasureStopped", "Measurer", "init_ray"]

_MAX_ERROR_CHARS = 1000
_RUNNER_START_TIMEOUT_S = 120.0
HARDWARE_LABEL = "tensorsearch.hardware"  # a node label: the descriptors timed there, comma-separated
EMULATES_LABEL = "tensorsearch.emulates"  # a node label: architectures it runs under qemu ("aarch64")
ROLE_LABEL = "tensorsearch.role"  # a node label: "timing" sets the node apart for timing (no builds, no search)
EMULATION_SLOWDOWN = 50  # an emulated candidate's check may take this many times the native timeout
FLUSHED_REPEATS = 10  # with flush_cache each repeat is one call: at least this many of them
SHARED_POLL_S = 0.5  # a batch waiting for a runner held by others' batches looks again at least this often


class MeasureStopped(RuntimeError):
    """The run stopped (:meth:`RunnerPool.stop`) while a batch was built or timed; the results
    given to ``on_result`` so far stand."""


@dataclass(frozen=True)
class MeasureResult:
    """The outcome of measuring one candidate: latencies (seconds per call, one per repeat), or an error."""

    latencies: tuple[float, ...]
    error: str | None
    build_seconds: float
    node: str | None = None  # the Ray node id of the runner that ran it (None: never run)
    run_start: float | None = None  # wall-clock seconds on that node: its check run began ...
    run_end: float | None = None  # ... and its timing ended
    emulated: bool = False  # run under qemu: checked, but its latency (qemu's wall time) ranks nothing
    measured_on: CpuIdentity | None = None  # the CPU of the node that timed it (None: a GPU's, emulated or never run)
    disturbance: float | None = None  # the reference kernel's slowdown beside it (.noise; None: not taken)

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.latencies) > 0

    @property
    def latency(self) -> float:
        """The fastest latency in seconds (:func:`~.noise.latency_of`); ``math.inf`` when it failed."""
        return latency_of(self.latencies) if self.ok else math.inf


def ray_started() -> bool:
    """Whether this process is connected to Ray already."""
    import ray

    return ray.is_initialized()


def resolve_address(address: str | None) -> str | None:
    """The Ray cluster a run joins: ``address``; when None, the ``RAY_ADDRESS`` environment
    variable (as ``ray job submit`` sets it); None (a new private local cluster) when neither is
    set or ``address`` is "local"."""
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    return None if address in (None, "local") else address


def init_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Connect to Ray once per process: the cluster :func:`resolve_address` names, else a new
    embedded local cluster (without dashboard, quiet logging). Later calls do nothing.

    ``num_cpus`` limits the local cluster's CPUs (all of the machine's by default). A SIGTERM
    handler the caller installed stays in place (Ray installs one of its own when it starts).
    """
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    if ray.is_initialized():
        return
    in_main = threading.current_thread() is threading.main_thread()
    caller_handler = signal.getsignal(signal.SIGTERM) if in_main else None
    _start_ray(resolve_address(address), num_cpus)
    if callable(caller_handler):
        signal.signal(signal.SIGTERM, caller_handler)


def _start_ray(address: str | None, num_cpus: int | None) -> None:
    import ray

    if address is None:
        ray.init(
            address="local",  # a new private cluster ("local" given, or no RAY_ADDRESS)
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=False,
            num_cpus=num_cpus,
            # Ray starts its workers this much nicer than its own processes, which inherit the
            # driver's niceness: 0 runs builds, search and timing at the command's priority
            # (Ray's default, 15, left them ~2% of a core beside a busy neighbour)
            _system_config={"worker_niceness": 0},
        )
    else:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)


def _short(e: BaseException | str) -> str:
    text = e if isinstance(e, str) else f"{type(e).__name__}: {e}"
    text = text.strip()
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."


def take_niceness(niceness: int | None) -> str | None:
    """Set every thread of this process (a Ray worker's) to ``niceness``, the driver's: None when
    it is at that niceness now (or ``niceness`` is None), else why it could not be (lowering a
    niceness takes root or CAP_SYS_NICE)."""
    if niceness is None:
        return None
    now = os.getpriority(os.PRIO_PROCESS, 0)
    if now == niceness:
        return None
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]  # Linux keeps a niceness per thread
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except ProcessLookupError:  # the thread ended meanwhile
            continue
        except OSError as e:
            return (
                f"its Ray workers run at niceness {now} and may not change it to the driver's {niceness} "
                f"({e.strerror or e}: lowering it takes root or CAP_SYS_NICE)"
            )
    return None


# ------------------------------------------------------------------------------------------
# builds (Ray tasks)


def _build(func: PrimFunc, target: Hardware, niceness: int | None = None) -> dict[str, Any]:
    """Lower, compile and link ``func``; return the library's bytes and sidecar, or the error.

    Code for another architecture than this node's (an aarch64 descriptor's, built on an x86
    node) is cross-compiled and shipped as an object file (``"object": True``): the runner that
    times it links it, natively or for qemu. ``niceness``: the driver's, which the worker takes
    where it may (:func:`take_niceness`)."""
    from ...target import arch_of, host_triple

    take_niceness(niceness)
    t0 = time.perf_counter()
    foreign = target.kind == "cpu" and arch_of(target.triple) != arch_of(host_triple())
    constants = layout_free_params(func) if target.kind == "cpu" else ()
    split = split_constant_stages(func, constants) if constants and not foreign else None
    try:
        binary, sidecar = _library(split.main if split else func, target, foreign)
        prepack = None
        if split is not None:
            pre_binary, pre_sidecar = _library(split.prepack, target, foreign)
            prepack = {
                "binary": pre_binary,
                "sidecar": pre_sidecar,
                "inputs": split.prepack_inputs,
                "params": split.main_params,
            }
    except Exception as e:
        return {"error": "build: " + _short(e), "seconds": time.perf_counter() - t0}
    import ray

    node = ray.get_runtime_context().get_node_id()  # a Ray task's: builds run nowhere else
    built = {"error": None, "binary": binary, "object": foreign, "sidecar": sidecar, "node": node}
    return {**built, "prepack": prepack, "cold": _cold_positions(split, constants), "seconds": time.perf_counter() - t0}


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


def work_nodes(nodes: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The alive nodes with CPUs that builds and search actors may use, and the Ray options that
    keep a task there: every such node but those labelled ``tensorsearch.role=timing`` (all of
    them, and no options, when every node is so labelled)."""
    alive = [n for n in nodes if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    free = [n for n in alive if (n.get("Labels") or {}).get(ROLE_LABEL) != "timing"]
    if not free or len(free) == len(alive):
        return alive, {}
    return free, {"label_selector": {ROLE_LABEL: "!timing"}}


@cache
def _remote_build() -> Any:
    import ray

    # a build lost with its node (a system failure) runs again elsewhere; a build error is a result
    return ray.remote(num_cpus=1, max_retries=2)(_build)


# ------------------------------------------------------------------------------------------
# the runner (a Ray actor, one per node)


def _garbage(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """A fresh array of random values (never what a correct kernel writes, almost surely)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return (rng.standard_normal(size=shape) * 1e3).astype(dtype)


class _Runner:
    """Loads candidates on its node, checks them once and times them; one call at a time. One
    runner serves every task of a run: each call brings its task's inputs and reference."""

    def __init__(self, token: str, seed: int, niceness: int | None = None) -> None:
        from ...runtime import module  # noqa: F401 - imported now, not during the first (timed-out) run

        self.priority = take_niceness(niceness)  # why it times at another niceness than the driver's, or None
        self.inputs: list[np.ndarray] = []
        self.out_positions: list[int] = []
        self.expected: list[np.ndarray] = []
        self.checker: Any = None
        self.rng = np.random.default_rng(seed + 1)
        self.dir = os.path.join(tempfile.gettempdir(), token)  # the libraries and the fault handler's file
        os.makedirs(self.dir, exist_ok=True)
        self.count = 0
        self.mod: Any = None
        self.cold: tuple[int, ...] = ()  # parameters of the loaded candidate timed out of cache
        self.args: list[np.ndarray] = []
        self.started = 0.0  # wall-clock time the current candidate's check run began
        self.clock: ReferenceClock | bool | None = None  # the reference kernel; False: it cannot be built here
        self._crash_file = open(os.path.join(self.dir, "crash.txt"), "w")  # held open while the process lives
        faulthandler.enable(file=self._crash_file, all_threads=False)

    def _arguments(self) -> list[np.ndarray]:
        from ...runtime import aligned_copy

        args: list[Any] = []
        inputs = iter(self.inputs)
        outs = dict(zip(self.out_positions, self.expected, strict=True))
        for k in range(len(self.inputs) + len(self.expected)):
            want = outs.get(k)
            arg = next(inputs) if want is None else _garbage(want.shape, want.dtype, self.rng)
            args.append(aligned_copy(arg))  # as TVM's NDArrays: numpy's are 16 bytes off a cache line
        return args

    def load_and_check(
        self,
        binary: bytes,
        is_object: bool,
        sidecar: str,
        check: bool,
        inputs: list[np.ndarray],
        out_positions: list[int],
        expected: list[np.ndarray],
        checker: Any,
        timeout_s: float = 600.0,
        prepack: dict[str, Any] | None = None,
        cold: Sequence[int] = (),
    ) -> dict[str, Any]:
        """Load the library and run it once on the task's inputs; compare the outputs when ``check``.

        An object file (built on a node of another architecture) is linked here first; one for
        an architecture this node only emulates is run under qemu (:meth:`_emulate`). With a
        ``prepack`` (the build's, :func:`_build`), the weights are packed first, untimed, and
        the library called on the packed ones; ``cold``: the parameters :meth:`time` keeps out of
        cache."""
        import json

        from ...runtime.module import link_shared, load_module
        from ...target import arch_of, host_triple

        self.inputs, self.out_positions, self.expected, self.checker = inputs, out_positions, expected, checker
        self.started = time.time()
        self.mod, self.cold = None, tuple(cold)
        self.count += 1
        meta = json.loads(sidecar)
        if is_object and arch_of(meta["triple"]) != arch_of(host_triple()):
            return self._emulate(binary, meta["symbol"], check, timeout_s)
        path = os.path.join(self.dir, f"candidate{self.count}.so")  # a fresh name: dlopen caches by path
        try:
            if is_object:
                link_shared(binary, path, bool(meta.get("parallel")))
            else:
                with open(path, "wb") as f:
                    f.write(binary)
            with open(path + ".json", "w") as f:
                f.write(sidecar)
            mod = load_module(path)
            args = self._arguments()
            call_args = args if prepack is None else self._prepacked(args, prepack)
            t0 = time.perf_counter()
            mod(*call_args)
            first = time.perf_counter() - t0
        except Exception as e:
            return self._reply(error="run: " + _short(e), first=0.0)
        finally:
            for p in (path, path + ".json"):
                with contextlib.suppress(OSError):
                    os.remove(p)
        wrong = self._wrong([args[k] for k in self.out_positions]) if check else None
        if wrong is not None:
            return self._reply(error=wrong, first=first)
        self.mod, self.args = mod, call_args
        return self._reply(error=None, first=first)

    def _prepacked(self, args: list[np.ndarray], prepack: dict[str, Any]) -> list[np.ndarray]:
        """The main function's arguments: ``args`` (the task's, in its parameter order) with the
        weights the prepack library packs (run here once) in place of the ones it reads."""
        from ...runtime import aligned_zeros
        from ...runtime.module import load_module

        path = os.path.join(self.dir, f"candidate{self.count}_prepack.so")
        try:
            with open(path, "wb") as f:
                f.write(prepack["binary"])
            with open(path + ".json", "w") as f:
                f.write(prepack["sidecar"])
            pre = load_module(path)
        finally:
            for p in (path, path + ".json"):
                with contextlib.suppress(OSError):
                    os.remove(p)
        inputs = [args[i] for i in prepack["inputs"]]
        packed = [
            aligned_zeros(p.shape, np.dtype(numpy_dtype(parse_dtype(p.dtype)))) for p in pre.params[len(inputs) :]
        ]
        pre(*inputs, *packed)
        return [args[p] if isinstance(p, int) else packed[p[1]] for p in prepack["params"]]

    def _emulate(self, binary: bytes, symbol: str, check: bool, timeout_s: float) -> dict[str, Any]:
        """Run an aarch64 object once under qemu-aarch64 (linked into a static harness) and check
        it: correctness only; its one latency, the harness's wall time, is flagged emulated."""
        from ...runtime.cross import CrossRunError, run_aarch64

        args = self._arguments()
        t0 = time.perf_counter()
        try:
            after = run_aarch64(binary, symbol, args, timeout=timeout_s)
        except (CrossRunError, OSError, ValueError) as e:
            return self._reply(error="run: " + _short(str(e)), first=0.0, emulated=True)
        first = time.perf_counter() - t0
        wrong = self._wrong([after[k] for k in self.out_positions]) if check else None
        return self._reply(error=wrong, first=first, latencies=[] if wrong else [first], emulated=True)

    def _wrong(self, outputs: list[np.ndarray]) -> str | None:
        """``"wrong result: ..."`` when the outputs differ from the reference's, else None."""
        try:
            self.checker(outputs, self.expected)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return "wrong result: " + _short("; ".join(lines[:3]) or "outputs differ")
        return None

    def time(
        self,
        number: int,
        repeat: int,
        min_repeat_ms: float,
        flush_cache: bool = False,
        retake_below: float | None = None,
    ) -> dict[str, Any]:
        """Time the loaded candidate: seconds per call of each repeat (each after a cache flush
        when ``flush_cache``), with the reference kernel timed just before and after it on a CPU
        (``disturbance``, :mod:`.noise`; None on a GPU). A timing disturbed over
        ``noise.DISTURBED`` is taken once more, unless its fastest repeat over its disturbance is
        at least ``retake_below`` seconds (too slow to matter even on a quiet host): the reply
        has the samples of both and the lesser disturbance."""
        cold = {"cold": self.cold} if self.cold and not flush_cache else {}

        def once() -> list[float]:
            r = self.mod.time(
                *self.args, number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, flush_cache=flush_cache, **cold
            )
            return list(r.results)

        try:
            clock = self._clock()
            if clock is None:
                return self._reply(error=None, latencies=once(), disturbance=None)
            before = clock.seconds()
            latencies = once()
            disturbance = clock.disturbance(before, clock.seconds())
            quiet_estimate = min(latencies) / disturbance
            if disturbance > DISTURBED and (retake_below is None or quiet_estimate < retake_below):
                before = clock.seconds()
                latencies += once()
                disturbance = min(disturbance, clock.disturbance(before, clock.seconds()))
        except Exception as e:
            return self._reply(error="run: " + _short(e), latencies=[])
        finally:
            self.mod, self.args = None, []
        return self._reply(error=None, latencies=latencies, disturbance=disturbance)

    def _clock(self) -> ReferenceClock | None:
        """The reference kernel (built on first use), for a candidate compiled for this CPU; None
        for a GPU's, or where the reference cannot be built (then timings carry no disturbance)."""
        from ...runtime import LoadedModule, default_threads
        from ...target.hardware import host_identity

        if not isinstance(self.mod, LoadedModule):
            return None
        if self.clock is None:
            try:
                self.clock = ReferenceClock(host_identity().cpu, default_threads())
            except Exception:
                self.clock = False
        return self.clock or None

    def _reply(self, **fields: Any) -> dict[str, Any]:
        """A call's reply, with the wall-clock window of the candidate's check and timing so far."""
        return {**fields, "start": self.started, "end": time.time()}

    def crash_report(self, token: str) -> str | None:
        """What Python's fault handler wrote when the runner ``token`` died on this node; removes its files."""
        old = os.path.join(tempfile.gettempdir(), token)
        try:
            with open(os.path.join(old, "crash.txt")) as f:
                text = f.read()
        except OSError:
            text = ""
        shutil.rmtree(old, ignore_errors=True)
        for line in text.splitlines():
            if line.startswith("Fatal Python error:"):
                return line.removeprefix("Fatal Python error:").strip()
        return None

    def ready(self) -> dict[str, Any]:
        """What this node can run, for the pool to check against the descriptor before the runner
        times anything: its LLVM triple, its CPU (``identity``, :meth:`CpuIdentity.to_json`), the
        CPU features LLVM reports present and absent, the descriptors its ``tensorsearch.hardware``
        label allows (empty: any), and the architectures its ``tensorsearch.emulates`` label says
        it runs under qemu, with why it cannot (tools missing); and the runner's ``niceness``, with
        why it is not the driver's (``priority``, None when it is)."""
        import ray

        from ...runtime.cross import aarch64_tools_available
        from ...target.hardware import host_absent_features, host_identity, host_present_features, host_triple

        labels = ray.get_runtime_context().get_node_labels()
        emulates = _label_list(labels, EMULATES_LABEL)
        return {
            "triple": host_triple(),
            "identity": host_identity().to_json(),
            "present": sorted(host_present_features()),
            "absent": sorted(host_absent_features()),
            "niceness": os.getpriority(os.PRIO_PROCESS, 0),
            "priority": self.priority,
            "hardware": _label_list(labels, HARDWARE_LABEL),
            "emulates": emulates,
            "emulation_missing": {
                a: aarch64_tools_available() if a == "aarch64" else "only aarch64 is emulated" for a in emulates
            },
        }

    def close(self) -> None:
        faulthandler.disable()
        self._crash_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _label_list(labels: dict[str, str], key: str) -> list[str]:
    """A node label's comma-separated values."""
    return [v.strip() for v in labels.get(key, "").split(",") if v.strip()]


def other_cpu(hw: Hardware, node: dict[str, Any]) -> str | None:
    """Why the node's CPU, as its runner reported it (:meth:`_Runner.ready`), is not the one
    ``hw`` describes (``Hardware.why_not_machine``); None when it is, or the report has none."""
    if "identity" not in node:
        return None
    return hw.why_not_machine(CpuIdentity.from_json(node["identity"]), node.get("present"))


def timing_refusal(hw: Hardware, node: dict[str, Any], allow_other_cpu: bool = False) -> tuple[str | None, bool]:
    """(why a node may not time ``hw``'s candidates, or None; whether it runs them under qemu),
    from what its runner reported (:meth:`_Runner.ready`): its ``tensorsearch.hardware`` label
    must name ``hw`` when it has one; its triple and CPU must run the code, or its
    ``tensorsearch.emulates`` label must name the architecture (with qemu installed there); and
    a node that runs the code natively must be the machine ``hw`` describes (:func:`other_cpu`),
    unless ``allow_other_cpu``."""
    if node["hardware"] and hw.name not in node["hardware"]:
        return f"its label {HARDWARE_LABEL}={','.join(node['hardware'])} does not name {hw.name}", False
    native = hw.why_not_runnable_on(node["triple"], node["absent"])
    if native is None and not allow_other_cpu and (other := other_cpu(hw, node)) is not None:
        return f"{other} (--allow-other-cpu, or allow_other_cpu=True, times there anyway)", False
    if native is None or hw.arch not in node["emulates"]:
        return native, False
    missing = node["emulation_missing"].get(hw.arch)
    if missing:
        return f"{native}, and it cannot emulate {hw.arch} ({missing})", False
    return None, True


@cache
def _remote_runner() -> Any:
    import ray

    return ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(_Runner)


# ------------------------------------------------------------------------------------------
# reference data


def _reduction_size(func: PrimFunc) -> int:
    """The largest product of reduction-iterator extents over the blocks (at least 1)."""
    from ...ir.expr import IntImm

    best = [1]

    def visit(n: Any) -> None:
        if isinstance(n, Block):
            size = 1
            for iv in n.iter_vars:
                if iv.iter_type == IterType.REDUCE and isinstance(iv.dom.extent, IntImm):
                    size *= iv.dom.extent.value
            best[0] = max(best[0], size)

    post_order_visit(func.body, visit)
    return best[0]


def _random_input(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """Like Workload.make_inputs: floats in [-1, 1), int8/uint8 over their range, other ints small."""
    if dtype == np.uint8:
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    if dtype == np.int8:
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-8 if np.issubdtype(dtype, np.signedinteger) else 0, 9, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


ROUNDING_FLIPS = 1e-3  # integer outputs of float arithmetic: the share of elements that may be 1 off


class _ToleranceCheck:
    """Workload.check's rule for a bare function: exact for integers, else rtol = atol = base * widen,
    atol scaled by the largest expected magnitude (base 1e-5, or 1e-2 for 16-bit floats). With
    ``float_math`` (the function computes in floating point), an integer output may differ by 1
    in at most ``ROUNDING_FLIPS`` of its elements: a value rounded to an integer (a quantize
    after a float layer norm) lands on the other side of a .5 when a candidate sums in another
    order (one element in 98304 of int8 BERT's layer norm, in every candidate)."""

    def __init__(self, names: list[str], widen: float, float_math: bool = False) -> None:
        self.names = names
        self.widen = widen
        self.float_math = float_math

    def __call__(self, actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
        for got, want, name in zip(actual, expected, self.names, strict=True):
            if got.shape != want.shape:
                raise AssertionError(f"output {name} has shape {got.shape}, expected {want.shape}")
            if not np.issubdtype(want.dtype, np.inexact):
                self._integers(got, want, name)
                continue
            base = 1e-2 if want.dtype.itemsize <= 2 else 1e-5
            tol = base * self.widen
            scale = max(1.0, float(np.abs(want.astype(np.float64)).max()))
            np.testing.assert_allclose(
                got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol * scale, err_msg=f"output {name}"
            )

    def _integers(self, got: np.ndarray, want: np.ndarray, name: str) -> None:
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64)) if want.dtype != np.bool_ else got != want
        flips = int(np.count_nonzero(diff))
        if self.float_math and flips <= ROUNDING_FLIPS * want.size and (flips == 0 or diff.max() <= 1):
            return
        np.testing.assert_array_equal(got, want, err_msg=f"output {name}")


def _reference(
    func: PrimFunc, workload: Workload | None, seed: int
) -> tuple[list[np.ndarray], list[int], list[np.ndarray], Any]:
    """(inputs, output positions, expected outputs, checker) for the candidates of ``func``."""
    from ...runtime.module import build, signature

    if workload is not None:
        inputs = workload.make_inputs(seed)
        n_in, n_out = len(workload.inputs), len(workload.outputs)
        if len(func.params) != n_in + n_out:
            raise ValueError(
                f"the function takes {len(func.params)} parameters but workload {workload.key} has "
                f"{n_in} inputs and {n_out} outputs"
            )
        return inputs, list(range(n_in, n_in + n_out)), workload.reference(*inputs), workload.check

    params = signature(func)
    scalars = [p.name for p in params if p.kind != "buffer"]
    if scalars:
        raise ValueError(f"cannot measure a function with scalar parameters ({', '.join(scalars)}) without a workload")
    if any(s is None for p in params for s in p.shape):
        raise ValueError("cannot measure a function with symbolic buffer shapes without a workload")
    rng = np.random.default_rng(seed)
    out_positions = [k for k, p in enumerate(params) if p.written]
    if not out_positions:
        raise ValueError("the function writes none of its parameters, so there is nothing to measure")
    args = []
    for p in params:
        dt = numpy_dtype(parse_dtype(p.dtype))
        shape = tuple(int(s) for s in p.shape)
        args.append(np.zeros(shape, dt) if p.written else _random_input(shape, dt, rng))
    build(func, None)(*args)  # the unscheduled function, compiled as is for the host
    inputs = [a for k, a in enumerate(args) if k not in out_positions]
    expected = [args[k] for k in out_positions]
    widen = max(1.0, math.sqrt(_reduction_size(func)) / 8)
    names = [params[k].name for k in out_positions]
    return inputs, out_positions, expected, _ToleranceCheck(names, widen, _computes_in_float(func))


def _computes_in_float(func: PrimFunc) -> bool:
    """Whether any buffer of ``func`` (a parameter or one a block allocates) holds floats."""
    buffers = list(func.buffers)
    post_order_visit(func.body, lambda n: buffers.extend(n.alloc_buffers) if isinstance(n, Block) else None)
    return any(b.dtype.is_float for b in buffers)


# ------------------------------------------------------------------------------------------
# the driver


@dataclass
class _Slot:
    """One node's runner and what it is doing: (candidate index, phase, object ref, deadline)."""

    node_id: str
    cpus: int
    actor: Any
    token: str  # names the runner's temporary directory on its node
    gpu: bool = False  # the runner holds one of the node's GPUs (num_gpus=1) and runs CUDA modules
    emulated: bool = False  # the node runs the descriptor's code under qemu only (correctness, no timing)
    ready: bool = False
    dead: bool = False
    identity: CpuIdentity | None = None  # the node's CPU, as its runner reported it (CPU descriptors)
    job: tuple[int, str, Any, float, float] | None = None  # (index, "check" | "time", ref, deadline, budget s)
    owner: Any = None  # the batch whose candidate the runner has now (Measurer._run), with job


class RunnerPool:
    """The runners of the cluster: one actor per alive node with CPUs (per GPU for a GPU
    descriptor), pinned there, shared by every :class:`Measurer` of a run (the model
    scheduler's tasks all time through the same runners, so timings never overlap on a node).

    :meth:`refresh` (at the start of every batch, and every ``REFRESH_S`` seconds while one is
    timed) starts runners on nodes that joined and drops those of nodes that left. A runner
    reports its node's LLVM triple, CPU and CPU features when it starts; a node that cannot run
    the descriptor's code, or whose CPU is not the descriptor's unless ``allow_other_cpu``
    (:func:`timing_refusal`), is not used for timing, reported once (a warning, and an event).
    A node allowed to time on another CPU, and one whose runner may not take the driver's
    niceness (:func:`take_niceness`), are reported once too. ``events`` lists what happened to
    the nodes (dicts with ``kind``: "node_joined", "node_left", "node_refused", "node_emulates",
    "node_other_cpu", "node_low_priority", "requeued"), for the tuner to record (:meth:`take_events`).

    Measurers in several threads may share a pool: a batch gives a candidate only to a runner
    that has none (under ``lock``) and acts only on the runners it gave one to; a runner that
    ends a batch's candidate goes to a batch that waits for one first, so batches take turns.
    """

    REFRESH_S = 5.0

    def __init__(self, hardware: Hardware | str | os.PathLike, seed: int = 0, allow_other_cpu: bool = False) -> None:
        self.hardware = load(hardware)
        self.gpu = self.hardware.kind == "gpu"
        self.seed = seed
        self.allow_other_cpu = allow_other_cpu
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)  # the driver's: the runners take it
        self.noted: set[tuple[str, str]] = set()  # (kind, node id) of the warnings given once per node
        self.slots: list[_Slot] = []
        self.refused: dict[str, str] = {}  # node id -> why its CPU cannot run the descriptor's code
        self.emulating: set[str] = set()  # nodes that run the descriptor's code under qemu only
        self.events: list[dict[str, Any]] = []
        self.lock = threading.RLock()  # held while runners are handed out, started or dropped
        self.freed = threading.Condition(self.lock)  # notified when a runner ends a candidate
        self.waiting: set[Any] = set()  # batches with candidates left and no runner
        self.stopping = False  # set by stop(): the batches in flight end, no runner is restarted
        self._seen: set[str] | None = None  # nodes seen so far (None before the first refresh)
        self.refresh()
        if not self.slots:
            what = "GPUs (Ray resource GPU)" if self.gpu else "CPUs"
            why = "; ".join(f"node {n[:12]}: {r}" for n, r in self.refused.items())
            raise RuntimeError(
                f"the Ray cluster has no alive node with {what} that can run code for {self.hardware.name}"
                + (f" ({why})" if why else "")
            )

    def event(self, kind: str, node_id: str, **more: Any) -> None:
        with self.lock:
            self.events.append({"kind": kind, "node": node_id, "time": time.time(), **more})

    def take_events(self) -> list[dict[str, Any]]:
        """The events so far, which the pool then forgets."""
        with self.lock:
            events, self.events = self.events, []
        return events

    @staticmethod
    def alive_nodes() -> dict[str, dict[str, Any]]:
        import ray

        return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}

    def refresh(self) -> None:
        """Start runners on alive nodes without one; drop idle runners of nodes that left; wait
        until the new ones are up (and their CPUs checked)."""
        with self.lock:
            self._refresh()

    def _refresh(self) -> None:
        alive = self.alive_nodes()
        for slot in self.slots:
            if slot.node_id not in alive and slot.job is None and not slot.dead:
                self.drop(slot)
        first = self._seen is None
        seen = self._seen if self._seen is not None else set()
        for node_id, node in alive.items():
            if node_id in self.refused:
                continue
            resources = node.get("Resources", {})
            cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
            want = gpus if self.gpu else (1 if cpus > 0 else 0)
            have = sum(1 for s in self.slots if s.node_id == node_id and not s.dead)
            for _ in range(want - have):
                self.slots.append(self._start(node_id, max(cpus, 1), gpu=self.gpu))
            if not first and node_id not in seen and want:
                self.event("node_joined", node_id)
            seen.add(node_id)
        self._seen = seen
        for slot in self.slots:
            self.wait_ready(slot)
        self.forget_dead()

    def forget_dead(self) -> None:
        """Drop the dead runners that time nothing."""
        with self.lock:
            self.slots = [s for s in self.slots if not s.dead or s.job is not None]

    def lend(self, batch: Any, pending: deque[int], dispatch: Callable[[_Slot, int], None]) -> None:
        """Give idle runners the next of ``pending`` (``dispatch(slot, i)``) for ``batch``, but
        not a runner that just ended one of its candidates while another batch waits for one."""
        with self.lock:
            others = self.waiting - {batch}
            for slot in self.live():
                if slot.job is None and pending and not (slot.owner is batch and others):
                    slot.owner = batch
                    dispatch(slot, pending.popleft())
            if pending and not any(s.owner is batch and s.job is not None for s in self.slots):
                self.waiting.add(batch)
            else:
                self.waiting.discard(batch)

    def wait_for_runner(self, timeout: float) -> None:
        """Wait until a runner ends a candidate (at most ``timeout`` seconds)."""
        with self.freed:
            self.freed.wait(timeout)

    def stop(self) -> None:
        """Make every batch in flight (in any thread) end soon with :class:`MeasureStopped`."""
        with self.freed:
            self.stopping = True
            self.freed.notify_all()

    def check_stopping(self, what: str) -> None:
        if self.stopping:
            raise MeasureStopped(f"measure: the run stopped while {what}; the results so far are kept")

    def runner_freed(self) -> None:
        with self.freed:
            self.freed.notify_all()

    def done(self, batch: Any) -> None:
        """``batch`` wants no more runners."""
        with self.lock:
            self.waiting.discard(batch)

    def live(self) -> list[_Slot]:
        """The runners to give candidates to: those that run them natively, else the emulating
        ones (whose results only check correctness)."""
        alive = [s for s in self.slots if not s.dead]
        return [s for s in alive if not s.emulated] or alive

    def drop(self, slot: _Slot) -> None:
        """Forget a runner whose node left (killing what may remain of it)."""
        import ray

        slot.dead = True
        self.event("node_left", slot.node_id)
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)

    def _start(self, node_id: str, cpus: int, gpu: bool = False) -> _Slot:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = f"tensorsearch-runner-{uuid.uuid4().hex}"
        env = {"TENSORSEARCH_NUM_THREADS": str(cpus)}  # before Ray's OMP_NUM_THREADS=1 (runtime.default_threads)
        actor = (
            _remote_runner()
            .options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                runtime_env={"env_vars": env},
                num_gpus=1 if gpu else 0,
            )
            .remote(token, self.seed, self.niceness)
        )
        return _Slot(node_id, cpus, actor, token, gpu)

    def wait_ready(self, slot: _Slot) -> None:
        """Wait until the slot's runner has started (so its start-up never counts against a
        timeout), and refuse its node when its CPU cannot run the descriptor's code."""
        import ray

        if slot.ready or slot.dead:
            return
        try:
            info = ray.get(slot.actor.ready.remote(), timeout=_RUNNER_START_TIMEOUT_S)
        except Exception:  # the node is gone, or the runner cannot start there
            slot.dead = True
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
            return
        self._note_priority(slot, info)
        why = None if self.gpu else self._why_not(slot, info)
        if why is None:
            slot.ready = True
            return
        slot.dead = True
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)
        if slot.node_id not in self.refused:
            self.refused[slot.node_id] = why
            self.event("node_refused", slot.node_id, reason=why)
            warnings.warn(
                f"node {slot.node_id[:12]} is not used for timing {self.hardware.name} candidates: {why}", stacklevel=2
            )

    def _note(self, kind: str, node_id: str, message: str, **more: Any) -> None:
        """An event of ``kind`` and a warning, the first time for the node only."""
        if (kind, node_id) in self.noted:
            return
        self.noted.add((kind, node_id))
        self.event(kind, node_id, **more)
        warnings.warn(message, stacklevel=3)

    def _note_priority(self, slot: _Slot, info: dict[str, Any]) -> None:
        """Warn (once per node) when the runner could not take the driver's niceness."""
        why = info.get("priority")
        if why:
            message = f"node {slot.node_id[:12]}: timings there run at lowered priority: {why}"
            self._note("node_low_priority", slot.node_id, message, niceness=info.get("niceness"), reason=why)

    def _why_not(self, slot: _Slot, info: dict[str, Any]) -> str | None:
        """Why the slot's node may not time this descriptor's candidates (None: it may; the slot
        is marked emulated when it runs them under qemu only, and keeps the node's CPU when it
        times them natively)."""
        why, slot.emulated = timing_refusal(self.hardware, info, self.allow_other_cpu)
        if why is None and not slot.emulated and "identity" in info:
            slot.identity = CpuIdentity.from_json(info["identity"])
            other = other_cpu(self.hardware, info)
            if other is not None:  # allowed: its records name the CPU that timed them
                message = (
                    f"node {slot.node_id[:12]} times {self.hardware.name} candidates on another CPU ({other}): "
                    "each record names the CPU that timed it"
                )
                self._note("node_other_cpu", slot.node_id, message, reason=other)
        if slot.emulated and slot.node_id not in self.emulating:
            self.emulating.add(slot.node_id)
            self.event("node_emulates", slot.node_id, arch=self.hardware.arch)
            warnings.warn(
                f"node {slot.node_id[:12]} runs {self.hardware.name} candidates under qemu-{self.hardware.arch}, "
                "when no node runs them natively: they are checked, but emulated timings rank nothing",
                stacklevel=2,
            )
        return why

    def restart(self, slot: _Slot, kill: bool) -> str | None:
        """Replace the slot's runner by a fresh one on the same node and wait until it is up.

        Returns what the fault handler of the old one wrote (e.g. "Segmentation fault"), if anything.
        """
        with self.lock:  # no other batch may take the runner until the fresh one is up
            if self.stopping:  # the run ends: no fresh runner
                slot.dead, slot.job = True, None
                return None
            return self._restart(slot, kill)

    def _restart(self, slot: _Slot, kill: bool) -> str | None:
        import ray

        if kill:
            ray.kill(slot.actor, no_restart=True)
        fresh = self._start(slot.node_id, slot.cpus, slot.gpu)
        ref = fresh.actor.crash_report.remote(slot.token)  # also removes the old runner's files
        slot.actor, slot.token, slot.job, slot.ready = fresh.actor, fresh.token, None, False
        try:
            report = ray.get(ref, timeout=_RUNNER_START_TIMEOUT_S)
        except Exception:
            report = None
        self.wait_ready(slot)
        return report

    def close(self) -> None:
        """Stop the runners (the Ray session stays up)."""
        import ray

        for slot in self.slots:
            with contextlib.suppress(Exception):
                ray.get(slot.actor.close.remote(), timeout=10)
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        self.slots = []


class Measurer:
    """Builds and times candidates of one function on one hardware (see the module docstring).

    ``func`` is the unscheduled function (the reference when ``workload`` is None; may be None
    when ``workload`` is given). ``hardware`` is a Hardware or descriptor name; candidates are
    compiled for it (with ``a * b + c`` contracted into FMA when ``fp_contract``) and run on the
    cluster's nodes that can run it. ``number`` (None: grow until a repeat takes
    ``min_repeat_ms``) and ``repeat`` are passed to ``mod.time``; ``check=False`` skips the
    comparison with the reference. ``reference``: another Measurer's ``reference`` of the same
    function and seed (its inputs, expected outputs and checker), not computed again. ``pool``:
    the runners to time on, shared with other Measurers of the same hardware (by default the
    Measurer starts its own and stops them on :meth:`close`). One pool at a time should use a
    cluster. ``flush_cache``: every timed call runs after the caches are flushed (a buffer larger
    than the last-level cache written), one call a repeat, at least ``FLUSHED_REPEATS`` repeats:
    a kernel's latency as a model sees it, its weights no longer cached by its previous call
    (TVM's ``enable_cpu_cache_flush``). ``allow_other_cpu``: the pool the Measurer starts times
    on nodes whose CPU is not the descriptor's too (:func:`timing_refusal`; a pool given keeps
    its own setting).
    """

    # the builds of the KEPT_BUILDS fastest candidates measured are kept: re-timing them builds nothing
    KEPT_BUILDS = 16

    def __init__(
        self,
        func: PrimFunc | None,
        hardware: Hardware | str | os.PathLike,
        *,
        workload: Workload | None = None,
        address: str | None = None,
        timeout_s: float = 10.0,
        build_timeout_s: float = 120.0,
        fp_contract: bool = True,
        number: int | None = None,
        repeat: int = 3,
        check: bool = True,
        seed: int = 0,
        min_repeat_ms: float = 20.0,
        reference: tuple[Any, ...] | None = None,
        pool: RunnerPool | None = None,
        flush_cache: bool = False,
        allow_other_cpu: bool = False,
    ) -> None:
        if func is None:
            if workload is None:
                raise ValueError("Measurer needs a function or a workload")
            func = workload.func
        if (number is not None and number < 1) or repeat < 1:
            raise ValueError(f"number and repeat must be at least 1, got number={number}, repeat={repeat}")
        self.func = func
        self.hardware = load(hardware)
        if pool is not None and pool.hardware.name != self.hardware.name:
            raise ValueError(f"the runner pool times {pool.hardware.name} candidates, not {self.hardware.name}")
        self.target = self.hardware
        if fp_contract:
            self.target = self.target.with_fp_contract()
        self.workload = workload
        self.timeout_s = float(timeout_s)
        self.build_timeout_s = float(build_timeout_s)
        self.number = number
        self.repeat = int(repeat)
        self.check = check
        self.min_repeat_ms = float(min_repeat_ms)
        self.flush_cache = flush_cache
        self._checked: set[str] = set()  # candidate keys checked against the reference
        init_ray(address)
        import ray

        self.reference = reference if reference is not None else _reference(func, workload, seed)
        inputs, out_positions, expected, checker = self.reference
        self._task_args = (ray.put(inputs), out_positions, ray.put(expected), checker)
        self._own_pool = pool is None
        self.pool = pool if pool is not None else RunnerPool(self.hardware, seed, allow_other_cpu)
        self._kept: dict[str, tuple[float, dict[str, Any]]] = {}  # candidate key -> (latency, build)

    @property
    def _slots(self) -> list[_Slot]:
        return self.pool.slots

    # measuring ---------------------------------------------------------------------------
    def _build_all(self, funcs: Sequence[PrimFunc]) -> list[dict[str, Any]]:
        """Build every candidate in Ray tasks, at most one per cluster CPU in flight."""
        import ray

        nodes, placement = work_nodes(ray.nodes())
        slots = max(1, int(sum(n["Resources"]["CPU"] for n in nodes)))
        task = _remote_build().options(**placement)
        results: list[dict[str, Any] | None] = [None] * len(funcs)
        queue = deque(range(len(funcs)))
        running: dict[Any, tuple[int, float]] = {}  # ref -> (index, deadline)
        while queue or running:
            if self.pool.stopping:
                for ref in running:
                    ray.cancel(ref, force=True)
                self.pool.check_stopping("building candidates")
            while queue and len(running) < slots:
                i = queue.popleft()
                ref = task.remote(funcs[i], self.target, self.pool.niceness)
                running[ref] = (i, time.monotonic() + self.build_timeout_s)
            wait_s = max(0.0, min(d for _, d in running.values()) - time.monotonic())
            ray.wait(list(running), num_returns=1, timeout=min(wait_s, RunnerPool.REFRESH_S))
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0, fetch_local=False)
            for ref in ready:
                i, _ = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # the build worker died (e.g. a crash inside LLVM)
                    results[i] = {"error": "build: " + _short(_ray_error_line(e)), "seconds": 0.0}
            now = time.monotonic()
            for ref, (i, deadline) in list(running.items()):
                if now >= deadline:
                    ray.cancel(ref, force=True)
                    del running[ref]
                    limit = f"{self.build_timeout_s:g}"
                    results[i] = {"error": f"build timed out after {limit} s", "seconds": self.build_timeout_s}
        return [r for r in results if r is not None]

    def measure(
        self,
        funcs: Sequence[PrimFunc],
        on_result: Callable[[int, MeasureResult], None] | None = None,
        slow_after: float | None = None,
    ) -> list[MeasureResult]:
        """Build, check and time each function; results in the same order. Never raises for a bad candidate.

        ``on_result(i, result)`` is called as soon as candidate ``i``'s result is known (the tuner
        commits it to the database there, so an interrupted batch keeps what it measured).
        ``slow_after``: seconds; a candidate whose first run took longer keeps that one latency."""

        from ..space.design import candidate_key

        funcs = list(funcs)
        builds, keys = self._build_all(funcs), [candidate_key(f) for f in funcs]
        results = self._run(builds, keys, on_result, slow_after)
        self._keep_fastest(keys, builds, results)
        return results

    def _keep_fastest(self, keys: list[str], builds: list[dict[str, Any]], results: list[MeasureResult]) -> None:
        """Keep the builds of the ``KEPT_BUILDS`` fastest candidates measured so far."""
        for key, build, result in zip(keys, builds, results, strict=True):
            if result.ok and not result.emulated:
                self._kept[key] = (result.latency, build)
        self._kept = dict(sorted(self._kept.items(), key=lambda kv: kv[1][0])[: self.KEPT_BUILDS])

    def retime(self, funcs: Sequence[PrimFunc], rounds: int = 3) -> list[list[list[float]]]:
        """Each function built once (or not at all, when it is among the fastest this Measurer
        measured), then timed in ``rounds`` rounds, every round running each in turn (every other
        round in reverse order): per function, the latencies of each round (empty lists when it
        failed). Interleaving puts the candidates under the same noise; the tuner re-times its
        finalists this way."""
        from ..space.design import candidate_key

        funcs = list(funcs)
        keys = [candidate_key(f) for f in funcs]
        missing = [i for i, k in enumerate(keys) if k not in self._kept]
        fresh = dict(zip(missing, self._build_all([funcs[i] for i in missing]), strict=True))
        builds = [fresh[i] if i in fresh else self._kept[k][1] for i, k in enumerate(keys)]
        samples: list[list[list[float]]] = [[] for _ in funcs]
        for r in range(rounds):
            order = list(range(len(funcs)))[:: -1 if r % 2 else 1]
            results = self._run([builds[i] for i in order], [keys[i] for i in order])
            for i, res in zip(order, results, strict=True):
                samples[i].append(list(res.latencies) if res.ok else [])
        return samples

    def _run(
        self,
        builds: list[dict[str, Any]],
        keys: list[str],
        on_result: Callable[[int, MeasureResult], None] | None = None,
        slow_after: float | None = None,
    ) -> list[MeasureResult]:
        """Check and time built candidates (``_build_all``'s results) on the pool's runners.

        A candidate whose runner died with its node goes back to the queue (an event, not a
        result); RuntimeError when no node is left to time the rest (the results given to
        ``on_result`` so far stand)."""
        out: list[MeasureResult | None] = [None] * len(builds)
        for i, b in enumerate(builds):
            if b["error"] is not None:
                out[i] = MeasureResult((), b["error"], b["seconds"])
                if on_result is not None:
                    on_result(i, out[i])
        run = _Batch(self, builds, keys, out, on_result, slow_after)
        try:
            self._time_batch(run)
        finally:
            self.pool.done(run)
        self.pool.forget_dead()
        return [r for r in out if r is not None]

    def _time_batch(self, run: _Batch) -> None:
        import ray

        self.pool.refresh()
        refreshed = time.monotonic()
        while run.pending or run.busy():
            self.pool.check_stopping("timing candidates")
            if time.monotonic() - refreshed > RunnerPool.REFRESH_S or not self.pool.live():
                self.pool.refresh()  # nodes that joined get runners; idle runners of nodes that left go
                refreshed = time.monotonic()
            if not self.pool.live():
                raise RuntimeError(
                    f"measure: no node of the Ray cluster can time {self.hardware.name} candidates any more; "
                    f"{len(run.pending)} of this batch were not measured"
                )
            self.pool.lend(run, run.pending, run.dispatch)  # idle runners get the next candidates
            busy = run.busy()
            if not busy:  # every runner times another batch's candidate (a concurrent task's)
                self.pool.wait_for_runner(SHARED_POLL_S)
                continue
            wait_s = min(max(0.0, min(s.job[3] for s in busy) - time.monotonic()), RunnerPool.REFRESH_S)  # type: ignore[index]
            refs = [s.job[2] for s in busy]  # type: ignore[index]
            ray.wait(refs, num_returns=1, timeout=wait_s)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)  # all finished ones
            for slot in busy:
                run.step(slot, slot.job[2] in ready)  # type: ignore[index]
            if any(s.job is None for s in busy):
                self.pool.runner_freed()

    def close(self) -> None:
        """Stop the runners when the Measurer started them (a shared pool is its owner's to close)."""
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Batch:
    """One ``Measurer._run``: the queue, and what each runner's reply means for its candidate."""

    def __init__(
        self,
        m: Measurer,
        builds: list[dict[str, Any]],
        keys: list[str],
        out: list[MeasureResult | None],
        on_result: Callable[[int, MeasureResult], None] | None,
        slow_after: float | None,
    ) -> None:
        self.m, self.builds, self.keys, self.out = m, builds, keys, out
        self.on_result, self.slow_after = on_result, slow_after
        self.pending = deque(i for i in range(len(builds)) if out[i] is None)

    def busy(self) -> list[_Slot]:
        """The runners timing this batch's candidates now."""
        return [s for s in self.m.pool.slots if s.job is not None and s.owner is self]

    def dispatch(self, slot: _Slot, i: int) -> None:
        m, b = self.m, self.builds[i]
        check = m.check and self.keys[i] not in m._checked
        budget = m.timeout_s * (EMULATION_SLOWDOWN if slot.emulated else 1)
        ref = slot.actor.load_and_check.remote(
            b["binary"], b["object"], b["sidecar"], check, *m._task_args, budget, b.get("prepack"), b.get("cold", ())
        )
        slot.job = (i, "check", ref, time.monotonic() + budget + (5.0 if slot.emulated else 0.0), budget)

    def finish(self, i: int, slot: _Slot, reply: dict[str, Any] | None = None, error: str | None = None) -> None:
        latencies = () if reply is None else reply.get("latencies", ())
        start, end = (None, None) if reply is None else (reply.get("start"), reply.get("end"))
        error = error if error is not None else (reply or {}).get("error")
        emulated = bool(reply and reply.get("emulated"))
        result = MeasureResult(
            tuple(float(x) for x in latencies), error, self.builds[i]["seconds"], slot.node_id, start, end, emulated,
            measured_on=None if emulated else slot.identity, disturbance=(reply or {}).get("disturbance"),
        )  # fmt: skip
        self.out[i] = result
        if self.on_result is not None:
            self.on_result(i, result)

    def requeue(self, slot: _Slot, i: int) -> None:
        """The slot's node left: forget its runner and put its candidate back in the queue."""
        slot.job = None
        self.m.pool.drop(slot)
        self.m.pool.event("requeued", slot.node_id, candidate=self.keys[i])
        self.pending.appendleft(i)

    def step(self, slot: _Slot, done: bool) -> None:
        """Act on the slot's job: its reply when ``done``, else its deadline."""
        import ray
        from ray.exceptions import RayActorError

        assert slot.job is not None
        m = self.m
        i, phase, ref, deadline, budget = slot.job
        if not done:
            if time.monotonic() >= deadline:
                m.pool.restart(slot, kill=True)
                tail = "" if phase == "check" else " (timing)"
                self.finish(i, slot, error=f"run: timed out after {budget:.3g} s{tail}")
            return
        try:
            reply = ray.get(ref)
        except RayActorError as e:
            # the candidate crashed its runner, unless the node went with it: then, or when a
            # fresh runner cannot start there (the node left), it is timed elsewhere
            if _node_died(slot.node_id, e):
                self.requeue(slot, i)
                return
            report = m.pool.restart(slot, kill=False)
            if slot.dead:
                self.requeue(slot, i)
            else:
                self.finish(i, slot, error=f"run: crashed ({report or _ray_error_line(e)})")
            return
        except Exception as e:
            m.pool.restart(slot, kill=True)
            self.finish(i, slot, error="run: " + _short(_ray_error_line(e)))
            return
        if reply["error"] is not None or phase == "time" or reply.get("emulated"):
            slot.job = None
            self.finish(i, slot, reply)
            return
        m._checked.add(self.keys[i])
        first = reply["first"]
        if self.slow_after is not None and first > self.slow_after:
            slot.job = None
            self.finish(i, slot, {**reply, "latencies": [first]})
            return
        if m.flush_cache:  # one call a repeat, each after the caches are flushed
            number, min_ms, repeat = 1, 0.0, max(m.repeat, FLUSHED_REPEATS)
        else:
            number = m.number or max(1, math.ceil(m.min_repeat_ms / 1e3 / max(first, 1e-7)))
            min_ms, repeat = (0.0 if m.number else m.min_repeat_ms), m.repeat
        expected = first * (1 + repeat * number) + (repeat + 2) * min_ms / 1e3 + repeat * 0.05 * m.flush_cache
        budget = m.timeout_s + 3 * expected
        retake_below = None if self.slow_after is None else self.slow_after / 2
        ref = slot.actor.time.remote(number, repeat, min_ms, m.flush_cache, retake_below)
        slot.job = (i, "time", ref, time.monotonic() + budget, budget)


def _node_died(node_id: str, error: BaseException) -> bool:
    """Whether a runner died with its node (Ray says so, or the node is no longer alive)."""
    return "its node has died" in str(error) or node_id not in RunnerPool.alive_nodes()


def _ray_error_line(e: BaseException) -> str:
    """The first line of a Ray error, or the wrapped cause's ``Type: message``."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(cause, type(e)):
        return f"{type(cause).__name__}: {cause}"
    lines = [line for line in str(e).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(e).__name__
