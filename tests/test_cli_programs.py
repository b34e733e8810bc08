"""Any workload: ``tensorsearch tune|match|show FILE`` for a Python file defining PrimFuncs or a
script-text file; operation counts come from the computation."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsearch import workloads
from tensorsearch.search import count_ops
from tensorsearch.search.database import Database, hardware_key
from tensorsearch.target import host

REPO = Path(__file__).resolve().parent.parent
cli = importlib.import_module("tensorsearch.cli.main")

N, H, W, CI, CO, K = 1, 16, 16, 32, 32, 3

CONV_PY = (REPO / "examples" / "conv2d_padded.py").read_text()  # N, H, W, CI, CO, K as above
CONV_OPS = 2 * N * H * W * CO * K * K * CI


def _user_conv(tmp_path) -> Path:
    path = tmp_path / "conv.py"
    path.write_text(CONV_PY)
    return path


@pytest.mark.parametrize("name", ["GMM", "C2D", "DEP", "T2D", "C1D", "C3D", "DIL", "GRP"])
def test_op_counts_are_the_analytic_counts(name):
    for index in (0, 1):
        wl = workloads.get(name, index, "float32")
        assert count_ops(wl.func) == wl.flops, (name, index)


def test_a_multi_stage_program_counts_multiply_adds_only(tmp_path):
    scope: dict = {}
    exec(CONV_PY, scope)
    assert count_ops(scope["func"]) == CONV_OPS  # the padding select and h + rh count nothing


def test_show_and_match_take_a_python_file(tmp_path, capsys):
    path = _user_conv(tmp_path)
    assert cli.main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# conv ({path})\n") and 'T.block("padded")' in out
    assert "def conv(" in out  # the program's one name: the file's stem
    assert cli.main(["match", str(path), "--hardware", "x86-znver4"]) == 0  # a file's dtype is its own: no note
    assert "block conv vs intrinsic vnni" in capsys.readouterr().out


def test_script_text_file(tmp_path, capsys):
    text = workloads.get("GMM", 0, "float32").func.script()
    (tmp_path / "gmm.tir").write_text(text)
    assert cli.main(["show", str(tmp_path / "gmm.tir")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# gmm ({tmp_path / 'gmm.tir'})\n")
    # the same program, under the file's name
    assert out.rstrip("\n").splitlines()[1:] == text.replace("def main(", "def gmm(").rstrip("\n").splitlines()


def test_a_file_of_several_funcs_names_the_program_stem_and_func(tmp_path, capsys):
    path = tmp_path / "mine.py"
    path.write_text(CONV_PY + "\nother = func\n")
    assert cli.main(["show", str(path), "--func", "other"]) == 0
    assert capsys.readouterr().out.startswith(f"# mine_other ({path}, PrimFunc other)\n@T.prim_func\ndef mine_other(")


@pytest.mark.parametrize(
    ("source", "argv", "message"),
    [
        ("x = 1\n", [], "defines no PrimFunc at module level"),
        ("raise RuntimeError('boom')\n", [], "running it failed: RuntimeError: boom"),
        ("FUNC_SRC\nother = func\n", [], "defines several PrimFuncs (func, other); pick one with --func"),
        ("FUNC_SRC\n", ["--func", "nope"], "defines no PrimFunc 'nope'; it defines: func"),
    ],
    ids=["none", "raises", "several", "unknown-func"],
)
def test_a_bad_program_file_is_one_line_naming_it(tmp_path, capsys, source, argv, message):
    path = tmp_path / "mine.py"
    path.write_text(source.replace("FUNC_SRC", CONV_PY))
    assert cli.main(["show", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"tensorsearch show: error: argument NAME: {path}: {message}\n"


@pytest.mark.slow
def test_a_user_te_file_tunes_from_the_cli_and_reports_the_true_throughput(tmp_path):
    path = _user_conv(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    argv = ["tune", str(path), "--hardware", "host", "--trials", "8", "--work-dir", "w"]
    proc = subprocess.run(
        [sys.executable, "-m", "tensorsearch", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    # one name for the program: the file's stem, in the first line, the summary and the database
    assert f"tensorsearch tune: conv ({path}) on " in proc.stderr
    assert "tuning finished: conv\n" in proc.stdout
    reported = float(re.search(r"throughput\s+([0-9.e+]+) GFLOPS", proc.stdout).group(1))
    db = Database.open_existing(tmp_path / "w")
    (key,) = db.workload_keys()
    assert db.workload_name(key) == "conv"
    (best,) = db.best(key, hardware_key(host()), 1)
    assert reported == pytest.approx(CONV_OPS / db.latency(best) / 1e9, rel=0.01)  # re-timed
    script = (tmp_path / "w" / "best_trace.py").read_text()
    assert f"load_program({str(path)!r}, None)" in script
    exec(compile(script, "best_trace.py", "exec"), {})  # the written script rebuilds the kernel
