"""The auto-scheduler: design space, evolutionary search, cost model, database and measurement on Ray.

    import tensorsearch as ts
    from tensorsearch import workloads
    result = ts.search.tune(workloads.get("GMM", 0, "int8"), "x86-znver4", trials=256, work_dir="runs/gmm")
    print(result.throughput, result.unit, result.trace.as_python())

Sub-packages by concern (docs/search.md, docs/architecture.md): ``space`` (schedule rules, the
design space), ``postproc``, ``mutator``, ``strategy`` (the evolutionary search, the search's own
work on Ray), ``cost_model`` (features and the model), ``database``, ``measure`` (Ray builders and
runners; the latency statistic, the reference kernel, host conditions), ``tuning`` (tune,
compile_best, tune_model, the work dir's hold); above them the application: ``model`` (a model's
tasks, compiled from the database), ``experiment`` and ``report`` (progress bar, tables, tuning
curve). Only this package imports Ray; names load on first use, so importing it is cheap.
"""

from importlib import import_module
from typing import Any

_NAMES = {
    "tune": "tuning.tuner",
    "compile_best": "tuning.tuner",
    "tune_model": "tuning.scheduler",
    "ModelTuneResult": "tuning.scheduler",
    "compile_model": "model",
    "CompiledModel": "model",
    "default_schedule": "model",
    "model_tasks": "model",
    "TuneResult": "tuning.tuner",
    "TuneError": "tuning.errors",
    "TuneInputError": "tuning.errors",
    "HostBusyWarning": "tuning.tuner",
    "HostConditions": "measure.noise",
    "Progress": "tuning.tuner",
    "WorkDirBusy": "tuning.workdir",
    "hold_work_dir": "tuning.workdir",
    "count_ops": "tuning.tuner",
    "check_runs_here": "tuning.tuner",
    "SearchConfig": "strategy.evolutionary",
    "EvolutionarySearch": "strategy.evolutionary",
    "DesignSpace": "space.design",
    "Candidate": "space.design",
    "SearchSpaceError": "space.rule",
    "RULES": "space.registry",
    "rules_for": "space.kind",
    "postprocs_for": "space.kind",
    "Database": "database",
    "TuningRecord": "database",
    "workload_key": "database",
    "hardware_key": "database",
    "Measurer": "measure.measurer",
    "MeasureResult": "measure.results",
    "MeasureConfig": "measure.config",
    "init_ray": "measure.cluster",
    "CostModel": "cost_model.model",
    "extract_features": "cost_model.features",
}

__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(import_module(f".{_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'tensorsearch.search' has no attribute {name!r}")
