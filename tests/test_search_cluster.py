"""Tuning on a cluster: a simulated three-node Ray cluster (tests/cluster_scenarios.py, run
once in a fresh process), RAY_ADDRESS, nodes refused for timing, and a killed model run (a driver
joined to the cluster) resumed by another.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsearch import hardware
from tensorsearch.search.measure.cluster import init_ray, resolve_address
from tensorsearch.search.measure.pool import RunnerPool

pytestmark = pytest.mark.slow  # every test here: see pyproject.toml's markers

HERE = Path(__file__).resolve().parent
HOST = hardware.load("host")


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster")
    # the scenarios import this checkout's tensorsearch (not whichever one is installed) and the tests' helpers
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(HERE / "cluster_scenarios.py"), str(work)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_init_ray_joins_the_cluster_ray_address_names(cluster_run):
    assert len(cluster_run["nodes"]) == 3  # init_ray() with no address, RAY_ADDRESS set


def test_a_models_tasks_are_tuned_on_every_node_without_overlapping_timings(cluster_run):
    records = cluster_run["records"]
    assert len(records) == 24 and all(ok for _, _, _, ok, _ in records)
    assert sorted(cluster_run["rounds"][:2]) == [0, 1] and len(cluster_run["rounds"]) == 4, cluster_run["rounds"]
    spans = cluster_run["round_spans"]  # concurrent_tasks=2: the two tasks' rounds overlapped
    assert any(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in itertools.combinations(spans, 2)), spans
    used = {node for node, *_ in records}
    assert used == set(cluster_run["nodes"]), (used, cluster_run["nodes"])  # one runner per node, all used
    assert sorted(cluster_run["runners_before"]) == cluster_run["nodes"]
    by_node: dict[str, list[tuple[float, float]]] = {}
    for node, start, end, _, _ in records:
        assert start is not None and end is not None and start <= end
        by_node.setdefault(node, []).append((start, end))
    for windows in by_node.values():  # one candidate at a time on a node
        windows.sort()
        for (_, end), (start, _) in itertools.pairwise(windows):
            assert start >= end


def test_the_search_actors_are_spread_over_the_nodes(cluster_run):
    assert sorted(cluster_run["search_actor_nodes"]) == cluster_run["nodes"]


def test_a_node_removed_mid_batch_loses_nothing_and_fails_no_candidate(cluster_run):
    removal = cluster_run["removal"]
    assert removal["errors"] == [None] * 9  # its candidate in flight was timed on another node
    assert removal["events"] == ["node_left", "requeued"]


def test_the_search_goes_on_when_a_search_actors_node_leaves(cluster_run):
    assert cluster_run["search_after_removal"] == {"same": True, "actors": 2}


def test_a_node_added_mid_run_gets_a_runner_and_work_and_a_timing_node_only_times(cluster_run):
    addition = cluster_run["addition"]
    assert addition["errors"] == [None] * 6
    assert addition["added"] in addition["runners"] and addition["added"] in addition["nodes"]
    assert addition["events"] == ["node_joined"]
    # labelled tensorsearch.role=timing: it times, but builds and searches nothing
    assert addition["build_nodes"] and addition["added"] not in addition["build_nodes"]
    assert addition["search_actor_nodes"] and addition["added"] not in addition["search_actor_nodes"]


def test_nodes_labelled_for_timing_get_no_builds_nor_search():
    from tensorsearch.search.measure.cluster import work_nodes

    def node(name, cpus=1, role=None):
        return {
            "NodeID": name,
            "Alive": True,
            "Resources": {"CPU": cpus},
            "Labels": {"tensorsearch.role": role} if role else {},
        }

    a, b, timing, gpu_only = node("a"), node("b", 2), node("t", role="timing"), node("g", 0)
    assert work_nodes([a, b, gpu_only]) == ([a, b], {})  # no label: every node with CPUs, no Ray option
    assert work_nodes([a, timing, {**b, "Alive": False}]) == ([a], {"label_selector": {"tensorsearch.role": "!timing"}})
    assert work_nodes([timing]) == ([timing], {})  # every node times: the label is ignored


def test_resolve_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_address(None) is None and resolve_address("local") is None
    assert resolve_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert resolve_address(None) == "10.0.0.2:6379"  # as `ray job submit` sets it
    assert resolve_address("local") is None  # --address local: a private cluster all the same


def test_nodes_whose_cpu_cannot_run_the_descriptor_are_refused_once():
    emerald = hardware.load("x86-emeraldrapids")
    if HOST.arch != "x86_64" or not emerald.missing_here():
        pytest.skip("this CPU runs x86-emeraldrapids code (or is not x86): no node to refuse")
    init_ray()
    with pytest.warns(UserWarning, match=r"is not used for timing x86-emeraldrapids candidates: its CPU lacks \+"):
        with pytest.raises(RuntimeError, match="no alive node with CPUs that can run code for x86-emeraldrapids"):
            RunnerPool(emerald)


def test_an_aarch64_descriptor_runs_under_qemu_on_the_labelled_node_only(cluster_run):
    emulation = cluster_run["emulation"]
    if "skipped" in emulation:
        pytest.skip(f"cannot run aarch64 code under qemu here: {emulation['skipped']}")
    labelled = emulation["labelled"]
    assert emulation["runners"] == [[labelled, True]]  # the x86 nodes are refused, the labelled one emulates
    (good_error, good_lats, good_emulated, good_node), (wrong_error, *_, wrong_node) = emulation["results"]
    assert good_error is None and len(good_lats) == 1 and good_emulated and good_node == labelled
    assert wrong_error.startswith("wrong result: ") and "output Z" in wrong_error and wrong_node == labelled
    assert "ran under qemu only" in emulation["tune_error"] and "add an aarch64 node" in emulation["tune_error"]
    records = emulation["records"]
    assert len(records) == 4 and all(rec == [True, True, False, labelled] for rec in records), records
    # the model tuner stops such a task after its first round instead of spending the budget
    assert emulation["model_task"] == [4, "checked under qemu only: no node runs aarch64 code natively", None]


def test_node_labels_decide_which_descriptors_a_node_times():
    from tensorsearch.search.measure.cluster import timing_refusal

    x86 = {"triple": "x86_64-unknown-linux-gnu", "absent": [], "hardware": [], "emulates": [], "emulation_missing": {}}
    znver4, graviton = hardware.load("x86-znver4"), hardware.load("arm-graviton2")
    assert timing_refusal(znver4, x86) == (None, False)
    pinned = {**x86, "hardware": ["x86-emeraldrapids", "x86-cascadelake"]}
    assert timing_refusal(znver4, pinned) == (
        "its label tensorsearch.hardware=x86-emeraldrapids,x86-cascadelake does not name x86-znver4",
        False,
    )
    assert timing_refusal(graviton, x86) == ("its architecture is x86_64, the descriptor's aarch64", False)
    emulating = {**x86, "emulates": ["aarch64"], "emulation_missing": {"aarch64": None}}
    assert timing_refusal(graviton, emulating) == (None, True)
    assert timing_refusal(znver4, emulating) == (None, False)  # its own code still runs natively
    no_qemu = {**emulating, "emulation_missing": {"aarch64": "not on PATH: qemu-aarch64 (apt-get install qemu-user)"}}
    why, emulated = timing_refusal(graviton, no_qemu)
    assert not emulated and why == (
        "its architecture is x86_64, the descriptor's aarch64, and it cannot emulate aarch64 "
        "(not on PATH: qemu-aarch64 (apt-get install qemu-user))"
    )


def test_a_node_whose_cpu_is_not_the_descriptors_is_refused_unless_allowed():
    from tensorsearch.search.measure.cluster import other_cpu, timing_refusal

    znver4, graviton = hardware.load("x86-znver4"), hardware.load("arm-graviton2")
    zen = {"arch": "x86_64", "cpu": "znver4", "model": "AMD EPYC 9R14", "features": "0" * 12}
    present = sorted(f[1:] for f in znver4.features)
    node = {"triple": "x86_64-unknown-linux-gnu", "identity": zen, "present": present, "absent": []}
    node.update(hardware=[], emulates=[], emulation_missing={})
    assert timing_refusal(znver4, node) == (None, False) and other_cpu(znver4, node) is None
    xeon = {**node, "identity": {**zen, "cpu": "icelake-server", "model": "Intel(R) Xeon(R) Processor"}}
    why = "it is an x86_64 icelake-server (Intel(R) Xeon(R) Processor), not a znver4"
    assert other_cpu(znver4, xeon) == why
    assert timing_refusal(znver4, xeon) == (
        f"{why} (--allow-other-cpu, or allow_other_cpu=True, times there anyway)",
        False,
    )
    assert timing_refusal(znver4, xeon, allow_other_cpu=True) == (None, False)
    # a node that runs aarch64 code under qemu only checks it: its own CPU is no matter
    emulating = {**xeon, "emulates": ["aarch64"], "emulation_missing": {"aarch64": None}}
    assert timing_refusal(graviton, emulating) == (None, True)


def test_a_killed_driver_on_the_cluster_is_resumed_by_another(cluster_run):
    killed = cluster_run["killed_driver"]
    before, after = killed["before"], killed["after"]
    assert 6 <= len(before) < 80, len(before)  # killed mid-run
    assert killed["trials"] == len(after) == len(before) + 8 and len(set(after)) == len(after)
    assert set(before) <= set(after)  # nothing lost, nothing measured twice
    assert len(killed["nodes"]) >= 2  # timed across the cluster's nodes
