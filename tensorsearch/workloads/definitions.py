"""The workloads written in the compute DSL (``tensorsearch.te``), after TVM MetaSchedule's
``python/tvm/meta_schedule/testing/te_workload.py``.

Every builder takes the workload's argument tuple and a :class:`Form` (the data types of the
data, weight and accumulator) and returns the te tensors in parameter order, inputs first and
the output last.  Stage (block) names follow TVM's: ``PadInput`` for zero padding, the
operator's name for the main computation.

Small simplifications against a literal transcription of TVM's TE (the computed values are
the same): a padding stage tests only the sides that are padded; an index term multiplied by
a stride or dilation of 1 is written without the multiplication; a grouped convolution with
one group reads input channel ``rc`` instead of ``co // CO * CI + rc``; a depthwise
convolution (channel multiplier 1) reads ``weight[0, rh, rw, c]`` and ``inputs[..., c]``;
casts to the accumulator type are omitted where the types already agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .. import te
from ..ir import PrimExpr, max_
from .reference import winograd_geometry, winograd_matrices_f32


@dataclass(frozen=True)
class Form:
    """The element types of one dtype form of a workload.

    - ``float32``: everything float32.
    - ``float16``: float16 data and weights; reductions accumulate in float32 and write float32
      outputs; elementwise float math runs in float32 after a cast.
    - ``bfloat16``: as ``float16`` with bfloat16 data and weights (AVX512-BF16 ``vdpbf16ps``, AMX
      ``tdpbf16ps``).
    - ``int8``: uint8 data times int8 weights, both cast to int32, accumulated in int32.
    - ``int16``: int16 data and weights, both cast to int32, accumulated in int32 (AVX512-VNNI
      ``vpdpwssd``, ``pmaddwd``).
    """

    name: str
    data: str
    weight: str
    acc: str


FORMS = {
    "float32": Form("float32", "float32", "float32", "float32"),
    "float16": Form("float16", "float16", "float16", "float32"),
    "bfloat16": Form("bfloat16", "bfloat16", "bfloat16", "float32"),
    "int8": Form("int8", "uint8", "int8", "int32"),
    "int16": Form("int16", "int16", "int16", "int32"),
}


def _mul(a: PrimExpr, b: PrimExpr, acc: str) -> PrimExpr:
    return a.astype(acc) * b.astype(acc)


def _scaled(index: PrimExpr, factor: int) -> PrimExpr:
    return index if factor == 1 else index * factor


def _window(out: PrimExpr, red: PrimExpr, stride: int, dilation: int = 1) -> PrimExpr:
    """``out * stride + red * dilation``, the input position a window tap reads."""
    return _scaled(out, stride) + _scaled(red, dilation)


def pad(
    t: te.Tensor,
    before: Sequence[int],
    after: Sequence[int] | None = None,
    name: str = "PadInput",
    value: PrimExpr | None = None,
) -> te.Tensor:
    """Padding (TVM's ``topi.nn.pad``): ``before[d]``/``after[d]`` elements of ``value`` (zero by
    default) around dimension d.

    The source index of a padded element lies outside the input; the element is the
    ``if_then_else``'s false value there, so the read in the true branch must not happen.
    """
    after = before if after is None else after
    in_shape = t.shape
    shape = tuple(s + b + a for s, b, a in zip(in_shape, before, after, strict=True))
    fill = te.const(0, t.dtype) if value is None else value

    def body(*idx: PrimExpr) -> PrimExpr:
        conds = []
        src = []
        for i, b, a, extent in zip(idx, before, after, in_shape, strict=True):
            src.append(i - b if b else i)
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < extent + b)
        if not conds:
            return t[tuple(src)]
        return te.if_then_else(te.all(*conds), t[tuple(src)], fill)

    return te.compute(shape, body, name=name)


def conv_out(size: int, kernel: int, stride: int, pad_: int, dilation: int = 1) -> int:
    return (size + 2 * pad_ - dilation * (kernel - 1) - 1) // stride + 1


# ---------------------------------------------------------------------------------------
# convolutions


def conv1d_nlc(args: tuple, form: Form) -> list[te.Tensor]:
    n, length, ci, co, k, stride, pad_ = args
    inputs = te.placeholder((n, length, ci), form.data, name="inputs")
    weight = te.placeholder((k, ci, co), form.weight, name="weight")
    out_len = conv_out(length, k, stride, pad_)
    rl = te.reduce_axis((0, k), name="rl")
    rc = te.reduce_axis((0, ci), name="rc")
    padded = pad(inputs, [0, pad_, 0])
    output = te.compute(
        (n, out_len, co),
        lambda nn, ll, cc: te.sum(
            _mul(padded[nn, _window(ll, rl, stride), rc], weight[rl, rc, cc], form.acc), axis=[rl, rc]
        ),
        name="conv1d_nlc",
    )
    return [inputs, weight, output]


def conv2d_nhwc(args: tuple, form: Form, name: str = "conv2d_nhwc") -> list[te.Tensor]:
    n, h, w, ci, co, k, stride, pad_ = args[:8]
    dilation = args[8] if len(args) > 8 else 1
    groups = args[9] if len(args) > 9 else 1
    inputs = te.placeholder((n, h, w, ci), form.data, name="inputs")
    weight = te.placeholder((k, k, ci // groups, co), form.weight, name="weight")
    cig, cog = ci // groups, co // groups
    out_h, out_w = conv_out(h, k, stride, pad_, dilation), conv_out(w, k, stride, pad_, dilation)
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    rc = te.reduce_axis((0, cig), name="rc")
    padded = pad(inputs, [0, pad_, pad_, 0])

    def channel(cc: PrimExpr) -> PrimExpr:
        return rc if groups == 1 else cc // cog * cig + rc

    output = te.compute(
        (n, out_h, out_w, co),
        lambda nn, hh, ww, cc: te.sum(
            _mul(
                padded[nn, _window(hh, rh, stride, dilation), _window(ww, rw, stride, dilation), channel(cc)],
                weight[rh, rw, rc, cc],
                form.acc,
            ),
            axis=[rh, rw, rc],
        ),
        name=name,
    )
    return [inputs, weight, output]


def conv3d_ndhwc(args: tuple, form: Form) -> list[te.Tensor]:
    n, d, h, w, ci, co, k, stride, pad_ = args
    inputs = te.placeholder((n, d, h, w, ci), form.data, name="inputs")
    weight = te.placeholder((k, k, k, ci, co), form.weight, name="weight")
    out_d, out_h, out_w = (conv_out(s, k, stride, pad_) for s in (d, h, w))
    rd = te.reduce_axis((0, k), name="rd")
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    rc = te.reduce_axis((0, ci), name="rc")
    padded = pad(inputs, [0, pad_, pad_, pad_, 0])
    output = te.compute(
        (n, out_d, out_h, out_w, co),
        lambda nn, dd, hh, ww, cc: te.sum(
            _mul(
                padded[nn, _window(dd, rd, stride), _window(hh, rh, stride), _window(ww, rw, stride), rc],
                weight[rd, rh, rw, rc, cc],
                form.acc,
            ),
            axis=[rd, rh, rw, rc],
        ),
        name="conv3d_ndhwc",
    )
    return [inputs, weight, output]


def depthwise_conv2d_nhwc(args: tuple, form: Form) -> list[te.Tensor]:
    n, h, w, c, k, stride, pad_ = args
    inputs = te.placeholder((n, h, w, c), form.data, name="inputs")
    weight = te.placeholder((1, k, k, c), form.weight, name="weight")
    out_h, out_w = conv_out(h, k, stride, pad_), conv_out(w, k, stride, pad_)
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    padded = pad(inputs, [0, pad_, pad_, 0])
    output = te.compute(
        (n, out_h, out_w, c),
        lambda nn, hh, ww, cc: te.sum(
            _mul(padded[nn, _window(hh, rh, stride), _window(ww, rw, stride), cc], weight[0, rh, rw, cc], form.acc),
            axis=[rh, rw],
        ),
        name="depth_conv2d_nhwc",
    )
    return [inputs, weight, output]


def conv2d_transpose_nhwc(args: tuple, form: Form) -> list[te.Tensor]:
    """TVM's formulation: pad the input (in input pixels), then a stride-1 convolution with the
    flipped kernel over the stride-dilated padded input, the dilation folded into the read
    (``if_then_else`` on the index being a multiple of the stride)."""
    n, h, w, ci, co, k, stride, pad_ = args
    inputs = te.placeholder((n, h, w, ci), form.data, name="inputs")
    weight = te.placeholder((k, k, ci, co), form.weight, name="weight")
    bpad = k - 1 - pad_  # the same on every side
    outer = (bpad + stride - 1) // stride
    padded = pad(inputs, [0, outer, outer, 0], [0, outer, outer, 0])
    border = (stride - bpad % stride) % stride
    out_h = (h - 1) * stride - 2 * pad_ + k
    out_w = (w - 1) * stride - 2 * pad_ + k
    rc = te.reduce_axis((0, ci), name="rc")
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    zero = te.const(0, form.data)

    def dilated(nn: PrimExpr, y: PrimExpr, x: PrimExpr, c: PrimExpr) -> PrimExpr:
        if stride == 1:
            return padded[nn, y, x, c]
        on_grid = te.all(te.equal(y % stride, 0), te.equal(x % stride, 0))
        return te.if_then_else(on_grid, padded[nn, y // stride, x // stride, c], zero)

    def shifted(i: PrimExpr, r: PrimExpr) -> PrimExpr:
        return i + r + border if border else i + r

    output = te.compute(
        (n, out_h, out_w, co),
        lambda nn, hh, ww, cc: te.sum(
            _mul(
                dilated(nn, shifted(hh, rh), shifted(ww, rw), rc),
                weight[k - 1 - rh, k - 1 - rw, rc, cc],
                form.acc,
            ),
            axis=[rh, rw, rc],
        ),
        name="conv2d_transpose_nhwc",
    )
    return [inputs, weight, output]


CAPSULE = 4


def conv2d_capsule_nhwijc(args: tuple, form: Form) -> list[te.Tensor]:
    n, h, w, ci, co, k, stride, pad_ = args
    cap = CAPSULE
    inputs = te.placeholder((n, h, w, cap, cap, ci), form.data, name="inputs")
    weight = te.placeholder((k, k, cap, cap, ci, co), form.weight, name="weight")
    out_h, out_w = conv_out(h, k, stride, pad_), conv_out(w, k, stride, pad_)
    rh = te.reduce_axis((0, k), name="rh")
    rw = te.reduce_axis((0, k), name="rw")
    cap_k = te.reduce_axis((0, cap), name="cap_k")
    rc = te.reduce_axis((0, ci), name="rc")
    padded = pad(inputs, [0, pad_, pad_, 0, 0, 0])
    output = te.compute(
        (n, out_h, out_w, cap, cap, co),
        lambda nn, hh, ww, cap_i, cap_j, cc: te.sum(
            _mul(
                padded[nn, _window(hh, rh, stride), _window(ww, rw, stride), cap_i, cap_k, rc],
                weight[rh, rw, cap_k, cap_j, rc, cc],
                form.acc,
            ),
            axis=[rh, rw, cap_k, rc],
        ),
        name="conv2d_capsule_nhwijc",
    )
    return [inputs, weight, output]


# ---------------------------------------------------------------------------------------
# matrix products


def batch_matmul_nkkm(args: tuple, form: Form) -> list[te.Tensor]:
    b, n, m, k = args
    x = te.placeholder((b, n, k), form.data, name="X")
    y = te.placeholder((b, k, m), form.weight, name="Y")
    rk = te.reduce_axis((0, k), name="k")
    z = te.compute((b, n, m), lambda bb, i, j: te.sum(_mul(x[bb, i, rk], y[bb, rk, j], form.acc), axis=[rk]), name="Z")
    return [x, y, z]


def transpose_batch_matmul(args: tuple, form: Form) -> list[te.Tensor]:
    batch, seq, n_head, n_dim = args
    query = te.placeholder((batch, seq, n_head, n_dim), form.data, name="query")
    value = te.placeholder((batch, seq, n_head, n_dim), form.weight, name="value")
    query_t = te.compute((batch, n_head, seq, n_dim), lambda b, h, ll, d: query[b, ll, h, d], name="query_T")
    value_t = te.compute((batch, n_head, n_dim, seq), lambda b, h, d, ll: value[b, ll, h, d], name="value_T")
    rk = te.reduce_axis((0, n_dim), name="k")
    out = te.compute(
        (batch, n_head, seq, seq),
        lambda b, h, i, j: te.sum(_mul(query_t[b, h, i, rk], value_t[b, h, rk, j], form.acc), axis=[rk]),
        name="C",
    )
    return [query, value, out]


# ---------------------------------------------------------------------------------------
# reductions and fused operators (floating point only)


def norm_bmn(args: tuple, form: Form) -> list[te.Tensor]:
    b, m, n = args
    a = te.placeholder((b, m, n), form.data, name="A")
    i = te.reduce_axis((0, m), name="i")
    j = te.reduce_axis((0, n), name="j")
    c = te.compute((b,), lambda bb: te.sum(_mul(a[bb, i, j], a[bb, i, j], form.acc), axis=[i, j]), name="C")
    d = te.compute((b,), lambda bb: te.sqrt(c[bb]), name="D")
    return [a, d]


def softmax_mn(args: tuple, form: Form) -> list[te.Tensor]:
    """TVM's ``topi.nn.softmax`` along axis 1: max, exp of the difference, sum, divide."""
    m, n = args
    a = te.placeholder((m, n), form.data, name="A")
    acc = form.acc
    k1 = te.reduce_axis((0, n), name="k")
    k2 = te.reduce_axis((0, n), name="k")
    max_elem = te.compute((m,), lambda i: te.max(a[i, k1].astype(acc), axis=[k1]), name="T_softmax_maxelem")
    exp = te.compute((m, n), lambda i, j: te.exp(a[i, j].astype(acc) - max_elem[i]), name="T_softmax_exp")
    expsum = te.compute((m,), lambda i: te.sum(exp[i, k2], axis=[k2]), name="T_softmax_expsum")
    norm = te.compute((m, n), lambda i, j: exp[i, j] / expsum[i], name="T_softmax_norm")
    return [a, norm]


def conv2d_nhwc_bn_relu(args: tuple, form: Form) -> list[te.Tensor]:
    """TVM's ``conv2d_nhwc_bn_relu``: conv2d (blocks PaddedInput, Conv2dOutput), then bias_add,
    bn_mul, bn_add and relu; parameters in TVM's order (data, kernel, bias, bn_offset,
    bn_scale, output).  bias/bn_scale/bn_offset are float32 in every form."""
    n, h, w, ci, co, k, stride, pad_ = args
    acc = form.acc
    data = te.placeholder((n, h, w, ci), form.data, name="data")
    kernel = te.placeholder((k, k, ci, co), form.weight, name="kernel")
    bias = te.placeholder((co,), acc, name="bias")
    bn_scale = te.placeholder((co,), acc, name="bn_scale")
    bn_offset = te.placeholder((co,), acc, name="bn_offset")
    out_h, out_w = conv_out(h, k, stride, pad_), conv_out(w, k, stride, pad_)
    padded = pad(data, [0, pad_, pad_, 0], name="PaddedInput")
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, k), name="ry")
    rx = te.reduce_axis((0, k), name="rx")
    conv = te.compute(
        (n, out_h, out_w, co),
        lambda nn, yy, xx, ff: te.sum(
            _mul(padded[nn, _window(yy, ry, stride), _window(xx, rx, stride), rc], kernel[ry, rx, rc, ff], acc),
            axis=[ry, rx, rc],
        ),
        name="Conv2dOutput",
    )
    shape = (n, out_h, out_w, co)
    biased = te.compute(shape, lambda i, j, kk, ll: conv[i, j, kk, ll] + bias[ll], name="bias_add")
    scaled = te.compute(shape, lambda i, j, kk, ll: biased[i, j, kk, ll] * bn_scale[ll], name="bn_mul")
    shifted = te.compute(shape, lambda i, j, kk, ll: scaled[i, j, kk, ll] + bn_offset[ll], name="bn_add")
    out = te.compute(shape, lambda i, j, kk, ll: max_(shifted[i, j, kk, ll], te.const(0, acc)), name="relu")
    return [data, kernel, bias, bn_offset, bn_scale, out]


def const_matrix(values: Sequence[Sequence[float]], dtype: str, name: str) -> te.Tensor:
    """A constant matrix as a stage of nested selects (TVM's ``topi.utils.const_matrix``,
    without its redundant ``% rows``/``% cols`` on the indices)."""
    rows, cols = len(values), len(values[0])

    def body(i: PrimExpr, j: PrimExpr) -> PrimExpr:
        now = te.const(0, dtype)
        for ii in range(rows):
            for jj in range(cols):
                now = te.if_then_else(
                    te.all(te.equal(i, ii), te.equal(j, jj)), te.const(float(values[ii][jj]), dtype), now
                )
        return now

    return te.compute((rows, cols), body, name=name)


def conv2d_winograd_nhwc(args: tuple, form: Form) -> list[te.Tensor]:
    """TVM's ``_conv2d_winograd_nhwc_impl`` with a pre-computed kernel (``pre_computed=True``),
    tile size 4, stride 1, no padding: stages A, B (transform matrices), data_pad, input_tile,
    data_pack, bgemm, inverse, conv2d_winograd.  ``weight`` is the transformed kernel
    ``kernel_pack[eps, nu, co, ci]`` of shape (alpha, alpha, CO, CI), alpha = ``kernel``."""
    n, h, w, ci, co, alpha = args
    m = 4
    r = alpha - m + 1
    acc = form.acc
    data = te.placeholder((n, h, w, ci), form.data, name="data")
    weight = te.placeholder((alpha, alpha, co, ci), form.weight, name="weight")
    a_np, b_np, _g = winograd_matrices_f32(m, r)
    a_mat = const_matrix(a_np, acc, "A")
    b_mat = const_matrix(b_np, acc, "B")
    out_h, out_w, n_h, n_w, extra_h, extra_w = winograd_geometry(h, w, m, r)
    p_total = n * n_h * n_w
    data_pad = pad(data, [0, 0, 0, 0], [0, extra_h, extra_w, 0], name="data_pad")
    input_tile = te.compute(
        (alpha, alpha, p_total, ci),
        lambda eps, nu, p, c: data_pad[p // (n_h * n_w), (p // n_w) % n_h * m + eps, p % n_w * m + nu, c],
        name="input_tile",
    )
    r_a = te.reduce_axis((0, alpha), name="r_a")
    r_b = te.reduce_axis((0, alpha), name="r_b")
    data_pack = te.compute(
        (alpha, alpha, p_total, ci),
        lambda eps, nu, p, c: te.sum(
            input_tile[r_a, r_b, p, c].astype(acc) * b_mat[r_a, eps] * b_mat[r_b, nu], axis=[r_a, r_b]
        ),
        name="data_pack",
    )
    rci = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, p_total, co),
        lambda eps, nu, p, c: te.sum(data_pack[eps, nu, p, rci] * weight[eps, nu, c, rci].astype(acc), axis=[rci]),
        name="bgemm",
    )
    r_a2 = te.reduce_axis((0, alpha), name="r_a")
    r_b2 = te.reduce_axis((0, alpha), name="r_b")
    inverse = te.compute(
        (m, m, p_total, co),
        lambda vh, vw, p, c: te.sum(bgemm[r_a2, r_b2, p, c] * a_mat[r_a2, vh] * a_mat[r_b2, vw], axis=[r_a2, r_b2]),
        name="inverse",
    )
    output = te.compute(
        (n, out_h, out_w, co),
        lambda nn, hh, ww, c: inverse[hh % m, ww % m, nn * (n_h * n_w) + hh // m * n_w + ww // m, c],
        name="conv2d_winograd",
    )
    return [data, weight, output]
