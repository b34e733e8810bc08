"""The workload table: arguments, the four shapes of TVM MetaSchedule's te_workload table,
reduced shapes for interpretation, supported dtypes, input/output descriptions and flops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

import numpy as np

from . import definitions as d
from . import reference as ref

ALL_DTYPES = ("float32", "float16", "bfloat16", "int8", "int16")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class TensorSpec:
    """One parameter of a workload: name, shape, element type and role.

    ``role`` is ``"data"`` (uint8 in the int8 form), ``"weight"`` (int8 in the int8 form; both int16
    in the int16 form),
    ``"param"`` (a float32 per-channel parameter such as a bias), ``"kernel_pack"`` (a
    Winograd-transformed kernel) or ``"output"``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: str


@dataclass(frozen=True)
class Spec:
    name: str
    computation: str  # one line: what is computed, in which layout
    arg_names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    reduced: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    build: Callable[[tuple, d.Form], list]
    reference: Callable[[tuple, list[np.ndarray]], list[np.ndarray]]
    io: Callable[[tuple, d.Form], tuple[list[TensorSpec], list[TensorSpec]]]
    flops: Callable[[tuple], int]
    check: Callable[[tuple], None]


# ---------------------------------------------------------------------------------------
# validation helpers


class ArgumentError(ValueError):
    """Arguments that do not describe a valid instance of a workload."""


def _require(cond: bool, name: str, args: tuple, why: str) -> None:
    if not cond:
        raise ArgumentError(f"{name}{args}: {why}")


def _conv_check(name: str, spatial: tuple[int, ...], kernel: int, stride: int, pad: int, dilation: int = 1):
    def check(args: tuple) -> None:
        _require(kernel >= 1 and stride >= 1 and dilation >= 1, name, args, "kernel, stride and dilation must be >= 1")
        _require(pad >= 0, name, args, "padding must be >= 0")
        for s in spatial:
            out = d.conv_out(s, kernel, stride, pad, dilation)
            _require(out >= 1, name, args, f"the output would be empty (input extent {s}, output {out})")

    return check


def _positive(name: str, args: tuple, which: tuple[int, ...]) -> None:
    for i in which:
        _require(args[i] >= 1, name, args, f"argument {i} must be >= 1")


# ---------------------------------------------------------------------------------------
# per-workload io / flops / checks


def _form_io(form: d.Form, inputs: list[tuple[str, tuple, str]], outputs: list[tuple[str, tuple]]):
    def dt(role: str) -> str:
        return {"data": form.data, "weight": form.weight, "param": form.acc, "kernel_pack": form.weight}[role]

    ins = [TensorSpec(n, tuple(s), dt(role), role) for n, s, role in inputs]
    outs = [TensorSpec(n, tuple(s), form.acc, "output") for n, s in outputs]
    return ins, outs


# C1D -------------------------------------------------------------------------------------
def _c1d_out(a):
    n, length, _ci, co, k, s, p = a
    return (n, d.conv_out(length, k, s, p), co)


def _c1d_io(a, f):
    n, length, ci, co, k, _s, _p = a
    return _form_io(
        f, [("inputs", (n, length, ci), "data"), ("weight", (k, ci, co), "weight")], [("conv1d_nlc", _c1d_out(a))]
    )


def _c1d_check(a):
    _positive("C1D", a, (0, 1, 2, 3, 4, 5))
    _conv_check("C1D", (a[1],), a[4], a[5], a[6])(a)


# C2D / GRP / DIL -------------------------------------------------------------------------
def _c2d_parts(a):
    n, h, w, ci, co, k, s, p = a[:8]
    dil = a[8] if len(a) > 8 else 1
    g = a[9] if len(a) > 9 else 1
    return n, h, w, ci, co, k, s, p, dil, g


def _c2d_out(a):
    n, h, w, _ci, co, k, s, p, dil, _g = _c2d_parts(a)
    return (n, d.conv_out(h, k, s, p, dil), d.conv_out(w, k, s, p, dil), co)


def _c2d_io(a, f, out_name="conv2d_nhwc"):
    n, h, w, ci, co, k, _s, _p, _dil, g = _c2d_parts(a)
    return _form_io(
        f, [("inputs", (n, h, w, ci), "data"), ("weight", (k, k, ci // g, co), "weight")], [(out_name, _c2d_out(a))]
    )


def _c2d_flops(a):
    _n, _h, _w, ci, _co, k, _s, _p, _dil, g = _c2d_parts(a)
    return 2 * prod(_c2d_out(a)) * k * k * (ci // g)


def _c2d_checker(name):
    def check(a):
        _positive(name, a, (0, 1, 2, 3, 4, 5, 6))
        _n, h, w, ci, co, k, s, p, dil, g = _c2d_parts(a)
        _require(g >= 1 and ci % g == 0 and co % g == 0, name, a, f"groups={g} must divide CI={ci} and CO={co}")
        _conv_check(name, (h, w), k, s, p, dil)(a)

    return check


# C3D -------------------------------------------------------------------------------------
def _c3d_out(a):
    n, dd, h, w, _ci, co, k, s, p = a
    return (n, *(d.conv_out(x, k, s, p) for x in (dd, h, w)), co)


def _c3d_io(a, f):
    n, dd, h, w, ci, co, k, _s, _p = a
    return _form_io(
        f,
        [("inputs", (n, dd, h, w, ci), "data"), ("weight", (k, k, k, ci, co), "weight")],
        [("conv3d_ndhwc", _c3d_out(a))],
    )


def _c3d_check(a):
    _positive("C3D", a, (0, 1, 2, 3, 4, 5, 6, 7))
    _conv_check("C3D", a[1:4], a[6], a[7], a[8])(a)


# DEP -------------------------------------------------------------------------------------
def _dep_out(a):
    n, h, w, c, k, s, p = a
    return (n, d.conv_out(h, k, s, p), d.conv_out(w, k, s, p), c)


def _dep_io(a, f):
    n, h, w, c, k, _s, _p = a
    return _form_io(
        f, [("inputs", (n, h, w, c), "data"), ("weight", (1, k, k, c), "weight")], [("depth_conv2d_nhwc", _dep_out(a))]
    )


def _dep_check(a):
    _positive("DEP", a, (0, 1, 2, 3, 4, 5))
    _conv_check("DEP", a[1:3], a[4], a[5], a[6])(a)


# T2D -------------------------------------------------------------------------------------
def _t2d_out(a):
    n, h, w, _ci, co, k, s, p = a
    return (n, (h - 1) * s - 2 * p + k, (w - 1) * s - 2 * p + k, co)


def _t2d_io(a, f):
    n, h, w, ci, co, k, _s, _p = a
    return _form_io(
        f,
        [("inputs", (n, h, w, ci), "data"), ("weight", (k, k, ci, co), "weight")],
        [("conv2d_transpose_nhwc", _t2d_out(a))],
    )


def _t2d_check(a):
    _positive("T2D", a, (0, 1, 2, 3, 4, 5, 6))
    _require(0 <= a[7] <= a[5] - 1, "T2D", a, "padding must be in [0, kernel - 1]")
    _require(min(_t2d_out(a)[1:3]) >= 1, "T2D", a, "the output would be empty")


# CAP -------------------------------------------------------------------------------------
def _cap_out(a):
    n, h, w, _ci, co, k, s, p = a
    c = d.CAPSULE
    return (n, d.conv_out(h, k, s, p), d.conv_out(w, k, s, p), c, c, co)


def _cap_io(a, f):
    n, h, w, ci, co, k, _s, _p = a
    c = d.CAPSULE
    return _form_io(
        f,
        [("inputs", (n, h, w, c, c, ci), "data"), ("weight", (k, k, c, c, ci, co), "weight")],
        [("conv2d_capsule_nhwijc", _cap_out(a))],
    )


def _cap_check(a):
    _positive("CAP", a, (0, 1, 2, 3, 4, 5, 6))
    _conv_check("CAP", a[1:3], a[5], a[6], a[7])(a)


# GMM / TBG ------------------------------------------------------------------------------
def _gmm_io(a, f):
    b, n, m, k = a
    return _form_io(f, [("X", (b, n, k), "data"), ("Y", (b, k, m), "weight")], [("Z", (b, n, m))])


def _tbg_io(a, f):
    b, s, h, dd = a
    return _form_io(f, [("query", (b, s, h, dd), "data"), ("value", (b, s, h, dd), "weight")], [("C", (b, h, s, s))])


# NRM / SFM -------------------------------------------------------------------------------
def _nrm_io(a, f):
    b, m, n = a
    return _form_io(f, [("A", (b, m, n), "data")], [("D", (b,))])


def _sfm_io(a, f):
    m, n = a
    return _form_io(f, [("A", (m, n), "data")], [("T_softmax_norm", (m, n))])


# CBR -------------------------------------------------------------------------------------
def _cbr_io(a, f):
    n, h, w, ci, co, k, _s, _p = a
    return _form_io(
        f,
        [
            ("data", (n, h, w, ci), "data"),
            ("kernel", (k, k, ci, co), "weight"),
            ("bias", (co,), "param"),
            ("bn_offset", (co,), "param"),
            ("bn_scale", (co,), "param"),
        ],
        [("relu", _c2d_out(a))],
    )


# C2D_WIN_NHWC ---------------------------------------------------------------------------
def _win_out(a):
    n, h, w, _ci, co, alpha = a
    r = alpha - 3
    return (n, h - r + 1, w - r + 1, co)


def _win_io(a, f):
    n, h, w, ci, co, alpha = a
    return _form_io(
        f,
        [("data", (n, h, w, ci), "data"), ("weight", (alpha, alpha, co, ci), "kernel_pack")],
        [("conv2d_winograd", _win_out(a))],
    )


def _win_check(a):
    _positive("C2D_WIN_NHWC", a, (0, 1, 2, 3, 4, 5))
    _require(
        a[5] == 6, "C2D_WIN_NHWC", a, "kernel is the transformed kernel's extent alpha, which must be 6 (F(4x4, 3x3))"
    )
    _require(min(a[1], a[2]) >= 3, "C2D_WIN_NHWC", a, "the input must be at least 3x3")


def _args_check(name, n_args_positive):
    def check(a):
        _positive(name, a, n_args_positive)

    return check


SPECS: dict[str, Spec] = {
    s.name: s
    for s in [
        Spec(
            "C1D",
            "1-D convolution, NLC input, (kernel, CI, CO) weight: out[n,l,co] = sum_{rl,rc} pad(in)[n, l*stride+rl, rc] * w[rl,rc,co]",
            ("N", "L", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 256, 64, 128, 3, 2, 1),
                (1, 128, 128, 256, 1, 2, 0),
                (1, 64, 256, 256, 5, 1, 2),
                (1, 32, 512, 512, 3, 1, 1),
            ),
            ((1, 16, 8, 8, 3, 2, 1), (1, 16, 16, 8, 1, 2, 0), (1, 12, 8, 8, 5, 1, 2), (1, 12, 8, 8, 3, 1, 1)),
            ALL_DTYPES,
            d.conv1d_nlc,
            ref.conv1d_nlc,
            _c1d_io,
            lambda a: 2 * prod(_c1d_out(a)) * a[4] * a[2],
            _c1d_check,
        ),
        Spec(
            "C2D",
            "2-D convolution, NHWC input, HWIO weight (conv2d_nhwc)",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 224, 224, 3, 64, 7, 2, 3),
                (1, 56, 56, 64, 64, 1, 1, 0),
                (1, 14, 14, 256, 256, 3, 1, 1),
                (1, 7, 7, 512, 512, 3, 1, 1),
            ),
            ((1, 8, 8, 3, 4, 7, 2, 3), (1, 6, 6, 8, 8, 1, 1, 0), (1, 4, 4, 8, 8, 3, 1, 1), (1, 3, 3, 8, 8, 3, 1, 1)),
            ALL_DTYPES,
            d.conv2d_nhwc,
            ref.conv2d_nhwc,
            _c2d_io,
            _c2d_flops,
            _c2d_checker("C2D"),
        ),
        Spec(
            "C3D",
            "3-D convolution, NDHWC input, DHWIO weight (conv3d_ndhwc)",
            ("N", "D", "H", "W", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 16, 224, 224, 3, 64, 7, 2, 3),
                (1, 16, 56, 56, 64, 64, 1, 1, 0),
                (1, 16, 14, 14, 256, 256, 3, 1, 1),
                (1, 16, 7, 7, 512, 512, 3, 1, 1),
            ),
            (
                (1, 3, 3, 3, 3, 2, 7, 2, 3),
                (1, 3, 4, 4, 8, 8, 1, 1, 0),
                (1, 2, 3, 3, 4, 4, 3, 1, 1),
                (1, 2, 2, 2, 4, 8, 3, 1, 1),
            ),
            ALL_DTYPES,
            d.conv3d_ndhwc,
            ref.conv3d_ndhwc,
            _c3d_io,
            lambda a: 2 * prod(_c3d_out(a)) * a[6] ** 3 * a[4],
            _c3d_check,
        ),
        Spec(
            "CAP",
            "capsule 2-D convolution (capsule 4x4), NHWIJC input, (kh, kw, 4, 4, CI, CO) weight: a 4x4 matrix product per tap",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 16, 16, 32, 32, 3, 2, 1),
                (1, 8, 8, 32, 32, 3, 1, 1),
                (1, 16, 16, 8, 16, 3, 2, 1),
                (1, 8, 8, 16, 16, 3, 1, 1),
            ),
            ((1, 4, 4, 1, 2, 3, 2, 1), (1, 2, 2, 2, 2, 3, 1, 1), (1, 3, 3, 2, 2, 3, 2, 1), (1, 2, 2, 1, 2, 3, 1, 1)),
            ALL_DTYPES,
            d.conv2d_capsule_nhwijc,
            ref.conv2d_capsule_nhwijc,
            _cap_io,
            lambda a: 2 * prod(_cap_out(a)) * a[5] * a[5] * d.CAPSULE * a[3],
            _cap_check,
        ),
        Spec(
            "DEP",
            "depthwise 2-D convolution, NHWC input, (1, kh, kw, C) weight (channel multiplier 1)",
            ("N", "H", "W", "C", "kernel", "stride", "pad"),
            (
                (1, 112, 112, 32, 3, 1, 1),
                (1, 112, 112, 64, 3, 2, 1),
                (1, 14, 14, 512, 3, 2, 1),
                (1, 7, 7, 1024, 3, 1, 1),
            ),
            ((1, 8, 8, 4, 3, 1, 1), (1, 8, 8, 8, 3, 2, 1), (1, 6, 6, 16, 3, 2, 1), (1, 5, 5, 16, 3, 1, 1)),
            ALL_DTYPES,
            d.depthwise_conv2d_nhwc,
            ref.depthwise_conv2d_nhwc,
            _dep_io,
            lambda a: 2 * prod(_dep_out(a)) * a[4] * a[4],
            _dep_check,
        ),
        Spec(
            "DIL",
            "dilated 2-D convolution (dilation 2), NHWC input, HWIO weight",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad", "dilation"),
            (
                (1, 224, 224, 3, 64, 7, 2, 3, 2),
                (1, 56, 56, 64, 64, 1, 1, 0, 2),
                (1, 14, 14, 256, 256, 3, 1, 1, 2),
                (1, 7, 7, 512, 512, 3, 1, 1, 2),
            ),
            (
                (1, 12, 12, 3, 4, 7, 2, 3, 2),
                (1, 6, 6, 8, 8, 1, 1, 0, 2),
                (1, 5, 5, 8, 8, 3, 1, 1, 2),
                (1, 4, 4, 8, 16, 3, 1, 1, 2),
            ),
            ALL_DTYPES,
            d.conv2d_nhwc,
            ref.conv2d_nhwc,
            _c2d_io,
            _c2d_flops,
            _c2d_checker("DIL"),
        ),
        Spec(
            "GMM",
            "batched matrix product Z[b,i,j] = sum_k X[b,i,k] * Y[b,k,j] (batch_matmul_nkkm)",
            ("B", "N", "M", "K"),
            ((1, 128, 128, 128), (1, 512, 32, 512), (1, 512, 512, 512), (1, 1024, 1024, 1024)),
            ((1, 16, 16, 16), (1, 16, 4, 32), (1, 12, 12, 24), (1, 16, 16, 32)),
            ALL_DTYPES,
            d.batch_matmul_nkkm,
            ref.batch_matmul_nkkm,
            _gmm_io,
            lambda a: 2 * a[0] * a[1] * a[2] * a[3],
            _args_check("GMM", (0, 1, 2, 3)),
        ),
        Spec(
            "GRP",
            "grouped 2-D convolution (4 groups), NHWC input, (kh, kw, CI/groups, CO) weight",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad", "dilation", "groups"),
            (
                (1, 56, 56, 64, 128, 3, 2, 1, 1, 4),
                (1, 56, 56, 64, 64, 1, 1, 0, 1, 4),
                (1, 14, 14, 256, 256, 3, 1, 1, 1, 4),
                (1, 7, 7, 512, 512, 3, 1, 1, 1, 4),
            ),
            (
                (1, 6, 6, 8, 8, 3, 2, 1, 1, 4),
                (1, 6, 6, 16, 16, 1, 1, 0, 1, 4),
                (1, 4, 4, 8, 8, 3, 1, 1, 1, 4),
                (1, 3, 3, 16, 16, 3, 1, 1, 1, 4),
            ),
            ALL_DTYPES,
            d.conv2d_nhwc,
            ref.conv2d_nhwc,
            _c2d_io,
            _c2d_flops,
            _c2d_checker("GRP"),
        ),
        Spec(
            "T2D",
            "transposed 2-D convolution, NHWC input, (kh, kw, CI, CO) weight: out[i*s+kh-pad, j*s+kw-pad] += in[i,j] @ w[kh,kw]",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 4, 4, 512, 256, 4, 2, 1),
                (1, 8, 8, 256, 128, 4, 2, 1),
                (1, 16, 16, 128, 64, 4, 2, 1),
                (1, 32, 32, 64, 3, 4, 2, 1),
            ),
            ((1, 2, 2, 4, 4, 4, 2, 1), (1, 3, 3, 4, 2, 4, 2, 1), (1, 3, 3, 2, 4, 4, 2, 1), (1, 3, 3, 4, 3, 4, 2, 1)),
            ALL_DTYPES,
            d.conv2d_transpose_nhwc,
            ref.conv2d_transpose_nhwc,
            _t2d_io,
            lambda a: 2 * prod(_t2d_out(a)) * a[5] * a[5] * a[3],
            _t2d_check,
        ),
        Spec(
            "CBR",
            "conv2d_nhwc + bias + batch-norm (scale, offset) + relu, NHWC input, HWIO kernel",
            ("N", "H", "W", "CI", "CO", "kernel", "stride", "pad"),
            (
                (1, 224, 224, 3, 64, 7, 2, 3),
                (1, 56, 56, 64, 128, 3, 2, 1),
                (1, 28, 28, 128, 256, 1, 2, 0),
                (1, 7, 7, 512, 512, 3, 1, 1),
            ),
            ((1, 8, 8, 3, 2, 7, 2, 3), (1, 6, 6, 4, 8, 3, 2, 1), (1, 6, 6, 8, 16, 1, 2, 0), (1, 3, 3, 8, 8, 3, 1, 1)),
            FLOAT_DTYPES,
            d.conv2d_nhwc_bn_relu,
            ref.conv2d_nhwc_bn_relu,
            _cbr_io,
            lambda a: _c2d_flops(a) + 4 * prod(_c2d_out(a)),
            _c2d_checker("CBR"),
        ),
        Spec(
            "TBG",
            "transposed batch matmul (attention scores): C[b,h,i,j] = sum_d query[b,i,h,d] * value[b,j,h,d], inputs (batch, seq, head, dim)",
            ("batch", "seq", "n_head", "n_dim"),
            ((1, 128, 12, 64), (1, 128, 16, 64), (1, 64, 12, 128), (1, 128, 12, 128)),
            ((1, 8, 3, 16), (1, 8, 4, 8), (1, 4, 3, 32), (1, 8, 3, 32)),
            ALL_DTYPES,
            d.transpose_batch_matmul,
            ref.transpose_batch_matmul,
            _tbg_io,
            lambda a: 2 * a[0] * a[2] * a[1] * a[1] * a[3],
            _args_check("TBG", (0, 1, 2, 3)),
        ),
        Spec(
            "NRM",
            "norm D[b] = sqrt(sum_{m,n} A[b,m,n]^2) (norm_bmn)",
            ("B", "M", "N"),
            ((1, 256, 256), (1, 512, 512), (1, 1024, 1024), (1, 4096, 1024)),
            ((1, 16, 16), (1, 24, 24), (1, 32, 32), (1, 64, 16)),
            FLOAT_DTYPES,
            d.norm_bmn,
            ref.norm_bmn,
            _nrm_io,
            lambda a: 2 * prod(a) + a[0],
            _args_check("NRM", (0, 1, 2)),
        ),
        Spec(
            "SFM",
            "softmax over the last axis of an (M, N) matrix: max, exp(x - max), sum, divide (softmax_mn)",
            ("M", "N"),
            ((256, 256), (512, 512), (1024, 1024), (2048, 2048)),
            ((8, 8), (8, 16), (16, 16), (16, 32)),
            FLOAT_DTYPES,
            d.softmax_mn,
            ref.softmax_mn,
            _sfm_io,
            lambda a: 5 * a[0] * a[1],
            _args_check("SFM", (0, 1)),
        ),
        Spec(
            "C2D_WIN_NHWC",
            "Winograd F(4x4, 3x3) conv2d, NHWC input, pre-transformed (6, 6, CO, CI) kernel; stride 1, no padding",
            ("N", "H", "W", "CI", "CO", "kernel"),
            ((1, 14, 14, 128, 128, 6),),
            ((1, 8, 8, 2, 2, 6),),
            FLOAT_DTYPES,
            d.conv2d_winograd_nhwc,
            ref.conv2d_winograd_nhwc,
            _win_io,
            lambda a: 2 * prod(_win_out(a)) * 9 * a[3],
            _win_check,
        ),
    ]
}
