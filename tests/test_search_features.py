"""Per-store features (tensorsearch.search.cost_model.features): exact counts on small programs, loop kinds,
buffer bytes and strides, compacted allocations, tensorized tiles, determinism."""

import numpy as np
import pytest

from tensorsearch import hardware, te, workloads
from tensorsearch.intrin import tile_with_intrin
from tensorsearch.schedule import Schedule, ScheduleError, Trace
from tensorsearch.search.cost_model.features import (
    CANDIDATE_LENGTH,
    FEATURE_NAMES,
    candidate_vector,
    extract_features,
)


def raw(rows, name):
    """The unscaled value of a column (features are log2(1 + x))."""
    return np.exp2(rows[:, FEATURE_NAMES.index(name)].astype(np.float64)) - 1


def col(rows, name):
    return rows[:, FEATURE_NAMES.index(name)]


def gmm(n=64, dtype="float32"):
    return workloads.make("GMM", (1, n, n, n), dtype)


def test_feature_names_are_unique_and_match_the_rows():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    rows = extract_features(gmm().func)
    assert rows.dtype == np.float32
    assert rows.shape == (2, len(FEATURE_NAMES))  # the init of Z and its update


def test_naive_gemm_counts_exactly_its_flops():
    wl = gmm()
    init, update = extract_features(wl.func)
    rows = np.stack([init, update])
    # the update is one multiply-add per iteration: 64^3 of them, 2 * 64^3 = wl.flops
    np.testing.assert_allclose(raw(rows, "float_mad"), [0, 64**3], rtol=1e-5)
    np.testing.assert_allclose(2 * raw(rows, "float_mad")[1], wl.flops, rtol=1e-5)
    for name in ("float_add_sub", "float_mul", "float_div_mod", "int_mad", "int_add_sub", "int_mul", "cast_op"):
        assert raw(rows, name).max() < 1e-3, name  # index arithmetic is not counted
    np.testing.assert_allclose(raw(rows, "outer_prod"), [64**3, 64**3], rtol=1e-5)
    np.testing.assert_allclose(raw(rows, "reduce_prod"), [64, 64], rtol=1e-5)
    # the init writes a constant under `if k == 0`
    assert list(col(rows, "is_const_store")) == [1, 0]
    assert list(col(rows, "is_guarded")) == [1, 0]
    # no vectorized, unrolled or parallel loop
    for kind in ("vec", "unroll", "parallel"):
        assert list(col(rows, f"{kind}_pos_none")) == [1, 1]
        assert list(col(rows, f"{kind}_num")) == [0, 0]
    assert col(rows, "is_tensorized").max() == 0


def test_vectorized_unrolled_parallel_loops_are_seen():
    wl = gmm()
    sch = Schedule(wl.func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder([b, i, j0, k0, k1, j1])
    sch.decompose_reduction(z, k0)
    sch.parallel(i)
    sch.unroll(k1)
    sch.vectorize(j1)
    rows = extract_features(sch.func)
    update = rows[[col(rows, "float_mad").argmax()]]
    assert raw(update, "float_mad")[0] == pytest.approx(64**3, rel=1e-5)
    assert raw(update, "vec_num")[0] == pytest.approx(1)
    assert raw(update, "vec_prod")[0] == pytest.approx(16)
    assert raw(update, "vec_len")[0] == pytest.approx(16)
    assert col(update, "vec_pos_inner_spatial")[0] == 1
    assert raw(update, "unroll_prod")[0] == pytest.approx(4)
    assert col(update, "unroll_pos_inner_reduce")[0] == 1  # k1 is the innermost reduce loop
    assert raw(update, "parallel_prod")[0] == pytest.approx(64)
    assert col(update, "parallel_pos_outer_spatial")[0] == 1
    # j1 innermost: Z and Y contiguous, X invariant -> every access vectorizes
    assert col(update, "inner_unit_stride")[0] == 1
    assert raw(update, "unit_loop_len")[0] == pytest.approx(16)
    # the naive program has none of these
    naive = extract_features(wl.func)
    assert col(naive, "vec_num").max() == 0 and col(naive, "parallel_num").max() == 0


def copy_func(transpose):
    a = te.placeholder((48, 32) if transpose else (32, 48), "float32", name="A")
    if transpose:
        b = te.compute((32, 48), lambda i, j: a[j, i], name="B")
    else:
        b = te.compute((32, 48), lambda i, j: a[i, j], name="B")
    return te.create_prim_func([a, b])


@pytest.mark.parametrize("transpose", [False, True], ids=["copy", "transpose"])
def test_copy_kernel_bytes_lines_and_strides_are_exact(transpose):
    rows = extract_features(copy_func(transpose))
    assert rows.shape[0] == 1
    total = 32 * 48 * 4
    by_kind = {}
    for slot in range(5):
        if col(rows, f"B{slot}.acc_read")[0]:
            by_kind["read"] = slot
        if col(rows, f"B{slot}.acc_write")[0]:
            by_kind["write"] = slot
    assert set(by_kind) == {"read", "write"}
    for kind, slot in by_kind.items():
        assert raw(rows, f"B{slot}.bytes")[0] == pytest.approx(total, rel=1e-5), kind
        assert raw(rows, f"B{slot}.unique_bytes")[0] == pytest.approx(total, rel=1e-5), kind
        assert raw(rows, f"B{slot}.unique_lines")[0] == pytest.approx(total / 64, rel=1e-5), kind
        assert col(rows, f"B{slot}.reuse_none")[0] == 1, kind
    w, r = by_kind["write"], by_kind["read"]
    assert raw(rows, f"B{w}.stride")[0] == pytest.approx(1)
    assert raw(rows, f"B{w}.lines")[0] == pytest.approx(total / 64, rel=1e-5)  # 16 floats per line
    if transpose:
        # the innermost loop j walks A's first dimension: 32 elements apart, one line per element
        assert raw(rows, f"B{r}.stride")[0] == pytest.approx(32)
        assert raw(rows, f"B{r}.lines")[0] == pytest.approx(32 * 48, rel=1e-5)
        assert col(rows, "inner_unit_stride")[0] == 0.5
    else:
        assert raw(rows, f"B{r}.stride")[0] == pytest.approx(1)
        assert col(rows, "inner_unit_stride")[0] == 1
    assert col(rows, "float_mad")[0] == 0 and col(rows, "float_add_sub")[0] == 0


def test_cache_write_allocation_is_measured_as_compacted():
    wl = gmm()
    sch = Schedule(wl.func)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    i0, i1 = sch.split(i, [None, 8])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder([b, i0, j0, k, i1, j1])
    acc = sch.cache_write(z, 0, "local")
    sch.reverse_compute_at(acc, j0)
    rows = extract_features(sch.func)
    local = col(rows, "alloc_size") > 0
    assert local.sum() == 2  # the init and the update write Z_local; the copy-out writes Z
    # an 8 x 16 float32 tile per (i0, j0) iteration, as CompactBufferAllocation would shrink it
    np.testing.assert_allclose(raw(rows[local], "alloc_size"), 8 * 16 * 4, rtol=1e-5)
    np.testing.assert_allclose(raw(rows[local], "alloc_outer_prod"), 8 * 4, rtol=1e-5)
    update = rows[[col(rows, "float_mad").argmax()]]
    for slot in range(3):
        if col(update, f"B{slot}.acc_rw")[0]:
            assert raw(update, f"B{slot}.unique_bytes")[0] == pytest.approx(8 * 16 * 4, rel=1e-5)
            break
    else:
        raise AssertionError("the accumulator is not read-written by the update")


def test_vnni_tensorized_gemm_has_the_intrinsic_features():
    wl = gmm(64, "int8")
    emr = hardware.load("x86-emeraldrapids")
    vnni = next(i for i in emr.intrinsics if "vnni" in i.name)
    sch = Schedule(wl.func, hardware=emr)
    tile = tile_with_intrin(sch, sch.get_block(wl.output_buffers[0].name), vnni)
    sch.tensorize(tile, vnni.name)
    rows = extract_features(sch.func)
    tiles = rows[col(rows, "is_tensorized") == 1]
    assert len(tiles) == 1
    # vpdpbusd: 16 int32 lanes, each 4 uint8 x int8 products -> 64 multiply-adds per call
    assert raw(tiles, "intrin_macs")[0] == pytest.approx(64)
    assert raw(tiles, "intrin_vector_width")[0] == pytest.approx(16)
    assert raw(tiles, "intrin_calls")[0] == pytest.approx(64**3 / 64, rel=1e-5)
    assert raw(tiles, "int_mad")[0] == pytest.approx(64**3, rel=1e-5)  # the same work as the naive program
    # the 64 weights of a call are one contiguous run: stride 1
    assert any(raw(tiles, f"B{s}.stride")[0] == pytest.approx(1) for s in range(3))
    naive = extract_features(wl.func)
    assert col(naive, "is_tensorized").max() == 0
    assert raw(naive, "int_mad").max() == pytest.approx(64**3, rel=1e-5)


def test_features_are_deterministic_and_follow_the_program():
    wl = gmm()
    sch = Schedule(wl.func, seed=3)
    z = sch.get_block("Z")
    b, i, j, k = sch.get_loops(z)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, 2))
    sch.reorder([b, i0, j, k, i1])
    sch.vectorize(i1)
    first = extract_features(sch.func)
    np.testing.assert_array_equal(first, extract_features(sch.func))
    again = Schedule(wl.func)
    Trace.from_json(sch.trace.as_json_text()).apply(again)
    np.testing.assert_array_equal(first, extract_features(again.func))
    assert not np.array_equal(first, extract_features(wl.func))


def test_candidate_vector_aggregates_the_stores():
    rows = extract_features(gmm().func)
    vec = candidate_vector(rows)
    n = len(FEATURE_NAMES)
    assert vec.shape == (CANDIDATE_LENGTH,) and vec.dtype == np.float32
    np.testing.assert_array_equal(vec[:n], rows.max(axis=0))
    # a count column is summed over the stores: both rows run 64^3 iterations
    k = FEATURE_NAMES.index("outer_prod")
    assert vec[n + k] == pytest.approx(np.log2(2 * 64**3 + 1), rel=1e-6)
    assert vec[-1] == pytest.approx(np.log2(3))  # two stores
    assert not candidate_vector(np.zeros((0, n), np.float32)).any()
    with pytest.raises(ValueError, match="feature array"):
        candidate_vector(np.zeros((2, 5), np.float32))


def written_unique_bytes(row):
    """Unique bytes of the buffer a feature row stores to."""
    for slot in range(5):
        if row[FEATURE_NAMES.index(f"B{slot}.acc_write")] or row[FEATURE_NAMES.index(f"B{slot}.acc_rw")]:
            return row[FEATURE_NAMES.index(f"B{slot}.unique_bytes")]
    raise AssertionError("no written buffer in the row")


@pytest.mark.parametrize("name", ["GMM", "C2D"])
def test_loop_transformations_keep_the_work_and_the_unique_bytes(name):
    """Random perfect splits, reorders, fusions and loop kinds change the loops, not the work."""
    wl = workloads.make(name, workloads.reduced_args(name, 0), "float32")
    block = wl.output_buffers[0].name
    naive = extract_features(wl.func)
    mads = raw(naive, "float_mad").sum()
    assert 2 * mads == pytest.approx(wl.flops, rel=1e-5)
    rng = np.random.default_rng(7)
    for seed in range(6):
        sch = Schedule(wl.func, seed=seed)
        z = sch.get_block(block)
        loops = []
        for lp in sch.get_loops(z):
            if int(sch.get(lp).extent.value) > 1 and rng.random() < 0.6:
                loops.extend(sch.split(lp, sch.sample_perfect_tile(lp, 2)))
            else:
                loops.append(lp)
        sch.reorder([loops[p] for p in rng.permutation(len(loops))])
        if rng.random() < 0.5:
            sch.fuse(sch.get_loops(z)[:2])  # a fused loop makes floordiv/floormod indices
        for lp, kind in zip(sch.get_loops(z)[-2:], ("unroll", "vectorize"), strict=True):
            try:
                getattr(sch, kind)(lp)
            except ScheduleError as err:  # a reduce loop cannot be vectorized
                assert "reduc" in str(err)
        rows = extract_features(sch.func)
        assert rows.shape == naive.shape and np.isfinite(rows).all()
        assert raw(rows, "float_mad").sum() == pytest.approx(mads, rel=1e-5)
        # every store still writes each element of its buffer: the same unique bytes
        for r_naive, r in zip(naive, rows, strict=True):
            assert written_unique_bytes(r) == pytest.approx(written_unique_bytes(r_naive), rel=1e-6)
