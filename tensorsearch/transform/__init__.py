"""IR-to-IR passes that rewrite a PrimFunc before scheduling.

``split_stride_phases(func)``: a transposed convolution's stride-parity ``Select`` becomes one
dense reduction block per stride phase (see ``tensorsearch/transform/stride_phases.py``).

``split_constant_stages(func, constants)``: the root-level stages that read only constant
parameters (a tuned schedule's weight repacking) become a prepack function run once (see
``tensorsearch/transform/constant_stages.py``).
"""

from .constant_stages import ConstantSplit, split_constant_stages
from .stride_phases import StridePhaseError, has_stride_phases, split_stride_phases

__all__ = ["ConstantSplit", "StridePhaseError", "has_stride_phases", "split_constant_stages", "split_stride_phases"]
