"""IR nodes, structural equality and hashing, functors."""

import subprocess
import sys

import pytest

from tensorsearch import ir
from tensorsearch.ir import (
    TRUE,
    Add,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    DataType,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IntImm,
    IterType,
    IterVar,
    Mul,
    Range,
    Var,
    decl_buffer,
    make_prim_func,
    structural_equal,
    structural_hash,
)


def test_dtype_parse_and_print():
    for name in ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                 "bfloat16", "float32", "float64", "bool", "float32x16", "int8x64", "handle"]:  # fmt: skip
        assert str(DataType.parse(name)) == name
    assert DataType.parse("float32x4").lanes == 4
    assert DataType.parse("int8").bytes == 1
    assert DataType.parse("bfloat16").numpy.name == "bfloat16"


@pytest.mark.parametrize(
    ("text", "message"),
    [("float8", "float cannot have 8 bits"), ("int", "needs a bit width"), ("complex64", "cannot parse data type")],
)
def test_dtype_errors(text, message):
    with pytest.raises(ValueError, match=message):
        DataType.parse(text)


def test_operators_build_nodes():
    i, j = Var("i"), Var("j")
    e = i * 4 + j
    assert e == Add(Mul(i, IntImm(ir.dtypes.int32, 4)), j)
    assert isinstance(e // 2, FloorDiv) and isinstance(e % 2, FloorMod)
    x = Var("x", "float32")
    assert (x * 2.0).b == FloatImm(ir.dtypes.float32, 2.0)
    assert (i < j).dtype == ir.dtypes.bool_


def test_type_errors_name_the_operands():
    i = Var("i")
    x = Var("x", "float32")
    with pytest.raises(TypeError, match="operands of \\+ have different data types: int32 and float32"):
        _ = i + x
    with pytest.raises(TypeError, match="truth value of the expression"):
        bool(i < 3)
    with pytest.raises(ValueError, match="does not fit in int8"):
        IntImm("int8", 300)
    A = decl_buffer((4, 4), "float32", "A")
    with pytest.raises(IndexError, match="buffer A has 2 dimensions but is indexed with 1"):
        _ = A[i]
    with pytest.raises(TypeError, match="store to buffer A needs a value of type float32, got int32"):
        BufferStore(A, i, (i, i))


def _gemm(n=16, names=("i", "j", "k"), bnames=("A", "B", "C")):
    A = decl_buffer((n, n), "float32", bnames[0])
    B = decl_buffer((n, n), "float32", bnames[1])
    C = decl_buffer((n, n), "float32", bnames[2])
    i, j, k = (Var(x) for x in names)
    vi, vj, vk = (Var("v" + x) for x in names)
    block = Block(
        "C",
        (
            IterVar(vi, Range.from_extent(n), IterType.SPATIAL),
            IterVar(vj, Range.from_extent(n), IterType.SPATIAL),
            IterVar(vk, Range.from_extent(n), IterType.REDUCE),
        ),
        (
            BufferRegion(A, (Range(vi, 1), Range(vk, 1))),
            BufferRegion(B, (Range(vk, 1), Range(vj, 1))),
        ),
        (BufferRegion(C, (Range(vi, 1), Range(vj, 1))),),
        BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj)),
        init=BufferStore(C, FloatImm("float32", 0.0), (vi, vj)),
    )
    body = BlockRealize((i, j, k), TRUE, block)
    for v in (k, j, i):
        body = For(v, 0, n, "serial", body)
    root = BlockRealize((), TRUE, Block("root", (), (), (), body))
    return make_prim_func([A, B, C], root)


def test_structural_equal_is_alpha_equivalence():
    f1 = _gemm()
    f2 = _gemm(names=("x", "y", "z"), bnames=("P", "Q", "R"))
    assert f1 != f2  # different objects
    assert structural_equal(f1, f2)
    assert structural_hash(f1) == structural_hash(f2)
    f3 = _gemm(n=32)
    assert not structural_equal(f1, f3)
    assert structural_hash(f1) != structural_hash(f3)


def test_structural_equal_tracks_variable_correspondence():
    x, y, a, b = Var("x"), Var("y"), Var("a"), Var("b")
    assert structural_equal((x + y, x), (a + b, a))
    assert not structural_equal((x + y, x), (a + b, b))
    assert not structural_equal((x + x), (a + b))
    assert not structural_equal(x, Var("f", "float32"))


@pytest.mark.slow
def test_structural_hash_is_stable_across_processes():
    code = (
        "import sys; sys.path.insert(0, 'tests'); from test_ir import _gemm; "
        "from tensorsearch.ir import structural_hash; print(structural_hash(_gemm()))"
    )
    out = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        for _ in range(2)
    ]
    assert out[0] == out[1] == str(structural_hash(_gemm()))


def test_mutator_shares_unchanged_subtrees():
    f = _gemm()

    class ScaleInit(ir.Mutator):
        def visit_FloatImm(self, op):
            return FloatImm(op.dtype, 1.0) if op.value == 0.0 else op

    g = ScaleInit().visit(f)
    assert not structural_equal(f, g)
    block_f = f.body.block.body.body.body.body.block
    block_g = g.body.block.body.body.body.body.block
    assert block_g.body is block_f.body  # untouched update is shared
    assert block_g.init.value.value == 1.0
    assert ir.Mutator().visit(f) is f


def test_substitute_and_free_vars():
    i, j = Var("i"), Var("j")
    e = ir.substitute(i * 4 + j, {i: j + 1})
    assert structural_equal(e, (j + 1) * 4 + j)
    assert ir.free_vars(_gemm().body) == []
    assert ir.free_vars(i + j * i) == [i, j]


def test_identity_cache_keys_on_the_objects_themselves():
    from tensorsearch.ir import IntImm
    from tensorsearch.ir.identity_cache import MISSING, IdentityCache

    a, b = IntImm("int32", 1), IntImm("int32", 1)  # equal, not the same object
    cache = IdentityCache(2)
    assert cache.get((a,)) is MISSING
    assert cache.put((a,), "k", None) is None and cache.get((a,), "k") is None  # None is an answer
    assert cache.get((b,), "k") is MISSING and cache.get((a,), "other") is MISSING
    cache.put((b,), "k", 2)
    cache.put((a,), "x", 3)  # full: the oldest entry goes
    assert cache.get((a,), "k") is MISSING and cache.get((b,), "k") == 2 and len(cache) == 2


class _Depth(ir.ExprFunctor[int], ir.StmtFunctor[int]):
    """Expression depth and statement count: a functor with a return type."""

    def visit_Var(self, e: ir.Var) -> int:
        return 1

    def visit_IntImm(self, e: ir.IntImm) -> int:
        return 1

    def visit_BinaryOp(self, e: ir.Add) -> int:  # every binary arithmetic node
        return 1 + max(self.visit_expr(e.a), self.visit_expr(e.b))

    def visit_SeqStmt(self, s: ir.SeqStmt) -> int:
        return sum(self.visit_stmt(x) for x in s.stmts)

    def visit_Evaluate(self, s: ir.Evaluate) -> int:
        return 1


def test_functor_dispatches_by_class_and_base_class():
    x = ir.Var("x", "int32")
    assert _Depth().visit_expr((x + 1) * x - 2) == 4
    assert _Depth().visit_stmt(ir.seq(ir.Evaluate(x), ir.Evaluate(x + 1))) == 2


def test_functor_names_the_unsupported_node_class():
    x = ir.Var("x", "int32")
    with pytest.raises(TypeError, match=r"_Depth has no visit_LT: LT expressions are not supported"):
        _Depth().visit_expr(x < 1)
    with pytest.raises(TypeError, match=r"_Depth has no visit_IfThenElse: IfThenElse statements"):
        _Depth().visit_stmt(ir.IfThenElse(x < 1, ir.Evaluate(x), None))


def test_functor_tables_are_per_class():
    class Override(_Depth):
        def visit_Var(self, e: ir.Var) -> int:
            return 10

    x = ir.Var("x", "int32")
    assert _Depth().visit_expr(x + 1) == 2
    assert Override().visit_expr(x + 1) == 11
    assert _Depth().visit_expr(x) == 1
