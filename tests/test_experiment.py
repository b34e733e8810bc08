"""``tensorsearch experiment FILE.yaml``: the file's validation, and a run killed, resumed and tabled."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from graph_util import model
from onnx import helper
from proc_util import kill_when, lines

from tensorsearch.search.experiment import ExperimentError, load_experiment

HERE = Path(__file__).resolve().parent

GOOD = """
name: tiny
output: out
hardware: host
trials: 8
operators:
  - {op: GMM, shape: [1, 16, 16, 16]}
  - {op: GMM, shape: [1, 32, 16, 16]}
models:
  - {model: two.onnx}
search: {population_size: 8, init_min_unmeasured: 8, genetic_num_iters: 1, num_trials_per_iter: 4}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def _two_task_onnx(path: Path) -> None:
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    m = model(nodes, {"x": ("float32", [4, 16])}, ["y"], {"w1": rng.standard_normal((16, 8)).astype(np.float32)})
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8]))
    onnx.save(m, path)


def test_a_good_file_reads_into_cells(tmp_path):
    _two_task_onnx(tmp_path / "two.onnx")
    exp = load_experiment(_write(tmp_path, GOOD))
    assert exp.name == "tiny" and exp.output == (tmp_path / "out").resolve() and exp.hardware == ("host",)
    assert [c[0].label for c in exp.cells()] == ["GMM:1x16x16x16:float32", "GMM:1x32x16x16:float32", "two"]
    assert exp.search.population_size == 8 and exp.seeds == (0,)


@pytest.mark.parametrize(
    "change, message",
    [
        ("trials: 8", "trials: missing"),
        ("name: tiny", "naem: unknown key; did you mean 'name'?"),
        ("{op: GMM, shape: [1, 16, 16, 16]}", "operators[0].op: unknown operator 'GMN'; did you mean 'GMM'?"),
        ("{op: GMM, shape: [1, 32, 16, 16]}", "operators[1].dtype: GMM takes"),
        ("{model: two.onnx}", "models[0].model: 'missing.onnx' is neither a built-in model"),
        ("population_size: 8", "search.populaton_size: unknown key; did you mean 'population_size'?"),
        ("hardware: host", "hardware[0]:"),
        ("trials: 8", "trials: must be an integer of at least 1, not 0"),
    ],
)
def test_each_mistake_names_the_file_and_key(tmp_path, change, message):
    _two_task_onnx(tmp_path / "two.onnx")
    replacement = {
        "trials: 8": "" if message.startswith("trials: missing") else "trials: 0",
        "name: tiny": "naem: tiny",
        "{op: GMM, shape: [1, 16, 16, 16]}": "{op: GMN, shape: [1, 16, 16, 16]}",
        "{op: GMM, shape: [1, 32, 16, 16]}": "{op: GMM, shape: [1, 32, 16, 16], dtype: int4}",
        "{model: two.onnx}": "{model: missing.onnx}",
        "population_size: 8": "populaton_size: 8",
        "hardware: host": "hardware: no-such-cpu",
    }[change]
    path = _write(tmp_path, GOOD.replace(change, replacement, 1))
    with pytest.raises(ExperimentError) as err:
        load_experiment(path)
    text = str(err.value)
    assert text.startswith(f"{path}:") and message in text and "\n" not in text
    if not message.startswith("trials: missing"):  # a key that is there: its line
        key = message.split(":")[0]
        line = int(text[len(f"{path}:") :].split(":")[0])
        first = key.split(".")[0].split("[")[0]
        written = path.read_text().splitlines()[line - 1]
        assert first in written or key.endswith("]") or key.split(".")[-1] in written, (text, written)


def test_concurrent_tasks_is_read_and_checked(tmp_path):
    _two_task_onnx(tmp_path / "two.onnx")
    assert load_experiment(_write(tmp_path, GOOD)).concurrent_tasks == 1
    assert load_experiment(_write(tmp_path, GOOD + "concurrent_tasks: 3\n")).concurrent_tasks == 3
    path = _write(tmp_path, GOOD + "concurrent_tasks: 0\n")
    with pytest.raises(ExperimentError, match=r"concurrent_tasks: must be an integer of at least 1, not 0"):
        load_experiment(path)


def test_allow_other_cpu_is_read_and_checked(tmp_path):
    _two_task_onnx(tmp_path / "two.onnx")
    assert load_experiment(_write(tmp_path, GOOD)).allow_other_cpu is False
    assert load_experiment(_write(tmp_path, GOOD + "allow_other_cpu: true\n")).allow_other_cpu is True
    path = _write(tmp_path, GOOD + "allow_other_cpu: 1\n")
    with pytest.raises(ExperimentError, match=r"allow_other_cpu: must be true or false, not 1"):
        load_experiment(path)


def test_not_yaml_and_not_a_mapping(tmp_path):
    with pytest.raises(ExperimentError, match=r"not valid YAML at line 2, column 1: expected ',' or '\]'"):
        load_experiment(_write(tmp_path, "output: [unclosed\n"))
    with pytest.raises(ExperimentError, match="must be a mapping of keys"):
        load_experiment(_write(tmp_path, "- a list\n"))
    with pytest.raises(ExperimentError, match="absent.yaml: cannot read: No such file"):
        load_experiment(tmp_path / "absent.yaml")


@pytest.mark.slow
def test_an_experiment_is_killed_resumed_and_tabled(tmp_path):
    _two_task_onnx(tmp_path / "two.onnx")
    path = _write(tmp_path, GOOD)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    command = [sys.executable, "-m", "tensorsearch", "experiment", str(path)]
    work = tmp_path / "out" / "work"
    kill_when(command, lambda: any(lines(f) >= 2 for f in work.glob("*/database/tuning_records.jsonl")), 180)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    with open(tmp_path / "out" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["item"] for r in rows] == ["GMM:1x16x16x16:float32", "GMM:1x32x16x16:float32", "two"]
    assert all(r["status"] == "done" and int(r["trials"]) == 8 and float(r["best_ms"]) > 0 for r in rows)
    assert float(rows[2]["measured_model_ms"]) > 0
    assert all("disturbed" in r["host"] and float(r["load"]) >= 0 for r in rows)  # the host's conditions
    for r in rows:  # each cell's work dir holds exactly its budget: nothing lost, nothing measured twice
        assert lines(tmp_path / "out" / r["work_dir"] / "database" / "tuning_records.jsonl") == 8
    assert "| GMM:1x16x16x16:float32 |" in done.stdout
    assert (tmp_path / "out" / "results.png").stat().st_size > 0


def test_the_shipped_experiment_files_are_valid():
    files = sorted((HERE.parent / "experiments" / "configs").glob("*.yaml"))
    assert files
    for path in files:
        exp = load_experiment(path)
        assert exp.cells() and exp.output.parts[-2] == "runs"
