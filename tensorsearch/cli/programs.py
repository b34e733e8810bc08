"""What a command works on: one of the paper's operators, or a user's own program in a file.

``NAME`` on the command line is a workload name (``GMM``; ``--index`` and ``--dtype`` pick the
shape and form) or a file (a path, or a name ending in ``.py``, ``.tir`` or ``.txt``):

* a Python file is run (it is the user's code) and its module-level PrimFuncs are collected, e.g.
  ``func = te.create_prim_func([...])``; ``--func NAME`` picks one when it defines several;
* any other file is script text (``func.script()`` prints it; ``tensorsearch.script.parse``
  reads it back).

Either way the PrimFunc is verified before any command uses it, and it goes by one name: the
file's stem (``conv2d_padded`` for ``examples/conv2d_padded.py``), or ``STEM_FUNC`` for the PrimFunc
``FUNC`` of a file that defines several. That name is the function's ``global_symbol`` (so
``show`` prints it, ``tune`` reports and records the program under it) and ``tune``'s default work
dir is ``runs/NAME-HARDWARE``.
"""

from __future__ import annotations

import os
import re
import runpy
from dataclasses import dataclass
from pathlib import Path

from ..ir import PrimFunc
from ..workloads import Workload

PROGRAM_SUFFIXES = (".py", ".tir", ".txt", ".tvmscript")


@dataclass(frozen=True)
class Program:
    """A PrimFunc to work on, with its one name and a longer label."""

    func: PrimFunc
    name: str  # "GMM-0-int8"; for a file "conv2d_padded" (the PrimFunc's global_symbol); names work dirs
    label: str  # "GMM[0] int8 args=(1, 128, 128, 128)" or "conv2d_padded (examples/conv2d_padded.py)"
    workload: Workload | None  # None for a user's file
    source: tuple[str, str | None] | None = None  # a file's (path, --func that picks the PrimFunc)


def is_program_file(name: str) -> bool:
    return os.sep in name or "/" in name or name.endswith(PROGRAM_SUFFIXES) or Path(name).is_file()


def load_program(path_text: str, func_name: str | None = None) -> Program:
    """The PrimFunc a user's file defines (``func_name`` among several); ValueError naming the
    file when it cannot be read, run or parsed, defines none, or defines several and no name."""
    path = Path(path_text)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (NAME is a workload name or a .py / script text file)")
    funcs = _python_funcs(path) if path.suffix == ".py" else {"main": _script_func(path)}
    chosen = _choose(path, funcs, func_name)
    name = program_name(path, chosen, len(funcs))
    func = funcs[chosen]
    _verify(path, chosen, func)
    attrs = {**func.attr_dict, "global_symbol": name}
    func = PrimFunc(func.params, func.body, func.buffer_map, attrs)
    where = str(path) if len(funcs) == 1 else f"{path}, PrimFunc {chosen}"
    return Program(func, name, f"{name} ({where})", None, (str(path), chosen if len(funcs) > 1 else None))


def program_name(path: Path, func_name: str, count: int) -> str:
    """The one name of the PrimFunc ``func_name`` of a file that defines ``count``: the file's stem,
    or ``STEM_FUNC`` among several; made an identifier (a kernel's symbol in C and CUDA too)."""
    name = path.stem if count == 1 else f"{path.stem}_{func_name}"
    name = re.sub(r"\W", "_", name)
    return name if name[:1].isalpha() or name[:1] == "_" else f"_{name}"


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
