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
BAND = 2048  # int32 accumulators per pass of the depthwise taps (8 KiB, in L1)
DW_BLOCK = 64  # the 3x3 pass computes the extended output in whole blocks of this many pixels


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
    xf = x.reshape(x.size)
    u = np.uint64
    for nc in range(n_b * c_n):
        for f in range(f_n):
            a, b = f // sw, f % sw
            i0, i1 = inside(h, ph, a, sh, hq)
            j0, j1 = inside(wd, pw, b, sw, wq)
            base = (nc * f_n + f) * pq
            for i in range(hq):
                r = u(base + i * wq)
                if i < i0 or i >= i1:
                    for j in range(u(wq)):
                        planes[r + j] = v
                    continue
                for j in range(u(j0)):
                    planes[r + j] = v
                for j in range(u(j1), u(wq)):
                    planes[r + j] = v
                src = u(nc * h * wd + (a + sh * i - ph) * wd + b + sw * j0 - pw)
                d = r + u(j0)
                if sw == 1:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + j]
                elif sw == 2:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + j + j]
                else:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + u(sw) * j]


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
        acc: int32 workspace of min(oh * wq, BAND + wq) elements at least; with a 3x3 kernel, of
            oh * wq + DW_BLOCK (its pass over the whole extended image stores oh * wq, rounded up to
            whole DW_BLOCKs, 8-bit values in acc's bytes; its reads reach up to DW_BLOCK elements further
            past the planes' last pixel than the taps do).
    """
    c_n = b.size
    t_n = offs.size
    u = np.uint64
    lo = -128.0 if signed(y) else 0.0
    hi = 127.0 if signed(y) else 255.0
    zpf = np.float32(zp)
    lo_f, hi_f = np.float32(lo) - zpf, np.float32(hi) - zpf
    if t_n == 9 and oh * wq + DW_BLOCK <= acc.size:  # 3x3: the 9 taps and the requantization in one pass
        # over the channel's extended output rows (pitch wq, flat: vectorized whatever OW, 7 or 112),
        # stored as 8-bit in acc's bytes, then the rows' first OW pixels copied out
        ext = acc.view(np.uint8).view(y.dtype)
        n = u((oh * wq + DW_BLOCK - 1) // DW_BLOCK * DW_BLOCK)  # whole blocks: no scalar remainder loop
        for c in range(c_n):
            base = u(x0 + c * image)
            bc = b[c]
            m = mult[c]
            k = c * 9
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wt[k], wt[k + 1], wt[k + 2], wt[k + 3], wt[k + 4], wt[k + 5],
                                                  wt[k + 6], wt[k + 7], wt[k + 8])
            o0, o1, o2, o3, o4, o5, o6, o7, o8 = (base + u(offs[0]), base + u(offs[1]), base + u(offs[2]),
                                                  base + u(offs[3]), base + u(offs[4]), base + u(offs[5]),
                                                  base + u(offs[6]), base + u(offs[7]), base + u(offs[8]))
            for i in range(n):
                a = (bc + w0 * np.int32(planes[o0 + i]) + w1 * np.int32(planes[o1 + i])
                     + w2 * np.int32(planes[o2 + i]) + w3 * np.int32(planes[o3 + i])
                     + w4 * np.int32(planes[o4 + i]) + w5 * np.int32(planes[o5 + i])
                     + w6 * np.int32(planes[o6 + i]) + w7 * np.int32(planes[o7 + i])
                     + w8 * np.int32(planes[o8 + i]))
                f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)  # the int32 sum (its wider typing dropped)
                ext[i] = np.int32(np.rint(f)) + zp
            d0 = u(y0 + c * oh * ow)
            for r in range(u(oh)):
                for j in range(u(ow)):
                    y[d0 + r * u(ow) + j] = ext[r * u(wq) + j]
        return
    band = min(oh, max(1, BAND // wq))  # output rows per pass: the accumulator stays in L1
    for c in range(c_n):
        base = u(x0 + c * image)
        bc = b[c]
        m = mult[c]
        for r0 in range(0, oh, band):
            rows = min(band, oh - r0)
            n = u(rows * wq)
            for i in range(n):
                acc[i] = bc
            for t in range(t_n):
                wv = wt[c * t_n + t]
                s = base + u(offs[t] + r0 * wq)
                for i in range(n):
                    acc[i] += wv * np.int32(planes[s + i])
            for r in range(rows):
                d = u(y0 + (c * oh + r0 + r) * ow)
                a = u(r * wq)
                for j in range(u(ow)):
                    f = min(max(np.float32(acc[a + j]) * m, lo_f), hi_f)
                    y[d + j] = np.int32(np.rint(f)) + zp

