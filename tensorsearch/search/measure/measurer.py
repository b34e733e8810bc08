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

import math
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ...ir.stmt import PrimFunc
from ...target import Hardware, load
from ...workloads import Workload
from ..space.design import candidate_key
from .builder import RayBuilder
from .check import make_reference
from .cluster import init_ray, ray_error_line, short_error
from .config import MeasureConfig, measure_config
from .interfaces import Builder
from .pool import RunnerPool, Slot, node_died
from .results import BuildResult, MeasureResult, RunResult
from .runner import EMULATION_SLOWDOWN, FLUSHED_REPEATS

SHARED_POLL_S = 0.5  # a batch waiting for a runner held by others' batches looks again at least this often


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
    its own setting). ``config``: a :class:`~.config.MeasureConfig` holding all of these at once
    (then leave them at their defaults); the Measurer's ``config`` is the one in force.
    ``builder``: what builds the candidates (:class:`~.interfaces.Builder`; by default a
    :class:`~.builder.RayBuilder`, Ray tasks over the cluster).
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
        config: MeasureConfig | None = None,
        builder: Builder | None = None,
    ) -> None:
        if func is None:
            if workload is None:
                raise ValueError("Measurer needs a function or a workload")
            func = workload.func
        self.config = measure_config(
            config, timeout_s=timeout_s, build_timeout_s=build_timeout_s, fp_contract=fp_contract, number=number,
            repeat=repeat, check=check, min_repeat_ms=min_repeat_ms, flush_cache=flush_cache,
            allow_other_cpu=allow_other_cpu,
        )  # fmt: skip
        self.func = func
        self.hardware = load(hardware)
        if pool is not None and pool.hardware.name != self.hardware.name:
            raise ValueError(f"the runner pool times {pool.hardware.name} candidates, not {self.hardware.name}")
        self.target = self.hardware
        if self.config.fp_contract:
            self.target = self.target.with_fp_contract()
        self.workload = workload
        self._checked: set[str] = set()  # candidate keys checked against the reference
        init_ray(address)
        import ray

        self.reference = reference if reference is not None else make_reference(func, workload, seed)
        inputs, out_positions, expected, checker = self.reference
        self._task_args = (ray.put(inputs), out_positions, ray.put(expected), checker)
        self._own_pool = pool is None
        self.pool = pool if pool is not None else RunnerPool(self.hardware, seed, self.config.allow_other_cpu)
        self.builder: Builder = builder if builder is not None else RayBuilder()
        self._kept: dict[str, tuple[float, BuildResult]] = {}  # candidate key -> (latency, build)

    @property
    def _slots(self) -> list[Slot]:
        return self.pool.slots

    # measuring ---------------------------------------------------------------------------
    def _build_all(self, funcs: Sequence[PrimFunc]) -> list[BuildResult]:
        """Build every candidate with the Measurer's builder."""
        return self.builder.build(funcs, self.target, self.config.build_timeout_s, self.pool)

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
        funcs = list(funcs)
        builds, keys = self._build_all(funcs), [candidate_key(f) for f in funcs]
        results = self._run(builds, keys, on_result, slow_after)
        self._keep_fastest(keys, builds, results)
        return results

    def _keep_fastest(self, keys: list[str], builds: list[BuildResult], results: list[MeasureResult]) -> None:
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
        builds: list[BuildResult],
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
            if b.error is not None:
                out[i] = MeasureResult((), b.error, b.seconds)
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
        builds: list[BuildResult],
        keys: list[str],
        out: list[MeasureResult | None],
        on_result: Callable[[int, MeasureResult], None] | None,
        slow_after: float | None,
    ) -> None:
        self.m, self.builds, self.keys, self.out = m, builds, keys, out
        self.on_result, self.slow_after = on_result, slow_after
        self.pending = deque(i for i in range(len(builds)) if out[i] is None)

    def busy(self) -> list[Slot]:
        """The runners timing this batch's candidates now."""
        return [s for s in self.m.pool.slots if s.job is not None and s.owner is self]

    def dispatch(self, slot: Slot, i: int) -> None:
        m, b = self.m, self.builds[i]
        check = m.config.check and self.keys[i] not in m._checked
        budget = m.config.timeout_s * (EMULATION_SLOWDOWN if slot.emulated else 1)
        ref = slot.actor.load_and_check.remote(
            b.binary, b.is_object, b.sidecar, check, *m._task_args, budget, b.prepack, b.cold
        )
        slot.job = (i, "check", ref, time.monotonic() + budget + (5.0 if slot.emulated else 0.0), budget)

    def finish(self, i: int, slot: Slot, reply: RunResult | None = None, error: str | None = None) -> None:
        if reply is None:
            result = MeasureResult((), error, self.builds[i].seconds, slot.node_id, measured_on=slot.identity)
        else:
            result = MeasureResult(
                reply.latencies, error if error is not None else reply.error, self.builds[i].seconds, slot.node_id,
                reply.start, reply.end, reply.emulated, measured_on=None if reply.emulated else slot.identity,
                disturbance=reply.disturbance,
            )  # fmt: skip
        self.out[i] = result
        if self.on_result is not None:
            self.on_result(i, result)

    def requeue(self, slot: Slot, i: int) -> None:
        """The slot's node left: forget its runner and put its candidate back in the queue."""
        slot.job = None
        self.m.pool.drop(slot)
        self.m.pool.event("requeued", slot.node_id, candidate=self.keys[i])
        self.pending.appendleft(i)

    def step(self, slot: Slot, done: bool) -> None:
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
            reply: RunResult = ray.get(ref)
        except RayActorError as e:
            # the candidate crashed its runner, unless the node went with it: then, or when a
            # fresh runner cannot start there (the node left), it is timed elsewhere
            if node_died(slot.node_id, e):
                self.requeue(slot, i)
                return
            report = m.pool.restart(slot, kill=False)
            if slot.dead:
                self.requeue(slot, i)
            else:
                self.finish(i, slot, error=f"run: crashed ({report or ray_error_line(e)})")
            return
        except Exception as e:
            m.pool.restart(slot, kill=True)
            self.finish(i, slot, error="run: " + short_error(ray_error_line(e)))
            return
        if reply.error is not None or phase == "time" or reply.emulated:
            slot.job = None
            self.finish(i, slot, reply)
            return
        m._checked.add(self.keys[i])
        first = reply.first
        assert first is not None  # a check's reply
        if self.slow_after is not None and first > self.slow_after:
            slot.job = None
            self.finish(i, slot, replace(reply, latencies=(first,)))
            return
        c = m.config
        if c.flush_cache:  # one call a repeat, each after the caches are flushed
            number, min_ms, repeat = 1, 0.0, max(c.repeat, FLUSHED_REPEATS)
        else:
            number = c.number or max(1, math.ceil(c.min_repeat_ms / 1e3 / max(first, 1e-7)))
            min_ms, repeat = (0.0 if c.number else c.min_repeat_ms), c.repeat
        expected = first * (1 + repeat * number) + (repeat + 2) * min_ms / 1e3 + repeat * 0.05 * c.flush_cache
        budget = c.timeout_s + 3 * expected
        retake_below = None if self.slow_after is None else self.slow_after / 2
        ref = slot.actor.time.remote(number, repeat, min_ms, c.flush_cache, retake_below)
        slot.job = (i, "time", ref, time.monotonic() + budget, budget)
