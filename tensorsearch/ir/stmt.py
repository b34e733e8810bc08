"""Buffers, statements, blocks and functions of TensorIR (paper section 3.1).

A program is a ``PrimFunc`` whose body is a tree of loops (``For``) and *blocks*.  A block
(``Block`` realized by a ``BlockRealize``) is the unit of computation: it declares iterator
variables with a domain and a kind (spatial, reduce or opaque), the buffer regions it reads
and writes, an optional ``init`` statement for reductions, and a body.  The ``BlockRealize``
binds each block iterator to an expression of the surrounding loop variables::

    for i, j, k in grid(64, 64, 64):
        with block("C"):
            vi = axis.spatial(64, i); vj = axis.spatial(64, j); vk = axis.reduce(64, k)
            reads(A[vi, vk], B[vk, vj]); writes(C[vi, vj])
            with init(): C[vi, vj] = 0.0
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from .dtype import DataType, bool_, int32, parse_dtype
from .expr import BufferLoad, IntImm, Node, PrimExpr, Range, Var, convert

Annotations = tuple[tuple[str, Any], ...]


def make_annotations(value: dict[str, Any] | Annotations | None) -> Annotations:
    """Normalize annotations to a key-sorted tuple of (key, value) pairs with hashable values."""
    if not value:
        return ()
    items = value.items() if isinstance(value, dict) else value
    out = []
    for key, val in items:
        if not isinstance(key, str):
            raise TypeError(f"annotation keys must be strings, got {key!r}")
        out.append((key, _freeze(val)))
    out.sort(key=lambda kv: kv[0])
    return tuple(out)


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        raise TypeError("annotation values cannot be dictionaries; use a tuple of pairs")
    if isinstance(value, Node | str | int | float | bool) or value is None:
        return value
    raise TypeError(f"annotation value {value!r} of type {type(value).__name__} is not supported")


# ---------------------------------------------------------------------------------------
# buffers


@dataclass(frozen=True, eq=False, slots=True)
class Buffer(Node):
    """A multi-dimensional array; equality and hashing are by identity (it is a definition).

    ``strides`` is empty for a compact row-major buffer. ``elem_offset`` is the offset, in
    elements, of the buffer's first element in its underlying allocation (non-zero for a
    matched sub-region). ``scope`` is the storage scope: "global", "shared", "local",
    "wmma.matrix_a", ...
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: DataType = DataType("float", 32)
    strides: tuple[PrimExpr, ...] = ()
    elem_offset: PrimExpr = IntImm(int32, 0)
    scope: str = "global"
    alignment: int = 64
    offset_factor: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(convert(s) for s in self.shape))
        object.__setattr__(self, "strides", tuple(convert(s) for s in self.strides))
        object.__setattr__(self, "elem_offset", convert(self.elem_offset))
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a buffer needs a non-empty string name, got {self.name!r}")
        if self.strides and len(self.strides) != len(self.shape):
            raise ValueError(f"buffer {self.name} has {len(self.shape)} dimensions but {len(self.strides)} strides")
        for s in self.shape:
            if not s.dtype.is_integer:
                raise TypeError(f"buffer {self.name} has a non-integer extent {s} of type {s.dtype}")

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Buffer({self.name!r}, {[str(s) for s in self.shape]}, {self.dtype})"

    def __getitem__(self, indices: Any) -> BufferLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return BufferLoad(self, tuple(convert(i) for i in indices))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def full_region(self) -> BufferRegion:
        return BufferRegion(self, tuple(Range(IntImm(s.dtype, 0), s) for s in self.shape))


def decl_buffer(
    shape: Any,
    dtype: str | DataType = "float32",
    name: str = "buffer",
    scope: str = "global",
    **kwargs: Any,
) -> Buffer:
    """Declare a buffer; Python ints in ``shape`` become int32 constants."""
    if isinstance(shape, int | PrimExpr):
        shape = (shape,)
    return Buffer(name, tuple(convert(s) for s in shape), parse_dtype(dtype), scope=scope, **kwargs)


@dataclass(frozen=True, slots=True)
class BufferRegion(Node):
    """A rectangular region ``buffer[min0 : min0 + extent0, ...]``."""

    buffer: Buffer
    region: tuple[Range, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "region", tuple(self.region))
        if len(self.region) != len(self.buffer.shape):
            raise ValueError(
                f"region of buffer {self.buffer.name} has {len(self.region)} ranges for {len(self.buffer.shape)} dimensions"
            )


@dataclass(frozen=True, slots=True)
class MatchBufferRegion(Node):
    """Inside a block, ``buffer`` names the region ``source`` of an outer buffer."""

    buffer: Buffer
    source: BufferRegion


class IterType(str, Enum):
    """The kind of a block iterator (paper section 3.1)."""

    SPATIAL = "spatial"  # data-parallel: each value writes a distinct part of the output
    REDUCE = "reduce"  # reduction: the output is accumulated over its values
    OPAQUE = "opaque"  # anything else: no assumption is made


@dataclass(frozen=True, slots=True)
class IterVar(Node):
    """A block iterator: the variable, its domain and its kind."""

    var: Var
    dom: Range
    iter_type: IterType

    def __post_init__(self) -> None:
        object.__setattr__(self, "iter_type", IterType(self.iter_type))


# ---------------------------------------------------------------------------------------
# statements


class Stmt(Node):
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class BufferStore(Stmt):
    """``buffer[indices] = value``."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "indices", tuple(convert(i) for i in self.indices))
        if len(self.indices) != len(self.buffer.shape):
            raise IndexError(
                f"buffer {self.buffer.name} has {len(self.buffer.shape)} dimensions but is stored with {len(self.indices)} indices"
            )
        lanes = max([i.dtype.lanes for i in self.indices] + [1])
        expected = self.buffer.dtype.with_lanes(self.buffer.dtype.lanes * lanes)
        if self.value.dtype != expected:
            raise TypeError(
                f"store to buffer {self.buffer.name} needs a value of type {expected}, got {self.value.dtype} ({self.value})"
            )


class ForKind(str, Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unroll"
    THREAD_BINDING = "thread_binding"


THREAD_TAGS = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z",
    "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "vthread.x", "vthread.y", "vthread.z",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """``for loop_var in range(min, min + extent)`` of a given kind."""

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_binding: str | None = None
    annotations: Annotations = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "min", convert(self.min, self.loop_var.dtype))
        object.__setattr__(self, "extent", convert(self.extent, self.loop_var.dtype))
        object.__setattr__(self, "kind", ForKind(self.kind))
        object.__setattr__(self, "annotations", make_annotations(self.annotations))
        if (self.kind == ForKind.THREAD_BINDING) != (self.thread_binding is not None):
            raise ValueError(
                f"loop {self.loop_var.name}: a thread_binding loop needs a thread tag and only such a loop may have one"
            )
        if self.thread_binding is not None and self.thread_binding not in THREAD_TAGS:
            raise ValueError(
                f"loop {self.loop_var.name}: unknown thread tag {self.thread_binding!r}; expected one of {THREAD_TAGS}"
            )


@dataclass(frozen=True, slots=True)
class SeqStmt(Stmt):
    """Statements run one after another."""

    stmts: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stmts", tuple(self.stmts))


def seq(*stmts: Stmt) -> Stmt:
    """Flatten nested sequences; a single statement is returned as is."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(tuple(flat))


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None

    def __post_init__(self) -> None:
        if not self.condition.dtype.is_bool:
            raise TypeError(f"the condition of an if must be bool, got {self.condition.dtype} ({self.condition})")


@dataclass(frozen=True, slots=True)
class Evaluate(Stmt):
    """Evaluate an expression (typically a Call with side effects) for its effect."""

    value: PrimExpr


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """Allocate ``buffer`` (in its scope) for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class Block(Stmt):
    """A block: iterators, read and write regions, optional init, and a body (see module doc)."""

    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    match_buffers: tuple[MatchBufferRegion, ...] = ()
    annotations: Annotations = ()

    def __post_init__(self) -> None:
        for name in ("iter_vars", "reads", "writes", "alloc_buffers", "match_buffers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "annotations", make_annotations(self.annotations))
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a block needs a non-empty string name, got {self.name!r}")


@dataclass(frozen=True, slots=True)
class BlockRealize(Stmt):
    """Run ``block`` with its iterators bound to ``iter_values`` where ``predicate`` holds."""

    iter_values: tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block

    def __post_init__(self) -> None:
        values = self.iter_values
        if type(values) is not tuple or not all(isinstance(v, PrimExpr) for v in values):
            object.__setattr__(self, "iter_values", tuple(convert(v) for v in values))
        # else the tuple is kept: analyses remember answers by the bindings' identity
        object.__setattr__(self, "predicate", convert(self.predicate))
        if len(self.iter_values) != len(self.block.iter_vars):
            raise ValueError(
                f"block {self.block.name} has {len(self.block.iter_vars)} iterators but is bound to {len(self.iter_values)} values"
            )
        if not self.predicate.dtype.is_bool:
            raise TypeError(f"the predicate of block {self.block.name} must be bool, got {self.predicate.dtype}")


TRUE = IntImm(bool_, 1)
FALSE = IntImm(bool_, 0)


# ---------------------------------------------------------------------------------------
# functions


@dataclass(frozen=True, slots=True)
class PrimFunc(Node):
    """A tensor program.

    ``params`` are the function's parameters (handle Vars for buffers, typed Vars for
    scalars); ``buffer_map`` pairs each handle parameter with the Buffer it points to.
    ``attrs`` are (key, value) pairs such as ("global_symbol", "main").
    """

    params: tuple[Var, ...]
    body: Stmt
    buffer_map: tuple[tuple[Var, Buffer], ...] = ()
    attrs: Annotations = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        bmap = self.buffer_map.items() if isinstance(self.buffer_map, dict) else self.buffer_map
        object.__setattr__(self, "buffer_map", tuple((v, b) for v, b in bmap))
        object.__setattr__(self, "attrs", make_annotations(self.attrs))
        params = set(self.params)
        for v, b in self.buffer_map:
            if v not in params:
                raise ValueError(f"buffer_map names {v.name} for buffer {b.name}, which is not a parameter")

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        """The parameter buffers in parameter order."""
        bmap = dict(self.buffer_map)
        return tuple(bmap[p] for p in self.params if p in bmap)

    def buffer_of(self, param: Var) -> Buffer | None:
        return dict(self.buffer_map).get(param)

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.params, body, self.buffer_map, self.attrs)

    def script(self, name: str | None = None) -> str:
        """The program as TVMScript-like text (see ``tensorsearch.script``)."""
        from .printer import script

        return script(self, name=name)


def make_prim_func(buffers: list[Buffer] | tuple[Buffer, ...], body: Stmt, name: str = "main") -> PrimFunc:
    """A PrimFunc whose parameters are the given buffers, in order."""
    params = tuple(Var(b.name + "_handle", DataType("handle", 64)) for b in buffers)
    return PrimFunc(params, body, tuple(zip(params, buffers, strict=True)), (("global_symbol", name),))
