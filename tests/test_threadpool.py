"""The thread pool that runs parallel loops (codegen/threadpool.py): every task runs once, the
caller never waits for a worker that has not started, thread counts are honoured, small loops stay
on the caller, and the pool survives fork and concurrent callers."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorsearch.codegen import llvm as cg
from tensorsearch.codegen import parallel
from tensorsearch.codegen.threadpool import LAUNCH_SYMBOL
from tensorsearch.runtime import build, load_threadpool
from tensorsearch.runtime.module import host_triple
from tensorsearch.script import parse
from tensorsearch.target import resolve

# task t of n records the thread that ran it (pthread_self) in slot t and spins %spin iterations
# (the closure: { i64 spin, [64 x i64] thread }); @stall, a signal handler, counts itself in @stalled, sleeps 2 s and sets @stall_over
HARNESS_IR = f"""
declare void @{LAUNCH_SYMBOL}(ptr, ptr, i32)
declare i64 @pthread_self()
declare i32 @usleep(i32)
@stall_over = global i32 0
@stalled = global i32 0

define internal void @task(ptr %cl, i32 %t, i32 %n) {{
entry:
  %self = call i64 @pthread_self()
  %t1 = add i32 %t, 1
  %slot = getelementptr i64, ptr %cl, i32 %t1
  store i64 %self, ptr %slot
  %spin = load i64, ptr %cl
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %i1 = add i64 %i, 1
  call void asm sideeffect "", ""()
  %more = icmp ult i64 %i1, %spin
  br i1 %more, label %loop, label %out
out:
  ret void
}}

define void @launch(ptr %cl, i32 %n) {{
  call void @{LAUNCH_SYMBOL}(ptr @task, ptr %cl, i32 %n)
  ret void
}}

define void @stall(i32 %sig) {{
  %s = atomicrmw add ptr @stalled, i32 1 seq_cst
  %r = call i32 @usleep(i32 2000000)
  store atomic i32 1, ptr @stall_over seq_cst, align 4
  ret void
}}
"""


class Harness:
    def __init__(self) -> None:
        load_threadpool()
        libc = ctypes.CDLL(None)
        for name in ("pthread_self", "usleep"):
            llvm.add_symbol(name, ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)
        mod = llvm.parse_assembly(HARNESS_IR)
        mod.triple = host_triple()
        self.engine = llvm.create_mcjit_compiler(mod, cg.target_machine(resolve(None), jit=True))
        self.engine.finalize_object()
        self._launch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(
            self.engine.get_function_address("launch")
        )
        self.stall_address = self.engine.get_function_address("stall")
        self.stall_over = ctypes.c_int32.from_address(self.engine.get_global_value_address("stall_over"))
        self.stalled = ctypes.c_int32.from_address(self.engine.get_global_value_address("stalled"))

    def launch(self, tasks: int, spin: int = 1000) -> list[int]:
        """The thread that ran each task (pthread_self), 0 for a task that did not run."""
        closure = (ctypes.c_uint64 * 65)(spin)
        self._launch(ctypes.addressof(closure), tasks)
        return list(closure[1 : tasks + 1])


@pytest.fixture(scope="module")
def harness() -> Harness:
    return Harness()


@pytest.mark.parametrize("tasks", [2, 3, 8, 64])
def test_every_task_runs_once(harness, tasks):
    for _ in range(20):
        ran = harness.launch(tasks, spin=200)
        assert all(ran), ran


def test_one_task_runs_on_the_caller(harness):
    assert harness.launch(1) == [threading.get_ident()]


@pytest.mark.slow
def test_a_call_completes_while_the_workers_are_stalled(harness):
    """SIGUSR1 holds every other thread of the process in a 2 s signal handler: launches and a
    compiled parallel kernel still finish, correct, with the caller running every task, before
    any worker is back."""
    harness.launch(4, spin=200_000)  # the pool has workers
    libc = ctypes.CDLL(None)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    old = libc.signal(signal.SIGUSR1, harness.stall_address)
    others = [int(t) for t in os.listdir("/proc/self/task") if int(t) != threading.get_native_id()]
    assert others
    try:
        harness.stall_over.value = harness.stalled.value = 0
        for tid in others:
            libc.tgkill(os.getpid(), tid, signal.SIGUSR1)
        for _ in range(1000):  # each has entered the handler
            if harness.stalled.value == len(others):
                break
            threading.Event().wait(0.01)
        assert harness.stalled.value == len(others), "a thread did not take the signal in 10 s"
        for _ in range(5):
            assert harness.launch(2, spin=100_000) == [threading.get_ident()] * 2
        mod = build(parse(GEMM))
        mod.num_threads = 2
        a, b = (np.random.default_rng(3).standard_normal((64, 64)).astype("float32") for _ in range(2))
        c = np.zeros((64, 64), "float32")
        mod(a.ravel(), b.ravel(), c.ravel())
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
        assert harness.stall_over.value == 0, "the calls waited for a stalled worker"
    finally:
        while harness.stall_over.value == 0:
            threading.Event().wait(0.05)
        threading.Event().wait(0.2)  # the other handlers end too
        libc.signal(signal.SIGUSR1, old)
    assert all(harness.launch(4, spin=200))


GEMM = """
@T.prim_func
def gemm(A: T.Buffer((4096,), "float32"), B: T.Buffer((4096,), "float32"), C: T.Buffer((4096,), "float32")):
    for i in T.parallel(64):
        for j in T.serial(64):
            C[i * 64 + j] = T.float32(0.0)
            for k in T.serial(64):
                C[i * 64 + j] = C[i * 64 + j] + A[i * 64 + k] * B[k * 64 + j]
"""

SMALL = """
@T.prim_func
def small(A: T.Buffer((64,), "float32")):
    for i in T.parallel(64):
        A[i] = A[i] + T.float32(1.0)
"""


def _in_a_fresh_process(code: str, **env: str) -> str:
    """Run ``code`` (after the shared set-up below) in a new Python; its stdout."""
    setup = textwrap.dedent(
        f"""
        import os, warnings
        import numpy as np
        warnings.simplefilter("ignore")
        from tensorsearch.runtime import build
        from tensorsearch.script import parse
        GEMM = {GEMM!r}
        SMALL = {SMALL!r}
        def threads():
            return len(os.listdir("/proc/self/task"))
        def run(src, n, threads_set=None):
            mod = build(parse(src))
            if threads_set is not None:
                mod.num_threads = threads_set
            args = [np.ones(n, "float32") for _ in range(len(mod.params))]
            mod(*args)
            return args
        """
    )
    full_env = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-c", setup + textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=full_env
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.slow
def test_thread_counts_are_honoured():
    """A set count starts that many threads less the caller; the default is the CPUs this process may
    use, or TENSORSEARCH_NUM_THREADS; a small loop with the default starts none."""
    out = _in_a_fresh_process(
        """
        t0 = threads()
        run(SMALL, 64)
        t1 = threads()
        run(GEMM, 4096, 3)
        t2 = threads()
        run(GEMM, 4096, 5)
        t3 = threads()
        print(t1 - t0, t2 - t0, t3 - t0)
        """
    )
    assert out.split() == ["0", "2", "4"]
    out = _in_a_fresh_process("t0 = threads(); run(GEMM, 4096); print(threads() - t0)")
    assert int(out) == len(os.sched_getaffinity(0)) - 1
    out = _in_a_fresh_process("t0 = threads(); run(GEMM, 4096); print(threads() - t0)", TENSORSEARCH_NUM_THREADS="3")
    assert int(out) == 2
    out = _in_a_fresh_process("t0 = threads(); run(SMALL, 64, 3); print(threads() - t0)")
    assert int(out) == 2


def test_loop_work_counts_stored_elements():
    """What decides that a loop is too small for a second thread (the threads themselves are
    counted in test_thread_counts_are_honoured)."""
    assert parallel.loop_work(parse(SMALL).body) == 64 < parallel.SERIAL_WORK
    assert parallel.loop_work(parse(GEMM).body) == 64 * 64 * 65 >= parallel.SERIAL_WORK


@pytest.mark.slow
def test_a_forked_child_runs_parallel_loops_on_a_pool_of_its_own():
    out = _in_a_fresh_process(
        """
        want = run(GEMM, 4096, 2)[2]
        pid = os.fork()
        if pid == 0:
            t0 = threads()
            ok = np.array_equal(run(GEMM, 4096, 2)[2], want) and threads() == t0 + 1
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """
    )
    assert out.strip() == "child 0"


def test_concurrent_callers_each_get_their_result():
    mod = build(parse(GEMM))
    mod.num_threads = 2
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((64, 64)).astype("float32") for _ in range(2))
    want = a @ b
    errors: list[str] = []

    def work(k: int) -> None:
        for _ in range(30):
            c = np.zeros((64, 64), "float32")
            mod(a.ravel(), b.ravel(), c.ravel())
            if not np.allclose(c, want, rtol=1e-4, atol=1e-4):
                errors.append(f"caller {k}")

    callers = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert not errors
