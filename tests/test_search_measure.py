"""Measuring candidates on Ray: correct ones are timed, wrong/hanging/crashing/unbuildable ones are
recorded as failed and the batch goes on. One Ray session (an embedded local cluster) for the file."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from cuda_util import gpu_missing, needs_nvcc

from tensorsearch import hardware, te, workloads
from tensorsearch.schedule import Schedule
from tensorsearch.script import parse
from tensorsearch.search.measure.builder import RayBuilder
from tensorsearch.search.measure.cluster import init_ray
from tensorsearch.search.measure.config import MeasureConfig, measure_config
from tensorsearch.search.measure.measurer import Measurer
from tensorsearch.search.measure.noise import DISTURBED
from tensorsearch.search.measure.results import MeasureResult
from tensorsearch.transform import mark_layout_free

HW = "host"  # the descriptor of this CPU: its code runs here
F32 = workloads.make("GMM", (1, 64, 64, 64), "float32")
I8 = workloads.make("GMM", (1, 64, 64, 64), "int8")
SIG = 'X: T.Buffer((1, 64, 64), "float32"), Y: T.Buffer((1, 64, 64), "float32"), Z: T.Buffer((1, 64, 64), "float32")'

# computes only the first 32 rows of Z: the rest keeps whatever the output buffer held
HALF = parse(f"""
@T.prim_func
def main({SIG}):
    for bb, i, j, k in T.grid(1, 32, 64, 64):
        with T.block("Z"):
            v_bb, v_i, v_j, v_k = T.axis.remap("SSSR", [bb, i, j, k])
            T.reads(X[v_bb, v_i, v_k], Y[v_bb, v_k, v_j])
            T.writes(Z[v_bb, v_i, v_j])
            with T.init():
                Z[v_bb, v_i, v_j] = T.float32(0.0)
            Z[v_bb, v_i, v_j] = Z[v_bb, v_i, v_j] + X[v_bb, v_i, v_k] * Y[v_bb, v_k, v_j]
""")

# the right signature, another function: Z = X @ Y + 1
PLUS_ONE = parse(f"""
@T.prim_func
def main({SIG}):
    for bb, i, j, k in T.grid(1, 64, 64, 64):
        with T.block("Z"):
            v_bb, v_i, v_j, v_k = T.axis.remap("SSSR", [bb, i, j, k])
            T.reads(X[v_bb, v_i, v_k], Y[v_bb, v_k, v_j])
            T.writes(Z[v_bb, v_i, v_j])
            with T.init():
                Z[v_bb, v_i, v_j] = T.float32(1.0)
            Z[v_bb, v_i, v_j] = Z[v_bb, v_i, v_j] + X[v_bb, v_i, v_k] * Y[v_bb, v_k, v_j]
""")

# 2**40 dependent additions: hours
HANG = parse(f"""
@T.prim_func
def main({SIG}):
    for i in T.serial(T.int64(1099511627776)):
        Z[0, 0, 0] = Z[0, 0, 0] + T.float32(1.0)
""")

# llvm.trap: an illegal instruction (SIGILL) kills the process running it
TRAP = parse(f"""
@T.prim_func
def main({SIG}):
    Z[0, 0, 0] = T.float32(1.0)
    T.evaluate(T.call("llvm.trap", dtype="handle"))
""")

# stores 400 MB apart, far outside Z: a segmentation fault (buffer accesses are not bounds-checked)
OUT_OF_BOUNDS = parse(f"""
@T.prim_func
def main({SIG}):
    for i in T.serial(64):
        Z[0, 0, i * 100000000] = T.float32(1.0)
""")

# a GPU thread binding cannot be lowered for a CPU
UNBUILDABLE = parse(f"""
@T.prim_func
def main({SIG}):
    for i in T.thread_binding(64, thread="threadIdx.x"):
        for j in T.serial(64):
            Z[0, i, j] = X[0, i, j]
""")


def tiled(func):
    """Split j by 16 under k, parallel i, vectorized inner j: another correct program."""
    sch = Schedule(func)
    b = sch.get_block("Z")
    _, i, j, k = sch.get_loops(b)
    jo, ji = sch.split(j, [None, 16])
    sch.reorder([jo, k, ji])
    sch.parallel(i)
    sch.decompose_reduction(b, jo)
    sch.vectorize(ji)
    return sch.func


def assert_ok(r: MeasureResult, repeat=3):
    """A timed result: ``repeat`` samples, twice as many when the reference says the host was busy."""
    assert r.error is None, r.error
    timings = 2 if r.disturbance is not None and r.disturbance > DISTURBED else 1
    assert r.ok and len(r.latencies) in (repeat, 2 * repeat) and len(r.latencies) >= timings * repeat
    assert all(x > 0 and math.isfinite(x) for x in r.latencies)
    assert r.latency == min(r.latencies) and 0 < r.latency < math.inf and r.build_seconds > 0
    assert r.disturbance is not None and r.disturbance >= 1.0


@pytest.fixture(scope="module")
def f32():
    init_ray()
    with Measurer(F32.func, HW, workload=F32, timeout_s=2.0) as m:
        yield m


@pytest.mark.slow
def test_init_ray_is_idempotent(f32):
    import ray

    init_ray()
    assert ray.is_initialized()


@pytest.mark.slow
def test_ray_workers_run_at_the_drivers_niceness(f32):
    """Ray starts its workers at niceness 15 unless told otherwise: beside a busy neighbour the
    builds, the search and the timing got ~2% of a core. Every one runs at the command's."""
    import ray

    from tensorsearch.search.space.design import DesignSpace
    from tensorsearch.search.strategy.parallel import RayEvaluator

    driver = os.nice(0)
    ready = [ray.get(slot.actor.ready.remote()) for slot in f32.pool.slots]
    assert ready and all(r["niceness"] == driver and r["priority"] is None for r in ready), ready
    assert ray.get(ray.remote(num_cpus=1)(lambda: os.nice(0)).remote()) == driver  # a build task's worker
    evaluator = RayEvaluator(DesignSpace(F32.func, hardware.load(HW)), workers=1)
    try:
        assert ray.get([a.niceness.remote() for a in evaluator.actors]) == [driver]
    finally:
        evaluator.close()
    results = f32.measure([F32.func])  # the result names the CPU of the node that timed it
    assert results[0].measured_on == hardware.host_identity()


def test_a_worker_that_may_not_take_the_drivers_niceness_says_why(monkeypatch):
    import errno

    from tensorsearch.search.measure import cluster as measure

    def refuse(which, who, value):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(measure.os, "setpriority", refuse)
    now = os.getpriority(os.PRIO_PROCESS, 0)
    assert measure.take_niceness(now) is None and measure.take_niceness(None) is None
    assert measure.take_niceness(now - 1) == (
        f"its Ray workers run at niceness {now} and may not change it to the driver's {now - 1} "
        "(Permission denied: lowering it takes root or CAP_SYS_NICE)"
    )


@pytest.mark.slow
def test_correct_float32_candidates(f32):
    results = f32.measure([F32.func, tiled(F32.func)])
    for r in results:
        assert_ok(r)


@pytest.mark.slow
def test_retime_runs_every_other_round_in_reverse(f32, monkeypatch):
    """Finalists re-timed in rounds: per candidate, each round's latencies; a failed one gets
    empty rounds. Every other round runs them in reverse order, so none always runs first; the
    fastest candidates measured are not built again."""
    from tensorsearch.search.space.design import candidate_key

    funcs = [F32.func, tiled(F32.func), UNBUILDABLE]
    assert all(r.ok for r in f32.measure(funcs[:2]))
    order, run, built = [], f32._run, []

    class Recording(RayBuilder):  # the Measurer's builder seam: what it builds
        def build(self, funcs, target, timeout_s, pool):
            built.extend(funcs)
            return super().build(funcs, target, timeout_s, pool)

    monkeypatch.setattr(f32, "_run", lambda builds, keys: order.append(list(keys)) or run(builds, keys))
    monkeypatch.setattr(f32, "builder", Recording())
    rounds = f32.retime(funcs, 3)
    keys = [candidate_key(f) for f in funcs]
    assert order == [keys, keys[::-1], keys]
    assert built == [UNBUILDABLE]  # the two measured are among the fastest: their builds were kept
    for per_round in rounds[:2]:
        assert len(per_round) == 3 and all(len(r) in (3, 6) and min(r) > 0 for r in per_round)
    assert rounds[2] == [[], [], []]


@pytest.mark.slow
def test_the_reference_sees_a_busy_host(f32):
    """Beside two spinning processes the runner's reference kernel runs slower than it has run
    quietly: the timing is taken twice, and the result says it was disturbed."""
    f32.measure([tiled(F32.func)])  # the reference's quiet time, if none was known
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        busy = f32.measure([tiled(F32.func)])[0]
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert_ok(busy)
    assert busy.disturbance > DISTURBED and len(busy.latencies) == 6


@pytest.mark.slow
def test_a_candidate_slower_than_slow_after_keeps_its_check_run(f32):
    # slow_after=0: every first run is "slow", so each keeps one latency, that of its check run
    fast, slow = f32.measure([F32.func, tiled(F32.func)], slow_after=0.0)
    for r in (fast, slow):
        assert r.ok and len(r.latencies) == 1 and r.latency > 0
    # a generous cutoff times as usual
    assert_ok(f32.measure([tiled(F32.func)], slow_after=60.0)[0])


@pytest.mark.slow
def test_flush_cache_times_one_call_after_each_flush(f32):
    from tensorsearch.search.measure.runner import FLUSHED_REPEATS

    with Measurer(None, HW, workload=F32, timeout_s=5.0, flush_cache=True, pool=f32.pool) as m:
        r = m.measure([tiled(F32.func)])[0]
    assert_ok(r, repeat=FLUSHED_REPEATS)  # one call a repeat, each after a flush


def heavy_packing_gemm():
    """Z = X @ P where P[k, j] = 64 x the sum of W's row k is computed from W alone, slowly (a
    4096-long reduction per element, reading W around the row so that no compiler folds it):
    the stand-in for a weight's re-layout, a stage that reads only a constant."""
    x = te.placeholder((64, 64), "float32", name="X")
    w = te.placeholder((64, 64), "float32", name="W")
    r = te.reduce_axis((0, 4096), name="r")
    p = te.compute((64, 64), lambda k, j: te.sum(w[k, te.floormod(j + r, 64)], axis=r), name="P")
    k = te.reduce_axis((0, 64), name="k")
    z = te.compute((64, 64), lambda i, j: te.sum(x[i, k] * p[k, j], axis=k), name="Z")
    return te.create_prim_func([x, w, z])


@pytest.mark.slow
def test_stages_of_constants_alone_run_once_before_timing(f32):
    """With W marked layout-free (a model's weight), P's stage is cut out into a prepack the
    runner runs once, untimed; the candidate is still checked against the whole function."""
    func = Schedule(heavy_packing_gemm()).func
    marked = mark_layout_free(func, [1])
    with Measurer(marked, HW, timeout_s=10.0, pool=f32.pool) as m:
        fast = m.measure([marked])[0]
    with Measurer(func, HW, timeout_s=10.0, pool=f32.pool) as m:
        slow = m.measure([func])[0]
    assert_ok(fast)
    assert_ok(slow)
    assert slow.latency > 20 * fast.latency, (slow.latency, fast.latency)


def test_an_integer_rounded_from_floats_may_land_one_off_in_a_few_elements():
    """A quantize after float arithmetic rounds some value near a .5 the other way when a candidate
    sums in another order: 1 off in at most 0.1% of the elements passes, and only then; integer
    arithmetic stays exact."""
    from tensorsearch.search.measure.check import ToleranceCheck, computes_in_float

    want = np.random.default_rng(4).integers(-128, 128, size=4096).astype(np.int8)
    flip = want.copy()
    flip[[7, 900]] += 1
    check = ToleranceCheck(["q"], 1.0, float_math=True)
    check([flip], [want])
    for wrong in (np.where(np.arange(4096) < 5, want + 1, want).astype(np.int8), want - 2 * (want == want[0])):
        with pytest.raises(AssertionError, match="output q"):
            check([wrong], [want])
    with pytest.raises(AssertionError, match="output q"):
        ToleranceCheck(["q"], 1.0)([flip], [want])
    assert computes_in_float(F32.func) and not computes_in_float(I8.func)


@pytest.mark.slow
def test_correct_int8_candidates(f32):
    with Measurer(None, HW, workload=I8, timeout_s=5.0, repeat=2) as m:
        for r in m.measure([I8.func, tiled(I8.func)]):
            assert_ok(r, repeat=2)


@pytest.mark.slow
def test_wrong_results(f32):
    half, plus_one = f32.measure([HALF, PLUS_ONE])
    for r in (half, plus_one):
        assert not r.ok and r.latencies == () and r.latency == math.inf
        assert r.error.startswith("wrong result: ") and "output Z" in r.error


@pytest.mark.slow
def test_bare_function_reference(f32):
    """Without a workload the reference is the unscheduled function compiled as is."""
    with Measurer(F32.func, HW, timeout_s=5.0) as m:
        good, tiled_ok, half = m.measure([F32.func, tiled(F32.func), HALF])
    assert_ok(good)
    assert_ok(tiled_ok)
    assert half.error.startswith("wrong result: ") and "output Z" in half.error


@pytest.mark.slow
def test_hang_crash_and_build_error_do_not_stop_the_batch(f32):
    batch = [HANG, F32.func, TRAP, tiled(F32.func), UNBUILDABLE, HALF, OUT_OF_BOUNDS, F32.func]
    hang, good1, trap, good2, unbuildable, half, segv, good3 = f32.measure(batch)
    assert hang.error == "run: timed out after 2 s"
    assert trap.error == "run: crashed (Illegal instruction)"
    assert segv.error == "run: crashed (Segmentation fault)"
    assert unbuildable.error.startswith("build: ") and "threadIdx.x" in unbuildable.error
    assert half.error.startswith("wrong result: ")
    for r in (good1, good2, good3):
        assert_ok(r)


@pytest.mark.slow
def test_two_threads_measure_through_one_pool_taking_turns(f32):
    """The model scheduler's concurrent tasks: two batches timed at once through one runner pool.
    The node times one candidate at a time, the batches take turns, and a candidate that crashes
    the runner fails in its own batch only."""
    import itertools
    import threading

    from tensorsearch.search.space.design import candidate_key

    with Measurer(None, HW, workload=I8, timeout_s=5.0, pool=f32.pool) as i8:
        batches = {
            "f32": (f32, [F32.func, tiled(F32.func), TRAP, F32.func, tiled(F32.func)]),
            "i8": (i8, [I8.func, tiled(I8.func), I8.func, tiled(I8.func)]),
        }
        built = {
            name: (m, m._build_all(funcs), [candidate_key(f) for f in funcs]) for name, (m, funcs) in batches.items()
        }
        results: dict[str, list[MeasureResult]] = {}
        threads = [
            threading.Thread(target=lambda n=name, m=m, b=b, k=k: results.__setitem__(n, m._run(b, k)))
            for name, (m, b, k) in built.items()
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    f, i = results["f32"], results["i8"]
    assert f[2].error == "run: crashed (Illegal instruction)"
    for r in f[:2] + f[3:] + i:
        assert_ok(r)
    windows = sorted((r.run_start, r.run_end, name) for name, rs in results.items() for r in rs if r.ok)
    for (_, end, _), (start, _, _) in itertools.pairwise(windows):
        assert start >= end  # one candidate at a time on the node
    order = [name for *_, name in windows]
    assert order not in (sorted(order), sorted(order, reverse=True)), order  # the batches took turns


def test_a_measure_config_is_made_of_the_keyword_arguments_or_given_not_both():
    assert measure_config(None, repeat=5, timeout_s=2) == MeasureConfig(repeat=5, timeout_s=2.0)
    given = MeasureConfig(number=2, flush_cache=True)
    assert measure_config(given, repeat=3, timeout_s=10.0) is given  # the defaults: no conflict
    with pytest.raises(ValueError, match="keyword arguments repeat, not both"):
        measure_config(given, repeat=5)
    with pytest.raises(ValueError, match="number and repeat must be at least 1"):
        MeasureConfig(repeat=0)


@pytest.mark.slow
def test_build_timeout(f32):
    config = f32.config
    f32.config = dataclasses.replace(config, build_timeout_s=0.001)
    try:
        (r,) = f32.measure([tiled(F32.func)])
    finally:
        f32.config = config
    assert r.error == "build timed out after 0.001 s" and not r.ok
    assert_ok(f32.measure([F32.func])[0])


GPU_MEASURER = """
import json, random, sys, warnings
warnings.simplefilter("ignore")
import ray
ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
from tensorsearch import workloads
from tensorsearch.search.measure.measurer import Measurer
from tensorsearch.search.space.design import DesignSpace
wl = workloads.make("GMM", (1, 64, 64, 64), "float16")
from tensorsearch import hardware
space = DesignSpace(wl.func, hardware.load("nvidia-sm86"))
cand = next(c for c in (space.sample(random.Random(s)) for s in range(20)) if c is not None)
with Measurer(wl.func, "nvidia-sm86", workload=wl) as m:
    print(json.dumps([len(m._slots), m._slots[0].gpu, [r.error for r in m.measure([cand.func])]]))
"""


@needs_nvcc
@pytest.mark.slow
def test_gpu_candidates_are_built_in_tasks_and_run_by_one_runner_per_gpu(tmp_path):
    """A cluster with one (here: declared) GPU: the candidate is built to a cubin in a Ray task
    and sent to the runner that holds the GPU, which loads it as a CUDA module; where it cannot
    run (no pycuda, no device) that is the candidate's one-line error, and nothing raises."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-c", GPU_MEASURER], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    slots, gpu, errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (slots, gpu) == (1, True)
    if gpu_missing() is not None:
        assert errors[0].startswith("run: CudaRuntimeError: running a CUDA module needs "), errors
    else:
        assert errors == [None]
