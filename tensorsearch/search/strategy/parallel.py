"""Making and featurizing candidates, in this process or sharded over Ray workers.

A job is ``("sample", space_index, seed)`` (a fresh sample of a design-space trace) or
``("replay", design_trace, space_index)`` (a mutant or a measured trace). ``evaluate(jobs)``
returns, in job order, a :class:`~.design.Candidate` with its features, or None for an invalid one.

:class:`LocalEvaluator` runs the jobs here. :class:`RayEvaluator` keeps one actor per CPU of the
cluster, each holding the design space, and sends each a contiguous share of the jobs (traces
travel as JSON text). The actors ask Ray for no CPU: the tuner's phases (search, build, run)
never overlap, so during the search they may use every CPU; the build tasks and the runner
actors have them to themselves afterwards. Each actor runs at the driver's niceness where it may
(``measure.take_niceness``; a node where it may not is reported by its timing runner).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from ...ir import PrimFunc
from ...schedule import Trace
from ...target import Hardware
from ..space.design import Candidate, DesignSpace


def _features(func: Any) -> Any:
    from ..cost_model.features import extract_features

    return extract_features(func)


@contextlib.contextmanager
def fewer_collections(first_threshold: int = 20_000) -> Iterator[None]:
    """Run with the cyclic garbage collector's first threshold raised (restored after): each
    candidate, and each search round (``EvolutionarySearch.next_batch``).

    A candidate allocates some 10^5 IR nodes; reference counting frees them (the IR has no
    cycles), yet at Python's default threshold (700 objects) the collector runs every few hundred
    surviving allocations, and every hundredth run scans the whole heap, which the schedule caches
    make large: that was a tenth of the time making candidates.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], first_threshold), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def run_job(space: DesignSpace, job: tuple) -> Candidate | None:
    with fewer_collections():
        return _run_job(space, job)


def _run_job(space: DesignSpace, job: tuple) -> Candidate | None:
    kind = job[0]
    if kind == "sample":
        cand = space.sample_space(job[1], job[2])
    elif kind == "replay":
        trace = job[1] if isinstance(job[1], Trace) else Trace.from_json(job[1])
        cand = space.replay(trace, job[2])
    else:
        raise ValueError(f"unknown evaluation job {kind!r}")
    if cand is None:
        return None
    try:
        cand.features = _features(cand.func)
    except Exception:  # a program the feature extractor cannot read is not a candidate
        return None
    return cand


class LocalEvaluator:
    """Evaluate jobs in this process (SearchStopped once closed, from another thread)."""

    def __init__(self, space: DesignSpace) -> None:
        self.space = space
        self.closed = False

    def evaluate(self, jobs: list[tuple]) -> list[Candidate | None]:
        out = []
        for job in jobs:
            _check_open(self)
            out.append(run_job(self.space, job))
        return out

    def close(self) -> None:
        self.closed = True


class SearchStopped(RuntimeError):
    """The evaluator was closed (from another thread) while it evaluated jobs."""


def _check_open(evaluator: LocalEvaluator | RayEvaluator) -> None:
    if evaluator.closed:
        raise SearchStopped("search: the evaluator was closed while it evaluated a round")


class _Worker:
    """A search actor: the design space of one task, making and featurizing its candidates."""

    def __init__(self, func: PrimFunc, hardware: Hardware, traces_json: list[str], niceness: int | None = None) -> None:
        from ..measure.cluster import take_niceness

        take_niceness(niceness)  # the driver's; where it may not, the node's runner warns
        self.space = DesignSpace(func, hardware, traces=[Trace.from_json(t) for t in traces_json])

    def node(self) -> str:
        """The Ray node this worker runs on."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def niceness(self) -> int:
        """This actor's niceness."""
        import os

        return os.getpriority(os.PRIO_PROCESS, 0)

    def evaluate(self, jobs: list[tuple]) -> list[tuple | None]:
        out = []
        for job in jobs:
            cand = run_job(self.space, job)
            out.append(
                None if cand is None else (cand.trace.as_json_text(), cand.func, cand.key, cand.space, cand.features)
            )
        return out


def _spread(workers: int | None) -> list[str]:
    """``workers`` node ids (None: as many as the nodes have CPUs), one per CPU of the alive nodes
    taken in turn (node A's first CPU, node B's first, ..., then the second ones), so the actors
    cover every node but those set apart for timing (``measure.work_nodes``). Ray's ``SPREAD``
    strategy is best effort: for actors that hold no CPU it put two of three on one node."""
    import ray

    from ..measure.cluster import work_nodes

    nodes, _ = work_nodes(ray.nodes())
    cpus = {n["NodeID"]: int(n["Resources"]["CPU"]) for n in nodes}
    turns = [node for k in range(max(cpus.values(), default=0)) for node, c in sorted(cpus.items()) if c > k]
    turns = turns or [ray.get_runtime_context().get_node_id()]
    return [turns[i % len(turns)] for i in range(len(turns) if workers is None else workers)]


class RayEvaluator:
    """Evaluate jobs on ``workers`` Ray actors (default: one per CPU of the nodes not set apart for timing)."""

    def __init__(self, space: DesignSpace, workers: int | None = None) -> None:
        import os

        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.space = space
        self.closed = False
        actor = ray.remote(num_cpus=0)(_Worker)
        traces = [t.as_json_text() for t in space.traces]
        func_ref = ray.put(space.func)
        self.actors = [
            actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                func_ref, space.hardware, traces, os.getpriority(os.PRIO_PROCESS, 0)
            )
            for node in _spread(workers)
        ]

    def evaluate(self, jobs: list[tuple]) -> list[Candidate | None]:
        """Each job's candidate (None where it failed), the jobs sharded over the actors. A shard
        whose actor died (its node left the cluster) is evaluated here instead, and the actor is
        dropped; with no actor left, everything is evaluated here. SearchStopped when the
        evaluator is closed meanwhile (the model scheduler stopping its threads)."""
        import ray
        from ray.exceptions import RayActorError

        if not jobs:
            return []
        _check_open(self)
        if not self.actors:
            return [run_job(self.space, job) for job in jobs]
        wire = [(j[0], j[1].as_json_text(), j[2]) if j[0] == "replay" and isinstance(j[1], Trace) else j for j in jobs]
        size = -(-len(wire) // len(self.actors))
        shards = [(a, i * size) for i, a in enumerate(self.actors) if wire[i * size : (i + 1) * size]]
        refs = [a.evaluate.remote(wire[start : start + size]) for a, start in shards]
        out: list[Candidate | None] = []
        for (actor, start), ref in zip(shards, refs, strict=True):
            try:
                part = ray.get(ref)
            except RayActorError:
                _check_open(self)
                self.actors.remove(actor)
                out.extend(run_job(self.space, job) for job in jobs[start : start + size])
                continue
            for item in part:
                if item is None:
                    out.append(None)
                else:
                    trace_json, func, key, space, features = item
                    out.append(Candidate(Trace.from_json(trace_json), func, key, space, features))
        return out

    def nodes(self) -> list[str]:
        """The Ray node of each worker."""
        import ray

        return ray.get([a.node.remote() for a in self.actors])

    def close(self) -> None:
        import ray

        self.closed = True
        for a in list(self.actors):
            with contextlib.suppress(Exception):  # an actor whose node left is gone already
                ray.kill(a)
        self.actors = []
