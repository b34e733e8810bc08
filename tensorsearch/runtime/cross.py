"""Run aarch64 object code under qemu: link it into a small C harness and compare its results.

The code generator's contract: the object file exports ``int32_t <name>(void *arg0, void *arg1,
...)``, one data pointer per buffer parameter in parameter order, returning 0 on success.
:func:`run_aarch64` writes each numpy array to a binary file, generates a C harness that reads
them into 64-byte aligned heap buffers, calls the function, and writes every buffer back; the
harness is linked statically with ``aarch64-linux-gnu-gcc`` (so qemu needs no sysroot) and run
under ``qemu-aarch64``. The arrays passed in are not modified; the buffers after the call come
back as new arrays, in parameter order.

Undefined symbols of the object are resolved by the static C library (``libm`` included); an
object that calls OpenMP's runtime (``GOMP_*``/``omp_*``/``__kmpc_*``) is linked with
``-fopenmp``. Objects that call back into Python cannot run here.

``aarch64_tools_available()`` is None when both tools are on ``PATH`` and otherwise says what is
missing and how to install it (``apt-get install qemu-user gcc-aarch64-linux-gnu``), for
``pytest.skip``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["CrossRunError", "aarch64_tools_available", "run_aarch64"]

GCC = "aarch64-linux-gnu-gcc"
QEMU_CANDIDATES = ("qemu-aarch64", "qemu-aarch64-static")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CrossRunError(RuntimeError):
    """Linking or running the aarch64 harness failed; the message carries the tool's output."""


def _qemu() -> str | None:
    for name in QEMU_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def aarch64_tools_available() -> str | None:
    """None when the cross compiler and qemu are both present, else the reason they are not."""
    missing = []
    if shutil.which(GCC) is None:
        missing.append(f"{GCC} (apt-get install gcc-aarch64-linux-gnu)")
    if _qemu() is None:
        missing.append("qemu-aarch64 (apt-get install qemu-user)")
    if missing:
        return "not on PATH: " + "; ".join(missing)
    return None


def _harness_source(func_name: str, sizes: Sequence[int]) -> str:
    n = len(sizes)
    params = ", ".join(["void *"] * n) if n else "void"
    args = ", ".join(f"bufs[{i}]" for i in range(n))
    size_list = ", ".join(f"{s}u" for s in sizes) if n else "0u"
    return f"""\
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern int32_t {func_name}({params});

#define NBUF {n}
static const size_t sizes[NBUF > 0 ? NBUF : 1] = {{{size_list}}};

static int transfer(const char *dir, const char *prefix, int i, void *buf, int writing) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%d.bin", dir, prefix, i);
    FILE *f = fopen(path, writing ? "wb" : "rb");
    if (!f) {{ fprintf(stderr, "harness: cannot open %s: %s\\n", path, strerror(errno)); return 1; }}
    size_t done = writing ? fwrite(buf, 1, sizes[i], f) : fread(buf, 1, sizes[i], f);
    fclose(f);
    if (done != sizes[i]) {{
        fprintf(stderr, "harness: %s %s: %zu of %zu bytes\\n", writing ? "writing" : "reading", path, done, sizes[i]);
        return 1;
    }}
    return 0;
}}

int main(int argc, char **argv) {{
    if (argc != 2) {{ fprintf(stderr, "usage: %s DIR\\n", argv[0]); return 2; }}
    void *bufs[NBUF > 0 ? NBUF : 1];
    for (int i = 0; i < NBUF; i++) {{
        size_t alloc = (sizes[i] + 63) / 64 * 64;
        bufs[i] = aligned_alloc(64, alloc ? alloc : 64);
        if (!bufs[i]) {{ fprintf(stderr, "harness: out of memory\\n"); return 2; }}
        memset(bufs[i], 0, alloc ? alloc : 64);
        if (transfer(argv[1], "in", i, bufs[i], 0)) return 2;
    }}
    int32_t rc = {func_name}({args});
    if (rc != 0) {{ fprintf(stderr, "harness: {func_name} returned %d\\n", (int)rc); return 3; }}
    for (int i = 0; i < NBUF; i++)
        if (transfer(argv[1], "out", i, bufs[i], 1)) return 2;
    return 0;
}}
"""


def _undefined_symbols(obj: Path) -> set[str]:
    nm = shutil.which("aarch64-linux-gnu-nm") or shutil.which("nm")
    if nm is None:
        return set()
    proc = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True)
    return {line.split()[-1] for line in proc.stdout.splitlines() if line.strip()}


def _run(cmd: list[str], what: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise CrossRunError(f"{what} timed out after {timeout:g} s: {' '.join(cmd)}") from exc
    if proc.returncode != 0:
        status = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        output = (proc.stderr + proc.stdout).strip()
        raise CrossRunError(f"{what} failed ({status}): {' '.join(cmd)}\n{output}")
    return proc


def run_aarch64(
    object_code: str | os.PathLike[str] | bytes,
    func_name: str,
    arrays: Sequence[np.ndarray],
    *,
    timeout: float = 120.0,
    link_args: Sequence[str] = (),
    keep_dir: str | os.PathLike[str] | None = None,
) -> list[np.ndarray]:
    """Link ``object_code`` (a path to an aarch64 ELF object, or its bytes) into a harness, run
    ``func_name(arrays[0].data, arrays[1].data, ...)`` under qemu and return every buffer after
    the call as a new array of the same shape and dtype, in parameter order.

    Arrays must be C-contiguous. ``link_args`` go to the linker command line; ``keep_dir`` keeps
    the harness, binaries and data there instead of a temporary directory (for debugging).
    Raises :class:`CrossRunError` when the tools are missing, linking fails, the program crashes,
    or the function returns non-zero.
    """
    reason = aarch64_tools_available()
    if reason is not None:
        raise CrossRunError(f"cannot run aarch64 code: {reason}")
    if not _IDENT_RE.match(func_name):
        raise ValueError(f"function name {func_name!r} is not a C identifier")
    if func_name == "main":
        raise ValueError(
            "the function is named main, which clashes with the harness's own main; build it with name=..."
        )
    arrays = list(arrays)
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"argument {i} is a {type(a).__name__}, not a numpy array")
        if not a.flags.c_contiguous:
            raise ValueError(f"argument {i} is not C-contiguous; pass np.ascontiguousarray(...)")

    with tempfile.TemporaryDirectory(prefix="ts-aarch64-") as tmp:
        work = Path(keep_dir) if keep_dir is not None else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        if isinstance(object_code, bytes | bytearray):
            obj = work / "kernel.o"
            obj.write_bytes(object_code)
        else:
            obj = Path(object_code)
            if not obj.is_file():
                raise FileNotFoundError(f"no object file at {obj}")
        source = work / "harness.c"
        source.write_text(_harness_source(func_name, [a.nbytes for a in arrays]))
        exe = work / "harness"
        extra = list(link_args)
        undefined = _undefined_symbols(obj)
        if any(s.startswith(("GOMP_", "omp_", "__kmpc_")) for s in undefined):
            extra.append("-fopenmp")
        _run(
            [GCC, "-O1", "-static", "-o", str(exe), str(source), str(obj), *extra, "-lm", "-lpthread"],
            f"linking the aarch64 harness for {func_name}",
            timeout,
        )
        for i, a in enumerate(arrays):
            (work / f"in{i}.bin").write_bytes(a.tobytes())
        _run([_qemu() or "qemu-aarch64", str(exe), str(work)], f"running {func_name} under qemu-aarch64", timeout)
        return [
            np.frombuffer((work / f"out{i}.bin").read_bytes(), dtype=a.dtype).reshape(a.shape).copy()
            for i, a in enumerate(arrays)
        ]
