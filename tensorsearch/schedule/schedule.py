"""``Schedule``: a program plus the primitives that transform it (paper sections 3.2-3.3)."""

from __future__ import annotations

from .blockize import BlockizePrimitives
from .cache import CachePrimitives
from .compute_location import ComputeLocationPrimitives
from .lookup import LookupPrimitives
from .loops import LoopPrimitives
from .phases import PhasePrimitives
from .reduction import ReductionPrimitives
from .sampling import SamplingPrimitives
from .tensorize import TensorizePrimitives


class Schedule(
    LookupPrimitives,
    LoopPrimitives,
    SamplingPrimitives,
    ComputeLocationPrimitives,
    CachePrimitives,
    ReductionPrimitives,
    BlockizePrimitives,
    TensorizePrimitives,
    PhasePrimitives,
):
    """Transform a PrimFunc with validated primitives, recording every step in ``trace``.

    ``Schedule(func, seed=0, check=True, error_detail="detail", hardware=None)``: ``check``
    verifies the program after every primitive; ``error_detail`` is "detail" (sentence and IR
    fragment), "fast" (sentence) or "none" (primitive and error class only, for the search);
    ``hardware`` (a :class:`~tensorsearch.target.Hardware`) offers the intrinsics that
    ``tensorize`` may name (an :class:`~tensorsearch.target.Intrinsic` object needs none).  A primitive that
    fails raises a ScheduleError and leaves ``func``, the random variables and ``trace`` as
    they were.
    """
