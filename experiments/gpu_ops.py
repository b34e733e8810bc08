"""float16 operators on the GPU: tensorsearch's kernels against cuBLAS, measured in the same run.

    python experiments/gpu_ops.py [--ops GMM:1,4096,4096,4096 C2D:1,56,56,64,64,3,1,1]
                                  [--trials 128] [--hardware nvidia-sm90] [--out DIR | --update-tracked]

For each operator: samples ``--trials`` distinct candidates of the GPU design space (sampled and
built with nvcc in parallel processes), checks each once against the workload's numpy reference
on random inputs, times each with CUDA events, and writes gpu_ops.csv, gpu_ops.md and the best
kernel's CUDA C (gpu_best_<op>.cu) to the out dir (``experiments/outputs.py``: default
results/gpu_ops/, git-ignored). The reference is cuBLAS (cublasGemmEx, float16
inputs, float32 accumulation) on the operator's GEMM shape: M x N the output (N its last
dimension), K the reduction (a convolution's implicit GEMM, without the im2col). GMM also gets
two hand schedules of whole-reduction unit tiles. Needs a GPU, pycuda and nvcc: run it through
experiments/gpu_check.sh on a device.
"""

from __future__ import annotations

import argparse
import csv
import math
import multiprocessing
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import outputs  # experiments/outputs.py

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


def _start_worker(op: str, args: tuple, hw_name: str) -> None:
    """A build process: the workload and its design space, made once."""
    warnings.simplefilter("ignore")
    from tensorsearch.search.space.design import DesignSpace

    hw = ts.hardware.load(hw_name)
    func = ts.workloads.make(op, args, "float16").func
    _WORKER.update(hw=hw, func=func, space=DesignSpace(func, hw))


def _sample_and_build(seed: int):
    """(label, key, CudaModule or the error text) of the design-space sample drawn from ``seed``;
    seeds < 0 are the GEMM hand schedules of the whole-reduction unit (-w: w warps)."""
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
    except Exception as err:  # a failed build is a result
        return label, key, f"build: {err}"


def candidates(op: str, args: tuple, hw, trials: int, seed: int) -> list[tuple[str, object]]:
    """(label, CudaModule or error) of ``trials`` distinct valid design-space samples (and the
    GEMM hand schedules), sampled and built in spawned processes (this one may hold a CUDA context)."""
    ctx = multiprocessing.get_context("spawn")
    hand = [-2, -8] if op == "GMM" else []
    seeds = hand + [seed * 1_000_003 + k for k in range(trials * 4)]
    out, seen, workers, k = [], set(), os.cpu_count() or 1, 0
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_start_worker, initargs=(op, args, hw.name)) as pool:
        while len(out) < trials + len(hand) and k < len(seeds):
            batch, k = seeds[k : k + 2 * workers], k + 2 * workers
            for result in pool.map(_sample_and_build, batch):
                if result is not None and result[1] not in seen and len(out) < trials + len(hand):
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


def gemm_shape(wl) -> tuple[int, int, int]:
    """(M, N, K) of the operator as a GEMM: the output is M x N (N its last dimension)."""
    out = wl.func.buffer_map[-1][1]
    n = out.shape[-1].value
    return math.prod(x.value for x in out.shape) // n, n, wl.reduction_size


def measure(op: str, args: tuple, hw, trials: int, seed: int, blas, out_dir: str) -> list[dict]:
    wl = ts.workloads.make(op, args, "float16")
    name = f"{op}{list(args)}"
    t0 = time.perf_counter()
    built = candidates(op, args, hw, trials, seed)
    print(f"{name}: {len(built)} candidates sampled and built in {time.perf_counter() - t0:.1f} s", flush=True)
    m, n, k = gemm_shape(wl)
    ref = blas.time_gemm_f16f32(m, n, k)
    print(f"{name}: cuBLAS GEMM {m}x{n}x{k}: {ref * 1e3:.3f} ms, {wl.flops / ref / 1e12:.1f} TFLOP/s", flush=True)
    inputs = wl.make_inputs(seed)
    want = wl.reference(*inputs)
    rows = []
    for label, mod in built:
        row = {"op": name, "candidate": label, "cublas_ms": f"{ref * 1e3:.4f}"}
        if isinstance(mod, str):
            row["error"] = mod[:200]
        else:
            row["grid"], row["block"] = "x".join(map(str, mod.grid)), "x".join(map(str, mod.block))
            outs = [np.full(w.shape, np.nan, w.dtype) for w in want]
            try:
                mod(*inputs, *outs)
                wl.check(outs, want)
                t = mod.time(*inputs, *outs, repeat=3, min_repeat_ms=20).median
                row.update(latency_ms=f"{t * 1e3:.4f}", tflops=f"{wl.flops / t / 1e12:.1f}", vs_cublas=f"{ref / t:.3f}")
            except AssertionError as err:
                row["error"] = f"wrong result: {str(err).splitlines()[0]}"[:200]
            except Exception as err:
                row["error"] = f"run: {err}"[:200]
        rows.append(row)
    timed = [(float(r["latency_ms"]), m) for r, (_, m) in zip(rows, built, strict=True) if r.get("latency_ms")]
    if timed:
        with open(os.path.join(out_dir, f"gpu_best_{op}.cu"), "w") as f:
            f.write(min(timed, key=lambda t: t[0])[1].source)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="+", default=["GMM:1,4096,4096,4096", "C2D:1,56,56,64,64,3,1,1"])
    ap.add_argument("--trials", type=int, default=128, help="design-space candidates to measure per operator")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hardware", default="nvidia-sm90", help="the GPU's descriptor (default: H100/H200)")
    outputs.add_arguments(ap, "gpu_ops")
    args = ap.parse_args()
    dest = outputs.outputs(args, "gpu_ops")
    warnings.simplefilter("ignore")
    dest.out.mkdir(parents=True, exist_ok=True)
    hw = ts.hardware.load(args.hardware)
    from cublas import Cublas  # experiments/cublas.py

    blas = Cublas()  # the builders are spawned processes: this one's CUDA context does not reach them
    rows: list[dict] = []
    for spec in args.ops:
        op, _, shape = spec.partition(":")
        rows += measure(op, tuple(int(x) for x in shape.split(",")), hw, args.trials, args.seed, blas, str(dest.out))
    _write(str(dest.out), rows, hw)
    dest.wrote(["gpu_ops.csv", "gpu_ops.md"] + [f"gpu_best_{s.partition(':')[0]}.cu" for s in args.ops])


def _write(out: str, rows: list[dict], hw) -> None:
    keys = ["op", "candidate", "grid", "block", "latency_ms", "tflops", "vs_cublas", "cublas_ms", "error"]
    with open(os.path.join(out, "gpu_ops.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, keys, restval="")
        w.writeheader()
        w.writerows(rows)
    lines = [f"# float16 operators on {hw.name}: tensorsearch against cuBLAS (same run)", ""]
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op]
        ok = [r for r in mine if r.get("vs_cublas")]
        best = max(ok, key=lambda r: float(r["vs_cublas"])) if ok else None
        wrong = sum(1 for r in mine if r.get("error", "").startswith("wrong"))
        summary = "none ran"
        if best:
            summary = f"best {best['candidate']}: {best['latency_ms']} ms, {best['tflops']} TFLOP/s, "
            summary += f"**{best['vs_cublas']} of cuBLAS**"
        lines.append(
            f"- {op}: cuBLAS {mine[0]['cublas_ms']} ms; {len(ok)} of {len(mine)} ran, {wrong} wrong; {summary}"
        )
    lines += [
        "",
        "| op | candidate | grid | block | ms | TFLOP/s | / cuBLAS | error |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    lines += [f"| {' | '.join(str(r.get(k, '')) for k in keys if k != 'cublas_ms')} |" for r in rows]
    with open(os.path.join(out, "gpu_ops.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[: 2 + len({r["op"] for r in rows})]))


if __name__ == "__main__":
    main()
