"""The auto-tensorization matcher and tile_with_intrin: which mappings exist and why others fail, and the tiling that applies one.

Each report is checked for the mapping it states (which workload iterators play which intrinsic
iterator, the padding, the layout transforms) and for the reasons it gives; tile_with_intrin's
programs verify, compute exactly what the original computes on fresh random inputs, and replay
from their traces.
"""

from __future__ import annotations

import pytest
from schedule_util import check_same_results, check_trace_round_trip

from tensorsearch import hardware, te, workloads
from tensorsearch.arith import verify
from tensorsearch.cli.main import main
from tensorsearch.intrin import MatchReport, match, tile_with_intrin
from tensorsearch.ir import BlockRealize, For, structural_equal
from tensorsearch.schedule import InvalidArgument, Schedule, ScheduleError
from tensorsearch.script import parse

VNNI = "vnni_dot_16x4_u8i8i32"


@pytest.fixture(scope="module")
def vnni():
    return hardware.load("x86-emeraldrapids").intrinsic(VNNI)


def gemm_nk(m: int, n: int, k: int):
    """C[i, j] = sum_k A[i, k] * W[j, k]: the weight in plain [N, K] layout."""
    a = te.placeholder((m, k), "uint8", "A")
    w = te.placeholder((n, k), "int8", "W")
    r = te.reduce_axis((0, k), "k")
    c = te.compute((m, n), lambda i, j: te.sum(te.cast(a[i, r], "int32") * te.cast(w[j, r], "int32"), axis=r), name="C")
    return te.create_prim_func([a, w, c])


def gemm_prepacked(m: int, n: int, k: int):
    """The weight already in VNNI's tile layout: W[k // 4, n, k % 4]."""
    a = te.placeholder((m, k), "uint8", "A")
    w = te.placeholder((k // 4, n, 4), "int8", "W")
    ko = te.reduce_axis((0, k // 4), "ko")
    ki = te.reduce_axis((0, 4), "ki")
    c = te.compute(
        (m, n),
        lambda i, j: te.sum(te.cast(a[i, ko * 4 + ki], "int32") * te.cast(w[ko, j, ki], "int32"), axis=[ko, ki]),
        name="C",
    )
    return te.create_prim_func([a, w, c])


def _iters(mapping) -> dict[str, tuple[str, ...]]:
    return {m.intrin_iter: m.workload_iters for m in mapping.iterators}


# ----------------------------------------------------------------------------------------------
# the matcher


def test_gmm_int8_vnni_mapping(vnni):
    func = workloads.make("GMM", (1, 64, 64, 64), "int8").func
    report = match(func, "Z", vnni)
    assert isinstance(report, MatchReport) and report
    assert len(report.feasible) == 1
    m = report.best
    assert m.binding == (("A", "X"), ("B", "Y"), ("C", "Z"))
    # GEMM: j indexes B and C -> the intrinsic's i; k indexes A and B -> k; b and i stay outside
    assert _iters(m) == {"i": ("v_j",), "k": ("v_k",)}
    assert m.outer == ("v_bb", "v_i")
    assert [(it.workload_extent, it.padding) for it in m.iterators] == [(64, 0), (64, 0)]
    assert m.operand("A").in_place and m.operand("C").in_place
    # layout safety: Y is [K, N]; the 16x4 tile's rows are strided, so B is packed first
    b = m.operand("B")
    assert not b.in_place and "strided" in b.why
    assert b.access == ("read", 1)
    # 16-column panels, 4 k per tile: a tile is 64 contiguous bytes and the tiles of a panel follow each other
    assert b.index_map == "lambda v_bb, v_j, v_k: (v_bb, v_j // 16, v_k // 4, v_j % 16, v_k % 4)"
    assert b.packed_shape == (1, 4, 16, 16, 4)
    # the swapped binding is rejected for its types
    assert [r.reason for r in report.infeasible] == [
        "operand A is int8 (workload buffer Y), the intrinsic reads uint8; "
        "operand B is uint8 (workload buffer X), the intrinsic reads int8"
    ]
    text = str(report)
    assert "1 feasible mapping(s)" in text
    assert "i (spatial, extent 16) <- v_j (extent 64; 4 tiles)" in text
    assert "v_j spatial (B, C)" in text and "v_k reduce (A, B)" in text and "v_i spatial (A, C)" in text
    assert "LAYOUT TRANSFORM" in text


def test_gmm_float32_vnni_rejected_for_dtypes(vnni):
    report = match(workloads.make("GMM", (1, 32, 32, 32), "float32").func, "Z", vnni)
    assert not report and report.feasible == []
    reason = report.infeasible[0].reason
    assert "operand B is float32 (workload buffer Y), the intrinsic reads int8" in reason
    assert "operand A is float32 (workload buffer X), the intrinsic reads uint8" in reason
    assert "operand C is float32 (workload buffer Z), the intrinsic writes int32" in reason
    assert "the intrinsic casts to int32 where the block has no cast" in reason
    assert "NO feasible mapping" in str(report)


def test_gmm_int8_sdot_rejected_for_uint8_data():
    sdot = hardware.load("arm-graviton2").intrinsic("neon_sdot_4x4_i8i8i32")
    report = match(workloads.make("GMM", (1, 16, 16, 16), "int8").func, "Z", sdot)
    assert not report
    assert any(
        "operand A is uint8 (workload buffer X), the intrinsic reads int8" in r.reason for r in report.infeasible
    )


def test_c2d_int8_vnni_mappings(vnni):
    """rc alone onto k is best (no padding, A in place); fusing rh*rw*rc onto k is also listed."""
    func = workloads.make("C2D", (1, 8, 8, 16, 16, 3, 1, 1), "int8").func
    report = match(func, "conv2d_nhwc", vnni)
    maps = [_iters(m) for m in report.feasible]
    assert maps[0] == {"i": ("v_cc",), "k": ("v_rc",)}
    assert {"i": ("v_cc",), "k": ("v_rh", "v_rw", "v_rc")} in maps
    assert {"i": ("v_cc",), "k": ("v_rh",)} in maps and {"i": ("v_cc",), "k": ("v_rw",)} in maps
    best = report.best
    assert best.outer == ("v_nn", "v_hh", "v_ww", "v_rh", "v_rw")
    assert best.operand("A").in_place  # PadInput[n, h + rh, w + rw, rc]: 4 consecutive rc are dense
    assert best.operand("B").index_map == (
        "lambda v_cc, v_rh, v_rw, v_rc: (v_rh, v_rw, v_cc // 16, v_rc // 4, v_cc % 16, v_rc % 4)"
    )
    fused = next(m for m in report.feasible if m.fused)
    assert fused.iterators[1].workload_extent == 144 and fused.iterators[1].padding == 0
    assert not fused.operand("A").in_place  # im2col-like staging
    assert fused.operand("B").packed_shape == (1, 36, 16, 4)
    padded = next(m for m in report.feasible if _iters(m)["k"] == ("v_rh",))
    assert padded.padding == {"v_rh": 1}
    assert report.feasible.index(padded) > report.feasible.index(fused)  # padding ranks last


def test_three_input_channels_pad_rc_in_place_before_gathering(vnni):
    """C2D's first layer (3 input channels, 7x7, stride 2, 112x112 outputs): ``k <- rc`` pads 3 ->
    4 (a quarter of the calls wasted) but reads the padded input in place, a 230 x 230 x 4 copy;
    fusing ``rh * rw * rc`` wastes 0.7% and gathers 112 x 112 x 148 elements. The rank counts both
    (instructions per useful call), so the padded mapping comes first."""
    report = match(workloads.get("C2D", 0, "int8").func, "conv2d_nhwc", vnni)
    best, fused = report.feasible[0], report.feasible[1]
    assert _iters(best) == {"i": ("v_cc",), "k": ("v_rc",)} and fused.fused
    assert best.operand("A").in_place and best.operand("A").copied == 230 * 230 * 4
    assert best.operand("B").copied == 7 * 7 * 4 * 16 * 4 and best.operand("C").copied == 0
    assert fused.operand("A").copied == 112 * 112 * 37 * 4
    assert round(best.waste, 3) == 0.25 and round(fused.waste, 3) == 0.007
    assert round(best.cost, 2) == 1.45 and round(fused.cost, 2) == 2.02
    assert [round(m.cost, 2) for m in report.feasible[2:]] == [2.29, 2.29]  # rh or rw 7 -> 8, gathered


@pytest.mark.slow
def test_grp_int8_vnni_maps_per_group(vnni):
    """cc // 32 picks the input channels of cc's group, so cc indexes A and cannot play i; split
    into (group, channel in the group), the channel plays i and rc plays k."""
    func = workloads.get("GRP", 0, "int8").func
    report = match(func, "conv2d_nhwc", vnni)
    assert report.best.split == ("v_cc", 32)
    assert _iters(report.best) == {"i": ("v4",), "k": ("v7",)}  # v3, v4 = v_cc // 32, v_cc % 32
    assert "per group: v_cc split into groups of 32" in str(report)
    sch = Schedule(func)
    tile_with_intrin(sch, sch.get_block("conv2d_nhwc"), vnni)
    layouts = [dict(i.args)["index_map"] for i in sch.trace.insts if i.kind.name == "transform_block_layout"]
    assert layouts == [
        "lambda v_nn, v_hh, v_ww, v_cc, v_rh, v_rw, v_rc: (v_nn, v_hh, v_ww, v_cc // 32, v_cc % 32, v_rh, v_rw, v_rc)"
    ]
    small = workloads.reduced("GRP", 0, "int8").func
    _tile(small, "conv2d_nhwc", vnni)


def test_dep_int8_vnni_explains_why_not(vnni):
    func = workloads.make("DEP", (1, 8, 8, 16, 3, 1, 1), "int8").func
    report = match(func, "depth_conv2d_nhwc", vnni)
    assert not report
    reason = report.infeasible[0].reason
    assert reason.startswith(
        "no workload iterator plays the role of i: it is a spatial iterator that indexes (B, C) but not A"
    )
    # the depthwise channel indexes the input too, so it cannot be the intrinsic's i
    assert "v_cc has the kind but also indexes A, which i must not index, so it cannot play i" in reason
    assert "v_cc (spatial) indexes (A, B, C)" in reason
    assert "v_rh (reduce) indexes (A, B)" in reason


def test_plain_nk_weight_flagged_for_layout_transform(vnni):
    func = gemm_nk(8, 32, 16)
    m = match(func, "C", vnni).best
    assert _iters(m) == {"i": ("v_j",), "k": ("v_k",)}
    b = m.operand("B")
    assert not b.in_place and "rows are strided" in b.why
    assert b.index_map == "lambda v_j, v_k: (v_j // 16, v_k // 4, v_j % 16, v_k % 4)"


def test_prepacked_weight_is_read_in_place(vnni):
    m = match(gemm_prepacked(4, 32, 16), "C", vnni).best
    assert _iters(m) == {"i": ("v_j",), "k": ("v_ki",)}
    assert m.transforms == ()


def test_non_update_block_is_rejected(vnni):
    func = workloads.make("C2D", (1, 8, 8, 16, 16, 3, 1, 1), "int8").func
    report = match(func, "PadInput", vnni)
    assert not report and "accumulates" in report.infeasible[0].reason
    with pytest.raises(ValueError, match="no block 'nope'; its blocks are: PadInput, conv2d_nhwc"):
        match(func, "nope", vnni)


# ----------------------------------------------------------------------------------------------
# tile_with_intrin


def _tile(func, block: str, intrin):
    sch = Schedule(func)
    outer = tile_with_intrin(sch, sch.get_block(block), intrin)
    verify(sch.func)
    check_same_results(func, sch.func)
    check_trace_round_trip(sch, func)
    return sch, outer


@pytest.mark.slow
def test_tile_gmm_int8_vnni(vnni):
    func = workloads.make("GMM", (1, 64, 64, 64), "int8").func
    sch, outer = _tile(func, "Z", vnni)
    blk = sch.get(outer)
    assert blk.name == "Z_update_o" and blk.init is None
    # the body: the intrinsic's loops (16 then 4) around the inner block
    loop = blk.body
    assert isinstance(loop, For) and loop.extent.value == 16
    assert isinstance(loop.body, For) and loop.body.extent.value == 4
    assert isinstance(loop.body.body, BlockRealize) and loop.body.body.block.name == "Z_update"
    # B's tile is read from the packed buffer: [16, 4] as the last two dimensions, whole rows of 4
    packed = next(r for r in blk.reads if r.buffer.name == "Y_reindex")
    assert [int(s.value) for s in packed.buffer.shape] == [1, 4, 16, 16, 4]
    assert [int(r.extent.value) for r in packed.region] == [1, 1, 1, 16, 4]
    kinds = [inst.kind.name for inst in sch.trace.insts]
    for step in ("reindex", "transform_layout", "decompose_reduction", "split", "reorder", "blockize"):
        assert step in kinds
    assert "Z_init" in sch.func.script()


def test_tile_plain_nk_weight_and_padding(vnni):
    _tile(gemm_nk(8, 32, 16), "C", vnni)
    sch, _ = _tile(gemm_nk(5, 30, 18), "C", vnni)  # 30 -> 32 and 18 -> 20: pad_einsum
    assert "pad_einsum" in [inst.kind.name for inst in sch.trace.insts]


def test_tile_gmm_padding_and_prepacked(vnni):
    _tile(workloads.make("GMM", (1, 8, 20, 10), "int8").func, "Z", vnni)
    sch, _ = _tile(gemm_prepacked(4, 32, 16), "C", vnni)
    kinds = [inst.kind.name for inst in sch.trace.insts]
    assert "reindex" not in kinds and "transform_layout" not in kinds


def test_tile_c2d_int8_vnni(vnni):
    func = workloads.make("C2D", (1, 4, 4, 8, 32, 3, 1, 1), "int8").func
    sch, outer = _tile(func, "conv2d_nhwc", vnni)
    assert sch.get(outer).name == "conv2d_nhwc_update_o"


def test_tile_refusals_leave_schedule_untouched(vnni):
    func = workloads.make("DEP", (1, 8, 8, 16, 3, 1, 1), "int8").func
    sch = Schedule(func)
    with pytest.raises(InvalidArgument, match="no workload iterator plays the role of i"):
        tile_with_intrin(sch, sch.get_block("depth_conv2d_nhwc"), vnni)
    assert sch.func is func and len(sch.trace.insts) == 1  # only get_block
    c2d = workloads.make("C2D", (1, 4, 4, 8, 16, 3, 1, 1), "int8").func
    sch = Schedule(c2d)
    report = match(c2d, "conv2d_nhwc", vnni)
    fused = next(m for m in report.feasible if m.fused)
    block = sch.get_block("conv2d_nhwc")
    sch.split(sch.get_loops(block)[1], [2, 2])  # the fusion needs each iterator bound to its own loop
    before, steps = sch.func, len(sch.trace.insts)
    with pytest.raises(ScheduleError, match="conv2d_nhwc does not have a trivial binding"):
        tile_with_intrin(sch, block, vnni, fused)
    assert sch.func is before and len(sch.trace.insts) == steps


FUSED_C2D = """
@T.prim_func
def main(inputs: T.Buffer((1, 3, 3, 3), "uint8"), weight: T.Buffer((3, 3, 3, 16), "int8"), conv2d_nhwc: T.Buffer((1, 1, 1, 16), "int32")):
    PadInput = T.alloc_buffer((1, 3, 3, 3), "uint8")
    PadInput_reindex_pad = T.alloc_buffer((7, 4), "uint8")
    weight_reindex_pad = T.alloc_buffer((1, 7, 16, 4), "int8")
    for i0, i1, i2, i3 in T.grid(1, 3, 3, 3):
        with T.block("PadInput"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            T.reads(inputs[v_i0, v_i1, v_i2, v_i3])
            T.writes(PadInput[v_i0, v_i1, v_i2, v_i3])
            PadInput[v_i0, v_i1, v_i2, v_i3] = inputs[v_i0, v_i1, v_i2, v_i3]
    for i0 in T.serial(28):
        with T.block("PadInput_reindex_pad"):
            v0 = T.axis.spatial(28, i0)
            T.reads(PadInput[0, v0 // 9, v0 // 3 % 3, v0 % 3])
            T.writes(PadInput_reindex_pad[v0 // 4, v0 % 4])
            PadInput_reindex_pad[v0 // 4, v0 % 4] = T.Select(v0 < 27, PadInput[0, v0 // 9, v0 // 3 % 3, v0 % 3], T.uint8(0))
    for i0, i1 in T.grid(16, 28):
        with T.block("weight_reindex_pad"):
            v0, v1 = T.axis.remap("SS", [i0, i1])
            T.reads(weight[v1 // 9, v1 // 3 % 3, v1 % 3, v0])
            T.writes(weight_reindex_pad[0, v1 // 4, v0, v1 % 4])
            weight_reindex_pad[0, v1 // 4, v0, v1 % 4] = T.Select(v1 < 27, weight[v1 // 9, v1 // 3 % 3, v1 % 3, v0], T.int8(0))
    for ax0_init, ax1_init, ax2_init, ax3_init in T.grid(1, 1, 1, 16):
        with T.block("conv2d_nhwc_init"):
            v0, v1, v2, v3 = T.axis.remap("SSSS", [ax0_init, ax1_init, ax2_init, ax3_init])
            T.reads()
            T.writes(conv2d_nhwc[0, 0, 0, v3])
            conv2d_nhwc[0, 0, 0, v3] = 0
    for ax0, ax1, ax2, ax3_0, ax4_0 in T.grid(1, 1, 1, 1, 7):
        with T.block("conv2d_nhwc_update_o"):
            v0_o, v1_o, v2_o, v3_o, v4_o = T.axis.remap("SSSSR", [ax0, ax1, ax2, ax3_0, ax4_0])
            T.reads(conv2d_nhwc[0, 0, 0, 0:16], PadInput_reindex_pad[v4_o, 0:4], weight_reindex_pad[0, v4_o, 0:16, 0:4])
            T.writes(conv2d_nhwc[0, 0, 0, 0:16])
            for ax3_1, ax4_1 in T.grid(16, 4):
                with T.block("conv2d_nhwc_update"):
                    v3_i, v4_i = T.axis.remap("SR", [ax3_1, ax4_1])
                    T.reads(conv2d_nhwc[0, 0, 0, v3_i], PadInput_reindex_pad[v4_o, v4_i], weight_reindex_pad[0, v4_o, v3_i, v4_i])
                    T.writes(conv2d_nhwc[0, 0, 0, v3_i])
                    conv2d_nhwc[0, 0, 0, v3_i] = conv2d_nhwc[0, 0, 0, v3_i] + T.Cast("int32", PadInput_reindex_pad[v4_o, v4_i]) * T.Cast("int32", weight_reindex_pad[0, v4_o, v3_i, v4_i])
"""


@pytest.mark.slow
def test_fused_mapping_gathers_and_pads_each_operand_once(vnni):
    """k <- rh * rw * rc (27, padded to 28): the block's reduce iterators merged into one, each
    operand gathered (im2col) and padded by one copy into the intrinsic's tile layout."""
    func = workloads.make("C2D", (1, 3, 3, 3, 16, 3, 1, 0), "int8").func
    report = match(func, "conv2d_nhwc", vnni)
    assert report.best.fused and round(report.best.waste, 4) == round(1 / 28, 4)
    assert [round(m.waste, 2) for m in report.feasible[1:]] == [0.25, 0.25, 0.25]  # rh, rw or rc: 3 -> 4
    sch, _ = _tile(func, "conv2d_nhwc", vnni)
    assert structural_equal(sch.func, parse(FUSED_C2D)), sch.func.script()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("C1D", (1, 16, 8, 16, 3, 1, 1)),
        ("C2D", (1, 8, 8, 3, 16, 7, 2, 3)),
        ("C3D", (1, 4, 6, 6, 3, 16, 3, 1, 1)),
        ("DIL", (1, 8, 8, 3, 16, 3, 1, 1, 2)),
    ],
)
@pytest.mark.slow
def test_fused_mappings_compute_the_convolution(vnni, name, args):
    func = workloads.make(name, args, "int8").func
    block = func.buffers[-1].name
    fused = next(n for n, m in enumerate(match(func, block, vnni).feasible) if m.fused)
    sch = Schedule(func)
    tile_with_intrin(sch, sch.get_block(block), vnni, fused)
    verify(sch.func)
    check_same_results(func, sch.func)
    check_trace_round_trip(sch, func)


# ----------------------------------------------------------------------------------------------
# the CLI


def test_cli_match(capsys):
    assert main(["match", "GMM", "--dtype", "int8", "--hardware", "x86-emeraldrapids"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# GMM[0] int8 args=(1, 128, 128, 128) on x86-emeraldrapids")
    assert f"block Z vs intrinsic {VNNI}: 1 feasible mapping(s)" in out
    assert "i (spatial, extent 16) <- v_j (extent 128; 8 tiles)" in out
    assert (
        main(["match", "DEP", "--dtype", "int8", "--hardware", "x86-emeraldrapids", "--block", "depth_conv2d_nhwc"])
        == 0
    )
    out = capsys.readouterr().out
    assert "NO feasible mapping" in out and "no workload iterator plays the role of i" in out
    assert "PadInput" not in out.split("\n")[2]
    assert main(["match", "GMM", "--dtype", "float32", "--hardware", "x86-emeraldrapids"]) == 0
    captured = capsys.readouterr()
    assert "operand B is float32 (workload buffer Y), the intrinsic reads int8" in captured.out
    assert "warning" not in captured.err  # float32 was asked for
    # without --dtype: float32, as for show and tune, and a note that the VNNI unit takes int8
    assert main(["match", "GMM", "--hardware", "x86-emeraldrapids"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("# GMM[0] float32 args=(1, 128, 128, 128)")
    assert captured.err.startswith(
        "tensorsearch match: warning: GMM float32 (the default): none of x86-emeraldrapids's tensor intrinsics "
        "takes float32, so none is used; vnni_dot_16x4_u8i8i32 takes int8: add --dtype int8 to use them"
    )
    assert main(["match", "GMM", "--hardware", "x86-emeraldrapids", "--block", "nope"]) == 2
    assert "has no block 'nope'" in capsys.readouterr().err


def test_a_one_row_tile_is_dense_in_a_wider_buffer(tmp_path):
    """The bfloat16 FMA unit reads B as a [1, 8] tile: one row, dense in a plain [K, N] weight
    whatever N is, so the mapping uses B in place (no packing copy)."""
    from user_units import FMA_BF16

    from tensorsearch import te
    from tensorsearch.intrin import load_intrinsic, match

    (tmp_path / "x86-fma-bf16.yaml").write_text(FMA_BF16)
    fma = load_intrinsic(tmp_path / "x86-fma-bf16.yaml")["fma_bf16_8x1_f32"]
    a = te.placeholder((16, 64), "bfloat16", name="A")
    b = te.placeholder((64, 32), "bfloat16", name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((16, 32), lambda i, j: te.sum(te.cast(a[i, k], "float32") * te.cast(b[k, j], "float32"), axis=k))
    report = match(te.create_prim_func([a, b, c]), "compute", fma)
    plan = {p.operand: p for p in report.feasible[0].operands}
    assert plan["B"].in_place, plan["B"].why
    assert plan["B"].why == "each [1, 8] tile is a dense block of dims [0, 1] of B"
