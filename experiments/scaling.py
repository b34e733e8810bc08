"""How measurement scales with the nodes of a Ray cluster: builds and runs replaced by stand-ins.

    python experiments/scaling.py                         # 1, 2, 4 and 8 simulated nodes
    python experiments/scaling.py --nodes 1,8 --build-s 0.5 --run-s 0.25 --batches 2
    python experiments/scaling.py --nodes 8 --search-s 3 --concurrent 1,2,4   # tune_model's concurrent_tasks

Each point is a fresh ``ray.cluster_utils.Cluster`` of N one-CPU nodes on this machine. The
measuring pipeline is ours (:class:`~tensorsearch.search.measure.measurer.Measurer`: builds as Ray tasks,
at most one per cluster CPU in flight; one runner per node, one candidate at a time, checked and
then timed; the runner pool refreshed per batch), but a build is a Ray task that sleeps
``--build-s`` and a runner's check and timing sleep ``--run-s`` together, so the simulated nodes
(which share this machine's two cores) do not compete for CPU. ``--batches`` batches of
``--batch`` candidates (the tuner's round size) are measured after one more batch that warms the
cluster up (Ray starts a worker process on each node for the first builds: at 8 nodes on two
cores the first batch's builds took 7.9 s against 4.7 s for the next; a tuning run pays that
once, in its first round); trials per second is the measured candidates over their wall time, and
the cold batch's seconds are reported beside it. Linear scaling is N times the one-node rate; the ratio
shows what Ray's scheduling and our driver's dispatch cost as nodes are added (target: at least
0.8 of linear at 8 nodes). The search (proposing candidates) is left out: on two real cores it
cannot scale with simulated nodes.

``--search-s S --concurrent K,...`` measures what ``tune_model(concurrent_tasks=K)`` is for: each
batch becomes a round, a search stand-in (the driver sleeps ``S`` seconds, while the cluster
would otherwise idle) then the batch measured, and K threads run such rounds at once, each with
its own Measurer and all sharing one runner pool, as the model scheduler's concurrent tasks do.
A point is then (nodes, K), its candidates K x batches x batch.

Writes scaling.csv, scaling.md and scaling.png to the out dir (default results/scaling/,
git-ignored; experiments/outputs.py).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
import warnings
from pathlib import Path

import outputs

FIELDS = [
    "nodes",
    "concurrent",
    "cold_batch_s",
    "candidates",
    "seconds",
    "trials_per_s",
    "linear_trials_per_s",
    "of_linear",
    "errors",
]


def _standins(build_s: float, run_s: float):
    """A build task and a runner class that sleep instead of compiling and running."""
    import ray

    from tensorsearch.search.measure.results import BuildResult
    from tensorsearch.search.measure.runner import Runner as MeasureRunner

    def build(func, target, niceness=None):
        time.sleep(build_s)
        return BuildResult(None, build_s, sidecar="{}")

    class Runner(MeasureRunner):
        def load_and_check(
            self,
            binary,
            is_object,
            sidecar,
            check,
            inputs,
            out_positions,
            expected,
            checker,
            timeout_s,
            prepack=None,
            cold=(),
        ):
            self.started = time.time()
            time.sleep(run_s / 5)
            return self._reply(error=None, first=run_s / 5)

        def time(self, number, repeat, min_repeat_ms, flush_cache=False, retake_below=None):
            time.sleep(run_s * 4 / 5)
            return self._reply(error=None, latencies=[run_s] * repeat)

    remote_build = ray.remote(num_cpus=1, max_retries=2)(build)
    remote_runner = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(Runner)
    return remote_build, remote_runner


def _rounds(measurers: list, funcs: list, rounds: int, search_s: float) -> list:
    """``rounds`` rounds (a search stand-in, then a batch) in a thread per measurer, at once."""
    import threading

    results: list = []

    def work(m) -> None:
        for _ in range(rounds):
            time.sleep(search_s)
            results.extend(m.measure(funcs))

    threads = [threading.Thread(target=work, args=(m,)) for m in measurers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def point(nodes: int, concurrent: int, args) -> dict:
    """Measure ``args.batches`` rounds in each of ``concurrent`` threads on a fresh cluster of
    ``nodes`` one-CPU nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from tensorsearch import workloads
    from tensorsearch.search.measure.builder import RayBuilder
    from tensorsearch.search.measure.cluster import init_ray
    from tensorsearch.search.measure.measurer import Measurer
    from tensorsearch.search.measure.pool import RunnerPool

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        init_ray(cluster.address)
        remote_build, remote_runner = _standins(args.build_s, args.run_s)
        builder = RayBuilder(remote_build)  # what the Measurers build with

        class StandinPool(RunnerPool):
            actor_class = remote_runner  # what the pool starts on each node

        wl = workloads.make("GMM", (1, 16, 16, 16), "float32")
        funcs = [wl.func] * args.batch
        pool = StandinPool("host")
        with Measurer(None, "host", workload=wl, number=1, repeat=1, timeout_s=60.0, pool=pool, builder=builder) as m:
            assert len(m.pool.slots) == nodes, f"{len(m.pool.slots)} runners on {nodes} nodes"
            t0 = time.perf_counter()
            cold = m.measure(funcs)
            cold_s = time.perf_counter() - t0
            more = [
                Measurer(None, "host", workload=wl, number=1, repeat=1, timeout_s=60.0, pool=pool, builder=builder)
                for _ in range(concurrent - 1)
            ]
            t0 = time.perf_counter()
            results = _rounds([m, *more], funcs, args.batches, args.search_s)
            seconds = time.perf_counter() - t0
        pool.close()  # given to the Measurers, so theirs to close no more
    finally:
        ray.shutdown()
        cluster.shutdown()
    count = len(results)
    one_node = 1.0 / (args.build_s + args.run_s)
    rate = count / seconds
    return {
        "nodes": nodes,
        "concurrent": concurrent,
        "cold_batch_s": round(cold_s, 2),
        "candidates": count,
        "seconds": round(seconds, 2),
        "trials_per_s": round(rate, 3),
        "linear_trials_per_s": round(nodes * one_node, 3),
        "of_linear": round(rate / (nodes * one_node), 3),
        "errors": sum(1 for r in cold + results if not r.ok),
    }


def write(rows: list[dict], out: Path, cmd: str, args) -> list[str]:
    from tensorsearch.search.report import format_markdown_table

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scaling.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    lines = [
        "# Measurement throughput against cluster size (stand-in builds and runs)",
        "",
        f"`{cmd}`; builds {args.build_s} s, runs {args.run_s} s, {args.batches} x {args.batch} candidates a point "
        f"(a thread) after a warm-up batch, search stand-in {args.search_s} s a round; "
        f"{os.cpu_count()} CPUs here, nodes simulated with ray.cluster_utils.Cluster.",
        "",
        format_markdown_table(
            [[r[k] for k in FIELDS] for r in rows],
            [
                "nodes",
                "concurrent rounds",
                "cold first batch s",
                "candidates",
                "seconds",
                "trials/s",
                "linear trials/s",
                "of linear",
                "failed",
            ],
        ),
    ]
    (out / "scaling.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ns = sorted({r["nodes"] for r in rows})
    if len(ns) == 1 < len(rows):  # one cluster size: trials/s against rounds at once
        ks = [r["concurrent"] for r in rows]
        ax.plot(ks, [r["trials_per_s"] for r in rows], "o-", label="measured")
        ax.axhline(rows[0]["linear_trials_per_s"], ls="--", color="gray", label="linear (builds and runs only)")
        ax.set_xlabel(f"rounds at once ({ns[0]} nodes)")
        ax.set_xticks(ks)
        ax.set_ylim(bottom=0)
    else:
        for k in sorted({r["concurrent"] for r in rows}):
            mine = [r for r in rows if r["concurrent"] == k]
            label = "measured" if k == 1 else f"{k} rounds at once"
            ax.plot([r["nodes"] for r in mine], [r["trials_per_s"] for r in mine], "o-", label=label)
        linear = {r["nodes"]: r["linear_trials_per_s"] for r in rows}
        ax.plot(ns, [linear[n] for n in ns], "--", color="gray", label="linear")
        ax.set_xlabel("nodes")
        ax.set_xticks(ns)
    ax.set_ylabel("trials per second")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=120)
    plt.close(fig)
    return ["scaling.csv", "scaling.md", "scaling.png"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1,2,4,8", help="node counts, comma-separated (default 1,2,4,8)")
    parser.add_argument("--build-s", type=float, default=0.5, help="seconds a stand-in build takes (default 0.5)")
    parser.add_argument("--run-s", type=float, default=0.25, help="seconds a stand-in check and timing take (0.25)")
    parser.add_argument("--batch", type=int, default=64, help="candidates a batch (default 64, the tuner's round)")
    parser.add_argument("--batches", type=int, default=2, help="batches a point (default 2)")
    parser.add_argument("--search-s", type=float, default=0.0, help="seconds a search stand-in takes a round (0)")
    parser.add_argument("--concurrent", default="1", help="rounds at once (threads), comma-separated (default 1)")
    outputs.add_arguments(parser, "scaling")
    args = parser.parse_args()
    out = outputs.outputs(args, "scaling")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.pop("RAY_ADDRESS", None)
    warnings.simplefilter("ignore")
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        for k in (int(x) for x in args.concurrent.split(",")):
            rows.append(point(n, k, args))
            r = rows[-1]
            print(f"{n} node(s), {k} at once: {r['trials_per_s']} trials/s, {r['of_linear']} of linear", flush=True)
    out.wrote(write(rows, out.out, " ".join(["python", *sys.argv]), args))


if __name__ == "__main__":
    main()
