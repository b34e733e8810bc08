"""Benchmark (not a test): auto-tune the paper's operators with ``tensorsearch.tune`` (int8 VNNI and float32).

Run from the repository root:

    python experiments/tune_ops.py [--trials 256] [--ops C1D,C2D,GMM:3@256,...] [--dtypes int8,float32]
                                   [--out DIR | --update-tracked] [--work-dir DIR] [--tvm-python PATH]
                                   [--hardware NAME [--allow-other-cpu]] [--weights-ahead]

For every operator (``NAME`` is its first table shape, ``NAME:I`` shape ``I``; the default list is
the paper's C1D C2D C3D DEP DIL GMM GRP T2D at shape 0 plus ``GMM:3``, the 1024^3 GEMM of the
int8 targets; ``NAME:I@T`` tunes that one for ``T`` trials) and every dtype, it tunes the
workload on ``hardware.load("host")`` (or ``--hardware NAME``, a descriptor this machine is, or runs with ``--allow-other-cpu``) for ``--trials`` trials, checks the best module against numpy on fresh random inputs, then re-times
it over ``--rounds`` rounds interleaved with the references measured in the same run:

* **float32: numpy** -- the workload's numpy reference (``tensorsearch.workloads.reference``)
  run in float32 on the same inputs (the reference widens to float64 for accuracy; here that
  widening is switched off, so GMM is OpenBLAS ``sgemm`` and a convolution is numpy's
  per-kernel-tap matmuls in float32), with the same thread count (``threadpoolctl``).
* **int8: the VNNI peak** -- ``Peak`` from ``bench_vnni_gemm.py``: a register-only loop of
  independent ``vpdpbusd`` accumulations (128 ops each), run at once on ``--threads`` Python
  threads (ctypes releases the GIL), their GOPS summed: the machine's peak for that many cores.
  On a host whose descriptor offers AMX (x86-sapphirerapids) the int8 design space uses the AMX
  unit, and the peak is the same kind of loop of ``tdpbusd`` on the eight tile registers (four
  accumulators, 32768 ops each).
* **float32 also: the FMA peak** (x86 hosts) -- the same loop of vector ``fma`` on the
  descriptor's ``vector_bits`` (16 floats on AVX-512, 32 flops each): the vector units' peak,
  against which operators no dot-product unit fits (DEP) are read.

``--weights-ahead``: an int8 operator's weights (its second parameter) are constants packed once,
ahead, as TVM's ``RewriteLayout`` and our models treat them: the workload is tuned with them
marked ``layout_free`` (the tuner times the kernel without the stages that only re-lay them) and
re-timed the same way, its main part on weights the prepack laid out once
(``TaskProgram.build``). By default the copy into the design space's layout is part of every
timed call (docs/search.md, the plain-layout rule). The ``weights`` column says which.

Every timed sample of our module (three repeats) is paired with a reference sample taken just
before it; a ratio is the median over the pairs. The tuner's reference kernel
(``tensorsearch.search.measure.noise``) is timed before and after each round: a round it says the host
disturbed (over 1.25x its quiet time) is taken again, up to ``--retakes`` times, and the least
disturbed attempt counts; ``host at re-timing`` gives the median disturbance and the rounds still
disturbed, and says "busy host: re-run" when most were. Against numpy a sample of ours is its repeats'
median; against a peak, whose sample is the best of three, it is its best repeat: the same
statistic on both sides. ``tuned`` is the throughput the tuner itself measured. Where
``--tvm-python`` names a Python with ``apache-tvm``, the TVM column notes it (the MetaSchedule
comparison itself is not automated here); otherwise it reads ``n/a (apache-tvm not installed)``.

Writes ``tune_ops.csv``, ``tune_ops.md`` and ``tune_ops.png`` (every run's tuning curve as a
fraction of its final best) under ``--out`` (default ``results/tune_ops/``, git-ignored;
``--update-tracked`` writes them into the tracked ``experiments/results/``, see
``experiments/outputs.py``), rewritten after every run so an interrupted benchmark keeps what it
finished. Each run's database, curve and best trace stay in ``--work-dir/NAME_I_DTYPE`` (by
default a fresh ``work-YYYYmmdd-HHMMSS/`` under the out dir, under ``results/tune_ops/`` with
``--update-tracked``; a given work dir that exists resumes from its records, so its trial count
and wall time are those of the resumed run).

The script re-executes itself without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE``; it leaves
libgomp's wait policy alone (``OMP_WAIT_POLICY=passive``, which earlier versions set, doubled the
latency of sub-millisecond kernels: every parallel region woke sleeping threads).
"""

from __future__ import annotations

import os
import sys

from bench_env import reexec_without_openblas_overrides, reference_clock, settle

reexec_without_openblas_overrides()

import argparse  # noqa: E402
import csv  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402
import outputs  # noqa: E402

from tensorsearch.search.measure.noise import DISTURBED  # noqa: E402

HERE = Path(__file__).resolve().parent
OPS = ("C1D", "C2D", "C3D", "DEP", "DIL", "GMM", "GRP", "T2D", "GMM:3")
DTYPES = ("int8", "float32")
TVM_NA = "n/a (apache-tvm not installed)"


# ---------------------------------------------------------------- references


def numpy_float32(wl, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The workload's numpy reference computed in float32 (its float64 widening switched off)."""
    from tensorsearch.workloads import reference

    wide = reference._wide

    def keep_float(x: np.ndarray) -> np.ndarray:
        return wide(x) if np.issubdtype(x.dtype, np.integer) else x

    with mock.patch.object(reference, "_wide", keep_float):
        return wl.reference(*inputs)


def time_call(fn, min_seconds: float) -> float:
    """Seconds per call of ``fn()``: calls back to back until ``min_seconds`` have passed."""
    fn()  # warm up
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return dt / calls


class MachinePeak:
    """Peak G(FL)OPS of ``threads`` cores: ``bench_vnni_gemm.Peak`` (``op``: vpdpbusd, or fma of
    ``lanes`` floats) run on that many threads at once."""

    def __init__(self, threads: int, iters: int, op: str = "vpdpbusd", lanes: int = 16):
        sys.path.insert(0, str(HERE))
        from bench_vnni_gemm import Peak

        self.threads, self.iters = threads, iters
        candidates = [Peak(4, op)] if op == "tdpbusd" else [Peak(12, op, lanes), Peak(24, op, lanes)]
        # the faster accumulator count on this CPU, chosen once
        self.peak = max(candidates, key=lambda p: max(p.time(max(1, int(iters / p.scale)), 3)))
        self.pool = ThreadPoolExecutor(threads)

    def sample(self, tries: int = 3) -> float:
        """The best of ``tries`` samples, each the threads' summed G(FL)OPS while they run at once.

        A peak is an upper bound that noise only lowers: on this shared machine one sample in
        three or four read 510-580 GOPS against 920-935 for the others (another process had one
        of the two cores during the sample), which made `ours / peak` read above 1."""
        n = max(1, int(self.iters / self.peak.scale))
        return max(sum(self.pool.map(lambda _: self.peak.time(n, 1)[0], range(self.threads))) for _ in range(tries))


def tvm_note(tvm_python: str | None) -> str:
    """What the TVM column says: whether ``tvm_python`` can import apache-tvm."""
    if not tvm_python:
        return TVM_NA
    try:
        out = subprocess.run(
            [tvm_python, "-c", "import tvm; print(tvm.__version__)"], capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return TVM_NA
    if out.returncode != 0:
        return TVM_NA
    return f"apache-tvm {out.stdout.strip()} in {tvm_python} (comparison not automated)"


# ---------------------------------------------------------------- one run


def parse_op(text: str) -> tuple[str, int, int | None]:
    """``NAME``, ``NAME:INDEX`` or either with ``@TRIALS``: (name, index, trials or None)."""
    spec, _, trials = text.partition("@")
    name, _, index = spec.partition(":")
    try:
        return name, int(index) if index else 0, int(trials) if trials else None
    except ValueError:
        raise SystemExit(f"--ops: {text!r} is not NAME, NAME:INDEX or either with @TRIALS") from None


def tune_one(
    name: str, index: int, trials: int, dtype: str, hw, args, work_root: Path, peak: MachinePeak | None, tvm: str
) -> dict:
    from tensorsearch import workloads
    from tensorsearch.runtime import aligned_copy, aligned_empty
    from tensorsearch.search import tune
    from tensorsearch.search.report import ProgressBar, write_curve_csv, write_curve_png
    from tensorsearch.transform import mark_layout_free

    wl = workloads.get(name, index, dtype)
    ahead = args.weights_ahead and dtype == "int8"
    work_dir = work_root / f"{name}_{index}_{dtype}"
    row: dict = {"op": name, "index": index, "dtype": dtype, "args": "x".join(map(str, wl.args)), "tvm": tvm}
    row["weights"] = "packed ahead" if ahead else "packed in every call"
    print(f"== {wl.key}: tuning {trials} trials in {work_dir}", file=sys.stderr)
    with ProgressBar(sys.stderr) as bar:
        target = mark_layout_free(wl.func, [1]) if ahead else wl
        result = tune(
            target, hw, trials, work_dir, seed=args.seed, address=args.address, progress=bar,
            allow_other_cpu=args.allow_other_cpu,
        )  # fmt: skip
    write_curve_csv(work_dir / "tuning_curve.csv", result.curve, result.unit)
    write_curve_png(work_dir / "tuning_curve.png", result.curve, f"{wl.key} on {hw.name}", result.unit)
    if result.trace is not None:
        (work_dir / "best_trace.json").write_text(result.trace.as_json_text())
    failed = sum(1 for r in result.records if not r.ok)
    row.update(
        unit=result.unit,
        trials=result.trials,
        records=len(result.records),
        failed=failed,
        tuning_wall_s=round(result.wall_seconds, 1),
        search_s=round(sum(s.search_seconds for s in result.search_stats), 1),
        measure_s=round(sum(s.measure_seconds for s in result.search_stats), 1),
        made_per_s=round(
            sum(s.sampled + s.mutants for s in result.search_stats)
            / max(sum(s.search_seconds for s in result.search_stats), 1e-9),
            1,
        ),
        tuned=round(result.throughput, 2),
        curve=list(result.curve),
        tuning_host=f"{result.host.median:.2f}x ({result.host.disturbed}/{result.host.timings} disturbed)",
    )
    if result.module is None or not math.isfinite(result.latency):
        row["error"] = "no trial succeeded"
        return row

    # the local Ray cluster's processes stay busy for a while after a run and slowed the re-timing
    # by about 20% (docs/search.md); a joined cluster is left alone
    if not args.address:
        import ray

        ray.shutdown()

    # correctness on fresh random inputs, then same-run timing against the reference
    inputs = [aligned_copy(a) for a in wl.make_inputs(np.random.default_rng())]
    outs = [aligned_empty(o.shape, o.dtype) for o in wl.outputs]
    # as the tuner timed it: with --weights-ahead the main part, its weights packed once by the prepack
    mod, call = result.program.main, result.program.main_args([*inputs, *outs])
    mod.num_threads = args.threads
    mod(*call)
    wl.check(outs, wl.reference(*inputs))
    rounds = retimed_rounds(wl, mod, call, inputs, dtype, peak, args)
    ours = [r.ours for r in rounds]
    ours_best = [r.ours_best for r in rounds]
    refs = [r.ref for r in rounds if r.ref is not None]
    peaks = [r.peak for r in rounds if r.peak is not None]
    if dtype == "float32":
        row.update(numpy=round(statistics.median(refs), 2), ratio_vs_numpy=pair_ratio(ours, refs))
    if peaks:
        row.update(peak_columns(ours_best, peaks))
    best = statistics.median(ours)
    row.update(threads=args.threads, ours=round(best, 2), ours_ms=round(wl.flops / best / 1e6, 4))
    # the host's state while re-timing: the spread of the same-run reference over the rounds (1:
    # steady), the load, and how much the tuner's reference kernel said the rounds were disturbed
    spread_of = refs if dtype == "float32" else peaks
    disturbances = [r.disturbance for r in rounds]
    busy = sum(d > DISTURBED for d in disturbances)
    host = f"{statistics.median(disturbances):.2f}x ({busy}/{len(disturbances)} disturbed)"
    row.update(
        ref_spread=round(max(spread_of) / min(spread_of), 2) if spread_of else "",
        load=round(os.getloadavg()[0], 2),
        retime_host=host + ("; busy host: re-run" if busy > len(disturbances) // 2 else ""),
    )
    return row


@dataclass(frozen=True)
class Round:
    """One re-timing round: our module's G(FL)OPS (median and best of its repeats), the numpy
    reference's (float32) and the peak loop's, and how disturbed the tuner's reference kernel
    said the host was across it (1: quiet)."""

    ours: float
    ours_best: float
    ref: float | None
    peak: float | None
    disturbance: float


def retimed_rounds(wl, mod, call, inputs, dtype: str, peak, args) -> list[Round]:
    """``--rounds`` rounds of the numpy reference (float32), the peak and ours, interleaved. A
    round the tuner's reference kernel says the host disturbed (over ``DISTURBED``) is taken again,
    up to ``--retakes`` times; the least disturbed attempt counts."""
    from threadpoolctl import threadpool_limits

    clock = reference_clock(args.threads)

    def one_round() -> Round:
        before = clock.seconds()
        ref = None
        if dtype == "float32":
            settle()  # each pool's threads spin on after its sample (bench_env.settle)
            with threadpool_limits(limits=args.threads, user_api="blas"):
                ref = wl.flops / time_call(lambda: numpy_float32(wl, inputs), args.min_seconds) / 1e9
        peak_one = None
        if peak is not None:
            settle()
            peak_one = peak.sample()
        settle()
        median, best = time_ours(wl, mod, call, args)
        return Round(median, best, ref, peak_one, clock.disturbance(before, clock.seconds()))

    rounds = []
    for _ in range(args.rounds):
        taken = [one_round()]
        while taken[-1].disturbance > DISTURBED and len(taken) <= args.retakes:
            taken.append(one_round())
        rounds.append(min(taken, key=lambda r: r.disturbance))
    return rounds


def time_ours(wl, mod, call, args) -> tuple[float, float]:
    """One sample of our module, three repeats: their median G(FL)OPS, compared with numpy's
    median, and their best, compared with the peak (itself a best of three samples): the same
    statistic on both sides, since noise only lowers either."""
    t = mod.time(*call, repeat=3, min_repeat_ms=args.min_seconds * 1e3)
    return wl.flops / t.median / 1e9, wl.flops / t.min / 1e9


def pair_ratio(ours: list[float], refs: list[float]) -> float:
    return round(statistics.median(o / r for o, r in zip(ours, refs)), 3)


def peak_columns(ours_best: list[float], peaks: list[float]) -> dict[str, float]:
    """The peak's columns: its median sample; ours over it, the median over the pairs; and the
    fastest sample of ours over the fastest peak sample of the whole run. The last is the quiet
    machine's ratio: on the shared host a kernel runs at about 2/3 of its speed for seconds at a
    time while the register-only peak loop keeps its own (docs/search.md), and a best is what noise
    only lowers, on either side."""
    return {
        "peak": round(statistics.median(peaks), 1),
        "ratio_vs_peak": pair_ratio(ours_best, peaks),
        "best_vs_best_peak": round(max(ours_best) / max(peaks), 3),
    }


# ---------------------------------------------------------------- report

COLUMNS = [
    ("op", "op"),
    ("index", "shape"),
    ("dtype", "dtype"),
    ("weights", "weights"),
    ("trials", "trials"),
    ("failed", "failed"),
    ("tuning_wall_s", "tuning wall s"),
    ("search_s", "search s"),
    ("measure_s", "measure s"),
    ("made_per_s", "candidates/s"),
    ("unit", "unit"),
    ("tuned", "tuned (tuner's measure)"),
    ("tuning_host", "host while tuning (reference slowdown)"),
    ("ours", "ours, re-timed median"),
    ("ours_ms", "ours ms"),
    ("numpy", "numpy float32"),
    ("ratio_vs_numpy", "ours / numpy"),
    ("peak", "peak G(FL)OPS (int8: vpdpbusd, float32: FMA)"),
    ("ratio_vs_peak", "ours / peak"),
    ("best_vs_best_peak", "ours best / best peak"),
    ("ref_spread", "reference max / min"),
    ("retime_host", "host at re-timing (reference slowdown)"),
    ("load", "load average"),
    ("tvm", "TVM MetaSchedule"),
    ("error", "error"),
]


DIGITS = {"ratio_vs_numpy": 3, "ratio_vs_peak": 3, "best_vs_best_peak": 3, "ours_ms": 3}


def cell(key: str, value: object) -> str:
    """A Markdown cell: ratios and milliseconds with 3 decimals, other numbers with 1."""
    if isinstance(value, float):
        return f"{value:.{DIGITS.get(key, 1)}f}"
    return str(value)


def write_outputs(rows: list[dict], out_dir: Path, env: list[str], cmd: str) -> None:
    from tensorsearch.search.report import format_markdown_table

    keys = [k for k, _ in COLUMNS] + ["args", "records", "threads"]
    with open(out_dir / "tune_ops.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    table = [[cell(k, r.get(k, "")) for k, _ in COLUMNS] for r in rows]
    md = [
        "# Auto-tuned operators: `tensorsearch.tune` vs numpy (float32) and the VNNI peak (int8)",
        "",
        f"Command: `{cmd}`",
        "",
        *[f"- {e}" for e in env],
        "",
        format_markdown_table(table, [h for _, h in COLUMNS]),
        "",
        "Throughput is GOPS (int8) or GFLOPS (float32): the workload's operation count (a multiply-add "
        "is 2) over seconds. `tuned`: the best latency the tuner measured; `ours, re-timed`: the best "
        "module timed again here, each sample (three repeats) paired with a reference sample taken just before it; "
        "`ours / numpy` and `ours / peak` are medians over those pairs (a sample of ours: the median of "
        "three repeats against numpy, their best against the peak, whose sample is a best of three too). numpy float32: the workload's "
        "numpy reference run in float32 (GMM: OpenBLAS sgemm) with the same thread count. Peak: "
        "register-only loops (bench_vnni_gemm.Peak) on as many threads as ours, summed: vpdpbusd for "
        "int8 (tdpbusd on an AMX host), vector FMA (the descriptor's vector width) for float32; each peak sample is the best of "
        "three. `ours best / best peak`: the fastest sample of ours over the fastest peak sample of the "
        "run, the quiet machine's ratio (a shared host slows a kernel for seconds at a time, and the peak "
        "loop far less). "
        "Any packing the tuned program does runs inside it and is counted (unless --weights-ahead).",
        "",
        "![tuning curves](tune_ops.png)",
        "",
    ]
    (out_dir / "tune_ops.md").write_text("\n".join(md))
    plot_curves(rows, out_dir / "tune_ops.png")


def plot_curves(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for r in rows:
        pts = [(n, y) for n, y in r.get("curve", []) if y]
        if pts:
            final = pts[-1][1]
            ax.step(
                [n for n, _ in pts],
                [y / final for _, y in pts],
                where="post",
                label=f"{r['op']}:{r['index']} {r['dtype']}",
            )
    ax.set_xlabel("trials")
    ax.set_ylabel("best throughput / final best")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.set_title("tuning curves")
    if ax.lines:
        ax.legend(fontsize=7, ncol=3, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def machine_info(hw, args, tvm: str) -> list[str]:
    import llvmlite.binding as llvm
    from threadpoolctl import threadpool_info

    blas = "; ".join(
        f"{d.get('internal_api')} {d.get('version')} kernel {d.get('architecture')}"
        for d in threadpool_info()
        if d.get("user_api") == "blas"
    )
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
        rev = commit.stdout.strip() or "unknown"
    except OSError:
        rev = "unknown"
    return [
        f"CPU: {platform.processor() or platform.machine()}, LLVM cpu {llvm.get_host_cpu_name()}, "
        f"{os.cpu_count()} logical CPUs; hardware descriptor {hw.name} "
        f"(VNNI: {'yes' if hw.has_feature('+avx512vnni') else 'no'})",
        f"numpy {np.__version__}, BLAS: {blas or 'unknown'}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}",
        f"timing: {args.threads} thread(s), {args.rounds} rounds, at least {args.min_seconds} s per sample; "
        f"tuning seed {args.seed}; Ray {'at ' + args.address if args.address else 'local cluster'}",
        f"load average at the end: {os.getloadavg()[0]:.2f}; tensorsearch commit {rev}",
        f"TVM: {tvm}",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=256, help="trials per tuning run (default 256)")
    ap.add_argument(
        "--ops", default=",".join(OPS), help=f"comma-separated NAME or NAME:INDEX (default {','.join(OPS)})"
    )
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes (default int8,float32)")
    ap.add_argument(
        "--work-dir",
        help="parent of the runs' work dirs, resumed if they exist (default: a fresh one under the out dir)",
    )
    ap.add_argument("--seed", type=int, default=0, help="tuning seed (default 0)")
    ap.add_argument("--address", help="Ray cluster address (default: a local cluster)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="threads when re-timing (default: all)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved re-timing rounds (default 5)")
    ap.add_argument(
        "--retakes", type=int, default=2, help="times a round the reference kernel says was disturbed is taken again"
    )
    ap.add_argument("--min-seconds", type=float, default=0.05, help="least time per timing sample (default 0.05)")
    ap.add_argument("--peak-iters", type=int, default=2_000_000, help="iterations per peak sample (default 2e6)")
    ap.add_argument("--tvm-python", help="a Python executable with apache-tvm installed, if any")
    ap.add_argument(
        "--hardware",
        default="host",
        help="descriptor to tune for, one this machine runs (default host; x86-emeraldrapids on an AMX host: int8 on VNNI)",
    )
    ap.add_argument(
        "--allow-other-cpu",
        action="store_true",
        help="time here even where this CPU is not the one --hardware describes (each record names the CPU that timed it)",
    )
    ap.add_argument(
        "--weights-ahead",
        action="store_true",
        help="int8: weights packed once, ahead, out of the timed kernel (default: re-laid in every call)",
    )
    outputs.add_arguments(ap, "tune_ops")
    args = ap.parse_args()
    if args.trials < 1:
        ap.error(f"--trials must be a positive integer, not {args.trials}")
    dest = outputs.outputs(args, "tune_ops")
    if args.work_dir:
        try:
            outputs.check_untracked(args.work_dir, "--work-dir")
        except outputs.OutputError as err:
            sys.exit(f"tune_ops.py: error: {err}")

    from tensorsearch import hardware, workloads

    ops = [parse_op(t.strip()) for t in args.ops.split(",") if t.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for name, index, _ in ops:
        for dtype in dtypes:
            try:
                workloads.get(name, index, dtype)
            except ValueError as err:
                ap.error(f"--ops/--dtypes: {err}")
    out_dir = dest.out
    out_dir.mkdir(parents=True, exist_ok=True)
    work_root = Path(args.work_dir) if args.work_dir else dest.fresh_dir("work")
    try:
        hw = hardware.load(args.hardware)
    except hardware.HardwareError as err:
        ap.error(f"--hardware: {err}")
    vnni = hw.has_feature("+avx512vnni")
    amx = any(s.tiles is not None for s in hw.intrinsic_sets)  # x86-sapphirerapids: int8 on AMX tiles
    peaks = {
        "int8": MachinePeak(args.threads, args.peak_iters, "tdpbusd" if amx else "vpdpbusd")
        if (vnni or amx) and "int8" in dtypes
        else None,
        "float32": MachinePeak(args.threads, args.peak_iters, "fma", hw.vector_bits // 32)
        if hw.triple.startswith("x86_64") and "float32" in dtypes
        else None,
    }
    tvm = tvm_note(args.tvm_python)
    cmd = "python experiments/tune_ops.py" + "".join(f" {a}" for a in sys.argv[1:])

    rows: list[dict] = []
    runs = [(name, index, trials or args.trials, dtype) for name, index, trials in ops for dtype in dtypes]
    try:
        for name, index, trials, dtype in runs:
            try:
                row = tune_one(name, index, trials, dtype, hw, args, work_root, peaks[dtype], tvm)
            except Exception as err:  # one failing run must not lose the others
                traceback.print_exc()
                row = {"op": name, "index": index, "dtype": dtype, "tvm": tvm, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            write_outputs(rows, out_dir, machine_info(hw, args, tvm), cmd)
            print({k: v for k, v in row.items() if k != "curve"}, file=sys.stderr)
    except KeyboardInterrupt:
        print(f"interrupted after {len(rows)} of {len(runs)} runs", file=sys.stderr)
    print((out_dir / "tune_ops.md").read_text() if rows else "no run finished")
    names = ["tune_ops.csv", "tune_ops.md", "tune_ops.png"] if rows else []
    dest.wrote(names, f"work dirs under {outputs.show(work_root)}/")


if __name__ == "__main__":
    main()
