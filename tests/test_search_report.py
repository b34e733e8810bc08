"""tensorsearch.search.report: the progress line, tables, final summary and tuning curve files."""

import csv
import doctest
import io
import math
from types import SimpleNamespace

import pytest

from tensorsearch.search import report
from tensorsearch.search.report import (
    ProgressBar,
    final_summary,
    format_duration,
    format_markdown_table,
    format_table,
    progress_line,
    write_curve_csv,
    write_curve_png,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def progress(done, total=100, best=312.4, elapsed=62.0, eta=190.0, failed=2, unit="GOPS"):
    return SimpleNamespace(
        trials_done=done,
        trials_total=total,
        best_throughput=best,
        unit=unit,
        elapsed_s=elapsed,
        eta_s=eta,
        failed=failed,
    )


class FakeStream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_doctests():
    assert doctest.testmod(report).failed == 0


def test_progress_line_format():
    line = progress_line(progress(64, 256), width=10)
    assert line == "[##........] 64/256 trials  best 312.4 GOPS  failed 2  elapsed 1:02  left ~3:10"


def test_progress_line_before_any_success_and_without_eta():
    line = progress_line(progress(0, 8, best=None, elapsed=0.4, eta=None, failed=0, unit="GFLOPS"), width=4)
    assert line == "[....] 0/8 trials  best -  failed 0  elapsed 0:00  left ?"


def test_progress_line_done_is_full():
    line = progress_line(progress(256, 256, eta=None), width=10)
    assert line.startswith("[##########] 256/256 trials") and line.endswith("left ~0:00")


def test_format_duration():
    assert format_duration(0) == "0:00"
    assert format_duration(59.6) == "1:00"
    assert format_duration(3725) == "1:02:05"
    assert format_duration(math.inf) == "?"
    assert format_duration(None) == "?"


def test_progress_bar_redraws_in_place_on_a_tty():
    out = FakeStream(tty=True)
    bar = ProgressBar(out, width=10)
    bar(progress(5, 100, best=1234.5, elapsed=3725))
    bar(progress(6, 100, best=1.0, elapsed=1))  # a shorter line: the rest of the old one is blanked
    first = progress_line(progress(5, 100, best=1234.5, elapsed=3725), 10)
    second = progress_line(progress(6, 100, best=1.0, elapsed=1), 10)
    assert len(second) < len(first)
    assert out.getvalue() == "\r" + first + "\r" + second + " " * (len(first) - len(second))
    bar.close()
    assert out.getvalue().endswith("\n") and out.getvalue().count("\n") == 1
    bar.close()  # idempotent
    assert out.getvalue().count("\n") == 1


def test_progress_bar_prints_every_tenth_when_not_a_tty():
    out = FakeStream(tty=False)
    clock = FakeClock()
    bar = ProgressBar(out, width=10, interval_s=30, clock=clock)
    for done in range(101):
        clock.now += 0.1
        bar(progress(done, 100))
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [int(line.split()[1].split("/")[0]) for line in lines] == list(range(0, 101, 10))
    assert lines[-1] == progress_line(progress(100, 100), 10)


def test_progress_bar_prints_after_the_interval_and_always_the_last():
    out = FakeStream(tty=False)
    clock = FakeClock()
    bar = ProgressBar(out, width=10, interval_s=30, clock=clock)
    bar(progress(0, 1000))  # printed: the first
    clock.now = 10
    bar(progress(1, 1000))  # not: same tenth, 10 s later
    clock.now = 41
    bar(progress(2, 1000))  # printed: 41 s since the last line
    clock.now = 42
    bar(progress(3, 1000))  # not
    assert [line.split()[1] for line in out.getvalue().splitlines()] == ["0/1000", "2/1000"]
    bar.close()  # an interrupted run: the latest progress is printed at close
    assert out.getvalue().splitlines()[-1].split()[1] == "3/1000"
    bar.close()
    assert len(out.getvalue().splitlines()) == 3


def test_progress_bar_prints_the_last_trial_once():
    out = FakeStream(tty=False)
    with ProgressBar(out, clock=FakeClock()) as bar:
        bar(progress(8, 8))
        bar(progress(8, 8))
    assert len(out.getvalue().splitlines()) == 1


def test_format_table_aligns_numbers_right():
    text = format_table([("GMM", 312.4, "int8"), ("C2D", 88.0, "float32")], ["workload", "GOPS", "dtype"])
    assert text.splitlines() == [
        "workload   GOPS  dtype",
        "--------  -----  -------",
        "GMM       312.4  int8",
        "C2D        88.0  float32",
    ]


def test_format_table_without_header_and_bad_row():
    assert format_table([("a", 1), ("bbb", 22)]) == "a     1\nbbb  22"
    with pytest.raises(ValueError, match="row 1 has 1 cells, expected 2"):
        format_table([("a", 1), ("b",)], ["x", "y"])


def test_format_markdown_table():
    text = format_markdown_table([("GMM", 312.4), ("a|b", None)], ["workload", "GOPS"])
    assert text.splitlines() == [
        "| workload |  GOPS |",
        "| -------- | ----: |",
        "| GMM      | 312.4 |",
        "| a\\|b     |       |",
    ]


def fake_result(tmp_path, latency=0.5e-3, throughput=8.4, records=(True, False, True, True)):
    return SimpleNamespace(
        name="GMM/0/int8",
        trials=4,
        latency=latency,
        throughput=throughput,
        unit="GOPS",
        wall_seconds=75.25,
        work_dir=tmp_path,
        hardware_key="x86-emeraldrapids-0123456789abcdef",
        workload_key="ab12cd34",
        records=[SimpleNamespace(ok=ok) for ok in records],
    )


def test_final_summary(tmp_path):
    text = final_summary(fake_result(tmp_path), [tmp_path / "tuning_curve.png"])
    lines = text.splitlines()
    assert lines[0] == "tuning finished: GMM/0/int8"
    fields = {line.split(None, 1)[0]: line for line in lines[1:]}
    assert "ab12cd34" in fields["workload"]
    assert "x86-emeraldrapids-0123456789abcdef" in fields["hardware"]
    assert "4 measured" in fields["trials"]
    assert "4 (1 failed)" in fields["records"]
    assert "0.5 ms" in text
    assert "8.4 GOPS" in fields["throughput"]
    assert "1:15  (75.2 s)" in fields["tuning"]
    assert str(tmp_path / "database") in text and str(tmp_path / "tuning_curve.png") in text


def test_final_summary_when_every_trial_failed(tmp_path):
    text = final_summary(fake_result(tmp_path, latency=math.inf, throughput=0.0, records=(False, False)))
    assert "no trial succeeded" in text and "2 (2 failed)" in text


CURVE = [(1, None), (2, 10.0), (3, 10.0), (4, 25.5), (64, 25.5), (65, 40.25)]


def test_write_curve_png(tmp_path):
    path = write_curve_png(tmp_path / "sub" / "curve.png", CURVE, "GMM/0/int8 on x86", "GOPS")
    data = path.read_bytes()
    assert path == tmp_path / "sub" / "curve.png"
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_write_curve_png_without_any_success(tmp_path):
    data = write_curve_png(tmp_path / "c.png", [(1, None), (2, 0.0)], "t", "GFLOPS").read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert write_curve_png(tmp_path / "e.png", [], "t", "GFLOPS").read_bytes().startswith(PNG_MAGIC)


def test_write_curve_csv(tmp_path):
    path = write_curve_csv(tmp_path / "curve.csv", CURVE, "GOPS")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    assert rows == [
        ["trials", "best_throughput", "unit"],
        ["1", "", "GOPS"],
        ["2", "10", "GOPS"],
        ["3", "10", "GOPS"],
        ["4", "25.5", "GOPS"],
        ["64", "25.5", "GOPS"],
        ["65", "40.25", "GOPS"],
    ]


@pytest.mark.slow
def test_stages_are_lines_and_a_spinner_turns_on_a_terminal():
    import io
    import time as _time
    from types import SimpleNamespace as P

    def stage(text):
        return P(
            trials_done=0,
            trials_total=8,
            best_throughput=None,
            unit="GOPS",
            elapsed_s=0,
            eta_s=None,
            failed=0,
            stage=text,
        )

    log = io.StringIO()
    with ProgressBar(log, width=4) as bar:
        bar(stage("starting Ray"))
        bar(stage("searching the first round (2 design spaces)"))
    assert log.getvalue() == "starting Ray ...\nsearching the first round (2 design spaces) ...\n"
    term = io.StringIO()
    bar = ProgressBar(term, width=4, tty=True)
    bar(stage("searching the first round"))
    _time.sleep(0.6)
    bar(P(trials_done=1, trials_total=8, best_throughput=2.0, unit="GOPS", elapsed_s=1, eta_s=None, failed=0))
    bar.close()
    text = term.getvalue()
    assert text.startswith("searching the first round ...\n")
    assert "\r| searching the first round (0:00)" in text or "\r/ searching the first round (0:00)" in text
    assert text.rstrip().endswith("left ?")
