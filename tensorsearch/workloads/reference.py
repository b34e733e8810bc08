"""numpy reference implementations of the workloads.

Every function takes the workload's arguments and its input arrays (in parameter order) and
returns the output arrays.  Floating-point workloads are computed in float64 from the given
inputs (float16 inputs are widened exactly) and rounded once to float32 at the end; integer
workloads are computed exactly in int64 and returned as int32 (the arguments and input
ranges of the table keep every result inside int32).
"""

from __future__ import annotations

import numpy as np

from .winograd import transform_matrices


def _wide(x: np.ndarray) -> np.ndarray:
    """float64 for floating inputs, int64 for integer inputs."""
    return x.astype(np.int64) if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64)


def _narrow(y: np.ndarray) -> np.ndarray:
    return y.astype(np.int32) if np.issubdtype(y.dtype, np.integer) else y.astype(np.float32)


def conv_nd(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dilation: int = 1, groups: int = 1) -> np.ndarray:
    """Channels-last convolution (cross-correlation) in any number of spatial dimensions.

    ``x``: (N, *spatial, CI); ``w``: (*kernel, CI // groups, CO); zero padding ``pad`` on both
    sides of every spatial dimension.  Output channel ``co`` reads input channels
    ``co // (CO // groups) * (CI // groups) + rc`` as in TVM's ``conv2d_nhwc``.
    """
    x, w = _wide(x), _wide(w)
    nd = x.ndim - 2
    xp = np.pad(x, [(0, 0)] + [(pad, pad)] * nd + [(0, 0)])
    kernel = w.shape[:nd]
    cig, co = w.shape[nd], w.shape[nd + 1]
    cog = co // groups
    out_sp = [(x.shape[1 + d] + 2 * pad - dilation * (kernel[d] - 1) - 1) // stride + 1 for d in range(nd)]
    out = np.zeros((x.shape[0], *out_sp, co), dtype=x.dtype)
    for tap in np.ndindex(*kernel):
        window = tuple(slice(t * dilation, t * dilation + stride * (o - 1) + 1, stride) for t, o in zip(tap, out_sp))
        patch = xp[(slice(None), *window, slice(None))]  # (N, *out_sp, CI)
        for g in range(groups):
            out[..., g * cog : (g + 1) * cog] += (
                patch[..., g * cig : (g + 1) * cig] @ w[tap][:, g * cog : (g + 1) * cog]
            )
    return out


def conv1d_nlc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    _n, _l, _ci, _co, _k, stride, pad = args
    return [_narrow(conv_nd(inputs[0], inputs[1], stride, pad))]


def conv2d_nhwc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    stride, pad = args[6], args[7]
    dilation = args[8] if len(args) > 8 else 1
    groups = args[9] if len(args) > 9 else 1
    return [_narrow(conv_nd(inputs[0], inputs[1], stride, pad, dilation, groups))]


def conv3d_ndhwc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    stride, pad = args[7], args[8]
    return [_narrow(conv_nd(inputs[0], inputs[1], stride, pad))]


def depthwise_conv2d_nhwc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    _n, _h, _w, _c, k, stride, pad = args
    x, w = _wide(inputs[0]), _wide(inputs[1])  # w: (1, k, k, C)
    xp = np.pad(x, [(0, 0), (pad, pad), (pad, pad), (0, 0)])
    oh = (x.shape[1] + 2 * pad - k) // stride + 1
    ow = (x.shape[2] + 2 * pad - k) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, x.shape[3]), dtype=x.dtype)
    for rh in range(k):
        for rw in range(k):
            patch = xp[:, rh : rh + stride * (oh - 1) + 1 : stride, rw : rw + stride * (ow - 1) + 1 : stride, :]
            out += patch * w[0, rh, rw, :]
    return [_narrow(out)]


def conv2d_transpose_nhwc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Transposed convolution: input pixel (i, j) adds ``x[i, j] @ w[kh, kw]`` to output
    pixel ``(i * stride + kh - pad, j * stride + kw - pad)``."""
    n, h, w_, _ci, co, k, stride, pad = args
    x, w = _wide(inputs[0]), _wide(inputs[1])  # w: (k, k, CI, CO)
    full_h, full_w = (h - 1) * stride + k, (w_ - 1) * stride + k
    full = np.zeros((n, full_h, full_w, co), dtype=x.dtype)
    for kh in range(k):
        for kw in range(k):
            full[:, kh : kh + stride * (h - 1) + 1 : stride, kw : kw + stride * (w_ - 1) + 1 : stride, :] += (
                x @ w[kh, kw]
            )
    out_h, out_w = full_h - 2 * pad, full_w - 2 * pad
    return [_narrow(full[:, pad : pad + out_h, pad : pad + out_w, :])]


def conv2d_capsule_nhwijc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """out[n, h, w, i, j, co] = sum over (rh, rw, c, rc) of
    in[n, h*s + rh, w*s + rw, i, c, rc] * weight[rh, rw, c, j, rc, co] (zero padded)."""
    _n, _h, _w, _ci, _co, k, stride, pad = args
    x, w = _wide(inputs[0]), _wide(inputs[1])
    xp = np.pad(x, [(0, 0), (pad, pad), (pad, pad), (0, 0), (0, 0), (0, 0)])
    oh = (x.shape[1] + 2 * pad - k) // stride + 1
    ow = (x.shape[2] + 2 * pad - k) // stride + 1
    out = None
    for rh in range(k):
        for rw in range(k):
            patch = xp[:, rh : rh + stride * (oh - 1) + 1 : stride, rw : rw + stride * (ow - 1) + 1 : stride]
            term = np.einsum("nhwicr,cjrd->nhwijd", patch, w[rh, rw])
            out = term if out is None else out + term
    return [_narrow(out)]


def batch_matmul_nkkm(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, y = _wide(inputs[0]), _wide(inputs[1])
    return [_narrow(np.matmul(x, y))]


def transpose_batch_matmul(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """out[b, h, i, j] = sum_d query[b, i, h, d] * value[b, j, h, d]."""
    q, v = _wide(inputs[0]), _wide(inputs[1])
    return [_narrow(np.einsum("bihd,bjhd->bhij", q, v))]


def norm_bmn(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    a = _wide(inputs[0])
    return [_narrow(np.sqrt((a * a).sum(axis=(1, 2))))]


def softmax_mn(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    a = _wide(inputs[0])
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return [_narrow(e / e.sum(axis=1, keepdims=True))]


def conv2d_nhwc_bn_relu(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """relu((conv2d(data, kernel) + bias) * bn_scale + bn_offset); inputs in TVM's order
    (data, kernel, bias, bn_offset, bn_scale)."""
    stride, pad = args[6], args[7]
    data, kernel, bias, bn_offset, bn_scale = inputs
    conv = conv_nd(data, kernel, stride, pad)
    y = (conv + _wide(bias)) * _wide(bn_scale) + _wide(bn_offset)
    return [_narrow(np.maximum(y, 0.0))]


def winograd_geometry(h: int, w: int, m: int = 4, r: int = 3) -> tuple[int, int, int, int, int, int]:
    """(out_h, out_w, nH, nW, pad_extra_h, pad_extra_w) of TVM's NHWC Winograd (no padding).

    ``pad_extra`` follows TVM's formula, which uses the *output* height: it pads r - 1 rows
    more than the tiles read, harmlessly.
    """
    alpha = m + r - 1
    out_h, out_w = h - r + 1, w - r + 1
    n_h, n_w = (out_h + m - 1) // m, (out_w + m - 1) // m
    return out_h, out_w, n_h, n_w, (n_h - 1) * m + alpha - out_h, (n_w - 1) * m + alpha - out_w


def winograd_matrices_f32(m: int = 4, r: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transform matrices rounded to float32 (the constants the IR holds), as float64."""
    return tuple(mat.astype(np.float32).astype(np.float64) for mat in transform_matrices(m, r))  # type: ignore[return-value]


def conv2d_winograd_nhwc(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The Winograd pipeline of TVM with a pre-transformed kernel ``weight[eps, nu, co, ci]``.

    When ``weight[:, :, co, ci] = G @ g[:, :, ci, co] @ G.T`` for a 3x3 kernel ``g`` this equals
    the direct (unpadded, stride 1) conv2d_nhwc of ``data`` with ``g``.
    """
    _n, h, w_, _ci, _co, alpha = args
    m = 4
    r = alpha - m + 1
    a_mat, b_mat, _g = winograd_matrices_f32(m, r)
    data, weight = _wide(inputs[0]), _wide(inputs[1])
    n = data.shape[0]
    out_h, out_w, n_h, n_w, ex_h, ex_w = winograd_geometry(h, w_, m, r)
    dp = np.pad(data, [(0, 0), (0, ex_h), (0, ex_w), (0, 0)])
    # tiles[n, th, tw, eps, nu, ci]
    tiles = np.empty((n, n_h, n_w, alpha, alpha, data.shape[3]))
    for th in range(n_h):
        for tw in range(n_w):
            tiles[:, th, tw] = dp[:, th * m : th * m + alpha, tw * m : tw * m + alpha, :]
    v = np.einsum("nyxabc,ae,bu->nyxeuc", tiles, b_mat, b_mat)
    mm = np.einsum("nyxeuc,eukc->nyxeuk", v, weight)
    y = np.einsum("nyxabk,ah,bw->nyxhwk", mm, a_mat, a_mat)  # (n, nH, nW, m, m, CO)
    out = y.transpose(0, 1, 3, 2, 4, 5).reshape(n, n_h * m, n_w * m, -1)[:, :out_h, :out_w, :]
    return [_narrow(out)]


def winograd_kernel_pack(g: np.ndarray, m: int = 4) -> np.ndarray:
    """Pre-transform a (r, r, CI, CO) kernel into TVM's (alpha, alpha, CO, CI) ``kernel_pack``."""
    r = g.shape[0]
    _a, _b, g_mat = transform_matrices(m, r)
    return np.einsum("ea,abcd,ub->eudc", g_mat, g.astype(np.float64), g_mat)
