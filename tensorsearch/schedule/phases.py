"""``split_stride_phases``: a transposed convolution's stride-parity ``Select`` becomes one dense
reduction block per stride phase (the IR pass :func:`tensorsearch.transform.split_stride_phases`
with ``phase_buffers=True``, as a traced primitive so a tuned trace replays it)."""

from __future__ import annotations

from ..ir import Block
from ..transform import StridePhaseError, has_stride_phases
from ..transform import split_stride_phases as _split
from .errors import InvalidArgument
from .rv import BlockRV
from .state import ScheduleState, primitive
from .tree import walk_stmts


class PhasePrimitives(ScheduleState):
    @primitive()
    def split_stride_phases(self, block: BlockRV) -> list[BlockRV]:
        """Split a stride-``s`` transposed convolution into its ``s * s`` dense phases.

        Before (T2D, stride 2; 3/4 of the products multiply the ``Select``'s zeros)::

            conv[n, hh, ww, cc] += Select((hh + rh) % 2 == 0 and (ww + rw) % 2 == 0,
                                          PadInput[n, (hh + rh) // 2, (ww + rw) // 2, rc], 0) * weight[3 - rh, 3 - rw, rc, cc]

        ``phases = sch.split_stride_phases(sch.get_block("conv2d_transpose_nhwc"))``: one block
        per phase ``(ph, pw)``, each a dense convolution into a buffer of its own, and a spatial
        block keeping the original name that gathers them into the output::

            conv2d_transpose_nhwc_phase_0_0[n, h, w, cc] += PadInput[n, h + rh, w + rw, rc] * weight[3 - rh * 2, 3 - rw * 2, rc, cc]
            ...  # phases 0_1, 1_0, 1_1
            conv[n, hh, ww, cc] = Select(hh % 2 == 0 and ww % 2 == 0, conv2d_transpose_nhwc_phase_0_0[n, hh // 2, ww // 2, cc], ...)

        Returns the phase blocks. The block must be a reduction whose update is guarded by parity
        terms ``e % s == 0`` and bound one to one to the loops around it (before other scheduling).
        """
        blk = self._block(block).node
        if not has_stride_phases(blk):
            raise InvalidArgument(
                f"split_stride_phases: block {blk.name} is not a reduction guarded by a stride-parity Select",
                block=blk.name,
            )
        try:
            func = _split(self.func, phase_buffers=True, block=blk.name)
        except StridePhaseError as err:
            raise InvalidArgument(f"split_stride_phases: {err}", block=blk.name) from None
        self.func = func
        prefix = f"{blk.name}_phase_"
        names = [loc.node.name for loc in walk_stmts(func.body) if isinstance(loc.node, Block)]
        return [self._new_block_rv(n) for n in names if n.startswith(prefix)]
