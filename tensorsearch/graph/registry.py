"""The table of operator lowerings: ONNX op type -> a function that writes te computes.

Each lowering is registered with the kind of operator it is, which is what fusion reads
(TVM's ``OpPatternKind``)::

    @lowers("Relu", kind=OpKind.INJECTIVE)
    def relu(node: Node, args: list[Operand], outs: list[Value]) -> list[te.Tensor]:
        x = args[0].tensor
        return [te.compute(x.shape, lambda *i: te.max(x[i], 0.0), name=outs[0].name)]

``args`` are the node's inputs in order (``None`` for an absent optional one); ``outs`` the
:class:`Value` of each output (static shape and dtype; ``None`` for an optional output the model
leaves out); a lowering returns one te tensor per output, of exactly that shape and dtype
(``None`` for a left-out output). An :class:`Operand` whose value is a graph constant
carries the array in ``const`` too: a lowering reads shapes, axes and small scalars from it at
compile time (a constant read only that way never becomes a kernel argument).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

import numpy as np

from .. import te
from .ir import Node, Value

__all__ = ["LOWERINGS", "Lowering", "OpKind", "Operand", "lowering_of", "lowers", "supported_ops"]


class OpKind(enum.IntEnum):
    """How an operator fuses (TVM's pattern kinds, least to most restrictive)."""

    INJECTIVE = 0  # each output element reads a fixed set of input elements: elementwise, broadcast, layout
    REDUCTION = 1  # a reduction (softmax, layer norm, mean, pooling): may take injective consumers
    ANCHOR = 2  # convolution, matmul: the kernel a task is tuned for; takes injective consumers
    OPAQUE = 3  # fuses with nothing


@dataclass(frozen=True)
class Operand:
    """A node input inside a lowering: its te tensor, its :class:`Value`, and its array when it
    is a graph constant."""

    tensor: te.Tensor
    value: Value
    const: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> str:
        return self.value.dtype

    def scalar(self) -> float | int | None:
        """The single element of a one-element constant, else None."""
        if self.const is None or self.const.size != 1:
            return None
        return self.const.reshape(()).item()


LoweringFn = Callable[[Node, list[Operand | None], list[Value | None]], list[te.Tensor | None]]


@dataclass(frozen=True)
class Lowering:
    op: str
    fn: LoweringFn
    kind: OpKind


LOWERINGS: dict[str, Lowering] = {}

# modules whose import registers lowerings
_LOWERING_MODULES = (".ops_nn", ".ops_tensor", ".quant")


def lowers(*ops: str, kind: OpKind) -> Callable[[LoweringFn], LoweringFn]:
    """Register the decorated function as the lowering of each op type in ``ops``."""

    def register(fn: LoweringFn) -> LoweringFn:
        for op in ops:
            if op in LOWERINGS:
                raise RuntimeError(f"two lowerings registered for {op}")
            LOWERINGS[op] = Lowering(op, fn, kind)
        return fn

    return register


def _load() -> None:
    for mod in _LOWERING_MODULES:
        try:
            import_module(mod, __package__)
        except ModuleNotFoundError as err:  # a lowering module not written yet
            if err.name != f"{__package__}{mod}":
                raise


def supported_ops() -> list[str]:
    """Every ONNX op type the graph layer lowers, sorted."""
    _load()
    return sorted(LOWERINGS)


def lowering_of(op: str) -> Lowering | None:
    _load()
    return LOWERINGS.get(op)
