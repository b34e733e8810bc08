"""``tensorsearch model tasks`` and ``tensorsearch model run``: output, and one-line errors."""

from __future__ import annotations

import re
import subprocess
import sys

import onnx
import pytest
from graph_util import model
from onnx import helper

from tensorsearch.cli.main import main
from tensorsearch.graph.models import load_model


def test_model_tasks_lists_weighted_tasks(capsys):
    assert main(["model", "tasks", "bert_base", "--reduced"]) == 0  # two equal encoder layers
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["#", "task", "weight", "MFLOPs/call", "share", "key", "shapes"]
    rows = [line.split() for line in lines[1:]]
    assert any(r[1].startswith("fused_mat_mul_add") for r in rows)
    assert sum(int(r[2]) for r in rows) > len(rows)  # some task runs more than once
    assert all(re.fullmatch(r"[0-9a-f]{16}", r[5]) for r in rows)
    # each task's parameter shapes, the written ones after the arrow, then the dtype
    shapes = [line.split(maxsplit=6)[6] for line in lines[1:]]
    assert all(re.fullmatch(r"(\d+(x\d+)*( int64| float32)? )+-> \d+(x\d+)* float32", t) for t in shapes), shapes
    assert "1x16x64 64 64 -> 1x16x64 float32" in shapes  # layer normalization: data, scale, bias
    assert re.search(r"\d+ tasks, \d+ kernels; [\d.]+ GFLOPs, [\d.]+ GMACs per run", err)


@pytest.mark.slow
def test_model_run_compares_with_onnxruntime(capsys):
    assert main(["model", "run", "mobilenet_v2", "--reduced", "--repeat", "2", "--profile"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"output +output: max error \d\.\de-\d\d of the output's scale \(ok, top-1 same\)", out), out
    ratio = r"\([\d.]+x (faster|slower) than onnxruntime\)"
    assert re.search(r"latency +tensorsearch [\d.]+ ms +onnxruntime [\d.]+ ms +" + ratio, out), out
    assert re.search(r"fused_conv\w* \(\d+\): [\d.]+ ms, [\d.]+%, default", out), out


@pytest.mark.slow
def test_model_run_compares_an_int8_model_by_top1(capsys):
    assert main(["model", "run", "resnet50_int8", "--reduced", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"output +output: max error .* \(int8 model: compared by top-1, top-1 same\)", out), out


@pytest.mark.slow
def test_model_run_binds_symbolic_input_shapes(tmp_path, capsys):
    path = tmp_path / "dyn.onnx"
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)]
    m = model(nodes, {"x": ("float32", ("batch", 5))}, ["y"])
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["batch", 5]))
    path.write_bytes(m.SerializeToString())
    assert main(["model", "run", str(path), "--input-shape", "batch=3", "--repeat", "1"]) == 0
    assert "output      y: max error" in capsys.readouterr().out
    assert main(["model", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        err[-1].startswith("tensorsearch model: error: ") and "bind it" in err[-1] and "--input-shape x=1,1" in err[-1]
    )
    assert main(["model", "tasks", str(path), "--input-shape", "batch=two"]) == 2
    assert "--input-shape 'batch=two': expected NAME=D,D,..." in capsys.readouterr().err


@pytest.mark.slow
def test_model_errors_are_one_line_without_traceback(tmp_path):
    cut = tmp_path / "cut.onnx"
    data = load_model("resnet50", reduced=True).SerializeToString()
    cut.write_bytes(data[: len(data) // 2])
    for args, expect in [
        (["model", "tasks", "resnet5"], "unknown model 'resnet5'"),
        (["model", "tasks", str(cut)], "is not a valid ONNX model"),
        (["model", "run", "resnet50", "--reduced", "--work-dir", str(tmp_path / "none")], "no tuning database"),
    ]:
        res = subprocess.run([sys.executable, "-m", "tensorsearch", *args], capture_output=True, text=True)
        assert res.returncode == 2, (args, res.stderr)
        lines = [line for line in res.stderr.splitlines() if "error" in line]
        assert len(lines) == 1 and expect in lines[0], (args, res.stderr)
        assert "Traceback" not in res.stderr


@pytest.mark.parametrize("bad", ["x", "x=", "=1,2", "x=0,3"])
def test_bad_input_shape_specs(bad, capsys):
    assert main(["model", "tasks", "resnet50", "--reduced", "--input-shape", bad]) == 2
    assert "expected NAME=D,D,... with positive integers" in capsys.readouterr().err
