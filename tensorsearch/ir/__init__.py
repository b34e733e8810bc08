"""TensorIR data structures: types, expressions, statements, blocks, functions.

See docs/architecture.md for the shape of the IR.
"""

from . import dtype as dtypes
from .dtype import DataType, parse_dtype
from .expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    MATH_FUNCTIONS,
    NE,
    Add,
    And,
    BinaryOp,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    CmpOp,
    Div,
    FloatImm,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mod,
    Mul,
    Node,
    Not,
    Or,
    PrimExpr,
    Ramp,
    Range,
    Select,
    StringImm,
    Sub,
    Var,
    call,
    const,
    convert,
    equal,
    logical_and,
    max_,
    min_,
    not_equal,
)
from .functor import Mutator, Visitor, children, free_vars, map_children, post_order_visit, substitute
from .stmt import (
    FALSE,
    THREAD_TAGS,
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    Buffer,
    BufferRegion,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    IterType,
    IterVar,
    MatchBufferRegion,
    PrimFunc,
    SeqStmt,
    Stmt,
    decl_buffer,
    make_annotations,
    make_prim_func,
    seq,
)
from .structural import assert_structural_equal, structural_equal, structural_hash
from .verify import VerifyError, verify

__all__ = [name for name in dir() if not name.startswith("_")]
