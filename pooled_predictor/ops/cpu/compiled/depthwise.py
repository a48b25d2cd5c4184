"""Depthwise 2-D convolution with bias and activation fused (float32, NCHW).

Y[n, m, oh, ow] = act(B[m] + sum_{kh, kw} W[m, 0, kh, kw] * Xpad[n, m // mult, oh*sh + kh*dh, ow*sw + kw*dw])

(ONNX Conv with group == C, M = C * mult; Xpad zero-padded by pads_begin).
One output row at a time: the row starts as B[m] in a row accumulator (per-Net
scratch, OW floats, in L1), each tap adds W * (a run of one input row) over
the output columns whose input column is inside X, B is added last (as the
numpy path's GEMV + B, so that folding an Add into B moves few bits) -- padding is never
materialized, no column matrix is built -- and the activation (epilogue.py)
is applied while the row is written out. Stride 1 runs are unit-stride and
vectorize; stride 2 reads every other element. Any kernel size, stride,
dilation and padding.

The 3x3 loop and the border outputs accumulate the taps in float64 and round
once: each output is then within about 1 ulp of the exact sum, whatever the
order (float32 accumulation in a fixed order differs from the numpy path's
BLAS order by a few ulp, which the PP-OCR detector amplifies to ~1e-5 of its
output between its fused and unfused graphs, the bound its tests hold).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .epilogue import ZERO, activate, activate_range

_f4, _i8 = types.float32, types.int64
_W4 = types.Array(_f4, 4, "C")
_R4, _R1 = types.Array(_f4, 4, "C", readonly=True), types.Array(_f4, 1, "C", readonly=True)
# x may be a graph input or an arena view (writable); w and b are shared weights (read-only)
SIGNATURE = types.void(_W4, _R4, _R1, _W4, types.Array(_f4, 1, "C"), _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8,
                       _f4, _f4)


@njit(types.void(types.Array(_f4, 1, "C"), types.Array(_f4, 1, "C"), _f4, _i8, _i8, _i8),
      nogil=True, cache=True, error_model="numpy")
def _axpy(acc, row, wv, lo, hi, off):
    """acc[lo:hi] += wv * row[lo + off:hi + off] (unit stride: vectorizes)."""
    a = acc[lo:hi]
    r = row[lo + off:hi + off]
    for i in range(hi - lo):
        a[i] += wv * r[i]


@njit(types.void(types.Array(_f4, 1, "C"), types.Array(_f4, 2, "C"), types.Array(_f4, 2, "C", readonly=True),
                 _f4, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _row_any(acc, plane, wm, bias, oh, sh, sw, dh, dw, ph, pw, ow_n):
    """acc[0:ow_n] = (every tap inside the plane) + bias (any kernel size; padding skipped)."""
    h, wd = plane.shape
    kh_n, kw_n = wm.shape
    for ow in range(ow_n):
        acc[ow] = ZERO
    for kh in range(kh_n):
        ih = oh * sh - ph + kh * dh
        if ih < 0 or ih >= h:
            continue
        row = plane[ih]
        for kw in range(kw_n):
            wv = wm[kh, kw]
            off = kw * dw - pw  # input column = ow * sw + off
            lo = 0 if off >= 0 else (-off + sw - 1) // sw
            hi = (wd - 1 - off) // sw + 1 if wd - 1 - off >= 0 else 0
            if hi > ow_n:
                hi = ow_n
            if hi <= lo:
                continue
            if sw == 1:
                _axpy(acc, row, wv, lo, hi, off)
            else:
                o = acc[lo:hi]
                r = row[lo * sw + off:(hi - 1) * sw + off + 1:sw]
                for i in range(hi - lo):
                    o[i] += wv * r[i]
    for ow in range(ow_n):
        acc[ow] += bias


@njit(_f4(types.Array(_f4, 2, "C"), types.Array(_f4, 2, "C", readonly=True), _f4, _i8, _i8, _i8, _i8),
      nogil=True, cache=True, error_model="numpy")
def _point(plane, wm, bias, ih0, iw0, dh, dw):
    """(the taps of one output whose window starts at (ih0, iw0), skipping those in the padding) + bias."""
    h, wd = plane.shape
    s = 0.0  # float64 accumulation, as _rows_3x3
    for kh in range(wm.shape[0]):
        ih = ih0 + kh * dh
        if ih < 0 or ih >= h:
            continue
        for kw in range(wm.shape[1]):
            iw = iw0 + kw * dw
            if 0 <= iw < wd:
                s += np.float64(wm[kh, kw]) * plane[ih, iw]
    return np.float32(s) + bias


@njit(types.void(types.Array(_f4, 1, "C"), types.Array(_f4, 1, "C"), types.Array(_f4, 2, "C", readonly=True),
                 _f4, types.uint64, types.uint64, types.uint64, types.uint64, types.uint64, types.uint64, _i8,
                 _f4, _f4), nogil=True, cache=True, error_model="numpy")
def _rows_3x3(o, xf, wm, bias, obase, xbase, n, sw, dw, row, act, p0, p1):
    """o[obase + i] = act(bias + 3x3 taps at xf[xbase + i*sw + kh*row + kw*dw]) for i < n.

    Indices are unsigned: numba then skips its negative-index wraparound and
    the loop vectorizes (unit-stride loads when sw == 1).
    """
    f8 = np.float64
    w00, w01, w02 = f8(wm[0, 0]), f8(wm[0, 1]), f8(wm[0, 2])
    w10, w11, w12 = f8(wm[1, 0]), f8(wm[1, 1]), f8(wm[1, 2])
    w20, w21, w22 = f8(wm[2, 0]), f8(wm[2, 1]), f8(wm[2, 2])
    d2 = dw + dw
    r2 = row + row
    if sw == 1 and dw == 1:  # the common case: constant tap offsets, a loop that vectorizes
        one, two = np.uint64(1), np.uint64(2)
        for i in range(n):
            j = xbase + i
            k = j + row
            m = j + r2
            o[obase + i] = _f4((w00 * xf[j] + w01 * xf[j + one] + w02 * xf[j + two]
                                + w10 * xf[k] + w11 * xf[k + one] + w12 * xf[k + two]
                                + w20 * xf[m] + w21 * xf[m + one] + w22 * xf[m + two])) + bias
    else:
        for i in range(n):
            j = xbase + i * sw
            o[obase + i] = _f4((w00 * xf[j] + w01 * xf[j + dw] + w02 * xf[j + d2]
                                + w10 * xf[j + row] + w11 * xf[j + row + dw] + w12 * xf[j + row + d2]
                                + w20 * xf[j + r2] + w21 * xf[j + r2 + dw] + w22 * xf[j + r2 + d2])) + bias
    activate_range(o, obase, n, act, p0, p1)


@njit(SIGNATURE, nogil=True, cache=True, error_model="numpy")
def depthwise_conv2d(x, w, b, out, acc, sh, sw, dh, dw, ph, pw, mult, act, p0, p1):
    """out = act(depthwise_conv(x, w) + b).

    Args:
        x: (N, C, H, W) float32; w: (M, 1, KH, KW), M = C * mult; b: (M,) (zeros
            when the node has no bias); out: (N, M, OH, OW); acc: (>= OW,) scratch.
        sh, sw / dh, dw / ph, pw: strides, dilations, pads_begin (rows, columns).
        act, p0, p1: activation code and parameters (epilogue.py).
    """
    n_batch, _, h, wd = x.shape
    m_out, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    kh_n, kw_n = w.shape[2], w.shape[3]
    # interior: outputs whose taps are all inside X (columns lo:hi, rows r_lo:r_hi)
    lo = min((pw + sw - 1) // sw, ow_n)
    span = wd - 1 + pw - (kw_n - 1) * dw
    hi = max(lo, min(ow_n, span // sw + 1 if span >= 0 else 0))
    r_lo = min((ph + sh - 1) // sh, oh_n)
    span = h - 1 + ph - (kh_n - 1) * dh
    r_hi = max(r_lo, min(oh_n, span // sh + 1 if span >= 0 else 0))
    fast = kh_n == 3 and kw_n == 3
    usw, udw, urow = np.uint64(sw), np.uint64(dw), np.uint64(dh * wd)
    for n in range(n_batch):
        for m in range(m_out):
            plane = x[n, m // mult]
            wm = w[m, 0]
            bias = b[m]
            xf = plane.ravel()
            of = out[n, m].ravel()
            for oh in range(oh_n):
                ih0 = oh * sh - ph
                interior = r_lo <= oh < r_hi and hi > lo
                if interior and fast:
                    _rows_3x3(of, xf, wm, bias, np.uint64(oh * ow_n + lo), np.uint64(ih0 * wd + lo * sw - pw),
                              np.uint64(hi - lo), usw, udw, urow, act, p0, p1)
                    for ow in range(lo):
                        of[oh * ow_n + ow] = activate(_point(plane, wm, bias, ih0, ow * sw - pw, dh, dw), act, p0, p1)
                    for ow in range(hi, ow_n):
                        of[oh * ow_n + ow] = activate(_point(plane, wm, bias, ih0, ow * sw - pw, dh, dw), act, p0, p1)
                    continue
                if interior:
                    _row_any(acc, plane, wm, bias, oh, sh, sw, dh, dw, ph, pw, ow_n)
                    for ow in range(lo):
                        acc[ow] = _point(plane, wm, bias, ih0, ow * sw - pw, dh, dw)
                    for ow in range(hi, ow_n):
                        acc[ow] = _point(plane, wm, bias, ih0, ow * sw - pw, dh, dw)
                else:  # a row with taps in the padding: every output checked
                    for ow in range(ow_n):
                        acc[ow] = _point(plane, wm, bias, ih0, ow * sw - pw, dh, dw)
                orow = out[n, m, oh]
                for ow in range(ow_n):
                    orow[ow] = acc[ow]
                activate_range(of, np.uint64(oh * ow_n), np.uint64(ow_n), act, p0, p1)
