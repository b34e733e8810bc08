"""One tuning run at a time per work dir: ``<work_dir>/.lock``.

::

    with hold_work_dir("runs/gmm"):      # WorkDirBusy (a TuneError) when another run holds it
        ...                               # tune, write best_trace.json and the tuning curve

:func:`~.tuner.tune` holds its work dir for the whole run, and ``tensorsearch tune`` also while it
writes the curve and the best trace afterwards. A second run on a busy work dir refuses at once,
before it starts Ray or reads the database, with one line naming the holder::

    work dir runs/gmm is in use by another tensorsearch tune (pid 4711, started 14:02:11); wait for
    it to finish or use another work dir

Why refuse rather than wait or join: two runs measuring on one machine disturb each other's
timings, and their proposals would need to be coordinated to never measure one candidate twice;
the second run gains nothing by sharing the work dir while the first is going. Refusing says so
at once; a script that queues runs waits for the first process (or uses ``flock(1)``) itself.

The lock is an exclusive ``fcntl.flock`` on ``.lock``, taken without waiting; the file holds the
holder's pid, host, start time and command line for the message. The kernel releases the lock
when the holder's process ends in any way (``kill -9`` included), so there is never a stale lock
to clean up, and the next run resumes with every record (the database's appends are safe on their
own, see :mod:`..database`). Never delete ``.lock`` while a run holds it: a run started after that
would lock a new file. The lock is held per process and thread: the same thread may take it again
(the CLI holds it around ``tune``, which takes it too); another thread of the same process is
refused like another process. Readers (``compile_best``, ``--transfer``, ``Database.open_existing``)
take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import TuneError

__all__ = ["LOCK_NAME", "WorkDirBusy", "hold_work_dir"]

LOCK_NAME = ".lock"


class WorkDirBusy(TuneError):
    """Another tuning run holds the work dir; ``holder`` is what it wrote in the lock file (pid,
    host, started, command), empty when it could not be read."""

    def __init__(self, work_dir: Path, holder: dict[str, Any]) -> None:
        self.work_dir = work_dir
        self.holder = holder
        super().__init__(self.message())

    @property
    def pid(self) -> int | None:
        pid = self.holder.get("pid")
        return pid if isinstance(pid, int) else None

    def message(self, other: str = "work dir") -> str:
        """The one-line refusal; ``other`` names what to use instead (the CLI says --work-dir)."""
        h = self.holder
        if self.pid is None:
            who = "pid unknown"
        else:
            who = f"pid {self.pid}"
            if h.get("host") and h["host"] != socket.gethostname():
                who += f" on {h['host']}"
            elif not _alive(self.pid):
                who += ", which has ended; a process it started still holds the lock"
        if isinstance(h.get("started"), int | float):
            who += ", started " + time.strftime("%H:%M:%S", time.localtime(h["started"]))
        return (
            f"work dir {self.work_dir} is in use by another tensorsearch tune ({who}); "
            f"wait for it to finish or use another {other}"
        )


class _Hold:
    def __init__(self, fd: int, info: dict[str, Any]) -> None:
        self.fd = fd
        self.info = info
        self.thread = threading.get_ident()
        self.count = 1


_held: dict[str, _Hold] = {}  # real path of the work dir -> this process's hold
_guard = threading.Lock()


@contextlib.contextmanager
def hold_work_dir(work_dir: str | os.PathLike) -> Iterator[Path]:
    """Hold ``work_dir`` (created if missing) for one tuning run; WorkDirBusy when another holds it."""
    path = Path(work_dir)
    created = not path.exists()
    key = os.path.realpath(path)
    with _guard:
        hold = _held.get(key)
        if hold is not None and hold.thread != threading.get_ident():
            raise WorkDirBusy(path, hold.info)
        if hold is not None:
            hold.count += 1
        else:
            hold = _held[key] = _Hold(*_acquire(path))
    try:
        yield path
    finally:
        with _guard:
            hold.count -= 1
            if hold.count == 0:
                del _held[key]
                if created:  # a run that refused before it began (bad hardware) leaves no work dir
                    with contextlib.suppress(OSError):
                        if [p.name for p in path.iterdir()] == [LOCK_NAME]:
                            (path / LOCK_NAME).unlink()
                            path.rmdir()
                _release(hold.fd)


def _info() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": sys.argv}


def _acquire(path: Path) -> tuple[int, dict[str, Any]]:
    lock = path / LOCK_NAME
    while True:
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # a run that refused removed the empty work dir just now
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkDirBusy(path, _holder(lock)) from None
        except OSError as err:
            os.close(fd)
            raise TuneError(
                f"work dir {path}: cannot lock {lock} ({err.strerror}); use a work dir on a local file system"
            ) from None
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # deleted or replaced between open and flock: lock the file now at the path
            os.close(fd)
            continue
        info = _info()
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        return fd, info


def _release(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)  # the next holder writes its own; a reader meanwhile retries
    finally:
        os.close(fd)  # drops the flock


def _holder(lock: Path) -> dict[str, Any]:
    """What the holder wrote in the lock file. It writes just after it locks, and the previous
    holder's lines are gone only then, so an empty file or a pid that has ended is retried for a
    moment."""
    info: dict[str, Any] = {}
    for _ in range(40):
        try:
            info = json.loads(lock.read_text())
        except (OSError, ValueError):
            info = {}
        pid = info.get("pid") if isinstance(info, dict) else None
        if isinstance(pid, int) and (info.get("host") != socket.gethostname() or _alive(pid)):
            return info
        time.sleep(0.05)
    return info if isinstance(info, dict) else {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
