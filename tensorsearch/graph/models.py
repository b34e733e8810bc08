"""Built-in models written as ONNX with random weights: nothing is downloaded.

    from tensorsearch.graph import models
    models.names()                                  # ['resnet50', 'mobilenet_v2', ..., 'bert_base_int8']
    m = models.build_model("bert_base", reduced=True)   # an onnx.ModelProto, seeded random weights
    models.write_model("vit_b_16", "vit.onnx")
    path = models.model_path("resnet50_int8")       # built once into the cache, then reused
    m = models.load_model("resnet50")               # a built-in name ...
    m = models.load_model("my/model.onnx")          # ... or any ONNX file, the same way
    feeds = models.random_inputs(m, seed=0)         # {input name: seeded random array}

The graphs look like what ``torch.onnx.export`` (the TorchScript exporter, opset 17, eval mode,
constant folding on) writes for torchvision's ResNet-50, MobileNet-V2 and EfficientNet-B0 and
Hugging Face's BERT and ViT: NCHW ``Conv`` with bias, ``MaxPool``, ``GlobalAveragePool``,
``Flatten`` and ``Gemm`` (``transB=1``) for a 2-D ``Linear``; ``MatMul`` by a pre-transposed
weight plus ``Add`` for a 3-D ``Linear``; ``LayerNormalization``; the erf form of GELU (``Div``,
``Erf``, ``Add``, ``Mul``, ``Mul``); ``Reshape``/``Transpose`` into and out of the attention
heads; ``Gather`` for embeddings; ``Clip(0, 6)`` for ReLU6; ``Mul(x, Sigmoid(x))`` for SiLU.
Names follow the exporter's habits: initializers by module path (``layer1.0.conv1.weight``),
nodes by scope (``/layer1.0/conv1/Conv``), node outputs ``<node>_output_0``.

Batch normalization: in eval mode that exporter folds each BatchNorm into the convolution before
it, so ``resnet50`` is folded (``Conv`` with bias, no ``BatchNormalization``), as the ResNet-50
files people download are. ``mobilenet_v2`` and ``efficientnet_b0`` keep ``Conv`` (no bias) +
``BatchNormalization``, as an export that keeps the modules' training-mode structure writes it,
so an importer's constant folding has something to fold. The CNN builders take ``fold_bn``; the
two forms of one seed compute the same function (the folded weights are computed from the same
random BatchNorm parameters). ``efficientnet_b0``'s BatchNorm statistics are calibrated on
random images as it is built (SiLU networks otherwise vanish or blow up; see its docstring).

The int8 models are the float ones quantized by onnxruntime's own ``quantize_static`` in QDQ
format (QuantizeLinear/DequantizeLinear around each quantized op) with min-max calibration over
a few seeded random inputs; see :func:`quantize`.

Every builder takes its size parameters (layers, widths, image size, sequence length, heads);
``reduced=True`` picks small ones with the same structure (:data:`MODELS` lists both).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "BUILDER_VERSION",
    "EFFICIENTNET_B0_SETTINGS",
    "MOBILENET_V2_SETTINGS",
    "MODELS",
    "ModelError",
    "ModelSpec",
    "bert",
    "build_model",
    "cache_dir",
    "count_parameters",
    "efficientnet_b0",
    "load_model",
    "mobilenet_v2",
    "model_path",
    "names",
    "quantize",
    "random_inputs",
    "resnet50",
    "vit",
    "write_model",
]

OPSET = 17  # LayerNormalization is opset 17; torch.onnx's default opset since torch 2.1
IR_VERSION = 8  # what torch.onnx writes at opset 17
# bump when a builder's output changes, so that cached files of the old builders are not reused
BUILDER_VERSION = 1
CALIBRATION_SEED = 1_000_000  # the int8 built-ins calibrate on random_inputs seeds from here
FLOAT32_MIN = float(np.finfo(np.float32).min)  # transformers' additive attention mask value


class ModelError(ValueError):
    """An unknown model name, a missing file, or a file that is not a readable ONNX model."""


# --------------------------------------------------------------------------------------------
# graph assembly


def _scope(module: str) -> str:
    """torch.onnx's node scope of a module path: ``encoder.layer.0.attention`` is
    ``encoder/layer.0/attention`` (an index stays with the list it indexes)."""
    parts: list[str] = []
    for part in module.split("."):
        if part.isdigit() and parts:
            parts[-1] += f".{part}"
        else:
            parts.append(part)
    return "/".join(parts)


class _Graph:
    """Nodes, initializers and graph inputs/outputs, named the way torch.onnx names them."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._node_names: dict[str, int] = {}
        self._consts: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def input(self, name: str, elem_type: int, shape: Sequence[int]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, name: str, elem_type: int, shape: Sequence[int]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))

    def op(self, op_type: str, inputs: Sequence[str], module: str = "", *, out: str | None = None, **attrs: Any) -> str:
        """A node named ``/<module scope>/<op_type>`` (``_1``, ``_2``, ... when repeated)."""
        base = f"/{_scope(module)}/{op_type}" if module else f"/{op_type}"
        n = self._node_names.get(base, 0)
        self._node_names[base] = n + 1
        name = base if n == 0 else f"{base}_{n}"
        output = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name, **attrs))
        return output

    def weight(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array, order="C"), name))
        return name

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        """A constant (a shape, a scalar) as an initializer, shared by every use of the same value."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.weight(f"onnx::Constant_{len(self._consts)}", array)
        return self._consts[key]

    # seeded random parameters, float32 throughout
    def normal(self, shape: Sequence[int], std: float) -> np.ndarray:
        return self.rng.standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)

    def model(self, name: str, doc: str, metadata: Mapping[str, Any]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "main_graph", self.inputs, self.outputs, self.initializers)
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="tensorsearch.graph.models",
            producer_version=str(BUILDER_VERSION),
            doc_string=doc,
        )
        helper.set_model_props(model, {"tensorsearch.model": name, **{k: str(v) for k, v in metadata.items()}})
        return model


# --------------------------------------------------------------------------------------------
# convolutional networks (torchvision's ResNet-50, MobileNet-V2 and EfficientNet-B0)


def _conv_bn(
    g: _Graph,
    x: str,
    conv: str,
    bn: str,
    cin: int,
    cout: int,
    kernel: int,
    stride: int = 1,
    *,
    groups: int = 1,
    fold_bn: bool,
    gain: float = 1.0,
    sample: dict[str, np.ndarray] | None = None,
) -> str:
    """Conv (no bias) then eval-mode BatchNorm, or the two folded into one Conv with bias.

    The weights are He-normal; the BatchNorm's random statistics scale each channel by about
    ``gain``, so a residual branch can start small (as zero-init-residual training leaves it).
    With ``sample`` (numpy values of graph values, a batch of random inputs carried through the
    network as it is built) the running statistics are the batch statistics of the convolution
    on ``sample[x]`` instead, as a train-mode pass calibrates them, and the BatchNorm's output
    goes into ``sample``: each channel's output then has a mean of about 0 and a standard
    deviation of about ``gain`` however the layers before it scaled their activations.
    """
    fan_in = cin // groups * kernel * kernel
    w = g.normal((cout, cin // groups, kernel, kernel), math.sqrt(2.0 / fan_in))
    gamma = g.uniform((cout,), 0.8, 1.2) * np.float32(gain)
    beta = g.normal((cout,), 0.05)
    mean = g.normal((cout,), 0.05)
    var = g.uniform((cout,), 0.8, 1.2)
    eps = 1e-5
    if sample is not None:
        y = _conv2d(sample[x], w, stride, groups)
        mean, var = y.mean(axis=(0, 2, 3)).astype(np.float32), y.var(axis=(0, 2, 3)).astype(np.float32)
        scale = gamma / np.sqrt(var + np.float32(eps))
        bn_out = (y - mean[:, None, None]) * scale[:, None, None] + beta[:, None, None]
    attrs = {"kernel_shape": [kernel, kernel], "strides": [stride, stride], "pads": [kernel // 2] * 4}
    if groups != 1:
        attrs["group"] = groups
    if fold_bn:
        scale = gamma / np.sqrt(var + np.float32(eps))
        wf = g.weight(f"{conv}.weight", w * scale[:, None, None, None])
        bf = g.weight(f"{conv}.bias", beta - mean * scale)
        out = g.op("Conv", [x, wf, bf], conv, dilations=[1, 1], **attrs)
    else:
        y = g.op("Conv", [x, g.weight(f"{conv}.weight", w)], conv, dilations=[1, 1], **attrs)
        params = [
            g.weight(f"{bn}.{p}", a)
            for p, a in zip(("weight", "bias", "running_mean", "running_var"), (gamma, beta, mean, var))
        ]
        out = g.op("BatchNormalization", [y, *params], bn, epsilon=eps, momentum=0.9)
    if sample is not None:
        sample[out] = bn_out
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, stride: int, groups: int, bias: np.ndarray | None = None) -> np.ndarray:
    """numpy's NCHW ``Conv`` with pads ``kernel // 2``: dense (groups 1) or depthwise (groups = channels),
    in the wider of the two dtypes."""
    n, c, h, wd = x.shape
    k = w.shape[-1]
    if groups not in (1, c) or (groups == c and w.shape[:2] != (c, 1)):
        raise ValueError(f"_conv2d: groups {groups} of {c} channels is neither dense nor depthwise")
    p = k // 2
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    ho, wo = (h + 2 * p - k) // stride + 1, (wd + 2 * p - k) // stride + 1
    taps = [
        xp[:, :, i : i + stride * (ho - 1) + 1 : stride, j : j + stride * (wo - 1) + 1 : stride]
        for i in range(k)
        for j in range(k)
    ]
    if groups == 1:  # one matmul over (channel, tap) columns
        cols = np.stack(taps, axis=2).reshape(n, c * k * k, ho * wo)
        out = (w.reshape(len(w), c * k * k) @ cols).reshape(n, len(w), ho, wo)
    else:
        out = np.zeros((n, c, ho, wo), np.result_type(x, w))
        for t, patch in enumerate(taps):
            out += patch * w[:, 0].reshape(c, k * k)[None, :, t, None, None]
    return out if bias is None else out + bias[:, None, None]


def _classifier(g: _Graph, x: str, name: str, cin: int, num_classes: int, out: str) -> str:
    """torch's 2-D ``Linear``: ``Gemm(x, W, b, transB=1)`` with W of shape (out, in)."""
    bound = 1.0 / math.sqrt(cin)
    w = g.weight(f"{name}.weight", g.uniform((num_classes, cin), -bound, bound))
    b = g.weight(f"{name}.bias", g.uniform((num_classes,), -bound, bound))
    return g.op("Gemm", [x, w, b], name, out=out, alpha=1.0, beta=1.0, transB=1)


def resnet50(
    *,
    layers: Sequence[int] = (3, 4, 6, 3),
    width: int = 64,
    image_size: int = 224,
    num_classes: int = 1000,
    fold_bn: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's ResNet-50 (v1.5: the stride on the 3x3 convolution of a bottleneck).

    ``layers`` bottlenecks per stage, ``width`` channels in the first stage's bottleneck (64;
    each stage doubles it, each bottleneck expands by 4). Input ``input`` (1, 3, S, S) float32,
    output ``output`` (1, num_classes).
    """
    g = _Graph(seed)
    x = g.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    x = _conv_bn(g, x, "conv1", "bn1", 3, width, 7, 2, fold_bn=fold_bn)
    x = g.op("Relu", [x], "relu")
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=0)
    cin = width
    residual_gain = 1.0 / math.sqrt(sum(layers))
    for stage, blocks in enumerate(layers):
        planes = width * 2**stage
        for b in range(blocks):
            stride = 2 if stage > 0 and b == 0 else 1
            p = f"layer{stage + 1}.{b}"
            y = _conv_bn(g, x, f"{p}.conv1", f"{p}.bn1", cin, planes, 1, fold_bn=fold_bn)
            y = g.op("Relu", [y], f"{p}.relu")
            y = _conv_bn(g, y, f"{p}.conv2", f"{p}.bn2", planes, planes, 3, stride, fold_bn=fold_bn)
            y = g.op("Relu", [y], f"{p}.relu_1")
            y = _conv_bn(g, y, f"{p}.conv3", f"{p}.bn3", planes, planes * 4, 1, fold_bn=fold_bn, gain=residual_gain)
            identity = x
            if stride != 1 or cin != planes * 4:
                identity = _conv_bn(
                    g, x, f"{p}.downsample.0", f"{p}.downsample.1", cin, planes * 4, 1, stride, fold_bn=fold_bn
                )
            x = g.op("Add", [y, identity], p)
            x = g.op("Relu", [x], f"{p}.relu_2")
            cin = planes * 4
    x = g.op("GlobalAveragePool", [x], "avgpool")
    x = g.op("Flatten", [x], "", axis=1)
    _classifier(g, x, "fc", cin, num_classes, out="output")
    g.output("output", TensorProto.FLOAT, (1, num_classes))
    sizes = {"layers": list(layers), "width": width, "image_size": image_size, "num_classes": num_classes}
    return g.model("resnet50", "ResNet-50 (torchvision layout), seeded random weights", {**sizes, "fold_bn": fold_bn})


# torchvision's inverted-residual table: expansion t, output channels c, repeats n, first stride s
MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding: the nearest multiple of 8, never more than 10% down."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v2(
    *,
    settings: Sequence[Sequence[int]] = MOBILENET_V2_SETTINGS,
    width_mult: float = 1.0,
    last_channel: int = 1280,
    image_size: int = 224,
    num_classes: int = 1000,
    fold_bn: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's MobileNet-V2: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1
    project) with ReLU6 as ``Clip(0, 6)`` and a residual ``Add`` where stride 1 keeps the width.

    ``settings`` rows are (expansion, channels, repeats, stride). Input ``input`` (1, 3, S, S),
    output ``output`` (1, num_classes).
    """
    g = _Graph(seed)
    zero, six = g.const(0.0), g.const(6.0)
    x = g.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    cin = _make_divisible(32 * width_mult)
    last = _make_divisible(last_channel * max(1.0, width_mult))
    x = _conv_bn(g, x, "features.0.0", "features.0.1", 3, cin, 3, 2, fold_bn=fold_bn)
    x = g.op("Clip", [x, zero, six], "features.0.2")
    index = 1
    blocks = sum(n for _, _, n, _ in settings)
    for t, c, n, s in settings:
        cout = _make_divisible(c * width_mult)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = round(cin * t)
            p = f"features.{index}.conv"
            y, j = x, 0
            if t != 1:
                y = _conv_bn(g, y, f"{p}.0.0", f"{p}.0.1", cin, hidden, 1, fold_bn=fold_bn)
                y = g.op("Clip", [y, zero, six], f"{p}.0.2")
                j = 1
            y = _conv_bn(g, y, f"{p}.{j}.0", f"{p}.{j}.1", hidden, hidden, 3, stride, groups=hidden, fold_bn=fold_bn)
            y = g.op("Clip", [y, zero, six], f"{p}.{j}.2")
            residual = stride == 1 and cin == cout
            gain = 1.0 / math.sqrt(blocks) if residual else 1.0
            y = _conv_bn(g, y, f"{p}.{j + 1}", f"{p}.{j + 2}", hidden, cout, 1, fold_bn=fold_bn, gain=gain)
            x = g.op("Add", [x, y], f"features.{index}") if residual else y
            cin = cout
            index += 1
    x = _conv_bn(g, x, f"features.{index}.0", f"features.{index}.1", cin, last, 1, fold_bn=fold_bn)
    x = g.op("Clip", [x, zero, six], f"features.{index}.2")
    x = g.op("GlobalAveragePool", [x], "")
    x = g.op("Flatten", [x], "", axis=1)
    _classifier(g, x, "classifier.1", last, num_classes, out="output")
    g.output("output", TensorProto.FLOAT, (1, num_classes))
    sizes = {
        "settings": [list(r) for r in settings],
        "width_mult": width_mult,
        "last_channel": last_channel,
        "image_size": image_size,
        "num_classes": num_classes,
    }
    return g.model(
        "mobilenet_v2", "MobileNet-V2 (torchvision layout), seeded random weights", {**sizes, "fold_bn": fold_bn}
    )


# torchvision's EfficientNet-B0 table (MBConvConfig): expand ratio, kernel, stride, input channels,
# output channels, layers
EFFICIENTNET_B0_SETTINGS = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _silu(g: _Graph, x: str, module: str, sample: dict[str, np.ndarray]) -> str:
    """``nn.SiLU`` as the TorchScript exporter writes it: ``Mul(x, Sigmoid(x))``."""
    y = g.op("Mul", [x, g.op("Sigmoid", [x], module)], module)
    sample[y] = sample[x] * _sigmoid(sample[x])
    return y


def _squeeze_excitation(g: _Graph, x: str, p: str, channels: int, squeeze: int, sample: dict[str, np.ndarray]) -> str:
    """torchvision's ``SqueezeExcitation``: ``sigmoid(fc2(silu(fc1(avgpool(x))))) * x``, the two
    ``fc`` 1x1 convolutions with bias (He-normal weights, small random biases)."""
    s = g.op("GlobalAveragePool", [x], f"{p}.avgpool")
    sample[s] = sample[x].mean(axis=(2, 3), keepdims=True)
    for name, cin, cout in (("fc1", channels, squeeze), ("fc2", squeeze, channels)):
        w = g.normal((cout, cin, 1, 1), math.sqrt(2.0 / cin))
        b = g.normal((cout,), 0.05)
        out = g.op(
            "Conv",
            [s, g.weight(f"{p}.{name}.weight", w), g.weight(f"{p}.{name}.bias", b)],
            f"{p}.{name}",
            dilations=[1, 1],
            kernel_shape=[1, 1],
            pads=[0, 0, 0, 0],
            strides=[1, 1],
        )
        sample[out] = _conv2d(sample[s], w, 1, 1, b)
        s = _silu(g, out, f"{p}.activation", sample) if name == "fc1" else out
    gate = g.op("Sigmoid", [s], f"{p}.scale_activation")
    y = g.op("Mul", [gate, x], p)
    sample[y] = _sigmoid(sample[s]) * sample[x]
    return y


def efficientnet_b0(
    *,
    settings: Sequence[Sequence[int]] = EFFICIENTNET_B0_SETTINGS,
    width_mult: float = 1.0,
    depth_mult: float = 1.0,
    last_channel: int | None = None,
    image_size: int = 224,
    num_classes: int = 1000,
    fold_bn: bool = False,
    calibration_batch: int = 2,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's EfficientNet-B0: MBConv blocks (1x1 expand, kxk depthwise, squeeze-and-
    excitation, 1x1 project, each convolution followed by BatchNormalization) with SiLU as
    ``Mul(x, Sigmoid(x))`` and a residual ``Add`` where stride 1 keeps the width.

    ``settings`` rows are (expand ratio, kernel, stride, input channels, output channels, layers),
    channels scaled by ``width_mult`` and layers by ``depth_mult`` as torchvision scales them for
    B1-B7; the head has ``last_channel`` channels (4x the last stage's by default: 1280). Input
    ``input`` (1, 3, S, S), output ``output`` (1, num_classes).

    SiLU is not scale-free like ReLU: it passes a quarter of a small input's variance and half
    of a large one's, so with fixed BatchNorm statistics the activations of 16 blocks either
    vanish or blow up depending on the seed. The BatchNorms are calibrated instead: a batch of
    ``calibration_batch`` random N(0, 1) images goes through the network as it is built (numpy,
    float64, so that the statistics are the same bytes on every machine) and each BatchNorm's running statistics are its input's batch statistics, so every
    BatchNorm's output has a mean of about 0 and a standard deviation of about 1, except the
    last BatchNorm of a residual branch, scaled by 1/sqrt(blocks) as in :func:`mobilenet_v2`.
    """
    g = _Graph(seed)
    rows = [
        (t, k, s, _make_divisible(cin * width_mult), _make_divisible(cout * width_mult), math.ceil(n * depth_mult))
        for t, k, s, cin, cout, n in settings
    ]
    x = g.input("input", TensorProto.FLOAT, (1, 3, image_size, image_size))
    images = np.random.default_rng([seed, 1]).standard_normal((calibration_batch, 3, image_size, image_size))
    sample = {x: images}  # float64, so that BLAS's summation order does not change a float32 statistic

    def conv_bn(x: str, module: str, cin: int, cout: int, kernel: int, stride: int = 1, **kw: Any) -> str:
        """torchvision's ``Conv2dNormActivation`` less its activation: ``{module}.0`` and ``.1``."""
        return _conv_bn(
            g, x, f"{module}.0", f"{module}.1", cin, cout, kernel, stride, fold_bn=fold_bn, sample=sample, **kw
        )

    cin = rows[0][3]
    x = conv_bn(x, "features.0", 3, cin, 3, 2)
    x = _silu(g, x, "features.0.2", sample)
    blocks = sum(r[5] for r in rows)
    for stage, (t, k, s, _, cout, n) in enumerate(rows):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = _make_divisible(cin * t)
            p = f"features.{stage + 1}.{i}.block"
            y, j = x, 0
            if hidden != cin:
                y = conv_bn(y, f"{p}.0", cin, hidden, 1)
                y = _silu(g, y, f"{p}.0.2", sample)
                j = 1
            y = conv_bn(y, f"{p}.{j}", hidden, hidden, k, stride, groups=hidden)
            y = _silu(g, y, f"{p}.{j}.2", sample)
            y = _squeeze_excitation(g, y, f"{p}.{j + 1}", hidden, max(1, cin // 4), sample)
            residual = stride == 1 and cin == cout
            gain = 1.0 / math.sqrt(blocks) if residual else 1.0
            y = conv_bn(y, f"{p}.{j + 2}", hidden, cout, 1, gain=gain)
            if residual:
                out = g.op("Add", [y, x], f"features.{stage + 1}.{i}")
                sample[out] = sample[y] + sample[x]
                y = out
            x, cin = y, cout
            kept = sample[x]  # the block's output is all that the next block reads
            sample.clear()
            sample[x] = kept
    last = last_channel if last_channel is not None else 4 * cin
    head = f"features.{len(rows) + 1}"
    x = conv_bn(x, head, cin, last, 1)
    x = _silu(g, x, f"{head}.2", sample)
    x = g.op("GlobalAveragePool", [x], "avgpool")
    x = g.op("Flatten", [x], "", axis=1)
    _classifier(g, x, "classifier.1", last, num_classes, out="output")
    g.output("output", TensorProto.FLOAT, (1, num_classes))
    sizes = {
        "settings": [list(r) for r in settings],
        "width_mult": width_mult,
        "depth_mult": depth_mult,
        "last_channel": last,
        "image_size": image_size,
        "num_classes": num_classes,
    }
    extra = {"fold_bn": fold_bn, "calibration_batch": calibration_batch}
    return g.model("efficientnet_b0", "EfficientNet-B0 (torchvision layout), seeded random weights", {**sizes, **extra})


# --------------------------------------------------------------------------------------------
# transformers (Hugging Face's BERT and ViT)


def _linear3d(g: _Graph, x: str, name: str, cin: int, cout: int, std: float = 0.02) -> str:
    """torch's ``Linear`` on a 3-D input: ``MatMul`` by the folded transpose (in, out), ``Add`` bias."""
    y = g.op("MatMul", [x, g.weight(f"onnx::MatMul_{name}.weight", g.normal((cin, cout), std))], name)
    return g.op("Add", [y, g.weight(f"{name}.bias", g.normal((cout,), std))], name)


def _layer_norm(g: _Graph, x: str, name: str, hidden: int, eps: float, out: str | None = None) -> str:
    scale = g.weight(f"{name}.weight", 1 + g.normal((hidden,), 0.1))
    bias = g.weight(f"{name}.bias", g.normal((hidden,), 0.02))
    return g.op("LayerNormalization", [x, scale, bias], name, out=out, axis=-1, epsilon=eps)


def _gelu(g: _Graph, x: str, scope: str) -> str:
    """``F.gelu`` (erf form) as torch exports it below opset 20."""
    y = g.op("Div", [x, g.const(math.sqrt(2.0))], scope)
    y = g.op("Erf", [y], scope)
    y = g.op("Add", [y, g.const(1.0)], scope)
    y = g.op("Mul", [x, y], scope)
    return g.op("Mul", [y, g.const(0.5)], scope)


def _attention(g: _Graph, x: str, p: str, seq: int, hidden: int, heads: int, mask: str | None) -> str:
    """Multi-head self-attention as transformers' eager ``BertSelfAttention`` exports, with the
    output projection (``{p}.output.dense``) applied."""
    d = hidden // heads
    split = g.const([1, seq, heads, d], np.int64)

    def heads_of(which: str, perm: list[int]) -> str:
        y = _linear3d(g, x, f"{p}.self.{which}", hidden, hidden)
        y = g.op("Reshape", [y, split], f"{p}.self")
        return g.op("Transpose", [y], f"{p}.self", perm=perm)

    scope = f"{p}.self"
    q = heads_of("query", [0, 2, 1, 3])
    k = heads_of("key", [0, 2, 3, 1])  # transpose_for_scores then .transpose(-1, -2), one Transpose
    v = heads_of("value", [0, 2, 1, 3])
    s = g.op("MatMul", [q, k], scope)
    s = g.op("Div", [s, g.const(math.sqrt(d))], scope)
    if mask is not None:
        s = g.op("Add", [s, mask], scope)
    s = g.op("Softmax", [s], scope, axis=-1)
    c = g.op("MatMul", [s, v], scope)
    c = g.op("Transpose", [c], scope, perm=[0, 2, 1, 3])
    c = g.op("Reshape", [c, g.const([1, seq, hidden], np.int64)], scope)
    return _linear3d(g, c, f"{p}.output.dense", hidden, hidden)


def bert(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    intermediate: int = 3072,
    seq_len: int = 128,
    vocab_size: int = 30522,
    max_positions: int = 512,
    type_vocab_size: int = 2,
    seed: int = 0,
) -> onnx.ModelProto:
    """transformers' ``BertModel`` (post-norm encoder, pooler), eager attention, batch 1.

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids``: (1, seq_len) int64, as torch
    exports them; outputs ``last_hidden_state`` (1, seq_len, hidden) and ``pooler_output``
    (1, hidden). Weights and biases are N(0, 0.02) (BERT's ``initializer_range``), LayerNorm scales
    1 + N(0, 0.1), so that no parameter is trivially 0 or 1.
    """
    if hidden % heads:
        raise ModelError(f"bert: hidden {hidden} is not a multiple of heads {heads}")
    g = _Graph(seed)
    shape = (1, seq_len)
    ids = g.input("input_ids", TensorProto.INT64, shape)
    mask_in = g.input("attention_mask", TensorProto.INT64, shape)
    types = g.input("token_type_ids", TensorProto.INT64, shape)

    e = "embeddings"
    words = g.weight(f"{e}.word_embeddings.weight", g.normal((vocab_size, hidden), 0.02))
    positions = g.weight(f"{e}.position_embeddings.weight", g.normal((max_positions, hidden), 0.02))
    token_types = g.weight(f"{e}.token_type_embeddings.weight", g.normal((type_vocab_size, hidden), 0.02))
    position_ids = g.weight("onnx::Gather_position_ids", np.arange(seq_len, dtype=np.int64)[None, :])
    x = g.op("Gather", [words, ids], f"{e}.word_embeddings", axis=0)
    t = g.op("Gather", [token_types, types], f"{e}.token_type_embeddings", axis=0)
    x = g.op("Add", [x, t], e)
    pos = g.op("Gather", [positions, position_ids], f"{e}.position_embeddings", axis=0)
    x = g.op("Add", [x, pos], e)
    x = _layer_norm(g, x, f"{e}.LayerNorm", hidden, 1e-12)

    # the extended attention mask: (1 - mask[:, None, None, :]) * float32.min
    m = g.op("Unsqueeze", [mask_in, g.const([1, 2], np.int64)], "")
    m = g.op("Cast", [m], "", to=TensorProto.FLOAT)
    m = g.op("Sub", [g.const(1.0), m], "")
    mask = g.op("Mul", [m, g.const(FLOAT32_MIN)], "")

    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = _attention(g, x, f"{p}.attention", seq_len, hidden, heads, mask)
        x = g.op("Add", [a, x], f"{p}.attention.output")
        x = _layer_norm(g, x, f"{p}.attention.output.LayerNorm", hidden, 1e-12)
        h = _linear3d(g, x, f"{p}.intermediate.dense", hidden, intermediate)
        h = _gelu(g, h, f"{p}.intermediate.intermediate_act_fn")
        h = _linear3d(g, h, f"{p}.output.dense", intermediate, hidden)
        x = g.op("Add", [h, x], f"{p}.output")
        x = _layer_norm(
            g, x, f"{p}.output.LayerNorm", hidden, 1e-12, out="last_hidden_state" if i == layers - 1 else None
        )
    if layers == 0:
        x = g.op("Identity", [x], "", out="last_hidden_state")

    first = g.op("Gather", [x, g.const(0, np.int64)], "pooler", axis=1)  # hidden_states[:, 0]
    w = g.weight("pooler.dense.weight", g.normal((hidden, hidden), 0.02))
    b = g.weight("pooler.dense.bias", g.normal((hidden,), 0.02))
    y = g.op("Gemm", [first, w, b], "pooler.dense", alpha=1.0, beta=1.0, transB=1)
    g.op("Tanh", [y], "pooler.activation", out="pooler_output")
    g.output("last_hidden_state", TensorProto.FLOAT, (1, seq_len, hidden))
    g.output("pooler_output", TensorProto.FLOAT, (1, hidden))
    sizes = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "intermediate": intermediate,
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "max_positions": max_positions,
        "type_vocab_size": type_vocab_size,
    }
    return g.model("bert", "BERT encoder (transformers layout), seeded random weights", sizes)


def vit(
    *,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    mlp: int = 3072,
    image_size: int = 224,
    patch: int = 16,
    num_classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """ViT-B/16 (pre-norm encoder, class token) as transformers' ``ViTForImageClassification``
    exports: patch embedding ``Conv`` (kernel = stride = ``patch``), ``Reshape``/``Transpose`` to
    tokens, ``Concat`` of the class token, ``Add`` of the position embeddings, then the head on
    the class token. Input ``pixel_values`` (1, 3, S, S), output ``logits`` (1, num_classes).
    """
    if hidden % heads:
        raise ModelError(f"vit: hidden {hidden} is not a multiple of heads {heads}")
    if image_size % patch:
        raise ModelError(f"vit: image_size {image_size} is not a multiple of patch {patch}")
    g = _Graph(seed)
    grid = image_size // patch
    seq = grid * grid + 1
    x = g.input("pixel_values", TensorProto.FLOAT, (1, 3, image_size, image_size))
    e = "vit.embeddings"
    w = g.weight(f"{e}.patch_embeddings.projection.weight", g.normal((hidden, 3, patch, patch), 0.02))
    b = g.weight(f"{e}.patch_embeddings.projection.bias", g.normal((hidden,), 0.02))
    scope = f"{e}.patch_embeddings.projection"
    x = g.op(
        "Conv",
        [x, w, b],
        scope,
        kernel_shape=[patch, patch],
        strides=[patch, patch],
        pads=[0, 0, 0, 0],
        dilations=[1, 1],
    )
    x = g.op("Reshape", [x, g.const([1, hidden, grid * grid], np.int64)], f"{e}.patch_embeddings")
    x = g.op("Transpose", [x], f"{e}.patch_embeddings", perm=[0, 2, 1])
    cls = g.weight(f"{e}.cls_token", g.normal((1, 1, hidden), 0.02))
    x = g.op("Concat", [cls, x], e, axis=1)
    pos = g.weight(f"{e}.position_embeddings", g.normal((1, seq, hidden), 0.02))
    x = g.op("Add", [x, pos], e)
    for i in range(layers):
        p = f"vit.encoder.layer.{i}"
        h = _layer_norm(g, x, f"{p}.layernorm_before", hidden, 1e-12)
        a = _attention(g, h, f"{p}.attention", seq, hidden, heads, None)
        x = g.op("Add", [a, x], p)
        h = _layer_norm(g, x, f"{p}.layernorm_after", hidden, 1e-12)
        h = _linear3d(g, h, f"{p}.intermediate.dense", hidden, mlp)
        h = _gelu(g, h, f"{p}.intermediate.intermediate_act_fn")
        h = _linear3d(g, h, f"{p}.output.dense", mlp, hidden)
        x = g.op("Add", [h, x], f"{p}.output")
    x = _layer_norm(g, x, "vit.layernorm", hidden, 1e-12)
    x = g.op("Gather", [x, g.const(0, np.int64)], "", axis=1)  # sequence_output[:, 0, :]
    w = g.weight("classifier.weight", g.normal((num_classes, hidden), 0.02))
    b = g.weight("classifier.bias", g.normal((num_classes,), 0.02))
    g.op("Gemm", [x, w, b], "classifier", out="logits", alpha=1.0, beta=1.0, transB=1)
    g.output("logits", TensorProto.FLOAT, (1, num_classes))
    sizes = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "mlp": mlp,
        "image_size": image_size,
        "patch": patch,
        "num_classes": num_classes,
    }
    return g.model("vit", "ViT (transformers layout), seeded random weights", sizes)


# --------------------------------------------------------------------------------------------
# inputs, quantization


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every graph input of ``model`` (any ONNX model, not only ours).

    Float inputs are N(0, 1) (like normalized images). An integer input used as the indices of
    a ``Gather`` from an initializer (token ids, token types; in a quantized model, from the
    DequantizeLinear of one) is uniform below that table's
    size, so ids stay within the vocabulary; an integer input whose name contains ``mask`` is
    all ones (batch 1 has nothing to pad); any other integer input is 0. A dimension without a
    value (a symbolic batch) is 1.
    """
    rng = np.random.default_rng(seed)
    initializers = {t.name: t for t in model.graph.initializer}
    tables = dict(initializers)  # a quantized model's tables are DequantizeLinear(initializer)
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in initializers:
            tables[node.output[0]] = initializers[node.input[0]]
    bounds: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in tables:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            dims = tables[node.input[0]].dims
            size = dims[axis % len(dims)]
            bounds[node.input[1]] = min(size, bounds.get(node.input[1], size))
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:  # an IR < 4 model lists its initializers as inputs too
            continue
        t = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif value.name in bounds:
            feeds[value.name] = rng.integers(0, bounds[value.name], shape).astype(dtype)
        elif "mask" in value.name.lower() or dtype == np.bool_:
            feeds[value.name] = np.ones(shape, dtype)
        else:
            feeds[value.name] = np.zeros(shape, dtype)
    return feeds


_QUANT_TYPES = ("int8", "uint8")


def quantize(
    model: onnx.ModelProto,
    *,
    calibration_size: int = 8,
    seed: int = 0,
    per_channel: bool = True,
    activation_type: str = "int8",
    weight_type: str = "int8",
) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's ``quantize_static`` in QDQ format.

    Calibration is min-max over ``calibration_size`` inputs from :func:`random_inputs` (seeds
    ``seed``, ``seed + 1``, ...). Activations and weights are signed int8, onnxruntime's defaults
    (asymmetric activations with a zero point, symmetric weights); ``per_channel`` quantizes each
    weight per output channel along the op's default axis (Conv: 0, MatMul: 1, Gemm with
    ``transB``: 0), the rest of onnxruntime's options stay at their defaults. Quantization goes
    through files, so this works in a temporary directory; the result is returned in memory.
    """
    import logging

    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    types = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    for what, value in (("activation_type", activation_type), ("weight_type", weight_type)):
        if value not in types:
            raise ModelError(f"quantize: {what} {value!r} is not one of {', '.join(types)}")
    samples = [random_inputs(model, seed + i) for i in range(calibration_size)]

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._samples = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._samples, None)

    # the quantizer warns through the root logger that the model was not pre-processed
    # (onnxruntime's graph optimizer and symbolic shape inference: we keep our graph as it is)
    # and that a LayerNorm scale, rank 1, has no axis 1 to be per-channel on (it goes per-tensor)
    def quiet(record: logging.LogRecord) -> bool:
        return record.levelno > logging.WARNING or "quantization" not in record.pathname

    root = logging.getLogger()
    root.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(prefix="tensorsearch-quantize-") as tmp:
            src, out = Path(tmp) / "model.onnx", Path(tmp) / "model.int8.onnx"
            onnx.save(onnx.shape_inference.infer_shapes(model, strict_mode=True), src)
            quantize_static(
                src,
                out,
                _Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                activation_type=types[activation_type],
                weight_type=types[weight_type],
                calibrate_method=CalibrationMethod.MinMax,
            )
            quantized = onnx.load(out)
    finally:
        root.removeFilter(quiet)
    quantized.doc_string = f"{model.doc_string}; int8 QDQ by onnxruntime.quantization.quantize_static"
    props = {p.key: p.value for p in model.metadata_props}
    props.update(
        {
            "tensorsearch.quantized": "onnxruntime.quantization.quantize_static QDQ MinMax",
            "calibration_size": str(calibration_size),
            "per_channel": str(per_channel),
            "activation_type": activation_type,
            "weight_type": weight_type,
        }
    )
    del quantized.metadata_props[:]
    helper.set_model_props(quantized, props)
    return quantized


# --------------------------------------------------------------------------------------------
# the built-in names


@dataclass(frozen=True)
class ModelSpec:
    """A built-in model: its builder with the full and the reduced sizes; ``int8`` models are
    their ``base`` float model (full or reduced alike) through :func:`quantize`."""

    builder: Callable[..., onnx.ModelProto] | None
    full: dict[str, Any] = field(default_factory=dict)
    reduced: dict[str, Any] = field(default_factory=dict)
    base: str | None = None
    what: str = ""

    def build(self, *, reduced: bool, seed: int) -> onnx.ModelProto:
        if self.base is not None:
            # calibration seeds far from the small ones tests draw their inputs with
            return quantize(build_model(self.base, reduced=reduced, seed=seed), seed=CALIBRATION_SEED + seed)
        assert self.builder is not None
        return self.builder(**(self.reduced if reduced else self.full), seed=seed)


MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec(
        resnet50,
        {},
        {"layers": (1, 1, 1, 1), "width": 8, "image_size": 32, "num_classes": 10},
        what="ResNet-50, 224x224, BatchNorm folded into Conv (25.5 M weights)",
    ),
    "mobilenet_v2": ModelSpec(
        mobilenet_v2,
        {},
        {
            "settings": ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2)),
            "width_mult": 0.5,
            "last_channel": 64,
            "image_size": 32,
            "num_classes": 10,
        },
        what="MobileNet-V2, 224x224, Conv + BatchNormalization (3.5 M weights)",
    ),
    "efficientnet_b0": ModelSpec(
        efficientnet_b0,
        {},
        {"settings": EFFICIENTNET_B0_SETTINGS[:3], "width_mult": 0.5, "image_size": 32, "num_classes": 10},
        what="EfficientNet-B0, 224x224, Conv + BatchNormalization, SiLU, squeeze-excitation (5.3 M weights)",
    ),
    "bert_base": ModelSpec(
        bert,
        {},
        {
            "layers": 2,
            "hidden": 64,
            "heads": 2,
            "intermediate": 256,
            "seq_len": 16,
            "vocab_size": 1000,
            "max_positions": 64,
        },
        what="BERT-base encoder and pooler, sequence 128 (109.5 M weights)",
    ),
    "bert_large": ModelSpec(
        bert,
        {"layers": 24, "hidden": 1024, "heads": 16, "intermediate": 4096},
        {
            "layers": 3,
            "hidden": 96,
            "heads": 4,
            "intermediate": 384,
            "seq_len": 16,
            "vocab_size": 1000,
            "max_positions": 64,
        },
        what="BERT-large encoder and pooler, sequence 128 (335 M weights)",
    ),
    "vit_b_16": ModelSpec(
        vit,
        {},
        {"layers": 2, "hidden": 64, "heads": 2, "mlp": 128, "image_size": 32, "num_classes": 10},
        what="ViT-B/16, 224x224 (86.6 M weights)",
    ),
    "resnet50_int8": ModelSpec(None, base="resnet50", what="resnet50 quantized to int8 (QDQ) by onnxruntime"),
    "bert_base_int8": ModelSpec(None, base="bert_base", what="bert_base quantized to int8 (QDQ) by onnxruntime"),
}


def names() -> list[str]:
    """The built-in model names."""
    return list(MODELS)


def _spec(name: str) -> ModelSpec:
    spec = MODELS.get(name)
    if spec is None:
        raise ModelError(f"unknown model {name!r}; the built-in models are {', '.join(MODELS)}")
    return spec


def build_model(name: str, *, reduced: bool = False, seed: int = 0) -> onnx.ModelProto:
    """The built-in model ``name`` with weights from ``seed``; ``reduced``: the small version."""
    return _spec(name).build(reduced=reduced, seed=seed)


def write_model(name: str, path: str | os.PathLike[str], reduced: bool = False, seed: int = 0) -> Path:
    """Builds ``name`` and writes it to ``path`` (atomically: a reader never sees half a file)."""
    path = Path(path)
    _save_atomic(build_model(name, reduced=reduced, seed=seed), path)
    return path


def count_parameters(model: onnx.ModelProto) -> int:
    """Elements of the model's floating-point initializers of rank 1 or more: its weights and
    biases (and BatchNorm statistics); shapes, indices and scalar constants do not count."""
    total = 0
    for t in model.graph.initializer:
        if t.dims and np.issubdtype(helper.tensor_dtype_to_np_dtype(t.data_type), np.floating):
            total += math.prod(t.dims)
    return total


# --------------------------------------------------------------------------------------------
# the cache


def cache_dir() -> Path:
    """Where :func:`model_path` keeps built models: ``$TENSORSEARCH_CACHE/models``, else
    ``$XDG_CACHE_HOME/tensorsearch/models``, else ``~/.cache/tensorsearch/models``."""
    root = os.environ.get("TENSORSEARCH_CACHE")
    if root:
        return Path(root).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tensorsearch" / "models"


def _cache_key(name: str, reduced: bool) -> str:
    key = f"{name}{'-reduced' if reduced else ''}-v{BUILDER_VERSION}"
    if _spec(name).base is not None:  # the quantizer's version decides the int8 graph too
        import onnxruntime

        key += f"-ort{onnxruntime.__version__}"
    return key


def model_path(name: str, reduced: bool = False) -> Path:
    """The file of built-in model ``name`` (seed 0), built into :func:`cache_dir` on first use.

    Files are keyed by name, the reduced flag and :data:`BUILDER_VERSION` (and onnxruntime's
    version for the int8 models), written atomically, so concurrent callers may both build but
    never see a partial file.
    """
    path = cache_dir() / f"{_cache_key(name, reduced)}.onnx"
    if not path.is_file():
        _save_atomic(build_model(name, reduced=reduced), path)
    return path


def _save_atomic(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; a model file is not
        onnx.save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_model(name_or_path: str | os.PathLike[str], *, reduced: bool = False) -> onnx.ModelProto:
    """A built-in model by name (through the cache; ``reduced`` picks the small version) or any
    ONNX file by path, checked by ``onnx.checker``; every failure is a one-line :class:`ModelError`."""
    cached = isinstance(name_or_path, str) and name_or_path in MODELS
    if cached:
        path = model_path(name_or_path, reduced)
    else:
        path = Path(name_or_path)
        if not path.exists():
            text = str(name_or_path)
            if os.sep in text or "/" in text or path.suffix:
                raise ModelError(f"no such ONNX file: {text}")
            raise ModelError(
                f"unknown model {text!r}; the built-in models are {', '.join(MODELS)}, or give an ONNX file's path"
            )
        if not path.is_file():
            raise ModelError(f"{path} is not a file")
    try:
        onnx.checker.check_model(str(path))  # from the file: also works past protobuf's 2 GB
        return onnx.load(path)
    except OSError as err:
        raise ModelError(f"cannot read {path}: {err.strerror or err}") from err
    except Exception as err:  # protobuf's DecodeError, onnx's ValidationError, ...
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        hint = "; delete the cached file and it is built again" if cached else ""
        raise ModelError(f"{path} is not a valid ONNX model (truncated or not ONNX?): {first}{hint}") from err
