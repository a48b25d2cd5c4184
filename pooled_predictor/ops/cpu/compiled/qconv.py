"""8-bit convolution helpers: the stride-phase split of a padded 8-bit input, and depthwise convolution.

split_phases_q is phases.py's split for uint8 / int8 planes, the padding filled
with the input's zero point (so that a padded tap contributes (x_zp - x_zp) * W = 0
once the zero point is folded into the bias, compiled/qgemm.py), the phase planes
followed by slack so the 16-pixel tiles of the integer GEMM may read past the last
pixel.

depthwise_q runs a depthwise convolution (one input channel per output channel,
any kernel, strides and dilations through the phase planes) in int32:
acc[c, p] = b[c] + sum_t W'[c, t] * plane_t[c][off_t + p] over the extended output
rows (pitch wq), then requantizes as qgemm.py does (float32(acc) * mult[c],
clamped, rounded half to even, + y_zp) into the output rows' first OW pixels.
"""

from __future__ import annotations

import numpy as np
from numba import types

from .jit import njit
from .phases import inside
from .qgemm import signed

_i8 = types.int64


def _split_sig(t):
    return types.void(types.Array(t, 4, "C", readonly=True), types.Array(t, 1, "C"), _i8, _i8, _i8, _i8, _i8, _i8,
                      _i8)


@njit([_split_sig(types.uint8), _split_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def split_phases_q(x, planes, hq, wq, sh, sw, ph, pw, fill):
    """planes[n, c, a*sw + b] = phase (a, b) of X[n, c] padded by (ph, pw) with `fill` (phases.py).

    Args:
        x: (N, C, H, W) uint8 or int8.
        planes: flat, same type, at least N*C*sh*sw*hq*wq elements, as (N, C, sh*sw, hq, wq); every
            element of those planes is written.
        hq, wq: the phase planes' size; sh, sw: strides; ph, pw: pads_begin; fill: the padding value
            (the input's zero point).
    """
    n_b, c_n, h, wd = x.shape
    f_n, pq = sh * sw, hq * wq
    v = planes.dtype.type(fill)
    for n in range(n_b):
        for c in range(c_n):
            for f in range(f_n):
                a, b = f // sw, f % sw
                i0, i1 = inside(h, ph, a, sh, hq)
                j0, j1 = inside(wd, pw, b, sw, wq)
                base = ((n * c_n + c) * f_n + f) * pq
                for i in range(hq):
                    r = base + i * wq
                    if i < i0 or i >= i1:
                        for j in range(wq):
                            planes[r + j] = v
                        continue
                    for j in range(j0):
                        planes[r + j] = v
                    for j in range(j1, wq):
                        planes[r + j] = v
                    ih = a + sh * i - ph
                    iw0 = b + sw * j0 - pw
                    if sw == 1:
                        for j in range(j1 - j0):
                            planes[r + j0 + j] = x[n, c, ih, iw0 + j]
                    else:
                        for j in range(j1 - j0):
                            planes[r + j0 + j] = x[n, c, ih, iw0 + sw * j]


def _dw_sig(xt, yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    return types.void(types.Array(xt, 1, "C", readonly=True), _i8, _i8, ri64, ri32, ri32, rf32, _i8,
                      types.Array(yt, 1, "C"), _i8, _i8, _i8, _i8, types.Array(types.int32, 1, "C"))


@njit([_dw_sig(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def depthwise_q(planes, x0, image, offs, wt, b, mult, zp, y, y0, oh, ow, wq, acc):
    """One image of a depthwise convolution in int32, requantized (module docstring).

    Args:
        planes, x0, image: channel c's phase planes start at planes[x0 + c * image].
        offs: (T,) tap t's offset from an output pixel's position in them (conv_indirect.indirect_layout
            with one channel).
        wt: (C * T,) int32 W' = W - w_zero_point, channel-major; b: (C,) int32 bias with the input's
            zero point folded in; mult: (C,) float32; zp: y_zero_point.
        y, y0: output channel c, row i, column j at y[y0 + (c * oh + i) * ow + j]; oh, ow: output size;
            wq: the planes' row pitch.
        acc: int32 workspace of oh * wq elements.
    """
    c_n = b.size
    t_n = offs.size
    p_n = oh * wq
    lo = -128.0 if signed(y) else 0.0
    hi = 127.0 if signed(y) else 255.0
    zpf = np.float32(zp)
    lo_f, hi_f = np.float32(lo) - zpf, np.float32(hi) - zpf
    for c in range(c_n):
        base = x0 + c * image
        bc = b[c]
        for p in range(p_n):
            acc[p] = bc
        for t in range(t_n):
            wv = wt[c * t_n + t]
            s = base + offs[t]
            for p in range(p_n):
                acc[p] += wv * np.int32(planes[s + p])
        m = mult[c]
        for i in range(oh):
            d = y0 + (c * oh + i) * ow
            r = i * wq
            for j in range(ow):
                f = np.float32(acc[r + j]) * m
                f = min(max(f, lo_f), hi_f)
                y[d + j] = np.int32(np.rint(f)) + zp
