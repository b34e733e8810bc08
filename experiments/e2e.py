"""Whole models tuned with a stated budget, beside onnxruntime (and torch where installed).

    python experiments/e2e.py                                   # the six models, 32 trials a task
    python experiments/e2e.py --models mobilenet_v2 --trials-per-task 64
    python experiments/e2e.py --models resnet50,bert_base --reduced --trials-per-task 8

For each model: import it, tune every task with :func:`tensorsearch.tune_model` (one budget,
``--trials-per-task`` x its tasks, spent by the gradient-based task scheduler; the per-task
table and curve land in the model's work dir), compile it with the best records, check it
against onnxruntime on seeded random inputs (as experiments/e2e_untuned.py does: the largest
error relative to the output's scale for float models, top-1 agreement for int8), and time both
in alternating blocks (experiments/e2e_untuned.py's ``_time``), the tuning's Ray session shut
down first (its idle processes share the two cores). With ``--torch-env DIR`` (a virtual
environment with torch and torchvision, e.g. the one ``experiments/torchvision_models.py --setup`` makes) the
torchvision models (ResNet-50, MobileNet-V2, ViT-B/16) are also timed in torch there (2
threads, ``inference_mode``, random weights): torch is never imported here.

Each model's work dir is ``<out>/work/<model>-<hardware>``: running the same command again
resumes every model where it stopped (a finished one only compiles and times again).

Targets on a 2-core machine: every float32 model at or below onnxruntime's latency
(onnxruntime measured there: ResNet-50 43 ms, MobileNet-V2 5.1 ms, ViT-B/16 217 ms), int8
ResNet-50 and BERT-base faster than onnxruntime's int8.

Writes e2e.csv, e2e.md (with each model's per-task table) and e2e.png to the out dir (default
results/e2e/, git-ignored; experiments/outputs.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import outputs
from e2e_untuned import _check, _ort, _time, ratio_cell, write_report

MODELS = ["resnet50", "mobilenet_v2", "bert_base", "vit_b_16", "resnet50_int8", "bert_base_int8"]
TORCHVISION = {"resnet50", "mobilenet_v2", "vit_b_16"}
FIELDS = [
    "model", "reduced", "hardware", "tasks", "trials", "tuning_s", "estimated_ms", "check", "ok",
    "ours_ms", "ort_ms", "ort_over_ours", "ratio_spread", "load", "torch_ms", "error",
]  # fmt: skip

TORCH_TIMER = """
import json, statistics, sys, time
import torch, torchvision
name, reduced, repeat = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
torch.set_num_threads(2)
torch.manual_seed(0)
model = getattr(torchvision.models, name)(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
with torch.inference_mode():
    model(x)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - t0)
print(json.dumps({"torch_ms": statistics.median(times) * 1e3, "version": torch.__version__}))
"""


def torch_ms(name: str, args) -> str:
    """torch's latency of the torchvision model ``name`` in the side environment, or why none."""
    if args.torch_env is None:
        return "not installed (--torch-env)"
    if name not in TORCHVISION or args.reduced:
        return "n/a (not a full-size torchvision model)"
    python = Path(args.torch_env) / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-c", TORCH_TIMER, name, "0", str(args.repeat)], capture_output=True, text=True, timeout=1800
    )
    if proc.returncode != 0:
        return "error: " + (proc.stderr.strip().splitlines() or ["torch failed"])[-1]
    return f"{json.loads(proc.stdout.strip().splitlines()[-1])['torch_ms']:.4g}"


def run_model(name: str, args, scratch: Path) -> tuple[dict, str]:
    """Tune, compile, check and time one model; the row and its per-task table (Markdown)."""
    import ray

    import tensorsearch as ts
    from tensorsearch.graph.models import load_model
    from tensorsearch.search.model import model_tasks

    proto = load_model(name, reduced=args.reduced)
    graph = ts.graph.from_onnx(proto)
    hw = ts.hardware.load(args.hardware)
    flush = "-flush" if args.cache_flush else ""  # records timed otherwise are not mixed in one work dir
    work_dir = scratch / "work" / f"{name}{'-reduced' if args.reduced else ''}-{hw.name}{flush}"
    tasks = len(model_tasks(graph)[2])
    trials = args.trials_per_task * tasks
    t0 = time.perf_counter()
    result = ts.tune_model(
        graph, hw, trials, work_dir, seed=args.seed, address=args.address, flush_cache=args.cache_flush
    )
    tuning_s = time.perf_counter() - t0
    ray.shutdown()
    exe = ts.compile_model(graph, hw, work_dir)
    sess = _ort(proto)
    check, ok = _check(name, proto, graph, exe, sess, args)
    ours, theirs, ratio, conditions = _time(exe, sess, proto, graph, args.repeat)
    row = {
        "model": name,
        "reduced": args.reduced,
        "hardware": hw.name,
        "tasks": tasks,
        "trials": result.trials,
        "tuning_s": round(tuning_s, 1),
        "estimated_ms": round(result.estimated_latency * 1e3, 4) if result.estimated_latency else "",
        "check": check,
        "ok": ok,
        "ours_ms": round(ours * 1e3, 4),
        "ort_ms": round(theirs * 1e3, 4),
        "ort_over_ours": round(ratio, 3),
        **conditions,
        "torch_ms": torch_ms(name, args),
        "error": "",
    }
    return row, (work_dir / "tasks.md").read_text()


def write(rows: list[dict], tables: dict[str, str], out: Path, cmd: str) -> list[str]:
    columns = [
        ("model", "l"), ("tasks", "r"), ("trials", "r"), ("tuning s", "r"), ("estimated ms", "r"), ("agreement", "l"),
        ("ours ms", "r"), ("onnxruntime ms", "r"), ("ort / ours", "r"), ("pairs' max / min", "r"), ("load", "r"),
        ("torch ms", "r"),
    ]  # fmt: skip

    def cells(r: dict) -> list:
        return [
            r["tasks"], r["trials"], r["tuning_s"], r["estimated_ms"], r["check"] + ("" if r["ok"] else " **FAILED**"),
            r["ours_ms"], r["ort_ms"], ratio_cell(r), r["ratio_spread"], r["load"], r["torch_ms"],
        ]  # fmt: skip

    more = []
    for name, table in tables.items():  # the work dir's tasks.md, its title a level down
        more += ["", f"## {name}: per task", "", table.strip().replace("# ", "### ", 1)]
    title = "Whole models, tuned, vs onnxruntime"
    return write_report(rows, out, "e2e", FIELDS, title, cmd, columns, cells, more)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    ap.add_argument("--reduced", action="store_true", help="the models' small versions")
    ap.add_argument("--hardware", default="host", help="descriptor (default host)")
    ap.add_argument("--trials-per-task", type=int, default=32, help="the budget: trials per task (default 32)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-flush", action="store_true", help="tune with every timed call after a cache flush")
    ap.add_argument("--address", help="a Ray cluster (default: RAY_ADDRESS, else a local one)")
    ap.add_argument(
        "--repeat", type=int, default=10, help="timed runs of each system in a block, at least (default 10)"
    )
    ap.add_argument("--agreement-inputs", type=int, default=100, help="random inputs for int8 top-1 agreement")
    ap.add_argument("--torch-env", metavar="DIR", help="a virtual environment with torch and torchvision")
    outputs.add_arguments(ap, "e2e")
    args = ap.parse_args()
    dest = outputs.outputs(args, "e2e")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    cmd = "python experiments/e2e.py" + "".join(f" {a}" for a in sys.argv[1:])
    rows: list[dict] = []
    tables: dict[str, str] = {}
    names: list[str] = []
    try:
        for name in models:
            t0 = time.perf_counter()
            try:
                row, tables[name] = run_model(name, args, dest.scratch)
            except Exception as err:  # one failing model must not lose the others
                traceback.print_exc()
                row = {"model": name, "reduced": args.reduced, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            names = write(rows, tables, dest.out, cmd)
            print(f"{name}: {row} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print(f"interrupted after {len(rows)} of {len(models)} models; run again to resume", file=sys.stderr)
    print((dest.out / "e2e.md").read_text() if rows else "no model finished")
    dest.wrote(names)


if __name__ == "__main__":
    main()
