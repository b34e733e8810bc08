"""What a tuning run shows its user: a progress line, the final table and the tuning curve.

Everything here is duck-typed on :class:`tune.Progress` and :class:`tune.TuneResult` (it reads
their attributes and imports nothing else from the tuner), so it is cheap to import and easy to
test. matplotlib is imported only inside :func:`write_curve_png`.

>>> from types import SimpleNamespace as P
>>> progress_line(P(trials_done=64, trials_total=256, best_throughput=312.4, unit="GOPS",
...                 elapsed_s=62, eta_s=190, failed=2), width=10)
'[##........] 64/256 trials  best 312.4 GOPS  failed 2  elapsed 1:02  left ~3:10'
>>> print(format_table([("GMM", 312.4), ("C2D", 88.0)], ["workload", "GOPS"]))
workload   GOPS
--------  -----
GMM       312.4
C2D        88.0
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "ProgressBar",
    "final_summary",
    "format_duration",
    "format_markdown_table",
    "format_table",
    "progress_line",
    "write_curve_csv",
    "write_curve_png",
]


# ------------------------------------------------------------------------------------ numbers


def format_duration(seconds: float | None) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above; ``?`` when unknown.

    >>> format_duration(62), format_duration(3725.4), format_duration(None)
    ('1:02', '1:02:05', '?')
    """
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _throughput(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value) or value <= 0:
        return "-"
    return f"{value:.4g} {unit}"


# ------------------------------------------------------------------------------------ progress


def progress_line(progress: Any, width: int = 20) -> str:
    """One line for a ``Progress``: bar, trials, best throughput, failures, elapsed and left time."""
    done, total = int(progress.trials_done), int(progress.trials_total)
    frac = min(1.0, done / total) if total > 0 else 1.0
    filled = int(frac * width)
    eta = progress.eta_s
    left = "left ~0:00" if done >= total else f"left ~{format_duration(eta)}" if eta is not None else "left ?"
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} trials  "
        f"best {_throughput(progress.best_throughput, progress.unit)}  failed {progress.failed}  "
        f"elapsed {format_duration(progress.elapsed_s)}  {left}"
    )


_SPINNER = "|/-\\"


class ProgressBar:
    """A ``progress`` callback for :func:`tune`: shows the latest ``Progress`` on ``stream``.

    On a terminal (``stream.isatty()``) the line is redrawn in place with ``\\r``; otherwise
    (a log file, CI) a full line is printed at most every ``interval_s`` seconds or whenever
    another 10% of the trials is done, and always for the last trial (or at :meth:`close`).

    >>> import io
    >>> from types import SimpleNamespace as P
    >>> out = io.StringIO()
    >>> with ProgressBar(out, width=4) as bar:
    ...     bar(P(trials_done=8, trials_total=8, best_throughput=1.5, unit="GFLOPS",
    ...           elapsed_s=3, eta_s=0, failed=0))
    >>> out.getvalue()
    '[####] 8/8 trials  best 1.5 GFLOPS  failed 0  elapsed 0:03  left ~0:00\\n'
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        width: int = 20,
        interval_s: float = 30.0,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.interval_s = interval_s
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self._clock = clock
        self._last: Any = None  # the latest Progress
        self._printed_done: int | None = None  # trials_done of the last line written (not TTY)
        self._printed_at = -math.inf
        self._printed_step = -1  # which tenth of the trials the last line was in
        self._drawn = 0  # length of the line on screen (TTY)
        self._spinner: threading.Thread | None = None  # turns while a stage runs (TTY)
        self._spinning = threading.Event()

    def __call__(self, progress: Any) -> None:
        if getattr(progress, "stage", None):
            self._stage(progress.stage)
            return
        self._stop_spinner()
        self._last = progress
        line = progress_line(progress, self.width)
        if self.tty:
            pad = " " * max(0, self._drawn - len(line))
            self.stream.write("\r" + line + pad)
            self.stream.flush()
            self._drawn = len(line)
            return
        done, total = progress.trials_done, progress.trials_total
        step = (10 * done) // total if total > 0 else 10
        now = self._clock()
        last = done >= total
        if last and self._printed_done == done:
            return
        if last or step > self._printed_step or now - self._printed_at >= self.interval_s:
            self._write_line(line, done, step, now)

    def _write_line(self, line: str, done: int, step: int, now: float) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()
        self._printed_done, self._printed_step, self._printed_at = done, step, now

    def _stage(self, text: str) -> None:
        """A line saying what the run is preparing; on a terminal a spinner with the seconds
        spent turns after it until the next stage or measurement."""
        self._stop_spinner()
        if self.tty and self._drawn:
            self.stream.write("\n")
            self._drawn = 0
        self.stream.write(f"{text} ...\n")
        self.stream.flush()
        if self.tty:
            self._spinning = threading.Event()
            self._spinner = threading.Thread(target=self._spin, args=(text, self._spinning), daemon=True)
            self._spinner.start()

    def _spin(self, text: str, stop: threading.Event) -> None:
        start = self._clock()
        for turn in itertools.count():
            if stop.wait(0.25):
                return
            line = f"{_SPINNER[turn % 4]} {text} ({format_duration(self._clock() - start)})"
            self.stream.write("\r" + line)
            self.stream.flush()
            self._drawn = len(line)

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            self._spinning.set()
            self._spinner.join()
            self._spinner = None
            if self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self._drawn = 0

    def close(self) -> None:
        """End the line: a newline on a terminal; the latest progress if not yet printed otherwise."""
        self._stop_spinner()
        if self.tty:
            if self._drawn:
                self.stream.write("\n")
                self.stream.flush()
                self._drawn = 0
        elif self._last is not None and self._printed_done != self._last.trials_done:
            self._write_line(progress_line(self._last, self.width), self._last.trials_done, 10, self._clock())

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------ tables


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("%x"))
    except ValueError:
        return False
    return True


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if math.isfinite(value) else str(value)
    return "" if value is None else str(value)


def _layout(rows: Iterable[Sequence[Any]], columns: Sequence[str] | None) -> tuple[list[list[str]], list[int], str]:
    """Cells as text, column widths and alignment (``r`` for all-number columns, else ``l``)."""
    cells = [[_cell(v) for v in row] for row in rows]
    ncols = len(columns) if columns is not None else max((len(r) for r in cells), default=0)
    for i, row in enumerate(cells):
        if len(row) != ncols:
            raise ValueError(f"table row {i} has {len(row)} cells, expected {ncols} (one per column)")
    header = list(columns) if columns is not None else []
    widths = [max([len(r[c]) for r in cells] + [len(header[c]) if header else 0]) for c in range(ncols)]
    align = "".join(
        "r" if any(r[c] for r in cells) and all(_is_number(r[c]) for r in cells if r[c]) else "l" for c in range(ncols)
    )
    return cells, widths, align


def _pad(text: str, width: int, align: str) -> str:
    return text.rjust(width) if align == "r" else text.ljust(width)


def format_table(rows: Iterable[Sequence[Any]], columns: Sequence[str] | None = None) -> str:
    """A plain text table: a header, a rule, then one line per row, columns two spaces apart.

    Floats print with one decimal; columns whose cells are all numbers are right-aligned.
    ``columns=None`` prints no header (a key/value listing).

    >>> print(format_table([("trials", 64), ("failed", 2)]))
    trials  64
    failed   2
    """
    cells, widths, align = _layout(rows, columns)
    lines = []
    if columns is not None:
        lines.append("  ".join(_pad(h, w, a) for h, w, a in zip(columns, widths, align)))
        lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(_pad(c, w, a) for c, w, a in zip(row, widths, align)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def format_markdown_table(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> str:
    """The same table in Markdown (``---:`` for number columns, ``|`` in cells escaped).

    >>> print(format_markdown_table([("GMM", 312.4)], ["workload", "GOPS"]))
    | workload |  GOPS |
    | -------- | ----: |
    | GMM      | 312.4 |
    """
    rows = [[_cell(v).replace("|", "\\|") for v in row] for row in rows]
    cells, widths, align = _layout(rows, columns)
    widths = [max(w, 3) for w in widths]
    rule = ["-" * (w - 1) + ":" if a == "r" else "-" * w for w, a in zip(widths, align)]
    lines = [
        "| " + " | ".join(_pad(h, w, a) for h, w, a in zip(columns, widths, align)) + " |",
        "| " + " | ".join(rule) + " |",
        *["| " + " | ".join(_pad(c, w, a) for c, w, a in zip(row, widths, align)) + " |" for row in cells],
    ]
    return "\n".join(lines)


def _failed_count(result: Any) -> int:
    failed = getattr(result, "failed", None)
    if isinstance(failed, int):
        return failed
    return sum(1 for r in getattr(result, "records", ()) if not getattr(r, "ok", True))


def final_summary(result: Any, files: Iterable[str | os.PathLike[str]] = ()) -> str:
    """The table printed when a tuning run ends, for a ``TuneResult``.

    Lists the workload, hardware, trials, records and failures, the best latency (with the
    statistic that made it) and throughput, how disturbed the host was, the wall time of the run,
    and the files written: the work dir's ``database/`` plus ``files`` (the CLI's curve and trace
    files).
    """
    records = list(getattr(result, "records", ()))
    latency = result.latency
    if latency is not None and math.isfinite(latency):
        statistic = getattr(result, "statistic", None)
        best_latency = f"{latency * 1e3:.4g} ms" + (f"  ({statistic} of its timed repeats)" if statistic else "")
        throughput = _throughput(result.throughput, result.unit)
    else:
        best_latency = throughput = "none: no trial succeeded"
    work_dir = Path(result.work_dir)
    written = [str(work_dir / "database") + os.sep, *(str(f) for f in files)]
    rows = [
        ("workload", f"{result.name}  (key {result.workload_key})"),
        ("hardware", str(result.hardware_key)),
        ("trials", f"{result.trials} measured (this run and any it resumed)"),
        *_search_rows(getattr(result, "search_stats", ())),
        ("records", f"{len(records)} ({_failed_count(result)} failed)"),
        ("best latency", best_latency),
        ("throughput", throughput),
        *([("host", host.line().removeprefix("host: "))] if (host := getattr(result, "host", None)) else []),
        ("tuning time", f"{format_duration(result.wall_seconds)}  ({result.wall_seconds:.1f} s)"),
        ("files written", written[0]),
        *[("", f) for f in written[1:]],
    ]
    return f"tuning finished: {result.name}\n" + "\n".join("  " + line for line in format_table(rows).splitlines())


def _search_rows(stats: Iterable[Any]) -> list[tuple[str, str]]:
    """Where the run's time went: making and scoring candidates vs measuring them."""
    stats = list(stats)
    if not stats:
        return []
    made = sum(s.sampled + s.mutants for s in stats)
    scored = sum(s.scored for s in stats)
    search_s = sum(s.search_seconds for s in stats)
    measure_s = sum(s.measure_seconds for s in stats)
    rate = f"{made / search_s:.1f}" if search_s > 0 else "n/a"
    return [
        ("search", f"{made} candidates made, {scored} scores, in {search_s:.1f} s ({rate} candidates/s)"),
        ("measuring", f"{sum(s.measured for s in stats)} candidates in {measure_s:.1f} s"),
    ]


# ------------------------------------------------------------------------------------ curve


def _curve_points(curve: Iterable[tuple[int, float | None]]) -> list[tuple[int, float]]:
    points = []
    for n, best in curve:
        y = math.nan if best is None or not math.isfinite(best) or best <= 0 else float(best)
        points.append((int(n), y))
    return points


def write_curve_csv(path: str | os.PathLike[str], curve: Iterable[tuple[int, float | None]], unit: str = "") -> Path:
    """Write ``trials,best_throughput,unit`` rows (empty throughput before the first success).

    ``curve`` is ``TuneResult.curve``: (trials done, best throughput so far) pairs.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["trials", "best_throughput", "unit"])
        for n, y in _curve_points(curve):
            w.writerow([n, "" if math.isnan(y) else f"{y:.6g}", unit])
    return path


def write_curve_png(
    path: str | os.PathLike[str],
    curve: Iterable[tuple[int, float | None]],
    title: str,
    unit: str,
    retimed_at: int | None = None,
) -> Path:
    """Plot the best throughput so far against trials (a step plot) into a PNG; return its path.
    ``retimed_at``: the trials done when the finalists were re-timed (``TuneResult.retimed_at``),
    marked with a dotted line; the curve's last point is the best after the re-timing.

    Uses matplotlib's Agg canvas directly (no pyplot, so no global backend is changed).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = _curve_points(curve)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(7, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = [n for n, _ in points]
    ys = [y for _, y in points]
    ok = [(n, y) for n, y in points if not math.isnan(y)]
    if ok:
        ax.step(xs, ys, where="post", color="tab:blue", linewidth=1.8)
        n_best, y_best = ok[-1]
        ax.plot([n_best], [y_best], "o", color="tab:blue")
        ax.annotate(f"{y_best:.1f} {unit}", (n_best, y_best), textcoords="offset points", xytext=(-4, 6), ha="right")
        ax.set_ylim(0, max(y for _, y in ok) * 1.15)
    else:
        ax.text(0.5, 0.5, "no successful trial yet", ha="center", va="center", transform=ax.transAxes)
    if retimed_at is not None:
        ax.axvline(retimed_at, color="tab:gray", linestyle=":", linewidth=1.2, label="finalists re-timed")
        ax.legend(loc="lower right")
    if xs:
        ax.set_xlim(0, max(xs) * 1.02 or 1)
    ax.set_xlabel("trials")
    ax.set_ylabel(f"best throughput ({unit})")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def write_latency_curve_png(
    path: str | os.PathLike[str], curve: Iterable[tuple[int, float]], measured: float | None, title: str
) -> Path:
    """Plot an estimated latency (seconds) against trials as a step plot in milliseconds, with a
    ``measured`` latency (seconds) as a marker at the last trial; return the PNG's path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    points = [(int(n), float(s) * 1e3) for n, s in curve if math.isfinite(s) and s > 0]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(7, 3.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if points:
        xs, ys = zip(*points, strict=True)
        ax.step(xs, ys, where="post", color="tab:blue", linewidth=1.8, label="estimated (sum of weight x best)")
        top = max(ys)
        if measured is not None and math.isfinite(measured):
            ax.plot([xs[-1]], [measured * 1e3], "s", color="tab:red", label=f"measured {measured * 1e3:.4g} ms")
            top = max(top, measured * 1e3)
        ax.set_ylim(0, top * 1.15)
        ax.set_xlim(0, max(xs) * 1.02 or 1)
        ax.legend(loc="lower left")
    else:
        ax.text(0.5, 0.5, "no estimate yet (a task has no successful trial)", ha="center", va="center",
                transform=ax.transAxes)  # fmt: skip
    ax.set_xlabel("trials (all tasks)")
    ax.set_ylabel("model latency (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path
