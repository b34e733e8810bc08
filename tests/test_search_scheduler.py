"""``tune_model``: one budget over a model's tasks (round robin first, then gradient-based).

The allocation is tested on hand-made round histories; the whole run on a two-task ONNX model
and on workload lists, with real builds and measurements on one Ray session for the file.
"""

from __future__ import annotations

import csv
import itertools
import math

import numpy as np
import pytest
from graph_util import model
from onnx import helper

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.search import Database, SearchConfig, TuneError, hardware_key, workload_key
from tensorsearch.search.model import model_tasks
from tensorsearch.search.tuning.scheduler import ModelRun, TaskEntry, TaskState, tune_model

HOST = hardware.load("host")
SMALL = SearchConfig(population_size=8, init_min_unmeasured=8, genetic_num_iters=1, num_trials_per_iter=4)


@pytest.fixture(autouse=True)
def ray_session(request):
    """Ray for the tests that tune (the slow ones); the fast tier's tests here start none."""
    if request.node.get_closest_marker("slow") is not None:
        from tensorsearch.search.measure.cluster import init_ray

        init_ray()  # once per process: later calls return at once
    yield


def _two_task_model():
    """x[8,32] -> MatMul+Relu -> MatMul+Relu (the same task: weight 2) -> MatMul -> y[8,16]."""
    rng = np.random.default_rng(7)

    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("MatMul", ["b", "w2"], ["c"]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("MatMul", ["d", "w3"], ["y"]),
    ]
    return model(nodes, {"x": ("float32", [8, 32])}, ["y"], {"w1": w(32, 32), "w2": w(32, 32), "w3": w(32, 16)})


# ------------------------------------------------------------------------------------------
# allocation, on hand-made histories


def _state(index: int, weight: int, history: list[float]) -> TaskState:
    entry = TaskEntry(f"t{index}", func=None, weight=weight)  # type: ignore[arg-type]
    state = TaskState(index, entry, None, "tuned", log=None)  # type: ignore[arg-type]
    state.alive, state.history = True, list(history)
    return state


def _run(strategy: str, states: list[TaskState]) -> ModelRun:
    run = ModelRun.__new__(ModelRun)
    run.strategy, run.tasks, run.rounds, run.alpha, run.window = strategy, states, [], 0.2, 3
    run.in_flight = {}
    run.entries = [s.entry for s in states]
    import random

    run.rng = random.Random(0)
    return run


def test_gradient_is_tvms_formula():
    # n = 5 rounds, window 3: backward = (b[n-1-3] - b[n-1]) / 3 = (8 - 5) / 3; forward = 5 / 5
    s = _state(0, 2, [10.0, 8.0, 7.0, 6.0, 5.0])
    assert s.gradient(0.2, 3) == pytest.approx(2 * (0.2 * (8.0 - 5.0) / 3 + 0.8 * 5.0 / 5))
    # at most window rounds: no backward term yet
    assert _state(0, 1, [4.0, 3.0]).gradient(0.2, 3) == pytest.approx(0.8 * 3.0 / 2)
    assert _state(0, 1, [math.inf]).gradient(0.2, 3) == -1e9  # nothing ran: last


def test_every_task_gets_a_first_round_in_order_then_the_largest_gradient():
    states = [_state(0, 1, [1.0]), _state(1, 1, []), _state(2, 1, [])]
    run = _run("gradient", states)
    assert run.next_task() == (states[1], "first round")
    states[1].history, states[2].history = [3.0], [2.0]
    task, why = run.next_task()
    assert task is states[1] and why.startswith("largest gradient")
    states[2].entry.weight = 10  # 10 x 2.0 beats 1 x 3.0: the weight counts
    assert run.next_task()[0] is states[2]
    states[2].alive = False
    assert run.next_task()[0] is states[1]
    for s in states:
        s.alive = False
    assert run.next_task() == (None, "")


def test_round_robin_cycles_after_the_last_round():
    states = [_state(i, 1, [1.0]) for i in range(3)]
    run = _run("round-robin", states)
    picks = []
    for _ in range(5):
        task, why = run.next_task()
        assert why == "round robin"
        picks.append(task.index)
        run.rounds.append(task.index)
    assert picks == [0, 1, 2, 0, 1]


def test_equal_gradients_are_drawn_at_random_with_the_seed():
    states = [_state(i, 1, [2.0]) for i in range(4)]
    picks = [_run("gradient", states).next_task()[0].index for _ in range(2)]
    assert picks[0] == picks[1]  # the same seed draws the same task
    assert "drawn at random" in _run("gradient", states).next_task()[1]


# ------------------------------------------------------------------------------------------
# whole runs


@pytest.mark.slow
def test_tune_model_spends_one_budget_over_the_tasks_and_resumes(tmp_path):
    proto = _two_task_model()
    _, _, tasks = model_tasks(proto)
    assert [t.weight for t in tasks] == [2, 1]
    result = tune_model(proto, HOST, 12, tmp_path, config=SMALL, workers=0)
    db = Database(tmp_path)
    counts = [len(db.records(t.key, hardware_key(HOST))) for t in tasks]
    assert sum(counts) == result.trials == 12 and all(n >= 4 for n in counts)
    assert result.rounds[:2] == [0, 1]  # a first round each, in the model's order
    rows = {r.name: r for r in result.tasks}
    assert rows["fused_mat_mul_relu"].weight == 2 and rows["fused_mat_mul_relu"].flops == tasks[0].flops
    assert all(r.status == "tuned" and math.isfinite(r.best_latency) for r in result.tasks)
    assert result.estimated_latency == pytest.approx(sum(r.weight * r.best_latency for r in result.tasks))
    assert result.model_latency is not None and result.model_latency > 0
    assert result.curve and result.curve[-1][0] <= 12
    with open(tmp_path / "tasks.csv") as f:
        table = list(csv.DictReader(f))
    assert [int(r["trials"]) for r in table] == counts
    assert abs(sum(float(r["share"]) for r in table) - 1) < 1e-3
    for name in ("tasks.md", "model_curve.csv", "model_curve.png", "logs/scheduler.log"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert len(list((tmp_path / "logs" / "tasks").glob("*.log"))) == 2
    assert "round 1: task 0" in (tmp_path / "logs" / "scheduler.log").read_text()
    text = result.table()
    assert "fused_mat_mul_relu" in text and "estimated model latency" in text
    # the statistic and the host's conditions are named with the figures
    assert "the fastest timed repeat (min); host: " in text and result.host.timings > 0

    # the model compiled from the work dir uses the tuned records, and matches onnxruntime
    exe = ts.compile_model(proto, HOST, tmp_path)
    assert set(exe.sources.values()) == {"tuned"}
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    import onnxruntime as ort

    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(exe(x=x)[0], want[0], rtol=1e-4, atol=1e-4)

    # the same work dir resumes: the 12 records count, 8 more are measured, none twice
    again = tune_model(proto, HOST, 20, tmp_path, config=SMALL, workers=0, measure_model=False)
    db = Database(tmp_path)
    keys = [r.candidate_key for t in tasks for r in db.records(t.key, hardware_key(HOST))]
    assert again.trials == 20 and len(keys) == 20 == len(set(keys))
    assert len(again.rounds) == 2 and again.model_latency is None
    assert again.curve[0][0] <= 12 and again.curve[-1][0] == 20  # the curve goes back to the first run


@pytest.mark.slow
def test_tune_model_takes_a_list_of_workloads_round_robin(tmp_path):
    wls = [workloads.make("GMM", (1, 16, 16, 16), "float32"), workloads.make("GMM", (1, 32, 16, 16), "float32")]
    result = tune_model(wls, HOST, 16, tmp_path, strategy="round-robin", config=SMALL, workers=0)
    assert result.rounds == [0, 1, 0, 1]
    assert result.model_latency is None  # no model to time
    db = Database(tmp_path)
    for wl in wls:
        assert len(db.records(workload_key(wl.func), hardware_key(HOST))) == 8
        module = ts.compile_best(wl, HOST, tmp_path)
        xs = wl.make_inputs(np.random.default_rng(11))
        out = np.random.default_rng(12).uniform(-9, 9, size=wl.outputs[0].shape).astype(np.float32)
        module(*xs, out)
        wl.check([out], wl.reference(*xs))


@pytest.mark.slow
def test_a_budget_smaller_than_a_round_each_is_shared(tmp_path):
    wls = [workloads.make("GMM", (1, 16, 16, s), "float32") for s in (8, 16, 24)]
    result = tune_model(wls, HOST, 5, tmp_path, config=SMALL, workers=0)
    assert result.rounds == [0, 1, 2] and [r.trials for r in result.tasks] == [1, 2, 2]


@pytest.mark.slow
def test_concurrent_tasks_run_rounds_at_once_and_spend_the_budget_exactly(tmp_path):
    wls = [workloads.make("GMM", (1, 16, 16, s), "float32") for s in (8, 16, 24)]
    result = tune_model(wls, HOST, 22, tmp_path, config=SMALL, workers=0, concurrent_tasks=2)
    db = Database(tmp_path)
    records = [r for wl in wls for r in db.records(workload_key(wl.func), hardware_key(HOST))]
    keys = [r.candidate_key for r in records]
    assert result.trials == 22 == len(keys) == len(set(keys))
    assert all(t.status == "tuned" and t.trials for t in result.tasks)
    spans = result.round_spans  # in the order the rounds ended
    assert len(spans) == len(result.rounds)
    started = [task for _, task in sorted(zip(spans, result.rounds, strict=True))]
    assert started[:3] == [0, 1, 2]  # every task's first round first, in order
    assert any(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in itertools.combinations(spans, 2)), spans
    windows = sorted((r.run_start, r.run_end) for r in records)
    for (_, end), (start, _) in itertools.pairwise(windows):
        assert start >= end  # the tasks' candidates were timed one at a time all the same
    assert "rounds of up to 2 tasks at once" in (tmp_path / "logs" / "scheduler.log").read_text()


@pytest.mark.slow
def test_an_error_in_one_concurrent_round_stops_the_others_and_keeps_every_record(tmp_path):
    import threading

    wls = [workloads.make("GMM", (1, 16, 16, s), "float32") for s in (8, 16, 24)]

    def interrupt(p):  # as Ctrl-C would, in the thread that ended the first round
        if p.round == 1:
            raise KeyboardInterrupt

    before = threading.active_count()
    with pytest.raises(KeyboardInterrupt):
        tune_model(wls, HOST, 400, tmp_path, config=SMALL, workers=0, concurrent_tasks=3, progress=interrupt)
    assert threading.active_count() == before  # every round's thread ended before tune_model returned
    db = Database(tmp_path)
    keys = [r.candidate_key for wl in wls for r in db.records(workload_key(wl.func), hardware_key(HOST))]
    assert 4 <= len(keys) < 12 and len(set(keys)) == len(keys)  # the first round, and what the others measured
    again = tune_model(wls, HOST, len(keys) + 4, tmp_path, config=SMALL, workers=0, concurrent_tasks=3)
    assert again.trials == len(keys) + 4


@pytest.mark.slow
def test_a_task_with_no_valid_program_stops_and_the_others_go_on(tmp_path, monkeypatch):
    from tensorsearch.search.tuning import tuner

    wls = [workloads.make("GMM", (1, 16, 16, 16), "float32"), workloads.make("GMM", (1, 8, 8, 8), "float32")]
    bad = workload_key(wls[0].func)
    original = tuner.TaskSearch.run_round

    def refuse(self, *args, **kwargs):
        if self.wkey == bad:
            raise TuneError("tune: no sample of the 1 design space(s) is a valid program; the first refusal: test")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(tuner.TaskSearch, "run_round", refuse)
    result = tune_model(wls, HOST, 8, tmp_path, config=SMALL, workers=0)
    assert result.tasks[0].status.startswith("no valid program") and result.tasks[0].trials == 0
    assert result.tasks[1].trials == 8 and result.tasks[1].status == "tuned"
    assert result.estimated_latency == pytest.approx(result.tasks[1].best_latency)


def test_bad_arguments_are_named(tmp_path):
    wl = workloads.make("GMM", (1, 8, 8, 8), "float32")
    with pytest.raises(TuneError, match="trials must be a positive integer"):
        tune_model([wl], HOST, 0, tmp_path)
    with pytest.raises(TuneError, match="strategy must be one of gradient, round-robin"):
        tune_model([wl], HOST, 4, tmp_path, strategy="greedy")
    with pytest.raises(TuneError, match="task 1 is a str"):
        tune_model([wl, "GMM"], HOST, 4, tmp_path)
    with pytest.raises(TuneError, match="the task list is empty"):
        tune_model([], HOST, 4, tmp_path)
    with pytest.raises(TuneError, match="concurrent_tasks must be a positive integer, got 0"):
        tune_model([wl], HOST, 4, tmp_path, concurrent_tasks=0)


@pytest.mark.slow
def test_cli_model_tune(tmp_path, capsys):
    import onnx

    from tensorsearch.cli.main import main

    path = tmp_path / "two.onnx"
    proto = _two_task_model()
    proto.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [8, 16]))
    onnx.save(proto, path)
    work = tmp_path / "work"
    argv = ["model", "tune", str(path), "--hardware", "host", "--trials", "8", "--work-dir", str(work)]
    assert main([*argv, "--strategy", "round-robin"]) == 0
    out = capsys.readouterr()
    assert "fused_mat_mul_relu" in out.out and "measured model latency" in out.out
    assert "onnxruntime latency" in out.out and "round 2: task 1" in out.err
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--strategy", "best"])
    assert stop.value.code == 2 and "invalid choice: 'best'" in capsys.readouterr().err


def test_the_cli_offers_every_strategy():
    from tensorsearch.cli.main import build_parser
    from tensorsearch.search.tuning.scheduler import STRATEGIES

    for strategy in STRATEGIES:
        args = build_parser().parse_args(["model", "tune", "m.onnx", "--hardware", "host", "--trials", "1",
                                          "--strategy", strategy])  # fmt: skip
        assert args.strategy == strategy


def test_the_cli_takes_concurrent_tasks(capsys):
    from tensorsearch.cli.main import build_parser

    argv = ["model", "tune", "m.onnx", "--hardware", "host", "--trials", "1"]
    assert build_parser().parse_args(argv).concurrent_tasks == 1
    assert build_parser().parse_args([*argv, "--concurrent-tasks", "3"]).concurrent_tasks == 3
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([*argv, "--concurrent-tasks", "0"])
    assert stop.value.code == 2 and "--concurrent-tasks: must be a positive integer, not '0'" in capsys.readouterr().err
