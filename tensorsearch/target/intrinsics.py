"""Tensor intrinsics described in YAML: the schema, the loader, and the objects later passes use.

An intrinsic file (``intrinsics/<set>.yaml``) is an *intrinsic set*: a target (``llvm`` or
``cuda``), the requirements a hardware descriptor must meet to offer it, a list of intrinsics, and
for multi-instruction units (WMMA) the roles its intrinsics play. Each intrinsic is the paper's
(section 4.1) and Exo's three parts: operands (shape, dtype, memory scope, layout constraints,
role), the semantics as one statement over the operands with named iterators (built into a
one-block PrimFunc by :mod:`tensorsearch.intrin.semantics`), and the implementation (an LLVM call
built from operand vectors, or a CUDA code template). docs/hardware-yaml.md is the full schema.

The YAML text is read by :func:`tensorsearch.hardware.read_yaml` (``yaml.safe_load``), the one
place the project reads YAML. Every mistake raises :class:`IntrinsicError` (a
:class:`~tensorsearch.hardware.HardwareError`) naming the file, the key path, what was expected and
what was found. Files are found on :func:`search_path` and loaded once per (path, mtime). The
LLVM call an implementation declares is checked against LLVM's own declaration of that intrinsic
(:mod:`.llvm_check`, asked in a child process because LLVM aborts on some spellings).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import keyword
import os
import re
import string
import warnings
from collections.abc import Callable, Mapping
from collections.abc import Iterator as _It
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..ir import Block, Buffer, DataType, IterType, PrimFunc, parse_dtype
from .llvm_check import Answer, accepted_change, check_calls, dtype_text, llvm_type, llvm_version
from .operands import Iterator, Operand
from .reader import (
    KNOWN_ARCHES,
    NAME_RE,
    SCOPE_RE,
    Ctx,
    HardwareError,
    did_you_mean,
    parse_compute_capability,
    parse_features,
    parse_mapping,
    read_text,
    read_yaml,
    search_path,
)
from .semantics import SemanticsIR, build_semantics
from .traits import HardwareTraits

__all__ = [
    "CudaImpl",
    "Intrinsic",
    "IntrinsicError",
    "IntrinsicNotVerified",
    "IntrinsicSet",
    "Iterator",
    "LLVMArg",
    "LLVMImpl",
    "LLVMTileCall",
    "Operand",
    "Requirements",
    "TileRegisters",
    "Unit",
    "available",
    "cuda_unverified_reason",
    "find",
    "load_intrinsic",
    "loaded_with_call",
    "parse_set",
    "resolve_sets",
    "warn_not_verified",
]


class IntrinsicError(HardwareError):
    """A malformed intrinsic file, or an intrinsic set a hardware descriptor cannot offer."""


class IntrinsicNotVerified(UserWarning):
    """An intrinsic reaches code generation without its implementation having been run against its
    semantics (``tensorsearch.runtime.verify``): this machine cannot run it. Issued once per
    intrinsic per process by :func:`warn_not_verified`."""


_WARNED_NOT_VERIFIED: set[tuple[str, str, str]] = set()


def warn_not_verified(intr: Intrinsic, reason: str, stacklevel: int = 3) -> bool:
    """Warn (:class:`IntrinsicNotVerified`) ``"FILE: NAME not verified: REASON"`` unless this
    process already warned about this intrinsic (same file, name and definition); whether it warned."""
    key = (str(intr.source), intr.name, intr.digest)
    if key in _WARNED_NOT_VERIFIED:
        return False
    _WARNED_NOT_VERIFIED.add(key)
    where = intr.source or f"intrinsic set {intr.set_name}"
    warnings.warn(IntrinsicNotVerified(f"{where}: {intr.name} not verified: {reason}"), stacklevel=stacklevel)
    return True


def cuda_unverified_reason() -> str:
    """Why a CUDA intrinsic is not verified here (tensorsearch generates CUDA C but runs none)."""
    if os.path.exists("/dev/nvidiactl"):
        return "tensorsearch does not run CUDA code (it only generates CUDA C), so the GPU here was not used"
    return "this machine has no GPU to run CUDA code on (and tensorsearch only generates CUDA C, it runs none)"


ROLES = ("input", "output", "accumulator")
TARGETS = ("llvm", "cuda")
UNIT_ROLES = ("compute", "init", "load", "store")
MEMORY_SCOPES = ("global", "shared", "local")  # addressable scopes; any other scope is a fragment

# --------------------------------------------------------------------------------------------
# The objects


@dataclass(frozen=True)
class LLVMArg:
    """One argument of the LLVM call.

    Either the whole ``operand`` region loaded as one vector of type ``load`` and then transformed
    by ``steps`` in order -- ``("reinterpret", DataType)`` is a bitcast to a type of the same total
    bits, ``("cast", DataType)`` converts each lane's value to a type of the same lanes (as
    ``cast()`` in the semantics: ``bfloat16x8 -> float32x8`` is exact), ``("broadcast", n)``
    repeats a scalar into ``n`` lanes -- or a ``constant`` of ``dtype``.
    """

    operand: str | None
    load: DataType | None
    steps: tuple[tuple[str, Any], ...] = ()
    constant: int | float | None = None
    constant_dtype: DataType | None = None

    @property
    def dtype(self) -> DataType:
        """The type of the value passed (after all steps)."""
        if self.operand is None:
            assert self.constant_dtype is not None
            return self.constant_dtype
        t = self.load
        assert t is not None
        for kind, arg in self.steps:
            t = t.with_lanes(arg) if kind == "broadcast" else arg
        return t


@dataclass(frozen=True)
class LLVMImpl:
    """``store = intrinsic(args...)``: the result (type ``returns``) is stored over operand ``store``;
    with ``accumulate``, ``store = store + intrinsic(args...)`` (for an instruction that does not
    accumulate itself, such as ``pmaddwd``)."""

    intrinsic: str
    args: tuple[LLVMArg, ...]
    returns: DataType
    store: str
    kind: str = "llvm"
    accumulate: bool = False

    @property
    def signature(self) -> tuple[DataType, tuple[DataType, ...]]:
        """(result type, argument types), as the call is declared."""
        return self.returns, tuple(a.dtype for a in self.args)


@dataclass(frozen=True)
class CudaImpl:
    """A CUDA C statement template; ``{X}`` is operand X, ``{X.stride}`` its row stride.

    ``{X}`` stands for a pointer to the first element of X's region when X is in a memory scope
    (global, shared, local), and for the fragment variable when X is in a fragment scope; then
    ``fragments`` gives, per such operand, the declaration template (with ``{name}``) of that
    fragment. ``includes`` are the headers the template needs.
    """

    template: str
    placeholders: tuple[str, ...]
    includes: tuple[str, ...] = ()
    fragments: tuple[tuple[str, str], ...] = ()  # (operand name, declaration template with {name})
    kind: str = "cuda"

    def render(self, values: Mapping[str, str]) -> str:
        """The template with each placeholder (``"A"``, ``"A.stride"``) replaced by ``values[...]``."""
        missing = [p for p in self.placeholders if p not in values]
        if missing:
            raise KeyError(f"render needs a value for the placeholders {missing} of {self.template!r}")
        out = []
        for literal, fname, _spec, _conv in string.Formatter().parse(self.template):
            out.append(literal)
            if fname is not None:
                out.append(str(values[fname]))
        return "".join(out)

    def declare(self, operand: str, name: str) -> str:
        """The declaration of the fragment variable ``name`` for fragment operand ``operand``."""
        return dict(self.fragments)[operand].replace("{name}", name)


@dataclass(frozen=True)
class LLVMTileCall:
    """A call of an LLVM intrinsic on tile registers and memory: one instruction of a CPU unit
    (AMX's ``tileloadd``, ``tdpbusd``, ``tilestored``). ``args`` are ``(kind, operand)`` in call
    order: ``tile`` is the number of the tile register holding a register-scope operand (an
    ``i8`` immediate), ``pointer`` the address of a memory operand's first element, ``stride`` its
    row stride in bytes (``i64``). The call returns nothing: the instruction writes its tile or
    memory itself."""

    intrinsic: str
    args: tuple[tuple[str, str], ...]
    kind: str = "llvm_tile"

    @property
    def signature(self) -> tuple[str, tuple[str, ...]]:
        """(result, argument types) as LLVM type text: ``void (i8, ptr, i64)``."""
        return "void", tuple(_TILE_ARG_TYPES[kind] for kind, _ in self.args)


_TILE_ARG_TYPES = {"tile": "i8", "pointer": "ptr", "stride": "i64"}


@dataclass(frozen=True)
class TileRegisters:
    """A CPU's tile registers (``llvm.tiles`` of an intrinsic set): operands in ``scope`` live in
    one of ``count`` registers of at most ``rows`` rows of ``bytes_per_row`` bytes. Before its
    first tile instruction a kernel loads a configuration with ``configure`` (the register shapes,
    palette ``palette``); on Linux a process must first be granted the XSAVE feature ``xfeature``
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, xfeature)``; 0: nothing to ask)."""

    scope: str
    count: int
    rows: int
    bytes_per_row: int
    configure: str
    palette: int
    xfeature: int = 0


@dataclass(frozen=True)
class Requirements:
    """What a hardware descriptor needs to offer a set: a kind, arches, features, a compute capability."""

    target: str
    arch: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    compute_capability: tuple[int, int] | None = None

    def why_not(self, hw: HardwareTraits) -> str | None:
        """None when ``hw`` (a Hardware) meets the requirements, else the reason in words."""
        kind = "cpu" if self.target == "llvm" else "gpu"
        if hw.kind != kind:
            return f"the set targets {self.target} (kind {kind}) but {hw.name} is kind {hw.kind}"
        if self.arch and hw.arch not in self.arch:
            return f"the set needs architecture {' or '.join(self.arch)} but {hw.name} is {hw.arch}"
        missing = [f for f in self.features if not hw.has_feature(f)]
        if missing:
            return f"the set needs features {', '.join(missing)}, missing from {hw.name}'s features"
        if self.compute_capability is not None:
            have = hw.gpu.compute_capability if hw.gpu is not None else None
            if have is None or have < self.compute_capability:
                need = ".".join(map(str, self.compute_capability))
                got = ".".join(map(str, have)) if have else "none"
                return f"the set needs compute capability {need} or newer but {hw.name} has {got}"
        return None


@dataclass(frozen=True)
class Unit:
    """A multi-instruction unit (WMMA): the intrinsics that together run ``compute`` on fragments.

    ``loads`` pairs each compute input operand with the intrinsic that fills its fragment.
    """

    name: str
    compute: str
    init: str | None = None
    loads: tuple[tuple[str, str], ...] = ()
    store: str | None = None

    @property
    def members(self) -> tuple[str, ...]:
        names = [self.compute, self.init, *(n for _, n in self.loads), self.store]
        return tuple(n for n in names if n is not None)


@dataclass(frozen=True)
class Intrinsic:
    """A tensor intrinsic: operands, iterators, semantics (text and IR), implementation.

    ``role`` is ``compute`` unless a unit uses it as ``init``, ``load`` or ``store``; ``units``
    names the units it belongs to. Frozen and hashable (the IR is carried along, not compared).
    """

    name: str
    target: str  # llvm | cuda
    operands: tuple[Operand, ...]
    iterators: tuple[Iterator, ...]
    semantics: str
    impl: LLVMImpl | LLVMTileCall | CudaImpl
    requires: Requirements
    set_name: str
    role: str = "compute"
    tile_scope: str = ""  # the set's tile-register scope (llvm.tiles.scope), if it has one
    # the set's tile registers (llvm.tiles.count): the set's property, so not in the digest
    tile_count: int = field(default=0, compare=False)
    units: tuple[str, ...] = ()
    description: str = ""
    source: str | None = field(default=None, compare=False)
    ir: SemanticsIR | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def digest(self) -> str:
        """16 hex digits of SHA-256 over the definition (every compared field): traces record it,
        so a replay can tell that an intrinsic of the same name was defined differently."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.compare}
        return hashlib.sha256(repr(sorted(fields.items())).encode()).hexdigest()[:16]

    # operands and iterators ----------------------------------------------------------
    def operand(self, name: str) -> Operand:
        for o in self.operands:
            if o.name == name:
                return o
        raise KeyError(f"intrinsic {self.name} has no operand {name!r}; it has {[o.name for o in self.operands]}")

    @property
    def inputs(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.operands if o.role == "input")

    @property
    def output(self) -> Operand:
        """The one operand the semantics writes (role output or accumulator)."""
        return next(o for o in self.operands if o.is_written)

    @property
    def accumulate(self) -> bool:
        """Whether the semantics accumulates (``+=``) into an accumulator."""
        return self.output.role == "accumulator"

    @property
    def spatial_iterators(self) -> tuple[Iterator, ...]:
        return tuple(i for i in self.iterators if i.kind == IterType.SPATIAL)

    @property
    def reduce_iterators(self) -> tuple[Iterator, ...]:
        return tuple(i for i in self.iterators if i.kind == IterType.REDUCE)

    # IR --------------------------------------------------------------------------------
    def _ir(self) -> SemanticsIR:
        if self.ir is None:
            raise ValueError(f"intrinsic {self.name} was built without its semantics IR")
        return self.ir

    def desc_func(self) -> PrimFunc:
        """The semantics as a PrimFunc: one block (named after the intrinsic) inside the root.

        Parameters are the operand buffers in operand order (compact, in the operands' scopes);
        loops follow the iterators' order; the block has no init: an accumulator is read and
        written (``C[..] = C[..] + value``). The same object is returned on every call.
        """
        return self._ir().func

    def desc_block(self) -> Block:
        """The one block of :meth:`desc_func`."""
        return self._ir().block

    @property
    def buffers(self) -> dict[str, Buffer]:
        """Operand name -> the buffer of :meth:`desc_func`."""
        return dict(self._ir().buffers)

    # targets ---------------------------------------------------------------------------
    def why_not(self, hw: HardwareTraits) -> str | None:
        """None when ``hw`` can run it, else why not."""
        reason = self.requires.why_not(hw)
        if reason is not None:
            return f"{self.name}: {reason}"
        for o in self.operands:
            if o.scope not in hw.memory_scopes and o.scope != self.tile_scope:
                return f"{self.name}: operand {o.name} is in scope {o.scope}, which {hw.name} does not have"
        return None

    def for_target(self, hw: HardwareTraits) -> bool:
        """Whether ``hw`` can run this intrinsic (see :meth:`why_not`)."""
        return self.why_not(hw) is None


@dataclass(frozen=True)
class IntrinsicSet:
    """The contents of one intrinsic file."""

    name: str
    target: str
    requires: Requirements
    intrinsics: tuple[Intrinsic, ...]
    units: tuple[Unit, ...] = ()
    description: str = ""
    source: str | None = field(default=None, compare=False)
    tiles: TileRegisters | None = None

    def __getitem__(self, name: str) -> Intrinsic:
        for i in self.intrinsics:
            if i.name == name:
                return i
        raise KeyError(f"intrinsic set {self.name} has no intrinsic {name!r}; it has {self.names}")

    def __iter__(self) -> _It[Intrinsic]:
        return iter(self.intrinsics)

    def __len__(self) -> int:
        return len(self.intrinsics)

    @property
    def names(self) -> list[str]:
        return [i.name for i in self.intrinsics]

    def unit(self, name: str) -> Unit:
        for u in self.units:
            if u.name == name:
                return u
        raise KeyError(f"intrinsic set {self.name} has no unit {name!r}; it has {[u.name for u in self.units]}")


# --------------------------------------------------------------------------------------------
# Field parsers (value, ctx) -> value


_Parser = Callable[[Any, Ctx], Any]
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_INTRIN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_LLVM_NAME_RE = re.compile(r"^llvm(\.[A-Za-z0-9_]+)+$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9_./-]+$")


def _str(value: Any, ctx: Ctx) -> str:
    if not isinstance(value, str):
        raise ctx.fail("a string", value)
    return value


def _nonempty_str(value: Any, ctx: Ctx) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ctx.fail("a non-empty string", value)
    return value


def _regex(pattern: re.Pattern[str], what: str) -> _Parser:
    def parse(value: Any, ctx: Ctx) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ctx.fail(what, value)
        return value

    return parse


def _ident(value: Any, ctx: Ctx) -> str:
    expected = "a name that is a Python identifier (letters, digits, '_'), not a keyword, type or function name"
    if not isinstance(value, str) or not _IDENT_RE.match(value) or keyword.iskeyword(value):
        raise ctx.fail(expected, value)
    if value in ("cast", "min", "max") or _is_dtype(value):
        raise ctx.fail(expected, value)
    return value


def _is_dtype(text: str) -> bool:
    try:
        parse_dtype(text)
    except ValueError:
        return False
    return True


def _dtype(value: Any, ctx: Ctx) -> DataType:
    expected = "a data type such as int8, uint8, int32, float16 or float32"
    if not isinstance(value, str) or not _is_dtype(value):
        raise ctx.fail(expected, value)
    t = parse_dtype(value)
    if t.is_handle or t.lanes != 1:
        raise ctx.fail(expected + " (a scalar type)", value)
    return t


def _vector_dtype(value: Any, ctx: Ctx) -> DataType:
    expected = "a scalar or vector data type such as int32, int8x64 or int32x16"
    if not isinstance(value, str) or not _is_dtype(value) or parse_dtype(value).is_handle:
        raise ctx.fail(expected, value)
    return parse_dtype(value)


def _pos_int(what: str) -> _Parser:
    def parse(value: Any, ctx: Ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ctx.fail(what, value)
        return value

    return parse


def _bool(value: Any, ctx: Ctx) -> bool:
    if not isinstance(value, bool):
        raise ctx.fail("true or false", value)
    return value


def _one_of(options: tuple[str, ...]) -> _Parser:
    def parse(value: Any, ctx: Ctx) -> str:
        if value not in options:
            raise ctx.fail("one of " + ", ".join(options), value)
        return value

    return parse


def _shape(value: Any, ctx: Ctx) -> tuple[int, ...]:
    expected = "a shape: a non-empty list of positive integers such as [16, 4]"
    if not isinstance(value, list) or not value:
        raise ctx.fail(expected, value)
    for i, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ctx.child(f"[{i}]").fail("a positive integer extent", s)
    return tuple(value)


def _row_stride(value: Any, ctx: Ctx) -> str | int:
    if value == "any" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ctx.fail('"any" or a positive integer row stride in elements', value)


def _alignment(value: Any, ctx: Ctx) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or value & (value - 1):
        raise ctx.fail("a power of two number of bytes", value)
    return value


def _scope(value: Any, ctx: Ctx) -> str:
    return _regex(SCOPE_RE, "a memory scope such as global, shared or wmma.matrix_a")(value, ctx)


def _list_of(item: _Parser, what: str, nonempty: bool = True) -> _Parser:
    def parse(value: Any, ctx: Ctx) -> tuple[Any, ...]:
        if not isinstance(value, list) or (nonempty and not value):
            raise ctx.fail(what, value)
        return tuple(item(v, ctx.child(f"[{i}]")) for i, v in enumerate(value))

    return parse


def _mapping(fields: dict[str, tuple[_Parser, bool]], what: str) -> _Parser:
    def parse(value: Any, ctx: Ctx) -> dict[str, Any]:
        return parse_mapping(value, ctx, fields, what)

    return parse


def _raw(value: Any, ctx: Ctx) -> Any:
    return value


_OPERAND_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "name": (_ident, True),
    "shape": (_shape, True),
    "dtype": (_dtype, True),
    "role": (_one_of(ROLES), True),
    "scope": (_scope, False),
    "contiguous": (_bool, False),
    "row_stride": (_row_stride, False),
    "row_stride_multiple": (_pos_int("a positive integer number of elements"), False),
    "alignment": (_alignment, False),
    "description": (_str, False),
}


def _operand(value: Any, ctx: Ctx) -> Operand:
    f = parse_mapping(value, ctx, _OPERAND_FIELDS, "an operand mapping")
    f.pop("description", None)
    op = Operand(**f)
    if op.contiguous and op.row_stride is not None:
        raise ctx.child("row_stride").message(
            "a contiguous operand has no separate row stride; give contiguous: true or row_stride, not both",
            op.row_stride,
        )
    if "row_stride_multiple" in f and op.row_stride != "any":
        raise ctx.child("row_stride_multiple").message("only meaningful with row_stride: any", op.row_stride_multiple)
    if op.row_stride is not None and len(op.shape) < 2:
        raise ctx.child("row_stride").message(
            f"a row stride needs at least 2 dimensions; operand {op.name} has shape {list(op.shape)}", op.row_stride
        )
    if isinstance(op.row_stride, int) and op.row_stride < op.shape[-1]:
        raise ctx.child("row_stride").fail(
            f"a row stride of at least the row length {op.shape[-1]} (rows may not overlap)", op.row_stride
        )
    return op


_ITERATOR_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "name": (_ident, True),
    "kind": (_one_of(("spatial", "reduce")), True),
    "extent": (_pos_int("a positive integer extent"), True),
}


def _iterator(value: Any, ctx: Ctx) -> Iterator:
    f = parse_mapping(value, ctx, _ITERATOR_FIELDS, "an iterator mapping")
    return Iterator(f["name"], IterType(f["kind"]), f["extent"])


def _features(value: Any, ctx: Ctx) -> tuple[str, ...]:
    return parse_features(value, ctx)


def _arches(value: Any, ctx: Ctx) -> tuple[str, ...]:
    arches = _list_of(_one_of(KNOWN_ARCHES), "a list of architectures such as [x86_64]")(value, ctx)
    return arches


_LLVM_REQ_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "arch": (_arches, True),
    "features": (_features, False),
}
_CUDA_REQ_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "compute_capability": (parse_compute_capability, True),
}

_FRAGMENT_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "scope": (_scope, True),
    "dtype": (_dtype, True),
    "declare": (_nonempty_str, True),
}
_CUDA_SET_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "includes": (_list_of(_regex(_HEADER_RE, "a header name such as mma.h"), "a list of header names", False), False),
    "fragments": (_list_of(_mapping(_FRAGMENT_FIELDS, "a fragment mapping"), "a list of fragments", False), False),
}


def _non_negative_int(value: Any, ctx: Ctx) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ctx.fail("a non-negative integer", value)
    return value


_LLVM_NAME = _regex(_LLVM_NAME_RE, "an LLVM intrinsic name such as llvm.x86.ldtilecfg")
_TILES_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "scope": (_scope, True),
    "count": (_pos_int("a positive number of tile registers"), True),
    "rows": (_pos_int("a positive number of rows"), True),
    "bytes_per_row": (_pos_int("a positive number of bytes"), True),
    "configure": (_LLVM_NAME, True),
    "palette": (_non_negative_int, True),
    "xfeature": (_non_negative_int, False),
}
_LLVM_SET_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "tiles": (
        _mapping(_TILES_FIELDS, "a mapping with scope, count, rows, bytes_per_row, configure and palette"),
        False,
    ),
}
_LLVM_TILE_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "intrinsic": (_LLVM_NAME, True),
    "args": (_raw, True),
}
_TILE_ARG_KINDS = tuple(_TILE_ARG_TYPES)

_LLVM_ARG_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "operand": (_raw, False),
    "load": (_vector_dtype, False),
    "then": (_raw, False),
    "constant": (_raw, False),
    "dtype": (_vector_dtype, False),
}
_LLVM_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "intrinsic": (_regex(_LLVM_NAME_RE, "an LLVM intrinsic name such as llvm.x86.avx512.vpdpbusd.512"), True),
    "args": (_raw, True),
    "returns": (_vector_dtype, True),
    "store": (_raw, True),
    "accumulate": (_bool, False),
}
_CUDA_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "template": (_nonempty_str, True),
}


def _intrinsic_fields(target: str) -> dict[str, tuple[_Parser, bool]]:
    return {
        "name": (_regex(_INTRIN_NAME_RE, "an intrinsic name of letters, digits, '_' and '.'"), True),
        "description": (_str, False),
        "operands": (_list_of(_operand, "a non-empty list of operands"), True),
        "iterators": (_list_of(_iterator, "a non-empty list of iterators"), True),
        "semantics": (_nonempty_str, True),
        target: (_raw, True),  # llvm or cuda, checked against the operands afterwards
    }


_UNIT_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "name": (_regex(_INTRIN_NAME_RE, "a unit name of letters, digits, '_' and '.'"), True),
    "compute": (_raw, True),
    "init": (_raw, False),
    "load": (_raw, False),
    "store": (_raw, False),
}


def _set_fields(target: str) -> dict[str, tuple[_Parser, bool]]:
    fields: dict[str, tuple[_Parser, bool]] = {
        "name": (_regex(NAME_RE, "a set name of letters, digits, '.', '_' and '-'"), True),
        "target": (_one_of(TARGETS), True),
        "requires": (_raw, True),
        "description": (_str, False),
    }
    if target == "cuda":
        fields["cuda"] = (_mapping(_CUDA_SET_FIELDS, "a mapping with includes and fragments"), False)
    else:
        fields["llvm"] = (_mapping(_LLVM_SET_FIELDS, "a mapping with tiles"), False)
    fields["intrinsics"] = (_raw, True)
    fields["units"] = (_raw, False)
    return fields


# --------------------------------------------------------------------------------------------
# Cross-checks: implementation against operands, units against intrinsics


def _operand_ref(value: Any, ctx: Ctx, operands: dict[str, Operand]) -> Operand:
    if not isinstance(value, str) or value not in operands:
        known = ", ".join(operands)
        raise ctx.message(f"unknown operand {value!r}; expected one of the intrinsic's operands: {known}", value)
    return operands[value]


def _is_tile_call(value: Any) -> bool:
    """Whether an ``llvm`` implementation is written as a tile call (its arguments name ``tile``,
    ``pointer`` or ``stride``) rather than as a call on loaded vectors."""
    args = value.get("args") if isinstance(value, dict) else None
    return isinstance(args, list) and any(isinstance(a, dict) and set(a) & set(_TILE_ARG_KINDS) for a in args)


def _llvm_tile_call(value: Any, ctx: Ctx, operands: dict[str, Operand], tiles: TileRegisters | None) -> LLVMTileCall:
    f = parse_mapping(value, ctx, _LLVM_TILE_FIELDS, "a tile call mapping (intrinsic, args)")
    args_ctx = ctx.child("args")
    if tiles is None:
        raise args_ctx.message(
            "tile and pointer arguments need the set's tile registers; declare them under llvm: {tiles: ...}",
            f["args"],
        )
    args: list[tuple[str, str]] = []
    for i, a in enumerate(f["args"]):
        sub = args_ctx.child(f"[{i}]")
        if not isinstance(a, dict) or len(a) != 1 or next(iter(a)) not in _TILE_ARG_KINDS:
            raise sub.fail("one of {tile: OPERAND}, {pointer: OPERAND}, {stride: OPERAND}", a)
        ((kind, name),) = a.items()
        op = _operand_ref(name, sub.child(kind), operands)
        _check_tile_arg(kind, op, tiles, sub.child(kind))
        args.append((kind, op.name))
    passed = {n for k, n in args if k != "stride"}
    for o in operands.values():
        if o.name not in passed:
            raise args_ctx.message(
                f"operand {o.name} is never passed to {f['intrinsic']} as a tile or a pointer", [n for _, n in args]
            )
    return LLVMTileCall(f["intrinsic"], tuple(args))


def _check_tile_arg(kind: str, op: Operand, tiles: TileRegisters, ctx: Ctx) -> None:
    """A ``tile`` argument is an operand in the tile scope that fits one register; a ``pointer``
    or ``stride`` argument an operand in memory (a stride needs rows)."""
    if kind == "tile":
        if op.scope != tiles.scope:
            raise ctx.message(
                f"operand {op.name} is in scope {op.scope}, not in the tile registers' scope {tiles.scope}", op.name
            )
        rows = op.shape[0] if len(op.shape) > 1 else 1
        row_bytes = op.numel // rows * op.dtype.bytes
        if rows > tiles.rows or row_bytes > tiles.bytes_per_row:
            raise ctx.message(
                f"operand {op.name} ({list(op.shape)} {op.dtype}) is {rows} rows of {row_bytes} bytes; a tile register "
                f"holds at most {tiles.rows} rows of {tiles.bytes_per_row} bytes",
                op.name,
            )
        return
    if op.scope not in MEMORY_SCOPES:
        raise ctx.message(
            f"operand {op.name} is in scope {op.scope}; a {kind} argument needs an operand in memory", op.name
        )
    if kind == "stride" and op.layout == "any":
        raise ctx.message(
            f"operand {op.name} declares no rows (row_stride or contiguous), so it has no stride", op.name
        )


def _llvm_impl(value: Any, ctx: Ctx, operands: dict[str, Operand], written: Operand) -> LLVMImpl:
    f = parse_mapping(value, ctx, _LLVM_FIELDS, "an LLVM implementation mapping")
    args_ctx = ctx.child("args")
    if not isinstance(f["args"], list) or not f["args"]:
        raise args_ctx.fail("a non-empty list of call arguments", f["args"])
    args = tuple(_llvm_arg(v, args_ctx.child(f"[{i}]"), operands) for i, v in enumerate(f["args"]))
    store = _operand_ref(f["store"], ctx.child("store"), operands)
    if store is not written:
        raise ctx.child("store").fail(f"{written.name}, the operand the semantics writes", store.name)
    if f["returns"] != store.vector_type:
        raise ctx.child("returns").fail(
            f"{store.vector_type}: the stored operand {store.name} ({list(store.shape)} {store.dtype}) as one vector",
            str(f["returns"]),
        )
    if store.numel > 1 and not store.contiguous:
        raise ctx.child("store").message(
            f"operand {store.name} is stored as one vector, so it must declare contiguous: true", store.name
        )
    accumulate = f.get("accumulate", False)
    if accumulate and store.role != "accumulator":
        raise ctx.child("accumulate").message(
            f"accumulate: true adds the result to {store.name}, so {store.name} must have role accumulator", True
        )
    passed = {a.operand for a in args} | ({store.name} if accumulate else set())
    for o in operands.values():
        if o.role != "output" and o.name not in passed:
            raise args_ctx.message(
                f"operand {o.name} (role {o.role}) is never passed to {f['intrinsic']}; "
                "every input and accumulator operand must be an argument",
                [a.operand for a in args],
            )
    return LLVMImpl(f["intrinsic"], args, f["returns"], store.name, accumulate=accumulate)


def _llvm_arg(value: Any, ctx: Ctx, operands: dict[str, Operand]) -> LLVMArg:
    f = parse_mapping(value, ctx, _LLVM_ARG_FIELDS, "an argument mapping ({operand, load, then} or {constant, dtype})")
    if "operand" in f:
        for bad in ("constant", "dtype"):
            if bad in f:
                raise ctx.child(bad).message(f"an operand argument has no {bad!r}; use load and then", f[bad])
        op = _operand_ref(f["operand"], ctx.child("operand"), operands)
        if "load" not in f:
            raise ctx.child("load").message(
                f"missing required key; expected the vector type of the whole operand, {op.vector_type}", None
            )
        if f["load"] != op.vector_type:
            raise ctx.child("load").fail(
                f"{op.vector_type}: the whole operand {op.name} ({list(op.shape)} {op.dtype}) as one vector",
                str(f["load"]),
            )
        if op.numel > 1 and not op.contiguous:
            raise ctx.child("load").message(
                f"operand {op.name} is loaded as one vector, so it must declare contiguous: true", op.name
            )
        steps = _steps(f.get("then", []), ctx.child("then"), f["load"])
        return LLVMArg(op.name, f["load"], steps)
    if "constant" in f:
        if "dtype" not in f:
            raise ctx.child("dtype").message("missing required key; a constant argument needs its dtype", None)
        c = f["constant"]
        if isinstance(c, bool) or not isinstance(c, int | float) or (isinstance(c, float) and not f["dtype"].is_float):
            raise ctx.child("constant").fail(f"a number of type {f['dtype']}", c)
        return LLVMArg(None, None, (), c, f["dtype"])
    raise ctx.message("an argument needs either operand (with load) or constant (with dtype)", value)


def _steps(value: Any, ctx: Ctx, start: DataType) -> tuple[tuple[str, Any], ...]:
    expected = "a list of steps such as [reinterpret: int32, broadcast: 16, cast: float32x16]"
    if not isinstance(value, list):
        raise ctx.fail(expected, value)
    out: list[tuple[str, Any]] = []
    t = start
    for i, step in enumerate(value):
        sub = ctx.child(f"[{i}]")
        if not isinstance(step, dict) or len(step) != 1:
            raise sub.fail("one step: {reinterpret: TYPE}, {cast: TYPE} or {broadcast: LANES}", step)
        ((kind, arg),) = step.items()
        if kind == "reinterpret":
            new = _vector_dtype(arg, sub.child("reinterpret"))
            if new.bits * new.lanes != t.bits * t.lanes:
                raise sub.child("reinterpret").fail(
                    f"a type of {t.bits * t.lanes} bits, the size of the {t} value reinterpreted", str(new)
                )
            out.append(("reinterpret", new))
            t = new
        elif kind == "cast":
            new = _vector_dtype(arg, sub.child("cast"))
            if new.lanes != t.lanes:
                raise sub.child("cast").fail(
                    f"a type of {t.lanes} lanes, the lanes of the {t} value converted", str(new)
                )
            out.append(("cast", new))
            t = new
        elif kind == "broadcast":
            lanes = _pos_int("a number of lanes of at least 2")(arg, sub.child("broadcast"))
            if lanes < 2:
                raise sub.child("broadcast").fail("a number of lanes of at least 2", arg)
            if t.lanes != 1:
                raise sub.child("broadcast").message(f"only a scalar can be broadcast; the value here is {t}", arg)
            out.append(("broadcast", lanes))
            t = t.with_lanes(lanes)
        else:
            raise sub.child(str(kind)).message(
                f"unknown step {kind!r}; the steps are reinterpret, cast and broadcast", kind
            )
    return tuple(out)


def _check_llvm_calls(impls: list[tuple[Ctx, LLVMImpl | CudaImpl]]) -> None:
    """Refuse an LLVM call that LLVM itself does not declare as written: unknown name, argument or
    result types, argument count (asked once per signature, see :mod:`.llvm_check`)."""
    llvm_impls = [(ctx, impl) for ctx, impl in impls if isinstance(impl, LLVMImpl)]
    calls = [_llvm_call(impl) for _, impl in llvm_impls]
    for (ctx, impl), answer in zip(llvm_impls, check_calls(calls), strict=True):
        if answer.kind != "ok":
            raise _llvm_mismatch(ctx, impl, answer)
    tile_calls = [(ctx, (impl.intrinsic, *impl.signature)) for ctx, impl in impls if isinstance(impl, LLVMTileCall)]
    for (ctx, call), answer in zip(tile_calls, check_calls([c for _, c in tile_calls]), strict=True):
        if answer.kind != "ok":
            raise _tile_call_mismatch(ctx, call, answer)


def _tile_call_mismatch(ctx: Ctx, call: tuple[str, str, tuple[str, ...]], answer: Answer) -> IntrinsicError:
    """One sentence: LLVM does not declare the tile call ``call`` (or the configure call) so."""
    name, ret, args = call
    version = llvm_version()
    if answer.kind == "unknown":
        return ctx.child("intrinsic").message(f"{version} has no intrinsic {name}", name)
    said = (
        f"it declares {answer.declared[1]} ({', '.join(answer.declared[2])})"
        if answer.declared is not None
        else answer.message
    )
    return ctx.child("args").message(f"{version} does not take {name} as {ret} ({', '.join(args)}): {said}", list(args))


def _llvm_call(impl: LLVMImpl) -> tuple[str, str, tuple[str, ...]]:
    ret, args = impl.signature
    return impl.intrinsic, llvm_type(ret), tuple(llvm_type(a) for a in args)


def _llvm_mismatch(ctx: Ctx, impl: LLVMImpl, answer: Answer) -> IntrinsicError:
    """One sentence naming the key (``args[1]``, ``returns``, ``intrinsic``) and what LLVM expects."""
    name, ret, args = _llvm_call(impl)
    sig = f"{ret} ({', '.join(args)})"
    version = llvm_version()
    if answer.kind == "declared" and answer.declared is not None:
        return _declared_mismatch(ctx, impl, answer.declared, version)
    if answer.kind == "unknown":
        return ctx.child("intrinsic").message(f"{version} has no intrinsic {name}", name)
    if answer.kind == "rejected":
        return _rejected(ctx, impl, answer.message, version)
    return ctx.child("args").message(
        f"{version} aborts reading a declaration of {name} as {sig} ({answer.message}), so it does not "
        "declare it that way: check the number and types of the arguments",
        sig,
    )


def _rejected(ctx: Ctx, impl: LLVMImpl, why: str, version: str) -> IntrinsicError:
    """LLVM's verifier refused the call; where one type changed to another of the call makes LLVM
    accept it, the key is that argument (or the result) and the message says so."""
    call = _llvm_call(impl)
    name, ret, args = call
    why = why.rstrip("!")
    if "variable arguments" in why:  # what LLVM says of a call with more or fewer arguments
        why += " (the number of arguments is not the one LLVM declares)"
    text = f"{version} rejects a call of {name} as {ret} ({', '.join(args)}): {why}"
    result = "return type" in why
    change = accepted_change(call, result)
    if change is None:
        return ctx.child("returns" if result else "args").message(text, ret if result else list(args))
    pos, want = change
    key, what = ("returns", "the result") if pos < 0 else (f"args[{pos}]", f"argument {pos}")
    return ctx.child(key).message(f"{text}; it accepts {what} as {want} ({dtype_text(want)})", want)


def _declared_mismatch(ctx: Ctx, impl: LLVMImpl, declared: tuple, version: str) -> IntrinsicError:
    """LLVM read the declaration as another one (an upgrade of an old signature, a re-mangled name)."""
    name, ret, args = _llvm_call(impl)
    lname, lret, largs = declared
    whole = f"{lret} @{lname}({', '.join(largs)})"
    if len(largs) != len(args):
        return ctx.child("args").message(
            f"{version} declares {whole}: {len(largs)} arguments, but {len(args)} are written", len(args)
        )
    for j, (want, got) in enumerate(zip(largs, args, strict=True)):
        if want != got:
            written = impl.args[j].dtype
            return ctx.child(f"args[{j}]").message(
                f"{version} declares {whole}: argument {j} is {want} ({dtype_text(want)}), "
                f"but {written} ({got}) is written",
                str(written),
            )
    if lret != ret:
        return ctx.child("returns").message(
            f"{version} declares {whole}: it returns {lret} ({dtype_text(lret)}), not {impl.returns} ({ret})",
            str(impl.returns),
        )
    return ctx.child("intrinsic").message(
        f"{version} names the intrinsic with these types {lname}, not {name}: {whole}", name
    )


def _cuda_impl(
    value: Any, ctx: Ctx, operands: dict[str, Operand], includes: tuple[str, ...], fragments: dict
) -> CudaImpl:
    f = parse_mapping(value, ctx, _CUDA_FIELDS, "a CUDA implementation mapping")
    tctx = ctx.child("template")
    try:
        parsed = list(string.Formatter().parse(f["template"]))
    except ValueError as e:
        raise tctx.message(f"bad template ({e}); write a literal brace as {{{{ or }}}}", f["template"]) from None
    placeholders: list[str] = []
    for _lit, fname, spec, conv in parsed:
        if fname is None:
            continue
        name, _, attr = fname.partition(".")
        if name not in operands:
            raise tctx.message(
                f"placeholder {{{fname}}} names no operand; the operands are {', '.join(operands)}", fname
            )
        op = operands[name]
        if spec or conv:
            raise tctx.message(f"placeholder {{{fname}}} may not have a format spec or conversion", fname)
        if attr and attr != "stride":
            raise tctx.message(f"placeholder {{{fname}}}: unknown attribute {attr!r}; the one known is stride", fname)
        if attr == "stride" and (op.scope not in MEMORY_SCOPES or op.layout == "any"):
            raise tctx.message(
                f"placeholder {{{fname}}}: operand {name} has no row stride "
                "(it needs a memory scope and row_stride or contiguous)",
                fname,
            )
        if fname not in placeholders:
            placeholders.append(fname)
    for o in operands.values():
        if o.name not in placeholders:
            raise tctx.message(f"operand {o.name} does not appear in the template as {{{o.name}}}", f["template"])
    decls = []
    for o in operands.values():
        if o.scope not in MEMORY_SCOPES:
            decl = fragments.get((o.scope, o.dtype))
            if decl is None:
                raise tctx.message(
                    f"operand {o.name} is in fragment scope {o.scope} with dtype {o.dtype}, but the set's "
                    "cuda.fragments declares no fragment for that scope and dtype",
                    o.scope,
                )
            decls.append((o.name, decl))
    return CudaImpl(f["template"], tuple(placeholders), includes, tuple(decls))


def _intrinsic(
    value: Any,
    ctx: Ctx,
    target: str,
    requires: Requirements,
    set_name: str,
    source: str,
    cuda: dict,
    tiles: TileRegisters | None = None,
) -> Intrinsic:
    f = parse_mapping(value, ctx, _intrinsic_fields(target), f"an intrinsic mapping (target {target})")
    operands: dict[str, Operand] = {}
    for i, o in enumerate(f["operands"]):
        if o.name in operands:
            raise ctx.child(f"operands[{i}].name").fail("each operand name once", o.name)
        operands[o.name] = o
    iterators: dict[str, Iterator] = {}
    for i, it in enumerate(f["iterators"]):
        if it.name in iterators or it.name in operands:
            raise ctx.child(f"iterators[{i}].name").fail("a name not used by another iterator or operand", it.name)
        iterators[it.name] = it
    written = [o for o in operands.values() if o.is_written]
    if len(written) != 1:
        raise ctx.child("operands").message(
            f"exactly one operand must have role output or accumulator; found {len(written)}: "
            f"{', '.join(o.name for o in written) or 'none'}",
            [o.name for o in written],
        )
    ir = build_semantics(f["semantics"], f["operands"], f["iterators"], f["name"], ctx.child("semantics"))
    if target == "llvm" and _is_tile_call(f["llvm"]):
        impl: LLVMImpl | LLVMTileCall | CudaImpl = _llvm_tile_call(f["llvm"], ctx.child("llvm"), operands, tiles)
    elif target == "llvm":
        impl = _llvm_impl(f["llvm"], ctx.child("llvm"), operands, written[0])
    else:
        impl = _cuda_impl(f["cuda"], ctx.child("cuda"), operands, cuda["includes"], cuda["fragments"])
    return Intrinsic(
        name=f["name"],
        target=target,
        operands=f["operands"],
        iterators=f["iterators"],
        semantics=f["semantics"].strip(),
        impl=impl,
        requires=requires,
        set_name=set_name,
        description=f.get("description", ""),
        source=source,
        ir=ir,
        tile_scope=tiles.scope if tiles is not None else "",
        tile_count=tiles.count if tiles is not None else 0,
    )


def _tiles(value: dict[str, Any] | None, ctx: Ctx) -> TileRegisters | None:
    """The set's ``llvm.tiles``, its configure call checked against LLVM's declaration."""
    if value is None:
        return None
    tiles = TileRegisters(**value)
    if tiles.scope in MEMORY_SCOPES:
        raise ctx.child("scope").fail("a register scope of its own (not global, shared or local)", tiles.scope)
    (answer,) = check_calls([(tiles.configure, "void", ("ptr",))])
    if answer.kind != "ok":
        said = "it has no such intrinsic" if answer.kind == "unknown" else answer.message or str(answer.declared)
        raise ctx.child("configure").message(
            f"{llvm_version()} does not take {tiles.configure} as void (ptr), a configuration's address: {said}",
            tiles.configure,
        )
    return tiles


def _unit(value: Any, ctx: Ctx, intrinsics: dict[str, Intrinsic]) -> Unit:
    f = parse_mapping(value, ctx, _UNIT_FIELDS, "a unit mapping")

    def ref(v: Any, sub: Ctx) -> Intrinsic:
        if not isinstance(v, str) or v not in intrinsics:
            raise sub.message(f"unknown intrinsic {v!r}; this set defines: {', '.join(intrinsics)}", v)
        return intrinsics[v]

    compute = ref(f["compute"], ctx.child("compute"))
    acc = compute.output

    def same(frag: Any, want: Operand, sub: Ctx, what: str) -> None:
        got = (frag.scope, frag.dtype, frag.shape)
        need = (want.scope, want.dtype, want.shape)
        if got != need:
            fmt = "scope {}, dtype {}, shape {}"
            raise sub.fail(
                f"{what} in {fmt.format(need[0], need[1], list(need[2]))} (as {compute.name} uses it)",
                fmt.format(got[0], got[1], list(got[2])),
            )

    init = None
    if "init" in f:
        intr = ref(f["init"], ctx.child("init"))
        same(intr.output, acc, ctx.child("init"), f"an init intrinsic writing {acc.name}")
        init = intr.name
    loads: list[tuple[str, str]] = []
    if "load" in f:
        lctx = ctx.child("load")
        if not isinstance(f["load"], dict):
            raise lctx.fail(
                "a mapping from compute operand to load intrinsic, such as {A: load_a, B: load_b}", f["load"]
            )
        for opname, iname in f["load"].items():
            sub = lctx.child(str(opname))
            loadable = [o.name for o in compute.inputs] + ([acc.name] if acc.role == "accumulator" else [])
            if opname not in loadable:
                raise sub.message(
                    f"{opname!r} is not an input or accumulator operand of {compute.name}; those are "
                    f"{', '.join(loadable)}",
                    opname,
                )
            intr = ref(iname, sub)
            same(intr.output, compute.operand(opname), sub, f"a load intrinsic writing operand {opname}")
            loads.append((opname, intr.name))
    store = None
    if "store" in f:
        intr = ref(f["store"], ctx.child("store"))
        if not any((o.scope, o.dtype, o.shape) == (acc.scope, acc.dtype, acc.shape) for o in intr.inputs):
            raise ctx.child("store").fail(
                f"a store intrinsic reading an operand in scope {acc.scope}, dtype {acc.dtype}, shape {list(acc.shape)}",
                [f"{o.name}: {o.scope} {o.dtype} {list(o.shape)}" for o in intr.inputs],
            )
        store = intr.name
    return Unit(f["name"], compute.name, init, tuple(loads), store)


def parse_set(text: str, source: str = "<string>") -> IntrinsicSet:
    """Parse one intrinsic file's YAML text; ``source`` names it in error messages."""
    data = read_yaml(text, source, IntrinsicError)
    ctx = Ctx(source, "", IntrinsicError, text)
    what = "a YAML mapping (an intrinsic set)"
    target = "llvm"  # the table that reports a missing target (or a non-mapping document)
    if isinstance(data, dict) and "target" in data:
        target = _one_of(TARGETS)(data["target"], ctx.child("target"))
    f = parse_mapping(data, ctx, _set_fields(target), what)
    if source != "<string>" and Path(source).stem != f["name"]:
        raise ctx.child("name").fail(f"{Path(source).stem!r}, the file's name without .yaml", f["name"])
    rctx = ctx.child("requires")
    table = _LLVM_REQ_FIELDS if target == "llvm" else _CUDA_REQ_FIELDS
    req = parse_mapping(f["requires"], rctx, table, f"a mapping of requirements for target {target}")
    requires = Requirements(target, **req)
    cuda = {"includes": (), "fragments": {}}
    if target == "cuda":
        c = f.get("cuda", {})
        cuda["includes"] = c.get("includes", ())
        for i, frag in enumerate(c.get("fragments", ())):
            key = (frag["scope"], frag["dtype"])
            if frag["scope"] in MEMORY_SCOPES:
                raise ctx.child(f"cuda.fragments[{i}].scope").fail("a fragment scope (not global/shared/local)", key[0])
            if key in cuda["fragments"]:
                raise ctx.child(f"cuda.fragments[{i}]").fail("each (scope, dtype) once", f"{key[0]} {key[1]}")
            cuda["fragments"][key] = frag["declare"]
    tiles = _tiles(f.get("llvm", {}).get("tiles"), ctx.child("llvm.tiles")) if target == "llvm" else None
    ictx = ctx.child("intrinsics")
    if not isinstance(f["intrinsics"], list) or not f["intrinsics"]:
        raise ictx.fail("a non-empty list of intrinsics", f["intrinsics"])
    intrinsics: dict[str, Intrinsic] = {}
    for i, v in enumerate(f["intrinsics"]):
        intr = _intrinsic(v, ictx.child(f"[{i}]"), target, requires, f["name"], source, cuda, tiles)
        if intr.name in intrinsics:
            raise ictx.child(f"[{i}].name").fail("each intrinsic name once in a set", intr.name)
        intrinsics[intr.name] = intr
    if target == "llvm":
        _check_llvm_calls([(ictx.child(f"[{i}]").child("llvm"), x.impl) for i, x in enumerate(intrinsics.values())])
    units: list[Unit] = []
    if "units" in f:
        uctx = ctx.child("units")
        if not isinstance(f["units"], list):
            raise uctx.fail("a list of units", f["units"])
        for i, v in enumerate(f["units"]):
            u = _unit(v, uctx.child(f"[{i}]"), intrinsics)
            if u.name in [x.name for x in units] or u.name in intrinsics:
                raise uctx.child(f"[{i}].name").fail("a unit name not used by another unit or intrinsic", u.name)
            units.append(u)
    roles: dict[str, tuple[str, str]] = {}
    for i, u in enumerate(units):
        played = [(u.compute, "compute"), (u.init, "init"), *((n, "load") for _, n in u.loads), (u.store, "store")]
        for name, role in played:
            if name is None:
                continue
            if name in roles and roles[name][0] != role:
                raise ctx.child(f"units[{i}]").message(
                    f"intrinsic {name} plays role {role} here but {roles[name][0]} in unit {roles[name][1]}", name
                )
            roles.setdefault(name, (role, u.name))
    final = tuple(
        replace(
            intr,
            role=roles.get(intr.name, ("compute", ""))[0],
            units=tuple(u.name for u in units if intr.name in u.members),
        )
        for intr in intrinsics.values()
    )
    for intr in final:
        if isinstance(intr.impl, LLVMImpl):
            _LOADED[intr.impl.intrinsic][(str(source), intr.name)] = intr
    return IntrinsicSet(f["name"], target, requires, final, tuple(units), f.get("description", ""), source, tiles)


# LLVM intrinsic name -> (file, intrinsic name) -> the last definition loaded in this process
_LOADED: collections.defaultdict[str, dict[tuple[str, str], Intrinsic]] = collections.defaultdict(dict)


def loaded_with_call(llvm_name: str) -> list[Intrinsic]:
    """The intrinsics loaded in this process (the last definition of each file and name) whose
    implementation is a call of ``llvm_name``."""
    return list(_LOADED.get(llvm_name, {}).values())


# --------------------------------------------------------------------------------------------
# Finding and loading files


def available(near: str | os.PathLike[str] | None = None) -> list[str]:
    """Names of the intrinsic sets found on :func:`search_path` (first one wins per name); the
    hardware descriptors beside them in ``near`` are not sets and are left out."""
    names: list[str] = []
    for d in search_path("intrinsics", near):
        for p in sorted(d.glob("*.yaml")):
            if p.stem not in names and _looks_like_set(p):
                names.append(p.stem)
    return names


def _looks_like_set(path: Path) -> bool:
    """Whether the file at ``path`` reads as an intrinsic set (a list of intrinsic mappings under
    ``intrinsics``), not a hardware descriptor (a list of set names there). A file that does not
    read counts as a set, so that loading it names its mistake."""
    try:
        data = read_yaml(path.read_text(encoding="utf-8"), str(path), IntrinsicError)
    except (OSError, IntrinsicError):
        return True
    items = data.get("intrinsics") if isinstance(data, dict) else None
    return not (isinstance(items, list) and items and all(isinstance(i, str) for i in items))


def find(name: str, near: str | os.PathLike[str] | None = None) -> Path | None:
    """The file of set ``name`` on :func:`search_path`, or None."""
    for d in search_path("intrinsics", near):
        p = d / f"{name}.yaml"
        if p.is_file():
            return p
    return None


@functools.lru_cache(maxsize=128)
def _load_file(path: str, mtime_ns: int) -> IntrinsicSet:
    return parse_set(read_text(path, IntrinsicError), path)


def _load_path(path: Path) -> IntrinsicSet:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError as exc:
        raise IntrinsicError(str(path), "", "", message=f"cannot read: {exc.strerror or exc}") from None
    return _load_file(str(path), mtime)


def shipped_intrinsics() -> list[Intrinsic]:
    """Every intrinsic of every set on :func:`search_path` that loads (a broken file is skipped)."""
    found: list[Intrinsic] = []
    for set_name in available():
        try:
            found.extend(load_intrinsic(set_name).intrinsics)
        except IntrinsicError:
            continue
    return found


def _is_path(text: str) -> bool:
    return os.sep in text or "/" in text or text.endswith((".yaml", ".yml"))


def load_intrinsic(path_or_name: str | os.PathLike[str]) -> IntrinsicSet:
    """Load one intrinsic file: a path, or a set name on :func:`search_path`.

    Returns its :class:`IntrinsicSet` (iterable; ``set[name]`` gives one :class:`Intrinsic`).
    """
    if isinstance(path_or_name, os.PathLike) or _is_path(str(path_or_name)):
        return _load_path(Path(path_or_name))
    path = find(str(path_or_name))
    if path is None:
        dirs = ", ".join(str(d) for d in search_path("intrinsics")) or "(none exist)"
        raise IntrinsicError(
            repr(path_or_name),
            "",
            "",
            message=f"no such intrinsic set; known: {', '.join(available()) or '(none)'}; searched {dirs}",
        )
    return _load_path(path)


def resolve_sets(hw: HardwareTraits, names: tuple[str, ...], ctx: Ctx) -> tuple[IntrinsicSet, ...]:
    """Load the sets a hardware descriptor lists (``ctx`` is its ``intrinsics`` key) and check them."""
    near = Path(hw.source).resolve().parent if hw.source and hw.source != "<string>" else None
    sets: list[IntrinsicSet] = []
    seen: dict[str, str] = {}
    for i, name in enumerate(names):
        sub = ctx.child(f"[{i}]")
        if _is_path(name):
            path = Path(name) if Path(name).is_absolute() or near is None else near / name
            if not path.is_file():
                raise sub.message(f"intrinsic set file {path} does not exist", name)
        else:
            found = find(name, near)
            if found is None:
                dirs = ", ".join(str(d) for d in search_path("intrinsics", near)) or "(none exist)"
                known = ", ".join(available(near)) or "(none)"
                hint = did_you_mean(name, available(near))
                raise sub.message(f"unknown intrinsic set {name!r}; {hint}known sets: {known}; searched {dirs}", name)
            path = found
        iset = _load_path(path)
        reason = iset.requires.why_not(hw)
        if reason is not None:
            raise sub.message(f"intrinsic set {iset.name} cannot be offered by {hw.name}: {reason}", name)
        for intr in iset.intrinsics:
            for o in intr.operands:
                if o.scope not in hw.memory_scopes and o.scope != intr.tile_scope:
                    raise sub.message(
                        f"intrinsic {intr.name} of set {iset.name} has operand {o.name} in scope {o.scope}, "
                        f"which {hw.name} does not have (its scopes: {', '.join(hw.memory_scopes)})",
                        name,
                    )
            if intr.name in seen:
                raise sub.message(
                    f"intrinsic {intr.name} is defined twice: in {seen[intr.name]} and in {iset.source}", name
                )
            seen[intr.name] = str(iset.source)
        sets.append(iset)
    return tuple(sets)
