"""GPU lowering: a GPU-scheduled PrimFunc to the flat form the CUDA generator prints.

:data:`GPU_PIPELINE` is the CPU pipeline without ``check_cpu_target`` (thread bindings are
kept) and with two GPU passes: ``lower_units`` first (blocks annotated ``cuda_unit`` become their
unit's statement sequence, blocks annotated ``cuda_intrinsic`` their intrinsic's template; see
:mod:`tensorsearch.codegen.cuda`) and ``compact_gpu_buffers`` in place of ``compact_buffers``.
:func:`lower_gpu` runs it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import ir
from ..ir import PrimExpr, PrimFunc
from ..schedule.units import (
    INTRINSIC_ATTR,
    MEMORY_SCOPES,
    UNIT_ATTR,
    UnitError,
    address_of,
    const_value,
    find_unit,
    row_stride,
    unit_statement,
)
from ..target import Hardware, Intrinsic
from ..target.intrinsics import cuda_unverified_reason, warn_not_verified
from .blocks import lower_blocks, lower_init
from .common import LoweringError
from .compact import compact_gpu_buffers
from .flatten import flatten_buffers
from .simplify_pass import simplify
from .vectorize import vectorize_loops

__all__ = ["GPU_PIPELINE", "CudaCodegenError", "find_intrinsic", "lower_gpu", "lower_gpu_blocks", "lower_units"]

_I32 = ir.DataType("int", 32)


class CudaCodegenError(LoweringError):
    """A construct the CUDA generator cannot emit, or a unit block that does not fit its unit."""


class _LowerUnits(ir.StmtMutator):
    """Replaces each block annotated ``cuda_intrinsic`` or ``cuda_unit`` (nothing inside a replaced
    block is visited); every other statement is rebuilt around its rewritten children."""

    def __init__(self, target: Hardware) -> None:
        self.target = target

    def visit_Block(self, s: ir.Block) -> ir.Block:
        ann = dict(s.annotations)
        if INTRINSIC_ATTR in ann:
            return _intrinsic_block(s, str(ann[INTRINSIC_ATTR]), self.target)
        if UNIT_ATTR in ann:
            try:
                iset, unit = find_unit(str(ann[UNIT_ATTR]), self.target)
                body = unit_statement(s, unit, iset)
            except UnitError as err:
                raise CudaCodegenError(str(err)) from None
            for member in unit.members:  # never run against their semantics: say so, once each
                warn_not_verified(iset[member], cuda_unverified_reason(), stacklevel=2)
            rest = tuple((k, v) for k, v in s.annotations if k != UNIT_ATTR)
            return replace(s, body=body, init=None, annotations=rest)
        return self.generic_visit(s)


def lower_units(func: PrimFunc, target: Hardware) -> PrimFunc:
    """Replace every block annotated ``cuda_unit`` by its unit's statement sequence, and every
    block annotated ``cuda_intrinsic`` by its intrinsic's template (module doc)."""
    return replace(func, body=_LowerUnits(target).visit(func.body))


def find_intrinsic(ref: str, target: Hardware) -> Intrinsic:
    """The intrinsic ``"set/name"`` among ``target``'s intrinsic sets (CudaCodegenError if absent)."""
    set_name, _, name = ref.partition("/")
    for iset in target.intrinsic_sets:
        if iset.name == set_name and name in iset.names:
            return iset[name]
    raise CudaCodegenError(f"the program calls intrinsic {ref}, which hardware {target.name} does not offer")


def _intrinsic_block(block: ir.Block, ref: str, target: Hardware) -> ir.Block:
    """``block`` (a tile tensorized with one CUDA intrinsic on fragment buffers) with its body
    replaced by the intrinsic's template: a memory operand is a pointer to its region's first
    element and that region's row stride, a fragment operand the fragment holding its tile::

        X_shared_wmma_matrix_a[0, 16*i:16*i+16, 0:16] = X_shared[0, 16*i:16*i+16, 16*k:16*k+16]
      ->
        load_matrix_sync(X_shared_wmma_matrix_a[i], &X_shared[16*i*32 + 16*k], 32);
    """
    from ..schedule.tensorize import match_intrinsic

    intr = find_intrinsic(ref, target)
    regions = match_intrinsic(block, intr, lambda why: CudaCodegenError(f"block {block.name} ({intr.name}): {why}"))
    args: list[PrimExpr] = [ir.StringImm(ref)]
    for op in intr.operands:
        region = regions[op.name]
        first = ir.BufferLoad(region.buffer, tuple(r.min for r in region.region))
        stride = _row_stride(region, first)
        # the region's last element too: compact_gpu_buffers sizes the buffer from the accesses it sees
        last = ir.BufferLoad(region.buffer, tuple(r.min + r.extent - 1 for r in region.region))
        args += [ir.StringImm(f"{op.name}.last"), address_of(last)]
        if op.scope in MEMORY_SCOPES:
            args += [ir.StringImm(op.name), address_of(first), ir.StringImm(op.name + ".stride"), stride]
        else:
            rows, cols = (op.shape[-2], op.shape[-1]) if len(op.shape) > 1 else (1, op.shape[-1])
            tile = ir.Call(
                _I32,
                "cuda.fragment",
                (
                    address_of(first),
                    stride,
                    ir.IntImm(_I32, rows),
                    ir.IntImm(_I32, cols),
                ),
            )
            args += [ir.StringImm(op.name), tile]
    warn_not_verified(intr, cuda_unverified_reason(), stacklevel=3)
    body = ir.Evaluate(ir.Call(_I32, "cuda.template", tuple(args)))
    rest = tuple((k, v) for k, v in block.annotations if k != INTRINSIC_ATTR)
    return replace(block, body=body, annotations=rest)


def _row_stride(region: Any, first: ir.BufferLoad) -> PrimExpr:
    """The distance of the region's second row from its first, as two addresses (the printer folds
    it to the number the buffer's final, compacted layout gives)."""
    wide = [k for k, r in enumerate(region.region) if const_value(r.extent) != 1]
    if len(wide) < 2:
        return ir.IntImm(_I32, 1)
    return row_stride(first, wide[-2])


def lower_gpu_blocks(func: PrimFunc) -> PrimFunc:
    """``lower_blocks`` without its CPU compaction (``compact_gpu_buffers`` follows it)."""
    return lower_blocks(func, compact=False)


GPU_PIPELINE = [
    lower_units,
    lower_init,
    lower_gpu_blocks,
    compact_gpu_buffers,
    flatten_buffers,
    simplify,
    vectorize_loops,
]


def lower_gpu(func: PrimFunc, target: Hardware) -> PrimFunc:
    """Run :data:`GPU_PIPELINE` (no CPU target check: thread bindings are kept)."""
    func = lower_units(func, target)
    for p in GPU_PIPELINE[1:]:
        func = p(func)
    return func
