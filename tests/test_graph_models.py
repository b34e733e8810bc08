"""The built-in models (``tensorsearch.graph.models``): every reduced model is valid ONNX (the full
checker and strict shape inference), runs in onnxruntime on seeded random inputs with finite
outputs of the declared shapes, and is built from the operators torch.onnx exports; the int8
models are onnxruntime's QDQ and agree with their float models; the full-size models have the
published parameter counts; the cache builds once and ``load_model`` fails in one line.

The full-size models are built (not run) once, in one test, to count their weights: about
15 s here, less than a marker and a separate CI job would cost to keep honest.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from tensorsearch.graph import models

NAMES = [
    "resnet50",
    "mobilenet_v2",
    "efficientnet_b0",
    "bert_base",
    "bert_large",
    "vit_b_16",
    "resnet50_int8",
    "bert_base_int8",
]


@functools.cache
def reduced(name: str) -> onnx.ModelProto:
    return models.build_model(name, reduced=True)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the machine is shared
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def declared_shape(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


def op_types(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in model.graph.node}


def test_the_built_in_names():
    assert models.names() == NAMES


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_reduced_model_is_valid_onnx_and_runs(name):
    model = reduced(name)
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    for value in model.graph.input:  # static shapes, batch 1
        dims = value.type.tensor_type.shape.dim
        assert all(d.HasField("dim_value") for d in dims) and dims[0].dim_value == 1
    outputs = run(model, models.random_inputs(model, seed=0))
    assert [o.shape for o in outputs] == [declared_shape(v) for v in model.graph.output]
    for out in outputs:
        assert out.dtype == np.float32 and np.isfinite(out).all() and out.std() > 1e-3


def test_bert_inputs_are_torchs_and_ids_stay_in_the_vocabulary():
    model = reduced("bert_base")
    assert [(v.name, v.type.tensor_type.elem_type, declared_shape(v)) for v in model.graph.input] == [
        (name, onnx.TensorProto.INT64, (1, 16)) for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    assert [v.name for v in model.graph.output] == ["last_hidden_state", "pooler_output"]
    tables = {t.name: tuple(t.dims) for t in model.graph.initializer}
    vocab = tables["embeddings.word_embeddings.weight"][0]
    assert vocab == 1000
    for seed in range(5):
        feeds = models.random_inputs(model, seed)
        assert feeds["input_ids"].dtype == np.int64
        assert 0 <= feeds["input_ids"].min() and feeds["input_ids"].max() < vocab
        assert set(np.unique(feeds["token_type_ids"])) <= {0, 1}
        assert (feeds["attention_mask"] == 1).all()
    ids = [models.random_inputs(model, seed)["input_ids"] for seed in (0, 0, 1)]
    assert np.array_equal(ids[0], ids[1]) and not np.array_equal(ids[0], ids[2])


def test_random_inputs_of_int8_bert_draw_token_ids_through_the_dequantized_table():
    """In the QDQ model the embedding Gather reads DequantizeLinear(table): ids still vary by seed."""
    model = reduced("bert_base_int8")
    ids = [models.random_inputs(model, seed)["input_ids"] for seed in (0, 1)]
    assert not np.array_equal(ids[0], ids[1]) and 0 < ids[0].max() < 1000


def test_random_inputs_of_any_model_treat_a_symbolic_dim_as_1():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 3])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    feeds = models.random_inputs(onnx.helper.make_model(graph), seed=3)
    assert feeds["x"].shape == (1, 3) and feeds["x"].dtype == np.float32


EXPECTED_OPS = {
    "resnet50": {"Conv", "Relu", "MaxPool", "Add", "GlobalAveragePool", "Flatten", "Gemm"},
    "mobilenet_v2": {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm"},
    "efficientnet_b0": {"Conv", "BatchNormalization", "Sigmoid", "Mul", "Add", "GlobalAveragePool", "Flatten",
                        "Gemm"},
    "bert_base": {"Gather", "Add", "LayerNormalization", "MatMul", "Reshape", "Transpose", "Div", "Softmax", "Erf",
                  "Mul", "Unsqueeze", "Cast", "Sub", "Gemm", "Tanh"},
    "vit_b_16": {"Conv", "Reshape", "Transpose", "Concat", "Add", "LayerNormalization", "MatMul", "Div", "Softmax",
                 "Erf", "Mul", "Gather", "Gemm"},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_models_are_made_of_the_ops_torch_onnx_exports(name):
    model = reduced(name)
    assert op_types(model) == EXPECTED_OPS[name]
    inits = {t.name for t in model.graph.initializer}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    attrs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in convs]
    if name == "resnet50":  # BatchNorm folded: every Conv has a bias
        assert all(len(n.input) == 3 and n.input[2] in inits for n in convs)
    if name == "mobilenet_v2":  # Conv without bias, then BatchNormalization; depthwise; ReLU6 = Clip(0, 6)
        assert all(len(n.input) == 2 for n in convs)
        assert any(a.get("group", 1) > 1 for a in attrs)
        clips = [n for n in model.graph.node if n.op_type == "Clip"]
        values = {t.name: float(numpy_helper.to_array(t)) for t in model.graph.initializer if not t.dims}
        assert {(values[n.input[1]], values[n.input[2]]) for n in clips} == {(0.0, 6.0)}
    if name == "efficientnet_b0":
        check_efficientnet_structure(model, convs, attrs)
    if name == "vit_b_16":  # patch embedding: 16x16, stride 16
        assert attrs == [{"kernel_shape": [16, 16], "strides": [16, 16], "pads": [0, 0, 0, 0], "dilations": [1, 1]}]
        assert [n.op_type for n in model.graph.node].count("LayerNormalization") == 2 * 2 + 1
    if name == "bert_base":
        assert [n.op_type for n in model.graph.node].count("LayerNormalization") == 1 + 2 * 2
        gathers = [n for n in model.graph.node if n.op_type == "Gather"]
        assert [n.input[0] in inits for n in gathers] == [True, True, True, False]  # 3 embeddings, the pooler


def check_efficientnet_structure(model, convs, attrs):
    """The reduced EfficientNet-B0: 5 MBConv blocks (the first with expand ratio 1), two with a
    residual Add; SiLU = Mul(x, Sigmoid(x)); squeeze-excitation = Mul(Sigmoid(fc2), x) where fc1
    and fc2 are the only Convs with a bias and fc1 reads a GlobalAveragePool; 3x3 and 5x5
    depthwise convolutions padded k // 2; every other Conv followed by BatchNormalization."""
    blocks = 5
    nodes = model.graph.node
    producers = {o: n for n in nodes for o in n.output}
    consumers = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    muls = [n for n in nodes if n.op_type == "Mul"]
    silus = [
        m for m in muls if producers[m.input[1]].op_type == "Sigmoid" and producers[m.input[1]].input == [m.input[0]]
    ]
    gates = [m for m in muls if producers[m.input[0]].op_type == "Sigmoid"]
    assert len(silus) == 1 + 2 + 3 * (blocks - 1) + 1  # stem; expand (not in block 1), depthwise, fc1; head
    assert len(gates) == blocks and len(muls) == len(silus) + len(gates)
    assert [n.op_type for n in nodes].count("Sigmoid") == len(muls)
    for gate in gates:  # Sigmoid(fc2(SiLU(fc1(GlobalAveragePool(x))))) * x
        fc2 = producers[producers[gate.input[0]].input[0]]
        fc1 = producers[producers[fc2.input[0]].input[0]]
        pool = producers[fc1.input[0]]
        assert (fc2.op_type, fc1.op_type, pool.op_type) == ("Conv", "Conv", "GlobalAveragePool")
        assert pool.input[0] == gate.input[1] and len(fc1.input) == len(fc2.input) == 3
    biased = [n for n in convs if len(n.input) == 3]
    assert len(biased) == 2 * blocks
    assert all(consumers[n.output[0]][0].op_type == "BatchNormalization" for n in convs if len(n.input) == 2)
    depthwise = {(a["kernel_shape"][0], a["pads"][0]) for a in attrs if a.get("group", 1) > 1}
    assert depthwise == {(3, 1), (5, 2)}
    assert [n.op_type for n in nodes].count("Add") == 2


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "efficientnet_b0"])
def test_folded_and_unfolded_batchnorm_compute_the_same_function(name):
    builder, sizes = models.MODELS[name].builder, models.MODELS[name].reduced
    folded, unfolded = builder(**sizes, fold_bn=True, seed=5), builder(**sizes, fold_bn=False, seed=5)
    assert "BatchNormalization" not in op_types(folded) and "BatchNormalization" in op_types(unfolded)
    feeds = models.random_inputs(folded, seed=1)
    (a,), (b,) = run(folded, feeds), run(unfolded, feeds)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_builds_are_seeded():
    again = models.build_model("vit_b_16", reduced=True)
    assert again.SerializeToString() == reduced("vit_b_16").SerializeToString()
    other = models.build_model("vit_b_16", reduced=True, seed=1)
    assert other.graph.node == again.graph.node and other.graph.initializer != again.graph.initializer


@pytest.mark.parametrize(("name", "weighted"), [("resnet50_int8", {"Conv", "Gemm"}), ("bert_base_int8", {"MatMul"})])
def test_int8_models_are_onnxruntime_qdq_and_track_the_float_model(name, weighted):
    model, base = reduced(name), reduced(name.removesuffix("_int8"))
    ops = op_types(model)
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    # every weight of the quantized ops is an int8 initializer through a per-channel DequantizeLinear
    checked = 0
    for node in (n for n in model.graph.node if n.op_type in weighted):
        dq = producers[node.input[1]]
        assert dq.op_type == "DequantizeLinear"
        if dq.input[0] not in inits:
            continue  # bert's attention MatMuls multiply two activations
        checked += 1
        assert inits[dq.input[0]].data_type == onnx.TensorProto.INT8
        assert len(inits[dq.input[1]].dims) == 1  # one scale per output channel
    assert checked == {"resnet50_int8": 17 + 1, "bert_base_int8": 2 * 6}[name]
    # activations: signed int8 (onnxruntime's default), with a zero point
    zero_points = [inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert {z.data_type for z in zero_points} == {onnx.TensorProto.INT8}
    props = {p.key: p.value for p in model.metadata_props}
    assert props["activation_type"] == "int8" and props["per_channel"] == "True"
    feeds = models.random_inputs(base, seed=7)
    for got, want in zip(run(model, feeds), run(base, feeds)):
        assert np.isfinite(got).all() and got.shape == want.shape
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.98


def test_quantize_refuses_an_unknown_type():
    with pytest.raises(models.ModelError, match="activation_type 'int4' is not one of int8, uint8"):
        models.quantize(reduced("resnet50"), activation_type="int4")


# torchvision's and transformers' parameter counts; ours count BatchNorm's running statistics
# (MobileNet-V2: +1%, EfficientNet-B0: +0.8%) or fold BatchNorm into one bias per channel (ResNet-50: -0.1%)
PUBLISHED = {
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "bert_base": 109_482_240,
    "vit_b_16": 86_567_656,
}
FULL_INPUTS = {
    "resnet50": [(1, 3, 224, 224)],
    "mobilenet_v2": [(1, 3, 224, 224)],
    "efficientnet_b0": [(1, 3, 224, 224)],
    "bert_base": [(1, 128)] * 3,
    "vit_b_16": [(1, 3, 224, 224)],
}


@pytest.mark.slow
def test_full_size_models_have_the_published_parameter_counts():
    for name, published in PUBLISHED.items():
        model = models.build_model(name)
        assert abs(models.count_parameters(model) - published) <= 0.02 * published, name
        assert [declared_shape(v) for v in model.graph.input] == FULL_INPUTS[name]
        del model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORSEARCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORSEARCH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models.cache_dir() == tmp_path / "xdg" / "tensorsearch" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.cache_dir() == tmp_path / "home" / ".cache" / "tensorsearch" / "models"
    monkeypatch.setenv("TENSORSEARCH_CACHE", str(tmp_path / "ts"))
    assert models.cache_dir() == tmp_path / "ts" / "models"


def test_model_path_builds_once_per_name_flag_and_version(cache, monkeypatch):
    built = []
    real = models.build_model

    def counting(name, **kwargs):
        built.append((name, kwargs["reduced"]))
        return real(name, **kwargs)

    monkeypatch.setattr(models, "build_model", counting)
    path = models.model_path("mobilenet_v2", reduced=True)
    assert path == cache / "mobilenet_v2-reduced-v1.onnx" and path.is_file()
    assert models.model_path("mobilenet_v2", reduced=True) == path
    assert built == [("mobilenet_v2", True)]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # an ordinary file, not mkstemp's private one
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no temporary left behind
    monkeypatch.setattr(models, "BUILDER_VERSION", 2)
    assert models.model_path("mobilenet_v2", reduced=True).name == "mobilenet_v2-reduced-v2.onnx"
    assert len(built) == 2
    assert models._cache_key("mobilenet_v2", False) == "mobilenet_v2-v2"
    assert models._cache_key("bert_base_int8", True) == f"bert_base_int8-reduced-v2-ort{ort.__version__}"


def test_load_model_takes_a_name_or_a_path(cache, tmp_path):
    by_name = models.load_model("resnet50", reduced=True)
    assert by_name.SerializeToString() == reduced("resnet50").SerializeToString()
    path = models.write_model("resnet50", tmp_path / "r.onnx", reduced=True)
    assert models.load_model(path).SerializeToString() == by_name.SerializeToString()
    assert models.load_model(str(path)).graph == by_name.graph


def one_line_error(arg) -> str:
    with pytest.raises(models.ModelError) as info:
        models.load_model(arg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_load_model_errors_are_one_line(cache, tmp_path):
    assert one_line_error("resnet5") == (
        "unknown model 'resnet5'; the built-in models are " + ", ".join(NAMES) + ", or give an ONNX file's path"
    )
    with pytest.raises(models.ModelError, match="unknown model 'nope'; the built-in models are resnet50, "):
        models.build_model("nope")
    assert one_line_error(str(tmp_path / "missing.onnx")) == f"no such ONNX file: {tmp_path / 'missing.onnx'}"
    assert one_line_error(tmp_path) == f"{tmp_path} is not a file"
    data = reduced("mobilenet_v2").SerializeToString()
    for size in (0, 100, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.onnx").write_bytes(data[:size])
        assert one_line_error(tmp_path / "cut.onnx").startswith(f"{tmp_path / 'cut.onnx'} is not a valid ONNX model")
    # a damaged cache file says how to recover
    path = models.model_path("mobilenet_v2", reduced=True)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(models.ModelError, match="delete the cached file and it is built again"):
        models.load_model("mobilenet_v2", reduced=True)
    os.remove(path)
    assert models.load_model("mobilenet_v2", reduced=True).graph == reduced("mobilenet_v2").graph
