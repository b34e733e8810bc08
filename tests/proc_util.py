"""Run a command in its own session and SIGKILL it (with the Ray cluster it started) once it has
written enough records: the killed-run tests of tune and of experiments."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

import pytest


def kill_when(command: Sequence[str], enough: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Start ``command`` (RAY_AUTH_MODE=disabled, no RAY_ADDRESS) and kill its whole process group
    as soon as ``enough()`` is true; the test fails when that takes more than ``timeout_s``."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        list(command), env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not enough():
            if time.monotonic() > deadline:
                pytest.fail(f"{' '.join(command[:4])} ... wrote too little in {timeout_s:g} s")
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-batch, with its Ray cluster
        proc.wait()


def lines(path: os.PathLike) -> int:
    """How many lines ``path`` holds (0 when it does not exist yet)."""
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
