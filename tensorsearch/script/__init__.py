"""TVMScript-like text for TensorIR: ``script(func)`` prints, ``parse(text)`` reads back.

    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

Syntax (every field of the IR is printed, so ``parse(f.script())`` is structurally equal to f):

* constants: int32 bare (``4``, ``-1``), bool ``True``/``False``, others typed (``T.int64(4)``,
  ``T.float32(1.5)``, ``T.float16("inf")``). In parsed text a bare number next to a typed operand
  takes that operand's type (``A[i] * 2`` with float16 ``A``).
* operators: ``+ - * / // %`` (Div, FloorDiv, FloorMod), ``T.truncmod``, ``T.min``, ``T.max``,
  ``== != < <= > >=``, ``and or not``; ``T.Cast("float16", x)``, ``T.Select(c, a, b)``,
  ``T.Ramp(base, stride, lanes)``, ``T.Broadcast(x, lanes)``, ``T.exp(x)`` for math functions
  whose type is their first argument's, else ``T.call("name", args..., dtype="int32")``.
* loops: ``T.serial/parallel/vectorized/unroll(extent)`` from 0, ``(start, stop)`` when both are
  constants, else ``(min, extent=e)``; ``T.thread_binding(32, thread="threadIdx.x")``; keywords
  ``annotations={...}`` and ``dtype="int64"`` (when the variable's type is not the extent's);
  perfectly nested plain serial loops print as ``for i, j in T.grid(64, 64)``.
* blocks: ``vi = T.axis.spatial(64, i)`` (``min=``/``dtype=`` when needed) or
  ``T.axis.remap("SSR", [i, j, k])`` when each iterator is bound to an enclosing loop variable
  over exactly that loop's range; then ``T.where``, ``T.reads``, ``T.writes`` (both required),
  ``T.block_attr``, ``T.alloc_buffer``, ``T.match_buffer(A[vi, 0:16], (16,), "float32")``,
  ``with T.init():``.  Regions: ``A[vi]`` (unit range), ``A[0:n]``, ``A[2:10]``, ``A[m:m + e]``.
* other statements: ``A[i] = v``, ``T.evaluate(e)``, ``if/elif/else``,
  ``with T.allocate((16,), "float32", scope="local") as buf:``, ``pass`` for an empty sequence,
  ``with T.seq():`` for a sequence that is nested in another or has one statement.
* buffers: ``T.Buffer((128, 128), "float32", strides=..., elem_offset=..., scope=..., align=...,
  offset_factor=...)`` (defaults omitted). Parameters print as ``A: T.Buffer(...)`` while their
  shapes are constant, else ``a: T.handle`` and ``A = T.match_buffer(a, (n,), "float32")``.
  Free variables and buffers are declared at the top: ``n = T.int32()``, ``B = T.Buffer(...)``.
* function: ``T.func_attr({...})`` (``global_symbol`` is the function's name unless
  ``@T.prim_func(private=True)``). A root block named "root" is implicit: top-level
  ``T.alloc_buffer``/``T.block_attr`` are its own, and the parser adds it to any function whose
  body has blocks; ``root=False`` marks a body with blocks but no root. Names are unique among
  visible objects (``i``, ``i_1``, ...); ``ssa=False`` marks a function in which an object is
  defined twice or used outside its scope: then a name denotes one object in the whole function.
"""

from ..ir.printer import node_to_str, script
from .parser import ScriptError, parse, parse_expr

__all__ = ["ScriptError", "node_to_str", "parse", "parse_expr", "script"]
