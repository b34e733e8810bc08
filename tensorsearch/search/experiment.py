"""Experiments as files: ``tensorsearch experiment FILE.yaml``.

An experiment is operators and models x hardware x seeds, each tuned with a trial budget, with
one table at the end. The file (validated when it is read, every error naming the file and key)::

    name: paper operators, float32       # a title for the tables
    output: runs/exp-ops                 # where the work dirs and tables go (relative to the file)
    hardware: [host]                     # descriptor names or paths
    trials: 64                           # per operator; per model, over all its tasks
    seeds: [0]
    operators:
      - C2D:1                            # NAME:INDEX, float32
      - {op: GMM, index: 3, dtype: int8, trials: 256}
      - {op: GMM, shape: [1, 128, 128, 128]}
    models:
      - {model: resnet50, reduced: true, trials: 512}
      - {model: my_model.onnx, input_shapes: {input_ids: [1, 128]}}
    strategy: gradient                   # tune_model's, for models
    concurrent_tasks: 1                  # tune_model's: the tasks of a model whose rounds run at once
    address: null                        # a Ray cluster (default: RAY_ADDRESS, else a local one)
    allow_other_cpu: false               # tune's: time on machines whose CPU is not the descriptor's
    search: {population_size: 128}       # any SearchConfig field

Each cell (item, hardware, seed) tunes in its own work dir, ``OUTPUT/work/<item>-<hardware>-s<seed>``,
so running the same file again resumes every cell where it stopped (a finished cell only
rebuilds its best program) and a killed run loses at most the measurements in flight. After each
cell ``OUTPUT/results.csv``, ``results.md`` and ``results.png`` are written again with every cell
done so far.
"""

from __future__ import annotations

import csv
import difflib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .measure.noise import HostConditions
from .report import format_markdown_table
from .strategy.evolutionary import SearchConfig

__all__ = ["Experiment", "ExperimentError", "ModelItem", "OperatorItem", "load_experiment", "run_experiment"]

RESULT_COLUMNS = (
    "kind", "item", "hardware", "seed", "trials", "best_ms", "throughput", "unit", "measured_model_ms",
    "host", "load", "tuning_s", "status", "work_dir",
)  # fmt: skip


class ExperimentError(ValueError):
    """An experiment file that cannot be run: the message names the file and the key."""


@dataclass(frozen=True)
class OperatorItem:
    op: str
    dtype: str = "float32"
    index: int | None = 0
    shape: tuple[int, ...] | None = None
    trials: int | None = None

    @property
    def label(self) -> str:
        where = "x".join(map(str, self.shape)) if self.shape is not None else str(self.index)
        return f"{self.op}:{where}:{self.dtype}"

    def workload(self) -> Any:
        from .. import workloads

        if self.shape is not None:
            return workloads.make(self.op, self.shape, self.dtype)
        return workloads.get(self.op, self.index or 0, self.dtype)


@dataclass(frozen=True)
class ModelItem:
    model: str
    reduced: bool = False
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    layout: str = "NHWC"
    trials: int | None = None

    @property
    def label(self) -> str:
        return Path(self.model).stem + ("-reduced" if self.reduced else "")


@dataclass(frozen=True)
class Experiment:
    path: Path
    name: str
    output: Path
    hardware: tuple[str, ...]
    trials: int
    seeds: tuple[int, ...] = (0,)
    operators: tuple[OperatorItem, ...] = ()
    models: tuple[ModelItem, ...] = ()
    strategy: str = "gradient"
    concurrent_tasks: int = 1
    address: str | None = None
    search: SearchConfig = field(default_factory=SearchConfig)
    allow_other_cpu: bool = False

    def cells(self) -> list[tuple[OperatorItem | ModelItem, str, int]]:
        """(item, hardware, seed) in the order they run: operators first, then models."""
        items: list[OperatorItem | ModelItem] = [*self.operators, *self.models]
        return [(item, hw, seed) for hw in self.hardware for seed in self.seeds for item in items]


# ------------------------------------------------------------------------------------------
# reading


_TOP_KEYS = {
    *("name", "output", "hardware", "trials", "seeds", "operators", "models"),
    *("strategy", "concurrent_tasks", "address", "search", "allow_other_cpu"),
}


def load_experiment(path: str | os.PathLike) -> Experiment:
    """Read and validate an experiment file; ExperimentError names the file, the key's line and the key at fault."""
    from ..target.reader import HardwareError, read_text, read_yaml

    path = Path(path)
    try:  # YAML is read in one place, the target layer's reader
        text = read_text(path)
        data = read_yaml(text, str(path))
    except HardwareError as err:
        raise ExperimentError(str(err)) from None
    r = _Reader(path, text)
    if not isinstance(data, dict):
        raise r.error("", "the file must be a mapping of keys (name, output, hardware, trials, ...)")
    r.keys(data, _TOP_KEYS, "")
    for key in ("output", "hardware", "trials"):
        if key not in data:
            raise r.error(key, "missing (required: output, hardware, trials)")
    operators = tuple(r.operator(x, f"operators[{n}]") for n, x in enumerate(r.list(data, "operators")))
    models = tuple(r.model(x, f"models[{n}]") for n, x in enumerate(r.list(data, "models")))
    if not operators and not models:
        raise r.error("operators", "the experiment has no operators and no models")
    hardware = tuple(r.string(h, f"hardware[{n}]") for n, h in enumerate(r.list(data, "hardware", scalar_ok=True)))
    if not hardware:
        raise r.error("hardware", "names no hardware")
    for n, name in enumerate(hardware):
        r.hardware(name, f"hardware[{n}]")
    seeds = tuple(r.integer(s, f"seeds[{n}]", low=0) for n, s in enumerate(r.list(data, "seeds", scalar_ok=True)))
    strategy = data.get("strategy", "gradient")
    from .tuning.scheduler import STRATEGIES

    if strategy not in STRATEGIES:
        raise r.error("strategy", f"must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    address = data.get("address")
    allow_other_cpu = data.get("allow_other_cpu", False)
    if not isinstance(allow_other_cpu, bool):
        raise r.error("allow_other_cpu", f"must be true or false, not {allow_other_cpu!r}")
    return Experiment(
        path=path,
        name=str(data.get("name", path.stem)),
        output=(path.parent / r.string(data["output"], "output")).resolve(),
        hardware=hardware,
        trials=r.integer(data["trials"], "trials", low=1),
        seeds=seeds or (0,),
        operators=operators,
        models=models,
        strategy=strategy,
        concurrent_tasks=r.integer(data.get("concurrent_tasks", 1), "concurrent_tasks", low=1),
        address=None if address is None else r.string(address, "address"),
        search=r.search(data.get("search", {}), "search"),
        allow_other_cpu=allow_other_cpu,
    )


def _hint(word: str, known: list[str], what: str) -> str:
    """ "; did you mean 'X'?" for the closest known word, else the list of the known ones."""
    close = difflib.get_close_matches(word, known, n=1)
    return f"; did you mean {close[0]!r}?" if close else f" ({what}: {', '.join(known)})"


class _Reader:
    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.text = text

    def error(self, key: str, message: str) -> ExperimentError:
        from ..target.reader import key_line

        line = key_line(self.text, key) if key else None
        at = f"{self.path}:{line}" if line is not None else str(self.path)
        return ExperimentError(f"{at}: {key + ': ' if key else ''}{message}")

    def keys(self, data: dict, allowed: set[str], where: str) -> None:
        for key in data:
            if key not in allowed:
                hint = _hint(str(key), sorted(allowed), "keys")
                raise self.error(f"{where}{'.' if where else ''}{key}", f"unknown key{hint}")

    def list(self, data: dict, key: str, scalar_ok: bool = False) -> list:
        value = data.get(key, [])
        if scalar_ok and isinstance(value, str | int) and not isinstance(value, bool):
            return [value]
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.error(key, f"must be a list, not {type(value).__name__}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.error(key, f"must be a non-empty string, not {value!r}")
        return value

    def integer(self, value: Any, key: str, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.error(key, f"must be an integer of at least {low}, not {value!r}")
        return value

    def hardware(self, name: str, key: str) -> None:
        from ..target import load

        try:
            load(name)
        except (ValueError, OSError) as err:
            raise self.error(key, str(err).splitlines()[0]) from None

    def operator(self, x: Any, key: str) -> OperatorItem:
        from .. import workloads

        if isinstance(x, str):
            op, _, index = x.partition(":")
            try:
                x = {"op": op, "index": int(index or 0)}
            except ValueError:
                raise self.error(key, f"{x!r}: write NAME or NAME:INDEX, e.g. C2D:1") from None
        if not isinstance(x, dict):
            raise self.error(key, "must be NAME:INDEX or a mapping with op (and index or shape, dtype, trials)")
        self.keys(x, {"op", "index", "shape", "dtype", "trials"}, key)
        op = self.string(x.get("op"), f"{key}.op")
        if op not in workloads.names():
            raise self.error(f"{key}.op", f"unknown operator {op!r}{_hint(op, workloads.names(), 'known')}")
        dtype = x.get("dtype", "float32")
        if dtype not in workloads.dtypes(op):
            raise self.error(f"{key}.dtype", f"{op} takes {', '.join(workloads.dtypes(op))}, not {dtype!r}")
        shape = x.get("shape")
        if shape is not None:
            if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
                raise self.error(f"{key}.shape", f"must be a list of positive integers, not {shape!r}")
            shape = tuple(shape)
        index = None if shape is not None else self.integer(x.get("index", 0), f"{key}.index", 0)
        trials = None if x.get("trials") is None else self.integer(x["trials"], f"{key}.trials", 1)
        item = OperatorItem(op, dtype, index, shape, trials)
        try:
            item.workload()
        except (ValueError, IndexError, KeyError, TypeError) as err:
            raise self.error(key, str(err).splitlines()[0]) from None
        return item

    def model(self, x: Any, key: str) -> ModelItem:
        from ..graph.models import MODELS

        if isinstance(x, str):
            x = {"model": x}
        if not isinstance(x, dict):
            raise self.error(key, "must be a model name or ONNX path, or a mapping with model")
        self.keys(x, {"model", "reduced", "input_shapes", "layout", "trials"}, key)
        name = self.string(x.get("model"), f"{key}.model")
        if name not in MODELS:
            p = Path(name) if Path(name).is_absolute() else self.path.parent / name
            if not p.exists():
                raise self.error(
                    f"{key}.model", f"{name!r} is neither a built-in model ({', '.join(MODELS)}) nor an ONNX file"
                )
            name = str(p.resolve())
        shapes = x.get("input_shapes") or {}
        if not isinstance(shapes, dict) or not all(
            isinstance(v, list) and all(isinstance(d, int) and d > 0 for d in v) for v in shapes.values()
        ):
            raise self.error(f"{key}.input_shapes", "must map input names to lists of positive integers")
        layout = x.get("layout", "NHWC")
        if layout not in ("NHWC", "NCHW"):
            raise self.error(f"{key}.layout", f"must be NHWC or NCHW, not {layout!r}")
        trials = None if x.get("trials") is None else self.integer(x["trials"], f"{key}.trials", 1)
        reduced = x.get("reduced", False)
        if not isinstance(reduced, bool):
            raise self.error(f"{key}.reduced", f"must be true or false, not {reduced!r}")
        return ModelItem(name, reduced, tuple((k, tuple(v)) for k, v in shapes.items()), layout, trials)

    def search(self, x: Any, key: str) -> SearchConfig:
        if not isinstance(x, dict):
            raise self.error(key, "must be a mapping of SearchConfig fields")
        self.keys(x, {f.name for f in fields(SearchConfig)}, key)
        try:
            return SearchConfig(**x)
        except (ValueError, TypeError) as err:
            raise self.error(key, str(err)) from None


# ------------------------------------------------------------------------------------------
# running


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def run_experiment(exp: Experiment, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Run (or resume) every cell of ``exp``; returns the result rows (``RESULT_COLUMNS``) and
    writes the tables after each cell."""
    from .measure.cluster import init_ray

    say = progress or (lambda text: None)
    exp.output.mkdir(parents=True, exist_ok=True)
    init_ray(exp.address)
    rows: list[dict[str, Any]] = []
    cells = exp.cells()
    for n, (item, hw, seed) in enumerate(cells):
        work = exp.output / "work" / _slug(f"{item.label}-{Path(hw).stem}-s{seed}")
        say(f"[{n + 1}/{len(cells)}] {item.label} on {hw}, seed {seed} ({work})")
        t0 = time.perf_counter()
        try:
            row = _run_cell(exp, item, hw, seed, work)
        except Exception as err:  # one cell's failure is its row; the others still run
            row = {"kind": _kind(item), "item": item.label, "hardware": hw, "seed": seed, "status": _short(err)}
        row.update(tuning_s=f"{time.perf_counter() - t0:.1f}", work_dir=os.path.relpath(work, exp.output))
        rows.append(row)
        say(f"    {row.get('status')}: best {row.get('best_ms') or 'n/a'} ms")
        write_results(exp, rows)
    return rows


def _kind(item: OperatorItem | ModelItem) -> str:
    return "operator" if isinstance(item, OperatorItem) else "model"


def _short(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"failed: {text[:300]}"


def _run_cell(exp: Experiment, item: OperatorItem | ModelItem, hw: str, seed: int, work: Path) -> dict[str, Any]:
    from .tuning.scheduler import tune_model
    from .tuning.tuner import tune

    trials = item.trials or exp.trials
    row: dict[str, Any] = {"kind": _kind(item), "item": item.label, "hardware": hw, "seed": seed}
    if isinstance(item, OperatorItem):
        result = tune(
            item.workload(), hw, trials, work, seed, address=exp.address, config=exp.search,
            allow_other_cpu=exp.allow_other_cpu,
        )  # fmt: skip
        row.update(
            trials=result.trials,
            best_ms=f"{result.latency * 1e3:.4g}",
            throughput=f"{result.throughput:.1f}",
            unit=result.unit,
            host=_host_cell(result.host),
            load=f"{os.getloadavg()[0]:.2f}",
            status="done" if result.trials >= trials else "design space exhausted",
        )
        return row
    from ..graph.models import load_model

    proto = load_model(item.model, reduced=item.reduced)
    model = tune_model(
        proto, hw, trials, work, strategy=exp.strategy, seed=seed, address=exp.address, config=exp.search,
        input_shapes=dict(item.input_shapes) or None, layout=item.layout, concurrent_tasks=exp.concurrent_tasks,
        allow_other_cpu=exp.allow_other_cpu,
    )  # fmt: skip
    est, measured = model.estimated_latency, model.model_latency
    row.update(
        trials=model.trials,
        best_ms="" if est is None else f"{est * 1e3:.4g}",
        unit="estimated ms",
        measured_model_ms="" if measured is None else f"{measured * 1e3:.4g}",
        host=_host_cell(model.host),
        load=f"{os.getloadavg()[0]:.2f}",
        status="done" if model.trials >= trials else "every task's design space exhausted",
    )
    return row


def _host_cell(host: HostConditions) -> str:
    """How busy the host was while a cell was tuned: the reference's median slowdown, and how many
    timings were disturbed (marked "busy: re-run" where the run's best cannot be trusted)."""
    cell = f"{host.median:.2f}x, {host.disturbed}/{host.timings} disturbed"
    return cell if host.trusted else cell + " (busy: re-run)"


def write_results(exp: Experiment, rows: list[dict[str, Any]]) -> list[Path]:
    """results.csv, results.md and results.png in the experiment's output dir."""
    out = exp.output
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, RESULT_COLUMNS, restval="")
        w.writeheader()
        w.writerows(rows)
    table = format_markdown_table([[r.get(c, "") for c in RESULT_COLUMNS] for r in rows], RESULT_COLUMNS)
    (out / "results.md").write_text(
        f"# {exp.name}\n\nCommand: `tensorsearch experiment {exp.path}`\n\n{table}\n\n"
        "`best_ms`: an operator's best latency; a model's estimated latency (sum over its tasks of "
        "weight x best), with `measured_model_ms` the model compiled with its best records and timed. "
        "Latencies are the fastest timed repeat. `host`: the reference kernel's median slowdown while the cell "
        "was tuned and how many timings were disturbed (search/measure/noise.py); `load`: the load average at its end.\n"
    )
    _plot(out / "results.png", exp.name, rows)
    return [out / "results.csv", out / "results.md", out / "results.png"]


def _plot(path: Path, title: str, rows: list[dict[str, Any]]) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = [
        (f"{r['item']} {Path(str(r['hardware'])).stem} s{r['seed']}", float(r["best_ms"]))
        for r in rows
        if r.get("best_ms")
    ]
    fig = Figure(figsize=(7, 0.9 + 0.35 * max(len(done), 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if done:
        labels, values = zip(*done, strict=True)
        ax.barh(range(len(values)), values, color="tab:blue")
        ax.set_yticks(range(len(values)), labels, fontsize=8)
        ax.invert_yaxis()
        if max(values) / max(min(values), 1e-9) > 50:
            ax.set_xscale("log")
        ax.set_xlabel("best latency, ms (models: estimated)")
    else:
        ax.text(0.5, 0.5, "no cell has a result yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
