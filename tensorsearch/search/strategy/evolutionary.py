"""Evolutionary search over schedule traces (paper section 4.4; TVM MetaSchedule's strategy).

Each round proposes ``num_trials_per_iter`` candidates to measure:

1. the initial population: the best measured records of the task (``init_measured_ratio`` of
   the population, at most) replayed, and fresh samples of the design space to fill it;
2. ``genetic_num_iters`` generations: the population is scored by the cost model; parents are
   drawn with probability proportional to their predicted score; with probability
   ``genetic_mutate_prob`` a child is a mutant of its parent (a mutator drawn by its
   probability), else the parent itself; invalid mutants (a primitive or postprocessor refused
   the changed decision) and duplicates (equal programs) are dropped and retried up to
   ``genetic_max_fail_count`` times; every unmeasured candidate seen is kept with its score;
3. the batch: the best-scored unmeasured candidates, with an ``eps_greedy`` share of the batch
   taken at random from the fresh samples instead (exploration).

The first round of a task (nothing measured yet) is instead ``init_heuristic`` candidates (at most
a quarter of the batch; none in a batch under 16) whose tile,
parallel and unroll decisions come from :mod:`..space.heuristics` (register tiles, cache-fit tiles,
parallel extent from the hardware YAML), spread over the design spaces, measured alone: the
second round's population starts from their measurements, and the cost model has learnt from
them before it ranks anything.

A round with nothing measured to start from and an untrained cost model (nothing transferred: a
first round under 16) measures fresh samples and evolves nothing: the model's scores are random
and every parent is a random sample, so the generations would pick no better than the samples,
at the cost of their replays (3.4 s of a 2-trial tune's 20 s, 217 candidates made for 2
measured). With measured candidates the round evolves as above, their mutants included, even
while the model's scores are still random.

Candidates are made and featurized by an :class:`~.parallel.Evaluator` (in this process, or
sharded over Ray workers); everything random is drawn from one ``random.Random(seed)``, so a run
with the same seed, measurements and cost model proposes the same candidates.
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ..mutator import Mutator, default_mutators
from ..space.design import Candidate, DesignSpace
from ..space.heuristics import heuristic_traces
from .parallel import fewer_collections


@dataclass(frozen=True)
class SearchConfig:
    """The search's parameters; the defaults are TVM MetaSchedule's except where noted."""

    # TVM: 512. Replaying a trace in Python costs 30-80 ms (15-35 candidates/s on this 2-vCPU
    # machine with Ray workers), so 512 with 4 generations thinks 1-2.5 min per round of 64
    # measurements; 128 thinks 15-40 s (docs/search.md has the measurements)
    population_size: int = 128
    init_measured_ratio: float = 0.2
    init_min_unmeasured: int = 50
    genetic_num_iters: int = 4
    genetic_mutate_prob: float = 0.85
    genetic_max_fail_count: int = 10
    eps_greedy: float = 0.05
    num_trials_per_iter: int = 64
    max_sample_tries: int = 5  # fresh samples tried per population slot before giving up
    # not in TVM: analytic candidates (heuristics.py) measured first in a task's first round (at
    # most a quarter of its batch; none in a batch under 16)
    init_heuristic: int = 16
    mutator_probs: tuple[tuple[str, float], ...] = field(
        default_factory=lambda: tuple((m.name, p) for m, p in default_mutators().items())
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "mutator_probs":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"SearchConfig.{f.name} must be a non-negative number, got {value!r}")
        for name in ("init_measured_ratio", "genetic_mutate_prob", "eps_greedy"):
            if getattr(self, name) > 1:
                raise ValueError(f"SearchConfig.{name} is a probability; got {getattr(self, name)}")
        for name in ("population_size", "num_trials_per_iter"):
            if getattr(self, name) < 1:
                raise ValueError(f"SearchConfig.{name} must be at least 1, got {getattr(self, name)}")

    def replace(self, **changes: Any) -> SearchConfig:
        from dataclasses import replace

        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            known = ", ".join(f.name for f in fields(self))
            raise ValueError(f"SearchConfig has no parameter {', '.join(sorted(unknown))}; its parameters are: {known}")
        return replace(self, **changes)

    def mutators(self, defaults: tuple[tuple[str, float], ...] | None = None) -> list[tuple[Mutator, float]]:
        """The mutators and their probabilities; with the default ``mutator_probs``, a design
        space kind's own ``defaults`` where it has them (a GPU's: ``SearchKind.mutator_probs``)."""
        by_name = {m.name: m for m in default_mutators()}
        probs = self.mutator_probs
        if defaults is not None and probs == SearchConfig().mutator_probs:
            probs = defaults
        out = []
        for name, p in probs:
            if name not in by_name:
                raise ValueError(
                    f"SearchConfig.mutator_probs names no mutator {name!r}; the mutators are: {', '.join(by_name)}"
                )
            if p > 0:
                out.append((by_name[name], float(p)))
        return out


@dataclass
class RoundStats:
    """What one round of the search did (for the progress report and the issue's figures)."""

    sampled: int = 0
    sample_failures: int = 0
    mutants: int = 0
    mutant_failures: int = 0
    scored: int = 0
    search_seconds: float = 0.0
    score_seconds: float = 0.0
    measured: int = 0
    measure_seconds: float = 0.0
    heuristic: int = 0  # analytic candidates in the batch (first round only)


class EvolutionarySearch:
    """Propose batches of candidates for one task (a design space on one hardware)."""

    def __init__(self, space: DesignSpace, cost_model: Any, config: SearchConfig, seed: int, evaluator: Any) -> None:
        self.space = space
        self.cost_model = cost_model
        self.config = config
        self.rng = random.Random(seed)
        self.evaluator = evaluator
        self.mutators = config.mutators(space.kind.mutator_probs)

    # ---------------------------------------------------------------------------------
    def _fresh(self, n: int, exclude: set[str], stats: RoundStats) -> list[Candidate]:
        out: list[Candidate] = []
        seen = set(exclude)
        tries = 0
        while len(out) < n and tries < n * self.config.max_sample_tries:
            want = n - len(out)
            jobs = [
                ("sample", self.rng.randrange(len(self.space.traces)), self.rng.randrange(1 << 31)) for _ in range(want)
            ]
            tries += want
            for cand in self.evaluator.evaluate(jobs):
                stats.sampled += 1
                if cand is None:
                    stats.sample_failures += 1
                elif cand.key not in seen:
                    seen.add(cand.key)
                    out.append(cand)
        return out

    def _analytic(self, n: int, exclude: set[str]) -> list[Candidate]:
        """Up to ``n`` distinct valid candidates with analytic decisions, round-robin over the
        design spaces (each space's best variant first)."""
        if n <= 0:
            return []
        spaces = len(self.space.traces)
        per_space = -(-n // spaces)
        seed = self.rng.randrange(1 << 31)
        made = [self._analytic_traces(t, per_space, seed) for t in self.space.traces]
        jobs = [("replay", made[s][v], s) for v in range(per_space) for s in range(spaces) if v < len(made[s])]
        out: list[Candidate] = []
        seen = set(exclude)
        for cand in self.evaluator.evaluate(jobs):
            if cand is not None and cand.key not in seen and len(out) < n:
                seen.add(cand.key)
                out.append(cand)
        return out

    def _analytic_traces(self, trace: Any, n: int, seed: int) -> list[Any]:
        """Up to ``n`` analytic decision sets of one design-space trace, alternating the sampled
        compute locations inline (a padding stage read through its ``Select``) and at the root
        (padded once before the kernel): which is faster depends on the operator (docs/search.md)."""
        hw, func = self.space.hardware, self.space.func
        inline = heuristic_traces(trace, func, hw, n, seed)
        if not any(inst.kind.name == "sample_compute_location" for inst in trace.insts):
            return inline
        root = heuristic_traces(trace, func, hw, n, seed, compute_root=True)
        out: list[Any] = []
        seen: set[str] = set()
        for t in (t for pair in itertools.zip_longest(inline, root) for t in pair if t is not None):
            key = t.as_json_text()
            if key not in seen:
                seen.add(key)
                out.append(t)
        return out[:n]

    def _score(self, cands: list[Candidate], stats: RoundStats) -> np.ndarray:
        t0 = time.perf_counter()
        scores = np.asarray(self.cost_model.predict([c.features for c in cands]), dtype=float) if cands else np.zeros(0)
        stats.score_seconds += time.perf_counter() - t0
        stats.scored += len(cands)
        return scores

    def _pick_mutator(self) -> Mutator:
        total = sum(p for _, p in self.mutators)
        x = self.rng.random() * total
        for m, p in self.mutators:
            x -= p
            if x <= 0:
                return m
        return self.mutators[-1][0]

    def next_batch(
        self, measured: list[Candidate], measured_keys: set[str], stats: RoundStats | None = None
    ) -> list[Candidate]:
        """The next candidates to measure (none of ``measured_keys``), at most ``num_trials_per_iter``.

        ``measured``: the task's best measured candidates so far, fastest first."""
        with fewer_collections():  # the mutations and scoring too, not only the candidates' replays
            return self._next_batch(measured, measured_keys, stats)

    def _next_batch(
        self, measured: list[Candidate], measured_keys: set[str], stats: RoundStats | None
    ) -> list[Candidate]:
        cfg = self.config
        stats = stats if stats is not None else RoundStats()
        t0 = time.perf_counter()
        # a quarter of the batch at most (the rest of the budget explores), none in a batch under 16
        n_analytic = min(cfg.init_heuristic, cfg.num_trials_per_iter // 4) if cfg.num_trials_per_iter >= 16 else 0
        analytic = self._analytic(n_analytic, measured_keys) if not measured_keys else []
        stats.heuristic = len(analytic)
        if analytic:  # measured alone: the evolution that follows ranks with what they teach
            stats.search_seconds += time.perf_counter() - t0
            return analytic
        # nothing measured, an untrained model: random scores of random samples; evolving them only costs replays
        if not measured and not self.cost_model.trained:
            fresh = self._fresh(cfg.num_trials_per_iter, measured_keys, stats)
            stats.search_seconds += time.perf_counter() - t0
            return fresh
        n_measured = min(len(measured), int(cfg.population_size * cfg.init_measured_ratio))
        population = list(measured[:n_measured])
        fresh = self._fresh(max(cfg.population_size - n_measured, cfg.init_min_unmeasured), measured_keys, stats)
        population += fresh[: max(cfg.population_size - n_measured, 0) or len(fresh)]
        pool: dict[str, tuple[float, Candidate]] = {}  # unmeasured candidates seen, with their score
        for _ in range(cfg.genetic_num_iters):
            if not population:
                break
            scores = self._score(population, stats)
            for c, s in zip(population, scores, strict=True):
                if c.key not in measured_keys:
                    pool[c.key] = (float(s), c)
            population = self._evolve(population, scores, stats)
        if population:
            for c, s in zip(population, self._score(population, stats), strict=True):
                if c.key not in measured_keys:
                    pool[c.key] = (float(s), c)
        ranked = sorted(pool.values(), key=lambda sc: -sc[0])
        n = cfg.num_trials_per_iter
        n_random = min(round(n * cfg.eps_greedy), len(fresh))
        batch: list[Candidate] = []
        keys: set[str] = set()
        for _, c in ranked:
            if len(batch) >= n - n_random:
                break
            if c.key in keys:
                continue
            batch.append(c)
            keys.add(c.key)
        explore = [c for c in fresh if c.key not in keys and c.key not in measured_keys]
        self.rng.shuffle(explore)
        for c in explore:
            if len(batch) >= n:
                break
            batch.append(c)
            keys.add(c.key)
        for _, c in ranked:  # fill up when exploration had too few
            if len(batch) >= n:
                break
            if c.key not in keys:
                batch.append(c)
                keys.add(c.key)
        stats.search_seconds += time.perf_counter() - t0
        return batch

    def _evolve(self, population: list[Candidate], scores: np.ndarray, stats: RoundStats) -> list[Candidate]:
        cfg = self.config
        weights = np.clip(np.nan_to_num(scores, nan=0.0), 0.0, None)
        if not weights.sum() > 0:
            weights = np.ones(len(population))
        cum = np.cumsum(weights / weights.sum())
        next_pop: list[Candidate] = []
        seen: set[str] = set()
        pending: list[tuple[Candidate, Any]] = []
        for _ in range(len(population)):
            parent = population[min(int(np.searchsorted(cum, self.rng.random())), len(population) - 1)]
            if self.mutators and self.rng.random() < cfg.genetic_mutate_prob:
                pending.append((parent, None))
            else:
                if parent.key not in seen:
                    seen.add(parent.key)
                    next_pop.append(parent)
        # mutate in batches (sharded by the evaluator); retry failures up to the fail count
        for _attempt in range(cfg.genetic_max_fail_count):
            if not pending:
                break
            jobs, parents = [], []
            for parent, _ in pending:
                mutant = self._pick_mutator().apply(parent.design_trace, self.rng)
                if mutant is None:
                    continue
                jobs.append(("replay", mutant, parent.space))
                parents.append(parent)
            retry: list[tuple[Candidate, Any]] = []
            for parent, child in zip(parents, self.evaluator.evaluate(jobs) if jobs else [], strict=True):
                stats.mutants += 1
                if child is None or child.key in seen:
                    stats.mutant_failures += 1
                    retry.append((parent, None))
                    continue
                seen.add(child.key)
                next_pop.append(child)
            pending = retry
        return next_pop


def measured_population(space: DesignSpace, evaluator: Any, traces: list[tuple[Any, int]]) -> list[Candidate]:
    """Candidates of measured design traces (fastest first), replayed (invalid ones dropped)."""
    jobs = [("replay", t, s) for t, s in traces]
    return [c for c in evaluator.evaluate(jobs) if c is not None] if jobs else []
