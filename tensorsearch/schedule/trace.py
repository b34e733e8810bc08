"""Instructions and traces (paper section 4.4).

Every schedule primitive is a registered :class:`InstructionKind`; calling it on a Schedule
appends an :class:`Instruction` to ``sch.trace``: the kind, the arguments (random variables and
plain values), the random variables it returned and, for sampling instructions, the decision it
made.  A :class:`Trace` prints as Python, converts to and from plain JSON data, and replays on a
fresh Schedule with its own decisions or with new ones::

    sch = Schedule(func)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    t = sch.sample_perfect_tile(i, n=2, max_innermost_factor=16)
    sch.split(i, t)
    data = sch.trace.as_json()          # {"format": "tensorsearch.trace/1", "insts": [["get_block", ...], ...]}
    Trace.from_json(data).apply(Schedule(func))   # the same program again

Format versions: :meth:`Trace.as_json` writes version 1, an object naming its format
(:data:`TRACE_FORMAT`) around the instruction list; :meth:`Trace.from_json` also reads version 0,
the bare instruction list that tensorsearch wrote before traces carried a version, and refuses a
newer version with a ValueError saying which version it found. Argument names are part of the
format: renaming a primitive's argument makes old traces unreadable (tests/fixtures/instruction_kinds.json
pins them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .rv import RV, BlockRV, ExprRV, LoopRV, rv_from_name

TRACE_FORMAT_NAME = "tensorsearch.trace"
TRACE_VERSION = 1
TRACE_FORMAT = f"{TRACE_FORMAT_NAME}/{TRACE_VERSION}"  # the "format" of the traces as_json writes


@dataclass(frozen=True)
class InstructionKind:
    """A registered primitive: its name, whether it is pure, and how its arguments convert."""

    name: str
    pure: bool  # no effect on the program (lookups, sampling): removable when its outputs are unused
    sampling: bool  # makes a random decision, recorded in the trace
    arg_names: tuple[str, ...]
    to_json: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    from_json: dict[str, Callable[[Any], Any]] = field(default_factory=dict)


INSTRUCTION_KINDS: dict[str, InstructionKind] = {}


def register_kind(kind: InstructionKind) -> None:
    if kind.name in INSTRUCTION_KINDS:
        raise ValueError(f"instruction kind {kind.name} is registered twice")
    INSTRUCTION_KINDS[kind.name] = kind


@dataclass(frozen=True, eq=False)
class Instruction:
    """One primitive call: ``outputs = kind(**args)`` with an optional sampling ``decision``."""

    kind: InstructionKind
    args: tuple[tuple[str, Any], ...]  # (argument name, value) in the primitive's order
    outputs: tuple[RV, ...]
    decision: Any = None

    @property
    def arg_dict(self) -> dict[str, Any]:
        return dict(self.args)

    def input_rvs(self) -> list[RV]:
        found: list[RV] = []
        _collect_rvs([v for _, v in self.args], found)
        return found


def _collect_rvs(value: Any, out: list[RV]) -> None:
    if isinstance(value, RV):
        out.append(value)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect_rvs(v, out)


def map_rvs(value: Any, fn: Callable[[RV], Any]) -> Any:
    """An instruction argument with every random variable in it (inside lists and tuples too)
    replaced by ``fn(rv)``."""
    if isinstance(value, RV):
        return fn(value)
    if isinstance(value, list):
        return [map_rvs(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(map_rvs(v, fn) for v in value)
    return value


class _Namer:
    """Names random variables b0, l1, v2, ... in order of first appearance."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def __call__(self, rv: RV) -> str:
        name = self.names.get(id(rv))
        if name is None:
            name = f"{rv.prefix}{len(self.names)}"
            self.names[id(rv)] = name
        return name


def _json_value(value: Any, kind: InstructionKind, arg: str, namer: _Namer) -> Any:
    if arg in kind.to_json:
        value = kind.to_json[arg](value)
    return _plain(value, namer)


def _plain(value: Any, namer: _Namer) -> Any:
    if isinstance(value, RV):
        return {"rv": namer(value)}
    if isinstance(value, list | tuple):
        return [_plain(v, namer) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v, namer) for k, v in sorted(value.items())}
    raise TypeError(f"cannot write {type(value).__name__} {value!r} into a trace")


def _unplain(value: Any, rvs: dict[str, RV]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"rv"}:
            name = value["rv"]
            if name not in rvs:
                raise ValueError(f"trace uses random variable {name} before any instruction defines it")
            return rvs[name]
        return {k: _unplain(v, rvs) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplain(v, rvs) for v in value]
    return value


class ScheduleLike(Protocol):
    """What a trace is replayed on (a :class:`~.schedule.Schedule`): each instruction kind is the
    method of the same name, and the calls are recorded in its own ``trace``."""

    trace: Trace


class Trace:
    """An ordered list of instructions with their decisions."""

    def __init__(self, insts: list[Instruction] | None = None) -> None:
        self.insts: list[Instruction] = list(insts or [])

    def __len__(self) -> int:
        return len(self.insts)

    def __iter__(self):
        return iter(self.insts)

    def append(self, inst: Instruction) -> None:
        self.insts.append(inst)

    def copy(self) -> Trace:
        return Trace(self.insts)

    @property
    def decisions(self) -> dict[Instruction, Any]:
        return {inst: inst.decision for inst in self.insts if inst.kind.sampling}

    def with_decision(self, inst: Instruction, decision: Any) -> Trace:
        """A copy of the trace in which the sampling instruction ``inst`` decides ``decision``."""
        if not inst.kind.sampling:
            raise ValueError(f"instruction {inst.kind.name} is not a sampling instruction and has no decision")
        if inst not in self.insts:
            raise ValueError(f"instruction {inst.kind.name} is not in this trace")
        return Trace([replace(i, decision=decision) if i is inst else i for i in self.insts])

    # --- serialization ------------------------------------------------------------------
    def as_json(self) -> dict[str, Any]:
        """Plain JSON data, ``{"format": TRACE_FORMAT, "insts": [...]}`` with one
        ``[kind, {arg: value}, [outputs], decision]`` list per instruction.

        Random variables are ``{"rv": "l3"}`` inside arguments and plain names in outputs.
        """
        namer = _Namer()
        out = []
        for inst in self.insts:
            args = {name: _json_value(value, inst.kind, name, namer) for name, value in inst.args}
            outputs = [namer(rv) for rv in inst.outputs]
            out.append([inst.kind.name, args, outputs, _plain(inst.decision, namer)])
        return {"format": TRACE_FORMAT, "insts": out}

    def as_json_text(self) -> str:
        """Deterministic JSON text (same trace, same bytes)."""
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(data: dict[str, Any] | list[Any] | str) -> Trace:
        """Read what :meth:`as_json` wrote (the data, or its JSON text), or a version-0 trace."""
        if isinstance(data, str):
            data = json.loads(data)
        rvs: dict[str, RV] = {}
        insts = []
        for pos, entry in enumerate(_instruction_list(data)):
            if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str)):
                raise ValueError(f"trace instruction {pos} must be [kind, args, outputs, decision], got {entry!r}")
            name, args, outputs, decision = entry
            kind = INSTRUCTION_KINDS.get(name)
            if kind is None:
                raise ValueError(f"trace instruction {pos} has unknown kind {name!r}")
            if not isinstance(args, dict):
                raise ValueError(f"trace instruction {pos} ({name}) needs an argument object, got {args!r}")
            unknown = set(args) - set(kind.arg_names)
            if unknown:
                raise ValueError(f"trace instruction {pos} ({name}) has unknown arguments {sorted(unknown)}")
            values = []
            for arg in kind.arg_names:
                if arg not in args:
                    continue
                value = _unplain(args[arg], rvs)
                if arg in kind.from_json:
                    value = kind.from_json[arg](value)
                values.append((arg, value))
            outs = []
            for out_name in outputs:
                rv = rv_from_name(out_name)
                rvs[out_name] = rv
                outs.append(rv)
            insts.append(Instruction(kind, tuple(values), tuple(outs), _unplain(decision, rvs)))
        return Trace(insts)

    def as_python(self) -> str:
        """Runnable calls on a Schedule named ``sch``, one per line."""
        namer = _Namer()
        lines = []
        for inst in self.insts:
            args = []
            for name, value in inst.args:
                if name in inst.kind.to_json:
                    value = inst.kind.to_json[name](value)
                args.append(f"{name}={_py(value, namer)}")
            if inst.kind.sampling and inst.decision is not None:
                args.append(f"decision={_py(inst.decision, namer)}")
            call = f"sch.{inst.kind.name}({', '.join(args)})"
            if not inst.outputs:
                lines.append(call)
            else:
                names = [namer(rv) for rv in inst.outputs]
                target = names[0] if len(names) == 1 and not _returns_list(inst) else ", ".join(names)
                if len(names) == 1 and _returns_list(inst):
                    target += ","
                lines.append(f"{target} = {call}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.as_python()

    # --- replay -------------------------------------------------------------------------
    def apply(
        self,
        sch: ScheduleLike,
        decision_provider: Callable[[Instruction, Any], Any] | None = None,
        remove_postproc: bool = False,
    ) -> dict[RV, RV]:
        """Replay on ``sch``; each sampling decision is the recorded one, or the provider's.

        ``decision_provider(inst, recorded)`` returns the decision to use (None samples afresh).
        Returns the map from this trace's random variables to ``sch``'s.
        """
        mapping: dict[int, RV] = {}
        result: dict[RV, RV] = {}

        def lookup(rv: RV) -> RV:
            try:
                return mapping[id(rv)]
            except KeyError:
                raise ValueError(f"trace uses random variable {rv} before any instruction defines it") from None

        for inst in self.insts:
            if remove_postproc and inst.kind.name == "enter_postproc":
                break
            kwargs = {name: map_rvs(value, lookup) for name, value in inst.args}
            if inst.kind.sampling:
                decision = inst.decision
                if decision_provider is not None:
                    decision = decision_provider(inst, decision)
                kwargs["decision"] = decision
            out = getattr(sch, inst.kind.name)(**kwargs)
            new_outputs = flatten_outputs(out)
            if len(new_outputs) != len(inst.outputs):
                raise ValueError(
                    f"replaying {inst.kind.name} gave {len(new_outputs)} random variables where the trace has {len(inst.outputs)}"
                )
            for old, new in zip(inst.outputs, new_outputs, strict=True):
                mapping[id(old)] = new
                result[old] = new
        return result

    def simplified(self, remove_postproc: bool = False) -> Trace:
        """Drop pure instructions whose outputs nothing uses (and, optionally, the postprocessing part)."""
        insts = list(self.insts)
        if remove_postproc:
            for pos, inst in enumerate(insts):
                if inst.kind.name == "enter_postproc":
                    insts = insts[:pos]
                    break
        used: set[int] = set()
        kept: list[Instruction] = []
        for inst in reversed(insts):
            if inst.kind.pure and not any(id(rv) in used for rv in inst.outputs):
                continue
            kept.append(inst)
            used.update(id(rv) for rv in inst.input_rvs())
        return Trace(kept[::-1])


def trace_version(data: Any) -> int:
    """The format version of trace JSON data: 0 for a bare instruction list, N for an object whose
    ``format`` is ``"tensorsearch.trace/N"``; ValueError for anything else."""
    if isinstance(data, list):
        return 0
    fmt = data.get("format") if isinstance(data, dict) else None
    name, _, version = fmt.rpartition("/") if isinstance(fmt, str) else ("", "", "")
    if name != TRACE_FORMAT_NAME or not version.isdigit():
        raise ValueError(
            f'a trace is an object with "format": "{TRACE_FORMAT}" (or a version-0 list of instructions), '
            f"got {_describe(data)}"
        )
    return int(version)


def _describe(data: Any) -> str:
    if isinstance(data, dict):
        return f"an object with format {data['format']!r}" if "format" in data else "an object with no format"
    return f"a JSON {type(data).__name__}"


def _instruction_list(data: Any) -> list[Any]:
    """The instructions of trace JSON data of any version this code reads."""
    version = trace_version(data)
    if version > TRACE_VERSION:
        raise ValueError(
            f"trace format {data['format']} is newer than this tensorsearch reads "
            f"(versions 0 to {TRACE_VERSION}); upgrade tensorsearch to load it"
        )
    insts = data if isinstance(data, list) else data.get("insts")
    if not isinstance(insts, list):
        raise ValueError(f'a version-{version} trace needs an "insts" list of instructions, got {insts!r:.60}')
    return insts


def _returns_list(inst: Instruction) -> bool:
    return inst.kind.name in LIST_RESULT_KINDS


# primitives that return a list of random variables even when it has one element
LIST_RESULT_KINDS = {"get_loops", "get_child_blocks", "get_producers", "get_consumers", "split", "sample_perfect_tile"}


def flatten_outputs(out: Any) -> list[RV]:
    """The random variables a primitive returned (one, a list or tuple of them, or none), in order."""
    if out is None:
        return []
    if isinstance(out, RV):
        return [out]
    if isinstance(out, list | tuple):
        return [x for x in out if isinstance(x, RV)]
    return []


def _py(value: Any, namer: _Namer) -> str:
    if isinstance(value, RV):
        return namer(value)
    if isinstance(value, list):
        return "[" + ", ".join(_py(v, namer) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_py(v, namer) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_py(v, namer)}" for k, v in sorted(value.items())) + "}"
    return repr(value)


__all__ = [
    "INSTRUCTION_KINDS",
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "BlockRV",
    "ExprRV",
    "Instruction",
    "InstructionKind",
    "LoopRV",
    "Trace",
    "register_kind",
    "trace_version",
]
