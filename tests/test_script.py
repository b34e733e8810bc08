"""Printer and parser of the TVMScript-like text: round trips, hand-written text, errors."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorsearch.ir import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    TRUE,
    Add,
    Allocate,
    And,
    Block,
    BlockRealize,
    Broadcast,
    Buffer,
    BufferRegion,
    BufferStore,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    IterVar,
    MatchBufferRegion,
    Max,
    Min,
    Mod,
    Mul,
    Not,
    Or,
    PrimFunc,
    Ramp,
    Range,
    Select,
    SeqStmt,
    StringImm,
    Sub,
    Var,
    assert_structural_equal,
    call,
    const,
    decl_buffer,
    make_prim_func,
    structural_equal,
    structural_hash,
)
from tensorsearch.script import ScriptError, node_to_str, parse, script

F32 = "float32"


def roundtrip(f: PrimFunc) -> str:
    text = f.script()
    g = parse(text)
    assert_structural_equal(g, f)
    assert structural_hash(g) == structural_hash(f)
    assert g.script() == text, f"second printing differs:\n{text}\n---\n{g.script()}"
    return text


def region(buf: Buffer, *ranges: tuple) -> BufferRegion:
    return BufferRegion(buf, tuple(Range(*r) if isinstance(r, tuple) else Range(r, 1) for r in ranges))


def realize(name, iters, values, reads, writes, body, predicate=TRUE, **kw):
    return BlockRealize(tuple(values), predicate, Block(name, tuple(iters), tuple(reads), tuple(writes), body, **kw))


def root(body, **kw) -> BlockRealize:
    return realize("root", (), (), (), (), body, **kw)


def spatial(v, extent, kind="spatial"):
    return IterVar(v, Range.from_extent(extent), kind)


def gemm(n: int = 64, dtype: str = F32, with_root: bool = True) -> PrimFunc:
    A, B, C = (decl_buffer((n, n), dtype, name) for name in "ABC")
    i, j, k = Var("i"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    body = realize(
        "C",
        (spatial(vi, n), spatial(vj, n), spatial(vk, n, "reduce")),
        (i, j, k),
        (region(A, vi, vk), region(B, vk, vj)),
        (region(C, vi, vj),),
        BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
        init=BufferStore(C, const(0, dtype), (vi, vj)),
    )
    for v in (k, j, i):
        body = For(v, 0, n, "serial", body)
    return make_prim_func([A, B, C], root(body) if with_root else body)


GEMM_TEXT = """
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        for i, j, k in T.grid(64, 64, 64):
            with T.block("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                T.reads(A[vi, vk], B[vk, vj])
                T.writes(C[vi, vj])
                with T.init():
                    C[vi, vj] = T.float32(0.0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"""


# -- round trips of constructor-built programs ------------------------------------------------


def test_gemm_prints_like_tvmscript_and_round_trips():
    f = gemm()
    assert roundtrip(f).strip() == "\n".join(line[4:] for line in GEMM_TEXT.strip("\n").split("\n"))
    assert roundtrip(gemm(with_root=False)).startswith("@T.prim_func(root=False)\n")
    roundtrip(gemm(16, "float16"))


def test_every_loop_kind_with_annotations_and_bounds():
    A = decl_buffer((64, 128), F32, "A")
    n = Var("n")
    v = [Var(x) for x in "abcdefgh"]
    w = Var("w", "int64")
    idx = v[1] + v[2] * 8 + v[3] + v[4] + v[5] + v[6]
    inner = For(w, IntImm("int64", 3), IntImm("int64", 5), "serial", Evaluate(Cast("int32", w) + idx))
    body = SeqStmt((BufferStore(A, const(1.0, F32), (v[0], idx)), inner))
    body = For(v[6], v[0], n, "serial", body)  # symbolic min
    body = For(
        v[5], 2, 8, "unroll", body, annotations={"pragma_auto_unroll_max_step": 16, "pragma_unroll_explicit": True}
    )
    body = For(v[4], 0, 4, "vectorized", body)
    body = For(v[3], 0, 2, "parallel", body, annotations={"note": "x"})
    body = For(v[2], 0, 8, "thread_binding", body, thread_binding="threadIdx.x")
    body = For(v[1], 0, 4, "thread_binding", body, thread_binding="blockIdx.x", annotations={"k": 1.5})
    body = For(v[0], 0, 64, "serial", body)
    body = For(v[7], IntImm("int32", 0), IntImm("int64", 2), "serial", body)  # min and extent of different types
    body = For(Var("q", "int64"), IntImm("int32", 0), IntImm("int32", 1), "serial", body)  # var type != extent type
    f = PrimFunc((n,), body, (), {"global_symbol": "loops"})
    text = roundtrip(f)
    for piece in (
        'T.thread_binding(8, thread="threadIdx.x")',
        "T.unroll(2, 10, annotations={",
        "T.serial(a, extent=n)",
        "T.parallel(2, annotations={",
        "T.vectorized(4)",
        "T.serial(T.int64(3), T.int64(8))",
        'dtype="int64"',
        "def loops(n: T.int32):",
    ):
        assert piece in text, piece


def test_block_with_match_alloc_predicate_annotations():
    A = decl_buffer((64, 64), F32, "A")
    B = decl_buffer((64, 64), F32, "B")
    i, j = Var("i"), Var("j")
    vi, vj, vo = Var("vi"), Var("vj"), Var("vo")
    sub = Buffer("A_sub", (16, 16), "float32", strides=(Var("s0"), 1), elem_offset=Var("off"), offset_factor=16)
    local = decl_buffer((16,), F32, "local", scope="local")
    ivs = (
        IterVar(vi, Range(4, 60), "spatial"),
        IterVar(vj, Range.from_extent(4), "opaque"),
        IterVar(vo, Range(IntImm("int64", 0), IntImm("int64", 4)), "reduce"),
    )
    inner = SeqStmt(
        (
            BufferStore(local, sub[0, 0], (0,)),
            BufferStore(B, local[0] + A[vi, vj * 16], (vi, vj * 16)),
        )
    )
    blk = realize(
        "compute",
        ivs,
        (i + 4, j, Cast("int64", j)),
        (region(A, vi, (vj * 16, 16)), region(A, (0, 64), (IntImm("int32", 3), IntImm("int32", 5)))),
        (region(B, vi, (vj * 16 + 1, Var("m"))),),
        inner,
        predicate=And(LT(i, const(60)), Not(EQ(j, const(3)))),
        alloc_buffers=(local,),
        match_buffers=(MatchBufferRegion(sub, region(A, (vi, 16), (vj * 16, 16))),),
        annotations={"meta_schedule.tiling": "SSR", "tuple": (1, "a", (2.5, None)), "expr": i + 1},
    )
    body = For(i, 0, 60, "serial", For(j, 0, 4, "serial", blk))
    f = make_prim_func([A, B], root(body, alloc_buffers=(decl_buffer((4,), "int8", "scratch"),), annotations={"a": 1}))
    text = roundtrip(f)
    assert "T.where(i < 60 and not j == 3)" in text
    assert "vi = T.axis.spatial(60, i + 4, min=4)" in text
    assert "A_sub = T.match_buffer(A[vi:vi + 16, vj * 16:vj * 16 + 16], (16, 16)" in text
    assert "A[0:64, 3:8]" in text
    assert "m = T.int32()" in text and "off = T.int32()" in text


def test_expressions_of_every_kind():
    A = decl_buffer((16,), F32, "A")
    X = decl_buffer((32,), "int32", "X")
    x, y = Var("x"), Var("y")
    f32 = A[x]
    ints = [
        x + y - 3,
        x - (y - 3),
        x * (y + 1),
        Div(x, y),
        FloorDiv(x, y + 2),
        FloorMod(x * 2, y),
        Mod(x, const(3)),
        Min(x, y),
        Max(x, const(-2)),
        Sub(const(0), x),
        -(x + 1),
        x * -3,
        const(-3) * x,
        Select(And(Or(GT(x, y), LE(x, const(0))), Or(Not(NE(x, y)), GE(y, x))), x, y),
        Select(EQ(LT(x, y), GE(x, y)), x, y),
        Cast("int32", f32 * 2.5),
        call("llvm.my_intrinsic", x, StringImm('str "q"\n'), dtype="int32"),
    ]
    floats = [
        call("exp", f32),
        call("pow", f32, const(2.0, F32)),
        call("sqrt", f32, dtype="float64"),
        Cast("float32", Cast("float16", f32) + const(1.0, "float16")),
        FloatImm(F32, math.inf) + FloatImm(F32, -math.inf) * FloatImm(F32, 1e-30),
        Cast("float32", Cast("bfloat16", f32)),
        f32 / const(3.0, F32),
    ]
    vec = X[Ramp(x, const(2), 4)] + Broadcast(y, 4)
    stmts = [Evaluate(e) for e in ints + floats] + [
        BufferStore(X, vec, (Ramp(x, const(2), 4),)),
        IfThenElse(LT(x, y), Evaluate(x), IfThenElse(GT(x, y), Evaluate(y), Evaluate(x + y))),
        IfThenElse(EQ(x, const(0)), BufferStore(A, const(0.0, F32), (x,))),
        Evaluate(FloatImm(F32, math.nan)),
    ]
    f = make_prim_func([A, X], SeqStmt(tuple(stmts)))
    f = PrimFunc((x, y, *f.params), f.body, f.buffer_map, f.attrs)
    text = roundtrip(f)
    for piece in (
        "x + y - 3",
        "x - (y - 3)",
        "x * (y + 1)",
        "T.truncmod(x, 3)",
        "0 - x",
        "x * -3",
        "-3 * x",
        "elif x > y:",
    ):
        assert piece in text, piece
    assert 'T.float32("nan")' in text and 'T.float32("-inf")' in text


def test_non_default_dtypes():
    bufs = [
        decl_buffer((8,), dt, f"B_{dt}") for dt in ("int8", "uint8", "float16", "bfloat16", "int64", "bool", "float64")
    ]
    i = Var("i", "int64")
    k = Var("k")
    stores = [
        BufferStore(bufs[0], IntImm("int8", -128), (k,)),
        BufferStore(bufs[1], IntImm("uint8", 255), (k,)),
        BufferStore(bufs[2], const(0.5, "float16"), (k,)),
        BufferStore(bufs[3], Cast("bfloat16", bufs[2][k]), (k,)),
        BufferStore(bufs[4], i * IntImm("int64", 2), (k,)),
        BufferStore(bufs[5], Or(const(True, "bool"), IntImm("bool", 0)), (k,)),
        BufferStore(bufs[6], const(1e300, "float64"), (k,)),
    ]
    body = For(i, IntImm("int64", 0), IntImm("int64", 8), "serial", For(k, 0, 8, "serial", SeqStmt(tuple(stores))))
    text = roundtrip(make_prim_func(bufs, body))
    assert "T.int8(-128)" in text and "T.uint8(255)" in text and "True or False" in text
    assert "for i, k in T.grid(T.int64(8), 8):" in text


def test_allocate_evaluate_and_buffer_fields():
    A = Buffer(
        "A",
        (Var("n"), 4),
        "float32",
        strides=(Var("stride"), 1),
        elem_offset=Var("elem"),
        scope="shared",
        alignment=16,
        offset_factor=4,
    )
    i = Var("i")
    tmp = decl_buffer((4,), "float16", "tmp", scope="local")
    body = Allocate(tmp, SeqStmt((BufferStore(tmp, const(1.0, "float16"), (i,)), Evaluate(call("tanh", tmp[i])))))
    body = For(i, 0, 4, "serial", body)
    h = Var("a", "handle")
    f = PrimFunc((h,), body, ((h, A),), {"global_symbol": "main", "target": "llvm", "num": 3})
    text = roundtrip(f)
    assert (
        'A = T.match_buffer(a, (n, 4), "float32", strides=(stride, 1), elem_offset=elem, scope="shared", align=16, offset_factor=4)'
        in text
    )
    assert 'with T.allocate((4,), "float16", scope="local") as tmp:' in text
    assert 'T.func_attr({"num": 3, "target": "llvm"})' in text


def test_duplicate_and_invalid_names_are_made_unique():
    a1, a2, a3 = Var("i"), Var("i"), Var("i_1")
    weird = [Var("T"), Var("for"), Var("a.b"), Var("1x"), Var("threadIdx.x")]
    A = decl_buffer((4, 4, 4, 4), F32, "i")  # a buffer with the name of the loop variables
    B = decl_buffer((4,), F32, "A B")
    body = BufferStore(A, B[a1] + B[a2], (a1, a2, a3, weird[0]))
    body = SeqStmt((body, Evaluate(weird[1] + weird[2] + weird[3] + weird[4])))
    for v in (weird[0], a3, a2, a1):
        body = For(v, 0, 4, "serial", body)
    handles = make_prim_func([A, B], body).params
    f = PrimFunc((*weird[1:], *handles), body, tuple(zip(handles, (A, B))), {"global_symbol": "odd name"})
    text = roundtrip(f)
    assert "for i_1, i_2, i_1_1, T_ in T.grid(4, 4, 4, 4):" in text
    assert "for_: T.int32" in text and "a_b: T.int32" in text and "_1x: T.int32" in text
    assert "def main(" in text and 'T.func_attr({"global_symbol": "odd name"})' in text


def test_symbolic_shapes_and_free_variables():
    n, m = Var("n"), Var("m")
    A = decl_buffer((n, m), F32, "A")
    B = decl_buffer((4,), F32, "B")  # constant shape after a symbolic one: match_buffer too
    free = decl_buffer((m,), F32, "free")  # used but never defined
    i = Var("i")
    body = For(i, 0, n, "serial", BufferStore(A, free[i] + B[0] + FloatImm(F32, 2.0), (i, Var("j_free"))))
    f = make_prim_func([A, B], body)
    f = PrimFunc((*f.params, n), f.body, f.buffer_map, f.attrs)
    text = roundtrip(f)
    assert "A_handle: T.handle, B_handle: T.handle, n: T.int32" in text
    assert "m = T.int32()" in text and "free = T.Buffer((m,)" in text
    # a signature buffer keeps the T.Buffer form when the order allows it
    C = decl_buffer((8,), F32, "C")
    g = make_prim_func([C, A], For(i, 0, 8, "serial", BufferStore(C, A[i, i], (i,))))
    assert "C: T.Buffer((8,)" in roundtrip(g)


def test_non_ssa_programs_round_trip():
    A = decl_buffer((8,), F32, "A")
    i = Var("i")
    # the same loop variable in two sibling loops, and used after its loop
    body = SeqStmt(
        (
            For(i, 0, 8, "serial", BufferStore(A, const(1.0, F32), (i,))),
            For(i, 0, 4, "serial", Evaluate(i)),
            Evaluate(i),
        )
    )
    text = roundtrip(make_prim_func([A], body))
    assert text.startswith("@T.prim_func(ssa=False)")
    # the same buffer allocated by two blocks
    tmp = decl_buffer((2,), F32, "tmp")
    blocks = SeqStmt(
        tuple(
            realize(
                f"b{k}", (), (), (), (region(tmp, 0),), BufferStore(tmp, const(1.0, F32), (0,)), alloc_buffers=(tmp,)
            )
            for k in range(2)
        )
    )
    roundtrip(make_prim_func([A], root(blocks)))
    # a block iterator used in its own binding
    v = Var("v")
    roundtrip(make_prim_func([A], root(realize("self", (spatial(v, 8),), (v,), (), (), Evaluate(v)))))


def test_sequences_roots_and_attributes():
    A = decl_buffer((4,), F32, "A")
    s = BufferStore(A, const(0.0, F32), (0,))
    cases = [
        SeqStmt(()),
        SeqStmt((s,)),
        SeqStmt((SeqStmt((s, s)), s, SeqStmt(()), SeqStmt((SeqStmt((s,)),)))),
        root(s),  # a root around a loop nest without blocks stays explicit
        root(root(realize("b", (), (), (), (), s))),
        realize("root", (), (), (region(A, 0),), (), s),  # a root with reads
        realize("not_root", (), (), (), (), s),
        root(
            realize("b", (), (), (), (), SeqStmt(())),
            annotations={"x": StringImm("s"), "y": IntImm("int32", 2), "z": FloatImm(F32, 1.0)},
        ),
        root(
            realize(
                "b", (), (), (), (), s, annotations={"buf": A, "reg": region(A, (1, 2)), "inf": math.inf, "b": TRUE}
            )
        ),
    ]
    for body in cases:
        roundtrip(make_prim_func([A], body))
    private = PrimFunc((), Evaluate(const(0)))
    assert roundtrip(private).startswith("@T.prim_func(private=True)\ndef main():")
    assert script(make_prim_func([A], s), name="renamed").split("\n")[1].startswith("def renamed(")
    assert 'T.func_attr({"global_symbol": "main"})' in script(make_prim_func([A], s), name="renamed")


def test_node_to_str():
    A = decl_buffer((16, 16), F32, "A")
    vi, vk = Var("vi"), Var("vk")
    assert str(A[vi, vk] * A[vk, vi] + FloatImm(F32, 1.5)) == "A[vi, vk] * A[vk, vi] + T.float32(1.5)"
    assert str(Var("x", "int64") + IntImm("int64", 4)) == "x + T.int64(4)"
    assert str(region(A, vi, (0, 16))) == "A[vi, 0:16]"
    assert str(Range(2, 8)) == "2:10"
    assert str(A) == 'A: T.Buffer((16, 16), "float32")'
    assert str(spatial(vi, 16)) == "vi = T.axis.spatial(16)"
    assert node_to_str(For(vi, 0, 4, "serial", Evaluate(vi))) == "for vi in T.serial(4):\n    T.evaluate(vi)"
    assert str(Var("a") + Var("a")) == "a + a_1"
    assert gemm().script() == str(gemm())


# -- hand-written text ------------------------------------------------------------------------


def test_hand_written_gemm_and_variants():
    assert_structural_equal(parse(GEMM_TEXT), gemm())
    # TVM spellings: explicit axes, range()/T.serial(0, n) loops, a bare literal takes the buffer's type
    text = """
    @T.prim_func
    def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
        for i in range(64):
            for j in T.serial(0, 64):
                for k in T.serial(64):
                    with T.block("C"):
                        vi = T.axis.spatial(64, i)
                        vj = T.axis.spatial((0, 64), j)
                        vk = T.axis.reduce(64, k)
                        T.reads([A[vi, vk], B[vk, vj]])
                        T.writes(C[vi, vj])
                        with T.init():
                            C[vi, vj] = 0
                        C[vi, vj] += A[vi, vk] * B[vk, vj]
    """
    assert_structural_equal(parse(text), gemm())
    with pytest.raises(ScriptError, match=re.escape("unknown function T.axis.S")):
        parse(text.replace("T.axis.spatial(64, i)", "T.axis.S(64, i)"))
    g16 = parse(GEMM_TEXT.replace('"float32"', '"float16"').replace("T.float32(0.0)", "0.0"))
    assert_structural_equal(g16, gemm(dtype="float16"))


def test_hand_written_program_with_everything():
    text = '''
    # from tvm.script import tir as T
    @T.prim_func
    def main(a: T.handle, B: T.Buffer((16,), "int8")):
        """A docstring is ignored."""
        n = T.int32()
        A = T.match_buffer(a, (n,), "int8")
        acc = T.alloc_buffer((1,), "int32", scope="local")
        for i in T.parallel(n):
            with T.block("copy"):
                vi = T.axis.spatial(n, i)
                T.where(i < 16)
                T.reads(A[vi])
                T.writes(B[vi], acc[0])
                acc[0] += T.Cast("int32", A[vi])
                B[vi] = T.Cast("int8", T.max(acc[0], 0) // 2)
    '''
    n, i, vi = Var("n"), Var("i"), Var("vi")
    A = decl_buffer((n,), "int8", "A")
    B = decl_buffer((16,), "int8", "B")
    acc = decl_buffer((1,), "int32", "acc", scope="local")
    body = SeqStmt(
        (
            BufferStore(acc, acc[0] + Cast("int32", A[vi]), (0,)),
            BufferStore(B, Cast("int8", FloorDiv(Max(acc[0], const(0)), const(2))), (vi,)),
        )
    )
    blk = realize(
        "copy",
        (spatial(vi, n),),
        (i,),
        (region(A, vi),),
        (region(B, vi), region(acc, 0)),
        body,
        predicate=LT(i, const(16)),
    )
    ha, hb = Var("a", "handle"), Var("B_handle", "handle")
    expected = PrimFunc(
        (ha, hb),
        root(For(i, 0, n, "parallel", blk), alloc_buffers=(acc,)),
        ((hb, B), (ha, A)),
        {"global_symbol": "main"},
    )
    got = parse(text)
    assert_structural_equal(got, expected)
    assert not structural_equal(got, expected.with_body(For(i, 0, n, "serial", blk)))


# -- errors -----------------------------------------------------------------------------------

MALFORMED = [
    (
        "    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]",
        "    C[vi, vj] = C[vi, vj] + A[vi, vq] * B[vk, vj]",
        11,
        47,
        "undefined variable 'vq'",
    ),
    ("T.reads(A[vi, vk], B[vk, vj])", "T.reads(A[vi, vk], B[vk, vj]", 7, None, ""),  # syntax error
    ("                T.reads(A[vi, vk], B[vk, vj])\n", "", 5, 13, "has no T.reads"),
    ('T.axis.remap("SSR", [i, j, k])', 'T.axis.remap("SSR", [i, j])', 6, 30, "one kind letter"),
    ("T.float32(0.0)", "T.float33(0.0)", 10, 33, "unknown data type 'float33'"),
    ('(64, 64), "float32"), B', '(64, 64), "float32", 4), B', 3, 17, "T.Buffer takes at most 2 positional arguments"),
    ("T.grid(64, 64, 64)", "T.grid2(64, 64, 64)", 4, 24, "a loop must run over"),
    ("C[vi, vj] + A", "T.fancy(C[vi, vj]) + A", 11, 29, "unknown function T.fancy"),
    ("C[vi, vj] + A", "C[vi, vj] + T.float16(1.0) + A", 11, 29, "different data types"),
    ("with T.init():", "with T.init():\n                    T.reads()", 10, 21, "only allowed directly inside a block"),
]


@pytest.mark.parametrize("old,new,line,col,words", MALFORMED)
def test_malformed_text_reports_line_and_column(old, new, line, col, words):
    assert old in GEMM_TEXT
    text = GEMM_TEXT.replace(old, new, 1)
    with pytest.raises(ScriptError) as info:
        parse(text)
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    m = re.match(r"line (\d+), column (\d+): ", msg)
    assert m, msg
    assert int(m.group(1)) == line, msg
    if col is not None:
        assert int(m.group(2)) == col, msg
    assert words in msg


def test_more_malformed_texts():
    bad = {
        "def f(x):\n    pass": "needs a type",
        "@T.prim_func\ndef f(x: T.int32):\n    y = x": "only buffer elements can be assigned",
        "@T.prim_func\ndef f(x: T.int32):\n    T.evaluate(x, x)": "at most 1 positional",
        "@T.prim_func\ndef f(x: T.int32):\n    T.evaluate(x + 1.5)": "non-integral number 1.5",
        "x = 1": "expected only a function",
        "@T.prim_func\ndef f(x: T.int32):\n    for i in T.thread_binding(4):\n        pass": "thread tag",
        "@T.prim_func\ndef f(x: T.int32):\n    for i, j in T.grid(4):\n        pass": "T.grid has 1 extents",
    }
    for text, words in bad.items():
        with pytest.raises(ScriptError, match=re.escape(words)):
            parse(text)


# -- property: random expressions round trip --------------------------------------------------

_X, _Y = Var("x"), Var("y")
_P = decl_buffer((8,), "int32", "P")


def _int_exprs():
    leaves = st.one_of(
        st.sampled_from([_X, _Y]),
        st.integers(-(2**31), 2**31 - 1).map(lambda v: IntImm("int32", v)),
        st.integers(0, 7).map(lambda v: _P[const(v)]),
    )

    def extend(inner):
        binary = st.sampled_from([Add, Sub, Mul, Div, FloorDiv, FloorMod, Mod, Min, Max])
        cmp = st.sampled_from([EQ, NE, LT, LE, GT, GE])
        boolean = st.builds(lambda c, a, b: c(a, b), cmp, inner, inner)
        boolean = st.one_of(
            boolean,
            st.builds(Not, boolean),
            st.builds(lambda o, a, b: o(a, b), st.sampled_from([And, Or]), boolean, boolean),
        )
        return st.one_of(
            st.builds(lambda op, a, b: op(a, b), binary, inner, inner),
            st.builds(Select, boolean, inner, inner),
            st.builds(lambda b: Cast("int32", b), boolean),
        )

    return st.recursive(leaves, extend, max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_int_exprs())
@pytest.mark.slow
def test_random_expressions_round_trip(e):
    h = Var("P_handle", "handle")
    roundtrip(PrimFunc((_X, _Y, h), BufferStore(_P, e, (_X,)), ((h, _P),), {"global_symbol": "main"}))
