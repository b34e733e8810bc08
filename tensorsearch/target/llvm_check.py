"""LLVM's own word on the intrinsic calls an intrinsic file declares.

``check_calls([(name, returns, args), ...])`` asks the LLVM that llvmlite bundles whether
``declare RETURNS @NAME(ARGS)`` (LLVM type text, :func:`llvm_type`) is an intrinsic it knows, with
exactly that signature, and answers one :class:`Answer` per call:

* ``ok``: LLVM knows the intrinsic and declares it so;
* ``declared``: LLVM's reader replaced the declaration by its own (it upgrades old signatures and
  re-mangles overloaded names as it parses), given as ``(name, returns, args)``;
* ``rejected``: the verifier refused a call with this signature (its message: "Intrinsic has
  incorrect argument type!");
* ``unknown``: no intrinsic of that name;
* ``aborted``: LLVM failed an assertion reading the declaration (its message).

The questions are asked in a child Python process that imports only llvmlite (this file, run as a
script): LLVM's upgrade of old signatures runs inside the parser, and some spellings fail an
assertion there that kills the process (one argument for ``llvm.x86.avx512bf16.dpbf16ps.256``
reads a second one; a call whose vector is not as wide as the upgraded declaration's bitcasts an
invalid size). In a child that is one more answer. Answers are cached per (name, signature), so a
process asks about each call once, and about all the new calls of one file in one child (about
0.2 s on an idle machine; a failed answer asks a few more, to find the one type LLVM accepts).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..ir import DataType

Call = tuple[str, str, tuple[str, ...]]  # (name, returns, args) as LLVM type text

_FLOATS = {("float", 16): "half", ("float", 32): "float", ("float", 64): "double", ("bfloat", 16): "bfloat"}
_DTYPES = {"half": "float16", "float": "float32", "double": "float64", "bfloat": "bfloat16", "i1": "bool"}


def llvm_type(dt: DataType) -> str:
    """LLVM's spelling of a data type: ``bfloat16x16`` -> ``<16 x bfloat>``, ``uint8`` -> ``i8``."""
    if dt.is_bool:
        scalar = "i1"
    elif dt.is_integer:
        scalar = f"i{dt.bits}"
    else:
        scalar = _FLOATS[(dt.code, dt.bits)]
    return scalar if dt.lanes == 1 else f"<{dt.lanes} x {scalar}>"


def dtype_text(llvm_text: str) -> str:
    """The data type an intrinsic file writes for LLVM type text: ``<16 x i16>`` -> ``int16x16 or
    uint16x16``, ``<16 x bfloat>`` -> ``bfloat16x16``; other LLVM types as they are."""
    m = re.fullmatch(r"<(\d+) x (\w+)>|(\w+)", llvm_text)
    if m is None:
        return llvm_text
    lanes, scalar = (m[1], m[2]) if m[1] else (None, m[3])
    suffix = f"x{lanes}" if lanes else ""
    if scalar in _DTYPES:
        return _DTYPES[scalar] + suffix
    if re.fullmatch(r"i\d+", scalar):
        return f"int{scalar[1:]}{suffix} or uint{scalar[1:]}{suffix}"
    return llvm_text


def llvm_version() -> str:
    """``LLVM 22``: the LLVM whose declarations are checked (the one llvmlite bundles)."""
    import llvmlite.binding as llvm

    return f"LLVM {llvm.llvm_version_info[0]}"


@dataclass(frozen=True)
class Answer:
    """What LLVM says about one call; ``kind`` is ok, declared, rejected, unknown or aborted."""

    kind: str
    message: str = ""
    declared: Call | None = None


_ANSWERS: dict[Call, Answer] = {}
_LOCK = threading.Lock()


def check_calls(calls: list[Call]) -> list[Answer]:
    """LLVM's answer for each call, asked in one child process for those not asked before."""
    with _LOCK:
        new = list(dict.fromkeys(c for c in calls if c not in _ANSWERS))
        if new:
            _ANSWERS.update(zip(new, _ask(new), strict=True))
        return [_ANSWERS[c] for c in calls]


def accepted_change(call: Call, result: bool) -> tuple[int, str] | None:
    """For a call LLVM rejects: the first single change of one type that LLVM accepts, as (position,
    LLVM type) with position -1 for the result (``result``) or the argument's index, trying the
    call's other types there (``<16 x i16>`` where ``<16 x bfloat>`` is written); None if none is."""
    name, ret, args = call
    types = list(dict.fromkeys((ret, *args)))
    positions = [-1] if result else list(range(len(args)))
    changes = []
    for pos in positions:
        have = ret if pos < 0 else args[pos]
        for t in types:
            if t != have:
                new_args = args if pos < 0 else (*args[:pos], t, *args[pos + 1 :])
                changes.append(((pos, t), (name, t if pos < 0 else ret, new_args)))
    answers = check_calls([c for _, c in changes])
    return next((change for (change, _), a in zip(changes, answers, strict=True) if a.kind == "ok"), None)


def _ask(calls: list[Call]) -> list[Answer]:
    """Run the child on ``calls``; when LLVM aborts on one, that one is answered ``aborted`` and a
    new child takes the rest."""
    answers: list[Answer] = []
    while len(answers) < len(calls):
        rest = calls[len(answers) :]
        try:
            run = subprocess.run(
                [sys.executable, "-P", __file__],
                input=json.dumps(rest),
                capture_output=True,
                text=True,
                timeout=300,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return answers + _unchecked(rest, str(exc))
        lines = run.stdout.splitlines()
        answers += [Answer(**_decode(json.loads(line))) for line in lines[: len(rest)]]
        if len(answers) == len(calls):
            break
        if run.returncode >= 0:  # a Python error (no llvmlite?), not LLVM killing the process
            return answers + _unchecked(calls[len(answers) :], _abort_reason(run.stderr, run.returncode))
        answers.append(Answer("aborted", _abort_reason(run.stderr, run.returncode)))
    return answers


def _unchecked(calls: list[Call], why: str) -> list[Answer]:
    """Where no child can answer, the calls pass unchecked, with a warning."""
    warnings.warn(f"LLVM intrinsic signatures not checked ({sys.executable} -P {__file__}: {why})", stacklevel=4)
    return [Answer("ok")] * len(calls)


def _decode(raw: dict[str, Any]) -> dict[str, Any]:
    if raw.get("declared") is not None:
        name, ret, args = raw["declared"]
        raw["declared"] = (name, ret, tuple(args))
    return raw


def _abort_reason(stderr: str, returncode: int) -> str:
    """The assertion (or last line) LLVM printed before the child died, on one line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    found = [ln for ln in lines if "Assertion" in ln or "LLVM ERROR" in ln] or lines[-1:]
    if not found:
        return f"the process ended with status {returncode}"
    text = found[-1]
    m = re.search(r"Assertion `(.*)' failed", text)
    return f"assertion {m[1]!r} failed" if m else text[:300]


# --------------------------------------------------------------------------------------------
# The child: reads a JSON list of [name, returns, [args...]], writes one JSON answer per line.


def _first_line(exc: Exception) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    useful = [ln for ln in lines if "error:" in ln] or lines
    return useful[0].split("error:", 1)[-1].strip() if useful else str(exc)


def _probe(llvm: Any, name: str, ret: str, args: list[str]) -> dict[str, Any]:
    """One call: declare it alone (the parser upgrades or re-mangles what it does not declare so),
    then, when LLVM gave the declaration no intrinsic attributes, verify a call of it and look it up."""
    decl = f'declare {ret} @"{name}"({", ".join(args)})'
    try:
        fn = next(iter(llvm.parse_assembly(decl).functions))
    except RuntimeError as exc:
        return {"kind": "rejected", "message": _first_line(exc)}
    t = fn.global_value_type
    got = [fn.name, str(t.get_function_return()), [str(p) for p in t.get_function_parameters()]]
    if got != [name, ret, args]:
        return {"kind": "declared", "declared": got}
    if list(fn.attributes):  # LLVM attaches an intrinsic's attributes only to a valid signature
        return {"kind": "ok"}
    params = ", ".join(f"{a} %a{i}" for i, a in enumerate(args))
    call = f'call {ret} @"{name}"({params})'
    try:
        llvm.parse_assembly(f"{decl}\ndefine void @probe({params}) {{\n  {call}\n  ret void\n}}\n").verify()
    except RuntimeError as exc:
        return {"kind": "rejected", "message": _first_line(exc)}
    try:
        llvm.parse_assembly(f"define void @probe({params}) {{\n  {call}\n  ret void\n}}\n")
    except RuntimeError as exc:
        if "unknown intrinsic" in str(exc):
            return {"kind": "unknown", "message": _first_line(exc)}
    return {"kind": "ok"}


def _child() -> None:
    import llvmlite.binding as llvm

    for name, ret, args in json.loads(sys.stdin.read()):
        print(json.dumps(_probe(llvm, name, ret, args)), flush=True)


if __name__ == "__main__":
    _child()
