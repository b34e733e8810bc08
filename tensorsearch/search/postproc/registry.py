"""The postprocessors of a CPU, in order (a GPU's: :func:`.gpu.gpu_postprocs_for`;
``search.space.kind`` picks by the hardware's kind)."""

from __future__ import annotations

from ...target import Hardware
from .common import DisallowDynamicLoop, Postproc
from .cpu import RewriteParallelVectorizeUnroll, RewriteReductionBlock, RewriteTensorize


def cpu_postprocs_for(hardware: Hardware) -> list[Postproc]:
    """The postprocessors of a CPU, in order."""
    return [
        DisallowDynamicLoop(),
        RewriteReductionBlock(),
        RewriteTensorize(),
        RewriteParallelVectorizeUnroll(vector_bits=getattr(hardware, "vector_bits", 0)),
    ]
