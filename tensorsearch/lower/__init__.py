"""Lowering: a scheduled PrimFunc to the flat, block-free form that code generation takes.

::

    from tensorsearch.lower import lower
    low = lower(func)                  # the pipeline below
    low = lower(func, debug=True)      # the IR verifier runs after every pass
    interpret(low, *(a.reshape(-1) for a in arrays))   # same results as interpret(func, *arrays)

``PIPELINE`` lists the passes in order; each is a plain ``PrimFunc -> PrimFunc`` function that
can run alone (see docs/lowering.md for the lowered form):

1. ``check_cpu_target``: GPU thread bindings raise :class:`LoweringError`;
2. ``lower_init``: a block's init runs under ``if v_k == min and ...`` before its body;
   then ``lower_intrin``: vector accesses of tensorized tiles (1-D matched buffers read as one
   vector) become vector accesses of their contiguous source regions;
3. ``lower_blocks``: blocks become plain statements (iterators substituted, predicates as ifs,
   ``Allocate`` for allocated buffers, matched buffers as accesses of their source); then
   ``compact_buffers`` moves each allocation to where its buffer is used, shrunk to the
   region used there (TVM's CompactBufferAllocation);
4. ``flatten_buffers``: every buffer becomes one-dimensional;
5. ``simplify``: indices and conditions simplified, no-op statements removed;
6. ``unroll_loops``: short UNROLLED loops are unrolled;
7. ``vectorize_loops``: VECTORIZED loops become Ramp/Broadcast vector code (or SERIAL loops).
"""

from __future__ import annotations

from collections.abc import Callable

from ..arith.verify import VerifyError, verify
from ..ir.stmt import PrimFunc
from .blocks import lower_blocks, lower_init
from .common import LoweringError
from .compact import compact_buffers
from .flatten import flatten_buffers
from .intrin import lower_intrin
from .loops import check_cpu_target, unroll_loops
from .simplify_pass import simplify
from .vectorize import vectorize_loops

Pass = Callable[[PrimFunc], PrimFunc]

PIPELINE: list[Pass] = [
    check_cpu_target,
    lower_init,
    lower_intrin,
    lower_blocks,
    flatten_buffers,
    simplify,
    unroll_loops,
    vectorize_loops,
]


def lower(func: PrimFunc, debug: bool = False, passes: list[Pass] | None = None) -> PrimFunc:
    """Run the lowering ``passes`` (default :data:`PIPELINE`) on ``func``.

    With ``debug=True`` the IR verifier checks the input and the output of every pass; a
    failure raises :class:`LoweringError` naming the pass.
    """
    if not isinstance(func, PrimFunc):
        raise TypeError(f"lower takes a PrimFunc, got {type(func).__name__}")
    if debug:
        try:
            verify(func)
        except VerifyError as err:
            raise LoweringError(f"the input of lowering is ill-formed: {err}") from err
    for p in PIPELINE if passes is None else passes:
        func = p(func)
        if debug:
            try:
                verify(func)
            except VerifyError as err:
                raise LoweringError(f"lowering pass {p.__name__} produced ill-formed IR: {err}") from err
    return func


__all__ = [
    "PIPELINE",
    "LoweringError",
    "check_cpu_target",
    "compact_buffers",
    "flatten_buffers",
    "lower",
    "lower_blocks",
    "lower_init",
    "lower_intrin",
    "simplify",
    "unroll_loops",
    "vectorize_loops",
]
