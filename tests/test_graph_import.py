"""ONNX import: static shapes, constant folding, symbolic dimensions, and one clear error for
each bad input (an unsupported op, an unbound dimension, a truncated file, a cycle)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graph_util import model
from onnx import helper

from tensorsearch.graph import GraphError, from_onnx
from tensorsearch.graph.ir import Node
from tensorsearch.graph.models import load_model
from tensorsearch.graph.registry import supported_ops

ISSUE_OPS = """Conv ConvTranspose Gemm MatMul Add Sub Mul Div Pow Sqrt Erf Tanh Sigmoid Relu Clip
BatchNormalization MaxPool AveragePool GlobalAveragePool Flatten Reshape Transpose Squeeze Unsqueeze Concat
Split Slice Gather Shape Constant ConstantOfShape Expand Where Equal Cast Softmax LayerNormalization ReduceMean
Identity QuantizeLinear DequantizeLinear QLinearConv QLinearMatMul ConvInteger MatMulInteger""".split()


def test_every_operator_the_issue_names_is_supported():
    missing = sorted(set(ISSUE_OPS) - set(supported_ops()))
    assert not missing, missing


def test_shapes_are_static_and_shape_arithmetic_is_folded():
    # y = Reshape(x, Concat(Shape(x)[0], -1)): the shape computation is folded at import
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["shape2"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "shape2"], ["y"], name="reshape"),
    ]
    inits = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    g = from_onnx(model(nodes, {"x": ("float32", ("batch", 3, 4))}, ["y"], inits), input_shapes={"batch": 2})
    assert [n.op for n in g.nodes] == ["Reshape"]
    assert g.values["y"].shape == (2, 12)
    np.testing.assert_array_equal(g.constants[g.nodes[0].inputs[1]], [2, -1])
    assert g.inputs[0].shape == (2, 3, 4)


def test_input_shapes_bind_a_whole_input_or_one_dimension():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    m = model(nodes, {"x": ("float32", ("batch", "seq"))}, ["y"])
    assert from_onnx(m, input_shapes={"x": (2, 5)}).values["y"].shape == (2, 5)
    assert from_onnx(m, input_shapes={"batch": 3, "seq": 7}).values["y"].shape == (3, 7)
    with pytest.raises(
        GraphError, match=r"input x has the symbolic shape \[batch, seq\]; bind it.*--input-shape x=1,1"
    ):
        from_onnx(m)
    with pytest.raises(GraphError, match=r"input_shapes names 'y', which is neither an input \(x\) nor a symbolic"):
        from_onnx(m, input_shapes={"y": (1, 2)})
    with pytest.raises(GraphError, match=r"input x has rank 2, the given shape \[1, 2, 3\] has 3"):
        from_onnx(m, input_shapes={"x": (1, 2, 3)})


def test_an_unsupported_operator_names_the_node_op_and_opset():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/relu"),
        helper.make_node("Hardmax", ["a"], ["y"], name="/head/Hardmax"),
    ]
    with pytest.raises(
        GraphError,
        match=r"node '/head/Hardmax' \(Hardmax, opset 17\): operator Hardmax is not supported; supported: .*Conv",
    ):
        from_onnx(model(nodes, {"x": ("float32", (2, 3))}, ["y"]))
    custom = [helper.make_node("FusedGemm", ["x"], ["y"], name="fg", domain="com.microsoft")]
    m = model(custom, {"x": ("float32", (2, 3))}, ["y"])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(
        GraphError, match=r"node 'fg' \(com.microsoft.FusedGemm, opset 17\): operators of domain 'com.microsoft'"
    ):
        from_onnx(m)


def test_an_unsupported_opset_is_refused():
    m = model([helper.make_node("Relu", ["x"], ["y"])], {"x": ("float32", (2,))}, ["y"], opset=9)
    with pytest.raises(GraphError, match=r"opset 9 is not supported \(supported: 11 to 21\)"):
        from_onnx(m)


def test_a_truncated_or_missing_file_is_one_error(tmp_path):
    data = load_model("resnet50", reduced=True).SerializeToString()
    bad = tmp_path / "cut.onnx"
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(GraphError, match=rf"^{bad}: not a readable ONNX model \(truncated or not ONNX"):
        from_onnx(bad)
    text = tmp_path / "notes.onnx"
    text.write_text("hello, this is not a model\n")
    with pytest.raises(GraphError, match=rf"^{text}: not a readable ONNX model"):
        from_onnx(text)
    with pytest.raises(GraphError, match=r"nowhere.onnx: cannot read the model file"):
        from_onnx(tmp_path / "nowhere.onnx")


def test_a_cycle_is_one_error_naming_its_nodes():
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Relu", ["b"], ["c"], name="third"),
    ]
    g = helper.make_graph(
        nodes,
        "loop",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [2])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(
        GraphError, match=r"the graph has a cycle: '(first|second|third)' -> .* -> '(first|second|third)'"
    ):
        from_onnx(m)


def test_nodes_out_of_order_are_sorted():
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Sigmoid", ["x"], ["a"], name="first"),
    ]
    g = from_onnx(model(nodes, {"x": ("float32", (2, 3))}, ["y"]))
    assert [n.name for n in g.nodes] == ["first", "second"]


@pytest.mark.slow
def test_the_built_in_models_import_with_static_shapes():
    for name in ("resnet50", "mobilenet_v2", "bert_base", "vit_b_16", "resnet50_int8", "bert_base_int8"):
        g = from_onnx(load_model(name, reduced=True))
        assert all(all(d > 0 for d in v.shape) for v in g.values.values()), name
        assert "Shape" not in g.op_counts() and "Constant" not in g.op_counts(), name


def test_nodes_compare_by_value_and_print_as_text():
    a = Node("n", "Conv", ("x", "w"), ("y",), {"pads": [1, 1, 1, 1], "w": np.ones(2)}, 17)
    b = Node("n", "Conv", ("x", "w"), ("y",), {"pads": (1, 1, 1, 1), "w": np.ones(2)}, 17)
    assert a == b and a.attrs["pads"] == (1, 1, 1, 1)
    assert a != b.with_(attrs={"pads": (0, 0, 0, 0)})
    assert str(a) == "y = Conv(x, w) {pads=(1, 1, 1, 1), w=tensor float64[2]}"
    assert a.where == "node 'n' (Conv, opset 17)"
