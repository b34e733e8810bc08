"""Random variables: handles to blocks, loops and sampled integers that survive transformations.

A primitive returns random variables, not IR nodes: ``sch.get(rv)`` gives the current Block,
For or integer behind one.  A BlockRV refers to a block by its (unique) name and a LoopRV to a
loop by its loop variable, so both keep working after other parts of the program change; a
LoopRV whose loop was split or fused away raises LoopNotFound.
"""

from __future__ import annotations


class RV:
    """A random variable of a Schedule; identity is the object."""

    prefix = "x"
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}@{id(self):x}"


class BlockRV(RV):
    prefix = "b"
    __slots__ = ()


class LoopRV(RV):
    prefix = "l"
    __slots__ = ()


class ExprRV(RV):
    """A sampled integer (a tile size, a categorical choice, a compute location index)."""

    prefix = "v"
    __slots__ = ()


def rv_from_name(name: str) -> RV:
    """A fresh random variable of the kind the name's first letter says (b, l or v)."""
    kinds = {"b": BlockRV, "l": LoopRV, "v": ExprRV}
    if not name or name[0] not in kinds:
        raise ValueError(f"random variable name {name!r} must start with b, l or v")
    return kinds[name[0]]()
