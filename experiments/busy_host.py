"""The README's tuning job beside spinning processes: is what it reports, and what it picks, right?

    python experiments/busy_host.py                     # int8 GMM, 48 trials: quiet, 1 spinner, 2 spinners
    python experiments/busy_host.py --op GMM:0 --dtype int8 --trials 48 --spinners 1,2

The workload is tuned (``tensorsearch.tune`` on ``host``, a fresh work dir each time) quietly, then
beside ``k`` processes running ``while True: pass`` for each ``k`` of ``--spinners``. For each run:

* ``wall``: its wall time, and over the quiet run's (``wall / quiet``);
* ``reported``: the latency the run reported (``TuneResult.latency``: the fastest repeat) and
  ``host``, how disturbed it said the host was (``TuneResult.host``);
* after the spinners are stopped, the run's 8 best records (by ``Database.best``) are timed again
  quietly, interleaved, ``--rounds`` rounds (``Measurer.retime``, as the tuner times them):
  ``chosen quiet`` is the chosen record's fastest sample there, and ``best quiet`` the fastest of
  the 8. ``reported / chosen quiet`` says whether the report was right (1: exactly), and
  ``chosen / best quiet`` whether the pick was (1: it picked the fastest).

Writes busy_host.csv and busy_host.md to the out dir (default results/busy_host/, git-ignored;
experiments/outputs.py); the work dirs go under it too. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import outputs

FIELDS = [
    "run", "trials", "wall_s", "wall_over_quiet", "reported_ms", "host", "chosen_quiet_ms", "best_quiet_ms",
    "reported_over_chosen_quiet", "chosen_over_best_quiet", "loadavg",
]  # fmt: skip


def _spin(k: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def _quiet_retime(wl, work_dir: Path, rounds: int) -> tuple[float, float]:
    """(the chosen record's, the fastest of the 8 best records') fastest sample, timed quietly."""
    import tensorsearch as ts
    from tensorsearch.schedule import Schedule, Trace
    from tensorsearch.search.database import Database, hardware_key, workload_key
    from tensorsearch.search.measure.measurer import Measurer

    hw = ts.target.resolve("host")
    db = Database(work_dir)
    best = db.best(workload_key(wl.func), hardware_key(hw), 8)
    funcs = []
    for rec in best:
        sch = Schedule(wl.func, check=False, hardware=hw)
        Trace.from_json(rec.trace).apply(sch)
        funcs.append(sch.func)
    with Measurer(wl.func, hw, workload=wl) as m:
        samples = m.retime(funcs, rounds)
    fastest = [min((x for r in s for x in r), default=float("inf")) for s in samples]
    return fastest[0], min(fastest)


def run(args, label: str, spinners: int, work_dir: Path, quiet_wall: float | None) -> dict:
    import tensorsearch as ts
    from tensorsearch import workloads

    name, _, index = args.op.partition(":")
    wl = workloads.get(name, int(index or 0), args.dtype)
    procs = _spin(spinners)
    try:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = ts.tune(wl, "host", trials=args.trials, work_dir=work_dir, seed=args.seed)
        wall = time.perf_counter() - t0
        load = os.getloadavg()[0]
    finally:
        _stop(procs)
    time.sleep(2.0)
    chosen, best = _quiet_retime(wl, work_dir, args.rounds)
    row = {
        "run": label,
        "trials": result.trials,
        "wall_s": round(wall, 1),
        "wall_over_quiet": round(wall / quiet_wall, 2) if quiet_wall else 1.0,
        "reported_ms": round(result.latency * 1e3, 4),
        "host": result.host.line().removeprefix("host: "),
        "chosen_quiet_ms": round(chosen * 1e3, 4),
        "best_quiet_ms": round(best * 1e3, 4),
        "reported_over_chosen_quiet": round(result.latency / chosen, 2),
        "chosen_over_best_quiet": round(chosen / best, 2),
        "loadavg": round(load, 2),
    }
    print(
        f"{label:>12}: {row['wall_s']} s (x{row['wall_over_quiet']}), reported {row['reported_ms']} ms, "
        f"chosen {row['chosen_quiet_ms']} ms quietly (x{row['reported_over_chosen_quiet']} reported), "
        f"best of 8 {row['best_quiet_ms']} ms (chosen x{row['chosen_over_best_quiet']}); {row['host']}",
        flush=True,
    )
    return row


def write(rows: list[dict], out: Path, cmd: str) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "busy_host.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    from tensorsearch.target.hardware import host_identity

    cpu = host_identity().describe()
    lines = [
        "# Tuning beside spinning processes",
        "",
        f"`{cmd}`; {cpu}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}. Quiet re-timings: the run's 8 best "
        "records timed again after the spinners stopped, interleaved.",
        "",
        "| run | trials | wall s | wall / quiet | reported ms | chosen, quiet ms | best of 8, quiet ms | "
        "reported / chosen quiet | chosen / best quiet | load average | host (as the run reported it) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['trials']} | {r['wall_s']} | {r['wall_over_quiet']} | {r['reported_ms']} | "
            f"{r['chosen_quiet_ms']} | {r['best_quiet_ms']} | {r['reported_over_chosen_quiet']} | "
            f"{r['chosen_over_best_quiet']} | {r['loadavg']} | {r['host']} |"
        )
    (out / "busy_host.md").write_text("\n".join(lines) + "\n")
    return ["busy_host.csv", "busy_host.md"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--op", default="GMM:0", help="the workload, NAME or NAME:INDEX (default GMM:0)")
    p.add_argument("--dtype", default="int8", help="its dtype (default int8)")
    p.add_argument("--trials", type=int, default=48, help="trials per run (default 48)")
    p.add_argument("--spinners", default="1,2", help="spinning processes per busy run, comma-separated (default 1,2)")
    p.add_argument("--rounds", type=int, default=5, help="quiet re-timing rounds (default 5)")
    p.add_argument("--seed", type=int, default=0, help="tuning seed (default 0)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    outputs.add_arguments(p, "busy_host")
    args = p.parse_args()
    out = outputs.outputs(args, "busy_host")
    rows: list[dict] = []
    try:
        rows.append(run(args, "quiet", 0, out.fresh_dir(), None))
        for k in (int(x) for x in args.spinners.split(",") if x.strip()):
            rows.append(run(args, f"{k} spinning", k, out.fresh_dir(), rows[0]["wall_s"]))
    except Exception as err:
        if args.debug:
            traceback.print_exc()
        sys.exit(f"busy_host.py: error: {type(err).__name__}: {err}")
    finally:
        if rows:
            cmd = "python experiments/busy_host.py " + " ".join(sys.argv[1:])
            out.wrote(write(rows, out.out, cmd))


if __name__ == "__main__":
    main()
