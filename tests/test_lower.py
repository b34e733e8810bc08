"""Lowering passes: each pass alone on small programs written in script text, the whole
pipeline differentially against the reference interpreter (every workload, hand-written
schedules, random schedules)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedule_util import StepTally, random_inputs
from seeds import seeded_rng
from test_schedule_fuzz import MIN_SHARE, PROGRAMS, STEPS

from tensorsearch import workloads
from tensorsearch.interpreter import interpret
from tensorsearch.ir import (
    Block,
    BlockRealize,
    Buffer,
    BufferLoad,
    BufferStore,
    FloatImm,
    For,
    ForKind,
    PrimFunc,
    Ramp,
    Select,
    assert_structural_equal,
    post_order_visit,
)
from tensorsearch.lower import (
    PIPELINE,
    LoweringError,
    check_cpu_target,
    flatten_buffers,
    lower,
    lower_blocks,
    lower_init,
    simplify,
    unroll_loops,
    vectorize_loops,
)
from tensorsearch.schedule import Schedule, ScheduleError
from tensorsearch.script import parse


def assert_program(func: PrimFunc, expected_text: str) -> None:
    assert_structural_equal(func, parse(expected_text))


def run_both(func: PrimFunc, low: PrimFunc, inputs: list[np.ndarray] | None = None, tol: float = 1e-5) -> None:
    """``low`` computes what ``func`` computes, on fresh random inputs (reshaped to ``low``'s
    parameter buffers: flat once ``flatten_buffers`` ran)."""
    inputs = random_inputs(func) if inputs is None else inputs
    expected = interpret(func, *[a.copy() for a in inputs])
    shapes = [tuple(int(s.value) for s in b.shape) for b in low.buffers]
    got = interpret(low, *[a.reshape(shape).copy() for a, shape in zip(inputs, shapes, strict=False)])
    for buf, e, g in zip(func.buffers, expected, got, strict=True):
        g = g.reshape(e.shape)
        if buf.dtype.is_float:
            np.testing.assert_allclose(
                g.astype(np.float64), e.astype(np.float64), rtol=tol, atol=tol, err_msg=f"buffer {buf.name}"
            )
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"buffer {buf.name}")


def nodes_of(func: PrimFunc, cls: type) -> list:
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def check_lowered_form(low: PrimFunc) -> None:
    """The contract: no blocks, no vectorized/thread loops, single scalar-or-Ramp indices, flat params."""
    assert not nodes_of(low, Block) and not nodes_of(low, BlockRealize)
    for loop in nodes_of(low, For):
        assert loop.kind in (ForKind.SERIAL, ForKind.PARALLEL, ForKind.UNROLLED)
    for acc in nodes_of(low, BufferLoad) + nodes_of(low, BufferStore):
        assert len(acc.indices) == 1
        (idx,) = acc.indices
        assert idx.dtype.lanes == 1 or isinstance(idx, Ramp)
        assert idx.dtype.element_of().bits in (32, 64)
    for buf in low.buffers:
        assert len(buf.shape) == 1 and not buf.strides


# ---------------------------------------------------------------------------------------
# each pass alone

REDUCE = """
@T.prim_func
def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            vk = T.axis.reduce((2, 10), k + 2)
            T.reads(A[vi, vk - 2])
            T.writes(B[vi])
            with T.init():
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk - 2]
"""


def test_lower_init_guards_the_init_with_the_reduce_iterators_at_their_minimum():
    assert_program(
        lower_init(parse(REDUCE)),
        """
@T.prim_func
def main(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    for i, k in T.grid(4, 8):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            vk = T.axis.reduce((2, 10), k + 2)
            T.reads(A[vi, vk - 2])
            T.writes(B[vi])
            if vk == 2:
                B[vi] = T.float32(0.0)
            B[vi] = B[vi] + A[vi, vk - 2]
""",
    )
    run_both(parse(REDUCE), lower(parse(REDUCE)))


BLOCKS = """
@T.prim_func
def main(A: T.Buffer((10, 8), "float32"), C: T.Buffer((10, 8), "float32")):
    B = T.alloc_buffer((10, 8), "float32")
    for i_0, i_1, j in T.grid(3, 4, 8):
        with T.block("B"):
            vi = T.axis.spatial(10, i_0 * 4 + i_1)
            vj = T.axis.spatial(8, j)
            T.where(i_0 * 4 + i_1 < 10)
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            T.block_attr({"buffer_dim_align": [[0, 0, 16, 1]]})
            B[vi, vj] = A[vi, vj] * T.float32(2.0)
    for i in range(10):
        with T.block("C"):
            vi = T.axis.spatial(10, i)
            T.reads(B[vi, 0:8])
            T.writes(C[vi, 0:8])
            Bs = T.match_buffer(B[vi, 0:8], (8,), "float32")
            Cs = T.match_buffer(C[vi, 0:8], (8,), "float32")
            for j in range(8):
                Cs[j] = Bs[j] + T.float32(1.0)
"""


def test_lower_blocks_substitutes_bindings_keeps_predicates_allocates_and_matches():
    # storage_align(axis 0, factor 16, offset 1): row stride 8 is padded to 17
    lowered = lower_blocks(parse(BLOCKS))
    assert_program(
        lowered,
        """
@T.prim_func
def main(A: T.Buffer((10, 8), "float32"), C: T.Buffer((10, 8), "float32")):
    with T.allocate((10, 8), "float32", strides=(17, 1)) as B:
        for i_0, i_1, j in T.grid(3, 4, 8):
            if i_0 * 4 + i_1 < 10:
                B[i_0 * 4 + i_1, j] = A[i_0 * 4 + i_1, j] * T.float32(2.0)
        for i, j in T.grid(10, 8):
            C[i, 0 + j] = B[i, 0 + j] + T.float32(1.0)
""",
    )
    run_both(parse(BLOCKS), lowered)


def test_lower_blocks_reshaping_match_buffer():
    text = """
@T.prim_func
def main(A: T.Buffer((4, 2, 3), "float32"), B: T.Buffer((4, 6), "float32")):
    for i in range(4):
        with T.block("B"):
            vi = T.axis.spatial(4, i)
            T.reads(A[vi, 0:2, 0:3])
            T.writes(B[vi, 0:6])
            As = T.match_buffer(A[vi, 0:2, 0:3], (6,), "float32")
            for j in range(6):
                B[vi, j] = As[j] * T.float32(3.0)
"""
    func = parse(text)
    run_both(func, lower(func, debug=True))


def test_flatten_buffers_row_major_explicit_strides_and_offset():
    text = """
@T.prim_func
def main(A: T.Buffer((4, 6), "float32"), B: T.Buffer((4, 6), "float32")):
    with T.allocate((4, 6), "float32", strides=(8, 1), elem_offset=3, scope="local") as T1:
        for i, j in T.grid(4, 6):
            T1[i, j] = A[i, j]
        for i, j in T.grid(4, 6):
            B[i, j] = T1[i, j]
"""
    func = parse(text)
    flat = flatten_buffers(func)
    assert_program(
        flat,
        """
@T.prim_func
def main(A: T.Buffer((24,), "float32"), B: T.Buffer((24,), "float32")):
    with T.allocate((33,), "float32", scope="local") as T1:
        for i, j in T.grid(4, 6):
            T1[i * 8 + j + 3] = A[i * 6 + j]
        for i, j in T.grid(4, 6):
            B[i * 6 + j] = T1[i * 8 + j + 3]
""",
    )
    # parameters keep their names and types; only the shape is flat
    assert [b.name for b in flat.buffers] == ["A", "B"]
    assert flat.params == func.params
    run_both(func, flat)


def test_flatten_buffers_int64_indices_stay_int64():
    text = """
@T.prim_func
def main(A: T.Buffer((T.int64(4), T.int64(6)), "float32"), B: T.Buffer((T.int64(4), T.int64(6)), "float32")):
    for i, j in T.grid(T.int64(4), T.int64(6)):
        B[i, j] = A[i, j] + T.float32(1.0)
"""
    func = parse(text)
    low = lower(func, debug=True)
    for acc in nodes_of(low, BufferLoad) + nodes_of(low, BufferStore):
        assert acc.indices[0].dtype.bits == 64
    run_both(func, low)


SIMPLE = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for i in range(0):
        A[i] = T.float32(1.0)
    for i in range(1):
        for j in range(8):
            if True:
                B[i * 8 + j] = A[(i * 8 + j) // 8 * 8 + (j % 8)]
    for i, j in T.grid(8, 8):
        if i * 8 + j < 64:
            B[i * 8 + j] = T.Select(j < 8, A[i * 8 + j], T.float32(0.0))
    T.evaluate(0)
"""


def test_simplify_indices_conditions_and_noops():
    assert_program(
        simplify(parse(SIMPLE)),
        """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    for j in range(8):
        B[j] = A[j]
    for i, j in T.grid(8, 8):
        B[i * 8 + j] = A[i * 8 + j]
""",
    )


def test_unroll_loops_short_constant_loops_only():
    text = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for i in T.unroll(2):
        for j in range(8):
            B[i * 8 + j] = A[i * 8 + j]
    for i in T.unroll(100):
        B[0] = B[0] + T.float32(1.0)
"""
    unrolled = unroll_loops(parse(text))
    assert_program(
        unrolled,
        """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for j in range(8):
        B[j] = A[j]
    for j in range(8):
        B[j + 8] = A[j + 8]
    for i in T.unroll(100):
        B[0] = B[0] + T.float32(1.0)
""",
    )
    loops = [n for n in nodes_of(unrolled, For) if n.kind == ForKind.SERIAL]
    assert loops[0].loop_var is not loops[1].loop_var  # each copy has its own loop variable
    run_both(parse(text), unrolled)


VECTOR = """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(4):
        for j in T.vectorized(8):
            B[i * 16 + j] = A[i * 16 + j * 2] + A[i] * T.float32(2.0)
    for i in range(8):
        for j in T.vectorized(8):
            C[i] = C[i] + A[i * 8 + j]
    for j in T.vectorized(8):
        if j < 4:
            C[j] = A[j]
    for j in T.vectorized(8):
        C[j] = T.Select(j < 6, A[j + 58], T.float32(0.0))
    for j in T.vectorized(8):
        C[j] = T.exp(T.Select(j < 6, T.float32(1.0), T.float32(0.0)))
    for j in T.vectorized(6):
        B[j // 2 * 8 + j % 2] = A[j]
    for i in range(2):
        for j in T.vectorized(4):
            B[i * 4 + j + 32] = A[(i * 4 + j) // 8] + A[(i * 4 + j) % 8]
    for i in range(2):
        for j in T.vectorized(4):
            B[i * 4 + j + 40] = T.Select(i < 1, A[i * 4 + j], T.float32(0.0)) * T.float32(2.0)
"""


def test_vectorize_loops_vector_form_and_serial_fallbacks():
    # 1: unit-stride store, stride-2 load, broadcast scalar; 2: reduction into one element,
    # 3: if on the lane, 4: Select whose value loads (laziness), 6: non-affine index -> serial;
    # 5: a Select without loads is a vector select; 7: floordiv/floormod inside one block;
    # 8: a lane-independent Select whose values only load keeps its scalar condition (the code
    # generator guards the loads without a branch)
    assert_program(
        vectorize_loops(parse(VECTOR)),
        """
@T.prim_func
def main(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"), C: T.Buffer((8,), "float32")):
    for i in range(4):
        B[T.Ramp(i * 16, 1, 8)] = A[T.Ramp(i * 16, 2, 8)] + T.Broadcast(A[i] * T.float32(2.0), 8)
    for i, j in T.grid(8, 8):
        C[i] = C[i] + A[i * 8 + j]
    for j in range(8):
        if j < 4:
            C[j] = A[j]
    for j in range(8):
        C[j] = T.Select(j < 6, A[j + 58], T.float32(0.0))
    C[T.Ramp(0, 1, 8)] = T.exp(T.Select(T.Ramp(0, 1, 8) < T.Broadcast(6, 8), T.Broadcast(T.float32(1.0), 8), T.Broadcast(T.float32(0.0), 8)))
    for j in range(6):
        B[j // 2 * 8 + j % 2] = A[j]
    for i in range(2):
        B[T.Ramp(i * 4 + 32, 1, 4)] = T.Broadcast(A[0], 4) + A[T.Ramp(i * 4, 1, 4)]
    for i in range(2):
        B[T.Ramp(i * 4 + 40, 1, 4)] = T.Select(i < 1, A[T.Ramp(i * 4, 1, 4)], T.Broadcast(T.float32(0.0), 4)) * T.Broadcast(T.float32(2.0), 4)
""",
    )
    run_both(parse(VECTOR), lower(parse(VECTOR), debug=True))


def test_vectorize_long_loops_in_chunks_with_a_tail():
    text = """
@T.prim_func
def main(A: T.Buffer((20,), "float32"), B: T.Buffer((20,), "float32")):
    for j in T.vectorized(9):
        B[j] = A[j]
    for j in T.vectorized(11):
        B[j + 9] = A[j + 9]
"""
    assert_program(
        vectorize_loops(parse(text), max_lanes=4),
        """
@T.prim_func
def main(A: T.Buffer((20,), "float32"), B: T.Buffer((20,), "float32")):
    for j_vo in range(2):
        B[T.Ramp(j_vo * 4, 1, 4)] = A[T.Ramp(j_vo * 4, 1, 4)]
    B[8] = A[8]
    for j_vo in range(2):
        B[T.Ramp(j_vo * 4 + 9, 1, 4)] = A[T.Ramp(j_vo * 4 + 9, 1, 4)]
    B[T.Ramp(17, 1, 3)] = A[T.Ramp(17, 1, 3)]
""",
    )
    run_both(parse(text), vectorize_loops(parse(text), max_lanes=4))


def test_vectorize_keeps_lane_local_order_and_refuses_cross_lane_dependences():
    text = """
@T.prim_func
def main(A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
    for j in T.vectorized(8):
        B[j] = A[j]
        B[j] = B[j] * T.float32(2.0)
    for j in T.vectorized(8):
        B[j + 8] = B[j + 7] + A[j]
"""
    low = vectorize_loops(parse(text))
    kinds = [n.kind for n in nodes_of(low, For)]
    assert kinds == [ForKind.SERIAL]  # the second loop reads what a neighbouring lane writes
    assert isinstance(low.body.stmts[0].indices[0], Ramp)
    run_both(parse(text), low)


def test_thread_binding_is_rejected_for_cpu():
    text = """
@T.prim_func
def main(A: T.Buffer((64,), "float32")):
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        A[tx] = T.float32(1.0)
"""
    with pytest.raises(LoweringError, match=r"loop tx .*threadIdx.x.*GPU target"):
        check_cpu_target(parse(text))
    with pytest.raises(LoweringError, match="GPU"):
        lower(parse(text))


def test_debug_mode_names_the_pass_that_broke_the_program():
    def broken_pass(func: PrimFunc) -> PrimFunc:  # stores to a buffer nobody allocated
        return func.with_body(BufferStore(Buffer("ghost", (4,), "float32"), FloatImm("float32", 1.0), (0,)))

    with pytest.raises(LoweringError, match="broken_pass"):
        lower(parse(REDUCE), debug=True, passes=[*PIPELINE, broken_pass])
    assert [p.__name__ for p in PIPELINE] == [
        "check_cpu_target",
        "lower_init",
        "lower_intrin",
        "lower_blocks",
        "flatten_buffers",
        "simplify",
        "unroll_loops",
        "vectorize_loops",
    ]


# ---------------------------------------------------------------------------------------
# the whole pipeline against the interpreter

WORKLOADS = [(n, dt) for n in workloads.names() for dt in workloads.dtypes(n) if dt in ("float32", "int8")]


@pytest.mark.parametrize(("name", "dtype"), WORKLOADS, ids=[f"{n}-{d}" for n, d in WORKLOADS])
@pytest.mark.slow
def test_every_workload_lowers_to_the_same_results(name, dtype):
    wl = workloads.reduced(name, 0, dtype)
    low = lower(wl.func, debug=True)
    check_lowered_form(low)
    run_both(wl.func, low, wl.make_inputs(seeded_rng()))


def test_every_workload_name_is_covered():
    assert {n for n, _ in WORKLOADS} == set(workloads.names())
    assert len(workloads.names()) == 14


def _scheduled_gemm() -> tuple[PrimFunc, PrimFunc]:
    func = workloads.make("GMM", (1, 32, 32, 32)).func
    sch = Schedule(func)
    z = sch.get_block("Z")
    cache = sch.cache_write(z, 0, "local")
    b, i, j, k = sch.get_loops(z)
    io, ii = sch.split(i, [None, 4])
    jo, ji = sch.split(j, [None, 16])
    ko, ki = sch.split(k, [None, 4])
    sch.reorder([io, jo, ko, ki, ii, ji])
    sch.reverse_compute_at(cache, jo)
    sch.cache_read(z, 1, "global")
    sch.parallel(sch.fuse([b, io]))
    sch.unroll(ki)
    sch.vectorize(ji)
    sch.decompose_reduction(z, ko)
    return func, sch.func


def test_scheduled_gemm_lowers_to_vector_code_and_matches():
    func, scheduled = _scheduled_gemm()
    low = lower(scheduled, debug=True)
    check_lowered_form(low)
    assert any(loop.kind == ForKind.PARALLEL for loop in nodes_of(low, For))
    assert any(isinstance(s.indices[0], Ramp) for s in nodes_of(low, BufferStore))
    assert not any(loop.kind == ForKind.UNROLLED for loop in nodes_of(low, For))  # k_1 (4) unrolled
    run_both(func, low)


def test_rfactor_gemm_lowers_and_matches():
    func = workloads.make("GMM", (1, 8, 8, 32)).func
    sch = Schedule(func)
    z = sch.get_block("Z")
    k = sch.get_loops(z)[-1]
    _, ki = sch.split(k, [None, 8])
    rf = sch.rfactor(ki, 0)
    sch.vectorize(sch.get_loops(rf)[-1])  # k_1: a strided (stride 64) vector store into Z_rf
    sch.parallel(sch.get_loops(rf)[1])
    low = lower(sch.func, debug=True)
    check_lowered_form(low)
    assert any(isinstance(s.indices[0], Ramp) and s.indices[0].stride.value == 64 for s in nodes_of(low, BufferStore))
    run_both(func, low)


def test_scheduled_conv_with_padding_lowers_and_matches():
    func = workloads.make("C2D", (1, 6, 6, 4, 8, 3, 1, 1)).func
    sch = Schedule(func)
    conv = sch.get_block("conv2d_nhwc")
    pad = sch.get_block("PadInput")
    n, h, w, co, rh, rw, rc = sch.get_loops(conv)
    co_o, co_i = sch.split(co, [None, 4])
    sch.reorder([n, h, w, co_o, rh, rw, rc, co_i])
    sch.vectorize(sch.get_loops(pad)[-1])  # padding Select on h, w: one condition per vector
    weight = sch.cache_read(conv, 1, "local")
    sch.compute_at(weight, co_o)
    sch.vectorize(co_i)
    sch.unroll(rw)
    sch.parallel(h)
    sch.decompose_reduction(conv, rh)
    low = lower(sch.func, debug=True)
    check_lowered_form(low)
    assert any(
        isinstance(s.indices[0], Ramp) and isinstance(s.value, Select) and s.value.condition.dtype.lanes == 1
        for s in nodes_of(low, BufferStore)
    )
    run_both(func, low)


def test_lowering_the_int8_gemm_keeps_wrapping_int32_arithmetic():
    wl = workloads.reduced("GMM", 0, "int8")
    sch = Schedule(wl.func)
    loops = sch.get_loops(sch.get_block(_only_block_name(wl.func)))
    sch.vectorize(loops[-2])
    low = lower(sch.func, debug=True)
    check_lowered_form(low)
    run_both(wl.func, low, wl.make_inputs(seeded_rng()))


def _only_block_name(func: PrimFunc) -> str:
    names = [n.name for n in nodes_of(func, Block) if n.name != "root"]
    return names[-1]


RARE_STEPS = ("step_compute_at", "step_rfactor", "step_storage_align")


@pytest.mark.slow
def test_random_schedules_lower_to_the_same_results():
    tally = StepTally()

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        name = data.draw(st.sampled_from(sorted(PROGRAMS)), label="program")
        original = PROGRAMS[name]
        sch = Schedule(original, seed=data.draw(st.integers(0, 2**16), label="seed"))
        for _ in range(data.draw(st.integers(1, 6), label="steps")):
            tally.run(data.draw(st.sampled_from(STEPS), label="step"), data, sch)
        low = lower(sch.func, debug=True)
        check_lowered_form(low)
        run_both(original, low, tol=1e-4)

    fuzz()
    # fewer programs than the schedule fuzz: compute_at, rfactor and storage_align may never apply here
    tally.check([s for s in STEPS if s.__name__ not in RARE_STEPS], min_share=MIN_SHARE)


@pytest.mark.slow
def test_random_schedules_with_an_innermost_vectorized_loop():
    """Like the test above, but the innermost loop of some block is always vectorized (the
    random steps alone rarely leave a vectorizable loop)."""
    tally = StepTally()
    vectorized = 0

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        nonlocal vectorized
        name = data.draw(st.sampled_from(sorted(PROGRAMS)), label="program")
        original = PROGRAMS[name]
        sch = Schedule(original, seed=data.draw(st.integers(0, 2**16), label="seed"))
        for _ in range(data.draw(st.integers(0, 3), label="steps")):
            tally.run(data.draw(st.sampled_from(STEPS), label="step"), data, sch)
        names = [b.name for b in nodes_of(sch.func, Block) if b.name != "root"]
        loops = sch.get_loops(sch.get_block(data.draw(st.sampled_from(names), label="block")))
        if loops:
            try:
                sch.vectorize(loops[-1])
                vectorized += 1
            except ScheduleError:
                pass
        low = lower(sch.func, debug=True)
        check_lowered_form(low)
        run_both(original, low, tol=1e-4)

    fuzz()
    tally.check([], min_share=MIN_SHARE)
    assert vectorized >= 30, f"only {vectorized} of 60 programs had a loop vectorized"  # 38 with the repeatable draw
