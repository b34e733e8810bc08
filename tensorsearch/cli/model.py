"""``tensorsearch model tasks|tune|run MODEL``.

MODEL is a built-in name (``resnet50``, ``bert_base``, ... ``--reduced`` for the small
versions) or an ONNX file. ``tasks`` lists the fused kernels deduplicated into tasks;
``tune`` spends ``--trials`` over all of them (:func:`tensorsearch.search.tuning.scheduler.tune_model`)
and prints the per-task table and the tuned model's latency beside onnxruntime's; ``run``
compiles every task (its best record in ``--work-dir``, else a default schedule), runs the model
on seeded random inputs beside onnxruntime and prints both outputs' agreement and both latencies.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import numpy as np

from .common import (
    add_address_argument,
    add_allow_other_cpu_argument,
    argument,
    check_work_dir,
    positive_int,
    speed_ratio,
)

FLOAT_TOLERANCE = 1e-3  # of the reference output's largest magnitude


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("model", help="whole ONNX models: list their tasks, compile and run them")
    msub = p.add_subparsers(dest="model_command", required=True)
    for name, helptext, fn in [
        ("tasks", "list a model's fused kernels, deduplicated into weighted tasks", _cmd_tasks),
        ("tune", "tune every task of a model with one trial budget (uses Ray)", _cmd_tune),
        ("run", "compile a model, run it beside onnxruntime, compare outputs and latency", _cmd_run),
    ]:
        q = msub.add_parser(name, help=helptext)
        q.add_argument(
            "model", metavar="MODEL", help="a built-in model name (resnet50, bert_base, ...) or an ONNX file"
        )
        q.add_argument(
            "--reduced", action="store_true", help="a built-in model's small version (fewer layers, channels)"
        )
        q.add_argument(
            "--input-shape",
            metavar="NAME=D,D,...",
            action="append",
            default=[],
            help="bind an input's symbolic shape (or NAME=D for one symbolic dimension); repeatable",
        )
        q.add_argument("--layout", choices=("NHWC", "NCHW"), default="NHWC", help="layout of convolutions inside")
        q.set_defaults(fn=fn)
        if name == "tune":
            _add_tune_arguments(q)
        if name == "run":
            q.add_argument("--hardware", default="host", help="hardware descriptor name or path (default host)")
            q.add_argument("--work-dir", help="a tuning work dir whose best records compile the tasks they cover")
            q.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
            q.add_argument("--repeat", type=int, default=10, help="timed runs of each (default 10)")
            q.add_argument(
                "--profile", action="store_true", help="also time each kernel; print the tasks that take longest"
            )


def _add_tune_arguments(q: argparse.ArgumentParser) -> None:
    q.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. host or x86-znver4")
    q.add_argument("--trials", type=positive_int, required=True, help="candidates to measure over all tasks")
    q.add_argument(
        "--work-dir",
        help="directory for the database, logs, task table and curve; reusing one resumes its run "
        "(default: runs/model-MODEL-HARDWARE)",
    )
    q.add_argument(
        "--strategy",
        choices=("gradient", "round-robin"),  # search.scheduler.STRATEGIES (the parser imports no search code)
        default="gradient",
        help="after each task's first round: the task with the largest expected gain (gradient, default) or "
        "round-robin",
    )
    q.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    q.add_argument(
        "--cache-flush",
        action="store_true",
        help="time each call after flushing the caches, as a kernel runs inside the model (cold weights)",
    )
    q.add_argument(
        "--concurrent-tasks",
        type=positive_int,
        default=1,
        metavar="K",
        help="run the rounds of K tasks at once, all timed through the same runners (default 1; on a "
        "cluster, label the nodes that time tensorsearch.role=timing)",
    )
    add_address_argument(q)
    add_allow_other_cpu_argument(q)


def _input_shapes(specs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in specs:
        name, sep, dims = spec.partition("=")
        try:
            values = [int(d) for d in dims.split(",")] if sep else []
        except ValueError:
            values = []
        if not name or not values or any(v <= 0 for v in values):
            raise ValueError(f"--input-shape {spec!r}: expected NAME=D,D,... with positive integers")
        out[name] = values[0] if len(values) == 1 else tuple(values)
    return out


def _load(args: argparse.Namespace):  # -> (onnx.ModelProto, Graph)
    from ..graph.models import load_model
    from ..graph.onnx_import import from_onnx

    proto = load_model(args.model, reduced=args.reduced)
    return proto, from_onnx(proto, _input_shapes(args.input_shape))


def _cmd_tasks(args: argparse.Namespace) -> int:
    from ..search.model import model_tasks

    _, graph = _load(args)
    _, kernels, tasks = model_tasks(graph, layout=args.layout)
    total = sum(t.total_flops for t in tasks) or 1
    width = max(len(t.name) for t in tasks)
    print(f"{'#':>3}  {'task':<{width}}  {'weight':>6}  {'MFLOPs/call':>11}  {'share':>6}  {'key':<16}  shapes")
    for n, t in enumerate(tasks):
        print(
            f"{n:>3}  {t.name:<{width}}  {t.weight:>6}  {t.flops / 1e6:>11.2f}  "
            f"{100 * t.total_flops / total:>5.1f}%  {t.key:<16}  {task_shapes(t.func)}"
        )
    macs = sum(t.weight * t.macs for t in tasks)
    print(
        f"{len(tasks)} tasks, {len(kernels)} kernels; {total / 1e9:.3f} GFLOPs, {macs / 1e9:.3f} GMACs per run",
        file=sys.stderr,
    )
    return 0


def task_shapes(func: Any) -> str:
    """A task's parameters, shape by shape with each dtype once: ``1x56x56x64 3x3x64x64 64 ->
    1x56x56x64 float32`` (the buffers the kernel writes after the arrow)."""
    from ..ir import BufferStore, post_order_visit

    written: set[Any] = set()

    def visit(n: object) -> None:
        if isinstance(n, BufferStore):
            written.add(n.buffer)

    post_order_visit(func.body, visit)
    bufs = list(func.buffers)
    dtypes = {str(b.dtype) for b in bufs}

    def one(b: Any) -> str:
        dims = "x".join(str(d) for d in b.shape) or "scalar"
        return dims if len(dtypes) == 1 else f"{dims} {b.dtype}"

    ins = [one(b) for b in bufs if b not in written]
    outs = [one(b) for b in bufs if b in written]
    text = " ".join(ins) + " -> " + " ".join(outs)
    return f"{text} {next(iter(dtypes))}" if len(dtypes) == 1 else text


def _cmd_tune(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..search.tuning.scheduler import tune_model
    from ..search.tuning.workdir import WorkDirBusy
    from ..target import load

    hw = argument("--hardware", load, args.hardware)
    proto, graph = _load(args)
    slug = Path(str(args.model)).stem + ("-reduced" if args.reduced else "")
    work_dir = Path(args.work_dir or Path("runs") / f"model-{slug}-{hw.name}")
    argument("--work-dir", check_work_dir, work_dir)
    print(
        f"tensorsearch model tune: {args.model} on {hw.name}, {args.trials} trials, work dir {work_dir}",
        file=sys.stderr,
    )

    def progress(p: Any) -> None:
        estimate = "n/a" if p.estimated_latency is None else f"{p.estimated_latency * 1e3:.4g} ms"
        if p.stage is not None:
            print(f"  {p.stage}", file=sys.stderr, flush=True)
        else:
            best = "n/a" if p.task_best is None else f"{p.task_best * 1e3:.4g} ms"
            failed = f"; {p.failed} failed, the first: {p.first_error[:160]}" if p.failed else ""
            print(
                f"  round {p.round}: task {p.task} {p.task_name}, best {best}; model estimate {estimate}; "
                f"{p.trials_done}/{p.trials_total} trials, {p.elapsed_s:.0f} s{failed}",
                file=sys.stderr,
                flush=True,
            )

    try:
        result = tune_model(
            graph, hw, args.trials, work_dir, strategy=args.strategy, seed=args.seed, address=args.address,
            progress=progress, layout=args.layout, flush_cache=args.cache_flush, concurrent_tasks=args.concurrent_tasks,
            allow_other_cpu=args.allow_other_cpu,
        )  # fmt: skip
    except WorkDirBusy as busy:
        print(f"tensorsearch model tune: error: {busy.message('--work-dir')}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted: every measured record is kept in {work_dir / 'database'}; run the same command again to "
            "resume",
            file=sys.stderr,
        )
        return 130
    print(result.table())
    if result.model_latency is not None:
        feeds = _random_feeds(proto, graph, args.seed)
        theirs = statistics.median(_time_ort(_ort_session(proto), feeds, 10))
        ours = result.model_latency
        print(f"onnxruntime latency: {theirs * 1e3:.4g} ms (tensorsearch is {speed_ratio(ours, theirs)})")
    files = ", ".join(str(work_dir / f) for f in ("tasks.md", "tasks.csv", "model_curve.png", "logs"))
    print(f"files: {files}", file=sys.stderr)
    return 0


def _random_feeds(proto: Any, graph: Any, seed: int) -> dict[str, np.ndarray]:
    """Seeded random inputs of the model, at the shapes --input-shape bound."""
    from ..graph.models import random_inputs

    return random_inputs(_bound(proto, graph), seed=seed)


def _cmd_run(args: argparse.Namespace) -> int:
    from ..search.model import compile_model
    from ..target import load

    proto, graph = _load(args)
    hw = load(args.hardware)
    if not hw.runs_here:
        raise ValueError(f"--hardware {hw.name}: this machine cannot run code built for it (run needs the host)")

    tty = sys.stderr.isatty()

    def progress(done: int, total: int, task: Any, source: str) -> None:
        if tty:  # one line, rewritten; a log gets the summary below only
            print(
                f"\r  compiling task {done}/{total} ({task.name}: {source})\033[K", end="", file=sys.stderr, flush=True
            )

    print(f"tensorsearch model run: {args.model} on {hw.name}", file=sys.stderr)
    exe = compile_model(graph, hw, args.work_dir, layout=args.layout, progress=progress)
    if tty:
        print("\r\033[K", end="", file=sys.stderr, flush=True)  # the tasks line below says what was compiled
    feeds = _random_feeds(proto, graph, args.seed)
    got = exe(**{v.name: feeds[v.name] for v in graph.inputs})
    sess = _ort_session(proto)
    want = sess.run(None, feeds)
    ok = _report_agreement(graph, got, want)
    ours = exe.time(repeat=args.repeat, **{v.name: feeds[v.name] for v in graph.inputs})
    theirs = _time_ort(sess, feeds, args.repeat)
    counts: dict[str, int] = {}
    for s in exe.sources.values():
        counts[s] = counts.get(s, 0) + 1
    kinds = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"  tasks       {len(exe.tasks)} ({kinds}), compiled in {exe.compile_seconds:.1f} s")
    a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    print(f"  latency     tensorsearch {a:.3f} ms   onnxruntime {b:.3f} ms   ({speed_ratio(a, b)})")
    if args.profile:
        _print_profile(exe)
    return 0 if ok else 1


def _print_profile(exe: Any) -> None:
    per_task: dict[str, float] = {}
    for kernel, seconds in exe.profile():
        per_task[kernel.task] = per_task.get(kernel.task, 0.0) + seconds
    total = sum(per_task.values()) or 1.0
    names = {t.key: t for t in exe.tasks}
    print("  profile     task (weight): ms per run over all its kernels, share, source")
    for key, seconds in sorted(per_task.items(), key=lambda kv: -kv[1])[:10]:
        t = names[key]
        print(
            f"              {t.name} ({t.weight}): {seconds * 1e3:.3f} ms, {100 * seconds / total:.1f}%, "
            f"{exe.sources[key]}"
        )


def _bound(proto: Any, graph: Any) -> Any:
    """``proto`` with its inputs' symbolic dimensions set to the graph's (what --input-shape bound)."""
    bound = type(proto)()
    bound.CopyFrom(proto)
    shapes = {v.name: v.shape for v in graph.inputs}
    for vi in bound.graph.input:
        if vi.name in shapes:
            for d, n in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=False):
                d.dim_value = n
    return bound


def _ort_session(proto: Any) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _time_ort(sess: Any, feeds: dict[str, np.ndarray], repeat: int) -> list[float]:
    sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return times


_QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "ConvInteger", "MatMulInteger"})


def _report_agreement(graph: Any, got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    """Print how each output compares; a float output within FLOAT_TOLERANCE of its scale, or for
    an int8 model (a rounding step apart from onnxruntime changes later steps) the same top-1
    class where the output is one row of scores."""
    ok = True
    quantized = any(op in _QUANTIZED_OPS or op.startswith("QLinear") for op in graph.op_counts())
    for v, g, w in zip(graph.outputs, got, want, strict=True):
        if np.issubdtype(w.dtype, np.floating):
            scale = float(np.max(np.abs(w))) or 1.0
            err = float(np.max(np.abs(g.astype(np.float64) - w))) / scale
            same = bool((g.argmax(1) == w.argmax(1)).all()) if w.ndim == 2 and w.shape[1] > 1 else None
            top1 = "" if same is None else f", top-1 {'same' if same else 'DIFFERS'}"
            if quantized:
                good = same is not False
                verdict = "int8 model: compared by top-1" if same is not None else "int8 model: not compared"
            else:
                good = err <= FLOAT_TOLERANCE
                verdict = "ok" if good else "MISMATCH"
            print(f"  output      {v.name}: max error {err:.1e} of the output's scale ({verdict}{top1})")
        else:
            diff = int(np.count_nonzero(g != w))
            good = diff == 0
            print(f"  output      {v.name}: {'bit-exact' if good else f'{diff} of {w.size} elements differ'}")
        ok = ok and good
    return ok
