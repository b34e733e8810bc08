"""The search's golden runs: a fixed seed and fixed records give the same traces, whatever the code's shape.

Measurement is the one thing a test cannot repeat, so here it is a table: a candidate's latencies
and failure are a function of its structural hash (:class:`TableMeasurer`), and everything else is
the real tuner: design spaces, evolutionary rounds, the cost model (one thread, seeded), the
database, the finalists' re-timing. The hardware is a plain AVX2 descriptor kept beside the
expected files (tests/fixtures/golden_search/), so the traces do not depend on the host.

- ``test_a_seeded_tune_proposes_the_golden_records``: tune from an empty work dir; every record's
  candidate, trace, latencies and error, and the best trace, are the expected ones.
- ``test_a_fixed_work_dir_replays_to_the_golden_best``: tune over a committed work dir (the
  golden run's database): with its trials done, nothing is measured and the best trace is the
  golden best; with more trials, the next round proposes the expected candidates.

The expected files were written by ``python tests/test_search_golden.py`` (run from the repository
root) and are never rewritten to make a test pass: a change of the search's behaviour shows here.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.ir import structural_hash
from tensorsearch.search import MeasureResult, SearchConfig

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden_search"
HARDWARE = GOLDEN / "x86-avx2.yaml"
EXPECTED = GOLDEN / "expected.json"
WORK_DIR = GOLDEN / "work_dir"  # the golden run's database, as tune wrote it
WORKLOAD = ("GMM", (1, 32, 32, 32), "float32")
SEED = 7
TRIALS = 24  # six rounds of four: the cost model is trained (16 samples) for the last two
MORE = 4  # the round a replay of the golden work dir proposes next
CONFIG = SearchConfig(population_size=16, init_min_unmeasured=8, genetic_num_iters=1, num_trials_per_iter=4)

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not hardware.load(HARDWARE).runs_here,
    reason="the golden descriptor is an x86-64 with AVX2 and FMA; this host cannot run its code",
)


def table_latencies(func: Any) -> tuple[tuple[float, ...], str | None]:
    """A candidate's latencies (three repeats, 50-150 us) and error, from its structural hash: one in eleven fails."""
    h = structural_hash(func)
    if h % 11 == 0:
        return (), "build: golden failure"
    base = 5e-5 + (h % 10_007) / 10_007 * 1e-4
    return (base * 1.02, base, base * 1.01), None


class _Pool:
    def take_events(self) -> list[dict[str, Any]]:
        return []


class TableMeasurer:
    """Stands in for ``Measurer``: the same calls, latencies from :func:`table_latencies`."""

    def __init__(self, func: Any, hardware: Any, **_: Any) -> None:
        self.pool = _Pool()

    def measure(self, funcs, on_result=None, slow_after=None):
        results = []
        for i, func in enumerate(funcs):
            latencies, error = table_latencies(func)
            results.append(MeasureResult(latencies, error, 0.5))
            if on_result is not None:
                on_result(i, results[-1])
        return results

    def retime(self, funcs, rounds=3):
        return [[[x * (1.03 + 0.01 * r) for x in table_latencies(f)[0]] for r in range(rounds)] for f in funcs]

    def close(self) -> None:
        pass


@pytest.fixture
def table_measurer(monkeypatch):
    monkeypatch.setattr("tensorsearch.search.tuning.tuner.Measurer", TableMeasurer)  # what tune measures with


def _tune(work_dir: Path, trials: int) -> Any:
    wl = workloads.make(*WORKLOAD)
    return ts.tune(wl, HARDWARE, trials, work_dir, SEED, config=CONFIG, workers=0, transfer=False, allow_other_cpu=True)


def _records(result: Any) -> list[dict[str, Any]]:
    return [
        {
            "trial": r.trial,
            "candidate_key": r.candidate_key,
            "latencies": list(r.latencies),
            "error": r.error,
            "trace": r.trace,
        }
        for r in result.records
    ]


def _summary(result: Any) -> dict[str, Any]:
    return {"best_trace": result.trace.as_json_text(), "records": _records(result)}


def test_a_seeded_tune_proposes_the_golden_records(tmp_path, table_measurer):
    expected = json.loads(EXPECTED.read_text())
    result = _tune(tmp_path, TRIALS)
    got = _summary(result)
    assert [r["candidate_key"] for r in got["records"]] == [r["candidate_key"] for r in expected["run"]["records"]]
    assert got == expected["run"]


def test_a_fixed_work_dir_replays_to_the_golden_best(tmp_path, table_measurer):
    expected = json.loads(EXPECTED.read_text())
    shutil.copytree(WORK_DIR, tmp_path, dirs_exist_ok=True)
    replayed = _tune(tmp_path, TRIALS)
    assert _summary(replayed) == expected["run"]  # nothing measured: the same records, the same best
    resumed = _tune(tmp_path, TRIALS + MORE)
    assert _records(resumed)[:TRIALS] == expected["run"]["records"]
    assert _records(resumed)[TRIALS:] == expected["resumed"]


def _write_expected() -> None:  # pragma: no cover - run by hand, once, to make the expected files
    import tempfile

    import tensorsearch.search.tuning.tuner as tuner

    tuner.Measurer = TableMeasurer  # type: ignore[misc]
    with tempfile.TemporaryDirectory() as tmp:
        run = _tune(Path(tmp) / "run", TRIALS)
        shutil.rmtree(WORK_DIR, ignore_errors=True)
        shutil.copytree(Path(tmp) / "run", WORK_DIR)
        resumed = _tune(Path(tmp) / "run", TRIALS + MORE)
    out = {"run": _summary(run), "resumed": _records(resumed)[TRIALS:]}
    EXPECTED.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(_write_expected())
