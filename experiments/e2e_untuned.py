"""Whole models with default schedules (nothing tuned) beside onnxruntime: agreement and latency.

    python experiments/e2e_untuned.py                       # the seven built-in models, full size
    python experiments/e2e_untuned.py --models resnet50,bert_base --reduced --repeat 5

For each model: import, compile every task with its default schedule (``ts.compile_model``
without a work dir), run on seeded random inputs beside onnxruntime (CPU provider, its default
graph optimizations and threads) and compare: float outputs by the largest error relative to
the reference output's largest magnitude (must be <= 1e-3); int8 models by top-1 agreement of
their last output (ResNet's class scores, BERT's pooled output that a classifier reads) over
``--agreement-inputs`` random inputs (must be >= 99 %) and the largest difference. Beside it,
onnxruntime's agreement with itself with its graph optimizations off: the noise floor of a model
whose int8 rounding differences grow layer by layer (random-weight BERT: a rounding step apart in
one layer moves the pooled output's argmax). Then
both are timed in eight alternating pairs of blocks (a block at least ``--repeat`` runs and 0.3
s; runs interleaved one by one slowed both, see ``_time``), the median run of each; the ratio is
the median over the pairs of onnxruntime's latency over ours (above 1: we are faster). Our kernels here are *untuned* default schedules;
``tensorsearch tune``/the model tuner makes them fast. Weights are constants laid out at compile
time; see docs/models.md for how this differs from the operator benchmarks.

Writes e2e_untuned.csv, e2e_untuned.md and e2e_untuned.png to the out dir (default
results/e2e_untuned/, git-ignored; experiments/outputs.py).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import outputs

MODELS = ["resnet50", "mobilenet_v2", "bert_base", "bert_large", "vit_b_16", "resnet50_int8", "bert_base_int8"]
FIELDS = [
    "model",
    "reduced",
    "tasks",
    "kernels",
    "schedules",
    "compile_s",
    "check",
    "ok",
    "ours_ms",
    "ort_ms",
    "ort_over_ours",
    "ratio_spread",
    "load",
    "error",
]


def _ort(proto, optimize: bool = True, profile_prefix: str | None = None):
    """An onnxruntime CPU session of ``proto``; with ``profile_prefix``, its profiler on (the
    JSON file is written there by ``end_profiling()``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _top1(scores: np.ndarray) -> np.ndarray:
    return scores.reshape(len(scores), -1).argmax(1)


def _check(name: str, proto, graph, exe, sess, args) -> tuple[str, bool]:
    from tensorsearch.graph.models import random_inputs

    names = [v.name for v in graph.inputs]
    if name.endswith("_int8"):
        # top-1 of the last output: the classifier's scores, or the pooled output BERT's
        # classifier reads; onnxruntime beside itself (graph optimizations off) is the noise floor
        plain = _ort(proto, optimize=False)
        same = own = 0
        worst = 0.0
        for k in range(args.agreement_inputs):
            feeds = random_inputs(proto, seed=k)
            got = exe(**{n: feeds[n] for n in names})[-1]
            want, unopt = sess.run(None, feeds)[-1], plain.run(None, feeds)[-1]
            same += int(np.array_equal(_top1(got), _top1(want)))
            own += int(np.array_equal(_top1(unopt), _top1(want)))
            worst = max(worst, float(np.max(np.abs(got - want))) / (float(np.max(np.abs(want))) or 1.0))
        n = args.agreement_inputs
        return (
            f"top-1 agreement {100 * same / n:.0f}% of {n} (onnxruntime unoptimized: {100 * own / n:.0f}%), "
            f"max diff {worst:.1e} of the output scale",
            same / n >= 0.99,
        )
    feeds = random_inputs(proto, seed=0)
    got = exe(**{n: feeds[n] for n in names})
    want = sess.run(None, feeds)
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        if np.issubdtype(w.dtype, np.floating):
            worst = max(worst, float(np.max(np.abs(g - w))) / (float(np.max(np.abs(w))) or 1.0))
    return f"max error {worst:.1e} of the output scale", worst <= 1e-3


def _time(
    exe, sess, proto, graph, repeat: int, pairs: int = 8, block_s: float = 0.3
) -> tuple[float, float, float, dict]:
    """Ours and onnxruntime timed in ``pairs`` alternating pairs of blocks: each block a run not
    timed, then at least ``repeat`` timed runs and at least ``block_s`` seconds of them. Returns
    the median run of ours, of onnxruntime's, and the median over the pairs of onnxruntime's
    block median over ours: this shared machine flips between a fast and a slow state for
    seconds at a time (MobileNet-V2 alone: 3.8 then 6.5 ms a run), so a ratio is taken within a
    pair, under the same state, and not across the whole. Runs are not interleaved one by one:
    after a run each system's threads spin a while (onnxruntime's pool, libgomp's team), and on
    two cores the other system's next run shares them with those threads (ResNet-50, tuned: ours
    44 ms alone, 89 ms right after each onnxruntime run; onnxruntime 38 ms alone, 50 ms)."""
    from tensorsearch.graph.models import random_inputs

    feeds = random_inputs(proto, seed=0)
    exe.set_inputs(**{v.name: feeds[v.name] for v in graph.inputs})
    runs: dict[str, list[float]] = {"ours": [], "ort": []}
    ratios = []
    for _ in range(pairs):
        block = {}
        for name, run in (("ours", exe.run), ("ort", lambda: sess.run(None, feeds))):
            run()  # the other system's threads go quiet meanwhile
            times: list[float] = []
            start = time.perf_counter()
            while len(times) < repeat or time.perf_counter() - start < block_s:
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            runs[name] += times
            block[name] = statistics.median(times)
        ratios.append(block["ort"] / block["ours"])
    conditions = {"ratio_spread": round(max(ratios) / min(ratios), 3), "load": round(os.getloadavg()[0], 2)}
    return statistics.median(runs["ours"]), statistics.median(runs["ort"]), statistics.median(ratios), conditions


def _schedules(exe) -> str:
    """How many tasks got each kind of schedule: ``25 default, 3 unscheduled``."""
    kinds = [exe.sources[t.key] for t in exe.tasks]
    return ", ".join(f"{kinds.count(k)} {k}" for k in sorted(set(kinds)))


def run_model(name: str, args) -> dict:
    import tensorsearch as ts
    from tensorsearch.graph.models import load_model

    proto = load_model(name, reduced=args.reduced)
    graph = ts.graph.from_onnx(proto)
    exe = ts.compile_model(graph, "host")
    sess = _ort(proto)
    check, ok = _check(name, proto, graph, exe, sess, args)
    ours, theirs, ratio, conditions = _time(exe, sess, proto, graph, args.repeat)
    return {
        "model": name,
        "reduced": args.reduced,
        "tasks": len(exe.tasks),
        "kernels": len(exe.kernels),
        "schedules": _schedules(exe),
        "compile_s": round(exe.compile_seconds, 1),
        "check": check,
        "ok": ok,
        "ours_ms": round(ours * 1e3, 3),
        "ort_ms": round(theirs * 1e3, 3),
        "ort_over_ours": round(ratio, 3),
        **conditions,
        "error": "",
    }


def write(rows: list[dict], out: Path, cmd: str) -> list[str]:
    columns = [
        ("model", "l"), ("tasks (kernels)", "r"), ("schedules", "l"), ("compile s", "r"), ("agreement", "l"),
        ("ours ms", "r"), ("onnxruntime ms", "r"), ("ort / ours", "r"), ("pairs' max / min", "r"), ("load", "r"),
    ]  # fmt: skip

    def cells(r: dict) -> list:
        return [
            f"{r['tasks']} ({r['kernels']})", r["schedules"], r["compile_s"], r["check"] + ("" if r["ok"] else " **FAILED**"),
            r["ours_ms"], r["ort_ms"], ratio_cell(r), r["ratio_spread"], r["load"],
        ]  # fmt: skip

    title = "Whole models, default schedules (untuned), vs onnxruntime"
    return write_report(rows, out, "e2e_untuned", FIELDS, title, cmd, columns, cells)


DISTURBED_SPREAD = 1.25  # pairs whose ratios spread wider than this were timed on a disturbed host


def ratio_cell(r: dict) -> str:
    """The row's ratio, marked when its pairs disagreed by more than ``DISTURBED_SPREAD``."""
    disturbed = isinstance(r.get("ratio_spread"), float | int) and r["ratio_spread"] > DISTURBED_SPREAD
    return f"{r['ort_over_ours']}" + (" (disturbed: re-run)" if disturbed else "")


def write_report(
    rows: list[dict],
    out: Path,
    stem: str,
    fields: list[str],
    title: str,
    cmd: str,
    columns: list[tuple[str, str]],
    cells,
    more: list[str] = (),
) -> list[str]:
    """``stem``.csv (``fields``), ``stem``.md (a row per model: its name, then ``cells(row)`` under
    ``columns`` (name, "l" or "r"); a model that failed has its error under "agreement"; ``more``
    lines below) and ``stem``.png (:func:`ratio_chart`) in ``out``; returns the file names."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)
    names = [name for name, _ in columns]
    lines = [
        f"# {title}",
        "",
        f"`{cmd}`; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end.",
        "",
        "| " + " | ".join(names) + " |",
        "|" + "|".join("---:" if align == "r" else "---" for _, align in columns) + "|",
    ]
    for r in rows:
        model = f"{r['model']}{' (reduced)' if r['reduced'] else ''}"
        if r.get("error"):
            row = [model] + [f"error: {r['error']}" if n == "agreement" else "" for n in names[1:]]
        else:
            row = [model, *cells(r)]
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    (out / f"{stem}.md").write_text("\n".join([*lines, *more]) + "\n")
    good = [r for r in rows if not r.get("error")]
    ratio_chart(out / f"{stem}.png", good, title)
    return [f"{stem}.csv", f"{stem}.md", f"{stem}.png"]


def ratio_chart(path: Path, rows: list[dict], title: str) -> None:
    """A bar per model: onnxruntime's latency over ours (``ort_over_ours``), the line at 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar([r["model"] for r in rows], [r["ort_over_ours"] for r in rows])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("onnxruntime latency / ours")
    ax.set_title(title)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    ap.add_argument("--reduced", action="store_true", help="the models' small versions")
    ap.add_argument(
        "--repeat", type=int, default=10, help="timed runs of each system in a block, at least (default 10)"
    )
    ap.add_argument("--agreement-inputs", type=int, default=100, help="random inputs for int8 top-1 agreement")
    outputs.add_arguments(ap, "e2e_untuned")
    args = ap.parse_args()
    dest = outputs.outputs(args, "e2e_untuned")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    cmd = "python experiments/e2e_untuned.py" + "".join(f" {a}" for a in sys.argv[1:])
    rows: list[dict] = []
    try:
        for name in models:
            t0 = time.perf_counter()
            try:
                row = run_model(name, args)
            except Exception as err:  # one failing model must not lose the others
                traceback.print_exc()
                row = {"model": name, "reduced": args.reduced, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            names = write(rows, dest.out, cmd)
            print(f"{name}: {row} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print(f"interrupted after {len(rows)} of {len(models)} models", file=sys.stderr)
    print((dest.out / "e2e_untuned.md").read_text() if rows else "no model finished")
    dest.wrote(names if rows else [])


if __name__ == "__main__":
    main()
