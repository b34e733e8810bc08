"""A bounded cache of answers keyed by the identity of immutable IR objects.

The IR is immutable, so an analysis of a node (a program, a scope block, a block's bindings) is a
function of the node's identity. An entry keeps its objects alive, so an identity cannot be
reused by another object while it keys an entry. The oldest entry goes first::

    scopes = IdentityCache(8)
    hit = scopes.get((scope,))            # MISSING when not remembered
    if hit is MISSING:
        hit = scopes.put((scope,), None, child_block_paths_of(scope))
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable
from typing import Any

MISSING: Any = object()
"""What :meth:`IdentityCache.get` returns for an answer it does not hold (an answer may be None)."""


class IdentityCache:
    """The last ``size`` answers, each keyed by the identity of some objects and a plain value
    (loop bounds, flags; a ``Var`` in it counts by identity already: it hashes and compares so)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: dict[tuple, tuple[tuple, Any]] = {}

    def get(self, objs: tuple, key: Hashable = None) -> Any:
        """The answer remembered for ``objs`` (these very objects) and ``key``, or ``MISSING``."""
        hit = self._entries.get((*map(id, objs), key))
        if hit is None or not all(a is b for a, b in zip(hit[0], objs, strict=True)):
            return MISSING
        return hit[1]

    def put(self, objs: tuple, key: Hashable, answer: Any) -> Any:
        """Remember ``answer`` for ``objs`` and ``key`` (the oldest entry goes when full); returns it."""
        if len(self._entries) >= self.size:
            # threads may share a cache (the model scheduler's concurrent tasks): another may have
            # evicted the oldest entry, or added one, between these two steps
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):
                del self._entries[next(iter(self._entries))]
        self._entries[(*map(id, objs), key)] = (objs, answer)
        return answer

    def __len__(self) -> int:
        return len(self._entries)
