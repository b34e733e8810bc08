"""Each kernel of a compiled model timed inside the model, beside its tuned latency and
onnxruntime's time for the same node: where a model loses to onnxruntime, kernel by kernel.

    python experiments/profile_model.py --model mobilenet_v2 --work-dir results/e2e/work/mobilenet_v2-x86-znver4
    python experiments/profile_model.py --model resnet50 --top 15   # default schedules (no work dir)

Our side: ``ts.compile_model`` with the work dir's best records, a few runs, then
``exe.profile()`` (each kernel's median seconds per call, the kernels called in model order).
"alone" is the task's best latency as the tuner timed it (tasks.csv of the work dir: the kernel
by itself, again and again, so its data stays in cache). onnxruntime's side: its own profiler
(``SessionOptions.enable_profiling``), each node's median kernel time, matched to our kernel by
an output name or a node name (onnxruntime renames the convolutions it moves to NCHWc after their
output, with ``_nchwc``). Nodes onnxruntime fused differently from us stay unmatched and are
listed apart. Rows are sorted by what the kernel loses to onnxruntime.

Writes profile_model.csv and profile_model.md to the out dir (default results/profile_model/,
git-ignored; experiments/outputs.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import outputs
from e2e_untuned import _ort

FIELDS = ["kernel", "output", "task", "ours_ms", "alone_ms", "ort_ms", "loss_ms"]


def _ort_node_ms(proto, feeds, runs: int) -> dict[str, float]:
    """onnxruntime's median milliseconds per node (its profiler's kernel time), by node name."""
    sess = _ort(proto, profile_prefix=str(Path(tempfile.mkdtemp(prefix="ort-profile-")) / "ort"))
    for _ in range(runs):
        sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    times: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1e3)
    skip = runs // 4  # the first runs warm up
    return {name: statistics.median(t[skip:] or t) for name, t in times.items()}


def _plain(name: str) -> str:
    return name.removesuffix("_nchwc").removesuffix("_nhwc")


def profile(args) -> tuple[list[dict], dict[str, float], str]:
    import tensorsearch as ts
    from tensorsearch.graph.models import load_model, random_inputs

    proto = load_model(args.model, reduced=args.reduced)
    graph = ts.graph.from_onnx(proto)
    exe = ts.compile_model(graph, args.hardware, args.work_dir)
    feeds = random_inputs(proto, seed=0)
    exe.set_inputs(**{v.name: feeds[v.name] for v in graph.inputs})
    for _ in range(5):
        exe.run()
    ours = exe.profile(repeat=args.repeat)
    alone: dict[str, float] = {}
    if args.work_dir is not None and (Path(args.work_dir) / "tasks.csv").exists():
        with open(Path(args.work_dir) / "tasks.csv") as f:
            alone = {r["key"]: float(r["best_latency_s"]) * 1e3 for r in csv.DictReader(f) if r["best_latency_s"]}
    theirs = _ort_node_ms(proto, feeds, args.repeat)
    by_plain = {_plain(n): n for n in theirs}
    used: set[str] = set()
    rows = []
    for kernel, seconds in ours:
        names = [_plain(o) for o in kernel.lowered.outputs] + [n.name for n in kernel.group.nodes]
        node = next((by_plain[n] for n in names if n in by_plain and by_plain[n] not in used), None)
        if node is not None:
            used.add(node)
        ort_ms = theirs[node] if node else None
        rows.append({
            "kernel": kernel.group.name,
            "output": kernel.lowered.outputs[-1],
            "task": kernel.task,
            "ours_ms": round(seconds * 1e3, 4),
            "alone_ms": next((round(v, 4) for k, v in alone.items() if kernel.task.startswith(k)), ""),
            "ort_ms": round(ort_ms, 4) if ort_ms is not None else "",
            "loss_ms": round(seconds * 1e3 - ort_ms, 4) if ort_ms is not None else "",
        })  # fmt: skip
    rows.sort(key=lambda r: -(r["loss_ms"] if r["loss_ms"] != "" else -1e9))
    unmatched = {n: t for n, t in theirs.items() if n not in used}
    source = f"tuned records of {args.work_dir}" if args.work_dir else "default schedules"
    return rows, unmatched, source


def write(rows: list[dict], unmatched: dict[str, float], out: Path, cmd: str, source: str, top: int) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "profile_model.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    total = sum(r["ours_ms"] for r in rows)
    matched = [r for r in rows if r["ort_ms"] != ""]
    lines = [
        "# Kernels inside the model, beside onnxruntime's nodes",
        "",
        f"`{cmd}`; {source}.",
        "",
        f"Ours: {len(rows)} kernels, {total:.3f} ms in all; onnxruntime: "
        f"{sum(r['ort_ms'] for r in matched) + sum(unmatched.values()):.3f} ms over its nodes, "
        f"{sum(r['ort_ms'] for r in matched):.3f} ms of it in the {len(matched)} nodes matched to our kernels.",
        "",
        "| kernel | output | inside the model ms | alone (tuned) ms | onnxruntime ms | loss ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows[:top]:
        lines.append(
            f"| {r['kernel']} | `{r['output']}` | {r['ours_ms']} | {r['alone_ms'] or '-'} | {r['ort_ms'] or '-'} | {r['loss_ms'] or '-'} |"
        )
    if unmatched:
        lines += ["", "onnxruntime nodes with no kernel of the same output or name (fused otherwise): "]
        lines.append(", ".join(f"`{n}` {t:.3f} ms" for n, t in sorted(unmatched.items(), key=lambda kv: -kv[1])))
    (out / "profile_model.md").write_text("\n".join(lines) + "\n")
    return ["profile_model.csv", "profile_model.md"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v2", help="a built-in model (default mobilenet_v2)")
    ap.add_argument("--reduced", action="store_true", help="the model's small version")
    ap.add_argument("--work-dir", help="a tuned work dir (its best records); default schedules without")
    ap.add_argument("--hardware", default="host", help="descriptor (default host)")
    ap.add_argument("--repeat", type=int, default=30, help="runs profiled on each side (default 30)")
    ap.add_argument("--top", type=int, default=25, help="kernels in the Markdown table (default 25)")
    outputs.add_arguments(ap, "profile_model")
    args = ap.parse_args()
    dest = outputs.outputs(args, "profile_model")
    cmd = "python experiments/profile_model.py" + "".join(f" {a}" for a in sys.argv[1:])
    try:
        rows, unmatched, source = profile(args)
    except ValueError as err:  # the library's errors (unknown model, no database there, ...) are one line
        ap.exit(2, f"profile_model.py: error: {err}\n")
    names = write(rows, unmatched, dest.out, cmd, source, args.top)
    print((dest.out / "profile_model.md").read_text())
    dest.wrote(names)


if __name__ == "__main__":
    main()
