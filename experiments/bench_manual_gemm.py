"""Benchmark (not a test): a hand-written schedule for float32 GEMM 1024^3 against numpy's sgemm.

Run from the repository root:

    python experiments/bench_manual_gemm.py [--rounds 7] [--out DIR | --update-tracked]

The script re-executes itself without ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` in its
environment (before numpy is imported), so OpenBLAS picks its own kernel for this CPU, and with
``OMP_WAIT_POLICY=passive`` unless that is set (libgomp threads sleep rather than spin while
idle, which matters on a machine shared with other jobs); the equivalent explicit command is

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive \
        python experiments/bench_manual_gemm.py

It builds the workload ``GMM`` shape 3 (``Z[b, i, j] = sum_k X[b, i, k] * Y[b, k, j]``, batch 1,
1024^3) with the schedule in :func:`schedule_gemm`, checks the result against numpy on fresh
random inputs, then times, interleaved over ``--rounds`` rounds so that both sides see the same
machine load: our module with 1 thread and with all threads (``mod.num_threads``), numpy with 1
and all threads (``threadpoolctl``), and our module without FMA contraction. It prints and
writes ``gemm_manual.csv`` and ``gemm_manual.md`` (and ``gemm_manual.png`` when matplotlib is
installed) under ``--out`` (default ``results/bench_manual_gemm/``, git-ignored;
``--update-tracked`` writes them into the tracked ``experiments/results/``, see
``experiments/outputs.py``).

GFLOPS = 2 * 1024^3 / seconds. "median" is the median over every timed repeat of every round,
"best" the fastest repeat (the least disturbed by other jobs on a shared machine).
"""

from __future__ import annotations

import os
import sys

_STRIP = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if (any(k in os.environ for k in _STRIP) or "OMP_WAIT_POLICY" not in os.environ) and "numpy" not in sys.modules:
    env = {k: v for k, v in os.environ.items() if k not in _STRIP}
    # libgomp's idle threads sleep instead of spinning: on a machine shared with other jobs a
    # spinning thread takes the core its partner needs (measured: 2 threads 44 -> 88 GFLOPS)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse  # noqa: E402
import csv  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import outputs  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import tensorsearch as ts  # noqa: E402
from tensorsearch.schedule import Schedule  # noqa: E402
from tensorsearch.target import resolve  # noqa: E402

N = 1024
FLOPS = 2 * N**3

# the register tile: MI rows x NI columns of Z accumulate in MI * NI / 16 zmm registers
MI, NI, KI = 8, 32, 8


def schedule_gemm(func, mi: int = MI, ni: int = NI, ki: int = KI, parallel: bool = True) -> Schedule:
    """The hand-written schedule (TVM's CPU GEMM tutorial, for AVX-512).

    * Y is packed into panels ``Y_global[b, j // ni, k, j % ni]`` (cache_read + transform_layout)
      so the inner loop reads ``ni`` contiguous floats per k; packing runs inside the kernel,
      parallel over k, vectorized over ``ni``.
    * Z loops ``b, j_o, i_o, k_o, k_i, i_i, j_i``: a j_o panel of Y (K x ni floats = 128 KiB)
      stays in L2 while i_o sweeps X; ``k_i`` and ``i_i`` are unrolled, ``j_i`` is vectorized
      (ni / 16 zmm vectors), j_o is parallel.
    * The accumulator is ``Z_local`` (cache_write "local", reverse_compute_at i_o): lowering
      shrinks it to ``mi x ni`` floats on the stack and LLVM keeps it in registers; its init
      (decompose_reduction at k_o) is outside the k loop and its copy-out is vectorized.
    """
    sch = Schedule(func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    i_o, i_i = sch.split(i, [None, mi])
    j_o, j_i = sch.split(j, [None, ni])
    k_o, k_i = sch.split(k, [None, ki])
    sch.reorder([b, j_o, i_o, k_o, k_i, i_i, j_i])
    acc = sch.cache_write(z, 0, "local")
    sch.reverse_compute_at(acc, i_o)
    init = sch.decompose_reduction(z, k_o)
    pack = sch.cache_read(z, 2, "global")
    sch.transform_layout(pack, ("write", 0), lambda bb, kk, jj: (bb, jj // ni, kk, jj % ni))
    sch.unroll(k_i)
    sch.unroll(i_i)
    sch.vectorize(j_i)
    ii, jj = sch.get_loops(init)[-2:]
    sch.unroll(ii)
    sch.vectorize(jj)
    a0, a1 = sch.get_loops(acc)[-2:]
    sch.unroll(a0)
    sch.vectorize(a1)
    pk, pj = sch.get_loops(pack)[-2:]
    _, pj_i = sch.split(pj, [None, ni])
    sch.vectorize(pj_i)
    if parallel:
        sch.parallel(pk)
        sch.parallel(j_o)
    return sch


def gflops(seconds: float) -> float:
    return FLOPS / seconds / 1e9


def time_numpy(x: np.ndarray, y: np.ndarray, out: np.ndarray, threads: int, number: int, repeat: int) -> list[float]:
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(x, y, out=out)  # warm up
        res = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                np.matmul(x, y, out=out)
            res.append((time.perf_counter() - t0) / number)
    return res


def blas_info() -> str:
    infos = [d for d in threadpool_info() if d.get("user_api") == "blas"]
    return "; ".join(
        f"{d.get('internal_api')} {d.get('version')} kernel {d.get('architecture')} "
        f"({d.get('threading_layer')}, {d.get('num_threads')} threads by default)"
        for d in infos
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (default 7)")
    ap.add_argument("--number", type=int, default=3, help="calls per timed repeat (default 3)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats per round (default 3)")
    outputs.add_arguments(ap, "bench_manual_gemm")
    args = ap.parse_args()
    dest = outputs.outputs(args, "bench_manual_gemm")
    out_dir = dest.out
    out_dir.mkdir(parents=True, exist_ok=True)
    all_threads = os.cpu_count() or 1

    wl = ts.workloads.get("GMM", 3, "float32")
    host = resolve(None)
    fma = host.with_fp_contract(True)
    sch = schedule_gemm(wl.func)
    mod = ts.build(sch.func, fma)
    mod_nofma = ts.build(sch.func, host)
    builds = {"ours (FMA contraction)": mod.build_seconds, "ours (no contraction)": mod_nofma.build_seconds}

    # correctness on fresh random inputs
    rng = np.random.default_rng()
    x = rng.standard_normal((1, N, N), dtype=np.float32)
    y = rng.standard_normal((1, N, N), dtype=np.float32)
    z = np.empty((1, N, N), np.float32)
    ref = np.matmul(x.astype(np.float64), y.astype(np.float64))
    for m in (mod, mod_nofma):
        for nt in (1, all_threads):
            z.fill(np.nan)
            m.num_threads = nt
            m(x, y, z)
            np.testing.assert_allclose(z, ref, rtol=1e-4, atol=1e-4 * np.sqrt(N))
    err = float(np.abs(z - ref).max())
    zn = np.empty_like(z)

    configs = {
        ("ours", 1): lambda: mod_time(mod, 1),
        ("ours", all_threads): lambda: mod_time(mod, all_threads),
        ("numpy", 1): lambda: time_numpy(x[0], y[0], zn[0], 1, args.number, args.repeat),
        ("numpy", all_threads): lambda: time_numpy(x[0], y[0], zn[0], all_threads, args.number, args.repeat),
        ("ours, no FMA contraction", 1): lambda: mod_time(mod_nofma, 1),
    }

    def mod_time(m, nt: int) -> list[float]:
        m.num_threads = nt
        return list(m.time(x, y, z, number=args.number, repeat=args.repeat).results)

    samples: dict[tuple[str, int], list[float]] = {c: [] for c in configs}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for c, fn in configs.items():
            samples[c].extend(fn())
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()

    rows = []
    for (name, nt), secs in samples.items():
        rows.append(
            {
                "implementation": name,
                "threads": nt,
                "median_gflops": gflops(statistics.median(secs)),
                "best_gflops": gflops(min(secs)),
                "median_ms": statistics.median(secs) * 1e3,
                "samples": len(secs),
            }
        )
    by = {(r["implementation"], r["threads"]): r for r in rows}

    def ratio(a: tuple[str, int], b: tuple[str, int], key: str) -> float:
        return by[a][key] / by[b][key]

    ratios = {
        "ours / numpy, 1 thread": ("ours", 1, "numpy", 1),
        f"ours / numpy, {all_threads} threads": ("ours", all_threads, "numpy", all_threads),
        f"ours parallel speedup ({all_threads} vs 1 threads)": ("ours", all_threads, "ours", 1),
        f"numpy parallel speedup ({all_threads} vs 1 threads)": ("numpy", all_threads, "numpy", 1),
        "FMA contraction speedup (1 thread)": ("ours", 1, "ours, no FMA contraction", 1),
    }
    ratio_rows = [
        (label, ratio((a, na), (b, nb), "median_gflops"), ratio((a, na), (b, nb), "best_gflops"))
        for label, (a, na, b, nb) in ratios.items()
    ]

    # ---- report
    env = [
        f"CPU: {platform.processor() or platform.machine()}, LLVM cpu {host.cpu}, {all_threads} logical CPUs",
        f"numpy {np.__version__}, BLAS: {blas_info()}",
        f"OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE in environment: {[k for k in _STRIP if k in os.environ] or 'none'}; "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}",
        f"load average before/after timing: {load_before[0]:.2f} / {load_after[0]:.2f}",
        f"max |ours - float64 reference| = {err:.3g} (fresh random inputs, both modules, 1 and {all_threads} threads)",
    ]
    lines = ["float32 GEMM 1024^3 (GMM shape 3), hand-written schedule vs numpy", *env, ""]
    lines.append(f"{'implementation':<28}{'threads':>8}{'median GFLOPS':>15}{'best GFLOPS':>13}{'median ms':>11}")
    for r in rows:
        lines.append(
            f"{r['implementation']:<28}{r['threads']:>8}{r['median_gflops']:>15.1f}"
            f"{r['best_gflops']:>13.1f}{r['median_ms']:>11.2f}"
        )
    lines.append("")
    for label, med, best in ratio_rows:
        lines.append(f"{label:<44} median {med:6.2f}   best {best:6.2f}")
    lines.append("")
    for label, s in builds.items():
        lines.append(f"build time {label}: {s:.2f} s")
    print("\n".join(lines))

    with open(out_dir / "gemm_manual.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cmd = "python experiments/bench_manual_gemm.py" + "".join(f" {a}" for a in sys.argv[1:])
    md = [
        "# float32 GEMM 1024^3: hand-written schedule vs numpy sgemm",
        "",
        f"Command: `{cmd}` (re-executes itself without "
        "`OPENBLAS_CORETYPE`/`OPENBLAS_L2_SIZE` and with `OMP_WAIT_POLICY=passive`; same as "
        "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive "
        f"{cmd}`)",
        f"with {args.rounds} interleaved rounds x {args.repeat} repeats x {args.number} calls.",
        "",
        *[f"- {e}" for e in env],
        "",
        "| implementation | threads | median GFLOPS | best GFLOPS | median ms |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[
            f"| {r['implementation']} | {r['threads']} | {r['median_gflops']:.1f} | {r['best_gflops']:.1f} | "
            f"{r['median_ms']:.2f} |"
            for r in rows
        ],
        "",
        "| ratio | median | best |",
        "| --- | ---: | ---: |",
        *[f"| {label} | {med:.2f} | {best:.2f} |" for label, med, best in ratio_rows],
        "",
        *[f"- build time, {label}: {s:.2f} s" for label, s in builds.items()],
        "",
        "The parallel speedups need two idle cores: read them together with the load average "
        "above (this machine has 2 vCPUs shared with other jobs; numpy's own 2-thread speedup "
        "shows how many cores were really free).",
        "",
        f"Schedule (tile {MI} x {NI} x {KI}); `ours` is built with `Target.with_fp_contract()` "
        "(`a * b + c` -> `llvm.fmuladd`, see docs/codegen.md):",
        "",
        "```python",
        sch.trace.as_python(),
        "```",
        "",
    ]
    (out_dir / "gemm_manual.md").write_text("\n".join(md))
    names = ["gemm_manual.csv", "gemm_manual.md"]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no plot)")
    else:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        labels = [f"{r['implementation']}\n{r['threads']} thr" for r in rows]
        ax.bar(labels, [r["median_gflops"] for r in rows])
        ax.set_ylabel("GFLOPS (median)")
        ax.set_title("float32 GEMM 1024^3")
        fig.tight_layout()
        fig.savefig(out_dir / "gemm_manual.png", dpi=120)
        names.append("gemm_manual.png")
    dest.wrote(names)


if __name__ == "__main__":
    main()
