"""The operands and iterators an intrinsic declares: the part of an intrinsic that its semantics
(:mod:`.semantics`), its parser (:mod:`.intrinsics`) and the matcher all read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import DataType, IterType


@dataclass(frozen=True)
class Operand:
    """One operand of an intrinsic: a ``shape`` region of ``dtype`` elements in ``scope``.

    Layout constraints on the region it is applied to: ``contiguous`` (one dense row-major block,
    e.g. loaded as one vector), else ``row_stride`` ("any", or a fixed stride in elements; the
    innermost dimension is dense) with ``row_stride_multiple``; neither: no constraint (opaque
    fragments). ``alignment`` is the required alignment of the first element in bytes (0: the
    element's own).
    """

    name: str
    shape: tuple[int, ...]
    dtype: DataType
    role: str  # input | output | accumulator
    scope: str = "global"
    contiguous: bool = False
    row_stride: str | int | None = None
    row_stride_multiple: int = 1
    alignment: int = 0

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def vector_type(self) -> DataType:
        """The whole operand as one vector: ``int8x64`` for a 16x4 int8 operand."""
        return self.dtype.with_lanes(self.numel)

    @property
    def is_written(self) -> bool:
        return self.role != "input"

    @property
    def layout(self) -> str:
        """``"contiguous"``, ``"strided_rows"`` (dense rows at some row stride) or ``"any"``."""
        return "contiguous" if self.contiguous else "strided_rows" if self.row_stride is not None else "any"


@dataclass(frozen=True)
class Iterator:
    """A named iterator of the semantics: kind spatial or reduce, domain ``[0, extent)``."""

    name: str
    kind: IterType
    extent: int
