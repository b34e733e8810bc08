"""Trace JSON and database files keep loading: pinned argument names, golden fixtures written by
earlier versions (tests/fixtures/README.md says how each was made; nothing here rewrites them),
and a one-line refusal of versions newer than this code reads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tensorsearch import workloads
from tensorsearch.cli.main import main
from tensorsearch.interpreter import interpret
from tensorsearch.ir import structural_hash
from tensorsearch.schedule import INSTRUCTION_KINDS, Schedule, Trace
from tensorsearch.schedule.trace import TRACE_FORMAT, trace_version
from tensorsearch.search.database import Database, DatabaseError, TuningRecord, workload_key

FIXTURES = Path(__file__).resolve().parent / "fixtures"
GOLDEN_WORKLOAD = ("GMM", (1, 16, 16, 16), "float32")  # what the golden traces and databases were tuned for
GOLDEN_WORKLOAD_KEY = "6cc288c7d185e17d"
GOLDEN_HARDWARE_KEY = "x86-znver4-41647d2b2887d145"


# --- pinned argument names ------------------------------------------------------------------


def _kind_entry(kind) -> dict:
    return {
        "args": list(kind.arg_names),
        "pure": kind.pure,
        "sampling": kind.sampling,
        "converted_args": sorted(kind.to_json),
    }


def test_instruction_kinds_and_argument_names_are_pinned():
    pinned = json.loads((FIXTURES / "instruction_kinds.json").read_text())
    now = {name: _kind_entry(kind) for name, kind in INSTRUCTION_KINDS.items()}
    changed = [f"{n}: {pinned[n]} became {now[n]}" for n in sorted(pinned) if n in now and now[n] != pinned[n]]
    gone = [f"{n} is no longer registered" for n in sorted(set(pinned) - set(now))]
    assert not changed + gone, (
        "instruction kinds differ from tests/fixtures/instruction_kinds.json, so traces and databases "
        "written before would stop loading (keep the old names, or raise TRACE_VERSION and convert old traces): "
        + "; ".join(changed + gone)
    )
    added = sorted(set(now) - set(pinned))
    assert not added, f"new instruction kinds {added}: add them to tests/fixtures/instruction_kinds.json"


# --- golden traces --------------------------------------------------------------------------


def _golden_workload():
    name, args, dtype = GOLDEN_WORKLOAD
    return workloads.make(name, args, dtype)


def _check_computes_gmm(func) -> None:
    """``func`` run by the interpreter equals numpy's GMM on seeded random inputs."""
    wl = _golden_workload()
    inputs = wl.make_inputs(np.random.default_rng(12))
    outputs = list(interpret(func, *inputs))[len(inputs) :]
    wl.check(outputs, wl.reference(*inputs))


@pytest.mark.parametrize(("name", "version"), [("golden_trace_v0.json", 0), ("golden_trace_v1.json", 1)])
def test_golden_trace_loads_and_replays_to_a_correct_program(name, version):
    text = (FIXTURES / name).read_text()
    assert trace_version(json.loads(text)) == version
    trace = Trace.from_json(text)
    kinds = {inst.kind.name for inst in trace}
    assert {"split", "reorder", "cache_write", "parallel", "vectorize", "sample_perfect_tile"} <= kinds
    sch = Schedule(_golden_workload().func)
    trace.apply(sch)
    _check_computes_gmm(sch.func)


def test_golden_traces_are_one_program_and_todays_writer_writes_the_v1_fixture():
    v0, v1 = (Trace.from_json((FIXTURES / f"golden_trace_v{v}.json").read_text()) for v in (0, 1))
    hashes = []
    for trace in (v0, v1):
        sch = Schedule(_golden_workload().func)
        trace.apply(sch)
        hashes.append(structural_hash(sch.func))
    assert hashes[0] == hashes[1]
    assert v0.as_json_text() == (FIXTURES / "golden_trace_v1.json").read_text()
    assert json.loads(v0.as_json_text())["format"] == TRACE_FORMAT


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"format": "tensorsearch.trace/2", "insts": []}, "trace format tensorsearch.trace/2 is newer than"),
        ({"format": "tensorsearch.trace/one", "insts": []}, "got an object with format 'tensorsearch.trace/one'"),
    ],
)
def test_unknown_trace_versions_are_refused(data, message):
    with pytest.raises(ValueError, match=message):
        Trace.from_json(json.dumps(data))


def test_cli_show_reads_both_versions_and_refuses_a_newer_one(tmp_path, capsys):
    sch = Schedule(workloads.get("GMM", 0).func)
    sch.get_loops(sch.get_block("Z"))
    path = tmp_path / "t.json"
    for data in (sch.trace.as_json(), sch.trace.as_json()["insts"]):
        path.write_text(json.dumps(data))
        assert main(["show", "GMM", "--trace", str(path)]) == 0
        assert "after the 2 instructions of" in capsys.readouterr().out
    path.write_text(json.dumps({"format": "tensorsearch.trace/7", "insts": []}))
    assert main(["show", "GMM", "--trace", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"tensorsearch show: error: trace file {path}: trace format tensorsearch.trace/7 is newer than this "
        "tensorsearch reads (versions 0 to 1); upgrade tensorsearch to load it"
    )


# --- golden databases -----------------------------------------------------------------------


def _golden_db(tmp_path: Path, version: int) -> Path:
    """A copy of the golden work directory (so that no test can change the fixture)."""
    work = tmp_path / f"golden_db_v{version}"
    shutil.copytree(FIXTURES / f"golden_db_v{version}", work)
    return work


def _lines(work: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (work / "database" / name).read_text().splitlines()]


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.slow
def test_golden_database_opens_with_its_records(tmp_path, version):
    work = _golden_db(tmp_path, version)
    assert all(line.get("format", 0) == version for line in _lines(work, "tuning_records.jsonl"))
    before = {p.name: p.read_bytes() for p in (work / "database").iterdir()}
    with Database.open_existing(work) as db:
        assert db.workload_keys() == [GOLDEN_WORKLOAD_KEY]
        assert db.workload_name(GOLDEN_WORKLOAD_KEY) == "GMM(1,16,16,16)/float32"
        func = db.workload(GOLDEN_WORKLOAD_KEY)
        assert workload_key(func) == GOLDEN_WORKLOAD_KEY
        records = db.records(GOLDEN_WORKLOAD_KEY, GOLDEN_HARDWARE_KEY)
        assert [r.trial for r in records] == [0, 1, 2] and len(db) == 3
        assert [r.ok for r in records] == [True, False, True]
        assert records[1].error == "build failed: golden fixture error" and records[1].latencies == ()
        assert records[0].latencies == (2.0e-5, 1.9e-5, 2.1e-5) and records[0].timestamp == 1.7e9
        assert db.best(GOLDEN_WORKLOAD_KEY, GOLDEN_HARDWARE_KEY)[0] is records[0]
        for record in records:
            sch = Schedule(func)
            Trace.from_json(record.trace).apply(sch)
        sch = Schedule(func)
        Trace.from_json(records[0].trace).apply(sch)
        _check_computes_gmm(sch.func)
    assert {p.name: p.read_bytes() for p in (work / "database").iterdir()} == before  # opening rewrites nothing


def test_a_version_0_database_takes_version_1_commits(tmp_path):
    work = _golden_db(tmp_path, 0)
    with Database(work) as db:
        old = db.records(GOLDEN_WORKLOAD_KEY, GOLDEN_HARDWARE_KEY)[0]
        db.commit_record(TuningRecord(**{**old.__dict__, "candidate_key": "0" * 16, "trial": 3}))
    assert [line.get("format", 0) for line in _lines(work, "tuning_records.jsonl")] == [0, 0, 0, 1]
    with Database(work) as db:
        assert [r.trial for r in db.records(GOLDEN_WORKLOAD_KEY, GOLDEN_HARDWARE_KEY)] == [0, 1, 2, 3]


@pytest.mark.parametrize("name", ["tuning_records.jsonl", "workloads.jsonl"])
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (2, "format 2 is newer than the formats this tensorsearch reads (0 to 1); upgrade tensorsearch to load it"),
        ("1", "format '1' is not a version number"),
    ],
)
def test_a_line_of_an_unknown_version_is_refused_naming_file_and_line(tmp_path, name, value, message):
    work = _golden_db(tmp_path, 1)
    path = work / "database" / name
    lines = _lines(work, name)
    lines[-1]["format"] = value
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DatabaseError) as info:
        Database(work)
    assert str(info.value) == f"{path}: line {len(lines)}: {message}"


def test_record_from_json_refuses_a_newer_version():
    (line,) = _lines(FIXTURES / "golden_db_v1", "tuning_records.jsonl")[:1]
    assert TuningRecord.from_json(line).trial == 0
    with pytest.raises(ValueError, match="format 9 is newer than"):
        TuningRecord.from_json({**line, "format": 9})
