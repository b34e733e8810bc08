"""The paper's workloads: table, validation, numpy references, te definitions, interpretation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from seeds import draw_seed, seeded_rng

from tensorsearch import workloads as W
from tensorsearch.arith import verify
from tensorsearch.ir import assert_structural_equal
from tensorsearch.script import parse
from tensorsearch.workloads import reference as R

NAMES = ["C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM", "GRP", "T2D", "CBR", "TBG", "NRM", "SFM", "C2D_WIN_NHWC"]
INT8 = {"C1D", "C2D", "C3D", "CAP", "DEP", "DIL", "GMM", "GRP", "T2D", "TBG"}

# /work/shared/WORKLOADS.md (TVM MetaSchedule te_workload CONFIGS)
TABLE = {
    "C1D": [
        (1, 256, 64, 128, 3, 2, 1),
        (1, 128, 128, 256, 1, 2, 0),
        (1, 64, 256, 256, 5, 1, 2),
        (1, 32, 512, 512, 3, 1, 1),
    ],
    "C2D": [
        (1, 224, 224, 3, 64, 7, 2, 3),
        (1, 56, 56, 64, 64, 1, 1, 0),
        (1, 14, 14, 256, 256, 3, 1, 1),
        (1, 7, 7, 512, 512, 3, 1, 1),
    ],
    "C3D": [
        (1, 16, 224, 224, 3, 64, 7, 2, 3),
        (1, 16, 56, 56, 64, 64, 1, 1, 0),
        (1, 16, 14, 14, 256, 256, 3, 1, 1),
        (1, 16, 7, 7, 512, 512, 3, 1, 1),
    ],
    "GMM": [(1, 128, 128, 128), (1, 512, 32, 512), (1, 512, 512, 512), (1, 1024, 1024, 1024)],
    "GRP": [
        (1, 56, 56, 64, 128, 3, 2, 1, 1, 4),
        (1, 56, 56, 64, 64, 1, 1, 0, 1, 4),
        (1, 14, 14, 256, 256, 3, 1, 1, 1, 4),
        (1, 7, 7, 512, 512, 3, 1, 1, 1, 4),
    ],
    "DIL": [
        (1, 224, 224, 3, 64, 7, 2, 3, 2),
        (1, 56, 56, 64, 64, 1, 1, 0, 2),
        (1, 14, 14, 256, 256, 3, 1, 1, 2),
        (1, 7, 7, 512, 512, 3, 1, 1, 2),
    ],
    "DEP": [
        (1, 112, 112, 32, 3, 1, 1),
        (1, 112, 112, 64, 3, 2, 1),
        (1, 14, 14, 512, 3, 2, 1),
        (1, 7, 7, 1024, 3, 1, 1),
    ],
    "T2D": [
        (1, 4, 4, 512, 256, 4, 2, 1),
        (1, 8, 8, 256, 128, 4, 2, 1),
        (1, 16, 16, 128, 64, 4, 2, 1),
        (1, 32, 32, 64, 3, 4, 2, 1),
    ],
    "CAP": [
        (1, 16, 16, 32, 32, 3, 2, 1),
        (1, 8, 8, 32, 32, 3, 1, 1),
        (1, 16, 16, 8, 16, 3, 2, 1),
        (1, 8, 8, 16, 16, 3, 1, 1),
    ],
    "NRM": [(1, 256, 256), (1, 512, 512), (1, 1024, 1024), (1, 4096, 1024)],
    "SFM": [(256, 256), (512, 512), (1024, 1024), (2048, 2048)],
    "CBR": [
        (1, 224, 224, 3, 64, 7, 2, 3),
        (1, 56, 56, 64, 128, 3, 2, 1),
        (1, 28, 28, 128, 256, 1, 2, 0),
        (1, 7, 7, 512, 512, 3, 1, 1),
    ],
    "TBG": [(1, 128, 12, 64), (1, 128, 16, 64), (1, 64, 12, 128), (1, 128, 12, 128)],
    "C2D_WIN_NHWC": [(1, 14, 14, 128, 128, 6)],
}

# argument positions that carry the operator's structure (kernel, stride, pad, dilation, groups)
STRUCTURE = {
    "C1D": (4, 5, 6),
    "C2D": (5, 6, 7),
    "C3D": (6, 7, 8),
    "CAP": (5, 6, 7),
    "DEP": (4, 5, 6),
    "DIL": (5, 6, 7, 8),
    "GMM": (),
    "GRP": (5, 6, 7, 8, 9),
    "T2D": (5, 6, 7),
    "CBR": (5, 6, 7),
    "TBG": (),
    "NRM": (),
    "SFM": (),
    "C2D_WIN_NHWC": (5,),
}

CASES = [(n, i, dt) for n in NAMES for i in range(len(TABLE[n])) for dt in W.dtypes(n)]


def _id(case):
    return f"{case[0]}-{case[1]}-{case[2]}"


# ---------------------------------------------------------------------------------------
# the table


def test_names_shapes_and_dtypes():
    assert W.names() == NAMES
    for n in NAMES:
        assert W.shapes(n) == TABLE[n]
        assert len(W.arg_names(n)) == len(TABLE[n][0])
        floats = ("float32", "float16", "bfloat16")
        expected = (*floats, "int8", "int16") if n in INT8 else floats
        assert W.dtypes(n) == expected
        assert isinstance(W.describe(n), str) and "\n" not in W.describe(n)


def test_reduced_args_keep_the_structure():
    for n in NAMES:
        for i, full in enumerate(TABLE[n]):
            small = W.reduced_args(n, i)
            assert len(small) == len(full)
            for pos in STRUCTURE[n]:
                assert small[pos] == full[pos], (n, i, pos)
            W.make(n, small)  # valid arguments


def test_errors_name_the_valid_choices():
    with pytest.raises(ValueError, match="C2D_WIN_NHWC") as e:
        W.get("NOPE")
    assert "GMM" in str(e.value)
    with pytest.raises(ValueError, match=r"valid indices are 0: \(1, 14, 14"):
        W.get("C2D_WIN_NHWC", 1)
    with pytest.raises(ValueError, match="index 4"):
        W.get("GMM", 4)
    with pytest.raises(ValueError, match="float32"):
        W.get("GMM", 0, "float64")
    for n in ["NRM", "SFM", "CBR", "C2D_WIN_NHWC"]:
        for dtype in ("int8", "int16"):
            with pytest.raises(
                ValueError, match=rf"{n} does not support dtype '{dtype}'; it supports float32, float16, bfloat16$"
            ):
                W.get(n, 0, dtype)
    with pytest.raises(ValueError, match=r"unknown workload 'C2'; did you mean C2D\?"):
        W.get("C2")
    with pytest.raises(ValueError, match=r"4 integer arguments \(B, N, M, K\)"):
        W.make("GMM", (1, 2, 3))
    with pytest.raises(ValueError, match="groups=4 must divide"):
        W.make("GRP", (1, 8, 8, 6, 8, 3, 1, 1, 1, 4))
    with pytest.raises(ValueError, match="empty"):
        W.make("C2D", (1, 2, 2, 3, 4, 7, 2, 0))
    with pytest.raises(ValueError, match="alpha"):
        W.make("C2D_WIN_NHWC", (1, 8, 8, 2, 2, 5))
    assert W.get("c2d", 1).name == "C2D"


def test_workload_record():
    wl = W.get("GMM", 1, "int8")
    assert (wl.name, wl.index, wl.dtype, wl.args) == ("GMM", 1, "int8", (1, 512, 32, 512))
    assert wl.flops == 2 * 512 * 32 * 512
    assert [(t.name, t.shape, t.dtype) for t in wl.inputs] == [
        ("X", (1, 512, 512), "uint8"),
        ("Y", (1, 512, 32), "int8"),
    ]
    assert [(t.name, t.shape, t.dtype) for t in wl.outputs] == [("Z", (1, 512, 32), "int32")]
    assert wl == W.get("GMM", 1, "int8") and hash(wl) == hash(W.get("GMM", 1, "int8"))
    assert W.make("GMM", (1, 4, 4, 4)).index is None
    assert W.get("C2D", 0).flops == 2 * 112 * 112 * 64 * 7 * 7 * 3
    assert W.get("C2D_WIN_NHWC", 0).flops == 2 * 12 * 12 * 128 * 9 * 128
    for n in NAMES:
        for i in range(len(TABLE[n])):
            assert W.get(n, i).flops > 0


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_make_inputs(case):
    n, i, dt = case
    wl = W.make(n, W.reduced_args(n, i), dt)
    xs = wl.make_inputs(np.random.default_rng(1))
    assert len(xs) == len(wl.inputs)
    for x, spec in zip(xs, wl.inputs, strict=True):
        assert x.shape == spec.shape and str(x.dtype) == spec.dtype
        assert np.any(x != 0)
    again = wl.make_inputs(np.random.default_rng(1))
    assert all(np.array_equal(a, b) for a, b in zip(xs, again, strict=True))
    outs = wl.reference(*xs)
    assert [(o.shape, str(o.dtype)) for o in outs] == [(s.shape, s.dtype) for s in wl.outputs]


def test_int8_full_shapes_stay_in_int32():
    """The largest |sum| a full int8 or int16 shape can reach with make_inputs' ranges fits in int32."""
    for n in sorted(INT8):
        for i in range(len(TABLE[n])):
            wl = W.get(n, i, "int8")
            terms = wl.reduction_size if n != "T2D" else wl.args[5] ** 2 * wl.args[3]
            assert terms * 255 * 128 < 2**31, (n, i)
            assert terms * 256 * 256 < 2**31, (n, i)  # int16: both operands in [-256, 255]


def test_bfloat16_and_int16_forms():
    import ml_dtypes

    wl = W.get("GMM", 0, "bfloat16")
    assert [t.dtype for t in (*wl.inputs, *wl.outputs)] == ["bfloat16", "bfloat16", "float32"]
    x, _ = wl.make_inputs(np.random.default_rng(0))
    assert x.dtype == np.dtype(ml_dtypes.bfloat16)
    wl = W.get("GMM", 0, "int16")
    assert [t.dtype for t in (*wl.inputs, *wl.outputs)] == ["int16", "int16", "int32"]
    x, y = wl.make_inputs(np.random.default_rng(0))
    assert x.min() >= -256 and x.max() <= 255 and y.min() < -128 and y.max() > 127


# ---------------------------------------------------------------------------------------
# numpy references against naive loops


def _naive_conv2d(x, w, s, p, d, g):
    n_, h_, w_, _ = x.shape
    k, cig, co = w.shape[0], w.shape[2], w.shape[3]
    cog = co // g
    oh, ow = (h_ + 2 * p - d * (k - 1) - 1) // s + 1, (w_ + 2 * p - d * (k - 1) - 1) // s + 1
    out = np.zeros((n_, oh, ow, co))
    for n, y, x_, c in itertools.product(range(n_), range(oh), range(ow), range(co)):
        for rh, rw in itertools.product(range(k), range(k)):
            iy, ix = y * s + rh * d - p, x_ * s + rw * d - p
            if 0 <= iy < h_ and 0 <= ix < w_:
                cs = c // cog * cig
                out[n, y, x_, c] += x[n, iy, ix, cs : cs + cig] @ w[rh, rw, :, c]
    return out


@pytest.mark.parametrize("name", ["C2D", "GRP", "DIL", "CBR"])
def test_conv2d_references(name):
    rng = seeded_rng()
    for i in range(4):
        wl = W.reduced(name, i)
        xs = wl.make_inputs(rng)
        a = wl.args
        x, w = xs[0].astype(np.float64), xs[1].astype(np.float64)
        want = _naive_conv2d(x, w, a[6], a[7], a[8] if len(a) > 8 else 1, a[9] if len(a) > 9 else 1)
        if name == "CBR":
            want = np.maximum((want + xs[2]) * xs[4] + xs[3], 0)
        np.testing.assert_allclose(wl.reference(*xs)[0], want, rtol=1e-5, atol=1e-5)


def test_conv2d_transpose_reference():
    rng = seeded_rng()
    for args in [
        (1, 3, 3, 2, 2, 4, 2, 1),
        (1, 2, 3, 2, 3, 3, 2, 0),
        (1, 3, 2, 2, 2, 3, 1, 1),
        (1, 3, 3, 1, 1, 4, 2, 3),
    ]:
        wl = W.make("T2D", args)
        x, w = (v.astype(np.float64) for v in wl.make_inputs(rng))
        _n, h, w_, _ci, co, k, s, p = args
        oh, ow = (h - 1) * s - 2 * p + k, (w_ - 1) * s - 2 * p + k
        want = np.zeros((1, oh, ow, co))
        for i, j, kh, kw in itertools.product(range(h), range(w_), range(k), range(k)):
            y, xx = i * s + kh - p, j * s + kw - p
            if 0 <= y < oh and 0 <= xx < ow:
                want[0, y, xx] += x[0, i, j] @ w[kh, kw]
        np.testing.assert_allclose(wl.reference(*wl_inputs(wl, x, w))[0], want, rtol=1e-5, atol=1e-5)


def wl_inputs(wl, *arrays):
    return [a.astype(s.dtype) for a, s in zip(arrays, wl.inputs, strict=True)]


def test_capsule_and_depthwise_references():
    rng = seeded_rng()
    wl = W.reduced("CAP", 0)
    x, w = (v.astype(np.float64) for v in wl.make_inputs(rng))
    _n, h, w_, _ci, _co, k, s, p = wl.args
    oh, ow = (h + 2 * p - k) // s + 1, (w_ + 2 * p - k) // s + 1
    want = np.zeros(wl.outputs[0].shape)
    for y, xx, rh, rw in itertools.product(range(oh), range(ow), range(k), range(k)):
        iy, ix = y * s + rh - p, xx * s + rw - p
        if 0 <= iy < h and 0 <= ix < w_:
            want[0, y, xx] += np.einsum("icr,cjrd->ijd", x[0, iy, ix], w[rh, rw])
    np.testing.assert_allclose(wl.reference(*wl_inputs(wl, x, w))[0], want, rtol=1e-5, atol=1e-5)

    wl = W.reduced("DEP", 1)
    x, w = (v.astype(np.float64) for v in wl.make_inputs(rng))
    _n, h, w_, c, k, s, p = wl.args
    want = _naive_conv2d(x, np.einsum("xhwc,cd->hwxd", w, np.eye(c))[:, :, 0:1, :], s, p, 1, c)
    np.testing.assert_allclose(wl.reference(*wl_inputs(wl, x, w))[0], want, rtol=1e-5, atol=1e-5)


def test_winograd_reference_is_the_direct_convolution():
    rng = seeded_rng()
    for args in [(1, 8, 8, 2, 2, 6), (1, 14, 14, 3, 2, 6), (2, 9, 7, 2, 3, 6)]:
        data = rng.uniform(-1, 1, args[:4])
        g = rng.uniform(-1, 1, (3, 3, args[3], args[4]))
        got = R.conv2d_winograd_nhwc(args, [data, R.winograd_kernel_pack(g)])[0]
        np.testing.assert_allclose(got, R.conv_nd(data, g, 1, 0), rtol=1e-5, atol=1e-5)


def test_other_references():
    rng = seeded_rng()
    wl = W.reduced("TBG", 0, "int8")
    q, v = wl.make_inputs(rng)
    b, s, h, _d = wl.args
    want = np.zeros((b, h, s, s), dtype=np.int64)
    for hh, i, j in itertools.product(range(h), range(s), range(s)):
        want[0, hh, i, j] = q[0, i, hh].astype(np.int64) @ v[0, j, hh].astype(np.int64)
    np.testing.assert_array_equal(wl.reference(q, v)[0], want)
    (a,) = W.reduced("SFM", 1).make_inputs(rng)
    out = W.reduced("SFM", 1).reference(a)[0]
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)
    (a,) = W.reduced("NRM", 0).make_inputs(rng)
    np.testing.assert_allclose(W.reduced("NRM", 0).reference(a)[0], [np.linalg.norm(a.astype(np.float64))], rtol=1e-6)
    wl = W.reduced("C1D", 0, "int8")
    x, w = wl.make_inputs(rng)
    xp = np.pad(x.astype(np.int64), [(0, 0), (1, 1), (0, 0)])
    want = R.conv_nd(xp[:, :, None, :], w[:, None, :, :].astype(np.int64), wl.args[5], 0)[:, :, 0, :]
    np.testing.assert_array_equal(wl.reference(x, w)[0], want)


# ---------------------------------------------------------------------------------------
# the te definitions


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.slow
def test_func_builds_at_full_shape(case):
    n, i, dt = case
    wl = W.get(n, i, dt)
    func = wl.func
    got = [(b.name, tuple(int(x.value) for x in b.shape), str(b.dtype)) for b in func.buffers]
    assert got == [(t.name, t.shape, t.dtype) for t in wl.inputs + wl.outputs]
    assert len(wl.input_buffers) == len(wl.inputs) and len(wl.output_buffers) == len(wl.outputs)
    verify(func)
    assert_structural_equal(parse(func.script()), func)


@pytest.mark.parametrize("case", CASES, ids=_id)
@pytest.mark.slow
def test_interpreter_matches_reference(case):
    from tensorsearch.interpreter import interpret

    n, i, dt = case
    wl = W.reduced(n, i, dt)
    seed = draw_seed()  # seeded (tests/seeds.py); the seed is in the failure message
    xs = wl.make_inputs(np.random.default_rng(seed))
    outs = [np.zeros(t.shape, dtype=t.dtype) for t in wl.outputs]
    interpret(wl.func, *xs, *outs)
    try:
        wl.check(outs, wl.reference(*xs))
    except AssertionError as err:
        raise AssertionError(f"{_id(case)} with inputs from seed {seed}: {err}") from None


@pytest.mark.slow
def test_script_round_trip_at_reduced_shapes():
    from tensorsearch import script
    from tensorsearch.ir import structural_equal

    for n in NAMES:
        for i in range(len(TABLE[n])):
            for dt in W.dtypes(n):
                func = W.reduced(n, i, dt).func
                assert structural_equal(script.parse(func.script()), func), (n, i, dt)


def _block_names(func):
    from tensorsearch.ir import Block, post_order_visit

    found = []
    post_order_visit(func.body, lambda node: found.append(node.name) if isinstance(node, Block) else None)
    return sorted(n for n in found if n != "root")


def test_stages_follow_tvm():
    expected = {
        "C2D": ["PadInput", "conv2d_nhwc"],
        "T2D": ["PadInput", "conv2d_transpose_nhwc"],
        "TBG": ["C", "query_T", "value_T"],
        "NRM": ["C", "D"],
        "SFM": ["T_softmax_exp", "T_softmax_expsum", "T_softmax_maxelem", "T_softmax_norm"],
        "CBR": ["Conv2dOutput", "PaddedInput", "bias_add", "bn_add", "bn_mul", "relu"],
        "C2D_WIN_NHWC": ["A", "B", "bgemm", "conv2d_winograd", "data_pack", "data_pad", "input_tile", "inverse"],
    }
    for name, blocks in expected.items():
        assert _block_names(W.get(name, 0).func) == blocks, name
