"""The thread pool that runs parallel loops, as LLVM IR (docs/codegen.md, "Parallel loops").

A kernel runs a parallel loop with one call::

    void __tensorsearch_parallel_launch(void (*task)(void *closure, i32 t, i32 n), void *closure, i32 n)

which runs ``task(closure, t, n)`` once for every ``t`` in ``[0, n)`` (``n`` = 0: the pool's
default, ``__tensorsearch_default_threads`` or else the CPUs online) and returns when all have
run. Its rules, so that a thread the OS has not scheduled never holds up a call:

- The caller takes tasks too, and a task no thread has started is taken by whichever thread
  is free: the caller never waits for a thread that has not started, only for tasks that
  are running (a kernel cuts its loop into a task per thread, each of which takes over the
  chunks of the others when it is done, so a late thread finds its work done).
- The job is one 64-bit word: generation (24 bits) | tasks (20 bits) | next task (20 bits).
  A thread takes a task with one atomic increment of the word; an increment past the tasks
  takes nothing, so a thread that wakes after the job ended cannot touch it.
- Idle workers spin on the word, yielding the CPU now and then, and then sleep on a
  condition variable. Each adapts its spin: doubled when a job came while it spun, halved
  when it had to sleep (between ``SPIN_MIN`` and ``SPIN_MAX`` polls).
- One caller at a time: a second concurrent caller (another Python thread) runs its tasks on
  itself. ``n`` = 1 runs on the caller without touching the pool.
- After ``fork`` the child's pool must start empty: ``__tensorsearch_pool_after_fork()`` resets
  it (tensorsearch registers it with ``os.register_at_fork`` for every pool it loads).

The same IR is JIT-compiled once per process (one pool shared by every JIT module) and linked
into each saved object (weak symbols, so objects linked together share one).
"""

from __future__ import annotations

LAUNCH_SYMBOL = "__tensorsearch_parallel_launch"
DEFAULT_THREADS_SYMBOL = "__tensorsearch_default_threads"
AFTER_FORK_SYMBOL = "__tensorsearch_pool_after_fork"
MAX_TASKS = 1024  # a launch asks for at most this many tasks (the word's fields hold 2**20)
SPIN_START, SPIN_MIN, SPIN_MAX = 4096, 256, 65536  # polls of the word before sleeping
YIELD_EVERY = 128  # a spinning thread gives up its CPU every this many polls
SC_NPROCESSORS_ONLN = 84  # sysconf's name for "CPUs online" (glibc and musl, every Linux architecture)


def _pause(triple: str) -> tuple[str, str]:
    """(the spin-wait hint's call, its declaration) for the target's architecture."""
    arch = triple.split("-")[0]
    if arch in ("x86_64", "i686", "i386"):
        return "call void @llvm.x86.sse2.pause()", "declare void @llvm.x86.sse2.pause()"
    if arch in ("aarch64", "arm64"):
        return "call void @llvm.aarch64.hint(i32 1)", "declare void @llvm.aarch64.hint(i32)"
    return "", ""


def threadpool_ir(triple: str, *, shared: bool) -> str:
    """The pool's LLVM IR for ``triple``. ``shared``: its three exported symbols are weak (an object of its own, to link beside kernels); otherwise plain globals
    (the process's JIT pool)."""
    pause, pause_decl = _pause(triple)
    link = "weak " if shared else ""
    return _IR.format(
        triple=triple,
        pause=pause,
        pause_decl=pause_decl,
        link=link,
        launch=LAUNCH_SYMBOL,
        after_fork=AFTER_FORK_SYMBOL,
        default=DEFAULT_THREADS_SYMBOL,
        max_tasks=MAX_TASKS,
        spin_start=SPIN_START,
        spin_min=SPIN_MIN,
        spin_max=SPIN_MAX,
        yield_mask=YIELD_EVERY - 1,
        nprocs=SC_NPROCESSORS_ONLN,
    )


_IR = """
target triple = "{triple}"

@ts.word = internal global i64 0, align 64          ; generation << 40 | tasks << 20 | next task
@ts.task = internal global ptr null, align 64        ; the job: its task function and closure
@ts.closure = internal global ptr null, align 8
@ts.done = internal global i64 0, align 64           ; tasks of the job that have finished
@ts.busy = internal global i32 0, align 64           ; 1 while a caller owns the pool
@ts.workers = internal global i32 0, align 64        ; worker threads started
@ts.sleepers = internal global i32 0, align 64       ; workers blocked on the condition variable
@ts.mutex = internal global [64 x i8] zeroinitializer, align 64   ; PTHREAD_MUTEX_INITIALIZER is zeros
@ts.cond = internal global [64 x i8] zeroinitializer, align 64    ; PTHREAD_COND_INITIALIZER is zeros
@{default} = {link}global i32 0, align 4

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @pthread_mutex_lock(ptr)
declare i32 @pthread_mutex_unlock(ptr)
declare i32 @pthread_cond_wait(ptr, ptr)
declare i32 @pthread_cond_broadcast(ptr)
declare i32 @sched_yield()
declare i64 @sysconf(i32)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
{pause_decl}

; take tasks of the current job until none is left; returns the job's generation
define internal i64 @ts.take() nounwind {{
entry:
  br label %next
next:
  %old = atomicrmw add ptr @ts.word, i64 1 acq_rel
  %t = and i64 %old, 1048575
  %nf = lshr i64 %old, 20
  %n = and i64 %nf, 1048575
  %ok = icmp ult i64 %t, %n
  br i1 %ok, label %run, label %out
run:                                    ; a task taken: the job cannot end before it does
  %f = load ptr, ptr @ts.task
  %c = load ptr, ptr @ts.closure
  %ti = trunc i64 %t to i32
  %ni = trunc i64 %n to i32
  call void %f(ptr %c, i32 %ti, i32 %ni)
  %x = atomicrmw add ptr @ts.done, i64 1 release
  br label %next
out:
  %gen = lshr i64 %old, 40
  ret i64 %gen
}}

define internal ptr @ts.worker(ptr %arg) nounwind {{
entry:
  %last = alloca i64
  %limit = alloca i32
  %i = alloca i32
  %g0 = ptrtoint ptr %arg to i64
  store i64 %g0, ptr %last
  store i32 {spin_start}, ptr %limit
  br label %wait
wait:
  store i32 0, ptr %i
  br label %poll
poll:
  %w = load atomic i64, ptr @ts.word acquire, align 8
  %g = lshr i64 %w, 40
  %l = load i64, ptr %last
  %new = icmp ne i64 %g, %l
  br i1 %new, label %spun, label %again
again:
  %iv = load i32, ptr %i
  %iv1 = add i32 %iv, 1
  store i32 %iv1, ptr %i
  %lim = load i32, ptr %limit
  %over = icmp uge i32 %iv1, %lim
  br i1 %over, label %sleep, label %hint
hint:
  {pause}
  %low = and i32 %iv1, {yield_mask}
  %yield = icmp eq i32 %low, 0
  br i1 %yield, label %give, label %poll
give:
  %y = call i32 @sched_yield()
  br label %poll
spun:                                   ; a job came while spinning: spin longer next time
  %ls = load i32, ptr %limit
  %dbl = shl i32 %ls, 1
  %cap = icmp ugt i32 %dbl, {spin_max}
  %ls1 = select i1 %cap, i32 {spin_max}, i32 %dbl
  store i32 %ls1, ptr %limit
  br label %work
sleep:                                  ; no job came: spin less next time, and block
  %lh = load i32, ptr %limit
  %half = lshr i32 %lh, 1
  %floor = icmp ult i32 %half, {spin_min}
  %lh1 = select i1 %floor, i32 {spin_min}, i32 %half
  store i32 %lh1, ptr %limit
  %m = call i32 @pthread_mutex_lock(ptr @ts.mutex)
  %s0 = atomicrmw add ptr @ts.sleepers, i32 1 seq_cst
  br label %check
check:
  %ws = load atomic i64, ptr @ts.word seq_cst, align 8
  %gs = lshr i64 %ws, 40
  %lc = load i64, ptr %last
  %same = icmp eq i64 %gs, %lc
  br i1 %same, label %block, label %woke
block:
  %cw = call i32 @pthread_cond_wait(ptr @ts.cond, ptr @ts.mutex)
  br label %check
woke:
  %s1 = atomicrmw sub ptr @ts.sleepers, i32 1 seq_cst
  %u = call i32 @pthread_mutex_unlock(ptr @ts.mutex)
  br label %work
work:
  %seen = call i64 @ts.take()
  store i64 %seen, ptr %last
  br label %wait
}}

; in a child after fork: no workers, nobody holds the pool, fresh mutex and condition variable
define {link}void @{after_fork}() nounwind {{
entry:
  store i32 0, ptr @ts.workers
  store i32 0, ptr @ts.sleepers
  store i32 0, ptr @ts.busy
  call void @llvm.memset.p0.i64(ptr @ts.mutex, i8 0, i64 64, i1 false)
  call void @llvm.memset.p0.i64(ptr @ts.cond, i8 0, i64 64, i1 false)
  ret void
}}

; start workers until there are ``need`` (fewer if the OS refuses a thread); they begin at generation %gen
define internal void @ts.grow(i32 %need, i64 %gen) nounwind {{
entry:
  %tid = alloca i64
  br label %loop
loop:
  %have = load i32, ptr @ts.workers
  %more = icmp slt i32 %have, %need
  br i1 %more, label %start, label %out
start:
  %arg = inttoptr i64 %gen to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @ts.worker, ptr %arg)
  %fail = icmp ne i32 %rc, 0
  br i1 %fail, label %out, label %started
started:
  %t = load i64, ptr %tid
  %d = call i32 @pthread_detach(i64 %t)
  %have1 = add i32 %have, 1
  store i32 %have1, ptr @ts.workers
  br label %loop
out:
  ret void
}}

define internal i32 @ts.tasks(i32 %want) nounwind {{
entry:
  %given = icmp sgt i32 %want, 0
  br i1 %given, label %clamp, label %default
default:
  %d = load i32, ptr @{default}
  %set = icmp sgt i32 %d, 0
  br i1 %set, label %clamp, label %online
online:
  %cpus = call i64 @sysconf(i32 {nprocs})
  %c32 = trunc i64 %cpus to i32
  store i32 %c32, ptr @{default}
  br label %clamp
clamp:
  %n = phi i32 [%want, %entry], [%d, %default], [%c32, %online]
  %lo = icmp slt i32 %n, 1
  %n1 = select i1 %lo, i32 1, i32 %n
  %hi = icmp sgt i32 %n1, {max_tasks}
  %n2 = select i1 %hi, i32 {max_tasks}, i32 %n1
  ret i32 %n2
}}

define {link}void @{launch}(ptr %task, ptr %closure, i32 %want) nounwind {{
entry:
  %t = alloca i32
  %spins = alloca i32
  %n = call i32 @ts.tasks(i32 %want)
  %one = icmp sle i32 %n, 1
  br i1 %one, label %serial, label %lock
lock:
  %cx = cmpxchg ptr @ts.busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue {{ i32, i1 }} %cx, 1
  br i1 %got, label %publish, label %serial
serial:                                 ; one task, or another caller owns the pool: all here
  store i32 0, ptr %t
  br label %serial.next
serial.next:
  %ti = load i32, ptr %t
  %left = icmp slt i32 %ti, %n
  br i1 %left, label %serial.run, label %return
serial.run:
  call void %task(ptr %closure, i32 %ti, i32 %n)
  %ti1 = add i32 %ti, 1
  store i32 %ti1, ptr %t
  br label %serial.next
publish:
  %w = load atomic i64, ptr @ts.word monotonic, align 8
  %g = lshr i64 %w, 40
  %need = sub i32 %n, 1
  call void @ts.grow(i32 %need, i64 %g)
  store ptr %task, ptr @ts.task
  store ptr %closure, ptr @ts.closure
  store i64 0, ptr @ts.done
  %g1 = add i64 %g, 1
  %g2 = and i64 %g1, 16777215
  %gw = shl i64 %g2, 40
  %n64 = zext i32 %n to i64
  %nw = shl i64 %n64, 20
  %word = or i64 %gw, %nw
  store atomic i64 %word, ptr @ts.word seq_cst, align 8
  %sl = load atomic i32, ptr @ts.sleepers seq_cst, align 4
  %any = icmp ne i32 %sl, 0
  br i1 %any, label %wake, label %take
wake:
  %m = call i32 @pthread_mutex_lock(ptr @ts.mutex)
  %b = call i32 @pthread_cond_broadcast(ptr @ts.cond)
  %u = call i32 @pthread_mutex_unlock(ptr @ts.mutex)
  br label %take
take:
  %gen = call i64 @ts.take()
  store i32 0, ptr %spins
  br label %join
join:                                   ; the tasks others took: wait for them to finish
  %done = load atomic i64, ptr @ts.done acquire, align 8
  %all = icmp uge i64 %done, %n64
  br i1 %all, label %release, label %hint
hint:
  {pause}
  %s = load i32, ptr %spins
  %s1 = add i32 %s, 1
  store i32 %s1, ptr %spins
  %low = and i32 %s1, 63
  %yield = icmp eq i32 %low, 0
  br i1 %yield, label %give, label %join
give:
  %y = call i32 @sched_yield()
  br label %join
release:
  store atomic i32 0, ptr @ts.busy release, align 4
  br label %return
return:
  ret void
}}
"""
