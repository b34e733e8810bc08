"""Helpers for the graph layer's tests: small ONNX models, and running them through our lowering
(the whole graph as one kernel, unscheduled) beside onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tensorsearch.graph.lowering import lower_nodes
from tensorsearch.graph.onnx_import import from_onnx
from tensorsearch.ir import parse_dtype
from tensorsearch.runtime import build
from tensorsearch.runtime.module import numpy_dtype

ONNX_TYPES = {
    "float32": onnx.TensorProto.FLOAT,
    "int8": onnx.TensorProto.INT8,
    "uint8": onnx.TensorProto.UINT8,
    "int32": onnx.TensorProto.INT32,
    "int64": onnx.TensorProto.INT64,
    "bool": onnx.TensorProto.BOOL,
}


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, tuple[str, Sequence[int]]],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of ``nodes``; ``inputs`` maps a name to (dtype, shape); output types are inferred."""
    g = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, ONNX_TYPES[d], list(s)) for n, (d, s) in inputs.items()],
        [helper.make_empty_tensor_value_info(n) for n in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def single(
    op: str, inputs: Mapping[str, tuple[str, Sequence[int]]], initializers=None, opset=17, **attrs
) -> onnx.ModelProto:
    """A model of one ``op`` node reading ``inputs`` then ``initializers`` (in that order), output ``y``."""
    names = list(inputs) + list(initializers or {})
    node = helper.make_node(op, names, ["y"], name=f"/{op}", **attrs)
    return model([node], inputs, ["y"], initializers, opset)


def random_feeds(m: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in m.graph.initializer}
    feeds = {}
    for v in m.graph.input:
        if v.name in inits:
            continue
        t = v.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        dt = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dt, np.floating):
            feeds[v.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[v.name] = rng.integers(0, 2, shape).astype(dt)
        else:
            info = np.iinfo(dt)
            feeds[v.name] = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dt)
    return feeds


def run_ort(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def run_lowered(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], graph_pass: Any = None) -> list[np.ndarray]:
    """Import ``m``, optionally rewrite it with ``graph_pass(graph)``, lower the whole graph as
    one kernel (no schedule), build it for the host and run it on ``feeds``."""
    g = from_onnx(m)
    if graph_pass is not None:
        g = graph_pass(g)
    outs = [v.name for v in g.outputs]
    lowered = lower_nodes(g, g.nodes, outs)
    mod = build(lowered.func)
    args = []
    results = []
    for name in lowered.args[: lowered.num_inputs]:
        args.append(np.ascontiguousarray(feeds[name]))
    for name in lowered.args[lowered.num_inputs : lowered.num_inputs + lowered.num_constants]:
        args.append(np.ascontiguousarray(g.constants[name]).reshape(g.values[name].shape or (1,)))
    for name in lowered.outputs:
        v = g.values[name]
        out = np.zeros(v.shape or (1,), numpy_dtype(parse_dtype(v.dtype)))
        args.append(out)
        results.append(out.reshape(v.shape))
    mod(*args)
    return results


def check_against_ort(
    m: onnx.ModelProto,
    seed: int = 0,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    graph_pass: Any = None,
    feeds: Mapping[str, np.ndarray] | None = None,
) -> None:
    """``m`` through :func:`run_lowered` and through onnxruntime on ``feeds`` (default: seeded
    random inputs) agree: floats within the tolerances, everything else exactly."""
    feeds = random_feeds(m, seed) if feeds is None else feeds
    want = run_ort(m, feeds)
    got = run_lowered(m, feeds, graph_pass)
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
