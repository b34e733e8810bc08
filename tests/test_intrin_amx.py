"""Intel AMX written as YAML only (intrinsics/x86-amx.yaml, hardware/x86-sapphirerapids.yaml): a
unit of several instructions with memory operands (pointer and row stride), tile registers as a
scope with a count, a configuration loaded once per unit tile, and the packed B layout written in
the semantics (``B[k // 4, j, k % 4]``).

Everywhere: the file loads and its calls are checked against LLVM; broken files are refused with
the file, key and mistake; a GEMM tiled by hand is tensorized with the int8 and bfloat16 units and
its lowered program (tile numbers, pointers, byte strides, the 64-byte configuration) and assembly
(``ldtilecfg``, ``tileloadd``, ``tdpbusd``/``tdpbf16ps``, ``tilestored``) are what the unit says; a
tile that does not fit is refused with the schedule unchanged. Where the CPU has AMX, the same
programs run against numpy (skipped with the reason elsewhere: no machine this project runs on
has AMX today).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tensorsearch as ts
from tensorsearch import hardware, workloads
from tensorsearch.intrin import IntrinsicError, LLVMTileCall, load_intrinsic, match, tile_with_intrin
from tensorsearch.ir import Call, Evaluate, IntImm, post_order_visit
from tensorsearch.runtime.module import request_xfeature
from tensorsearch.runtime.verify import intrinsic_program, intrinsics_called, offering, verify_intrinsic
from tensorsearch.schedule import Schedule, TensorizeError
from tensorsearch.schedule.units import register_blocking, tile_config
from tensorsearch.script import parse
from tensorsearch.search.space.design import DesignSpace

SPR = hardware.load("x86-sapphirerapids")
AMX = load_intrinsic("x86-amx")
INT8_UNIT, BF16_UNIT = "amx_16x16x64_u8i8i32", "amx_16x16x32_bf16f32"


def _needs_amx() -> None:
    if not SPR.runs_here:
        pytest.skip(f"this CPU ({ts.target.native().cpu}) has no AMX (+amx-tile, +amx-int8, +amx-bf16)")


def _gemm(a: str, b: str, c: str, m: int, n: int, k: int, pack: int) -> ts.ir.PrimFunc:
    """Z[i, j] = sum_k X[i, k] * W[k // pack, j, k % pack]: the weight stored packed as AMX reads it."""
    return parse(f'''
@T.prim_func
def gemm(X: T.Buffer(({m}, {k}), "{a}"), W: T.Buffer(({k // pack}, {n}, {pack}), "{b}"), Z: T.Buffer(({m}, {n}), "{c}")):
    for i, j, k in T.grid({m}, {n}, {k}):
        with T.block("Z"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            T.reads(X[vi, vk], W[vk // {pack}, vj, vk % {pack}])
            T.writes(Z[vi, vj])
            with T.init():
                Z[vi, vj] = T.{c}(0)
            Z[vi, vj] = Z[vi, vj] + T.Cast("{c}", X[vi, vk]) * T.Cast("{c}", W[vk // {pack}, vj, vk % {pack}])
''')


def _tensorized(func, unit: str, tile_m: int = 16, tile_n: int = 16) -> Schedule:
    sch = Schedule(func, hardware=SPR)
    i, j, k = sch.get_loops(sch.get_block("Z"))
    io, ii = sch.split(i, [None, tile_m])
    jo, ji = sch.split(j, [None, tile_n])
    sch.reorder(io, jo, ii, ji, k)
    sch.tensorize(ii, unit)
    return sch


def _calls(func) -> list[Call]:
    found: list[Call] = []
    post_order_visit(func.body, lambda n: found.append(n.value) if isinstance(n, Evaluate) else None)
    return [c for c in found if isinstance(c, Call) and c.op.startswith("llvm.")]


# ----------------------------------------------------------------------------------------------
# the file


def test_the_amx_file_declares_tile_registers_units_and_packed_b():
    assert AMX.tiles is not None and (AMX.tiles.scope, AMX.tiles.count, AMX.tiles.rows) == ("amx.tmm", 8, 16)
    assert (AMX.tiles.bytes_per_row, AMX.tiles.configure, AMX.tiles.palette) == (64, "llvm.x86.ldtilecfg", 1)
    unit = AMX.unit(INT8_UNIT)
    assert (unit.compute, unit.init, unit.store) == (
        "amx_tdpbusd_16x16x64",
        "amx_zero_16x16_i32",
        "amx_store_16x16_i32",
    )
    assert dict(unit.loads) == {"A": "amx_load_a_16x64_u8", "B": "amx_load_b_16x16x4_i8", "C": "amx_load_c_16x16_i32"}
    load_b = AMX["amx_load_b_16x16x4_i8"].impl
    assert isinstance(load_b, LLVMTileCall) and load_b.signature == ("void", ("i8", "ptr", "i64"))
    assert load_b.args == (("tile", "dst"), ("pointer", "src"), ("stride", "src"))
    # the packed index is IR: B[k // 4, j, k % 4], the semantics the interpreter evaluates
    expected = parse("""
@T.prim_func
def amx_tdpbusd_16x16x64(A: T.Buffer((16, 64), "uint8", scope="amx.tmm"), B: T.Buffer((16, 16, 4), "int8", scope="amx.tmm"), C: T.Buffer((16, 16), "int32", scope="amx.tmm")):
    for i, j, k in T.grid(16, 16, 64):
        with T.block("amx_tdpbusd_16x16x64"):
            v_i, v_j, v_k = T.axis.remap("SSR", [i, j, k])
            T.reads(A[0:16, 0:64], B[0:16, 0:16, 0:4], C[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            C[v_i, v_j] = C[v_i, v_j] + T.Cast("int32", A[v_i, v_k]) * T.Cast("int32", B[v_k // 4, v_j, v_k % 4])
""")
    assert ts.ir.structural_equal(AMX["amx_tdpbusd_16x16x64"].desc_func(), expected)
    rng = np.random.default_rng(7)
    a = rng.integers(0, 255, (16, 64), dtype=np.uint8, endpoint=True)
    b = rng.integers(-128, 127, (16, 16, 4), dtype=np.int8, endpoint=True)
    c = rng.integers(-1000, 1000, (16, 16), dtype=np.int32)
    want = c + a.astype(np.int32) @ b.transpose(0, 2, 1).reshape(64, 16).astype(np.int32)
    got = c.copy()
    ts.interpret(AMX["amx_tdpbusd_16x16x64"].desc_func(), a, b, got)
    assert np.array_equal(got, want)


def test_sapphire_rapids_offers_amx_and_the_other_x86_descriptors_do_not():
    assert [s.name for s in SPR.intrinsic_sets] == ["x86-amx", "x86-avx512-vnni"]
    assert all(SPR.has_feature(f) for f in ("+amx-tile", "+amx-int8", "+amx-bf16"))
    for name in ("x86-znver4", "x86-emeraldrapids", "x86-cascadelake"):
        assert "x86-amx" not in [s.name for s in hardware.load(name).intrinsic_sets]


AMX_TEXT = Path(AMX.source).read_text()
IN = "intrinsics"
BROKEN = [
    ("tile-arg-in-memory", "args: [{tile: dst}, {pointer: src}, {stride: src}]\n  - name: amx_load_b",
     "args: [{tile: src}, {pointer: src}, {stride: src}]\n  - name: amx_load_b",
     f"{IN}[0].llvm.args[0].tile", ["operand src is in scope global, not in the tile registers' scope amx.tmm"]),
    ("pointer-to-a-tile", "args: [{tile: dst}, {pointer: src}, {stride: src}]\n  - name: amx_load_b",
     "args: [{tile: dst}, {pointer: dst}, {stride: src}]\n  - name: amx_load_b",
     f"{IN}[0].llvm.args[1].pointer", ["operand dst is in scope amx.tmm; a pointer argument needs an operand in memory"]),
    ("operand-not-passed", "args: [{tile: dst}, {pointer: src}, {stride: src}]\n  - name: amx_load_b",
     "args: [{tile: dst}, {stride: src}]\n  - name: amx_load_b",
     f"{IN}[0].llvm.args", ["operand src is never passed to llvm.x86.tileloadd64 as a tile or a pointer"]),
    ("tile-too-wide", "[16, 64], dtype: uint8, role: input, row_stride: any}\n      - {name: dst, shape: [16, 64], dtype: "
     "uint8, role: output, scope: amx.tmm}\n    iterators:\n      - {name: i, kind: spatial, extent: 16}\n      - {name: k, "
     "kind: spatial, extent: 64}",
     "[16, 128], dtype: uint8, role: input, row_stride: any}\n      - {name: dst, shape: [16, 128], dtype: "
     "uint8, role: output, scope: amx.tmm}\n    iterators:\n      - {name: i, kind: spatial, extent: 16}\n      - {name: k, "
     "kind: spatial, extent: 128}",
     f"{IN}[0].llvm.args[0].tile", ["operand dst ([16, 128] uint8) is 16 rows of 128 bytes; a tile register holds at most 16 rows of 64 bytes"]),
    ("no-tile-registers", "llvm:\n  tiles:\n", "llvm_:\n  tiles:\n",
     "llvm_", ["unknown key 'llvm_'"]),
    ("unknown-configure", "configure: llvm.x86.ldtilecfg", "configure: llvm.x86.ldtilecfgx",
     "llvm.tiles.configure", ["LLVM 22 does not take llvm.x86.ldtilecfgx as void (ptr), a configuration's address: "
                              "it has no such intrinsic"]),
    ("wrong-arg-count", "args: [{tile: C}, {tile: A}, {tile: B}]\n  - name: amx_store_16x16_i32",
     "args: [{tile: C}, {tile: A}, {tile: B}, {tile: B}]\n  - name: amx_store_16x16_i32",
     f"{IN}[4].llvm.args", ["LLVM 22 does not take llvm.x86.tdpbusd as void (i8, i8, i8, i8)"]),
    ("memory-tile-scope", "scope: amx.tmm\n    count: 8", "scope: global\n    count: 8",
     "llvm.tiles.scope", ["a register scope of its own"]),
    ("modulo-by-iterator", "cast(int32, B[k // 4, j, k % 4])", "cast(int32, B[k // 4, j, k % j])",
     f"{IN}[4].semantics", ["the right side of '%' must be a positive integer"]),
    ("load-of-an-output", "load: {A: amx_load_a_16x64_u8, B: amx_load_b_16x16x4_i8, C: amx_load_c_16x16_i32}",
     "load: {A: amx_load_a_16x64_u8, B: amx_load_b_16x16x4_i8, D: amx_load_c_16x16_i32}",
     "units[0].load.D", ["'D' is not an input or accumulator operand of amx_tdpbusd_16x16x64; those are A, B, C"]),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "fragments"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
@pytest.mark.slow
def test_broken_amx_file_names_file_key_and_mistake(tmp_path, old, new, key, fragments):
    assert old in AMX_TEXT
    path = tmp_path / "x86-amx.yaml"
    path.write_text(AMX_TEXT.replace(old, new, 1))
    with pytest.raises(IntrinsicError) as info:
        load_intrinsic(path)
    assert info.value.source == str(path) and info.value.key == key, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


# ----------------------------------------------------------------------------------------------
# a GEMM tensorized with the units


def test_int8_gemm_lowers_to_the_units_tile_calls():
    sch = _tensorized(_gemm("uint8", "int8", "int32", 64, 32, 256, 4), INT8_UNIT)
    mod = ts.build(sch.func, SPR, jit=False)
    calls = _calls(mod.lowered)
    ops = [c.op.removeprefix("llvm.x86.") for c in calls]
    # per unit tile: configure, zero C, 4 steps of (load A, load B, multiply), store C; the steps loop
    assert ops == ["ldtilecfg", "tilezero", "tileloadd64", "tileloadd64", "tdpbusd", "tilestored64"]
    config = calls[0].args[0]
    assert config.op == "const_bytes" and [a.value for a in config.args] == [a.value for a in tile_config(1, [
        AMX["amx_tdpbusd_16x16x64"].operand(n) for n in ("A", "B", "C")])]  # fmt: skip
    assert [a.value for a in config.args[:2]] == [1, 0] and [a.value for a in config.args[16:22]] == [64, 0] * 3
    assert [a.value for a in config.args[48:52]] == [16, 16, 16, 0]
    tiles = [[a.value for a in c.args if isinstance(a, IntImm)] for c in calls[1:]]
    assert tiles == [[2], [0], [1], [2, 0, 1], [2]]  # A tmm0, B tmm1, C tmm2
    strides = {
        c.args[1].args[0].buffer.name: c.args[2] for c in calls if c.op.endswith(("tileloadd64", "tilestored64"))
    }
    for name, row in (("X", 256), ("W", 32 * 4), ("Z", 32)):  # elements between rows
        nxt, first = strides[name].args
        assert ts.arith.simplify(nxt.args[0].indices[0] - first.args[0].indices[0]).value == row
    asm = mod.assembly
    for mnemonic in ("ldtilecfg", "tilezero", "tileloadd", "tdpbusd", "tilestored"):
        assert re.search(rf"\b{mnemonic}\b", asm), mnemonic
    assert "$256" in asm and "$128" in asm  # the byte strides of X and of W and Z
    assert mod.tile_xfeatures == (18,)
    # the loads and stores are every unit's calls: the program is traced to its own unit's compute
    assert [i.name for i in intrinsics_called(mod.lowered, SPR)] == ["amx_tdpbusd_16x16x64"]


def test_bf16_gemm_lowers_to_tdpbf16ps():
    sch = _tensorized(_gemm("bfloat16", "bfloat16", "float32", 32, 32, 64, 2), BF16_UNIT)
    mod = ts.build(sch.func, SPR, jit=False)
    assert [c.op.removeprefix("llvm.x86.") for c in _calls(mod.lowered)] == [
        "ldtilecfg", "tilezero", "tileloadd64", "tileloadd64", "tdpbf16ps", "tilestored64"]  # fmt: skip
    assert re.search(r"\btdpbf16ps\b", mod.assembly)


def test_a_tile_that_does_not_fit_the_unit_leaves_the_schedule_unchanged():
    func = _gemm("uint8", "int8", "int32", 64, 24, 256, 4)
    sch = Schedule(func, hardware=SPR)
    i, j, k = sch.get_loops(sch.get_block("Z"))
    io, ii = sch.split(i, [None, 16])
    sch.reorder(io, ii, j, k)
    before, trace = sch.func, sch.trace.as_json_text()
    with pytest.raises(
        TensorizeError, match=r"unit amx_16x16x64_u8i8i32: operand C \(shape \[16, 16\]\) covers 24 elements of Z"
    ):
        sch.tensorize(ii, INT8_UNIT)
    assert sch.func is before and sch.trace.as_json_text() == trace
    sch = Schedule(_gemm("uint8", "int8", "int32", 16, 128, 256, 4), hardware=SPR)  # 1 A, 8 B and 8 C tiles
    before = sch.func
    with pytest.raises(
        TensorizeError, match=r"the unit holds 17 tiles \(A0, B0, B1, .*, C7\), more than the 8 tile registers"
    ):
        sch.tensorize(sch.get_loops(sch.get_block("Z"))[0], INT8_UNIT)
    assert sch.func is before
    plain = workloads.make("GMM", (1, 16, 16, 64), "int8").func  # Y[b, k, j]: not packed
    sch = Schedule(plain, hardware=SPR)
    with pytest.raises(
        TensorizeError, match=r"operand B's region \[1, 64, 16\] of Y does not fit its shape \[16, 16, 4\]"
    ):
        sch.tensorize(sch.get_loops(sch.get_block("Z"))[0], INT8_UNIT)


def test_a_unit_needing_more_tile_registers_than_the_cpu_has_is_refused(tmp_path):
    (tmp_path / "intrinsics").mkdir()
    (tmp_path / "intrinsics" / "x86-amx2.yaml").write_text(
        AMX_TEXT.replace("name: x86-amx\n", "name: x86-amx2\n").replace("count: 8 ", "count: 2 ")
        .replace("name: amx_", "name: amx2_").replace(": amx_", ": amx2_").replace("{A: amx_", "{A: amx2_")
        .replace("B: amx_", "B: amx2_").replace("C: amx_", "C: amx2_")
    )  # fmt: skip
    cpu = Path(SPR.source).read_text().replace("name: x86-sapphirerapids", "name: two-tiles")
    (tmp_path / "two-tiles.yaml").write_text(cpu.replace("[x86-amx,", "[intrinsics/x86-amx2.yaml,"))
    hw = hardware.load(tmp_path / "two-tiles.yaml")
    sch = Schedule(_gemm("uint8", "int8", "int32", 16, 16, 64, 4), hardware=hw)
    with pytest.raises(
        TensorizeError, match=r"the unit holds 3 tiles \(A, B, C\), more than the 2 tile registers of x86-amx2"
    ):
        sch.tensorize(sch.get_loops(sch.get_block("Z"))[0], "amx2_16x16x64_u8i8i32")


def test_verification_runs_each_unit_as_a_whole_where_the_cpu_has_amx():
    load_a = AMX["amx_load_a_16x64_u8"]
    if not SPR.runs_here:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            verdict = verify_intrinsic(load_a, SPR)
        assert not verdict.verified and verdict.intrinsic == "amx_tdpbusd_16x16x64"
        assert "lacks +amx-tile" in verdict.detail and len(caught) <= 1  # warned once per process
    for compute in ("amx_tdpbusd_16x16x64", "amx_tdpbf16ps_16x16x32"):  # the program it runs, built here
        mod = ts.build(
            intrinsic_program(AMX[compute], offering(ts.target.native(), AMX)), SPR, jit=False, verify_intrinsics=False
        )
        assert re.search(rf"\b{compute.split('_')[1]}\b", mod.assembly)


def test_the_kernel_is_asked_for_the_tile_registers_once():
    if SPR.runs_here:
        request_xfeature(18)  # granted, or the test fails here with the kernel's reason
        request_xfeature(18)
        return
    if ts.target.arch_of(ts.target.host_triple()) != "x86_64":
        pytest.skip("arch_prctl is an x86-64 system call")
    with pytest.raises(
        RuntimeError,
        match=r"Linux refused this process the tile registers: arch_prctl\(ARCH_REQ_XCOMP_PERM, 18\) failed",
    ):
        request_xfeature(18)


# ----------------------------------------------------------------------------------------------
# the matcher, tile_with_intrin and the design space


TILED_GMM = """
@T.prim_func
def main(X: T.Buffer((1, 64, 128), "uint8"), Y: T.Buffer((1, 128, 64), "int8"), Z: T.Buffer((1, 64, 64), "int32")):
    Y_reindex = T.alloc_buffer((1, 4, 32, 16, 4), "int8")
    for ax0, ax1, ax2 in T.grid(1, 64, 128):
        with T.block("Y_reindex"):
            v0, v1, v2 = T.axis.remap("SSS", [ax0, ax1, ax2])
            T.reads(Y[v0, v2, v1])
            T.writes(Y_reindex[v0, v1 // 16, v2 // 4, v1 % 16, v2 % 4])
            Y_reindex[v0, v1 // 16, v2 // 4, v1 % 16, v2 % 4] = Y[v0, v2, v1]
    for bb_init, i_init, j_init in T.grid(1, 64, 64):
        with T.block("Z_init"):
            v_bb, v_i, v_j = T.axis.remap("SSS", [bb_init, i_init, j_init])
            T.reads()
            T.writes(Z[v_bb, v_i, v_j])
            Z[v_bb, v_i, v_j] = 0
    for bb, i_0, j_0 in T.grid(1, 2, 2):
        with T.block("Z_update_o"):
            v_bb_o = T.axis.spatial(1, bb)
            v_i_o = T.axis.spatial(2, i_0)
            v_j_o = T.axis.spatial(2, j_0)
            v_k_o = T.axis.reduce(1, 0)
            T.reads(Z[v_bb_o, v_i_o * 32:v_i_o * 32 + 32, v_j_o * 32:v_j_o * 32 + 32], X[v_bb_o, v_i_o * 32:v_i_o * 32 + 32, 0:128], Y_reindex[v_bb_o, v_j_o * 2:v_j_o * 2 + 2, 0:32, 0:16, 0:4])
            T.writes(Z[v_bb_o, v_i_o * 32:v_i_o * 32 + 32, v_j_o * 32:v_j_o * 32 + 32])
            T.block_attr({"cuda_unit": "amx_16x16x64_u8i8i32"})
            for k_0, i_1, j_1, k_1 in T.grid(2, 32, 32, 64):
                with T.block("Z_update"):
                    v_i_i = T.axis.spatial(32, i_1)
                    v_j_i = T.axis.spatial(32, j_1)
                    v_k_i = T.axis.reduce(128, k_0 * 64 + k_1)
                    T.reads(Z[v_bb_o, v_i_o * 32 + v_i_i, v_j_o * 32 + v_j_i], X[v_bb_o, v_i_o * 32 + v_i_i, v_k_i], Y_reindex[v_bb_o, v_j_o * 2 + v_j_i // 16, v_k_i // 4, v_j_i % 16, v_k_i % 4])
                    T.writes(Z[v_bb_o, v_i_o * 32 + v_i_i, v_j_o * 32 + v_j_i])
                    Z[v_bb_o, v_i_o * 32 + v_i_i, v_j_o * 32 + v_j_i] = Z[v_bb_o, v_i_o * 32 + v_i_i, v_j_o * 32 + v_j_i] + T.Cast("int32", X[v_bb_o, v_i_o * 32 + v_i_i, v_k_i]) * T.Cast("int32", Y_reindex[v_bb_o, v_j_o * 2 + v_j_i // 16, v_k_i // 4, v_j_i % 16, v_k_i % 4])
"""


def test_the_matcher_packs_a_plain_weight_into_amx_b_tiles():
    wl = workloads.make("GMM", (1, 64, 64, 128), "int8")
    report = match(wl.func, "Z", AMX["amx_tdpbusd_16x16x64"])
    (mapping,) = report.feasible
    assert [(m.intrin_iter, m.workload_iters) for m in mapping.iterators] == [
        ("i", ("v_i",)),
        ("j", ("v_j",)),
        ("k", ("v_k",)),
    ]
    a, b, c = mapping.operands
    assert (a.in_place, a.layout, c.in_place, c.layout) == (True, "strided_rows", True, "strided_rows")
    assert not b.in_place and b.why == "the intrinsic reads B packed as B[k // 4, j, k % 4]"
    assert b.index_map == "lambda v_bb, v_j, v_k: (v_bb, v_j // 16, v_k // 4, v_j % 16, v_k % 4)"
    assert b.packed_shape == (1, 4, 32, 16, 4)


def test_register_blocking_fills_the_tile_registers_with_the_most_multiplies_per_load():
    tdpbusd = AMX["amx_tdpbusd_16x16x64"]
    assert register_blocking(tdpbusd, {"i": 1024, "j": 1024}) == {"i": 2, "j": 2}  # 4 C + 2 A + 2 B
    assert register_blocking(tdpbusd, {"i": 16, "j": 64}) == {"j": 2}  # 3 B tiles would not divide 64
    assert register_blocking(tdpbusd, {"i": 48, "j": 16}) == {"i": 3}  # 3 A + 1 B + 3 C
    assert register_blocking(tdpbusd, {"i": 16, "j": 16}) == {}


@pytest.mark.slow
def test_tile_with_intrin_then_tensorize_gives_the_unit_tile():
    wl = workloads.make("GMM", (1, 64, 64, 128), "int8")
    sch = Schedule(wl.func, hardware=SPR)
    outer = tile_with_intrin(sch, sch.get_block("Z"), AMX["amx_tdpbusd_16x16x64"])
    sch.tensorize(outer, "amx_tdpbusd_16x16x64")  # the compute intrinsic names its unit
    assert ts.ir.structural_equal(sch.func, parse(TILED_GMM)), sch.func
    mod = ts.build(sch.func, SPR, jit=False)
    # a 32 x 32 tile, register-blocked: 4 C tiles, 2 A and 2 B a step; it spans k (two steps of 64)
    # and its init stays outside, so the unit loads each C tile once and stores it once
    calls = _calls(mod.lowered)
    ops = [c.op.removeprefix("llvm.x86.") for c in calls]
    assert ops == ["ldtilecfg", *["tileloadd64"] * 8, *["tdpbusd"] * 4, *["tilestored64"] * 4]
    tiles = [tuple(a.value for a in c.args if isinstance(a, IntImm) and a.dtype.bits == 8) for c in calls[1:]]
    assert tiles == [(4,), (5,), (6,), (7,), (0,), (1,), (2,), (3,), (4, 0, 2), (5, 0, 3), (6, 1, 2), (7, 1, 3),
                     (4,), (5,), (6,), (7,)]  # fmt: skip
    assert "for unit_k in range(2)" in str(mod.lowered).replace("T.serial(2)", "range(2)")


@pytest.mark.slow
def test_the_sapphire_rapids_design_space_tensorizes_int8_gemm_with_amx():
    wl = workloads.make("GMM", (1, 128, 128, 128), "int8")
    space = DesignSpace(wl.func, SPR)
    cand = next(c for c in (space.sample_space(0, seed) for seed in range(8)) if c is not None)
    tensorized = [dict(i.args)["intrin"] for i in cand.trace.insts if i.kind.name == "tensorize"]
    assert [getattr(t, "name", t) for t in tensorized] == ["amx_tdpbusd_16x16x64"]
    mod = ts.build(cand.func, SPR, jit=False)
    assert re.search(r"\btdpbusd\b", mod.assembly) and "vpdpbusd" not in mod.assembly
    # a unit tile spans all of k and keeps the init: zero the 4 C tiles, load 2 A and 2 B tiles and
    # multiply them a step, store each C tile once
    ops = [c.op.removeprefix("llvm.x86.") for c in _calls(mod.lowered)]
    assert ops == ["ldtilecfg", *["tilezero"] * 4, *["tileloadd64"] * 4, *["tdpbusd"] * 4, *["tilestored64"] * 4]
    _needs_amx()
    rng = np.random.default_rng(5)
    xs = wl.make_inputs(rng)
    out = np.full(wl.outputs[0].shape, -3, np.int32)
    ts.build(cand.func, SPR)(*xs, out)
    wl.check([out], wl.reference(*xs))


def _amx_candidate(wl):
    """The first design-space sample of ``wl`` on Sapphire Rapids that tensorizes with the AMX unit."""
    space = DesignSpace(wl.func, SPR)
    for k in range(len(space.traces)):
        for seed in range(4):
            cand = space.sample_space(k, seed)
            if cand is None:
                continue
            names = [
                getattr(dict(i.args)["intrin"], "name", None) for i in cand.trace.insts if i.kind.name == "tensorize"
            ]
            if "amx_tdpbusd_16x16x64" in names:
                return cand
    raise AssertionError(f"no design space of {wl.name} tensorizes with AMX")


AMX_CONVOLUTIONS = [  # a 3-channel first layer, a 1x1 convolution, 1-D, grouped, transposed (stride phases)
    ("C2D", workloads.reduced("C2D", 0, "int8").args),
    ("C2D", (1, 8, 8, 64, 32, 1, 1, 0)),  # the reduced C2D:1 has 8 channels: VNNI fits it better
    ("C1D", workloads.reduced("C1D", 0, "int8").args),
    ("GRP", workloads.reduced("GRP", 0, "int8").args),
    ("T2D", workloads.reduced("T2D", 0, "int8").args),
]


@pytest.mark.parametrize("name, args", AMX_CONVOLUTIONS)
@pytest.mark.slow
def test_convolutions_tensorize_with_amx_through_the_design_space(name, args):
    # each compiles to tdpbusd everywhere and matches numpy where the CPU has AMX
    wl = workloads.make(name, args, "int8")
    cand = _amx_candidate(wl)
    assert re.search(r"\btdpbusd\b", ts.build(cand.func, SPR, jit=False).assembly)
    _needs_amx()
    xs = wl.make_inputs(np.random.default_rng(len(args)))
    outs = [np.full(o.shape, -1, o.dtype) for o in wl.outputs]
    ts.build(cand.func, SPR)(*xs, *outs)
    wl.check(outs, wl.reference(*xs))


def test_the_benchmarks_amx_peak_is_four_tile_multiplies_a_loop():
    import sys

    import llvmlite.binding as llvm

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    from bench_vnni_gemm import _amx_peak_ir

    ts.codegen.llvm._init_llvm()
    mod = llvm.parse_assembly(_amx_peak_ir())
    mod.verify()
    asm = ts.codegen.llvm.emit_assembly(mod, SPR)
    # the A and B tiles are loaded with random bytes first (tdpbusd on zeroed tiles runs faster)
    assert re.findall(r"tileloadd\t.*, (%tmm\d)", asm) == ["%tmm4", "%tmm5", "%tmm6", "%tmm7"]
    loop = asm[asm.rindex("tileloadd") : asm.index("tilerelease")]
    assert re.findall(r"tdpbusd\t(%tmm\d), (%tmm\d), (%tmm\d)", loop) == [
        ("%tmm6", "%tmm4", "%tmm0"), ("%tmm7", "%tmm4", "%tmm1"), ("%tmm6", "%tmm5", "%tmm2"), ("%tmm7", "%tmm5", "%tmm3")]  # fmt: skip
    assert "ldtilecfg" in asm and "(%" not in loop.split("tdpbusd", 1)[1]  # no memory operand in the loop


# ----------------------------------------------------------------------------------------------
# runs (AMX machines only)


def test_int8_and_bf16_gemms_match_numpy_on_amx():
    _needs_amx()
    rng = np.random.default_rng(11)
    m, n, k = 64, 32, 256
    mod = ts.build(_tensorized(_gemm("uint8", "int8", "int32", m, n, k, 4), INT8_UNIT).func, SPR)
    x = rng.integers(0, 255, (m, k), dtype=np.uint8, endpoint=True)
    w = rng.integers(-128, 127, (k // 4, n, 4), dtype=np.int8, endpoint=True)
    z = np.full((m, n), 7, np.int32)
    mod(x, w, z)
    assert np.array_equal(z, x.astype(np.int64) @ w.transpose(0, 2, 1).reshape(k, n).astype(np.int64))
    bf16 = ml_dtypes.bfloat16
    mod = ts.build(_tensorized(_gemm("bfloat16", "bfloat16", "float32", 32, 32, 64, 2), BF16_UNIT).func, SPR)
    xb = rng.standard_normal((32, 64)).astype(bf16)
    wb = rng.standard_normal((32, 32, 2)).astype(bf16)
    zb = np.zeros((32, 32), np.float32)
    mod(xb, wb, zb)
    want = xb.astype(np.float32) @ wb.transpose(0, 2, 1).reshape(64, 32).astype(np.float32)
    np.testing.assert_allclose(zb, want, rtol=1e-5, atol=1e-4)
