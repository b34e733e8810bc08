#!/usr/bin/env bash
# The prepared GPU check: on a GPU machine that reaches no package registry, in at most
# 8 minutes. It
#   1. installs pycuda (the `cuda` extra) from files carried in .whl/ (git-ignored): a pycuda wheel
#      built by an earlier run if there is one, else the pycuda sdist built here (the wheel it
#      makes is copied to $OUT for the next run), plus the wheels of pytools, platformdirs, mako,
#      typing-extensions and siphash24;
#   2. runs the CUDA tests (tests/test_cuda_runtime.py, tests/test_cuda_codegen.py), none skipped
#      for want of a GPU;
#   3. runs experiments/gpu_ops.py: float16 GEMM 4096^3 and ResNet-50's 3x3 64-channel convolution,
#      each against cuBLAS measured in the same run.
# Fill .whl/ on a machine with a registry:
#   pip download --no-deps --no-build-isolation --no-binary :all: pycuda -d .whl
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl pytools platformdirs mako typing-extensions siphash24
# Usage: OUT=/tmp/out experiments/gpu_check.sh [gpu_ops.py arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-check}
WHL=${WHL:-.whl}
SITE=${SITE:-/tmp/tensorsearch-site}
mkdir -p "$OUT" "$SITE"
log() { echo "== $(date +%T) $*"; }

log "machine"
nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.sm,clocks.max.sm --format=csv,noheader
nvcc --version | tail -1
python3 --version

log "1. pycuda"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    "$WHL"/pytools-*.whl "$WHL"/platformdirs-*.whl "$WHL"/mako-*.whl "$WHL"/typing_extensions-*.whl \
    "$WHL"/siphash24-*.whl || exit 1
export PYTHONPATH="$SITE:$PWD"
build_pycuda() {
    local src cuda_root libdir
    cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
    libdir=/tmp/tensorsearch-libcuda  # the driver's libcuda under the name the linker looks for
    mkdir -p "$libdir"
    for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 \
             "$cuda_root/lib64/stubs" "$cuda_root/targets/x86_64-linux/lib/stubs"; do
        for f in "$d/libcuda.so" "$d/libcuda.so.1"; do
            [ -e "$f" ] && [ ! -e "$libdir/libcuda.so" ] && ln -s "$f" "$libdir/libcuda.so"
        done
    done
    [ -e "$libdir/libcuda.so" ] || { echo "no libcuda.so found"; return 1; }
    rm -rf /tmp/pycuda-src && mkdir -p /tmp/pycuda-src
    tar xzf "$WHL"/pycuda-*.tar.gz -C /tmp/pycuda-src || return 1
    src=$(echo /tmp/pycuda-src/pycuda-*)
    (cd "$src" && python3 configure.py --cuda-root="$cuda_root" --cudadrv-lib-dir="$libdir" >/dev/null &&
        printf '\n[build_ext]\nparallel = %s\n' "$(nproc)" >>setup.cfg &&
        python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w /tmp/pycuda-wheel .) || return 1
    cp /tmp/pycuda-wheel/pycuda-*.whl "$OUT"/
}
if ! ls "$WHL"/pycuda-*.whl >/dev/null 2>&1; then
    log "building pycuda from its sdist"
    build_pycuda || { echo "pycuda did not build"; exit 1; }
    PYCUDA_WHEEL=$(ls /tmp/pycuda-wheel/pycuda-*.whl)
else
    PYCUDA_WHEEL=$(ls "$WHL"/pycuda-*.whl)
fi
python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$PYCUDA_WHEEL" || exit 1
python3 -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())" || exit 1

log "2. CUDA tests"
python3 -m pytest -q -rs -p no:cacheprovider tests/test_cuda_runtime.py tests/test_cuda_codegen.py \
    2>&1 | tee "$OUT/tests.log" | tail -15

log "3. float16 GEMM and C2D against cuBLAS"
python3 experiments/gpu_ops.py --out "$OUT" "$@"
log "done"
