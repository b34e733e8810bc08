"""``tune``: find a fast program for a workload on a hardware descriptor (the project's main job).

::

    import tensorsearch as ts
    from tensorsearch import workloads
    result = ts.search.tune(workloads.get("GMM", 0, "int8"), "x86-znver4", trials=256, work_dir="runs/gmm")
    result.throughput, result.unit          # e.g. 520.3, "GOPS"
    result.module(x, y, z)                  # the best program, compiled
    mod = ts.search.compile_best(workloads.get("GMM", 0, "int8").func, "x86-znver4", "runs/gmm")

The loop: the design space of the workload (:class:`~.space.DesignSpace`); rounds of the
evolutionary search (:class:`~.evolutionary.EvolutionarySearch`), each proposing a batch that is
built in parallel Ray tasks and timed by one runner actor per node (:class:`~.measure.Measurer`);
every measurement is appended to the database (:class:`~.database.Database`) as soon as it is
made, and the cost model (:class:`~.cost_model.CostModel`) is retrained on it. Running ``tune``
again with the same ``work_dir`` resumes: measured candidates are never measured again and count
toward ``trials``; ``trials`` is the total for the workload and hardware.

Tuning builds use FMA contraction (``Target.with_fp_contract()``; a float kernel's rounding may
differ from the unscheduled program's in the last bits, within the workload's tolerance), and so
does ``compile_best``, so the module returned is the program that was measured.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arith import count_ops
from ..ir import (
    PrimFunc,
)
from ..runtime import Module, build
from ..runtime.verify import verify_hardware
from ..schedule import Schedule, Trace
from ..target import Hardware, load
from ..workloads import Workload
from .cost_model import CostModel
from .database import Database
from .evolutionary import EvolutionarySearch, RoundStats, SearchConfig, measured_population
from .space import Candidate, DesignSpace

# A candidate whose check run is this many times slower than the task's best is not timed again
# (Measurer.measure's slow_after): it cannot become the best.
SLOW_FACTOR = 4.0
# At the end of a run the fastest FINALISTS are timed again together, FINALIST_ROUNDS rounds.
FINALISTS = 6
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
    """The outcome of :func:`tune`: the best trace, its latency (seconds) and throughput, and the module."""

    trace: Trace
    latency: float
    throughput: float
    unit: str
    module: Module
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

    @property
    def failed(self) -> int:
        return sum(1 for r in self.records if not r.ok)


class TuneError(RuntimeError):
    """Tuning could not run (bad arguments, an empty design space, no valid candidate)."""


class TuneInputError(TuneError, ValueError):
    """The arguments of :func:`tune` cannot work (the CLI exits with code 2: a mistake in the input)."""


def check_runs_here(hw: Hardware, address: str | None) -> None:
    """TuneError, before anything starts, when the candidates are to be measured on this machine
    (no cluster address) and this CPU cannot run code built for ``hw`` (or ``hw`` is a GPU and this
    machine has no NVIDIA driver)."""
    if hw.kind == "gpu":
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
) -> TuneResult:
    """Tune ``func_or_workload`` for ``hardware`` with ``trials`` measurements in total.

    ``hardware``: a descriptor name ("x86-znver4", "host"), a YAML path or a Hardware.
    ``work_dir``: where the database (and, from the CLI, the curve) lives; reused to resume.
    ``address``: a Ray cluster to join (default: an embedded local one). ``workers``: Ray actors
    for the search's own work (None: one per CPU; 0: in this process). ``timeout_s``: a
    candidate running longer is recorded as failed. ``transfer``: pre-train the cost model on the
    records of other workloads measured on the same hardware, in the work dir's database and in
    the databases ``transfer_from`` names (work dirs, their ``database`` directories or record
    files). Returns the best program found.

    The run holds ``work_dir`` (:mod:`.workdir`): while it goes, another ``tune`` on the same work
    dir raises :class:`~.workdir.WorkDirBusy` (a TuneError) at once, naming this run's pid.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise TuneInputError(f"tune: trials must be a positive integer, got {trials!r}")
    t_start = time.perf_counter()
    func, workload, name = _resolve(func_or_workload)
    hw = load(hardware)
    check_runs_here(hw, address)
    verify_hardware(hw, stacklevel=3)  # a wrong intrinsic is refused here, before any candidate is built
    from .workdir import hold_work_dir

    with hold_work_dir(work_dir):  # WorkDirBusy, before anything starts, when another run holds it
        return _tune(
            func, workload, name, hw, trials, work_dir, seed, address, config, progress, workers, timeout_s, repeat,
            transfer, transfer_from, t_start,
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
    timeout_s: float,
    repeat: int,
    transfer: bool,
    transfer_from: Sequence[str | os.PathLike],
    t_start: float,
) -> TuneResult:
    """:func:`tune`'s run, with the work dir held."""
    from .database import TuningRecord, hardware_key
    from .measure import Measurer, init_ray, ray_started
    from .parallel import LocalEvaluator, RayEvaluator

    config = config or SearchConfig()
    db = Database(work_dir)
    wkey = db.commit_workload(func, name)
    hkey = hardware_key(hw)
    unit = _unit(func)
    ops = workload.flops if workload is not None else count_ops(func)

    def throughput(latency: float) -> float:
        return ops / latency / 1e9 if latency > 0 and math.isfinite(latency) else 0.0

    def stage(text: str, done: int = 0) -> None:
        if progress is not None:
            progress(Progress(done, trials, None, time.perf_counter() - t_start, None, 0, unit, stage=text))

    cost_model = CostModel(seed=seed)
    if transfer:
        stage("pre-training the cost model on other workloads' records")
    transferred = _pretrain(cost_model, db, transfer_from, hw, wkey) if transfer else 0
    stage(f"making the design spaces of {name} for {hw.name}")
    space = DesignSpace(func, hw)
    if not ray_started():
        stage("starting Ray" if address is None else f"joining the Ray cluster at {address}")
    init_ray(address)
    evaluator = LocalEvaluator(space) if workers == 0 else RayEvaluator(space, workers)
    measurer = Measurer(func, hw, workload=workload, address=address, timeout_s=timeout_s, repeat=repeat, seed=seed)
    search = EvolutionarySearch(space, cost_model, config, seed, evaluator)
    try:
        records = db.records(wkey, hkey)
        measured_keys = {r.candidate_key for r in records}
        curve: list[tuple[int, float]] = []
        best = math.inf
        for i, r in enumerate(records):
            best = min(best, r.latency)
            curve.append((i + 1, throughput(best)))
        # resume: the cost model learns from the records measured before
        ok_records = sorted((r for r in records if r.ok), key=lambda r: r.latency)
        measured: list[Candidate] = []
        if records:
            stage(f"resuming from {len(records)} records in {db.dir}", len(records))
            replayed = measured_population(
                space, evaluator, [(Trace.from_json(r.trace).simplified(remove_postproc=True), 0) for r in records]
            )
            by_key = {c.key: c for c in replayed}
            feats = [by_key[r.candidate_key].features for r in records if r.candidate_key in by_key]
            lats = [r.latency for r in records if r.candidate_key in by_key]
            if feats:
                cost_model.update(feats, lats)
            measured = [by_key[r.candidate_key] for r in ok_records if r.candidate_key in by_key]
        stats_all: list[RoundStats] = []
        failed = sum(1 for r in records if not r.ok)
        done = len(records)
        t_loop = time.perf_counter()
        done_at_start = done
        if done < trials:
            stage(
                f"searching the first {'' if done == 0 else 'resumed '}round ({len(space.traces)} design spaces)", done
            )
        while done < trials:
            stats = RoundStats()
            want = min(config.num_trials_per_iter, trials - done)
            # a round that needs fewer candidates than a full batch evolves a smaller population
            search.config = config.replace(
                num_trials_per_iter=want,
                population_size=min(config.population_size, max(8 * want, config.init_min_unmeasured)),
            )
            batch = search.next_batch(measured, measured_keys, stats)
            stats_all.append(stats)
            if not batch:
                if not records:
                    reasons = [space.why_invalid(k, seed) for k in range(len(space.traces))]
                    raise TuneError(
                        f"tune: no sample of the {len(space.traces)} design space(s) of {name} on {hw.name} is a valid "
                        f"program; the first refusal: {next((r for r in reasons if r), 'unknown')}"
                    )
                break  # the design space has nothing left to offer
            new_feats, new_lats = [], []

            def on_result(
                i: int,
                result: Any,
                batch: list[Candidate] = batch,
                new_feats: list = new_feats,
                new_lats: list = new_lats,
            ) -> None:
                nonlocal done, failed, best
                cand = batch[i]
                done += 1
                rec = TuningRecord(
                    workload_key=wkey,
                    hardware_key=hkey,
                    candidate_key=cand.key,
                    trace=cand.trace.as_json_text(),
                    latencies=tuple(result.latencies),
                    error=result.error,
                    build_seconds=result.build_seconds,
                    trial=done,
                    timestamp=time.time(),
                )
                db.commit_record(rec)
                records.append(rec)
                measured_keys.add(cand.key)
                new_feats.append(cand.features)
                new_lats.append(rec.latency)
                if rec.ok:
                    measured.append(cand)
                    best = min(best, rec.latency)
                else:
                    failed += 1
                curve.append((done, throughput(best)))
                if progress is not None:
                    elapsed = time.perf_counter() - t_start
                    # seconds per trial, search included; known once a whole round has been measured
                    rate = (time.perf_counter() - t_loop) / max(done - done_at_start, 1) if len(stats_all) > 1 else None
                    progress(
                        Progress(
                            done,
                            trials,
                            throughput(best) if math.isfinite(best) else None,
                            elapsed,
                            None if rate is None else rate * (trials - done),
                            failed,
                            unit,
                        )
                    )

            t_measure = time.perf_counter()
            slow_after = SLOW_FACTOR * best if math.isfinite(best) else None
            measurer.measure([c.func for c in batch], on_result=on_result, slow_after=slow_after)
            stats.measured = len(batch)
            stats.measure_seconds = time.perf_counter() - t_measure
            cost_model.update(new_feats, new_lats)
            latency_of = {r.candidate_key: r.latency for r in records}
            measured.sort(key=lambda c: latency_of.get(c.key, math.inf))
        ok = [r for r in records if r.ok]
        if not ok:
            raise TuneError(
                f"tune: none of the {len(records)} candidates measured for {name} on {hw.name} ran correctly; "
                f"see the errors in {Path(work_dir) / 'database'}"
            )
        if done > done_at_start:
            stage(f"re-timing the {min(FINALISTS, len(ok))} fastest together", done)
            _retime_finalists(db, measurer, measured, wkey, hkey)
        best_rec = db.best(wkey, hkey)[0]
        trace = Trace.from_json(best_rec.trace)
        module = _build(func, hw, trace)
        return TuneResult(
            trace=trace,
            latency=db.latency(best_rec),
            throughput=throughput(db.latency(best_rec)),
            unit=unit,
            module=module,
            workload_key=wkey,
            hardware_key=hkey,
            trials=len(records),
            curve=curve,
            records=list(records),
            wall_seconds=time.perf_counter() - t_start,
            work_dir=Path(work_dir),
            name=name,
            search_stats=stats_all,
            transferred=transferred,
        )
    finally:
        measurer.close()
        evaluator.close()


def _retime_finalists(db: Database, measurer: Any, measured: list[Candidate], wkey: str, hkey: str) -> None:
    """Time the ``FINALISTS`` fastest candidates again, ``FINALIST_ROUNDS`` rounds interleaved,
    and record it: the best is then chosen under the same noise, not by one lucky batch.

    On the shared 2-vCPU machine, one candidate's tuner latency and a later timing differed by up
    to 35%, both ways (float32 C2D:2: the tuner's best, 1.26 ms, re-timed at 1.4-1.7 ms; its third,
    1.42 ms, at 1.13-1.21 ms)."""
    by_key = {c.key: c for c in measured}
    finalists = [r for r in db.best(wkey, hkey, FINALISTS) if r.candidate_key in by_key]
    if len(finalists) < 2:
        return
    samples = measurer.retime([by_key[r.candidate_key].func for r in finalists], FINALIST_ROUNDS)
    for rec, lats in zip(finalists, samples, strict=True):
        db.commit_retiming(wkey, hkey, rec.candidate_key, lats)


def _pretrain(
    cost_model: CostModel, db: Database, sources: Sequence[str | os.PathLike], hw: Hardware, wkey: str
) -> int:
    """Pre-train ``cost_model`` on other workloads' records of hardware ``hw`` in ``db`` and in
    the databases at ``sources``; returns how many records it learned from."""
    from .cost_model import transfer_data
    from .database import Database, DatabaseError

    if isinstance(sources, str | os.PathLike):
        sources = [sources]
    dbs = [db]
    for path in sources:
        try:
            dbs.append(Database.open_existing(path))
        except DatabaseError as err:
            raise TuneError(f"tune: transfer_from: {err}") from None
    return cost_model.pretrain(transfer_data(dbs, hw, wkey))


def _build(func: PrimFunc, hw: Hardware, trace: Trace) -> Module:
    sch = Schedule(func, check=False, hardware=hw)
    trace.apply(sch)
    return build(sch.func, hw.with_fp_contract())


def compile_best(
    func: PrimFunc | Workload, hardware: Hardware | str | os.PathLike, work_dir: str | os.PathLike
) -> Module:
    """The compiled module of the best record of ``func`` (a PrimFunc or workload) for ``hardware``
    in ``work_dir``'s database; TuneError when there is none."""
    from .database import Database, hardware_key, workload_key

    func, _, name = _resolve(func)
    hw = load(hardware)
    db = Database(work_dir)
    best = db.best(workload_key(func), hardware_key(hw), 1)
    if not best:
        raise TuneError(f"compile_best: {work_dir} holds no successful record of {name} for hardware {hw.name}")
    return _build(func, hw, Trace.from_json(best[0].trace))
