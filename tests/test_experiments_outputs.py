"""The benchmarks in experiments/ write where they are told, never over tracked results by default.

``experiments/outputs.py`` gives every script ``--out DIR`` (default ``results/<script>/``,
git-ignored) and ``--update-tracked`` (the only way to write into ``experiments/results/``). Nothing
here runs a benchmark: the scripts are started with ``--help`` or with a refused ``--out``, and
tune_ops.py's main runs with its tuning replaced by a stub.
"""

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy  # noqa: F401  (loaded before any experiments/ script: they re-execute themselves only before numpy)
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
sys.path.insert(0, str(EXPERIMENTS))
import outputs  # noqa: E402

SCRIPTS = [
    "bench_candidates", "bench_manual_gemm", "bench_vnni_gemm", "e2e", "e2e_untuned", "gpu_ops", "profile_model",
    "scaling", "tune_ops", "vs_tvm",
]  # fmt: skip


def test_default_out_dirs_are_git_ignored():
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=ROOT, capture_output=True, text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.skip("not a git checkout")
    for script in SCRIPTS:
        out = outputs.default_out(script)
        assert outputs.resolve_out(None, False, script) == out
        probe = out / "table.md"
        ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=ROOT)
        assert ignored.returncode == 0, f"{probe} is not git-ignored"
    # and the tracked directory really is tracked: the check below guards something
    tracked = subprocess.run(["git", "ls-files", "experiments/results"], cwd=ROOT, capture_output=True, text=True)
    assert tracked.stdout.strip(), "experiments/results/ holds no tracked file"


def test_tracked_dir_needs_the_flag(tmp_path):
    inside = outputs.TRACKED / "sub"
    for path in (outputs.TRACKED, inside, str(inside)):
        with pytest.raises(outputs.OutputError, match="--update-tracked"):
            outputs.resolve_out(path, False, "tune_ops")
        assert outputs.resolve_out(path, True, "tune_ops") == Path(path)
    assert outputs.resolve_out(None, True, "tune_ops") == outputs.TRACKED
    # --update-tracked writes into experiments/results/ and nowhere else
    with pytest.raises(outputs.OutputError, match="outside it"):
        outputs.resolve_out(tmp_path, True, "tune_ops")
    assert outputs.resolve_out(tmp_path, False, "tune_ops") == tmp_path
    # a path that only leads into experiments/results/ through a link is refused too
    link = tmp_path / "link"
    link.symlink_to(outputs.TRACKED, target_is_directory=True)
    with pytest.raises(outputs.OutputError):
        outputs.resolve_out(link / "x", False, "tune_ops")
    # work dirs never go there, flag or not
    with pytest.raises(outputs.OutputError):
        outputs.check_untracked(inside, "--work-dir")
    assert outputs.check_untracked(tmp_path, "--work-dir") == tmp_path


def test_scratch_stays_out_of_the_tracked_dir(tmp_path, monkeypatch):
    class Args:
        out, update_tracked = None, True

    dest = outputs.outputs(Args(), "vs_tvm")
    assert dest.out == outputs.TRACKED and dest.tracked
    assert dest.scratch == outputs.default_out("vs_tvm")
    Args.out, Args.update_tracked = str(tmp_path / "o"), False
    dest = outputs.outputs(Args(), "vs_tvm")
    assert dest.scratch == dest.out == tmp_path / "o" and not dest.tracked
    first, second = dest.fresh_dir("work"), dest.fresh_dir("work")
    assert first != second and first.parent == second.parent == dest.out and first.is_dir()
    Args.out = str(outputs.TRACKED / "x")
    with pytest.raises(SystemExit, match="^vs_tvm.py: error: .*--update-tracked"):
        outputs.outputs(Args(), "vs_tvm")


@pytest.mark.slow
def test_a_derived_host_is_one_warning_line_at_most():
    """A script's warnings are one line each (outputs.outputs installs it); the derived host's
    HardwareWarning comes once however often the host is asked for, and not at all on a host a
    shipped descriptor matches."""
    code = (
        "import outputs, sys\n"
        "class Args:\n    out, update_tracked = sys.argv[1], False\n"
        "outputs.outputs(Args(), 'e2e')\n"
        "import warnings\n"
        "from tensorsearch.target import host, load\n"
        "derived = host().source is None\n"
        "host(); load('host'); host()\n"
        "warnings.warn('a second line? no', UserWarning)\n"
        "print(derived)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(outputs.default_out("e2e"))],
        cwd=EXPERIMENTS, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    derived = res.stdout.strip() == "True"
    lines = res.stderr.strip().splitlines()
    want = ["e2e.py: warning: a second line? no"]
    if derived:
        assert lines[0].startswith("e2e.py: warning: hardware 'host': derived from the CPU's reported name"), res.stderr
        want.insert(0, lines[0])
    assert lines == want, res.stderr


def _run_all(args: list[str]) -> dict[str, subprocess.CompletedProcess]:
    """Every script with ``args``, started at once (each imports numpy/tensorsearch: 0.5-2 s)."""
    procs = {
        s: subprocess.Popen(
            [sys.executable, str(EXPERIMENTS / f"{s}.py"), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in SCRIPTS
    }
    done = {}
    for s, p in procs.items():
        out, err = p.communicate(timeout=120)
        done[s] = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    return done


@pytest.mark.slow
def test_every_script_takes_out_and_update_tracked():
    for script, res in _run_all(["--help"]).items():
        assert res.returncode == 0, (script, res.stderr)
        assert "--out DIR" in res.stdout and "--update-tracked" in res.stdout, script
        assert f"results/{script}/" in res.stdout, script


@pytest.mark.slow
def test_every_script_refuses_the_tracked_dir_before_working():
    probe = outputs.TRACKED / f"_probe_{uuid.uuid4().hex[:8]}"
    try:
        for script, res in _run_all(["--out", str(probe)]).items():
            assert res.returncode != 0, script
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"{script}.py: error:"), (script, res.stderr)
            assert "--update-tracked" in lines[0], script
        assert not probe.exists()
    finally:
        if probe.exists():
            shutil.rmtree(probe)


@pytest.mark.filterwarnings("ignore:hardware 'host'")
@pytest.mark.slow
def test_tune_ops_writes_tables_and_work_dirs_under_out(tmp_path, monkeypatch, capsys):
    """tune_ops.main with the tuning stubbed: tables in --out, a fresh work dir under it, nothing tracked."""
    import tune_ops

    seen = []

    def fake_tune_one(name, index, trials, dtype, hw, args, work_root, peak, tvm):
        seen.append(work_root)
        return {"op": name, "index": index, "dtype": dtype, "trials": trials, "curve": [(1, 1.0), (2, 2.0)]}

    monkeypatch.setattr(tune_ops, "tune_one", fake_tune_one)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["tune_ops.py", "--ops", "GMM", "--dtypes", "float32", "--out", str(out)])
    before = {p: p.stat().st_mtime_ns for p in outputs.TRACKED.iterdir()}
    tune_ops.main()
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == ["tune_ops.csv", "tune_ops.md", "tune_ops.png"]
    assert len(seen) == 1 and seen[0].parent == out and seen[0].name.startswith("work-") and seen[0].is_dir()
    assert f"wrote tune_ops.csv, tune_ops.md, tune_ops.png to {out}/" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in outputs.TRACKED.iterdir()} == before


def test_tune_ops_tunes_for_the_named_descriptor_and_refuses_an_unknown_one(tmp_path, monkeypatch, capsys):
    import tune_ops

    seen = []

    def fake_tune_one(name, index, trials, dtype, hw, *rest):
        seen.append(hw.name)
        return {"op": name, "index": index, "dtype": dtype, "trials": trials, "curve": [(1, 1.0), (2, 2.0)]}

    monkeypatch.setattr(tune_ops, "tune_one", fake_tune_one)
    argv = ["tune_ops.py", "--ops", "GMM", "--dtypes", "float32", "--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", [*argv, "--hardware", "x86-emeraldrapids"])
    tune_ops.main()
    assert seen == ["x86-emeraldrapids"]
    assert "hardware descriptor x86-emeraldrapids " in (tmp_path / "out" / "tune_ops.md").read_text()
    monkeypatch.setattr(sys, "argv", [*argv, "--hardware", "nosuch"])
    with pytest.raises(SystemExit) as exit_:
        tune_ops.main()
    assert exit_.value.code == 2
    assert "error: --hardware: 'nosuch': no such hardware descriptor" in capsys.readouterr().err


def test_tune_ops_pairs_the_peak_with_our_best_repeat_and_numpy_with_their_median():
    """A peak sample is a best of three, so our sample against it is the best of its repeats."""
    from types import SimpleNamespace

    import tune_ops

    from tensorsearch.runtime.timing import TimeResult

    class Module:
        def time(self, *args, repeat, min_repeat_ms):
            assert repeat == 3 and min_repeat_ms == 50.0
            return TimeResult((2.0, 1.0, 4.0))

    wl = SimpleNamespace(flops=8e9)
    median, best = tune_ops.time_ours(wl, Module(), [], SimpleNamespace(min_seconds=0.05))
    assert (median, best) == (4.0, 8.0)  # GOPS: 8e9 operations over 2 s (median) and 1 s (best)


def test_tune_ops_takes_a_disturbed_round_again_and_keeps_the_least_disturbed(monkeypatch):
    """Synthetic disturbances: a round over 1.25x is taken again up to --retakes times."""
    from types import SimpleNamespace

    import tune_ops

    from tensorsearch.runtime.timing import TimeResult

    said = iter([3.0, 1.1, 2.0, 1.6, 1.5, 1.4])  # round 1: 3.0 then 1.1; round 2: 2.0, 1.6, 1.5 (2 retakes)
    clock = SimpleNamespace(seconds=lambda: 0.0, disturbance=lambda before, after: next(said))
    monkeypatch.setattr(tune_ops, "reference_clock", lambda threads: clock)
    monkeypatch.setattr(tune_ops, "settle", lambda: None)
    seconds = iter([1.0, 2.0, 4.0, 8.0, 0.5])

    class Module:
        def time(self, *args, repeat, min_repeat_ms):
            return TimeResult((next(seconds),))

    args = SimpleNamespace(threads=2, rounds=2, retakes=2, min_seconds=0.01)
    rounds = tune_ops.retimed_rounds(SimpleNamespace(flops=8.0), Module(), [], [], "int8", None, args)
    assert [r.disturbance for r in rounds] == [1.1, 1.5]
    assert [r.ours for r in rounds] == [4e-9, 1.6e-8]  # the attempts taken at 1.1x and 1.5x


def test_tune_ops_gives_the_median_of_paired_ratios_and_the_best_over_the_best_peak():
    import tune_ops

    cols = tune_ops.peak_columns([600.0, 900.0, 650.0], [1000.0, 1200.0, 1300.0])
    assert cols == {"peak": 1200.0, "ratio_vs_peak": 0.6, "best_vs_best_peak": round(900 / 1300, 3)}


@pytest.mark.slow
def test_profile_model_names_a_bad_model_or_work_dir_in_one_line(tmp_path):
    for args, says in (
        (["--model", "nosuch"], "unknown model 'nosuch'"),
        (["--model", "mobilenet_v2", "--reduced", "--work-dir", str(tmp_path / "none")], "no tuning database there"),
    ):
        res = subprocess.run(
            [sys.executable, str(EXPERIMENTS / "profile_model.py"), *args, "--out", str(tmp_path / "out")],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith("profile_model.py: error:") and says in lines[0]
