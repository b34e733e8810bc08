"""Tensor intrinsics and hardware descriptors in YAML: every file loads, and every mistake is one error naming file and key.

Every shipped descriptor and intrinsic set loads; the semantics become a one-block PrimFunc that
verifies and computes what numpy computes; each LLVM implementation is checked against LLVM itself
(and run on this machine where it can be); the WMMA templates compile with nvcc; broken files give
errors naming the file, the key path and the mistake; a new intrinsic written into a temporary
folder loads with no Python change.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir as llir

from tensorsearch import hardware
from tensorsearch.arith import verify
from tensorsearch.hardware import HardwareError
from tensorsearch.interpreter import interpret
from tensorsearch.intrin import CudaImpl, Intrinsic, IntrinsicError, IntrinsicSet, LLVMImpl, load_intrinsic
from tensorsearch.ir import IterType

SHIPPED_HARDWARE = (
    "x86-znver4",
    "x86-emeraldrapids",
    "x86-cascadelake",
    "x86-sapphirerapids",
    "arm-graviton2",
    "arm-neoverse-v1",
    "nvidia-sm86",
    "nvidia-sm90",
)
SHIPPED_SETS = ("x86-avx512-vnni", "x86-amx", "arm-neon-dotprod", "arm-i8mm", "cuda-wmma-f16", "cuda-wmma-s8")
VNNI = "vnni_dot_16x4_u8i8i32"


# ----------------------------------------------------------------------------------------------
# shipped files


def test_every_shipped_descriptor_and_set_loads():
    assert set(hardware.available()) >= set(SHIPPED_HARDWARE)
    from tensorsearch import intrin

    assert set(intrin.available()) >= set(SHIPPED_SETS)
    for name in SHIPPED_SETS:
        s = load_intrinsic(name)
        assert isinstance(s, IntrinsicSet) and s.name == name and len(s) >= 1
        for i in s:
            assert isinstance(i, Intrinsic) and i.set_name == name
            verify(i.desc_func())
    offered = {name: [i.name for i in hardware.load(name).intrinsics] for name in SHIPPED_HARDWARE}
    for cpu in ("x86-znver4", "x86-emeraldrapids", "x86-cascadelake"):
        assert offered[cpu] == [VNNI]
    assert offered["x86-sapphirerapids"][-1] == VNNI and "amx_tdpbusd_16x16x64" in offered["x86-sapphirerapids"]
    assert offered["arm-graviton2"] == ["neon_sdot_4x4_i8i8i32", "neon_udot_4x4_u8u8u32"]
    assert offered["arm-neoverse-v1"][:3] == [
        "neon_smmla_2x2x8_i8i8i32",
        "neon_ummla_2x2x8_u8u8u32",
        "neon_usmmla_2x2x8_u8i8i32",
    ]
    for gpu in ("nvidia-sm86", "nvidia-sm90"):
        assert {"wmma_mma_16x16x16_f16f32", "wmma_mma_16x16x16_f16f16", "wmma_mma_16x16x16_s8s32"} <= set(offered[gpu])


def test_gpu_descriptors():
    sm86, sm90 = hardware.load("nvidia-sm86"), hardware.load("nvidia-sm90")
    assert sm86.kind == "gpu" and sm86.gpu.compute_capability == (8, 6) and sm86.gpu.sm == "sm_86" == sm86.cpu
    assert sm90.gpu.compute_capability == (9, 0) and sm90.cpu == "sm_90" and sm90.cores == 132
    for hw in (sm86, sm90):
        g = hw.gpu
        assert g.warp_size == 32 and g.max_threads_per_block == 1024 and g.registers_per_thread == 255
        assert g.registers_per_block == 65536 and g.max_shared_memory_per_block == 48 * 1024
        assert g.max_shared_memory_per_block_optin > g.max_shared_memory_per_block
        assert {"global", "shared", "local", "wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"} == set(
            hw.memory_scopes
        )
        assert hw.caches.l3 == 0
    assert hardware.load("x86-znver4").memory_scopes == ("global", "local")
    assert hardware.load("x86-znver4").gpu is None


def test_shipped_descriptors_are_llvm_targets():
    llvm.initialize_all_targets()
    for name in SHIPPED_HARDWARE:
        hw = hardware.load(name)
        tm = llvm.Target.from_triple(hw.triple).create_target_machine(cpu=hw.cpu, features=hw.feature_string)
        assert hw.arch in tm.triple


def test_intrinsic_objects_api():
    hw = hardware.load("x86-znver4")
    vnni = hw.intrinsic(VNNI)
    assert vnni is hw.intrinsics[0] and vnni.target == "llvm" and vnni.role == "compute" and vnni.units == ()
    assert [o.name for o in vnni.operands] == ["A", "B", "C"]
    a, b, c = vnni.operands
    assert (a.shape, str(a.dtype), a.role, a.scope, a.contiguous) == ((4,), "uint8", "input", "global", True)
    assert (b.shape, str(b.dtype), b.layout, str(b.vector_type)) == ((16, 4), "int8", "contiguous", "int8x64")
    assert (c.role, c.alignment) == ("accumulator", 64) and vnni.output is c and vnni.accumulate
    assert [(i.name, i.kind, i.extent) for i in vnni.iterators] == [
        ("i", IterType.SPATIAL, 16),
        ("k", IterType.REDUCE, 4),
    ]
    assert vnni.semantics == "C[i] += cast(int32, A[k]) * cast(int32, B[i, k])"
    impl = vnni.impl
    assert isinstance(impl, LLVMImpl) and impl.intrinsic == "llvm.x86.avx512.vpdpbusd.512" and impl.store == "C"
    assert [str(t) for t in (impl.signature[0], *impl.signature[1])] == ["int32x16", "int32x16", "uint8x64", "int8x64"]
    assert impl.args[1].steps[1] == ("broadcast", 16)
    # frozen, hashable, one PrimFunc per intrinsic
    with pytest.raises(dataclasses.FrozenInstanceError):
        vnni.name = "x"  # type: ignore[misc]
    assert {vnni: 1}[load_intrinsic("x86-avx512-vnni")[VNNI]] == 1 and hash(hw)
    assert vnni.desc_func() is vnni.desc_func() and vnni.desc_block().name == VNNI
    assert vnni.buffers["B"] in vnni.desc_func().buffers
    assert vnni.desc_block().init is None
    # targets
    assert vnni.for_target(hardware.load("x86-cascadelake")) and vnni.for_target(hw)
    assert not vnni.for_target(hardware.load("arm-graviton2"))
    assert "architecture x86_64" in vnni.why_not(hardware.load("arm-graviton2"))
    assert "kind gpu" in vnni.why_not(hardware.load("nvidia-sm86"))
    with pytest.raises(KeyError, match="offers no intrinsic 'nope'.*vnni_dot"):
        hw.intrinsic("nope")


def test_wmma_units_and_templates():
    s = load_intrinsic("cuda-wmma-f16")
    unit = s.unit("wmma_16x16x16_f16f32")
    assert unit.compute == "wmma_mma_16x16x16_f16f32" and unit.init == "wmma_fill_16x16x16_f32"
    assert dict(unit.loads) == {"A": "wmma_load_a_16x16x16_f16", "B": "wmma_load_b_16x16x16_f16"}
    mma, load_a = s[unit.compute], s["wmma_load_a_16x16x16_f16"]
    assert mma.role == "compute" and load_a.role == "load" and s[unit.store].role == "store"
    assert set(load_a.units) == {"wmma_16x16x16_f16f32", "wmma_16x16x16_f16f16"}
    assert [o.scope for o in mma.operands] == ["wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator"]
    src = load_a.operand("src")
    assert (src.scope, src.row_stride, src.row_stride_multiple, src.layout) == ("shared", "any", 8, "strided_rows")
    impl = load_a.impl
    assert isinstance(impl, CudaImpl) and impl.includes == ("mma.h",)
    assert impl.placeholders == ("dst", "src", "src.stride")
    assert impl.render({"dst": "fa", "src": "As + 16", "src.stride": "40"}) == (
        "nvcuda::wmma::load_matrix_sync(fa, As + 16, 40);"
    )
    assert impl.declare("dst", "fa").endswith("nvcuda::wmma::row_major> fa;")
    with pytest.raises(KeyError, match="src.stride"):
        impl.render({"dst": "fa", "src": "p"})
    assert mma.for_target(hardware.load("nvidia-sm86")) and not mma.for_target(hardware.load("x86-znver4"))


# ----------------------------------------------------------------------------------------------
# semantics as IR: verify and interpret against numpy


def _dot_ref(a, b, c, acc):
    return (c.astype(np.int64) + (b.astype(np.int64) * a.astype(np.int64)[None, :]).sum(1)).astype(acc)


def _run_dot(intr: Intrinsic, rng) -> None:
    a_op, b_op, c_op = intr.operands
    a = rng.integers(a_op.dtype.min_value(), a_op.dtype.max_value() + 1, a_op.shape).astype(a_op.dtype.numpy)
    b = rng.integers(b_op.dtype.min_value(), b_op.dtype.max_value() + 1, b_op.shape).astype(b_op.dtype.numpy)
    c = rng.integers(0, 1 << 20, c_op.shape).astype(c_op.dtype.numpy)
    expected = _dot_ref(a, b, c, c_op.dtype.numpy)
    interpret(verify(intr.desc_func()), a, b, c)
    np.testing.assert_array_equal(c, expected)


def test_vnni_desc_func_verifies_and_matches_numpy():
    rng = np.random.default_rng(5)
    vnni = load_intrinsic("x86-avx512-vnni")[VNNI]
    for _ in range(3):
        _run_dot(vnni, rng)
    for name in ("neon_sdot_4x4_i8i8i32", "neon_udot_4x4_u8u8u32"):
        _run_dot(load_intrinsic("arm-neon-dotprod")[name], rng)


def test_wmma_desc_funcs_match_numpy():
    rng = np.random.default_rng(6)
    s = load_intrinsic("cuda-wmma-f16")
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 16)).astype(np.float16)
    c = rng.standard_normal((16, 16)).astype(np.float32)
    expected = c.copy()
    for k in range(16):  # the interpreter rounds to float32 after every add, in k order
        expected = (expected + a[:, k : k + 1].astype(np.float32) * b[k : k + 1, :].astype(np.float32)).astype(
            np.float32
        )
    interpret(s["wmma_mma_16x16x16_f16f32"].desc_func(), a, b, c)
    np.testing.assert_array_equal(c, expected)
    dst = np.ones((16, 16), np.float16)
    interpret(s["wmma_load_a_16x16x16_f16"].desc_func(), a, dst)
    np.testing.assert_array_equal(dst, a)
    interpret(s["wmma_fill_16x16x16_f32"].desc_func(), c)
    assert not c.any()


# ----------------------------------------------------------------------------------------------
# the LLVM implementations, checked by LLVM: a small lowering of the description, for this test


def _lltype(t):
    base = llir.IntType(t.bits) if t.is_integer else {16: llir.HalfType(), 32: llir.FloatType()}[t.bits]
    return base if t.lanes == 1 else llir.VectorType(base, t.lanes)


def _llvm_module(intr: Intrinsic) -> str:
    impl = intr.impl
    assert isinstance(impl, LLVMImpl)
    mod = llir.Module()
    ret, argtys = impl.signature
    callee = llir.Function(mod, llir.FunctionType(_lltype(ret), [_lltype(t) for t in argtys]), impl.intrinsic)
    fn = llir.Function(mod, llir.FunctionType(llir.VoidType(), [llir.PointerType()] * len(intr.operands)), "kernel")
    b = llir.IRBuilder(fn.append_basic_block())
    ptrs = {o.name: p for o, p in zip(intr.operands, fn.args, strict=True)}
    values = []
    for arg in impl.args:
        v = b.load(ptrs[arg.operand], typ=_lltype(arg.load), align=1)
        t = arg.load
        for kind, x in arg.steps:
            if kind == "reinterpret":
                v, t = b.bitcast(v, _lltype(x)), x
            else:
                undef = llir.Constant(llir.VectorType(_lltype(t), x), None)
                v = b.insert_element(undef, v, llir.Constant(llir.IntType(32), 0))
                v = b.shuffle_vector(v, undef, llir.Constant(llir.VectorType(llir.IntType(32), x), [0] * x))
                t = t.with_lanes(x)
        values.append(v)
    b.store(b.call(callee, values), ptrs[impl.store], align=1)
    b.ret_void()
    return str(mod)


def _target_machine(hw):
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(hw.triple).create_target_machine(
        cpu=hw.cpu, features=hw.feature_string, opt=2, codemodel="default"
    )


def _host_can_run(hw) -> bool:
    host = {k for k, v in llvm.get_host_cpu_features().items() if v}
    return hw.arch == llvm.get_process_triple().split("-")[0] and all(f[1:] in host for f in hw.features)


def _check_llvm(intr: Intrinsic, hw, mnemonic: str, rng) -> None:
    module = llvm.parse_assembly(_llvm_module(intr))
    module.verify()
    tm = _target_machine(hw)
    asm = tm.emit_assembly(module)
    assert re.search(mnemonic, asm), asm
    if not _host_can_run(hw):
        return
    engine = llvm.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    kernel = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(intr.operands))(engine.get_function_address("kernel"))
    for _ in range(3):
        a_op, b_op, c_op = intr.operands
        a = rng.integers(a_op.dtype.min_value(), a_op.dtype.max_value() + 1, a_op.shape).astype(a_op.dtype.numpy)
        b = rng.integers(b_op.dtype.min_value(), b_op.dtype.max_value() + 1, b_op.shape).astype(b_op.dtype.numpy)
        c = rng.integers(-(1 << 20), 1 << 20, c_op.shape).astype(c_op.dtype.numpy)
        oracle = c.copy()
        interpret(intr.desc_func(), a, b, oracle)
        kernel(a.ctypes.data, b.ctypes.data, c.ctypes.data)
        np.testing.assert_array_equal(c, oracle)  # the implementation computes the semantics


def test_llvm_implementations_match_llvm_and_the_semantics():
    rng = np.random.default_rng(7)
    for name in ("x86-znver4", "x86-emeraldrapids", "x86-cascadelake"):
        hw = hardware.load(name)
        _check_llvm(hw.intrinsic(VNNI), hw, r"vpdpbusd\t.*%zmm0", rng)
    arm = hardware.load("arm-graviton2")
    _check_llvm(arm.intrinsic("neon_sdot_4x4_i8i8i32"), arm, "sdot\tv", rng)
    _check_llvm(arm.intrinsic("neon_udot_4x4_u8u8u32"), arm, "udot\tv", rng)


# ----------------------------------------------------------------------------------------------
# the CUDA templates, compiled by nvcc


def _wmma_kernel(s: IntrinsicSet, unit_name: str, kernel: str) -> str:
    u = s.unit(unit_name)
    mma, fill, store = s[u.compute], s[u.init], s[u.store]
    loads = {op: s[n] for op, n in u.loads}
    a, b, c = (mma.operand(n) for n in ("A", "B", "C"))
    ctype = {"float16": "half", "float32": "float", "int8": "signed char", "int32": "int"}
    lines = [
        f'extern "C" __global__ void {kernel}(const {ctype[str(a.dtype)]} *A, const {ctype[str(b.dtype)]} *B, '
        f"{ctype[str(c.dtype)]} *C) {{",
        f"  __shared__ __align__(32) {ctype[str(a.dtype)]} As[16 * 24];",
        f"  __shared__ __align__(32) {ctype[str(b.dtype)]} Bs[16 * 32];",
        "  for (int e = threadIdx.x; e < 256; e += 32) { As[e / 16 * 24 + e % 16] = A[e]; Bs[e / 16 * 32 + e % 16] = B[e]; }",
        "  __syncthreads();",
        "  " + mma.impl.declare("A", "fa"),
        "  " + mma.impl.declare("B", "fb"),
        "  " + mma.impl.declare("C", "fc"),
        "  " + fill.impl.render({"C": "fc"}),
        "  " + loads["A"].impl.render({"dst": "fa", "src": "As", "src.stride": "24"}),
        "  " + loads["B"].impl.render({"dst": "fb", "src": "Bs", "src.stride": "32"}),
        "  " + mma.impl.render({"A": "fa", "B": "fb", "C": "fc"}),
        "  " + store.impl.render({"dst": "C", "src": "fc", "dst.stride": "16"}),
        "}",
    ]
    return "\n".join(lines)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.slow
def test_wmma_templates_compile_with_nvcc(tmp_path):
    f16, s8 = load_intrinsic("cuda-wmma-f16"), load_intrinsic("cuda-wmma-s8")
    includes = sorted({h for s in (f16, s8) for i in s for h in i.impl.includes} | {"cuda_fp16.h"})
    source = "\n".join(f"#include <{h}>" for h in includes) + "\n"
    for s, unit, kernel in [
        (f16, "wmma_16x16x16_f16f32", "k_f16f32"),
        (f16, "wmma_16x16x16_f16f16", "k_f16f16"),
        (s8, "wmma_16x16x16_s8s32", "k_s8s32"),
    ]:
        source += _wmma_kernel(s, unit, kernel) + "\n"
    (tmp_path / "wmma.cu").write_text(source)
    out = tmp_path / "wmma.ptx"
    r = subprocess.run(
        ["nvcc", "-arch=sm_80", "-ptx", "-o", str(out), str(tmp_path / "wmma.cu")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr + source
    ptx = out.read_text()
    assert ptx.count("wmma.mma.sync") >= 3 and "wmma.load.a" in ptx and "wmma.store.d" in ptx
    assert ".s8" in ptx and ".f16.f16" in ptx


# ----------------------------------------------------------------------------------------------
# a new intrinsic and a new target, written as YAML only

VNNI256 = """\
name: x86-avx512-vnni-256
target: llvm
description: AVX-512 VNNI at 256-bit width (needs AVX512VL)
requires:
  arch: [x86_64]
  features: [+avx512vnni, +avx512vl]
intrinsics:
  - name: vnni_dot_8x4_u8i8i32
    operands:
      - {name: A, shape: [4], dtype: uint8, role: input, contiguous: true}
      - {name: B, shape: [8, 4], dtype: int8, role: input, contiguous: true}
      - {name: C, shape: [8], dtype: int32, role: accumulator, contiguous: true}
    iterators:
      - {name: i, kind: spatial, extent: 8}
      - {name: k, kind: reduce, extent: 4}
    semantics: C[i] += cast(int32, A[k]) * cast(int32, B[i, k])
    llvm:
      intrinsic: llvm.x86.avx512.vpdpbusd.256
      args:
        - {operand: C, load: int32x8}
        - {operand: A, load: uint8x4, then: [reinterpret: int32, broadcast: 8, reinterpret: uint8x32]}
        - {operand: B, load: int8x32}
      returns: int32x8
      store: C
"""

MYCPU = """\
name: my-vnni-cpu
kind: cpu
triple: x86_64-unknown-linux-gnu
cpu: cascadelake
features: [+avx2, +avx512f, +avx512bw, +avx512vl, +avx512vnni]
cores: 2
vector_bits: 256
caches: {l1d: 32 KiB, l2: 1 MiB, l3: 16 MiB}
intrinsics: [x86-avx512-vnni-256, x86-avx512-vnni]
"""


def test_new_vnni_256_intrinsic_from_a_temporary_folder(tmp_path, monkeypatch):
    (tmp_path / "intrinsics").mkdir()
    (tmp_path / "hardware").mkdir()
    (tmp_path / "intrinsics" / "x86-avx512-vnni-256.yaml").write_text(VNNI256)
    (tmp_path / "hardware" / "my-vnni-cpu.yaml").write_text(MYCPU)
    hw = hardware.load(tmp_path / "hardware" / "my-vnni-cpu.yaml")
    assert [s.name for s in hw.intrinsic_sets] == ["x86-avx512-vnni-256", "x86-avx512-vnni"]
    intr = hw.intrinsic("vnni_dot_8x4_u8i8i32")
    assert intr.impl.intrinsic == "llvm.x86.avx512.vpdpbusd.256" and intr.for_target(hw)
    assert not intr.for_target(hardware.load("x86-znver4")) or hardware.load("x86-znver4").has_feature("avx512vl")
    rng = np.random.default_rng(8)
    _run_dot(intr, rng)
    _check_llvm(intr, hw, r"vpdpbusd\t.*%ymm0", rng)
    # found by name too, through the search paths
    monkeypatch.setenv("TENSORSEARCH_HARDWARE_PATH", str(tmp_path / "hardware"))
    monkeypatch.setenv("TENSORSEARCH_INTRINSICS_PATH", str(tmp_path / "intrinsics"))
    assert hardware.load("my-vnni-cpu").intrinsics[0].name == "vnni_dot_8x4_u8i8i32"
    assert load_intrinsic("x86-avx512-vnni-256")["vnni_dot_8x4_u8i8i32"] == intr
    # a path relative to the hardware file works as well
    (tmp_path / "hardware" / "rel.yaml").write_text(
        MYCPU.replace("my-vnni-cpu", "rel").replace(
            "[x86-avx512-vnni-256, x86-avx512-vnni]", "[../intrinsics/x86-avx512-vnni-256.yaml]"
        )
    )
    assert hardware.load(tmp_path / "hardware" / "rel.yaml").intrinsics == (intr,)


# ----------------------------------------------------------------------------------------------
# broken files: each names the file, the key path and the mistake


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


I0 = "intrinsics[0]"
# (id, intrinsic file text, key path, fragments of the message)
BROKEN_INTRINSICS = [
    ("missing-key", _edit(VNNI256, "    semantics: C[i] += cast(int32, A[k]) * cast(int32, B[i, k])\n", ""),
     f"{I0}.semantics", ["missing required key", "operands, iterators, semantics"]),
    ("unknown-key", _edit(VNNI256, "    iterators:", "    iterator_list: []\n    iterators:"),
     f"{I0}.iterator_list", ["unknown key 'iterator_list'", "known keys are: name"]),
    ("wrong-dtype", _edit(VNNI256, "dtype: int8, role", "dtype: int7, role"),
     f"{I0}.operands[1].dtype", ["expected a data type such as int8", "found 'int7'"]),
    ("shape-mismatch", _edit(VNNI256, "shape: [8, 4]", "shape: [16, 4]"),
     f"{I0}.semantics", ["shape mismatch", "operand B spans 0..7", "dimension 0 of its shape [16, 4] is 0..15"]),
    ("bad-expression", _edit(VNNI256, "* cast(int32, B[i, k])", "* * cast(int32, B[i, k])"),
     f"{I0}.semantics", ["column 29", "bad expression", "invalid syntax"]),
    ("undeclared-iterator", _edit(VNNI256, "B[i, k])", "B[i, q])"),
     f"{I0}.semantics", ["column 46", "iterator 'q' is not declared", "declared iterators are: i, k"]),
    ("undeclared-operand", _edit(VNNI256, "cast(int32, A[k])", "cast(int32, D[k])"),
     f"{I0}.semantics", ["column 21", "operand 'D' is not declared", "declared operands are: A, B, C"]),
    ("type-mismatch", _edit(VNNI256, "cast(int32, A[k]) * cast(int32, B[i, k])", "A[k] * B[i, k]"),
     f"{I0}.semantics", ["different types", "A[k] is uint8 and B[i, k] is int8"]),
    ("unused-iterator", _edit(VNNI256, "      - {name: k, kind: reduce, extent: 4}\n",
                              "      - {name: k, kind: reduce, extent: 4}\n      - {name: r, kind: reduce, extent: 2}\n"),
     f"{I0}.semantics", ["iterator r is declared but never used"]),
    ("spatial-used-as-reduce", _edit(VNNI256, "{name: k, kind: reduce", "{name: k, kind: spatial"),
     f"{I0}.semantics", ["spatial iterator k does not index the written operand C"]),
    ("accumulate-into-output", _edit(VNNI256, "role: accumulator", "role: output"),
     f"{I0}.semantics", ["operand C has role output", "expected role accumulator"]),
    ("unknown-arg-operand", _edit(VNNI256, "{operand: B, load: int8x32}", "{operand: W, load: int8x32}"),
     f"{I0}.llvm.args[2].operand", ["unknown operand 'W'", "operands: A, B, C"]),
    ("arg-load-type", _edit(VNNI256, "{operand: B, load: int8x32}", "{operand: B, load: int8x64}"),
     f"{I0}.llvm.args[2].load", ["expected int8x32: the whole operand B ([8, 4] int8) as one vector", "found 'int8x64'"]),
    ("reinterpret-size", _edit(VNNI256, "reinterpret: uint8x32]", "reinterpret: uint8x64]"),
     f"{I0}.llvm.args[1].then[2].reinterpret", ["a type of 256 bits", "found 'uint8x64'"]),
    ("operand-not-passed", _edit(VNNI256, "        - {operand: B, load: int8x32}\n", ""),
     f"{I0}.llvm.args", ["operand B (role input) is never passed to llvm.x86.avx512.vpdpbusd.256"]),
    ("strided-vector-load", _edit(VNNI256, "dtype: int8, role: input, contiguous: true", "dtype: int8, role: input, row_stride: any"),
     f"{I0}.llvm.args[2].load", ["operand B is loaded as one vector, so it must declare contiguous: true"]),
    ("returns-type", _edit(VNNI256, "returns: int32x8", "returns: int32x16"),
     f"{I0}.llvm.returns", ["expected int32x8", "found 'int32x16'"]),
    ("llvm-rejects-signature", _edit(VNNI256, "vpdpbusd.256", "vpdpbusd.512"),
     f"{I0}.llvm.returns", ["LLVM 22 rejects a call of llvm.x86.avx512.vpdpbusd.512 as <8 x i32> (<8 x i32>, <32 x i8>, "
                            "<32 x i8>): Intrinsic has incorrect return type"]),
    ("llvm-unknown-intrinsic", _edit(VNNI256, "vpdpbusd.256", "vpdpbusq.256"),
     f"{I0}.llvm.intrinsic", ["LLVM 22 has no intrinsic llvm.x86.avx512.vpdpbusq.256"]),
    ("bad-llvm-name", _edit(VNNI256, "intrinsic: llvm.x86", "intrinsic: x86"),
     f"{I0}.llvm.intrinsic", ["an LLVM intrinsic name"]),
    ("wrong-target-key", _edit(VNNI256, "    llvm:\n", "    cuda:\n"),
     f"{I0}.cuda", ["unknown key 'cuda'"]),
    ("name-not-file", _edit(VNNI256, "name: x86-avx512-vnni-256", "name: vnni256"),
     "name", ["expected 'broken'", "found 'vnni256'"]),
    ("not-a-mapping", "- 1\n- 2\n", "", ["a YAML mapping (an intrinsic set)"]),
    ("yaml-syntax", "name: [x\n", "", ["not valid YAML at line"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "key", "fragments"), [b[1:] for b in BROKEN_INTRINSICS], ids=[b[0] for b in BROKEN_INTRINSICS]
)
@pytest.mark.slow
def test_broken_intrinsic_file_names_file_key_and_mistake(tmp_path, text, key, fragments):
    path = tmp_path / "broken.yaml"
    path.write_text(text.replace("name: x86-avx512-vnni-256", "name: broken"))  # the file is broken.yaml
    with pytest.raises(IntrinsicError) as info:
        load_intrinsic(path)
    err = info.value
    assert isinstance(err, HardwareError) and err.source == str(path) and err.key == key
    message = str(err)
    where = f"{path}:{err.line}" if err.line is not None else str(path)  # the key's line, where it has one
    assert message.startswith(f"{where}: {key}: " if key else f"{where}: ")
    for fragment in fragments:
        assert fragment in message, message


WMMA_BAD = [
    ("unknown-placeholder", 'load_matrix_sync({dst}, {src}, {src.stride})', 'load_matrix_sync({dst}, {srcx}, {src.stride})',
     "intrinsics[0].cuda.template", ["placeholder {srcx} names no operand"]),
    ("fragment-without-declaration", "    - scope: wmma.matrix_b\n      dtype: float16\n", "    - scope: wmma.matrix_b\n      dtype: float32\n",
     "intrinsics[1].cuda.template", ["fragment scope wmma.matrix_b with dtype float16", "declares no fragment"]),
    ("unit-load-scope", "load: {A: wmma_load_a_16x16x16_f16, B: wmma_load_b_16x16x16_f16}\n    store: wmma_store_16x16x16_f32",
     "load: {A: wmma_load_b_16x16x16_f16, B: wmma_load_b_16x16x16_f16}\n    store: wmma_store_16x16x16_f32",
     "units[0].load.A", ["scope wmma.matrix_a", "found 'scope wmma.matrix_b"]),
    ("unit-unknown-intrinsic", "compute: wmma_mma_16x16x16_f16f32", "compute: wmma_mma_16x16x16_f16f64",
     "units[0].compute", ["unknown intrinsic 'wmma_mma_16x16x16_f16f64'"]),
    ("bad-compute-capability", 'compute_capability: "7.0"', "compute_capability: seven",
     "requires.compute_capability", ['compute capability "major.minor"']),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "fragments"), [b[1:] for b in WMMA_BAD], ids=[b[0] for b in WMMA_BAD])
@pytest.mark.slow
def test_broken_cuda_intrinsic_file(tmp_path, old, new, key, fragments):
    text = Path(load_intrinsic("cuda-wmma-f16").source).read_text()
    path = tmp_path / "cuda-wmma-f16.yaml"
    path.write_text(_edit(text, old, new))
    with pytest.raises(IntrinsicError) as info:
        load_intrinsic(path)
    assert info.value.source == str(path) and info.value.key == key
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


GPU = Path(hardware.load("nvidia-sm86").source).read_text()
BROKEN_HARDWARE = [
    ("unknown-intrinsic-set", MYCPU, "x86-avx512-vnni]", "x86-avx512-vnnx]",
     "intrinsics[1]", ["unknown intrinsic set 'x86-avx512-vnnx'", "known sets:", "x86-avx512-vnni"]),
    ("set-needs-feature", MYCPU, "+avx512vl, +avx512vnni]", "+avx512vl]",
     "intrinsics[0]", ["cannot be offered by my-vnni-cpu", "needs features +avx512vnni"]),
    ("set-needs-arch", MYCPU, "x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu",
     "intrinsics[0]", ["needs architecture x86_64", "is aarch64"]),
    ("intrinsics-not-list", MYCPU, "intrinsics: [x86-avx512-vnni-256, x86-avx512-vnni]", "intrinsics: x86-avx512-vnni",
     "intrinsics", ["a list of intrinsic set names"]),
    ("gpu-missing", GPU, "gpu:\n  compute_capability", "gpux:\n  compute_capability", "gpux", ["unknown key 'gpux'"]),
    ("gpu-section-missing-key", GPU, "  warp_size: 32\n", "", "gpu.warp_size", ["missing required key"]),
    ("gpu-bad-cc", GPU, 'compute_capability: "8.6"', 'compute_capability: "8.6.1"', "gpu.compute_capability",
     ['compute capability "major.minor"', "found '8.6.1'"]),
    ("gpu-cpu-name-mismatch", GPU, "cpu: sm_86", "cpu: sm_80", "cpu", ["expected sm_86", "found 'sm_80'"]),
    ("gpu-missing-scope", GPU, "local, wmma.matrix_a, wmma.matrix_b", "local, wmma.matrix_a",
     "intrinsics[0]", ["operand dst in scope wmma.matrix_b", "nvidia-sm86 does not have"]),
    ("gpu-cc-too-old", GPU, 'compute_capability: "8.6"', 'compute_capability: "7.0"', "cpu", ["expected sm_70"]),
    ("gpu-no-l3-on-cpu", MYCPU, ", l3: 16 MiB}", "}", "caches.l3", ["missing required key for a cpu descriptor"]),
    ("cpu-with-gpu", MYCPU, "cores: 2\n", "cores: 2\ngpu: {compute_capability: '8.0', warp_size: 32, "
     "max_threads_per_block: 1024, max_shared_memory_per_block: 48 KiB, registers_per_block: 65536, "
     "registers_per_thread: 255, memory_scopes: [global]}\n", "gpu", ["a cpu descriptor (kind: cpu) cannot have a gpu"]),
    ("bad-scope-name", GPU, "memory_scopes: [global,", "memory_scopes: [Global Memory, global,",
     "gpu.memory_scopes[0]", ["a scope name"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("base", "old", "new", "key", "fragments"), [b[1:] for b in BROKEN_HARDWARE], ids=[b[0] for b in BROKEN_HARDWARE]
)
def test_broken_hardware_file_names_file_key_and_mistake(tmp_path, base, old, new, key, fragments):
    (tmp_path / "intrinsics").mkdir()
    (tmp_path / "intrinsics" / "x86-avx512-vnni-256.yaml").write_text(VNNI256)
    path = tmp_path / "my-vnni-cpu.yaml"
    path.write_text(_edit(base, old, new))
    with pytest.raises(HardwareError) as info:
        hardware.load(path)
    err = info.value
    assert err.source == str(path) and err.key == key, str(err)
    where = f"{path}:{err.line}" if err.line is not None else str(path)  # the key's line, where it has one
    assert str(err).startswith(f"{where}: {key}: ")
    for fragment in fragments:
        assert fragment in str(err), str(err)


def test_compute_capability_too_old_for_a_set(tmp_path):
    text = _edit(GPU, 'compute_capability: "8.6"', 'compute_capability: "7.0"').replace("sm_86", "sm_70")
    path = tmp_path / "volta.yaml"
    path.write_text(text)  # cuda-wmma-s8 needs 7.2
    with pytest.raises(
        HardwareError, match=r"intrinsics\[1\]: .*needs compute capability 7.2 or newer but nvidia-sm86 has 7.0"
    ):
        hardware.load(path)
    path.write_text(text.replace("cuda-wmma-s8]", "]").replace(", ]", "]"))
    assert hardware.load(path).intrinsic("wmma_mma_16x16x16_f16f32").for_target(hardware.load(path))


def test_unknown_intrinsic_set_name():
    with pytest.raises(IntrinsicError, match=r"'no-such-set'.*no such intrinsic set; known: .*x86-avx512-vnni"):
        load_intrinsic("no-such-set")
