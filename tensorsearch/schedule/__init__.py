"""Schedules: validated primitives over TensorIR and replayable traces."""

from .errors import (
    BlockNotFound,
    CacheError,
    DecisionError,
    InlineError,
    InvalidArgument,
    LoopKindError,
    LoopNotFound,
    LoopStructureError,
    NotAffineBinding,
    NotCompleteBlock,
    NotReductionBlock,
    OutputBlockError,
    RegionCoverError,
    ScheduleError,
    StagePipelineError,
)
from .intrin_tile import tile_with_intrin
from .rv import BlockRV, ExprRV, LoopRV
from .schedule import Schedule
from .tensorize import TensorizeError
from .trace import INSTRUCTION_KINDS, Instruction, InstructionKind, Trace
