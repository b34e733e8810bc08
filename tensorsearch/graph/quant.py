"""int8 inference: QuantizeLinear/DequantizeLinear, the integer operators, and the pass that folds
an imported QDQ graph into them, computing what onnxruntime's x86 CPU fusion of it computes.

    from tensorsearch.graph import models
    from tensorsearch.graph.onnx_import import from_onnx
    from tensorsearch.graph.quant import fold_qdq
    g = fold_qdq(from_onnx(models.load_model("resnet50_int8", reduced=True)))
    g.op_counts()   # {'QuantizeLinear': 2, 'QLinearConv': 17, 'QLinearAdd': 4, 'QLinearMatMul': 1, ...}

Lowerings (registered with :mod:`.registry`):

- ``QuantizeLinear``, ``DequantizeLinear`` (injective): float32 <-> int8/uint8 (and int32 for a
  dequantized bias), per tensor or per axis.
- ``QLinearConv``, ``ConvInteger`` (anchors): 1-3 spatial dims NCHW, or 2-D NHWC data with a
  [KH, KW, Cin/group, Cout] weight when ``attrs["layout"] == "NHWC"``; groups, strides, pads,
  dilations, ``auto_pad``; per-channel weight scales and zero points.
- ``QLinearMatMul``, ``MatMulInteger`` (anchors): N-D batched with numpy broadcasting; per-column
  weight scales and zero points.
- Internal, with onnxruntime's com.microsoft semantics, made by :func:`fold_qdq`: ``QLinearAdd``,
  ``QLinearMul`` (injective, numpy broadcasting), ``QLinearGlobalAveragePool`` and
  ``QLinearSoftmax`` (last axis; input 5 is its lookup table, :func:`softmax_table`) (reductions).
  Attribute ``shift_to_uint8`` on an int8 QLinearAdd/QLinearMul computes it as uint8 (every
  value and zero point + 128), as onnxruntime's x86 QDQ fusion does: that changes the rounding.

Each conv/matmul is one reduction stage (``int32(x) * int32(w)`` summed in int32, the form of the
int8 workloads in :mod:`tensorsearch.workloads.definitions`) followed by a separate requantizing
epilogue stage; a convolution's padding is a stage before the reduction that pads with the
activation zero point. Internal extensions, written by :func:`fold_qdq`: ``QLinearMatMul`` takes
an optional int32 bias at input 8 (as ``QLinearConv`` does), ``ConvInteger``/``MatMulInteger``
one at input 4; ``attrs["x_zero_point_folded"] == 1`` says the bias already holds
``-x_zero_point * sum_k (w - w_zero_point)``, so the reduction multiplies the raw activation (a
plain int8 dot product). Without the flag the zero points are subtracted inside the reduction.

Arithmetic is bit-exact with onnxruntime's CPU kernels (MLAS): quantize is
``saturate(round_half_even(x / scale) + zp)`` (a float32 division, clamped in float before the
rounding); requantize is ``saturate(round_half_even(float(acc + bias) * s) + y_zp)`` with the
float32 scale ``s = x_scale * w_scale / y_scale`` evaluated left to right; dequantize is
``float(int32(q) - zp) * scale``. QLinearAdd follows MLAS's AVX2 kernel (two fused
multiply-adds, emulated exactly in float64), QLinearMul its SSE2 kernel (no FMA), the pool and
the softmax their kernels; between the integer ops a float MatMul sums in MLAS's SGEMM order
and a LayerNormalization follows MLAS's AVX2 kernel (``ORT_ORDER``), and erf is MLAS's
(codegen.fastmath). Float products that a consumer could contract into an FMA (the
tuner's builds contract ``a * b + c``) are computed in float64 and rounded once, which an FMA
cannot fuse. One place where onnxruntime is not exact integer arithmetic: on x86 CPUs without
VNNI its u8 x s8 kernels (``vpmaddubsw``) saturate a pair of products at int16, which an exact
int32 accumulation does not reproduce (weights within [-64, 64] or activations below 128 never
reach it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import te
from ..ir import IntImm, Max, Min, PrimExpr, call, const
from .ir import Graph, GraphError, Node, Value
from .lowering import ORT_ORDER, stage_name
from .registry import Operand, OpKind, lowers

__all__ = ["DROP_QDQ_OPS", "SHIFT_TO_UINT8", "ZP_FOLDED", "fold_qdq", "softmax_table"]

_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}
_F32 = "float32"
_I32 = "int32"
# attribute: the bias holds the activation zero point's correction
ZP_FOLDED = "x_zero_point_folded"
# attribute of an int8 QLinearAdd: computed in uint8 (everything + 128), as onnxruntime's x86 QDQ fusion does
SHIFT_TO_UINT8 = "shift_to_uint8"

# ---------------------------------------------------------------------------------------------
# quantization parameters


def _is_uniform(arr: np.ndarray) -> bool:
    flat = np.asarray(arr).reshape(-1)
    return flat.size > 0 and bool(np.all(flat == flat[0]))


def _param(arg: Operand | None, index: PrimExpr | None, dtype: str, default: float = 0) -> PrimExpr:
    """Element ``index`` (a channel index, or None for a per-tensor parameter) of a scale or zero
    point operand as ``dtype``; a constant whose elements are all equal is an immediate."""
    if arg is None:
        return const(default, dtype)
    if arg.const is not None and _is_uniform(arg.const):
        return const(np.asarray(arg.const).reshape(-1)[0].item(), dtype)
    t = arg.tensor
    if arg.value.size == 1:
        return te.cast(t[(0,) * len(t.shape)], dtype)
    if index is None:
        raise GraphError(f"a per-tensor parameter has {arg.value.size} elements ({arg.value.name})")
    return te.cast(t[(0,) * (len(t.shape) - 1) + (index,)], dtype)


def _check_channels(arg: Operand | None, channels: int, what: str) -> None:
    if arg is not None and arg.value.size not in (1, channels):
        raise GraphError(f"{what} has {arg.value.size} elements; expected 1 or {channels}")


def _f32(value: PrimExpr) -> PrimExpr:
    """``value`` (an int32 expression) as float32, folded when it is an immediate."""
    return const(float(value.value), _F32) if isinstance(value, IntImm) else te.cast(value, _F32)


def _int_const(value: PrimExpr, dtype: str) -> PrimExpr:
    """An int32 zero point as ``dtype`` (the padding value of a convolution's input)."""
    return const(value.value, dtype) if isinstance(value, IntImm) else te.cast(value, dtype)


def _sub_imm(a: int, b: PrimExpr) -> PrimExpr:
    return const(a - b.value, _I32) if isinstance(b, IntImm) else const(a, _I32) - b


def _is_zero(value: PrimExpr) -> bool:
    return isinstance(value, IntImm) and value.value == 0


def _saturate_round(v: PrimExpr, lo: PrimExpr, hi: PrimExpr) -> PrimExpr:
    """MLAS's float clamp then round-half-even to int32; ``Max(lo, v)`` takes ``lo`` for a NaN as
    ``maxps(v, lo)`` does."""
    return te.cast(call("round", Min(hi, Max(lo, v))), _I32)


def _exact_f32_mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a * b`` rounded once to float32 (both float32): computed in float64, where the product
    of two float32 values is exact, so that FMA contraction of a consumer cannot fuse it."""
    return te.cast(te.cast(a, "float64") * te.cast(b, "float64"), _F32)


def _exact_fma(x: PrimExpr, r: float, c: PrimExpr) -> PrimExpr:
    """``fma(x, r, c)`` in float32 for an integer-valued ``x``: ``x * r`` is exact in float64 and the
    sum is rounded to float32 once (exact unless ``c`` is ~2^-29 times smaller than ``x * r``)."""
    return te.cast(te.cast(x, "float64") * const(r, "float64") + te.cast(c, "float64"), _F32)


def _axis(node: Node, scale: Operand | None, rank: int) -> int | None:
    """The quantization axis of a per-axis QuantizeLinear/DequantizeLinear, None per tensor."""
    if node.attr("block_size", 0):
        raise GraphError(f"attribute block_size={node.attr('block_size')} is not supported (supported: 0)")
    if scale is None or scale.value.size == 1 or (scale.const is not None and _is_uniform(scale.const)):
        return None
    axis = int(node.attr("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise GraphError(f"attribute axis={node.attr('axis')} is out of range for rank {rank}")
    return axis


def _args(args: list[Operand | None], count: int) -> list[Operand | None]:
    return list(args) + [None] * (count - len(args))


# ---------------------------------------------------------------------------------------------
# QuantizeLinear / DequantizeLinear


@lowers("QuantizeLinear", kind=OpKind.INJECTIVE)
def quantize_linear(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x, scale, zp = _args(args, 3)
    out = outs[0]
    if x.dtype != _F32:
        raise GraphError(f"input type {x.dtype} is not supported (supported: float32)")
    if out.dtype not in _RANGE:
        raise GraphError(f"output type {out.dtype} is not supported (supported: int8, uint8)")
    axis = _axis(node, scale, len(x.shape))
    if axis is not None:
        _check_channels(zp, x.shape[axis], "the zero point")
    lo, hi = _RANGE[out.dtype]

    def body(*i: PrimExpr) -> PrimExpr:
        ch = i[axis] if axis is not None else None
        s, z = _param(scale, ch, _F32, 1.0), _param(zp, ch, _I32)
        q = _saturate_round(x.tensor[i] / s, _f32(_sub_imm(lo, z)), _f32(_sub_imm(hi, z)))
        return te.cast(q + z, out.dtype)

    return [te.compute(out.shape or (1,), body, name=stage_name("quantize"))]


@lowers("DequantizeLinear", kind=OpKind.INJECTIVE)
def dequantize_linear(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x, scale, zp = _args(args, 3)
    if x.dtype not in ("int8", "uint8", _I32):
        raise GraphError(f"input type {x.dtype} is not supported (supported: int8, uint8, int32)")
    if outs[0].dtype != _F32:
        raise GraphError(f"output type {outs[0].dtype} is not supported (supported: float32)")
    axis = _axis(node, scale, len(x.shape))
    if axis is not None:
        _check_channels(zp, x.shape[axis], "the zero point")

    def body(*i: PrimExpr) -> PrimExpr:
        ch = i[axis] if axis is not None else None
        z = _param(zp, ch, _I32)
        q = te.cast(x.tensor[i], _I32)
        centered = q if _is_zero(z) else q - z
        return _exact_f32_mul(te.cast(centered, _F32), _param(scale, ch, _F32, 1.0))

    return [te.compute(outs[0].shape or (1,), body, name=stage_name("dequantize"))]


# ---------------------------------------------------------------------------------------------
# requantization


def _requantize(acc: PrimExpr, scale: PrimExpr, zp: PrimExpr, dtype: str) -> PrimExpr:
    """MLAS's ``MlasRequantizeOutput``: ``float(acc) * scale``, clamped to the output range less
    the zero point, rounded half to even, plus the zero point."""
    lo, hi = _RANGE[dtype]
    q = _saturate_round(te.cast(acc, _F32) * scale, _f32(_sub_imm(lo, zp)), _f32(_sub_imm(hi, zp)))
    return te.cast(q + zp, dtype)


def _output_scale(x_scale: Operand | None, w_scale: Operand | None, y_scale: Operand | None) -> Callable:
    """channel -> the float32 requantization scale ``x_scale * w_scale[channel] / y_scale``, in
    onnxruntime's order of operations (an immediate when every channel's is the same)."""
    consts = [a.const for a in (x_scale, w_scale, y_scale) if a is not None]
    if len(consts) == 3 and _is_uniform(x_scale.const) and _is_uniform(y_scale.const):
        xs = np.float32(np.asarray(x_scale.const).reshape(-1)[0])
        ys = np.float32(np.asarray(y_scale.const).reshape(-1)[0])
        scales = (xs * np.asarray(w_scale.const, np.float32).reshape(-1)) / ys
        if _is_uniform(scales):
            imm = const(float(scales[0]), _F32)
            return lambda ch: imm
    return lambda ch: (
        _param(x_scale, None, _F32, 1.0) * _param(w_scale, ch, _F32, 1.0) / _param(y_scale, None, _F32, 1.0)
    )


def _qtype(dtype: str, what: str) -> None:
    if dtype not in _RANGE:
        raise GraphError(f"{what} type {dtype} is not supported (supported: int8, uint8)")


def _bias(arg: Operand | None, channels: int) -> Callable[[PrimExpr], PrimExpr] | None:
    if arg is None:
        return None
    if arg.dtype != _I32:
        raise GraphError(f"bias type {arg.dtype} is not supported (supported: int32)")
    if arg.value.size not in (1, channels):
        raise GraphError(f"the bias has {arg.value.size} elements; expected {channels}")
    return lambda ch: _param(arg, ch, _I32)


def _zero_in_reduction(z: PrimExpr) -> PrimExpr | None:
    """A zero point to subtract inside the reduction, None when it is the immediate 0."""
    return None if _is_zero(z) else z


def _factor(v: PrimExpr, zero: PrimExpr | None) -> PrimExpr:
    q = te.cast(v, _I32)
    return q if zero is None else q - zero


# ---------------------------------------------------------------------------------------------
# convolutions


@dataclass(frozen=True)
class _ConvGeometry:
    channels_last: bool
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pad_before: tuple[int, ...]
    pad_after: tuple[int, ...]
    groups: int
    cig: int  # input channels per group
    cog: int  # output channels per group
    cout: int


def _conv_geometry(node: Node, x: Value, w: Value) -> _ConvGeometry:
    channels_last = node.attr("layout", "NCHW") == "NHWC"
    rank = len(x.shape) - 2
    if rank < 1 or len(w.shape) != rank + 2:
        raise GraphError(f"input rank {len(x.shape)} and weight rank {len(w.shape)} do not make a convolution")
    if channels_last and rank != 2:
        raise GraphError(f"layout NHWC needs 2 spatial dimensions, got {rank}")
    kernel = tuple(w.shape[:rank]) if channels_last else tuple(w.shape[2:])
    cig, cout = (w.shape[rank], w.shape[rank + 1]) if channels_last else (w.shape[1], w.shape[0])
    cin = x.shape[-1] if channels_last else x.shape[1]
    groups = int(node.attr("group", 1))
    if groups < 1 or cin != cig * groups or cout % groups:
        raise GraphError(f"group={groups} does not fit {cin} input and {cout} output channels (weight {list(w.shape)})")
    if node.attr("kernel_shape") is not None and tuple(node.attr("kernel_shape")) != kernel:
        raise GraphError(
            f"attribute kernel_shape={list(node.attr('kernel_shape'))} differs from the weight's {list(kernel)}"
        )
    strides = tuple(int(s) for s in node.attr("strides", (1,) * rank))
    dilations = tuple(int(d) for d in node.attr("dilations", (1,) * rank))
    sizes = x.shape[1:-1] if channels_last else x.shape[2:]
    before, after = _conv_pads(node, sizes, kernel, strides, dilations)
    return _ConvGeometry(channels_last, kernel, strides, dilations, before, after, groups, cig, cout // groups, cout)


def _conv_pads(
    node: Node, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    rank = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = tuple(int(p) for p in node.attr("pads", (0,) * (2 * rank)))
        return pads[:rank], pads[rank:]
    if auto == "VALID":
        return (0,) * rank, (0,) * rank
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise GraphError(
            f"attribute auto_pad={auto} is not supported (supported: NOTSET, VALID, SAME_UPPER, SAME_LOWER)"
        )
    before, after = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        before.append(small if auto == "SAME_UPPER" else big)
        after.append(big if auto == "SAME_UPPER" else small)
    return tuple(before), tuple(after)


def _pad_input(x: te.Tensor, geo: _ConvGeometry, value: PrimExpr) -> te.Tensor:
    """The input padded with ``value`` (the activation zero point: a padded tap adds nothing)."""
    if not any(geo.pad_before) and not any(geo.pad_after):
        return x
    spatial = range(1, len(x.shape) - 1) if geo.channels_last else range(2, len(x.shape))
    before = [0] * len(x.shape)
    after = [0] * len(x.shape)
    for d, b, a in zip(spatial, geo.pad_before, geo.pad_after, strict=True):
        before[d], after[d] = b, a
    shape = tuple(int(s) + b + a for s, b, a in zip(x.shape, before, after, strict=True))

    def body(*idx: PrimExpr) -> PrimExpr:
        conds, src = [], []
        for i, b, a, extent in zip(idx, before, after, x.shape, strict=True):
            src.append(i - b if b else i)
            if b:
                conds.append(i >= b)
            if a:
                conds.append(i < int(extent) + b)
        return te.if_then_else(te.all(*conds), x[tuple(src)], value)

    return te.compute(shape, body, name=stage_name("PadInput"))


def _window(out: PrimExpr, red: PrimExpr, stride: int, dilation: int) -> PrimExpr:
    return (out * stride if stride != 1 else out) + (red * dilation if dilation != 1 else red)


def _conv_accumulate(
    padded: te.Tensor,
    w: te.Tensor,
    geo: _ConvGeometry,
    out_shape: Sequence[int],
    x_zero: PrimExpr | None,
    w_zero: Callable[[PrimExpr], PrimExpr | None],
) -> te.Tensor:
    """The int32 reduction ``sum (x - x_zero) * (w - w_zero)`` (zero points None: raw values)."""
    rank = len(geo.kernel)
    names = ("rd", "rh", "rw")[3 - rank :] if rank <= 3 else tuple(f"r{d}" for d in range(rank))
    rk = [te.reduce_axis((0, k), name=n) for k, n in zip(geo.kernel, names, strict=True)]
    depthwise = geo.cig == 1
    rc = None if depthwise else te.reduce_axis((0, geo.cig), name="rc")

    def channel(co: PrimExpr) -> PrimExpr:
        group = co if geo.cog == 1 else co // geo.cog
        if rc is None:  # one input channel per group
            return 0 if geo.groups == 1 else group
        return rc if geo.groups == 1 else group * geo.cig + rc

    def body(*o: PrimExpr) -> te.Reduce:
        n, co, sp = (o[0], o[-1], o[1:-1]) if geo.channels_last else (o[0], o[1], o[2:])
        pos = [_window(s, r, st, d) for s, r, st, d in zip(sp, rk, geo.strides, geo.dilations, strict=True)]
        wc = 0 if rc is None else rc
        xi = (n, *pos, channel(co)) if geo.channels_last else (n, channel(co), *pos)
        wi = (*rk, wc, co) if geo.channels_last else (co, wc, *rk)
        prod = _factor(padded[xi], x_zero) * _factor(w[wi], w_zero(co))
        return te.sum(prod, axis=rk + ([] if rc is None else [rc]))

    layout = "nhwc" if geo.channels_last else "nchw"
    name = f"{'depthwise_' if depthwise and geo.groups > 1 else ''}conv{rank}d_{layout}"
    return te.compute(tuple(out_shape), body, name=stage_name(name))


def _channel_of(geo: _ConvGeometry, o: Sequence[PrimExpr]) -> PrimExpr:
    return o[-1] if geo.channels_last else o[1]


def _conv_common(
    node: Node, x: Operand, w: Operand, x_zp: Operand | None, w_zp: Operand | None, out: Value
) -> tuple[_ConvGeometry, te.Tensor]:
    geo = _conv_geometry(node, x.value, w.value)
    _check_channels(w_zp, geo.cout, "the weight zero point")
    z = _param(x_zp, None, _I32)
    folded = bool(node.attr(ZP_FOLDED, 0))
    padded = _pad_input(x.tensor, geo, _int_const(z, x.dtype))
    x_zero = None if folded else _zero_in_reduction(z)
    acc = _conv_accumulate(
        padded, w.tensor, geo, out.shape, x_zero, lambda co: _zero_in_reduction(_param(w_zp, co, _I32))
    )
    return geo, acc


@lowers("QLinearConv", kind=OpKind.ANCHOR)
def qlinear_conv(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias = _args(args, 9)
    out = outs[0]
    _qtype(x.dtype, "input")
    _qtype(w.dtype, "weight")
    _qtype(out.dtype, "output")
    geo, acc = _conv_common(node, x, w, x_zp, w_zp, out)
    _check_channels(w_scale, geo.cout, "the weight scale")
    channel = functools.partial(_channel_of, geo)
    return [_requantize_stage(node, acc, _bias(bias, geo.cout), (x_scale, w_scale, y_scale), y_zp, channel, out)]


@lowers("ConvInteger", kind=OpKind.ANCHOR)
def conv_integer(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    x, w, x_zp, w_zp, bias = _args(args, 5)
    _qtype(x.dtype, "input")
    _qtype(w.dtype, "weight")
    if outs[0].dtype != _I32:
        raise GraphError(f"output type {outs[0].dtype} is not supported (supported: int32)")
    geo, acc = _conv_common(node, x, w, x_zp, w_zp, outs[0])
    return [_add_bias(acc, _bias(bias, geo.cout), lambda o: _channel_of(geo, o), node)]


def _check_folded_bias(node: Node, bias_of: Callable | None) -> None:
    if node.attr(ZP_FOLDED, 0) and bias_of is None:
        raise GraphError(f"attribute {ZP_FOLDED}=1 needs the bias input")


def _add_bias(acc: te.Tensor, bias_of: Callable | None, channel: Callable, node: Node) -> te.Tensor:
    _check_folded_bias(node, bias_of)
    if bias_of is None:
        return acc
    return te.compute(acc.shape, lambda *o: acc[o] + bias_of(channel(o)), name=stage_name("bias_add"))


def _requantize_stage(
    node: Node,
    acc: te.Tensor,
    bias_of: Callable | None,
    scales: tuple[Operand | None, Operand | None, Operand | None],
    y_zp: Operand | None,
    channel: Callable,
    out: Value,
) -> te.Tensor:
    """The epilogue of QLinearConv/QLinearMatMul: ``acc`` (plus the bias of the output channel
    ``channel(o)``) requantized by ``scales`` (input, weight, output) to ``out``'s type."""
    _check_folded_bias(node, bias_of)
    scale_of = _output_scale(*scales)
    yz = _param(y_zp, None, _I32)

    def body(*o: PrimExpr) -> PrimExpr:
        ch = channel(o)
        total = acc[o] if bias_of is None else acc[o] + bias_of(ch)
        return _requantize(total, scale_of(ch), yz, out.dtype)

    return te.compute(out.shape or (1,), body, name=stage_name("requantize"))


# ---------------------------------------------------------------------------------------------
# matrix products


def _matmul_accumulate(
    a: Operand, b: Operand, out_shape: Sequence[int], a_zero: PrimExpr | None, b_zero: Callable
) -> te.Tensor:
    """``sum_k (a[..., i, k] - a_zero) * (b[..., k, j] - b_zero(j))`` in int32, numpy-broadcast over
    the batch dimensions (a 1-D operand is a vector, as in numpy's matmul)."""
    ar, br = len(a.shape), len(b.shape)
    if ar < 1 or br < 1:
        raise GraphError("MatMul operands need rank 1 or more")
    k_extent = a.shape[-1]
    if b.shape[-2 if br > 1 else 0] != k_extent:
        raise GraphError(f"inner dimensions differ: {list(a.shape)} x {list(b.shape)}")
    rk = te.reduce_axis((0, k_extent), name="k")
    nbatch = len(out_shape) - (ar > 1) - (br > 1)

    def batch_index(shape: Sequence[int], o: Sequence[PrimExpr]) -> list[PrimExpr]:
        dims = shape[:-2] if len(shape) > 1 else ()
        lead = o[nbatch - len(dims) : nbatch]
        return [0 if d == 1 else v for d, v in zip(dims, lead, strict=True)]

    def body(*o: PrimExpr) -> te.Reduce:
        i = o[nbatch] if ar > 1 else None
        j = o[-1] if br > 1 else None
        ai = (*batch_index(a.shape, o), i, rk) if ar > 1 else (rk,)
        bi = (*batch_index(b.shape, o), rk, j) if br > 1 else (rk,)
        prod = _factor(a.tensor[ai], a_zero) * _factor(b.tensor[bi], b_zero(j))
        return te.sum(prod, axis=[rk])

    name = "matmul" if ar == 2 and br == 2 else "batch_matmul"
    return te.compute(tuple(out_shape) or (1,), body, name=stage_name(name))


def _matmul_common(
    node: Node, a: Operand, b: Operand, a_zp: Operand | None, b_zp: Operand | None, out: Value
) -> tuple[te.Tensor, int]:
    columns = b.shape[-1] if len(b.shape) > 1 else 1
    _check_channels(b_zp, columns, "the B zero point")
    z = _param(a_zp, None, _I32)
    a_zero = None if node.attr(ZP_FOLDED, 0) else _zero_in_reduction(z)
    acc = _matmul_accumulate(a, b, out.shape, a_zero, lambda j: _zero_in_reduction(_param(b_zp, j, _I32)))
    return acc, columns


def _column_of(b: Operand) -> Callable[[Sequence[PrimExpr]], PrimExpr | None]:
    return (lambda o: o[-1]) if len(b.shape) > 1 else (lambda o: None)


@lowers("QLinearMatMul", kind=OpKind.ANCHOR)
def qlinear_matmul(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias = _args(args, 9)
    out = outs[0]
    _qtype(a.dtype, "input A")
    _qtype(b.dtype, "input B")
    _qtype(out.dtype, "output")
    acc, columns = _matmul_common(node, a, b, a_zp, b_zp, out)
    _check_channels(b_scale, columns, "the B scale")
    return [_requantize_stage(node, acc, _bias(bias, columns), (a_scale, b_scale, y_scale), y_zp, _column_of(b), out)]


@lowers("MatMulInteger", kind=OpKind.ANCHOR)
def matmul_integer(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    a, b, a_zp, b_zp, bias = _args(args, 5)
    _qtype(a.dtype, "input A")
    _qtype(b.dtype, "input B")
    if outs[0].dtype != _I32:
        raise GraphError(f"output type {outs[0].dtype} is not supported (supported: int32)")
    acc, columns = _matmul_common(node, a, b, a_zp, b_zp, outs[0])
    return [_add_bias(acc, _bias(bias, columns), _column_of(b), node)]


# ---------------------------------------------------------------------------------------------
# QLinearAdd (com.microsoft): MLAS's AVX2 kernel


def _qadd_fixed(r_p: np.float32, z_p: int, r_q: np.float32, z_q: int, z_c: int) -> np.float32:
    """The kernel's constant ``float(zc) - (r_p * zp + r_q * zq)``; the compiler contracts the
    inner sum into one FMA, ``fma(r_p, zp, r_q * zq)``."""
    inner = np.float32(np.float64(r_p) * z_p + np.float64(np.float32(r_q * np.float32(z_q))))
    return np.float32(np.float32(z_c) - inner)


def _broadcast_path(a: Sequence[int], b: Sequence[int], out: Sequence[int]) -> str:
    """Which loop of onnxruntime's broadcaster handles the innermost output dimensions: both
    inputs vary ("general"), or one of them is constant along them ("scalar_a"/"scalar_b")."""
    rank = len(out)
    a = (1,) * (rank - len(a)) + tuple(a)
    b = (1,) * (rank - len(b)) + tuple(b)
    for d in reversed(range(rank)):
        if out[d] == 1:
            continue
        return "scalar_a" if a[d] == 1 else "scalar_b" if b[d] == 1 else "general"
    return "single"


def _broadcast_load(t: te.Tensor, shape: Sequence[int], o: Sequence[PrimExpr]) -> PrimExpr:
    if not shape:
        return t[0]
    lead = len(o) - len(shape)
    return t[tuple(0 if d == 1 else o[lead + k] for k, d in enumerate(shape))]


def _scalar_const(arg: Operand | None, what: str, default: float = 0) -> float:
    if arg is None:
        return default
    if arg.const is None or arg.value.size != 1:
        raise GraphError(f"{what} must be a one-element constant")
    return np.asarray(arg.const).reshape(-1)[0].item()


@lowers("QLinearAdd", kind=OpKind.INJECTIVE)
def qlinear_add(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp = _args(args, 8)
    out = outs[0]
    _binary_types(a, b, out)
    sa, sb, sc = _binary_scales(a_scale, b_scale, c_scale)
    shift = _binary_shift(node, a)
    za, zb, zc = _binary_zeros((a_zp, b_zp, c_zp), shift)
    ra, rb = np.float32(sa / sc), np.float32(sb / sc)
    path = _broadcast_path(a.shape, b.shape, out.shape)
    # MLAS's kernel takes (P, Q) = (A, B), or (B, A) when A is the broadcast scalar, and computes
    # fma(P, r_P, fma(Q, r_Q, fixed)) (its scalar loops too: the compiler contracts them); a
    # one-element span runs its scalar-P loop, fma(Q, r_Q, fma(P, r_P, fixed))
    swap = path == "scalar_a"
    fixed = _qadd_fixed(rb, zb, ra, za, zc) if swap else _qadd_fixed(ra, za, rb, zb, zc)
    fixed_imm = const(float(fixed), _F32)
    lo, hi = (0, 255) if shift else _RANGE[out.dtype]

    def load(t: te.Tensor, shape: Sequence[int], o: Sequence[PrimExpr]) -> PrimExpr:
        v = te.cast(_broadcast_load(t, shape, o), _I32)
        return te.cast(v + shift if shift else v, _F32)

    def body(*o: PrimExpr) -> PrimExpr:
        va, vb = load(a.tensor, a.shape, o), load(b.tensor, b.shape, o)
        (outer, r_outer), (inner, r_inner) = ((vb, rb), (va, ra)) if swap else ((va, ra), (vb, rb))
        if path == "single":
            (outer, r_outer), (inner, r_inner) = (inner, r_inner), (outer, r_outer)
        c = _exact_fma(outer, float(r_outer), _exact_fma(inner, float(r_inner), fixed_imm))
        q = _saturate_round(c, const(float(lo), _F32), const(float(hi), _F32))
        return te.cast(q - shift if shift else q, out.dtype)

    return [te.compute(out.shape or (1,), body, name=stage_name("qlinear_add"))]


@lowers("QLinearMul", kind=OpKind.INJECTIVE)
def qlinear_mul(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """MLAS's SSE2 kernel: ``float((a - za) * (b - zb)) * (sa * sb / sc) + zc``, rounded half to
    even and saturated (the product exact in int32, then two float32 roundings)."""
    a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp = _args(args, 8)
    out = outs[0]
    _binary_types(a, b, out)
    sa, sb, sc = _binary_scales(a_scale, b_scale, c_scale)
    shift = _binary_shift(node, a)
    za, zb, zc = _binary_zeros((a_zp, b_zp, c_zp), shift)
    ratio = const(float(np.float32(np.float32(sa * sb) / sc)), _F32)
    lo, hi = (0, 255) if shift else _RANGE[out.dtype]

    def body(*o: PrimExpr) -> PrimExpr:
        va = te.cast(_broadcast_load(a.tensor, a.shape, o), _I32) - (za - shift)
        vb = te.cast(_broadcast_load(b.tensor, b.shape, o), _I32) - (zb - shift)
        c = _exact_f32_mul(te.cast(va * vb, _F32), ratio) + const(float(zc), _F32)
        q = _saturate_round(c, const(float(lo), _F32), const(float(hi), _F32))
        return te.cast(q - shift if shift else q, out.dtype)

    return [te.compute(out.shape or (1,), body, name=stage_name("qlinear_mul"))]


def _binary_types(a: Operand, b: Operand, out: Value) -> None:
    for dtype, what in ((a.dtype, "input A"), (b.dtype, "input B"), (out.dtype, "output")):
        _qtype(dtype, what)
    if len({a.dtype, b.dtype, out.dtype}) != 1:
        raise GraphError(f"input and output types differ ({a.dtype}, {b.dtype}, {out.dtype})")


def _binary_scales(*scales: Operand | None) -> tuple[np.float32, ...]:
    return tuple(np.float32(_scalar_const(s, w, 1.0)) for s, w in zip(scales, ("A_scale", "B_scale", "C_scale")))


def _binary_shift(node: Node, a: Operand) -> int:
    """128 where an int8 operator computes in uint8, as onnxruntime's x86 QDQ fusion does."""
    return 128 if a.dtype == "int8" and node.attr(SHIFT_TO_UINT8, 0) else 0


def _binary_zeros(zeros: Sequence[Operand | None], shift: int) -> tuple[int, ...]:
    names = ("A_zero_point", "B_zero_point", "C_zero_point")
    return tuple(int(_scalar_const(z, w)) + shift for z, w in zip(zeros, names, strict=True))


@lowers("QLinearGlobalAveragePool", kind=OpKind.REDUCTION)
def qlinear_global_average_pool(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """MLAS's: ``sum(x) - x_zp * n`` in int32, requantized by ``x_scale / (y_scale * n)``."""
    x, x_scale, x_zp, y_scale, y_zp = _args(args, 5)
    out = outs[0]
    _qtype(x.dtype, "input")
    _qtype(out.dtype, "output")
    channels_last = bool(node.attr("channels_last", 0)) or node.attr("layout", "NCHW") == "NHWC"
    spatial = list(range(1, len(x.shape) - 1)) if channels_last else list(range(2, len(x.shape)))
    if not spatial:
        raise GraphError(f"input rank {len(x.shape)} has no spatial dimensions")
    count = int(np.prod([x.shape[d] for d in spatial]))
    xs, ys = (np.float32(_scalar_const(s, w, 1.0)) for s, w in ((x_scale, "x_scale"), (y_scale, "y_scale")))
    xz = int(_scalar_const(x_zp, "x_zero_point"))
    scale = const(float(np.float32(xs / np.float32(ys * np.float32(count)))), _F32)
    red = [te.reduce_axis((0, x.shape[d]), name=f"r{d}") for d in spatial]

    def total(*o: PrimExpr) -> te.Reduce:
        idx = list(o)
        for d, r in zip(spatial, red, strict=True):
            idx[d] = r
        return te.sum(te.cast(x.tensor[tuple(idx)], _I32), axis=red)

    acc = te.compute(out.shape, total, name=stage_name("global_avg_pool_sum"))
    yz = _param(y_zp, None, _I32)
    bias = -xz * count
    return [
        te.compute(
            out.shape,
            lambda *o: _requantize(acc[o] + bias if bias else acc[o], scale, yz, out.dtype),
            name=stage_name("requantize"),
        )
    ]


@lowers("QLinearSoftmax", kind=OpKind.REDUCTION)
def qlinear_softmax(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """onnxruntime's lookup-table softmax over the last axis: with ``t`` the float32 table
    ``exp((k - 255 + shift) * x_scale)`` (input 5, built by :func:`softmax_table`) and
    ``k = 255 + x - max(x)``, ``y = saturate(round(t[k] * floor(1 / y_scale) / sum t[k]) + y_zp)``,
    the sum accumulated in float32 in the axis' order."""
    x, _, _, y_scale, y_zp, table = _args(args, 6)
    out = outs[0]
    _qtype(x.dtype, "input")
    _qtype(out.dtype, "output")
    rank = len(x.shape)
    axis = int(node.attr("axis", -1))
    if (axis + rank if axis < 0 else axis) != rank - 1:
        raise GraphError(f"attribute axis={axis} is not supported (supported: the last axis)")
    if table is None or table.value.shape != (256,) or table.dtype != _F32:
        raise GraphError("input 5, the float32[256] lookup table that fold_qdq builds, is missing")
    ys = np.float32(_scalar_const(y_scale, "y_scale", 1.0))
    inv = const(float(np.floor(np.float32(1) / ys)), _F32)
    yz = int(_scalar_const(y_zp, "y_zero_point"))
    lo, hi = _RANGE[out.dtype]
    rows, extent = tuple(x.shape[:-1]) or (1,), x.shape[-1]

    def at(row: Sequence[PrimExpr], k: PrimExpr) -> tuple[PrimExpr, ...]:
        return (*row, k) if rank > 1 else (k,)

    r_max, r_sum = te.reduce_axis((0, extent), name="k"), te.reduce_axis((0, extent), name="k")
    x_max = te.compute(
        rows, lambda *r: te.max(te.cast(x.tensor[at(r, r_max)], _I32), axis=r_max), name=stage_name("softmax_max")
    )

    def exp_of(row: Sequence[PrimExpr], k: PrimExpr) -> PrimExpr:
        return table.tensor[te.cast(x.tensor[at(row, k)], _I32) + (255 - x_max[row])]

    one = const(1.0, _F32)  # fma(t, 1, acc) = acc + t rounded once: the sum in the axis' order
    total = te.compute(rows, lambda *r: te.fma_sum(exp_of(r, r_sum), one, axis=r_sum), name=stage_name("softmax_sum"))

    def body(*o: PrimExpr) -> PrimExpr:
        row = o[:-1] if rank > 1 else (0,)
        q = te.cast(call("round", exp_of(row, o[-1]) * inv / total[row]), _I32) + yz
        return te.cast(Min(const(hi, _I32), Max(const(lo, _I32), q)), out.dtype)

    return [te.compute(out.shape, body, name=stage_name("qlinear_softmax"))]


def softmax_table(x_scale: float, extent: int) -> np.ndarray:
    """onnxruntime's QLinearSoftmax table for a softmax over ``extent`` values:
    ``float32(exp((k - 255 + shift) * x_scale))``, in double with the C library's ``exp``, where
    ``shift = max(0, log(FLT_MAX / extent) - 5) / x_scale`` keeps the sums finite; that ``log``
    is taken in float32 (its argument is a float, so C++ picks ``logf``), which moves every entry
    by the same factor and so each one's rounding."""
    largest = np.float32(np.finfo(np.float32).max / np.float32(extent))
    log_largest = float(np.float32(math.log(float(largest))))  # logf: correctly rounded here
    shift = max(0.0, log_largest - 5) / float(np.float32(x_scale))
    return np.array([math.exp((k - 255 + shift) * float(np.float32(x_scale))) for k in range(256)]).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# fold_qdq: QDQ patterns -> integer operators

# ops that only move data: DequantizeLinear -> op -> QuantizeLinear with the same parameters is
# the op on the quantized tensor (onnxruntime drops such pairs too); Gather moves its input 0
DROP_QDQ_OPS = ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Gather")


def fold_qdq(graph: Graph, *, uint8_activations: bool = True, fold_constants: bool = True) -> Graph:
    """Rewrite an imported QDQ graph (onnxruntime's ``quantize_static`` format) into integer ops,
    as onnxruntime's x86 CPU fusion of each pattern computes it.

    In order: drop ``DequantizeLinear -> op -> QuantizeLinear`` around the data-movement ops of
    :data:`DROP_QDQ_OPS` when both use the same parameters; fold ``DQ(x), DQ(w), [DQ(int32
    bias)] -> Conv -> [Relu] -> Q`` into ``QLinearConv``, the same around ``MatMul`` into
    ``QLinearMatMul``, ``Gemm`` (alpha = beta = 1, B constant) into ``QLinearMatMul`` of the
    [K, N] weight plus the bias, ``DQ(a) + DQ(b) -> Q`` into ``QLinearAdd`` (``*``:
    ``QLinearMul``) unless an int8 input is a constant (onnxruntime computes that in float),
    ``DQ -> GlobalAveragePool -> Q`` and ``DQ -> Softmax -> Q`` into ``QLinearGlobalAveragePool``
    and ``QLinearSoftmax``; a Relu before the Q is dropped when the Q's zero point is the type's
    minimum (the Q saturates there already). With ``uint8_activations``, make the int8
    activations uint8 (values and zero points + 128, as onnxruntime does on x86): the same
    integers, but every conv/matmul by an int8 weight becomes uint8 x int8 (VNNI's form). Then
    precompute each constant weight's activation-zero-point correction into the bias (attribute
    ``x_zero_point_folded``); with ``fold_constants``, evaluate the DequantizeLinear nodes left
    over constants into float constants (onnxruntime's arithmetic); drop dead nodes.

    What does not match stays as it is: a DequantizeLinear feeding float ops (LayerNorm, GELU's
    Div and Erf), an op whose output has consumers besides its QuantizeLinear, non-constant or
    per-channel activation parameters, a bias whose scale is not ``x_scale * w_scale``, and, with
    ``uint8_activations`` (x86), an op other than a convolution reading an int8 activation that
    onnxruntime keeps int8 (:func:`_kept_int8`: BERT's LayerNorm outputs, read by the query, key
    and value projections and the residual add): onnxruntime runs those in float. A MatMul left in
    float between dequantized operands is marked ``ORT_ORDER`` and sums as MLAS's SGEMM does, a
    LayerNormalization of a dequantized input computes as MLAS's AVX2 kernel does.
    """
    kept = _kept_int8(graph) if uint8_activations else frozenset()
    g = _rewrite(graph, _match_drop)
    g = _rewrite(g, functools.partial(_match_integer_op, kept=kept))
    g = _mark_float_ops(g)
    if uint8_activations:
        g = _to_uint8(g)
    g = _fold_zero_points(g)
    if fold_constants:
        g = _fold_constant_dq(g)
    return _drop_dead(g)


@dataclass(frozen=True)
class _Rewrite:
    """What a match does: ``node`` replaces ``anchor`` (placed where ``anchor`` was: after its
    inputs, before its consumers) and the nodes ``removed`` go."""

    anchor: Node
    node: Node
    removed: tuple[Node, ...] = ()


class _Names:
    """The constants a pass adds, under names unique in the graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.constants: dict[str, np.ndarray] = {}

    def add(self, base: str, arr: np.ndarray) -> str:
        name, k = base, 0
        while name in self.graph.values or name in self.constants:
            k += 1
            name = f"{base}_{k}"
        self.constants[name] = np.ascontiguousarray(arr)
        return name

    def zero(self, params: _QParams, owner: str) -> str:
        """The zero point input of ``params`` (a new 0 constant when the node had none)."""
        return params.zero or self.add(f"{owner}/zero_point", params.zero_value.reshape(()))

    def bias(self, found: tuple[str, np.ndarray], owner: str, channels: int) -> str:
        name, data = found
        return name if self.graph.values[name].shape == (channels,) else self.add(f"{owner}/bias", data)

    def apply(self, graph: Graph, nodes: Sequence[Node]) -> Graph:
        values = dict(graph.values)
        values.update({k: Value(k, tuple(v.shape), str(v.dtype)) for k, v in self.constants.items()})
        return graph.replace(nodes=nodes, values=values, constants={**graph.constants, **self.constants})


_Matcher = Callable[[Graph, Node, _Names], "_Rewrite | None"]


def _rewrite(graph: Graph, match: _Matcher) -> Graph:
    """Apply the non-overlapping matches of ``match`` (tried at every node, in order)."""
    names = _Names(graph)
    rewrites: dict[int, _Rewrite] = {}
    taken: set[int] = set()
    for n in graph.nodes:
        r = match(graph, n, names)
        if r is None or {id(x) for x in (r.anchor, *r.removed)} & taken:
            continue
        rewrites[id(r.anchor)] = r
        taken.update(id(x) for x in (r.anchor, *r.removed))
    if not rewrites:
        return graph
    nodes = [
        rewrites[id(n)].node if id(n) in rewrites else n for n in graph.nodes if id(n) not in taken or id(n) in rewrites
    ]
    return names.apply(graph, nodes)


def _mark_float_ops(graph: Graph) -> Graph:
    """The MatMuls of two dequantized operands and the LayerNormalizations of a dequantized input,
    which stay in float, get ``attrs[ORT_ORDER]``: they compute in onnxruntime's order (see their
    lowerings), so that the QuantizeLinear after them rounds the same float."""

    def marked(n: Node) -> bool:
        if n.op == "MatMul":
            return all(_producer(graph, v, "DequantizeLinear") for v in n.inputs[:2])
        return n.op == "LayerNormalization" and _producer(graph, n.inputs[0], "DequantizeLinear") is not None

    if not any(marked(n) for n in graph.nodes):
        return graph
    return graph.replace(nodes=[n.with_(attrs={ORT_ORDER: 1}) if marked(n) else n for n in graph.nodes])


def _const(graph: Graph, name: str) -> np.ndarray | None:
    return graph.constants.get(name) if name else None


def _producer(graph: Graph, value: str, op: str) -> Node | None:
    p = graph.producer(value) if value else None
    return p if p is not None and p.op == op else None


def _sole_consumer(graph: Graph, value: str, op: str | None = None) -> Node | None:
    users = graph.consumers(value)
    if len(users) != 1 or graph.is_output(value) or (op is not None and users[0].op != op):
        return None
    return users[0]


@dataclass(frozen=True)
class _QParams:
    """The (scale, zero point) inputs of a QuantizeLinear/DequantizeLinear and their values."""

    scale: str
    zero: str
    scale_value: np.ndarray
    zero_value: np.ndarray
    axis: int

    @property
    def per_tensor(self) -> bool:
        return self.scale_value.size == 1 and self.zero_value.size == 1

    def same(self, other: _QParams) -> bool:
        return (
            self.per_tensor
            and other.per_tensor
            and np.float32(self.scale_value.reshape(-1)[0]) == np.float32(other.scale_value.reshape(-1)[0])
            and int(self.zero_value.reshape(-1)[0]) == int(other.zero_value.reshape(-1)[0])
            and self.zero_value.dtype == other.zero_value.dtype
        )


def _qparams(graph: Graph, node: Node) -> _QParams | None:
    """Constant quantization parameters of a Q/DQ node (a missing zero point reads as 0 of the
    quantized type), None when they are not constants."""
    scale = _const(graph, node.inputs[1] if len(node.inputs) > 1 else "")
    zero_name = node.inputs[2] if len(node.inputs) > 2 else ""
    if scale is None or scale.dtype != np.float32 or node.attr("block_size", 0):
        return None
    quantized = graph.values[node.outputs[0] if node.op == "QuantizeLinear" else node.inputs[0]].dtype
    zero = _const(graph, zero_name) if zero_name else np.zeros((), np.dtype(quantized))
    if zero is None or str(zero.dtype) != quantized:
        return None
    rank = len(graph.values[node.inputs[0]].shape)
    axis = int(node.attr("axis", 1))
    return _QParams(node.inputs[1], zero_name, scale, zero, axis + rank if axis < 0 else axis)


def _match_drop(graph: Graph, op: Node, names: _Names) -> _Rewrite | None:
    """``DQ(x) -> op -> Q`` with equal parameters around a data-movement op: ``op(x)``."""
    if op.op not in DROP_QDQ_OPS or not op.inputs:
        return None
    dq = _producer(graph, op.inputs[0], "DequantizeLinear")
    q = _sole_consumer(graph, op.outputs[0], "QuantizeLinear")
    if dq is None or q is None or q.inputs[0] != op.outputs[0]:
        return None
    p_in, p_out = _qparams(graph, dq), _qparams(graph, q)
    if p_in is None or p_out is None or not p_in.same(p_out) or p_in.zero_value.dtype == np.int32:
        return None
    moved = op.with_(inputs=(dq.inputs[0], *op.inputs[1:]), outputs=(q.outputs[0], *op.outputs[1:]))
    return _Rewrite(q, moved, (op,))


def _quantized_output(graph: Graph, value: str) -> tuple[Node, tuple[Node, ...]] | None:
    """The QuantizeLinear that alone reads ``value`` (through a Relu it makes redundant), and
    the nodes between."""
    user = _sole_consumer(graph, value)
    between: tuple[Node, ...] = ()
    if user is not None and user.op == "Relu":
        between, user = (user,), _sole_consumer(graph, user.outputs[0])
    if user is None or user.op != "QuantizeLinear":
        return None
    params = _qparams(graph, user)
    if params is None or not params.per_tensor or str(params.zero_value.dtype) not in _RANGE:
        return None
    if between and int(params.zero_value.reshape(-1)[0]) != _RANGE[str(params.zero_value.dtype)][0]:
        return None
    return user, between


def _kept_int8(graph: Graph) -> frozenset[str]:
    """The int8 QuantizeLinear outputs that onnxruntime's x86 CPU fusion leaves int8: its s8 -> u8
    conversion takes a Q -> DQ pair only when the Q has one consumer edge and makes no graph
    output, and it counts an edge for every node that reads a shared DequantizeLinear (it gives
    each reader its own DQ first). An op reading such an int8 activation is not fused there (int8
    activations are fused on ARM only): it runs in float, between its DQ and Q nodes."""
    kept = set()
    for q in graph.nodes:
        out = q.outputs[0] if q.op == "QuantizeLinear" else ""
        if not out or graph.values[out].dtype != "int8":
            continue
        edges = sum(
            max(1, len(graph.consumers(c.outputs[0])) + graph.is_output(c.outputs[0]))
            if c.op == "DequantizeLinear"
            else 1
            for c in graph.consumers(out)
        )
        if edges != 1 or graph.is_output(out):
            kept.add(out)
    return frozenset(kept)


def _activation(graph: Graph, value: str, kept: frozenset[str] = frozenset()) -> tuple[Node, _QParams] | None:
    """The per-tensor DequantizeLinear of an int8/uint8 activation that makes ``value``; None
    also when the activation is one of ``kept`` (:func:`_kept_int8`)."""
    dq = _producer(graph, value, "DequantizeLinear")
    params = _qparams(graph, dq) if dq is not None else None
    if params is None or not params.per_tensor or str(params.zero_value.dtype) not in _RANGE:
        return None
    if dq.inputs[0] in kept:
        return None
    return dq, params


def _weight(graph: Graph, value: str, channel_axis: int) -> tuple[Node, _QParams] | None:
    """The DequantizeLinear of a constant int8/uint8 weight, per tensor or per channel along
    ``channel_axis``."""
    dq = _producer(graph, value, "DequantizeLinear")
    if dq is None or _const(graph, dq.inputs[0]) is None:
        return None
    params = _qparams(graph, dq)
    if params is None or str(params.zero_value.dtype) not in _RANGE:
        return None
    rank = len(graph.values[dq.inputs[0]].shape)
    if not params.per_tensor and (
        params.axis != channel_axis % rank or params.zero_value.size not in (1, params.scale_value.size)
    ):
        return None
    return dq, params


def _folded_bias(graph: Graph, value: str, x: _QParams, w: _QParams, channels: int) -> tuple[str, np.ndarray] | None:
    """The int32 data of a dequantized bias whose scale is ``x_scale * w_scale`` and zero point 0."""
    dq = _producer(graph, value, "DequantizeLinear")
    data = _const(graph, dq.inputs[0]) if dq is not None else None
    params = _qparams(graph, dq) if data is not None else None
    if params is None or data.dtype != np.int32 or np.any(params.zero_value != 0) or data.size not in (1, channels):
        return None
    want = np.float32(x.scale_value.reshape(-1)[0]) * w.scale_value.astype(np.float32).reshape(-1)
    if not np.allclose(params.scale_value.reshape(-1), want, rtol=1e-5, atol=0):
        return None
    return dq.inputs[0], np.broadcast_to(data.reshape(-1), (channels,)).astype(np.int32)


def _match_integer_op(graph: Graph, node: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    match = _MATCHERS.get(node.op)
    return match(graph, node, names, kept) if match is not None else None


def _match_conv(graph: Graph, conv: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    # ``kept`` is not asked: onnxruntime runs a convolution of a kept int8 activation in float (its
    # NCHWc kernels), in an order not reproduced here, so the exact integer form stays
    x = _activation(graph, conv.inputs[0])
    w = _weight(graph, conv.inputs[1], 0) if len(conv.inputs) > 1 else None
    out = _quantized_output(graph, conv.outputs[0])
    if x is None or w is None or out is None or conv.attr("layout", "NCHW") != "NCHW":
        return None
    (x_dq, xp), (w_dq, wp), (q, between) = x, w, out
    yp = _qparams(graph, q)
    cout = graph.values[w_dq.inputs[0]].shape[0]
    inputs = [x_dq.inputs[0], xp.scale, names.zero(xp, conv.name), w_dq.inputs[0], wp.scale, names.zero(wp, conv.name)]
    inputs += [yp.scale, names.zero(yp, conv.name)]
    if len(conv.inputs) > 2 and conv.inputs[2]:
        bias = _folded_bias(graph, conv.inputs[2], xp, wp, cout)
        if bias is None:
            return None
        inputs.append(names.bias(bias, conv.name, cout))
    node = Node(conv.name, "QLinearConv", tuple(inputs), (q.outputs[0],), dict(conv.attrs), conv.opset)
    return _Rewrite(q, node, (conv, *between))


def _match_matmul(graph: Graph, mm: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    a = _activation(graph, mm.inputs[0], kept)
    b_rank = len(graph.values[mm.inputs[1]].shape)
    b = _weight(graph, mm.inputs[1], -1) or _activation(graph, mm.inputs[1], kept)
    out = _quantized_output(graph, mm.outputs[0])
    if a is None or b is None or out is None or (b_rank < 2 and not b[1].per_tensor):
        return None
    (a_dq, ap), (b_dq, bp), (q, between) = a, b, out
    yp = _qparams(graph, q)
    inputs = (a_dq.inputs[0], ap.scale, names.zero(ap, mm.name), b_dq.inputs[0], bp.scale, names.zero(bp, mm.name))
    inputs += (yp.scale, names.zero(yp, mm.name))
    node = Node(mm.name, "QLinearMatMul", inputs, (q.outputs[0],), {}, mm.opset)
    return _Rewrite(q, node, (mm, *between))


def _match_gemm(graph: Graph, gemm: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    """``Gemm`` (alpha 1, A not transposed, B a constant weight) as ``QLinearMatMul`` of the
    [K, N] weight plus the int32 bias: onnxruntime's QGemm computes the same."""
    if float(gemm.attr("alpha", 1.0)) != 1.0 or int(gemm.attr("transA", 0)):
        return None
    trans_b = int(gemm.attr("transB", 0))
    a = _activation(graph, gemm.inputs[0], kept)
    b = _weight(graph, gemm.inputs[1], 0 if trans_b else 1)
    out = _quantized_output(graph, gemm.outputs[0])
    has_c = len(gemm.inputs) > 2 and bool(gemm.inputs[2])
    if a is None or b is None or out is None or (has_c and float(gemm.attr("beta", 1.0)) != 1.0):
        return None
    (a_dq, ap), (b_dq, bp), (q, between) = a, b, out
    yp = _qparams(graph, q)
    weight = graph.constants[b_dq.inputs[0]]
    columns = weight.shape[0] if trans_b else weight.shape[1]
    b_name = names.add(f"{b_dq.inputs[0]}/transposed", weight.T) if trans_b else b_dq.inputs[0]
    inputs = [a_dq.inputs[0], ap.scale, names.zero(ap, gemm.name), b_name, bp.scale, names.zero(bp, gemm.name)]
    inputs += [yp.scale, names.zero(yp, gemm.name)]
    if has_c:
        bias = _folded_bias(graph, gemm.inputs[2], ap, bp, columns)
        if bias is None:
            return None
        inputs.append(names.bias(bias, gemm.name, columns))
    node = Node(gemm.name, "QLinearMatMul", tuple(inputs), (q.outputs[0],), {}, gemm.opset)
    return _Rewrite(q, node, (gemm, *between))


def _match_binary(graph: Graph, op: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    """``DQ(a) + DQ(b) -> Q`` (or ``*``) as onnxruntime's x86 QDQ fusion computes it:
    QLinearAdd/QLinearMul in uint8 (int8 shifted by 128), except that an int8 constant input (a
    bias) stays int8 there, which these cannot mix with uint8: onnxruntime computes in float then,
    and so does the graph left as it is."""
    a = _activation(graph, op.inputs[0], kept)
    b = _activation(graph, op.inputs[1], kept)
    out = _quantized_output(graph, op.outputs[0])
    if a is None or b is None or out is None or out[0].outputs[0] in kept:
        return None
    (a_dq, ap), (b_dq, bp), (q, between) = a, b, out
    yp = _qparams(graph, q)
    dtypes = {graph.values[v].dtype for v in (a_dq.inputs[0], b_dq.inputs[0], q.outputs[0])}
    constant = graph.is_constant(a_dq.inputs[0]) or graph.is_constant(b_dq.inputs[0])
    if len(dtypes) != 1 or ("int8" in dtypes and constant):
        return None
    inputs = (a_dq.inputs[0], ap.scale, names.zero(ap, op.name), b_dq.inputs[0], bp.scale, names.zero(bp, op.name))
    inputs += (yp.scale, names.zero(yp, op.name))
    attrs = {SHIFT_TO_UINT8: 1} if "int8" in dtypes else {}
    node = Node(op.name, f"QLinear{op.op}", inputs, (q.outputs[0],), attrs, 1, "com.microsoft")
    return _Rewrite(q, node, (op, *between))


def _match_softmax(graph: Graph, softmax: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    """``DQ(x) -> Softmax (last axis) -> Q`` as onnxruntime's lookup-table QLinearSoftmax."""
    x = _activation(graph, softmax.inputs[0], kept)
    out = _quantized_output(graph, softmax.outputs[0])
    shape = graph.values[softmax.inputs[0]].shape
    axis = int(softmax.attr("axis", -1 if softmax.opset >= 13 else 1))
    if x is None or out is None or (axis + len(shape) if axis < 0 else axis) != len(shape) - 1:
        return None
    (x_dq, xp), (q, between) = x, out
    if graph.values[x_dq.inputs[0]].dtype != graph.values[q.outputs[0]].dtype or q.outputs[0] in kept:
        return None
    yp = _qparams(graph, q)
    table = names.add(f"{softmax.name}/exp_table", softmax_table(float(xp.scale_value.reshape(-1)[0]), shape[-1]))
    inputs = (x_dq.inputs[0], xp.scale, names.zero(xp, softmax.name), yp.scale, names.zero(yp, softmax.name), table)
    attrs = {"axis": -1, "opset": 13}
    node = Node(softmax.name, "QLinearSoftmax", inputs, (q.outputs[0],), attrs, 1, "com.microsoft")
    return _Rewrite(q, node, (softmax, *between))


def _match_global_average_pool(graph: Graph, pool: Node, names: _Names, kept: frozenset[str]) -> _Rewrite | None:
    x = _activation(graph, pool.inputs[0], kept)
    out = _quantized_output(graph, pool.outputs[0])
    if (
        x is None
        or out is None
        or out[0].outputs[0] in kept
        or graph.values[x[0].inputs[0]].dtype != graph.values[out[0].outputs[0]].dtype
    ):
        return None
    (x_dq, xp), (q, between) = x, out
    yp = _qparams(graph, q)
    inputs = (x_dq.inputs[0], xp.scale, names.zero(xp, pool.name), yp.scale, names.zero(yp, pool.name))
    attrs = {"channels_last": 0, **({"layout": pool.attr("layout")} if pool.attr("layout") else {})}
    node = Node(pool.name, "QLinearGlobalAveragePool", inputs, (q.outputs[0],), attrs, 1, "com.microsoft")
    return _Rewrite(q, node, (pool, *between))


_MATCHERS: dict[str, Callable[[Graph, Node, _Names, frozenset[str]], _Rewrite | None]] = {
    "Conv": _match_conv,
    "MatMul": _match_matmul,
    "Gemm": _match_gemm,
    "Add": _match_binary,
    "Mul": _match_binary,
    "GlobalAveragePool": _match_global_average_pool,
    "Softmax": _match_softmax,
}

# op -> input indices of (x, x zero point, w, w zero point, bias)
_ZP_INPUTS = {
    "QLinearConv": (0, 2, 3, 5, 8),
    "QLinearMatMul": (0, 2, 3, 5, 8),
    "ConvInteger": (0, 2, 1, 3, 4),
    "MatMulInteger": (0, 2, 1, 3, 4),
}


def _fold_zero_points(graph: Graph) -> Graph:
    """Precompute ``-x_zero_point * sum_k (w - w_zero_point)`` of each constant weight into the
    bias (attribute ``x_zero_point_folded``), so that the reduction is a plain int8 dot product."""
    names = _Names(graph)
    nodes = []
    for n in graph.nodes:
        folded = _fold_node_zero_point(graph, n, names) if n.op in _ZP_INPUTS and not n.attr(ZP_FOLDED, 0) else None
        nodes.append(folded or n)
    return names.apply(graph, nodes) if names.constants else graph


def _input(node: Node, index: int) -> str:
    return node.inputs[index] if index < len(node.inputs) else ""


def _fold_node_zero_point(graph: Graph, node: Node, names: _Names) -> Node | None:
    _, xzi, wi, wzi, bi = _ZP_INPUTS[node.op]
    xz = _const(graph, _input(node, xzi))
    w = _const(graph, _input(node, wi))
    bias_name = _input(node, bi)
    bias = _const(graph, bias_name) if bias_name else np.zeros((), np.int32)
    if xz is None or xz.size != 1 or int(xz.reshape(-1)[0]) == 0 or w is None or bias is None:
        return None
    wz_name = _input(node, wzi)
    wz = _const(graph, wz_name) if wz_name else np.zeros((), w.dtype)
    if wz is None:
        return None
    sums = _weight_sums(node, w.astype(np.int64), wz.astype(np.int64).reshape(-1))
    if sums is None:
        return None
    total = bias.astype(np.int64).reshape(-1) - int(xz.reshape(-1)[0]) * sums
    wrapped = ((total + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)
    inputs = list(node.inputs) + [""] * (bi + 1 - len(node.inputs))
    inputs[bi] = names.add(f"{node.name}/bias_x_zero_point_folded", wrapped)
    return node.with_(inputs=tuple(inputs), attrs={ZP_FOLDED: 1})


def _weight_sums(node: Node, w: np.ndarray, wz: np.ndarray) -> np.ndarray | None:
    """``sum_k (w - w_zero_point)`` per output channel (a conv's Cout, a matmul's column)."""
    if node.op in ("QLinearConv", "ConvInteger"):
        if node.attr("layout", "NCHW") == "NHWC":
            return (w - wz.reshape((1,) * (w.ndim - 1) + (-1,))).reshape(-1, w.shape[-1]).sum(axis=0)
        return (w - wz.reshape((-1,) + (1,) * (w.ndim - 1))).reshape(w.shape[0], -1).sum(axis=1)
    if w.ndim != 2:  # a vector or a batch of weights: left to the reduction
        return None
    return (w - wz.reshape(1, -1)).sum(axis=0)


# where a quantized activation may be uint8: op -> {input index: index of its zero point}
_UINT8_READS = {
    "DequantizeLinear": {0: 2},
    "QLinearConv": {0: 2},
    "QLinearMatMul": {0: 2, 3: 5},  # B when it is not a constant (a weight stays int8)
    "QLinearAdd": {0: 2, 3: 5},
    "QLinearMul": {0: 2, 3: 5},
    "QLinearGlobalAveragePool": {0: 2},
    "QLinearSoftmax": {0: 2},
}
# op -> the index of its output's zero point
_UINT8_WRITES = {
    "QuantizeLinear": 2,
    "QLinearConv": 7,
    "QLinearMatMul": 7,
    "QLinearAdd": 7,
    "QLinearMul": 7,
    "QLinearGlobalAveragePool": 4,
    "QLinearSoftmax": 4,
}
_BINARY = ("QLinearAdd", "QLinearMul")  # all of A, B and the output are uint8, or none


def _to_uint8(graph: Graph) -> Graph:
    """int8 activations as uint8, every value and zero point + 128, as onnxruntime does on x86:
    integer results are the same, a convolution or matmul by an int8 weight becomes uint8 x
    int8 (VNNI's form), and QLinearAdd rounds as onnxruntime's uint8 kernel. A value stays int8
    when it is a graph input or output, or something other than these ops reads or writes it."""
    chosen = {v for v, val in graph.values.items() if val.dtype == "int8" and not graph.is_output(v)}
    chosen -= {v.name for v in graph.inputs}
    changed = True
    while changed:
        bad = {v for v in chosen if not _uint8_ok(graph, v, chosen)}
        chosen -= bad
        changed = bool(bad)
    if not chosen:
        return graph
    names = _Names(graph)
    zeros: dict[str, str] = {}

    def zero(node: Node, index: int) -> str:
        old = _input(node, index)
        if old not in zeros:
            z = graph.constants[old] if old else np.zeros((), np.int8)
            zeros[old] = names.add(f"{old or node.name + '/zero_point'}/uint8", _shifted(z))
        return zeros[old]

    nodes = []
    for n in graph.nodes:
        index = {zi for k, zi in _UINT8_READS.get(n.op, {}).items() if _input(n, k) in chosen}
        if n.op in _UINT8_WRITES and n.outputs[0] in chosen:
            index.add(_UINT8_WRITES[n.op])
        inputs = list(n.inputs) + [""] * (max(index, default=0) + 1 - len(n.inputs))
        for zi in index:
            inputs[zi] = zero(n, zi)
        attrs = {k: v for k, v in n.attrs.items() if not (k == SHIFT_TO_UINT8 and n.outputs[0] in chosen)}
        nodes.append(Node(n.name, n.op, tuple(inputs), n.outputs, attrs, n.opset, n.domain) if index else n)
    values = {k: Value(k, v.shape, "uint8") if k in chosen else v for k, v in graph.values.items()}
    constants = {k: _shifted(v) if k in chosen else v for k, v in graph.constants.items()}
    graph = graph.replace(values=values, constants=constants)
    return names.apply(graph, nodes)


def _shifted(arr: np.ndarray) -> np.ndarray:
    return (arr.astype(np.int16) + 128).astype(np.uint8)


def _uint8_ok(graph: Graph, value: str, chosen: set[str]) -> bool:
    """Whether ``value`` can be uint8 when the values ``chosen`` are."""
    p = graph.producer(value)
    if p is not None:
        if p.op in DROP_QDQ_OPS:
            if p.inputs[0] not in chosen:
                return False
        elif p.op not in _UINT8_WRITES or not _scalar_zero(graph, p, _UINT8_WRITES[p.op]):
            return False
        elif p.op in _BINARY and not {p.inputs[0], p.inputs[3]} <= chosen:
            return False
    elif not graph.is_constant(value):
        return False
    return all(_uint8_read_ok(graph, c, k, chosen) for c in graph.consumers(value) for k in _positions(c, value))


def _positions(node: Node, value: str) -> list[int]:
    return [k for k, name in enumerate(node.inputs) if name == value]


def _scalar_zero(graph: Graph, node: Node, index: int) -> bool:
    """Whether the zero point at input ``index`` is absent or a one-element constant."""
    name = _input(node, index)
    return not name or (graph.is_constant(name) and graph.constants[name].size == 1)


def _uint8_read_ok(graph: Graph, node: Node, k: int, chosen: set[str]) -> bool:
    """Whether ``node`` can read a uint8 value at input ``k``."""
    if node.op in DROP_QDQ_OPS:
        return k == 0 and node.outputs[0] in chosen
    reads = _UINT8_READS.get(node.op, {})
    if k not in reads or not _scalar_zero(graph, node, reads[k]):
        return False
    if node.op == "QLinearMatMul" and k == 3 and graph.is_constant(node.inputs[3]):
        return False  # a weight stays int8
    return node.op not in _BINARY or {node.inputs[0], node.inputs[3], node.outputs[0]} <= chosen


def _fold_constant_dq(graph: Graph) -> Graph:
    """DequantizeLinear nodes over constants become float32 constants, computed as
    onnxruntime does: ``float32(int32(q) - zero_point) * scale``."""
    nodes, constants = [], dict(graph.constants)
    for n in graph.nodes:
        params = _qparams(graph, n) if n.op == "DequantizeLinear" else None
        data = _const(graph, n.inputs[0]) if params is not None else None
        if data is None or graph.is_output(n.outputs[0]):
            nodes.append(n)
            continue
        shape = [1] * data.ndim
        if not params.per_tensor and data.ndim:
            shape[params.axis] = -1
        centered = data.astype(np.int32) - params.zero_value.astype(np.int32).reshape(
            shape if params.zero_value.size > 1 else ()
        )
        scale = params.scale_value.astype(np.float32).reshape(shape if params.scale_value.size > 1 else ())
        constants[n.outputs[0]] = (centered.astype(np.float32) * scale).astype(np.float32)
    if len(nodes) == len(graph.nodes):
        return graph
    return graph.replace(nodes=nodes, constants=constants)


def _drop_dead(graph: Graph) -> Graph:
    used = {v.name for v in graph.outputs}
    kept: list[Node] = []
    for n in reversed(graph.nodes):
        if any(o and o in used for o in n.outputs):
            kept.append(n)
            used.update(i for i in n.inputs if i)
    if len(kept) == len(graph.nodes):
        return graph
    return graph.replace(nodes=reversed(kept))
