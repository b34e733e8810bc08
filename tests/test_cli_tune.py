"""`tensorsearch tune`: argument errors, and the files and summary it writes (with a fake tuner).

The real end-to-end run of the command is tested with the tuner itself.
"""

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import tensorsearch
import tensorsearch.search
from tensorsearch.cli import main
from tensorsearch.schedule import Schedule, Trace
from tensorsearch.search.measure.noise import HostConditions
from tensorsearch.workloads import get

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def refuse(*args, **kwargs):
    raise AssertionError("tune must not be called when an argument is wrong")


@pytest.fixture
def no_tune(monkeypatch):
    monkeypatch.setattr(tensorsearch.search, "tune", refuse, raising=False)


def tune_args(tmp_path, *extra):
    return ["tune", "GMM", "--hardware", "x86-emeraldrapids", "--trials", "4", "--work-dir", str(tmp_path), *extra]


@pytest.mark.parametrize(
    "argv, names",
    [
        (["tune", "NOPE", "--hardware", "host", "--trials", "4", "--work-dir", "{}"], ["NAME", "NOPE", "GMM, "]),
        (["tune", "GMM", "--dtype", "int4", "--hardware", "host", "--trials", "4", "--work-dir", "{}"], ["--dtype"]),
        (["tune", "GMM", "--index", "9", "--hardware", "host", "--trials", "4", "--work-dir", "{}"], ["--index"]),
        (["tune", "GMM", "--hardware", "nope", "--trials", "4", "--work-dir", "{}"], ["--hardware", "x86-znver4"]),
    ],
    ids=["workload", "dtype", "index", "hardware"],
)
def test_argument_errors_name_the_argument(no_tune, tmp_path, capsys, argv, names):
    assert main([a.format(tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorsearch tune: error: argument ")
    assert len(err.strip().splitlines()) == 1
    for name in names:
        assert name in err
    if "--dtype" in names:
        assert "'int4'" in err and "int8" in err and "float32" in err


@pytest.mark.parametrize("trials", ["0", "-3", "many"])
def test_trials_must_be_a_positive_integer(no_tune, tmp_path, capsys, trials):
    argv = tune_args(tmp_path)
    argv[argv.index("--trials") + 1] = trials
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --trials: must be a positive integer, not '{trials}'" in err


def test_required_arguments(no_tune, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["tune", "GMM", "--trials", "4"])
    assert exc.value.code == 2
    assert "--hardware" in capsys.readouterr().err


def a_trace(func):
    sch = Schedule(func)
    z = sch.get_block("Z")
    _, i, j, _ = sch.get_loops(z)
    sch.split(i, [None, 8])
    sch.vectorize(sch.split(j, [None, 16])[1])
    return sch.trace


@pytest.mark.slow
def test_tune_writes_curve_traces_and_summary(monkeypatch, tmp_path, capsys):
    calls = []

    def fake_tune(
        wl, hw, trials, work_dir, seed=0, *, address=None, config=None, progress=None, transfer_from=(),
        allow_other_cpu=False,
    ):  # fmt: skip
        calls.append(dict(wl=wl, hw=hw, trials=trials, work_dir=work_dir, seed=seed, address=address))
        calls[-1]["allow_other_cpu"] = allow_other_cpu
        for done in range(trials + 1):
            progress(
                SimpleNamespace(
                    trials_done=done,
                    trials_total=trials,
                    best_throughput=None if done == 0 else 10.0 * done,
                    unit="GOPS",
                    elapsed_s=done,
                    eta_s=trials - done,
                    failed=1 if done >= 2 else 0,
                )
            )
        return SimpleNamespace(
            name=wl.key,
            trace=a_trace(wl.func),
            latency=2.5e-4,
            throughput=wl.flops / 2.5e-4 / 1e9,
            unit="GOPS",
            module=None,
            workload_key="feedbeef",
            hardware_key="x86-emeraldrapids-0011223344556677",
            trials=trials,
            curve=[(1, None), (2, 20.0), (3, 30.0), (4, 40.0)],
            records=[SimpleNamespace(ok=i != 1) for i in range(trials)],
            wall_seconds=12.0,
            work_dir=Path(work_dir),
            transferred=0,
            retimed_at=4,
            statistic="min",
            host=HostConditions.of([1.0, 1.1, 1.05]),
        )

    monkeypatch.setattr(tensorsearch.search, "tune", fake_tune, raising=False)
    work = tmp_path / "work"
    argv = tune_args(work, "--dtype", "int8", "--index", "0", "--seed", "7", "--address", "ray://x:1")
    assert main(argv) == 0
    (call,) = calls
    assert call["wl"] == get("GMM", 0, "int8")
    assert call["hw"].name == "x86-emeraldrapids"
    assert (call["trials"], Path(call["work_dir"]), call["seed"], call["address"]) == (4, work, 7, "ray://x:1")
    assert call["allow_other_cpu"] is False  # --allow-other-cpu not given: tune refuses another CPU

    out, err = capsys.readouterr()
    assert "[" in err and "4/4 trials" in err and "best 40 GOPS" in err  # the progress bar (not a TTY)
    assert out.startswith("tuning finished: GMM/0/int8")
    for name in ("tuning_curve.png", "tuning_curve.csv", "best_trace.json", "best_trace.py"):
        assert str(work / name) in out
    assert "4 (1 failed)" in out and "0.25 ms  (min of its timed repeats)" in out and "feedbeef" in out
    assert "host  " in out and "quiet (reference at 1.05x its quiet time by the median, at most 1.10x" in out

    assert (work / "tuning_curve.png").read_bytes().startswith(PNG_MAGIC)
    assert (work / "tuning_curve.csv").read_text().splitlines() == [
        "trials,best_throughput,unit",
        "1,,GOPS",
        "2,20,GOPS",
        "3,30,GOPS",
        "4,40,GOPS",
    ]
    trace = Trace.from_json((work / "best_trace.json").read_text())
    assert trace.as_json_text() == a_trace(get("GMM", 0, "int8").func).as_json_text()

    # best_trace.py is a runnable script that rebuilds the best schedule; it computes the GEMM
    script = (work / "best_trace.py").read_text()
    scope: dict = {}
    exec(compile(script, "best_trace.py", "exec"), scope)
    if not scope["mod"].target.runs_here:
        pytest.skip("best_trace.py builds for x86-emeraldrapids, whose AVX-512 code this CPU cannot run")
    wl = get("GMM", 0, "int8")
    inputs = wl.make_inputs(np.random.default_rng(0))
    z = np.zeros(wl.outputs[0].shape, wl.outputs[0].dtype)
    scope["mod"](*inputs, z)
    wl.check([z], wl.reference(*inputs))


def test_interrupt_keeps_records_and_exits_130(monkeypatch, tmp_path, capsys):
    from tensorsearch.search.database import Database, TuningRecord, hardware_key, workload_key

    work = tmp_path / "work"

    def interrupted_tune(
        wl, hw, trials, work_dir, seed=0, *, address=None, config=None, progress=None, transfer_from=(),
        allow_other_cpu=False,
    ):  # fmt: skip
        db = Database(work_dir)
        other = get("GMM", 1, "float32").func
        for t, func in enumerate([wl.func, wl.func, other, wl.func]):  # 3 of this workload, 1 of another
            key = db.commit_workload(func)
            assert key == workload_key(func)
            db.commit_record(TuningRecord(key, hardware_key(hw), f"c{t}", "[]", (1e-3,), None, 0.1, t, 0.0))
        progress(SimpleNamespace(trials_done=4, trials_total=trials, best_throughput=1.0, unit="GFLOPS",
                                 elapsed_s=1.0, eta_s=math.inf, failed=0))  # fmt: skip
        raise KeyboardInterrupt

    monkeypatch.setattr(tensorsearch.search, "tune", interrupted_tune, raising=False)
    argv = tune_args(work)
    argv[argv.index("--trials") + 1] = "8"
    assert main(argv) == 130
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1] == (
        f"interrupted: 3 records kept in {work / 'database'}; run the same command again to resume"
    )
    assert "4/8 trials" in err  # the latest progress was printed before the message
    assert not (work / "tuning_curve.png").exists()


def test_allow_other_cpu_reaches_tune_and_model_tune(monkeypatch, tmp_path):
    from tensorsearch.cli.main import build_parser

    seen = []

    def stopped_tune(*args, allow_other_cpu=False, **kwargs):
        seen.append(allow_other_cpu)
        raise KeyboardInterrupt

    monkeypatch.setattr(tensorsearch.search, "tune", stopped_tune, raising=False)
    assert main(tune_args(tmp_path / "w", "--allow-other-cpu")) == 130
    assert seen == [True]
    model = ["model", "tune", "m.onnx", "--hardware", "host", "--trials", "1"]
    assert build_parser().parse_args([*model, "--allow-other-cpu"]).allow_other_cpu is True
    assert build_parser().parse_args(model).allow_other_cpu is False


@pytest.mark.slow
def test_cli_module_does_not_import_ray():
    code = (
        "import sys; from tensorsearch.cli import main; main(['workloads']); "
        "assert 'ray' not in sys.modules and 'tensorsearch.search' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "int16"])
def test_tune_takes_the_bfloat16_and_int16_forms(tmp_path, capsys, dtype):
    """The real command on this machine: GMM in the forms of vdpbf16ps and vpdpwssd units tunes
    (without such a unit here, as plain vector code) and writes its best trace."""
    argv = ["tune", "GMM", "--dtype", dtype, "--hardware", "host", "--trials", "2", "--work-dir", str(tmp_path)]
    assert main(argv) == 0
    assert f"tuning finished: GMM/0/{dtype}\n" in capsys.readouterr().out
    trace = Trace.from_json((tmp_path / "best_trace.json").read_text())
    sch = Schedule(get("GMM", 0, dtype).func)
    trace.apply(sch)  # the trace is one of this workload's schedules
