"""Gradient-boosted cost model: ranks candidates from their features before they are measured.

::

    from tensorsearch.search.cost_model.model import CostModel
    from tensorsearch.search.cost_model.features import extract_features

    model = CostModel(seed=0)
    model.update([extract_features(f) for f in measured], latencies)   # math.inf = failed
    scores = model.predict([extract_features(f) for f in candidates])  # higher = faster
    model.save("work/cost_model.npz"); model = CostModel.load("work/cost_model.npz")

**Model.** scikit-learn's ``HistGradientBoostingRegressor`` on :func:`~.features.candidate_vector`
rows. Measured on random schedules of a 128^3 float32 GEMM (7 sets of 60 candidates; Spearman
correlation of predictions with measured speed on held-out candidates): with 40 training samples
it matches ``GradientBoostingRegressor`` (0.58 against 0.57 on average), with 300 it reaches 0.80,
and it fits 2000 samples in about 0.5 s on one core where ``GradientBoostingRegressor`` needs 16 s
(exact splits over ~340 continuous columns). Defaults: 100 iterations, 8 leaves, at least 5
samples per leaf, 64 bins, no early stopping (so no random validation split: fits are
deterministic); ``**gbm_params`` override them. Fitting and predicting use ``fit_threads``
OpenMP threads (default 1: on a machine busy measuring, more threads mostly wait for each other
-- a 16-sample fit took 5 s with 2 threads on a loaded 2-vCPU machine, 0.1 s with one).

**Target.** The normalized throughput of a candidate, ``t = best latency of its task / latency``
(1 for the task's fastest, 0 for a failed one), recomputed over all the task's data at every fit.
The regressor fits ``log2(max(t, 2**-10))``: throughputs span orders of magnitude, and on the
squared loss a linear target only separates the few fastest candidates (held-out Spearman 0.48
against 0.57 with 40 samples); a failure counts as 1024 times slower than the best. ``predict``
returns ``2 ** prediction``, an estimate of the normalized throughput (higher = faster).

**Online.** ``update`` appends candidates of one task and refits on everything kept (the newest
``max_train_samples`` when there are more). Calls with the same ``task`` name (default ``""``)
feed one task, whose best latency is taken over all of them; give each tuning task its own name
when one model learns from several. Until ``min_train_samples`` successful measurements
exist, ``predict`` returns seeded random scores in [0, 1) (the search then explores at random).

**Transfer.** :func:`transfer_data` reads the records of *other* workloads measured on the same
hardware (the database's hardware key) from one or more databases, replays each record's trace
on its workload (parsed back from the script text the database stores) and extracts features;
:meth:`CostModel.pretrain` feeds each workload as a task of its own, so every workload's
throughput is normalized by its own best and workloads of different sizes mix. The model is then
trained before the run's first measurement, and ranks the first round instead of guessing.

**Saving.** ``save`` writes the training data and parameters to one ``.npz`` file (plain arrays
and a JSON string, no pickle), and ``load`` refits on them: a refit is deterministic, so the loaded
model predicts exactly what the saved one did, the file cannot run code when read, and it stays
readable across scikit-learn versions (a pickled estimator does not).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ...ir import PrimFunc
from ...target import Hardware
from ..database import Database, hardware_key
from .features import CANDIDATE_LENGTH, FEATURE_NAMES, candidate_vector, extract_features

__all__ = ["CostModel", "transfer_data"]

_FORMAT = "tensorsearch-cost-model-1"
_FLOOR = -10.0  # log2 of the normalized throughput given to failed candidates

DEFAULT_GBM_PARAMS: dict[str, Any] = {
    "max_iter": 100,
    "learning_rate": 0.1,
    "max_leaf_nodes": 8,
    "min_samples_leaf": 5,
    "max_bins": 64,
    "early_stopping": False,
}


def _as_vector(features: np.ndarray) -> np.ndarray:
    arr = np.asarray(features, dtype=np.float32)
    if arr.ndim == 1 and arr.shape[0] == CANDIDATE_LENGTH:
        return arr
    return candidate_vector(arr)


class CostModel:
    """Predicts the normalized throughput of candidates from their per-store features (see module doc).

    >>> import numpy as np
    >>> m = CostModel(seed=0, min_train_samples=2)
    >>> m.trained
    False
    >>> m.predict([np.zeros((1, len(FEATURE_NAMES)), np.float32)]).shape   # random before training
    (1,)
    """

    def __init__(
        self,
        seed: int = 0,
        min_train_samples: int = 16,
        *,
        max_train_samples: int = 4096,
        fit_threads: int | None = 1,
        **gbm_params: Any,
    ) -> None:
        if min_train_samples < 1:
            raise ValueError(f"min_train_samples must be at least 1, got {min_train_samples}")
        if max_train_samples < min_train_samples:
            raise ValueError(
                f"max_train_samples ({max_train_samples}) must be at least min_train_samples ({min_train_samples})"
            )
        self.seed = int(seed)
        self.min_train_samples = int(min_train_samples)
        self.max_train_samples = int(max_train_samples)
        self.fit_threads = fit_threads
        self.gbm_params = {**DEFAULT_GBM_PARAMS, **gbm_params}
        self._make()  # reject unknown parameters now, not at the first fit
        self._rng = np.random.default_rng(self.seed)
        self._x: list[np.ndarray] = []
        self._latency: list[float] = []
        self._task: list[int] = []
        self._tasks: list[str] = []
        self._model: Any = None
        self._lock = threading.Lock()  # tasks tuned in several threads share one model (the model scheduler)

    # -------------------------------------------------------------------------------------
    @property
    def trained(self) -> bool:
        """Whether a regressor has been fitted (else ``predict`` is random)."""
        return self._model is not None

    @property
    def n_samples(self) -> int:
        """Candidates recorded so far (failed ones included)."""
        return len(self._latency)

    def update(self, features: Sequence[np.ndarray], latencies: Sequence[float], task: str = "") -> None:
        """Record measured candidates of one task and refit.

        ``features[i]`` is ``extract_features`` of candidate ``i`` (or its ``candidate_vector``),
        ``latencies[i]`` its latency in seconds; ``math.inf`` (or NaN, or <= 0) marks a failure.
        """
        with self._lock:
            self._record("update", task, features, latencies)
            self._fit()

    def pretrain(self, data: Sequence[tuple[str, Sequence[np.ndarray], Sequence[float]]]) -> int:
        """Record other workloads' measurements (``(task, features, latencies)`` each, as
        :func:`transfer_data` returns) and fit once; returns the number of candidates added."""
        with self._lock:
            added = sum(self._record("pretrain", task, features, latencies) for task, features, latencies in data)
            if added:
                self._fit()
        return added

    def _record(self, caller: str, task: str, features: Sequence[np.ndarray], latencies: Sequence[float]) -> int:
        """Append one task's candidates (a failure's latency becomes ``math.inf``); returns how many."""
        if len(features) != len(latencies):
            raise ValueError(f"{caller} got {len(features)} feature arrays but {len(latencies)} latencies for {task!r}")
        if task not in self._tasks:
            self._tasks.append(task)
        t = self._tasks.index(task)
        for f, lat in zip(features, latencies, strict=True):
            self._x.append(_as_vector(f))
            lat = float(lat)
            self._latency.append(lat if math.isfinite(lat) and lat > 0 else math.inf)
            self._task.append(t)
        return len(features)

    def predict(self, features: Sequence[np.ndarray]) -> np.ndarray:
        """Scores of candidates, higher = faster: estimated normalized throughput (random before training)."""
        if not self.trained:
            return self._rng.random(len(features))
        if len(features) == 0:
            return np.zeros(0)
        x = np.stack([_as_vector(f) for f in features])
        with threadpool_limits(limits=self.fit_threads, user_api="openmp"):
            return np.exp2(self._model.predict(x))

    # -------------------------------------------------------------------------------------
    def _make(self) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        try:
            return HistGradientBoostingRegressor(random_state=self.seed, **self.gbm_params)
        except TypeError as err:
            raise TypeError(f"CostModel got a parameter HistGradientBoostingRegressor does not take: {err}") from None

    def _targets(self) -> np.ndarray:
        lat = np.asarray(self._latency)
        task = np.asarray(self._task)
        y = np.full(len(lat), _FLOOR)
        for t in range(len(self._tasks)):
            mine = task == t
            ok = mine & np.isfinite(lat)
            if ok.any():
                y[ok] = np.maximum(np.log2(lat[ok].min() / lat[ok]), _FLOOR)
        return y

    def _fit(self) -> None:
        ok = int(np.isfinite(np.asarray(self._latency)).sum())
        if ok < self.min_train_samples:
            return
        x = np.stack(self._x)
        y = self._targets()
        if len(y) > self.max_train_samples:
            x, y = x[-self.max_train_samples :], y[-self.max_train_samples :]
        model = self._make()
        with threadpool_limits(limits=self.fit_threads, user_api="openmp"):
            model.fit(x, y)
        self._model = model

    # -------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the training data and parameters to ``path`` (an ``.npz`` file; no pickle)."""
        meta = {
            "format": _FORMAT,
            "seed": self.seed,
            "min_train_samples": self.min_train_samples,
            "max_train_samples": self.max_train_samples,
            "fit_threads": self.fit_threads,
            "gbm_params": self.gbm_params,
            "features": len(FEATURE_NAMES),
            "tasks": self._tasks,
            "rng_state": self._rng.bit_generator.state,
        }
        x = np.stack(self._x) if self._x else np.zeros((0, CANDIDATE_LENGTH), np.float32)
        with open(path, "wb") as fh:
            np.savez(
                fh,
                meta=np.array(json.dumps(meta)),
                x=x,
                latency=np.asarray(self._latency, dtype=np.float64),
                task=np.asarray(self._task, dtype=np.int64),
            )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostModel:
        """Read a model ``save`` wrote and refit it on its data (the same predictions)."""
        with np.load(path, allow_pickle=False) as data:
            try:
                meta = json.loads(str(data["meta"]))
                x, latency, task = data["x"], data["latency"], data["task"]
            except KeyError as err:
                raise ValueError(f"{os.fspath(path)} is not a saved CostModel (no {err.args[0]} array)") from None
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{os.fspath(path)} is not a saved CostModel (format {meta.get('format')!r})")
        if meta["features"] != len(FEATURE_NAMES) or x.shape[1:] != (CANDIDATE_LENGTH,):
            raise ValueError(
                f"{os.fspath(path)} holds {meta['features']} features per store; this version extracts "
                f"{len(FEATURE_NAMES)}: the saved data cannot train this model"
            )
        model = cls(
            meta["seed"],
            meta["min_train_samples"],
            max_train_samples=meta["max_train_samples"],
            fit_threads=meta["fit_threads"],
            **meta["gbm_params"],
        )
        model._tasks = list(meta["tasks"])
        model._x = list(x)
        model._latency = [float(v) for v in latency]
        model._task = [int(v) for v in task]
        model._rng.bit_generator.state = meta["rng_state"]
        model._fit()
        return model


def _spread_pick(records: list[Any], count: int) -> list[Any]:
    """``count`` records spread evenly over ``records`` sorted by latency (fastest and slowest kept)."""
    ranked = sorted(records, key=lambda r: r.latency)
    if len(ranked) <= count:
        return ranked
    step = (len(ranked) - 1) / max(count - 1, 1)
    return [ranked[round(i * step)] for i in range(count)]


def _record_features(func: PrimFunc, trace_json: str, hardware: Hardware) -> np.ndarray | None:
    """Features of a record's program: its whole trace replayed on its workload (None if it fails)."""
    from ...schedule import Schedule, Trace

    try:
        sch = Schedule(func, check=False, error_detail="none", hardware=hardware)
        Trace.from_json(trace_json).apply(sch)
        return extract_features(sch.func)
    except Exception:  # a record this version cannot replay teaches nothing
        return None


def transfer_data(
    databases: Sequence[Database], hardware: Hardware, exclude: str | set[str], max_records: int = 256
) -> list[tuple[str, list[np.ndarray], list[float]]]:
    """Training data for :meth:`CostModel.pretrain`: records of every workload but those of
    ``exclude`` (a workload key or a set of them) measured on ``hardware`` (the records of its hardware key) in ``databases`` (:class:`~.database.Database`
    objects), at most ``max_records`` in all, shared evenly among the workloads that have a
    successful record, spread over each one's latencies; one ``(task, features, latencies)`` per
    workload, the task named ``transfer:<workload key>``."""
    hkey = hardware_key(hardware)
    excluded = {exclude} if isinstance(exclude, str) else set(exclude)
    by_workload: dict[str, tuple[Any, list[Any]]] = {}
    for db in databases:
        for wkey, records in db.hardware_records(hkey).items():
            if wkey in excluded or not any(r.ranks for r in records):
                continue
            _, have = by_workload.setdefault(wkey, (db, []))
            seen = {r.candidate_key for r in have}
            have.extend(r for r in records if r.candidate_key not in seen and not r.emulated)
    out = []
    share = max_records // max(len(by_workload), 1)
    for wkey, (db, records) in sorted(by_workload.items()):
        func = db.workload(wkey)
        feats, lats = [], []
        for r in _spread_pick(records, share):
            f = _record_features(func, r.trace, hardware)
            if f is not None:
                feats.append(f)
                lats.append(r.latency)
        if feats:
            out.append((f"transfer:{wkey}", feats, lats))
    return out
