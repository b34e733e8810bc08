"""``tune_model``: one trial budget spent over every task of a model (MetaSchedule's task scheduler).

::

    import tensorsearch as ts
    result = ts.tune_model("resnet50.onnx", "host", trials=2000, work_dir="runs/resnet50")
    print(result.table())         # task, weight, FLOPs, trials, best latency, share of model time
    result.estimated_latency      # sum over the tasks of weight x best latency, seconds
    result.model_latency          # the model compiled with the best records, timed at the end
    exe = ts.compile_model("resnet50.onnx", "host", work_dir="runs/resnet50")

**Allocation.** Rounds of at most ``num_trials_per_iter`` (64) trials, each given to one task.
First every task gets one round, in the model's order (with a budget too small for full rounds,
the first rounds share what is left). Then ``strategy="round-robin"`` goes on cycling, and
``strategy="gradient"`` (the default) gives the round to the task whose next trials are
expected to cut the model's latency most: TVM MetaSchedule's ``GradientBased`` scheduler (from
Ansor, OSDI 2020, section 6). With ``b_1 .. b_n`` the task's best latency after each of its
rounds and ``w`` its weight (how many times the model runs it)::

    backward = (b_{n-window} - b_n) / window     # the recent gain per round; 0 while n <= window
    forward  = b_n / n                           # optimistic: another round gains an average round's share
    gradient = w * (alpha * backward + (1 - alpha) * forward)       # alpha 0.2, window 3 (TVM's)

A task none of whose candidates has run yet scores lowest; equal scores are broken at random
(seeded). A task whose design space has nothing new left, or that has no valid program, stops.

**Several tasks at once.** ``concurrent_tasks=K`` runs the rounds of up to K tasks at the same
time (a thread each in this process): each has its own search actors, spread over the nodes,
and its own builds; all time their candidates through the one runner pool, a candidate at a
time on a node. A round is chosen as above among the tasks not in flight, and the budget counts
the trials the rounds in flight may still take. While one task's candidates are timed on a node
another's search and builds may run there: on a cluster, label the nodes that time
``tensorsearch.role=timing`` and they get no builds nor search actors (:mod:`.measure.measurer`). With
one task at a time (the default), a node never builds nor searches while it times.

**What is shared.** One database (records keyed by task and hardware, as :func:`~.tuner.tune`
writes them, so ``tune`` and ``compile_model`` read the same records) and one cost model for
all tasks (each task's latencies normalized by its own best; pre-trained on the records of
other workloads of the same hardware, so a new task starts warm). One runner pool (a runner per
node) times every task's candidates; a task's search actors live while its rounds run and are
replaced when another task's round starts.

**Files** in ``work_dir``: ``database/``; ``logs/scheduler.log`` (each round: task, why it was
chosen, trials, best latency, estimated model latency); ``logs/tasks/NN-name.log`` (each
round of one task); at the end ``tasks.csv`` and ``tasks.md`` (the table) and
``model_curve.csv`` / ``model_curve.png`` (the estimated model latency against trials, with the
measured one). Running again with the same work dir resumes: every task's records count toward
``trials``, and each task's round history is rebuilt from its records.
"""

from __future__ import annotations

import csv
import math
import os
import random
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...ir import PrimFunc
from ...schedule import ScheduleError
from ...target import Hardware, load
from ...workloads import Workload
from ..cost_model.model import CostModel
from ..database import Database, workload_key
from ..measure.cluster import init_ray, ray_started, resolve_address
from ..measure.config import MeasureConfig, measure_config
from ..measure.measurer import Measurer
from ..measure.noise import LATENCY_STATISTIC, HostConditions
from ..measure.pool import RunnerPool
from ..model import compile_model, model_tasks
from ..report import format_markdown_table, format_table, write_latency_curve_png
from ..space.rule import SearchSpaceError
from ..strategy.evolutionary import SearchConfig
from .errors import TuneError, TuneInputError
from .tuner import Evaluator, HostBusyWarning, TaskSearch, check_runs_here, pretrain
from .workdir import hold_work_dir

__all__ = ["STRATEGIES", "ModelProgress", "ModelTuneResult", "TaskRow", "tune_model"]

STRATEGIES = ("gradient", "round-robin")
ALPHA = 0.2  # weight of the backward (measured) gradient against the forward (optimistic) one
WINDOW = 3  # rounds over which the backward gradient is taken
STOP_WAIT_S = 30.0  # how long an interrupted run with concurrent tasks waits for its threads to end
TABLE_COLUMNS = ("#", "task", "weight", "MFLOPs", "trials", "best ms", "weight x best ms", "share", "status")


@dataclass(frozen=True)
class TaskRow:
    """One task in :class:`ModelTuneResult`: ``best_latency`` in seconds (``math.inf`` when none
    ran); ``status`` is "tuned", or why the task was not (its space refused, nothing ran)."""

    name: str
    key: str
    weight: int
    flops: int
    trials: int
    best_latency: float
    status: str


@dataclass
class ModelTuneResult:
    """What :func:`tune_model` found: a row per task, the curve of the estimated model latency
    (sum of weight x best latency, seconds) against trials, and the compiled model's latency."""

    tasks: list[TaskRow]
    curve: list[tuple[int, float]]
    estimated_latency: float | None
    model_latency: float | None
    trials: int
    wall_seconds: float
    work_dir: Path
    strategy: str
    rounds: list[int] = field(default_factory=list)  # the task index of each round run by this call
    round_spans: list[tuple[float, float]] = field(default_factory=list)  # each round's start and end (time.time())
    host: HostConditions = field(default_factory=lambda: HostConditions.of([]))  # how busy the host was, all tasks

    def share(self, task: TaskRow) -> float | None:
        """The task's weight x best latency over the estimated model latency (None: unknown)."""
        if not math.isfinite(task.best_latency) or not self.estimated_latency:
            return None
        return task.weight * task.best_latency / self.estimated_latency

    def rows(self) -> list[tuple[Any, ...]]:
        """The table's rows (``TABLE_COLUMNS``)."""
        out = []
        for n, t in enumerate(self.tasks):
            ok = math.isfinite(t.best_latency)
            share = "" if self.share(t) is None else f"{100 * self.share(t):.1f}%"
            best = f"{t.best_latency * 1e3:.4g}" if ok else ""
            total = f"{t.weight * t.best_latency * 1e3:.4g}" if ok else ""
            out.append((n, t.name, t.weight, f"{t.flops / 1e6:.2f}", t.trials, best, total, share, t.status))
        return out

    def table(self) -> str:
        """The per-task table as plain text, with the estimated and measured model latency below."""
        lines = [format_table(self.rows(), TABLE_COLUMNS)]
        lines.append(f"estimated model latency (sum of weight x best): {_ms(self.estimated_latency)}")
        if self.model_latency is not None:
            lines.append(f"measured model latency (compiled with the best records): {_ms(self.model_latency)}")
        lines.append(f"best latencies: the fastest timed repeat ({LATENCY_STATISTIC}); {self.host.line()}")
        return "\n".join(lines)


@dataclass
class ModelProgress:
    """Passed to ``tune_model``'s ``progress`` callback after each round, and before each step
    that takes a while (``stage`` says what); ``task`` is the index of the round's task."""

    trials_done: int
    trials_total: int
    estimated_latency: float | None
    elapsed_s: float
    round: int = 0
    task: int | None = None
    task_name: str = ""
    task_best: float | None = None
    stage: str | None = None
    failed: int = 0  # candidates of the round that failed
    first_error: str | None = None  # what the first of them says


@dataclass
class TaskEntry:
    """A task to tune: its function (and workload, for its own reference), name and weight."""

    name: str
    func: PrimFunc
    weight: int
    flops: int | None = None
    workload: Workload | None = None


class TaskState:
    """A task's :class:`TaskSearch` (None when its design space refused), its round history and log."""

    def __init__(self, index: int, entry: TaskEntry, search: TaskSearch | None, status: str, log: Path) -> None:
        self.index, self.entry, self.search, self.status, self.log = index, entry, search, status, log
        self.alive = search is not None
        self.history: list[float] = []  # best latency after each round
        self.reference: Any = None  # the measurer's inputs and expected outputs, computed once
        if search is not None:  # a resumed task's rounds, rebuilt from its records
            per = search.config.num_trials_per_iter
            best = math.inf
            for i, r in enumerate(search.records):
                best = min(best, r.latency)
                if (i + 1) % per == 0 or i + 1 == len(search.records):
                    self.history.append(best)
            if search.records:  # the best as re-timed at the end of the last run
                search.best = self.history[-1] = search.best_latency()

    @property
    def trials(self) -> int:
        return len(self.search.records) if self.search is not None else 0

    @property
    def best(self) -> float:
        return self.search.best if self.search is not None else math.inf

    def gradient(self, alpha: float, window: int) -> float:
        n = len(self.history)
        best = self.history[-1] if n else math.inf
        if not math.isfinite(best):
            return -1e9
        backward = (self.history[n - 1 - window] - best) / window if n >= 1 + window else 0.0
        forward = best / n
        return self.entry.weight * (alpha * backward + (1 - alpha) * forward)

    def write_log(self, line: str) -> None:
        _append_log(self.log, line)


def _append_log(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.4g} ms"


def _file_name(index: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    return f"{index:02d}-{safe}.log"


def _entries(model: Any, input_shapes: Mapping[str, Any] | None, layout: str) -> tuple[list[TaskEntry], Any]:
    """The tasks to tune and the graph (None when tasks were given)."""
    from ...graph.fuse import Task

    if isinstance(model, Sequence) and not isinstance(model, str | bytes):
        entries = []
        for n, t in enumerate(model):
            if isinstance(t, Task):
                entries.append(TaskEntry(t.name, t.func, t.weight, t.flops))
            elif isinstance(t, Workload):
                entries.append(TaskEntry(t.key, t.func, 1, t.flops, t))
            else:
                raise TuneInputError(
                    f"tune_model: task {n} is a {type(t).__name__}; give graph Tasks "
                    "(tensorsearch.graph.extract_tasks) or workloads (tensorsearch.workloads.get)"
                )
        if not entries:
            raise TuneInputError("tune_model: the task list is empty")
        return entries, None

    graph, _, tasks = model_tasks(model, input_shapes=input_shapes, layout=layout)
    return [TaskEntry(t.name, t.func, t.weight, t.flops) for t in tasks], graph


def tune_model(
    model: Any,
    hardware: Hardware | str | os.PathLike,
    trials: int,
    work_dir: str | os.PathLike,
    *,
    strategy: str = "gradient",
    seed: int = 0,
    address: str | None = None,
    config: SearchConfig | None = None,
    progress: Callable[[ModelProgress], None] | None = None,
    workers: int | None = None,
    timeout_s: float = 10.0,
    repeat: int = 3,
    flush_cache: bool = False,
    transfer: bool = True,
    input_shapes: Mapping[str, Any] | None = None,
    layout: str = "NHWC",
    measure_model: bool = True,
    alpha: float = ALPHA,
    window: int = WINDOW,
    concurrent_tasks: int = 1,
    allow_other_cpu: bool = False,
    measure: MeasureConfig | None = None,
) -> ModelTuneResult:
    """Tune every task of ``model`` for ``hardware`` with ``trials`` measurements in all.

    ``model``: a :class:`~tensorsearch.graph.Graph`, an ONNX path or ``ModelProto``, or a list of
    tasks (``tensorsearch.graph.Task`` or workloads). ``strategy``: "gradient" or "round-robin"
    (see the module docstring). ``measure_model``: when a model (not a task list) is given and
    this machine runs ``hardware``, compile it with the best records and time it at the end.
    ``flush_cache``: time every call after flushing the caches (:class:`~.measurer.Measurer`), as
    a kernel runs inside the model. ``concurrent_tasks``: how many tasks' rounds run at once (see
    the module docstring). The other arguments (``allow_other_cpu`` and ``measure`` among them) are
    :func:`~.tuner.tune`'s. The work dir is held for the whole run.
    """
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise TuneInputError(f"tune_model: trials must be a positive integer, got {trials!r}")
    if strategy not in STRATEGIES:
        raise TuneInputError(f"tune_model: strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not 0.0 <= alpha <= 1.0 or window < 1:
        raise TuneInputError(f"tune_model: alpha must be in [0, 1] and window at least 1, got {alpha}, {window}")
    if isinstance(concurrent_tasks, bool) or not isinstance(concurrent_tasks, int) or concurrent_tasks < 1:
        raise TuneInputError(f"tune_model: concurrent_tasks must be a positive integer, got {concurrent_tasks!r}")

    try:
        measure = measure_config(
            measure, timeout_s=timeout_s, repeat=repeat, flush_cache=flush_cache, allow_other_cpu=allow_other_cpu
        )
    except ValueError as e:
        raise TuneInputError(f"tune_model: {e}") from None

    t_start = time.perf_counter()
    hw = load(hardware)
    address = resolve_address(address)
    check_runs_here(hw, address, measure.allow_other_cpu)
    entries, graph = _entries(model, input_shapes, layout)

    with hold_work_dir(work_dir):
        run = ModelRun(entries, hw, trials, Path(work_dir), strategy, seed, config or SearchConfig(), progress)
        run.alpha, run.window, run.t_start, run.concurrent = alpha, window, t_start, concurrent_tasks
        run.allow_other_cpu = measure.allow_other_cpu
        run.start(transfer)
        run.tune(address, workers, measure)
        model_latency = None
        if graph is not None and measure_model and hw.runs_here:
            run.stage("compiling the model with the best records and timing it")
            model_latency = _time_model(model, hw, work_dir, input_shapes, layout, seed)
        return run.finish(model_latency)


class ModelRun:
    """:func:`tune_model`'s state: the tasks, the shared cost model and database, the rounds."""

    def __init__(
        self,
        entries: list[TaskEntry],
        hw: Hardware,
        trials: int,
        work_dir: Path,
        strategy: str,
        seed: int,
        config: SearchConfig,
        progress: Callable[[ModelProgress], None] | None,
    ) -> None:
        self.entries, self.hw, self.trials, self.work_dir = entries, hw, trials, work_dir
        self.strategy, self.seed, self.config, self.progress = strategy, seed, config, progress
        self.rng = random.Random(seed)
        self.db = Database(work_dir)
        self.cost_model = CostModel(seed=seed)
        self.tasks: list[TaskState] = []
        self.rounds: list[int] = []
        self.round_spans: list[tuple[float, float]] = []
        self.curve: list[tuple[int, float]] = []
        self.alpha, self.window, self.t_start = ALPHA, WINDOW, time.perf_counter()
        self.concurrent = 1  # rounds of this many tasks at once
        self.allow_other_cpu = False  # the runners time on nodes whose CPU is not the descriptor's too
        self.lock = threading.RLock()  # the rounds' threads change the state below under it
        self.changed = threading.Condition(self.lock)  # notified when a round ends
        # the rounds in flight: task index -> (trials reserved, the task's trials, time.time()) then
        self.in_flight: dict[int, tuple[int, int, float]] = {}
        self.stopping = False
        self._pool: Any = None
        (work_dir / "logs" / "tasks").mkdir(parents=True, exist_ok=True)
        self.log = work_dir / "logs" / "scheduler.log"

    # ------------------------------------------------------------------------------------
    def stage(self, text: str) -> None:
        self.write_log(text)
        if self.progress is not None:
            self.progress(ModelProgress(self.done, self.trials, self.estimate(), self.elapsed, stage=text))

    def write_log(self, line: str) -> None:
        _append_log(self.log, line)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    @property
    def done(self) -> int:
        return sum(t.trials for t in self.tasks)

    def estimate(self) -> float | None:
        """Sum of weight x best latency over the tasks that can be tuned; None until each has run."""
        live = [t for t in self.tasks if t.search is not None and t.status == "tuned"]
        if len(self.tasks) < len(self.entries) or not live or any(not math.isfinite(t.best) for t in live):
            return None
        return sum(t.entry.weight * t.best for t in live)

    # ------------------------------------------------------------------------------------
    def start(self, transfer: bool) -> None:
        """Make every task's design space, resume its records, and pre-train the cost model."""
        self.write_log(
            f"tune_model: {len(self.entries)} tasks on {self.hw.name}, {self.trials} trials, {self.strategy}"
        )
        if transfer:
            self.stage("pre-training the cost model on other workloads' records")
            keys = {workload_key(e.func) for e in self.entries}
            pretrain(self.cost_model, self.db, (), self.hw, keys)
        for n, e in enumerate(self.entries):
            self.stage(f"making the design spaces of task {n + 1}/{len(self.entries)} ({e.name})")
            log = self.work_dir / "logs" / "tasks" / _file_name(n, e.name)
            try:
                search = TaskSearch(
                    e.func, e.workload, e.name, self.hw, self.db, self.cost_model, self.config, self.seed
                )
                state = TaskState(n, e, search, "tuned", log)
            except (SearchSpaceError, ScheduleError, ValueError) as err:
                state = TaskState(n, e, None, f"not tunable: {err}".splitlines()[0][:200], log)
                state.write_log(state.status)
                self.write_log(f"task {n} {e.name}: {state.status}")
            if e.flops is None:
                e.flops = state.search.ops if state.search is not None else 0
            self.tasks.append(state)
        resumed = [t for t in self.tasks if t.trials]
        if resumed:
            self.write_log(f"resuming: {self.done} records of {len(resumed)} tasks")
        self.curve = self._past_curve()

    def _past_curve(self) -> list[tuple[int, float]]:
        """The estimate after each record already in the database, in the order they were
        measured (from the first trial at which every task that can be tuned had a best)."""
        live = [t for t in self.tasks if t.search is not None]
        events = sorted((r.timestamp, n, r.latency) for n, t in enumerate(live) for r in t.search.records)
        best = [math.inf] * len(live)
        curve = []
        for done, (_, n, latency) in enumerate(events, 1):
            best[n] = min(best[n], latency)
            if all(math.isfinite(b) for b in best):
                curve.append((done, sum(t.entry.weight * b for t, b in zip(live, best, strict=True))))
        return curve

    def tune(self, address: str | None, workers: int | None, measure: MeasureConfig) -> None:
        """Run rounds until the budget is spent or no task can go on (``concurrent`` tasks at a
        time); then time each tuned task's finalists again together."""
        if self.done < self.trials:
            if not ray_started():
                self.stage("starting Ray" if address is None else f"joining the Ray cluster at {address}")
            init_ray(address)

        def active() -> _Active:
            return _Active(self.hw, address, workers, measure, self.pool)

        try:
            if self.concurrent == 1:
                self.run_rounds(active())
            else:
                self.write_log(f"rounds of up to {self.concurrent} tasks at once")
                self.run_concurrently(active)
            final = active()
            try:
                for task in self.tasks:
                    if task.index in self.rounds and task.search is not None and len(task.search.ok_records) > 1:
                        self.stage(f"re-timing the fastest candidates of task {task.index} ({task.entry.name})")
                        _, measurer = final.switch(task, with_evaluator=False)
                        task.search.retime_finalists(measurer)
                        task.search.best = task.search.best_latency()
            finally:
                final.close_task()
        finally:
            if self._pool is not None:
                self._pool.close()

    def pool(self) -> Any:
        """The runners (one per node), started at first use, shared by every thread's measurers."""
        with self.lock:
            if self._pool is None:
                self._pool = RunnerPool(self.hw, self.seed, self.allow_other_cpu)
            return self._pool

    def run_concurrently(self, make_active: Callable[[], _Active]) -> None:
        """:meth:`run_rounds` in ``concurrent`` threads. An error in one (or Ctrl-C here) stops
        them all: the rounds in flight end within seconds, keeping what they measured."""
        errors: list[BaseException] = []
        actives = [make_active() for _ in range(self.concurrent)]

        def work(active: _Active) -> None:
            try:
                self.run_rounds(active)
            except BaseException as err:  # handed to the caller's thread below
                if not self.stopping:  # (what stopping makes a thread raise is no error)
                    errors.append(err)
                self.stop(actives)

        threads = [
            threading.Thread(target=work, args=(a,), name=f"tune_model-{k}", daemon=True) for k, a in enumerate(actives)
        ]
        for t in threads:
            t.start()
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except BaseException:
            self.stop(actives)
            deadline = time.monotonic() + STOP_WAIT_S
            for t in threads:  # so that no thread uses Ray or the work dir once this returns
                t.join(max(0.0, deadline - time.monotonic()))
            raise
        if errors:
            raise errors[0]

    def stop(self, actives: Sequence[_Active] = ()) -> None:
        """Start no new round, and make the rounds in flight end: their measurements and searches
        raise (MeasureStopped, SearchStopped) within seconds."""
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
            if self._pool is not None:
                self._pool.stop()
        for active in actives:
            if active.evaluator is not None:
                active.evaluator.close()

    def run_rounds(self, active: _Active) -> None:
        """Take rounds (:meth:`reserve`) and run them until none is left for this thread."""
        try:
            while (picked := self.reserve()) is not None:
                task, why, limit = picked
                try:
                    evaluator, measurer = active.switch(task, with_evaluator=True)
                    if self.stopping:
                        return
                    assert evaluator is not None  # asked for
                    self.run_round(task, why, limit, evaluator, measurer)
                finally:
                    with self.changed:
                        del self.in_flight[task.index]
                        self.changed.notify_all()
        finally:
            active.close_task()

    def reserve(self) -> tuple[TaskState, str, int] | None:
        """The next round's task, why it was chosen and its trials, marked in flight; None when
        the budget is spent or no task can go on. Waits while only rounds in flight could change that."""
        with self.changed:
            while not self.stopping:
                left = self.trials - self.done - self.outstanding()
                task, why = self.next_task() if left > 0 else (None, "")
                if task is not None:
                    waiting = sum(1 for t in self.tasks if t.alive and not t.history and t.index not in self.in_flight)
                    first = max(1, left // max(waiting, 1))
                    limit = min(self.config.num_trials_per_iter, left if task.history else first)
                    self.in_flight[task.index] = (limit, task.trials, time.time())
                    return task, why, limit
                if not self.in_flight:
                    return None
                self.changed.wait(1.0)
            return None

    def outstanding(self) -> int:
        """The trials the rounds in flight may still measure."""
        return sum(max(0, limit - (self.tasks[i].trials - had)) for i, (limit, had, _) in self.in_flight.items())

    def next_task(self) -> tuple[TaskState | None, str]:
        """The task of the next round and why it was chosen (None when no task can go on)."""
        alive = [t for t in self.tasks if t.alive and t.index not in self.in_flight]
        if not alive:
            return None, ""
        first = [t for t in alive if not t.history]
        if first:
            return first[0], "first round"
        if self.strategy == "round-robin":
            last = self.rounds[-1] if self.rounds else -1
            after = [t for t in alive if t.index > last]
            return (after or alive)[0], "round robin"
        grads = [t.gradient(self.alpha, self.window) for t in alive]
        top, low = max(grads), min(grads)
        if top == low:
            return self.rng.choice(alive), f"equal gradients ({top:.3g} s), drawn at random"
        pick = alive[grads.index(top)]
        return pick, f"largest gradient {top:.3g} s (window {self.window}, alpha {self.alpha})"

    def run_round(self, task: TaskState, why: str, limit: int, evaluator: Evaluator, measurer: Measurer) -> None:
        search = task.search
        assert search is not None
        t0, started = time.perf_counter(), self.in_flight[task.index][2]
        try:
            measured = search.run_round(limit, evaluator, measurer)
        except TuneError as err:
            with self.lock:
                task.alive, task.status = False, f"no valid program: {err}".splitlines()[0][:200]
                task.history.append(math.inf)
                task.write_log(task.status)
                self.write_log(f"round {len(self.rounds) + 1}: task {task.index} {task.entry.name}: {task.status}")
            return
        with self.lock:
            self.rounds.append(task.index)
            self.round_spans.append((started, time.time()))
            self.end_round(task, why, measured, t0)

    def end_round(self, task: TaskState, why: str, measured: int, t0: float) -> None:
        """Under the lock: whether the task goes on, its history, the logs, the curve, progress."""
        search = task.search
        assert search is not None
        if measured == 0:
            task.alive = False
            task.write_log("the design space has nothing new left; the task stops")
        elif not search.ok_records and len(search.records) >= 2 * self.config.num_trials_per_iter:
            task.alive, task.status = False, "no candidate ran correctly"
        elif search.ok_records and not any(r.ranks for r in search.ok_records):  # nor would more rounds
            task.alive = False
            task.status = f"checked under qemu only: no node runs {search.hw.arch} code natively"
        task.history.append(search.best)
        stats = search.stats[-1]
        errors = [r.error for r in search.records[len(search.records) - measured :] if not r.ok]
        failed = f"; {len(errors)} failed, the first: {errors[0]}" if errors else ""
        line = (
            f"round {len(self.rounds)}: {measured} trials ({why}); task best {_ms(search.best)} after "
            f"{task.trials} trials; search {stats.search_seconds:.1f} s, measure {stats.measure_seconds:.1f} s, "
            f"round {time.perf_counter() - t0:.1f} s{failed}"
        )
        task.write_log(line)
        estimate = self.estimate()
        self.write_log(
            f"round {len(self.rounds)}: task {task.index} {task.entry.name} ({why}): {measured} trials, best "
            f"{_ms(search.best)}; estimated model latency {_ms(estimate)}; {self.done}/{self.trials} trials{failed}"
        )
        if estimate is not None:
            self.curve.append((self.done, estimate))
        if self.progress is not None:
            self.progress(
                ModelProgress(
                    self.done, self.trials, estimate, self.elapsed, len(self.rounds), task.index, task.entry.name,
                    search.best if math.isfinite(search.best) else None, failed=len(errors),
                    first_error=errors[0] if errors else None,
                )
            )  # fmt: skip

    # ------------------------------------------------------------------------------------
    def finish(self, model_latency: float | None) -> ModelTuneResult:
        rows = []
        for t in self.tasks:
            best = t.search.best_latency() if t.search is not None else math.inf
            status = "not tuned yet" if t.status == "tuned" and not t.trials else t.status
            e = t.entry
            rows.append(
                TaskRow(e.name, t.search.wkey if t.search else "", e.weight, e.flops or 0, t.trials, best, status)
            )
        estimate = self.estimate()
        host = HostConditions.of([r.disturbance for t in self.tasks if t.search for r in t.search.records if r.ranks])
        result = ModelTuneResult(
            rows, list(self.curve), estimate, model_latency, self.done, self.elapsed, self.work_dir, self.strategy,
            list(self.rounds), list(self.round_spans), host,
        )  # fmt: skip
        if (busy := host.warning()) is not None:
            warnings.warn(f"tune_model: {busy}", HostBusyWarning, stacklevel=3)
        _write_outputs(result)
        self.write_log(
            f"done: {self.done} trials in {len(self.rounds)} rounds; estimated {_ms(estimate)}, "
            f"measured {_ms(model_latency)}"
        )
        return result


class _Active:
    """The search actors and the measurer of the task whose rounds a thread runs now (one task
    at a time); the runners come from the run's shared pool."""

    def __init__(
        self, hw: Hardware, address: str | None, workers: int | None, measure: MeasureConfig, pool: Callable[[], Any]
    ) -> None:
        self.hw, self.address, self.workers, self.measure, self.pool = hw, address, workers, measure, pool
        self.task: TaskState | None = None
        self.evaluator: Evaluator | None = None
        self.measurer: Measurer | None = None

    def switch(self, task: TaskState, with_evaluator: bool) -> tuple[Evaluator | None, Measurer]:
        """The task's evaluator (None unless ``with_evaluator``) and measurer, started if needed."""
        search = task.search
        assert search is not None
        if self.task is not task:
            self.close_task()
            self.task = task
            self.measurer = Measurer(
                search.func, self.hw, workload=search.workload, address=self.address, seed=self.pool().seed,
                reference=task.reference, pool=self.pool(), config=self.measure,
            )  # fmt: skip
            task.reference = self.measurer.reference
        if with_evaluator and self.evaluator is None:
            self.evaluator = search.evaluator(self.workers)
        assert self.measurer is not None
        return self.evaluator, self.measurer

    def close_task(self) -> None:
        for part in (self.measurer, self.evaluator):
            if part is not None:
                part.close()
        self.task, self.evaluator, self.measurer = None, None, None


def _time_model(
    model: Any, hw: Hardware, work_dir: str | os.PathLike, input_shapes: Any, layout: str, seed: int
) -> float:
    """Median seconds of one run of the model compiled with the work dir's best records."""
    exe = compile_model(model, hw, work_dir, input_shapes=input_shapes, layout=layout)
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in exe.graph.inputs:
        dt = np.dtype(v.dtype)
        # floats N(0, 1); integers (token ids, masks) 0, a valid index of any table
        feeds[v.name] = rng.standard_normal(v.shape).astype(dt) if dt.kind == "f" else np.zeros(v.shape, dt)
    return statistics.median(exe.time(repeat=10, **feeds))


def _write_outputs(result: ModelTuneResult) -> None:
    """tasks.csv, tasks.md, model_curve.csv and model_curve.png in the work dir."""
    d = result.work_dir
    with open(d / "tasks.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["task", "key", "weight", "flops", "trials", "best_latency_s", "share", "status"])
        for t in result.tasks:
            ok = math.isfinite(t.best_latency)
            share = "" if result.share(t) is None else f"{result.share(t):.4f}"
            w.writerow(
                [t.name, t.key, t.weight, t.flops, t.trials, f"{t.best_latency:.6g}" if ok else "", share, t.status]
            )
    md = [
        f"# Tuned tasks ({result.strategy}, {result.trials} trials, {result.wall_seconds:.0f} s)",
        "",
        format_markdown_table(result.rows(), TABLE_COLUMNS),
        "",
        f"- estimated model latency (sum of weight x best): {_ms(result.estimated_latency)}",
        f"- measured model latency: {_ms(result.model_latency)}",
        "",
    ]
    (d / "tasks.md").write_text("\n".join(md))
    with open(d / "model_curve.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trials", "estimated_latency_s"])
        w.writerows((n, f"{s:.6g}") for n, s in result.curve)
    write_latency_curve_png(
        d / "model_curve.png", result.curve, result.model_latency, f"estimated model latency ({result.strategy})"
    )
