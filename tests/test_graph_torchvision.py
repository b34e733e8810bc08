"""ONNX files that torch itself exported from torchvision's ResNet-50, MobileNet-V2 and ViT-B/16
(random weights) import, compile for the host and match onnxruntime.

torch is never a dependency of tensorsearch or CI: the files come from a side environment,

    python experiments/torchvision_models.py --setup --export

which writes them into ``tensorsearch.graph.models.cache_dir() / "torchvision"``. Without a file
its test is skipped and says that command. The output
must be within 1e-3 of the reference's largest magnitude: max |ours - onnxruntime| <= 1e-3 *
max |onnxruntime|. Full-size models, unscheduled kernels: minutes each where the files exist.

The script's own refusal (no side environment: one line saying to run --setup) is checked
always; it needs no torch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tensorsearch
from tensorsearch.graph import models
from tensorsearch.graph.onnx_import import from_onnx

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "torchvision_models.py"
EXPORT_CMD = "python experiments/torchvision_models.py --setup --export"
NAMES = ["resnet50", "mobilenet_v2", "vit_b_16"]
RTOL = 1e-3  # relative to the reference output's largest magnitude


def exported(name: str) -> Path:
    return models.cache_dir() / "torchvision" / f"{name}.onnx"


def onnxruntime_outputs(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # the machine is shared
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("name", NAMES)
def test_torchvision_export_matches_onnxruntime(name):
    path = exported(name)
    if not path.is_file():
        pytest.skip(f"no torch export of {name} at {path}; run {EXPORT_CMD}")
    model = onnx.load(path)
    feeds = models.random_inputs(model, seed=0)
    graph = from_onnx(model)
    exe = tensorsearch.compile_model(graph, "host")
    got = exe(*[feeds[v.name] for v in graph.inputs])
    want = onnxruntime_outputs(path, feeds)
    assert len(got) == len(want) == len(graph.outputs)
    for value, ours, ref in zip(graph.outputs, got, want, strict=True):
        assert ours.shape == ref.shape, value.name
        assert np.isfinite(ref).all() and np.abs(ref).max() > 0, value.name  # a real comparison
        err, scale = np.abs(ours - ref).max(), np.abs(ref).max()
        assert err <= RTOL * scale, f"{name} {value.name}: max abs error {err:.3g} > {RTOL} * {scale:.3g}"


def test_export_without_side_environment_says_run_setup(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--export", "--env", str(tmp_path / "none"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "no torch side environment" in lines[0] and "run --setup first" in lines[0]
    assert not (tmp_path / "out").exists()
