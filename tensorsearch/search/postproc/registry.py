"""The postprocessors a hardware gets, in order: :mod:`.cpu`'s for a CPU, :mod:`.gpu`'s for a GPU."""

from __future__ import annotations

from ...target import Hardware
from .common import DisallowDynamicLoop, Postproc
from .cpu import RewriteParallelVectorizeUnroll, RewriteReductionBlock, RewriteTensorize
from .gpu import gpu_postprocs_for


def postprocs_for(hardware: Hardware) -> list[Postproc]:
    """The postprocessors of the hardware's kind, in order (GPU: :func:`.gpu.gpu_postprocs_for`)."""
    if hardware.kind == "gpu":
        return gpu_postprocs_for(hardware)
    return [
        DisallowDynamicLoop(),
        RewriteReductionBlock(),
        RewriteTensorize(),
        RewriteParallelVectorizeUnroll(vector_bits=getattr(hardware, "vector_bits", 0)),
    ]
