"""The graph executor: a model's kernels run in order over planned buffers.

    exe = GraphExecutor(graph, kernels, modules)   # modules: task key -> built runtime Module
    outputs = exe(image)                           # numpy arrays in, numpy arrays out
    outputs = exe(input=image)                     # or by input name

:func:`plan_buffers` gives every intermediate value a slot of a shared arena, reusing a slot
once the last kernel reading its value has run (liveness in kernel order; a freed slot is
taken by the smallest request that fits, TVM's graph memory planner in miniature). Graph
inputs, constants and outputs have buffers of their own. At construction every kernel call is
bound to its arrays once (:meth:`~tensorsearch.runtime.Module.bind`) and the bound calls chained
into one native function (:func:`~tensorsearch.runtime.sequence.call_sequence`), so a run is the
copy of the inputs and one native call.

A task's :class:`TaskProgram` may carry a *prepack* function
(:func:`~tensorsearch.transform.split_constant_stages`): the stages of its schedule that only
re-lay a weight. The executor runs it once per kernel, at construction, on that kernel's
constants, and binds the packed arrays in their place: weights are packed ahead, not per run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import PrimFunc, parse_dtype
from ..ir.dtype import numpy_dtype
from ..runtime.memory import aligned_copy, aligned_empty, aligned_zeros
from ..runtime.module import Module, build
from ..runtime.sequence import call_sequence
from ..target import Hardware
from ..transform import ConstantSplit, split_constant_stages
from .fuse import Kernel
from .ir import Graph, GraphError, Value

__all__ = ["BufferPlan", "GraphExecutor", "TaskProgram", "plan_buffers"]


@dataclass(frozen=True)
class TaskProgram:
    """What runs a task: its compiled module, and the prepack module with the split that made
    the two when its schedule re-lays constants."""

    main: Module
    prepack: Module | None = None
    split: ConstantSplit | None = None

    @classmethod
    def build(
        cls, func: PrimFunc, constants: Sequence[int], hardware: Hardware, name: str | None = None
    ) -> TaskProgram:
        """``func`` (a scheduled kernel) compiled to run on its ``constants`` (parameter indices)
        packed once, ahead: the stages that only re-lay them become the prepack
        (:func:`~tensorsearch.transform.split_constant_stages`); the whole function when none do."""
        split = split_constant_stages(func, constants) if constants else None
        if split is None:
            return cls(build(func, hardware, name=name))
        prepack = build(split.prepack, hardware, name=f"{name}_prepack" if name else None)
        return cls(build(split.main, hardware, name=name), prepack, split)

    def main_args(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``main``'s arguments for one kernel's arrays (in the lowered kernel's parameter order):
        the arrays themselves, or, when there is a prepack, with the constants packed first."""
        if self.split is None or self.prepack is None:
            return list(arrays)
        packed = [aligned_zeros([d.value for d in b.shape], _np_dtype(str(b.dtype))) for b in self.split.packed]
        self.prepack.bind(*(arrays[i] for i in self.split.prepack_inputs), *packed)()
        return [arrays[p] if isinstance(p, int) else packed[p[1]] for p in self.split.main_params]

    def bind(self, arrays: Sequence[np.ndarray]) -> Callable[[], int]:
        """The call of ``main`` on one kernel's arrays (:meth:`main_args`)."""
        return self.main.bind(*self.main_args(arrays))


def _np_dtype(dtype: str) -> np.dtype:
    return np.dtype(numpy_dtype(parse_dtype(dtype)))


def _nbytes(v: Value) -> int:
    return max(1, v.size) * _np_dtype(v.dtype).itemsize


@dataclass(frozen=True)
class BufferPlan:
    """Where each intermediate value lives: ``slot_of[value]`` indexes ``slot_bytes``."""

    slot_of: Mapping[str, int]
    slot_bytes: tuple[int, ...]
    unplanned_bytes: int  # what one buffer per value would take

    @property
    def total_bytes(self) -> int:
        return sum(self.slot_bytes)


def plan_buffers(graph: Graph, kernels: Sequence[Kernel]) -> BufferPlan:
    """Slots for the values kernels hand to each other (see the module docstring)."""
    fixed = {v.name for v in graph.inputs} | {v.name for v in graph.outputs} | set(graph.constants)
    last_use: dict[str, int] = {}
    for k, kernel in enumerate(kernels):
        for name in kernel.lowered.args:
            last_use[name] = k
    slot_of: dict[str, int] = {}
    slot_bytes: list[int] = []
    free: list[int] = []
    unplanned = 0
    for k, kernel in enumerate(kernels):
        for name in kernel.lowered.outputs:
            if name in fixed or name in slot_of:
                continue
            need = _nbytes(graph.values[name])
            unplanned += need
            fits = [s for s in free if slot_bytes[s] >= need]
            if fits:
                slot = min(fits, key=lambda s: slot_bytes[s])
                free.remove(slot)
            elif free:  # grow the largest free slot rather than adding one
                slot = max(free, key=lambda s: slot_bytes[s])
                free.remove(slot)
                slot_bytes[slot] = need
            else:
                slot = len(slot_bytes)
                slot_bytes.append(need)
            slot_of[name] = slot
        for name in dict.fromkeys(kernel.lowered.args):
            if name in slot_of and last_use.get(name) == k:
                free.append(slot_of[name])
    return BufferPlan(slot_of, tuple(slot_bytes), unplanned)


class GraphExecutor:
    """Runs ``kernels`` (in order) of ``graph`` with ``programs`` (task key -> TaskProgram or Module)."""

    def __init__(self, graph: Graph, kernels: Sequence[Kernel], programs: Mapping[str, TaskProgram | Module]) -> None:
        self.graph = graph
        self.kernels = list(kernels)
        self.plan = plan_buffers(graph, self.kernels)
        self._arena = [aligned_empty(n, np.uint8) for n in self.plan.slot_bytes]
        self._arrays: dict[str, np.ndarray] = {}
        for v in graph.inputs:
            self._arrays[v.name] = aligned_zeros(v.shape, _np_dtype(v.dtype))
        for v in graph.outputs:
            if v.name not in graph.constants and v.name not in self._arrays:
                self._arrays[v.name] = aligned_zeros(v.shape, _np_dtype(v.dtype))
        self._calls: list[Callable[[], int]] = []
        for kernel in self.kernels:
            program = programs.get(kernel.task)
            if program is None:
                raise GraphError(f"no module for task {kernel.task} ({kernel.group.name})")
            if isinstance(program, Module):
                program = TaskProgram(program)
            self._calls.append(program.bind([self._kernel_array(name) for name in kernel.lowered.args]))
        self._sequence = call_sequence(self._calls)  # the whole run in one native call

    def _kernel_array(self, name: str) -> np.ndarray:
        v = self.graph.values[name]
        shape = v.shape or (1,)
        if name in self.graph.constants:
            arr = self._arrays.get(name)
            if arr is None:
                arr = aligned_copy(np.asarray(self.graph.constants[name], _np_dtype(v.dtype)).reshape(shape))
                self._arrays[name] = arr
            return arr
        if name in self._arrays:
            return self._arrays[name].reshape(shape)
        slot = self.plan.slot_of[name]
        dt = _np_dtype(v.dtype)
        return self._arena[slot][: max(1, v.size) * dt.itemsize].view(dt).reshape(shape)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    def set_inputs(self, *args: np.ndarray, **kwargs: np.ndarray) -> None:
        """Copy the inputs in (positional in graph-input order, or by name); checks shape and dtype."""
        names = self.input_names
        if len(args) > len(names):
            raise TypeError(f"the model takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        given = dict(zip(names, args, strict=False))
        for k, a in kwargs.items():
            if k not in names:
                raise TypeError(f"the model has no input {k!r} (inputs: {', '.join(names)})")
            if k in given:
                raise TypeError(f"input {k!r} given twice")
            given[k] = a
        missing = [n for n in names if n not in given]
        if missing:
            raise TypeError(f"missing model input(s): {', '.join(missing)}")
        for v in self.graph.inputs:
            a = np.asarray(given[v.name])
            if a.shape != v.shape:
                raise ValueError(f"input {v.name}: expected shape {list(v.shape)}, got {list(a.shape)}")
            if a.dtype != self._arrays[v.name].dtype:
                raise ValueError(f"input {v.name}: expected dtype {v.dtype}, got {a.dtype}")
            np.copyto(self._arrays[v.name], a)

    def run(self) -> None:
        """Run every kernel on the inputs set last."""
        if self._sequence is not None:
            self._sequence()
            return
        for call in self._calls:
            call()

    def outputs(self) -> list[np.ndarray]:
        """Copies of the graph's outputs after the last run, in graph-output order."""
        out = []
        for v in self.graph.outputs:
            if v.name in self.graph.constants:
                out.append(np.array(self.graph.constants[v.name]))
            else:
                out.append(self._arrays[v.name].reshape(v.shape).copy())
        return out

    def __call__(self, *args: np.ndarray, **kwargs: np.ndarray) -> list[np.ndarray]:
        self.set_inputs(*args, **kwargs)
        self.run()
        return self.outputs()

    def profile(self, repeat: int = 3) -> list[tuple[Kernel, float]]:
        """Each kernel with its median seconds per call over ``repeat`` runs (on the inputs set last)."""
        samples: list[list[float]] = [[] for _ in self._calls]
        for _ in range(repeat):
            for k, call in enumerate(self._calls):
                t0 = time.perf_counter()
                call()
                samples[k].append(time.perf_counter() - t0)
        return [(kernel, sorted(s)[len(s) // 2]) for kernel, s in zip(self.kernels, samples, strict=True)]

    def time(self, *args: Any, repeat: int = 10, warmup: int = 1, **kwargs: Any) -> list[float]:
        """Seconds of each of ``repeat`` runs (after ``warmup`` runs) on the given inputs."""
        self.set_inputs(*args, **kwargs)
        for _ in range(warmup):
            self.run()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self.run()
            times.append(time.perf_counter() - t0)
        return times
