"""The runner actor (:class:`Runner`): on its node it loads a built candidate, checks it against the
reference, and times it (beside the reference kernel on a CPU; under qemu for an emulated
architecture; with CUDA events on a GPU).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from ...ir.dtype import numpy_dtype, parse_dtype
from .cluster import EMULATES_LABEL, HARDWARE_LABEL, label_list, short_error, take_niceness
from .noise import DISTURBED, ReferenceClock
from .results import Prepack, RunResult

EMULATION_SLOWDOWN = 50  # an emulated candidate's check may take this many times the native timeout
FLUSHED_REPEATS = 10  # with flush_cache each repeat is one call: at least this many of them


def _garbage(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """A fresh array of random values (never what a correct kernel writes, almost surely)."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return (rng.standard_normal(size=shape) * 1e3).astype(dtype)


class Runner:
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
        prepack: Prepack | None = None,
        cold: Sequence[int] = (),
    ) -> RunResult:
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
            return self._reply(error="run: " + short_error(e), first=0.0)
        finally:
            for p in (path, path + ".json"):
                with contextlib.suppress(OSError):
                    os.remove(p)
        wrong = self._wrong([args[k] for k in self.out_positions]) if check else None
        if wrong is not None:
            return self._reply(error=wrong, first=first)
        self.mod, self.args = mod, call_args
        return self._reply(error=None, first=first)

    def _prepacked(self, args: list[np.ndarray], prepack: Prepack) -> list[np.ndarray]:
        """The main function's arguments: ``args`` (the task's, in its parameter order) with the
        weights the prepack library packs (run here once) in place of the ones it reads."""
        from ...runtime import aligned_zeros
        from ...runtime.module import load_module

        path = os.path.join(self.dir, f"candidate{self.count}_prepack.so")
        try:
            with open(path, "wb") as f:
                f.write(prepack.binary)
            with open(path + ".json", "w") as f:
                f.write(prepack.sidecar)
            pre = load_module(path)
        finally:
            for p in (path, path + ".json"):
                with contextlib.suppress(OSError):
                    os.remove(p)
        inputs = [args[i] for i in prepack.inputs]
        packed = [
            aligned_zeros(p.shape, np.dtype(numpy_dtype(parse_dtype(p.dtype)))) for p in pre.params[len(inputs) :]
        ]
        pre(*inputs, *packed)
        return [args[p] if isinstance(p, int) else packed[p[1]] for p in prepack.params]

    def _emulate(self, binary: bytes, symbol: str, check: bool, timeout_s: float) -> RunResult:
        """Run an aarch64 object once under qemu-aarch64 (linked into a static harness) and check
        it: correctness only; its one latency, the harness's wall time, is flagged emulated."""
        from ...runtime.cross import CrossRunError, run_aarch64

        args = self._arguments()
        t0 = time.perf_counter()
        try:
            after = run_aarch64(binary, symbol, args, timeout=timeout_s)
        except (CrossRunError, OSError, ValueError) as e:
            return self._reply(error="run: " + short_error(str(e)), first=0.0, emulated=True)
        first = time.perf_counter() - t0
        wrong = self._wrong([after[k] for k in self.out_positions]) if check else None
        return self._reply(error=wrong, first=first, latencies=[] if wrong else [first], emulated=True)

    def _wrong(self, outputs: list[np.ndarray]) -> str | None:
        """``"wrong result: ..."`` when the outputs differ from the reference's, else None."""
        try:
            self.checker(outputs, self.expected)
        except AssertionError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            return "wrong result: " + short_error("; ".join(lines[:3]) or "outputs differ")
        return None

    def time(
        self,
        number: int,
        repeat: int,
        min_repeat_ms: float,
        flush_cache: bool = False,
        retake_below: float | None = None,
    ) -> RunResult:
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
            return self._reply(error="run: " + short_error(e), latencies=[])
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

    def _reply(self, error: str | None, latencies: Sequence[float] = (), **fields: Any) -> RunResult:
        """A call's reply, with the wall-clock window of the candidate's check and timing so far."""
        return RunResult(error, self.started, time.time(), latencies=tuple(float(x) for x in latencies), **fields)

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
        emulates = label_list(labels, EMULATES_LABEL)
        return {
            "triple": host_triple(),
            "identity": host_identity().to_json(),
            "present": sorted(host_present_features()),
            "absent": sorted(host_absent_features()),
            "niceness": os.getpriority(os.PRIO_PROCESS, 0),
            "priority": self.priority,
            "hardware": label_list(labels, HARDWARE_LABEL),
            "emulates": emulates,
            "emulation_missing": {
                a: aarch64_tools_available() if a == "aarch64" else "only aarch64 is emulated" for a in emulates
            },
        }

    def close(self) -> None:
        faulthandler.disable()
        self._crash_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@cache
def remote_runner() -> Any:
    import ray

    return ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(Runner)
