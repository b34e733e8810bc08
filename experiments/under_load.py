"""A model's latency beside other inference jobs, ours against onnxruntime's, in one run.

    python experiments/under_load.py                               # MobileNet-V2 beside ResNet-50 loops
    python experiments/under_load.py --model efficientnet_b0.onnx --loads 1,2 --seconds 6

The model (a built-in name or an ONNX file; default schedules, nothing tuned) and onnxruntime's
session of it (CPU provider, 2 intra-op threads) are timed quietly, then beside ``k`` of our
ResNet-50 inference loops and ``k`` of onnxruntime's (each a process running the model over and
over, 2 threads each) for each ``k`` of ``--loads``. Ours and onnxruntime's are timed in
alternating blocks (``--pairs`` pairs, each block at least ``--seconds / (2 * pairs)`` s), the
median run of each; a system's *slowdown* is its loaded median over its quiet one, and the row's
``ours / ort`` is our slowdown over onnxruntime's (at most 1: we hold up as well as onnxruntime).
Each row records the load average and the CPU; the quiet rows say how busy the host was before
any load was started.

Writes under_load.csv and under_load.md to the out dir (default results/under_load/, git-ignored;
experiments/outputs.py). ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import bench_env

bench_env.reexec_without_openblas_overrides()

import argparse  # noqa: E402
import csv  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import outputs  # noqa: E402

FIELDS = ["model", "load", "ours_ms", "ort_ms", "ours_slowdown", "ort_slowdown", "ours_over_ort", "loadavg", "cpu"]
ORT_THREADS = 2


def _proto(model: str):
    from tensorsearch.graph.models import load_model

    return load_model(model)


def _session(proto):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = ORT_THREADS
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _ours(proto):
    """Our compiled model with its inputs set, ready to ``run()``."""
    import tensorsearch as ts
    from tensorsearch.graph.models import random_inputs

    graph = ts.graph.from_onnx(proto)
    exe = ts.compile_model(graph, "host")
    feeds = random_inputs(proto, seed=0)
    exe.set_inputs(**{v.name: feeds[v.name] for v in graph.inputs})
    return exe


def _runner(system: str, proto):
    """A function running one inference of ``proto`` on ``system`` ("ours" or "ort")."""
    if system == "ours":
        return _ours(proto).run
    from tensorsearch.graph.models import random_inputs

    sess, feeds = _session(proto), random_inputs(proto, seed=0)
    return lambda: sess.run(None, feeds)


def load_loop(system: str, model: str) -> None:
    """A background load: run ``model`` on ``system`` until killed; prints "ready" after the first run."""
    run = _runner(system, _proto(model))
    run()
    print("ready", flush=True)
    while True:
        run()


def _start_loads(k: int, model: str) -> list[subprocess.Popen]:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--load-loop", system, "--load-model", model],
            stdout=subprocess.PIPE,
            text=True,
        )
        for system in ("ours", "ort")
        for _ in range(k)
    ]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            _stop(procs)
            raise RuntimeError(f"a background {model} loop failed to start (exit code {p.poll()})")
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def _time_pair(runs: dict, pairs: int, block_s: float) -> dict[str, float]:
    """The median run of each system over ``pairs`` alternating blocks."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(pairs):
        for name, run in runs.items():
            run()
            start = time.perf_counter()
            while time.perf_counter() - start < block_s:
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def _cpu() -> str:
    """This machine's CPU, as a tuning record names it (``tensorsearch.target.host_identity``)."""
    from tensorsearch.target.hardware import host_identity

    return host_identity().describe()


def measure(args) -> list[dict]:
    proto = _proto(args.model)
    runs = {"ours": _runner("ours", proto), "ort": _runner("ort", proto)}
    block_s = args.seconds / (2 * args.pairs)
    name = Path(args.model).stem
    rows = []
    quiet = _time_pair(runs, args.pairs, block_s)
    rows.append(_row(name, "quiet", quiet, quiet))
    print(_line(rows[-1]), flush=True)
    for k in args.loads:
        procs = _start_loads(k, args.load_model)
        try:
            time.sleep(1.0)  # the loads reach their steady state
            loaded = _time_pair(runs, args.pairs, block_s)
        finally:
            _stop(procs)
        rows.append(_row(name, f"{k} ours + {k} onnxruntime {args.load_model}", loaded, quiet))
        print(_line(rows[-1]), flush=True)
        time.sleep(1.0)
    return rows


def _row(model: str, load: str, t: dict[str, float], quiet: dict[str, float]) -> dict:
    ours, ort = t["ours"] / quiet["ours"], t["ort"] / quiet["ort"]
    return {
        "model": model,
        "load": load,
        "ours_ms": round(t["ours"] * 1e3, 3),
        "ort_ms": round(t["ort"] * 1e3, 3),
        "ours_slowdown": round(ours, 2),
        "ort_slowdown": round(ort, 2),
        "ours_over_ort": round(ours / ort, 2),
        "loadavg": round(os.getloadavg()[0], 2),
        "cpu": _cpu(),
    }


def _line(r: dict) -> str:
    return (
        f"{r['model']:>16} {r['load']:>34}: ours {r['ours_ms']:9.3f} ms (x{r['ours_slowdown']:.2f}), "
        f"onnxruntime {r['ort_ms']:9.3f} ms (x{r['ort_slowdown']:.2f}), ours/ort {r['ours_over_ort']:.2f}, "
        f"load average {r['loadavg']}"
    )


def write(rows: list[dict], out: Path, cmd: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "under_load.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    lines = [
        "# A model beside other inference jobs, ours against onnxruntime",
        "",
        f"`{cmd}`; {rows[0]['cpu']}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}. "
        f"Default schedules (untuned); onnxruntime with {ORT_THREADS} intra-op threads. Slowdown: the loaded "
        "median run over the quiet one; ours/ort: our slowdown over onnxruntime's (at most 1: we hold up as well).",
        "",
        "| model | beside | ours ms | onnxruntime ms | our slowdown | onnxruntime's | ours / ort | load average |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['load']} | {r['ours_ms']} | {r['ort_ms']} | {r['ours_slowdown']} | "
            f"{r['ort_slowdown']} | {r['ours_over_ort']} | {r['loadavg']} |"
        )
    (out / "under_load.md").write_text("\n".join(lines) + "\n")
    return ["under_load.csv", "under_load.md"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mobilenet_v2", help="a built-in model name or an ONNX file")
    p.add_argument("--load-model", default="resnet50", help="what the background loops run (default resnet50)")
    p.add_argument("--loads", default="1,2", help="background loops of each system, comma-separated (default 1,2)")
    p.add_argument("--seconds", type=float, default=8.0, help="timing seconds per row (default 8)")
    p.add_argument("--pairs", type=int, default=4, help="alternating pairs of blocks per row (default 4)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--load-loop", choices=["ours", "ort"], help=argparse.SUPPRESS)
    outputs.add_arguments(p, "under_load")
    args = p.parse_args()
    if args.load_loop:
        load_loop(args.load_loop, args.load_model)
        return
    out = outputs.outputs(args, "under_load")
    args.loads = [int(k) for k in args.loads.split(",") if k.strip()]
    np.random.seed(0)
    try:
        rows = measure(args)
    except Exception as err:
        if args.debug:
            traceback.print_exc()
        sys.exit(f"under_load.py: error: {type(err).__name__}: {err}")
    out.wrote(write(rows, out.out, "python experiments/under_load.py " + " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()
