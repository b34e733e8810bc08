"""Pass ``lower_units``: a CPU tile tensorized with a unit becomes the unit's instructions.

``sch.tensorize(tile, "amx_16x16x64_u8i8i32")`` checks the tile and annotates its block with the
unit; until this pass the block still computes the tile with its own loops. Here, for the hardware
being built for, the block's body is replaced by :func:`tensorsearch.schedule.units.unit_statement`
and its init dropped (the unit's init intrinsic zeroes the accumulator)::

    with T.block("Z_o"):                          with T.block("Z_o"):
        T.block_attr({"cuda_unit":                    T.address_of(X[0, i*16 + 15, 1023])  # whole region
                      "amx_16x16x64_u8i8i32"})        ...
        with T.init(): ...                    ->      T.llvm.x86.ldtilecfg(T.const_bytes(1, 0, ..))
        for i_i, j_i, k in T.grid(16, 16, 1024):      T.llvm.x86.tilezero(T.int8(2))
            with T.block("Z"): ...                    for unit_k in range(16):
                                                          T.llvm.x86.tileloadd64(T.int8(0), T.address_of(X[0, i*16, unit_k*64]),
                                                                                 T.address_diff(..))  # row stride, bytes
                                                          T.llvm.x86.tileloadd64(T.int8(1), ...)
                                                          T.llvm.x86.tdpbusd(T.int8(2), T.int8(0), T.int8(1))
                                                      T.llvm.x86.tilestored64(T.int8(2), T.address_of(Z[0, i*16, j*16]), ..)

It takes the hardware (the unit is looked up in its intrinsic sets), so ``tensorsearch.build``
runs it before the hardware-free :data:`~tensorsearch.lower.PIPELINE`. A program with no unit
block is returned unchanged. A tile that no longer fits its unit raises :class:`LoweringError`.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Block, PrimFunc
from ..ir.functor import StmtMutator
from ..schedule.units import UNIT_ATTR, UnitError, find_unit, unit_statement
from ..target import Hardware
from .common import LoweringError

__all__ = ["XFEATURES_ATTR", "lower_units", "tile_xfeatures"]

XFEATURES_ATTR = "tile_xfeatures"  # the XSAVE features the program's tile registers need (Linux)


class _Units(StmtMutator):
    def __init__(self, hardware: Hardware) -> None:
        self.hardware = hardware
        self.xfeatures: set[int] = set()

    def visit_Block(self, block: Block) -> Block:
        block = self.generic_visit(block)
        ann = dict(block.annotations)
        if UNIT_ATTR not in ann:
            return block
        try:
            iset, unit = find_unit(str(ann[UNIT_ATTR]), self.hardware)
            body = unit_statement(block, unit, iset)
        except UnitError as err:
            raise LoweringError(str(err)) from None
        if iset.tiles is not None and iset.tiles.xfeature:
            self.xfeatures.add(iset.tiles.xfeature)
        rest = tuple((k, v) for k, v in block.annotations if k != UNIT_ATTR)
        return replace(block, body=body, init=None, annotations=rest)


def lower_units(func: PrimFunc, hardware: Hardware) -> PrimFunc:
    """Replace every unit-annotated block by its unit's instructions (module doc); the program
    records the XSAVE features its tile registers need in its ``tile_xfeatures`` attribute."""
    units = _Units(hardware)
    body = units.visit(func.body)
    if body is func.body:
        return func
    attrs = dict(func.attrs)
    if units.xfeatures:
        attrs[XFEATURES_ATTR] = tuple(sorted(units.xfeatures))
    return replace(func, body=body, attrs=attrs)


def tile_xfeatures(func: PrimFunc) -> tuple[int, ...]:
    """The XSAVE features ``func`` (lowered by :func:`lower_units`) needs granted before it runs."""
    return tuple(dict(func.attrs).get(XFEATURES_ATTR, ()))
