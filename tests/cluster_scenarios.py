"""Scenarios on a simulated three-node Ray cluster (``ray.cluster_utils.Cluster``), run in a
fresh process by tests/test_search_cluster.py; prints one JSON object of what it saw.

Each node has one CPU. The driver joins through ``RAY_ADDRESS`` (``init_ray()`` with no address).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings

warnings.simplefilter("ignore")


def main(work_dir: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    # the first worker says it runs aarch64 code under qemu (a node label; it is x86 all the same)
    workers = [cluster.add_node(num_cpus=1, labels=labels) for labels in ({"tensorsearch.emulates": "aarch64"}, {})]
    cluster.wait_for_nodes()
    import os

    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ["RAY_ADDRESS"] = cluster.address
    from tensorsearch import hardware, workloads
    from tensorsearch.search import Database, SearchConfig
    from tensorsearch.search.measure.cluster import init_ray
    from tensorsearch.search.measure.measurer import Measurer
    from tensorsearch.search.measure.pool import RunnerPool
    from tensorsearch.search.space.design import DesignSpace
    from tensorsearch.search.strategy.parallel import RayEvaluator
    from tensorsearch.search.tuning.scheduler import tune_model

    init_ray()  # RAY_ADDRESS: the cluster above
    out: dict = {"nodes": sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])}
    host = hardware.load("host")

    # 1. a model's tasks (here two workloads) tuned across the nodes, both at once
    wls = [workloads.make("GMM", (1, 32, 32, 32), "float32"), workloads.make("GMM", (1, 48, 32, 16), "float32")]
    config = SearchConfig(population_size=8, init_min_unmeasured=8, genetic_num_iters=1, num_trials_per_iter=6)
    result = tune_model(wls, host, 24, work_dir, config=config, concurrent_tasks=2)
    db = Database(work_dir)
    records = [r for t in result.tasks for r in db.records(t.key, db_hw_key(host))]
    out["records"] = [[r.node, r.run_start, r.run_end, r.ok, r.error] for r in records]
    out["rounds"] = result.rounds
    out["round_spans"] = result.round_spans
    evaluator = RayEvaluator(DesignSpace(wls[0].func, host))
    out["search_actor_nodes"] = evaluator.nodes()
    evaluator.close()

    # 2. a node removed while a batch is timed: its candidate is timed elsewhere; the search
    # actor that was on it is replaced by this process
    slow = workloads.make("GMM", (1, 192, 192, 192), "float32")
    space = DesignSpace(wls[0].func, host)
    evaluator = RayEvaluator(space)
    jobs = [("sample", 0, seed) for seed in range(6)]
    want = [None if c is None else c.key for c in evaluator.evaluate(jobs)]
    pool = RunnerPool(host)
    out["runners_before"] = sorted(s.node_id for s in pool.slots)
    removed = workers[1].node_id
    with Measurer(slow.func, host, workload=slow, pool=pool) as m:
        seen = threading.Event()

        def on_result(i, r):
            if r.node != removed:  # the removed node's runner is then (almost surely) mid-candidate
                seen.set()

        def remove():
            seen.wait(60)
            cluster.remove_node(workers[1])

        t = threading.Thread(target=remove)
        t.start()
        results = m.measure([slow.func] * 9, on_result=on_result)
        t.join()
        got = [None if c is None else c.key for c in evaluator.evaluate(jobs)]
        out["search_after_removal"] = {"same": got == want, "actors": len(evaluator.actors)}
        evaluator.close()
        out["removal"] = {
            "removed": removed,
            "errors": [r.error for r in results],
            "nodes": [r.node for r in results],
            "events": [e["kind"] for e in pool.events],
        }
        pool.events.clear()

        # 3. a node added between batches gets a runner and work; it is set apart for timing
        # (tensorsearch.role=timing), so no build nor search actor goes there
        added = cluster.add_node(num_cpus=1, labels={"tensorsearch.role": "timing"})
        cluster.wait_for_nodes()
        results = m.measure([slow.func] * 6)
        searchers = RayEvaluator(space)
        out["addition"] = {
            "added": added.node_id,
            "errors": [r.error for r in results],
            "nodes": [r.node for r in results],
            "runners": sorted(s.node_id for s in pool.slots),
            "events": [e["kind"] for e in pool.events],
            "build_nodes": sorted({b.node for b in m._build_all([slow.func] * 6)}),
            "search_actor_nodes": sorted(set(searchers.nodes())),
        }
        searchers.close()
    pool.close()
    out["emulation"] = emulation(workers[0].node_id, work_dir)
    out["killed_driver"] = killed_driver(cluster.address, work_dir + "/killed")
    print("RESULT " + json.dumps(out))
    ray.shutdown()
    cluster.shutdown()


def emulation(labelled: str, work_dir: str) -> dict:
    """4. An aarch64 descriptor on this x86 cluster: built on any node, run under qemu on the
    node labelled tensorsearch.emulates=aarch64 only, checked, its timings flagged emulated."""
    from test_search_measure import F32, PLUS_ONE  # a 64^3 GEMM, and a function computing X @ Y + 1

    from tensorsearch.runtime.cross import aarch64_tools_available
    from tensorsearch.search import Database, SearchConfig, TuneError, hardware_key, tune
    from tensorsearch.search.measure.measurer import Measurer
    from tensorsearch.search.tuning.scheduler import tune_model

    reason = aarch64_tools_available()
    if reason is not None:
        return {"skipped": reason}
    with Measurer(None, "arm-graviton2", workload=F32) as m:
        runners = [(s.node_id, s.emulated) for s in m.pool.slots]
        results = m.measure([F32.func, PLUS_ONE])
    config = SearchConfig(population_size=8, init_min_unmeasured=8, genetic_num_iters=0, num_trials_per_iter=4)
    try:
        tune(F32, "arm-graviton2", 4, work_dir + "/arm", config=config, workers=0)
        error = None
    except TuneError as e:
        error = str(e)
    model = tune_model([F32], "arm-graviton2", 8, work_dir + "/arm-model", config=config, workers=0)
    by_workload = Database(work_dir + "/arm").hardware_records(hardware_key("arm-graviton2"))
    records = [r for rs in by_workload.values() for r in rs]
    return {
        "labelled": labelled,
        "runners": runners,
        "results": [[r.error, list(r.latencies), r.emulated, r.node] for r in results],
        "tune_error": error,
        "records": [[r.emulated, r.ok, r.ranks, r.node] for r in records],
        "model_task": [model.tasks[0].trials, model.tasks[0].status, model.estimated_latency],
    }


DRIVER = """
import sys
from tensorsearch import workloads
from tensorsearch.search import SearchConfig
from tensorsearch.search.tuning.scheduler import tune_model
cfg = SearchConfig(population_size=8, init_min_unmeasured=8, genetic_num_iters=0, num_trials_per_iter=4)
wls = [workloads.make("GMM", (1, 32, 32, 32), "float32"), workloads.make("GMM", (1, 16, 32, 32), "float32")]
tune_model(wls, "host", 80, sys.argv[1], seed=5, config=cfg)
"""


def killed_driver(address: str, work_dir: str) -> dict:
    """5. A driver joined to the cluster (RAY_ADDRESS) is killed mid-run; this process resumes its
    work dir: every record kept, none measured twice, the budget met."""
    import os
    import signal
    import subprocess
    from pathlib import Path

    from tensorsearch import hardware, workloads
    from tensorsearch.search import Database, SearchConfig, hardware_key, workload_key
    from tensorsearch.search.tuning.scheduler import tune_model

    records_file = Path(work_dir) / "database" / "tuning_records.jsonl"
    env = {**os.environ, "RAY_ADDRESS": address}
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, work_dir], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if records_file.exists() and len(records_file.read_text().splitlines()) >= 6:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = [json.loads(line)["candidate_key"] for line in records_file.read_text().splitlines() if line.strip()]
    wls = [workloads.make("GMM", (1, 32, 32, 32), "float32"), workloads.make("GMM", (1, 16, 32, 32), "float32")]
    config = SearchConfig(population_size=8, init_min_unmeasured=8, genetic_num_iters=0, num_trials_per_iter=4)
    host = hardware.load("host")
    result = tune_model(wls, host, len(before) + 8, work_dir, seed=5, config=config)
    db = Database(work_dir)
    keys = [r.candidate_key for wl in wls for r in db.records(workload_key(wl.func), hardware_key(host))]
    nodes = {r.node for wl in wls for r in db.records(workload_key(wl.func), hardware_key(host))}
    return {"before": before, "after": keys, "trials": result.trials, "nodes": sorted(n for n in nodes if n)}


def db_hw_key(hw):
    from tensorsearch.search import hardware_key

    return hardware_key(hw)


if __name__ == "__main__":
    t0 = time.time()
    main(sys.argv[1])
    print(f"scenario seconds {time.time() - t0:.1f}", file=sys.stderr)
