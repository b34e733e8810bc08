"""Structural equality and hashing up to renaming (alpha-equivalence).

Two programs are structurally equal when they have the same shape of nodes, the same
constants, types, block names and annotations, and their variables and buffers correspond
one to one (names of variables and buffers do not matter).  A variable or buffer is matched
the first time it is met, so free variables are matched too.

``structural_hash`` is consistent with ``structural_equal`` and stable across processes and
machines: it hashes a canonical serialization with BLAKE2b, never Python's ``hash``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import fields
from enum import Enum
from functools import cache
from typing import Any

from .dtype import DataType
from .expr import Node, Var
from .stmt import Buffer


@cache
def _compared_fields(cls: type) -> tuple[str, ...]:
    names = tuple(f.name for f in fields(cls))
    if cls is Buffer:
        return tuple(n for n in names if n != "name")
    return names


class _Equal:
    def __init__(self) -> None:
        self.lhs_to_rhs: dict[int, Any] = {}
        self.rhs_to_lhs: dict[int, Any] = {}
        self.first_mismatch: tuple[Any, Any] | None = None

    def _bind(self, a: Any, b: Any) -> bool | None:
        """True/False when the pair was already matched, None when newly bound."""
        ma = self.lhs_to_rhs.get(id(a))
        mb = self.rhs_to_lhs.get(id(b))
        if ma is not None or mb is not None:
            return ma is b and mb is a
        self.lhs_to_rhs[id(a)] = b
        self.rhs_to_lhs[id(b)] = a
        return None

    def equal(self, a: Any, b: Any) -> bool:
        ok = self._equal(a, b)
        if not ok and self.first_mismatch is None:
            self.first_mismatch = (a, b)
        return ok

    def _equal(self, a: Any, b: Any) -> bool:
        if type(a) is not type(b):
            return False
        if isinstance(a, Var):
            if a.dtype != b.dtype:
                return False
            bound = self._bind(a, b)
            return True if bound is None else bound
        if isinstance(a, Buffer):
            bound = self._bind(a, b)
            if bound is not None:
                return bound
            return all(self.equal(getattr(a, n), getattr(b, n)) for n in _compared_fields(Buffer))
        if isinstance(a, tuple):
            return len(a) == len(b) and all(self.equal(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, Node):
            return all(self.equal(getattr(a, n), getattr(b, n)) for n in _compared_fields(type(a)))
        if isinstance(a, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        return a == b


def structural_equal(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same program up to renaming of variables and buffers."""
    return _Equal().equal(a, b)


def assert_structural_equal(a: Any, b: Any) -> None:
    """Raise AssertionError showing both sides and the first differing pair when unequal."""
    checker = _Equal()
    if checker.equal(a, b):
        return
    x, y = checker.first_mismatch if checker.first_mismatch else (a, b)
    raise AssertionError(
        "structures differ\n--- first differing part, left:\n"
        f"{_show(x)}\n--- right:\n{_show(y)}\n--- whole left:\n{_show(a)}\n--- whole right:\n{_show(b)}"
    )


def _show(x: Any) -> str:
    try:
        if hasattr(x, "script"):
            return x.script()
        return str(x)
    except Exception:
        return repr(x)


_PLAIN_NODE: set[type] = set()  # node classes hashed field by field (neither Var nor Buffer)


class _Hasher:
    def __init__(self) -> None:
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # keep objects alive so ids stay unique
        self.parts: list[str] = []

    def emit(self, x: Any) -> None:
        parts = self.parts
        t = type(x)
        if t in _PLAIN_NODE:  # the common cases first; the same text as the general ones below
            parts.append(t.__name__ + "(")
            for n in _compared_fields(t):
                self.emit(getattr(x, n))
            parts.append(")")
            return
        if t is tuple:
            parts.append("[")
            for v in x:
                self.emit(v)
            parts.append("]")
            return
        if t is int:
            parts.append(f"I{x}")
            return
        if isinstance(x, Node) and not isinstance(x, Var | Buffer):
            _PLAIN_NODE.add(t)
        if isinstance(x, Var):
            key = self.ids.get(id(x))
            if key is None:
                key = self.ids[id(x)] = len(self.ids)
                self.keep.append(x)
            parts.append(f"V{key}:{x.dtype}")
        elif isinstance(x, Buffer):
            key = self.ids.get(id(x))
            if key is not None:
                parts.append(f"B{key}")
                return
            key = self.ids[id(x)] = len(self.ids)
            self.keep.append(x)
            parts.append(f"B{key}(")
            for n in _compared_fields(Buffer):
                self.emit(getattr(x, n))
            parts.append(")")
        elif isinstance(x, Node):
            parts.append(type(x).__name__ + "(")
            for n in _compared_fields(type(x)):
                self.emit(getattr(x, n))
            parts.append(")")
        elif isinstance(x, tuple):
            parts.append("[")
            for v in x:
                self.emit(v)
            parts.append("]")
        elif isinstance(x, DataType):
            parts.append(f"T{x}")
        elif isinstance(x, Enum):
            parts.append(f"E{x.value}")
        elif isinstance(x, float):
            parts.append("F" + ("nan" if math.isnan(x) else repr(x)))
        elif isinstance(x, bool):
            parts.append(f"b{int(x)}")
        elif isinstance(x, int):
            parts.append(f"I{x}")
        elif isinstance(x, str):
            parts.append(f"S{len(x)}:{x}")
        elif x is None:
            parts.append("N")
        else:
            raise TypeError(f"cannot hash a {type(x).__name__} inside the IR")


def structural_hash(node: Any) -> int:
    """A 64-bit hash equal for structurally equal inputs, stable across processes and machines."""
    hasher = _Hasher()
    hasher.emit(node)
    digest = hashlib.blake2b("\x1f".join(hasher.parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")
