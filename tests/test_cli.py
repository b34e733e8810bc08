"""The command line: `tensorsearch workloads` and `tensorsearch show`."""

import subprocess
import sys

from tensorsearch.cli import main
from tensorsearch.script import parse
from tensorsearch.workloads import get, names


def test_workloads_lists_every_operator_and_each_shape(capsys):
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    for name in names():
        assert f"\n{name}: " in f"\n{out}"
    assert "  0: B=1, N=128, M=128, K=128\n" in out  # GMM's shapes, arguments named
    assert "  3: B=1, N=1024, M=1024, K=1024\n" in out
    assert "  dtypes: float32, float16, bfloat16, int8, int16\n" in out


def test_show_unknown_workload_suggests_the_closest(capsys):
    assert main(["show", "GMMM"]) == 2
    assert "unknown workload 'GMMM'; did you mean GMM?" in capsys.readouterr().err


def test_show_prints_parsable_ir(capsys):
    assert main(["show", "GMM", "--index", "1", "--dtype", "int8"]) == 0
    out = capsys.readouterr().out
    text = out.split("\n", 1)[1]
    from tensorsearch.ir import structural_equal

    assert structural_equal(parse(text), get("GMM", 1, "int8").func)


def test_show_unknown_workload_is_a_clear_error(capsys):
    assert main(["show", "NOPE"]) == 2
    err = capsys.readouterr().err
    assert "NOPE" in err and "GMM" in err


def test_console_script_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "tensorsearch", "show", "SFM"], capture_output=True, text=True, check=True
    )
    assert "SFM" in out.stdout
