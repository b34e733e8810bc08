"""LLVM code generation for lowered PrimFuncs (the lowered form is described in docs/codegen.md).

    target = tensorsearch.target.resolve(None)   # the host's Hardware; or a descriptor name or path
    text = generate(lowered, target)         # LLVM IR text with one exported function
    mod = optimize(text, target)             # llvmlite ModuleRef after the O3 pipeline
    asm = emit_assembly(mod, target); obj = emit_object(mod, target)

The exported function is ``int32_t name(void *buf0, ..., scalar params by value)``: one data
pointer per buffer parameter (the flat buffer's first element) in parameter order, scalars by
value; it returns 0. Parallel loops are outlined into ``void name_parallel_k(void *closure, int32_t
task, int32_t tasks)`` and run by the thread pool's ``__tensorsearch_parallel_launch``
(:mod:`.threadpool`); the global ``int32_t __tensorsearch_num_threads`` (0: the pool's default)
sets the number of threads. ``name__repeat(args..., int64_t n)`` calls the
kernel ``n`` times (used by the timer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from ..ir.dtype import DataType
from ..ir.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Select,
    StringImm,
    Sub,
    Var,
)
from ..ir.functor import ExprFunctor, StmtFunctor, post_order_visit
from ..ir.stmt import (
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from ..ir.structural import structural_equal
from ..target import Hardware, resolve
from ..target.intrinsics import Intrinsic, LLVMImpl, LLVMTileCall, shipped_intrinsics
from . import fastmath, threadpool
from .bf16 import BFloat16Emulation, call_type
from .llvm_types import F32, I8, I32, I64, PTR, VOID, CodegenError, storage_type, value_type
from .parallel import ParallelLoops

NUM_THREADS_SYMBOL = "__tensorsearch_num_threads"
STACK_LIMIT_BYTES = 256 * 1024  # constant-size buffers up to this size go on the stack (of the thread)
REDUCTION_FLAGS = ("reassoc", "nsz")  # on a reduction update's fadd or fmuladd (_reduction_update)
# on its maxnum/minnum: without nnan, LLVM 22's loop vectorizer takes a newer path for NaN-aware
# max reductions that aborts on some loops (a cost-model assertion, BERT's 128-column softmax)
MINMAX_REDUCTION_FLAGS = ("nnan", "nsz")


# ---------------------------------------------------------------------------------------
# targets


@cache
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def target_machine(target: Hardware, *, jit: bool = False, pic: bool = False) -> llvm.TargetMachine:
    """A fresh TargetMachine (one per JIT engine)."""
    _init_llvm()
    try:
        t = llvm.Target.from_triple(target.triple)
    except RuntimeError as err:
        raise ValueError(f"LLVM does not know the target triple {target.triple!r}: {err}") from None
    return t.create_target_machine(
        cpu=target.cpu,
        features=target.feature_string,
        opt=3,
        reloc="pic" if pic else "default",
        codemodel="jitdefault" if jit else "default",
        jit=jit,
    )


def _contains(e: PrimExpr, pred: Any) -> bool:
    found = []

    def visit(n: Any) -> None:
        if not found and pred(n):
            found.append(n)

    post_order_visit(e, visit)
    return bool(found)


def _unsafe(n: Any) -> bool:
    """Whether evaluating ``n`` where its guard is false could fault (a load or an integer division)."""
    if isinstance(n, BufferLoad):
        return True
    if isinstance(n, Div | Mod | FloorDiv | FloorMod) and not n.dtype.is_float:
        return not (isinstance(n.b, IntImm) and n.b.value not in (0, -1))
    return isinstance(n, Call) and n.op.startswith("llvm.")


def _load_or_zero(load: PrimExpr, other: PrimExpr) -> bool:
    """Whether ``select(c, load, other)`` is a padding read: ``load`` a flattened load of one
    element or of contiguous lanes, its index safe to evaluate anywhere, and ``other`` zero."""
    if not (isinstance(load, BufferLoad) and len(load.indices) == 1 and _is_zero(other)):
        return False
    index = load.indices[0]
    if index.dtype.lanes > 1 and not _contiguous(index):
        return False
    return not _contains(index, _unsafe)


def _contiguous(index: PrimExpr) -> bool:
    """Whether a vector index is ``Ramp(base, 1, lanes)``: one load or store of adjacent elements."""
    return isinstance(index, Ramp) and isinstance(index.stride, IntImm) and index.stride.value == 1


def _is_zero(e: PrimExpr) -> bool:
    if isinstance(e, Broadcast):
        return _is_zero(e.value)
    return isinstance(e, IntImm | FloatImm) and e.value == 0 and math.copysign(1.0, e.value) > 0


def _unguardable(n: Any) -> bool:
    """Whether ``n`` could fault where its scalar guard is false even with its loads redirected
    to element 0: a division that could trap, an LLVM call, or a load of a buffer that may hold
    fewer elements than the load reads."""
    if isinstance(n, BufferLoad):
        size = n.buffer.shape[0] if len(n.buffer.shape) == 1 else None
        return not (isinstance(size, IntImm) and size.value >= n.dtype.lanes)
    return _unsafe(n)


_FLOAT_INTRINSICS = {
    "exp": "llvm.exp",
    "exp2": "llvm.exp2",
    "log": "llvm.log",
    "log2": "llvm.log2",
    "log10": "llvm.log10",
    "sqrt": "llvm.sqrt",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "trunc": "llvm.trunc",
    "round": "llvm.roundeven",
    "nearbyint": "llvm.roundeven",
    "abs": "llvm.fabs",
    "fabs": "llvm.fabs",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "tan": "llvm.tan",
    "tanh": "llvm.tanh",
    "pow": "llvm.pow",
    "power": "llvm.pow",
}
_LIBM = {"erf": "erf", "log1p": "log1p", "expm1": "expm1"}


def _type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_type_suffix(t.element)}"
    if isinstance(t, ir.HalfType):
        return "f16"
    if isinstance(t, ir.FloatType):
        return "f32"
    if isinstance(t, ir.DoubleType):
        return "f64"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    raise CodegenError(f"no intrinsic suffix for {t}")


# ---------------------------------------------------------------------------------------
# the generator


@dataclass
class _Fn:
    func: ir.Function
    builder: ir.IRBuilder
    entry: ir.IRBuilder
    vars: dict[Var, ir.Value]
    bufs: dict[Buffer, ir.Value]
    in_parallel: bool
    steal_counters: ir.Value | None = None  # the parallel loops' chunk counters (_run_share)


class _CodeGen(ExprFunctor[ir.Value], StmtFunctor[None], ParallelLoops, BFloat16Emulation):
    """The LLVM IR of one lowered PrimFunc: ``visit_<Class>`` emits a statement or returns an
    expression's value; parallel loops are outlined by :class:`~.parallel.ParallelLoops`, bfloat16
    values converted by :class:`~.bf16.BFloat16Emulation`."""

    def __init__(self, func: PrimFunc, target: Hardware, name: str) -> None:
        self.func = func
        self.target = target
        self.name = name
        self.module = ir.Module(name=name)
        self.module.triple = target.triple
        tm = target_machine(target)
        self.module.data_layout = str(tm.target_data)
        self.loop_ids = 0
        self.parallel_ids = 0
        self.mask: ir.Value | None = None
        self.reduction: Add | Max | Min | None = None  # the update of the store being emitted (_reduction_update)
        self.guard: ir.Value | None = None  # scalar i1: loads read element 0 where it is false
        self.fn: _Fn
        nt = ir.GlobalVariable(self.module, I32, NUM_THREADS_SYMBOL)
        nt.initializer = ir.Constant(I32, 0)
        nt.linkage = ""
        self.num_threads = nt
        self.uses_parallel = False

    # helpers -----------------------------------------------------------------------------
    @property
    def b(self) -> ir.IRBuilder:
        return self.fn.builder

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def splat(self, v: ir.Value, lanes: int) -> ir.Value:
        vt = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vt, [v.constant] * lanes)
        undef = ir.Constant(vt, ir.Undefined)
        ins = self.b.insert_element(undef, v, ir.Constant(I32, 0))
        return self.b.shuffle_vector(ins, undef, ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def const(self, value: Any, dt: DataType) -> ir.Value:
        t = value_type(dt)
        if dt.lanes > 1:
            return ir.Constant(t, [value] * dt.lanes)
        return ir.Constant(t, value)

    def new_block(self, name: str) -> ir.Block:
        return self.fn.func.append_basic_block(name)

    def entry_alloca(self, t: ir.Type, name: str = "", align: int | None = None, count: int | None = None) -> ir.Value:
        size = None if count is None else ir.Constant(I64, count)
        a = self.fn.entry.alloca(t, size=size, name=name)
        if align:
            a.align = align
        # an opaque ``ptr`` (llvmlite's typed alloca confuses its GEP type inference); the bitcast
        # is a no-op that LLVM removes
        cast = ir.instructions.CastInstr(self.fn.entry.block, "bitcast", a, PTR)
        self.fn.entry._insert(cast)
        return cast

    # function ----------------------------------------------------------------------------
    def build(self) -> str:
        f = self.func
        bmap = dict(f.buffer_map)
        arg_types: list[ir.Type] = []
        for p in f.params:
            arg_types.append(PTR if p in bmap else value_type(p.dtype))
        fnty = ir.FunctionType(I32, arg_types)
        kernel = ir.Function(self.module, fnty, self.name)
        kernel.attributes.add("nounwind")
        kernel.attributes.add("noinline")
        self._begin(kernel, {}, {}, False)
        for p, arg in zip(f.params, kernel.args, strict=True):
            arg.name = p.name
            if p in bmap:
                arg.add_attribute("noalias")
                self.fn.bufs[bmap[p]] = arg
            else:
                self.fn.vars[p] = arg
        self.stmt(f.body)
        self.b.ret(ir.Constant(I32, 0))
        self._finish()
        self._repeat_wrapper(kernel, arg_types)
        return _fix_loop_metadata(str(self.module))

    def _begin(self, func: ir.Function, vars_: dict, bufs: dict, in_parallel: bool) -> None:
        entry_block = func.append_basic_block("entry")
        body_block = func.append_basic_block("body")
        entry = ir.IRBuilder(entry_block)
        builder = ir.IRBuilder(body_block)
        self.fn = _Fn(func, builder, entry, dict(vars_), dict(bufs), in_parallel)

    def _finish(self) -> None:
        self.fn.entry.branch(self.fn.func.basic_blocks[1])

    def _repeat_wrapper(self, kernel: ir.Function, arg_types: list[ir.Type]) -> None:
        wrap = ir.Function(self.module, ir.FunctionType(I32, [*arg_types, I64]), self.name + "__repeat")
        pre = wrap.append_basic_block("entry")
        head = wrap.append_basic_block("head")
        body = wrap.append_basic_block("body")
        done = wrap.append_basic_block("done")
        b = ir.IRBuilder(pre)
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(ir.Constant(I64, 0), pre)
        b.cbranch(b.icmp_signed("<", i, wrap.args[-1]), body, done)
        b.position_at_end(body)
        b.call(kernel, list(wrap.args[:-1]))
        i.add_incoming(b.add(i, ir.Constant(I64, 1)), body)
        b.branch(head)
        b.position_at_end(done)
        b.ret(ir.Constant(I32, 0))

    # statements ----------------------------------------------------------------------------
    def stmt(self, s: Stmt) -> None:
        (self._stmt_methods.get(type(s)) or self.stmt_method(type(s)))(self, s)

    def unsupported_stmt(self, s: Stmt) -> None:
        if isinstance(s, Block | BlockRealize):
            raise CodegenError("the program still has blocks; lower it first (tensorsearch.lower.lower)")
        raise CodegenError(f"code generation does not support {type(s).__name__} statements")

    def visit_SeqStmt(self, s: SeqStmt) -> None:
        for x in s.stmts:
            self.stmt(x)

    def visit_Evaluate(self, s: Evaluate) -> None:
        if isinstance(s.value, IntImm | FloatImm | Var):
            return
        self.expr(s.value, statement=True)

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.scalar_cond(s.condition)
        then_bb = self.new_block("then")
        end_bb = self.new_block("endif")
        else_bb = self.new_block("else") if s.else_case is not None else end_bb
        self.b.cbranch(cond, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        self.stmt(s.then_case)
        self.b.branch(end_bb)
        if s.else_case is not None:
            self.b.position_at_end(else_bb)
            self.stmt(s.else_case)
            self.b.branch(end_bb)
        self.b.position_at_end(end_bb)

    def scalar_cond(self, e: PrimExpr) -> ir.Value:
        if e.dtype.lanes != 1:
            raise CodegenError(f"a condition must be a scalar bool, got {e.dtype} ({e})")
        return self.expr(e)

    def visit_For(self, s: For) -> None:
        if s.kind == ForKind.THREAD_BINDING:
            raise CodegenError(f"loop {s.loop_var.name} is bound to {s.thread_binding}; CPU code cannot bind threads")
        if s.kind == ForKind.PARALLEL and not self.fn.in_parallel:
            self.parallel_for(s)
            return
        lo = self.expr(s.min)
        hi = self.b.add(lo, self.expr(s.extent))
        self.loop(s.loop_var, lo, hi, s.body, unroll=s.kind == ForKind.UNROLLED)

    def loop(self, var: Var, lo: ir.Value, hi: ir.Value, body: Stmt, unroll: bool = False) -> None:
        pre = self.b.block
        head = self.new_block(f"{var.name}.head")
        body_bb = self.new_block(f"{var.name}.body")
        exit_bb = self.new_block(f"{var.name}.exit")
        self.b.branch(head)
        self.b.position_at_end(head)
        i = self.b.phi(lo.type, name=var.name)
        i.add_incoming(lo, pre)
        self.b.cbranch(self.b.icmp_signed("<", i, hi), body_bb, exit_bb)
        self.b.position_at_end(body_bb)
        saved = self.fn.vars.get(var)
        self.fn.vars[var] = i
        self.stmt(body)
        if saved is None:
            del self.fn.vars[var]
        else:
            self.fn.vars[var] = saved
        nxt = self.b.add(i, ir.Constant(lo.type, 1))
        i.add_incoming(nxt, self.b.block)
        br = self.b.branch(head)
        if unroll:
            m = self.module
            full = m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.full")])
            br.set_metadata("llvm.loop", m.add_metadata([ir.MetaDataString(m, f"__ts_loop_{self.loop_ids}"), full]))
            self.loop_ids += 1
        self.b.position_at_end(exit_bb)

    def visit_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        st = storage_type(buf.dtype)
        size: PrimExpr | None = None
        n_const = 1
        for d in buf.shape:
            n_const = n_const * d.value if isinstance(d, IntImm) and n_const is not None else None
            size = d if size is None else size * d
        nbytes_const = None if n_const is None else n_const * buf.dtype.bytes
        on_stack = nbytes_const is not None and nbytes_const <= STACK_LIMIT_BYTES
        saved = self.fn.bufs.get(buf)
        if on_stack:
            ptr = self.entry_alloca(st, buf.name, align=64, count=max(n_const, 1))
            self.fn.bufs[buf] = ptr
            self.stmt(s.body)
        else:
            n = ir.Constant(I64, n_const) if n_const is not None else self._int_resize(self.expr(size), I64, True)
            nbytes = self.b.mul(n, ir.Constant(I64, buf.dtype.bytes))
            nbytes = self.b.and_(self.b.add(nbytes, ir.Constant(I64, 63)), ir.Constant(I64, ~63))
            nbytes = self.b.select(self.b.icmp_signed("<", nbytes, ir.Constant(I64, 64)), ir.Constant(I64, 64), nbytes)
            ptr = self.b.call(self.declare("aligned_alloc", PTR, [I64, I64]), [ir.Constant(I64, 64), nbytes])
            self.fn.bufs[buf] = ptr
            self.stmt(s.body)
            self.b.call(self.declare("free", VOID, [PTR]), [ptr])
        if saved is None:
            del self.fn.bufs[buf]
        else:
            self.fn.bufs[buf] = saved

    def visit_BufferStore(self, s: BufferStore) -> None:
        ptr, st = self.buffer_ptr(s.buffer)
        if len(s.indices) != 1:
            raise CodegenError(f"store to {s.buffer.name} has {len(s.indices)} indices; lower (flatten) it first")
        self.reduction = _reduction_update(s)
        try:
            value = self.to_storage(self.expr(s.value), s.buffer.dtype)
        finally:
            self.reduction = None
        index = s.indices[0]
        align = s.buffer.dtype.bytes
        if index.dtype.lanes == 1:
            self.b.store(value, self.b.gep(ptr, [self.expr(index)], inbounds=True, source_etype=st), align=align)
        elif _contiguous(index):
            p = self.b.gep(ptr, [self.expr(index.base)], inbounds=True, source_etype=st)
            self.b.store(value, p, align=align)
        else:
            idx = self.expr(index)
            for k in range(index.dtype.lanes):
                lane = ir.Constant(I32, k)
                p = self.b.gep(ptr, [self.b.extract_element(idx, lane)], inbounds=True, source_etype=st)
                self.b.store(self.b.extract_element(value, lane), p, align=align)

    def buffer_ptr(self, buf: Buffer) -> tuple[ir.Value, ir.Type]:
        ptr = self.fn.bufs.get(buf)
        if ptr is None:
            same = [b for b in self.fn.bufs if b.name == buf.name and b.dtype == buf.dtype]
            if len(same) != 1:
                raise CodegenError(f"buffer {buf.name} is used but neither a parameter nor allocated")
            ptr = self.fn.bufs[same[0]]
        st = storage_type(buf.dtype)
        if buf.dtype.lanes != 1:
            raise CodegenError(f"buffer {buf.name} has a vector element type {buf.dtype}")
        if not (isinstance(buf.elem_offset, IntImm) and buf.elem_offset.value == 0):
            ptr = self.b.gep(ptr, [self.expr(buf.elem_offset)], inbounds=True, source_etype=st)
        return ptr, st

    # storage conversions -------------------------------------------------------------------
    def to_storage(self, v: ir.Value, dt: DataType) -> ir.Value:
        if dt.is_bool:
            t = I8 if not isinstance(v.type, ir.VectorType) else ir.VectorType(I8, v.type.count)
            return self.b.zext(v, t)
        if dt.code == "bfloat":
            return self.bf16_register_bits(v)  # registers hold rounded values: store their bits exactly
        return v

    def from_storage(self, v: ir.Value, dt: DataType) -> ir.Value:
        if dt.is_bool:
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        if dt.code == "bfloat":
            return self.bf16_from_bits(v)
        return v

    # expressions ---------------------------------------------------------------------------
    def expr(self, e: PrimExpr, statement: bool = False) -> ir.Value:
        if statement and isinstance(e, Call):
            return self.visit_Call(e, statement=True)
        return (self._expr_methods.get(type(e)) or self.expr_method(type(e)))(self, e)

    def unsupported_expr(self, e: PrimExpr) -> ir.Value:
        raise CodegenError(f"code generation does not support {type(e).__name__} expressions ({e})")

    def visit_IntImm(self, e: IntImm) -> ir.Value:
        return ir.Constant(value_type(e.dtype), e.value)

    def visit_FloatImm(self, e: FloatImm) -> ir.Value:
        v = e.value
        if e.dtype.code == "bfloat":
            import ml_dtypes
            import numpy as np

            v = float(np.float32(ml_dtypes.bfloat16(v)))
        return ir.Constant(value_type(e.dtype), v)

    def visit_StringImm(self, e: StringImm) -> ir.Value:
        raise CodegenError(f"a string constant {e.value!r} cannot be compiled")

    def visit_Var(self, e: Var) -> ir.Value:
        v = self.fn.vars.get(e)
        if v is None:
            raise CodegenError(f"variable {e.name} is used outside of its definition")
        return v

    def _arith(self, e: Any, int_op: str, float_op: str) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if dt.is_float:
            r = getattr(self.b, float_op)(a, b, flags=REDUCTION_FLAGS if e is self.reduction else ())
            return self.round_bf16(r) if dt.code == "bfloat" else r
        return getattr(self.b, int_op)(a, b)

    def _fmuladd(self, e: Add | Sub) -> ir.Value | None:
        """``llvm.fmuladd`` for ``a * b + c``, ``a * b - c`` or ``c - a * b`` when the target
        contracts (float32/float64 only); None otherwise."""
        dt = e.dtype
        if not (self.target.fp_contract and dt.code == "float" and dt.bits in (32, 64)):
            return None
        a, b = e.a, e.b
        if isinstance(a, Mul) and a.dtype == dt:
            x, y = self.expr(a.a), self.expr(a.b)
            c = self.expr(b)
            if isinstance(e, Sub):
                c = self.b.fneg(c)
        elif isinstance(b, Mul) and b.dtype == dt:
            x, y = self.expr(b.a), self.expr(b.b)
            c = self.expr(a)
            if isinstance(e, Sub):
                x = self.b.fneg(x)
        else:
            return None
        return self.call_intrinsic("llvm.fmuladd", [x, y, c], REDUCTION_FLAGS if e is self.reduction else ())

    def visit_Add(self, e: Add) -> ir.Value:
        r = self._fmuladd(e)
        return r if r is not None else self._arith(e, "add", "fadd")

    def visit_Sub(self, e: Sub) -> ir.Value:
        r = self._fmuladd(e)
        return r if r is not None else self._arith(e, "sub", "fsub")

    def visit_Mul(self, e: Mul) -> ir.Value:
        return self._arith(e, "mul", "fmul")

    def _safe_divisor(self, e: Any, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value | None]:
        """A divisor that cannot trap (0 and, for signed types, -1 replaced by 1) and the -1 lanes."""
        dt = e.dtype
        if isinstance(e.b, IntImm) and e.b.value not in (0, -1) and self.mask is None:
            return b, None
        one = self.const(1, dt)
        bad = self.b.icmp_signed("==", b, self.const(0, dt))
        minus = None
        if dt.is_int:
            minus = self.b.icmp_signed("==", b, self.const(-1, dt))
            bad = self.b.or_(bad, minus)
        if self.mask is not None and dt.lanes > 1:
            bad = self.b.or_(bad, self.b.not_(self.mask))
        return self.b.select(bad, one, b), minus

    def _int_div(self, e: Any, kind: str) -> ir.Value:
        dt = e.dtype
        b_ = self.b
        a, b = self.expr(e.a), self.expr(e.b)
        if dt.is_float:
            if kind == "div":
                r = b_.fdiv(a, b)
            elif kind == "mod":
                r = b_.frem(a, b)
            else:
                q = self.call_intrinsic("llvm.floor", [b_.fdiv(a, b)])
                if dt.code == "bfloat":
                    q = self.round_bf16(self.call_intrinsic("llvm.floor", [self.round_bf16(b_.fdiv(a, b))]))
                if kind == "floordiv":
                    return q
                prod = b_.fmul(q, b)
                if dt.code == "bfloat":
                    prod = self.round_bf16(prod)
                r = b_.fsub(a, prod)
            return self.round_bf16(r) if dt.code == "bfloat" else r
        if not dt.is_integer:
            raise CodegenError(f"division of {dt} values is not supported")
        sb, minus = self._safe_divisor(e, a, b)
        zero = self.const(0, dt)
        if dt.is_uint:
            return b_.udiv(a, sb) if kind in ("div", "floordiv") else b_.urem(a, sb)
        if kind in ("div", "floordiv"):
            q = b_.sdiv(a, sb)
            if minus is not None:
                q = b_.select(minus, b_.sub(zero, a), q)
            if kind == "div":
                return q
            r = b_.srem(a, sb)
            adjust = b_.and_(
                b_.icmp_signed("!=", r, zero), b_.xor(b_.icmp_signed("<", r, zero), b_.icmp_signed("<", sb, zero))
            )
            return b_.sub(q, b_.zext(adjust, q.type))
        r = b_.srem(a, sb)
        if minus is not None:
            r = b_.select(minus, zero, r)
        if kind == "mod":
            return r
        adjust = b_.and_(
            b_.icmp_signed("!=", r, zero), b_.xor(b_.icmp_signed("<", r, zero), b_.icmp_signed("<", b, zero))
        )
        return b_.select(adjust, b_.add(r, b), r)

    def visit_Div(self, e: Div) -> ir.Value:
        return self._int_div(e, "div")

    def visit_Mod(self, e: Mod) -> ir.Value:
        return self._int_div(e, "mod")

    def visit_FloorDiv(self, e: FloorDiv) -> ir.Value:
        return self._int_div(e, "floordiv")

    def visit_FloorMod(self, e: FloorMod) -> ir.Value:
        return self._int_div(e, "floormod")

    def _minmax(self, e: Any, op: str) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.dtype
        if e is self.reduction:
            return self.call_intrinsic("llvm.maxnum" if op == ">" else "llvm.minnum", [a, b], MINMAX_REDUCTION_FLAGS)
        # Python's min(a, b) is ``b if b < a else a``
        if dt.is_float:
            take_b = self.b.fcmp_ordered(op, b, a)
        elif dt.is_uint or dt.is_bool:
            take_b = self.b.icmp_unsigned(op, b, a)
        else:
            take_b = self.b.icmp_signed(op, b, a)
        return self.b.select(take_b, b, a)

    def visit_Min(self, e: Min) -> ir.Value:
        return self._minmax(e, "<")

    def visit_Max(self, e: Max) -> ir.Value:
        return self._minmax(e, ">")

    def _cmp(self, e: Any, op: str) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if dt.is_float:
            if op == "!=":
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(op, a, b)
        if dt.is_uint or dt.is_bool:
            return self.b.icmp_unsigned(op, a, b)
        return self.b.icmp_signed(op, a, b)

    def visit_EQ(self, e: EQ) -> ir.Value:
        return self._cmp(e, "==")

    def visit_NE(self, e: NE) -> ir.Value:
        return self._cmp(e, "!=")

    def visit_LT(self, e: LT) -> ir.Value:
        return self._cmp(e, "<")

    def visit_LE(self, e: LE) -> ir.Value:
        return self._cmp(e, "<=")

    def visit_GT(self, e: GT) -> ir.Value:
        return self._cmp(e, ">")

    def visit_GE(self, e: GE) -> ir.Value:
        return self._cmp(e, ">=")

    def visit_And(self, e: And) -> ir.Value:
        if e.dtype.lanes == 1 and _contains(e.b, _unsafe):
            return self.lazy(self.expr(e.a), e.b, IntImm(e.dtype, 0), e.dtype)
        return self.b.and_(self.expr(e.a), self.expr(e.b))

    def visit_Or(self, e: Or) -> ir.Value:
        if e.dtype.lanes == 1 and _contains(e.b, _unsafe):
            return self.lazy(self.expr(e.a), IntImm(e.dtype, 1), e.b, e.dtype)
        return self.b.or_(self.expr(e.a), self.expr(e.b))

    def visit_Not(self, e: Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def visit_Select(self, e: Select) -> ir.Value:
        return self.select(e.condition, e.true_value, e.false_value, e.dtype)

    def select(self, cond: PrimExpr, t: PrimExpr, f: PrimExpr, dt: DataType) -> ir.Value:
        c = self.expr(cond)
        if not (_contains(t, _unsafe) or _contains(f, _unsafe)):
            return self.b.select(c, self.expr(t), self.expr(f))
        if cond.dtype.lanes == 1 and self.mask is None:
            if _load_or_zero(t, f):
                return self.load_or_zero(c, t)
            if _load_or_zero(f, t):
                return self.load_or_zero(self.b.not_(c), f)
        if cond.dtype.lanes == 1:
            if _contains(t, _unguardable) or _contains(f, _unguardable):
                return self.lazy(c, t, f, dt)
            # no branch: each side's loads read element 0 (which exists) where that side is not
            # taken, so a padded convolution's update stays one basic block and LLVM keeps its
            # accumulators in registers
            return self.each_side_under(c, t, f, "guard")
        # vector condition: evaluate each side with the other side's lanes masked off
        return self.each_side_under(c, t, f, "mask")

    def load_or_zero(self, c: ir.Value, load: BufferLoad) -> ir.Value:
        """``select(c, load, 0)`` as one load from an address selected between the element's and
        a constant zero's: no branch and no select of the value, so the load can stay an operand
        of its use (a padded convolution's input broadcast into its FMA)."""
        ptr, st = self.buffer_ptr(load.buffer)
        index = load.indices[0]
        lanes = index.dtype.lanes
        first = index.base if lanes > 1 else index
        real = self.b.gep(ptr, [self._guarded_index(first)], inbounds=True, source_etype=st)
        zero = self._zeros(st, lanes)
        addr = self.b.select(c, real, self.b.bitcast(zero, real.type))
        typ = ir.VectorType(st, lanes) if lanes > 1 else st
        return self.from_storage(self.b.load(addr, typ=typ, align=load.buffer.dtype.bytes), load.dtype)

    def _zeros(self, st: ir.Type, lanes: int) -> ir.GlobalVariable:
        """A module-private constant of ``lanes`` zero elements of storage type ``st``."""
        name = f"__ts_zeros_{st}_{lanes}".replace(" ", "")
        if name in self.module.globals:
            return self.module.globals[name]
        arr = ir.ArrayType(st, lanes)
        g = ir.GlobalVariable(self.module, arr, name=name)
        g.global_constant = True
        g.linkage = "private"
        g.align = 64
        g.initializer = ir.Constant(arr, None)
        return g

    def each_side_under(self, c: ir.Value, t: PrimExpr, f: PrimExpr, attr: str) -> ir.Value:
        """``select(c, t, f)`` with ``t`` evaluated under ``c`` and ``f`` under ``not c``, both
        and-ed into ``self.<attr>`` (``mask``: lanes; ``guard``: the scalar that loads obey)."""
        saved = getattr(self, attr)
        setattr(self, attr, c if saved is None else self.b.and_(saved, c))
        tv = self.expr(t)
        nc = self.b.not_(c)
        setattr(self, attr, nc if saved is None else self.b.and_(saved, nc))
        fv = self.expr(f)
        setattr(self, attr, saved)
        return self.b.select(c, tv, fv)

    def lazy(self, c: ir.Value, t: PrimExpr, f: PrimExpr, dt: DataType) -> ir.Value:
        then_bb = self.new_block("sel.t")
        else_bb = self.new_block("sel.f")
        end_bb = self.new_block("sel.end")
        self.b.cbranch(c, then_bb, else_bb)
        self.b.position_at_end(then_bb)
        tv = self.expr(t)
        t_end = self.b.block
        self.b.branch(end_bb)
        self.b.position_at_end(else_bb)
        fv = self.expr(f)
        f_end = self.b.block
        self.b.branch(end_bb)
        self.b.position_at_end(end_bb)
        phi = self.b.phi(value_type(dt))
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi

    def _int_resize(self, v: ir.Value, t: ir.Type, signed: bool) -> ir.Value:
        sw = (v.type.element if isinstance(v.type, ir.VectorType) else v.type).width
        tw = (t.element if isinstance(t, ir.VectorType) else t).width
        if tw < sw:
            return self.b.trunc(v, t)
        if tw > sw:
            return self.b.sext(v, t) if signed else self.b.zext(v, t)
        return v

    def visit_Cast(self, e: Cast) -> ir.Value:
        src, dst = e.value.dtype, e.dtype
        v = self.expr(e.value)
        if src == dst:
            return v
        b = self.b
        t = value_type(dst)
        lanes = dst.lanes

        def vt(s: ir.Type) -> ir.Type:
            return s if lanes == 1 else ir.VectorType(s, lanes)

        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, None) if lanes == 1 else self.const(0.0, src))
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, None))
        if src.is_bool:
            if dst.is_float:
                r = b.uitofp(v, t)
                return r
            return b.zext(v, t)
        if dst.is_integer:
            if src.is_integer:
                return self._int_resize(v, t, src.is_int)
            # float -> int truncates toward zero and wraps (through int64, as the interpreter does)
            if dst.bits == 64 and dst.is_uint:
                return b.fptoui(v, t)
            wide = b.fptosi(v, vt(I64))
            return self._int_resize(wide, t, True)
        # dst is a float
        if src.is_integer:
            mid = vt(F32) if dst.code == "bfloat" else t
            r = b.sitofp(v, mid) if src.is_int else b.uitofp(v, mid)
            return self.round_bf16(r) if dst.code == "bfloat" else r
        # float -> float (bfloat16 registers are float32)
        st, dt_ = v.type, t
        sw = {"half": 16, "float": 32, "double": 64}[str(st.element if lanes > 1 else st)]
        dw = {"half": 16, "float": 32, "double": 64}[str(dt_.element if lanes > 1 else dt_)]
        if dw > sw:
            r = b.fpext(v, dt_)
        elif dw < sw:
            r = b.fptrunc(v, dt_)
        else:
            r = v
        return self.round_bf16(r) if dst.code == "bfloat" else r

    def visit_Broadcast(self, e: Broadcast) -> ir.Value:
        return self.splat(self.expr(e.value), e.lanes)

    def visit_Ramp(self, e: Ramp) -> ir.Value:
        base = self.splat(self.expr(e.base), e.lanes)
        vt = ir.VectorType(value_type(e.base.dtype), e.lanes)
        if isinstance(e.stride, IntImm | FloatImm):
            offs = ir.Constant(vt, [k * e.stride.value for k in range(e.lanes)])
        else:
            k = ir.Constant(vt, [float(k) if e.base.dtype.is_float else k for k in range(e.lanes)])
            mul = self.b.fmul if e.base.dtype.is_float else self.b.mul
            offs = mul(k, self.splat(self.expr(e.stride), e.lanes))
        if not e.base.dtype.is_float:
            return self.b.add(base, offs)
        r = self.b.fadd(base, offs)
        return self.round_bf16(r) if e.base.dtype.code == "bfloat" else r  # registers hold bfloat16 values

    def visit_BufferLoad(self, e: BufferLoad) -> ir.Value:
        if len(e.indices) != 1:
            raise CodegenError(f"load of {e.buffer.name} has {len(e.indices)} indices; lower (flatten) it first")
        ptr, st = self.buffer_ptr(e.buffer)
        index = e.indices[0]
        align = e.buffer.dtype.bytes
        b = self.b
        if index.dtype.lanes == 1:
            p = b.gep(ptr, [self._guarded_index(index)], inbounds=True, source_etype=st)
            return self.from_storage(b.load(p, typ=st, align=align), e.buffer.dtype)
        lanes = index.dtype.lanes
        if self.mask is None and _contiguous(index):
            p = b.gep(ptr, [self._guarded_index(index.base)], inbounds=True, source_etype=st)
            return self.from_storage(b.load(p, typ=ir.VectorType(st, lanes), align=align), e.buffer.dtype)
        idx = self._guarded_index(index)
        if self.mask is not None:
            # masked-off lanes read element 0, which exists, and their values are never used
            idx = b.select(self.mask, idx, ir.Constant(idx.type, None))
        vec = ir.Constant(ir.VectorType(st, lanes), ir.Undefined)
        for k in range(lanes):
            lane = ir.Constant(I32, k)
            p = b.gep(ptr, [b.extract_element(idx, lane)], inbounds=True, source_etype=st)
            vec = b.insert_element(vec, b.load(p, typ=st, align=align), lane)
        return self.from_storage(vec, e.buffer.dtype)

    def _guarded_index(self, index: PrimExpr) -> ir.Value:
        """``index``, or 0 where the scalar guard of an enclosing branchless select is false."""
        idx = self.expr(index)
        if self.guard is None:
            return idx
        return self.b.select(self.guard, idx, ir.Constant(idx.type, None))

    # addresses (the operands of a unit's tile instructions) ------------------------------
    def address_call(self, op: str, args: tuple[PrimExpr, ...]) -> ir.Value:
        """``address_of(buf[i])``: the element's address; ``address_diff(p, q)``: ``p - q`` in
        bytes (i64); ``const_bytes(b0, b1, ...)``: the address of a 64-byte-aligned constant holding
        those bytes (a tile configuration)."""
        if op == "address_of":
            load = args[0]
            if not isinstance(load, BufferLoad) or len(load.indices) != 1:
                raise CodegenError(f"address_of takes one element of a flattened buffer, got {load}")
            ptr, st = self.buffer_ptr(load.buffer)
            return self.b.gep(ptr, [self.expr(load.indices[0])], inbounds=True, source_etype=st)
        if op == "address_diff":
            a, b = (self.b.ptrtoint(self.expr(x), I64) for x in args)
            return self.b.sub(a, b)
        data = bytes(int(a.value) for a in args if isinstance(a, IntImm))
        if len(data) != len(args):
            raise CodegenError("const_bytes takes integer constants")
        arr = ir.ArrayType(ir.IntType(8), len(data))
        g = ir.GlobalVariable(self.module, arr, name=self.module.get_unique_name("__ts_const"))
        g.global_constant = True
        g.linkage = "private"
        g.align = 64
        g.initializer = ir.Constant(arr, bytearray(data))
        return g

    # calls -------------------------------------------------------------------------------
    def call_intrinsic(self, name: str, args: list[ir.Value], fastmath: tuple[str, ...] = ()) -> ir.Value:
        t = args[0].type
        fn = self.declare(f"{name}.{_type_suffix(t)}", t, [a.type for a in args])
        return self.b.call(fn, args, fastmath=fastmath)

    def visit_Call(self, e: Call, statement: bool = False) -> ir.Value:
        op = e.op[4:] if e.op.startswith("tir.") else e.op
        dt = e.dtype
        if op == "if_then_else":
            return self.select(e.args[0], e.args[1], e.args[2], dt)
        if op == "likely":
            return self.expr(e.args[0])
        if op.startswith("llvm."):
            args = [self.to_call(self.expr(a), a.dtype) for a in e.args]
            ret = VOID if (statement and dt.is_handle) else call_type(dt)
            fn = self.declare(op, ret, [a.type for a in args])
            if fn.function_type.return_type != ret or [a.type for a in args] != list(fn.function_type.args):
                raise CodegenError(f"intrinsic {op} is called with different types in one program")
            result = self.b.call(fn, args)
            return result if ret is VOID else self.from_call(result, dt)
        if op == "reinterpret":
            return self.reinterpret(self.expr(e.args[0]), e.args[0].dtype, dt)
        if op in ("address_of", "address_diff", "const_bytes"):
            return self.address_call(op, e.args)
        args = [self.expr(a) for a in e.args]
        b = self.b
        if dt.is_integer:
            return self._int_call(op, e, args)
        if not dt.is_float:
            raise CodegenError(f"call of {op} returning {dt} is not supported")
        # math in float32 for half/bfloat16, rounded back once per call
        narrow = dt.bits == 16
        ct = (
            value_type(dt.with_lanes(dt.lanes))
            if not narrow
            else (F32 if dt.lanes == 1 else ir.VectorType(F32, dt.lanes))
        )
        cargs = []
        for a, ae in zip(args, e.args, strict=True):
            if ae.dtype.is_float and a.type != ct:
                aw = {"half": 16, "float": 32, "double": 64}[str(a.type.element if ae.dtype.lanes > 1 else a.type)]
                cw = {"half": 16, "float": 32, "double": 64}[str(ct.element if dt.lanes > 1 else ct)]
                a = b.fpext(a, ct) if cw > aw else b.fptrunc(a, ct)
            cargs.append(a)
        r = self._float_math(op, cargs, ct)
        if narrow:
            r = self.round_bf16(r) if dt.code == "bfloat" else b.fptrunc(r, value_type(dt))
        return r

    def _float_math(self, op: str, args: list[ir.Value], t: ir.Type) -> ir.Value:
        b = self.b
        one = ir.Constant(t, 1.0) if not isinstance(t, ir.VectorType) else ir.Constant(t, [1.0] * t.count)
        if op in ("exp", "erf") and len(args) == 1 and fastmath.is_f32(t):  # vectorizable, no libm call a lane
            return (fastmath.exp_f32 if op == "exp" else fastmath.erf_f32)(b, self.call_intrinsic, args[0])
        if op in _FLOAT_INTRINSICS and len(args) == (2 if op in ("pow", "power") else 1):
            return self.call_intrinsic(_FLOAT_INTRINSICS[op], args)
        if op == "rsqrt" and len(args) == 1:
            return b.fdiv(one, self.call_intrinsic("llvm.sqrt", args))
        if op == "sigmoid" and len(args) == 1:
            return b.fdiv(one, b.fadd(one, self._float_math("exp", [b.fneg(args[0])], t)))
        if op == "fmod" and len(args) == 2:
            return b.frem(args[0], args[1])
        if op == "fma" and len(args) == 3:  # one rounding (te.fma_sum)
            return self.call_intrinsic("llvm.fma", args)
        if op in _LIBM and len(args) == 1:
            et = t.element if isinstance(t, ir.VectorType) else t
            name = _LIBM[op] + ("f" if isinstance(et, ir.FloatType) else "")
            fn = self.declare(name, et, [et])
            if not isinstance(t, ir.VectorType):
                return b.call(fn, args)
            out = ir.Constant(t, ir.Undefined)
            for k in range(t.count):
                lane = ir.Constant(I32, k)
                out = b.insert_element(out, b.call(fn, [b.extract_element(args[0], lane)]), lane)
            return out
        raise CodegenError(f"unsupported math call {op} with {len(args)} arguments")

    def _int_call(self, op: str, e: Call, args: list[ir.Value]) -> ir.Value:
        b = self.b
        dt = e.dtype
        if op == "abs" and len(args) == 1:
            if dt.is_uint:
                return args[0]
            return b.select(b.icmp_signed("<", args[0], self.const(0, dt)), b.sub(self.const(0, dt), args[0]), args[0])
        bitwise = {"bitwise_and": "and_", "bitwise_or": "or_", "bitwise_xor": "xor"}
        if op in bitwise and len(args) == 2:
            return getattr(b, bitwise[op])(args[0], args[1])
        if op == "bitwise_not" and len(args) == 1:
            return b.not_(args[0])
        if op in ("shift_left", "shift_right") and len(args) == 2:
            amount = b.urem(args[1], self.const(dt.bits, dt))
            if op == "shift_left":
                return b.shl(args[0], amount)
            return b.ashr(args[0], amount) if dt.is_int else b.lshr(args[0], amount)
        if op in ("floor", "ceil", "round", "nearbyint", "trunc") and len(args) == 1:
            return args[0]
        raise CodegenError(f"unsupported integer call {op}")


def _reduction_update(s: BufferStore) -> Add | Max | Min | None:
    """The ``+``, ``max`` or ``min`` of a scalar float32/float64 store ``B[i] = B[i] op x`` (a
    reduction block's update), else None.

    TensorIR leaves a reduction's order free (a schedule reorders, splits and rfactors its loops),
    so the codegen says so to LLVM: the ``fadd`` (or ``fmuladd``) gets ``reassoc nsz`` and
    ``max``/``min`` become ``llvm.maxnum``/``minnum`` with ``nnan nsz`` (a NaN in a max or min
    reduction gives an unspecified value, as under -ffast-math). LLVM's loop vectorizer then
    vectorizes a reduction loop the schedule left scalar, tail included (a softmax row of 197)."""
    v = s.value
    if s.indices[0].dtype.lanes != 1 or not isinstance(v, Add | Max | Min):
        return None
    if not (v.dtype.code == "float" and v.dtype.bits in (32, 64)):
        return None
    for x in (v.a, v.b):
        if isinstance(x, BufferLoad) and x.buffer is s.buffer and structural_equal(x.indices[0], s.indices[0]):
            return v
    return None


def _fix_loop_metadata(text: str) -> str:
    """Make the ``llvm.loop`` nodes self-referential and distinct, as LLVM requires."""
    return re.sub(r'^(!\d+) = !\{ ?!"__ts_loop_\d+"', r"\1 = distinct !{ \1", text, flags=re.MULTILINE)


# ---------------------------------------------------------------------------------------
# public API


def generate(func: PrimFunc, target: Hardware | str | None = None, name: str | None = None) -> str:
    """LLVM IR text for a lowered PrimFunc (see the module docstring for the signature)."""
    target = resolve(target)
    if name is None:
        name = str(func.attr_dict.get("global_symbol", "main"))
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise ValueError(f"function name {name!r} is not a valid symbol")
    _check_intrinsic_features(func, target)
    gen = _CodeGen(func, target, name)
    return gen.build()


@cache
def _shipped_features() -> dict[str, tuple[str, ...]]:
    """LLVM intrinsic name -> the CPU features its shipped YAML intrinsic set requires."""
    return _features_of(shipped_intrinsics())


def _features_of(intrinsics: Iterable[Intrinsic]) -> dict[str, tuple[str, ...]]:
    return {i.impl.intrinsic: i.requires.features for i in intrinsics if isinstance(i.impl, LLVMImpl | LLVMTileCall)}


def _check_intrinsic_features(func: PrimFunc, target: Hardware) -> None:
    """CodegenError when ``func`` calls an LLVM intrinsic whose YAML set needs a CPU feature the
    target lacks (LLVM would abort the process instead of selecting it)."""
    calls: set[str] = set()
    post_order_visit(func.body, lambda n: calls.add(n.op) if isinstance(n, Call) and n.op.startswith("llvm.") else None)
    have = set(target.features)
    needs = {**_shipped_features(), **_features_of(target.intrinsics)}
    for op in sorted(calls):
        missing = [f for f in needs.get(op, ()) if f not in have]
        if missing:
            raise CodegenError(
                f"the program calls {op}, which needs CPU feature(s) {', '.join(missing)} that target "
                f"{target.name} ({target.cpu}) lacks; build it for a target that has them (jit=False to only compile)"
            )


def uses_parallel(llvm_ir: str) -> bool:
    return threadpool.LAUNCH_SYMBOL in llvm_ir


def optimize(llvm_ir: str, target: Hardware | str | None = None, speed_level: int = 3) -> llvm.ModuleRef:
    """Parse, verify and optimize (new pass builder, O3 by default) for the target."""
    target = resolve(target)
    _init_llvm()
    mod = llvm.parse_assembly(llvm_ir)
    mod.verify()
    tm = target_machine(target)
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def emit_assembly(mod: llvm.ModuleRef | str, target: Hardware | str | None = None) -> str:
    target = resolve(target)
    if isinstance(mod, str):
        _init_llvm()
        mod = llvm.parse_assembly(mod)
    return target_machine(target, pic=True).emit_assembly(mod)


def emit_object(mod: llvm.ModuleRef | str, target: Hardware | str | None = None) -> bytes:
    """A relocatable (position-independent) object file for the target."""
    target = resolve(target)
    if isinstance(mod, str):
        _init_llvm()
        mod = llvm.parse_assembly(mod)
    return target_machine(target, pic=True).emit_object(mod)
