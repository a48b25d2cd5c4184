"""Spatial kernels over NCHW8c arrays: the mean over the pixels, nearest-neighbour resampling.

pixel_mean (GlobalAveragePool, ReduceMean over H, W):

    y[r, l] = scale * sum_p x[r, p, l]    (x viewed as (rows, P, 8): rows = N * C/8)

summed in exactly the order of compiled/rowreduce.py's sum_rows over the NCHW
row of channel (r, l) -- blocks of 256 pixels, each as even and odd 8-pixel
vectors into two float32 accumulators per pixel offset, their lanes added
pairwise ((0+4)+(2+6))+((1+5)+(3+7)), the block sums, the last P % 8 values
and the scale in float64 -- eight channels at a time: the same bits as the
NCHW kernels, so choosing a layout never changes a result.

nearest (Resize mode "nearest" over H and W, the index tables of ops/cpu/resize.py):

    y[r, oh, ow, l] = x[r, ih[oh], iw[ow], l]    (rows = N * C/8): one vector copy per pixel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

_R1 = types.Array(types.float32, 1, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")


_D1 = types.Array(types.float64, 1, "C")


@njit(types.void(_R1, _F1, types.int64, types.int64, types.float64, _F1, _D1), nogil=True, cache=True,
      error_model="numpy")
def pixel_mean(x, out, rows, p_n, scale, acc, tot):
    """out[r*8 + l] = float32(scale * sum_p x[(r*p_n + p)*8 + l]), r < rows, l < 8, in sum_rows' order.

    acc: (128,) float32 workspace (the even and odd accumulators, 8 pixel offsets x 8 channels);
    tot: (8,) float64 workspace.
    """
    n8 = p_n // 8 * 8
    for r in range(rows):
        base = r * p_n * 8
        for lane in range(8):
            tot[lane] = 0.0
        for b0 in range(0, n8, 256):
            nvec = min(256, n8 - b0) // 8
            for q in range(128):
                acc[q] = 0.0
            for j in range(nvec // 2):
                e = base + (b0 + 16 * j) * 8  # vector 2j (8 pixels x 8 channels), then vector 2j + 1
                for q in range(64):
                    acc[q] += x[e + q]
                for q in range(64):
                    acc[64 + q] += x[e + 64 + q]
            if nvec & 1:
                e = base + (b0 + 8 * (nvec - 1)) * 8
                for q in range(64):
                    acc[q] += x[e + q]
            for lane in range(8):
                a0 = acc[lane] + acc[64 + lane]
                a1 = acc[8 + lane] + acc[72 + lane]
                a2 = acc[16 + lane] + acc[80 + lane]
                a3 = acc[24 + lane] + acc[88 + lane]
                a4 = acc[32 + lane] + acc[96 + lane]
                a5 = acc[40 + lane] + acc[104 + lane]
                a6 = acc[48 + lane] + acc[112 + lane]
                a7 = acc[56 + lane] + acc[120 + lane]
                tot[lane] += np.float64(((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)))
        for p in range(n8, p_n):
            for lane in range(8):
                tot[lane] += np.float64(x[base + p * 8 + lane])
        for lane in range(8):
            out[r * 8 + lane] = np.float32(tot[lane] * scale)


_I1 = types.Array(types.int64, 1, "C", readonly=True)


@njit(types.void(_R1, _F1, _I1, _I1, types.int64, types.int64, types.int64), nogil=True, cache=True,
      error_model="numpy")
def nearest(x, out, ih, iw, rows, h, w):
    """out (rows, OH, OW, 8) flat = x (rows, h, w, 8) flat at rows ih (OH,) and columns iw (OW,)."""
    oh_n, ow_n = ih.size, iw.size
    for r in range(rows):
        for oh in range(oh_n):
            src = (r * h + ih[oh]) * w * 8
            dst = (r * oh_n + oh) * ow_n * 8
            for ow in range(ow_n):
                s = src + iw[ow] * 8
                d = dst + ow * 8
                for lane in range(8):
                    out[d + lane] = x[s + lane]
