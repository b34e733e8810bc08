"""The runner pool (:class:`RunnerPool`): one runner actor per alive node that may time the
descriptor's candidates, started, lent to batches, replaced when it crashes and dropped when its node
leaves; the events it records for the database.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...runtime.backend import backend_for
from ...target import CpuIdentity, Hardware, load
from .cluster import other_cpu, timing_refusal
from .results import MeasureStopped
from .runner import remote_runner

_RUNNER_START_TIMEOUT_S = 120.0


@dataclass
class Slot:
    """One node's runner and what it is doing: (candidate index, phase, object ref, deadline)."""

    node_id: str
    cpus: int
    actor: Any
    token: str  # names the runner's temporary directory on its node
    gpu: bool = False  # the runner holds one of the node's GPUs (num_gpus=1) and runs CUDA modules
    emulated: bool = False  # the node runs the descriptor's code under qemu only (correctness, no timing)
    ready: bool = False
    dead: bool = False
    identity: CpuIdentity | None = None  # the node's CPU, as its runner reported it (CPU descriptors)
    job: tuple[int, str, Any, float, float] | None = None  # (index, "check" | "time", ref, deadline, budget s)
    owner: Any = None  # the batch whose candidate the runner has now (Measurer._run), with job


class RunnerPool:
    """The runners of the cluster: one actor per alive node with CPUs (per GPU for a GPU
    descriptor), pinned there, shared by every :class:`Measurer` of a run (the model
    scheduler's tasks all time through the same runners, so timings never overlap on a node).

    :meth:`refresh` (at the start of every batch, and every ``REFRESH_S`` seconds while one is
    timed) starts runners on nodes that joined and drops those of nodes that left. A runner
    reports its node's LLVM triple, CPU and CPU features when it starts; a node that cannot run
    the descriptor's code, or whose CPU is not the descriptor's unless ``allow_other_cpu``
    (:func:`timing_refusal`), is not used for timing, reported once (a warning, and an event).
    A node allowed to time on another CPU, and one whose runner may not take the driver's
    niceness (:func:`take_niceness`), are reported once too. ``events`` lists what happened to
    the nodes (dicts with ``kind``: "node_joined", "node_left", "node_refused", "node_emulates",
    "node_other_cpu", "node_low_priority", "requeued"), for the tuner to record (:meth:`take_events`).

    Measurers in several threads may share a pool: a batch gives a candidate only to a runner
    that has none (under ``lock``) and acts only on the runners it gave one to; a runner that
    ends a batch's candidate goes to a batch that waits for one first, so batches take turns.
    """

    REFRESH_S = 5.0
    actor_class: Any = None  # the Ray actor class of the runners it starts (None: runner.remote_runner())

    def __init__(self, hardware: Hardware | str | os.PathLike, seed: int = 0, allow_other_cpu: bool = False) -> None:
        self.hardware = load(hardware)
        self.gpu = backend_for(self.hardware).device
        self.seed = seed
        self.allow_other_cpu = allow_other_cpu
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)  # the driver's: the runners take it
        self.noted: set[tuple[str, str]] = set()  # (kind, node id) of the warnings given once per node
        self.slots: list[Slot] = []
        self.refused: dict[str, str] = {}  # node id -> why its CPU cannot run the descriptor's code
        self.emulating: set[str] = set()  # nodes that run the descriptor's code under qemu only
        self.events: list[dict[str, Any]] = []
        self.lock = threading.RLock()  # held while runners are handed out, started or dropped
        self.freed = threading.Condition(self.lock)  # notified when a runner ends a candidate
        self.waiting: set[Any] = set()  # batches with candidates left and no runner
        self.stopping = False  # set by stop(): the batches in flight end, no runner is restarted
        self._seen: set[str] | None = None  # nodes seen so far (None before the first refresh)
        self.refresh()
        if not self.slots:
            what = "GPUs (Ray resource GPU)" if self.gpu else "CPUs"
            why = "; ".join(f"node {n[:12]}: {r}" for n, r in self.refused.items())
            raise RuntimeError(
                f"the Ray cluster has no alive node with {what} that can run code for {self.hardware.name}"
                + (f" ({why})" if why else "")
            )

    def event(self, kind: str, node_id: str, **more: Any) -> None:
        with self.lock:
            self.events.append({"kind": kind, "node": node_id, "time": time.time(), **more})

    def take_events(self) -> list[dict[str, Any]]:
        """The events so far, which the pool then forgets."""
        with self.lock:
            events, self.events = self.events, []
        return events

    @staticmethod
    def alive_nodes() -> dict[str, dict[str, Any]]:
        import ray

        return {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}

    def refresh(self) -> None:
        """Start runners on alive nodes without one; drop idle runners of nodes that left; wait
        until the new ones are up (and their CPUs checked)."""
        with self.lock:
            self._refresh()

    def _refresh(self) -> None:
        alive = self.alive_nodes()
        for slot in self.slots:
            if slot.node_id not in alive and slot.job is None and not slot.dead:
                self.drop(slot)
        first = self._seen is None
        seen = self._seen if self._seen is not None else set()
        for node_id, node in alive.items():
            if node_id in self.refused:
                continue
            resources = node.get("Resources", {})
            cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
            want = gpus if self.gpu else (1 if cpus > 0 else 0)
            have = sum(1 for s in self.slots if s.node_id == node_id and not s.dead)
            for _ in range(want - have):
                self.slots.append(self._start(node_id, max(cpus, 1), gpu=self.gpu))
            if not first and node_id not in seen and want:
                self.event("node_joined", node_id)
            seen.add(node_id)
        self._seen = seen
        for slot in self.slots:
            self.wait_ready(slot)
        self.forget_dead()

    def forget_dead(self) -> None:
        """Drop the dead runners that time nothing."""
        with self.lock:
            self.slots = [s for s in self.slots if not s.dead or s.job is not None]

    def lend(self, batch: Any, pending: deque[int], dispatch: Callable[[Slot, int], None]) -> None:
        """Give idle runners the next of ``pending`` (``dispatch(slot, i)``) for ``batch``, but
        not a runner that just ended one of its candidates while another batch waits for one."""
        with self.lock:
            others = self.waiting - {batch}
            for slot in self.live():
                if slot.job is None and pending and not (slot.owner is batch and others):
                    slot.owner = batch
                    dispatch(slot, pending.popleft())
            if pending and not any(s.owner is batch and s.job is not None for s in self.slots):
                self.waiting.add(batch)
            else:
                self.waiting.discard(batch)

    def wait_for_runner(self, timeout: float) -> None:
        """Wait until a runner ends a candidate (at most ``timeout`` seconds)."""
        with self.freed:
            self.freed.wait(timeout)

    def stop(self) -> None:
        """Make every batch in flight (in any thread) end soon with :class:`MeasureStopped`."""
        with self.freed:
            self.stopping = True
            self.freed.notify_all()

    def check_stopping(self, what: str) -> None:
        if self.stopping:
            raise MeasureStopped(f"measure: the run stopped while {what}; the results so far are kept")

    def runner_freed(self) -> None:
        with self.freed:
            self.freed.notify_all()

    def done(self, batch: Any) -> None:
        """``batch`` wants no more runners."""
        with self.lock:
            self.waiting.discard(batch)

    def live(self) -> list[Slot]:
        """The runners to give candidates to: those that run them natively, else the emulating
        ones (whose results only check correctness)."""
        alive = [s for s in self.slots if not s.dead]
        return [s for s in alive if not s.emulated] or alive

    def drop(self, slot: Slot) -> None:
        """Forget a runner whose node left (killing what may remain of it)."""
        import ray

        slot.dead = True
        self.event("node_left", slot.node_id)
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)

    def _start(self, node_id: str, cpus: int, gpu: bool = False) -> Slot:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = f"tensorsearch-runner-{uuid.uuid4().hex}"
        env = {"TENSORSEARCH_NUM_THREADS": str(cpus)}  # before Ray's OMP_NUM_THREADS=1 (runtime.default_threads)
        actor = (
            (self.actor_class if self.actor_class is not None else remote_runner())
            .options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                runtime_env={"env_vars": env},
                num_gpus=1 if gpu else 0,
            )
            .remote(token, self.seed, self.niceness)
        )
        return Slot(node_id, cpus, actor, token, gpu)

    def wait_ready(self, slot: Slot) -> None:
        """Wait until the slot's runner has started (so its start-up never counts against a
        timeout), and refuse its node when its CPU cannot run the descriptor's code."""
        import ray

        if slot.ready or slot.dead:
            return
        try:
            info = ray.get(slot.actor.ready.remote(), timeout=_RUNNER_START_TIMEOUT_S)
        except Exception:  # the node is gone, or the runner cannot start there
            slot.dead = True
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
            return
        self._note_priority(slot, info)
        why = None if self.gpu else self._why_not(slot, info)
        if why is None:
            slot.ready = True
            return
        slot.dead = True
        with contextlib.suppress(Exception):
            ray.kill(slot.actor, no_restart=True)
        if slot.node_id not in self.refused:
            self.refused[slot.node_id] = why
            self.event("node_refused", slot.node_id, reason=why)
            warnings.warn(
                f"node {slot.node_id[:12]} is not used for timing {self.hardware.name} candidates: {why}", stacklevel=2
            )

    def _note(self, kind: str, node_id: str, message: str, **more: Any) -> None:
        """An event of ``kind`` and a warning, the first time for the node only."""
        if (kind, node_id) in self.noted:
            return
        self.noted.add((kind, node_id))
        self.event(kind, node_id, **more)
        warnings.warn(message, stacklevel=3)

    def _note_priority(self, slot: Slot, info: dict[str, Any]) -> None:
        """Warn (once per node) when the runner could not take the driver's niceness."""
        why = info.get("priority")
        if why:
            message = f"node {slot.node_id[:12]}: timings there run at lowered priority: {why}"
            self._note("node_low_priority", slot.node_id, message, niceness=info.get("niceness"), reason=why)

    def _why_not(self, slot: Slot, info: dict[str, Any]) -> str | None:
        """Why the slot's node may not time this descriptor's candidates (None: it may; the slot
        is marked emulated when it runs them under qemu only, and keeps the node's CPU when it
        times them natively)."""
        why, slot.emulated = timing_refusal(self.hardware, info, self.allow_other_cpu)
        if why is None and not slot.emulated and "identity" in info:
            slot.identity = CpuIdentity.from_json(info["identity"])
            other = other_cpu(self.hardware, info)
            if other is not None:  # allowed: its records name the CPU that timed them
                message = (
                    f"node {slot.node_id[:12]} times {self.hardware.name} candidates on another CPU ({other}): "
                    "each record names the CPU that timed it"
                )
                self._note("node_other_cpu", slot.node_id, message, reason=other)
        if slot.emulated and slot.node_id not in self.emulating:
            self.emulating.add(slot.node_id)
            self.event("node_emulates", slot.node_id, arch=self.hardware.arch)
            warnings.warn(
                f"node {slot.node_id[:12]} runs {self.hardware.name} candidates under qemu-{self.hardware.arch}, "
                "when no node runs them natively: they are checked, but emulated timings rank nothing",
                stacklevel=2,
            )
        return why

    def restart(self, slot: Slot, kill: bool) -> str | None:
        """Replace the slot's runner by a fresh one on the same node and wait until it is up.

        Returns what the fault handler of the old one wrote (e.g. "Segmentation fault"), if anything.
        """
        with self.lock:  # no other batch may take the runner until the fresh one is up
            if self.stopping:  # the run ends: no fresh runner
                slot.dead, slot.job = True, None
                return None
            return self._restart(slot, kill)

    def _restart(self, slot: Slot, kill: bool) -> str | None:
        import ray

        if kill:
            ray.kill(slot.actor, no_restart=True)
        fresh = self._start(slot.node_id, slot.cpus, slot.gpu)
        ref = fresh.actor.crash_report.remote(slot.token)  # also removes the old runner's files
        slot.actor, slot.token, slot.job, slot.ready = fresh.actor, fresh.token, None, False
        try:
            report = ray.get(ref, timeout=_RUNNER_START_TIMEOUT_S)
        except Exception:
            report = None
        self.wait_ready(slot)
        return report

    def close(self) -> None:
        """Stop the runners (the Ray session stays up)."""
        import ray

        for slot in self.slots:
            with contextlib.suppress(Exception):
                ray.get(slot.actor.close.remote(), timeout=10)
            with contextlib.suppress(Exception):
                ray.kill(slot.actor, no_restart=True)
        self.slots = []


def node_died(node_id: str, error: BaseException) -> bool:
    """Whether a runner died with its node (Ray says so, or the node is no longer alive)."""
    return "its node has died" in str(error) or node_id not in RunnerPool.alive_nodes()
