"""``tune``: find a fast program for a workload on a hardware descriptor (the project's main job).

::

    import tensorsearch as ts
    from tensorsearch import workloads
    result = ts.search.tune(workloads.get("GMM", 0, "int8"), "x86-znver4", trials=256, work_dir="runs/gmm")
    result.throughput, result.unit          # e.g. 520.3, "GOPS"
    result.module(x, y, z)                  # the best program, compiled
    result.program.bind([x, y, z])()        # ... as the tuner timed it (weights packed ahead, if any)
    mod = ts.search.compile_best(workloads.get("GMM", 0, "int8").func, "x86-znver4", "runs/gmm")

The loop: the design space of the workload (:class:`~.design.DesignSpace`); rounds of the
evolutionary search (:class:`~.strategy.evolutionary.EvolutionarySearch`), each proposing a batch that is
built in parallel Ray tasks and timed by one runner actor per node (:class:`~.measurer.Measurer`);
every measurement is appended to the database (:class:`~.database.Database`) as soon as it is
made, and the cost model (:class:`~.cost_model.model.CostModel`) is retrained on it. Running ``tune``
again with the same ``work_dir`` resumes: measured candidates are never measured again and count
toward ``trials``; ``trials`` is the total for the workload and hardware.

Tuning builds use FMA contraction (``Target.with_fp_contract()``; a float kernel's rounding may
differ from the unscheduled program's in the last bits, within the workload's tolerance), and so
does ``compile_best``, so the module returned computes as the program that was measured. A
function with layout-free parameters (:func:`~tensorsearch.transform.mark_layout_free`, a model's
weights) is timed as a model runs it, its weights re-laid once, ahead: ``result.program`` is that
:class:`~tensorsearch.graph.executor.TaskProgram`, and ``result.module`` the whole function, the
re-laying included, callable on the plain arrays.
"""

from __future__ import annotations

import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...arith import count_ops
from ...graph.executor import TaskProgram
from ...ir import (
    PrimFunc,
)
from ...runtime import Module, build
from ...runtime.backend import backend_for
from ...runtime.verify import verify_hardware
from ...schedule import Schedule, Trace
from ...target import Hardware, load
from ...transform import layout_free_params
from ...workloads import Workload
from ..cost_model.model import CostModel, transfer_data
from ..database import Database, DatabaseError, TuningRecord, hardware_key, workload_key
from ..database import workload_key as workload_key_of
from ..measure.cluster import init_ray, ray_started, resolve_address
from ..measure.config import MeasureConfig, measure_config
from ..measure.measurer import Measurer
from ..measure.noise import LATENCY_STATISTIC, HostConditions
from ..space.design import Candidate, DesignSpace
from ..strategy.evolutionary import EvolutionarySearch, RoundStats, SearchConfig, measured_population
from ..strategy.parallel import LocalEvaluator, RayEvaluator
from .errors import TuneError, TuneInputError
from .workdir import hold_work_dir

Evaluator = LocalEvaluator | RayEvaluator  # where a task's candidates are replayed (TaskSearch.evaluator)

# A candidate whose check run is this many times slower than the task's best is not timed again
# (Measurer.measure's slow_after): it cannot become the best.
SLOW_FACTOR = 4.0
# At the end of a run the fastest quarter of the candidates measured, at least MIN_FINALISTS and
# at most FINALISTS, are timed again together, FINALIST_ROUNDS rounds (finalist_count). Up to
# twelve: a spell of the shared host's slowness put DEP:0's true best 8th of 64 by its own latency.
FINALISTS = 12
MIN_FINALISTS = 6
FINALIST_ROUNDS = 3


@dataclass
class Progress:
    """Where a tuning run is: passed to the ``progress`` callback after each measurement, and
    before each step that takes a while until the first one, with ``stage`` saying what is
    being done ("making the design spaces", "starting Ray", "resuming from 40 records",
    "searching the first round"); ``stage`` is None for a measurement."""

    trials_done: int
    trials_total: int
    best_throughput: float | None
    elapsed_s: float
    eta_s: float | None
    failed: int
    unit: str
    stage: str | None = None


@dataclass
class TuneResult:
    """The outcome of :func:`tune`: the best trace, its latency (seconds) and throughput, the
    module (the whole function) and the program the tuner timed (the module itself, unless the
    function has layout-free parameters: then its main part, see :class:`TaskProgram`)."""

    trace: Trace
    latency: float
    throughput: float
    unit: str
    module: Module
    program: TaskProgram
    workload_key: str
    hardware_key: str
    trials: int
    curve: list[tuple[int, float]]
    records: list[Any]
    wall_seconds: float
    work_dir: Path
    name: str
    search_stats: list[RoundStats] = field(default_factory=list)
    transferred: int = 0  # records of other workloads the cost model was pre-trained on
    host: HostConditions = field(default_factory=lambda: HostConditions.of([]))  # how busy the host was
    retimed_at: int | None = None  # the trials done when the finalists were re-timed (a point of the curve)
    statistic: str = LATENCY_STATISTIC  # how a record's repeats make its latency

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if not r.ok)


class HostBusyWarning(UserWarning):
    """The host was busy while a run timed its candidates: its latencies are inflated and its best
    may be wrong (``TuneResult.host``)."""


def check_runs_here(hw: Hardware, address: str | None, allow_other_cpu: bool = False) -> None:
    """TuneError, before anything starts, when the candidates are to be measured on this machine
    (no cluster address) and this CPU cannot run code built for ``hw`` (or ``hw`` is a GPU and this
    machine has no NVIDIA driver), or, unless ``allow_other_cpu``, this machine is not the one
    ``hw`` describes (``Hardware.why_not_this_machine``: another CPU, or a feature the descriptor
    disables): its timings would be filed as ``hw``'s. On a cluster the runners' nodes are
    checked instead, each as it starts (``measure.timing_refusal``)."""
    if backend_for(hw).device:
        if address is None and shutil.which("nvidia-smi") is None:
            raise TuneInputError(
                f"tune: hardware {hw.name} is a GPU and this machine has no NVIDIA driver (no nvidia-smi); "
                "measure on GPU nodes: --address of their Ray cluster"
            )
        return
    if address is None and not hw.runs_here:
        missing = hw.missing_here()
        lacks = (
            f"it lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
            if missing
            else "another architecture"
        )
        raise TuneInputError(
            f"tune: this CPU cannot run code built for hardware {hw.name} ({lacks}); tune for --hardware host, "
            "or measure on machines that can (--address of their Ray cluster)"
        )
    why = None if address is not None or allow_other_cpu else hw.why_not_this_machine()
    if why is not None:
        raise TuneInputError(
            f"tune: this machine is not {hw.name}: {why}; tune with --hardware host, or pass --allow-other-cpu "
            "(allow_other_cpu=True) to time here anyway (each record then names the CPU that timed it)"
        )


def _resolve(func_or_workload: PrimFunc | Workload) -> tuple[PrimFunc, Workload | None, str]:
    if isinstance(func_or_workload, Workload):
        return func_or_workload.func, func_or_workload, func_or_workload.key
    if isinstance(func_or_workload, PrimFunc):
        return func_or_workload, None, str(func_or_workload.attr_dict.get("global_symbol", "main"))
    raise TuneError(
        f"tune takes a workload (tensorsearch.workloads.get(...)) or a PrimFunc, not {type(func_or_workload).__name__}"
    )


def _unit(func: PrimFunc) -> str:
    dtypes = {b.dtype for b in func.buffers}
    return "GFLOPS" if any(str(d).startswith(("float", "bfloat")) for d in dtypes) else "GOPS"


def tune(
    func_or_workload: PrimFunc | Workload,
    hardware: Hardware | str | os.PathLike,
    trials: int,
    work_dir: str | os.PathLike,
    seed: int = 0,
    *,
    address: str | None = None,
    config: SearchConfig | None = None,
    progress: Callable[[Progress], None] | None = None,
    workers: int | None = None,
    timeout_s: float = 10.0,
    repeat: int = 3,
    transfer: bool = True,
    transfer_from: Sequence[str | os.PathLike] = (),
    flush_cache: bool = False,
    allow_other_cpu: bool = False,
    measure: MeasureConfig | None = None,
) -> TuneResult:
    """Tune ``func_or_workload`` for ``hardware`` with ``trials`` measurements in total.

    ``hardware``: a descriptor name ("x86-znver4", "host"), a YAML path or a Hardware.
    ``work_dir``: where the database (and, from the CLI, the curve) lives; reused to resume.
    ``address``: a Ray cluster to join (default: ``RAY_ADDRESS`` when set, else an embedded local
    cluster; "local" forces the local one). ``workers``: Ray actors
    for the search's own work (None: one per CPU; 0: in this process). ``timeout_s``: a
    candidate running longer is recorded as failed. ``flush_cache``: every timed call runs after
    the caches are flushed (:class:`~.measurer.Measurer`). ``transfer``: pre-train the cost model on the
    records of other workloads measured on the same hardware, in the work dir's database and in
    the databases ``transfer_from`` names (work dirs, their ``database`` directories or record
    files). ``allow_other_cpu``: time on machines whose CPU is not the one ``hardware`` describes
    (refused by default: :func:`check_runs_here`, ``measure.timing_refusal``), with a warning;
    every record names the CPU that timed it (``TuningRecord.measured_on``) all the same.
    ``measure``: a :class:`~.config.MeasureConfig` in place of ``timeout_s``, ``repeat``,
    ``flush_cache`` and ``allow_other_cpu`` (then left at their defaults), with the rest of the
    Measurer's settings. Returns the best program found.

    The run holds ``work_dir`` (:mod:`.workdir`): while it goes, another ``tune`` on the same work
    dir raises :class:`~.workdir.WorkDirBusy` (a TuneError) at once, naming this run's pid.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise TuneInputError(f"tune: trials must be a positive integer, got {trials!r}")

    try:
        measure = measure_config(
            measure, timeout_s=timeout_s, repeat=repeat, flush_cache=flush_cache, allow_other_cpu=allow_other_cpu
        )
    except ValueError as e:
        raise TuneInputError(f"tune: {e}") from None

    t_start = time.perf_counter()
    func, workload, name = _resolve(func_or_workload)
    hw = load(hardware)
    address = resolve_address(address)
    check_runs_here(hw, address, measure.allow_other_cpu)
    verify_hardware(hw, stacklevel=3)  # a wrong intrinsic is refused here, before any candidate is built

    with hold_work_dir(work_dir):  # WorkDirBusy, before anything starts, when another run holds it
        return _tune(
            func, workload, name, hw, trials, work_dir, seed, address, config, progress, workers,
            measure, transfer, transfer_from, t_start,
        )  # fmt: skip


def _tune(
    func: PrimFunc,
    workload: Workload | None,
    name: str,
    hw: Hardware,
    trials: int,
    work_dir: str | os.PathLike,
    seed: int,
    address: str | None,
    config: SearchConfig | None,
    progress: Callable[[Progress], None] | None,
    workers: int | None,
    measure: MeasureConfig,
    transfer: bool,
    transfer_from: Sequence[str | os.PathLike],
    t_start: float,
) -> TuneResult:
    """:func:`tune`'s run, with the work dir held: one :class:`TaskSearch` run to its budget."""
    db = Database(work_dir)
    unit = _unit(func)

    def stage(text: str, done: int = 0) -> None:
        if progress is not None:
            progress(Progress(done, trials, None, time.perf_counter() - t_start, None, 0, unit, stage=text))

    cost_model = CostModel(seed=seed)
    if transfer:
        stage("pre-training the cost model on other workloads' records")
    transferred = pretrain(cost_model, db, transfer_from, hw, {workload_key_of(func)}) if transfer else 0
    stage(f"making the design spaces of {name} for {hw.name}")
    task = TaskSearch(func, workload, name, hw, db, cost_model, config or SearchConfig(), seed)
    if not ray_started():
        stage("starting Ray" if address is None else f"joining the Ray cluster at {address}")
    init_ray(address)
    evaluator = task.evaluator(workers)
    measurer = Measurer(func, hw, workload=workload, address=address, seed=seed, config=measure)
    try:
        if task.records:
            stage(f"resuming from {len(task.records)} records in {db.dir}", len(task.records))
        task.resume(evaluator)
        done_at_start = len(task.records)
        t_loop = time.perf_counter()

        def on_record(record: Any) -> None:
            if progress is None:
                return
            done = len(task.records)
            # seconds per trial, search included; known once a whole round has been measured
            rate = (time.perf_counter() - t_loop) / max(done - done_at_start, 1) if len(task.stats) > 1 else None
            best = task.best_throughput
            progress(
                Progress(
                    done, trials, best, time.perf_counter() - t_start,
                    None if rate is None else rate * (trials - done), task.failed, unit,
                )
            )  # fmt: skip

        if done_at_start < trials:
            kind = "" if done_at_start == 0 else "resumed "
            stage(f"searching the first {kind}round ({len(task.space.traces)} design spaces)", done_at_start)
        while len(task.records) < trials:
            if not task.run_round(trials - len(task.records), evaluator, measurer, on_record):
                break  # the design space has nothing left to offer
        task.check_some_ran(work_dir)
        if len(task.records) > done_at_start:
            stage(f"re-timing the {finalist_count(len(task.ok_records))} fastest together", len(task.records))
            task.retime_finalists(measurer)
        result = task.result(t_start, work_dir, transferred)
        if (busy := result.host.warning()) is not None:
            warnings.warn(f"tune: {busy}", HostBusyWarning, stacklevel=4)
        return result
    finally:
        measurer.close()
        evaluator.close()


class TaskSearch:
    """One task's search between rounds: its design space, evolutionary search, measured
    candidates and records. :func:`tune` runs one to its budget; the model scheduler
    (:mod:`.scheduler`) runs one per task, a round at a time, with the cost model shared.

    The evaluator (the search's Ray actors) and the measurer are passed to each call, so a
    scheduler holds them only while the task runs. Records already in the database count:
    :meth:`resume` replays them into the cost model and the measured population once."""

    def __init__(
        self,
        func: PrimFunc,
        workload: Workload | None,
        name: str,
        hw: Hardware,
        db: Database,
        cost_model: CostModel,
        config: SearchConfig,
        seed: int,
    ) -> None:
        self.func, self.workload, self.name, self.hw, self.db = func, workload, name, hw, db
        self.config, self.seed, self.cost_model = config, seed, cost_model
        self.wkey = db.commit_workload(func, name)
        self.hkey = hardware_key(hw)
        self.unit = _unit(func)
        self.ops = workload.flops if workload is not None else count_ops(func)
        self.space = DesignSpace(func, hw)
        self.search = EvolutionarySearch(self.space, cost_model, config, seed, None)
        self.records: list[Any] = db.records(self.wkey, self.hkey)
        self.measured_keys = {r.candidate_key for r in self.records}
        self.best = math.inf
        self.curve: list[tuple[int, float]] = []
        for i, r in enumerate(self.records):
            self.best = min(self.best, r.latency)
            self.curve.append((i + 1, self.throughput(self.best)))
        self.retimed_at: int | None = None  # the trials done when the finalists were re-timed
        self.measured: list[Candidate] = []  # successful candidates, fastest first
        self.stats: list[RoundStats] = []
        self._resumed = False

    def throughput(self, latency: float) -> float:
        return self.ops / latency / 1e9 if latency > 0 and math.isfinite(latency) else 0.0

    @property
    def best_throughput(self) -> float | None:
        return self.throughput(self.best) if math.isfinite(self.best) else None

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if not r.ok)

    @property
    def ok_records(self) -> list[Any]:
        return [r for r in self.records if r.ok]

    def evaluator(self, workers: int | None) -> Evaluator:
        """Where this task's candidates are replayed: ``workers`` Ray actors (None: one per CPU), or
        this process (0)."""
        return LocalEvaluator(self.space) if workers == 0 else RayEvaluator(self.space, workers)

    def resume(self, evaluator: Evaluator) -> None:
        """Teach the cost model the records measured before and seed the population with the
        successful ones (once; nothing to do for a new task)."""
        if self._resumed or not self.records:
            self._resumed = True
            return
        self._resumed = True
        traces = [(Trace.from_json(r.trace).simplified(remove_postproc=True), 0) for r in self.records]
        by_key = {c.key: c for c in measured_population(self.space, evaluator, traces)}
        known = [r for r in self.records if r.candidate_key in by_key and not r.emulated]
        if known:
            self.cost_model.update(
                [by_key[r.candidate_key].features for r in known], [r.latency for r in known], self.wkey
            )
        ok = sorted((r for r in known if r.ranks), key=lambda r: r.latency)
        self.measured = [by_key[r.candidate_key] for r in ok]

    def run_round(
        self, limit: int, evaluator: Evaluator, measurer: Measurer, on_record: Callable[[Any], None] | None = None
    ) -> int:
        """Propose and measure one round of at most ``limit`` candidates (``num_trials_per_iter``
        at most), each committed to the database as it is measured; returns how many were
        measured: 0 when the design space has nothing new left. TuneError when the first round
        finds no valid program at all."""
        self.resume(evaluator)
        stats = RoundStats()
        want = min(self.config.num_trials_per_iter, limit)
        # a round that needs fewer candidates than a full batch evolves a smaller population
        self.search.config = self.config.replace(
            num_trials_per_iter=want,
            population_size=min(self.config.population_size, max(8 * want, self.config.init_min_unmeasured)),
        )
        self.search.evaluator = evaluator
        batch = self.search.next_batch(self.measured, self.measured_keys, stats)
        self.stats.append(stats)
        if not batch:
            if not self.records:
                reasons = [self.space.why_invalid(k, self.seed) for k in range(len(self.space.traces))]
                raise TuneError(
                    f"tune: no sample of the {len(self.space.traces)} design space(s) of {self.name} on "
                    f"{self.hw.name} is a valid program; the first refusal: {next((r for r in reasons if r), 'unknown')}"
                )
            return 0
        new_feats: list[Any] = []
        new_lats: list[float] = []

        def on_result(i: int, result: Any) -> None:
            cand = batch[i]
            rec = TuningRecord(
                workload_key=self.wkey,
                hardware_key=self.hkey,
                candidate_key=cand.key,
                trace=cand.trace.as_json_text(),
                latencies=tuple(result.latencies),
                error=result.error,
                build_seconds=result.build_seconds,
                trial=len(self.records) + 1,
                timestamp=time.time(),
                node=result.node,
                run_start=result.run_start,
                run_end=result.run_end,
                emulated=result.emulated,
                measured_on=result.measured_on,
                disturbance=result.disturbance,
            )
            self.db.commit_record(rec)
            self.records.append(rec)
            self.measured_keys.add(cand.key)
            if not rec.emulated:  # an emulated timing teaches the cost model nothing
                new_feats.append(cand.features)
                new_lats.append(rec.latency)
            if rec.ranks:
                self.measured.append(cand)
                self.best = min(self.best, rec.latency)
            self.curve.append((len(self.records), self.throughput(self.best)))
            if on_record is not None:
                on_record(rec)

        t_measure = time.perf_counter()
        slow_after = SLOW_FACTOR * self.best if math.isfinite(self.best) else None
        try:
            measurer.measure([c.func for c in batch], on_result=on_result, slow_after=slow_after)
        finally:
            self.record_events(measurer)
        stats.measured = len(batch)
        stats.measure_seconds = time.perf_counter() - t_measure
        self.cost_model.update(new_feats, new_lats, self.wkey)
        latency_of = {r.candidate_key: r.latency for r in self.records}
        self.measured.sort(key=lambda c: latency_of.get(c.key, math.inf))
        return len(batch)

    def record_events(self, measurer: Measurer) -> None:
        """Commit what happened to the cluster's nodes while measuring (not candidate records)."""
        for event in measurer.pool.take_events():
            self.db.commit_infrastructure({**event, "workload_key": self.wkey, "hardware_key": self.hkey})

    def check_some_ran(self, work_dir: str | os.PathLike) -> None:
        """TuneError when no candidate measured so far ran correctly, or all that did ran emulated."""
        if not self.ok_records:
            raise TuneError(
                f"tune: none of the {len(self.records)} candidates measured for {self.name} on {self.hw.name} ran "
                f"correctly; see the errors in {Path(work_dir) / 'database'}"
            )
        if not any(r.ranks for r in self.ok_records):
            raise TuneError(
                f"tune: the {len(self.ok_records)} correct candidates of {self.name} on {self.hw.name} ran under "
                f"qemu only (no node of the cluster runs {self.hw.arch} code natively), and emulated timings rank "
                f"nothing; add an {self.hw.arch} node to the cluster to tune (the records are in {Path(work_dir) / 'database'})"
            )

    def retime_finalists(self, measurer: Measurer) -> None:
        """Time the :func:`finalist_count` fastest candidates by their own latencies again, with the best
        an earlier run re-timed, ``FINALIST_ROUNDS`` rounds interleaved, and record it: the best
        is then chosen among them under the same noise, not by one lucky batch.

        On the shared 2-vCPU machine, one candidate's tuner latency and a later timing differed by
        up to 35%, both ways (float32 C2D:2: the tuner's best, 1.26 ms, re-timed at 1.4-1.7 ms; its
        third, 1.42 ms, at 1.13-1.21 ms). A re-timing only adds samples: each finalist keeps the
        fastest of all its samples (:meth:`Database.latency`), and the best so far becomes the
        best record's, a point of its own on the curve (``retimed_at``)."""
        by_key = {c.key: c for c in self.measured}
        fastest = self.db.fastest_measured(self.wkey, self.hkey, finalist_count(len(self.ok_records)))
        chosen = fastest + self.db.best(self.wkey, self.hkey, 1)
        finalists = list({r.candidate_key: r for r in chosen if r.candidate_key in by_key}.values())
        if len(finalists) < 2:
            return
        try:
            rounds = measurer.retime([by_key[r.candidate_key].func for r in finalists], FINALIST_ROUNDS)
        finally:
            self.record_events(measurer)
        for rec, timed in zip(finalists, rounds, strict=True):
            self.db.commit_retiming(self.wkey, self.hkey, rec.candidate_key, [x for r in timed for x in r])
        self.best = self.best_latency()
        self.retimed_at = len(self.records)
        self.curve.append((len(self.records), self.throughput(self.best)))

    def best_latency(self) -> float:
        """The best record's latency (re-timings included); ``math.inf`` when none ran."""
        best = self.db.best(self.wkey, self.hkey, 1)
        return self.db.latency(best[0]) if best else math.inf

    def result(self, t_start: float, work_dir: str | os.PathLike, transferred: int) -> TuneResult:
        """The best record, built."""
        best_rec = self.db.best(self.wkey, self.hkey)[0]
        trace = Trace.from_json(best_rec.trace)
        latency = self.db.latency(best_rec)
        module, program = build_trace(self.func, self.hw, trace)
        return TuneResult(
            trace=trace,
            latency=latency,
            throughput=self.throughput(latency),
            unit=self.unit,
            module=module,
            program=program,
            workload_key=self.wkey,
            hardware_key=self.hkey,
            trials=len(self.records),
            curve=list(self.curve),
            records=list(self.records),
            wall_seconds=time.perf_counter() - t_start,
            work_dir=Path(work_dir),
            name=self.name,
            search_stats=list(self.stats),
            transferred=transferred,
            host=self.host_conditions(),
            retimed_at=self.retimed_at,
        )

    def host_conditions(self) -> HostConditions:
        """How disturbed the host was while this task's records were timed."""
        return HostConditions.of([r.disturbance for r in self.records if r.ranks])


def finalist_count(measured: int) -> int:
    """How many of ``measured`` correct candidates the end of a run re-times: the fastest quarter,
    at least ``MIN_FINALISTS`` and at most ``FINALISTS`` (8 -> 6, 40 -> 10, 64 -> 12)."""
    return min(FINALISTS, max(MIN_FINALISTS, measured // 4), measured)


def pretrain(
    cost_model: CostModel, db: Database, sources: Sequence[str | os.PathLike], hw: Hardware, exclude: set[str]
) -> int:
    """Pre-train ``cost_model`` on the records of hardware ``hw`` of workloads not in ``exclude``
    (their keys) in ``db`` and in the databases at ``sources``; returns how many it learned from."""
    if isinstance(sources, str | os.PathLike):
        sources = [sources]
    dbs = [db]
    for path in sources:
        try:
            dbs.append(Database.open_existing(path))
        except DatabaseError as err:
            raise TuneError(f"tune: transfer_from: {err}") from None
    return cost_model.pretrain(transfer_data(dbs, hw, exclude))


def build_trace(func: PrimFunc, hw: Hardware, trace: Trace) -> tuple[Module, TaskProgram]:
    """``trace`` replayed on ``func`` and compiled: the whole function, and the program the
    Measurer times (its main part on layout-free parameters packed ahead, when the schedule
    re-lays them on a CPU; else the same module)."""
    scheduled, target = _scheduled(func, hw, trace), hw.with_fp_contract()
    program = TaskProgram.build(scheduled, () if backend_for(hw).device else layout_free_params(scheduled), target)
    return (program.main if program.split is None else build(scheduled, target)), program


def _scheduled(func: PrimFunc, hw: Hardware, trace: Trace) -> PrimFunc:
    sch = Schedule(func, check=False, hardware=hw)
    trace.apply(sch)
    return sch.func


def compile_best(
    func: PrimFunc | Workload, hardware: Hardware | str | os.PathLike, work_dir: str | os.PathLike
) -> Module:
    """The compiled module of the best record of ``func`` (a PrimFunc or workload) for ``hardware``
    in ``work_dir``'s database, the whole function (as :attr:`TuneResult.module`); TuneError when
    there is none."""
    func, _, name = _resolve(func)
    hw = load(hardware)
    db = Database(work_dir)
    best = db.best(workload_key(func), hardware_key(hw), 1)
    if not best:
        raise TuneError(f"compile_best: {work_dir} holds no successful record of {name} for hardware {hw.name}")
    return build(_scheduled(func, hw, Trace.from_json(best[0].trace)), hw.with_fp_contract())
