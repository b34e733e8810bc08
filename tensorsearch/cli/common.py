"""What every command of the ``tensorsearch`` command line shares: argument types and options,
the work-dir check, input errors reworded to name the argument, and the program's dtype default.

``main`` (the operator commands) and ``model`` (the whole-model commands) both import this module;
neither imports the other's parsers' helpers."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DEFAULT_DTYPE",
    "DTYPE_HELP",
    "add_address_argument",
    "add_allow_other_cpu_argument",
    "argument",
    "check_work_dir",
    "positive_int",
    "speed_ratio",
]

T = TypeVar("T")

# A workload's dtype when --dtype is not given: float32, as in TVM's te_workload table and in
# `tensorsearch show`; the same for show, match and tune. Where the hardware's tensor intrinsics
# take another dtype of the workload, tune and match say so (main.dtype_note), never switching
# dtype on their own.
DEFAULT_DTYPE = "float32"
DTYPE_HELP = (
    "the workload's data type: float32 (default, as in TVM's te_workload table), float16, bfloat16, int8 "
    "(uint8 x int8) or int16; the default is the same for show, match and tune, and where --hardware's "
    "tensor intrinsics take another dtype (VNNI: int8) the command says which"
)


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def argument(name: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, its ValueError reworded to name the command-line argument at fault."""
    try:
        return fn(*args)
    except ValueError as err:
        raise ValueError(f"argument {name}: {err}") from None


def add_address_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--address",
        help="Ray cluster address to join (default: $RAY_ADDRESS when set, else a private local cluster; "
        "'local' forces the private one)",
    )


def add_allow_other_cpu_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-other-cpu",
        action="store_true",
        help="time on machines whose CPU is not the one --hardware describes (refused by default); "
        "each record names the CPU that timed it",
    )


def check_work_dir(work_dir: Path) -> None:
    """ValueError unless ``work_dir`` is (or can be made) a directory this process can write in;
    directories made to find out are removed again."""
    if work_dir.exists() and not work_dir.is_dir():
        raise ValueError(f"{work_dir} exists and is not a directory")
    made = [d for d in (work_dir, *work_dir.parents) if not d.exists()]
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        probe = work_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"cannot write in {work_dir}: {err.strerror or err}") from None
    finally:
        for d in made:
            if d.is_dir():
                d.rmdir()


def speed_ratio(ours: float, theirs: float, name: str = "onnxruntime") -> str:
    """How our latency compares with another's, in words and three significant digits:
    ``2.13x faster than onnxruntime``, ``412x slower than onnxruntime``, ``as fast as onnxruntime``."""
    if not (ours > 0 and theirs > 0) or ours == float("inf") or theirs == float("inf"):
        return f"not comparable with {name}"
    ratio = theirs / ours
    if f"{ratio:.3g}" == "1":
        return f"as fast as {name}"
    if ratio > 1:
        return f"{ratio:.3g}x faster than {name}"
    return f"{1 / ratio:.3g}x slower than {name}"
