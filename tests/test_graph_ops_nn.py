"""The neural-network lowerings (graph/ops_nn.py) against onnxruntime: Conv (1-, 2-, 3-D, groups,
depthwise, dilations, strides, pads, every auto_pad), ConvTranspose, MaxPool, AveragePool,
GlobalAveragePool, BatchNormalization, Gemm, MatMul and LayoutTransform, on seeded random inputs,
each 4-D case in NCHW as imported and in NHWC (``to_nhwc`` puts LayoutTransforms around the op);
the NHWC convolutions are the workloads' C2D / GRP / T2D programs; attributes we cannot do are
GraphErrors naming the attribute."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from graph_util import check_against_ort, model, single
from onnx import helper

from tensorsearch import te
from tensorsearch.graph.ir import Graph, GraphError, Node, Value
from tensorsearch.graph.layout import to_nhwc
from tensorsearch.graph.lowering import lower_nodes
from tensorsearch.graph.onnx_import import from_onnx
from tensorsearch.ir import structural_equal
from tensorsearch.runtime import build
from tensorsearch.transform import mark_layout_free
from tensorsearch.workloads import definitions

RNG = np.random.default_rng(20240611)
LAYOUTS = [pytest.param(None, id="nchw"), pytest.param(to_nhwc, id="nhwc")]


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def x(*shape: int) -> dict:
    return {"x": ("float32", shape)}


# ---------------------------------------------------------------------------------------------
# convolutions

CONV_2D = {
    "pads_strides_bias": (
        x(1, 4, 7, 7),
        {"w": f32(6, 4, 3, 3), "b": f32(6)},
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    "groups_dilation_asymmetric_pads": (
        x(2, 4, 9, 8),
        {"w": f32(6, 2, 3, 3)},
        {"group": 2, "dilations": [2, 2], "pads": [0, 1, 1, 0]},
    ),
    "depthwise_same_upper": (
        x(1, 4, 7, 7),
        {"w": f32(4, 1, 3, 3), "b": f32(4)},
        {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ),
    "same_lower_even_kernel": (x(1, 3, 7, 6), {"w": f32(5, 3, 2, 2)}, {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "valid_rectangular": (x(1, 3, 6, 9), {"w": f32(4, 3, 2, 3)}, {"auto_pad": "VALID", "strides": [1, 2]}),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CONV_2D)
@pytest.mark.slow
def test_conv_2d(case, layout):
    inputs, inits, attrs = CONV_2D[case]
    check_against_ort(single("Conv", inputs, inits, **attrs), graph_pass=layout)


def test_conv_1d_and_3d():
    check_against_ort(single("Conv", x(2, 3, 9), {"w": f32(4, 3, 3), "b": f32(4)}, pads=[2, 1], dilations=[2]))
    m = single("Conv", x(1, 2, 4, 5, 5), {"w": f32(3, 2, 2, 3, 3)}, pads=[0, 1, 1, 1, 1, 0], strides=[1, 2, 1])
    check_against_ort(m)


def test_conv_with_a_weight_computed_at_run_time():
    m = single("Conv", {"x": ("float32", (1, 3, 5, 5)), "w": ("float32", (4, 3, 3, 3))}, pads=[1, 1, 1, 1])
    check_against_ort(m)
    check_against_ort(m, graph_pass=to_nhwc)


def _anchor_func(m, op: str):
    g = to_nhwc(from_onnx(m))
    nodes = [n for n in g.nodes if n.op == op]
    return lower_nodes(g, nodes, [nodes[0].outputs[0]]).func


@pytest.mark.parametrize(
    "shape, weight, attrs, args",
    [
        pytest.param((1, 8, 4, 4), (8, 8, 3, 3), {"pads": [1] * 4}, (1, 4, 4, 8, 8, 3, 1, 1), id="C2D"),
        pytest.param(
            (1, 8, 6, 6),
            (8, 2, 3, 3),
            {"pads": [1] * 4, "strides": [2, 2], "group": 4},
            (1, 6, 6, 8, 8, 3, 2, 1, 1, 4),
            id="GRP",
        ),
    ],
)
def test_nhwc_conv_is_the_workloads_conv2d_nhwc(shape, weight, attrs, args):
    func = _anchor_func(single("Conv", x(*shape), {"w": f32(*weight)}, **attrs), "Conv")
    want = te.create_prim_func(definitions.conv2d_nhwc(args, definitions.FORMS["float32"]))
    assert structural_equal(func, mark_layout_free(want, [1]))  # the weight, a constant


def test_conv_without_padding_has_no_pad_stage_and_bias_is_a_stage_of_its_own():
    g = to_nhwc(from_onnx(single("Conv", x(1, 4, 5, 5), {"w": f32(4, 4, 1, 1), "b": f32(4)})))
    conv = [n for n in g.nodes if n.op == "Conv"]
    text = str(lower_nodes(g, conv, [conv[0].outputs[0]]).func)
    assert 'T.block("PadInput")' not in text
    assert 'T.block("conv2d_nhwc")' in text and 'T.block("bias_add")' in text


CONV_TRANSPOSE_2D = {
    "t2d_bias": (x(1, 4, 3, 3), {"w": f32(4, 3, 4, 4), "b": f32(3)}, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "output_padding": (
        x(1, 3, 4, 3),
        {"w": f32(3, 2, 3, 3)},
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    ),
    "groups_dilation_asymmetric": (
        x(1, 4, 3, 4),
        {"w": f32(4, 3, 3, 2), "b": f32(6)},
        {"group": 2, "strides": [3, 2], "dilations": [2, 1], "pads": [0, 1, 2, 0]},
    ),
    "stride_1": (x(2, 3, 4, 4), {"w": f32(3, 4, 3, 3)}, {"pads": [1, 0, 1, 2]}),
    "pads_past_the_kernel": (x(1, 2, 5, 5), {"w": f32(2, 3, 3, 3)}, {"strides": [2, 2], "pads": [3, 3, 2, 2]}),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CONV_TRANSPOSE_2D)
@pytest.mark.slow
def test_conv_transpose_2d(case, layout):
    inputs, inits, attrs = CONV_TRANSPOSE_2D[case]
    check_against_ort(single("ConvTranspose", inputs, inits, **attrs), graph_pass=layout)


def test_conv_transpose_1d():
    m = single("ConvTranspose", x(1, 3, 5), {"w": f32(3, 2, 3)}, strides=[2], pads=[1, 0], output_padding=[1])
    check_against_ort(m)


def test_nhwc_conv_transpose_is_the_workloads_t2d():
    m = single("ConvTranspose", x(1, 4, 2, 2), {"w": f32(4, 4, 4, 4)}, strides=[2, 2], pads=[1, 1, 1, 1])
    want = te.create_prim_func(
        definitions.conv2d_transpose_nhwc((1, 2, 2, 4, 4, 4, 2, 1), definitions.FORMS["float32"])
    )
    assert structural_equal(_anchor_func(m, "ConvTranspose"), mark_layout_free(want, [1]))


# ---------------------------------------------------------------------------------------------
# pooling and batch norm

POOLS = {
    "max_pads": ("MaxPool", x(1, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "max_ceil": ("MaxPool", x(1, 3, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "max_dilation": ("MaxPool", x(1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 0, 1]}),
    "max_same_upper": ("MaxPool", x(1, 2, 7, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "avg_exclude_pad": ("AveragePool", x(1, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}),
    "avg_include_pad": (
        "AveragePool",
        x(1, 3, 7, 7),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4, "count_include_pad": 1},
    ),
    "avg_ceil_include_pad": (
        "AveragePool",
        x(2, 3, 8, 8),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4, "ceil_mode": 1, "count_include_pad": 1},
    ),
    "avg_ceil": ("AveragePool", x(1, 3, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "avg_same_lower": (
        "AveragePool",
        x(1, 2, 7, 6),
        {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
    ),
    "global_avg": ("GlobalAveragePool", x(2, 3, 5, 4), {}),
}


# NHWC for the cases whose geometry differs (ceil mode, padding counted or not); the others in NCHW
NHWC_POOLS = {"max_pads", "max_ceil", "avg_include_pad", "avg_ceil_include_pad", "global_avg"}


@pytest.mark.parametrize(
    "case, layout",
    [pytest.param(c, None, id=f"{c}-nchw") for c in POOLS]
    + [pytest.param(c, to_nhwc, id=f"{c}-nhwc") for c in POOLS if c in NHWC_POOLS],
)
@pytest.mark.slow
def test_pool(case, layout):
    op, inputs, attrs = POOLS[case]
    check_against_ort(single(op, inputs, **attrs), graph_pass=layout)


def test_pools_1d():
    check_against_ort(single("MaxPool", x(1, 2, 9), kernel_shape=[3], strides=[2], pads=[1, 1]))
    check_against_ort(single("AveragePool", x(1, 2, 9), kernel_shape=[4], strides=[3], pads=[2, 1], ceil_mode=1))
    check_against_ort(single("GlobalAveragePool", x(2, 3, 5)))


def _bn_params(c: int) -> dict:
    return {"s": f32(c), "b": f32(c), "m": f32(c), "v": np.abs(f32(c)) + 0.5}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batch_norm(layout):
    check_against_ort(single("BatchNormalization", x(2, 3, 4, 5), _bn_params(3), epsilon=1e-3), graph_pass=layout)


def test_batch_norm_2d():
    check_against_ort(single("BatchNormalization", x(2, 3), _bn_params(3)))


# ---------------------------------------------------------------------------------------------
# matrix products

GEMMS = {
    "bias_row": ({"a": ("float32", (3, 5))}, {"b": f32(5, 4), "c": f32(4)}, {}),
    "transposed_alpha_beta_column": (
        {"a": ("float32", (5, 3))},
        {"b": f32(4, 5), "c": f32(3, 1)},
        {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
    ),
    "no_c": ({"a": ("float32", (3, 5))}, {"b": f32(4, 5)}, {"transB": 1, "alpha": 1.5}),
    "scalar_c_activations": ({"a": ("float32", (3, 5)), "b": ("float32", (5, 4))}, {"c": np.float32(0.7)}, {}),
}


@pytest.mark.parametrize("case", GEMMS)
def test_gemm(case):
    inputs, inits, attrs = GEMMS[case]
    check_against_ort(single("Gemm", inputs, inits, **attrs))


MATMULS = {
    "2d_weight": ({"a": ("float32", (3, 5))}, {"b": f32(5, 4)}),
    "3d_by_weight": ({"a": ("float32", (2, 3, 5))}, {"b": f32(5, 4)}),
    "batch_broadcast": ({"a": ("float32", (2, 1, 3, 4)), "b": ("float32", (3, 4, 5))}, {}),
    "vector_by_batch": ({"a": ("float32", (4,)), "b": ("float32", (2, 4, 3))}, {}),
    "batch_by_vector": ({"a": ("float32", (2, 3, 4)), "b": ("float32", (4,))}, {}),
    "dot": ({"a": ("float32", (4,)), "b": ("float32", (4,))}, {}),
}


@pytest.mark.parametrize("case", MATMULS)
def test_matmul(case):
    inputs, inits = MATMULS[case]
    check_against_ort(single("MatMul", inputs, inits))


def test_matmul_reads_a_constant_weight_as_it_is():
    g = from_onnx(single("MatMul", {"a": ("float32", (1, 6, 8))}, {"b": f32(8, 4)}))
    text = str(lower_nodes(g, g.nodes, [g.outputs[0].name]).func)
    assert text.count("T.block(") == 1 and 'T.block("matmul")' in text
    assert "x0[v_i0, v_i1, v_k] * w0[v_k, v_i2]" in text


# ---------------------------------------------------------------------------------------------
# LayoutTransform


def test_layout_transform_is_a_transpose():
    values = {"a": Value("a", (2, 3, 4, 5), "float32"), "b": Value("b", (4, 2, 5, 3), "float32")}
    node = Node("t", "LayoutTransform", ("a",), ("b",), {"perm": (2, 0, 3, 1)})
    g = Graph("t", [node], [values["a"]], [values["b"]], values, {})
    mod = build(lower_nodes(g, g.nodes, ["b"]).func)
    a = f32(2, 3, 4, 5)
    b = np.zeros((4, 2, 5, 3), np.float32)
    mod(a, b)
    np.testing.assert_array_equal(b, a.transpose(2, 0, 3, 1))


# ---------------------------------------------------------------------------------------------
# errors


def _lower(m, change=None) -> None:
    g = from_onnx(m)
    if change is not None:
        g = g.replace(nodes=[n.with_(attrs=change) for n in g.nodes])
    lower_nodes(g, g.nodes, [v.name for v in g.outputs])


@pytest.mark.parametrize(
    "model, change, match",
    [
        pytest.param(
            single("ConvTranspose", x(1, 2, 3, 3), {"w": f32(2, 2, 3, 3)}, auto_pad="SAME_UPPER", strides=[2, 2]),
            None,
            r"ConvTranspose.*attribute auto_pad='SAME_UPPER' is not supported \(supported: NOTSET\)",
            id="conv_transpose_auto_pad",
        ),
        pytest.param(
            single("ConvTranspose", x(1, 2, 3, 3), {"w": f32(2, 2, 3, 3)}, output_shape=[5, 5]),
            None,
            "attribute output_shape is not supported",
            id="conv_transpose_output_shape",
        ),
        pytest.param(
            model(
                [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)],
                x(2, 3, 4, 4),
                ["y", "rm", "rv"],
                _bn_params(3),
            ),
            None,
            "attribute training_mode=1 is not supported",
            id="batch_norm_training",
        ),
        pytest.param(
            single("AveragePool", x(1, 2, 6, 6), opset=19, kernel_shape=[2, 2], dilations=[2, 2]),
            None,
            r"attribute dilations=\[2, 2\] is not supported \(supported: 1\)",
            id="average_pool_dilations",
        ),
        pytest.param(
            single("MaxPool", x(1, 2, 6, 6), kernel_shape=[2, 2]),
            {"layout": "NCWH"},
            "attribute layout='NCWH' is not supported",
            id="layout",
        ),
    ],
)
def test_unsupported_attributes(model, change, match):
    with pytest.raises(GraphError, match=match):
        _lower(model, change)


def test_max_pool_indices_output_is_refused():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="/MaxPool", kernel_shape=[2, 2])
    with pytest.raises(GraphError, match=r"MaxPool.*the Indices output \(output 1\) is not supported"):
        _lower(model([node], x(1, 2, 4, 4), ["y", "i"]))
