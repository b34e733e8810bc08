"""Every CLI failure is one or two lines with exit code 2 (a mistake in the input) or 1 (the run
failed), never a traceback unless ``--debug``; Ctrl-C, SIGTERM and SIGHUP end a tune the same clean
way with every record kept. Each case runs the real command in a subprocess."""

from __future__ import annotations

import importlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
cli = importlib.import_module("tensorsearch.cli.main")  # the module (the package exports its main)


def run(*argv: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "tensorsearch", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def errors(proc: subprocess.CompletedProcess) -> list[str]:
    """stderr without the header line and the derived-host warning."""
    assert "Traceback" not in proc.stderr, proc.stderr
    return [
        line
        for line in proc.stderr.splitlines()
        if line.strip() and ": warning: " not in line and " trials, work dir " not in line
    ]


@pytest.mark.slow
def test_hardware_this_cpu_cannot_run_is_refused_before_the_search(tmp_path):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the refusal is shown with an aarch64 descriptor on an x86-64 host")
    proc = run("tune", "GMM", "--hardware", "arm-graviton2", "--trials", "4", "--work-dir", "w", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line.startswith("tensorsearch tune: error: this CPU cannot run code built for hardware arm-graviton2")
    assert not (tmp_path / "w" / "database").exists()


@pytest.mark.slow
def test_hardware_of_another_cpu_is_refused_in_one_line_unless_allowed(tmp_path):
    """Code for another CPU of this architecture would run here, and its timings be this
    machine's, filed as the other CPU's: refused, naming this CPU and the opt-in."""
    from tensorsearch.target import host, host_identity

    here = host_identity()
    if here.arch != "x86_64" or not host().has_feature("avx2") or not host().has_feature("fma"):
        pytest.skip("the descriptor of another CPU is an AVX2 one: this needs an x86-64 CPU with AVX2 and FMA")
    other = "haswell" if here.cpu != "haswell" else "broadwell"
    (tmp_path / "other.yaml").write_text(
        f"name: other-cpu\nkind: cpu\ntriple: {host().triple}\ncpu: {other}\nfeatures: [+avx2, +fma]\ncores: 2\n"
        "vector_bits: 256\ncaches: {l1d: 32 KiB, l2: 256 KiB, l3: 8 MiB}\n"
    )
    proc = run("tune", "GMM", "--hardware", "other.yaml", "--trials", "4", "--work-dir", "w", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line == (
        f"tensorsearch tune: error: this machine is not other-cpu: it is an {here.describe()}, not a {other}; "
        "tune with --hardware host, or pass --allow-other-cpu (allow_other_cpu=True) to time here anyway "
        "(each record then names the CPU that timed it)"
    )
    assert not (tmp_path / "w" / "database").exists()
    assert "--allow-other-cpu" in run("tune", "--help", cwd=tmp_path).stdout


@pytest.mark.slow
def test_work_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "w").write_text("not a directory")
    proc = run("tune", "GMM", "--hardware", "host", "--trials", "4", "--work-dir", "w", cwd=tmp_path)
    assert proc.returncode == 2
    assert errors(proc) == ["tensorsearch tune: error: argument --work-dir: w exists and is not a directory"]


@pytest.mark.slow
def test_work_dir_that_cannot_be_written_is_refused_before_the_search(tmp_path):
    if not Path("/proc/self").exists():
        pytest.skip("uses /proc, where no directory can be made")
    proc = run("tune", "GMM", "--hardware", "host", "--trials", "4", "--work-dir", "/proc/tensorsearch/w", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line.startswith("tensorsearch tune: error: argument --work-dir: cannot write in /proc/tensorsearch/w")


def test_a_broken_hardware_file_names_file_and_key(tmp_path):
    (tmp_path / "mine.yaml").write_text("name: mine\nkind: cpu\n")
    proc = run("match", "GMM", "--hardware", "mine.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line.startswith("tensorsearch match: error: argument --hardware: mine.yaml: triple: missing required key")


def test_a_mistyped_hardware_key_names_its_line_and_the_key_meant(tmp_path):
    (tmp_path / "mine.yaml").write_text("name: mine\nkind: cpu\ntriple: x86_64-unknown-linux-gnu\nfeaturs: [+avx2]\n")
    proc = run("match", "GMM", "--hardware", "mine.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert line.startswith(
        "tensorsearch match: error: argument --hardware: mine.yaml:4: featurs: unknown key 'featurs'; "
        "did you mean 'features'? the known keys are: name, kind,"
    )


def test_an_unknown_intrinsic_set_suggests_a_set_and_lists_no_descriptor(tmp_path):
    text = (REPO / "hardware" / "x86-znver4.yaml").read_text()
    assert "intrinsics: [x86-avx512-vnni]" in text
    (tmp_path / "mine.yaml").write_text(text.replace("name: x86-znver4", "name: mine").replace("vnni]", "vni]"))
    (tmp_path / "other.yaml").write_text(text.replace("name: x86-znver4", "name: other"))  # a descriptor beside it
    proc = run("match", "GMM", "--hardware", "mine.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = errors(proc)
    assert "intrinsics[0]: unknown intrinsic set 'x86-avx512-vni'; did you mean 'x86-avx512-vnni'? known sets:" in line
    known = line.split("known sets: ")[1].split(";")[0].split(", ")
    assert "x86-avx512-vnni" in known and "other" not in known and "mine" not in known


def test_show_trace_of_a_file_that_is_not_json_says_what_trace_takes(tmp_path):
    (tmp_path / "best_trace.py").write_text("sch = Schedule(func)\n")
    proc = run("show", "GMM", "--trace", "best_trace.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert errors(proc) == [
        "tensorsearch show: error: trace file best_trace.py is not JSON (line 1, column 1: Expecting value); "
        "--trace takes the JSON a tune writes (best_trace.json in its work dir, Trace.as_json)"
    ]


def test_a_closed_pipe_ends_quietly(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = f"{sys.executable} -m tensorsearch match GMM --hardware x86-znver4 | head -1"
    proc = subprocess.run(["sh", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("# GMM[0] float32")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_debug_shows_the_traceback_and_keeps_the_exit_code(tmp_path):
    proc = run("tune", "NOPE", "--hardware", "host", "--trials", "4", "--debug", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" in proc.stderr  # 2, as without --debug: a mistake in NAME
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("tensorsearch tune: error: argument NAME: unknown workload 'NOPE'")


def test_a_bug_is_one_line_and_says_how_to_see_more(monkeypatch, capsys):
    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "_cmd_workloads", broken)
    assert cli.main(["workloads"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "tensorsearch workloads: error: ZeroDivisionError: division by zero",
        "tensorsearch workloads: this is a bug; run again with --debug for the traceback",
    ]
    assert cli.main(["workloads", "--debug"]) == 1  # the same exit code, with the traceback
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("tensorsearch workloads: error: ZeroDivisionError: division by zero\n")


# SIGHUP takes SIGTERM's handler (catch_stop_signals); the test after this one checks it in process
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.slow
def test_a_signal_stops_a_tune_cleanly_and_keeps_every_record(tmp_path, sig):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    # Ctrl-C as in a terminal: a job a non-interactive shell started in the background (`.ci/run &`)
    # ignores SIGINT, and so would the tune it starts; Python keeps an ignored SIGINT ignored
    ctrl_c = "import signal, runpy; signal.signal(signal.SIGINT, signal.default_int_handler); "
    ctrl_c += "runpy.run_module('tensorsearch', run_name='__main__', alter_sys=True)"
    argv = [sys.executable, "-c", ctrl_c, "tune", "GMM", "--hardware", "host", "--trials", "64"]
    proc = subprocess.Popen(
        [*argv, "--work-dir", "w"], cwd=tmp_path, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    records = tmp_path / "w" / "database" / "tuning_records.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and records.read_text().count("\n") >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(kept) >= 2 and len({r["candidate_key"] for r in kept}) == len(kept)
    assert f"interrupted: {len(kept)} records kept in w/database" in err


def test_sighup_stops_a_command_as_sigterm_does(monkeypatch, capsys):
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def hung_up(args):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(10)
        return 0

    monkeypatch.setattr(cli, "_cmd_workloads", hung_up)
    try:
        assert cli.main(["workloads"]) == 130
        assert signal.getsignal(signal.SIGHUP) is signal.getsignal(signal.SIGTERM)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert capsys.readouterr().err.splitlines() == ["tensorsearch workloads: stopped by SIGHUP"]
