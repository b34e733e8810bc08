"""Mutators: change one sampling decision of a design trace (TVM MetaSchedule's mutators).

A mutant is the design trace with one decision replaced (``Trace.with_decision``); replaying it
(``DesignSpace.replay``) validates it, so an illegal mutant is simply dropped. ::

    mutant = MutateTileSize().apply(candidate.design_trace, random.Random(0))
    child = space.replay(mutant)        # None when a primitive refuses the new decision

* ``MutateTileSize``: moves a prime factor between two tiles of one ``sample_perfect_tile``
  (the product stays the loop's extent; the innermost bound is respected);
* ``MutateComputeLocation``: another loop for one ``sample_compute_location``
  (the primitive falls back to the nearest legal loop);
* ``MutateUnroll`` / ``MutateParallel``: another value of the ``sample_categorical`` whose
  result is the root block's unroll step / parallel extent annotation;
* ``MutateSplitChoice``: another value of a ``sample_categorical`` whose result is a split
  factor: the GPU rules' warps, warp tiles and k steps and AutoBind's threads per block (what
  TVM's MutateTileSize and MutateThreadBinding change on a GPU). The GPU search's only mutator.
"""

from __future__ import annotations

import random
from typing import Any

from ..schedule import Instruction, Trace
from ..schedule.sampling import prime_factors
from .space.rule import PARALLEL, UNROLL


class Mutator:
    name = "Mutator"

    def candidates(self, trace: Trace) -> list[Instruction]:
        raise NotImplementedError

    def mutate(self, inst: Instruction, rng: random.Random) -> Any:
        raise NotImplementedError

    def apply(self, trace: Trace, rng: random.Random) -> Trace | None:
        """A copy of ``trace`` with one decision changed, or None when nothing can change."""
        insts = self.candidates(trace)
        while insts:
            inst = insts.pop(rng.randrange(len(insts)))
            new = self.mutate(inst, rng)
            if new is not None and new != inst.decision:
                return trace.with_decision(inst, new)
        return None

    def __repr__(self) -> str:
        return f"{self.name}()"


class MutateTileSize(Mutator):
    name = "MutateTileSize"

    def candidates(self, trace: Trace) -> list[Instruction]:
        return [
            i
            for i in trace.insts
            if i.kind.name == "sample_perfect_tile"
            and i.decision is not None
            and len(i.decision) > 1
            and any(f > 1 for f in i.decision)
        ]

    def mutate(self, inst: Instruction, rng: random.Random) -> list[int] | None:
        tiles = list(inst.decision)
        limit = dict(inst.args).get("max_innermost_factor", 16)
        limit = None if limit == -1 else limit
        for _ in range(8):
            src = rng.choice([p for p, f in enumerate(tiles) if f > 1])
            dst = rng.choice([p for p in range(len(tiles)) if p != src])
            factor = rng.choice(prime_factors(tiles[src]))
            new = list(tiles)
            new[src] //= factor
            new[dst] *= factor
            if limit is not None and new[-1] > limit:
                continue
            return new
        return None


class MutateComputeLocation(Mutator):
    name = "MutateComputeLocation"

    def candidates(self, trace: Trace) -> list[Instruction]:
        return [i for i in trace.insts if i.kind.name == "sample_compute_location" and i.decision is not None]

    def mutate(self, inst: Instruction, rng: random.Random) -> int:
        # -2: inline, -1: root, i: the i-th loop; the primitive falls back to the nearest legal
        # location below a decision that is not one
        return rng.choice([d for d in range(-1, max(inst.decision + 3, 4)) if d != inst.decision])


class _MutateCategorical(Mutator):
    """Another value of a ``sample_categorical`` whose result the instructions ``fed`` picks use."""

    def fed(self, trace: Trace) -> set[int]:
        raise NotImplementedError

    def candidates(self, trace: Trace) -> list[Instruction]:
        feeding = self.fed(trace)
        return [
            i
            for i in trace.insts
            if i.kind.name == "sample_categorical"
            and i.outputs
            and id(i.outputs[0]) in feeding
            and len(dict(i.args)["candidates"]) > 1
        ]

    def mutate(self, inst: Instruction, rng: random.Random) -> int:
        n = len(dict(inst.args)["candidates"])
        return rng.choice([d for d in range(n) if d != inst.decision])


class _MutateAnnotationChoice(_MutateCategorical):
    key = ""

    def fed(self, trace: Trace) -> set[int]:
        return {
            id(dict(i.args).get("ann_val"))
            for i in trace.insts
            if i.kind.name == "annotate" and dict(i.args).get("ann_key") == self.key
        }


class MutateUnroll(_MutateAnnotationChoice):
    name = "MutateUnroll"
    key = UNROLL


class MutateParallel(_MutateAnnotationChoice):
    name = "MutateParallel"
    key = PARALLEL


class MutateSplitChoice(_MutateCategorical):
    name = "MutateSplitChoice"

    def fed(self, trace: Trace) -> set[int]:
        return {
            id(f)
            for i in trace.insts
            if i.kind.name == "split"
            for f in dict(i.args).get("factors", ())
            if f is not None
        }


def default_mutators() -> dict[Mutator, float]:
    """TVM's CPU mutators and probabilities (and the GPU search's, at 0 here: :func:`gpu_mutators`)."""
    return {
        MutateTileSize(): 0.9,
        MutateComputeLocation(): 0.05,
        MutateUnroll(): 0.03,
        MutateParallel(): 0.02,
        MutateSplitChoice(): 0.0,
    }


def gpu_mutators() -> dict[Mutator, float]:
    """The mutators of a GPU design space (its tile and thread choices are categorical)."""
    return {MutateSplitChoice(): 1.0}
