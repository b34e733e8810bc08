"""float16 GEMM on the GPU: tensorsearch's kernels against cuBLAS, measured in the same run.

    python experiments/gpu_gemm.py --out results/gpu [--size 4096] [--trials 32]

Builds the candidates (nvcc, in parallel), checks each once against numpy on random inputs, times
each with CUDA events, and writes gpu_gemm.csv and gpu_gemm.md to --out: every candidate's
latency, TFLOP/s and ratio to cuBLAS (cublasGemmEx, float16 inputs, float32 accumulation and
result). Needs a GPU, pycuda and nvcc; run it through experiments/gpu_check.sh on a device.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorsearch as ts
from tensorsearch.runtime.cuda import build_cuda
from tensorsearch.schedule import Schedule


def hand_schedule(func, hw, warps: int = 2) -> Schedule:
    """16x16 warp tiles over the whole reduction (the unit), ``warps`` warps a block along j."""
    sch = Schedule(func, hardware=hw)
    b = sch.get_block("Z")
    _bb, i, j, k = sch.get_loops(b)
    io, ii = sch.split(i, [None, 16])
    jo, jt, ji = sch.split(j, [None, warps, 16])
    ko, ki = sch.split(k, [None, 16])
    sch.reorder(io, jo, jt, ii, ji, ko, ki)
    sch.bind(io, "blockIdx.x")
    sch.bind(jo, "blockIdx.y")
    sch.bind(jt, "threadIdx.y")
    sch.tensorize(sch.blockize(ii), "wmma_16x16x16_f16f32")
    return sch


_WORKER: dict = {}


def _start_worker(n: int, hw_name: str) -> None:
    """A build process: the workload and its design space, made once."""
    warnings.simplefilter("ignore")
    from tensorsearch.search.space import DesignSpace

    hw = ts.hardware.load(hw_name)
    func = ts.workloads.make("GMM", (1, n, n, n), "float16").func
    _WORKER.update(hw=hw, func=func, space=DesignSpace(func, hw))


def _sample_and_build(seed: int):
    """(label, key, CudaModule or the error text) of the design-space sample drawn from ``seed``;
    seeds < 0 are the hand schedules of the whole-reduction unit (-w: w warps)."""
    hw, func = _WORKER["hw"], _WORKER["func"]
    if seed < 0:
        label, key, sched = f"unit tiles, {-seed} warps", f"hand{seed}", hand_schedule(func, hw, -seed).func
    else:
        cand = _WORKER["space"].sample_space(0, seed)
        if cand is None:
            return None
        label, key, sched = f"space: {_choices(cand.trace)}", cand.key, cand.func
    try:
        return label, key, build_cuda(sched, hw)
    except Exception as err:
        return label, key, f"build: {err}"


def candidates(n: int, hw, trials: int, seed: int) -> list[tuple[str, object]]:
    """(label, CudaModule or error): the hand schedules of the whole-reduction unit, then
    ``trials`` distinct valid samples of the design space (MultiLevelTilingTensorCore), sampled
    and built in parallel processes (spawned: this process may hold a CUDA context)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    seeds = [-2, -8] + [seed * 1_000_003 + k for k in range(trials * 4)]
    out, seen, workers, k = [], set(), os.cpu_count() or 1, 0
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker, initargs=(n, hw.name)) as pool:
        while len(out) < trials + 2 and k < len(seeds):
            batch, k = seeds[k : k + 2 * workers], k + 2 * workers
            for result in pool.map(_sample_and_build, batch):
                if result is not None and result[1] not in seen and len(out) < trials + 2:
                    seen.add(result[1])
                    out.append((result[0], result[2]))
    return out


def _choices(trace) -> str:
    """The sampled sizes, as MultiLevelTilingTensorCore draws them: warps and warp tiles along i,
    then along j, then the k steps of a shared-memory slice."""
    values = [i.arg_dict["candidates"][i.decision] for i in trace.insts if i.kind.name == "sample_categorical"]
    if len(values) != 5:
        return " ".join(map(str, values))
    wi, ti, wj, tj, k = values
    return f"warps {wi}x{wj}, warp tiles {ti}x{tj}, k steps {k}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--trials", type=int, default=48, help="design-space candidates to measure")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hardware", default="nvidia-sm90", help="the GPU's descriptor (default: H100/H200)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.makedirs(args.out, exist_ok=True)
    n, hw = args.size, ts.hardware.load(args.hardware)
    flops = 2.0 * n**3

    t0 = time.perf_counter()
    built = candidates(n, hw, args.trials, args.seed)
    print(f"{len(built)} candidates sampled and built in {time.perf_counter() - t0:.1f} s", flush=True)

    from cublas import Cublas  # experiments/cublas.py

    blas = Cublas()
    ref = blas.time_gemm_f16f32(n, n, n)
    print(f"cuBLAS ({os.path.basename(blas.path)}): {ref * 1e3:.3f} ms, {flops / ref / 1e12:.1f} TFLOP/s", flush=True)

    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((1, n, n)).astype(np.float16)
    y = rng.standard_normal((1, n, n)).astype(np.float16)
    want = x[0].astype(np.float32) @ y[0].astype(np.float32)
    rows = []
    for label, mod in built:
        row = {"candidate": label, "latency_ms": "", "tflops": "", "vs_cublas": "", "error": ""}
        if isinstance(mod, str):
            row["error"] = mod[:200]
        else:
            row["grid"], row["block"] = "x".join(map(str, mod.grid)), "x".join(map(str, mod.block))
            z = np.full((1, n, n), np.nan, np.float32)
            result = _try(lambda mod=mod, z=z: (mod(x, y, z), mod.time(x, y, z, repeat=3, min_repeat_ms=20))[1])
            if isinstance(result, Exception):
                row["error"] = f"run: {result}"[:200]
            elif not np.allclose(z[0], want, rtol=1e-2, atol=0.5):
                row["error"] = f"wrong result: max error {np.nanmax(np.abs(z[0] - want)):.3g}"
            else:
                t = result.median
                row.update(latency_ms=f"{t * 1e3:.3f}", tflops=f"{flops / t / 1e12:.1f}", vs_cublas=f"{ref / t:.3f}")
        rows.append(row)
        print(row, flush=True)
    _write(args.out, rows, n, hw, ref, flops)
    timed = [(float(r["latency_ms"]), m) for r, (_, m) in zip(rows, built, strict=True) if r["latency_ms"]]
    if timed:
        with open(os.path.join(args.out, "gpu_gemm_best.cu"), "w") as f:
            f.write(min(timed, key=lambda t: t[0])[1].source)


def _try(fn):
    try:
        return fn()
    except Exception as err:
        return err


def _write(out: str, rows: list[dict], n: int, hw, ref: float, flops: float) -> None:
    keys = ["candidate", "grid", "block", "latency_ms", "tflops", "vs_cublas", "error"]
    with open(os.path.join(out, "gpu_gemm.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys, restval="")
        w.writeheader()
        w.writerows(rows)
    ok = [r for r in rows if r["vs_cublas"]]
    best = max(ok, key=lambda r: float(r["vs_cublas"])) if ok else None
    lines = [
        f"# float16 GEMM {n}^3 on {hw.name}: tensorsearch against cuBLAS",
        "",
        f"cuBLAS: {ref * 1e3:.3f} ms ({flops / ref / 1e12:.1f} TFLOP/s). Candidates measured: {len(ok)} of {len(rows)}.",
        f"Best: {best['candidate']}, {best['latency_ms']} ms, {best['vs_cublas']} of cuBLAS."
        if best
        else "No candidate ran.",
        "",
        "| candidate | grid | block | ms | TFLOP/s | / cuBLAS | error |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    lines += [f"| {' | '.join(str(r.get(k, '')) for k in keys)} |" for r in rows]
    with open(os.path.join(out, "gpu_gemm.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:4]))


if __name__ == "__main__":
    main()
