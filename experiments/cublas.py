"""cuBLAS through ctypes: the reference a GPU kernel's throughput is measured against.

    from experiments.cublas import Cublas
    blas = Cublas()                                  # finds libcublas (CUDA toolkit or the nvidia-cublas wheel)
    seconds = blas.time_gemm_f16f32(4096, 4096, 4096)

Only the GEMM the WMMA kernels compute: float16 x float16 -> float32, row-major, accumulated in
float32 (cublasGemmEx with CUBLAS_COMPUTE_32F). Memory and timing go through pycuda, so the
kernels and cuBLAS run in the same primary context and are timed the same way (CUDA events).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys

import numpy as np

_CUDA_R_16F, _CUDA_R_32F = 2, 0
_CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT, _CUBLAS_OP_N = 68, -1, 0


def find_cublas() -> str | None:
    """The path of libcublas: the CUDA toolkit's, else the nvidia-cublas wheel's; None when absent."""
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    patterns = [os.path.join(r, "lib64", "libcublas.so*") for r in roots if r]
    patterns += [os.path.join(p, "nvidia", "cublas", "lib", "libcublas.so*") for p in sys.path if p]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            if "Lt" not in os.path.basename(path):
                return path
    return None


class Cublas:
    def __init__(self) -> None:
        from tensorsearch.runtime.cuda import cuda_driver

        self.drv = cuda_driver()  # the primary context, current: cuBLAS (the runtime API) uses it too
        path = find_cublas()
        if path is None:
            raise RuntimeError("libcublas was found neither in the CUDA toolkit nor in an nvidia-cublas wheel")
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate")

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")

    def gemm_f16f32(self, a: int, b: int, c: int, m: int, n: int, k: int) -> None:
        """C (m x n, float32) = A (m x k) @ B (k x n), row-major device pointers a, b, c.

        cuBLAS is column-major: row-major C is column-major C^T = B^T A^T, so B goes first."""
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        p = ctypes.c_void_p
        status = self.lib.cublasGemmEx(
            self.handle, _CUBLAS_OP_N, _CUBLAS_OP_N, n, m, k, ctypes.byref(alpha),
            p(b), _CUDA_R_16F, n, p(a), _CUDA_R_16F, k, ctypes.byref(beta),
            p(c), _CUDA_R_32F, n, _CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT,
        )  # fmt: skip
        self._check(status, "cublasGemmEx")

    def time_gemm_f16f32(self, m: int, n: int, k: int, number: int = 20, repeat: int = 5) -> float:
        """Median seconds per float16 GEMM (float32 result) of the given size, checked once against numpy
        on a corner of the product."""
        drv, rng = self.drv, np.random.default_rng(0)
        x = rng.standard_normal((m, k)).astype(np.float16)
        y = rng.standard_normal((k, n)).astype(np.float16)
        dx, dy, dz = drv.to_device(x), drv.to_device(y), drv.mem_alloc(m * n * 4)
        self.gemm_f16f32(int(dx), int(dy), int(dz), m, n, k)
        z = np.empty((m, n), np.float32)
        drv.memcpy_dtoh(z, dz)
        want = x[:64].astype(np.float32) @ y[:, :64].astype(np.float32)
        np.testing.assert_allclose(z[:64, :64], want, rtol=1e-2, atol=0.5)
        results = []
        for _ in range(repeat):
            start, end = drv.Event(), drv.Event()
            start.record()
            for _ in range(number):
                self.gemm_f16f32(int(dx), int(dy), int(dz), m, n, k)
            end.record()
            end.synchronize()
            results.append(start.time_till(end) * 1e-3 / number)
        return float(np.median(results))
