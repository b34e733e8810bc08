"""IR-to-IR passes that rewrite a PrimFunc before scheduling.

``split_stride_phases(func)``: a transposed convolution's stride-parity ``Select`` becomes one
dense reduction block per stride phase (see ``tensorsearch/transform/stride_phases.py``).

``split_constant_stages(func, constants)``: the root-level stages that read only constant
parameters (a tuned schedule's weight repacking) become a prepack function run once (see
``tensorsearch/transform/constant_stages.py``). ``mark_layout_free(func, constants)`` and
``layout_free_params(func)``: which parameters hold constants, as TVM's ``layout_free_buffers``.
"""

from .constant_stages import (
    LAYOUT_FREE_ATTR,
    ConstantSplit,
    layout_free_params,
    mark_layout_free,
    split_constant_stages,
)
from .stride_phases import StridePhaseError, has_stride_phases, split_stride_phases

__all__ = [
    "LAYOUT_FREE_ATTR",
    "ConstantSplit",
    "StridePhaseError",
    "has_stride_phases",
    "layout_free_params",
    "mark_layout_free",
    "split_constant_stages",
    "split_stride_phases",
]
