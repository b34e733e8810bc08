"""Fusion, tasks, the buffer plan and the executor, on small graphs and the reduced built-in models."""

from __future__ import annotations

import numpy as np
import pytest
from graph_util import model, random_feeds, run_ort
from onnx import helper

import tensorsearch as ts
from tensorsearch.graph import from_onnx, prepare
from tensorsearch.graph.executor import plan_buffers
from tensorsearch.graph.fuse import extract_tasks, fuse
from tensorsearch.graph.models import load_model
from tensorsearch.search.database import workload_key

RNG = np.random.default_rng(7)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _bottleneck():
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "x"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu2"),
    ]
    inits = {"w1": _w(8, 8, 3, 3), "b1": _w(8), "w2": _w(8, 8, 3, 3), "b2": _w(8)}
    return model(nodes, {"x": ("float32", (1, 8, 6, 6))}, ["y"], inits)


def test_a_residual_block_fuses_into_two_kernels_in_nhwc():
    g = prepare(from_onnx(_bottleneck()))
    groups = fuse(g)
    ops = [[n.op for n in grp.nodes] for grp in groups]
    # the layout change back to NCHW at the graph's end is one more injective consumer
    assert ops == [["LayoutTransform"], ["Conv", "Relu"], ["Conv", "Add", "Relu", "LayoutTransform"]]
    assert groups[1].name == "fused_conv_relu" and groups[2].name == "fused_conv_add_relu_layout_transform"


def test_gelu_after_a_matmul_is_one_kernel():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["h"], name="bias"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["e1"], name="add1"),
        helper.make_node("Mul", ["h", "e1"], ["p"], name="mul"),
        helper.make_node("Mul", ["p", "half"], ["y"], name="mul_half"),
    ]
    inits = {
        "w": _w(16, 32),
        "b": _w(32),
        "sqrt2": np.array(np.sqrt(2), np.float32),
        "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32),
    }
    m = model(nodes, {"x": ("float32", (1, 4, 16))}, ["y"], inits)
    g = prepare(from_onnx(m))
    groups = fuse(g)
    assert len(groups) == 1 and len(groups[0].nodes) == 7
    kernels, _tasks = extract_tasks(g)
    assert kernels[0].lowered.args[: kernels[0].lowered.num_inputs] == ("x",)
    assert set(kernels[0].lowered.args) == {"x", "w", "b", "y"}  # the scalars are inlined
    exe = ts.compile_model(m, None)
    feeds = random_feeds(m)
    np.testing.assert_allclose(exe(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_value_read_by_two_kernels_is_an_output_of_its_own_kernel():
    # h = x @ w feeds both a Relu and a second MatMul: the first kernel must hand h on
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["h", "w2"], ["z"], name="mm2"),
        helper.make_node("Add", ["r", "z"], ["y"], name="add"),
    ]
    m = model(nodes, {"x": ("float32", (3, 8))}, ["y"], {"w": _w(8, 8), "w2": _w(8, 8)})
    g = prepare(from_onnx(m))
    groups = fuse(g)
    produced = {o for grp in groups for o in grp.outputs}
    assert "h" in produced
    exe = ts.compile_model(g, None)
    feeds = random_feeds(m)
    np.testing.assert_allclose(exe(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-5)


def test_tasks_deduplicate_equal_kernels_and_keys_match_the_database():
    g = prepare(from_onnx(load_model("bert_base", reduced=True)))  # two equal encoder layers
    kernels, tasks = extract_tasks(g)
    assert sum(t.weight for t in tasks) == len(kernels) > len(tasks)
    assert len({t.key for t in tasks}) == len(tasks)
    for t in tasks:
        assert t.key == workload_key(t.func)
        assert t.flops >= 2 * t.macs
    for k in kernels:
        assert k.task in {t.key for t in tasks}


def _onnx_macs(m) -> int:
    """Multiply-accumulates of the model's Conv and Gemm nodes, from the ONNX shapes alone."""
    g = from_onnx(m)
    total = 0
    for n in g.nodes:
        if n.op == "Conv":
            w = g.values[n.inputs[1]].shape
            out = g.values[n.outputs[0]].shape
            total += int(np.prod(out)) * int(np.prod(w[1:]))
        elif n.op == "Gemm":
            a = g.values[n.inputs[0]].shape
            out = g.values[n.outputs[0]].shape
            total += int(np.prod(out)) * a[1]
    return total


@pytest.mark.slow
def test_resnet50_task_macs_sum_to_the_models_4_1_gmacs():
    m = load_model("resnet50")
    _, tasks = extract_tasks(prepare(from_onnx(m)))
    macs = sum(t.weight * t.macs for t in tasks)
    assert macs == _onnx_macs(m)
    assert max(t.weight for t in tasks) >= 4  # e.g. the 3x3 convolutions of conv2_x's blocks
    assert 4.05e9 < macs < 4.15e9  # ResNet-50 v1.5 at 224x224: 4.1 GMACs
    flops = sum(t.weight * t.flops for t in tasks)
    assert 2 * macs <= flops < 2 * macs * 1.02  # bias, ReLU, residual adds, pooling: under 2 % more


@pytest.mark.slow
def test_the_buffer_plan_reuses_freed_slots():
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h0"], name="mm0")]
    inits = {"w0": _w(16, 16)}
    for k in range(1, 6):
        nodes.append(helper.make_node("Softmax", [f"h{k - 1}"], [f"s{k}"], name=f"sm{k}", axis=-1))
        nodes.append(helper.make_node("MatMul", [f"s{k}", f"w{k}"], [f"h{k}"], name=f"mm{k}"))
        inits[f"w{k}"] = _w(16, 16)
    m = model(nodes, {"x": ("float32", (4, 16))}, ["h5"], inits)
    g = prepare(from_onnx(m))
    kernels, _ = extract_tasks(g)
    plan = plan_buffers(g, kernels)
    assert len(plan.slot_bytes) == 2 and plan.total_bytes < plan.unplanned_bytes
    exe = ts.compile_model(g, None)
    feeds = random_feeds(m)
    np.testing.assert_allclose(exe(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(exe(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-6)  # a second run too


@pytest.mark.slow
def test_the_executor_checks_its_inputs():
    m = _bottleneck()
    exe = ts.compile_model(m, None)
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    with pytest.raises(ValueError, match=r"input x: expected shape \[1, 8, 6, 6\], got \[1, 8, 6\]"):
        exe(x[..., 0])
    with pytest.raises(ValueError, match="input x: expected dtype float32, got float64"):
        exe(x.astype(np.float64))
    with pytest.raises(TypeError, match="missing model input"):
        exe()
    with pytest.raises(TypeError, match="the model has no input 'image'"):
        exe(image=x)
    got = exe(x)[0]
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert set(exe.sources.values()) <= {"default", "unscheduled"}
