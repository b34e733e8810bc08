"""Verification of tensor intrinsics: each implementation is run alone against its own semantics.

::

    from tensorsearch.runtime.verify import verify_intrinsic
    verdict = verify_intrinsic(hw.intrinsic("avx2_dot_8x2_i16i16i32"), hw)   # or IntrinsicVerifyError
    print(verdict)    # .../avx2-pmaddwd.yaml: avx2_dot_8x2_i16i16i32 verified: 8 trials on this CPU (znver3)

An intrinsic file says twice what an instruction computes: as semantics (one statement that
:func:`tensorsearch.interpret` evaluates) and as an implementation (an LLVM call built from
operand loads). Nothing checks statically that the two agree: an implementation whose call swaps
two arguments, or semantics that read an operand transposed, load without a word. So the first
time an intrinsic is used -- :func:`tensorsearch.build` compiles a program that calls it, or
``tune`` starts for a hardware that offers it -- it is verified:

* **The program**: ``desc_func()`` (the semantics as a one-block PrimFunc) is blockized at its
  outermost loop and tensorized with the intrinsic itself, so the program's only computation is
  the implementation (built by the same code as any tensorized program's).
* **Where it runs**: compiled for the hardware given when that runs here; else for this CPU
  (:func:`tensorsearch.target.native`) when it meets the intrinsic set's ``requires``; else, for
  an aarch64 set, for that hardware and run under ``qemu-aarch64`` (:mod:`.cross`) when
  ``qemu-aarch64`` and ``aarch64-linux-gnu-gcc`` are installed. Otherwise nothing runs: an
  :class:`~tensorsearch.target.IntrinsicNotVerified` warning, once per intrinsic per process,
  says what was not verified and why ("this CPU (znver3) lacks +avx512vnni"); so does a qemu run
  that fails for the tools' own reasons (not cached). CUDA intrinsics are never run (tensorsearch
  generates CUDA C but has no GPU runner), and say so.
* **Units on tile registers** (AMX): an instruction such as a tile load computes nothing to
  compare alone, so each member of a unit is verified through its unit: the unit's compute
  intrinsic's semantics, tensorized with the unit (its loads, zero, compute and store), run as
  above; the verdict names the compute intrinsic.
* **Inputs** (:func:`random_inputs`, seeded, :data:`TRIALS` trials, every operand random,
  the accumulator and the output's old contents included): integers over their type's full
  range, one trial of only edge values (min, min + 1, -1, 0, 1, max // 2, max // 2 + 1,
  max - 1, max); floats random normal, one trial of magnitudes spread over 2^-6 .. 2^6
  (cancellation) and one of small integers (-4 .. 4), where every partial result is exact.
* **Comparison**: integers and bools exactly (both sides wrap as two's complement). Floats within
  ``2 * n * u * M``, where ``M`` bounds the sum of the absolute values of the terms of each lane
  (the semantics evaluated on ``|inputs|`` with ``-`` read as ``+``), ``u`` is the unit roundoff
  of the narrowest float type the semantics computes in, and ``n`` counts the roundings per lane
  (its float operations times the reduction's length, plus one): each side's error is at most
  about ``n * u * M`` whatever the summation order or FMA contraction (the standard bound on
  recursive summation), so a correct implementation always passes, while a transposed or
  swapped operand is off by a sizeable fraction of ``M``. In the small-integer trial nothing
  rounds, so floats must match exactly there. An instruction rounding more finely than its
  semantics says passes; one rounding more coarsely is refused.
* **Verdict**: a mismatch is :class:`IntrinsicVerifyError` (an
  :class:`~tensorsearch.target.IntrinsicError`, so a ``ValueError``), one line naming the file,
  the intrinsic, the first differing lane and the inputs' seed: ``FILE: intrinsic NAME computes
  something other than its semantics: lane 3 of C is 17, the semantics give 25 (inputs seed 3)``;
  ``random_inputs(intr, 3)`` gives those inputs again. An implementation that does not compile
  is refused the same way.
* **Cache**: the outcome (success or failure) is kept in memory and on disk, keyed by the
  intrinsic's digest, the SHA-256 of its file's content, the target (triple, CPU, features), how
  it ran, the trials and seed, the LLVM version and :data:`FORMAT`; a cached failure still
  raises. The directory is ``$TENSORSEARCH_VERIFY_CACHE``, else
  ``$XDG_CACHE_HOME/tensorsearch/verified``, else ``~/.cache/tensorsearch/verified``;
  ``TENSORSEARCH_VERIFY_CACHE=off`` keeps nothing on disk, and a directory that cannot be written
  is skipped silently.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..interpreter import interpret
from ..ir import Add, BufferStore, Call, Cast, DataType, FloatImm, Max, Min, Mul, PrimExpr, PrimFunc, Sub
from ..ir.functor import Mutator, post_order_visit
from ..schedule import Schedule
from ..target import Caches, Hardware, arch_of, host_triple, native
from ..target.intrinsics import (
    CudaImpl,
    Intrinsic,
    IntrinsicError,
    IntrinsicSet,
    LLVMImpl,
    LLVMTileCall,
    Unit,
    cuda_unverified_reason,
    load_intrinsic,
    loaded_with_call,
    shipped_intrinsics,
    warn_not_verified,
)
from .cross import CrossRunError, aarch64_tools_available, run_aarch64
from .memory import aligned_copy
from .native import build_native

__all__ = [
    "ENV_CACHE",
    "FORMAT",
    "TRIALS",
    "IntrinsicVerifyError",
    "Verdict",
    "cache_dir",
    "intrinsics_called",
    "random_inputs",
    "verify_calls",
    "verify_hardware",
    "verify_intrinsic",
]

FORMAT = 1  # bump when what "verified" means changes: every cached verdict is then redone
TRIALS = 8
ENV_CACHE = "TENSORSEARCH_VERIFY_CACHE"


class IntrinsicVerifyError(IntrinsicError):
    """An intrinsic's implementation computes something other than its semantics (or does not
    compile): ``FILE: intrinsic NAME ...``. ``cached``: the verdict came from the cache."""

    def __init__(self, source: str, intrinsic: str, detail: str, cached: bool = False) -> None:
        self.intrinsic = intrinsic
        self.detail = detail
        self.cached = cached
        super().__init__(source, "", "", message=f"intrinsic {intrinsic} {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (IntrinsicVerifyError, (self.source, self.intrinsic, self.detail, self.cached))


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`verify_intrinsic` that is not an error: verified (``detail`` says how
    it ran) or not verified (``detail`` says why not)."""

    intrinsic: str
    source: str
    verified: bool
    detail: str
    cached: bool = False

    def __str__(self) -> str:
        if self.verified:
            return f"{self.source}: {self.intrinsic} verified: {self.detail}{' (cached)' if self.cached else ''}"
        return f"{self.source}: {self.intrinsic} not verified: {self.detail}"


# ---------------------------------------------------------------------------------------------
# where it runs


@dataclass(frozen=True)
class _Plan:
    target: Hardware | None  # None: it cannot run here
    how: str = ""  # "jit" (on this CPU) | "qemu" (qemu-aarch64)
    why_not: str = ""  # when target is None


def _where(intr: Intrinsic) -> str:
    return intr.source or f"intrinsic set {intr.set_name}"


def _requirements_target(intr: Intrinsic, arch: str) -> Hardware:
    """A minimal descriptor that meets the intrinsic set's requirements on ``arch`` (qemu runs)."""
    return Hardware(
        name=f"{intr.set_name}-verify",
        kind="cpu",
        triple=f"{arch}-unknown-linux-gnu",
        cpu="generic",
        features=intr.requires.features,
        cores=1,
        vector_bits=128,
        caches=Caches(32 * 1024, 1024 * 1024, 8 * 1024 * 1024),
    )


def _plan(intr: Intrinsic, hw: Hardware | None) -> _Plan:
    if isinstance(intr.impl, CudaImpl):
        return _Plan(None, why_not=cuda_unverified_reason())
    if hw is not None and hw.runs_here and intr.requires.why_not(hw) is None:
        return _Plan(hw, "jit")
    here = native()
    if intr.requires.why_not(here) is None:
        return _Plan(here, "jit")
    arch = arch_of(host_triple())
    arches = intr.requires.arch
    if not arches or arch in arches:
        missing = [f for f in intr.requires.features if not here.has_feature(f)]
        return _Plan(None, why_not=f"this CPU ({here.cpu}) lacks {', '.join(missing) or 'what the set requires'}")
    if "aarch64" in arches:
        reason = aarch64_tools_available()
        if reason is not None:
            return _Plan(None, why_not=f"this machine ({arch}) runs aarch64 code only under qemu, and {reason}")
        if hw is not None and arch_of(hw.triple) == "aarch64" and intr.requires.why_not(hw) is None:
            return _Plan(hw, "qemu")
        return _Plan(_requirements_target(intr, "aarch64"), "qemu")
    return _Plan(None, why_not=f"this machine ({arch}) cannot run {' or '.join(arches)} code")


# ---------------------------------------------------------------------------------------------
# the cache


def cache_dir() -> Path | None:
    """Where verdicts are kept on disk (module doc); None: nowhere (``TENSORSEARCH_VERIFY_CACHE=off``)."""
    env = os.environ.get(ENV_CACHE, "").strip()
    if env.lower() == "off":
        return None
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tensorsearch" / "verified"


@functools.lru_cache(maxsize=256)
def _content_hash(path: str, mtime_ns: int, size: int) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return ""


def _file_hash(source: str | None) -> str:
    if not source:
        return ""
    try:
        st = os.stat(source)
    except OSError:
        return ""
    return _content_hash(source, st.st_mtime_ns, st.st_size)


@functools.cache
def _llvm_version() -> str:
    import llvmlite.binding as llvm

    return ".".join(map(str, llvm.llvm_version_info))


def _key(intr: Intrinsic, plan: _Plan, trials: int, seed: int) -> str:
    t = plan.target
    assert t is not None
    parts = {
        "format": FORMAT,
        "llvm": _llvm_version(),
        "intrinsic": intr.name,
        "digest": intr.digest,
        "file": _file_hash(intr.source),
        "triple": t.triple,
        "cpu": t.cpu,
        "features": t.feature_string,
        "how": plan.how,
        "trials": trials,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _read_disk(key: str) -> dict[str, Any] | None:
    d = cache_dir()
    if d is None:
        return None
    try:
        rec = json.loads((d / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("key") != key:
        return None
    if not isinstance(rec.get("ok"), bool) or not isinstance(rec.get("detail"), str):
        return None
    return rec


def _write_disk(key: str, rec: dict[str, Any]) -> None:
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(rec, indent=1))
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        pass  # an unwritable cache only costs a verification in the next process


_MEMORY: dict[str, dict[str, Any]] = {}
_LOCK = threading.RLock()


# ---------------------------------------------------------------------------------------------
# inputs


def _values(dtype: DataType, shape: tuple[int, ...], rng: np.random.Generator, kind: int) -> np.ndarray:
    npt = dtype.numpy
    if dtype.is_bool:
        return rng.integers(0, 2, shape).astype(npt)
    if dtype.is_integer:
        lo, hi = int(dtype.min_value()), int(dtype.max_value())
        if kind == 0:
            edges = sorted({v for v in (lo, lo + 1, -1, 0, 1, hi // 2, hi // 2 + 1, hi - 1, hi) if lo <= v <= hi})
            return np.array(edges, dtype=object)[rng.integers(0, len(edges), shape)].astype(npt)
        return rng.integers(lo, hi, shape, dtype=npt, endpoint=True)
    if kind == 0:
        return rng.integers(-4, 5, shape).astype(npt)  # small integers: nothing rounds
    values = rng.standard_normal(shape)
    if kind == 1:
        values = values * np.exp2(rng.uniform(-6, 6, shape))  # spread magnitudes: cancellation
    return values.astype(npt)


def random_inputs(intr: Intrinsic, seed: int) -> list[np.ndarray]:
    """The arrays (one per operand, in operand order) of the verification trial ``seed``: seeds
    that are multiples of 8 give edge values (floats: small integers), ``seed % 8 == 1`` spread
    float magnitudes, the others uniform integers over the full range and normal floats."""
    rng = np.random.default_rng(seed)
    return [_values(o.dtype, o.shape, rng, seed % 8) for o in intr.operands]


# ---------------------------------------------------------------------------------------------
# comparison of floats

_UNIT_ROUNDOFF = {("float", 16): 2.0**-11, ("bfloat", 16): 2.0**-8, ("float", 32): 2.0**-24, ("float", 64): 2.0**-53}
_TINY = {("float", 16): 2.0**-24, ("bfloat", 16): 2.0**-133, ("float", 32): 2.0**-149, ("float", 64): 2.0**-1074}


def _fabs(e: PrimExpr) -> PrimExpr:
    return Call(e.dtype, "fabs", (e,))


def _magnitude(e: PrimExpr) -> PrimExpr:
    """An expression bounding ``|e|`` by the sum of the absolute values of its terms (floats only)."""
    if not e.dtype.is_float:
        return e
    if isinstance(e, FloatImm):
        return FloatImm(e.dtype, abs(e.value))
    if isinstance(e, Cast):
        return Cast(e.dtype, _magnitude(e.value)) if e.value.dtype.is_float else _fabs(e)
    if isinstance(e, Add | Sub):
        return Add(_magnitude(e.a), _magnitude(e.b))
    if isinstance(e, Mul):
        return Mul(_magnitude(e.a), _magnitude(e.b))
    if isinstance(e, Min | Max):
        return Max(_magnitude(e.a), _magnitude(e.b))
    return _fabs(e)


class _Magnitude(Mutator):
    def visit_BufferStore(self, op: BufferStore) -> BufferStore:
        if not op.value.dtype.is_float:
            return op
        return BufferStore(op.buffer, _magnitude(op.value), op.indices)


@dataclass(frozen=True)
class _FloatCheck:
    func: PrimFunc  # the magnitude program
    rounds: int  # n: roundings per lane
    unit: float  # u: unit roundoff of the narrowest type computed in
    exact_below: float  # small-integer trials: all exact when M is below this
    integral: bool  # every float constant of the semantics is an integer


@functools.lru_cache(maxsize=64)
def _float_check(intr: Intrinsic) -> _FloatCheck:
    value = intr.desc_block().body
    ops = 0
    units = [_UNIT_ROUNDOFF.get((intr.output.dtype.code, intr.output.dtype.bits), 2.0**-8)]
    integral = True

    def visit(n: Any) -> None:
        nonlocal ops, integral
        if isinstance(n, Add | Sub | Mul | Min | Max | Cast) and n.dtype.is_float:
            ops += 1
            units.append(_UNIT_ROUNDOFF.get((n.dtype.code, n.dtype.bits), 2.0**-8))
        if isinstance(n, FloatImm) and float(n.value) != int(n.value):
            integral = False

    post_order_visit(value, visit)
    length = 1
    for it in intr.reduce_iterators:
        length *= it.extent
    unit = max(units)
    return _FloatCheck(_Magnitude().visit(intr.desc_func()), (ops + 1) * length + 1, unit, 1 / unit, integral)


def _lane(shape: tuple[int, ...], index: tuple[int, ...]) -> str:
    if len(shape) == 1:
        return f"lane {index[0]}"
    return f"element [{', '.join(map(str, index))}]"


def _show(x: Any) -> str:
    return repr(x.item()) if hasattr(x, "item") else repr(x)


def _difference(
    intr: Intrinsic, inputs: list[np.ndarray], want: list[np.ndarray], got: list[np.ndarray], seed: int
) -> str | None:
    """The first lane where ``got`` differs from ``want`` beyond rounding, in words; None when none."""
    check: _FloatCheck | None = None
    mag: list[np.ndarray] | None = None
    for k, (op, w, g) in enumerate(zip(intr.operands, want, got, strict=True)):
        if op.dtype.is_float:
            if check is None:
                check = _float_check(intr)
                absolute = [
                    np.abs(a) if o.dtype.is_float else a.copy() for a, o in zip(inputs, intr.operands, strict=True)
                ]
                mag = interpret(check.func, *absolute)
            assert mag is not None
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            m = mag[k].astype(np.float64)
            key = (op.dtype.code, op.dtype.bits)
            tol = 2 * check.rounds * check.unit * m + 2 * _TINY.get(key, 0.0)
            if seed % 8 == 0 and check.integral and np.all(m < check.exact_below):
                tol = np.zeros_like(m)  # small integers: nothing rounds
            same = (w64 == g64) | (np.isnan(w64) & np.isnan(g64)) | (np.abs(w64 - g64) <= tol)
        else:
            same = w == g
            tol = None
        if not np.all(same):
            index = tuple(int(i) for i in np.argwhere(~same)[0])
            text = f"{_lane(op.shape, index)} of {op.name} is {_show(g[index])}, the semantics give {_show(w[index])}"
            if tol is not None and tol[index] > 0:
                text += f" (more than the rounding tolerance {float(tol[index]):.3g} apart)"
            return text
    return None


# ---------------------------------------------------------------------------------------------
# running


def intrinsic_program(intr: Intrinsic, target: Hardware) -> PrimFunc:
    """The semantics tensorized with the intrinsic itself: its only computation is the implementation
    (a unit's compute intrinsic: with the unit, which ``target`` offers)."""
    sch = Schedule(intr.desc_func(), hardware=target)
    outer = sch.get_loops(sch.get_block(intr.name))[0]
    sch.tensorize(outer, intr.units[0] if isinstance(intr.impl, LLVMTileCall) else intr)
    return sch.func


def _unit_of(intr: Intrinsic, hw: Hardware | None) -> tuple[IntrinsicSet, Unit] | None:
    """The set and the first unit a unit member ``intr`` belongs to (from ``hw``, else its file)."""
    sets = [s for s in (hw.intrinsic_sets if hw is not None else ()) if s.name == intr.set_name]
    if not sets and intr.source:
        sets = [load_intrinsic(intr.source)]
    for iset in sets:
        for unit in iset.units:
            if intr.name in unit.members:
                return iset, unit
    return None


def offering(target: Hardware, iset: IntrinsicSet) -> Hardware:
    """``target``, offering ``iset`` too (its unit is looked up there when the program is built)."""
    if any(s.name == iset.name for s in target.intrinsic_sets):
        return target
    return dataclasses.replace(target, intrinsic_sets=(*target.intrinsic_sets, iset))


def _first_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return lines[0] if lines else type(err).__name__


def _run(intr: Intrinsic, plan: _Plan, trials: int, seed: int) -> dict[str, Any]:
    target = plan.target
    assert target is not None
    name = "verify_" + re.sub(r"[^A-Za-z0-9_]", "_", intr.name)
    try:
        mod = build_native(intrinsic_program(intr, target), target, name, jit=plan.how == "jit")
        obj = mod.object_code() if plan.how == "qemu" else None
    except (RuntimeError, ValueError) as err:  # LLVM's and the code generator's refusals
        return {"ok": False, "detail": f"does not compile for {target.name} ({target.triple}): {_first_line(err)}"}
    for t in range(trials):
        s = seed + t
        inputs = random_inputs(intr, s)
        want = interpret(intr.desc_func(), *[a.copy() for a in inputs])
        if obj is None:
            got = [aligned_copy(a, max(64, *(o.alignment for o in intr.operands))) for a in inputs]
            mod(*got)
        else:
            try:
                got = run_aarch64(obj, name, inputs)
            except CrossRunError as err:  # the tools' trouble, not the intrinsic's: not verified, not cached
                return {"ok": None, "detail": f"running it under qemu-aarch64 failed: {_first_line(err)}"}
        diff = _difference(intr, inputs, want, got, s)
        if diff is not None:
            return {"ok": False, "detail": f"computes something other than its semantics: {diff} (inputs seed {s})"}
    where = f"on this CPU ({target.cpu})" if plan.how == "jit" else f"under qemu-aarch64 ({target.cpu})"
    return {"ok": True, "detail": f"{trials} trials {where}"}


def verify_intrinsic(
    intr: Intrinsic,
    hw: Hardware | None = None,
    *,
    trials: int = TRIALS,
    seed: int = 0,
    warn: bool = True,
    stacklevel: int = 2,
) -> Verdict:
    """Run ``intr``'s implementation alone against its semantics (module doc); ``hw`` is the
    hardware it is used for (None: whatever here can run it).

    Returns a :class:`Verdict`: verified, or not verified because nothing here can run it (then,
    with ``warn``, an :class:`~tensorsearch.target.IntrinsicNotVerified` warning once per
    intrinsic per process). Raises :class:`IntrinsicVerifyError` when it computes something other
    than its semantics or does not compile; both outcomes are cached.
    """
    if isinstance(intr.impl, LLVMTileCall):  # a unit's instructions run together: verify its compute
        found = _unit_of(intr, hw)
        if found is None:
            why = "it is the instruction of no unit, and tile instructions run only as a unit"
            if warn:
                warn_not_verified(intr, why, stacklevel=stacklevel + 1)
            return Verdict(intr.name, _where(intr), False, why)
        iset, unit = found
        intr = iset[unit.compute]
    where = _where(intr)
    plan = _plan(intr, hw)
    if plan.target is not None and isinstance(intr.impl, LLVMTileCall):
        plan = dataclasses.replace(plan, target=offering(plan.target, iset))
    if plan.target is None:
        if warn:
            warn_not_verified(intr, plan.why_not, stacklevel=stacklevel + 1)
        return Verdict(intr.name, where, False, plan.why_not)
    key = _key(intr, plan, trials, seed)
    with _LOCK:
        rec = _MEMORY.get(key)
        cached = rec is not None
        if rec is None:
            rec = _read_disk(key)
            cached = rec is not None
            if rec is None:
                rec = {
                    "format": FORMAT,
                    "key": key,
                    "intrinsic": intr.name,
                    "file": where,
                    "target": plan.target.name,
                    **_run(intr, plan, trials, seed),
                }
                if rec["ok"] is None:
                    if warn:
                        warn_not_verified(intr, rec["detail"], stacklevel=stacklevel + 1)
                    return Verdict(intr.name, where, False, rec["detail"])
                _write_disk(key, rec)
            _MEMORY[key] = rec
    if not rec["ok"]:
        raise IntrinsicVerifyError(where, intr.name, rec["detail"], cached=cached)
    return Verdict(intr.name, where, True, rec["detail"], cached=cached)


# ---------------------------------------------------------------------------------------------
# hooks


def _calls(func: PrimFunc, hw: Hardware) -> tuple[list[Intrinsic], list[tuple[str, list[Intrinsic]]]]:
    """(the intrinsics ``func`` calls, as :func:`intrinsics_called` finds them; the calls no such
    intrinsic implements, with the intrinsics loaded in this process that are implemented by them)."""
    ops: set[str] = set()
    post_order_visit(func.body, lambda n: ops.add(n.op) if isinstance(n, Call) and n.op.startswith("llvm.") else None)
    if not ops:
        return [], []
    offered = [i for i in hw.intrinsics if _identifies(i)]
    found: list[Intrinsic] = []
    unknown: list[tuple[str, list[Intrinsic]]] = []
    shipped: list[Intrinsic] | None = None
    for op in sorted(ops):
        mine = [i for i in offered if i.impl.intrinsic == op]
        if not mine:
            if shipped is None:
                shipped = [i for i in shipped_intrinsics() if _identifies(i)]
            mine = [i for i in shipped if i.impl.intrinsic == op]
        if not mine and loaded_with_call(op):
            unknown.append((op, loaded_with_call(op)))
        found.extend(mine)
    return found, unknown


def _identifies(intr: Intrinsic) -> bool:
    """Whether a call of ``intr``'s LLVM intrinsic names ``intr``: an LLVM vector intrinsic, or the
    compute of a unit on tile registers (its loads, zero and store share their calls with every
    other unit's, and are verified with their unit)."""
    return isinstance(intr.impl, LLVMImpl) or (isinstance(intr.impl, LLVMTileCall) and intr.role == "compute")


def intrinsics_called(func: PrimFunc, hw: Hardware) -> list[Intrinsic]:
    """The intrinsics whose LLVM call ``func`` makes: those of ``hw`` implemented by that call,
    else the shipped ones (a program may call an intrinsic its hardware does not list). A call no
    such intrinsic implements is the program's own (``llvm.fma``, ``llvm.trap``), unless an
    intrinsic loaded in this process is implemented by it: see :func:`verify_calls`."""
    return _calls(func, hw)[0]


def verify_calls(func: PrimFunc, hw: Hardware, stacklevel: int = 2) -> list[Verdict]:
    """:func:`verify_intrinsic` for every intrinsic ``func`` calls (:func:`intrinsics_called`):
    what :func:`tensorsearch.build` does before compiling a program. A call that neither ``hw``
    nor a shipped set implements but an intrinsic loaded in this process does (a program
    tensorized with an :class:`Intrinsic` its hardware does not offer) cannot be traced to one
    definition: each such intrinsic is warned about as not verified. ``stacklevel`` as in
    ``warnings.warn``, for those warnings (2: the caller of this function)."""
    found, unknown = _calls(func, hw)
    verdicts = []
    for intr in found:
        verdicts.append(verify_intrinsic(intr, hw, stacklevel=stacklevel + 1))
    for op, loaded in unknown:
        why = (
            f"a program built for {hw.name} calls {op}, but {hw.name} does not offer this intrinsic, so the "
            "call cannot be traced to its definition (list its set in the hardware's intrinsics)"
        )
        for intr in loaded:
            warn_not_verified(intr, why, stacklevel=stacklevel + 1)
            verdicts.append(Verdict(intr.name, _where(intr), False, why))
    return verdicts


def verify_hardware(hw: Hardware, intrinsics: Iterable[Intrinsic] | None = None, stacklevel: int = 2) -> list[Verdict]:
    """:func:`verify_intrinsic` for every intrinsic ``hw`` offers (or those given): what ``tune``
    does before its search starts."""
    verdicts = []
    for intr in hw.intrinsics if intrinsics is None else intrinsics:
        verdicts.append(verify_intrinsic(intr, hw, stacklevel=stacklevel + 1))
    return verdicts
