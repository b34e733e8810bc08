"""A work dir under several processes: the database's locked appends and repairs, the work-dir
lock, and three ``tensorsearch tune`` processes on one work dir (one killed in the middle of
writing a record, one refused while it runs, one resuming after the damaged line it left).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from tensorsearch import workloads
from tensorsearch.schedule import Trace
from tensorsearch.search import Database, TuneError, WorkDirBusy, hold_work_dir, tune
from tensorsearch.search.database import TEST_HANG_ENV, TuningRecord

REPO = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
ENV.pop(TEST_HANG_ENV, None)

# appends N records named NAME-0 .. NAME-(N-1) to the database in WORK, each with a trace of about
# 40 KB (a write of several pages), once the file GO exists
APPENDER = textwrap.dedent(
    """
    import os, sys, time
    from tensorsearch.search.database import Database, TuningRecord
    work, name, n, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    db = Database(work)
    while not os.path.exists(go):
        time.sleep(0.01)
    for i in range(n):
        db.commit_record(TuningRecord("w", "h", f"{name}-{i}", "x" * 40000, (1e-3,), None, 0.1, i, time.time()))
        print(f"{name}-{i}", flush=True)
    """
)


def lines_of(path: Path) -> list[dict]:
    """Every line of a record file, each of which must be a whole JSON object."""
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.splitlines()]


def appender(work: Path, name: str, n: int, go: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, str(work), name, str(n), str(go)],
        env=env or ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen in {seconds:.0f} s")
        time.sleep(0.05)


# the database ------------------------------------------------------------------------------


@pytest.mark.slow
def test_processes_appending_at_once_after_a_damaged_last_line_lose_nothing(tmp_path):
    """Three processes append 60 records each, all of them opened after a process was killed in
    the middle of a line: each saw the damaged line at the same offset, and before, each cut the
    file back to that offset at its first commit, losing what the others had appended since.
    They start one after another, then append at once; a lock-free reader opens the database
    again and again meanwhile."""
    db = Database(tmp_path)
    db.commit_record(TuningRecord("w", "h", "before", "[]", (1e-3,), None, 0.1, 0, 0.0))
    db.close()
    path = tmp_path / "database" / "tuning_records.jsonl"
    garbage = b'{"format":1,"workload_key":"w","hardware_key":"h","candidate_key":"cut'
    path.write_bytes(path.read_bytes() + garbage)
    names = ("p", "q", "r")
    procs = [appender(tmp_path, name, 60, tmp_path / f"go-{name}") for name in names]
    time.sleep(4)  # every writer has opened the database and seen the damaged line
    assert all(p.poll() is None for p in procs)
    seen = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the damaged line, while it is there
        for k, name in enumerate(names):
            (tmp_path / f"go-{name}").touch()
            wait_for(lambda k=k: path.read_bytes().count(b"\n") >= 1 + 10 * (k + 1), 60, f"10 records of {name}")
        while any(p.poll() is None for p in procs):
            n = len(Database(tmp_path).records("w", "h"))  # never an error, whatever is being written
            assert n >= seen
            seen = n
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0, err
        assert len(out.split()) == 60
    keys = [obj["candidate_key"] for obj in lines_of(path)]
    expected = ["before"] + [f"{name}-{i}" for name in names for i in range(60)]
    assert sorted(keys) == sorted(expected)  # every record once, nothing lost
    for name in names:  # each process's records in its own order
        assert [k for k in keys if k.startswith(f"{name}-")] == [f"{name}-{i}" for i in range(60)]
    assert (tmp_path / "database" / "tuning_records.jsonl.damaged").read_bytes() == garbage + b"\n"


@pytest.mark.slow
def test_a_writer_killed_in_the_middle_of_a_line_holds_others_back_only_until_it_dies(tmp_path):
    path = tmp_path / "database" / "tuning_records.jsonl"
    go = tmp_path / "go"
    go.touch()
    hung = appender(tmp_path, "k", 5, go, env={**ENV, TEST_HANG_ENV: "3"})
    try:
        wait_for(lambda: path.exists() and path.read_bytes().count(b"\n") == 2 and not path.read_bytes().endswith(b"\n"),
                 60, "the half-written third line")  # fmt: skip
        half = path.read_bytes().split(b"\n")[-1]
        assert half.startswith(b'{"format":1') and len(half) > 10000
        # a reader is not held back, and sees the two whole records
        with pytest.warns(UserWarning, match="skipping line 3, the last one"):
            assert [r.candidate_key for r in Database(tmp_path).records("w", "h")] == ["k-0", "k-1"]
        other = appender(tmp_path, "o", 4, go)
        time.sleep(3)
        assert other.poll() is None and path.read_bytes().endswith(half)  # waiting for the lock
    finally:
        hung.kill()  # SIGKILL: the kernel drops its lock
        hung.wait()
    hung.communicate()
    _, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert "skipping line 3, the last one" in err  # it opened the database after the half line
    assert [obj["candidate_key"] for obj in lines_of(path)] == ["k-0", "k-1", "o-0", "o-1", "o-2", "o-3"]
    assert (tmp_path / "database" / "tuning_records.jsonl.damaged").read_bytes() == half + b"\n"


def test_a_repair_by_one_process_keeps_what_another_appends(tmp_path):
    """One Database repairs a damaged line in the middle (a new file replaces the old one) while
    another holds the old file open: the other's next commit goes into the new file."""
    rec = lambda c: TuningRecord("w", "h", c, "[]", (1e-3,), None, 0.1, 0, 0.0)  # noqa: E731
    first = Database(tmp_path)
    for c in "abc":
        first.commit_record(rec(c))  # the file is open in `first`
    path = tmp_path / "database" / "tuning_records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    with open(path, "r+b") as f:  # damage line 2 in place (same file)
        f.write(lines[0] + lines[1][:20] + b" " * (len(lines[1]) - 21) + b"\n")
    with pytest.warns(UserWarning, match="skipping line 2, which is damaged"):
        second = Database(tmp_path)
    with pytest.warns(UserWarning, match="repaired: 1 damaged line"):
        second.commit_record(rec("d"))
    first.commit_record(rec("e"))  # into the repaired file, not the replaced one
    assert [obj["candidate_key"] for obj in lines_of(path)] == ["a", "c", "d", "e"]
    assert [r.candidate_key for r in Database(tmp_path).records("w", "h")] == ["a", "c", "d", "e"]


# the work-dir lock -----------------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    from tensorsearch.search.tuning.workdir import hold_work_dir
    with hold_work_dir(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.slow
def test_a_held_work_dir_refuses_tune_at_once_naming_the_holder_until_it_dies(tmp_path):
    work = tmp_path / "work"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(work)], env=ENV, cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        info = json.loads((work / ".lock").read_text())
        assert info["pid"] == holder.pid
        wl = workloads.make("GMM", (1, 8, 8, 8), "float32")
        t = time.monotonic()
        with pytest.raises(WorkDirBusy) as busy:
            tune(wl, "host", trials=1, work_dir=work)
        assert time.monotonic() - t < 5  # before Ray starts
        assert isinstance(busy.value, TuneError) and busy.value.pid == holder.pid
        assert re.fullmatch(
            rf"work dir {re.escape(str(work))} is in use by another tensorsearch tune \(pid {holder.pid}, "
            r"started \d\d:\d\d:\d\d\); wait for it to finish or use another work dir",
            str(busy.value),
        )
        assert not (work / "database").exists()
    finally:
        holder.kill()  # SIGKILL
        holder.wait()
    with hold_work_dir(work):  # released by the kernel: the next run goes on
        assert json.loads((work / ".lock").read_text())["pid"] == os.getpid()
    assert (work / ".lock").read_text() == ""


def test_the_work_dir_lock_is_reentrant_in_a_thread_and_refuses_other_threads(tmp_path):
    errors = []

    def other():
        try:
            with hold_work_dir(tmp_path):
                pass
        except WorkDirBusy as e:
            errors.append(e)

    with hold_work_dir(tmp_path), hold_work_dir(tmp_path):  # the CLI holds it around tune, which takes it too
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(errors) == 1 and errors[0].pid == os.getpid()
    with hold_work_dir(tmp_path):  # released after the outer hold
        pass


def test_a_run_refused_before_it_began_leaves_no_work_dir(tmp_path):
    with hold_work_dir(tmp_path / "new"):
        pass
    assert not (tmp_path / "new").exists()


# three `tensorsearch tune` processes on one work dir ---------------------------------------------


def cli(work: Path, trials: int, seed: int = 0) -> list[str]:
    return [sys.executable, "-m", "tensorsearch", "tune", "GMM", "--index", "0", "--dtype", "float32",
            "--hardware", "host", "--trials", str(trials), "--work-dir", str(work), "--seed", str(seed)]  # fmt: skip


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run and the local Ray cluster it started (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@pytest.mark.slow
def test_three_tune_processes_on_one_work_dir(tmp_path):
    """A is killed in the middle of writing its 4th record; B starts while A runs and is refused
    with one line naming A's pid; C starts after A's death left a damaged last line and resumes.
    Afterwards every record A and C reported is in the database once, A's records unchanged at
    the head, no candidate measured twice, trial numbers 1..8, the half line kept aside."""
    work = tmp_path / "work"
    path = work / "database" / "tuning_records.jsonl"
    logs = {name: (open(tmp_path / f"{name}.out", "w"), open(tmp_path / f"{name}.err", "w")) for name in "AC"}
    a = subprocess.Popen(cli(work, 8), env={**ENV, TEST_HANG_ENV: "4"}, cwd=REPO, start_new_session=True,
                         stdout=logs["A"][0], stderr=logs["A"][1])  # fmt: skip
    try:

        def half_written() -> bool:
            if a.poll() is not None:
                pytest.fail(f"A ended early: {(tmp_path / 'A.err').read_text()[-3000:]}")
            data = path.read_bytes() if path.exists() else b""
            return data.count(b"\n") == 3 and not data.endswith(b"\n")

        wait_for(half_written, 600, "A's half-written 4th record")
        before = path.read_bytes()
        whole_a, half = before.rsplit(b"\n", 1)
        whole_a += b"\n"

        # B: refused at once, one line naming A's pid, exit code 1, the database untouched
        b = subprocess.run(cli(work, 8, seed=1), env=ENV, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert b.returncode == 1, b.stderr
        assert "Traceback" not in b.stderr and b.stdout == ""
        assert re.fullmatch(
            rf"tensorsearch tune: error: work dir {re.escape(str(work))} is in use by another tensorsearch tune "
            rf"\(pid {a.pid}, started \d\d:\d\d:\d\d\); wait for it to finish or use another --work-dir",
            b.stderr.strip().splitlines()[-1],
        )
        assert [line for line in b.stderr.splitlines() if "error" in line.lower()] == [
            b.stderr.strip().splitlines()[-1]
        ]
        assert path.read_bytes() == before

        # a reader is not held back by A's lock
        with pytest.warns(UserWarning, match="skipping line 4, the last one"):
            assert len(Database.open_existing(work)) == 3
    finally:
        kill_group(a)  # SIGKILL, in the middle of its 4th record's line
    assert path.read_bytes() == before  # the damaged last line C starts after

    # C: resumes, repairs the damaged line, measures the rest
    c = subprocess.Popen(cli(work, 8), env=ENV, cwd=REPO, start_new_session=True,
                         stdout=logs["C"][0], stderr=logs["C"][1])  # fmt: skip
    try:
        c.wait(timeout=600)
    finally:
        kill_group(c)
        for f in (*logs["A"], *logs["C"]):
            f.close()
    out_a, err_a = ((tmp_path / f"A.{s}").read_text() for s in ("out", "err"))
    out_c, err_c = ((tmp_path / f"C.{s}").read_text() for s in ("out", "err"))
    assert c.returncode == 0, err_c[-3000:]
    assert "skipping line 4, the last one" in err_c

    # what each process reported: A's progress reached 3 of 8, C's summary counts 8
    assert max(int(n) for n in re.findall(r"(\d+)/8 trials", err_a)) == 3 and out_a == ""
    assert re.search(r"trials\s+8 measured", out_c) and re.search(r"records\s+8 \(", out_c)

    final = path.read_bytes()
    assert final.startswith(whole_a)  # A's records, byte for byte, once, at the head
    records = lines_of(path)
    assert len(records) == 8
    keys = [r["candidate_key"] for r in records]
    assert len(set(keys)) == 8  # no candidate measured twice
    assert sorted(r["trial"] for r in records) == list(range(1, 9))
    assert (work / "database" / "tuning_records.jsonl.damaged").read_bytes() == half + b"\n"
    for line in whole_a.splitlines():
        assert final.count(line + b"\n") == 1
    # the best trace C wrote is the best record's of the whole database
    db = Database.open_existing(work)
    (wkey,) = db.workload_keys()
    (best,) = db.best(wkey, records[0]["hardware_key"])
    assert (work / "best_trace.json").read_text() == Trace.from_json(best.trace).as_json_text()
    assert (work / ".lock").read_text() == ""
