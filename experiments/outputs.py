"""Where the benchmarks write: a directory they are given, never over tracked files by default.

Every script in experiments/ takes the same two options (:func:`add_arguments`):

* ``--out DIR``: where its tables go; default ``results/<script>/`` at the repository root
  (git-ignored). A directory inside ``experiments/results/`` is refused unless ...
* ``--update-tracked``: ... is given: the tables are written into the tracked
  ``experiments/results/`` (the default ``--out`` then), on purpose, and only then.

Everything else a run makes (tuning work dirs, logs, kernel dumps) goes under
:attr:`Outputs.scratch`: the out dir, or ``results/<script>/`` when the out dir is the tracked
one, so none of it lands in a tracked path or the repository root. A fresh work dir per run
(:meth:`Outputs.fresh_dir`) keeps a tuner from resuming an earlier run's records by accident.

:func:`outputs` also makes every later warning one line, ``<script>.py: warning: ...``, as the
``tensorsearch`` command does (a derived host's HardwareWarning among them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACKED = ROOT / "experiments" / "results"
IGNORED = ROOT / "results"  # git-ignored (.gitignore: /results/)


class OutputError(ValueError):
    """An out dir these options may not write to (the message is one line)."""


def default_out(script: str) -> Path:
    """The git-ignored default out dir of ``script`` (its file name without ``.py``)."""
    return IGNORED / script


def show(path: Path) -> str:
    """``path`` relative to the repository root where it is inside it, else absolute."""
    path = Path(os.path.abspath(path))
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def is_tracked(path: str | os.PathLike) -> bool:
    """Whether ``path`` is experiments/results/ or inside it (symbolic links resolved)."""
    p = Path(path).resolve()
    return p == TRACKED or TRACKED in p.parents


def add_arguments(parser: argparse.ArgumentParser, script: str) -> None:
    """Add ``--out`` and ``--update-tracked`` to ``parser``."""
    group = parser.add_argument_group("output")
    group.add_argument(
        "--out",
        metavar="DIR",
        help=f"output directory (default {show(default_out(script))}/, git-ignored); "
        f"inside {show(TRACKED)}/ only with --update-tracked",
    )
    group.add_argument(
        "--update-tracked",
        action="store_true",
        help=f"write the tables into the tracked {show(TRACKED)}/ on purpose (the default --out then); "
        f"work dirs, logs and dumps still go under {show(default_out(script))}/",
    )


def resolve_out(out: str | os.PathLike | None, update_tracked: bool, script: str) -> Path:
    """The out dir for these options, or :class:`OutputError`."""
    if update_tracked:
        path = Path(out) if out is not None else TRACKED
        if not is_tracked(path):
            raise OutputError(f"--update-tracked writes into {show(TRACKED)}/, and --out {out} is outside it")
        return path
    path = Path(out) if out is not None else default_out(script)
    if is_tracked(path):
        raise OutputError(
            f"--out {out}: {show(TRACKED)}/ holds the tracked results; "
            "add --update-tracked to update them on purpose, or give another directory"
        )
    return path


def check_untracked(path: str | os.PathLike, option: str) -> Path:
    """``path`` given with ``option`` (a work dir), or :class:`OutputError` if it is in experiments/results/."""
    if is_tracked(path):
        raise OutputError(f"{option} {path}: inside the tracked {show(TRACKED)}/; give another directory")
    return Path(path)


@dataclass(frozen=True)
class Outputs:
    """Where one run writes: ``out`` its tables, ``scratch`` everything else (never tracked)."""

    script: str
    out: Path
    scratch: Path

    @property
    def tracked(self) -> bool:
        return is_tracked(self.out)

    def fresh_dir(self, prefix: str = "work") -> Path:
        """A new directory ``scratch/PREFIX-YYYYmmdd-HHMMSS[-N]``, created."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        stem = f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
        for n in range(1000):
            path = self.scratch / (stem if n == 0 else f"{stem}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
        raise OutputError(f"no fresh directory {stem}-N under {show(self.scratch)}")

    def wrote(self, names: list[str], extra: str = "") -> str:
        """Print (and return) the line saying where this run wrote ``names``."""
        where = "the tracked " if self.tracked else ""
        line = f"wrote {', '.join(names) or 'nothing'} to {where}{show(self.out)}/" + (f"; {extra}" if extra else "")
        print(line, flush=True)
        return line


def one_line_warnings(script: str) -> None:
    """Show each warning from here on as one line, ``SCRIPT.py: warning: MESSAGE``, the way the
    ``tensorsearch`` command does: a derived host's :class:`HardwareWarning` (issued once per
    process) is then one line, not Python's ``file:line: Category: ...`` with a source line after it."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"{script}.py: warning: {message}", file=sys.stderr if file is None else file, flush=True)

    warnings.showwarning = show


def outputs(args: argparse.Namespace, script: str) -> Outputs:
    """The :class:`Outputs` of parsed ``args``; exits with a one-line error where they are refused.
    Warnings are shown as one line each from here on (:func:`one_line_warnings`)."""
    one_line_warnings(script)
    try:
        out = resolve_out(args.out, args.update_tracked, script)
    except OutputError as err:
        sys.exit(f"{script}.py: error: {err}")
    scratch = default_out(script) if is_tracked(out) else out
    return Outputs(script, out, scratch)
