"""The caches behind candidates per second: a remembered primitive call gives exactly what
running it gives (program, random variables, trace), refusals are never remembered, and the
memoized analyses answer as the uncached ones."""

from __future__ import annotations

import random

import pytest

from tensorsearch import hardware, workloads
from tensorsearch.arith import eval_int_set
from tensorsearch.arith.iter_map import affine_binding_error, uncached_affine_binding_error
from tensorsearch.ir import IntImm, Range, Var, structural_hash
from tensorsearch.schedule import Schedule, ScheduleError, state
from tensorsearch.schedule.state import PRIMITIVE_CACHE, clear_primitive_cache, set_primitive_cache_size
from tensorsearch.search.space.design import DesignSpace

DEFAULT_SIZE = state._CACHE_SIZE


@pytest.fixture
def no_cache():
    """Run with the primitive cache off, then restore it."""
    set_primitive_cache_size(0)
    yield
    set_primitive_cache_size(DEFAULT_SIZE)


_GEMM = workloads.get("GMM", 0, "float32").func


def _gemm():
    return _GEMM  # one program object: the cache keys on identity


def _tiled(sch: Schedule) -> Schedule:
    block = sch.get_block("Z")
    _, i, _, k = sch.get_loops(block)
    i0, i1 = sch.split(i, [None, 16])
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder([i0, k0, k1, i1])
    sch.decompose_reduction(block, k0)
    sch.vectorize(sch.get_loops(block)[-1])
    return sch


def test_second_schedule_reuses_the_first_ones_programs():
    clear_primitive_cache()
    first = _tiled(Schedule(_gemm()))
    second = _tiled(Schedule(_gemm()))
    assert second.func is first.func  # every call was remembered
    assert second.trace.as_json_text() == first.trace.as_json_text()


def test_calls_after_enter_postproc_are_not_remembered():
    # no other replay reaches a program made in postprocessing: such calls would only fill the cache
    clear_primitive_cache()
    sch = Schedule(_gemm())
    sch.get_block("Z")
    remembered = len(PRIMITIVE_CACHE)
    assert remembered > 0
    sch.enter_postproc()
    _tiled(sch)
    assert len(PRIMITIVE_CACHE) == remembered + 1  # enter_postproc itself, then nothing
    assert sch.copy()._postproc


def test_remembered_calls_match_running_them(no_cache):
    plain = _tiled(Schedule(_gemm()))
    set_primitive_cache_size(DEFAULT_SIZE)
    clear_primitive_cache()
    _tiled(Schedule(_gemm()))
    cached = _tiled(Schedule(_gemm()))
    assert structural_hash(cached.func) == structural_hash(plain.func)
    assert cached.trace.as_json_text() == plain.trace.as_json_text()


def test_block_renames_are_replayed():
    """decompose_reduction re-points every BlockRV of the block at its update block."""
    clear_primitive_cache()
    for _ in range(2):
        sch = Schedule(_gemm())
        block = sch.get_block("Z")
        loops = sch.get_loops(block)
        init = sch.decompose_reduction(block, loops[1])
        assert sch.get(block).name == "Z_update"
        assert sch.get(block).init is None
        assert sch.get(init).name == "Z_init"


def test_refusals_are_not_remembered():
    clear_primitive_cache()
    for _ in range(2):
        sch = Schedule(_gemm())
        block = sch.get_block("Z")
        loops = sch.get_loops(block)
        before = sch.func
        with pytest.raises(ScheduleError):
            sch.parallel(loops[-1])  # a reduction loop
        assert sch.func is before
        assert [i.kind.name for i in sch.trace.insts] == ["get_block", "get_loops"]


def test_fresh_samples_are_not_remembered():
    clear_primitive_cache()
    draws = set()
    for seed in range(8):
        sch = Schedule(_gemm(), seed=seed)
        _, i, _, _ = sch.get_loops(sch.get_block("Z"))
        draws.add(tuple(sch.get(v) for v in sch.sample_perfect_tile(i, n=3, max_innermost_factor=16)))
    assert len(draws) > 1
    assert not any(key[1] == "sample_perfect_tile" for key in PRIMITIVE_CACHE)


def test_cache_size_is_validated_and_bounds_the_cache():
    with pytest.raises(ValueError, match="non-negative integer"):
        set_primitive_cache_size(-1)
    set_primitive_cache_size(3)
    try:
        _tiled(Schedule(_gemm()))
        assert len(PRIMITIVE_CACHE) <= 3
    finally:
        set_primitive_cache_size(DEFAULT_SIZE)


@pytest.mark.parametrize("name, index, dtype", [("GMM", 0, "int8"), ("C2D", 0, "float32")])
@pytest.mark.slow
def test_candidates_are_the_same_with_and_without_the_cache(name, index, dtype):
    """Fresh samples and their replays make the same programs and traces either way."""
    space = DesignSpace(workloads.get(name, index, dtype).func, hardware.load("x86-znver4"))

    def run() -> list:
        rng = random.Random(3)
        out = []
        for _ in range(4):
            cand = space.sample(rng)
            again = None if cand is None else space.replay(cand.design_trace, cand.space)
            out += [None if c is None else (c.key, c.trace.as_json_text()) for c in (cand, again)]
        return out

    clear_primitive_cache()
    cached = run()
    set_primitive_cache_size(0)
    try:
        plain = run()
    finally:
        set_primitive_cache_size(DEFAULT_SIZE)
    assert cached == plain
    assert any(c is not None for c in cached)


def test_affine_binding_memo_tells_loop_domains_apart():
    sch = Schedule(_gemm())
    realize, _ = sch._block_realize(sch.get_block("Z"))
    loops = sch.get_loops(sch.get_block("Z"))
    dom = {sch.get(lp).loop_var: Range(sch.get(lp).min, sch.get(lp).extent) for lp in loops}
    assert affine_binding_error(realize, dom) is None
    narrow = dict(dom)
    first = next(iter(narrow))
    narrow[first] = Range(IntImm(first.dtype, 0), IntImm(first.dtype, 7))  # b has extent 1: now 7
    assert affine_binding_error(realize, narrow) == uncached_affine_binding_error(realize, narrow)
    assert affine_binding_error(realize, dom) is None


def test_eval_int_set_constant_ranges_and_leaves():
    i, j, n = Var("i"), Var("j"), Var("n")
    dom = {i: Range(IntImm(i.dtype, 2), IntImm(i.dtype, 5)), j: Range(n, IntImm(j.dtype, 4))}
    s = eval_int_set(i, dom)
    assert (s.min_value, s.max_value) == (IntImm(i.dtype, 2), IntImm(i.dtype, 6))
    s = eval_int_set(i * 4 + j, dom)
    assert str(s.min_value) == "n + 8" and str(s.max_value) == "n + 27"
    s = eval_int_set(IntImm(i.dtype, 3), dom)
    assert s.is_single_point and s.min_value == IntImm(i.dtype, 3)
    s = eval_int_set(n, dom)
    assert s.is_single_point and s.min_value is n
