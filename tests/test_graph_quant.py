"""The int8 operators and fold_qdq against onnxruntime, bit-exact (tensorsearch.graph.quant).

Integer outputs compare exactly; a QDQ model's float output is a DequantizeLinear of an integer
result, so it compares exactly too. Weights stay within [-64, 64]: onnxruntime's u8 x s8 kernels
on x86 CPUs without VNNI (vpmaddubsw) saturate a pair of products at int16 beyond that, which
exact int32 accumulation does not reproduce.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import pytest
from graph_util import model, random_feeds, run_lowered, run_ort, single
from onnx import helper

from tensorsearch.graph import models
from tensorsearch.graph.fuse import extract_tasks
from tensorsearch.graph.ir import Graph, GraphError, Node, Value
from tensorsearch.graph.lowering import ORT_ORDER, lower_nodes
from tensorsearch.graph.onnx_import import from_onnx
from tensorsearch.graph.ops_nn import mlas_stride_k
from tensorsearch.graph.passes import prepare
from tensorsearch.graph.quant import SHIFT_TO_UINT8, ZP_FOLDED, fold_qdq
from tensorsearch.runtime import build
from tensorsearch.search.model import compile_model
from tensorsearch.target.hardware import load as load_hardware
from tensorsearch.target.hardware import native

F32 = np.float32
_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _assert_same(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], graph_pass=None) -> None:
    want = run_ort(m, feeds)
    got = run_lowered(m, feeds, graph_pass)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _check(m: onnx.ModelProto, seed: int = 0, graph_pass=None) -> None:
    _assert_same(m, random_feeds(m, seed), graph_pass)


def _weight(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    lo, hi = (-64, 65) if dtype == "int8" else (0, 129)
    return rng.integers(lo, hi, shape).astype(dtype)


def _zp(dtype: str, signed: int, unsigned: int) -> np.ndarray:
    return np.array(signed if dtype == "int8" else unsigned, dtype)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_linear_rounds_half_to_even_and_saturates(dtype):
    scale = F32(0.25)
    zp = _zp(dtype, 3, 130)
    ties = (np.arange(-300, 300) + 0.5).astype(F32) * scale  # x / scale lands exactly on .5
    m = single("QuantizeLinear", {"x": ("float32", (ties.size,))}, {"s": scale, "z": zp})
    _assert_same(m, {"x": ties})


def test_quantize_linear_divides_by_the_scale():
    scale = F32(0.1)  # 1/0.1 is inexact: x / s and x * (1/s) round differently for some x
    near_ties = ((np.arange(-120, 120) + 0.5) * scale).astype(F32)
    x = np.concatenate([near_ties.view(np.int32) + ulps for ulps in range(-4, 5)]).view(F32)
    differ = np.rint(x / scale) != np.rint(x * (F32(1) / scale))
    assert differ.any()
    x = x[differ]
    m = single("QuantizeLinear", {"x": ("float32", (x.size,))}, {"s": scale, "z": np.int8(0)})
    _assert_same(m, {"x": x})


def test_quantize_linear_per_axis():
    m = single(
        "QuantizeLinear",
        {"x": ("float32", (2, 3, 4, 5))},
        {"s": np.array([0.05, 0.1, 0.02], F32), "z": np.array([3, 200, 0], np.uint8)},
        axis=1,
    )
    _check(m)


@pytest.mark.parametrize(
    "dtype, scale, zp, axis",
    [
        ("int8", np.array([0.05, 0.1, 0.02], F32), np.array([3, -20, 0], np.int8), 1),
        ("uint8", F32(0.07), np.uint8(128), None),
        ("int32", F32(0.0013), np.int32(0), None),
    ],
)
def test_dequantize_linear(dtype, scale, zp, axis):
    attrs = {} if axis is None else {"axis": axis}
    _check(single("DequantizeLinear", {"x": (dtype, (2, 3, 4))}, {"s": scale, "z": zp}, **attrs))


def test_quantize_linear_errors():
    m = single("QuantizeLinear", {"x": ("float32", (4,))}, {"s": F32(0.1), "z": np.int8(0)}, opset=21, block_size=2)
    with pytest.raises(GraphError, match="block_size=2 is not supported"):
        run_lowered(m, {"x": np.ones(4, F32)})


# ---------------------------------------------------------------------------------------------
# QLinearConv / ConvInteger


def _qlinear_conv(xdt: str, wdt: str, cin=4, cout=6, group=1, per_channel=True, bias=True, seed=0, **attrs):
    rng = _rng(seed)
    k = 3
    n = cout if per_channel else 1
    inits = {
        "xs": F32(0.07),
        "xz": _zp(xdt, 5, 130),
        "w": _weight(rng, wdt, (cout, cin // group, k, k)),
        "ws": (rng.random(n) * 0.01 + 0.002).astype(F32),
        "wz": np.zeros(n, wdt) if wdt == "int8" else np.full(n, 64, wdt),
        "ys": F32(0.09),
        "yz": _zp(xdt, -7, 120),
    }
    if bias:
        inits["b"] = rng.integers(-2000, 2000, cout).astype(np.int32)
    return single("QLinearConv", {"x": (xdt, (1, cin, 7, 7))}, inits, group=group, **attrs)


@pytest.mark.parametrize("xdt, wdt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
@pytest.mark.slow
def test_qlinear_conv(xdt, wdt):
    _check(_qlinear_conv(xdt, wdt, pads=[1, 1, 1, 1], strides=[2, 2]))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cin": 4, "cout": 8, "group": 2, "pads": [0, 1, 2, 1], "dilations": [2, 1]},
        {"cin": 4, "cout": 4, "group": 4, "pads": [1, 1, 1, 1]},  # depthwise
        {"per_channel": False, "bias": False, "auto_pad": "SAME_UPPER"},
    ],
)
def test_qlinear_conv_attributes(kwargs):
    _check(_qlinear_conv("uint8", "int8", **kwargs))


def test_requantize_matches_onnxruntime_at_rounding_boundaries():
    """Per-channel scales for which x_scale * w_scale / y_scale differs from the other orders of
    evaluation, with accumulators (the bias) where that difference flips the rounding; then a
    scale of exactly 0.5, where odd accumulators are ties, and saturation."""
    rng = _rng(1)
    xs, ys = F32(0.0123), F32(0.0371)
    scales, accs = [], []
    acc = np.arange(-20000, 20000, dtype=np.int32)
    while len(scales) < 32:
        ws = F32(rng.random() * 0.01 + 0.0005)
        good = np.rint(acc.astype(F32) * ((xs * ws) / ys))
        other = np.rint(acc.astype(F32) * (xs * (ws / ys)))
        hits = np.nonzero((good != other) & (np.abs(good) < 100))[0]
        if hits.size:
            scales.append(ws)
            accs.append(acc[hits[0]])
    ties = np.arange(-300, 300, dtype=np.int32)
    for x_scale, w_scale, y_scale, bias in (
        (xs, np.array(scales, F32), ys, np.array(accs)),
        (F32(0.5), None, F32(1), ties),
    ):
        c = bias.size
        w_scale = np.ones(c, F32) if w_scale is None else w_scale
        inits = {"xs": x_scale, "xz": np.int8(0), "w": np.ones((c, 1, 1, 1), np.int8), "ws": w_scale}
        inits.update({"wz": np.zeros(c, np.int8), "ys": y_scale, "yz": np.int8(-3), "b": bias.astype(np.int32)})
        m = single("QLinearConv", {"x": ("int8", (1, 1, 1, 1))}, inits)
        _assert_same(m, {"x": np.zeros((1, 1, 1, 1), np.int8)})


def test_conv_integer():
    rng = _rng()
    inits = {"w": rng.integers(0, 255, (5, 4, 3, 3)).astype(np.uint8), "xz": np.uint8(100), "wz": np.uint8(17)}
    _check(single("ConvInteger", {"x": ("uint8", (1, 4, 6, 6))}, inits, pads=[1, 1, 1, 1], strides=[1, 2]))


def test_qlinear_conv_errors():
    m = _qlinear_conv("uint8", "int8", auto_pad="FULL")
    with pytest.raises(GraphError, match="auto_pad=FULL is not supported"):
        run_lowered(m, random_feeds(m))
    m = _qlinear_conv("uint8", "int8", cin=4, cout=6, group=3)
    with pytest.raises(GraphError, match="group=3 does not fit 4 input and 6 output channels"):
        run_lowered(m, random_feeds(m))


def _run_graph(g: Graph, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    lowered = lower_nodes(g, g.nodes, [v.name for v in g.outputs])
    args = [np.ascontiguousarray(feeds[n]) for n in lowered.args[: lowered.num_inputs]]
    consts = lowered.args[lowered.num_inputs : lowered.num_inputs + lowered.num_constants]
    args += [np.ascontiguousarray(g.constants[n]).reshape(g.values[n].shape or (1,)) for n in consts]
    outs = [np.zeros(g.values[n].shape or (1,), g.values[n].dtype) for n in lowered.outputs]
    build(lowered.func)(*args, *outs)
    return [o.reshape(g.values[n].shape) for o, n in zip(outs, lowered.outputs, strict=True)]


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.slow
def test_qlinear_conv_nhwc_equals_nchw_transposed(group):
    """The layout pass's form: NHWC data, the weight as [KH, KW, Cin/group, Cout]."""
    m = _qlinear_conv("uint8", "int8", cin=4, cout=8, group=group, pads=[1, 0, 1, 2], strides=[2, 1])
    g = fold_qdq(from_onnx(m))  # the zero-point correction moves into the bias
    conv = g.nodes[0]
    assert conv.attr(ZP_FOLDED) == 1
    feeds = random_feeds(m)
    (want,) = _run_graph(g, feeds)
    w_name = conv.inputs[3]
    values = dict(g.values)
    values["x"] = Value("x", (1, 7, 7, 4), "uint8")
    values["y"] = Value("y", want.transpose(0, 2, 3, 1).shape, "uint8")
    constants = {**g.constants, w_name: g.constants[w_name].transpose(2, 3, 1, 0)}
    values[w_name] = Value(w_name, constants[w_name].shape, "int8")
    nhwc = conv.with_(attrs={"layout": "NHWC"})
    g2 = Graph("nhwc", [nhwc], [values["x"]], [values["y"]], values, constants)
    (got,) = _run_graph(g2, {"x": feeds["x"].transpose(0, 2, 3, 1)})
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))


# ---------------------------------------------------------------------------------------------
# QLinearMatMul / MatMulInteger


def _qlinear_matmul(adt, bdt, ashape, bshape, per_column=True, b_const=True, seed=0):
    rng = _rng(seed)
    n = bshape[-1] if per_column else 1
    inputs = {"a": (adt, ashape)}
    inits = {"as": F32(0.07), "az": _zp(adt, 5, 130)}
    if b_const:
        inits.update({"b": _weight(rng, bdt, bshape), "bs": (rng.random(n) * 0.01 + 0.002).astype(F32)})
        inits["bz"] = np.zeros(n, bdt) if bdt == "int8" else np.full(n, 64, bdt)
    else:
        inputs["b"] = (bdt, bshape)
        inits.update({"bs": F32(0.003), "bz": _zp(bdt, -3, 100)})
    inits.update({"ys": F32(0.09), "yz": _zp(adt, -7, 120)})
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    return model([node], inputs, ["y"], inits)


@pytest.mark.parametrize(
    "adt, bdt, ashape, bshape, per_column, b_const",
    [
        ("uint8", "int8", (2, 5, 16), (16, 8), True, True),
        ("int8", "int8", (16,), (16, 8), True, True),
        ("uint8", "uint8", (2, 1, 5, 16), (3, 16, 8), False, False),
        ("int8", "int8", (2, 5, 16), (2, 16, 8), False, False),
    ],
)
def test_qlinear_matmul(adt, bdt, ashape, bshape, per_column, b_const):
    _check(_qlinear_matmul(adt, bdt, ashape, bshape, per_column, b_const))


@pytest.mark.parametrize("bdt", ["uint8", "int8"])
def test_matmul_integer(bdt):
    rng = _rng()
    b = rng.integers(0, 255, (16, 8)) if bdt == "uint8" else rng.integers(-128, 128, (16, 8))
    bz = np.uint8(17) if bdt == "uint8" else rng.integers(-5, 5, 8).astype(np.int8)
    _check(single("MatMulInteger", {"a": ("uint8", (3, 4, 16))}, {"b": b.astype(bdt), "az": np.uint8(100), "bz": bz}))


# ---------------------------------------------------------------------------------------------
# fold_qdq on QDQ subgraphs, against onnxruntime's own fusion of them


def _q(x: str, s: str, z: str, out: str) -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", [x, s, z], [out])


def _dq(x: str, s: str, z: str, out: str, **attrs) -> onnx.NodeProto:
    return helper.make_node("DequantizeLinear", [x, s, z], [out], **attrs)


def _qdq_model(core: list[onnx.NodeProto], inputs, inits, act: str = "int8") -> onnx.ModelProto:
    """Float inputs quantized (``x`` -> ``xq``, and ``x2`` -> ``x2q`` when given), ``core`` reading
    them through DequantizeLinear and writing ``yf``, quantized and dequantized into ``y``: each
    Q -> DQ pair lets onnxruntime turn int8 activations into uint8 and fuse the core."""
    defaults = {"xs": F32(0.05), "xz": _zp(act, 3, 131), "ys": F32(0.1), "yz": _zp(act, -10, 118)}
    nodes = [_q("x", "xs", "xz", "xq"), _dq("xq", "xs", "xz", "xf")]
    if "x2" in inputs:
        defaults.update({"x2s": F32(0.03), "x2z": _zp(act, -5, 120)})
        nodes += [_q("x2", "x2s", "x2z", "x2q"), _dq("x2q", "x2s", "x2z", "x2f")]
    inits = {**defaults, **inits}
    nodes += [*core, _q("yf", "ys", "yz", "yq"), _dq("yq", "ys", "yz", "y")]
    return model(nodes, {k: ("float32", s) for k, s in inputs.items()}, ["y"], inits)


def _conv_weights(rng, cout=6, cin=4, k=3):
    ws = (rng.random(cout) * 0.01 + 0.002).astype(F32)
    xs = F32(0.05)  # the input scale of _qdq_model
    return {
        "w": _weight(rng, "int8", (cout, cin, k, k)),
        "ws": ws,
        "wz": np.zeros(cout, np.int8),
        "b": rng.integers(-500, 500, cout).astype(np.int32),
        "bs": (xs * ws).astype(F32),
        "bz": np.zeros(cout, np.int32),
    }


def _folded(m: onnx.ModelProto) -> dict[str, int]:
    return fold_qdq(from_onnx(m)).op_counts()


@pytest.mark.parametrize("relu", [False, True])
def test_fold_conv(relu):
    core = [_dq("w", "ws", "wz", "wf", axis=0), _dq("b", "bs", "bz", "bf", axis=0)]
    core.append(helper.make_node("Conv", ["xf", "wf", "bf"], ["cf" if relu else "yf"], pads=[1, 1, 1, 1]))
    inits = _conv_weights(_rng())
    if relu:  # a Relu before a Q whose zero point is -128 changes nothing: it is dropped
        core.append(helper.make_node("Relu", ["cf"], ["yf"]))
        inits["yz"] = np.int8(-128)
    m = _qdq_model(core, {"x": (1, 4, 6, 6)}, inits)
    assert _folded(m) == {"QuantizeLinear": 1, "QLinearConv": 1, "DequantizeLinear": 1}
    _check(m, graph_pass=fold_qdq)


def test_fold_matmul():
    rng = _rng()
    inits = {
        "w": _weight(rng, "int8", (16, 8)),
        "ws": (rng.random(8) * 0.01 + 0.002).astype(F32),
        "wz": np.zeros(8, np.int8),
    }
    core = [_dq("w", "ws", "wz", "wf", axis=1), helper.make_node("MatMul", ["xf", "wf"], ["yf"])]
    m = _qdq_model(core, {"x": (2, 5, 16)}, inits)
    assert _folded(m)["QLinearMatMul"] == 1
    _check(m, graph_pass=fold_qdq)


def test_fold_matmul_of_two_activations():
    core = [helper.make_node("MatMul", ["xf", "x2f"], ["yf"])]
    m = _qdq_model(core, {"x": (2, 4, 16), "x2": (2, 16, 8)}, {})
    assert _folded(m)["QLinearMatMul"] == 1
    _check(m, graph_pass=fold_qdq)


# the float kernels of onnxruntime that its int8 graphs' float ops are matched to: MLAS's SGEMM
# with FMA, its AVX2 LayerNorm, its FMA3 erf (other CPUs run other kernels)
needs_mlas_avx2 = pytest.mark.skipif(
    not (native().has_feature("+avx2") and native().has_feature("+fma")),
    reason="onnxruntime runs the MLAS kernels matched here on x86-64 with AVX2 and FMA only",
)


def _shared_activation_matmul(k: int, n: int, seed: int = 0) -> onnx.ModelProto:
    """``x`` quantized to int8 and read through one DequantizeLinear by a MatMul and by a Relu:
    two consumer edges, so onnxruntime's x86 fusion leaves the int8 Q -> DQ pair as it is and,
    int8 activations being fused on ARM only, runs the MatMul in float (MLAS SGEMM), output
    ``mm`` beside its quantized ``y``."""
    rng = _rng(seed)
    inits = {
        "xs": F32(0.05),
        "xz": np.int8(3),
        "w": _weight(rng, "int8", (k, n)),
        "ws": (rng.random(n) * 0.01 + 0.002).astype(F32),
        "wz": np.zeros(n, np.int8),
        "ys": F32(0.1),
        "yz": np.int8(-10),
    }
    nodes = [
        _q("x", "xs", "xz", "xq"),
        _dq("xq", "xs", "xz", "xf"),
        _dq("w", "ws", "wz", "wf", axis=1),
        helper.make_node("MatMul", ["xf", "wf"], ["mm"]),
        helper.make_node("Relu", ["xf"], ["r"]),
        _q("mm", "ys", "yz", "yq"),
        _dq("yq", "ys", "yz", "y"),
    ]
    return model(nodes, {"x": ("float32", (2, 8, k))}, ["mm", "y", "r"], inits)


@needs_mlas_avx2
@pytest.mark.parametrize("k, n", [(300, 256), (768, 192), (48, 64)])
@pytest.mark.slow
def test_matmul_of_a_shared_int8_activation_runs_in_float_as_onnxruntime_sums(k, n):
    """The float MatMul is onnxruntime's bit for bit: the K terms in MLAS's blocks (300 by 256
    columns: 128 + 128 + 44), a chain of fused multiply-adds in each, the blocks added in order."""
    m = _shared_activation_matmul(k, n)
    g = fold_qdq(from_onnx(m))
    assert "QLinearMatMul" not in g.op_counts()
    (mm,) = [node for node in g.nodes if node.op == "MatMul"]
    assert mm.attr(ORT_ORDER, 0) == 1
    for seed in range(2):
        feeds = random_feeds(m, seed)
        want = run_ort(m, feeds)
        for got in (run_lowered(m, feeds, fold_qdq), _run_graph(g, feeds)):
            for w, v in zip(want, got, strict=True):
                np.testing.assert_array_equal(v, w)


@needs_mlas_avx2
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_of_a_dequantized_input_is_onnxruntimes(bias):
    """Between the integer ops a LayerNormalization computes as onnxruntime's x86 kernel (MLAS's
    AVX2 one): the mean from a float64 sum, the centered squares in eight FMA lanes, the output
    by one FMA; every float bit the same."""
    rng = _rng(3)
    inits = {"xs": F32(0.05), "xz": np.int8(3), "g": rng.standard_normal(96).astype(F32)}
    inputs = ["xf", "g"]
    if bias:
        inits["b"] = (rng.standard_normal(96) * 0.1).astype(F32)
        inputs.append("b")
    nodes = [
        _q("x", "xs", "xz", "xq"),
        _dq("xq", "xs", "xz", "xf"),
        helper.make_node("LayerNormalization", inputs, ["y"], axis=-1, epsilon=1e-12),
    ]
    m = model(nodes, {"x": ("float32", (2, 24, 96))}, ["y"], inits)
    (ln,) = [n for n in fold_qdq(from_onnx(m)).nodes if n.op == "LayerNormalization"]
    assert ln.attr(ORT_ORDER, 0) == 1
    feeds = {"x": (rng.standard_normal((2, 24, 96)) * 3).astype(F32)}
    np.testing.assert_array_equal(_run_graph(fold_qdq(from_onnx(m)), feeds)[0], run_ort(m, feeds)[0])


def test_mlas_stride_k():
    """MLAS's K-block: 128; halved while half still covers K when N >= K; doubled (the N-block
    halving from 128, not below 16) while half the N-block still covers N otherwise."""
    assert [mlas_stride_k(n, k) for n, k in [(768, 768), (3072, 768), (256, 48), (64, 30), (40, 300), (8, 300)]] == [
        128,
        128,
        64,
        32,
        256,
        1024,
    ]


@pytest.mark.slow
def test_kept_int8_follows_onnxruntimes_consumer_edges():
    """A Q whose DequantizeLinear feeds one node becomes uint8 and the op reading it is fused; a
    shared DQ (two readers) or two DQs keep the Q int8 and the op in float."""
    shared = _shared_activation_matmul(16, 8)
    del shared.graph.output[0]  # mm: the MatMul's output is read by its Q alone
    lone = onnx.ModelProto()
    lone.CopyFrom(shared)
    del lone.graph.node[4]  # the Relu and its output
    del lone.graph.output[1]
    assert fold_qdq(from_onnx(lone)).op_counts()["QLinearMatMul"] == 1
    assert "QLinearMatMul" not in fold_qdq(from_onnx(shared)).op_counts()
    assert fold_qdq(from_onnx(shared), uint8_activations=False).op_counts()["QLinearMatMul"] == 1  # ARM fuses int8
    _check(shared, graph_pass=fold_qdq)


def test_fold_gemm():
    rng = _rng()
    ws = (rng.random(8) * 0.01 + 0.002).astype(F32)
    inits = {"w": _weight(rng, "int8", (8, 16)), "ws": ws, "wz": np.zeros(8, np.int8)}
    inits.update({"b": rng.integers(-500, 500, 8).astype(np.int32), "bs": (F32(0.05) * ws).astype(F32)})
    inits["bz"] = np.zeros(8, np.int32)
    core = [_dq("w", "ws", "wz", "wf", axis=0), _dq("b", "bs", "bz", "bf", axis=0)]
    core.append(helper.make_node("Gemm", ["xf", "wf", "bf"], ["yf"], transB=1))
    m = _qdq_model(core, {"x": (3, 16)}, inits)
    assert _folded(m) == {"QuantizeLinear": 1, "QLinearMatMul": 1, "DequantizeLinear": 1}
    _check(m, graph_pass=fold_qdq)


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("act", ["int8", "uint8"])
@pytest.mark.parametrize("shape2", [(2, 3, 8), (8,), (1, 3, 1), (1,)])
@pytest.mark.slow
def test_fold_binary(op, act, shape2):
    core = [helper.make_node(op, ["xf", "x2f"], ["yf"])]
    m = _qdq_model(core, {"x": (2, 3, 8), "x2": shape2}, {}, act)
    assert _folded(m) == {"QuantizeLinear": 2, f"QLinear{op}": 1, "DequantizeLinear": 1}
    feeds = {k: v * 3 for k, v in random_feeds(m, 1).items()}  # reach the saturation too
    _assert_same(m, feeds, fold_qdq)


# parameters (scales, uint8 zero points) for which the order of MLAS's float operations matters:
# its fused multiply-adds and constant ``zc - fma(ra, za, rb * zb)`` (Add), its unfused
# ``float(product) * (sa * sb / sc) + zc`` (Mul), and the uint8 zero points (both)
_BOUNDARY_PARAMS = {"Add": (0.038, 0.0014, 0.084, 169, 39, 136), "Mul": (0.0055, 0.017, 0.0561, 84, 251, 6)}


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("act, uint8_activations", [("int8", True), ("int8", False), ("uint8", True)])
@pytest.mark.slow
def test_fold_binary_at_rounding_boundaries(op, act, uint8_activations):
    """Every pair of inputs; int8 computed as onnxruntime's uint8 kernel computes it, whether
    fold_qdq makes it uint8 or not."""
    xs, x2s, ys, xz, x2z, yz = _BOUNDARY_PARAMS[op]
    shift = 128 if act == "int8" else 0  # the parameters are those of the uint8 computation
    scales = {"xs": F32(xs), "x2s": F32(x2s), "ys": F32(ys)}
    zeros = {"xz": np.array(xz - shift, act), "x2z": np.array(x2z - shift, act), "yz": np.array(yz - shift, act)}
    m = _qdq_model(
        [helper.make_node(op, ["xf", "x2f"], ["yf"])], {"x": (256, 256), "x2": (256, 256)}, {**scales, **zeros}, act
    )
    lo, hi = _RANGE[act]
    a, b = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1), indexing="ij")
    feeds = {
        "x": ((a - int(zeros["xz"])) * scales["xs"]).astype(F32),
        "x2": ((b - int(zeros["x2z"])) * scales["x2s"]).astype(F32),
    }
    folded = fold_qdq(from_onnx(m), uint8_activations=uint8_activations)
    assert [n.attr(SHIFT_TO_UINT8, 0) for n in folded.nodes if n.op == f"QLinear{op}"] == [
        int(act == "int8" and not uint8_activations)
    ]
    _assert_same(m, feeds, lambda g: fold_qdq(g, uint8_activations=uint8_activations))


def test_fold_add_of_an_int8_constant_stays_float():
    """onnxruntime's x86 fusion turns int8 activations into uint8 but not an int8 constant, and
    QLinearAdd cannot mix the two: the add runs in float there, and stays float here."""
    inits = {"c": np.arange(-4, 4, dtype=np.int8), "cs": F32(0.02), "cz": np.int8(1)}
    core = [_dq("c", "cs", "cz", "cf"), helper.make_node("Add", ["xf", "cf"], ["yf"])]
    assert "QLinearAdd" not in _folded(_qdq_model(core, {"x": (2, 8)}, inits))
    inits = {"c": np.arange(8, dtype=np.uint8), "cs": F32(0.02), "cz": np.uint8(1)}
    m = _qdq_model(core, {"x": (2, 8)}, inits, "uint8")
    assert "QLinearAdd" in _folded(m)
    _check(m, graph_pass=fold_qdq)


def test_fold_add_broadcast_scalar_first():
    core = [helper.make_node("Add", ["x2f", "xf"], ["yf"])]
    m = _qdq_model(core, {"x": (2, 3, 8), "x2": (1, 3, 1)}, {})
    _check(m, graph_pass=fold_qdq)


def test_fold_global_average_pool():
    m = _qdq_model([helper.make_node("GlobalAveragePool", ["xf"], ["yf"])], {"x": (2, 5, 7, 9)}, {})
    assert _folded(m) == {"QuantizeLinear": 1, "QLinearGlobalAveragePool": 1, "DequantizeLinear": 1}
    _assert_same(m, {k: v * 3 for k, v in random_feeds(m).items()}, fold_qdq)


@pytest.mark.parametrize(
    "act, extent, y_scale",
    [("int8", 16, 1 / 256), ("uint8", 16, 1 / 256), ("int8", 128, 1 / 255), ("uint8", 197, 1 / 255)],
)
@pytest.mark.slow
def test_fold_softmax(act, extent, y_scale):
    """The lookup-table softmax bit for bit, its rows summed in order; 1 / 255 a y_scale whose
    inverse is floored (to 254)."""
    inits = {"xs": F32(0.13), "ys": F32(y_scale), "yz": _zp(act, -128, 0)}
    m = _qdq_model([helper.make_node("Softmax", ["xf"], ["yf"], axis=-1)], {"x": (16, 128, extent)}, inits, act)
    assert _folded(m) == {"QuantizeLinear": 1, "QLinearSoftmax": 1, "DequantizeLinear": 1}
    for seed in range(3):
        _assert_same(m, {k: v * 4 for k, v in random_feeds(m, seed).items()}, fold_qdq)


# a row of attention scores from int8 BERT (layer 2, as uint8) where two probabilities land at
# 2.4999998 / 254 or just above: onnxruntime rounds them up because its table's shift comes from a
# float32 log (a table with a float64 log rounds them down)
_BERT_SOFTMAX_ROW = [
    135,
    167,
    76,
    140,
    150,
    157,
    143,
    128,
    74,
    150,
    135,
    118,
    98,
    79,
    166,
    82,
    81,
    84,
    162,
    94,
    107,
    109,
    127,
    113,
    80,
    98,
    78,
    127,
    126,
    77,
    90,
    91,
    140,
    122,
    84,
    170,
    176,
    105,
    139,
    100,
    128,
    136,
    160,
    139,
    97,
    160,
    91,
    103,
    104,
    174,
    109,
    161,
    110,
    79,
    166,
    143,
    154,
    186,
    159,
    138,
    110,
    146,
    142,
    115,
    63,
    75,
    92,
    161,
    90,
    145,
    131,
    151,
    104,
    118,
    116,
    149,
    171,
    119,
    144,
    137,
    40,
    59,
    141,
    89,
    126,
    198,
    99,
    115,
    34,
    102,
    93,
    68,
    73,
    164,
    82,
    166,
    114,
    174,
    130,
    71,
    104,
    84,
    96,
    81,
    115,
    105,
    130,
    165,
    99,
    86,
    81,
    95,
    98,
    157,
    165,
    144,
    111,
    87,
    129,
    177,
    98,
    137,
    109,
    113,
    128,
    80,
    87,
    81,
]


def test_fold_softmax_rounds_a_bert_row_as_onnxruntime():
    inits = {"xs": F32(0.013303176), "xz": np.int8(-10), "ys": F32(0.003921569), "yz": np.int8(-128)}
    m = _qdq_model([helper.make_node("Softmax", ["xf"], ["yf"], axis=-1)], {"x": (1, 128)}, inits)
    q = np.array(_BERT_SOFTMAX_ROW, np.float32) - 128  # the int8 values
    _assert_same(m, {"x": ((q + 10) * F32(0.013303176)).astype(F32).reshape(1, 128)}, fold_qdq)


def test_qlinear_softmax_needs_its_table():
    values = {n: Value(n, s, d) for n, s, d in [("x", (2, 8), "uint8"), ("s", (), "float32"), ("z", (), "uint8")]}
    values["y"] = Value("y", (2, 8), "uint8")
    consts = {"s": np.array(0.1, F32), "z": np.array(0, np.uint8)}
    node = Node("sm", "QLinearSoftmax", ("x", "s", "z", "s", "z"), ("y",), {"axis": -1}, 1, "com.microsoft")
    g = Graph("g", [node], [values["x"]], [values["y"]], values, consts)
    with pytest.raises(GraphError, match="the float32\\[256\\] lookup table that fold_qdq builds, is missing"):
        lower_nodes(g, g.nodes, ["y"])


def test_fold_leaves_what_does_not_match():
    def conv_model(tail: list[onnx.NodeProto], **changes) -> onnx.ModelProto:
        core = [_dq("w", "ws", "wz", "wf", axis=0), _dq("b", "bs", "bz", "bf", axis=0)]
        core += [helper.make_node("Conv", ["xf", "wf", "bf"], ["cf"]), *tail]
        return _qdq_model(core, {"x": (1, 4, 6, 6)}, {**_conv_weights(_rng()), **changes})

    relu = [helper.make_node("Relu", ["cf"], ["yf"])]
    assert "Relu" in _folded(conv_model(relu))  # the Q's zero point is not -128: the Relu matters
    identity = [helper.make_node("Identity", ["cf"], ["yf"])]
    assert "Conv" in _folded(conv_model(identity))  # the conv's output is not quantized directly
    wrong_bias = conv_model([], bs=_conv_weights(_rng())["bs"] * 2)  # a bias scale not x_scale * w_scale
    wrong_bias.graph.node[-2].input[0] = "cf"
    assert "Conv" in _folded(wrong_bias)


# ---------------------------------------------------------------------------------------------
# the built-in int8 models


def _plain_dot_products(g: Graph) -> bool:
    """Whether every conv/matmul by a weight reduces uint8 x int8 raw values (VNNI's form): its
    activation zero point is 0 or folded into the bias."""
    for n in g.nodes:
        if n.op in ("QLinearConv", "QLinearMatMul") and g.is_constant(n.inputs[3]):
            types = (g.values[n.inputs[0]].dtype, g.values[n.inputs[3]].dtype)
            plain = n.attr(ZP_FOLDED) == 1 or not g.constants[n.inputs[2]].any()
            if types != ("uint8", "int8") or not plain:
                return False
    return True


def test_fold_resnet50_int8():
    g = fold_qdq(from_onnx(models.load_model("resnet50_int8", reduced=True)))
    assert g.op_counts() == {
        "QuantizeLinear": 5,
        "QLinearConv": 17,  # onnxruntime runs 8 of them in float (an int8 input), exact here
        "DequantizeLinear": 8,
        "MaxPool": 1,
        "Add": 3,  # a residual add reads a block's output that two ops read: int8 there, float
        "QLinearAdd": 1,
        "QLinearGlobalAveragePool": 1,
        "Flatten": 1,
        "QLinearMatMul": 1,
    }
    assert _plain_dot_products(g)
    assert {v.dtype for v in g.values.values() if v.dtype in ("int8", "uint8")} == {"int8", "uint8"}  # weights int8


def test_fold_bert_base_int8():
    g = fold_qdq(from_onnx(models.load_model("bert_base_int8", reduced=True)))
    assert _plain_dot_products(g)
    counts = g.op_counts()
    # onnxruntime's x86 graph of the same model, op for op: the query, key, value and first FFN
    # projections read a LayerNorm's output that the residual add reads too, which stays int8, so
    # they (and the GELU's product) run in float; the attention products, the attention output and
    # second FFN projections and the pooler are integer
    assert counts["QLinearMatMul"] == 9 and counts["MatMul"] == 8 and "Gemm" not in counts
    assert {m.attr(ORT_ORDER, 0) for m in g.nodes if m.op in ("MatMul", "LayerNormalization")} == {1}
    assert counts["QLinearAdd"] == 2 and counts["Add"] == 20 and counts["Mul"] == 5 and "QLinearMul" not in counts
    assert counts["QLinearSoftmax"] == 2 and counts["LayerNormalization"] == 5


def _task_reference(proto: onnx.ModelProto, inputs: list[str], output: str) -> onnx.ModelProto:
    """The nodes of ``proto`` that compute ``output`` from the int8 values ``inputs``: each input
    quantized from a float input ``<name>__f`` by the parameters of the QuantizeLinear that made
    it, an integer output dequantized into ``<output>__f`` (the Q -> DQ pairs let onnxruntime
    fuse), a float one renamed into it."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    inits = {t.name: t for t in proto.graph.initializer}
    needed, stack = set(), [output]
    while stack:
        v = stack.pop()
        if v and v not in needed and v not in inputs and v not in inits:
            needed.add(v)
            stack.extend(producers[v].input)
    nodes = [n for n in proto.graph.node if set(n.output) & needed]
    quantize = [helper.make_node("QuantizeLinear", [i + "__f", *producers[i].input[1:]], [i]) for i in inputs]
    last = producers[output]
    if last.op_type == "QuantizeLinear":
        out = helper.make_node("DequantizeLinear", [output, *last.input[1:]], [output + "__f"])
    else:
        out = helper.make_node("Identity", [output], [output + "__f"])
    nodes = [*quantize, *nodes, out]
    used = {i for n in nodes for i in n.input}
    g = helper.make_graph(
        nodes,
        "task",
        [helper.make_tensor_value_info(i + "__f", onnx.TensorProto.FLOAT, None) for i in inputs],
        [helper.make_tensor_value_info(output + "__f", onnx.TensorProto.FLOAT, None)],
        [t for name, t in inits.items() if name in used],
    )
    m = helper.make_model(g, opset_imports=proto.opset_import)
    m.ir_version = proto.ir_version
    return m


_VNNI_HERE = load_hardware("host").has_feature("+avx512vnni")


@pytest.mark.parametrize("name", ["resnet50_int8", "bert_base_int8"])
@pytest.mark.slow
def test_int8_model_tasks_match_onnxruntime_subgraphs(name):
    """Every integer task of the model (a fused kernel: QLinearConv with its QLinearAdd and
    requantize, QLinearMatMul, ...), compiled with its default schedule, against onnxruntime
    running that task's QDQ subgraph alone: bit-exact, or within 1e-6 of the output's scale
    where the task ends in float (an integer product dequantized into BERT's float bias add,
    whose float rounding may differ). Without VNNI, activations stay in the
    lower half of their type's range: as uint8 (which onnxruntime, like fold_qdq, makes of int8
    ones) below 128, where onnxruntime's AVX2 kernels do not saturate (the module docstring).
    The layout stays NCHW so that task values keep the model's names (NHWC is the same integer
    arithmetic: test_qlinear_conv_nhwc_equals_nchw_transposed)."""
    proto = models.load_model(name, reduced=True)
    g = prepare(from_onnx(proto), layout="NCHW")
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    producers = {o: n for n in proto.graph.node for o in n.output}
    rng = _rng()

    def dequantize(q: np.ndarray, value: str) -> np.ndarray:
        """``q`` (of the folded graph's type) by the parameters of the original QuantizeLinear."""
        scale, zero = (consts[i] for i in producers[value].input[1:3])
        shift = 128 if q.dtype == np.uint8 and zero.dtype == np.int8 else 0  # made uint8 by fold_qdq
        return ((q.astype(np.int32) - shift - int(zero)) * F32(scale)).astype(F32)

    def integer(value: str) -> bool:
        return g.values[value].dtype in ("int8", "uint8") and producers[value].op_type == "QuantizeLinear"

    def as_float(value: np.ndarray, name: str) -> np.ndarray:
        return dequantize(value, name) if integer(name) else value

    kernels, tasks = extract_tasks(g)
    checked = 0
    for task in tasks:
        group = next(k.group for k in kernels if k.task == task.key)
        inside = {o for n in group.nodes for o in n.outputs}
        inputs = list(dict.fromkeys(i for n in group.nodes for i in n.inputs if i and i not in inside))
        inputs = [i for i in inputs if not g.is_constant(i)]
        if not inputs or not all(map(integer, inputs)):
            continue  # float tasks (LayerNorm, Quantize, ...) are checked to 1e-3 in the e2e tests
        values = [g.values[i] for i in inputs]
        sub = Graph(task.name, list(group.nodes), values, [g.values[o] for o in group.outputs], g.values, g.constants)
        exe = compile_model(sub, None, layout="NCHW")
        lows = {"int8": -128, "uint8": 0}
        high = 256 if _VNNI_HERE else 128
        feeds = {v.name: (rng.integers(0, high, v.shape) + lows[v.dtype]).astype(v.dtype) for v in values}
        got = exe(**feeds)
        for out, value in zip(group.outputs, got, strict=True):
            (want,) = run_ort(
                _task_reference(proto, inputs, out), {i + "__f": dequantize(v, i) for i, v in feeds.items()}
            )
            if integer(out):
                np.testing.assert_array_equal(dequantize(value, out), want, err_msg=f"{task.name} ({out})")
            else:  # an integer product dequantized into a float epilogue (BERT's bias adds stay float)
                scale = float(np.max(np.abs(want)))
                np.testing.assert_allclose(value, want, rtol=0, atol=1e-6 * scale, err_msg=f"{task.name} ({out})")
        checked += 1
    assert checked >= 5, f"only {checked} integer tasks"
