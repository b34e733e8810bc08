"""aarch64 cross compilation: hand-written LLVM IR -> aarch64 object (llvmlite) -> qemu harness.

These exercise tensorsearch.runtime.cross on its own, before any code generator: the objects follow
the code generator's contract, ``int32_t f(void *arg0, void *arg1, ...)`` returning 0.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from seeds import seeded_rng

from tensorsearch import hardware
from tensorsearch.runtime.cross import CrossRunError, aarch64_tools_available, run_aarch64

N_VADD = 1003  # a 4-lane vector loop over 1000 elements and a scalar tail of 3
M_DOT, K_DOT = 37, 64

VADD_IR = f"""
define i32 @vadd(ptr noalias %a, ptr noalias %b, ptr noalias %c) {{
entry:
  br label %vloop
vloop:
  %i = phi i64 [0, %entry], [%inext, %vloop]
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %pc = getelementptr float, ptr %c, i64 %i
  %va = load <4 x float>, ptr %pa, align 4
  %vb = load <4 x float>, ptr %pb, align 4
  %vc = fadd <4 x float> %va, %vb
  store <4 x float> %vc, ptr %pc, align 4
  %inext = add i64 %i, 4
  %vdone = icmp sge i64 %inext, {N_VADD // 4 * 4}
  br i1 %vdone, label %tail, label %vloop
tail:
  %j = phi i64 [{N_VADD // 4 * 4}, %vloop], [%jnext, %tail]
  %qa = getelementptr float, ptr %a, i64 %j
  %qb = getelementptr float, ptr %b, i64 %j
  %qc = getelementptr float, ptr %c, i64 %j
  %sa = load float, ptr %qa, align 4
  %sb = load float, ptr %qb, align 4
  %sc = fadd float %sa, %sb
  store float %sc, ptr %qc, align 4
  %jnext = add i64 %j, 1
  %tdone = icmp sge i64 %jnext, {N_VADD}
  br i1 %tdone, label %exit, label %tail
exit:
  ret i32 0
}}
"""


def _sdot_ir() -> str:
    """out[i] = sum_k A[i, k] * B[k] for int8 A (M x K), B (K), int32 out, with NEON SDOT."""
    body = ["  %acc0 = bitcast <4 x i32> zeroinitializer to <4 x i32>"]
    for c in range(K_DOT // 16):
        body += [
            f"  %ka{c} = add i64 %row, {16 * c}",
            f"  %pa{c} = getelementptr i8, ptr %a, i64 %ka{c}",
            f"  %va{c} = load <16 x i8>, ptr %pa{c}, align 1",
            f"  %pb{c} = getelementptr i8, ptr %b, i64 {16 * c}",
            f"  %vb{c} = load <16 x i8>, ptr %pb{c}, align 1",
            f"  %acc{c + 1} = call <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32> %acc{c}, "
            f"<16 x i8> %va{c}, <16 x i8> %vb{c})",
        ]
    body_text = "\n".join(body)
    return f"""
declare <4 x i32> @llvm.aarch64.neon.sdot.v4i32.v16i8(<4 x i32>, <16 x i8>, <16 x i8>)
declare i32 @llvm.vector.reduce.add.v4i32(<4 x i32>)

define i32 @sdot_rows(ptr noalias %a, ptr noalias %b, ptr noalias %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %loop]
  %row = mul i64 %i, {K_DOT}
{body_text}
  %sum = call i32 @llvm.vector.reduce.add.v4i32(<4 x i32> %acc{K_DOT // 16})
  %po = getelementptr i32, ptr %out, i64 %i
  store i32 %sum, ptr %po, align 4
  %inext = add i64 %i, 1
  %done = icmp sge i64 %inext, {M_DOT}
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}}
"""


EXP_IR = """
declare float @expf(float)

define i32 @vexp(ptr noalias %x, ptr noalias %y) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%inext, %loop]
  %px = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %px, align 4
  %e = call float @expf(float %v)
  %py = getelementptr float, ptr %y, i64 %i
  store float %e, ptr %py, align 4
  %inext = add i64 %i, 1
  %done = icmp sge i64 %inext, 100
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
"""

FAIL_IR = """
define i32 @fails(ptr %a) {
  ret i32 7
}
"""


def _target_machine():
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    hw = hardware.load("arm-graviton2")
    target = llvm.Target.from_triple(hw.triple)
    return hw, target.create_target_machine(cpu=hw.cpu, features=hw.feature_string, opt=2, reloc="pic")


def _compile(ir: str) -> tuple[bytes, str]:
    hw, tm = _target_machine()
    mod = llvm.parse_assembly(ir)
    mod.triple = hw.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    return tm.emit_object(mod), tm.emit_assembly(mod)


def test_aarch64_assembly_uses_neon_and_sdot():
    # Needs only llvmlite, not qemu: the cross compiler side of the story.
    _, asm = _compile(_sdot_ir())
    assert "sdot\tv" in asm and ".16b" in asm
    _, asm = _compile(VADD_IR)
    assert "fadd\tv" in asm


@pytest.fixture
def tools():
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(f"aarch64 cross tools missing: {reason}")


@pytest.mark.slow
def test_vector_add_under_qemu(tools, tmp_path):
    rng = seeded_rng()
    a = rng.standard_normal(N_VADD).astype(np.float32)
    b = rng.standard_normal(N_VADD).astype(np.float32)
    c = rng.standard_normal(N_VADD).astype(np.float32)  # overwritten by the function
    obj, _ = _compile(VADD_IR)
    path = tmp_path / "vadd.o"
    path.write_bytes(obj)
    a2, b2, out = run_aarch64(path, "vadd", [a, b, c])
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(a2, a)
    np.testing.assert_array_equal(b2, b)
    assert out.dtype == np.float32 and out.shape == (N_VADD,)


@pytest.mark.slow
def test_int8_dot_product_with_sdot_under_qemu(tools):
    rng = seeded_rng()
    a = rng.integers(-128, 128, size=(M_DOT, K_DOT), dtype=np.int8)
    b = rng.integers(-128, 128, size=K_DOT, dtype=np.int8)
    out = rng.integers(1, 100, size=M_DOT, dtype=np.int32)
    obj, _ = _compile(_sdot_ir())
    _, _, result = run_aarch64(obj, "sdot_rows", [a, b, out])
    np.testing.assert_array_equal(result, a.astype(np.int32) @ b.astype(np.int32))
    assert result.shape == (M_DOT,)


@pytest.mark.slow
def test_libm_calls_link(tools):
    rng = seeded_rng()
    x = rng.uniform(-5, 5, size=100).astype(np.float32)
    y = rng.standard_normal(100).astype(np.float32)
    obj, _ = _compile(EXP_IR)
    _, y2 = run_aarch64(obj, "vexp", [x, y])
    np.testing.assert_allclose(y2, np.exp(x), rtol=1e-6)


OMP_IR = """
declare i32 @omp_get_max_threads()

define i32 @nthreads(ptr %out) {
  %n = call i32 @omp_get_max_threads()
  store i32 %n, ptr %out, align 4
  ret i32 0
}
"""


@pytest.mark.slow
def test_openmp_runtime_links(tools):
    # An object that calls the OpenMP runtime is linked with -fopenmp (static libgomp).
    obj, _ = _compile(OMP_IR)
    (n,) = run_aarch64(obj, "nthreads", [np.full(1, -1, np.int32)])
    assert n[0] >= 1


@pytest.mark.slow
def test_errors_are_reported(tools):
    a = np.ones(4, np.float32)
    obj, _ = _compile(FAIL_IR)
    with pytest.raises(CrossRunError, match="fails returned 7"):
        run_aarch64(obj, "fails", [a])
    with pytest.raises(CrossRunError, match="(?s)linking the aarch64 harness.*undefined reference to .not_there"):
        run_aarch64(obj, "not_there", [a])
    with pytest.raises(ValueError, match="not C-contiguous"):
        run_aarch64(obj, "fails", [np.ones((4, 4), np.float32)[:, ::2]])
    with pytest.raises(ValueError, match="C identifier"):
        run_aarch64(obj, "bad name", [a])


def test_tools_reason_when_missing(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = aarch64_tools_available()
    assert reason is not None and "aarch64-linux-gnu-gcc" in reason and "qemu-aarch64" in reason
    with pytest.raises(CrossRunError, match="cannot run aarch64 code"):
        run_aarch64(b"", "f", [])


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.slow
def test_gemm_built_for_graviton2_runs_under_qemu(tmp_path, dtype):
    """The whole path: workload -> lower -> LLVM for aarch64 -> object -> qemu, against numpy."""
    import tensorsearch as ts
    from tensorsearch import workloads

    wl = workloads.reduced("GMM", 0, dtype)
    mod = ts.build(wl.func, "arm-graviton2", name="gemm")  # "main" would clash with the harness's main
    asm = mod.assembly
    assert ".4s" in asm  # NEON vector registers
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(reason)
    obj = mod.save_object(tmp_path / "gemm.o")
    inputs = wl.make_inputs(seeded_rng())
    outputs = [np.zeros(t.shape, t.dtype) for t in wl.outputs]
    results = run_aarch64(obj, mod.name, [*inputs, *outputs])
    wl.check(results[len(inputs) :], wl.reference(*inputs))


@pytest.mark.slow
def test_parallel_loop_built_for_graviton2_runs_under_qemu(tmp_path):
    """An object with a parallel loop carries the thread pool (weak symbols) and runs on its own:
    under qemu, linked statically, with the default threads (the CPUs), each iteration once."""
    from tensorsearch import build
    from tensorsearch.script import parse

    src = """
@T.prim_func
def rows(A: T.Buffer((65536,), "float32"), B: T.Buffer((65536,), "float32")):
    for i in T.parallel(256):
        for j in T.serial(256):
            B[i * 256 + j] = A[i * 256 + j] * T.float32(2.0) + T.Cast("float32", i)
"""
    mod = build(parse(src), "arm-graviton2")
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(reason)
    obj = mod.save_object(tmp_path / "rows.o")
    a = np.random.default_rng(5).standard_normal(65536).astype(np.float32)
    _, b = run_aarch64(obj, "rows", [a, np.zeros(65536, np.float32)])
    np.testing.assert_array_equal(b, a * 2 + np.repeat(np.arange(256, dtype=np.float32), 256))
