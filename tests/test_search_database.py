"""The JSON-lines tuning database: round trip, resume, hardware isolation, damaged files."""

import dataclasses
import json
import math
import time
import warnings

import pytest

from tensorsearch import hardware, workloads
from tensorsearch.ir.structural import structural_equal
from tensorsearch.search.database import Database, DatabaseError, TuningRecord, hardware_key, workload_key

GMM = workloads.make("GMM", (1, 16, 16, 16), "float32")
GMM_INT8 = workloads.make("GMM", (1, 16, 16, 16), "int8")
ER = hardware.load("x86-emeraldrapids")
ZEN = hardware.load("x86-znver4")


def record(wk, hk, cand, latencies=(2e-4, 1e-4, 3e-4), error=None, trial=0):
    trace = json.dumps({"insts": [["split", cand]]})
    return TuningRecord(wk, hk, cand, trace, tuple(latencies), error, 0.25, trial, time.time())


def test_keys():
    assert workload_key(GMM.func) == workload_key(workloads.make("GMM", (1, 16, 16, 16), "float32").func)
    assert workload_key(GMM.func) != workload_key(GMM_INT8.func)
    assert len(workload_key(GMM.func)) == 16
    er = hardware_key(ER)
    assert er.startswith("x86-emeraldrapids-") and len(er) == len("x86-emeraldrapids-") + 16
    assert hardware_key("x86-emeraldrapids") == er  # a name is loaded first
    assert hardware_key(ZEN) != er
    # same name, different content: a different key, for any field (intrinsics included)
    assert hardware_key(dataclasses.replace(ER, cores=ER.cores + 1)) != er
    assert hardware_key(dataclasses.replace(ER, intrinsic_sets=())) != er
    # where the file was read from is not content
    assert hardware_key(dataclasses.replace(ER, source="/elsewhere/x86-emeraldrapids.yaml")) == er


def test_record_properties():
    ok = record("w", "h", "c", latencies=(3.0, 1.0, 2.0))
    assert ok.ok and ok.latency == 1.0  # the fastest repeat
    failed = record("w", "h", "d", latencies=(), error="build: boom")
    assert not failed.ok and failed.latency == math.inf


def test_emulated_records_are_kept_but_never_ranked(tmp_path):
    db = Database(tmp_path)
    wk, hk = db.commit_workload(GMM.func), hardware_key(ER)
    native = record(wk, hk, "a", (3e-4,))
    emulated = dataclasses.replace(record(wk, hk, "b", (1e-6,)), emulated=True)  # qemu's wall time
    assert emulated.ok and not emulated.ranks and emulated.latency == math.inf and native.ranks
    for r in (native, emulated):
        db.commit_record(r)
    db.close()
    lines = [json.loads(line) for line in (tmp_path / "database" / "tuning_records.jsonl").read_text().splitlines()]
    assert [line["emulated"] for line in lines] == [False, True]
    again = Database(tmp_path)
    assert again.records(wk, hk) == [native, emulated]
    assert again.best(wk, hk, k=5) == [native]  # the emulated one is faster on paper, and not ranked
    assert again.latency(emulated) == math.inf
    assert TuningRecord.from_json({k: v for k, v in lines[0].items() if k != "emulated"}) == native  # older lines


def test_a_record_keeps_the_cpu_that_timed_it(tmp_path):
    db = Database(tmp_path)
    wk, hk = db.commit_workload(GMM.func), hardware_key(ZEN)
    xeon = hardware.CpuIdentity("x86_64", "icelake-server", "Intel(R) Xeon(R) Processor @ 2.80GHz", "e995f7517e3b")
    timed = dataclasses.replace(record(wk, hk, "a", (3e-4,)), measured_on=xeon)
    unknown = record(wk, hk, "b", (2e-4,))  # a GPU's, or written before the CPU was kept
    for r in (timed, unknown):
        db.commit_record(r)
    db.close()
    lines = [json.loads(line) for line in (tmp_path / "database" / "tuning_records.jsonl").read_text().splitlines()]
    assert lines[0]["measured_on"] == {
        "arch": "x86_64",
        "cpu": "icelake-server",
        "model": "Intel(R) Xeon(R) Processor @ 2.80GHz",
        "features": "e995f7517e3b",
    }
    assert lines[1]["measured_on"] is None
    assert Database(tmp_path).records(wk, hk) == [timed, unknown]
    old = {k: v for k, v in lines[0].items() if k != "measured_on"}  # a line written before it was kept
    assert TuningRecord.from_json(old) == dataclasses.replace(timed, measured_on=None)
    with pytest.raises(ValueError, match="the CPU identity's 'features' is missing"):
        TuningRecord.from_json({**lines[0], "measured_on": {"arch": "x86_64", "cpu": "znver4"}})


def test_round_trip_and_resume(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func, GMM.key)
    assert wk == workload_key(GMM.func)
    assert db.commit_workload(GMM.func, GMM.key) == wk  # idempotent
    wk8 = db.commit_workload(GMM_INT8.func)
    hk = hardware_key(ER)
    recs = [
        record(wk, hk, "a", (3e-4, 3e-4, 3e-4), trial=0),
        record(wk, hk, "b", (), "wrong result: output Z differs", trial=1),
        record(wk, hk, "c", (1e-4, 1.5e-4, 0.5e-4), trial=2),
        record(wk, hk, "d", (2e-4,), trial=3),
        record(wk8, hk, "e", (9e-5,), trial=0),
    ]
    for r in recs:
        db.commit_record(r)
    db.close()
    lines = (tmp_path / "database" / "tuning_records.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["candidate_key"] for line in lines)
    assert len((tmp_path / "database" / "workloads.jsonl").read_text().splitlines()) == 2

    for db2 in (db, Database(tmp_path)):  # the same object, and a fresh one resuming the directory
        assert db2.records(wk, hk) == recs[:4]  # commit order, every field equal (floats exactly)
        assert db2.records(wk8, hk) == recs[4:]
        assert [r.candidate_key for r in db2.best(wk, hk, k=10)] == ["c", "d", "a"]
        assert db2.best(wk, hk)[0].latency == 0.5e-4  # the fastest repeat
        assert db2.has_candidate(wk, hk, "b")  # failed ones count: a resumed run does not re-measure them
        assert not db2.has_candidate(wk, hk, "e")
        assert structural_equal(db2.workload(wk), GMM.func)
        assert db2.workload_name(wk) == GMM.key and db2.workload_keys() == [wk, wk8]
    db3 = Database(tmp_path)
    db3.commit_record(record(wk, hk, "f", (5e-5,), trial=4))
    assert [r.candidate_key for r in Database(tmp_path).records(wk, hk)] == ["a", "b", "c", "d", "f"]
    with pytest.raises(DatabaseError, match="no workload with key 0123"):
        db3.workload("0123")


def test_retimings_rank_the_candidates_they_time(tmp_path):
    db = Database(tmp_path)
    wk, hk = db.commit_workload(GMM.func), hardware_key(ER)
    for cand, lat in (("a", 1e-4), ("b", 2e-4), ("c", 3e-4)):
        db.commit_record(record(wk, hk, cand, (lat,)))
    # a re-timed on a busy host: noise only adds time, so it keeps its own 1e-4; c was not re-timed
    db.commit_retiming(wk, hk, "a", [2.6e-4, 2.4e-4, 2.5e-4])
    db.commit_retiming(wk, hk, "b", [2.1e-4, 2.2e-4])
    db.commit_retiming(wk, hk, "b", [1.9e-4])  # re-timings add up: the fastest of all of them
    db.commit_retiming(wk, hk, "c", [])  # nothing timed: nothing written
    for db2 in (db, Database(tmp_path)):
        assert [r.candidate_key for r in db2.best(wk, hk, k=3)] == ["a", "b", "c"]
        assert db2.latency(db2.best(wk, hk)[0]) == 1e-4
        assert db2.latency(db2.best(wk, hk, k=2)[1]) == 1.9e-4
        assert db2.records(wk, hk)[0].latency == 1e-4  # the records themselves are untouched
    lines = (tmp_path / "database" / "retimings.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["candidate_key"] == "a"
    (tmp_path / "database" / "retimings.jsonl").write_text('{"format": 1, "workload_key": "w"}\n' + lines[0] + "\n")
    with pytest.raises(DatabaseError, match=r"retimings.jsonl: line 1 is not a valid re-timing \('hardware_key'\)"):
        Database(tmp_path)


def test_a_record_never_re_timed_ranks_after_the_re_timed_finalists(tmp_path):
    """The finalists, re-timed side by side, rank before a record never compared with them, even
    one whose own latency is faster than their re-timings (which ran on a busier host)."""
    db = Database(tmp_path)
    wk, hk = db.commit_workload(GMM.func), hardware_key(ER)
    for cand, lat in (("a", 3.2e-5), ("b", 3.3e-5), ("late", 3.5e-5)):
        db.commit_record(record(wk, hk, cand, (lat,)))
    db.commit_retiming(wk, hk, "a", [3.8e-5])
    db.commit_retiming(wk, hk, "b", [3.1e-5])
    assert [r.candidate_key for r in db.best(wk, hk, k=3)] == ["b", "a", "late"]
    assert [db.latency(r) for r in db.best(wk, hk, k=3)] == [3.1e-5, 3.2e-5, 3.5e-5]
    assert [r.candidate_key for r in db.fastest_measured(wk, hk, 2)] == ["a", "b"]  # own latencies


def test_hardware_isolation(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func)
    edited = dataclasses.replace(ER, vector_bits=256)  # same name, different content
    keys = [hardware_key(ER), hardware_key(ZEN), hardware_key(edited)]
    assert len(set(keys)) == 3
    for i, hk in enumerate(keys):
        db.commit_record(record(wk, hk, f"cand{i}", (1e-4 * (i + 1),)))
    db = Database(tmp_path)
    for i, hk in enumerate(keys):
        assert [r.candidate_key for r in db.records(wk, hk)] == [f"cand{i}"]
        assert [r.candidate_key for r in db.best(wk, hk, k=5)] == [f"cand{i}"]
        for j in range(3):
            assert db.has_candidate(wk, hk, f"cand{j}") == (i == j)
    assert db.records(wk, "x86-emeraldrapids") == []  # the bare name is not a key


def test_truncated_last_line_is_skipped(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func)
    hk = hardware_key(ER)
    db.commit_record(record(wk, hk, "a"))
    db.commit_record(record(wk, hk, "b"))
    db.close()
    path = tmp_path / "database" / "tuning_records.jsonl"
    full = path.read_bytes()
    path.write_bytes(full[: len(full) - 40])  # killed in the middle of writing "b"
    with pytest.warns(UserWarning, match=r"tuning_records.jsonl: skipping line 2, the last one"):
        db = Database(tmp_path)
    assert [r.candidate_key for r in db.records(wk, hk)] == ["a"]
    db.commit_record(record(wk, hk, "c"))  # cuts the partial line off before appending
    db.close()
    assert [r.candidate_key for r in Database(tmp_path).records(wk, hk)] == ["a", "c"]
    assert len(path.read_text().splitlines()) == 2


def test_corrupt_last_line_with_newline_is_skipped(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func)
    db.commit_record(record(wk, "h", "a"))
    db.close()
    path = tmp_path / "database" / "tuning_records.jsonl"
    path.write_bytes(path.read_bytes() + b'{"workload_key": "\n')
    with pytest.warns(UserWarning, match="skipping line 2"):
        assert [r.candidate_key for r in Database(tmp_path).records(wk, "h")] == ["a"]


def test_damaged_middle_line_is_skipped_then_repaired_keeping_every_record(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func)
    for c in "abcd":
        db.commit_record(record(wk, "h", c))
    db.close()
    path = tmp_path / "database" / "tuning_records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:30] + "\n"  # "b" cut off, then "c" and "d" appended after it
    lines[2] = lines[2][:25] + lines[3]  # "c" cut off, "d" glued to it without a newline
    lines[3] = "\n"
    path.write_text("".join(lines) + lines[0].replace('"a"', '"e"'))
    with pytest.warns(UserWarning) as caught:
        db = Database(tmp_path)
    messages = [str(w.message) for w in caught]
    assert any("skipping line 2, which is damaged" in m for m in messages)
    assert any(
        "skipping line 3, which is damaged" in m and "the whole record at its end is kept" in m for m in messages
    )
    assert [r.candidate_key for r in db.records(wk, "h")] == ["a", "d", "e"]
    with pytest.warns(UserWarning, match=r"repaired: 2 damaged line\(s\) removed, all 3 whole lines kept"):
        db.commit_record(record(wk, "h", "f"))  # the first commit repairs the file
    db.close()
    assert [json.loads(line)["candidate_key"] for line in path.read_text().splitlines()] == ["a", "d", "e", "f"]
    damaged = (tmp_path / "database" / "tuning_records.jsonl.damaged").read_text().splitlines()
    assert damaged == [lines[1].rstrip("\n"), lines[2][:25]]  # no byte is thrown away
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.candidate_key for r in Database(tmp_path).records(wk, "h")] == ["a", "d", "e", "f"]


def test_a_middle_line_that_is_json_but_not_a_record_is_an_error(tmp_path):
    db = Database(tmp_path)
    wk = db.commit_workload(GMM.func)
    for c in "abc":
        db.commit_record(record(wk, "h", c))
    db.close()
    path = tmp_path / "database" / "tuning_records.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = '{"workload_key": "w"}\n'  # not damage a crash leaves: refused, never skipped
    path.write_text("".join(lines))
    with pytest.raises(DatabaseError, match=r"line 2 is not a valid record \(the record lacks hardware_key"):
        Database(tmp_path)


def test_damaged_workload_line_is_skipped(tmp_path):
    db = Database(tmp_path)
    keys = [db.commit_workload(GMM.func), db.commit_workload(GMM_INT8.func)]
    db.close()
    path = tmp_path / "database" / "workloads.jsonl"
    path.write_text("not json\n" + path.read_text())
    with pytest.warns(UserWarning, match=r"workloads.jsonl: skipping line 1, which is damaged"):
        assert Database(tmp_path).workload_keys() == keys
    path.write_text('{"name": "no key"}\n' + path.read_text())  # JSON but not a workload line: refused
    with pytest.raises(DatabaseError, match=r"workloads.jsonl: line 1 lacks 'key'"), pytest.warns(UserWarning):
        Database(tmp_path)
