"""experiments/vnni_loop_forms.py: the hand-written vpdpbusd forms build and run, and the table says so."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "vnni_loop_forms.py"
sys.path.insert(0, str(SCRIPT.parent))
import vnni_loop_forms  # noqa: E402


@pytest.mark.slow
def test_every_form_runs_and_the_register_only_form_is_the_unit():
    reason = vnni_loop_forms.why_not_here()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "1", "--threads", "1", "--steps", "100000"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [
        line.split("|")[1:-1]
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and "GOPS" not in line and "---" not in line
    ]
    assert [r[0].strip() for r in rows] == list(vnni_loop_forms.FORMS)
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
    assert rows[0][3].strip() == "1.00"


def test_bad_arguments_are_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--threads", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith("--threads must be 1-64, --rounds and --steps at least 1")
