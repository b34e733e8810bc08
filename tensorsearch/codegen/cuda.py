"""CUDA C source generation for GPU-scheduled PrimFuncs, with multi-instruction units (WMMA).

::

    from tensorsearch.codegen import cuda
    src = cuda.generate(sch.func, "nvidia-sm86")   # CUDA C text of one __global__ kernel
    # nvcc -arch=sm_80 -ptx kernel.cu

``generate`` lowers with a GPU pipeline (:data:`GPU_PIPELINE`: ``lower_units``, ``lower_init``,
``lower_blocks``, ``flatten_buffers``, ``simplify``; the CPU pipeline's ``check_cpu_target`` is
skipped) and prints the kernel ``extern "C" __global__ void name(half* __restrict__ A, ...)``.
Loops bound to ``blockIdx.*`` / ``threadIdx.*`` become ``int v = blockIdx.x;`` (the launch must
use the loops' extents, listed in the kernel's leading comment); ``shared`` allocations become
``__shared__`` arrays, ``local`` ones per-thread arrays; ``Evaluate(Call("tvm_storage_sync"))``
is ``__syncthreads()``.

**Units** (see docs/codegen.md): a block made by ``blockize`` and tensorized
``sch.tensorize(block, "<unit name>")`` (checked at schedule time with :func:`check_unit`) or
annotated ``sch.annotate(block, "cuda_unit", "<unit name>")`` (checked here) is computed by the
intrinsic set's unit (e.g. ``wmma_16x16x16_f16f32`` of intrinsics/cuda-wmma-f16.yaml); both
record the same ``cuda_unit`` annotation. ``lower_units`` reads
everything from the YAML: the inner block must compute the unit's ``compute`` semantics (same
operations, casts and dtypes; buffers paired in order); each operand's tile is the outer
block's region of its buffer (unit-extent dimensions dropped, the others in the description's
order); a reduce iterator whose tile is ``n`` times the intrinsic's extent becomes a serial
loop of ``n`` steps. The statement sequence is: one fragment per fragment-scope operand
(declared by the templates), the ``init`` intrinsic for the block's init, per step the ``load``
intrinsics and ``compute``, then ``store`` of the accumulator into its region.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import arith
from ..intrin import Intrinsic, available, load_intrinsic
from ..intrin.schema import CudaImpl
from ..ir import (
    Add,
    Allocate,
    And,
    Block,
    BlockRealize,
    Broadcast,
    Buffer,
    BufferLoad,
    BufferStore,
    Call,
    Cast,
    DataType,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimExpr,
    PrimFunc,
    Ramp,
    Select,
    SeqStmt,
    Stmt,
    StringImm,
    Sub,
    Var,
    post_order_visit,
)
from ..ir.expr import EQ, GE, GT, LE, LT, NE
from ..lower import flatten_buffers, lower_blocks, lower_init, simplify
from ..lower.common import LoweringError

MEMORY_SCOPES = ("global", "shared", "local")
UNIT_ATTR = "cuda_unit"

__all__ = [
    "GPU_PIPELINE",
    "MEMORY_SCOPES",
    "UNIT_ATTR",
    "CudaCodegenError",
    "check_unit",
    "find_unit",
    "generate",
    "lower_gpu",
    "lower_units",
    "unit_of_compute",
]


class CudaCodegenError(LoweringError):
    """A construct the CUDA generator cannot emit, or a unit block that does not fit its unit."""


# ---------------------------------------------------------------------------------------------
# intrinsic lookup


def find_unit(name: str, target: Any = None) -> tuple[Any, Any]:
    """(IntrinsicSet, Unit) for the unit ``name``: the target's sets first, then every set found."""
    sets: list[Any] = []
    hw_sets = getattr(target, "intrinsic_sets", None)
    if hw_sets:
        sets.extend(load_intrinsic(s) if isinstance(s, str) else s for s in hw_sets)
    for n in available():
        try:
            sets.append(load_intrinsic(n))
        except Exception:
            continue
    for s in sets:
        for u in getattr(s, "units", ()):
            if u.name == name:
                return s, u
    raise CudaCodegenError(f"no intrinsic set on the search path defines the unit {name!r}")


def unit_of_compute(intr: Intrinsic) -> tuple[Any, Any] | None:
    """(IntrinsicSet, Unit) of the first unit of ``intr``'s set whose ``compute`` is ``intr``, else None."""
    try:
        iset = load_intrinsic(intr.set_name)
    except Exception:
        return None
    for u in getattr(iset, "units", ()):
        if u.compute == intr.name:
            return iset, u
    return None


def check_unit(outer: Block, unit: Any, iset: Any) -> None:
    """Raise :class:`CudaCodegenError` unless block ``outer`` can be computed by ``unit`` of ``iset``.

    These are exactly the checks ``lower_units`` makes (it builds the unit's statement sequence
    the same way), so a block that passes is lowered without error; ``tensorize`` calls this.
    """
    _tile_statement(outer, unit, iset)


# ---------------------------------------------------------------------------------------------
# lower_units


def _loads_in_order(e: Any, out: list[BufferLoad]) -> None:
    if isinstance(e, BufferLoad):
        out.append(e)
        return
    for f in getattr(e, "__dataclass_fields__", {}):
        v = getattr(e, f)
        if isinstance(v, PrimExpr):
            _loads_in_order(v, out)


def _shape_of(e: Any) -> Any:
    """The operation structure of ``e``: node types, dtypes and constants, loads as their dtype."""
    if isinstance(e, BufferLoad):
        return ("load", str(e.dtype))
    if isinstance(e, (IntImm, FloatImm)):
        return (type(e).__name__, str(e.dtype), e.value)
    if isinstance(e, Cast):
        return ("cast", str(e.dtype), _shape_of(e.value))
    fields = [getattr(e, f) for f in getattr(e, "__dataclass_fields__", {})]
    return (
        type(e).__name__,
        str(getattr(e, "dtype", "")),
        tuple(_shape_of(v) for v in fields if isinstance(v, PrimExpr)),
    )


def _has_block(stmt: Stmt) -> bool:
    found: list[bool] = []
    post_order_visit(stmt, lambda n: found.append(True) if isinstance(n, Block) else None)
    return bool(found)


def _single_block(stmt: Stmt) -> Block:
    found: list[Block] = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, Block) else None)
    found = [b for b in found if not _has_block(b.body)]
    if len(found) != 1:
        raise CudaCodegenError(f"a unit tile must hold exactly one inner block, found {[b.name for b in found]}")
    return found[0]


def _desc_store(intr: Intrinsic) -> BufferStore:
    blk = _single_block(intr.desc_func().body)
    if not isinstance(blk.body, BufferStore):
        raise CudaCodegenError(f"the description of intrinsic {intr.name} is not one store")
    return blk.body


def _c(value: int) -> IntImm:
    return IntImm(DataType("int", 32), value)


def _const_int(e: PrimExpr) -> int | None:
    e = arith.simplify(e)
    return e.value if isinstance(e, IntImm) else None


@dataclass
class _Operand:
    buffer: Buffer
    starts: list[PrimExpr]  # per buffer dimension
    dims: list[int]  # buffer dimension of each description dimension
    iters: list[str]  # intrinsic iterator of each description dimension


def _tile_statement(outer: Block, unit: Any, iset: Any) -> Stmt:
    compute: Intrinsic = iset[unit.compute]
    where = f"block {outer.name} (unit {unit.name})"
    inner = _single_block(outer.body)
    if not isinstance(inner.body, BufferStore):
        raise CudaCodegenError(f"{where}: the inner block {inner.name} is not one store")
    d_store, w_store = _desc_store(compute), inner.body
    if _shape_of(d_store.value) != _shape_of(w_store.value):
        raise CudaCodegenError(
            f"{where}: the inner block {inner.name} does not compute the semantics of {compute.name} "
            f"({compute.semantics}): operations, casts or dtypes differ"
        )
    d_loads: list[BufferLoad] = []
    w_loads: list[BufferLoad] = []
    _loads_in_order(d_store.value, d_loads)
    _loads_in_order(w_store.value, w_loads)
    pairs = [(d_store.buffer, w_store.buffer, d_store.indices)] + [
        (d.buffer, w.buffer, d.indices) for d, w in zip(d_loads, w_loads, strict=True)
    ]
    desc_params = {b: o for (_, b), o in zip(compute.desc_func().buffer_map, compute.operands, strict=True)}
    d_block = _single_block(compute.desc_func().body)
    if len(d_block.iter_vars) != len(compute.iterators):
        raise CudaCodegenError(f"the description of {compute.name} has {len(d_block.iter_vars)} block iterators")
    loop_iter = {iv.var: it.name for iv, it in zip(d_block.iter_vars, compute.iterators, strict=True)}
    extents = {it.name: it.extent for it in compute.iterators}
    kinds = {it.name: it.kind for it in compute.iterators}
    regions = {r.buffer: r for r in (*outer.reads, *outer.writes)}
    operands: dict[str, _Operand] = {}
    steps: dict[str, int] = {}
    for d_buf, w_buf, d_idx in pairs:
        op = desc_params[d_buf]
        if op.name in operands:
            continue
        if w_buf.dtype != op.dtype:
            raise CudaCodegenError(
                f"{where}: operand {op.name} is buffer {w_buf.name} of {w_buf.dtype}, the unit reads {op.dtype}"
            )
        region = regions.get(w_buf)
        if region is None:
            raise CudaCodegenError(
                f"{where}: operand {op.name} (buffer {w_buf.name}) has no region in the block's reads/writes"
            )
        exts = [_const_int(r.extent) for r in region.region]
        if any(e is None for e in exts):
            raise CudaCodegenError(f"{where}: operand {op.name}'s region of {w_buf.name} has a non-constant extent")
        dims = [k for k, e in enumerate(exts) if e != 1]
        iters = [loop_iter.get(i, None) if isinstance(i, Var) else None for i in d_idx]
        if None in iters or len(dims) > len(iters):
            raise CudaCodegenError(
                f"{where}: operand {op.name}'s region {exts} of {w_buf.name} does not fit its shape {list(op.shape)}"
            )
        # unit-extent intrinsic dimensions may be dropped too: align from the right
        dims = [k for k in range(len(exts))][len(exts) - len(iters) :] if len(dims) < len(iters) else dims
        for k, it in zip(dims, iters, strict=True):
            n, r = divmod(exts[k], extents[it])
            if r or (n != 1 and kinds[it] != "reduce"):
                kind = getattr(kinds[it], "value", kinds[it])
                raise CudaCodegenError(
                    f"{where}: iterator {it} (extent {extents[it]}, {kind}) covers {exts[k]} elements of "
                    f"{w_buf.name} dimension {k}; only a reduce iterator may cover a multiple"
                )
            if steps.setdefault(it, n) != n:
                raise CudaCodegenError(f"{where}: iterator {it} covers different extents in different operands")
        if dims[-1] != len(exts) - 1:
            raise CudaCodegenError(
                f"{where}: operand {op.name} needs unit-stride rows but uses {w_buf.name} dimension {dims[-1]}"
            )
        operands[op.name] = _Operand(w_buf, [r.min for r in region.region], dims, iters)
    reduce_steps = {it: n for it, n in steps.items() if n > 1}
    step_var = Var("unit_k", DataType("int", 32))

    def stride(o: _Operand) -> PrimExpr:
        s = 1
        for x in o.buffer.shape[o.dims[-2] + 1 :] if len(o.dims) > 1 else ():
            v = _const_int(x)
            if v is None:
                raise CudaCodegenError(f"{where}: buffer {o.buffer.name} has a non-constant shape")
            s *= v
        return _c(s)

    def pointer(o: _Operand) -> PrimExpr:
        starts = list(o.starts)
        for k, it in zip(o.dims, o.iters, strict=True):
            if it in reduce_steps:
                starts[k] = starts[k] + step_var * extents[it]
        return Call(DataType("handle", 64), "address_of", (BufferLoad(o.buffer, tuple(starts)),))

    fragments = {
        op.name: f"{operands[op.name].buffer.name}_{op.scope.split('.')[-1]}"
        for op in compute.operands
        if op.scope not in MEMORY_SCOPES
    }
    stmts: list[Stmt] = []
    impl = compute.impl
    assert isinstance(impl, CudaImpl)
    for name, var in fragments.items():
        stmts.append(_verbatim(impl.declare(name, var)))

    def call(intr: Intrinsic, binding: dict[str, str]) -> Stmt:
        """``intr``'s template; binding maps its operands to compute operands."""
        args: list[PrimExpr] = [StringImm(f"{intr.set_name}/{intr.name}")]
        for op in intr.operands:
            src = binding[op.name]
            if op.scope in MEMORY_SCOPES:
                o = operands[src]
                args += [StringImm(op.name), pointer(o), StringImm(op.name + ".stride"), stride(o)]
            else:
                args += [StringImm(op.name), StringImm(fragments[src])]
        return Evaluate(Call(DataType("int", 32), "cuda.template", tuple(args)))

    def fragment_operand(intr: Intrinsic) -> str:
        frag = [o.name for o in intr.operands if o.scope not in MEMORY_SCOPES]
        if len(frag) != 1:
            raise CudaCodegenError(f"{where}: unit member {intr.name} must have exactly one fragment operand")
        return frag[0]

    loads = dict(unit.loads)
    acc = [o.name for o in compute.operands if o.role in ("accumulator", "output")]
    if len(acc) != 1:
        raise CudaCodegenError(f"{where}: the compute intrinsic {compute.name} needs exactly one accumulator operand")
    (acc_name,) = acc
    if outer.init is not None:
        if unit.init is None:
            raise CudaCodegenError(f"{where}: the block has an init but unit {unit.name} has no init intrinsic")
        init = iset[unit.init]
        stmts.append(call(init, {fragment_operand(init): acc_name}))
    elif acc_name in loads:
        pass
    else:
        raise CudaCodegenError(
            f"{where}: the block has no init and unit {unit.name} cannot load accumulator {acc_name}"
        )
    body: list[Stmt] = []
    for name, intr_name in loads.items():
        ld = iset[intr_name]
        binding = {o.name: name for o in ld.operands}
        (body if name != acc_name else stmts).append(call(ld, binding))
    body.append(call(compute, {o.name: o.name for o in compute.operands}))
    if len(reduce_steps) > 1:
        raise CudaCodegenError(f"{where}: only one reduce iterator may cover a multiple of its extent")
    if reduce_steps:
        (n,) = reduce_steps.values()
        stmts.append(For(step_var, _c(0), _c(n), ForKind.SERIAL, SeqStmt(tuple(body))))
    else:
        stmts.extend(body)
    if unit.store is None:
        raise CudaCodegenError(f"{where}: unit {unit.name} has no store intrinsic")
    st = iset[unit.store]
    stmts.append(call(st, {o.name: acc_name for o in st.operands}))
    return SeqStmt(tuple(stmts))


def _verbatim(text: str) -> Stmt:
    return Evaluate(Call(DataType("int", 32), "cuda.verbatim", (StringImm(text),)))


def _rewrite(stmt: Stmt, fn: Any) -> Stmt:
    r = fn(stmt)
    if r is not None:
        return r
    if isinstance(stmt, SeqStmt):
        return SeqStmt(tuple(_rewrite(s, fn) for s in stmt.stmts))
    if isinstance(stmt, (For, Allocate)):
        from dataclasses import replace

        return replace(stmt, body=_rewrite(stmt.body, fn))
    if isinstance(stmt, IfThenElse):
        return IfThenElse(
            stmt.condition,
            _rewrite(stmt.then_case, fn),
            None if stmt.else_case is None else _rewrite(stmt.else_case, fn),
        )
    if isinstance(stmt, BlockRealize):
        return BlockRealize(stmt.iter_values, stmt.predicate, _rewrite(stmt.block, fn))
    if isinstance(stmt, Block):
        from dataclasses import replace

        return replace(stmt, body=_rewrite(stmt.body, fn), init=None if stmt.init is None else _rewrite(stmt.init, fn))
    return stmt


def lower_units(func: PrimFunc, target: Any = None) -> PrimFunc:
    """Replace every block annotated ``cuda_unit`` by its unit's statement sequence (module doc)."""

    def fn(s: Stmt) -> Stmt | None:
        if isinstance(s, Block):
            ann = dict(s.annotations)
            if UNIT_ATTR in ann:
                iset, unit = find_unit(str(ann[UNIT_ATTR]), target)
                from dataclasses import replace

                rest = tuple((k, v) for k, v in s.annotations if k != UNIT_ATTR)
                return replace(s, body=_tile_statement(s, unit, iset), init=None, annotations=rest)
        return None

    from dataclasses import replace

    return replace(func, body=_rewrite(func.body, fn))


# No compact_buffers: unit strides are fixed by lower_units from the allocated shapes.
GPU_PIPELINE = [lower_units, lower_init, lower_blocks, flatten_buffers, simplify]


def lower_gpu(func: PrimFunc, target: Any = None) -> PrimFunc:
    """Run :data:`GPU_PIPELINE` (no CPU target check: thread bindings are kept)."""
    func = lower_units(func, target)
    for p in GPU_PIPELINE[1:]:
        func = p(func)
    return func


# ---------------------------------------------------------------------------------------------
# printing

_CTYPES = {
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "bool": "bool",
}
_BINOPS = {Add: "+", Sub: "-", Mul: "*", EQ: "==", NE: "!=", LT: "<", LE: "<=", GT: ">", GE: ">="}
_MATH = {"exp", "log", "sqrt", "rsqrt", "tanh", "floor", "ceil", "fabs", "erf", "pow", "log1p", "expm1"}


def _ctype(dtype: DataType) -> str:
    t = _CTYPES.get(str(dtype))
    if t is None:
        raise CudaCodegenError(f"the CUDA generator has no C type for dtype {dtype}")
    return t


@dataclass
class _Printer:
    lines: list[str] = field(default_factory=list)
    names: dict[Any, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    launch: dict[str, int] = field(default_factory=dict)
    includes: set[str] = field(default_factory=lambda: {"cuda_fp16.h"})
    intrinsics: dict[str, Intrinsic] = field(default_factory=dict)
    warp_units: bool = False

    def name(self, key: Any, hint: str) -> str:
        if key not in self.names:
            base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "v"
            n, i = base, 0
            while n in self.used:
                i += 1
                n = f"{base}_{i}"
            self.used.add(n)
            self.names[key] = n
        return self.names[key]

    def intrinsic(self, ref: str) -> Intrinsic:
        if ref not in self.intrinsics:
            set_name, name = ref.split("/", 1)
            self.intrinsics[ref] = load_intrinsic(set_name)[name]
        return self.intrinsics[ref]

    # expressions ---------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        if isinstance(e, IntImm):
            if e.dtype.code == "bool" or str(e.dtype) == "bool":
                return "true" if e.value else "false"
            suffix = "LL" if e.dtype.bits == 64 else ""
            return f"{e.value}{suffix}"
        if isinstance(e, FloatImm):
            v = repr(float(e.value))
            if v in ("inf", "-inf", "nan"):
                v = {"inf": "INFINITY", "-inf": "-INFINITY", "nan": "NAN"}[v]
            if str(e.dtype) == "float32":
                return f"{v}f" if "INF" not in v and "NAN" not in v else v
            if str(e.dtype) == "float16":
                return f"__float2half({v}f)"
            return v
        if isinstance(e, Var):
            return self.name(e, e.name)
        if isinstance(e, tuple(_BINOPS)):
            return f"({self.expr(e.a)} {_BINOPS[type(e)]} {self.expr(e.b)})"
        if isinstance(e, (Div, Mod)):
            return f"({self.expr(e.a)} {'/' if isinstance(e, Div) else '%'} {self.expr(e.b)})"
        if isinstance(e, FloorDiv):
            if e.dtype.code == "float" or str(e.dtype).startswith("float"):
                return f"floor({self.expr(e.a)} / {self.expr(e.b)})"
            a, b = self.expr(e.a), self.expr(e.b)
            return f"(({a}) / ({b}) - ((({a}) % ({b}) != 0) && ((({a}) < 0) != (({b}) < 0))))"
        if isinstance(e, FloorMod):
            a, b = self.expr(e.a), self.expr(e.b)
            return f"(((({a}) % ({b})) + ({b})) % ({b}))"
        if isinstance(e, (Min, Max)):
            return f"{'min' if isinstance(e, Min) else 'max'}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, And):
            return f"({self.expr(e.a)} && {self.expr(e.b)})"
        if isinstance(e, Or):
            return f"({self.expr(e.a)} || {self.expr(e.b)})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):
            return f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"
        if isinstance(e, Cast):
            return f"(({_ctype(e.dtype)})({self.expr(e.value)}))"
        if isinstance(e, BufferLoad):
            (idx,) = e.indices
            if isinstance(idx, Ramp) or e.dtype.lanes != 1:
                raise CudaCodegenError(f"vector load of {e.buffer.name} is not supported by the CUDA generator")
            return f"{self.buffer(e.buffer)}[{self.expr(idx)}]"
        if isinstance(e, (Ramp, Broadcast)):
            raise CudaCodegenError("vector expressions (Ramp/Broadcast) are not supported by the CUDA generator")
        if isinstance(e, Call):
            return self.call(e)
        raise CudaCodegenError(f"the CUDA generator cannot print {type(e).__name__}")

    def call(self, e: Call) -> str:
        if e.op == "address_of":
            (load,) = e.args
            assert isinstance(load, BufferLoad)
            return f"(&{self.expr(load)})"
        if e.op == "if_then_else":
            c, a, b = e.args
            return f"({self.expr(c)} ? {self.expr(a)} : {self.expr(b)})"
        if e.op in _MATH:
            fn = e.op if str(e.dtype) != "float32" else e.op + "f"
            if str(e.dtype) == "float16":
                args = ", ".join(f"__half2float({self.expr(a)})" for a in e.args)
                return f"__float2half({e.op}f({args}))"
            return f"{fn}({', '.join(self.expr(a) for a in e.args)})"
        raise CudaCodegenError(f"the CUDA generator does not know the call {e.op!r}")

    def buffer(self, b: Buffer) -> str:
        return self.name(b, b.name)

    # statements ----------------------------------------------------------------------------
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def stmt(self, s: Stmt, depth: int) -> None:
        if isinstance(s, SeqStmt):
            written: set[Buffer] = set()
            for x in s.stmts:
                if written & _shared_accesses(x, reads=True):
                    self.emit(depth, "__syncthreads();")
                    written = set()
                written |= _shared_accesses(x, reads=False)
                self.stmt(x, depth)
        elif isinstance(s, For):
            v = self.name(s.loop_var, s.loop_var.name)
            if s.kind == ForKind.THREAD_BINDING:
                tag = s.thread_binding or ""
                if not (tag.startswith("blockIdx.") or tag.startswith("threadIdx.")):
                    raise CudaCodegenError(
                        f"loop {s.loop_var.name}: thread binding {tag!r} is not supported (blockIdx.*/threadIdx.* only)"
                    )
                ext = _const_int(s.extent)
                if ext is None:
                    raise CudaCodegenError(f"loop {s.loop_var.name} bound to {tag} needs a constant extent")
                if self.launch.setdefault(tag, ext) != ext:
                    raise CudaCodegenError(
                        f"loop {s.loop_var.name}: {tag} is bound with extents {self.launch[tag]} and {ext}"
                    )
                self.emit(depth, "{")
                self.emit(
                    depth + 1,
                    f"int {v} = {tag} + {self.expr(s.min)};" if _const_int(s.min) != 0 else f"int {v} = {tag};",
                )
                self.stmt(s.body, depth + 1)
                self.emit(depth, "}")
                return
            t = _ctype(s.loop_var.dtype)
            if s.kind == ForKind.UNROLLED:
                self.emit(depth, "#pragma unroll")
            lo, ext = self.expr(s.min), self.expr(s.extent)
            end = ext if _const_int(s.min) == 0 else f"{lo} + {ext}"
            self.emit(depth, f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
            self.stmt(s.body, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if ({self.expr(s.condition)}) {{")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "} else {")
                self.stmt(s.else_case, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, BufferStore):
            (idx,) = s.indices
            if isinstance(idx, Ramp) or s.value.dtype.lanes != 1:
                raise CudaCodegenError(f"vector store to {s.buffer.name} is not supported by the CUDA generator")
            self.emit(depth, f"{self.buffer(s.buffer)}[{self.expr(idx)}] = {self.expr(s.value)};")
        elif isinstance(s, Allocate):
            b = s.buffer
            n = 1
            for x in b.shape:
                v = _const_int(x)
                if v is None:
                    raise CudaCodegenError(f"allocation {b.name} needs a constant size")
                n *= v
            prefix = {"shared": "__shared__ ", "local": ""}.get(b.scope)
            if prefix is None:
                raise CudaCodegenError(f"allocation {b.name} in scope {b.scope} is not supported (shared or local)")
            self.emit(depth, f"{prefix}{_ctype(b.dtype)} {self.buffer(b)}[{n}];")
            self.stmt(s.body, depth)
        elif isinstance(s, Evaluate):
            e = s.value
            if isinstance(e, Call) and e.op == "cuda.verbatim":
                (text,) = e.args
                self.emit(depth, text.value)
            elif isinstance(e, Call) and e.op == "cuda.template":
                intr = self.intrinsic(e.args[0].value)
                impl = intr.impl
                assert isinstance(impl, CudaImpl)
                self.includes.update(impl.includes)
                values: dict[str, str] = {}
                rest = list(e.args[1:])
                for key, val in zip(rest[::2], rest[1::2], strict=True):
                    values[key.value] = val.value if isinstance(val, StringImm) else self.expr(val)
                self.emit(depth, impl.render(values))
                self.warp_units = True
            elif isinstance(e, Call) and e.op == "tvm_storage_sync":
                self.emit(depth, "__syncthreads();")
            else:
                self.emit(depth, f"{self.expr(e)};")
        elif isinstance(s, (Block, BlockRealize)):
            raise CudaCodegenError(f"block {getattr(s, 'name', '')} survived lowering")
        else:
            raise CudaCodegenError(f"the CUDA generator cannot print {type(s).__name__}")


def _shared_accesses(stmt: Stmt, reads: bool) -> set[Buffer]:
    """The shared buffers ``stmt`` reads (or writes)."""
    out: set[Buffer] = set()

    def visit(n: Any) -> None:
        if reads and isinstance(n, BufferLoad) and n.buffer.scope == "shared":
            out.add(n.buffer)
        if not reads and isinstance(n, BufferStore) and n.buffer.scope == "shared":
            out.add(n.buffer)

    post_order_visit(stmt, visit)
    return out


def _is_lowered(func: PrimFunc) -> bool:
    found: list[bool] = []
    post_order_visit(func.body, lambda n: found.append(True) if isinstance(n, (Block, BlockRealize)) else None)
    return not found


def generate(func: PrimFunc, target: Any = None, name: str | None = None) -> str:
    """The CUDA C source of ``func`` as one ``extern "C" __global__`` kernel (module doc).

    ``target`` (a Hardware, a descriptor name or None) is searched first for unit intrinsics.
    ``func`` may be scheduled (it is lowered with :func:`lower_gpu`) or already lowered.
    """
    if isinstance(target, str):
        from .. import hardware

        try:
            target = hardware.load(target)
        except Exception:
            target = None
    low = func if _is_lowered(func) else lower_gpu(func, target)
    p = _Printer()
    kernel = name or dict(func.attrs).get("global_symbol", None) or "main"
    if kernel == "main":
        kernel = "main_kernel"  # ``main`` cannot be a __global__ function
    params = []
    bufs = dict(low.buffer_map)
    for v in low.params:
        if v in bufs:
            b = bufs[v]
            params.append(f"{_ctype(b.dtype)}* __restrict__ {p.buffer(b)}")
        else:
            params.append(f"{_ctype(v.dtype)} {p.name(v, v.name)}")
    p.stmt(low.body, 1)
    if p.warp_units and "threadIdx.x" not in p.launch:
        p.launch["threadIdx.x"] = 32  # unit intrinsics (WMMA) are warp-wide: one warp per unit
    launch = ", ".join(f"{k}={v}" for k, v in sorted(p.launch.items()))
    head = [f"#include <{h}>" for h in sorted(p.includes)]
    head += ["", f"// launch: {launch or 'grid 1, block 1'}"]
    head.append(f'extern "C" __global__ void {p.name(("kernel",), str(kernel))}({", ".join(params)}) {{')
    return "\n".join([*head, *p.lines, "}", ""])
