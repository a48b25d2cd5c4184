"""Depthwise 2-D convolution with bias and activation fused (float32, NCHW).

Y[n, m, oh, ow] = act(B[m] + sum_{kh, kw} W[m, 0, kh, kw] * Xpad[n, m // mult, oh*sh + kh*dh, ow*sw + kw*dw])

(ONNX Conv with group == C, M = C * mult; Xpad is X zero-padded by pads_begin.)

Per input channel, the zero-padded plane is split into its sh x sw stride phases
(phase (a, b) holds Xpad[a + sh*i, b + sw*j]) in per-Net scratch, each phase a
Hq x Wq plane flattened with row pitch Wq. Tap (kh, kw) then reads, for output
(oh, ow), phase (kh*dh % sh, kw*dw % sw) at (oh + kh*dh // sh, ow + kw*dw // sw):
over a band of output rows taken as one flat run of pitch Wq (the Wq - OW
columns past each row's end are computed and dropped), every tap is one
unit-stride run at a fixed offset, whatever the stride, dilation or padding.
The inner loops are acc[i] += w * phase[off + i] over a band of about BAND
floats (in L1), 4 taps a pass (3x3: all 9 written out in one pass), with no
branches and unsigned indices (no wraparound checks): they vectorize (AVX2:
8 floats an instruction). Rows of at least ROW_MIN outputs are written to Y
by the last pass, row by row; shorter ones go through the accumulator and are
cropped after. The phase split costs one (for stride 2, de-interleaving) copy
of X per channel; the border zeros are written once per call. B and the
activation (epilogue.py's activate_range: codes.RANGE_CODES) are applied to the band's rows while they
are in cache.

Measured (one thread, AMD EPYC, benchmarks/depthwise_kernels.py), time over
onnxruntime's: MobileNetV2's 3x3 layers on 112x112 to 28x28 inputs 0.55x..1.1x
(stride 2 on 28x28: 1.5x), PP-OCR det's 5x5 ones 0.9x..1.2x, its 3x3 0.6x; all
17 of MobileNetV2's 1.1x. On 14x14 and 7x7 planes the fixed costs per channel
and per short row dominate: 1.5x..3.5x (onnxruntime vectorizes across channels
there, NCHWc; an 8-channel version here, with the transposes to and from it,
measured only 25% faster on 7x7 and slower on 14x14).

Rounding: every path sums the taps in float32 in (kh, kw) order, one rounding
per multiply and per add (no FMA contraction), then adds B, as the unfused
Conv + Add would (so folding an Add into B changes no bits when the Conv had no
bias); the paths (3x3 written out, passes of 4, flat or row by row) give the
same bits. The error is that of a sequential float32 sum of KH*KW products:
at most about KH*KW * 2^-24 * sum|W * X| (Higham, Accuracy and Stability of
Numerical Algorithms, 2nd ed., 4.2). PP-OCR det's fused-vs-unfused (1e-5) and
float64-closeness tests hold with it (det 640x480: 9.3e-6 all vs none).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .epilogue import ZERO, activate_range
from .jit import njit
from .phases import inside as _inside
from .phases import split_rows as _split

_f4, _i8, _u8 = types.float32, types.int64, types.uint64
_F1 = types.Array(_f4, 1, "C")
_R2, _R1 = (types.Array(_f4, d, "C", readonly=True) for d in (2, 1))
_I1 = types.Array(_i8, 1, "C", readonly=True)
# x read-only (a writable array converts; a folded constant is read-only); w, b, the tap offsets shared, read-only
_W4, _R4 = types.Array(_f4, 4, "C"), types.Array(_f4, 4, "C", readonly=True)
SIGNATURE = types.void(_R4, _R2, _R1, _W4, _F1, _F1, _I1, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _f4, _f4)

# Output floats per band (the accumulator): 8 KiB, in L1 with the rows it reads.
BAND = 2048
# Output rows at least this long are written straight from the last pass (shorter: through the accumulator).
ROW_MIN = 32


@njit(_i8(_i8, _i8), nogil=True, cache=True, error_model="numpy")
def band_rows(oh, wq):
    """Output rows per band: BAND floats of accumulator at most (one row at least)."""
    return min(oh, max(1, BAND // wq))


def geometry(out_hw, kernel, strides, dilations):
    """(Hq, Wq): the phase planes' size, and the taps' offsets into the phase buffer.

    Args:
        out_hw, kernel, strides, dilations: (rows, columns) each.
    Returns:
        ((Hq, Wq), offsets): offsets (KH*KW,) int64 in (kh, kw) order: phase
        index * Hq*Wq + (kh*dh // sh) * Wq + kw*dw // sw.
    """
    (oh, ow), (kh, kw), (sh, sw), (dh, dw) = out_hw, kernel, strides, dilations
    hq = oh + (kh - 1) * dh // sh
    wq = ow + (kw - 1) * dw // sw
    offs = np.empty(kh * kw, np.int64)
    for i in range(kh):
        for j in range(kw):
            phase = (i * dh % sh) * sw + j * dw % sw
            offs[i * kw + j] = phase * hq * wq + (i * dh // sh) * wq + j * dw // sw
    return (hq, wq), offs


@njit(types.void(_F1, _F1, _R1, _i8, _I1, _i8, _u8, _u8, types.boolean), nogil=True, cache=True,
      error_model="numpy")
def _add1(acc, buf, wm, wb, offs, t, base, n, first):
    """acc[i] (= when first, else +=) wm[wb + t] * buf[base + offs[t] + i], i < n: one tap."""
    w0, x0 = wm[wb + t], base + np.uint64(offs[t])
    if first:
        for i in range(n):
            acc[i] = w0 * buf[x0 + i]
    else:
        for i in range(n):
            acc[i] = acc[i] + w0 * buf[x0 + i]


@njit(types.void(_F1, _F1, _R1, _i8, _I1, _i8, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def _add4(acc, buf, wm, wb, offs, t0, base, n):
    """acc[i] += wm[wb + t] * buf[base + offs[t] + i] for the taps t0 .. t0 + 3 in turn, i < n."""
    w0, x0 = wm[wb + t0], base + np.uint64(offs[t0])
    w1, x1 = wm[wb + t0 + 1], base + np.uint64(offs[t0 + 1])
    w2, x2 = wm[wb + t0 + 2], base + np.uint64(offs[t0 + 2])
    w3, x3 = wm[wb + t0 + 3], base + np.uint64(offs[t0 + 3])
    for i in range(n):
        acc[i] = acc[i] + w0 * buf[x0 + i] + w1 * buf[x1 + i] + w2 * buf[x2 + i] + w3 * buf[x3 + i]


@njit(types.void(_F1, _F1, _F1, _R1, _i8, _I1, _i8, _u8, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True,
      error_model="numpy")
def _last4(of, acc, buf, wm, wb, offs, t0, base, rows, ow_n, wq, o0, bias):
    """of[o0 + r*ow_n + j] = acc[i] + (the taps t0 .. t0 + 3 in turn at buf[base + offs[t] + i]) + bias,
    i = r*wq + j, for r < rows, j < ow_n: the last pass, row by row, drops the columns past each row's end."""
    w0, w1, w2, w3 = wm[wb + t0], wm[wb + t0 + 1], wm[wb + t0 + 2], wm[wb + t0 + 3]
    for r in range(rows):
        d, a = o0 + r * ow_n, r * wq
        x0, x1 = base + a + np.uint64(offs[t0]), base + a + np.uint64(offs[t0 + 1])
        x2, x3 = base + a + np.uint64(offs[t0 + 2]), base + a + np.uint64(offs[t0 + 3])
        for j in range(ow_n):
            of[d + j] = (acc[a + j] + w0 * buf[x0 + j] + w1 * buf[x1 + j] + w2 * buf[x2 + j]
                         + w3 * buf[x3 + j]) + bias


@njit(types.void(_F1, _F1, _R1, _i8, _I1, _u8, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True, error_model="numpy")
def _taps9(of, buf, wm, wb, offs, base, rows, ow_n, wq, o0, bias):
    """of[o0 + r*ow_n + j] = (the 9 taps in turn at buf[base + offs[t] + r*wq + j]) + bias (3x3, written out)."""
    w0, w1, w2, w3, w4 = wm[wb + 0], wm[wb + 1], wm[wb + 2], wm[wb + 3], wm[wb + 4]
    w5, w6, w7, w8 = wm[wb + 5], wm[wb + 6], wm[wb + 7], wm[wb + 8]
    for r in range(rows):
        d, a = o0 + r * ow_n, base + r * wq
        x0, x1, x2 = a + np.uint64(offs[0]), a + np.uint64(offs[1]), a + np.uint64(offs[2])
        x3, x4, x5 = a + np.uint64(offs[3]), a + np.uint64(offs[4]), a + np.uint64(offs[5])
        x6, x7, x8 = a + np.uint64(offs[6]), a + np.uint64(offs[7]), a + np.uint64(offs[8])
        for j in range(ow_n):
            of[d + j] = (w0 * buf[x0 + j] + w1 * buf[x1 + j] + w2 * buf[x2 + j] + w3 * buf[x3 + j]
                         + w4 * buf[x4 + j] + w5 * buf[x5 + j] + w6 * buf[x6 + j] + w7 * buf[x7 + j]
                         + w8 * buf[x8 + j]) + bias


@njit(types.void(_F1, _F1, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True, error_model="numpy")
def _crop(of, acc, o0, rows, ow_n, wq, bias):
    """of[o0 + r*ow_n + j] = acc[r*wq + j] + bias, r < rows, j < ow_n: the band's rows without their tails."""
    for r in range(rows):
        d, a = o0 + r * ow_n, r * wq
        for j in range(ow_n):
            of[d + j] = acc[a + j] + bias


@njit(SIGNATURE, nogil=True, cache=True, error_model="numpy")
def depthwise_conv2d(x, w, b, out, buf, acc, offs, hq, wq, sh, sw, ph, pw, mult, act, p0, p1):
    """out = act(depthwise_conv(x, w) + b).

    Args:
        x: (N, C, H, W) float32; w: (M, KH*KW), M = C * mult; b: (M,) (zeros
            when the node has no bias); out: (N, M, OH, OW).
        buf: (>= sh*sw*hq*wq,) scratch, the phase planes; acc: (>= rows*wq,)
            scratch, rows = band_rows(OH, wq).
        offs, hq, wq: the taps' offsets and the phase planes' size (geometry()).
        sh, sw / ph, pw: strides, pads_begin (rows, columns).
        mult: output channels per input channel.
        act, p0, p1: activation code and parameters (epilogue.py).
    """
    n_batch, c_n, h, wd = x.shape
    m_n, oh_n, ow_n = out.shape[1], out.shape[2], out.shape[3]
    u = np.uint64
    pq = hq * wq
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    wf = w.reshape(w.size)
    t_n = offs.shape[0]
    rows = band_rows(oh_n, wq)
    # rows of ROW_MIN outputs or more: written by the last pass (3x3: the only one); shorter: through acc
    direct = ow_n >= ROW_MIN and (t_n == 9 or t_n > 4)
    t_last = t_n - 4 if direct and t_n != 9 else t_n  # taps [t_last, t_n): the last pass, row by row
    # the padding: the phase planes' rows and columns no input reaches, zeroed once per call
    for p in range(sh * sw):
        i0, i1 = _inside(h, ph, p // sw, sh, hq)
        j0, j1 = _inside(wd, pw, p % sw, sw, wq)
        for i in range(hq):
            r = p * pq + i * wq
            for j in range(wq):
                if i < i0 or i >= i1 or j < j0 or j >= j1:
                    buf[r + j] = ZERO
    for n in range(n_batch):
        for c in range(c_n):
            for a in range(sh):
                i0, i1 = _inside(h, ph, a, sh, hq)
                _split(buf, xf, u((n * c_n + c) * h * wd), u(wd), u(a * sw * pq), u(pq), u(i0), u(i1),
                       u(a + sh * i0 - ph), u(sh), u(sw), u(pw), u(wq))
            for m in range(c * mult, c * mult + mult):
                wb, bias = m * t_n, b[m]
                for r0 in range(0, oh_n, rows):
                    # the band of output rows r0:r0 + nr: the taps in (kh, kw) order, + B, the activation.
                    # (Here, not in a function of its own: numba counts references to the arrays a
                    # function passes on, atomic operations at every call, a third of small planes' time.)
                    nr = u(min(oh_n - r0, rows))
                    base, o0 = u(r0 * wq), u(((n * m_n + m) * oh_n + r0) * ow_n)
                    n_flat = (nr - u(1)) * u(wq) + u(ow_n)
                    if t_n == 9 and direct:
                        _taps9(of, buf, wf, wb, offs, base, nr, u(ow_n), u(wq), o0, bias)
                    elif t_n == 9:  # the flat run as one row
                        _taps9(acc, buf, wf, wb, offs, base, u(1), n_flat, u(wq), u(0), ZERO)
                    else:
                        _add1(acc, buf, wf, wb, offs, 0, base, n_flat, True)  # then passes of 4
                        t = 1
                        while t + 4 <= t_last:
                            _add4(acc, buf, wf, wb, offs, t, base, n_flat)
                            t += 4
                        while t < t_last:
                            _add1(acc, buf, wf, wb, offs, t, base, n_flat, False)
                            t += 1
                        if direct:
                            _last4(of, acc, buf, wf, wb, offs, t_last, base, nr, u(ow_n), u(wq), o0, bias)
                    if not direct:
                        _crop(of, acc, o0, nr, u(ow_n), u(wq), bias)
                    activate_range(of, o0, nr * u(ow_n), act, p0, p1)

