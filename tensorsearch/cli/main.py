"""``tensorsearch workloads`` lists the paper's operators; ``tensorsearch show NAME`` prints one's IR;
``tensorsearch match NAME --hardware HW`` explains how its blocks map onto the target's tensor intrinsics."""

from __future__ import annotations

import argparse
import sys


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
    from ..ir import verify

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
        sch = Schedule(func)
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
    from .. import hardware, workloads
    from ..intrin import match
    from ..ir import BlockRealize, post_order_visit

    wl = workloads.get(args.name, args.index, args.dtype)
    hw = hardware.load(args.hardware)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorsearch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("workloads", help="list the paper's operator workloads")
    p.set_defaults(fn=_cmd_workloads)
    p = sub.add_parser("show", help="print a workload's TensorIR")
    p.add_argument("name", help="workload name, e.g. GMM (see `tensorsearch workloads`)")
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16 or int8")
    p.add_argument("--trace", metavar="FILE.json", help="apply a schedule trace (JSON, as Trace.as_json writes) first")
    p.set_defaults(fn=_cmd_show)
    p = sub.add_parser("match", help="explain how a workload's blocks map onto a target's tensor intrinsics")
    p.add_argument("name", help="workload name, e.g. GMM (see `tensorsearch workloads`)")
    p.add_argument("--index", type=int, default=0, help="shape index 0-3 (default 0)")
    p.add_argument("--dtype", default="int8", help="int8 (default), float16 or float32")
    p.add_argument("--hardware", required=True, help="hardware descriptor name or path, e.g. x86-emeraldrapids or host")
    p.add_argument("--block", help="match only this block (default: every block)")
    p.set_defaults(fn=_cmd_match)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, KeyError, TypeError) as err:
        print(f"tensorsearch {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
