"""The auto-scheduler: design space, evolutionary search, cost model, database and measurement on Ray.

    import tensorsearch as ts
    from tensorsearch import workloads
    result = ts.search.tune(workloads.get("GMM", 0, "int8"), "x86-znver4", trials=256, work_dir="runs/gmm")
    print(result.throughput, result.unit, result.trace.as_python())

Modules (see docs/search.md): ``space`` (schedule rules, design space), ``postproc``,
``mutator``, ``evolutionary`` (the search), ``features`` and ``cost_model``, ``database``,
``measure`` (Ray builders and runners), ``noise`` (the latency statistic, the reference kernel, host conditions), ``parallel`` (the search's own work on Ray), ``tuner`` (tune, compile_best), ``scheduler`` (tune_model: a budget over a model's tasks),
``workdir`` (one tuning run at a time per work dir), ``report`` (progress bar, tables, tuning
curve). Only this package imports Ray; names load on first use, so importing it is cheap.
"""

from importlib import import_module
from typing import Any

_NAMES = {
    "tune": "tuner",
    "compile_best": "tuner",
    "tune_model": "scheduler",
    "ModelTuneResult": "scheduler",
    "compile_model": "model",
    "CompiledModel": "model",
    "default_schedule": "model",
    "model_tasks": "model",
    "TuneResult": "tuner",
    "TuneError": "tuner",
    "TuneInputError": "tuner",
    "HostBusyWarning": "tuner",
    "HostConditions": "noise",
    "Progress": "tuner",
    "WorkDirBusy": "workdir",
    "hold_work_dir": "workdir",
    "count_ops": "tuner",
    "check_runs_here": "tuner",
    "SearchConfig": "evolutionary",
    "EvolutionarySearch": "evolutionary",
    "DesignSpace": "space",
    "Candidate": "space",
    "SearchSpaceError": "space",
    "RULES": "space",
    "rules_for": "space",
    "postprocs_for": "postproc",
    "Database": "database",
    "TuningRecord": "database",
    "workload_key": "database",
    "hardware_key": "database",
    "Measurer": "measure",
    "MeasureResult": "measure",
    "init_ray": "measure",
    "CostModel": "cost_model",
    "extract_features": "features",
}

__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'tensorsearch.search' has no attribute {name!r}")
