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

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Any

from .. import ir
from ..arith import const_int_bound
from ..arith import simplify as simplify_expr
from ..ir import PrimExpr, PrimFunc, Stmt
from ..lower.gpu import GPU_PIPELINE, CudaCodegenError, lower_gpu, lower_units
from ..schedule.units import MEMORY_SCOPES, UNIT_ATTR, const_value
from ..target import Hardware, Intrinsic, resolve
from ..target.intrinsics import CudaImpl

__all__ = [
    "GPU_PIPELINE",
    "MEMORY_SCOPES",
    "UNIT_ATTR",
    "CudaCodegenError",
    "CudaKernel",
    "NvccNotFound",
    "compile_cubin",
    "compile_cuda",
    "find_nvcc",
    "generate",
    "generate_kernel",
    "lower_gpu",
    "lower_units",
]


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
_COMPARISONS = {ir.EQ: "==", ir.NE: "!=", ir.LT: "<", ir.LE: "<=", ir.GT: ">", ir.GE: ">="}
_MATH = {"exp", "log", "sqrt", "rsqrt", "tanh", "floor", "ceil", "fabs", "erf", "pow", "log1p", "expm1"}


def _ctype(dtype: ir.DataType) -> str:
    t = _CTYPES.get(str(dtype))
    if t is None:
        raise CudaCodegenError(f"the CUDA generator has no C type for dtype {dtype}")
    return t


@dataclass
class _Printer(ir.ExprFunctor[str], ir.StmtFunctor[None]):
    """Prints a lowered kernel body: ``visit_<Class>`` returns an expression's C text, or appends a
    statement's lines to :attr:`lines` indented by :attr:`depth`."""

    lines: list[str] = field(default_factory=list)
    names: dict[Any, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    launch: dict[str, int] = field(default_factory=dict)
    includes: set[str] = field(default_factory=lambda: {"cuda_fp16.h"})
    hardware: Hardware | None = None
    warp_units: bool = False
    dom: dict[ir.Var, ir.Range] = field(default_factory=dict)  # every loop variable printed so far: its range
    depth: int = 0  # the indentation of the statement being printed

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
        """The intrinsic ``set/name`` a unit statement calls, from the hardware's own sets."""
        set_name, name = ref.split("/", 1)
        for s in self.hardware.intrinsic_sets if self.hardware is not None else ():
            if s.name == set_name and name in s.names:
                return s[name]
        raise CudaCodegenError(
            f"the program calls intrinsic {ref}, which hardware {self.hardware and self.hardware.name} does not offer"
        )

    def vector_copy(self, s: ir.BufferStore) -> str:
        """A vector copy (``B[ramp] = A[ramp]``, as a vectorized cooperative fetch makes it): when both
        sides are contiguous and 32, 64 or 128 bits, one access each side
        (``*(uint4*)(&B[i]) = *(const uint4*)(&A[j]);``), else one statement an element."""
        (idx,) = s.indices
        value = s.value
        bits = s.value.dtype.lanes * s.value.dtype.bits
        word = {32: "unsigned int", 64: "uint2", 128: "uint4"}.get(bits)
        copy = isinstance(value, ir.BufferLoad) and isinstance(value.indices[0], ir.Ramp) and isinstance(idx, ir.Ramp)
        if copy and not (word and _unit_ramp(idx) and _unit_ramp(value.indices[0])):
            return " ".join(  # a strided copy: one element a statement
                f"{self.buffer(s.buffer)}[{self.expr(simplify_expr(idx.base + idx.stride * k))}] = "
                f"{self.buffer(value.buffer)}[{self.expr(simplify_expr(value.indices[0].base + value.indices[0].stride * k))}];"
                for k in range(idx.lanes)
            )
        if not (copy and value.buffer.dtype == s.buffer.dtype):
            raise CudaCodegenError(
                f"vector store to {s.buffer.name}: the CUDA generator emits copies (B[ramp] = A[ramp]) only"
            )
        dst = f"{self.buffer(s.buffer)}[{self.expr(idx.base)}]"
        src = f"{self.buffer(value.buffer)}[{self.expr(value.indices[0].base)}]"
        return f"*(({word}*)(&{dst})) = *((const {word}*)(&{src}));"

    def non_negative(self, e: PrimExpr) -> bool:
        """Whether integer ``e`` is never negative over the loops around it (then C's / and % are floor's)."""
        return e.dtype.code == "int" and const_int_bound(e, self.dom)[0] >= 0

    def positive(self, e: PrimExpr) -> bool:
        return e.dtype.code == "int" and const_int_bound(e, self.dom)[0] > 0

    def fragment_declaration(self, b: ir.Buffer, elements: int) -> str:
        """``fragment<...> name[count];`` for a buffer of a fragment scope: the declaration of the
        first intrinsic operand in that scope and dtype, one fragment per operand-sized tile."""
        for iset in self.hardware.intrinsic_sets if self.hardware is not None else ():
            for intr in iset:
                for op in intr.operands:
                    if op.scope == b.scope and op.dtype == b.dtype and isinstance(intr.impl, CudaImpl):
                        self.includes.update(intr.impl.includes)
                        count = max(elements // op.numel, 1)
                        return intr.impl.declare(op.name, f"{self.buffer(b)}[{count}]")
        raise CudaCodegenError(
            f"no intrinsic of hardware {self.hardware and self.hardware.name} declares a "
            f"{b.scope} fragment of {b.dtype} (buffer {b.name})"
        )

    def buffer(self, b: ir.Buffer) -> str:
        return self.name(b, b.name)

    # expressions ---------------------------------------------------------------------------
    def expr(self, e: PrimExpr) -> str:
        return self.visit_expr(e)

    def unsupported_expr(self, e: PrimExpr) -> str:
        raise CudaCodegenError(f"the CUDA generator cannot print {type(e).__name__}")

    def visit_IntImm(self, e: ir.IntImm) -> str:
        if e.dtype.code == "bool" or str(e.dtype) == "bool":
            return "true" if e.value else "false"
        suffix = "LL" if e.dtype.bits == 64 else ""
        return f"{e.value}{suffix}"

    def visit_FloatImm(self, e: ir.FloatImm) -> str:
        v = repr(float(e.value))
        if v in ("inf", "-inf", "nan"):
            v = {"inf": "INFINITY", "-inf": "-INFINITY", "nan": "NAN"}[v]
        if str(e.dtype) == "float32":
            return f"{v}f" if "INF" not in v and "NAN" not in v else v
        if str(e.dtype) == "float16":
            return f"__float2half({v}f)"
        return v

    def visit_Var(self, e: ir.Var) -> str:
        return self.name(e, e.name)

    def _infix(self, e: Any, op: str) -> str:
        return f"({self.expr(e.a)} {op} {self.expr(e.b)})"

    def visit_Add(self, e: ir.Add) -> str:
        return self._infix(e, "+")

    def visit_Sub(self, e: ir.Sub) -> str:
        if _is_address(e.a) and _is_address(e.b):  # a row stride (units.py)
            return self.expr(_stride_value(e))
        return self._infix(e, "-")

    def visit_Mul(self, e: ir.Mul) -> str:
        return self._infix(e, "*")

    def visit_CmpOp(self, e: ir.CmpOp) -> str:
        return self._infix(e, _COMPARISONS[type(e)])

    def visit_Div(self, e: ir.Div) -> str:
        return self._infix(e, "/")

    def visit_Mod(self, e: ir.Mod) -> str:
        return self._infix(e, "%")

    def visit_FloorDiv(self, e: ir.FloorDiv) -> str:
        if self.non_negative(e.a) and self.positive(e.b):
            return self._infix(e, "/")
        if e.dtype.code == "float" or str(e.dtype).startswith("float"):
            return f"floor({self.expr(e.a)} / {self.expr(e.b)})"
        a, b = self.expr(e.a), self.expr(e.b)
        return f"(({a}) / ({b}) - ((({a}) % ({b}) != 0) && ((({a}) < 0) != (({b}) < 0))))"

    def visit_FloorMod(self, e: ir.FloorMod) -> str:
        if self.non_negative(e.a) and self.positive(e.b):
            return self._infix(e, "%")
        a, b = self.expr(e.a), self.expr(e.b)
        return f"(((({a}) % ({b})) + ({b})) % ({b}))"

    def visit_Min(self, e: ir.Min) -> str:
        return f"min({self.expr(e.a)}, {self.expr(e.b)})"

    def visit_Max(self, e: ir.Max) -> str:
        return f"max({self.expr(e.a)}, {self.expr(e.b)})"

    def visit_And(self, e: ir.And) -> str:
        return self._infix(e, "&&")

    def visit_Or(self, e: ir.Or) -> str:
        return self._infix(e, "||")

    def visit_Not(self, e: ir.Not) -> str:
        return f"(!{self.expr(e.a)})"

    def visit_Select(self, e: ir.Select) -> str:
        return f"({self.expr(e.condition)} ? {self.expr(e.true_value)} : {self.expr(e.false_value)})"

    def visit_Cast(self, e: ir.Cast) -> str:
        return f"(({_ctype(e.dtype)})({self.expr(e.value)}))"

    def visit_BufferLoad(self, e: ir.BufferLoad) -> str:
        (idx,) = e.indices
        if isinstance(idx, ir.Ramp) or e.dtype.lanes != 1:
            raise CudaCodegenError(f"vector load of {e.buffer.name} is not supported by the CUDA generator")
        return f"{self.buffer(e.buffer)}[{self.expr(idx)}]"

    def visit_Ramp(self, e: ir.Ramp | ir.Broadcast) -> str:
        raise CudaCodegenError("vector expressions (Ramp/Broadcast) are not supported by the CUDA generator")

    visit_Broadcast = visit_Ramp

    def visit_Call(self, e: ir.Call) -> str:
        if e.op == "cuda.fragment":  # the fragment of a tile: frag[index]
            address, stride, rows, cols = e.args
            (flat,) = address.args[0].indices
            s = _stride_value(stride)
            index = simplify_expr((flat // (rows * s)) * (s // cols) + (flat % s) // cols, self.dom)
            return f"{self.buffer(address.args[0].buffer)}[{self.expr(index)}]"
        if e.op == "address_of":
            (load,) = e.args
            assert isinstance(load, ir.BufferLoad)
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

    # statements ----------------------------------------------------------------------------
    def emit(self, text: str, indent: int = 0) -> None:
        self.lines.append("  " * (self.depth + indent) + text)

    def stmt(self, s: Stmt, depth: int) -> None:
        """Print ``s`` at indentation ``depth``."""
        outer, self.depth = self.depth, depth
        try:
            self.visit_stmt(s)
        finally:
            self.depth = outer

    def unsupported_stmt(self, s: Stmt) -> None:
        raise CudaCodegenError(f"the CUDA generator cannot print {type(s).__name__}")

    def visit_SeqStmt(self, s: ir.SeqStmt) -> None:
        written: set[ir.Buffer] = set()
        for x in s.stmts:
            if written & _shared_accesses(x, reads=True):
                self.emit("__syncthreads();")
                written = set()
            written |= _shared_accesses(x, reads=False)
            self.visit_stmt(x)

    def visit_For(self, s: ir.For) -> None:
        v = self.name(s.loop_var, s.loop_var.name)
        self.dom[s.loop_var] = ir.Range(s.min, s.extent)
        if s.kind == ir.ForKind.THREAD_BINDING:
            self._bound_loop(s, v)
            return
        t = _ctype(s.loop_var.dtype)
        if s.kind == ir.ForKind.UNROLLED:
            self.emit("#pragma unroll")
        lo, ext = self.expr(s.min), self.expr(s.extent)
        end = ext if const_value(s.min) == 0 else f"{lo} + {ext}"
        self.emit(f"for ({t} {v} = {lo}; {v} < {end}; ++{v}) {{")
        if _shared_accesses(s.body, reads=True) & _shared_accesses(s.body, reads=False):
            # an iteration must not overwrite shared memory that threads still read for the last one
            self.emit("__syncthreads();", 1)
        self.stmt(s.body, self.depth + 1)
        self.emit("}")

    def _bound_loop(self, s: ir.For, v: str) -> None:
        """A loop bound to ``blockIdx.*`` / ``threadIdx.*``: ``{ int v = tag; body }``."""
        tag = s.thread_binding or ""
        if not (tag.startswith("blockIdx.") or tag.startswith("threadIdx.")):
            raise CudaCodegenError(
                f"loop {s.loop_var.name}: thread binding {tag!r} is not supported (blockIdx.*/threadIdx.* only)"
            )
        ext = const_value(s.extent)
        if ext is None:
            raise CudaCodegenError(f"loop {s.loop_var.name} bound to {tag} needs a constant extent")
        if self.launch.setdefault(tag, ext) != ext:
            raise CudaCodegenError(f"loop {s.loop_var.name}: {tag} is bound with extents {self.launch[tag]} and {ext}")
        self.emit("{")
        self.emit(f"int {v} = {tag} + {self.expr(s.min)};" if const_value(s.min) != 0 else f"int {v} = {tag};", 1)
        self.stmt(s.body, self.depth + 1)
        self.emit("}")

    def visit_IfThenElse(self, s: ir.IfThenElse) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.stmt(s.then_case, self.depth + 1)
        if s.else_case is not None:
            self.emit("} else {")
            self.stmt(s.else_case, self.depth + 1)
        self.emit("}")

    def visit_BufferStore(self, s: ir.BufferStore) -> None:
        (idx,) = s.indices
        if isinstance(idx, ir.Ramp) or s.value.dtype.lanes != 1:
            self.emit(self.vector_copy(s))
            return
        self.emit(f"{self.buffer(s.buffer)}[{self.expr(idx)}] = {self.expr(s.value)};")

    def visit_Allocate(self, s: ir.Allocate) -> None:
        b = s.buffer
        n = 1
        for x in b.shape:
            v = const_value(x)
            if v is None:
                raise CudaCodegenError(f"allocation {b.name} needs a constant size")
            n *= v
        if b.scope not in MEMORY_SCOPES:
            self.emit(self.fragment_declaration(b, n))
            self.visit_stmt(s.body)
            return
        prefix = {"shared": "__shared__ ", "local": ""}.get(b.scope)
        if prefix is None:
            raise CudaCodegenError(f"allocation {b.name} in scope {b.scope} is not supported (shared or local)")
        align = "__align__(32) " if b.scope == "shared" else ""  # WMMA needs 256-bit aligned tiles
        self.emit(f"{prefix}{align}{_ctype(b.dtype)} {self.buffer(b)}[{n}];")
        self.visit_stmt(s.body)

    def visit_Evaluate(self, s: ir.Evaluate) -> None:
        e = s.value
        op = e.op if isinstance(e, ir.Call) else None
        if op == "cuda.verbatim":
            (text,) = e.args
            self.emit(text.value)
        elif op == "cuda.template":
            self._template(e)
        elif op == "tvm_storage_sync":
            self.emit("__syncthreads();")
        else:
            self.emit(f"{self.expr(e)};")

    def _template(self, e: ir.Call) -> None:
        """A unit statement: the intrinsic's code template filled with its operands."""
        intr = self.intrinsic(e.args[0].value)
        impl = intr.impl
        assert isinstance(impl, CudaImpl)
        self.includes.update(impl.includes)
        values: dict[str, str] = {}
        rest = list(e.args[1:])
        for key, val in zip(rest[::2], rest[1::2], strict=True):
            values[key.value] = val.value if isinstance(val, ir.StringImm) else self.expr(val)
        self.emit(impl.render(values))
        self.warp_units = True

    def visit_Block(self, s: ir.Block | ir.BlockRealize) -> None:
        raise CudaCodegenError(f"block {getattr(s, 'name', '')} survived lowering")

    visit_BlockRealize = visit_Block


def _unit_ramp(e: PrimExpr) -> bool:
    return isinstance(e, ir.Ramp) and const_value(e.stride) == 1


def _stride_value(e: PrimExpr) -> PrimExpr:
    if isinstance(e, ir.Sub) and _is_address(e.a) and _is_address(e.b):
        (a,), (b,) = e.a.args[0].indices, e.b.args[0].indices
        return simplify_expr(a - b)
    return e


def _is_address(e: PrimExpr) -> bool:
    return isinstance(e, ir.Call) and e.op == "address_of" and isinstance(e.args[0], ir.BufferLoad)


def _shared_accesses(stmt: Stmt, reads: bool) -> set[ir.Buffer]:
    """The shared buffers ``stmt`` reads (or writes)."""
    out: set[ir.Buffer] = set()

    def visit(n: Any) -> None:
        if reads and isinstance(n, ir.BufferLoad) and n.buffer.scope == "shared":
            out.add(n.buffer)
        if not reads and isinstance(n, ir.BufferStore) and n.buffer.scope == "shared":
            out.add(n.buffer)

    ir.post_order_visit(stmt, visit)
    return out


def _is_lowered(func: PrimFunc) -> bool:
    found: list[bool] = []
    ir.post_order_visit(func.body, lambda n: found.append(True) if isinstance(n, (ir.Block, ir.BlockRealize)) else None)
    return not found


@dataclass(frozen=True)
class CudaKernel:
    """One generated kernel: its CUDA C ``source``, its ``name`` and the ``launch`` extents its
    thread bindings ask for (``{"blockIdx.x": 64, "threadIdx.x": 32, ...}``)."""

    name: str
    source: str
    launch: tuple[tuple[str, int], ...]

    def dims(self, kind: str) -> tuple[int, int, int]:
        """The grid (``kind="blockIdx"``) or block (``"threadIdx"``) as (x, y, z)."""
        launch = dict(self.launch)
        return tuple(launch.get(f"{kind}.{axis}", 1) for axis in "xyz")  # type: ignore[return-value]


def generate(func: PrimFunc, target: Hardware | str, name: str | None = None) -> str:
    """The CUDA C source of ``func`` as one ``extern "C" __global__`` kernel (module doc).

    ``target`` (a GPU Hardware, or a descriptor's name or path) offers the unit intrinsics the
    program uses. ``func`` may be scheduled (it is lowered with :func:`lower_gpu`) or already lowered.
    """
    return generate_kernel(func, target, name).source


def generate_kernel(func: PrimFunc, target: Hardware | str, name: str | None = None) -> CudaKernel:
    """:func:`generate`, with the kernel's name and launch extents beside its source."""
    hw = resolve(target)
    low = func if _is_lowered(func) else lower_gpu(func, hw)
    p = _Printer(hardware=hw)
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
    symbol = p.name(("kernel",), str(kernel))
    head.append(f'extern "C" __global__ void {symbol}({", ".join(params)}) {{')
    source = "\n".join([*head, *p.lines, "}", ""])
    return CudaKernel(symbol, source, tuple(sorted(p.launch.items())))


# ---------------------------------------------------------------------------------------------
# nvcc


class NvccNotFound(CudaCodegenError):
    """No CUDA compiler on this machine."""


def find_nvcc() -> str | None:
    """nvcc on PATH, in ``$CUDA_HOME/bin`` or in ``/usr/local/cuda/bin``; None when absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        path = os.path.join(root, "bin", "nvcc") if root else ""
        if path and os.access(path, os.X_OK):
            return path
    return None


def compile_cuda(source: str, target: Hardware | str, output: str = "cubin") -> bytes:
    """Compile CUDA C ``source`` with nvcc for ``target``'s architecture (``-arch=sm_XY``, -O3)
    to a ``cubin`` (machine code) or ``ptx`` (text, returned as bytes).

    Raises :class:`NvccNotFound` without nvcc, :class:`CudaCodegenError` with nvcc's first error
    lines when it refuses the source."""
    return _nvcc(source, resolve(target), output)[0]


def compile_cubin(source: str, target: Hardware | str) -> tuple[bytes, int]:
    """:func:`compile_cuda` to a cubin, with the registers a thread uses (as ptxas reports them)."""
    cubin, log = _nvcc(source, resolve(target), "cubin")
    used = re.search(r"Used (\d+) registers", log)
    return cubin, int(used.group(1)) if used else 0


def _nvcc(source: str, hw: Hardware, output: str) -> tuple[bytes, str]:
    """(the output file's bytes, ptxas's report) of nvcc compiling ``source`` for ``hw``."""
    if hw.gpu is None:
        raise CudaCodegenError(f"hardware {hw.name} is not a GPU (kind {hw.kind}); CUDA needs a kind: gpu descriptor")
    if output not in ("cubin", "ptx"):
        raise ValueError(f"compile_cuda: output must be 'cubin' or 'ptx', got {output!r}")
    nvcc = find_nvcc()
    if nvcc is None:
        raise NvccNotFound(
            f"building for {hw.name} needs nvcc, the CUDA compiler, which was found neither on PATH nor in "
            "$CUDA_HOME/bin or /usr/local/cuda/bin; install the CUDA toolkit"
        )
    with tempfile.TemporaryDirectory(prefix="tensorsearch-cuda-") as tmp:
        cu, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, f"kernel.{output}")
        with open(cu, "w") as f:
            f.write(source)
        verbose = ["-Xptxas", "-v"] if output == "cubin" else []
        cmd = [nvcc, f"-{output}", f"-arch={hw.gpu.sm}", "-O3", *verbose, "-o", out, cu]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            errors = [line for line in proc.stderr.splitlines() if "error" in line] or proc.stderr.splitlines()
            raise CudaCodegenError(f"nvcc refused the kernel for {hw.gpu.sm}: " + "; ".join(errors[:3]))
        with open(out, "rb") as f:
            return f.read(), proc.stderr
