"""Compiling a model's tasks: tuned records from a work dir, and weights packed ahead of time
(a schedule's constant-only stages cut into a prepack run once per kernel)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from graph_util import model, random_feeds, run_ort
from onnx import helper

import tensorsearch as ts
from tensorsearch import hardware, te, workloads
from tensorsearch.schedule import Schedule
from tensorsearch.search.database import Database, TuningRecord, hardware_key
from tensorsearch.search.model import model_tasks
from tensorsearch.search.space.design import DesignSpace
from tensorsearch.transform import layout_free_params, split_constant_stages

HOST = hardware.load("host")


def _packing_candidate(func, constant_param: int):
    """A candidate of ``func``'s design space whose schedule stages the constant parameter."""
    space = DesignSpace(func, HOST)
    for index in range(len(space.traces)):
        for seed in range(4):
            cand = space.sample_space(index, seed)
            if cand is not None and split_constant_stages(cand.func, [constant_param]) is not None:
                return cand
    raise AssertionError("no design space of this GEMM packs its weight")


@pytest.mark.slow
def test_split_constant_stages_cuts_the_weight_packing_out():
    wl = workloads.get("GMM", 0, "float32")
    cand = _packing_candidate(wl.func, 1)
    split = split_constant_stages(cand.func, [1])
    assert split.prepack_inputs == (1,)
    assert split.main_params == (0, ("packed", 0), 2)  # Y is read only by the prepack
    assert [b.name for b in split.prepack.buffers] == ["Y", split.packed[0].name]
    assert "Y_global" in split.packed[0].name
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((1, 128, 128)).astype(np.float32) for _ in range(2))
    want = np.zeros((1, 128, 128), np.float32)
    ts.build(cand.func, HOST)(x, y, want)
    packed = np.zeros([d.value for d in split.packed[0].shape], np.float32)
    ts.build(split.prepack, HOST)(y, packed)
    got = np.zeros_like(want)
    ts.build(split.main, HOST)(x, packed, got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got[0], x[0] @ y[0], rtol=1e-4, atol=1e-4)


def test_a_reduction_over_a_constant_alone_is_cut_out_too():
    """A stage that reads its own output besides a constant (a reduction: a weight's column sums,
    what a zero-point correction subtracts) is constant as well."""
    x = te.placeholder((8, 16), "float32", name="X")
    w = te.placeholder((16, 32), "float32", name="W")
    r = te.reduce_axis((0, 16), name="r")
    colsum = te.compute((32,), lambda j: te.sum(w[r, j], axis=r), name="colsum")
    k = te.reduce_axis((0, 16), name="k")
    z = te.compute((8, 32), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="Z")
    out = te.compute((8, 32), lambda i, j: z[i, j] - colsum[j], name="out")
    func = Schedule(te.create_prim_func([x, w, out])).func
    split = split_constant_stages(func, [1])
    assert split.prepack_inputs == (1,) and split.main_params == (0, 1, ("packed", 0), 2)
    rng = np.random.default_rng(2)
    xs, ws = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
    sums, got = np.zeros(32, np.float32), np.zeros((8, 32), np.float32)
    ts.build(split.prepack, HOST)(ws, sums)
    ts.build(split.main, HOST)(xs, ws, sums, got)
    np.testing.assert_allclose(got, xs @ ws - ws.sum(0), rtol=1e-4, atol=1e-4)


def test_nothing_to_split_without_constant_only_stages():
    wl = workloads.get("GMM", 0, "float32")
    assert split_constant_stages(wl.func, [1]) is None  # one stage, reading X too
    cand = _packing_candidate(wl.func, 1)
    assert split_constant_stages(cand.func, [0]) is None  # X is no constant


@pytest.mark.slow
def test_a_tuned_record_in_the_work_dir_compiles_its_task_with_weights_packed_ahead(tmp_path):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    w = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    m = model(nodes, {"x": ("float32", (16, 64))}, ["y"], {"w": w})
    _, kernels, tasks = model_tasks(m)
    (task,) = tasks
    lowered = kernels[0].lowered
    assert lowered.args == ("x", "w", "y") and lowered.num_constants == 1
    assert layout_free_params(task.func) == (1,)  # the tuner times it packed ahead, out of cache
    cand = _packing_candidate(task.func, 1)
    db = Database(tmp_path)
    assert db.commit_workload(task.func, task.name) == task.key
    record = TuningRecord(
        task.key, hardware_key(HOST), cand.key, cand.trace.as_json_text(), (1e-6,), None, 0.1, 0, time.time()
    )
    db.commit_record(record)
    db.close()
    exe = ts.compile_model(m, HOST, tmp_path)
    assert exe.sources == {task.key: "tuned"}
    program = exe.programs[task.key]
    assert program.prepack is not None and program.split.main_params == (0, ("packed", 0), 2)
    feeds = random_feeds(m)
    np.testing.assert_allclose(exe(**feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-4)
    untuned = ts.compile_model(m, HOST)
    assert untuned.sources == {task.key: "default"}


def test_default_schedule_packs_a_padded_int8_weight_at_the_root():
    """int8 ResNet's classifier, ``[1, 2048] x [2048, 1000]``: VNNI pads the 1000 columns to 1008.
    The padded packing of the weight is computed at the root, so it becomes the prepack (a sampled
    location re-ran the whole packing inside the GEMM's loops: 5 s a call)."""
    from tensorsearch.search.model import default_schedule

    rng = np.random.default_rng(0)
    inits = {"as": np.float32(0.07), "az": np.uint8(130), "b": rng.integers(-64, 64, (2048, 1000)).astype(np.int8)}
    inits.update({"bs": np.float32(0.003), "bz": np.int8(0), "ys": np.float32(0.09), "yz": np.uint8(120)})
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    *_, (task,) = model_tasks(ts.graph.from_onnx(model([node], {"a": ("uint8", (1, 2048))}, ["y"], inits)))
    func = default_schedule(task.func, hardware.load("x86-znver4"))  # a VNNI descriptor: pads on any host
    (weight,) = [k for k, b in enumerate(func.buffers) if str(b.dtype) == "int8"]
    split = split_constant_stages(func, [weight])
    assert split is not None and split.prepack_inputs == (weight,)
    assert weight not in split.main_params  # the kernel reads only the packed copy
