"""Benchmark (not a test): our tuned kernels side by side with Apache TVM MetaSchedule's, same shapes, same budget.

Run from the repository root (a benchmark: hold the shared lock):

    python experiments/vs_tvm.py --setup            # once: the TVM side environment in .tvm-env/
    flock /tmp/tensorsearch-bench.lock python experiments/vs_tvm.py [--ops C2D:1,T2D:0,GMM:3]
        [--dtypes float32,int8] [--trials 64] [--hardware host] [--out DIR | --update-tracked]
        [--rounds 5] [--repeats 30] [--min-seconds 0.002] [--debug]
    flock /tmp/tensorsearch-bench.lock python experiments/vs_tvm.py --retime EARLIER_OUT_DIR --ops ... --out DIR
        # tunes nothing: re-times the two kernels of each pair that an earlier run dumped

**The side environment.** ``--setup`` makes a virtual environment in ``.tvm-env/`` (git-ignored)
with ``apache-tvm==0.27.0.post1`` and ``apache-tvm-ffi==0.1.14.post1`` (0.1.15 segfaults on JSON
export), plus what MetaSchedule imports (xgboost-cpu, psutil, cloudpickle, scipy, tornado), then
checks that the re-registered VNNI intrinsic compiles to ``vpdpbusd``. ``tvm`` is imported only by
``experiments/tvm_worker.py``, in that environment's Python; this script talks to it through a
pipe (JSON lines) and never imports ``tvm``; ``tensorsearch`` never does either.

**What one run does**, for every operator ``NAME:INDEX`` and dtype:

1. TVM: the worker builds the workload from TVM's own table
   (``meta_schedule.testing.te_workload.create_te_workload(NAME, INDEX)``; int8: the same
   function with uint8 data and int8 weights, as ours), checks that its parameter shapes and
   dtypes are ours (``tensorsearch.workloads.get``), and tunes it with ``meta_schedule.tune_tir``
   (``max_trials_global`` = ``--trials``, 64 trials per iteration, ``--threads`` cores) for
   target ``{"kind": "llvm", "mcpu": CPU, "num-cores": THREADS}``, CPU being the ``cpu`` of our
   descriptor (``--hardware``, default ``host``). int8 is tensorized with VNNI (our re-registered
   ``dot_16x4_vnni``, see tvm_worker.py) where the descriptor has AVX-512 VNNI; elsewhere both
   sides tune plain int8 code, and the row says so. ``--hardware x86-emeraldrapids`` on an
   AMX host: ours on VNNI, as TVM's (MetaSchedule has no AMX rule).
   MetaSchedule's pick is the record its tuner timed fastest, one sample on a machine that may
   have been busy at that moment; so its ``FINALISTS`` (12) best records are built and timed
   again together (the fastest of 30 repeats of at least 2 ms each) and the fastest is TVM's
   kernel, as our tuner re-times its own finalists before it chooses.
2. Ours: ``tensorsearch.tune`` on that descriptor with the same trial count (as
   ``experiments/tune_ops.py``), then the local Ray cluster is shut down.

   **int8 with VNNI: weights packed ahead, on both sides.** MetaSchedule tensorizes only weights
   already laid out in 16 x 4 blocks (tvm_worker.py), so its function takes them packed
   (``(..., K, N)`` as ``(..., N/16, K/4, 16, 4)``; the worker packs them before the call, as
   TVM's graph level does). Ours then tunes the same function with its weights marked
   ``layout_free`` (``tensorsearch.transform.mark_layout_free``): the stages that re-lay them
   run once, ahead, untimed (``split_constant_stages``), as in our models. Each side times its
   kernel without the weight copy; ``ours ms, pack in kernel`` times our whole function as well.
   Where the weights do not fill 16 x 4 blocks (C2D:0, 3 input channels) TVM cannot tensorize
   and both sides take plain weights, re-laid (ours) inside the timed kernel.
3. Both best kernels run on the same fresh random inputs and are checked against the workload's
   numpy reference.
4. Re-timing, interleaved: ``--rounds`` rounds, each one TVM sample (``time_evaluator`` in the
   worker process, ``TVM_NUM_THREADS`` = ``--threads``, ``TVM_BIND_THREADS=0``) then one of ours
   (``Module.time`` in this process, ``num_threads`` = ``--threads``; with packed weights, its
   main part on the weights packed once, ahead). A sample is ``--repeats`` repeats, each of as
   many back-to-back calls as fill ``--min-seconds``, and counts its fastest repeat: on a CPU
   other work only ever adds time, so the fastest repeat is the one least disturbed (the tuner's
   statistic, ``tensorsearch.search.measure.noise.LATENCY_STATISTIC``). Short repeats let a kernel beside
   a busy neighbour be caught in the moments the neighbour is off the cores. A latency is the
   fastest over rounds, and the speed ratio ``ours/TVM`` is TVM's latency over ours (above 1,
   ours is faster). The two processes never run at once, and each
   sample starts 0.2 s after the other's (``bench_env.settle``: a pool's threads spin on after
   its work). The tuner's reference kernel is timed before and after each round
   (``bench_env.reference_clock``): a round it says the host disturbed (over 1.25x its quiet
   time) is taken again, up to ``--retakes`` times, and the least disturbed attempt counts;
   ``host at re-timing`` gives the median disturbance and the rounds still disturbed, and says
   "busy host: re-run" when most were.

Writes ``vs_tvm.csv`` and ``vs_tvm.md`` (rewritten after every run, geomean of the ratios last)
under ``--out`` (default ``results/vs_tvm/``, git-ignored; ``--update-tracked`` writes them into the
tracked ``experiments/results/``, see ``experiments/outputs.py``), and under the out dir (under
``results/vs_tvm/`` with ``--update-tracked``): ``dumps/NAME_INDEX_DTYPE/`` with both best kernels
(``tvm_tir.py`` scheduled TIR, ``tvm_trace.py``, ``tvm.ll``, ``tvm.s``, ``tvm_lib.so`` for
``tvm.runtime.load_module``; ``ours_tir.py``, ``ours_trace.json``, ``ours.ll``, ``ours.s``),
``work-YYYYmmdd-HHMMSS/`` (both tuners' databases and logs, fresh for every invocation so that
neither tuner resumes an earlier run's records) and ``tvm_worker.log`` (TVM's output, appended).

The script re-executes itself without ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE``.
"""

from __future__ import annotations

import os
import sys

from bench_env import reexec_without_openblas_overrides, reference_clock, settle

reexec_without_openblas_overrides()

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import outputs  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ENV_DIR = ROOT / ".tvm-env"
ENV_PYTHON = ENV_DIR / "bin" / "python"
WORKER = HERE / "tvm_worker.py"
PINS = ["apache-tvm==0.27.0.post1", "apache-tvm-ffi==0.1.14.post1"]
EXTRAS = ["xgboost-cpu", "psutil", "cloudpickle", "scipy", "tornado"]  # what MetaSchedule imports
SETUP_CMD = "python experiments/vs_tvm.py --setup"
OPS = ("C2D:1", "T2D:0", "GMM:3")
WEIGHTS = {True: "packed ahead", False: "plain"}  # int8 rows: how both sides take the weights
DTYPES = ("float32",)


class Failure(Exception):
    """An error a person can act on: printed in one line (a traceback only with --debug)."""


# ---------------------------------------------------------------- side environment


def setup_env() -> int:
    """Create .tvm-env with the pinned apache-tvm and check the VNNI intrinsic."""
    if not ENV_PYTHON.exists():
        print(f"creating {ENV_DIR}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(ENV_DIR)], check=True)
    subprocess.run([str(ENV_PYTHON), "-m", "pip", "install", *PINS, *EXTRAS], check=True)
    out = subprocess.run([str(ENV_PYTHON), "-c", "import tvm; print(tvm.__version__)"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{ENV_DIR}: import tvm failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 1
    print(f"apache-tvm {out.stdout.strip()} in {ENV_PYTHON}; checking the VNNI intrinsic (about a minute)")
    return subprocess.run([str(ENV_PYTHON), str(WORKER), "--check-vnni"]).returncode


def side_env_version() -> str:
    """apache-tvm's version in the side environment, or raise Failure with the command to make it."""
    if not ENV_PYTHON.exists():
        raise Failure(f"no TVM side environment at {ENV_DIR}; create it with: {SETUP_CMD}")
    out = subprocess.run(
        [str(ENV_PYTHON), "-c", "import tvm; print(tvm.__version__)"], capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise Failure(f"{ENV_PYTHON} cannot import tvm; re-create the side environment with: {SETUP_CMD}")
    return out.stdout.strip()


class TvmWorker:
    """experiments/tvm_worker.py --serve in the side environment; one JSON request, one reply."""

    def __init__(self, threads: int, log_path: Path, debug: bool):
        # TVM pins its pool threads to cores by default; ours (OpenMP) are not pinned. On a shared
        # machine a pinned thread cannot dodge a busy core: TVM's C2D:1 kernel timed 0.36-0.76 ms
        # pinned and 0.35 ms unpinned in fresh processes (docs/tvm-comparison.md).
        env = dict(os.environ, TVM_NUM_THREADS=str(threads), TVM_BIND_THREADS="0")
        env.pop("PYTHONPATH", None)
        self.log = None if debug else open(log_path, "a")
        self.proc = subprocess.Popen(
            [str(ENV_PYTHON), str(WORKER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if debug else self.log,
            text=True,
            env=env,
            cwd=str(ROOT),
        )

    def ask(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise Failure(f"the TVM worker exited (code {self.proc.wait()}); see its log")
        out = json.loads(line)
        if not out.get("ok"):
            raise Failure(f"TVM worker, {req['cmd']}: {out.get('error')}")
        return out

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        if self.log:
            self.log.close()


# ---------------------------------------------------------------- one comparison


def parse_op(text: str) -> tuple[str, int]:
    name, _, index = text.partition(":")
    try:
        return name.strip().upper(), int(index) if index else 0
    except ValueError:
        raise SystemExit(f"--ops: {text!r} is not NAME or NAME:INDEX") from None


def dump_ours(result, dump: Path) -> None:
    from tensorsearch.script import script

    mod = result.module
    dump.mkdir(parents=True, exist_ok=True)
    (dump / "ours_tir.py").write_text(script(mod.func))
    if result.trace is not None:
        (dump / "ours_trace.json").write_text(result.trace.as_json_text())
    (dump / "ours.ll").write_text(mod.llvm_ir)
    (dump / "ours.s").write_text(mod.assembly)


def compare_one(
    name: str, index: int, dtype: str, hw, worker: TvmWorker, args, scratch: Path, work_root: Path, row: dict
) -> None:
    """Tune both, check both, re-time both; fills ``row`` as it goes (a failure keeps what was measured).

    The kernels are dumped under ``scratch/dumps``, the tuners work under ``work_root``.
    """
    from tensorsearch import workloads
    from tensorsearch.search import tune
    from tensorsearch.search.report import ProgressBar
    from tensorsearch.search.tuning.tuner import FINALISTS
    from tensorsearch.transform import mark_layout_free

    wl = workloads.get(name, index, dtype)
    key = f"{name}_{index}_{dtype}"
    dump = scratch / "dumps" / key
    work = work_root / key
    vnni = hw.has_feature("+avx512vnni")
    row.update(
        args="x".join(map(str, wl.args)),
        vnni=("yes" if vnni else f"no ({hw.name} lacks AVX-512 VNNI)") if dtype == "int8" else "",
    )
    expect = [{"shape": list(t.shape), "dtype": t.dtype} for t in [*wl.inputs, *wl.outputs]]

    print(
        f"== {wl.key}: TVM MetaSchedule, {args.trials} trials (log: {outputs.show(scratch / 'tvm_worker.log')})",
        file=sys.stderr,
    )
    t = worker.ask(
        cmd="tune",
        name=name,
        index=index,
        dtype=dtype,
        trials=args.trials,
        mcpu=args.mcpu,
        cores=args.threads,
        seed=args.seed,
        expect=expect,
        work_dir=str(work / "tvm"),
        dump_dir=str(dump),
        pack_weights=dtype == "int8" and vnni,
        finalists=FINALISTS,
    )
    packed = bool(t.get("weights_packed"))
    row["weights"] = WEIGHTS[packed] if dtype == "int8" else ""
    row.update(tvm_wall_s=round(t["wall_s"], 1), tvm_failed=t["failed"], tvm_records=t["records"])
    if t.get("tuned_s"):
        row["tvm_tuned_ms"] = round(t["tuned_s"] * 1e3, 4)

    print(f"== {wl.key}: tensorsearch, {args.trials} trials", file=sys.stderr)
    with ProgressBar(sys.stderr) as bar:
        target = mark_layout_free(wl.func, [1]) if packed else wl
        result = tune(target, hw, args.trials, work / "ours", seed=args.seed, progress=bar)
    import ray

    ray.shutdown()  # a busy local cluster slowed re-timing by ~20% (docs/search.md)
    row.update(ours_wall_s=round(result.wall_seconds, 1), ours_failed=result.failed)
    if result.module is None or not math.isfinite(result.latency):
        raise Failure("tensorsearch: no trial succeeded")
    row["ours_tuned_ms"] = round(result.latency * 1e3, 4)
    row["ours_tuning_host"] = f"{result.host.median:.2f}x ({result.host.disturbed}/{result.host.timings} disturbed)"
    dump_ours(result, dump)
    check_and_time(wl, *ours_programs(wl, result.trace, hw, packed), worker, args, work, row)


def retime_one(
    name: str, index: int, dtype: str, hw, worker: TvmWorker, args, earlier: dict, work_root: Path, row: dict
) -> None:
    """Re-time the two kernels an earlier run dumped (``--retime DIR``): ours rebuilt from its
    trace, TVM's loaded from its exported library; the tuning columns are the earlier run's."""
    from tensorsearch import workloads
    from tensorsearch.schedule import Trace

    wl = workloads.get(name, index, dtype)
    dump = args.retime / "dumps" / f"{name}_{index}_{dtype}"
    for path in (dump / "ours_trace.json", dump / "tvm_lib.so"):
        if not path.is_file():
            raise Failure(f"--retime: {path} is missing")
    keep = (
        "args", "vnni", "weights", "trials", "tvm_tuned_ms", "ours_tuned_ms", "ours_tuning_host", "tvm_wall_s",
        "ours_wall_s",
    )  # fmt: skip
    row.update({k: earlier[k] for k in keep if earlier.get(k) not in (None, "")})
    trace = Trace.from_json((dump / "ours_trace.json").read_text())
    worker.ask(cmd="load", path=str(dump / "tvm_lib.so"))
    work = work_root / f"{name}_{index}_{dtype}"
    work.mkdir(parents=True, exist_ok=True)
    packed = row.get("weights") == WEIGHTS[True]
    check_and_time(wl, *ours_programs(wl, trace, hw, packed), worker, args, work, row)


def ours_programs(wl, trace, hw, packed: bool):
    """Our best kernel as it is timed, and (with packed weights) our whole function as well.

    With packed weights the timed program is the schedule's main part, its weights re-laid once,
    ahead, by the prepack (``split_constant_stages``; the whole function when the schedule
    re-lays nothing); otherwise the whole function, and no second one."""
    from tensorsearch.graph.executor import TaskProgram
    from tensorsearch.runtime import build
    from tensorsearch.schedule import Schedule
    from tensorsearch.transform import mark_layout_free

    hwc = hw.with_fp_contract()
    sch = Schedule(mark_layout_free(wl.func, [1]) if packed else wl.func, check=False, hardware=hw)
    trace.apply(sch)
    program = TaskProgram.build(sch.func, [1] if packed else (), hwc)
    if not packed:
        return program, None
    return program, (program.main if program.split is None else build(sch.func, hwc))


def check_and_time(wl, program, whole, worker: TvmWorker, args, work: Path, row: dict) -> None:
    """Run both kernels on the same inputs, check both against numpy, then time them in
    interleaved rounds; fills ``row``'s latency columns. ``program``: ours as timed (a
    TaskProgram); ``whole``: our whole function, given (and timed too) when the weights are packed
    ahead."""
    from tensorsearch.runtime import aligned_copy
    from tensorsearch.search.measure.noise import DISTURBED

    packed = whole is not None
    inputs = [aligned_copy(a) for a in wl.make_inputs(np.random.default_rng(args.seed))]  # as TVM's NDArrays
    want = wl.reference(*inputs)
    ours_out = [aligned_copy(np.full(o.shape, 7, o.dtype)) for o in wl.outputs]
    ours_args = program.main_args([*inputs, *ours_out])
    for mod in (program.main, whole):
        if mod is not None:
            mod.num_threads = args.threads
            mod(*(ours_args if mod is program.main else [*inputs, *ours_out]))
            wl.check(ours_out, want)
    arrays = [*inputs, *[np.full(o.shape, 7, o.dtype) for o in wl.outputs]]
    in_path, out_path = work / "inputs.npz", work / "tvm_outputs.npz"
    np.savez(in_path, **{f"a{i}": a for i, a in enumerate(arrays)})
    worker.ask(cmd="run", inputs=str(in_path), outputs=str(out_path), pack_weights=packed)
    got = np.load(out_path)
    tvm_out = [got[f"arr_{len(inputs) + i}"] for i in range(len(wl.outputs))]
    try:
        wl.check(tvm_out, want)
    except AssertionError as err:
        raise Failure(f"TVM's kernel disagrees with the numpy reference: {str(err).strip().splitlines()[0]}") from None

    tvm_s: list[float] = []
    ours_s: list[float] = []
    whole_s: list[float] = []
    timed_ms = args.min_seconds * 1e3
    row["load"] = round(os.getloadavg()[0], 2)  # other processes on the cores inflate both latencies
    clock = reference_clock(args.threads)
    disturbances: list[float] = []

    def fastest(mod, call_args) -> float:
        return mod.time(*call_args, repeat=args.repeats, min_repeat_ms=timed_ms).min

    def one_round() -> tuple[float, float, float | None, float]:
        """A TVM sample and ours (and our whole function's), each its fastest repeat, the
        reference timed before and after."""
        before = clock.seconds()
        settle()  # each side's pool threads spin on after its sample (bench_env.settle)
        tvm_one = min(worker.ask(cmd="time", min_repeat_ms=timed_ms, repeat=args.repeats)["results"])
        settle()
        ours = fastest(program.main, ours_args)
        whole_one = None
        if whole is not None:
            settle()
            whole_one = fastest(whole, [*inputs, *ours_out])
        return tvm_one, ours, whole_one, clock.disturbance(before, clock.seconds())

    for _ in range(args.rounds):
        # a round the reference says was disturbed is taken again, up to --retakes times: the least disturbed counts
        taken = [one_round()]
        while taken[-1][3] > DISTURBED and len(taken) <= args.retakes:
            taken.append(one_round())
        tvm_one, ours_one, whole_one, d = min(taken, key=lambda t: t[3])
        tvm_s.append(tvm_one)
        ours_s.append(ours_one)
        disturbances.append(d)
        if whole_one is not None:
            whole_s.append(whole_one)
    busy = sum(d > DISTURBED for d in disturbances)
    row["retime_host"] = f"{statistics.median(disturbances):.2f}x ({busy}/{len(disturbances)} disturbed)"
    if busy > len(disturbances) // 2:
        row["retime_host"] += "; busy host: re-run"
    tvm_ms, ours_ms = min(tvm_s) * 1e3, min(ours_s) * 1e3
    if whole_s:
        row["ours_whole_ms"] = round(min(whole_s) * 1e3, 4)
    row.update(
        tvm_ms=round(tvm_ms, 4),
        ours_ms=round(ours_ms, 4),
        tvm_gops=round(wl.flops / tvm_ms / 1e6, 1),
        ours_gops=round(wl.flops / ours_ms / 1e6, 1),
        ratio=round(tvm_ms / ours_ms, 3),
    )


# ---------------------------------------------------------------- report

COLUMNS = [
    ("op", "op"),
    ("index", "shape"),
    ("args", "args"),
    ("dtype", "dtype"),
    ("vnni", "int8 VNNI"),
    ("weights", "int8 weights"),
    ("trials", "trials"),
    ("tvm_ms", "TVM ms"),
    ("ours_ms", "ours ms"),
    ("ours_whole_ms", "ours ms, pack in kernel"),
    ("tvm_gops", "TVM G(FL)OPS"),
    ("ours_gops", "ours G(FL)OPS"),
    ("ratio", "ours/TVM speed"),
    ("tvm_tuned_ms", "TVM tuner's ms"),
    ("ours_tuned_ms", "our tuner's ms"),
    ("ours_tuning_host", "host while we tuned (reference slowdown)"),
    ("tvm_wall_s", "TVM tuning wall s"),
    ("ours_wall_s", "ours tuning wall s"),
    ("load", "load avg at re-timing"),
    ("retime_host", "host at re-timing (reference slowdown)"),
    ("tvm_failed", "TVM failed"),
    ("ours_failed", "ours failed"),
    ("error", "error"),
]


def geomean(rows: list[dict]) -> float | None:
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    return round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 3) if ratios else None


def write_outputs(rows: list[dict], out_dir: Path, env: list[str], cmd: str, dumps: str = "dumps/") -> str:
    from tensorsearch.search.report import format_markdown_table

    g = geomean(rows)
    keys = [k for k, _ in COLUMNS]
    with open(out_dir / "vs_tvm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        if g is not None:
            w.writerow({"op": "geomean", "ratio": g})
    table = [[str(r.get(k, "")) for k, _ in COLUMNS] for r in rows]
    if g is not None:
        table.append(
            ["geomean", *[""] * (keys.index("ratio") - 1), str(g), *[""] * (len(keys) - keys.index("ratio") - 1)]
        )
    md = "\n".join(
        [
            "# tensorsearch vs Apache TVM MetaSchedule, same shapes, same trial budget",
            "",
            f"Command: `{cmd}`",
            "",
            *[f"- {e}" for e in env],
            "",
            format_markdown_table(table, [h for _, h in COLUMNS]),
            "",
            "Latencies: the fastest sample over the interleaved re-timing rounds (TVM: time_evaluator in the side "
            "environment's worker; ours: Module.time here; same inputs, same thread count, never at "
            "once). `ours/TVM speed`: TVM latency over ours (above 1: "
            "ours is faster). Tuner's ms: the best latency each tuner measured while tuning. Both "
            "kernels are checked against the numpy reference first. IR and assembly of both best "
            f"kernels: `{dumps}`.",
            "",
        ]
    )
    (out_dir / "vs_tvm.md").write_text(md)
    return md


def machine_info(hw, args, tvm_version: str) -> list[str]:
    import llvmlite.binding as llvm

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
        rev = rev.stdout.strip() or "unknown"
    except OSError:
        rev = "unknown"
    return [
        f"CPU: {platform.processor() or platform.machine()}, LLVM cpu {llvm.get_host_cpu_name()}, {os.cpu_count()} "
        f"logical CPUs; our hardware descriptor {hw.name} (VNNI: {'yes' if hw.has_feature('+avx512vnni') else 'no'})",
        f"TVM: apache-tvm {tvm_version} ({ENV_DIR.name}), target "
        f'{{"kind": "llvm", "mcpu": "{args.mcpu}", "num-cores": {args.threads}}}, tune_tir with '
        f"max_trials_global = trials, num_trials_per_iter 64, {args.threads} tuning cores, seed {args.seed}",
        f"timing: {args.threads} thread(s), {args.rounds} rounds, each sample the fastest of {args.repeats} "
        f"repeats of at least {args.min_seconds} s; latencies the fastest over rounds",
        f"load average at the end: {os.getloadavg()[0]:.2f}; tensorsearch commit {rev}",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help=f"create the TVM side environment in {ENV_DIR.name}/ and exit")
    ap.add_argument(
        "--ops", default=",".join(OPS), help=f"comma-separated NAME or NAME:INDEX (default {','.join(OPS)})"
    )
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated: float32, int8 (default float32)")
    ap.add_argument("--trials", type=int, default=64, help="trials per tuning run, both tuners (default 64)")
    ap.add_argument("--seed", type=int, default=0, help="tuning seed, both tuners (default 0)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="cores: tuning and timing (default all)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved re-timing rounds (default 5)")
    ap.add_argument(
        "--retakes", type=int, default=2, help="times a round the reference kernel says was disturbed is taken again"
    )
    ap.add_argument("--repeats", type=int, default=30, help="timed repeats per sample; the fastest counts (default 30)")
    ap.add_argument("--min-seconds", type=float, default=0.002, help="least time per timed repeat (default 0.002)")
    ap.add_argument("--hardware", default="host", help="our descriptor (default host); TVM's -mcpu is its cpu")
    ap.add_argument("--mcpu", help="TVM's -mcpu (default: the --hardware descriptor's cpu)")
    ap.add_argument("--debug", action="store_true", help="tracebacks, and TVM's output on stderr")
    ap.add_argument(
        "--retime",
        type=Path,
        metavar="DIR",
        help="tune nothing: re-time the kernels an earlier run wrote under DIR (its dumps/ and vs_tvm.csv)",
    )
    outputs.add_arguments(ap, "vs_tvm")
    args = ap.parse_args()
    if args.setup:
        return setup_env()
    dest = outputs.outputs(args, "vs_tvm")
    if args.trials < 1:
        ap.error(f"--trials must be a positive integer, not {args.trials}")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    from tensorsearch import hardware, workloads

    ops = [parse_op(t) for t in args.ops.split(",") if t.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for dtype in dtypes:
        if dtype not in ("float32", "int8"):
            ap.error(f"--dtypes: {dtype!r}; the comparison runs float32 and int8")
    for name, index in ops:
        for dtype in dtypes:
            try:
                workloads.get(name, index, dtype)
            except ValueError as err:
                ap.error(f"--ops/--dtypes: {err}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no shipped descriptor matches": expected on most hosts
        try:
            hw = hardware.load(args.hardware)
        except hardware.HardwareError as err:
            ap.error(f"--hardware: {err}")
    if not hw.runs_here:  # both kernels run and are timed here
        ap.error(f"--hardware: this CPU cannot run code built for {hw.name}; name a descriptor it runs (default host)")
    try:
        tvm_version = side_env_version()
    except Failure as err:
        print(err, file=sys.stderr)
        return 2
    args.mcpu = args.mcpu or hw.cpu
    out_dir = dest.out
    out_dir.mkdir(parents=True, exist_ok=True)
    work_root = dest.fresh_dir("work")  # fresh: neither tuner resumes an earlier run's records
    dumps = outputs.show(dest.scratch / "dumps") + "/"
    cmd = "python experiments/vs_tvm.py" + "".join(f" {a}" for a in sys.argv[1:])
    earlier: dict[tuple[str, str, str], dict] = {}
    if args.retime:
        try:
            with open(args.retime / "vs_tvm.csv", newline="") as f:
                earlier = {(r["op"], r["index"], r["dtype"]): r for r in csv.DictReader(f) if r["op"] != "geomean"}
        except OSError as err:
            print(f"--retime: cannot read {args.retime / 'vs_tvm.csv'}: {err.strerror}", file=sys.stderr)
            return 2
        dumps = outputs.show(args.retime / "dumps") + "/"
    worker = TvmWorker(args.threads, dest.scratch / "tvm_worker.log", args.debug)
    rows: list[dict] = []
    runs = [(name, index, dtype) for name, index in ops for dtype in dtypes]
    md = ""
    try:
        for name, index, dtype in runs:
            row: dict = {"op": name, "index": index, "dtype": dtype, "trials": args.trials}
            try:
                if args.retime:
                    earlier_row = earlier.get((name, str(index), dtype), {})
                    retime_one(name, index, dtype, hw, worker, args, earlier_row, work_root, row)
                else:
                    compare_one(name, index, dtype, hw, worker, args, dest.scratch, work_root, row)
            except Failure as err:
                if args.debug:
                    traceback.print_exc()
                print(f"{name}:{index} {dtype}: {err}", file=sys.stderr)
                row["error"] = str(err)
                if worker.proc.poll() is not None:  # a dead worker: start another for the next run
                    worker = TvmWorker(args.threads, dest.scratch / "tvm_worker.log", args.debug)
            except Exception as err:  # one failing run must not lose the others
                if args.debug:
                    traceback.print_exc()
                print(
                    f"{name}:{index} {dtype}: {type(err).__name__}: {err} (--debug for the traceback)", file=sys.stderr
                )
                row["error"] = f"{type(err).__name__}: {err}"
            rows.append(row)
            md = write_outputs(rows, out_dir, machine_info(hw, args, tvm_version), cmd, dumps)
            print({k: v for k, v in row.items()}, file=sys.stderr)
    except KeyboardInterrupt:
        print(f"interrupted after {len(rows)} of {len(runs)} runs", file=sys.stderr)
    finally:
        worker.close()
    print(md or "no run finished")
    names = ["vs_tvm.csv", "vs_tvm.md"] if rows else []
    dest.wrote(names, f"dumps, work dirs and tvm_worker.log under {outputs.show(dest.scratch)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
