"""How fast can a `vpdpbusd` loop run on this CPU once it loads its operands?

The int8 targets are fractions of a register-only `vpdpbusd` peak. This probe times the inner
step of our tuned int8 GEMM (4 rows x 4 vectors: 16 `vpdpbusd` on 16 accumulators, 4 four-byte
broadcasts of `X` and 4 64-byte loads of the packed `Y` a step, operands in L1) in hand-written
forms, against the register-only loop, interleaved over rounds on all threads at once:

    python experiments/vnni_loop_forms.py [--rounds 12] [--threads 2] [--steps 20000000]

Needs gcc and an AVX-512 VNNI CPU. Prints a Markdown table: GOPS (2 ops a multiply-add), the
median and best of the rounds, and each form's median over the register-only median.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ACC = [(r, v) for r in range(4) for v in range(4)]  # accumulator zmm(4r+v): row r of X, vector v of Y


def _y_loads(indexed: bool) -> str:
    addr = "(%[y],%%rdx)" if indexed else "(%%rsi)"
    return "".join(f"vmovdqu64 {4096 * v}{addr}, %%zmm{16 + v}\\n" for v in range(4))


def _x_broadcasts(indexed: bool) -> str:
    addr = "(%[x],%%rax,4)" if indexed else "(%%rdi)"
    return "".join(f"vpbroadcastd {1024 * r}{addr}, %%zmm{20 + r}\\n" for r in range(4))


def _dots(x: str = "reg", y: str = "reg") -> str:
    """16 vpdpbusd: X from a register, or embedded-broadcast memory ({1to16}); Y from a register or memory."""
    out = []
    for r, v in ACC:
        if x == "reg" and y == "reg":
            out.append(f"vpdpbusd %%zmm{16 + v}, %%zmm{20 + r}, %%zmm{4 * r + v}\\n")
        elif x == "reg":  # Y as the memory operand (x must then be the u8 register operand)
            out.append(f"vpdpbusd {4096 * v}{y}, %%zmm{20 + r}, %%zmm{4 * r + v}\\n")
        else:
            out.append(f"vpdpbusd {1024 * r}{x}%{{1to16%}}, %%zmm{16 + v}, %%zmm{4 * r + v}\\n")
    return "".join(out)


# addressing: "base+disp" bumps base registers a step; "indexed" keeps the arrays' fixed bases and
# an index register (rdx = 64k for Y, rax = k for X), as LLVM often emits. An embedded broadcast or
# a memory operand must be vpdpbusd's signed source, so those forms swap the operands' roles (the
# same work, other values)
FORMS = {
    "register-only (no loads)": ("", _dots()),
    "loads only (no vpdpbusd)": (_y_loads(False) + _x_broadcasts(False), ""),
    "4x4, base+disp (pointer bumps)": (_y_loads(False) + _x_broadcasts(False), _dots()),
    "4x4, X indexed (as our GMM kernel)": (_y_loads(False) + _x_broadcasts(True), _dots()),
    "4x4, Y indexed": (_y_loads(True) + _x_broadcasts(False), _dots()),
    "4x4, both indexed": (_y_loads(True) + _x_broadcasts(True), _dots()),
    "X embedded broadcast {1to16}, base+disp": (_y_loads(False), _dots(x="(%%rdi)")),
    "X embedded broadcast {1to16}, indexed": (_y_loads(False), _dots(x="(%[x],%%rax,4)")),
    "Y as memory operand, indexed": (_x_broadcasts(False), _dots(y="(%[y],%%rdx)")),
}

# k wraps every 64 steps, so X (4 rows of 1 KiB) and Y (4 panels of 4 KiB) stay in L1
STEP_END = (
    "add $64, %%rsi\\n add $4, %%rdi\\n inc %%rcx\\n mov %%rcx, %%rax\\n and $63, %%rax\\n"
    "mov %%rax, %%rdx\\n shl $6, %%rdx\\n test %%rax, %%rax\\n jnz 2f\\n"
    "mov %[y], %%rsi\\n mov %[x], %%rdi\\n2:\\n cmp %[n], %%rcx\\n jb 1b\\n"
)
CLOBBERS = ", ".join(f'"zmm{i}"' for i in range(32)) + ', "rax", "rcx", "rdx", "rsi", "rdi", "memory", "cc"'

MAIN = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static uint8_t *X; static int8_t *Y;
typedef void (*loop_fn)(long);
struct job { loop_fn f; long n; double seconds; };
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void *run(void *p) { struct job *j = p; j->f(1000); double t0 = now(); j->f(j->n); j->seconds = now() - t0; return 0; }
static int cmp(const void *a, const void *b) { double d = *(double *)a - *(double *)b; return (d > 0) - (d < 0); }
int main(int argc, char **argv) {
  int rounds = atoi(argv[1]), threads = atoi(argv[2]); long n = atol(argv[3]);
  X = aligned_alloc(64, 1 << 16); Y = aligned_alloc(64, 1 << 20);
  for (int i = 0; i < 1 << 16; i++) X[i] = rand();
  for (int i = 0; i < 1 << 20; i++) Y[i] = rand();
  double *gops = calloc(NFORMS * rounds, sizeof(double));
  for (int r = 0; r < rounds; r++)
    for (int f = 0; f < NFORMS; f++) {
      pthread_t t[64]; struct job j[64];
      for (int k = 0; k < threads; k++) { j[k] = (struct job){LOOPS[f], n, 0}; pthread_create(&t[k], 0, run, &j[k]); }
      for (int k = 0; k < threads; k++) { pthread_join(t[k], 0); gops[f * rounds + r] += n * 16 * 128.0 / j[k].seconds / 1e9; }
    }
  for (int f = 0; f < NFORMS; f++) {
    qsort(gops + f * rounds, rounds, sizeof(double), cmp);
    printf("%.1f %.1f\n", gops[f * rounds + rounds / 2], gops[f * rounds + rounds - 1]);
  }
}
"""


def c_source() -> str:
    loops = []
    for i, (loads, dots) in enumerate(FORMS.values()):
        body = (
            '"vpxord %%zmm0, %%zmm0, %%zmm0\\n"'
            + "".join(f'"vmovdqa64 %%zmm0, %%zmm{a}\\n"' for a in range(1, 16))
            + '"xor %%rcx, %%rcx\\n xor %%rax, %%rax\\n xor %%rdx, %%rdx\\n mov %[y], %%rsi\\n mov %[x], %%rdi\\n1:\\n"'
            + f'"{loads}{dots}{STEP_END}"'
        )
        loops.append(
            f'static void loop{i}(long n) {{ asm volatile({body} :: [x]"r"(X), [y]"r"(Y), [n]"r"(n) : {CLOBBERS}); }}'
        )
    table = ", ".join(f"loop{i}" for i in range(len(FORMS)))
    head = MAIN.split("typedef void")[0] + "typedef void (*loop_fn)(long);\n"
    rest = "struct job" + MAIN.split("struct job", 1)[1]
    return head + "\n".join(loops) + f"\n#define NFORMS {len(FORMS)}\nstatic loop_fn LOOPS[] = {{{table}}};\n" + rest


def why_not_here() -> str | None:
    """Why the probe cannot run on this machine, or None."""
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return "cannot read /proc/cpuinfo to check for AVX-512 VNNI"
    return None if " avx512_vnni" in flags else "this CPU has no AVX-512 VNNI"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--steps", type=int, default=20_000_000, help="steps a form runs a round (default 2e7)")
    args = ap.parse_args()
    if not 1 <= args.threads <= 64 or args.rounds < 1 or args.steps < 1:
        ap.error("--threads must be 1-64, --rounds and --steps at least 1")
    reason = why_not_here()
    if reason:
        print(f"vnni_loop_forms: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "forms.c"), os.path.join(tmp, "forms")
        with open(src, "w") as f:
            f.write(c_source())
        built = subprocess.run(
            ["gcc", "-O2", "-mavx512f", "-mavx512vnni", src, "-o", exe, "-lpthread"], capture_output=True, text=True
        )
        if built.returncode:
            print(f"vnni_loop_forms: gcc failed: {built.stderr.strip()[:500]}", file=sys.stderr)
            return 1
        out = subprocess.run(
            [exe, str(args.rounds), str(args.threads), str(args.steps)], capture_output=True, text=True, check=True
        )
    rows = [tuple(map(float, line.split())) for line in out.stdout.split("\n") if line.strip()]
    peak = rows[0][0]
    print(f"{args.threads} threads, {args.rounds} rounds interleaved\n")
    print("| form | median GOPS | best GOPS | median / register-only median |\n| --- | ---: | ---: | ---: |")
    for name, (median, best) in zip(FORMS, rows, strict=True):
        print(f"| {name} | {median:.0f} | {best:.0f} | {median / peak:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
