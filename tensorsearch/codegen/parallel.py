"""Parallel loops in LLVM IR: the outlining of a ``parallel`` loop into functions the thread pool
(:mod:`.threadpool`) runs, the work-stealing share of its range each task runs, and the size
below which a loop stays on the calling thread.

A parallel loop (not inside another) becomes ``void name_parallel_k(void *closure, int32_t task,
int32_t tasks)``, which unpacks the closure (the variables and buffers the loop uses, its range and
the chunk counters) and runs its share (:meth:`ParallelLoops._run_share`) through
``name_parallel_k_body``, the loop over one range with noalias buffer pointers; the kernel fills
the closure and calls ``__tensorsearch_parallel_launch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from ..ir.expr import BufferLoad, IntImm, Var
from ..ir.functor import children, post_order_visit
from ..ir.stmt import Buffer, BufferStore, Evaluate, For, IfThenElse, SeqStmt, Stmt
from . import threadpool
from .llvm_types import I1, I8, I32, I64, PTR, VOID

# a parallel loop: each thread's static block in this many chunks that idle threads may take
# over (_run_share), with counters for up to this many threads
STEAL_CHUNKS = 4
MAX_STEAL_THREADS = 256
# a parallel loop that stores fewer elements than this runs on the calling thread alone unless
# the module's thread count was set: waking another thread costs more than the loop (loop_work)
SERIAL_WORK = 1 << 16
UNKNOWN_EXTENT = 1 << 10  # loop_work's guess for a loop whose extent is not a constant


def loop_work(s: Stmt) -> int:
    """The elements ``s`` stores (and intrinsic calls it makes), loops multiplied out, as a
    measure of its size: ``for i in 0..64: for j in 0..32: A[..] = x`` (x of 16 lanes) is 32768."""
    if isinstance(s, For):
        ext = s.extent.value if isinstance(s.extent, IntImm) else UNKNOWN_EXTENT
        return ext * loop_work(s.body)
    if isinstance(s, BufferStore | Evaluate):
        return s.value.dtype.lanes
    if isinstance(s, SeqStmt):
        return sum(loop_work(x) for x in s.stmts)
    if isinstance(s, IfThenElse):
        return max(loop_work(s.then_case), 0 if s.else_case is None else loop_work(s.else_case))
    return sum(loop_work(c) for c in children(s) if isinstance(c, Stmt))


class ParallelLoops:
    """The parallel-loop outlining of the LLVM code generator (a base class of it): it uses the
    generator's builder, current function (``self.fn``), module and its ``expr``, ``loop``,
    ``entry_alloca``, ``declare``, ``_begin``/``_finish`` and ``_int_resize``."""

    def parallel_for(self, s: For) -> None:
        """Outline the loop into ``void f(closure*, i32 task, i32 tasks)``, run by the thread pool
        (:mod:`.threadpool`) as a task per thread, or on the caller alone when the loop is small."""
        self.uses_parallel = True
        captured_vars: list[Var] = []
        captured_bufs: list[Buffer] = []
        seen: set[int] = set()

        def visit(n: Any) -> None:
            if id(n) in seen:
                return
            if isinstance(n, Var) and n in self.fn.vars:
                seen.add(id(n))
                captured_vars.append(n)
            elif isinstance(n, BufferLoad | BufferStore) and n.buffer in self.fn.bufs and id(n.buffer) not in seen:
                seen.add(id(n.buffer))
                captured_bufs.append(n.buffer)

        post_order_visit(s, visit)
        values = [self.fn.vars[v] for v in captured_vars] + [self.fn.bufs[b] for b in captured_bufs]
        lo = self.expr(s.min)
        ext = self.expr(s.extent)
        values += [lo, ext]
        struct_t = ir.LiteralStructType([v.type for v in values] + [PTR])  # + the steal counters
        closure = self.entry_alloca(struct_t, "closure")
        for k, v in enumerate(values):
            self.b.store(v, self.b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], source_etype=struct_t))

        outer = self.fn
        name = f"{self.name}_parallel_{self.parallel_ids}"
        self.parallel_ids += 1
        nv = len(captured_vars)
        it = lo.type
        # the loop over one thread's range, with noalias buffer pointers (as the kernel's own)
        body_types = [v.type for v in values[:-2]] + [it, it]
        body_fn = ir.Function(self.module, ir.FunctionType(VOID, body_types), name + "_body")
        body_fn.linkage = "internal"
        body_fn.attributes.add("nounwind")
        self._begin(body_fn, {}, {}, True)
        for k, var in enumerate(captured_vars):
            self.fn.vars[var] = body_fn.args[k]
        for k, buf in enumerate(captured_bufs):
            body_fn.args[nv + k].add_attribute("noalias")
            self.fn.bufs[buf] = body_fn.args[nv + k]
        self.loop(s.loop_var, body_fn.args[-2], body_fn.args[-1], s.body)
        self.b.ret_void()
        self._finish()
        # the pool's task t of n: unpack the closure, run its share of the range
        outlined = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I32, I32]), name)
        outlined.linkage = "internal"
        outlined.attributes.add("nounwind")
        self._begin(outlined, {}, {}, True)
        b = self.b
        loaded = [
            b.load(
                b.gep(outlined.args[0], [ir.Constant(I32, 0), ir.Constant(I32, k)], source_etype=struct_t), typ=v.type
            )
            for k, v in enumerate(values)
        ]
        steal_at = b.gep(outlined.args[0], [ir.Constant(I32, 0), ir.Constant(I32, len(values))], source_etype=struct_t)
        p_lo, p_ext = loaded[-2], loaded[-1]
        self._run_share(lambda start, stop: b.call(body_fn, [*loaded[:-2], b.add(p_lo, start), b.add(p_lo, stop)]),
                        p_ext, b.load(steal_at, typ=PTR), outlined.args[1], outlined.args[2])  # fmt: skip
        b.ret_void()
        self._finish()
        self.fn = outer
        counters = self.fn.steal_counters
        if counters is None:  # one set per kernel: its parallel loops run one after another
            counters = self.fn.steal_counters = self.entry_alloca(I64, "steal", align=64, count=MAX_STEAL_THREADS)
        memset = self.declare("llvm.memset.p0.i64", VOID, [PTR, I8, I64, I1])
        self.b.call(
            memset,
            [counters, ir.Constant(I8, 0), ir.Constant(I64, 8 * MAX_STEAL_THREADS), ir.Constant(I1, 0)],
        )
        self.b.store(
            counters, self.b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, len(values))], source_etype=struct_t)
        )
        launch = self.declare(threadpool.LAUNCH_SYMBOL, VOID, [PTR, PTR, I32])
        tasks = self.b.load(self.num_threads, typ=I32)
        if loop_work(s) < SERIAL_WORK:  # the caller alone, unless a thread count was set
            tasks = self.b.select(self.b.icmp_signed("==", tasks, ir.Constant(I32, 0)), ir.Constant(I32, 1), tasks)
        self.b.call(launch, [outlined, closure, tasks])

    def _run_share(
        self,
        run: Callable[[ir.Value, ir.Value], Any],
        ext: ir.Value,
        counters: ir.Value,
        task: ir.Value,
        tasks: ir.Value,
    ) -> None:
        """Task ``task`` of ``tasks`` of a parallel loop of ``ext`` iterations: ``run(start, stop)``
        for each chunk it takes.

        Task ``t`` of ``n`` owns the static block ``[t * ceil(ext / n), ...)``, cut into
        ``STEAL_CHUNKS`` chunks that it runs in order, taking each from its counter (an atomic
        increment); then it takes what is left of the other tasks' blocks from theirs. On a
        quiet machine every thread runs its own block, as a static schedule does; when a thread
        runs late (descheduled, or its core shared), the others finish its block, and the task
        it starts late finds nothing left. More tasks than ``MAX_STEAL_THREADS``: the static
        blocks alone."""
        b = self.b
        it = ext.type
        tid = self._int_resize(task, it, True)
        nth = self._int_resize(tasks, it, True)
        block = b.sdiv(b.sub(b.add(ext, nth), ir.Constant(it, 1)), nth)

        def block_of(owner: ir.Value) -> tuple[ir.Value, ir.Value]:  # [owner * block, min(+ block, ext))
            start = b.mul(owner, block)
            stop = b.add(start, block)
            return start, b.select(b.icmp_signed("<", stop, ext), stop, ext)

        fn = self.fn.func
        victims = fn.append_basic_block("steal.victim")
        take = fn.append_basic_block("steal.take")
        chunk_bb = fn.append_basic_block("steal.chunk")
        next_victim = fn.append_basic_block("steal.next")
        static = fn.append_basic_block("steal.static")
        done = fn.append_basic_block("steal.done")
        entry = b.block
        b.cbranch(b.icmp_signed("<=", nth, ir.Constant(it, MAX_STEAL_THREADS)), victims, static)
        # for u in 0..nth-1: victim (tid + u) % nth
        b.position_at_end(victims)
        u = b.phi(it, "u")
        u.add_incoming(ir.Constant(it, 0), entry)
        victim = b.srem(b.add(tid, u), nth)
        start, stop = block_of(victim)
        length = b.sub(stop, start)
        sub = b.sdiv(b.add(length, ir.Constant(it, STEAL_CHUNKS - 1)), ir.Constant(it, STEAL_CHUNKS))
        counter = b.gep(counters, [self._int_resize(victim, I64, True)], source_etype=I64)
        b.branch(take)
        b.position_at_end(take)
        c = self._int_resize(b.atomic_rmw("add", counter, ir.Constant(I64, 1), "monotonic"), it, True)
        lo = b.add(start, b.mul(c, sub))
        b.cbranch(b.and_(b.icmp_signed("<", c, ir.Constant(it, STEAL_CHUNKS)), b.icmp_signed("<", lo, stop)),
                  chunk_bb, next_victim)  # fmt: skip
        b.position_at_end(chunk_bb)
        hi = b.add(lo, sub)
        run(lo, b.select(b.icmp_signed("<", hi, stop), hi, stop))
        b.branch(take)
        b.position_at_end(next_victim)
        u_next = b.add(u, ir.Constant(it, 1))
        u.add_incoming(u_next, next_victim)
        b.cbranch(b.icmp_signed("<", u_next, nth), victims, done)
        b.position_at_end(static)
        run(*block_of(tid))
        b.branch(done)
        b.position_at_end(done)
