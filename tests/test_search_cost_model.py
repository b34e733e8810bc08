"""The gradient-boosted cost model (tensorsearch.search.cost_model.model): random before training,
save/load round trip, failed candidates, and the acceptance check that it ranks held-out
candidates better than random (Spearman correlation printed; run with -s to see it)."""

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

import tensorsearch as ts
from tensorsearch import workloads
from tensorsearch.ir import structural_hash
from tensorsearch.schedule import Schedule
from tensorsearch.search.cost_model.features import CANDIDATE_LENGTH, FEATURE_NAMES, candidate_vector, extract_features
from tensorsearch.search.cost_model.model import CostModel

FACTORS = (1, 2, 4, 8, 16, 32)


def random_gemm_schedule(func, rng):
    """A random valid schedule of the GEMM block ``Z[b, i, j] += X[b, i, k] * Y[b, k, j]``.

    Splits i, j, k in two; orders the six loops at random (half the time tiled: outer loops
    first); sometimes accumulates in a local cache written back at an outer loop; sometimes
    vectorizes the innermost loop (when it is spatial) and unrolls a loop with a small body.
    No parallel loops: on a shared 2-vCPU machine their timings are too noisy to rank (two timings
    of the same 60 candidates correlated 0.40 with parallel loops among them, 0.90 without).
    """
    sch = Schedule(func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    i0, i1 = sch.split(i, [None, int(rng.choice(FACTORS))])
    j0, j1 = sch.split(j, [None, int(rng.choice(FACTORS))])
    k0, k1 = sch.split(k, [None, int(rng.choice(FACTORS))])
    loops = [i0, j0, k0, i1, j1, k1]
    if rng.random() < 0.5:
        order = [loops[p] for p in rng.permutation(6)]
    else:
        order = [loops[p] for p in rng.permutation(3)] + [loops[3 + p] for p in rng.permutation(3)]
    sch.reorder([b, *order])
    if rng.random() < 0.3:
        acc = sch.cache_write(z, 0, "local")
        sch.reverse_compute_at(acc, order[int(rng.integers(0, 3))])
    loops = sch.get_loops(z)
    extents = [int(sch.get(lp).extent.value) for lp in loops]
    if rng.random() < 0.5 and extents[-1] > 1 and order[-1] not in (k0, k1):
        sch.vectorize(loops[-1])
    if rng.random() < 0.5:
        small = [p for p in range(1, len(loops) - 1) if extents[p] > 1 and math.prod(extents[p:]) <= 256]
        if small:
            sch.unroll(loops[int(rng.choice(small))])
    return sch


def measured_candidates(seed, count, n=128):
    """``count`` distinct random schedules of an n^3 float32 GEMM: features and latencies (the fastest of 5 repeats: noise only adds time)."""
    wl = workloads.make("GMM", (1, n, n, n), "float32")
    rng = np.random.default_rng(seed)
    inputs = wl.make_inputs(rng)
    expected = wl.reference(*inputs)
    feats, lats, seen = [], [], set()
    while len(lats) < count:
        sch = random_gemm_schedule(wl.func, rng)
        key = structural_hash(sch.func)
        if key in seen:
            continue
        seen.add(key)
        mod = ts.build(sch.func)
        outs = [np.full(t.shape, np.nan, t.dtype) for t in wl.outputs]
        mod(*inputs, *outs)
        wl.check(outs, expected)
        lats.append(mod.time(*inputs, *outs, number=1, repeat=5, min_repeat_ms=1).min)
        feats.append(extract_features(sch.func))
    return feats, np.array(lats)


def held_out_spearman(feats, lats, held_out, seed=0):
    """Spearman correlation of the model's scores with measured speed on the candidates at the
    positions ``held_out``, the model trained on all the others."""
    train = [i for i in range(len(lats)) if i not in held_out]
    model = CostModel(seed=seed)
    model.update([feats[i] for i in train], list(lats[train]))
    assert model.trained
    scores = model.predict([feats[i] for i in held_out])
    return spearmanr(scores, -lats[held_out]).statistic


def unmeasured_candidates(count, seed=0, n=64):
    """Features of random schedules of a small GEMM with a synthetic latency (nothing is built)."""
    wl = workloads.make("GMM", (1, n, n, n), "float32")
    rng = np.random.default_rng(seed)
    feats = [extract_features(random_gemm_schedule(wl.func, rng).func) for _ in range(count)]
    unit = FEATURE_NAMES.index("inner_unit_stride")
    lats = [1e-3 / (1 + 4 * f[:, unit].max()) * (1 + 0.1 * (k % 3)) for k, f in enumerate(feats)]
    return feats, lats


@pytest.mark.slow
def test_random_scores_before_enough_data():
    feats, lats = unmeasured_candidates(8)
    model = CostModel(seed=5, min_train_samples=6)
    assert not model.trained
    first = model.predict(feats)
    assert first.shape == (8,) and ((first >= 0) & (first < 1)).all()
    np.testing.assert_array_equal(first, CostModel(seed=5).predict(feats))  # seeded
    assert not np.array_equal(first, CostModel(seed=6).predict(feats))
    model.update(feats[:3], [*lats[:2], math.inf])  # 2 successes, 1 failure: still not enough
    assert not model.trained and model.n_samples == 3
    model.update(feats[3:], lats[3:])
    assert model.trained


@pytest.mark.slow
def test_save_load_round_trip_predicts_identically(tmp_path):
    feats, lats = unmeasured_candidates(30)
    lats[4] = math.inf  # a failed candidate
    model = CostModel(seed=1, min_train_samples=8)
    model.update(feats[:12], lats[:12], task="a")
    model.update(feats[12:24], lats[12:24], task="b")
    scores = model.predict(feats[24:])
    path = tmp_path / "model.npz"
    model.save(path)
    loaded = CostModel.load(path)
    assert loaded.trained and loaded.n_samples == 24
    np.testing.assert_array_equal(loaded.predict(feats[24:]), scores)
    # candidate vectors are accepted in place of per-store rows
    np.testing.assert_array_equal(loaded.predict([candidate_vector(f) for f in feats[24:]]), scores)
    # both keep learning the same way
    model.update(feats[24:], lats[24:], task="a")
    loaded.update(feats[24:], lats[24:], task="a")
    np.testing.assert_array_equal(model.predict(feats), loaded.predict(feats))


def test_untrained_model_round_trips_its_random_state(tmp_path):
    feats, _ = unmeasured_candidates(4)
    model = CostModel(seed=2)
    model.predict(feats)
    model.save(tmp_path / "m.npz")
    loaded = CostModel.load(tmp_path / "m.npz")
    assert not loaded.trained
    np.testing.assert_array_equal(loaded.predict(feats), model.predict(feats))


@pytest.mark.slow
def test_failed_candidates_score_low():
    feats, lats = unmeasured_candidates(20, seed=3)
    failed, _ = unmeasured_candidates(20, seed=4, n=32)  # other programs, all failing
    model = CostModel(seed=0, min_train_samples=4)
    model.update(feats + failed, lats + [math.inf] * 20, task="t")
    assert model.predict(feats).min() > model.predict(failed).max()
    assert model.predict(failed).max() < 0.01  # a failure is learnt as 1024 times slower than the best


def test_bad_arguments_and_files_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="latencies"):
        CostModel().update([np.zeros((1, len(FEATURE_NAMES)))], [1.0, 2.0])
    with pytest.raises(TypeError, match="CostModel got a parameter"):
        CostModel(no_such_parameter=3)
    with pytest.raises(ValueError, match="min_train_samples"):
        CostModel(min_train_samples=0)
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((1, CANDIDATE_LENGTH)))
    with pytest.raises(ValueError, match="not a saved CostModel"):
        CostModel.load(bad)


@pytest.mark.slow
def test_cost_model_ranks_held_out_candidates_better_than_random():
    """Acceptance: train on 60 measured random GEMM schedules, rank 30 held-out ones.

    Each third of the 90 candidates is held out in turn (3-fold cross-validation) and the mean
    correlation is judged: one fixed set of 30 is a single draw whose correlation moves by about
    0.14 with which 30 they are (the same model scored 0.29, 0.66 and 0.76 on the three thirds of
    one Ice Lake measurement), so a single draw says more about the draw than about the model.
    """
    feats, lats = measured_candidates(seed=0, count=90)
    folds = [list(range(f, f + 30)) for f in (0, 30, 60)]
    rhos = [held_out_spearman(feats, lats, fold) for fold in folds]
    rho_random = [spearmanr(CostModel(seed=0).predict([feats[i] for i in f]), -lats[f]).statistic for f in folds]
    print(
        f"\ncost model: Spearman correlation on 30 held-out candidates, each third in turn "
        f"{', '.join(f'{r:.3f}' for r in rhos)}, mean {np.mean(rhos):.3f} "
        f"(random scores {', '.join(f'{r:.3f}' for r in rho_random)}; "
        f"latencies {lats.min() * 1e3:.3f}..{lats.max() * 1e3:.3f} ms)"
    )
    assert np.mean(rhos) > 0.3, rhos
    assert min(rhos) > 0, rhos  # and no third is ranked backwards
