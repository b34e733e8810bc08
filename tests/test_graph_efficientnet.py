"""The built-in ``efficientnet_b0`` (reduced: three MBConv stages at width 0.5, 32x32, 10 classes):
its activations stay of order 1 through the SiLU and squeeze-excitation blocks whatever the seed
(its BatchNorms are calibrated as it is built), its output varies with the input, and it
imports, compiles for the host with default schedules and matches onnxruntime within 1e-3 of
the output's scale."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from graph_util import run_ort

import tensorsearch as ts
from tensorsearch.graph import models
from tensorsearch.graph.models import load_model, random_inputs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_activations_stay_of_order_one_and_the_output_varies_with_the_input(seed):
    """Every BatchNormalization and residual Add on two new random images: a root mean square of
    order 1 (a residual branch's last BatchNorm is scaled by 1/sqrt(5 blocks)), and between the
    two images a change of the same order; the logits too."""
    model = models.build_model("efficientnet_b0", reduced=True, seed=seed)
    probes = [n.output[0] for n in model.graph.node if n.op_type in ("BatchNormalization", "Add")]
    assert len(probes) == 16 + 2
    probed = onnx.ModelProto()
    probed.CopyFrom(model)
    for name in probes:
        probed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    runs = [run_ort(probed, random_inputs(model, seed=s)) for s in (10, 11)]
    for k, name in enumerate(["output", *probes]):
        a, b = runs[0][k], runs[1][k]
        rms = float(np.sqrt(np.mean(a**2)))
        change = float(np.sqrt(np.mean((a - b) ** 2))) / rms
        low, least_change = (0.05, 0.2) if name == "output" else (0.2, 0.5)
        assert low < rms < 3 and change > least_change, f"{name}: rms {rms:.3g}, change with the input {change:.3g}"


@pytest.mark.slow
def test_reduced_efficientnet_b0_matches_onnxruntime():
    m = load_model("efficientnet_b0", reduced=True)
    graph = ts.graph.from_onnx(m)
    exe = ts.compile_model(graph, "host")
    for seed in (3, 4):
        feeds = random_inputs(m, seed=seed)
        got = exe(**{v.name: feeds[v.name] for v in graph.inputs})
        want = run_ort(m, feeds)
        assert len(got) == len(want) == 1
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape == (1, 10) and g.dtype == w.dtype
            assert np.isfinite(w).all() and np.abs(w).max() > 0  # a real comparison
            err = float(np.max(np.abs(g - w))) / float(np.max(np.abs(w)))
            assert err <= 1e-3, f"seed {seed}: error {err:.2e} of the output scale"
