"""Depthwise 2-D convolution with bias and activation fused (float32, NCHW).

Y[n, m, oh, ow] = act(B[m] + sum_{kh, kw} W[m, 0, kh, kw] * Xpad[n, m // mult, oh*sh + kh*dh, ow*sw + kw*dw])

(ONNX Conv with group == C, M = C * mult; Xpad is X zero-padded by pads_begin.)

Per input channel, the zero-padded plane is split into its sh x sw stride phases
(phase (a, b) holds Xpad[a + sh*i, b + sw*j]) in per-Net scratch, each phase a
Hq x Wq plane flattened with row pitch Wq. Tap (kh, kw) then reads, for output
(oh, ow), phase (kh*dh % sh, kw*dw % sw) at (oh + kh*dh // sh, ow + kw*dw // sw):
over a band of output rows taken as one flat run of pitch Wq (the Wq - OW
columns past each row's end are computed and dropped), every tap is one
unit-stride run at a fixed offset, whatever the stride, dilation or padding. So
the inner loop is acc[i] += w * phase[off + i] over a few thousand floats held
in L1, a few taps per pass, with no branches: it vectorizes (8 floats per AVX2
instruction). The phase split costs one strided copy of X per channel; the
border zeros are written once per call. After the taps the band's rows get B
and the activation (epilogue.py) while they are in cache, on their way to Y.

Rounding: the taps are summed in float32, in the kernel's (kh, kw) order, one
rounding per multiply and per add (no FMA contraction), and B is added last,
as the unfused Conv + Add would (so folding an Add into B changes no bits when
the Conv had no bias). The error is that of a sequential float32 sum of KH*KW
products, at most (KH*KW - 1) * 2^-24 * sum|W * X| (Higham, Accuracy and
Stability of Numerical Algorithms, 4.2), the order of onnxruntime's own.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .epilogue import ZERO, activate_range

_f4, _i8, _u8 = types.float32, types.int64, types.uint64
_F1 = types.Array(_f4, 1, "C")
_R2, _R1 = (types.Array(_f4, d, "C", readonly=True) for d in (2, 1))
_I1 = types.Array(_i8, 1, "C", readonly=True)
# x may be a graph input or an arena view (writable); w, b and the tap offsets are shared, read-only
_W4 = types.Array(_f4, 4, "C")
SIGNATURE = types.void(_W4, _R2, _R1, _W4, _F1, _F1, _I1, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _f4, _f4)

# Output floats per band (the accumulator): 8 KiB, in L1 with the rows it reads.
BAND = 2048
# Output rows at least this long are written straight from the last pass (shorter: through the accumulator).
ROW_MIN = 16


@njit(_i8(_i8, _i8), nogil=True, cache=True, error_model="numpy")
def band_rows(oh, wq):
    """Output rows per band: BAND floats of accumulator at most (one row at least)."""
    return min(oh, max(1, BAND // wq))


def geometry(in_hw, out_hw, kernel, strides, dilations):
    """(Hq, Wq): the phase planes' size, and the taps' offsets into the phase buffer.

    Args:
        in_hw, out_hw, kernel, strides, dilations: (rows, columns) each.
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


@njit(types.void(_F1, _F1, _R1, _I1, _i8, _i8, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def _first(acc, buf, wm, offs, t0, t1, base, n):
    """acc[i] = sum_{t0 <= t < t1} wm[t] * buf[base + offs[t] + i] for i < n, left to right (1 to 4 taps)."""
    k = t1 - t0
    w0 = wm[t0]
    x0 = base + np.uint64(offs[t0])
    if k == 1:
        for i in range(n):
            acc[i] = w0 * buf[x0 + i]
    elif k == 2:
        w1, x1 = wm[t0 + 1], base + np.uint64(offs[t0 + 1])
        for i in range(n):
            acc[i] = w0 * buf[x0 + i] + w1 * buf[x1 + i]
    elif k == 3:
        w1, x1 = wm[t0 + 1], base + np.uint64(offs[t0 + 1])
        w2, x2 = wm[t0 + 2], base + np.uint64(offs[t0 + 2])
        for i in range(n):
            acc[i] = w0 * buf[x0 + i] + w1 * buf[x1 + i] + w2 * buf[x2 + i]
    else:
        w1, x1 = wm[t0 + 1], base + np.uint64(offs[t0 + 1])
        w2, x2 = wm[t0 + 2], base + np.uint64(offs[t0 + 2])
        w3, x3 = wm[t0 + 3], base + np.uint64(offs[t0 + 3])
        for i in range(n):
            acc[i] = w0 * buf[x0 + i] + w1 * buf[x1 + i] + w2 * buf[x2 + i] + w3 * buf[x3 + i]


@njit(types.void(_F1, _F1, _R1, _I1, _i8, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def _add4(acc, buf, wm, offs, t0, base, n):
    """acc[i] += wm[t] * buf[base + offs[t] + i] for the taps t0 .. t0 + 3 in turn, i < n."""
    w0, x0 = wm[t0], base + np.uint64(offs[t0])
    w1, x1 = wm[t0 + 1], base + np.uint64(offs[t0 + 1])
    w2, x2 = wm[t0 + 2], base + np.uint64(offs[t0 + 2])
    w3, x3 = wm[t0 + 3], base + np.uint64(offs[t0 + 3])
    for i in range(n):
        acc[i] = acc[i] + w0 * buf[x0 + i] + w1 * buf[x1 + i] + w2 * buf[x2 + i] + w3 * buf[x3 + i]


@njit(types.void(_F1, _F1, _F1, _R1, _I1, _i8, _u8, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True,
      error_model="numpy")
def _last4(of, acc, buf, wm, offs, t0, base, rows, ow_n, wq, o0, bias):
    """of[o0 + r*ow_n + j] = acc[i] + (the taps t0 .. t0 + 3 in turn at buf[base + offs[t] + i]) + bias,
    i = r*wq + j, for r < rows, j < ow_n: the last pass, row by row, drops the columns past each row's end."""
    w0, w1, w2, w3 = wm[t0], wm[t0 + 1], wm[t0 + 2], wm[t0 + 3]
    for r in range(rows):
        d, a = o0 + r * ow_n, r * wq
        x0, x1 = base + a + np.uint64(offs[t0]), base + a + np.uint64(offs[t0 + 1])
        x2, x3 = base + a + np.uint64(offs[t0 + 2]), base + a + np.uint64(offs[t0 + 3])
        for j in range(ow_n):
            of[d + j] = (acc[a + j] + w0 * buf[x0 + j] + w1 * buf[x1 + j] + w2 * buf[x2 + j]
                         + w3 * buf[x3 + j]) + bias


@njit(types.void(_F1, _F1, _R1, _I1, _u8, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True, error_model="numpy")
def _taps9(of, buf, wm, offs, base, rows, ow_n, wq, o0, bias):
    """of[o0 + r*ow_n + j] = (the 9 taps in turn at buf[base + offs[t] + r*wq + j]) + bias (3x3, written out)."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = wm[0], wm[1], wm[2], wm[3], wm[4], wm[5], wm[6], wm[7], wm[8]
    for r in range(rows):
        d, a = o0 + r * ow_n, base + r * wq
        x0, x1, x2 = a + np.uint64(offs[0]), a + np.uint64(offs[1]), a + np.uint64(offs[2])
        x3, x4, x5 = a + np.uint64(offs[3]), a + np.uint64(offs[4]), a + np.uint64(offs[5])
        x6, x7, x8 = a + np.uint64(offs[6]), a + np.uint64(offs[7]), a + np.uint64(offs[8])
        for j in range(ow_n):
            of[d + j] = (w0 * buf[x0 + j] + w1 * buf[x1 + j] + w2 * buf[x2 + j] + w3 * buf[x3 + j]
                         + w4 * buf[x4 + j] + w5 * buf[x5 + j] + w6 * buf[x6 + j] + w7 * buf[x7 + j]
                         + w8 * buf[x8 + j]) + bias


@njit(types.void(_F1, _F1, _F1, _R1, _I1, _u8, _u8, _u8, _u8, _u8, _f4), nogil=True, cache=True,
      error_model="numpy")
def _band(of, acc, buf, wm, offs, base, rows, ow_n, wq, o0, bias):
    """of[o0 + r*ow_n + j] = (sum_t wm[t] * buf[base + offs[t] + r*wq + j], in tap order) + bias, r < rows, j < ow_n.

    Rows of at least ROW_MIN outputs are written straight from the last pass;
    shorter ones come out of the accumulator, every pass running over the
    band's flat run (long loops, vectorized) and the crop after.
    """
    one = np.uint64(1)
    t_n = offs.shape[0]
    direct = ow_n >= ROW_MIN
    if t_n == 9 and direct:
        _taps9(of, buf, wm, offs, base, rows, ow_n, wq, o0, bias)
        return
    n = (rows - one) * wq + ow_n
    if t_n == 9:  # the flat run as one row
        _taps9(acc, buf, wm, offs, base, one, n, wq, np.uint64(0), ZERO)
    else:
        direct = direct and t_n > 4
        t2 = t_n - 4 if direct else t_n  # taps [t2, t_n): the last pass, row by row
        t1 = t2 - 4 * ((t2 - 1) // 4)  # [0, t1): the first pass; [t1, t2): passes of 4
        _first(acc, buf, wm, offs, 0, t1, base, n)
        for t in range(t1, t2, 4):
            _add4(acc, buf, wm, offs, t, base, n)
        if direct:
            _last4(of, acc, buf, wm, offs, t2, base, rows, ow_n, wq, o0, bias)
            return
    for r in range(rows):  # crop, + B
        d, a = o0 + r * ow_n, r * wq
        for j in range(ow_n):
            of[d + j] = acc[a + j] + bias


@njit(types.void(_F1, _F1, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8), nogil=True, cache=True,
      error_model="numpy")
def _split(buf, xf, s0, wd, d0, pq, i0, i1, ih0, sh, sw, pw, wq):
    """Input rows ih0 + sh*k (k < i1 - i0) of the plane at xf[s0:] into rows i0 + k of one row phase's
    column phases (buf[d0 + phase*pq:]): X[., iw] goes to column phase (iw + pw) % sw, column
    (iw + pw) // sw where that is < wq. Unsigned indices; no division in the row loop for sw <= 2."""
    zero, one, two = np.uint64(0), np.uint64(1), np.uint64(2)
    n1 = min(wd, wq - pw) if wq > pw else zero  # sw == 1: the columns copied
    e = (pw % two) * pq + pw // two  # sw == 2: where the even and odd input columns go
    o = ((pw + one) % two) * pq + (pw + one) // two
    pairs = min(wd // two, wq - (pw + one) // two) if wq > (pw + one) // two else zero
    for k in range(i1 - i0):
        d, s = d0 + (i0 + k) * wq, s0 + (ih0 + k * sh) * wd
        if sw == one:
            for j in range(n1):
                buf[d + pw + j] = xf[s + j]
            continue
        done = zero
        if sw == two:  # both column phases in one pass (an interleaved load LLVM vectorizes)
            for j in range(pairs):
                buf[d + e + j] = xf[s + j + j]
                buf[d + o + j] = xf[s + j + j + one]
            done = pairs + pairs
        for iw in range(done, wd):
            j = (iw + pw) // sw
            if j < wq:
                buf[d + ((iw + pw) % sw) * pq + j] = xf[s + iw]


@njit(types.UniTuple(_i8, 2)(_i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _inside(size, pad, phase, step, count):
    """[lo, hi): the j < count whose source index phase + step*j - pad lies in [0, size)."""
    lo = min(count, max(0, (pad - phase + step - 1) // step))
    top = size - 1 + pad - phase
    hi = min(count, top // step + 1) if top >= 0 else 0
    return lo, max(lo, hi)


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
    rows = band_rows(oh_n, wq)
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
                wm = w[m]
                for r0 in range(0, oh_n, rows):
                    nr = min(oh_n - r0, rows)
                    base, o0 = u(r0 * wq), u(((n * m_n + m) * oh_n + r0) * ow_n)
                    _band(of, acc, buf, wm, offs, base, u(nr), u(ow_n), u(wq), o0, b[m])
                    activate_range(of, o0, u(nr * ow_n), act, p0, p1)


# ---- small planes: eight channels at a time (NCHW8c in scratch) ----------------------------------------------

LANES = 8
SIGNATURE_C8 = types.void(_W4, _R1, _R1, _W4, _F1, _F1, _I1, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _f4, _f4)


def geometry_c8(out_hw, kernel, strides, dilations):
    """(Hp, Wp): the padded input extent the outputs read; the taps' offsets into it (floats, 8 per pixel)."""
    (oh, ow), (kh, kw), (sh, sw), (dh, dw) = out_hw, kernel, strides, dilations
    hp, wp = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    offs = np.array([(i * dh * wp + j * dw) * LANES for i in range(kh) for j in range(kw)], np.int64)
    return (hp, wp), offs


def weights_c8(w: np.ndarray) -> np.ndarray:
    """(M, 1, KH, KW) -> (M/8, KH*KW, 8) flattened: per block of 8 channels, each tap's 8 weights together."""
    m = w.shape[0]
    return np.ascontiguousarray(w.reshape(m // LANES, LANES, -1).transpose(0, 2, 1)).reshape(-1)


@njit(types.void(_F1, _F1, _R1, _I1, _u8, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def _row_c8(row, xp, wg, offs, base, ow_n, step):
    """row[ow*8 + c] = sum_t wg[t*8 + c] * xp[base + offs[t] + ow*step + c], in tap order (8 lanes = 8 channels)."""
    t_n = offs.shape[0]
    lanes = np.uint64(LANES)  # unsigned indices throughout: no wraparound checks, so the lane loop vectorizes
    if t_n == 9:
        v0, v1, v2, v3, v4 = wg[0:8], wg[8:16], wg[16:24], wg[24:32], wg[32:40]
        v5, v6, v7, v8 = wg[40:48], wg[48:56], wg[56:64], wg[64:72]
        x0, x1, x2 = base + np.uint64(offs[0]), base + np.uint64(offs[1]), base + np.uint64(offs[2])
        x3, x4, x5 = base + np.uint64(offs[3]), base + np.uint64(offs[4]), base + np.uint64(offs[5])
        x6, x7, x8 = base + np.uint64(offs[6]), base + np.uint64(offs[7]), base + np.uint64(offs[8])
        for ow in range(ow_n):
            r, q = ow * lanes, ow * step
            for c in range(lanes):
                row[r + c] = (v0[c] * xp[x0 + q + c] + v1[c] * xp[x1 + q + c] + v2[c] * xp[x2 + q + c]
                              + v3[c] * xp[x3 + q + c] + v4[c] * xp[x4 + q + c] + v5[c] * xp[x5 + q + c]
                              + v6[c] * xp[x6 + q + c] + v7[c] * xp[x7 + q + c] + v8[c] * xp[x8 + q + c])
        return
    v0 = wg[0:8]
    x0 = base + np.uint64(offs[0])
    for ow in range(ow_n):
        r, q = ow * lanes, ow * step
        for c in range(lanes):
            row[r + c] = v0[c] * xp[x0 + q + c]
    for t in range(1, t_n):
        xt, vt = base + np.uint64(offs[t]), wg[t * LANES:(t + 1) * LANES]
        for ow in range(ow_n):
            r, q = ow * lanes, ow * step
            for c in range(lanes):
                row[r + c] = row[r + c] + vt[c] * xp[xt + q + c]


@njit(SIGNATURE_C8, nogil=True, cache=True, error_model="numpy")
def depthwise_conv2d_c8(x, w8, b, out, xp, row, offs, hp, wp, sh, sw, ph, pw, act, p0, p1):
    """depthwise_conv2d for multiplier 1 and C a multiple of 8, eight channels at a time (small planes).

    A block of 8 channels of X, zero-padded, is transposed into xp (Hp, Wp, 8);
    each output row is computed for the 8 channels at once (one AVX2 vector a
    pixel: no short rows, no per-channel overhead), then transposed into Y with
    B added. Same taps, order and roundings as depthwise_conv2d: same bits.

    Args:
        x: (N, C, H, W) float32; w8: weights_c8(W); b: (C,); out: (N, C, OH, OW).
        xp: (>= Hp*Wp*8,) scratch; row: (>= OW*8,) scratch.
        offs, hp, wp: geometry_c8(); sh, sw / ph, pw: strides, pads_begin.
        act, p0, p1: activation code and parameters (epilogue.py).
    """
    n_batch, c_n, h, wd = x.shape
    oh_n, ow_n = out.shape[2], out.shape[3]
    u = np.uint64
    t_n = offs.shape[0]
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    plane_out = oh_n * ow_n
    ih_n, iw_n = min(h, hp - ph), min(wd, wp - pw)  # the input rows and columns some output reads
    for r in range(hp):  # the padding, zeroed once per call
        for q in range(wp):
            if r < ph or r >= ph + ih_n or q < pw or q >= pw + iw_n:
                for c in range(LANES):
                    xp[(r * wp + q) * LANES + c] = ZERO
    for n in range(n_batch):
        for g in range(c_n // LANES):
            for c in range(LANES):
                src = (n * c_n + g * LANES + c) * h * wd
                for ih in range(ih_n):
                    d, s = ((ih + ph) * wp + pw) * LANES + c, src + ih * wd
                    for iw in range(iw_n):
                        xp[d + iw * LANES] = xf[s + iw]
            wg = w8[g * t_n * LANES:(g + 1) * t_n * LANES]
            ob = (n * c_n + g * LANES) * plane_out
            for oh in range(oh_n):
                _row_c8(row, xp, wg, offs, u(oh * sh * wp * LANES), u(ow_n), u(sw * LANES))
                for c in range(LANES):
                    bias = b[g * LANES + c]
                    d = ob + c * plane_out + oh * ow_n
                    for ow in range(ow_n):
                        of[d + ow] = row[ow * LANES + c] + bias
            activate_range(of, u(ob), u(LANES * plane_out), act, p0, p1)
