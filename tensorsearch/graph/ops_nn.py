"""Lowerings of the neural-network operators: convolutions, pooling, batch norm, Gemm, MatMul.

Each function is registered in :mod:`.registry` with ``@lowers`` and writes te stages named with
:func:`~.lowering.stage_name`::

    Conv (NCHW, as imported)        PadInput -> conv2d_nchw -> bias_add
    Conv {layout="NHWC"}            PadInput -> conv2d_nhwc -> bias_add   (workloads' conv2d_nhwc: C2D/GRP/DEP)
    ConvTranspose {layout="NHWC"}   PadInput -> conv2d_transpose_nhwc -> bias_add   (workloads' T2D)
    MaxPool / AveragePool           PadInput -> pool_max | pool_sum -> pool_avg
    GlobalAveragePool               global_pool_sum -> global_pool_avg
    BatchNormalization              batch_norm (one elementwise stage, inference only)
    Gemm                            matmul[i, j] = sum_k A[i, k] * B[k, j] -> gemm_epilogue (alpha, beta * C)
    MatMul                          matmul / batch_matmul (numpy broadcasting), a weight [K, N] read as is
    LayoutTransform {perm}          layout_transform (a transpose; inserted by :mod:`.layout`)

A padding stage exists only where an operator pads. Convolutions, pools and batch norm read
``attrs["layout"]`` (``"NCHW"``, the default, or ``"NHWC"``, set by :func:`.layout.to_nhwc`):
NHWC data is ``[N, *spatial, C]``, an NHWC Conv weight ``[*kernel, Cin/groups, Cout]`` and an
NHWC ConvTranspose weight ``[*kernel, Cin/groups, Cout]`` too (see :mod:`.layout`). The
reductions are written like :mod:`tensorsearch.workloads.definitions` (``conv2d_nhwc``,
``conv2d_transpose_nhwc``, ``batch_matmul_nkkm``), so the schedule rules and the tensor-intrinsic
matcher see the programs they were tuned on; a bias or an epilogue is a separate stage after the
reduction, for fusion to see anchor + elementwise. Convolutions and pools work on 1-, 2- and 3-D
spatial data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import te
from ..ir import PrimExpr, max_, min_
from ..workloads import definitions
from .ir import GraphError, Node, Value
from .lowering import ORT_ORDER, stage_name
from .registry import Operand, OpKind, lowers

__all__ = ["LAYOUTS"]

LAYOUTS = ("NCHW", "NHWC")
_SPATIAL_LETTERS = {1: "w", 2: "hw", 3: "dhw"}


# ---------------------------------------------------------------------------------------------
# attributes and geometry


def _layout(node: Node) -> str:
    layout = node.attr("layout", "NCHW")
    if layout not in LAYOUTS:
        raise GraphError(f"attribute layout={layout!r} is not supported (supported: {', '.join(LAYOUTS)})")
    return layout


def _ints(node: Node, key: str, default: Sequence[int], rank: int) -> tuple[int, ...]:
    value = tuple(int(v) for v in node.attr(key, default))
    if len(value) != rank:
        raise GraphError(f"attribute {key}={list(value)} has {len(value)} entries (expected {rank})")
    return value


def _refuse(node: Node, key: str, default: object, supported: str) -> None:
    value = node.attr(key, default)
    if value != default:
        raise GraphError(f"attribute {key}={value!r} is not supported (supported: {supported})")


def _split(layout: str, shape: Sequence) -> tuple[object, tuple, object]:
    """(batch, spatial dims, channel) of a data shape or index in ``layout``."""
    if layout == "NCHW":
        return shape[0], tuple(shape[2:]), shape[1]
    return shape[0], tuple(shape[1:-1]), shape[-1]


def _join(layout: str, n: object, spatial: Sequence, c: object) -> tuple:
    return (n, c, *spatial) if layout == "NCHW" else (n, *spatial, c)


def _stage_base(kind: str, nd: int, layout: str, suffix: str = "") -> str:
    """``conv2d_nhwc``, ``conv1d_ncw``, ``conv2d_transpose_nchw``, ... (TVM's names)."""
    letters = _SPATIAL_LETTERS.get(nd, "s" * nd)
    tail = f"nc{letters}" if layout == "NCHW" else f"n{letters}c"
    return f"{kind}{nd}d{suffix}_{tail}"


@dataclass(frozen=True)
class _Window:
    """A sliding window per spatial dimension; ``pads_end`` covers every read of the output."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]  # the attribute's, or more where ceil_mode reads past it
    declared_end: tuple[int, ...]  # the attribute's (or auto_pad's)


_AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _window(node: Node, spatial: Sequence[int], kernel: Sequence[int], out_spatial: Sequence[int]) -> _Window:
    nd = len(spatial)
    strides = _ints(node, "strides", (1,) * nd, nd)
    dilations = _ints(node, "dilations", (1,) * nd, nd)
    if min(strides) < 1 or min(dilations) < 1:
        raise GraphError(f"attributes strides={list(strides)} and dilations={list(dilations)} must be positive")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PADS:
        raise GraphError(f"attribute auto_pad={auto_pad!r} is not supported (supported: {', '.join(_AUTO_PADS)})")
    if auto_pad == "NOTSET":
        pads = _ints(node, "pads", (0, 0) * nd, 2 * nd)
        begin, end = pads[:nd], pads[nd:]
    elif auto_pad == "VALID":
        begin = end = (0,) * nd
    else:
        begin, end = _same_pads(spatial, kernel, strides, dilations, upper=auto_pad == "SAME_UPPER")
    if min(begin + end) < 0:
        raise GraphError(f"attribute pads={list(begin + end)} is not supported (supported: pads >= 0)")
    needed = [
        (o - 1) * s + (k - 1) * d + 1 - (i + b)
        for o, s, k, d, i, b in zip(out_spatial, strides, kernel, dilations, spatial, begin, strict=True)
    ]
    covering = tuple(max(e, n) for e, n in zip(end, needed, strict=True))
    return _Window(tuple(kernel), strides, dilations, tuple(begin), covering, tuple(end))


def _same_pads(
    spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], upper: bool
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    begin, end = [], []
    for i, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        out = -(-i // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - i)
        head = total // 2 if upper else total - total // 2
        begin.append(head)
        end.append(total - head)
    return tuple(begin), tuple(end)


def _scaled(index: PrimExpr, factor: int) -> PrimExpr:
    return index if factor == 1 else index * factor


def _tap(out: PrimExpr, red: PrimExpr, stride: int, dilation: int) -> PrimExpr:
    """``out * stride + red * dilation``, the input position a window tap reads (as workloads write it)."""
    return _scaled(out, stride) + _scaled(red, dilation)


def _mul(a: PrimExpr, b: PrimExpr, acc: str) -> PrimExpr:
    return a.astype(acc) * b.astype(acc)


def _pad(t: te.Tensor, before: Sequence[int], after: Sequence[int], value: PrimExpr | None = None) -> te.Tensor:
    """``t`` padded with ``value`` (zero by default) as ``workloads.definitions.pad`` writes it;
    ``t`` itself when nothing is padded."""
    if not any(before) and not any(after):
        return t
    return definitions.pad(t, before, after, name=stage_name("PadInput"), value=value)


def _pad_spatial(t: te.Tensor, layout: str, begin: Sequence[int], end: Sequence[int], value=None) -> te.Tensor:
    return _pad(t, _join(layout, 0, begin, 0), _join(layout, 0, end, 0), value)


def _reduce_axes(kernel: Sequence[int]) -> list[te.ReduceAxis]:
    names = {1: ("rw",), 2: ("rh", "rw"), 3: ("rd", "rh", "rw")}.get(len(kernel))
    names = names or tuple(f"r{d}" for d in range(len(kernel)))
    return [te.reduce_axis((0, k), name=n) for k, n in zip(kernel, names, strict=True)]


def _channel_bias(x: te.Tensor, bias: Operand | None, layout: str) -> te.Tensor:
    """A separate ``bias_add`` stage adding a per-channel ``bias`` (when there is one)."""
    if bias is None:
        return x
    b = bias.tensor

    def body(*idx: PrimExpr) -> PrimExpr:
        return x[idx] + b[_split(layout, idx)[2]]

    return te.compute(x.shape, body, name=stage_name("bias_add"))


# ---------------------------------------------------------------------------------------------
# convolutions


def _groups(node: Node, cin: int, cout: int) -> int:
    groups = int(node.attr("group", 1))
    if groups < 1 or cin % groups or cout % groups:
        raise GraphError(f"attribute group={groups} does not divide the {cin} input and {cout} output channels")
    return groups


@lowers("Conv", kind=OpKind.ANCHOR)
def conv(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """N-D convolution, groups, dilations, strides, pads, auto_pad, optional bias; NCHW or NHWC."""
    layout = _layout(node)
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    _, spatial, cin = _split(layout, x.shape)
    wshape = w.shape
    kernel = tuple(wshape[2:]) if layout == "NCHW" else tuple(wshape[:-2])
    cout = wshape[0] if layout == "NCHW" else wshape[-1]
    nd = len(spatial)
    if nd == 0 or len(wshape) != nd + 2:
        raise GraphError(f"input {x.value.name} {list(x.shape)} and weight {list(wshape)} do not fit a convolution")
    if node.attr("kernel_shape") is not None and tuple(node.attr("kernel_shape")) != kernel:
        raise GraphError(
            f"attribute kernel_shape={list(node.attr('kernel_shape'))} differs from the weight's {list(kernel)}"
        )
    groups = _groups(node, cin, cout)
    out_shape = outs[0].shape
    out_spatial = _split(layout, out_shape)[1]
    win = _window(node, spatial, kernel, out_spatial)
    acc = outs[0].dtype
    padded = _pad_spatial(x.tensor, layout, win.pads_begin, win.pads_end)
    cig, cog = cin // groups, cout // groups
    weight = w.tensor
    red = _reduce_axes(kernel)
    rc = te.reduce_axis((0, cig), name="rc")

    def channel(cc: PrimExpr) -> PrimExpr:
        return rc if groups == 1 else cc // cog * cig + rc

    def body(*idx: PrimExpr) -> PrimExpr:
        nn, pos, cc = _split(layout, idx)
        taps = [_tap(o, r, s, d) for o, r, s, d in zip(pos, red, win.strides, win.dilations, strict=True)]
        if layout == "NCHW":
            data = padded[(nn, channel(cc), *taps)]
            return te.sum(_mul(data, weight[(cc, rc, *red)], acc), axis=[rc, *red])
        data = padded[(nn, *taps, channel(cc))]
        return te.sum(_mul(data, weight[(*red, rc, cc)], acc), axis=[*red, rc])

    out = te.compute(out_shape, body, name=stage_name(_stage_base("conv", nd, layout)))
    return [_channel_bias(out, bias, layout)]


@lowers("ConvTranspose", kind=OpKind.ANCHOR)
def conv_transpose(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """N-D transposed convolution (TVM's and T2D's form: a stride-1 convolution with the flipped
    kernel over the zero-padded, stride-dilated input, the dilation folded into the read)."""
    layout = _layout(node)
    _refuse(node, "auto_pad", "NOTSET", "NOTSET")
    if node.attr("output_shape") is not None:
        raise GraphError("attribute output_shape is not supported (supported: pads and output_padding)")
    x, w, bias = args[0], args[1], args[2] if len(args) > 2 else None
    _, spatial, cin = _split(layout, x.shape)
    nd = len(spatial)
    wshape = w.shape
    if nd == 0 or len(wshape) != nd + 2:
        raise GraphError(f"input {x.value.name} {list(x.shape)} and weight {list(wshape)} do not fit a convolution")
    kernel = tuple(wshape[2:]) if layout == "NCHW" else tuple(wshape[:-2])
    cout = _split(layout, outs[0].shape)[2]
    groups = _groups(node, cin, cout)
    strides = _ints(node, "strides", (1,) * nd, nd)
    dilations = _ints(node, "dilations", (1,) * nd, nd)
    pads = _ints(node, "pads", (0, 0) * nd, 2 * nd)
    out_shape = outs[0].shape
    out_spatial = _split(layout, out_shape)[1]
    geo = [
        _transpose_geometry(*a)
        for a in zip(spatial, kernel, strides, dilations, pads[:nd], pads[nd:], out_spatial, strict=True)
    ]
    padded = _pad_spatial(x.tensor, layout, [g[0] for g in geo], [g[1] for g in geo])
    shifts = [g[2] for g in geo]
    cig, cog = cin // groups, cout // groups
    weight = w.tensor
    red = _reduce_axes(kernel)
    rc = te.reduce_axis((0, cig), name="rc")
    zero = te.const(0, x.dtype)
    acc = outs[0].dtype

    def channel(cc: PrimExpr) -> PrimExpr:
        return rc if groups == 1 else cc // cog * cig + rc

    def dilated(nn: PrimExpr, pos: Sequence[PrimExpr], c: PrimExpr) -> PrimExpr:
        index = [p // s if s > 1 else p for p, s in zip(pos, strides, strict=True)]
        read = padded[_join(layout, nn, index, c)]
        grid = [te.equal(p % s, 0) for p, s in zip(pos, strides, strict=True) if s > 1]
        return te.if_then_else(te.all(*grid), read, zero) if grid else read

    def body(*idx: PrimExpr) -> PrimExpr:
        nn, pos, cc = _split(layout, idx)
        taps = [
            _tap(o, r, 1, d) + b if b else _tap(o, r, 1, d)
            for o, r, d, b in zip(pos, red, dilations, shifts, strict=True)
        ]
        flipped = [k - 1 - r for k, r in zip(kernel, red, strict=True)]
        data = dilated(nn, taps, channel(cc))
        if layout == "NCHW":
            wread = weight[(channel(cc), cc % cog if groups > 1 else cc, *flipped)]
            return te.sum(_mul(data, wread, acc), axis=[rc, *red])
        return te.sum(_mul(data, weight[(*flipped, rc, cc)], acc), axis=[*red, rc])

    out = te.compute(out_shape, body, name=stage_name(_stage_base("conv", nd, layout, "_transpose")))
    return [_channel_bias(out, bias, layout)]


def _transpose_geometry(
    size: int, kernel: int, stride: int, dilation: int, begin: int, end: int, out: int
) -> tuple[int, int, int]:
    """(input pixels padded before, after, the shift of the dilated read) of one spatial dim.

    Output ``o`` and flipped tap ``r`` read the dilated, padded input at ``o + r * dilation +
    shift``: a real pixel ``y // stride - before`` there when ``y % stride == 0``."""
    if min(begin, end) < 0:
        raise GraphError(f"attribute pads={[begin, end]} is not supported (supported: pads >= 0)")
    back = (kernel - 1) * dilation - begin  # zeros before the first pixel in the dilated input
    before = max(0, -(-back // stride))
    shift = before * stride - back
    last = (out - 1) + (kernel - 1) * dilation + shift
    after_needed = last // stride + 1 - before - size
    after_sym = max(0, -(-((kernel - 1) * dilation - end) // stride))
    return before, max(0, after_needed, after_sym), shift


# ---------------------------------------------------------------------------------------------
# pooling


def _pool_geometry(node: Node, x: Operand, out: Value, layout: str) -> _Window:
    _, spatial, _ = _split(layout, x.shape)
    nd = len(spatial)
    kernel = node.attr("kernel_shape")
    if kernel is None or len(kernel) != nd:
        raise GraphError(f"attribute kernel_shape={kernel!r} must give {nd} extents")
    if int(node.attr("ceil_mode", 0)) not in (0, 1):
        raise GraphError(f"attribute ceil_mode={node.attr('ceil_mode')} is not supported (supported: 0, 1)")
    return _window(node, spatial, tuple(int(k) for k in kernel), _split(layout, out.shape)[1])


def _pooled(
    padded: te.Tensor, layout: str, out_shape: Sequence[int], win: _Window, reducer: Callable, name: str
) -> te.Tensor:
    red = _reduce_axes(win.kernel)

    def body(*idx: PrimExpr) -> PrimExpr:
        nn, pos, cc = _split(layout, idx)
        taps = [_tap(o, r, s, d) for o, r, s, d in zip(pos, red, win.strides, win.dilations, strict=True)]
        return reducer(padded[_join(layout, nn, taps, cc)], axis=red)

    return te.compute(out_shape, body, name=stage_name(name))


@lowers("MaxPool", kind=OpKind.REDUCTION)
def max_pool(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    layout = _layout(node)
    if len(outs) > 1:
        raise GraphError("the Indices output (output 1) is not supported")
    x = args[0]
    win = _pool_geometry(node, x, outs[0], layout)
    padded = _pad_spatial(x.tensor, layout, win.pads_begin, win.pads_end, te.min_value(x.dtype))
    return [_pooled(padded, layout, outs[0].shape, win, te.max, "pool_max")]


@lowers("AveragePool", kind=OpKind.REDUCTION)
def average_pool(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    layout = _layout(node)
    x = args[0]
    win = _pool_geometry(node, x, outs[0], layout)
    if max(win.dilations) != 1:
        raise GraphError(f"attribute dilations={list(win.dilations)} is not supported (supported: 1)")
    include = int(node.attr("count_include_pad", 0))
    if include not in (0, 1):
        raise GraphError(f"attribute count_include_pad={include} is not supported (supported: 0, 1)")
    padded = _pad_spatial(x.tensor, layout, win.pads_begin, win.pads_end)
    total = _pooled(padded, layout, outs[0].shape, win, te.sum, "pool_sum")
    spatial = _split(layout, x.shape)[1]
    dims = [
        _pool_count(i, o, win, d, bool(include))
        for d, (i, o) in enumerate(zip(spatial, _split(layout, outs[0].shape)[1], strict=True))
    ]

    def body(*idx: PrimExpr) -> PrimExpr:
        count: PrimExpr | int = 1
        for d, p in zip(dims, _split(layout, idx)[1], strict=True):
            count = count * d(p)
        return total[idx] / (te.const(count, x.dtype) if isinstance(count, int) else te.cast(count, x.dtype))

    return [te.compute(outs[0].shape, body, name=stage_name("pool_avg"))]


def _pool_count(size: int, out: int, win: _Window, d: int, include_pad: bool) -> Callable[[PrimExpr], PrimExpr | int]:
    """The number of elements an average divides by along dimension ``d``, as a function of the
    output index (a constant when it is the same for every output index): the window clipped to
    the input, or to the declared padding with ``count_include_pad``."""
    k, s, b = win.kernel[d], win.strides[d], win.pads_begin[d]
    lo, hi = (-b, size + win.declared_end[d]) if include_pad else (0, size)
    counts = {min(o * s - b + k, hi) - max(o * s - b, lo) for o in range(out)}
    if len(counts) == 1:
        only = counts.pop()
        return lambda p: only
    return lambda p: min_(_scaled(p, s) + (k - b), hi) - max_(_scaled(p, s) - b, lo)


@lowers("GlobalAveragePool", kind=OpKind.REDUCTION)
def global_average_pool(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    layout = _layout(node)
    x = args[0].tensor
    spatial = _split(layout, args[0].shape)[1]
    red = _reduce_axes(spatial)

    def total_body(*idx: PrimExpr) -> PrimExpr:
        nn, _, cc = _split(layout, idx)
        return te.sum(x[_join(layout, nn, red, cc)], axis=red)

    total = te.compute(outs[0].shape, total_body, name=stage_name("global_pool_sum"))
    count = te.const(math.prod(spatial), args[0].dtype)
    return [te.compute(outs[0].shape, lambda *i: total[i] / count, name=stage_name("global_pool_avg"))]


# ---------------------------------------------------------------------------------------------
# batch normalization


@lowers("BatchNormalization", kind=OpKind.INJECTIVE)
def batch_norm(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """Inference: ``(x - mean) * (scale / sqrt(var + epsilon)) + bias`` per channel."""
    layout = _layout(node)
    _refuse(node, "training_mode", 0, "0, inference")
    if len(outs) > 1:
        raise GraphError("outputs running_mean and running_var are not supported (training_mode=0 has one output)")
    x, scale, bias, mean, var = (a.tensor for a in args[:5])
    eps = te.const(float(node.attr("epsilon", 1e-5)), args[0].dtype)

    def body(*idx: PrimExpr) -> PrimExpr:
        c = _split(layout, idx)[2]
        return (x[idx] - mean[c]) * (scale[c] / te.sqrt(var[c] + eps)) + bias[c]

    return [te.compute(outs[0].shape, body, name=stage_name("batch_norm"))]


# ---------------------------------------------------------------------------------------------
# matrix products


def _broadcast_read(t: te.Tensor, shape: Sequence[int], out: Sequence[int], idx: Sequence[PrimExpr]) -> PrimExpr:
    """``t`` (a graph value of ``shape``) read at index ``idx`` of an output of shape ``out``,
    numpy broadcasting (a dimension of 1 where the output's is longer reads element 0)."""
    if not shape:
        return t[0]
    return t[_broadcast_index(shape, out, idx)]


def _broadcast_index(shape: Sequence[int], out: Sequence[int], idx: Sequence[PrimExpr]) -> tuple:
    """The index into ``shape`` (right-aligned to the output dims ``out``) at output index ``idx``."""
    if not shape:
        return ()
    tail, dims = idx[len(idx) - len(shape) :], out[len(out) - len(shape) :]
    return tuple(0 if s == 1 and o != 1 else i for s, o, i in zip(shape, dims, tail, strict=True))


@lowers("Gemm", kind=OpKind.ANCHOR)
def gemm(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """``alpha * A' @ B' + beta * C``: a ``matmul`` reduction, then an epilogue stage."""
    a, b = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    k_extent = a.shape[0] if trans_a else a.shape[1]
    k = te.reduce_axis((0, k_extent), name="k")
    at, bt = a.tensor, b.tensor
    dtype = outs[0].dtype

    def mm(i: PrimExpr, j: PrimExpr) -> PrimExpr:
        left = at[k, i] if trans_a else at[i, k]
        right = bt[j, k] if trans_b else bt[k, j]
        return te.sum(_mul(left, right, dtype), axis=[k])

    out = te.compute(outs[0].shape, mm, name=stage_name("matmul"))
    if c is None or beta == 0.0:
        c = None
    if alpha == 1.0 and c is None:
        return [out]

    def epilogue(i: PrimExpr, j: PrimExpr) -> PrimExpr:
        value = out[i, j] if alpha == 1.0 else out[i, j] * te.const(alpha, dtype)
        if c is None:
            return value
        bias = _broadcast_read(c.tensor, c.shape, outs[0].shape, (i, j))
        return value + (bias if beta == 1.0 else bias * te.const(beta, dtype))

    return [te.compute(outs[0].shape, epilogue, name=stage_name("gemm_epilogue"))]


@lowers("MatMul", kind=OpKind.ANCHOR)
def matmul(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """numpy's matmul: 1-D operands, batch dimensions broadcast; ``out[..., i, j] = sum_k
    A[..., i, k] * B[..., k, j]`` (a 2-D weight ``B[k, j]`` is read as it is)."""
    a, b = args[0], args[1]
    sa, sb = a.shape, b.shape
    if not sa or not sb:
        raise GraphError("MatMul of a 0-d operand is not defined")
    k = te.reduce_axis((0, sa[-1]), name="k")
    at, bt = a.tensor, b.tensor
    dtype = outs[0].dtype
    out_shape = outs[0].shape
    batch = out_shape[: len(out_shape) - (len(sa) > 1) - (len(sb) > 1)]

    def operands(idx: Sequence[PrimExpr], kk: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
        pos = list(idx) if out_shape else []
        j = pos.pop() if len(sb) > 1 else None
        i = pos.pop() if len(sa) > 1 else None
        left = at[(*_broadcast_index(sa[:-2], batch, pos), i, kk)] if i is not None else at[kk]
        right = bt[(*_broadcast_index(sb[:-2], batch, pos), kk, j)] if j is not None else bt[kk]
        return left, right

    name = "batch_matmul" if len(sb) > 2 else "matmul"
    if node.attr(ORT_ORDER, 0) and dtype == "float32" and len(sa) > 1 and len(sb) > 1:
        return [_mlas_order_matmul(operands, out_shape, sa[-1], sb[-1], name)]

    def body(*idx: PrimExpr) -> PrimExpr:
        return te.sum(_mul(*operands(idx, k), dtype), axis=[k])

    return [te.compute(out_shape or (1,), body, name=stage_name(name))]


def mlas_stride_k(n: int, k: int) -> int:
    """The K-block of MLAS's SGEMM for a product with ``n`` columns and ``k`` terms
    (``MlasSgemmOperation``): 128, halved while half of it still covers ``k`` when ``n >= k``,
    doubled while the N-block (128, halved in step) can halve and still cover ``n`` otherwise."""
    stride_n, stride_k = 128, 128
    if n >= k:
        while stride_k // 2 >= k:
            stride_n, stride_k = stride_n * 2, stride_k // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride_k = stride_n // 2, stride_k * 2
    return stride_k


def _mlas_order_matmul(
    operands: Callable[[Sequence[PrimExpr], PrimExpr], tuple[PrimExpr, PrimExpr]],
    out_shape: Sequence[int],
    k_extent: int,
    n_extent: int,
    name: str,
) -> te.Tensor:
    """A float32 matmul summed as onnxruntime's CPU MatMul (MLAS SGEMM) sums it, bit for bit:
    the ``k`` terms in blocks of :func:`mlas_stride_k`, each block an ordered chain of fused
    multiply-adds from 0 (:func:`te.fma_sum`), the block sums added to the output in order::

        P[b, i, j] = fma-chain over k in block b        (b < K // S, full blocks)
        T[i, j]    = fma-chain over the last K % S      (when there is a rest)
        C[i, j]    = ((P[0, i, j] + P[1, i, j]) + ...) + T[i, j]

    MLAS picks the block from the columns one thread computes; this takes the whole ``N``,
    which gives the same block unless a thread's share falls below 64 columns. (A one-row
    product, which MLAS computes with another kernel, is not reproduced.)"""
    stride = mlas_stride_k(n_extent, k_extent)
    full, rest = divmod(k_extent, stride)
    parts: list[Callable[[tuple[PrimExpr, ...]], PrimExpr]] = []
    if full:
        ki = te.reduce_axis((0, stride), name="k")
        if full == 1 and not rest:
            return te.compute(out_shape, lambda *idx: te.fma_sum(*operands(idx, ki), axis=[ki]), name=stage_name(name))
        blocks = te.compute(
            (full, *out_shape),
            lambda b, *idx: te.fma_sum(*operands(idx, b * stride + ki), axis=[ki]),
            name=stage_name(f"{name}_blocks"),
        )
        parts += [lambda idx, b=b: blocks[(b, *idx)] for b in range(full)]
    if rest:
        kr = te.reduce_axis((0, rest), name="k")
        tail = te.compute(
            out_shape,
            lambda *idx: te.fma_sum(*operands(idx, full * stride + kr), axis=[kr]),
            name=stage_name(f"{name}_rest"),
        )
        if not full:
            return tail
        parts.append(lambda idx: tail[idx])

    def total(*idx: PrimExpr) -> PrimExpr:
        value = parts[0](idx)
        for part in parts[1:]:
            value = value + part(idx)
        return value

    return te.compute(out_shape, total, name=stage_name(name))


# ---------------------------------------------------------------------------------------------
# layout


@lowers("LayoutTransform", kind=OpKind.INJECTIVE)
def layout_transform(node: Node, args: list[Operand | None], outs: list[Value]) -> list[te.Tensor]:
    """A transpose: output dimension ``d`` is input dimension ``perm[d]`` (the graph's internal op)."""
    perm = tuple(int(p) for p in node.attr("perm", ()))
    x = args[0].tensor
    if sorted(perm) != list(range(x.ndim)):
        raise GraphError(f"attribute perm={list(perm)} is not a permutation of {x.ndim} dimensions")
    inverse = [perm.index(d) for d in range(len(perm))]
    return [te.compute(outs[0].shape, lambda *i: x[tuple(i[p] for p in inverse)], name=stage_name("layout_transform"))]
