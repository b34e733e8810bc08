"""The schedule core: lookups, transactions, error detail levels, traces."""

import json
import subprocess
import sys

import pytest

from tensorsearch import workloads
from tensorsearch.cli import main
from tensorsearch.schedule import (
    INSTRUCTION_KINDS,
    BlockNotFound,
    BlockRV,
    InvalidArgument,
    LoopRV,
    Schedule,
    ScheduleError,
    Trace,
)

C2D = workloads.reduced("C2D", 1).func


def test_lookups():
    sch = Schedule(C2D)
    conv = sch.get_block("conv2d_nhwc")
    pad = sch.get_block("PadInput")
    loops = sch.get_loops(conv)
    assert [sch.get(lp).loop_var.name for lp in loops] == ["nn", "hh", "ww", "cc", "rh", "rw", "rc"]
    assert all(isinstance(lp, LoopRV) for lp in loops)
    assert [sch.get(b).name for b in sch.get_producers(conv)] == ["PadInput"]
    assert [sch.get(b).name for b in sch.get_consumers(pad)] == ["conv2d_nhwc"]
    assert sch.get_consumers(conv) == []
    assert [sch.get(b).name for b in sch.get_child_blocks(sch.get_block("root"))] == ["PadInput", "conv2d_nhwc"]
    assert [sch.get(b).name for b in sch.get_child_blocks(loops[0])] == ["conv2d_nhwc"]


def test_failed_primitive_leaves_schedule_untouched():
    sch = Schedule(C2D)
    sch.get_block("PadInput")
    before_func, before_len = sch.func, len(sch.trace)
    with pytest.raises(BlockNotFound, match="no block named conv; the program has blocks root, PadInput, conv2d_nhwc"):
        sch.get_block("conv")
    with pytest.raises(InvalidArgument, match="expected a BlockRV, got LoopRV"):
        sch.get_loops(sch.get_loops(sch.get_block("PadInput"))[0])
    assert sch.func is before_func
    assert len(sch.trace) == before_len + 2  # the two successful lookups inside the last call


def test_wrong_argument_count_is_invalid_argument():
    sch = Schedule(C2D)
    with pytest.raises(InvalidArgument, match="get_block: missing a required argument: 'name'"):
        sch.get_block()


def test_detail_level_adds_the_ir_fragment():
    sch = Schedule(C2D)
    loops = sch.get_loops(sch.get_block("conv2d_nhwc"))
    before = sch.func
    with pytest.raises(ScheduleError) as info:
        sch.parallel(loops[-1])
    message = str(info.value)
    first, _, rest = message.partition("\n")
    assert "conv2d_nhwc" in first and "rc" in first and "reduction cannot run in parallel" in first
    assert "for" in rest or "T.block" in rest  # the fragment
    assert sch.func is before
    fast = Schedule(C2D, error_detail="fast")
    with pytest.raises(ScheduleError) as info:
        fast.parallel(fast.get_loops(fast.get_block("conv2d_nhwc"))[-1])
    assert "\n" not in str(info.value)


def test_error_detail_levels():
    for level, expect in [("fast", "no block named x;"), ("none", "get_block failed: BlockNotFound")]:
        sch = Schedule(C2D, error_detail=level)
        with pytest.raises(BlockNotFound) as info:
            sch.get_block("x")
        assert str(info.value).startswith(expect)
    with pytest.raises(ValueError, match="error_detail must be one of"):
        Schedule(C2D, error_detail="verbose")


def test_copy_is_independent():
    sch = Schedule(C2D)
    b = sch.get_block("conv2d_nhwc")
    other = sch.copy()
    other.get_loops(b)
    assert len(other.trace) == 2 and len(sch.trace) == 1
    assert other.get(b).name == "conv2d_nhwc"


def test_trace_json_is_plain_and_deterministic():
    sch = Schedule(C2D)
    b = sch.get_block("conv2d_nhwc")
    sch.get_loops(b)
    sch.get_producers(b)
    sch.enter_postproc()
    data = sch.trace.as_json()
    assert json.loads(json.dumps(data)) == data
    assert data["format"] == "tensorsearch.trace/1" and list(data) == ["format", "insts"]
    assert data["insts"][0] == ["get_block", {"name": "conv2d_nhwc"}, ["b0"], None]
    assert data["insts"][1][1] == {"block": {"rv": "b0"}}
    assert sch.trace.as_json_text() == Trace.from_json(sch.trace.as_json_text()).as_json_text()
    assert sch.trace.as_python().splitlines()[:2] == [
        "b0 = sch.get_block(name='conv2d_nhwc')",
        "l1, l2, l3, l4, l5, l6, l7 = sch.get_loops(block=b0)",
    ]
    # lookups whose outputs nothing uses are dead; enter_postproc is kept
    assert [i.kind.name for i in sch.trace.simplified()] == ["enter_postproc"]
    assert len(sch.trace.simplified(remove_postproc=True)) == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"a": 1}, 'a trace is an object with "format": "tensorsearch.trace/1" .* got an object with no format'),
        ("7", "got a JSON int"),
        ({"format": "other/1", "insts": []}, "got an object with format 'other/1'"),
        ({"format": "tensorsearch.trace/1"}, 'a version-1 trace needs an "insts" list of instructions, got None'),
        (
            {"format": "tensorsearch.trace/2", "insts": []},
            r"trace format tensorsearch.trace/2 is newer than this tensorsearch reads \(versions 0 to 1\)",
        ),
        ({"format": "tensorsearch.trace/1", "insts": [["nope", {}, [], None]]}, "unknown kind 'nope'"),
        ([["nope", {}, [], None]], "trace instruction 0 has unknown kind 'nope'"),
        (
            [["get_block", {"nme": "C"}, ["b0"], None]],
            r"trace instruction 0 \(get_block\) has unknown arguments \['nme'\]",
        ),
        (
            [["get_loops", {"block": {"rv": "b9"}}, ["l0"], None]],
            "trace uses random variable b9 before any instruction defines it",
        ),
        ([["get_block"]], "trace instruction 0 must be"),
    ],
)
def test_trace_json_errors(data, message):
    with pytest.raises(ValueError, match=message):
        Trace.from_json(data)


def test_every_primitive_is_a_registered_instruction():
    for name, kind in INSTRUCTION_KINDS.items():
        assert callable(getattr(Schedule, name)), name
        assert kind.name == name
    for name in ("get_block", "get_loops", "get_child_blocks", "get_producers", "get_consumers", "enter_postproc"):
        assert name in INSTRUCTION_KINDS


@pytest.mark.slow
def test_replay_across_processes_gives_identical_hash(tmp_path):
    sch = Schedule(C2D, seed=7)
    conv = sch.get_block("conv2d_nhwc")
    _nn, hh, ww, cc, rh, rw, rc = sch.get_loops(conv)
    c0, c1 = sch.split(cc, sch.sample_perfect_tile(cc, n=2, max_innermost_factor=4))
    sch.reorder(c0, rh, rw, rc, c1)
    sch.compute_at(sch.get_block("PadInput"), ww)
    sch.decompose_reduction(conv, rh)
    sch.parallel(hh)
    sch.vectorize(c1)
    path = tmp_path / "trace.json"
    path.write_text(sch.trace.as_json_text())
    code = (
        "import sys; from tensorsearch import workloads; from tensorsearch.schedule import Schedule, Trace; "
        "from tensorsearch.ir import structural_hash; s = Schedule(workloads.reduced('C2D', 1).func); "
        f"Trace.from_json(open({str(path)!r}).read()).apply(s); print(structural_hash(s.func))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    from tensorsearch.ir import structural_hash

    assert out == str(structural_hash(sch.func))


def test_cli_show_with_trace(tmp_path, capsys):
    sch = Schedule(workloads.get("GMM", 0).func)
    sch.get_block("Z")
    path = tmp_path / "t.json"
    path.write_text(sch.trace.as_json_text())
    assert main(["show", "GMM", "--trace", str(path)]) == 0
    assert "after the 1 instructions of" in capsys.readouterr().out
    path.write_text('[["get_block", {"name": "nope"}, ["b0"], null]]')
    assert main(["show", "GMM", "--trace", str(path)]) == 2
    assert "does not apply to GMM[0] float32 args=(1, 128, 128, 128): no block named nope" in capsys.readouterr().err
    assert main(["show", "GMM", "--trace", str(tmp_path / "missing.json")]) == 2
    assert "cannot read trace file" in capsys.readouterr().err


def test_block_rv_type():
    sch = Schedule(C2D)
    assert isinstance(sch.get_block("PadInput"), BlockRV)


def test_tree_replace_rebuilds_only_the_paths_to_what_it_replaces():
    # a program with one statement object in two places: replacing it rewrites both places
    from tensorsearch.ir import Evaluate, For, ForKind, IntImm, PrimFunc, SeqStmt, Var
    from tensorsearch.schedule.tree import find_loop, replace

    mark, new_mark = Evaluate(IntImm("int32", 1)), Evaluate(IntImm("int32", 2))
    i, j, k = Var("i"), Var("j"), Var("k")
    inner = For(j, 0, 4, ForKind.SERIAL, mark)
    other = For(k, 0, 4, ForKind.SERIAL, mark)
    func = PrimFunc((), For(i, 0, 8, ForKind.SERIAL, SeqStmt((inner, other))))
    assert find_loop(func, j).path == (func.body, func.body.body, inner)
    out = replace(func, {id(mark): new_mark})
    assert out.body.body.stmts[0].body is new_mark and out.body.body.stmts[1].body is new_mark
    # a statement in one place: its ancestors are rebuilt, its siblings shared
    out = replace(func, {id(inner): For(j, 0, 2, ForKind.SERIAL, mark)})
    assert out.body.body.stmts[0].extent == IntImm("int32", 2) and out.body.body.stmts[1] is other
    assert replace(func, {id(Evaluate(IntImm("int32", 3))): None}) is func  # not in the program
    # below a statement found in two places: both copies change
    twice = For(k, 0, 2, ForKind.SERIAL, mark)
    func = PrimFunc((), SeqStmt((For(i, 0, 8, ForKind.SERIAL, twice), For(j, 0, 8, ForKind.SERIAL, twice))))
    out = replace(func, {id(mark): new_mark})
    assert all(loop.body.body is new_mark for loop in out.body.stmts)


def test_substitute_loop_vars_rewrites_bindings_not_blocks():
    from tensorsearch.ir import BlockRealize, Var
    from tensorsearch.schedule.tree import find_block, find_loop, substitute_loop_vars, walk_nodes
    from tensorsearch.script import parse

    func = parse("""
@T.prim_func
def main(A: T.Buffer((16, 4), "float32"), B: T.Buffer((16, 4), "float32")):
    for i, j in T.grid(16, 4):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * 2.0
""")
    block = find_block(func, "B").node
    i = next(n for n in walk_nodes(func.body) if type(n).__name__ == "For").loop_var
    i0, i1 = Var("i0"), Var("i1")
    new = substitute_loop_vars(find_loop(func, i).node, {i: i0 * 4 + i1})
    realize = next(n for n in walk_nodes(new) if type(n) is BlockRealize)
    assert str(realize.iter_values[0]) == str(i0 * 4 + i1)
    assert realize.block is block  # the block is shared, not rebuilt
