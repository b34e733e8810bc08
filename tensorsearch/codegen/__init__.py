"""Code generation: lowered PrimFuncs to LLVM IR (see docs/codegen.md).

from tensorsearch.codegen import llvm
text = llvm.generate(lowered_func, llvm.host_target())   # LLVM IR text
opt = llvm.optimize(text, target)                         # O3 for the target
asm = llvm.emit_assembly(opt, target)
"""

from .llvm import CodegenError, Target, emit_assembly, emit_object, generate, host_target, optimize, resolve_target

__all__ = [
    "CodegenError",
    "Target",
    "emit_assembly",
    "emit_object",
    "generate",
    "host_target",
    "optimize",
    "resolve_target",
]
