"""``tensorsearch workloads`` lists the paper's operators; ``tensorsearch show NAME`` prints one's IR
(``tensorsearch show WORK_DIR`` lists a tuning work dir's records);
``tensorsearch match NAME --hardware HW`` explains how its blocks map onto the target's tensor intrinsics;
``tensorsearch tune NAME --hardware HW --trials N --work-dir DIR`` searches for its fastest schedule;
``tensorsearch model tasks|run MODEL`` lists a whole model's tasks, or compiles and runs it beside onnxruntime."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import traceback
import warnings
from pathlib import Path

from ..target import load
from .common import (
    DEFAULT_DTYPE,
    DTYPE_HELP,
    add_address_argument,
    add_allow_other_cpu_argument,
    argument,
    check_work_dir,
    positive_int,
)
from .model import add_parsers as add_model_parsers
from .programs import Program, is_program_file, load_program


def _cmd_workloads(args: argparse.Namespace) -> int:
    """Each workload: its computation and dtypes, then every shape, index by index, with the
    arguments named."""
    from .. import workloads

    for n, name in enumerate(workloads.names()):
        if n:
            print()
        print(f"{name}: {workloads.describe(name)}")
        print(f"  dtypes: {', '.join(workloads.dtypes(name))}")
        arg_names = workloads.arg_names(name)
        for index, shape in enumerate(workloads.shapes(name)):
            named = ", ".join(f"{a}={v}" for a, v in zip(arg_names, shape, strict=True))
            print(f"  {index}: {named}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    if (Path(args.name) / "database" / "tuning_records.jsonl").is_file() and args.trace is None:
        return _show_work_dir(Path(args.name))
    prog = _program(args, trace=args.trace)
    func = prog.func
    header = f"# {prog.label}"
    if args.trace:
        from ..schedule import Schedule, ScheduleError, Trace

        try:
            with open(args.trace, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) else "it is not text"
            raise ValueError(f"cannot read trace file {args.trace}: {why}") from None
        try:
            json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"trace file {args.trace} is not JSON (line {err.lineno}, column {err.colno}: {err.msg}); "
                "--trace takes the JSON a tune writes (best_trace.json in its work dir, Trace.as_json)"
            ) from None
        try:
            trace = Trace.from_json(text)
        except ValueError as err:
            raise ValueError(f"trace file {args.trace}: {err}") from None
        sch = Schedule(func, hardware=load(args.hardware))
        try:
            trace.apply(sch)
        except ScheduleError as err:
            raise ValueError(f"trace file {args.trace} does not apply to {prog.label}: {err}") from None
        func = sch.func
        header += f" after the {len(trace)} instructions of {args.trace}"
    print(header)
    print(func.script())
    return 0


def _show_work_dir(work_dir: Path) -> int:
    """List a work dir's records: per workload and hardware, how many, the best latency and the
    CPU that timed the best, with a warning where that CPU is not the descriptor's."""
    from ..search.database import Database
    from ..search.report import format_table

    db = Database.open_existing(work_dir)
    try:
        rows, others = [], []
        for wk, hk in db.pairs():
            records = db.records(wk, hk)
            best = db.best(wk, hk, 1)
            name = db.workload_name(wk) or wk
            hw_name = hk.rsplit("-", 1)[0]
            ms = f"{db.latency(best[0]) * 1e3:.4g}" if best else "-"
            on = best[0].measured_on if best else None
            failed = sum(1 for r in records if not r.ok)
            rows.append((name, hw_name, len(records), failed, ms, "-" if on is None else on.describe()))
            hw = _descriptor_of(hk) if on is not None else None
            why = None if hw is None or on is None else hw.why_not_machine(on, None)
            if why is not None:
                others.append(f"the best record of {name} for {hw_name} was timed on another machine: {why}")
    finally:
        db.close()
    print(f"# {work_dir / 'database'}: {len(db)} records of {len(rows)} workload-hardware pairs")
    print(format_table(rows, ["workload", "hardware", "records", "failed", "best ms", "timed on"]))
    for line in others:
        warnings.warn(f"{line}; its latency is that machine's", stacklevel=2)
    return 0


def _descriptor_of(hardware_key: str):
    """The descriptor (a shipped one, or this machine's ``host``) whose hardware key is
    ``hardware_key``; None when none is."""
    from ..search.database import hardware_key as key_of
    from ..target import HardwareError, available, host

    name = hardware_key.rsplit("-", 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # host(): "no shipped descriptor matches" says nothing here
        try:
            found = [load(name)] if name in available() else []
        except HardwareError:
            found = []
        for hw in [*found, host()]:
            if key_of(hw) == hardware_key:
                return hw
    return None


def _program(args: argparse.Namespace, trace: str | None = None) -> Program:
    """The program NAME names: a workload (``--index``, ``--dtype``, by default DEFAULT_DTYPE) or a
    user's file (``--func``). Without ``--dtype``, a trace written by ``tune`` into a work dir gives
    the workload's form."""
    if is_program_file(args.name):
        return argument("NAME", load_program, args.name, args.func)
    from .. import workloads

    argument("NAME", workloads.shapes, args.name)
    if args.dtype is None and trace is not None and (found := _tuned_workload(Path(trace), args.name)):
        return found
    dtype = args.dtype or DEFAULT_DTYPE
    argument("--dtype", workloads.get, args.name, 0, dtype)
    wl = argument("--index", workloads.get, args.name, args.index, dtype)
    return Program(wl.func, f"{wl.name}-{wl.index}-{wl.dtype}", f"{wl.name}[{wl.index}] {wl.dtype} args={wl.args}", wl)


def dtype_note(prog: Program, hw, dtype_given: bool) -> str | None:
    """When ``--dtype`` was not given and none of ``hw``'s compute intrinsics takes the workload's
    default dtype but some take another dtype of the workload: one sentence naming that dtype
    (tune and match print it as a warning rather than switch dtype on their own)."""
    from .. import workloads

    wl = prog.workload
    if dtype_given or wl is None:
        return None
    offered: dict[str, list[str]] = {}
    for intrin in hw.intrinsics:
        if intrin.role != "compute":
            continue
        form = _form_of({str(o.dtype) for o in intrin.operands if o.role == "input"})
        if form is not None:
            offered.setdefault(form, []).append(intrin.name)
    usable = [f for f in workloads.dtypes(wl.name) if f in offered]
    if not usable or wl.dtype in offered:
        return None
    takes = "; ".join(f"{', '.join(offered[f])} take{'s' if len(offered[f]) == 1 else ''} {f}" for f in usable)
    return (
        f"{wl.name} {wl.dtype} (the default): none of {hw.name}'s tensor intrinsics takes {wl.dtype}, so none is "
        f"used; {takes}: add --dtype {usable[0]} to use them (or --dtype {wl.dtype} to keep {wl.dtype} and "
        "silence this)"
    )


def _form_of(input_dtypes: set[str]) -> str | None:
    """The workload dtype form whose operands an intrinsic with these input dtypes takes."""
    if input_dtypes & {"int8", "uint8"}:
        return "int8"
    if len(input_dtypes) == 1:
        (dtype,) = input_dtypes
        return dtype if dtype in ("float32", "float16", "bfloat16", "int16") else None
    return None


def _tuned_workload(trace: Path, name: str) -> Program | None:
    """The one workload called ``name`` in the database of the work dir ``trace`` sits in."""
    from ..search.database import Database, DatabaseError

    if not (trace.parent / "database").is_dir():
        return None
    try:
        db = Database.open_existing(trace.parent)
    except DatabaseError:
        return None
    try:
        keys = [k for k in db.workload_keys() if db.workload_name(k).split("/")[0] == name]
        if len(keys) != 1:
            return None
        label = db.workload_name(keys[0])
        return Program(
            db.workload(keys[0]), label.replace("/", "-"), f"{label} (from {trace.parent / 'database'})", None
        )
    finally:
        db.close()


def _cmd_match(args: argparse.Namespace) -> int:
    from ..ir import BlockRealize, post_order_visit
    from ..target import match

    prog = _program(args)
    hw = argument("--hardware", load, args.hardware)
    if (note := dtype_note(prog, hw, args.dtype is not None)) is not None:
        warnings.warn(note, stacklevel=1)
    intrinsics = [i for i in hw.intrinsics if i.role == "compute"]
    blocks: list[str] = []

    def visit(n: object) -> None:
        if isinstance(n, BlockRealize) and n.block.name != "root" and n.block.name not in blocks:
            blocks.append(n.block.name)

    post_order_visit(prog.func.body, visit)
    if args.block is not None:
        if args.block not in blocks:
            raise ValueError(f"{prog.label} has no block {args.block!r}; its blocks are: {', '.join(blocks)}")
        blocks = [args.block]
    skipped = [i.name for i in hw.intrinsics if i.role != "compute"]
    print(f"# {prog.label} on {hw.name}: {len(intrinsics)} compute intrinsic(s)")
    if skipped:
        print(f"# not matched on their own (load/init/store members of a unit): {', '.join(skipped)}")
    for intrin in intrinsics:
        for name in blocks:
            print()
            print(match(prog.func, name, intrin))
    return 0


def _records_kept(work_dir: Path, wl_func, hw) -> int:
    """How many tuning records of this workload and hardware the work dir's database holds."""
    path = work_dir / "database" / "tuning_records.jsonl"
    if not path.exists():
        return 0
    try:
        from ..search.database import Database, hardware_key, workload_key

        return len(Database(work_dir).records(workload_key(wl_func), hardware_key(hw)))
    except Exception:  # an interrupted run must still report: count every line then
        return sum(1 for line in path.read_text().splitlines() if line.strip())


def _best_trace_script(trace, prog: Program, args: argparse.Namespace, hw, result) -> str:
    wl = prog.workload
    if wl is not None:
        source = [
            "from tensorsearch import workloads",
            "",
            f"func = workloads.get({wl.name!r}, {wl.index!r}, {wl.dtype!r}).func",
        ]
    else:
        path, func_name = prog.source or (str(Path(args.name)), None)
        source = [
            "from tensorsearch.cli.programs import load_program",
            "",
            f"func = load_program({str(Path(path).resolve())!r}, {func_name!r}).func",
        ]
    return "\n".join(
        [
            f'"""The best schedule `tensorsearch tune` found for {prog.label} on {hw.name}: '
            f'{result.latency * 1e3:.4g} ms, {result.throughput:.1f} {result.unit}."""',
            "",
            "import tensorsearch",
            "from tensorsearch.schedule import Schedule",
            *source,
            f"hardware = tensorsearch.target.load({args.hardware!r})",
            "sch = Schedule(func, hardware=hardware)",
            trace.as_python(),
            "mod = tensorsearch.build(sch.func, hardware)",
            "",
        ]
    )


def _cmd_tune(args: argparse.Namespace) -> int:
    from ..search.database import Database
    from ..search.tuning.workdir import WorkDirBusy, hold_work_dir

    prog = _program(args)
    hw = argument("--hardware", load, args.hardware)
    if (note := dtype_note(prog, hw, args.dtype is not None)) is not None:
        warnings.warn(note, stacklevel=1)
    work_dir = Path(args.work_dir or Path("runs") / f"{prog.name}-{hw.name}")
    argument("--work-dir", check_work_dir, work_dir)
    for path in args.transfer:  # a bad --transfer path is an error before Ray starts
        Database.open_existing(path).close()
    print(f"tensorsearch tune: {prog.label} on {hw.name}, {args.trials} trials, work dir {work_dir}", file=sys.stderr)
    try:
        with hold_work_dir(work_dir):  # held while tuning and while writing the curve and best trace
            return _tune_held(args, prog, hw, work_dir)
    except WorkDirBusy as busy:
        print(f"tensorsearch tune: error: {busy.message('--work-dir')}", file=sys.stderr)
        return 1


def _tune_held(args: argparse.Namespace, prog: Program, hw, work_dir: Path) -> int:
    from .. import search
    from ..search.report import ProgressBar, final_summary, write_curve_csv, write_curve_png

    bar = ProgressBar(sys.stderr)
    try:
        result = search.tune(
            prog.workload or prog.func,
            hw,
            trials=args.trials,
            work_dir=work_dir,
            seed=args.seed,
            address=args.address,
            progress=bar,
            transfer_from=args.transfer,
            allow_other_cpu=args.allow_other_cpu,
        )
    except KeyboardInterrupt:
        bar.close()
        n = _records_kept(work_dir, prog.func, hw)
        print(
            f"interrupted: {n} records kept in {work_dir / 'database'}; run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        bar.close()
    work_dir.mkdir(parents=True, exist_ok=True)
    files = [write_curve_csv(work_dir / "tuning_curve.csv", result.curve, result.unit)]
    title = f"{prog.label} on {hw.name}: best throughput vs trials"
    try:
        files.append(
            write_curve_png(work_dir / "tuning_curve.png", result.curve, title, result.unit, result.retimed_at)
        )
    except ImportError:
        print("tensorsearch tune: note: matplotlib is not installed, so no tuning_curve.png", file=sys.stderr)
    if result.trace is not None and math.isfinite(result.latency):
        for name, text in [
            ("best_trace.json", result.trace.as_json_text()),
            ("best_trace.py", _best_trace_script(result.trace, prog, args, hw, result)),
        ]:
            (work_dir / name).write_text(text)
            files.append(work_dir / name)
    print(final_summary(result, files))
    if result.transferred:
        print(f"  transfer       cost model pre-trained on {result.transferred} records of other workloads")
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    from ..search.experiment import load_experiment, run_experiment, write_results

    exp = load_experiment(args.file)  # every mistake in the file, before anything runs
    print(f"tensorsearch experiment: {exp.name}: {len(exp.cells())} cells, output {exp.output}", file=sys.stderr)
    try:
        rows = run_experiment(exp, progress=lambda text: print(text, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("interrupted: every measured record is kept; run the same command again to resume", file=sys.stderr)
        return 130
    files = write_results(exp, rows)
    print((exp.output / "results.md").read_text())
    print("files: " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0 if all(str(r.get("status", "")).startswith(("done", "every", "design")) for r in rows) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorsearch", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    common = argparse.ArgumentParser(add_help=False)  # --debug after the command too
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_parser = sub.add_parser
    sub.add_parser = lambda *a, **k: _add_parser(*a, parents=[common], **k)  # type: ignore[method-assign]
    p = sub.add_parser("workloads", help="list the paper's operator workloads")
    p.set_defaults(fn=_cmd_workloads)
    p = sub.add_parser("show", help="print a workload's TensorIR, or list a tuning work dir's records")
    p.add_argument(
        "name",
        metavar="NAME",
        help="a workload name such as GMM (see `tensorsearch workloads`), or a file: a .py file defining PrimFuncs "
        "or script text; or a tuning work dir: its records, best latencies and the CPUs that timed them",
    )
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", help=DTYPE_HELP)
    p.add_argument("--func", help="the PrimFunc of a .py NAME that defines several")
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="apply a schedule trace (JSON as Trace.as_json writes it; format version 0 or 1) first",
    )
    p.add_argument(
        "--hardware", default="host", help="hardware whose intrinsics the trace's tensorize steps name (default host)"
    )
    p.set_defaults(fn=_cmd_show)
    p = sub.add_parser("match", help="explain how a workload's blocks map onto a target's tensor intrinsics")
    p.add_argument(
        "name",
        metavar="NAME",
        help="a workload name such as GMM (see `tensorsearch workloads`), or a file: a .py file defining PrimFuncs or script text",
    )
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", help=DTYPE_HELP)
    p.add_argument("--func", help="the PrimFunc of a .py NAME that defines several")
    p.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. x86-emeraldrapids or host")
    p.add_argument("--block", help="match only this block (default: every block)")
    p.set_defaults(fn=_cmd_match)
    p = sub.add_parser("tune", help="search for a workload's fastest schedule on a target (uses Ray)")
    p.add_argument(
        "name",
        metavar="NAME",
        help="a workload name such as GMM (see `tensorsearch workloads`), or a file: a .py file defining PrimFuncs or script text",
    )
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", help=DTYPE_HELP)
    p.add_argument("--func", help="the PrimFunc of a .py NAME that defines several")
    p.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. x86-emeraldrapids or host")
    p.add_argument("--trials", type=positive_int, required=True, help="candidates to measure, e.g. 256")
    p.add_argument(
        "--work-dir",
        help="directory for the database, the tuning curve and the best trace; reusing one resumes its run; "
        "one run at a time: a second on a busy work dir is refused (default: runs/NAME-INDEX-DTYPE-HARDWARE for "
        "a workload, runs/PROGRAM-HARDWARE for a file, PROGRAM the name tune prints)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); the same seed gives the same search")
    add_address_argument(p)
    p.add_argument(
        "--transfer",
        metavar="DB",
        action="append",
        default=[],
        help="pre-train the cost model on this database's records of other workloads on the same hardware "
        "(a work dir or its database directory; repeatable; the work dir's own database is always used)",
    )
    add_allow_other_cpu_argument(p)
    p.set_defaults(fn=_cmd_tune)
    p = sub.add_parser(
        "experiment", help="run (or resume) an experiment file: operators and models x hardware x seeds, with tables"
    )
    p.add_argument("file", metavar="FILE.yaml", help="the experiment (see docs/search.md, 'Experiments as files')")
    p.set_defaults(fn=_cmd_experiment)
    add_model_parsers(sub)
    return parser


# mistakes in what the user gave (exit code 2); anything else that stops a command is a failed
# run (exit code 1). argparse's own usage errors exit with 2 too.
_INPUT_ERRORS = (ValueError, KeyError, TypeError, LookupError)
_KNOWN_ERRORS = (*_INPUT_ERRORS, OSError, RuntimeError)  # others are bugs: the class is shown too


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    catch_stop_signals()
    warnings.showwarning = _one_line_warning(args.command)
    try:
        return args.fn(args)
    except KeyboardInterrupt as stop:
        print(f"tensorsearch {args.command}: {_stop_reason(stop)}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `tensorsearch match ... | head`: the reader left; say nothing more
        _silence_stdout()
        return 0
    except Exception as err:
        code = 2 if isinstance(err, _INPUT_ERRORS) else 1
        if args.debug:  # the traceback, and the same exit code as without --debug
            traceback.print_exc()
        print(f"tensorsearch {args.command}: error: {_error_text(err, args.command)}", file=sys.stderr)
        if not isinstance(err, _KNOWN_ERRORS) and not args.debug:
            print(
                f"tensorsearch {args.command}: this is a bug; run again with --debug for the traceback", file=sys.stderr
            )
        return code


def catch_stop_signals() -> None:
    """SIGTERM and SIGHUP end a command the way Ctrl-C does (KeyboardInterrupt: records kept, one
    line, exit code 130); ``init_ray`` keeps these handlers when Ray starts."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _one_line_warning(command: str):
    def show(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"tensorsearch {command}: warning: {message}", file=sys.stderr)

    return show


def _stop_reason(stop: KeyboardInterrupt) -> str:
    return f"stopped by {stop.args[0]}" if stop.args else "interrupted"


def _error_text(err: BaseException, command: str) -> str:
    text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
    text = str(text).strip().removeprefix(f"{command}: ") or type(err).__name__
    return text if isinstance(err, _KNOWN_ERRORS) else f"{type(err).__name__}: {text}"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
