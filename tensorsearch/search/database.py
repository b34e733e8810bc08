"""The tuning database: append-only JSON-lines files of workloads and measured candidates.

A work directory holds ``database/workloads.jsonl`` (one line per workload: its key, a name and the
PrimFunc as script text) and ``database/tuning_records.jsonl`` (one line per measured candidate)::

    db = Database("runs/gmm")
    wk = db.commit_workload(func, name="GMM/0/int8")     # idempotent; returns workload_key(func)
    hk = hardware_key(hardware.load("x86-emeraldrapids"))  # "x86-emeraldrapids-" + 16 hex digits
    db.commit_record(TuningRecord(wk, hk, cand_key, trace_json, (1.2e-4, 1.1e-4, 1.3e-4), None, 0.4, 0, time.time()))
    db.best(wk, hk)[0].latency        # 1.2e-4: the fastest ok record's median latency
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
loses nothing it committed. A process killed in the middle of that write can leave a partial
last line: loading skips it with a warning (and the next commit cuts it off before appending); a
corrupt line anywhere else is an error naming the file and the line, since it means the file was
edited or damaged.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
import os
import statistics
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..ir.stmt import PrimFunc
from ..ir.structural import structural_hash
from ..target import Hardware, load

__all__ = ["DATABASE_FORMAT", "Database", "DatabaseError", "TuningRecord", "hardware_key", "workload_key"]

DATABASE_FORMAT = 1  # the "format" of every line this code writes; it reads 0 (no "format") to this


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

    @property
    def ok(self) -> bool:
        """Whether it was built, checked and timed without error."""
        return self.error is None and len(self.latencies) > 0

    @property
    def latency(self) -> float:
        """The median of the latencies in seconds; ``math.inf`` when it failed."""
        return statistics.median(self.latencies) if self.ok else math.inf

    def to_json(self) -> dict[str, Any]:
        d = {"format": DATABASE_FORMAT, **dataclasses.asdict(self)}
        d["latencies"] = list(self.latencies)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> TuningRecord:
        """Read what :meth:`to_json` wrote, of any format version up to :data:`DATABASE_FORMAT`."""
        line_format(d)
        names = [f.name for f in dataclasses.fields(TuningRecord)]
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
        )


class _JsonLines:
    """One append-only JSON-lines file: read once, then appended one fsynced line at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cut: int | None = None  # byte offset of a damaged last line to cut off before appending
        self._prefix = b""  # a newline when the file ends in a complete line without one
        self._fd: int | None = None

    def read(self) -> list[tuple[int, dict[str, Any]]]:
        """(line number, object) of every line; a damaged last line is skipped with a warning."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        trailing = lines.pop()  # b"" when the file ends with a newline, else a partial line
        out: list[tuple[int, dict[str, Any]]] = []
        offset = 0
        for number, line in enumerate(lines, start=1):
            start, offset = offset, offset + len(line) + 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"expected a JSON object, found {type(obj).__name__}")
            except ValueError as e:
                if number == len(lines) and not trailing:
                    self._damaged(number, start, e)
                    continue
                raise DatabaseError(f"{self.path}: line {number} is not a valid record ({e})") from None
            out.append(self._versioned(number, obj))
        if trailing:
            try:
                obj = json.loads(trailing)
            except ValueError:
                obj = None
            if isinstance(obj, dict):  # complete but unterminated: keep it, end it before appending
                out.append(self._versioned(len(lines) + 1, obj))
                self._prefix = b"\n"
            else:
                self._damaged(len(lines) + 1, offset, ValueError("the line is cut off (no newline at its end)"))
        return out

    def _versioned(self, number: int, obj: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``(number, obj)`` when the line is of a format version this code reads."""
        try:
            line_format(obj)
        except ValueError as e:
            raise DatabaseError(f"{self.path}: line {number}: {e}") from None
        return number, obj

    def _damaged(self, number: int, offset: int, why: Exception) -> None:
        warnings.warn(
            f"{self.path}: skipping line {number}, the last one, which is damaged ({why}); "
            "a process was probably killed while writing it",
            stacklevel=4,
        )
        self._cut = offset

    def append(self, obj: dict[str, Any]) -> None:
        """Write ``obj`` as one line with a single write, then fsync."""
        line = self._prefix + (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if created:
                _fsync_dir(self.path.parent)
        if self._cut is not None:
            os.ftruncate(self._fd, self._cut)
            self._cut = None
        self._prefix = b""
        view = memoryview(line)
        while view:  # one write for any realistic line; a partial write continues where it stopped
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

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
    may append to the same directory, but each only sees what was there when it was opened plus
    its own commits.

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
        self._workload_file = _JsonLines(self.dir / "workloads.jsonl")
        self._record_file = _JsonLines(self.dir / "tuning_records.jsonl")
        self._workload_text: dict[str, str] = {}
        self._workload_name: dict[str, str] = {}
        self._funcs: dict[str, PrimFunc] = {}
        self._records: dict[tuple[str, str], list[TuningRecord]] = {}
        self._candidates: dict[tuple[str, str], set[str]] = {}
        for number, obj in self._workload_file.read():
            try:
                key, name, text = str(obj["key"]), str(obj.get("name", "")), str(obj["script"])
            except KeyError as e:
                raise DatabaseError(f"{self._workload_file.path}: line {number} lacks {e.args[0]!r}") from None
            self._workload_text.setdefault(key, text)
            self._workload_name.setdefault(key, name)
        for number, obj in self._record_file.read():
            try:
                record = TuningRecord.from_json(obj)
            except (ValueError, TypeError) as e:
                raise DatabaseError(f"{self._record_file.path}: line {number} is not a valid record ({e})") from None
            self._add(record)

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

    def hardware_records(self, hardware_key: str) -> dict[str, list[TuningRecord]]:
        """Every record measured on that hardware, by workload key (each list in commit order);
        what a run on another workload of the same hardware pre-trains its cost model on."""
        return {w: list(recs) for (w, h), recs in self._records.items() if h == hardware_key}

    def best(self, workload_key: str, hardware_key: str, k: int = 1) -> list[TuningRecord]:
        """The ``k`` fastest ok records by median latency (ties: the earlier commit first)."""
        ok = [r for r in self._records.get((workload_key, hardware_key), ()) if r.ok]
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

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tensorsearch Database {self.dir}: {len(self._workload_text)} workloads, {len(self)} records>"
