"""The seven built-in models (reduced: the same builders with fewer layers and channels) import,
compile with default schedules and match onnxruntime: float32 within 1e-3 of the output's
scale; int8 with the same top-1 class on every one of a set of random inputs. The full-size
models run in experiments/e2e_untuned.py."""

from __future__ import annotations

import numpy as np
import pytest
from graph_util import run_ort

import tensorsearch as ts
from tensorsearch.graph.models import load_model, random_inputs

pytestmark = pytest.mark.slow  # every test here: see pyproject.toml's markers

FLOAT_MODELS = ["resnet50", "mobilenet_v2", "bert_base", "bert_large", "vit_b_16"]
INT8_MODELS = ["resnet50_int8", "bert_base_int8"]
AGREEMENT_INPUTS = 20


def _inputs(graph, feeds):
    return {v.name: feeds[v.name] for v in graph.inputs}


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_models_match_onnxruntime(name):
    m = load_model(name, reduced=True)
    graph = ts.graph.from_onnx(m)
    exe = ts.compile_model(graph, None)
    feeds = random_inputs(m, seed=3)
    got = exe(**_inputs(graph, feeds))
    want = run_ort(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        err = float(np.max(np.abs(g - w))) / float(np.max(np.abs(w)))
        assert err <= 1e-3, f"{name}: error {err:.2e} of the output scale"


@pytest.mark.parametrize("name", INT8_MODELS)
def test_int8_models_agree_with_onnxruntime_on_top1(name):
    m = load_model(name, reduced=True)
    graph = ts.graph.from_onnx(m)
    exe = ts.compile_model(graph, None)
    same = 0
    for seed in range(AGREEMENT_INPUTS):
        feeds = random_inputs(m, seed=seed)
        got = exe(**_inputs(graph, feeds))[0]
        want = run_ort(m, feeds)[0]
        assert got.shape == want.shape
        same += int(np.array_equal(got.reshape(len(got), -1).argmax(1), want.reshape(len(want), -1).argmax(1)))
    assert same == AGREEMENT_INPUTS, f"{name}: top-1 agreed on {same} of {AGREEMENT_INPUTS}"
