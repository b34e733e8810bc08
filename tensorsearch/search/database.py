"""The tuning database: append-only JSON-lines files of workloads and measured candidates.

A work directory holds ``database/workloads.jsonl`` (one line per workload: its key, a name and the
PrimFunc as script text), ``database/tuning_records.jsonl`` (one line per measured candidate) and
``database/retimings.jsonl`` (the finalists of a run timed again together, which then rank them)
and ``database/infrastructure.jsonl`` (nodes that joined, left or were refused during a run:
never candidate records)::

    db = Database("runs/gmm")
    wk = db.commit_workload(func, name="GMM/0/int8")     # idempotent; returns workload_key(func)
    hk = hardware_key(hardware.load("x86-emeraldrapids"))  # "x86-emeraldrapids-" + 16 hex digits
    db.commit_record(TuningRecord(wk, hk, cand_key, trace_json, (1.2e-4, 1.1e-4, 1.3e-4), None, 0.4, 0, time.time()))
    db.best(wk, hk)[0].latency        # 1.2e-4: the fastest ok record's latency (its fastest repeat)
    db.has_candidate(wk, hk, cand_key)  # True: a resumed run skips it

Records are keyed by the workload's structural hash and by the hardware descriptor's identity (its
name plus a hash of its whole validated content, intrinsics included), so a record tuned for one
target is never served for another, not even for an edited descriptor that kept its name.

Format versions: every line written carries ``"format": 1`` (:data:`DATABASE_FORMAT`); a line
without one is version 0, as written before lines carried a version, and reads the same way (a
record's ``trace`` is trace JSON text of any version :meth:`Trace.from_json` reads). A line of a
newer version is an error naming the file, the line and the version, so an older tensorsearch never
misreads a newer database. Opening never rewrites old lines; new commits append version-1 lines.

Durability: each commit is one line written by a single ``write`` on a file opened for appending,
then flushed to disk (``os.fsync``) before the call returns, so a process killed at any moment
loses nothing it committed.

Concurrency: any number of processes may read and append to the same files. An append holds an
exclusive ``fcntl.flock`` on the file while it repairs what is damaged, writes its line and fsyncs;
a reader takes no lock (nothing waits on a reader). What can be damaged, and what becomes of it:

- a cut-off last line (a process killed in the middle of its write; the kernel drops its lock):
  loading skips it with a warning, since the writer may also still be writing it. The next
  append, under the lock, looks at the file's end *as it is then* (never at an offset remembered
  from an earlier read) and cuts off the bytes after the last newline, moving them to
  ``<file>.damaged``; a last line that is a whole object without its newline is ended instead.
- a damaged line with lines after it (left by a tensorsearch older than this protocol, or by an
  edit): loading skips it with a warning naming the file and the line, keeping a whole record
  glued to its end (one appended after a cut-off line without a newline between them); the next
  append rewrites the file under the lock, every whole line kept in place, through a temporary
  file and ``os.replace``, the damaged bytes saved to ``<file>.damaged`` first. An appender holding
  the replaced file notices (its inode is no longer the path's) and appends to the new one.

A line that is JSON but not a record (fields missing), or of a newer format, is an error naming the
file and the line: that is not damage a crash leaves, and skipping it could lose a record.

Test hook: with ``TENSORSEARCH_TEST_HANG_IN_RECORD=N`` in the environment, a Database writes the
first half of its N-th record line and then sleeps, holding the file's lock, so a test can kill
the process in the middle of writing a record (tests/test_workdir_concurrency.py).
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import hashlib
import json
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ir.stmt import PrimFunc
from ..ir.structural import structural_hash
from ..target import CpuIdentity, Hardware, load
from .measure.noise import DISTURBED, latency_of

__all__ = ["DATABASE_FORMAT", "Database", "DatabaseError", "TuningRecord", "hardware_key", "workload_key"]

DATABASE_FORMAT = 1  # the "format" of every line this code writes; it reads 0 (no "format") to this
TEST_HANG_ENV = "TENSORSEARCH_TEST_HANG_IN_RECORD"  # test hook: see the module docstring


class DatabaseError(ValueError):
    """A database file that cannot be read back, or a request for something it does not hold."""


def line_format(obj: dict[str, Any]) -> int:
    """The format version of one database line: 0 when it has none; ValueError when it is not one
    this code reads."""
    version = obj.get("format", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"format {version!r} is not a version number")
    if version > DATABASE_FORMAT:
        raise ValueError(
            f"format {version} is newer than the formats this tensorsearch reads (0 to {DATABASE_FORMAT}); "
            "upgrade tensorsearch to load it"
        )
    return version


def workload_key(func: PrimFunc) -> str:
    """The structural hash of ``func`` as 16 hex digits; equal for structurally equal functions.

    >>> from tensorsearch import workloads
    >>> workload_key(workloads.get("GMM", 0, "int8").func) == workload_key(workloads.get("GMM", 0, "int8").func)
    True
    """
    return f"{structural_hash(func):016x}"


def _canonical(value: Any) -> Any:
    """A JSON-able, order-preserving image of a (nested) frozen dataclass; fields with compare=False
    or marked ``metadata={"descriptor": False}`` (compile options such as fp_contract) skipped."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if f.compare and f.metadata.get("descriptor", True)]
        return {"@": type(value).__name__, **{f.name: _canonical(getattr(value, f.name)) for f in fields}}
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if isinstance(value, tuple | list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def hardware_key(hw: Hardware | str) -> str:
    """``"<name>-<16 hex digits>"``: the descriptor's name and a hash of its whole validated content.

    The hash covers every compared field of the frozen :class:`~tensorsearch.hardware.Hardware`
    (triple, cpu, features, cores, vector width, caches, GPU part, the intrinsic sets with every
    intrinsic), not where it was read from, so the same YAML gives the same key on every machine
    and any edit gives a new one. ``hw`` may also be a descriptor name or path.

    >>> from tensorsearch import hardware
    >>> hardware_key(hardware.load("x86-znver4")).startswith("x86-znver4-")
    True
    """
    hw = load(hw)
    text = json.dumps(_canonical(hw), sort_keys=False, separators=(",", ":"))
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    return f"{hw.name}-{digest}"


@dataclass(frozen=True)
class TuningRecord:
    """One measured candidate of one workload on one hardware.

    ``candidate_key`` is the structural hash of the final (postprocessed) function, ``trace`` the
    JSON text of its whole schedule trace, ``latencies`` the seconds per call of each timed repeat
    (empty when it failed, and then ``error`` says why), ``trial`` its number in the tuning run.
    ``measured_on`` is the CPU of the machine that timed it (the runner's node, on a cluster):
    the descriptor's own CPU unless the run was allowed to time elsewhere (``allow_other_cpu``);
    None for a GPU descriptor, a candidate never run or run under qemu, and records written
    before it was kept.
    """

    workload_key: str
    hardware_key: str
    candidate_key: str
    trace: str
    latencies: tuple[float, ...]
    error: str | None
    build_seconds: float
    trial: int
    timestamp: float
    node: str | None = None  # the Ray node that timed it; None in records written before it was kept
    run_start: float | None = None  # wall-clock seconds on that node: its check run began ...
    run_end: float | None = None  # ... and its timing ended (timings never overlap on a node)
    emulated: bool = False  # run under qemu (no node runs the code natively): checked, never ranked
    measured_on: CpuIdentity | None = None  # the CPU that timed it (see the class docstring)
    disturbance: float | None = None  # the reference kernel's slowdown beside its timing (search/measure/noise.py)

    @property
    def ok(self) -> bool:
        """Whether it was built, checked and timed without error."""
        return self.error is None and len(self.latencies) > 0

    @property
    def ranks(self) -> bool:
        """Whether its latency ranks it: it is ok and was timed natively, not under emulation."""
        return self.ok and not self.emulated

    @property
    def latency(self) -> float:
        """The fastest of the latencies in seconds (:func:`~.measure.noise.latency_of`); ``math.inf`` when
        it failed or ran emulated (an emulated timing is qemu's, not the hardware's)."""
        return latency_of(self.latencies) if self.ranks else math.inf

    @property
    def disturbed(self) -> bool:
        """Whether the host was busy while it was timed (its reference ran over ``noise.DISTURBED``x slower)."""
        return self.disturbance is not None and self.disturbance > DISTURBED

    def to_json(self) -> dict[str, Any]:
        d = {"format": DATABASE_FORMAT, **dataclasses.asdict(self)}
        d["latencies"] = list(self.latencies)
        d["measured_on"] = None if self.measured_on is None else self.measured_on.to_json()
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> TuningRecord:
        """Read what :meth:`to_json` wrote, of any format version up to :data:`DATABASE_FORMAT`."""
        line_format(d)
        names = [f.name for f in dataclasses.fields(TuningRecord) if f.name not in _OPTIONAL_FIELDS]
        missing = [n for n in names if n not in d]
        if missing:
            raise ValueError(f"the record lacks {', '.join(missing)}")
        return TuningRecord(
            workload_key=str(d["workload_key"]),
            hardware_key=str(d["hardware_key"]),
            candidate_key=str(d["candidate_key"]),
            trace=str(d["trace"]),
            latencies=tuple(float(x) for x in d["latencies"]),
            error=None if d["error"] is None else str(d["error"]),
            build_seconds=float(d["build_seconds"]),
            trial=int(d["trial"]),
            timestamp=float(d["timestamp"]),
            node=None if d.get("node") is None else str(d["node"]),
            run_start=None if d.get("run_start") is None else float(d["run_start"]),
            run_end=None if d.get("run_end") is None else float(d["run_end"]),
            emulated=bool(d.get("emulated", False)),
            measured_on=None if d.get("measured_on") is None else CpuIdentity.from_json(d["measured_on"]),
            disturbance=None if d.get("disturbance") is None else float(d["disturbance"]),
        )


# absent from lines written before they were kept
_OPTIONAL_FIELDS = ("node", "run_start", "run_end", "emulated", "measured_on", "disturbance")


def _decode(line: bytes) -> tuple[dict[str, Any] | None, int | None, Exception | None]:
    """Decode one line: ``(obj, 0, None)`` when it is a JSON object; for a damaged line
    ``(obj, at, why)`` when the bytes from ``at`` on are a whole JSON object (a line appended
    right after a cut-off one, without a newline between them: what a writer that did not check
    the file's end left), else ``(None, None, why)``."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        why: Exception = e
    else:
        if isinstance(obj, dict):
            return obj, 0, None
        why = ValueError(f"expected a JSON object, found {type(obj).__name__}")
    at = line.find(b"{", 1)
    while at != -1:
        try:
            obj = json.loads(line[at:])
        except ValueError:
            pass
        else:
            if isinstance(obj, dict):
                return obj, at, why
        at = line.find(b"{", at + 1)
    return None, None, why


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts = []
    while size > 0:
        chunk = os.pread(fd, size, offset)
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(parts)


class _JsonLines:
    """One append-only JSON-lines file that any number of processes read and append to.

    Reading takes no lock and skips what is not a whole line. Appending takes an exclusive
    ``flock`` on the file, repairs what is damaged at that moment (see the module docstring), writes
    the line with one ``write`` and fsyncs it before letting go.
    """

    def __init__(self, path: Path, hang_at: int | None = None) -> None:
        self.path = path
        self.damaged_path = path.with_name(path.name + ".damaged")
        self._fd: int | None = None
        self._repair = False  # read() met a damaged line ending in a newline: rewrite at the next append
        self._warned_tail: int | None = None  # offset of the cut-off last line read() warned about
        self._appended = 0
        self._hang_at = hang_at

    # reading ---------------------------------------------------------------------------
    def read(self) -> list[tuple[int, dict[str, Any], bool]]:
        """(line number, object, salvaged) of every line; damaged lines are skipped with a warning
        (a whole object at a damaged line's end is kept: ``salvaged``)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        trailing = lines.pop()  # b"" when the file ends with a newline, else a line being written or cut off
        out: list[tuple[int, dict[str, Any], bool]] = []
        offset = 0
        for number, line in enumerate(lines, start=1):
            offset += len(line) + 1
            if not line.strip():
                continue
            obj, at, why = _decode(line)
            if why is not None:
                self._repair = True
                last = number == len(lines) and not trailing.strip()
                self._warn_damaged(number, why, last, at)
            if obj is not None:
                out.append(self._versioned(number, obj, bool(at)))
        if trailing.strip():
            number = len(lines) + 1
            obj, at, why = _decode(trailing)
            if why is not None:  # cut off: a process was killed while writing it, or is writing it now
                self._warned_tail = offset
                self._warn_damaged(number, ValueError("cut off: no newline at its end"), True, at)
            if obj is not None:  # whole but not yet ended by its newline: the next append ends it
                out.append(self._versioned(number, obj, bool(at)))
        return out

    def _versioned(self, number: int, obj: dict[str, Any], salvaged: bool) -> tuple[int, dict[str, Any], bool]:
        """``(number, obj, salvaged)`` when the line is of a format version this code reads."""
        try:
            line_format(obj)
        except ValueError as e:
            raise DatabaseError(f"{self.path}: line {number}: {e}") from None
        return number, obj, salvaged

    def _warn_damaged(self, number: int, why: Exception, last: bool, salvage_at: int | None) -> None:
        where = "the last one, " if last else ""
        cause = (
            "a process was probably killed while writing it (or is writing it now)"
            if last
            else "lines were appended after it without repairing it (by an older tensorsearch, or an edit)"
        )
        kept = " (the whole record at its end is kept)" if salvage_at else ""
        warnings.warn(
            f"{self.path}: skipping line {number}, {where}which is damaged ({why}){kept}; {cause}; "
            "the next commit moves its bytes to " + self.damaged_path.name,
            stacklevel=4,
        )

    # appending -------------------------------------------------------------------------
    def append(self, obj: dict[str, Any]) -> None:
        """Write ``obj`` as one line with a single write under the file's lock, then fsync."""
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        while True:
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if not self._current(fd):  # another process repaired the file: append to the new one
                    self.close()
                    continue
                if self._repair:
                    self._repair = False
                    if self._rewrite(fd):  # the file at the path is a new one now
                        self.close()
                        continue
                self._end_tail(fd)
                self._write(fd, line)
                return
            finally:
                if self._fd == fd:
                    fcntl.flock(fd, fcntl.LOCK_UN)

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if created:
                _fsync_dir(self.path.parent)
        return self._fd

    def _current(self, fd: int) -> bool:
        """Whether ``fd`` is still the file at the path (a repair replaces it)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        own = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)

    def _end_tail(self, fd: int) -> None:
        """Under the lock: end a whole last line that lacks its newline, or cut off a damaged last
        line (the bytes after the last newline now, which no living writer is writing), keeping
        its bytes in the ``.damaged`` file and any whole object at its end."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        start = size
        while start > 0:
            n = min(65536, start)
            i = os.pread(fd, n, start - n).rfind(b"\n")
            if i != -1:
                start = start - n + i + 1
                break
            start -= n
        tail = _pread_all(fd, size - start, start)
        _, at, why = _decode(tail)
        if why is None:
            self._write_all(fd, b"\n")
            return
        self._save_damaged([tail[:at] if at else tail])
        os.ftruncate(fd, start)
        if at:
            self._write_all(fd, tail[at:] + b"\n")
        os.fsync(fd)
        if start != self._warned_tail:
            warnings.warn(
                f"{self.path}: cut off a damaged last line of {size - start} bytes ({why}), which a killed "
                f"process left; its bytes are in {self.damaged_path.name}",
                stacklevel=5,
            )
        self._warned_tail = None

    def _rewrite(self, fd: int) -> bool:
        """Under the lock: rewrite the file without its damaged lines (temporary file, then
        ``os.replace``), every whole line kept in its place; the damaged bytes go to the
        ``.damaged`` file first. False when nothing is damaged (any more)."""
        data = _pread_all(fd, os.fstat(fd).st_size, 0)
        lines = data.split(b"\n")
        if not lines[-1].strip():
            lines.pop()
        kept: list[bytes] = []
        damaged: list[bytes] = []
        for line in lines:
            if not line.strip():
                continue
            _, at, why = _decode(line)
            if why is None:
                kept.append(line)
                continue
            damaged.append(line[:at] if at else line)
            if at:
                kept.append(line[at:])
        if not damaged:
            return False
        self._save_damaged(damaged)
        tmp = self.path.with_name(f".{self.path.name}.repair-{os.getpid()}")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            self._write_all(out, b"".join(line + b"\n" for line in kept))
            os.fsync(out)
        finally:
            os.close(out)
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)
        warnings.warn(
            f"{self.path}: repaired: {len(damaged)} damaged line(s) removed, all {len(kept)} whole lines kept; "
            f"the damaged bytes are in {self.damaged_path.name}",
            stacklevel=5,
        )
        return True

    def _save_damaged(self, pieces: list[bytes]) -> None:
        fd = os.open(self.damaged_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._write_all(fd, b"".join(p + b"\n" for p in pieces))
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:  # one write for any realistic line; a partial write continues where it stopped
            n = os.write(fd, view)
            view = view[n:]

    def _write(self, fd: int, line: bytes) -> None:
        if self._hang_at is not None and self._appended + 1 == self._hang_at:
            # the test hook: write half the line and stop, holding the lock, until killed
            self._write_all(fd, line[: len(line) // 2])
            os.fsync(fd)
            while True:
                time.sleep(60)
        self._write_all(fd, line)
        os.fsync(fd)
        self._appended += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Database:
    """Workloads and tuning records of one work directory (see the module docstring).

    Opening reads both files; commits append to them. Several Database objects (or processes)
    may append to the same directory (see Concurrency in the module docstring), but each only
    sees what was there when it was opened plus its own commits.

    >>> import tempfile
    >>> from tensorsearch import workloads
    >>> db = Database(tempfile.mkdtemp())
    >>> wl = workloads.make("GMM", (1, 16, 16, 16), "float32")
    >>> key = db.commit_workload(wl.func, wl.key)
    >>> db.workload(key).script() == wl.func.script()
    True
    """

    def __init__(self, work_dir: str | os.PathLike) -> None:
        self.work_dir = Path(work_dir)
        self.dir = self.work_dir / "database"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        hang = os.environ.get(TEST_HANG_ENV)
        self._workload_file = _JsonLines(self.dir / "workloads.jsonl")
        self._record_file = _JsonLines(self.dir / "tuning_records.jsonl", int(hang) if hang else None)
        self._workload_text: dict[str, str] = {}
        self._workload_name: dict[str, str] = {}
        self._funcs: dict[str, PrimFunc] = {}
        self._records: dict[tuple[str, str], list[TuningRecord]] = {}
        self._candidates: dict[tuple[str, str], set[str]] = {}
        self._retime_file = _JsonLines(self.dir / "retimings.jsonl")
        self._infrastructure_file = _JsonLines(self.dir / "infrastructure.jsonl")
        self._retimed: dict[tuple[str, str], dict[str, list[float]]] = {}
        for number, obj, salvaged in self._workload_file.read():
            try:
                key, name, text = str(obj["key"]), str(obj.get("name", "")), str(obj["script"])
            except KeyError as e:
                if salvaged:  # what looked like a whole line at a damaged one's end is not one
                    continue
                raise DatabaseError(f"{self._workload_file.path}: line {number} lacks {e.args[0]!r}") from None
            self._workload_text.setdefault(key, text)
            self._workload_name.setdefault(key, name)
        for number, obj, salvaged in self._record_file.read():
            try:
                record = TuningRecord.from_json(obj)
            except (ValueError, TypeError) as e:
                if salvaged:
                    continue
                raise DatabaseError(f"{self._record_file.path}: line {number} is not a valid record ({e})") from None
            self._add(record)
        for number, obj, salvaged in self._retime_file.read():
            try:
                line_format(obj)
                pair = (str(obj["workload_key"]), str(obj["hardware_key"]))
                lats = [float(x) for x in obj["latencies"]]
                self._retimed.setdefault(pair, {}).setdefault(str(obj["candidate_key"]), []).extend(lats)
            except (KeyError, ValueError, TypeError) as e:
                if salvaged:
                    continue
                raise DatabaseError(f"{self._retime_file.path}: line {number} is not a valid re-timing ({e})") from None

    @classmethod
    def open_existing(cls, path: str | os.PathLike) -> Database:
        """The database at ``path``: a work directory, its ``database`` directory or one of the
        two ``.jsonl`` files in it; DatabaseError when there is none (nothing is created)."""
        p = Path(path)
        if p.is_file():
            p = p.parent
        if p.name == "database" and (p / "tuning_records.jsonl").exists():
            p = p.parent
        if not (p / "database" / "tuning_records.jsonl").exists():
            raise DatabaseError(f"{os.fspath(path)}: no tuning database there (no database/tuning_records.jsonl)")
        return cls(p)

    # workloads -------------------------------------------------------------------------
    def commit_workload(self, func: PrimFunc, name: str = "") -> str:
        """Store ``func`` (as script text) unless already stored; returns its :func:`workload_key`.

        Raises DatabaseError when the script text would not parse back to the same function.
        """
        from ..script import parse

        key = workload_key(func)
        with self._lock:
            if key in self._workload_text:
                self._funcs.setdefault(key, func)
                return key
            text = func.script()
            if workload_key(parse(text)) != key:
                raise DatabaseError(
                    f"workload {name or key}: its script text does not parse back to the same function, "
                    "so it cannot be stored"
                )
            self._workload_file.append({"format": DATABASE_FORMAT, "key": key, "name": name, "script": text})
            self._workload_text[key] = text
            self._workload_name[key] = name
            self._funcs[key] = func
        return key

    def workload(self, key: str) -> PrimFunc:
        """The stored workload ``key``, parsed back from its script text."""
        from ..script import parse

        with self._lock:
            if key not in self._funcs:
                if key not in self._workload_text:
                    raise DatabaseError(f"{self._workload_file.path}: no workload with key {key}")
                self._funcs[key] = parse(self._workload_text[key])
            return self._funcs[key]

    def workload_name(self, key: str) -> str:
        """The name the workload was committed with ("" when none)."""
        if key not in self._workload_name:
            raise DatabaseError(f"{self._workload_file.path}: no workload with key {key}")
        return self._workload_name[key]

    def workload_keys(self) -> list[str]:
        """Keys of the stored workloads in commit order."""
        return list(self._workload_text)

    # records ---------------------------------------------------------------------------
    def _add(self, record: TuningRecord) -> None:
        pair = (record.workload_key, record.hardware_key)
        self._records.setdefault(pair, []).append(record)
        self._candidates.setdefault(pair, set()).add(record.candidate_key)

    def commit_record(self, record: TuningRecord) -> None:
        """Append ``record``; it is on disk when this returns."""
        if not isinstance(record, TuningRecord):
            raise TypeError(f"commit_record needs a TuningRecord, got {type(record).__name__}")
        with self._lock:
            self._record_file.append(record.to_json())
            self._add(record)

    def records(self, workload_key: str, hardware_key: str) -> list[TuningRecord]:
        """Every record of the workload on that hardware (and no other), in commit order."""
        return list(self._records.get((workload_key, hardware_key), ()))

    def pairs(self) -> list[tuple[str, str]]:
        """The (workload key, hardware key) pairs that have records, in the order of their first record."""
        return list(self._records)

    def hardware_records(self, hardware_key: str) -> dict[str, list[TuningRecord]]:
        """Every record measured on that hardware, by workload key (each list in commit order);
        what a run on another workload of the same hardware pre-trains its cost model on."""
        return {w: list(recs) for (w, h), recs in self._records.items() if h == hardware_key}

    def commit_retiming(
        self,
        workload_key: str,
        hardware_key: str,
        candidate_key: str,
        latencies: list[float],
    ) -> None:
        """Append re-timed latencies of a measured candidate (``retimings.jsonl``); from then on its
        latency is the fastest of its record's and all its re-timings' (:meth:`latency`)."""
        if not latencies:
            return
        line = {"format": DATABASE_FORMAT, "workload_key": workload_key, "hardware_key": hardware_key}
        line.update(candidate_key=candidate_key, latencies=[float(x) for x in latencies], timestamp=time.time())
        with self._lock:
            self._retime_file.append(line)
            pair = (workload_key, hardware_key)
            self._retimed.setdefault(pair, {}).setdefault(candidate_key, []).extend(line["latencies"])

    def commit_infrastructure(self, event: dict[str, Any]) -> None:
        """Append what happened to the cluster during a run (``infrastructure.jsonl``): a node
        joined, left (its candidate in flight timed elsewhere) or was refused for timing. These
        are not candidate records: they never count as trials nor as failures."""
        with self._lock:
            self._infrastructure_file.append({"format": DATABASE_FORMAT, **event})

    def infrastructure(self) -> list[dict[str, Any]]:
        """The infrastructure events committed so far, oldest first."""
        return [obj for _, obj, _ in self._infrastructure_file.read()]

    def latency(self, record: TuningRecord) -> float:
        """The record's candidate's latency: the fastest of its own samples and its re-timings'
        (the tuner re-times its finalists together at the end of a run). Noise only adds time, so
        a re-timing on a busy host never makes a record slower."""
        if not record.ranks:
            return math.inf
        retimed = self._retimed.get((record.workload_key, record.hardware_key), {}).get(record.candidate_key, ())
        return latency_of([*record.latencies, *retimed])

    def best(self, workload_key: str, hardware_key: str, k: int = 1) -> list[TuningRecord]:
        """The ``k`` fastest ok records (ties: the earlier commit first): the re-timed ones first,
        then the others, each by :meth:`latency`. Records run under emulation are not ranked.

        The tuner re-times its finalists, the fastest by their own latencies, together at the end
        of a run, side by side, and they are ranked among themselves first: a record left out
        of the finalists was never compared with them under the same conditions."""
        ok = [r for r in self._records.get((workload_key, hardware_key), ()) if r.ranks]
        retimed = self._retimed.get((workload_key, hardware_key), {})
        return sorted(ok, key=lambda r: (r.candidate_key not in retimed, self.latency(r)))[: max(0, k)]

    def fastest_measured(self, workload_key: str, hardware_key: str, k: int) -> list[TuningRecord]:
        """The ``k`` fastest ok records by their own latency, re-timings aside (the finalists a
        run re-times)."""
        ok = [r for r in self._records.get((workload_key, hardware_key), ()) if r.ranks]
        return sorted(ok, key=lambda r: r.latency)[: max(0, k)]

    def has_candidate(self, workload_key: str, hardware_key: str, candidate_key: str) -> bool:
        """Whether a record (ok or failed) of that candidate exists for the workload and hardware."""
        return candidate_key in self._candidates.get((workload_key, hardware_key), ())

    def __len__(self) -> int:
        return sum(len(v) for v in self._records.values())

    def close(self) -> None:
        """Close the files (commits reopen them)."""
        self._workload_file.close()
        self._record_file.close()
        self._retime_file.close()
        self._infrastructure_file.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tensorsearch Database {self.dir}: {len(self._workload_text)} workloads, {len(self)} records>"
