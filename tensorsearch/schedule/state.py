"""The state every primitive works on, and the decorator that makes a method a primitive.

A primitive is a method decorated with :func:`primitive`.  The decorator registers its
instruction kind, snapshots the schedule, runs the method, and then either records the
instruction in the trace or, when the method raised, restores the snapshot so that a failed
primitive leaves ``sch.func``, the random variables and the trace exactly as they were.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from ..arith.verify import VerifyError, verify
from ..ir import Block, BlockRealize, For, PrimFunc, Var
from ..target import Hardware
from .errors import BlockNotFound, InvalidArgument, LoopNotFound, ScheduleError
from .rv import RV, BlockRV, ExprRV, LoopRV
from .trace import Instruction, InstructionKind, Trace, register_kind
from .tree import Located, find_block, find_loop

F = TypeVar("F", bound=Callable[..., Any])

ERROR_DETAIL_LEVELS = ("detail", "fast", "none")


def primitive(
    *,
    pure: bool = False,
    sampling: bool = False,
    to_json: dict[str, Callable[[Any], Any]] | None = None,
    from_json: dict[str, Callable[[Any], Any]] | None = None,
) -> Callable[[F], F]:
    """Make a ScheduleState method a traced, transactional schedule primitive.

    ``pure``: the primitive does not change the program (a lookup or a sampling step).
    ``sampling``: it takes a ``decision`` argument and stores the decision it made with
    ``self._decide(value)``.  ``to_json``/``from_json`` convert arguments that are not plain
    data (an index map, say) for the trace.
    """

    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)
        arg_names = tuple(n for n in sig.parameters if n not in ("self", "decision"))
        kind = InstructionKind(fn.__name__, pure, sampling, arg_names, dict(to_json or {}), dict(from_json or {}))
        register_kind(kind)

        @functools.wraps(fn)
        def method(self: ScheduleState, *args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError as err:
                raise InvalidArgument(f"{fn.__name__}: {err}") from None
            bound.apply_defaults()
            call = dict(bound.arguments)
            del call["self"]
            if self._depth:  # called from inside another primitive: no snapshot, no trace
                return fn(self, **call)
            key = _cache_key(self, kind, call)
            if key is not None:
                hit = PRIMITIVE_CACHE.get(key)
                if hit is not None and hit.func_before is self.func:
                    PRIMITIVE_CACHE.move_to_end(key)
                    return self._replay_cached(kind, arg_names, call, hit)
            snapshot = self._snapshot()
            self._depth += 1
            self._pending_decision = None
            self._rename_log = []
            self._recorded_args = {}
            try:
                result = fn(self, **call)
                if self.check:
                    try:
                        verify(self.func)
                    except VerifyError as err:
                        raise RuntimeError(
                            f"schedule primitive {fn.__name__} produced an ill-formed program ({err}); this is a bug"
                        ) from err
            except ScheduleError as err:
                self._restore(snapshot)
                err.primitive = fn.__name__
                err.args = (err.render(self.error_detail),)
                raise
            except BaseException:
                self._restore(snapshot)
                raise
            finally:
                self._depth -= 1
            outputs = _output_rvs(result)
            recorded = {**call, **self._recorded_args}
            args_for_trace = tuple((n, _freeze_arg(recorded[n])) for n in arg_names)
            decision = self._pending_decision if sampling else None
            self.trace.append(Instruction(kind, args_for_trace, tuple(outputs), decision))
            if key is not None:
                _remember(self, key, snapshot, result, decision, sampling)
            return result

        method.instruction_kind = kind  # type: ignore[attr-defined]
        return method  # type: ignore[return-value]

    return wrap


def _freeze_arg(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_freeze_arg(v) for v in value]
    return value


def _output_rvs(result: Any) -> list[RV]:
    if result is None:
        return []
    if isinstance(result, RV):
        return [result]
    if isinstance(result, list | tuple):
        return [r for r in result if isinstance(r, RV)]
    return []


# --- the primitive cache ----------------------------------------------------------------
#
# A primitive is a function of the program, its arguments (random variables resolved to what
# they stand for: a block name, a loop variable, an integer), its decision and the ``check``
# flag. The IR is immutable, so a successful call is remembered by the identity of the program
# it started from (the entry keeps that program alive, so the identity is never reused): a
# second schedule reaching the same program object with the same arguments gets the same
# resulting program object without running the primitive again. Replaying traces that share a
# prefix (a design-space trace's deterministic part, a mutant and its parent up to the mutated
# decision, a sample whose first decisions repeat) then runs the prefix once. Refusals are not
# remembered (they run again and raise as before), nor are sampling calls that draw from the
# random state (decision None), nor calls with arguments other than plain data and random
# variables.

# 2048 calls hold a design space's deterministic prefixes and the last few dozen candidates'
# steps (the bench's search kept every hit it had with 16384); more only keeps dead programs
# alive, and a larger heap makes each full garbage collection slower
_CACHE_SIZE = 2048
PRIMITIVE_CACHE: OrderedDict[tuple, _Remembered] = OrderedDict()
_PLAIN = (str, int, type(None))
# primitives whose result depends on more than the program and the arguments: tensorize looks a
# named intrinsic up in the schedule's hardware
_UNCACHED_KINDS = frozenset({"tensorize"})


class _Remembered:
    """What a successful primitive call did: the programs before and after, the block renames
    it applied to existing random variables, its result (random variables as templates) and its
    decision."""

    __slots__ = ("decision", "func_after", "func_before", "renames", "result")

    def __init__(self, func_before: Any, func_after: Any, renames: dict, result: Any, decision: Any) -> None:
        self.func_before = func_before
        self.func_after = func_after
        self.renames = renames
        self.result = result
        self.decision = decision


def set_primitive_cache_size(size: int) -> None:
    """Keep at most ``size`` remembered primitive calls (0 turns the cache off and empties it)."""
    global _CACHE_SIZE
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"the primitive cache size must be a non-negative integer, got {size!r}")
    _CACHE_SIZE = size
    while len(PRIMITIVE_CACHE) > size:
        PRIMITIVE_CACHE.popitem(last=False)


def clear_primitive_cache() -> None:
    """Forget every remembered primitive call."""
    PRIMITIVE_CACHE.clear()


class _Unkeyable(Exception):
    """An argument the cache cannot key on (the call then simply runs)."""


def _key_of(state: ScheduleState, value: Any) -> Any:
    """A hashable stand-in for an argument; random variables become what they stand for."""
    if isinstance(value, RV):
        target = state._symtab.get(value, _Unkeyable)
        if target is _Unkeyable:
            raise _Unkeyable
        return (type(value), target)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", repr(value))  # repr tells -0.0 from 0.0
    if isinstance(value, _PLAIN):
        return (type(value), value)
    if isinstance(value, list | tuple):
        return (type(value), tuple(_key_of(state, v) for v in value))
    raise _Unkeyable


def _cache_key(state: ScheduleState, kind: InstructionKind, call: dict[str, Any]) -> tuple | None:
    """The cache key of a primitive call, or None when it must run (cache off, a fresh sample,
    an argument that is not plain data)."""
    if not _CACHE_SIZE or kind.name in _UNCACHED_KINDS or state._postproc:
        return None
    if kind.sampling and call.get("decision") is None:
        return None
    try:
        args = tuple((name, _key_of(state, value)) for name, value in call.items())
    except _Unkeyable:
        return None
    return (id(state.func), kind.name, args, state.check)


def _template(state: ScheduleState, value: Any) -> Any:
    """The result with each random variable replaced by (its class, what it stands for)."""
    if isinstance(value, RV):
        return (_RVSlot, type(value), state._symtab[value])
    if isinstance(value, list | tuple):
        return type(value)(_template(state, v) for v in value)
    return value


class _RVSlot:
    """Marks a random variable's place in a remembered result."""


def _renames(before: dict[RV, Any], after: dict[RV, Any]) -> dict[tuple, Any] | None:
    """``{(rv class, old value): new value}`` for the random variables the call re-pointed, or
    None when they do not follow one rule per value (then the call is not remembered)."""
    rules: dict[tuple, Any] = {}
    changed = [rv for rv, old in before.items() if after[rv] is not old]  # an unchanged value is the same object
    for rv in changed:
        old, new = before[rv], after[rv]
        if new != old and rules.setdefault((type(rv), old), new) != new:
            return None
    if not rules:
        return rules
    for rv, old in before.items():
        rule = rules.get((type(rv), old), _Unkeyable)
        if rule is not _Unkeyable and after[rv] != rule:
            return None
    return rules


def _remember(
    state: ScheduleState, key: tuple, snapshot: tuple, result: Any, decision: Any, kind_sampling: bool
) -> None:
    """Store a successful call (not when it re-pointed random variables irregularly or drew
    from the random state)."""
    func_before, symtab_before, rng_state, _ = snapshot
    if any(rv in symtab_before for rv in _output_rvs(result)):
        return  # it handed back a random variable that existed before: a replay could not
    # random variables change what they stand for only through _rename_block (new ones are made
    # by _new_*_rv), so without a logged rename there is nothing to compare
    renames = _renames(symtab_before, state._symtab) if state._rename_log else {}
    if renames is None or (kind_sampling and state._rng.getstate() != rng_state):
        return  # only sampling primitives draw from the random state
    decision = list(decision) if isinstance(decision, list) else decision
    PRIMITIVE_CACHE[key] = _Remembered(func_before, state.func, renames, _template(state, result), decision)
    if len(PRIMITIVE_CACHE) > _CACHE_SIZE:
        PRIMITIVE_CACHE.popitem(last=False)


class ScheduleState:
    """The program being scheduled, its random variables, its random state and its trace."""

    def __init__(
        self,
        func: PrimFunc,
        seed: int = 0,
        check: bool = True,
        error_detail: str = "detail",
        hardware: Hardware | None = None,
    ) -> None:
        if not isinstance(func, PrimFunc):
            raise TypeError(f"Schedule takes a PrimFunc, got {type(func).__name__}")
        if error_detail not in ERROR_DETAIL_LEVELS:
            raise ValueError(f"error_detail must be one of {ERROR_DETAIL_LEVELS}, got {error_detail!r}")
        if check:
            verify(func)
        if hardware is not None and not isinstance(hardware, Hardware):
            raise TypeError(
                f"Schedule's hardware must be a Hardware (tensorsearch.target.load), got {type(hardware).__name__}"
            )
        self.func = func
        self.check = check
        self.error_detail = error_detail
        self.hardware = hardware  # the intrinsics ``tensorize`` may name come from it
        self.trace = Trace()
        self._symtab: dict[RV, Any] = {}
        self._rng = random.Random(seed)
        self._depth = 0
        self._pending_decision: Any = None
        self._postproc = False  # after enter_postproc: calls are not remembered
        self._rename_log: list[RV] = []  # BlockRVs renamed during the current primitive call
        self._recorded_args: dict[str, Any] = {}  # arguments the current primitive records as resolved

    # --- transactions -------------------------------------------------------------------
    def _snapshot(self) -> tuple[Any, ...]:
        return self.func, dict(self._symtab), self._rng.getstate(), len(self.trace)

    def _restore(self, snapshot: tuple[Any, ...]) -> None:
        self.func, symtab, rng_state, trace_len = snapshot
        self._symtab = symtab
        self._rng.setstate(rng_state)
        del self.trace.insts[trace_len:]

    def copy(self) -> Any:
        """An independent schedule in the same state (the IR is shared: it is immutable)."""
        other = object.__new__(type(self))
        other.func = self.func
        other.check = self.check
        other.error_detail = self.error_detail
        other.hardware = self.hardware
        other.trace = self.trace.copy()
        other._symtab = dict(self._symtab)
        other._rng = random.Random()
        other._rng.setstate(self._rng.getstate())
        other._depth = 0
        other._pending_decision = None
        other._recorded_args = {}
        other._rename_log = []
        other._postproc = self._postproc
        return other

    def _record_arg(self, name: str, value: Any) -> None:
        """Record ``value`` in the trace for argument ``name`` of the running primitive (a name the
        primitive resolved, recorded as what it resolved to)."""
        self._recorded_args[name] = value

    def seed(self, seed: int) -> None:
        """Reseed the random state used by sampling primitives."""
        self._rng.seed(seed)

    def fork_seed(self) -> int:
        """A new seed drawn from this schedule's random state (for child schedules)."""
        return self._rng.randrange(1 << 31)

    def _replay_cached(self, kind: InstructionKind, arg_names: tuple[str, ...], call: dict, hit: _Remembered) -> Any:
        """Apply a remembered primitive call: its program, renames, fresh random variables for
        its result, and its instruction in the trace."""
        self.func = hit.func_after
        if hit.renames:
            for rv, value in list(self._symtab.items()):
                new = hit.renames.get((type(rv), value), _Unkeyable)
                if new is not _Unkeyable:
                    self._symtab[rv] = new
        result = self._fill(hit.result)
        decision = list(hit.decision) if isinstance(hit.decision, list) else hit.decision
        args_for_trace = tuple((n, _freeze_arg(call[n])) for n in arg_names)
        self.trace.append(Instruction(kind, args_for_trace, tuple(_output_rvs(result)), decision))
        return result

    def _fill(self, template: Any) -> Any:
        """A remembered result with a new random variable in each slot."""
        if isinstance(template, tuple) and len(template) == 3 and template[0] is _RVSlot:
            rv = template[1]()
            self._symtab[rv] = template[2]
            return rv
        if isinstance(template, list | tuple):
            return type(template)(self._fill(v) for v in template)
        return template

    # --- random variables ---------------------------------------------------------------
    def get(self, rv: RV | int) -> Any:
        """The Block, For or integer a random variable stands for now."""
        if isinstance(rv, BlockRV):
            return self._block(rv).node
        if isinstance(rv, LoopRV):
            return self._loop(rv).node
        if isinstance(rv, ExprRV):
            return self._value(rv)
        if isinstance(rv, int):
            return rv
        raise InvalidArgument(f"cannot look up {rv!r}: expected a BlockRV, LoopRV or ExprRV")

    def _new_block_rv(self, name: str) -> BlockRV:
        rv = BlockRV()
        self._symtab[rv] = name
        return rv

    def _new_loop_rv(self, var: Var) -> LoopRV:
        rv = LoopRV()
        self._symtab[rv] = var
        return rv

    def _new_expr_rv(self, value: int) -> ExprRV:
        rv = ExprRV()
        self._symtab[rv] = int(value)
        return rv

    def _block(self, rv: BlockRV) -> Located:
        """The located Block of a BlockRV (its path ends BlockRealize, Block)."""
        if not isinstance(rv, BlockRV):
            raise InvalidArgument(f"expected a BlockRV, got {_describe(rv)}")
        name = self._symtab.get(rv)
        if name is None:
            raise BlockNotFound("the BlockRV does not belong to this schedule")
        loc = find_block(self.func, name)
        if loc is None:
            raise BlockNotFound(f"block {name} no longer exists in the program", block=name)
        return loc

    def _block_realize(self, rv: BlockRV) -> tuple[BlockRealize, Located]:
        loc = self._block(rv)
        realize = loc.parent
        assert isinstance(realize, BlockRealize)
        return realize, loc

    def _loop(self, rv: LoopRV) -> Located:
        if not isinstance(rv, LoopRV):
            raise InvalidArgument(f"expected a LoopRV, got {_describe(rv)}")
        var = self._symtab.get(rv)
        if var is None:
            raise LoopNotFound("the LoopRV does not belong to this schedule")
        loc = find_loop(self.func, var)
        if loc is None and var.name in ("compute_root", "compute_inline"):
            raise LoopNotFound(
                f"this LoopRV is sample_compute_location's {var.name} marker, not a loop; "
                "only compute_at and reverse_compute_at accept it",
                loop=var.name,
            )
        if loc is None:
            raise LoopNotFound(
                f"loop {var.name} no longer exists in the program (an earlier primitive split, fused or removed it)",
                loop=var.name,
            )
        return loc

    def _value(self, value: ExprRV | int) -> int:
        if isinstance(value, ExprRV):
            if value not in self._symtab:
                raise InvalidArgument("the ExprRV does not belong to this schedule")
            return self._symtab[value]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"expected an integer or an ExprRV, got {_describe(value)}")
        return value

    def _decide(self, decision: Any) -> None:
        """Record the decision a sampling primitive made."""
        self._pending_decision = decision

    def _rename_block(self, rv: BlockRV, name: str) -> None:
        self._rename_log.append(rv)  # the primitive cache then looks for the renames it must remember
        self._symtab[rv] = name

    def _fragment(self, node: Any) -> Callable[[], str]:
        """A lazily rendered IR fragment for an error's detail."""
        from ..script import node_to_str

        return lambda: node_to_str(node)

    def _unique_block_name(self, base: str) -> str:
        """``base`` if no block has that name yet, else ``base_1``, ``base_2``, ..."""
        from .tree import walk_nodes

        names = {node.name for node in walk_nodes(self.func.body) if isinstance(node, Block)}
        if base not in names:
            return base
        n = 1
        while f"{base}_{n}" in names:
            n += 1
        return f"{base}_{n}"

    def show(self) -> str:
        """The current program as script text."""
        return self.func.script()


def _describe(value: Any) -> str:
    if isinstance(value, RV):
        return type(value).__name__
    if isinstance(value, Block | For):
        return f"an IR {type(value).__name__} (pass the random variable from get_block/get_loops instead)"
    return f"{type(value).__name__} {value!r}"
