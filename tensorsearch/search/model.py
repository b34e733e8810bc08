"""Compiling a whole model: every task with its best tuned record, or a default schedule.

    import tensorsearch as ts
    graph = ts.graph.from_onnx("resnet50.onnx")
    exe = ts.compile_model(graph, "host", work_dir="runs/resnet50")   # work_dir is optional
    (logits,) = exe(image)
    exe.sources   # {task key: "tuned" | "default" | "unscheduled"}

A task's kernel comes from, in order: the best successful record of its workload key for this
hardware in ``work_dir``'s database ("tuned"); else the *default schedule* ("default"): the
first design-space trace of the task replayed with the analytic decisions of
:mod:`.space.heuristics` (multi-level tiling with the hardware's register and cache sizes, tensorized
where the matcher maps an intrinsic, parallel outer loops, vectorized inner loop); else, when
no design space or heuristic candidate is valid, the program as lowered ("unscheduled").
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..graph.executor import GraphExecutor, TaskProgram
from ..graph.fuse import Task, extract_tasks
from ..graph.ir import Graph
from ..graph.onnx_import import ModelLike, from_onnx
from ..graph.passes import prepare
from ..ir import PrimFunc
from ..schedule import Schedule, ScheduleError, Trace
from ..target import Hardware, resolve
from ..transform import layout_free_params
from .database import Database, hardware_key
from .space.design import DesignSpace
from .space.heuristics import heuristic_traces
from .space.rule import SearchSpaceError

__all__ = ["CompiledModel", "compile_model", "default_schedule", "model_tasks"]


def default_schedule(func: PrimFunc, hardware: Hardware) -> PrimFunc | None:
    """``func`` scheduled by the analytic decisions of its first valid design-space trace, every
    sampled compute location the root (a weight's packing there is cut out into the prepack, and
    never re-run whole inside a loop); None when no design-space trace gives a valid program."""
    try:
        space = DesignSpace(func, hardware)
    except (ScheduleError, SearchSpaceError, ValueError):
        return None
    for index, trace in enumerate(space.traces):
        for t in heuristic_traces(trace, func, hardware, variants=1, compute_root=True):
            cand = space.replay(t, index)
            if cand is not None:
                return cand.func
        cand = space.sample_space(index, 0)
        if cand is not None:
            return cand.func
    return None


def _tuned(func: PrimFunc, hw: Hardware, db: Database | None, key: str) -> tuple[PrimFunc, str] | None:
    """The best record's program and its trace text, or None."""
    if db is None:
        return None
    for record in db.best(key, hardware_key(hw), 3):
        try:
            sch = Schedule(func, check=False, hardware=hw)
            Trace.from_json(record.trace).apply(sch)
            return sch.func, record.trace
        except (ScheduleError, ValueError):
            continue  # a record of an older schedule that no longer applies: try the next
    return None


# modules built in this process, by (task key, hardware key, the record's trace or "default"):
# a model compiled twice, or two models sharing kernels, build each kernel once
_BUILT: dict[tuple[str, str, str], tuple[TaskProgram, str]] = {}
_BUILT_MAX = 512


def _task_program(task: Task, constants: Sequence[int], hw: Hardware, db: Database | None) -> tuple[TaskProgram, str]:
    """The task's program and where its schedule came from; stages of the schedule that only
    re-lay constants become a prepack run once per kernel (weights packed ahead)."""
    tuned = _tuned(task.func, hw, db, task.key)
    cache_key = (task.key, hardware_key(hw), tuned[1] if tuned else "default")
    if cache_key in _BUILT:
        return _BUILT[cache_key]
    if tuned is not None:
        func, source = tuned[0], "tuned"
    else:
        func, source = default_schedule(task.func, hw), "default"
        if func is None:
            func, source = task.func, "unscheduled"
    program = TaskProgram.build(func, constants if source != "unscheduled" else (), hw.with_fp_contract(), task.name)
    made = (program, source)
    if len(_BUILT) >= _BUILT_MAX:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[cache_key] = made
    return made


class CompiledModel(GraphExecutor):
    """A graph executor that also knows its tasks and where each kernel's schedule came from."""

    def __init__(
        self,
        graph: Graph,
        kernels: Sequence[Any],
        programs: Mapping[str, TaskProgram],
        tasks: Sequence[Task],
        sources: Mapping[str, str],
        hardware: Hardware,
        compile_seconds: float,
    ) -> None:
        super().__init__(graph, kernels, programs)
        self.tasks = list(tasks)
        self.sources = dict(sources)
        self.hardware = hardware
        self.programs = dict(programs)
        self.compile_seconds = compile_seconds


def _as_graph(model: Graph | ModelLike, input_shapes: Mapping[str, Any] | None) -> Graph:
    return model if isinstance(model, Graph) else from_onnx(model, input_shapes)


def model_tasks(model: Graph | ModelLike, *, input_shapes: Mapping[str, Any] | None = None, layout: str = "NHWC"):
    """The prepared graph, its kernels and its tasks (see :func:`tensorsearch.graph.fuse.extract_tasks`)."""
    graph = prepare(_as_graph(model, input_shapes), layout=layout)
    kernels, tasks = extract_tasks(graph)
    return graph, kernels, tasks


def compile_model(
    model: Graph | ModelLike,
    hardware: Hardware | str | os.PathLike | None = None,
    work_dir: str | os.PathLike | None = None,
    *,
    input_shapes: Mapping[str, Any] | None = None,
    layout: str = "NHWC",
    progress: Callable[[int, int, Task, str], None] | None = None,
) -> CompiledModel:
    """Compile a model (a :class:`~tensorsearch.graph.Graph`, an ONNX path or ``ModelProto``) for
    ``hardware`` (None: the host); see the module docstring. ``progress(done, total, task,
    source)`` is called after each task is built."""
    t0 = time.perf_counter()
    # the work dir first: a mistake in it is the one thing said, before the host is resolved
    # (a derived host's HardwareWarning would otherwise come ahead of the error)
    db = Database.open_existing(work_dir) if work_dir is not None else None
    hw = resolve(hardware)
    graph, kernels, tasks = model_tasks(model, input_shapes=input_shapes, layout=layout)
    programs: dict[str, TaskProgram] = {}
    sources: dict[str, str] = {}
    for n, task in enumerate(tasks):
        programs[task.key], sources[task.key] = _task_program(task, layout_free_params(task.func), hw, db)
        if progress is not None:
            progress(n + 1, len(tasks), task, sources[task.key])
    return CompiledModel(graph, kernels, programs, tasks, sources, hw, time.perf_counter() - t0)
