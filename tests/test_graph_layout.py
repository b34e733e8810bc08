"""The layout pass (graph/layout.py, ``to_nhwc``): which nodes run in NHWC, where LayoutTransforms
go (one in, one out around a residual block; none between convolutions; one per value, shared),
weights and per-channel constants rearranged at compile time, Concat's axis remapped, int8
convolutions rewritten, nodes left alone; and the rewritten graphs against onnxruntime.

Relu, Add, Mul, Concat and Flatten are lowered by another module (ops_tensor); where it has not
registered them, the fixture ``stand_ins`` registers small test lowerings for the test's duration
so that the models import and run."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from graph_util import check_against_ort, model, single
from onnx import helper

from tensorsearch import te
from tensorsearch.graph import registry
from tensorsearch.graph.ir import Graph, Node, Value
from tensorsearch.graph.layout import TO_NCHW, TO_NHWC, conv_transpose_weight_to_hwio, to_nhwc
from tensorsearch.graph.lowering import stage_name
from tensorsearch.graph.onnx_import import from_onnx
from tensorsearch.ir import max_

RNG = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# stand-in lowerings for the ops of another module


def _read(arg, out, idx):
    if not arg.shape:
        return arg.tensor[0]
    tail, dims = idx[len(idx) - len(arg.shape) :], out[len(out) - len(arg.shape) :]
    return arg.tensor[tuple(0 if s == 1 and o != 1 else i for s, o, i in zip(arg.shape, dims, tail, strict=True))]


def _binary(fn):
    def lower(node, args, outs):
        out = outs[0].shape
        return [te.compute(out, lambda *i: fn(_read(args[0], out, i), _read(args[1], out, i)), name=stage_name("bin"))]

    return lower


def _relu(node, args, outs):
    x = args[0].tensor
    return [te.compute(x.shape, lambda *i: max_(x[i], 0.0), name=stage_name("relu"))]


def _concat(node, args, outs):
    axis = int(node.attr("axis")) % len(outs[0].shape)

    def body(*i):
        offsets = np.cumsum([0] + [a.shape[axis] for a in args])
        value = None
        for a, lo in reversed(list(zip(args, offsets, strict=False))):
            read = a.tensor[tuple(p - int(lo) if d == axis else p for d, p in enumerate(i))]
            value = read if value is None else te.if_then_else(i[axis] < int(lo + a.shape[axis]), read, value)
        return value

    return [te.compute(outs[0].shape, body, name=stage_name("concat"))]


def _flatten(node, args, outs):
    x = args[0].tensor
    _, _, h, w = args[0].shape
    return [te.compute(outs[0].shape, lambda n, j: x[n, j // (h * w), j // w % h, j % w], name=stage_name("flatten"))]


STAND_INS = {
    "Relu": _relu,
    "Add": _binary(lambda a, b: a + b),
    "Mul": _binary(lambda a, b: a * b),
    "Concat": _concat,
    "Flatten": _flatten,
}


@pytest.fixture
def stand_ins(monkeypatch):
    registry.supported_ops()  # the real lowerings first
    for op, fn in STAND_INS.items():
        if registry.lowering_of(op) is None:
            monkeypatch.setitem(registry.LOWERINGS, op, registry.Lowering(op, fn, registry.OpKind.INJECTIVE))


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, name=f"/{outputs[0]}", **attrs)


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def made_by(g: Graph, value: str) -> Node:
    return g.producer(value)


# ---------------------------------------------------------------------------------------------
# structure and numerics


@pytest.mark.slow
def test_residual_block_has_one_transform_in_and_one_out(stand_ins):
    w1, w2 = f32(8, 4, 3, 3), f32(8, 8, 3, 3)
    m = model(
        [
            node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
            node("Relu", ["c1"], ["r"]),
            node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1]),
            node("Add", ["c2", "r"], ["a"]),
            node("GlobalAveragePool", ["a"], ["p"]),
            node("Flatten", ["p"], ["y"]),
        ],
        {"x": ("float32", (1, 4, 6, 6))},
        ["y"],
        {"w1": w1, "b1": f32(8), "w2": w2},
    )
    g = to_nhwc(from_onnx(m))
    assert ops(g) == [
        "LayoutTransform",
        "Conv",
        "Relu",
        "Conv",
        "Add",
        "GlobalAveragePool",
        "LayoutTransform",
        "Flatten",
    ]
    first, last = g.nodes[0], g.nodes[-2]
    assert first.inputs == ("x",) and first.attrs["perm"] == TO_NHWC
    assert last.outputs == ("p",) and last.attrs["perm"] == TO_NCHW and g.nodes[-1].inputs == ("p",)
    convs = [n for n in g.nodes if n.op == "Conv"]
    assert all(n.attrs["layout"] == "NHWC" for n in [*convs, g.nodes[5]])
    np.testing.assert_array_equal(g.constants[convs[0].inputs[1]], w1.transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(g.constants[convs[1].inputs[1]], w2.transpose(2, 3, 1, 0))
    assert g.values[g.nodes[2].outputs[0]].shape == (1, 6, 6, 8)
    assert g.values["p"].shape == (1, 8, 1, 1) and g.values[last.inputs[0]].shape == (1, 1, 1, 8)
    check_against_ort(m, graph_pass=to_nhwc)


@pytest.mark.slow
def test_per_channel_constants_are_permuted(stand_ins):
    s, t, u = f32(8, 1, 1), f32(1, 8, 1, 1), f32(5)
    m = model(
        [
            node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            node("Mul", ["c", "s"], ["m"]),
            node("Add", ["t", "m"], ["a"]),
            node("Add", ["a", "u"], ["y"]),
        ],
        {"x": ("float32", (2, 3, 4, 5))},
        ["y"],
        {"w": f32(8, 3, 3, 3), "s": s, "t": t, "u": u},
    )
    g = to_nhwc(from_onnx(m))
    assert ops(g) == ["LayoutTransform", "Conv", "Mul", "Add", "Add", "LayoutTransform"]
    mul, add, add_u = g.nodes[2:5]
    np.testing.assert_array_equal(g.constants[mul.inputs[1]], s.reshape(1, 1, 8))
    np.testing.assert_array_equal(g.constants[add.inputs[0]], t.reshape(1, 1, 1, 8))
    np.testing.assert_array_equal(g.constants[add_u.inputs[1]], u.reshape(5, 1))  # along W, now dim 2 of 4
    check_against_ort(m, graph_pass=to_nhwc)


@pytest.mark.slow
def test_concat_axis_is_remapped(stand_ins):
    m = model(
        [
            node("Conv", ["x", "wa"], ["a"]),
            node("Conv", ["x", "wb"], ["b"]),
            node("Concat", ["a", "b"], ["c"], axis=-3),
            node("Conv", ["c", "wc"], ["y"], pads=[1, 1, 1, 1]),
        ],
        {"x": ("float32", (1, 4, 5, 5))},
        ["y"],
        {"wa": f32(3, 4, 1, 1), "wb": f32(5, 4, 1, 1), "wc": f32(4, 8, 3, 3)},
    )
    g = to_nhwc(from_onnx(m))
    assert ops(g) == ["LayoutTransform", "Conv", "Conv", "Concat", "Conv", "LayoutTransform"]
    concat = g.nodes[3]
    assert concat.attrs["axis"] == 3 and g.values[concat.outputs[0]].shape == (1, 5, 5, 8)
    check_against_ort(m, graph_pass=to_nhwc)


def test_one_transform_back_per_value_shared_by_its_consumers(stand_ins):
    m = model(
        [
            node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
            node("Flatten", ["c"], ["f"]),
            node("Conv", ["c", "w2"], ["d"]),
            node("Add", ["d", "x2"], ["e"]),  # a 4-D NCHW activation: Add stays NCHW
        ],
        {"x": ("float32", (1, 3, 4, 4)), "x2": ("float32", (1, 2, 4, 4))},
        ["c", "f", "e"],
        {"w1": f32(4, 3, 3, 3), "w2": f32(2, 4, 1, 1)},
    )
    g = to_nhwc(from_onnx(m))
    assert ops(g) == ["LayoutTransform", "Conv", "LayoutTransform", "Flatten", "Conv", "LayoutTransform", "Add"]
    assert g.nodes[2].outputs == ("c",) and g.nodes[3].inputs == ("c",)
    assert g.nodes[4].inputs[0] == g.nodes[1].outputs[0]  # the second conv reads NHWC
    assert g.nodes[6].inputs == ("d", "x2") and "layout" not in g.nodes[6].attrs
    assert [v.name for v in g.outputs] == ["c", "f", "e"]
    check_against_ort(m, graph_pass=to_nhwc)


@pytest.mark.slow
def test_conv_batch_norm_pools_numerics():
    c = 6
    bn = {"s": f32(c), "b": f32(c), "m": f32(c), "v": np.abs(f32(c)) + 0.5}
    m = model(
        [
            node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
            node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
            node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
            node("AveragePool", ["p"], ["q"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            node("GlobalAveragePool", ["q"], ["y"]),
        ],
        {"x": ("float32", (2, 3, 9, 9))},
        ["y", "p"],
        {"w": f32(c, 3, 3, 3), **bn},
    )
    g = to_nhwc(from_onnx(m))
    assert ops(g).count("LayoutTransform") == 3
    assert all(n.attrs.get("layout") == "NHWC" for n in g.nodes if n.op != "LayoutTransform")
    check_against_ort(m, graph_pass=to_nhwc)


def test_weights_computed_at_run_time_get_a_transform():
    inputs = {"x": ("float32", (1, 4, 4, 4)), "w": ("float32", (6, 4, 3, 3)), "wt": ("float32", (6, 2, 2, 2))}
    m = model(
        [node("Conv", ["x", "w"], ["c"]), node("ConvTranspose", ["c", "wt"], ["y"], strides=[2, 2])],
        inputs,
        ["y"],
    )
    g = to_nhwc(from_onnx(m))
    perms = {n.inputs[0]: n.attrs["perm"] for n in g.nodes if n.op == "LayoutTransform"}
    assert perms == {"x": TO_NHWC, "w": (2, 3, 1, 0), "wt": (2, 3, 0, 1), "y_nhwc": TO_NCHW}
    check_against_ort(m, graph_pass=to_nhwc)


def test_grouped_conv_transpose_weight():
    w = f32(4, 3, 2, 2)  # [Cin, Cout/g, KH, KW], 2 groups
    hwio = conv_transpose_weight_to_hwio(w, 2)
    assert hwio.shape == (2, 2, 2, 6)
    for i, j, kh, kw in np.ndindex(w.shape):
        g, r = divmod(i, 2)
        assert hwio[kh, kw, r, g * 3 + j] == w[i, j, kh, kw]


def test_nodes_left_alone():
    m = model(
        [
            node("Conv", ["x1", "w1"], ["c1"]),  # 1-D
            node("MaxPool", ["x2"], ["p", "i"], kernel_shape=[2, 2]),  # with Indices
            node("ConvTranspose", ["x2", "wt"], ["t"], group=2),  # a run-time weight, 2 groups
        ],
        {"x1": ("float32", (1, 2, 5)), "x2": ("float32", (1, 2, 4, 4)), "wt": ("float32", (2, 1, 2, 2))},
        ["c1", "p", "i", "t"],
        {"w1": f32(3, 2, 2)},
    )
    g = from_onnx(m)
    assert to_nhwc(g).nodes == g.nodes


def test_the_pass_runs_once():
    g = to_nhwc(from_onnx(single("Conv", {"x": ("float32", (1, 2, 3, 3))}, {"w": f32(2, 2, 1, 1)})))
    assert to_nhwc(g) is g


def test_int8_convolutions_are_rewritten():
    v = {}

    def val(name, shape, dtype="float32"):
        v[name] = Value(name, shape, dtype)
        return name

    w8 = RNG.integers(-5, 5, (4, 3, 3, 3)).astype(np.int8)
    consts = {"s": np.float32(0.1), "zp": np.uint8(3), "w8": w8, "ws": np.full(4, 0.2, np.float32), "wzp": np.int8(0)}
    consts.update({"ps": np.full(4, 0.5, np.float32), "pzp": np.zeros(4, np.uint8)})
    for k, a in consts.items():
        val(k, a.shape, str(a.dtype))
    nodes = [
        Node("q", "QuantizeLinear", (val("x", (1, 3, 5, 5)), "s", "zp"), (val("xq", (1, 3, 5, 5), "uint8"),)),
        Node("qc", "QLinearConv", ("xq", "s", "zp", "w8", "ws", "wzp", "s", "zp"), (val("yq", (1, 4, 3, 3), "uint8"),)),
        Node("dq", "DequantizeLinear", ("yq", "s", "zp"), (val("y", (1, 4, 3, 3)),)),
        Node("ci", "ConvInteger", ("xq", "w8", "zp"), (val("z", (1, 4, 3, 3), "int32"),)),
        Node("dqz", "DequantizeLinear", ("yq", "ps", "pzp"), (val("u", (1, 4, 3, 3)),), {"axis": 1}),  # per channel
    ]
    g = Graph("int8", nodes, [v["x"]], [v["y"], v["z"], v["u"]], v, consts)
    out = to_nhwc(g)
    assert ops(out) == [
        "QuantizeLinear",
        "LayoutTransform",
        "QLinearConv",
        "DequantizeLinear",
        "ConvInteger",
        "LayoutTransform",
        "DequantizeLinear",
        "LayoutTransform",
        "LayoutTransform",
    ]
    qconv, dq, conv_int = out.nodes[2], out.nodes[3], out.nodes[4]
    assert qconv.attrs["layout"] == conv_int.attrs["layout"] == "NHWC"
    assert qconv.inputs[0] == conv_int.inputs[0] == out.nodes[1].outputs[0]
    assert qconv.inputs[3] == conv_int.inputs[1]
    np.testing.assert_array_equal(out.constants[qconv.inputs[3]], w8.transpose(2, 3, 1, 0))
    assert dq.inputs[0] == qconv.outputs[0] and out.values[dq.outputs[0]].shape == (1, 3, 3, 4)
    assert out.nodes[6].inputs[0] == "yq"  # per-channel: back to NCHW first
    assert {n.outputs[0] for n in out.nodes[7:]} == {"y", "z"}


def test_int8_residual_add_stays_nhwc():
    """quant.fold_qdq's QLinearAdd between two QLinearConvs (ResNet's int8 residual) runs in NHWC:
    the reduced int8 ResNet-50 transposes only its image input and the pooled features."""
    from tensorsearch.graph import models
    from tensorsearch.graph.passes import prepare

    g = prepare(from_onnx(models.load_model("resnet50_int8", reduced=True)))
    adds = [n for n in g.nodes if n.op == "QLinearAdd"]
    assert adds and all(len(g.values[n.outputs[0]].shape) == 4 for n in adds)
    assert ops(g).count("LayoutTransform") <= 2, ops(g)
