"""IR-to-IR passes that rewrite a PrimFunc before scheduling.

``split_stride_phases(func)``: a transposed convolution's stride-parity ``Select`` becomes one
dense reduction block per stride phase (see ``tensorsearch/transform/stride_phases.py``).
"""

from .stride_phases import StridePhaseError, has_stride_phases, split_stride_phases

__all__ = ["StridePhaseError", "has_stride_phases", "split_stride_phases"]
