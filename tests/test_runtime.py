"""Runtime: build every workload, argument checking, timing results, save/load, cross compilation."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from seeds import seeded_rng

import tensorsearch.target
from tensorsearch import workloads
from tensorsearch.runtime import TimeResult, build, load_module
from tensorsearch.script import parse

GEMM = """
@T.prim_func
def gemm(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), C: T.Buffer((256,), "float32")):
    for i in T.parallel(16):
        for j in T.serial(16):
            C[i * 16 + j] = T.float32(0.0)
            for k in T.serial(16):
                C[i * 16 + j] = C[i * 16 + j] + A[i * 16 + k] * B[k * 16 + j]
"""

AARCH64 = tensorsearch.target.load("arm-graviton2")


CASES = [(n, d) for n in workloads.names() for d in ("float32", "int8") if d in workloads.dtypes(n)]


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
@pytest.mark.slow
def test_every_workload_builds_and_matches_numpy(name, dtype):
    wl = workloads.reduced(name, 0, dtype)
    inputs = wl.make_inputs(seeded_rng())
    assert all(x.flags.c_contiguous for x in inputs)
    expected = wl.reference(*inputs)
    mod = build(wl.func)
    outputs = [np.full(o.shape, 7, dtype=o.dtype) for o in expected]
    mod(*inputs, *outputs)
    wl.check(outputs, expected)


def _gemm_args():
    r = seeded_rng()
    return r.standard_normal(256).astype("float32"), r.standard_normal(256).astype("float32"), np.zeros(256, "float32")


def test_gemm_runs_and_exposes_ir_and_assembly():
    mod = build(parse(GEMM))
    a, b, c = _gemm_args()
    mod(a, b, c)
    np.testing.assert_allclose(c.reshape(16, 16), a.reshape(16, 16) @ b.reshape(16, 16), rtol=1e-5, atol=1e-5)
    assert "define" in mod.llvm_ir and "__tensorsearch_parallel_launch" in mod.llvm_ir
    assert "gemm:" in mod.assembly
    assert mod.c_signature == "int32_t gemm(void *A, void *B, void *C);"


def test_wrong_arguments_raise_clear_errors():
    mod = build(parse(GEMM))
    a, b, c = _gemm_args()
    with pytest.raises(TypeError, match="takes 3 arguments"):
        mod(a, b)
    with pytest.raises(ValueError, match="buffer A: expected shape"):
        mod(a[:100], b, c)
    with pytest.raises(ValueError, match="buffer B: expected dtype float32"):
        mod(a, b.astype("float64"), c)
    with pytest.raises(ValueError, match="buffer C: .*C-contiguous"):
        mod(a, b, np.zeros(512, "float32")[::2])
    with pytest.raises(ValueError, match="buffer A: expected shape"):
        mod(a.reshape(16, 16), b, c)
    with pytest.raises(TypeError, match="must be a numpy array"):
        mod(list(a), b, c)
    with pytest.raises(ValueError, match="overlap"):
        mod(a, b, b)
    c.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        mod(a, b, c)


def test_original_buffers_are_checked_not_the_flat_ones():
    wl = workloads.reduced("GMM", 0, "float32")
    mod = build(wl.func)
    inputs = wl.make_inputs(seeded_rng())
    outs = [np.zeros(o.shape, o.dtype) for o in wl.outputs]
    with pytest.raises(ValueError, match="expected shape"):
        mod(*[x.reshape(-1) for x in inputs], *outs)
    with pytest.raises(ValueError, match="C-contiguous"):
        mod(*[np.asfortranarray(x) if x.ndim > 1 and x.shape[-1] > 1 else x for x in inputs], *outs)


def test_time_returns_every_repeat():
    mod = build(parse(GEMM))
    a, b, c = _gemm_args()
    res = mod.time(a, b, c, number=3, repeat=4)
    assert isinstance(res, TimeResult) and len(res.results) == 4 and res.number == 3
    assert all(t > 0 for t in res.results)
    assert res.min <= res.median <= res.max and res.std >= 0 and res.spread >= 0
    mod.l3_bytes = 1 << 20  # keep the flush buffer at its 64 MiB minimum in the test
    res = mod.time(a, b, c, repeat=2, min_repeat_ms=1, flush_cache=True)
    assert res.number >= 1 and len(res.results) == 2
    assert "median" in str(res)


BUMP = """
@T.prim_func
def bump(W: T.Buffer((1024,), "float32"), C: T.Buffer((1,), "float32")):
    W[0] = W[0] + T.float32(1.0)
    C[0] = C[0] + W[0]
"""


def test_cold_buffers_are_read_from_a_fresh_copy_on_every_call():
    """``time(cold=[0])``: W is copied enough times to fill the last-level cache twice (4 copies
    of 4 KiB for an 8 KiB cache) and the calls take the copies in turn; C is shared by all."""
    mod = build(parse(BUMP))
    mod.l3_bytes = 8192
    w, c = np.zeros(1024, "float32"), np.zeros(1, "float32")
    res = mod.time(w, c, number=5, repeat=3, cold=[0])
    assert len(res.results) == 3 and res.number == 5 and all(t > 0 for t in res.results)
    assert w[0] == 0  # only copies were written
    calls = 1 + 5 * 3  # a warm-up call, then the timed ones
    assert c[0] == sum(t // 4 + 1 for t in range(calls))  # each copy counts its own calls
    with pytest.raises(ValueError, match="cold: position 2 is not a buffer argument of bump"):
        mod.time(w, c, cold=[2])


SCALE = """
@T.prim_func
def scale(A: T.Buffer((256,), "float32"), B: T.Buffer((256,), "float32"), alpha: T.float32):
    for i in T.serial(256):
        B[i] = A[i] * alpha
"""


def test_a_sequence_of_bound_calls_runs_in_one_native_call():
    """C = A @ B, then D = C @ B: the second call reads what the first wrote, in order."""
    from tensorsearch.runtime.sequence import call_sequence

    mod = build(parse(GEMM))
    a, b, c = _gemm_args()
    d = np.zeros_like(c)
    run = call_sequence([mod.bind(a, b, c), mod.bind(c, b, d)])
    assert run() == 0
    m = a.reshape(16, 16) @ b.reshape(16, 16)
    np.testing.assert_allclose(d.reshape(16, 16), m @ b.reshape(16, 16), rtol=1e-4, atol=1e-4)
    a[:] = 0
    run()  # the same arrays again, read anew
    assert not d.any()
    scaled = build(parse(SCALE)).bind(a, c, np.float32(2))
    assert call_sequence([mod.bind(a, b, c), scaled]) is None  # a scalar argument: not chained
    assert call_sequence([]) is None


@pytest.mark.slow
def test_save_and_load_in_another_process(tmp_path):
    mod = build(parse(GEMM))
    path = str(tmp_path / "gemm.so")
    mod.save(path)
    meta = json.loads(open(path + ".json").read())
    assert meta["symbol"] == "gemm" and [p["name"] for p in meta["params"]] == ["A", "B", "C"]
    script = textwrap.dedent(
        f"""
        import numpy as np
        from tensorsearch.runtime import load_module
        m = load_module({path!r})
        r = np.random.default_rng(0)
        a = r.standard_normal(256).astype("float32"); b = r.standard_normal(256).astype("float32")
        c = np.zeros(256, "float32")
        m(a, b, c)
        np.testing.assert_allclose(c.reshape(16, 16), a.reshape(16, 16) @ b.reshape(16, 16), rtol=1e-5, atol=1e-5)
        try:
            m(a, b, c[:10])
        except ValueError as e:
            print("checked:", e)
        print("ok", m.time(a, b, c, repeat=2).median > 0)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "checked: buffer C" in out.stdout and "ok True" in out.stdout
    loaded = load_module(path)
    a, b, c = _gemm_args()
    loaded.num_threads = 1
    loaded(a, b, c)
    np.testing.assert_allclose(c.reshape(16, 16), a.reshape(16, 16) @ b.reshape(16, 16), rtol=1e-5, atol=1e-5)


def test_aarch64_cross_compilation(tmp_path):
    mod = build(parse(GEMM.replace("T.parallel(16)", "T.serial(16)")), AARCH64)
    asm = mod.assembly
    assert ".4s" in asm or "v0." in asm  # NEON registers
    obj = mod.save_object(tmp_path / "gemm_aarch64.o")
    data = open(obj, "rb").read()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[18:20], "little") == 183  # EM_AARCH64
    with pytest.raises(RuntimeError, match="built for aarch64.*cannot run on this machine"):
        mod(*_gemm_args())
    with pytest.raises(RuntimeError, match="save_object"):
        mod.save(tmp_path / "x.so")


def test_aarch64_vectorized_gemm_uses_neon():
    src = """
@T.prim_func
def g(A: T.Buffer((1024,), "float32"), B: T.Buffer((1024,), "float32"), C: T.Buffer((1024,), "float32")):
    for i in T.serial(32):
        for k in T.serial(32):
            for j in T.serial(8):
                C[T.Ramp(i * 32 + j * 4, 1, 4)] = C[T.Ramp(i * 32 + j * 4, 1, 4)] + T.Broadcast(A[i * 32 + k], 4) * B[T.Ramp(k * 32 + j * 4, 1, 4)]
"""
    asm = build(parse(src), AARCH64).assembly
    assert "fmla" in asm or ("fmul" in asm and "fadd" in asm)
    assert ".4s" in asm


def test_hardware_descriptor_names_are_accepted():
    from tensorsearch import hardware as hw

    assert hw.load("host").runs_here
    mod = build(parse(GEMM), hw.load("host"))
    a, b, c = _gemm_args()
    mod(a, b, c)
    np.testing.assert_allclose(c.reshape(16, 16), a.reshape(16, 16) @ b.reshape(16, 16), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_first_module_of_a_process_links_the_c_library():
    # regression: LLVM searches the process's symbols only once an execution engine exists, so the
    # first module built in a fresh process failed on aligned_alloc/free (heap buffers) and erf (libm)
    code = textwrap.dedent(
        '''
        import numpy as np
        from tensorsearch.runtime import build
        from tensorsearch.script import parse
        f = parse("""
        @T.prim_func
        def f(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
            with T.allocate((64,), "float32", scope="global") as G:
                for i in T.serial(64):
                    G[i] = T.erf(A[i])
                for i in T.serial(64):
                    B[i] = G[63 - i]
        """)
        a = np.random.default_rng(0).uniform(-2, 2, 64).astype("float32")
        b = np.zeros(64, "float32")
        build(f)(a, b)
        import math
        np.testing.assert_allclose(b, [math.erf(x) for x in a[::-1]], rtol=1e-6, atol=1e-6)
        print("ok")
        '''
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


def test_build_without_jit_saves_a_library_that_runs(tmp_path):
    wl = workloads.make("GMM", (1, 8, 8, 8), "float32")
    mod = build(wl.func, jit=False)
    with pytest.raises(RuntimeError, match="built with jit=False"):
        mod(*wl.make_inputs(0), np.zeros((1, 8, 8), "float32"))
    path = mod.save(tmp_path / "gemm.so")
    loaded = load_module(path)
    xs = wl.make_inputs(seeded_rng())
    out = np.full((1, 8, 8), np.nan, "float32")
    loaded(*xs, out)
    wl.check([out], wl.reference(*xs))


def test_aligned_arrays_start_on_a_cache_line_and_keep_values():
    from tensorsearch.runtime import aligned_copy, aligned_empty, aligned_zeros

    a = np.random.default_rng(11).standard_normal((3, 112, 7)).astype("float32")
    for align in (64, 128):
        b = aligned_copy(a, align)
        assert b.ctypes.data % align == 0 and b.flags.c_contiguous
        np.testing.assert_array_equal(b, a)
    e = aligned_empty((5, 3), "int8")
    assert e.shape == (5, 3) and e.dtype == np.int8 and e.ctypes.data % 64 == 0
    z = aligned_zeros(17, "float64")
    assert z.shape == (17,) and not z.any() and z.ctypes.data % 64 == 0
