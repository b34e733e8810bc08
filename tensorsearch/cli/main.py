"""``tensorsearch workloads`` lists the paper's operators; ``tensorsearch show NAME`` prints one's IR;
``tensorsearch match NAME --hardware HW`` explains how its blocks map onto the target's tensor intrinsics;
``tensorsearch tune NAME --hardware HW --trials N --work-dir DIR`` searches for its fastest schedule."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..target import load


def _cmd_workloads(args: argparse.Namespace) -> int:
    from .. import workloads

    rows = [(name, str(len(workloads.shapes(name))), workloads.describe(name)) for name in workloads.names()]
    width = max(len(r[0]) for r in rows)
    print(f"{'name':<{width}}  shapes  computation")
    for name, count, text in rows:
        print(f"{name:<{width}}  {count:>6}  {text}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from .. import workloads
    from ..arith import verify

    wl = workloads.get(args.name, args.index, args.dtype)
    func = verify(wl.func)
    header = f"# {wl.name}[{wl.index}] {wl.dtype} args={wl.args}"
    if args.trace:
        from ..schedule import Schedule, ScheduleError, Trace

        try:
            with open(args.trace) as f:
                trace = Trace.from_json(f.read())
        except OSError as err:
            raise ValueError(f"cannot read trace file {args.trace}: {err.strerror}") from None
        except ValueError as err:
            raise ValueError(f"trace file {args.trace}: {err}") from None
        sch = Schedule(func, hardware=load(args.hardware))
        try:
            trace.apply(sch)
        except ScheduleError as err:
            raise ValueError(f"trace file {args.trace} does not apply to {wl.name}: {err}") from None
        func = sch.func
        header += f" after the {len(trace)} instructions of {args.trace}"
    print(header)
    print(func.script())
    return 0


def _cmd_match(args: argparse.Namespace) -> int:
    from .. import workloads
    from ..ir import BlockRealize, post_order_visit
    from ..target import match

    wl = workloads.get(args.name, args.index, args.dtype)
    hw = load(args.hardware)
    intrinsics = [i for i in hw.intrinsics if i.role == "compute"]
    blocks: list[str] = []

    def visit(n: object) -> None:
        if isinstance(n, BlockRealize) and n.block.name != "root" and n.block.name not in blocks:
            blocks.append(n.block.name)

    post_order_visit(wl.func.body, visit)
    if args.block is not None:
        if args.block not in blocks:
            raise ValueError(f"workload {wl.name} has no block {args.block!r}; its blocks are: {', '.join(blocks)}")
        blocks = [args.block]
    skipped = [i.name for i in hw.intrinsics if i.role != "compute"]
    print(f"# {wl.name}[{wl.index}] {wl.dtype} args={wl.args} on {hw.name}: {len(intrinsics)} compute intrinsic(s)")
    if skipped:
        print(f"# not matched on their own (load/init/store members of a unit): {', '.join(skipped)}")
    for intrin in intrinsics:
        for name in blocks:
            print()
            print(match(wl.func, name, intrin))
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}")
    return value


def _argument(name: str, fn, *args):
    """``fn(*args)``, its ValueError reworded to name the command-line argument at fault."""
    try:
        return fn(*args)
    except ValueError as err:
        raise ValueError(f"argument {name}: {err}") from None


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


def _best_trace_script(trace, wl, hw, hardware_arg: str, result) -> str:
    return "\n".join(
        [
            f'"""The best schedule `tensorsearch tune` found for {wl.key} on {hw.name}: '
            f'{result.latency * 1e3:.4g} ms, {result.throughput:.1f} {result.unit}."""',
            "",
            "import tensorsearch",
            "from tensorsearch import workloads",
            "from tensorsearch.schedule import Schedule",
            "",
            f"sch = Schedule(workloads.get({wl.name!r}, {wl.index!r}, {wl.dtype!r}).func)",
            trace.as_python(),
            f"mod = tensorsearch.build(sch.func, {hardware_arg!r})",
            "",
        ]
    )


def _cmd_tune(args: argparse.Namespace) -> int:
    from .. import workloads
    from ..search.database import Database
    from ..search.workdir import WorkDirBusy, hold_work_dir

    _argument("NAME", workloads.shapes, args.name)
    _argument("--dtype", workloads.get, args.name, 0, args.dtype)
    wl = _argument("--index", workloads.get, args.name, args.index, args.dtype)
    hw = _argument("--hardware", load, args.hardware)
    work_dir = Path(args.work_dir or Path("runs") / f"{wl.name}-{wl.index}-{wl.dtype}-{hw.name}")
    for path in args.transfer:  # a bad --transfer path is an error before Ray starts
        Database.open_existing(path).close()
    try:
        with hold_work_dir(work_dir):  # held while tuning and while writing the curve and best trace
            return _tune_held(args, wl, hw, work_dir)
    except WorkDirBusy as busy:
        print(f"tensorsearch tune: error: {busy.message('--work-dir')}", file=sys.stderr)
        return 1


def _tune_held(args: argparse.Namespace, wl, hw, work_dir: Path) -> int:
    from .. import search
    from ..search.report import ProgressBar, final_summary, write_curve_csv, write_curve_png

    bar = ProgressBar(sys.stderr)
    try:
        result = search.tune(
            wl,
            hw,
            trials=args.trials,
            work_dir=work_dir,
            seed=args.seed,
            address=args.address,
            progress=bar,
            transfer_from=args.transfer,
        )
    except KeyboardInterrupt:
        bar.close()
        n = _records_kept(work_dir, wl.func, hw)
        print(
            f"interrupted: {n} records kept in {work_dir / 'database'}; run the same command again to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        bar.close()
    work_dir.mkdir(parents=True, exist_ok=True)
    files = [write_curve_csv(work_dir / "tuning_curve.csv", result.curve, result.unit)]
    title = f"{wl.key} on {hw.name}: best throughput vs trials"
    try:
        files.append(write_curve_png(work_dir / "tuning_curve.png", result.curve, title, result.unit))
    except ImportError:
        print("tensorsearch tune: note: matplotlib is not installed, so no tuning_curve.png", file=sys.stderr)
    if result.trace is not None and math.isfinite(result.latency):
        for name, text in [
            ("best_trace.json", result.trace.as_json_text()),
            ("best_trace.py", _best_trace_script(result.trace, wl, hw, args.hardware, result)),
        ]:
            (work_dir / name).write_text(text)
            files.append(work_dir / name)
    print(final_summary(result, files))
    if result.transferred:
        print(f"  transfer       cost model pre-trained on {result.transferred} records of other workloads")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("workloads", help="list the paper's operator workloads")
    p.set_defaults(fn=_cmd_workloads)
    p = sub.add_parser("show", help="print a workload's TensorIR")
    p.add_argument("name", help="workload name, e.g. GMM (see `tensorsearch workloads`)")
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16 or int8")
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
    p.add_argument("name", help="workload name, e.g. GMM (see `tensorsearch workloads`)")
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", default="int8", help="int8 (default), float16 or float32")
    p.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. x86-emeraldrapids or host")
    p.add_argument("--block", help="match only this block (default: every block)")
    p.set_defaults(fn=_cmd_match)
    p = sub.add_parser("tune", help="search for a workload's fastest schedule on a target (uses Ray)")
    p.add_argument("name", metavar="NAME", help="workload name, e.g. GMM (see `tensorsearch workloads`)")
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16 or int8")
    p.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. x86-emeraldrapids or host")
    p.add_argument("--trials", type=_positive_int, required=True, help="candidates to measure, e.g. 256")
    p.add_argument(
        "--work-dir",
        help="directory for the database, the tuning curve and the best trace; reusing one resumes its run; "
        "one run at a time: a second on a busy work dir is refused (default: runs/NAME-INDEX-DTYPE-HARDWARE)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); the same seed gives the same search")
    p.add_argument("--address", help="Ray cluster address to join (default: start a local one)")
    p.add_argument(
        "--transfer",
        metavar="DB",
        action="append",
        default=[],
        help="pre-train the cost model on this database's records of other workloads on the same hardware "
        "(a work dir or its database directory; repeatable; the work dir's own database is always used)",
    )
    p.set_defaults(fn=_cmd_tune)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        print(f"tensorsearch {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
