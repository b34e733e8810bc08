"""Transfer: a cost model pre-trained on the database's records of *other* workloads of the same
hardware (tensorsearch.search.cost_model.model.transfer_data, CostModel.pretrain, tune(transfer_from=)).

The ranking test needs latencies the machine cannot vary: two builds of the same candidate on a
shared 2-vCPU machine disagree more than a transfer test can tolerate, and building 90 GEMMs
takes half a minute. So the latencies come from a fixed analytic machine (vector width, stride,
L1 fit, loop overhead) applied to the schedule's decisions; the model sees only the programs'
features, replayed from the traces stored in the database."""

import json
import math
import random
import time

import numpy as np
import pytest
from scipy.stats import spearmanr

from tensorsearch import hardware, workloads
from tensorsearch.schedule import Schedule
from tensorsearch.search.cost_model.features import extract_features
from tensorsearch.search.cost_model.model import CostModel, transfer_data
from tensorsearch.search.database import Database, DatabaseError, TuningRecord, hardware_key
from tensorsearch.search.tuning.errors import TuneError
from tensorsearch.search.tuning.tuner import tune

ZNVER4_HW = hardware.load("x86-znver4")
HKEY = hardware_key(ZNVER4_HW)
OTHER_HKEY = hardware_key(hardware.load("x86-cascadelake"))


def divisors(n):
    return [d for d in (1, 2, 4, 8, 16, 32) if n % d == 0]


def synthetic_latency(shape, ti, tj, tk, inner, vectorized):
    """Seconds on a made-up machine: 16-lane vectors on a unit-stride innermost j, a strided
    innermost i costs 4x, a tile over 32 KiB costs 2x, and every innermost loop start costs 4
    iterations."""
    _, m, n, k = shape
    per_iter = {"j": 1 / min(tj, 16) if vectorized else 0.5, "k": 1.0, "i": 4.0}[inner]
    if (ti * tk + tk * tj + ti * tj) * 4 > 32 * 1024:
        per_iter *= 2
    inner_extent = {"i": ti, "j": tj, "k": tk}[inner]
    return m * n * k * (per_iter + 4 / inner_extent) / 3e9


def gemm_candidates(shape, count, seed):
    """``count`` distinct random tiled schedules of a float32 GEMM of ``shape``, with synthetic latencies."""
    wl = workloads.make("GMM", shape, "float32")
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < count:
        ti, tj, tk = (rng.choice(divisors(n)) for n in shape[1:])
        names = ["i", "j", "k"]
        rng.shuffle(names)
        vectorized = names[-1] == "j" and rng.random() < 0.7
        if (ti, tj, tk, tuple(names), vectorized) in seen:
            continue
        seen.add((ti, tj, tk, tuple(names), vectorized))
        sch = Schedule(wl.func)
        z = sch.get_block("Z")
        b, i, j, k = sch.get_loops(z)
        outer_inner = {n: sch.split(lp, [None, t]) for n, lp, t in (("i", i, ti), ("j", j, tj), ("k", k, tk))}
        sch.reorder(
            [b, outer_inner["i"][0], outer_inner["j"][0], outer_inner["k"][0]] + [outer_inner[n][1] for n in names]
        )
        if vectorized:
            sch.vectorize(outer_inner["j"][1])
        out.append((sch, synthetic_latency(shape, ti, tj, tk, names[-1], vectorized)))
    return wl, out


def record(wkey, hkey, sch, latency, trial):
    return TuningRecord(
        wkey, hkey, f"{trial:016x}", sch.trace.as_json_text(), (latency,), None, 0.1, trial, time.time()
    )


def fill(db, wl, cands, hkey=HKEY):
    wkey = db.commit_workload(wl.func, wl.key)
    for n, (sch, lat) in enumerate(cands):
        db.commit_record(record(wkey, hkey, sch, lat, n + 1))
    return wkey


@pytest.mark.slow
def test_transfer_ranks_a_new_workloads_candidates_better_than_random(tmp_path):
    db = Database(tmp_path)
    fill(db, *gemm_candidates((1, 128, 128, 128), 60, seed=0))
    _, held_out = gemm_candidates((1, 64, 256, 96), 30, seed=1)  # another workload, another size
    data = transfer_data([db], ZNVER4_HW, exclude="none")
    model = CostModel(seed=0)
    assert model.pretrain(data) == 60 and model.trained
    feats = [extract_features(s.func) for s, _ in held_out]
    speed = [-lat for _, lat in held_out]
    rho = spearmanr(model.predict(feats), speed).statistic
    rho_random = spearmanr(CostModel(seed=0).predict(feats), speed).statistic
    print(f"\ntransfer: Spearman {rho:.3f} on 30 candidates of a new workload (random scores {rho_random:.3f})")
    assert rho > 0.4 and rho > rho_random


def test_transfer_data_takes_other_workloads_of_the_same_hardware_only(tmp_path):
    db = Database(tmp_path)
    wl_a, cands_a = gemm_candidates((1, 32, 32, 32), 6, seed=0)
    wl_b, cands_b = gemm_candidates((1, 16, 32, 64), 4, seed=1)
    key_a = fill(db, wl_a, cands_a)
    key_b = fill(db, wl_b, cands_b)
    fill(db, wl_b, cands_b[:2], hkey=OTHER_HKEY)
    failed = TuningRecord(key_b, HKEY, "f" * 16, cands_b[0][0].trace.as_json_text(), (), "run: crashed", 0.1, 9, 0.0)
    db.commit_record(failed)
    data = dict((task, (f, lat)) for task, f, lat in transfer_data([db], ZNVER4_HW, exclude=key_a))
    assert list(data) == [f"transfer:{key_b}"]
    feats, lats = data[f"transfer:{key_b}"]
    assert len(feats) == 5 and sum(math.isinf(x) for x in lats) == 1  # failures teach too
    # a share per workload: 4 records in all, 2 from each, the fastest and the slowest kept
    shared = transfer_data([db], ZNVER4_HW, exclude="none", max_records=4)
    assert [len(f) for _, f, _ in shared] == [2, 2]
    assert min(shared[0][2]) == min(lat for _, lat in cands_a)


def test_old_database_files_still_load_and_transfer(tmp_path):
    """Files as the first database version wrote them (no field was added since)."""
    wl, cands = gemm_candidates((1, 32, 32, 32), 3, seed=0)
    other, _ = gemm_candidates((1, 16, 16, 16), 1, seed=0)
    d = tmp_path / "database"
    d.mkdir()
    from tensorsearch.search.database import workload_key

    key = workload_key(wl.func)
    (d / "workloads.jsonl").write_text(json.dumps({"key": key, "name": "old", "script": wl.func.script()}) + "\n")
    lines = []
    for n, (sch, lat) in enumerate(cands):
        fields = {
            "workload_key": key,
            "hardware_key": HKEY,
            "candidate_key": f"{n:016x}",
            "trace": sch.trace.as_json_text(),
            "latencies": [lat],
            "error": None,
            "build_seconds": 0.1,
            "trial": n + 1,
            "timestamp": 1.7e9,
        }
        lines.append(json.dumps(fields, separators=(",", ":")))
    (d / "tuning_records.jsonl").write_text("\n".join(lines) + "\n")
    db = Database.open_existing(d / "tuning_records.jsonl")
    assert len(db) == 3 and db.workload_name(key) == "old"
    assert list(db.hardware_records(HKEY)) == [key]
    [(task, feats, _)] = transfer_data([db], ZNVER4_HW, exclude=workload_key(other.func))
    assert task == f"transfer:{key}" and len(feats) == 3


def test_open_existing_creates_nothing_and_names_the_path(tmp_path):
    with pytest.raises(DatabaseError, match="nowhere: no tuning database"):
        Database.open_existing(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_tune_names_a_bad_transfer_path_before_starting(tmp_path):
    wl = workloads.make("GMM", (1, 16, 16, 16), "float32")
    with pytest.raises(TuneError, match="transfer_from: .*missing: no tuning database"):
        tune(wl, "host", 4, tmp_path / "run", transfer_from=[tmp_path / "missing"])


@pytest.mark.slow
def test_pretrained_model_scores_before_any_measurement(tmp_path):
    db = Database(tmp_path)
    fill(db, *gemm_candidates((1, 64, 64, 64), 20, seed=0))
    model = CostModel(seed=0)
    model.pretrain(transfer_data([db], ZNVER4_HW, exclude="none"))
    _, cands = gemm_candidates((1, 32, 64, 32), 4, seed=3)
    scores = model.predict([extract_features(s.func) for s, _ in cands])
    assert np.all(np.isfinite(scores)) and not np.allclose(scores, CostModel(seed=0).predict(scores[:, None]))


def test_cli_transfer_flag_names_a_bad_database(tmp_path, capsys):
    from tensorsearch.cli.main import main

    args = ["tune", "GMM", "--hardware", "host", "--trials", "1", "--work-dir", str(tmp_path / "run")]
    assert main([*args, "--transfer", str(tmp_path / "nope")]) == 2
    assert "nope: no tuning database there" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
