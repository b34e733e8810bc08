"""The design space: schedule rules applied block by block (paper section 4.3, TVM MetaSchedule).

A *rule* takes a schedule and one of its blocks and returns the schedules it makes of them (none
changed, one, or several: a fork of the design space). Applying every rule of a target to every
block gives the *design-space traces*: schedule traces whose tile sizes, compute locations and
unroll/parallel extents are ``sample_*`` instructions. A candidate program is a design-space trace
replayed with fresh (or mutated) decisions and then post-processed (:mod:`..postproc`)::

    space = DesignSpace(workloads.get("GMM", 0, "int8").func, hardware.load("host"))
    len(space.traces)                       # e.g. 3: VNNI tiling with no / level-1 / level-2 write cache
    cand = space.sample(random.Random(0))   # a Candidate: trace, func (post-processed), key
    print(cand.trace.as_python())

The rules are in :mod:`.cpu` and :mod:`.gpu`, the list a hardware gets in :mod:`.registry`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ...ir import PrimFunc, structural_hash
from ...schedule import BlockRV, Schedule, ScheduleError, Trace
from ...target import Hardware
from .cpu import AutoInline
from .kind import SearchKind, postprocs_for, rules_for, search_kind_for
from .rule import ScheduleRule, SearchSpaceError


@dataclass
class Candidate:
    """A program of the search: the trace that makes it (design part, ``enter_postproc``, then the
    postprocessing), the program, and its structural hash (equal programs are one candidate)."""

    trace: Trace
    func: PrimFunc
    key: str
    space: int = 0  # index of the design-space trace it came from
    features: Any = field(default=None, repr=False)

    @property
    def design_trace(self) -> Trace:
        """The design part: sampling decisions included, postprocessing removed."""
        return self.trace.simplified(remove_postproc=True)


def _sampling_fresh(inst: Any, recorded: Any) -> None:
    return None


class DesignSpace:
    """The design-space traces of ``func`` for ``hardware`` and the way to make candidates of them.

    ``rules`` defaults to :func:`rules_for`; ``postprocs`` to :func:`.postproc.postprocs_for`."""

    def __init__(
        self,
        func: PrimFunc,
        hardware: Hardware,
        rules: list[ScheduleRule] | None = None,
        postprocs: list[Any] | None = None,
        traces: list[Trace] | None = None,
        max_spaces: int = 16,
    ) -> None:
        self.func = func
        self.max_spaces = max_spaces
        self.hardware = hardware
        self.kind: SearchKind = search_kind_for(hardware)
        self.rules = rules_for(hardware) if rules is None else rules
        self.postprocs = postprocs_for(hardware) if postprocs is None else postprocs
        self.traces = self._generate() if traces is None else list(traces)
        if not self.traces:
            raise SearchSpaceError("the rules produced no design space")

    def _generate(self) -> list[Trace]:
        """Apply every rule to every block, consumers first; a block a rule creates (a packed
        copy, a write cache, a stride phase) gets the rules too, except AutoInline (which would
        undo it); the root block's rules run last. Forks multiply over blocks (four phase blocks
        forking six ways each would make 1296 spaces), so once ``max_spaces`` would be passed a
        rule's first choice is taken without forking."""
        root = Schedule(self.func, seed=0, check=False, error_detail="fast", hardware=self.hardware)
        for rule in self.rules:
            if rule.rewrites_program:  # whole-program rewrites first: their blocks are the program's
                for block in _blocks_post_order(root):
                    (root,) = rule.apply(root, block)
        initial = [root.get(b).name for b in _blocks_post_order(root)]
        queue: list[tuple[Schedule, list[str], frozenset[str]]] = [(root, initial, frozenset(initial))]
        final: list[Schedule] = []
        while queue:
            sch, todo, known = queue.pop(0)
            if not todo:
                out = [sch]
                for rule in self.rules:
                    out = [s for st in out for s in rule.apply(st, st.get_block("root"))]
                final.extend(out)
                continue
            name, rest = todo[0], todo[1:]
            states = [sch]
            for rule in self.rules:
                if (isinstance(rule, AutoInline) and name not in initial) or rule.rewrites_program:
                    continue
                nxt: list[Schedule] = []
                for st in states:
                    try:
                        block = st.get_block(name)
                    except ScheduleError:
                        nxt.append(st)  # inlined by an earlier rule
                        continue
                    forks = rule.apply(st, block)
                    if len(queue) + len(final) + len(states) + len(nxt) + len(forks) > self.max_spaces:
                        forks = forks[:1]  # past the cap a block takes its rule's first choice
                    nxt.extend(forks)
                states = nxt
            for st in states:
                new = [n for n in (st.get(b).name for b in _blocks_post_order(st)) if n not in known]
                queue.append((st, rest + new, known | set(new)))
        return [s.trace.simplified() for s in final]

    def _replay(self, trace: Trace, provider: Any, seed: int, error_detail: str = "none") -> Schedule:
        sch = Schedule(self.func, seed=seed, check=False, error_detail=error_detail, hardware=self.hardware)
        trace.apply(sch, provider, remove_postproc=True)
        return sch

    def postprocess(self, sch: Schedule) -> bool:
        """Run the postprocessors on ``sch`` (after ``enter_postproc``); False when one rejects it."""
        return self._refusal(sch) is None

    def _refusal(self, sch: Schedule) -> str | None:
        """Run the postprocessors on ``sch``; why one rejected it, or None when none did."""
        sch.enter_postproc()
        for p in self.postprocs:
            try:
                if not p.apply(sch):
                    return f"postprocessor {p.name} rejected it"
            except ScheduleError as err:
                return str(err).splitlines()[0]
        return None

    def _candidate(self, sch: Schedule, space: int) -> Candidate | None:
        if not self.postprocess(sch):
            return None
        return Candidate(sch.trace, sch.func, candidate_key(sch.func), space)

    def sample(self, rng: random.Random) -> Candidate | None:
        """A fresh candidate: a design-space trace replayed with new random decisions; None when
        the sample is invalid (a primitive or postprocessor refused it)."""
        space = rng.randrange(len(self.traces))
        return self.sample_space(space, rng.randrange(1 << 31))

    def sample_space(self, space: int, seed: int) -> Candidate | None:
        """A fresh candidate of design-space trace ``space`` with decisions drawn from ``seed``."""
        try:
            sch = self._replay(self.traces[space], _sampling_fresh, seed)
        except (ScheduleError, ValueError):
            return None
        return self._candidate(sch, space)

    def why_invalid(self, space: int, seed: int) -> str | None:
        """Why the sample of design-space trace ``space`` drawn from ``seed`` is invalid (the
        refusing primitive's or postprocessor's message), or None when it is valid."""
        try:
            sch = self._replay(self.traces[space], _sampling_fresh, seed, error_detail="fast")
        except (ScheduleError, ValueError) as err:
            return str(err).splitlines()[0]
        return self._refusal(sch)

    def replay(self, design_trace: Trace, space: int = 0) -> Candidate | None:
        """The candidate of a design trace with its recorded decisions (None when invalid)."""
        try:
            sch = self._replay(design_trace, None, 0)
        except (ScheduleError, ValueError):
            return None
        return self._candidate(sch, space)


def candidate_key(func: PrimFunc) -> str:
    """A candidate's key: the structural hash of its final function as 16 hex digits."""
    return format(structural_hash(func) & ((1 << 64) - 1), "016x")


def _blocks_post_order(sch: Schedule) -> list[BlockRV]:
    """Every block under the root, consumers first (TVM's PostOrderApply visiting order)."""
    out: list[BlockRV] = []

    def visit(parent: Any) -> None:
        for child in sch.get_child_blocks(parent):
            visit(child)
            out.append(child)

    visit(sch.get_block("root"))
    return out[::-1]
