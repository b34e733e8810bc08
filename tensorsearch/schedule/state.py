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
from collections.abc import Callable
from typing import Any, TypeVar

from ..ir import Block, BlockRealize, For, PrimFunc, Var, verify
from ..ir.verify import VerifyError
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
            snapshot = self._snapshot()
            self._depth += 1
            self._pending_decision = None
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
            args_for_trace = tuple((n, _freeze_arg(call[n])) for n in arg_names)
            decision = self._pending_decision if sampling else None
            self.trace.append(Instruction(kind, args_for_trace, tuple(outputs), decision))
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


class ScheduleState:
    """The program being scheduled, its random variables, its random state and its trace."""

    def __init__(self, func: PrimFunc, seed: int = 0, check: bool = True, error_detail: str = "detail") -> None:
        if not isinstance(func, PrimFunc):
            raise TypeError(f"Schedule takes a PrimFunc, got {type(func).__name__}")
        if error_detail not in ERROR_DETAIL_LEVELS:
            raise ValueError(f"error_detail must be one of {ERROR_DETAIL_LEVELS}, got {error_detail!r}")
        if check:
            verify(func)
        self.func = func
        self.check = check
        self.error_detail = error_detail
        self.trace = Trace()
        self._symtab: dict[RV, Any] = {}
        self._rng = random.Random(seed)
        self._depth = 0
        self._pending_decision: Any = None

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
        other.trace = self.trace.copy()
        other._symtab = dict(self._symtab)
        other._rng = random.Random()
        other._rng.setstate(self._rng.getstate())
        other._depth = 0
        other._pending_decision = None
        return other

    def seed(self, seed: int) -> None:
        """Reseed the random state used by sampling primitives."""
        self._rng.seed(seed)

    def fork_seed(self) -> int:
        """A new seed drawn from this schedule's random state (for child schedules)."""
        return self._rng.randrange(1 << 31)

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
        self._symtab[rv] = name

    def _fragment(self, node: Any) -> Callable[[], str]:
        """A lazily rendered IR fragment for an error's detail."""
        from ..script import node_to_str

        return lambda: node_to_str(node)

    def _unique_block_name(self, base: str) -> str:
        """``base`` if no block has that name yet, else ``base_1``, ``base_2``, ..."""
        names = set()
        from .tree import walk_stmts

        for loc in walk_stmts(self.func.body):
            if isinstance(loc.node, Block):
                names.add(loc.node.name)
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
