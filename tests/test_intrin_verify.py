"""Intrinsic verification (tensorsearch.runtime.verify): every implementation is run alone against
its own semantics before a program uses it.

The user-written intrinsics here run on any x86-64 CPU with AVX2 (this machine is a Zen 3: no
AVX-512, no VNNI): vpmaddwd as an int16 dot unit (``accumulate: true``), vpsignw (an elementwise
intrinsic whose two arguments do not commute) and a float FMA. Each has a correct version that
verifies and wrong versions -- swapped call arguments, B declared transposed in the semantics, a
product computed in a narrower type than the instruction's -- that are refused naming the file,
directly, through ``build`` of a tensorized program, and through ``tune``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
from user_units import DOT, PMADDWD

import tensorsearch as ts
from tensorsearch import target, te
from tensorsearch.codegen import llvm as llvm_codegen
from tensorsearch.interpreter import interpret
from tensorsearch.ir import Max, Min, const
from tensorsearch.runtime import verify
from tensorsearch.runtime.cross import aarch64_tools_available
from tensorsearch.runtime.verify import IntrinsicVerifyError, random_inputs, verify_intrinsic
from tensorsearch.schedule import Schedule, tile_with_intrin
from tensorsearch.target import IntrinsicError, IntrinsicNotVerified

needs_avx2 = pytest.mark.skipif(
    not llvm.get_process_triple().startswith("x86_64") or not target.native().has_feature("+avx2"),
    reason="the user intrinsics of these tests are AVX2 instructions",
)


# vpsignw: C[i] = A[i] negated, zeroed or kept as B[i] is negative, zero or positive
PSIGN = """\
name: {name}
target: llvm
requires:
  arch: [x86_64]
  features: [+avx2]
intrinsics:
  - name: avx2_sign_16_i16
    operands:
      - {{name: A, shape: [16], dtype: int16, role: input, contiguous: true}}
      - {{name: B, shape: [16], dtype: int16, role: input, contiguous: true}}
      - {{name: C, shape: [16], dtype: int16, role: output, contiguous: true}}
    iterators:
      - {{name: i, kind: spatial, extent: 16}}
    semantics: C[i] = A[i] * max(min(B[i], 1), -1)
    llvm:
      intrinsic: llvm.x86.avx2.psign.w
      args:
        - {{operand: {first}, load: int16x16}}
        - {{operand: {second}, load: int16x16}}
      returns: int16x16
      store: C
"""

# llvm.fma rounds once; the semantics rounds the product and the sum: within the tolerance
FMA = """\
name: {name}
target: llvm
requires:
  arch: [x86_64]
  features: [+fma]
intrinsics:
  - name: fma_8_f32
    operands:
      - {{name: A, shape: [8], dtype: float32, role: input, contiguous: true}}
      - {{name: B, shape: [8], dtype: float32, role: input, contiguous: true}}
      - {{name: C, shape: [8], dtype: float32, role: accumulator, contiguous: true}}
    iterators:
      - {{name: i, kind: spatial, extent: 8}}
    semantics: C[i] += A[i] * B[i]
    llvm:
      intrinsic: llvm.fma.v8f32
      args:
        - {{operand: {first}, load: float32x8}}
        - {{operand: B, load: float32x8}}
        - {{operand: {third}, load: float32x8}}
      returns: float32x8
      store: C
"""


def _pmaddwd(semantics: str = DOT, b_shape: str = "[8, 2]", c_dtype: str = "int32"):
    return lambda name: PMADDWD.format(name=name, semantics=semantics, b_shape=b_shape, c_dtype=c_dtype)


CORRECT = {
    "pmaddwd": _pmaddwd(),
    "psign": lambda name: PSIGN.format(name=name, first="A", second="B"),
    "fma": lambda name: FMA.format(name=name, first="A", third="C"),
}
WRONG = {
    # (a) the call's arguments swapped where the order matters
    "swapped-psign": lambda name: PSIGN.format(name=name, first="B", second="A"),
    "swapped-fma": lambda name: FMA.format(name=name, first="C", third="A"),
    # (b) B declared transposed in the semantics; the implementation loads it row-major
    "transposed-b": _pmaddwd("C[i] += cast(int32, A[k]) * cast(int32, B[k, i])", b_shape="[2, 8]"),
    # (c) the semantics multiplies in int16 (wrapping) where the instruction's products are 32-bit
    "narrow-product": _pmaddwd("C[i] += cast(int32, A[k] * B[i, k])"),
}


def _write(tmp_path, make, name: str = "user-dot") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(make(name))
    return str(path)


def _load(tmp_path, make, name: str = "user-dot"):
    path = _write(tmp_path, make, name)
    return path, target.load_intrinsic(path).intrinsics[0]


def _user_hw(iset):
    """This CPU, offering the user's set (what a hardware YAML listing it gives)."""
    return dataclasses.replace(target.native(), intrinsic_sets=(iset,))


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test starts with an empty verdict cache in its own directory and no warnings issued."""
    cache = tmp_path / "verified"
    monkeypatch.setenv(verify.ENV_CACHE, str(cache))
    monkeypatch.setattr(verify, "_MEMORY", {})
    monkeypatch.setattr(target.intrinsics, "_WARNED_NOT_VERIFIED", set())
    return cache


def _refusal(path: str, name: str) -> str:
    return (
        rf"^{re.escape(path)}: intrinsic {name} computes something other than its semantics: "
        r"lane (\d+) of C is (\S+), the semantics give (\S+)( \(more than the rounding tolerance \S+ apart\))? "
        r"\(inputs seed (\d+)\)$"
    )


# ---------------------------------------------------------------------------------------------
# verify_intrinsic


@needs_avx2
@pytest.mark.parametrize("which", sorted(CORRECT))
def test_correct_intrinsics_verify(tmp_path, fresh_cache, which):
    path, intr = _load(tmp_path, CORRECT[which])
    verdict = verify_intrinsic(intr)
    assert verdict.verified and not verdict.cached
    assert verdict.source == path and verdict.intrinsic == intr.name
    assert re.fullmatch(r"8 trials on this CPU \(.+\)", verdict.detail), verdict.detail
    assert str(verdict).startswith(f"{path}: {intr.name} verified: 8 trials")
    (entry,) = fresh_cache.glob("*.json")
    rec = json.loads(entry.read_text())
    assert rec["ok"] is True and rec["intrinsic"] == intr.name and rec["file"] == path


@needs_avx2
@pytest.mark.parametrize("which", sorted(WRONG))
def test_wrong_intrinsics_are_refused_naming_the_file_and_lane(tmp_path, which):
    path, intr = _load(tmp_path, WRONG[which])
    with pytest.raises(IntrinsicVerifyError, match=_refusal(path, intr.name)) as info:
        verify_intrinsic(intr)
    err = info.value
    assert isinstance(err, IntrinsicError) and isinstance(err, ValueError)
    assert err.source == path and err.intrinsic == intr.name and not err.cached
    # the seed it names gives the inputs again, and the semantics' value it quotes
    m = re.match(_refusal(path, intr.name), str(err))
    lane, want, seed = int(m.group(1)), m.group(3), int(m.group(5))
    result = interpret(intr.desc_func(), *random_inputs(intr, seed))
    assert repr(result[-1][lane].item()) == want


def test_a_wrong_accumulate_dtype_is_refused_when_the_file_loads(tmp_path):
    """(c) C declared int16 while vpmaddwd returns int32 lanes: the loader's static checks refuse it
    (before verification could), naming the file and the key."""
    bad = _pmaddwd("C[i] += cast(int16, A[k]) * cast(int16, B[i, k])", c_dtype="int16")
    path = _write(tmp_path, bad)
    with pytest.raises(IntrinsicError) as info:
        target.load_intrinsic(path)
    assert str(info.value).startswith(
        f"{path}:26: intrinsics[0].llvm.returns: expected int16x8: the stored operand C ([8] int16) as one vector, "
        "found 'int32x8'"
    )


@needs_avx2
def test_verdicts_are_cached_in_memory_and_on_disk(tmp_path, fresh_cache, monkeypatch):
    path, intr = _load(tmp_path, CORRECT["pmaddwd"])
    runs = []
    real_run = verify._run
    monkeypatch.setattr(verify, "_run", lambda *a: runs.append(a) or real_run(*a))
    assert not verify_intrinsic(intr).cached
    assert verify_intrinsic(intr).cached  # memory
    monkeypatch.setattr(verify, "_MEMORY", {})
    assert verify_intrinsic(intr).cached  # disk, as a new process would find it
    assert len(runs) == 1
    # the key follows the file's content: a changed comment means a new verification
    with open(path, "a") as f:
        f.write("# edited\n")
    intr2 = target.load_intrinsic(path).intrinsics[0]
    assert intr2.digest == intr.digest
    assert not verify_intrinsic(intr2).cached and len(runs) == 2
    assert len(list(fresh_cache.glob("*.json"))) == 2


@needs_avx2
def test_a_failure_is_cached_and_still_raises(tmp_path, fresh_cache, monkeypatch):
    path, intr = _load(tmp_path, WRONG["transposed-b"])
    with pytest.raises(IntrinsicVerifyError):
        verify_intrinsic(intr)
    (entry,) = fresh_cache.glob("*.json")
    assert json.loads(entry.read_text())["ok"] is False
    monkeypatch.setattr(verify, "_MEMORY", {})
    monkeypatch.setattr(verify, "_run", lambda *a: pytest.fail("a cached failure must not run again"))
    with pytest.raises(IntrinsicVerifyError, match=_refusal(path, intr.name)) as info:
        verify_intrinsic(intr)
    assert info.value.cached


@needs_avx2
def test_an_unwritable_or_disabled_cache_is_skipped_silently(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(verify.ENV_CACHE, str(blocker / "verified"))
    _, intr = _load(tmp_path, CORRECT["psign"])
    assert verify_intrinsic(intr).verified
    monkeypatch.setenv(verify.ENV_CACHE, "off")
    monkeypatch.setattr(verify, "_MEMORY", {})
    assert verify.cache_dir() is None and verify_intrinsic(intr).verified


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv(verify.ENV_CACHE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert verify.cache_dir() == tmp_path / "xdg" / "tensorsearch" / "verified"
    monkeypatch.setenv(verify.ENV_CACHE, str(tmp_path / "mine"))
    assert verify.cache_dir() == tmp_path / "mine"


def test_inputs_cover_the_full_integer_range_and_float_rounding():
    hw = target.load("x86-emeraldrapids")
    vnni = hw.intrinsic("vnni_dot_16x4_u8i8i32")
    edges = random_inputs(vnni, 0)
    assert set(np.unique(edges[0])) <= {0, 1, 127, 128, 254, 255} and edges[0].dtype == np.uint8
    assert {-128, 127} <= set(np.unique(np.concatenate([random_inputs(vnni, s)[1].ravel() for s in range(8)])))
    assert random_inputs(vnni, 3)[2].dtype == np.int32
    assert np.abs(random_inputs(vnni, 3)[2]).max() > 1 << 28  # the accumulator over its full range too
    for a, b in zip(random_inputs(vnni, 5), random_inputs(vnni, 5), strict=True):
        np.testing.assert_array_equal(a, b)  # a seed gives the same inputs again


# ---------------------------------------------------------------------------------------------
# hosts that cannot run an intrinsic


def test_vnni_on_a_cpu_without_it_is_not_verified_and_says_so_once():
    hw = target.load("x86-emeraldrapids")
    vnni = hw.intrinsic("vnni_dot_16x4_u8i8i32")
    if target.native().has_feature("+avx512vnni"):
        assert verify_intrinsic(vnni, hw).verified
        return
    with pytest.warns(IntrinsicNotVerified) as record:
        verdict = verify_intrinsic(vnni, hw)
    assert not verdict.verified
    (w,) = record
    assert re.fullmatch(
        r".*/x86-avx512-vnni\.yaml: vnni_dot_16x4_u8i8i32 not verified: this CPU \(\S+\) lacks \+avx512vnni",
        str(w.message),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not verify_intrinsic(vnni, hw).verified  # once per intrinsic per process


@pytest.mark.slow
def test_sdot_is_verified_under_qemu_where_installed():
    arm = target.load("arm-graviton2")
    sdot = arm.intrinsic("neon_sdot_4x4_i8i8i32")
    reason = aarch64_tools_available()
    if reason is not None:
        with pytest.warns(IntrinsicNotVerified, match=r"neon_sdot_4x4_i8i8i32 not verified: .*qemu"):
            assert not verify_intrinsic(sdot, arm).verified
        pytest.skip(f"aarch64 tools missing ({reason}): checked that SDOT is reported not verified")
    verdict = verify_intrinsic(sdot, arm)
    assert verdict.verified and verdict.detail == "8 trials under qemu-aarch64 (neoverse-n1)"


@pytest.mark.slow
def test_a_wrong_aarch64_intrinsic_is_refused_under_qemu(tmp_path):
    reason = aarch64_tools_available()
    if reason is not None:
        pytest.skip(reason)
    text = open(target.load("arm-graviton2").intrinsic_sets[0].source).read()
    wrong = text.replace("name: arm-neon-dotprod", "name: my-dotprod").replace(
        "semantics: C[i] += cast(int32, A[k]) * cast(int32, B[i, k])",
        "semantics: C[i] += cast(int32, A[k]) * cast(int32, B[k, i])",  # transposed
    )
    assert wrong.count("B[k, i]") == 1
    path = tmp_path / "my-dotprod.yaml"
    path.write_text(wrong)
    sdot = target.load_intrinsic(path)["neon_sdot_4x4_i8i8i32"]
    with pytest.raises(IntrinsicVerifyError, match=_refusal(str(path), sdot.name)):
        verify_intrinsic(sdot)


def test_without_qemu_an_aarch64_intrinsic_says_what_is_missing(monkeypatch):
    if llvm.get_process_triple().startswith("aarch64"):
        pytest.skip("this machine runs aarch64 code itself")
    monkeypatch.setattr(
        verify, "aarch64_tools_available", lambda: "not on PATH: qemu-aarch64 (apt-get install qemu-user)"
    )
    udot = target.load("arm-graviton2").intrinsic("neon_udot_4x4_u8u8u32")
    with pytest.warns(
        IntrinsicNotVerified,
        match=r"arm-neon-dotprod\.yaml: neon_udot_4x4_u8u8u32 not verified: this machine \(x86_64\) runs aarch64 "
        r"code only under qemu, and not on PATH: qemu-aarch64",
    ):
        assert not verify_intrinsic(udot).verified


def test_cuda_intrinsics_are_not_verified_and_say_so():
    mma = target.load("nvidia-sm86").intrinsic("wmma_mma_16x16x16_f16f32")
    with pytest.warns(
        IntrinsicNotVerified, match=r"cuda-wmma-f16\.yaml: wmma_mma_16x16x16_f16f32 not verified: .*CUDA"
    ):
        verdict = verify_intrinsic(mma)
    assert not verdict.verified and "CUDA" in verdict.detail


# ---------------------------------------------------------------------------------------------
# end to end: tile_with_intrin + tensorize + build, and tune


def _gemv(transposed: bool = False, narrow: bool = False):
    """C[n] = sum_k A[k] * W[n, k] (int16 -> int32), written as the intrinsic's semantics are."""
    A = te.placeholder((16,), "int16", name="A")
    W = te.placeholder((16, 32) if transposed else (32, 16), "int16", name="W")
    k = te.reduce_axis((0, 16), name="k")

    def body(n):
        w = W[k, n] if transposed else W[n, k]
        prod = te.cast(A[k] * w, "int32") if narrow else te.cast(A[k], "int32") * te.cast(w, "int32")
        return te.sum(prod, axis=k)

    C = te.compute((32,), body, name="C")
    return te.create_prim_func([A, W, C], name="gemv")


def _sign():
    A = te.placeholder((64,), "int16", name="A")
    B = te.placeholder((64,), "int16", name="B")
    one, minus_one = const(1, "int16"), const(-1, "int16")
    C = te.compute((64,), lambda i: A[i] * Max(Min(B[i], one), minus_one), name="C")
    return te.create_prim_func([A, B, C], name="gemv")


def _tensorized(func, hw, intr):
    sch = Schedule(func, hardware=hw)
    sch.tensorize(tile_with_intrin(sch, sch.get_block("C"), intr), intr.name)
    return sch.func


def _numpy(which: str, inputs):
    a, b = (x.astype(np.int64) for x in inputs)
    if which == "psign":
        return (a * np.sign(b)).astype(np.int16)
    if which == "transposed":
        return (b.T @ a).astype(np.int32)
    if which == "narrow":
        return (b * a).astype(np.int16).astype(np.int64).sum(axis=1).astype(np.int32)
    return (b @ a).astype(np.int32)


E2E = {  # wrong intrinsic, the program written like its semantics, how numpy computes that program
    "swapped-psign": (WRONG["swapped-psign"], _sign, "psign"),
    "transposed-b": (WRONG["transposed-b"], lambda: _gemv(transposed=True), "transposed"),
    "narrow-product": (WRONG["narrow-product"], lambda: _gemv(narrow=True), "narrow"),
}


def _inputs(func, rng):
    return [
        rng.integers(-(1 << 15), 1 << 15, tuple(s.value for s in b.shape)).astype(np.int16) for b in func.buffers[:2]
    ]


@needs_avx2
@pytest.mark.parametrize("which", sorted(E2E))
def test_build_refuses_a_program_using_a_wrong_intrinsic_before_compiling_it(tmp_path, monkeypatch, which):
    make, program, model = E2E[which]
    path, _ = _load(tmp_path, make)
    iset = target.load_intrinsic(path)
    hw = _user_hw(iset)
    func = _tensorized(program(), hw, iset.intrinsics[0])
    # without the check the program builds and computes wrong numbers (the bug this refuses)
    mod = ts.build(func, hw, verify_intrinsics=False)
    inputs = _inputs(func, np.random.default_rng(1))
    out = np.zeros(tuple(s.value for s in func.buffers[2].shape), func.buffers[2].dtype.numpy)
    mod(*inputs, out)
    assert not np.array_equal(out, _numpy(model, inputs))
    compiled = []
    real_generate = llvm_codegen.generate
    monkeypatch.setattr(llvm_codegen, "generate", lambda f, t, n: compiled.append(n) or real_generate(f, t, n))
    with pytest.raises(IntrinsicVerifyError, match=_refusal(path, iset.intrinsics[0].name)):
        ts.build(func, hw)
    assert "gemv" not in compiled  # refused before the program itself was compiled


@needs_avx2
def test_a_user_hardware_yaml_with_the_correct_unit_builds_exact_programs(tmp_path):
    _write(tmp_path, CORRECT["pmaddwd"], "avx2-pmaddwd")
    here = target.native()
    (tmp_path / "my-cpu.yaml").write_text(
        f"name: my-cpu\nkind: cpu\ntriple: {here.triple}\ncpu: {here.cpu}\nfeatures: [+avx2, +fma]\ncores: 1\n"
        "vector_bits: 256\ncaches: {l1d: 32 KiB, l2: 512 KiB, l3: 16 MiB}\nintrinsics: [avx2-pmaddwd]\n"
    )
    hw = target.load(tmp_path / "my-cpu.yaml")
    intr = hw.intrinsic("avx2_dot_8x2_i16i16i32")
    func = _tensorized(_gemv(), hw, intr)
    with warnings.catch_warnings():
        warnings.simplefilter("error", IntrinsicNotVerified)
        mod = ts.build(func, hw)
    assert "vpmaddwd" in mod.assembly
    inputs = _inputs(func, np.random.default_rng(2))
    out = np.zeros(32, np.int32)
    mod(*inputs, out)
    np.testing.assert_array_equal(out, _numpy("dot", inputs))


@needs_avx2
def test_build_verifies_only_the_intrinsics_a_program_calls(tmp_path):
    path, _ = _load(tmp_path, WRONG["transposed-b"])
    hw = _user_hw(target.load_intrinsic(path))
    mod = ts.build(_gemv(), hw)  # not tensorized: the wrong intrinsic is offered but not called
    inputs = _inputs(_gemv(), np.random.default_rng(3))
    out = np.zeros(32, np.int32)
    mod(*inputs, out)
    np.testing.assert_array_equal(out, _numpy("dot", inputs))


@needs_avx2
def test_an_intrinsic_the_build_hardware_does_not_offer_is_reported_not_verified(tmp_path):
    """tensorize takes an Intrinsic object; built for a hardware that does not offer it, the call
    cannot be traced to one definition: build warns, naming the file, instead of verifying."""
    path, intr = _load(tmp_path, WRONG["transposed-b"])
    func = _tensorized(_gemv(transposed=True), _user_hw(target.load_intrinsic(path)), intr)
    bare = target.native()  # offers no intrinsic set
    with pytest.warns(IntrinsicNotVerified) as record:
        ts.build(func, bare)
    (w,) = [w for w in record if str(w.message).startswith(f"{path}: ")]  # (and any other file loaded with that call)
    assert issubclass(w.category, IntrinsicNotVerified) and str(w.message).startswith(
        f"{path}: avx2_dot_8x2_i16i16i32 not verified: a program built for {bare.name} calls llvm.x86.avx2.pmadd.wd, "
        f"but {bare.name} does not offer this intrinsic"
    )


@needs_avx2
def test_tune_refuses_a_wrong_intrinsic_before_any_candidate(tmp_path):
    path, _ = _load(tmp_path, WRONG["transposed-b"])
    hw = _user_hw(target.load_intrinsic(path))
    work = tmp_path / "work"
    with pytest.raises(IntrinsicVerifyError, match=_refusal(path, "avx2_dot_8x2_i16i16i32")):
        ts.tune(_gemv(transposed=True), hw, trials=4, work_dir=work, workers=0)
    assert not work.exists()  # nothing was built, measured or recorded


def test_the_unit_docs_show_is_the_one_verified_here():
    docs = Path(__file__).resolve().parent.parent / "docs" / "hardware-yaml.md"
    if not docs.is_file():
        pytest.skip("no docs/ beside the tests (an installed package)")
    text = docs.read_text()
    start = text.index("```yaml\nname: avx2-pmaddwd\n") + len("```yaml\n")
    assert text[start : text.index("```", start)] == CORRECT["pmaddwd"]("avx2-pmaddwd")
