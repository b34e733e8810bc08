"""Code generation: lowered PrimFuncs to LLVM IR (see docs/codegen.md).

from tensorsearch.codegen import llvm
hw = tensorsearch.target.resolve(None)      # the host's Hardware (or a name, a path, a Hardware)
text = llvm.generate(lowered_func, hw)      # LLVM IR text
opt = llvm.optimize(text, hw)               # O3 for the target
asm = llvm.emit_assembly(opt, hw)
"""

from .llvm import CodegenError, emit_assembly, emit_object, generate, optimize

__all__ = [
    "CodegenError",
    "emit_assembly",
    "emit_object",
    "generate",
    "optimize",
]
