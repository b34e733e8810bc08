"""The elementwise, shape, constant and normalization lowerings (``tensorsearch.graph.ops_tensor``)
against onnxruntime: each model is imported, lowered as one unscheduled kernel, built for the host
and run on seeded random inputs. Float results agree to rtol 1e-5 (elementwise) or 1e-4
(reductions); integer and bool results exactly. Opset variants cover the attributes that became
inputs; the errors name the offending input or attribute. Many small checks share one test (a
build takes 0.1-0.3 s), so the file takes about 20 s.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graph_util import check_against_ort, model, random_feeds, run_lowered, single
from onnx import TensorProto, helper

from tensorsearch.graph import onnx_import
from tensorsearch.graph.ir import Graph, GraphError, Node, Value
from tensorsearch.graph.lowering import lower_nodes
from tensorsearch.graph.registry import OpKind, lowering_of

F, I64, I32, B = "float32", "int64", "int32", "bool"


def check(m: onnx.ModelProto, feeds=None, rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0) -> None:
    """Our kernel against onnxruntime on ``feeds`` (default: seeded random inputs)."""
    check_against_ort(m, seed, rtol, atol, feeds=feeds)


def reduction(m: onnx.ModelProto, feeds=None) -> None:
    check(m, feeds, rtol=1e-4, atol=1e-5)


def rand(shape, dtype=np.float32, lo=-3.0, hi=3.0, seed=1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int(lo), int(hi), shape).astype(dtype)
    return rng.uniform(lo, hi, shape).astype(dtype)


@pytest.fixture
def unfolded(monkeypatch):
    """Import without constant folding, so Shape, Size, Range and friends reach the lowerings."""
    monkeypatch.setattr(onnx_import, "_fold_once", lambda proto, where: False)


# ---------------------------------------------------------------------------------------------
# elementwise


@pytest.mark.slow
def test_binary_arithmetic_broadcasts_like_numpy():
    for op in ("Add", "Sub", "Mul", "Div"):
        check(single(op, {"a": (F, [2, 3, 4]), "b": (F, [3, 1])}))
    check(single("Add", {"a": (I64, [3, 4]), "b": (I64, [4])}))
    check(single("Sub", {"a": (F, [4])}, {"c": np.array([[2.5]], np.float32)}))  # one-element constant
    check(single("Mul", {"a": (F, [1, 3])}, {"c": np.full((2, 1), 0.5, np.float32)}))
    check(single("Add", {"a": (F, [])}, {"c": np.array(1.0, np.float32)}))  # 0-d
    for op in ("Max", "Min", "Sum"):  # variadic
        check(single(op, {"a": (F, [2, 3]), "b": (F, [3]), "c": (F, [2, 1])}))
    check(single("Max", {"a": (I32, [5])}))


def test_integer_div_and_mod_follow_onnxruntime():
    a = np.array([-7, 7, -7, 7, 9, -9, 100, -1], np.int32)
    b = np.array([2, 2, -2, -2, 4, 4, 7, 3], np.int32)
    check(single("Div", {"a": (I32, [8]), "b": (I32, [8])}), {"a": a, "b": b})  # truncates
    check(single("Div", {"a": (I64, [8])}, {"c": np.array(3, np.int64)}), {"a": a.astype(np.int64)})
    check(single("Mod", {"a": (I32, [8]), "b": (I32, [8])}), {"a": a, "b": b})  # sign of the divisor
    check(single("Mod", {"a": (I32, [8]), "b": (I32, [8])}, fmod=1), {"a": a, "b": b})  # sign of the dividend
    check(single("Mod", {"a": (F, [8]), "b": (F, [8])}, fmod=1), {"a": a.astype(F) / 2, "b": b.astype(F)})


def test_pow_special_exponents_and_integers():
    x = {"a": rand((3, 4), lo=0.1, hi=3.0)}
    for e in (2.0, 0.5, 3.0, 1.0, 1.7):
        check(single("Pow", {"a": (F, [3, 4])}, {"e": np.array(e, np.float32)}), x)
    check(single("Pow", {"a": (F, [3, 4])}, {"e": np.array([2], np.int64)}), x)  # integer exponent
    check(single("Pow", {"a": (F, [3, 4]), "e": (F, [4])}), {**x, "e": rand((4,), lo=-2, hi=2)})
    ints = {"a": np.array([2, 3, -2, 5], np.int32), "e": np.array([3, -1, 3, 0], np.int32)}
    check(single("Pow", {"a": (I32, [4]), "e": (I32, [4])}), ints)


@pytest.mark.slow
def test_unary_math():
    for op in ("Neg", "Abs", "Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Reciprocal", "Floor", "Ceil"):
        check(single(op, {"a": (F, [3, 5])}))
    positive = {"a": rand((3, 5), lo=0.05, hi=4.0)}
    for op in ("Log", "Sqrt"):
        check(single(op, {"a": (F, [3, 5])}), positive)
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7], np.float32)
    check(single("Round", {"a": (F, [8])}), {"a": halves})  # half to even
    check(single("LeakyRelu", {"a": (F, [3, 5])}))
    check(single("LeakyRelu", {"a": (F, [3, 5])}, alpha=0.2))
    check(single("Neg", {"a": (I64, [6])}))
    check(single("Abs", {"a": (I32, [6])}))
    check(single("Relu", {"a": (I32, [6])}, opset=14))


def test_clip_bounds_are_optional_inputs():
    lo, hi = np.array(-0.5, np.float32), np.array(0.7, np.float32)
    for opset in (11, 17):
        check(single("Clip", {"a": (F, [4, 5])}, {"lo": lo, "hi": hi}, opset=opset))
        check(single("Clip", {"a": (F, [4, 5])}, {"lo": lo}, opset=opset))
    node = helper.make_node("Clip", ["a", "", "hi"], ["y"])
    check(model([node], {"a": (F, [4, 5])}, ["y"], {"hi": hi}))
    check(model([node], {"a": (F, [4, 5]), "hi": (F, [])}, ["y"]))  # a bound that is no constant
    check(single("Clip", {"a": (I64, [9])}, {"lo": np.array(-5, np.int64), "hi": np.array(6, np.int64)}, opset=13))


@pytest.mark.slow
def test_comparisons_and_logic():
    a = np.array([1.0, 2.0, -1.0, 3.0, 0.5, 2.0], np.float32)
    b = np.array([1.0, 1.0, 2.0, 3.0, -0.5, 2.5], np.float32)
    for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        check(single(op, {"a": (F, [6]), "b": (F, [6])}, opset=16), {"a": a, "b": b})
        check(
            single(op, {"a": (I64, [2, 3]), "b": (I64, [3])}, opset=16),
            {"a": rand((2, 3), np.int64, -2, 2), "b": rand((3,), np.int64, -2, 2, 2)},
        )
    check(single("Equal", {"a": (B, [4]), "b": (B, [4])}, opset=13))
    check(single("Not", {"a": (B, [3, 2])}))
    for op in ("And", "Or", "Xor"):
        check(single(op, {"a": (B, [3, 2]), "b": (B, [2])}))
    check(single("Where", {"c": (B, [2, 1, 4]), "a": (F, [3, 4]), "b": (F, [1])}))
    check(single("Where", {"c": (B, [5])}, {"a": np.array(1, np.int64), "b": np.arange(5, dtype=np.int64)}))


@pytest.mark.slow
def test_cast_between_float_int_and_bool():
    x = {"a": np.array([-1.7, 1.7, 100.9, -0.5, 0.0, 3.5, -127.2, 42.0], np.float32)}
    for to in (TensorProto.INT32, TensorProto.INT64, TensorProto.INT8, TensorProto.BOOL, TensorProto.FLOAT):
        check(single("Cast", {"a": (F, [8])}, to=to), x)
    check(single("Cast", {"a": (F, [8])}, to=TensorProto.UINT8), {"a": np.abs(x["a"])})
    check(single("Cast", {"a": (I64, [2, 3])}, to=TensorProto.FLOAT))
    check(single("Cast", {"a": (I32, [2, 3])}, to=TensorProto.INT8))
    check(single("Cast", {"a": (I64, [2, 3])}, to=TensorProto.BOOL))
    check(single("Cast", {"a": (B, [2, 3])}, to=TensorProto.FLOAT))
    check(single("Cast", {"a": (B, [2, 3])}, to=TensorProto.INT32))
    check(single("Cast", {"a": ("uint8", [5])}, to=TensorProto.INT64))
    check(single("CastLike", {"a": (F, [2, 3]), "b": (I32, [1])}, opset=15))


def test_identity_and_dropout_at_inference():
    check(single("Identity", {"a": (F, [2, 3])}))
    check(single("Dropout", {"a": (F, [2, 3])}, opset=11, ratio=0.3))
    node = helper.make_node("Dropout", ["a", "r", "t"], ["y", "mask"])
    init = {"r": np.array(0.5, np.float32), "t": np.array(False)}
    check(model([node], {"a": (F, [2, 3])}, ["y", "mask"], init))  # the mask is all true


@pytest.mark.slow
def test_erf_gelu_chain():
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    consts = {"sqrt2": np.array(1.4142135, np.float32), "one": np.array(1.0, np.float32)}
    check(model(nodes, {"x": (F, [2, 4, 16])}, ["y"], {**consts, "half": np.array(0.5, np.float32)}))


def test_bert_attention_mask_chain():
    nodes = [
        helper.make_node("Unsqueeze", ["mask", "axes"], ["u"]),
        helper.make_node("Cast", ["u"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "c"], ["s"]),
        helper.make_node("Mul", ["s", "big"], ["y"]),
    ]
    consts = {"axes": np.array([1, 2], np.int64), "one": np.array(1.0, np.float32)}
    consts["big"] = np.array(np.finfo(np.float32).min, np.float32)
    m = model(nodes, {"mask": (I64, [1, 16])}, ["y"], consts)
    check(m, {"mask": rand((1, 16), np.int64, 0, 2)})


# ---------------------------------------------------------------------------------------------
# layout and shape


@pytest.mark.slow
def test_reshape_flatten_squeeze_unsqueeze():
    x = {"a": (F, [2, 3, 8])}
    for shape in ([0, -1, 4, 2], [6, 8], [-1], [2, 1, 24], [4, 3, 2, 2]):
        check(single("Reshape", x, {"s": np.array(shape, np.int64)}))
    check(single("Reshape", x, {"s": np.array([2, 3, 8], np.int64)}, opset=14, allowzero=1))
    for axis in (0, 1, 2, -1, 3):
        check(single("Flatten", x, axis=axis))
    ones = {"a": (F, [1, 3, 1, 4])}
    check(single("Squeeze", ones, opset=11, axes=[0, -2]))
    check(single("Squeeze", ones, {"axes": np.array([2], np.int64)}, opset=17))
    check(single("Squeeze", ones, opset=17))  # every 1-dimension
    check(single("Unsqueeze", {"a": (F, [3, 4])}, opset=11, axes=[0, 3]))
    check(single("Unsqueeze", {"a": (F, [3, 4])}, {"axes": np.array([-1, 1], np.int64)}, opset=17))
    check(single("Unsqueeze", {"a": (I64, [])}, {"axes": np.array([0], np.int64)}, opset=21))


def test_transpose():
    check(single("Transpose", {"a": (F, [2, 3, 4])}))  # reversed
    check(single("Transpose", {"a": (F, [1, 4, 2, 3])}, perm=[0, 2, 3, 1]))
    check(single("Transpose", {"a": (I64, [2, 3])}, perm=[1, 0]))


def test_concat_and_split():
    check(single("Concat", {"a": (F, [2, 3]), "b": (F, [2, 1]), "c": (F, [2, 4])}, axis=-1))
    check(single("Concat", {"a": (F, [2, 5, 4])}, {"cls": rand((1, 5, 4))}, axis=0))
    check(single("Concat", {"a": (I64, [1])}, {"c": np.array([7, 8], np.int64)}, axis=0))

    def split(opset, outputs, inputs=("a",), init=None, **attrs):
        node = helper.make_node("Split", list(inputs), [f"y{k}" for k in range(outputs)], **attrs)
        return model([node], {"a": (F, [3, 7])}, [f"y{k}" for k in range(outputs)], init, opset)

    check(split(11, 2, axis=1, split=[3, 4]))
    check(split(13, 3, ("a", "s"), {"s": np.array([2, 4, 1], np.int64)}, axis=-1))
    check(split(13, 3, axis=0))  # equal parts
    check(split(18, 3, axis=1, num_outputs=3))  # 3, 3, 1


def test_slice_negative_clamped_and_stepped():
    x = {"a": (F, [5, 6, 4])}

    def sl(starts, ends, axes=None, steps=None):
        init = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64)}
        if axes is not None:
            init["x"] = np.array(axes, np.int64)
        if steps is not None:
            init["p"] = np.array(steps, np.int64)
        return single("Slice", x, init)

    big = np.iinfo(np.int64).max
    check(sl([1, -4], [4, big], [0, 1]))
    check(sl([0, 1, 0], [5, 5, 4]))  # no axes: the first ones
    check(sl([-1], [-big], [1], [-1]))  # reversed
    check(sl([10, -100], [-100, 100], [0, 2], [-2, 3]))  # clamped
    check(sl([4, 0], [0, 6], [-3, -2], [-1, 2]))


def test_gather_any_axis_and_embedding_lookup():
    table = rand((10, 8))
    ids = np.array([[0, 3, -1, 9, -10, 4]], np.int64)
    node = helper.make_node("Gather", ["w", "ids"], ["y"], axis=0)
    check(model([node], {"ids": (I64, [1, 6])}, ["y"], {"w": table}), {"ids": ids})
    node = helper.make_node("Gather", ["a", "i"], ["y"], axis=1)
    check(model([node], {"a": (F, [2, 5, 3])}, ["y"], {"i": np.array(0, np.int64)}))  # scalar: the axis goes
    check(model([node], {"a": (F, [2, 5, 3])}, ["y"], {"i": np.array([[4, -2], [1, 0]], np.int64)}))
    node = helper.make_node("Gather", ["a", "i"], ["y"], axis=-1)
    check(
        model([node], {"a": (F, [2, 5, 3]), "i": (I32, [4])}, ["y"]),
        {"a": rand((2, 5, 3)), "i": np.array([2, -3, 0, -1], np.int32)},
    )


def test_expand_and_tile():
    check(single("Expand", {"a": (F, [3, 1])}, {"s": np.array([2, 1, 4], np.int64)}))
    check(single("Expand", {"a": (I64, [1])}, {"s": np.array([3, 2], np.int64)}))
    check(single("Tile", {"a": (F, [2, 3])}, {"r": np.array([2, 1], np.int64)}))
    check(single("Tile", {"a": (I32, [2, 1, 3])}, {"r": np.array([1, 3, 2], np.int64)}))


# ---------------------------------------------------------------------------------------------
# constants


@pytest.mark.slow
def test_constant_producers_are_written_by_the_kernel(unfolded):
    x = {"a": (F, [2, 3, 4])}
    check(single("Shape", x))
    check(single("Shape", x, opset=15, start=1, end=-1))
    check(single("Size", x))
    ints = {"s": np.array(2, np.int64), "l": np.array(20, np.int64), "d": np.array(3, np.int64)}
    check(model([helper.make_node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], ints))
    floats = {"s": np.array(0.1, np.float32), "l": np.array(9.0, np.float32), "d": np.array(0.3, np.float32)}
    check(model([helper.make_node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], floats), rtol=0, atol=0)
    value = helper.make_tensor("v", TensorProto.INT64, [1], [7])
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)
    check(model([node], {}, ["y"], {"s": np.array([2, 3], np.int64)}))
    node = helper.make_node("ConstantOfShape", ["s"], ["y"])
    check(model([node], {}, ["y"], {"s": np.array([4], np.int64)}))
    for attrs in (
        {"value": helper.make_tensor("v", TensorProto.FLOAT, [2, 3], rand((2, 3)).reshape(-1))},
        {"value_ints": [5, 1, -3]},
        {"value_float": 2.5},
        {"value": helper.make_tensor("v", TensorProto.BOOL, [3], [True, False, True])},
    ):
        check(model([helper.make_node("Constant", [], ["y"], **attrs)], {}, ["y"]))


def test_folded_constant_output_is_written():
    """Import folds a Range that is a graph output into a Constant node, which the kernel writes."""
    floats = {"s": np.array(0.1, np.float32), "l": np.array(9.0, np.float32), "d": np.array(0.3, np.float32)}
    m = model([helper.make_node("Range", ["s", "l", "d"], ["y"])], {}, ["y"], floats)
    assert [n.op for n in onnx_import.from_onnx(m).nodes] == ["Constant"]
    check(m)


# ---------------------------------------------------------------------------------------------
# reductions


@pytest.mark.slow
def test_softmax_single_axis_and_coerced():
    x = {"a": (F, [2, 3, 5])}
    for opset, axis in ((11, 1), (11, -1), (11, 0), (13, 1), (17, -1), (13, 0)):
        reduction(single("Softmax", x, opset=opset, axis=axis))
        reduction(single("LogSoftmax", x, opset=opset, axis=axis))
    reduction(single("Softmax", x, opset=11))  # axis 1 by default
    reduction(single("Softmax", x, opset=17))  # axis -1 by default
    masked = rand((2, 3, 5), lo=-2, hi=2)
    masked[..., 1] = np.finfo(np.float32).min
    reduction(single("Softmax", x), {"a": masked})


@pytest.mark.slow
def test_layer_normalization():
    x = {"a": (F, [2, 3, 8])}
    scale, bias = rand((8,), seed=2), rand((8,), seed=3)
    reduction(single("LayerNormalization", x, {"s": scale, "b": bias}, epsilon=1e-12))
    reduction(single("LayerNormalization", x, {"s": rand((3, 8), seed=4)}, axis=1))
    node = helper.make_node("LayerNormalization", ["a", "s", "b"], ["y", "mean", "inv"], axis=-2)
    reduction(model([node], x, ["y", "mean", "inv"], {"s": rand((3, 8)), "b": bias}))
    # large mean, small spread: two passes. E[x^2] - E[x]^2 in float32 is off by 0.5-14% of the
    # variance here; the order of the sum (vectorized or not) moves the mean by an ulp of 800
    shifted = {"a": rand((2, 3, 8), lo=100.0, hi=100.5)}
    check(single("LayerNormalization", x, {"s": scale}), shifted, rtol=5e-4, atol=5e-4)


@pytest.mark.slow
def test_reduce_axes_keepdims_and_opsets():
    x = {"a": (F, [2, 3, 4])}
    for opset in (11, 17):
        for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL1", "ReduceL2"):
            reduction(single(op, x, opset=opset, axes=[1], keepdims=1))
        reduction(single("ReduceMean", x, opset=opset, axes=[-1, 0], keepdims=0))
    reduction(single("ReduceSum", x, opset=11, axes=[2], keepdims=0))
    for opset in (18, 21):
        for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2"):
            reduction(single(op, x, {"x": np.array([1, -1], np.int64)}, opset=opset, keepdims=0))
        reduction(single("ReduceMean", x, opset=opset, keepdims=1))  # no axes: all
        for op in ("ReduceMean", "ReduceL2", "ReduceSumSquare"):
            reduction(single(op, x, opset=opset, noop_with_empty_axes=1))
    reduction(single("ReduceSum", x, {"x": np.array([0, 2], np.int64)}, opset=13))
    reduction(single("ReduceSum", x, opset=13, keepdims=0))  # to a 0-d value
    reduction(
        single("ReduceLogSum", {"a": (F, [3, 4])}, {"x": np.array([1], np.int64)}, opset=18),
        {"a": rand((3, 4), lo=0.1)},
    )
    check(single("ReduceMax", {"a": (I64, [3, 4])}, opset=13, axes=[0]))
    check(single("ReduceSum", {"a": (I32, [3, 4])}, {"x": np.array([1], np.int64)}, opset=13))


# ---------------------------------------------------------------------------------------------
# errors, registry, models


def _graph(node: Node, inputs: dict[str, Value], output: Value, constants=None) -> Graph:
    values = {**inputs, output.name: output}
    return Graph(
        "g", [node], [v for k, v in inputs.items() if k not in (constants or {})], [output], values, constants or {}
    )


def test_errors_name_the_input_or_attribute(unfolded):
    x, s = Value("x", (2, 3), F), Value("s", (2,), I64)
    g = _graph(Node("r", "Reshape", ("x", "s"), ("y",), opset=17), {"x": x, "s": s}, Value("y", (3, 2), F))
    with pytest.raises(GraphError, match=r"node 'r' \(Reshape, opset 17\): the shape input 's' is not a constant"):
        lower_nodes(g, g.nodes, ["y"])
    starts = Value("st", (1,), I64)
    node = Node("sl", "Slice", ("x", "st", "e"), ("y",), opset=17)
    g = _graph(node, {"x": x, "st": starts, "e": Value("e", (1,), I64)}, Value("y", (1, 3), F), {"e": np.array([1])})
    with pytest.raises(GraphError, match="the starts input 'st' is not a constant"):
        lower_nodes(g, g.nodes, ["y"])
    node = helper.make_node("Dropout", ["a", "r", "t"], ["y"])
    m = model([node], {"a": (F, [2, 3])}, ["y"], {"r": np.array(0.5, np.float32), "t": np.array(True)})
    with pytest.raises(GraphError, match="training_mode=True is not supported"):
        run_lowered(m, random_feeds(m))
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("i", TensorProto.INT64, [1], [2]),
        [4],
    )
    m = model([helper.make_node("Constant", [], ["y"], sparse_value=sparse)], {}, ["y"])
    with pytest.raises(GraphError, match=r"Constant, opset 17\): attribute sparse_value is not supported"):
        run_lowered(m, {})
    g = _graph(Node("e", "Erf", ("i",), ("y",), opset=17), {"i": Value("i", (3,), I32)}, Value("y", (3,), I32))
    with pytest.raises(GraphError, match="Erf of int32 values is not supported"):
        lower_nodes(g, g.nodes, ["y"])


def test_registered_kinds():
    for op in ("Add", "Erf", "Cast", "Reshape", "Gather", "Concat", "Slice", "Shape", "Range"):
        assert lowering_of(op).kind is OpKind.INJECTIVE, op
    for op in ("Softmax", "LogSoftmax", "LayerNormalization", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"):
        assert lowering_of(op).kind is OpKind.REDUCTION, op


MODELS = ("bert_base", "vit_b_16")


@pytest.mark.slow
def test_model_nodes_lower_on_their_own(monkeypatch):
    """Every node of the reduced BERT and ViT that this module lowers, lowers on its own (import
    told to accept the anchors that have no lowering yet)."""
    from tensorsearch.graph import models

    anchors = {"MatMul", "Gemm", "Conv"}
    monkeypatch.setattr(onnx_import, "supported_ops", lambda: sorted(anchors | set(_ops_of_this_module())))
    for name in MODELS:
        g = onnx_import.from_onnx(models.load_model(name, reduced=True))
        lowered = [n for n in g.nodes if n.op not in anchors]
        assert lowered
        for n in lowered:
            lower_nodes(g, [n], [o for o in n.outputs if o])


def _ops_of_this_module() -> list[str]:
    from tensorsearch.graph import registry

    lowering_of("Add")
    return [op for op, low in registry.LOWERINGS.items() if low.fn.__module__.endswith("ops_tensor")]


@pytest.mark.parametrize("name", MODELS)
def test_reduced_models_import(name):
    from tensorsearch.graph import models

    g = onnx_import.from_onnx(models.load_model(name, reduced=True))
    assert g.nodes and all(lowering_of(n.op) is not None for n in g.nodes)
