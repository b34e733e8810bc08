"""Benchmark (not a test): a hand-scheduled AVX-512 VNNI int8 GEMM 1024^3 against vpdpbusd peak.

Run from the repository root:

    python experiments/bench_vnni_gemm.py [--rounds 7] [--out DIR | --update-tracked]

It writes ``vnni_gemm.csv`` and ``vnni_gemm.md`` under ``--out`` (default
``results/bench_vnni_gemm/``, git-ignored; ``--update-tracked`` writes them into the tracked
``experiments/results/``, see ``experiments/outputs.py``).

The target: the tensorized int8 GEMM (``GMM`` batch 1, 1024^3, X uint8 [i, k], Y int8
[k, j] in plain layout, Z int32) reaches at least 50% of the vpdpbusd peak of this machine,
measured in the same run by a register-only loop.

* **ours** -- :func:`schedule_vnni_gemm`: the VNNI intrinsic comes from YAML
  (``hardware.load("x86-emeraldrapids")``); the packing of Y into the VNNI layout runs inside the
  kernel and is counted in its time.
* **tile_with_intrin, unscheduled** -- the auto-tensorization pipeline alone
  (``tile_with_intrin`` + ``tensorize``, no loop schedule), for reference.
* **peak** -- an LLVM IR function built with llvmlite: ``n`` iterations of ``A`` independent
  ``llvm.x86.avx512.vpdpbusd.512`` accumulations on registers (no memory access in the loop),
  for A in 12 and 24; the faster of the two is one peak sample.

Ops: every vpdpbusd does 16 lanes x 4 multiply-adds = 64 MACs = 128 ops; the GEMM does
2 * 1024^3 ops. GOPS = ops / seconds / 1e9. The machine is shared with other jobs, so the
configurations are interleaved over ``--rounds`` rounds and every timed repeat of a module
(``--number`` calls) is paired with a peak sample taken just before it; the headline ratio is the
median over all pairs of (module GOPS) / (peak GOPS). "median" is the median over every repeat,
"best" the fastest one. Correctness is checked exactly against numpy (int64 matmul) on fresh
random inputs with 1 and all threads before timing.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import os
import platform
import statistics
import sys
import time

import llvmlite.binding as llvm
import numpy as np
import outputs

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.intrin import tile_with_intrin
from tensorsearch.schedule import Schedule

N = 1024
OPS = 2 * N**3
OPS_PER_VPDPBUSD = 16 * 4 * 2

# the register tile: MI rows of X (each broadcasting 4 bytes) x NJ groups of 16 int32 lanes of Z
MI, NJ = 6, 4


def _vnni():
    hw = hardware.load("x86-emeraldrapids")
    return next(i for i in hw.intrinsics if "vnni" in i.name)


def schedule_vnni_gemm(func, vnni, mi: int = MI, nj: int = NJ, pack: str = "blocked") -> Schedule:
    """The hand schedule: the steps of ``tile_with_intrin`` interleaved with a register tiling.

    * Z loops ``b, j_o, i_o, k_o, i_i, j_m | j_i, k_i``: ``j_i`` (16 lanes) x ``k_i`` (4) is the
      intrinsic's tile (blockized, then tensorized into one vpdpbusd); ``i_i`` (``mi`` rows) and
      ``j_m`` (``nj`` groups of 16 columns) are unrolled so ``mi * nj`` zmm accumulators stay in
      registers across the whole ``k_o`` loop (LLVM promotes the Z tile to registers: the loop
      body is ``mi`` vpbroadcastd + ``nj`` 64-byte loads of Y + ``mi * nj`` vpdpbusd); ``j_o`` is
      parallel.
    * The init (``decompose_reduction`` at ``k_o``) zeroes the tile before the k loop; the
      update accumulates straight into Z (a ``cache_write`` stage measured slower: its 4 MiB
      global buffer is not compacted under the parallel loop and costs an extra copy).
    * Y is packed inside the kernel (``cache_read`` + ``transform_layout``) into
      ``Y_global[b, j // 16, k // 4, j % 16, k % 4]``: each 16-column panel is contiguous over k,
      so a k step of one panel is one 64-byte load (the intrinsic's B tile) and consecutive k
      steps are adjacent (the plain VNNI layout ``[k // 4, j, k % 4]`` strides 4 KiB per k step,
      which aliases in L1). ``pack="blocked"``: the packing loops are split into 16 x 4 byte
      tiles, ``k // 4, j // 16, j % 16, k % 4`` with the two inner loops unrolled, so that LLVM
      turns each tile into byte shuffles of four 16-byte rows of Y (measured 0.09 ms for the
      whole 1 MiB Y against 1.0 ms with the inner j loop vectorized, ``pack="vectorized"``,
      and about 1-2 ms left plain, ``pack="plain"``).
    """
    sch = Schedule(func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    i_o, i_i = sch.split(i, [None, mi])
    j_o, j_m, j_i = sch.split(j, [None, nj, 16])
    k_o, k_i = sch.split(k, [None, 4])
    sch.reorder([b, j_o, i_o, k_o, i_i, j_m, j_i, k_i])
    sch.decompose_reduction(z, k_o)
    pack_block = sch.cache_read(z, 2, "global")
    sch.transform_layout(pack_block, ("write", 0), lambda bb, kk, jj: (bb, jj // 16, kk // 4, jj % 16, kk % 4))
    tile = sch.blockize(j_i)
    sch.unroll(i_i)
    sch.unroll(j_m)
    sch.tensorize(tile, vnni)
    pk, pj = sch.get_loops(pack_block)[-2:]
    if pack == "blocked":
        k0, k1 = sch.split(pk, [None, 4])
        j0, j1 = sch.split(pj, [None, 16])
        sch.reorder([k0, j0, j1, k1])
        sch.unroll(j1)
        sch.unroll(k1)
    elif pack == "vectorized":
        sch.vectorize(pj)
    elif pack != "plain":
        raise ValueError(f"pack must be blocked, vectorized or plain, not {pack!r}")
    sch.parallel(j_o)
    return sch


def unscheduled(func, vnni) -> Schedule:
    sch = Schedule(func)
    block = tile_with_intrin(sch, sch.get_block("Z"), vnni)
    sch.tensorize(block, vnni)
    return sch


# ---------------------------------------------------------------- peak: register-only vpdpbusd loop


def _peak_ir(accs: int, op: str = "vpdpbusd", lanes: int = 16) -> str:
    """LLVM IR of ``peak(n, seed)``: ``accs`` independent chains of ``op`` on registers, ``n`` times.

    ``vpdpbusd``: ``<16 x i32>`` accumulators (AVX-512 VNNI); ``fma``: ``<lanes x float>``
    fused multiply-adds, the float32 vector peak (``lanes`` 16 on AVX-512, 8 on AVX2)."""
    if op == "vpdpbusd":
        acc_t, add = "<16 x i32>", "add"
        head = [
            "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <64 x i8>, <64 x i8>)",
            "define i32 @peak(i64 %n, i32 %seed) {",
            "entry:",
            "  %s0 = insertelement <16 x i32> undef, i32 %seed, i32 0",
            "  %s = shufflevector <16 x i32> %s0, <16 x i32> undef, <16 x i32> zeroinitializer",
            "  %sb = bitcast <16 x i32> %s to <64 x i8>",
            f"  %s1 = add <16 x i32> %s, <{', '.join(['i32 1'] * 16)}>",
            "  %tb = bitcast <16 x i32> %s1 to <64 x i8>",
        ]
        step = "call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %a{a}, <64 x i8> %sb, <64 x i8> %tb)"
        tail = ["  %e = extractelement <16 x i32> {acc}, i32 0", "  ret i32 %e"]
    elif op == "fma":
        acc_t, add = f"<{lanes} x float>", "fadd"
        head = [
            f"declare {acc_t} @llvm.fma.v{lanes}f32({acc_t}, {acc_t}, {acc_t})",
            "define i32 @peak(i64 %n, i32 %seed) {",
            "entry:",
            "  %f = sitofp i32 %seed to float",
            f"  %s0 = insertelement {acc_t} undef, float %f, i32 0",
            f"  %s = shufflevector {acc_t} %s0, {acc_t} undef, <{lanes} x i32> zeroinitializer",
            f"  %s1 = fmul {acc_t} %s, %s",
        ]
        step = f"call {acc_t} @llvm.fma.v{lanes}f32({acc_t} %a{{a}}, {acc_t} %s, {acc_t} %s1)"
        tail = [f"  %ef = extractelement {acc_t} {{acc}}, i32 0", "  %e = fptosi float %ef to i32", "  ret i32 %e"]
    else:
        raise ValueError(f"op must be vpdpbusd or fma, got {op!r}")
    lines = [*head, "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%i1, %loop]"]
    lines += [f"  %a{a} = phi {acc_t} [%s, %entry], [%b{a}, %loop]" for a in range(accs)]
    lines += [f"  %b{a} = " + step.format(a=a) for a in range(accs)]
    lines += ["  %i1 = add i64 %i, 1", "  %c = icmp ult i64 %i1, %n", "  br i1 %c, label %loop, label %exit", "exit:"]
    acc = "%b0"
    for a in range(1, accs):  # every accumulator feeds the result: none is dead
        lines.append(f"  %r{a} = {add} {acc_t} {acc}, %b{a}")
        acc = f"%r{a}"
    lines += [*(t.format(acc=acc) for t in tail), "}"]
    return "\n".join(lines)


AMX_TILES = ((0, 4, 6), (1, 4, 7), (2, 5, 6), (3, 5, 7))  # (C, A, B) tile registers of each tdpbusd
OPS_PER_TDPBUSD = 16 * 16 * 64 * 2


def _amx_peak_ir() -> str:
    """LLVM IR of ``peak(n, seed)`` for AMX: the eight tile registers configured as 16 rows of 64
    bytes, the accumulators zeroed and the A and B tiles loaded with random bytes, then ``n`` times
    four ``tdpbusd`` into four accumulator tiles from two A and two B tiles (the 2 x 2 blocking
    that uses every register), no memory access in the loop. The operands must not be zero: on an
    Emerald Rapids VM, ``tdpbusd`` on zeroed tiles ran up to 2.5 times as fast as on random ones."""
    cfg = [0] * 64
    cfg[0] = 1  # palette
    for t in range(8):
        cfg[16 + 2 * t], cfg[48 + t] = 64, 16  # bytes per row (low byte), rows
    data = "".join(f"\\{b:02X}" for b in cfg)
    noise = "".join(f"\\{b:02X}" for b in np.random.default_rng(0).integers(0, 256, 1024, dtype=np.uint8))
    operands = sorted({t for _, a, b in AMX_TILES for t in (a, b)})
    lines = [
        "declare void @llvm.x86.ldtilecfg(ptr)",
        "declare void @llvm.x86.tilezero(i8)",
        "declare void @llvm.x86.tileloadd64(i8, ptr, i64)",
        "declare void @llvm.x86.tdpbusd(i8, i8, i8)",
        "declare void @llvm.x86.tilerelease()",
        f'@cfg = private constant [64 x i8] c"{data}", align 64',
        f'@noise = private constant [1024 x i8] c"{noise}", align 64',
        "define i32 @peak(i64 %n, i32 %seed) {",
        "entry:",
        "  call void @llvm.x86.ldtilecfg(ptr @cfg)",
        *(f"  call void @llvm.x86.tilezero(i8 {c})" for c, _, _ in AMX_TILES),
        *(f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr @noise, i64 64)" for t in operands),
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
        *(f"  call void @llvm.x86.tdpbusd(i8 {c}, i8 {a}, i8 {b})" for c, a, b in AMX_TILES),
        "  %i1 = add i64 %i, 1",
        "  %c = icmp ult i64 %i1, %n",
        "  br i1 %c, label %loop, label %exit",
        "exit:",
        "  call void @llvm.x86.tilerelease()",
        "  ret i32 %seed",
        "}",
    ]
    return "\n".join(lines)


class Peak:
    """``accs`` independent chains of ``op`` (vpdpbusd, or ``fma`` of ``lanes`` floats) on
    registers, ``n`` iterations per call; ``time`` gives G(FL)OPS, a multiply-add counting 2.
    ``op="tdpbusd"``: AMX's loop of four tile multiplies an iteration (``accs`` is then 4).
    ``scale``: how many 12-accumulator vpdpbusd iterations one iteration takes, about, so that
    callers can size ``n`` alike for every op."""

    def __init__(self, accs: int, op: str = "vpdpbusd", lanes: int = 16):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        if op == "tdpbusd":
            from tensorsearch.runtime.module import request_xfeature

            request_xfeature(18)  # Linux grants AMX's tile data per process
            accs = len(AMX_TILES)
        self.accs, self.op = accs, op
        self.ops_per_instruction = {"vpdpbusd": OPS_PER_VPDPBUSD, "tdpbusd": OPS_PER_TDPBUSD}.get(op, 2 * lanes)
        self.scale = 16 * accs / 12 if op == "tdpbusd" else accs / 12  # tdpbusd: one per 16 cycles
        target = llvm.Target.from_default_triple()
        self.tm = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
        )
        mod = llvm.parse_assembly(_amx_peak_ir() if op == "tdpbusd" else _peak_ir(accs, op, lanes))
        mod.verify()
        self.assembly = self.tm.emit_assembly(mod)
        self._ee = llvm.create_mcjit_compiler(mod, self.tm)
        self._ee.finalize_object()
        self._fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32)(
            self._ee.get_function_address("peak")
        )
        loop = self.assembly.split({"vpdpbusd": "vpdpbusd", "tdpbusd": "tdpbusd\t"}.get(op, "vfmadd"))
        self.vpdpbusd_in_asm = len(loop) - 1

    def time(self, n: int, repeat: int) -> list[float]:
        """G(FL)OPS of each of ``repeat`` calls of ``n`` iterations."""
        self._fn(1000, 3)  # warm up
        res = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self._fn(n, 3)
            dt = time.perf_counter() - t0
            res.append(n * self.accs * self.ops_per_instruction / dt / 1e9)
        return res


# ---------------------------------------------------------------- main


def gops(seconds: float) -> float:
    return OPS / seconds / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (default 7)")
    ap.add_argument("--number", type=int, default=3, help="calls per timed repeat (default 3)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats per round (default 3)")
    ap.add_argument("--peak-iters", type=int, default=5_000_000, help="iterations per peak call (default 5e6)")
    outputs.add_arguments(ap, "bench_vnni_gemm")
    args = ap.parse_args()
    dest = outputs.outputs(args, "bench_vnni_gemm")
    out_dir = dest.out
    all_threads = os.cpu_count() or 1

    wl = workloads.make("GMM", (1, N, N, N), "int8")
    vnni = _vnni()
    host = ts.hardware.load("host")
    if not host.has_feature("+avx512vnni"):
        sys.exit("this CPU has no AVX-512 VNNI: nothing to measure")

    sch = schedule_vnni_gemm(wl.func, vnni)
    sch_vp = schedule_vnni_gemm(wl.func, vnni, pack="vectorized")
    sch_un = unscheduled(wl.func, vnni)
    mods = {
        "ours": ts.build(sch.func),
        "ours, pack loop vectorized": ts.build(sch_vp.func),
        "tile_with_intrin, unscheduled": ts.build(sch_un.func),
    }
    for name, m in mods.items():
        assert "vpdpbusd" in m.assembly, name
    peaks = [Peak(12), Peak(24)]

    # correctness: exact against numpy on fresh random inputs, 1 and all threads
    rng = np.random.default_rng()
    inputs = wl.make_inputs(rng)
    assert all(np.count_nonzero(a) > a.size // 2 for a in inputs), "inputs should not be mostly zero"
    x, y = inputs
    ref = np.matmul(x.astype(np.int64), y.astype(np.int64))
    assert np.array_equal(ref, wl.reference(*inputs)[0])
    z = np.empty((1, N, N), np.int32)
    for name, m in mods.items():
        for nt in (1, all_threads):
            z.fill(-12345)
            m.num_threads = nt
            m(x, y, z)
            np.testing.assert_array_equal(z, ref, err_msg=f"{name}, {nt} threads")
    checked = f"exact (max |ours - numpy int64| = 0) on fresh random inputs, {len(mods)} modules x 1 and {all_threads} threads"

    def peak_gops() -> float:
        """One peak sample: the faster of the 12- and 24-accumulator loops (about 10 ms each)."""
        return max(peaks[0].time(args.peak_iters, 1)[0], peaks[1].time(args.peak_iters // 2, 1)[0])

    configs = {
        ("ours", 1): (mods["ours"], 1, args.number),
        ("ours, pack loop vectorized", 1): (mods["ours, pack loop vectorized"], 1, args.number),
        ("ours", all_threads): (mods["ours"], all_threads, args.number),
        ("tile_with_intrin, unscheduled", 1): (mods["tile_with_intrin, unscheduled"], 1, 1),
    }
    peak_key = ("peak (register-only vpdpbusd)", 1)
    # every timed repeat of a module is paired with a peak sample taken just before it, so that
    # the pair's ratio sees (nearly) the same load of the shared machine
    pairs: dict[tuple[str, int], list[tuple[float, float]]] = {c: [] for c in configs}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for c, (m, nt, number) in configs.items():
            m.num_threads = nt
            m(x, y, z)  # warm up
            repeat = args.repeat if number > 1 else 1
            for _ in range(repeat):
                p = peak_gops()
                pairs[c].append((gops(m.time(x, y, z, number=number, repeat=1).results[0]), p))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    load_after = os.getloadavg()

    peak_all = [p for ps in pairs.values() for _, p in ps]
    rows = [
        {
            "implementation": peak_key[0],
            "threads": 1,
            "median_gops": round(statistics.median(peak_all), 1),
            "best_gops": round(max(peak_all), 1),
            "median_ms": "",
            "ratio_median_of_pairs": 1.0,
            "ratio_best_to_best": 1.0,
            "ratio_of_medians": 1.0,
            "samples": len(peak_all),
        }
    ]
    for (name, nt), ps in pairs.items():
        ours = [g for g, _ in ps]
        med = statistics.median(ours)
        rows.append(
            {
                "implementation": name,
                "threads": nt,
                "median_gops": round(med, 1),
                "best_gops": round(max(ours), 1),
                "median_ms": round(OPS / med / 1e6, 3),
                "ratio_median_of_pairs": round(statistics.median(g / p for g, p in ps), 3),
                "ratio_best_to_best": round(max(ours) / max(peak_all), 3),
                "ratio_of_medians": round(med / statistics.median(peak_all), 3),
                "samples": len(ps),
            }
        )

    env = [
        f"CPU: {platform.processor() or platform.machine()}, LLVM cpu {llvm.get_host_cpu_name()}, "
        f"{all_threads} logical CPUs (shared with other jobs)",
        f"numpy {np.__version__}, llvmlite {llvm.llvm_version_info}",
        f"load average before/after timing: {load_before[0]:.2f} / {load_after[0]:.2f}",
        f"correctness: {checked}",
        f"peak loop: {peaks[0].accs} and {peaks[1].accs} independent zmm accumulators "
        f"({peaks[0].vpdpbusd_in_asm} and {peaks[1].vpdpbusd_in_asm} vpdpbusd in their assembly), "
        f"{args.peak_iters} and {args.peak_iters // 2} iterations per call; the faster of the two is one sample",
        "build times: " + ", ".join(f"{k} {m.build_seconds:.2f} s" for k, m in mods.items()),
    ]
    header = [
        "implementation",
        "threads",
        "median GOPS",
        "best GOPS",
        "median ms",
        "ours/peak, median of pairs",
        "best/best peak",
        "median/median peak",
    ]
    table = [
        [
            r["implementation"],
            str(r["threads"]),
            f"{r['median_gops']:.1f}",
            f"{r['best_gops']:.1f}",
            f"{r['median_ms']:.2f}" if r["median_ms"] != "" else "",
            f"{r['ratio_median_of_pairs']:.2f}",
            f"{r['ratio_best_to_best']:.2f}",
            f"{r['ratio_of_medians']:.2f}",
        ]
        for r in rows
    ]
    print("int8 GEMM 1024^3 (GMM, uint8 x int8 -> int32), hand-scheduled VNNI vs register-only vpdpbusd peak")
    print(*env, sep="\n")
    print()
    print("".join(f"{h:<31}" if i == 0 else f"{h:>28}" for i, h in enumerate(header)))
    for t in table:
        print("".join(f"{c:<31}" if i == 0 else f"{c:>28}" for i, c in enumerate(t)))

    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "vnni_gemm.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cmd = "python experiments/bench_vnni_gemm.py" + "".join(f" {a}" for a in sys.argv[1:])
    md = [
        "# int8 GEMM 1024^3 with AVX-512 VNNI: hand schedule vs the measured vpdpbusd peak",
        "",
        f"Command: `{cmd}` ({args.rounds} interleaved rounds x {args.repeat} repeats x {args.number} calls; "
        "the unscheduled module 1 call per round; every repeat paired with a peak sample).",
        "",
        *[f"- {e}" for e in env],
        "",
        "| " + " | ".join(header) + " |",
        "| --- | " + " | ".join("---:" for _ in header[1:]) + " |",
        *["| " + " | ".join(t) + " |" for t in table],
        "",
        "GOPS = 2 * 1024^3 / seconds (the peak: 128 ops per vpdpbusd). Every timed repeat of a module "
        f"({args.number} calls) is paired with a peak sample taken just before it. `ours/peak, median of "
        "pairs`: the median of the pairs' ratios (the least sensitive to the shared machine's load, the "
        "headline figure); `best/best peak`: the module's fastest repeat over the fastest peak sample; "
        "`median/median peak`: medians of each. The packing of Y into the VNNI layout runs inside the "
        "`ours` modules and is counted in their time. The peak is one core's; the 2-thread row is "
        "divided by it too and needs two idle cores (read it with the load average above).",
        "",
        f"Schedule (register tile {MI} rows x {NJ} x 16 lanes, {MI * NJ} zmm accumulators):",
        "",
        "```python",
        sch.trace.as_python(),
        "```",
        "",
    ]
    (out_dir / "vnni_gemm.md").write_text("\n".join(md))
    dest.wrote(["vnni_gemm.csv", "vnni_gemm.md"])


if __name__ == "__main__":
    main()
