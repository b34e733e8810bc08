"""What a command works on: one of the paper's operators, or a user's own program in a file.

``NAME`` on the command line is a workload name (``GMM``; ``--index`` and ``--dtype`` pick the
shape and form) or a file (a path, or a name ending in ``.py``, ``.tir`` or ``.txt``):

* a Python file is run (it is the user's code) and its module-level PrimFuncs are collected, e.g.
  ``func = te.create_prim_func([...])``; ``--func NAME`` picks one when it defines several;
* any other file is script text (``func.script()`` prints it; ``tensorsearch.script.parse``
  reads it back).

Either way the PrimFunc is verified before any command uses it.
"""

from __future__ import annotations

import os
import runpy
from dataclasses import dataclass
from pathlib import Path

from ..ir import PrimFunc
from ..workloads import Workload

PROGRAM_SUFFIXES = (".py", ".tir", ".txt", ".tvmscript")


@dataclass(frozen=True)
class Program:
    """A PrimFunc to work on, with the names it goes by."""

    func: PrimFunc
    label: str  # "GMM[0] int8 args=(1, 128, 128, 128)" or "conv.py: conv"
    slug: str  # for a work dir: "GMM-0-int8" or "conv-conv"
    workload: Workload | None  # None for a user's file


def is_program_file(name: str) -> bool:
    return os.sep in name or "/" in name or name.endswith(PROGRAM_SUFFIXES) or Path(name).is_file()


def load_program(path_text: str, func_name: str | None = None) -> Program:
    """The PrimFunc a user's file defines (``func_name`` among several); ValueError naming the
    file when it cannot be read, run or parsed, defines none, or defines several and no name."""
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (NAME is a workload name or a .py / script text file)")
    funcs = _python_funcs(path) if path.suffix == ".py" else {"main": _script_func(path)}
    name = _choose(path, funcs, func_name)
    func = funcs[name]
    _verify(path, name, func)
    return Program(func, f"{path}: {name}", f"{path.stem}-{name}", None)


def _python_funcs(path: Path) -> dict[str, PrimFunc]:
    try:
        scope = runpy.run_path(str(path), run_name="__tensorsearch_program__")
    except SystemExit as err:
        raise ValueError(f"{path}: the file exits when run (SystemExit {err.code})") from None
    except Exception as err:
        raise ValueError(f"{path}: running it failed: {type(err).__name__}: {err}") from None
    return {k: v for k, v in scope.items() if isinstance(v, PrimFunc) and not k.startswith("_")}


def _script_func(path: Path) -> PrimFunc:
    from ..script import parse

    try:
        return parse(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{path}: cannot read it: {err.strerror or err}") from None
    except Exception as err:
        raise ValueError(f"{path}: not a program in script text: {err}") from None


def _choose(path: Path, funcs: dict[str, PrimFunc], func_name: str | None) -> str:
    names = ", ".join(sorted(funcs)) or "(none)"
    if func_name is not None:
        if func_name not in funcs:
            raise ValueError(f"{path}: defines no PrimFunc {func_name!r}; it defines: {names}")
        return func_name
    if len(funcs) != 1:
        what = "no PrimFunc at module level" if not funcs else f"several PrimFuncs ({names}); pick one with --func"
        raise ValueError(f"{path}: defines {what}")
    return next(iter(funcs))


def _verify(path: Path, name: str, func: PrimFunc) -> None:
    from ..arith import verify

    try:
        verify(func)
    except ValueError as err:
        raise ValueError(f"{path}: PrimFunc {name} is not a valid program: {err}") from None
