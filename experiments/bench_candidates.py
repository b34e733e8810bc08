"""Benchmark (not a test): candidates per second of the search, base commit against the working tree.

Run from the repository root, under the shared lock:

    flock /tmp/tensorsearch-bench.lock python experiments/bench_candidates.py [--rounds 3] [--out DIR | --update-tracked]

It writes ``candidates.csv`` and ``candidates.md`` under ``--out`` (default
``results/bench_candidates/``, git-ignored; ``--update-tracked`` writes them into the tracked
``experiments/results/`` instead, see ``experiments/outputs.py``).

A *candidate* is a design-space trace replayed with fresh or mutated decisions, post-processed
and featurized (``parallel.run_job``, in this process, no Ray). For each workload (int8 GMM
1024^3 and float32 C2D shapes 0 and 1, on ``x86-znver4``) two kinds of job are timed:

* **fresh**: ``("sample", space, seed)`` jobs drawn as ``EvolutionarySearch._fresh`` draws them;
* **mutated**: a population of fresh candidates (made untimed) is mutated as
  ``EvolutionarySearch._evolve`` does (a mutator drawn by its probability, applied to a parent's
  design trace) and the mutants replayed; the timing covers the mutation and the replay, run as a
  search round runs them (under ``parallel.fewer_collections`` where the measured tree has it).

Every job counts, valid or not (an invalid one is refused by a primitive or a postprocessor).
Everything random comes from fixed seeds, so both programs see the same jobs: the benchmark checks
that they make the same candidates (their structural keys) and says so in the table ("no" also
when the working tree's design space itself changed since the base, not only when a speed-up
changed behaviour).

The base (``--base``, default c3b3689) is checked out with ``git worktree add`` under /tmp and
run in a subprocess with ``PYTHONPATH`` pointing at it; the working tree is copied under /tmp
when the run starts (so edits during the run do not mix in) and runs in a subprocess too. The two alternate, ``--rounds`` times; the table keeps the best rate of each (the machine is
shared, and the best is the least disturbed). ``--profile FILE`` instead runs the working tree's
jobs once under cProfile and writes the stats.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import outputs

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = [("GMM", 3, "int8"), ("C2D", 0, "float32"), ("C2D", 1, "float32")]
HARDWARE = "x86-znver4"
MODES = ("fresh", "mutated")


def _jobs_fresh(space, n: int, seed: int) -> list[tuple]:
    """``n`` sample jobs drawn the way the evolutionary search draws them."""
    rng = random.Random(seed)
    return [("sample", rng.randrange(len(space.traces)), rng.randrange(1 << 31)) for _ in range(n)]


def _pick_mutator(mutators, rng: random.Random):
    """A mutator drawn by its probability (``EvolutionarySearch._pick_mutator``)."""
    total = sum(p for _, p in mutators)
    x = rng.random() * total
    for m, p in mutators:
        x -= p
        if x <= 0:
            return m
    return mutators[-1][0]


def _run(space, jobs: list[tuple]) -> tuple[float, list[str]]:
    """Seconds to run ``jobs`` in this process and the keys of what they made ("-" when invalid)."""
    from tensorsearch.search.strategy.parallel import run_job

    t0 = time.perf_counter()
    cands = [run_job(space, j) for j in jobs]
    return time.perf_counter() - t0, [c.key if c is not None else "-" for c in cands]


def _mutated(space, n: int, seed: int) -> tuple[float, list[str]]:
    """Seconds to make and replay ``n`` mutants of a fresh population, and the mutants' keys."""
    from tensorsearch.search.mutator import default_mutators
    from tensorsearch.search.strategy.parallel import run_job

    parents = [c for c in (run_job(space, j) for j in _jobs_fresh(space, 8, seed + 1)) if c is not None]
    if not parents:
        return 0.0, []
    mutators = list(default_mutators().items())
    rng = random.Random(seed)
    keys: list[str] = []
    with _round_context():
        t0 = time.perf_counter()
        for _ in range(n):
            parent = parents[rng.randrange(len(parents))]
            mutant = _pick_mutator(mutators, rng).apply(parent.design_trace, rng)
            cand = None if mutant is None else run_job(space, ("replay", mutant, parent.space))
            keys.append(cand.key if cand is not None else "-")
        return time.perf_counter() - t0, keys


def _round_context():
    """What a search round runs under in the tensorsearch being measured: a round
    (``EvolutionarySearch.next_batch``) runs with fewer garbage collections where the measured
    tree has ``tensorsearch.search.parallel.fewer_collections``; in an older tree, nothing."""
    try:
        from tensorsearch.search.strategy.parallel import fewer_collections
    except ImportError:
        return contextlib.nullcontext()
    return fewer_collections()


def measure(n: int, seed: int) -> list[dict]:
    """Rates of every workload and mode in this process (whichever tensorsearch it imports)."""
    from tensorsearch import hardware, workloads
    from tensorsearch.search.space.design import DesignSpace

    hw = hardware.load(HARDWARE)
    rows = []
    for name, index, dtype in WORKLOADS:
        space = DesignSpace(workloads.get(name, index, dtype).func, hw)
        for mode in MODES:
            if mode == "fresh":
                seconds, keys = _run(space, _jobs_fresh(space, n, seed))
            else:
                seconds, keys = _mutated(space, n, seed)
            rows.append(
                {
                    "workload": f"{name}[{index}] {dtype}",
                    "mode": mode,
                    "jobs": len(keys),
                    "valid": sum(k != "-" for k in keys),
                    "seconds": seconds,
                    "keys": hashlib.sha256(",".join(keys).encode()).hexdigest()[:16],
                }
            )
    return rows


def _worktree(commit: str) -> Path:
    """A checkout of ``commit`` under /tmp (made once)."""
    path = Path(f"/tmp/ts-base-{commit}")
    if not (path / "tensorsearch").is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit], check=True)
    return path


def _snapshot() -> Path:
    """A copy of the working tree's package and YAML descriptors under /tmp, so that every round
    measures the same code even when the tree is edited during the run."""
    path = Path(tempfile.mkdtemp(prefix="ts-after-"))
    for name in ("tensorsearch", "hardware", "intrinsics"):
        shutil.copytree(REPO / name, path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return path


def _subprocess(root: Path, n: int, seed: int) -> list[dict]:
    """``measure`` in a fresh interpreter importing tensorsearch from ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root), "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--n", str(n), "--seed", str(seed)]
    out = subprocess.run(cmd, env=env, cwd=str(root), check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _write(rows: list[dict], dest: outputs.Outputs, command: str) -> None:
    out = dest.out
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "candidates.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"`{command}`",
        "",
        "| workload | jobs | before (cand/s) | after (cand/s) | after / before | same candidates |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['mode']} x{r['jobs']} ({r['valid']} valid) | {r['before']:.1f} | "
            f"{r['after']:.1f} | {r['ratio']:.2f}x | {'yes' if r['same'] else 'NO'} |"
        )
    (out / "candidates.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    dest.wrote(["candidates.csv", "candidates.md"])


def compare(args: argparse.Namespace, dest: outputs.Outputs) -> None:
    """Alternate base and working tree ``--rounds`` times; write the table of best rates."""
    base = _worktree(args.base)
    after = _snapshot()
    best: dict[tuple[str, str, str], float] = {}
    info: dict[tuple[str, str, str], dict] = {}
    for r in range(args.rounds):
        order = [("before", base), ("after", after)] if r % 2 == 0 else [("after", after), ("before", base)]
        for label, root in order:
            for row in _subprocess(root, args.n, args.seed):
                key = (label, row["workload"], row["mode"])
                rate = row["jobs"] / row["seconds"] if row["seconds"] else 0.0
                best[key] = max(best.get(key, 0.0), rate)
                info[key] = row
                print(f"round {r} {label:6s} {row['workload']:14s} {row['mode']:7s} {rate:6.1f} cand/s", flush=True)
    rows = []
    for name, index, dtype in WORKLOADS:
        for mode in MODES:
            w = f"{name}[{index}] {dtype}"
            before, after = best[("before", w, mode)], best[("after", w, mode)]
            b, a = info[("before", w, mode)], info[("after", w, mode)]
            rows.append(
                {
                    "workload": w,
                    "mode": mode,
                    "jobs": a["jobs"],
                    "valid": a["valid"],
                    "before": before,
                    "after": after,
                    "ratio": after / before if before else float("nan"),
                    "same": a["keys"] == b["keys"] and a["valid"] == b["valid"],
                }
            )
    shutil.rmtree(after, ignore_errors=True)
    _write(rows, dest, "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))


def profile(args: argparse.Namespace) -> None:
    """The working tree's jobs once under cProfile; the stats go to ``--profile``."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.runcall(measure, args.n, args.seed)
    prof.dump_stats(args.profile)
    pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=24, help="jobs per workload and mode")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", default="c3b3689", help="the commit to compare against")
    parser.add_argument("--profile", help="profile the working tree's jobs into this file instead")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    outputs.add_arguments(parser, "bench_candidates")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.n, args.seed)))
    elif args.profile:
        profile(args)
    else:
        compare(args, outputs.outputs(args, "bench_candidates"))


if __name__ == "__main__":
    main()
