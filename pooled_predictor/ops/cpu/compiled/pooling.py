"""MaxPool and AveragePool over 2-D NCHW float32 planes (numba).

Y[n, c, oh, ow] = reduce over the window taps (i, j) inside X of
X[n, c, oh*sh - ph + i*dh, ow*sw - pw + j*dw]

(ONNX MaxPool / AveragePool; the window geometry, output sizes, ceil_mode and
auto_pad come from ops/shapes/pooling.py's pool_geometry, as for the numpy
kernels). Separable, one output row at a time: the window's input rows are
reduced into a row buffer (unit stride: vectorizes), whose border columns
hold the identity of the reduction (-inf for max, 0 for a sum) so that the
column taps need no bounds; then the kw column taps of the buffer give the
output row. Windows of 2 or 3 rows and of 2 or 3 columns are written out and
kept in registers: every value is stored once (more rows ping-pong between two
buffers, more columns take a generic loop). (A read-modify-write max
`acc[k] = v if v > acc[k] else acc[k]` becomes a masked store, vmaskmovps,
which is microcoded on AMD Zen: 5x slower than numpy, measured.)

Padding never takes part: a max of a window with no input tap is float32's
lowest value (onnxruntime), a sum only adds input values and is divided by
the window's count (count_include_pad: the taps inside the padded input,
ops/shapes/pooling.py's counts). Max is exact (the numpy kernel's bits; NaN
propagates, as np.maximum). The average sums the rows, then the columns, in
float32 (the numpy kernel sums in the same axis order; the taps' order at
borders may differ, so a border average may differ by an ulp).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import njit

MAX, AVERAGE = 0, 1
LOWEST = np.float32(np.finfo(np.float32).min)
_NEG_INF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
_f4, _i8 = types.float32, types.int64
_R4 = types.Array(_f4, 4, "C", readonly=True)
_W4, _W2 = types.Array(_f4, 4, "C"), types.Array(_f4, 2, "C")
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")
_V8, _V16 = ir.VectorType(ir.FloatType(), 8), ir.VectorType(ir.FloatType(), 16)
_M8 = ir.VectorType(ir.IntType(32), 8)


# Helpers without a signature of their own: compiled once, inside pool2d (a cold
# compile of each on its own, then again inlined, doubled the time).
@njit(nogil=True, cache=True, error_model="numpy")
def _mx(a, b):
    """max(a, b) with NaN propagating (np.maximum); a select, no branch."""
    return b if (b > a) | (b != b) else a


def buffer_length(width: int, out_width: int, kw: int, sw: int, dw: int, pw: int) -> int:
    """Length of a row buffer: pw border columns, the input row, the right border the taps reach."""
    return max(pw + width, (out_width - 1) * sw + (kw - 1) * dw + 1)


_U = types.uint64


@njit(nogil=True, cache=True, error_model="numpy")
def _rows(x, xo, w, buf, b0, b1, mode, cnt, step):
    """Reduce the cnt input rows x[xo + i*step : ... + w] into buf[b0 + k] (k < w), or buf[b1 + k].

    Returns the offset (b0 or b1) holding the result: beyond 3 rows the two
    buffers ping-pong (a read-modify-write of one buffer would become a masked store).
    All offsets unsigned: no negative-index wraparound checks in the loops.
    """
    if cnt <= 0:
        fill = LOWEST if mode == MAX else _ZERO
        for k in range(w):
            buf[b0 + k] = fill
        return b0
    if cnt == 1:
        for k in range(w):
            buf[b0 + k] = x[xo + k]
        return b0
    x1 = xo + step
    if cnt == 2:
        if mode == MAX:
            for k in range(w):
                buf[b0 + k] = _mx(x[xo + k], x[x1 + k])
        else:
            for k in range(w):
                buf[b0 + k] = x[xo + k] + x[x1 + k]
        return b0
    x2 = x1 + step
    if mode == MAX:
        for k in range(w):
            buf[b0 + k] = _mx(_mx(x[xo + k], x[x1 + k]), x[x2 + k])
    else:
        for k in range(w):
            buf[b0 + k] = (x[xo + k] + x[x1 + k]) + x[x2 + k]
    src, dst = b0, b1
    xr = x2
    for _ in range(cnt - 3):
        xr += step
        if mode == MAX:
            for k in range(w):
                buf[dst + k] = _mx(buf[src + k], x[xr + k])
        else:
            for k in range(w):
                buf[dst + k] = buf[src + k] + x[xr + k]
        src, dst = dst, src
    return src


@njit(nogil=True, cache=True, error_model="numpy")
def _columns(buf, a, y, yo, n, mode, kw, sw, dw, ch, count_w, c_lo, c_hi):
    """y[yo + o] = reduction over j < kw of buf[a + o*sw + j*dw] (o < n; AVERAGE: / (ch * count_w[o]))."""
    if mode == MAX:
        if kw == 2 and sw == 1:
            for o in range(n):
                y[yo + o] = _mx(buf[a + o], buf[a + o + dw])
        elif kw == 3 and sw == 1:
            for o in range(n):
                y[yo + o] = _mx(_mx(buf[a + o], buf[a + o + dw]), buf[a + o + 2 * dw])
        elif kw == 2:
            for o in range(n):
                y[yo + o] = _mx(buf[a + o * sw], buf[a + o * sw + dw])
        elif kw == 3:
            for o in range(n):
                y[yo + o] = _mx(_mx(buf[a + o * sw], buf[a + o * sw + dw]), buf[a + o * sw + 2 * dw])
        else:
            for o in range(n):
                v = buf[a + o * sw]
                for j in range(1, kw):
                    v = _mx(v, buf[a + o * sw + j * dw])
                y[yo + o] = v
        for o in range(c_lo):  # windows without an input column: the lowest value, as onnxruntime
            y[yo + o] = LOWEST
        for o in range(c_hi, n):
            y[yo + o] = LOWEST
        return
    # the sums (written out for stride 1, the only AveragePool ops/cpu/pooling.py
    # compiles by default), then one unit-stride division pass
    if kw == 2 and sw == 1:
        for o in range(n):
            y[yo + o] = buf[a + o] + buf[a + o + dw]
    elif kw == 3 and sw == 1:
        for o in range(n):
            y[yo + o] = (buf[a + o] + buf[a + o + dw]) + buf[a + o + 2 * dw]
    else:
        for o in range(n):
            v = buf[a + o * sw]
            for j in range(1, kw):
                v += buf[a + o * sw + j * dw]
            y[yo + o] = v
    for o in range(n):
        y[yo + o] = y[yo + o] / (ch * count_w[o])


@njit(types.void(_R4, _W4, _W2, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _R1, _R1, _i8, _i8),
      nogil=True, cache=True, error_model="numpy")
def pool2d(x, y, bufs, mode, kh, kw, sh, sw, dh, dw, ph, pw, count_h, count_w, c_lo, c_hi):
    """Y = MaxPool (mode MAX) or AveragePool (AVERAGE) of X, 2-D NCHW float32.

    Args:
        x: (N, C, H, W) float32, C-contiguous.
        y: (N, C, OH, OW) float32, written.
        bufs: (2, buffer_length(...)) float32 row buffers (per-Net scratch).
        kh, kw, sh, sw, dh, dw: kernel, strides, dilations; ph, pw: padding before.
        count_h (OH,), count_w (OW,): the average's divisor is count_h[oh] * count_w[ow]
            (taps that count per axis, at least 1); unused for MAX.
        c_lo, c_hi: the outputs of a row whose window has an input column (MAX).
    """
    n_n, c_n, h, w = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    pad = _NEG_INF if mode == MAX else _ZERO
    length = bufs.shape[1]
    for r in range(2):  # the border columns: the reduction's identity, never overwritten
        for k in range(pw):
            bufs[r, k] = pad
        for k in range(pw + w, length):
            bufs[r, k] = pad
    xf, yf, bf = x.reshape(-1), y.reshape(-1), bufs.reshape(-1)
    uw, uow, upw, ul = _U(w), _U(ow_n), _U(pw), _U(length)
    usw, udw, ulo, uhi = _U(sw), _U(dw), _U(c_lo), _U(c_hi)
    for p in range(n_n * c_n):
        for oh in range(oh_n):
            base = oh * sh - ph
            i0 = 0 if base >= 0 else (-base + dh - 1) // dh  # the taps whose row is inside X
            i1 = (h - 1 - base) // dh + 1 if h - 1 - base >= 0 else 0
            if i1 > kh:
                i1 = kh
            xo = _U((p * h + base + i0 * dh) * w) if i1 > i0 else _U(0)
            a = _rows(xf, xo, uw, bf, upw, ul + upw, mode, i1 - i0, _U(dh * w))
            _columns(bf, a - upw, yf, _U((p * oh_n + oh) * ow_n), uow, mode, kw, usw, udw, count_h[oh], count_w,
                     ulo, uhi)


@intrinsic
def _pair_means8(typingctx, src, y, y_off, nvec, count):
    """y[y_off + o] = (src[2o] + src[2o + 1]) / count for o < 8 * nvec: <16 x float> loads split
    into even and odd lanes (LLVM does not vectorize the stride-2 loads itself). The caller keeps
    src[: 16 * nvec] and y[y_off : y_off + 8 * nvec] in bounds."""
    sig = types.void(src, y, y_off, nvec, count)

    def codegen(context, builder, signature, args):
        src_a, y_a, y_off_v, n_v, count_v = args
        sptr = builder.bitcast(context.make_array(signature.args[0])(context, builder, src_a).data,
                               _V16.as_pointer())
        yptr = builder.bitcast(builder.gep(context.make_array(signature.args[1])(context, builder, y_a).data,
                                           [y_off_v]), _V8.as_pointer())
        div = builder.insert_element(ir.Constant(_V8, ir.Undefined), count_v, ir.Constant(ir.IntType(32), 0))
        div = builder.shuffle_vector(div, ir.Constant(_V8, ir.Undefined), ir.Constant(_M8, [0] * 8))
        with cgutils.for_range(builder, n_v) as loop:
            v = builder.load(builder.gep(sptr, [loop.index]), align=4)
            even = builder.shuffle_vector(v, ir.Constant(_V16, ir.Undefined), ir.Constant(_M8, list(range(0, 16, 2))))
            odd = builder.shuffle_vector(v, ir.Constant(_V16, ir.Undefined), ir.Constant(_M8, list(range(1, 16, 2))))
            builder.store(builder.fdiv(builder.fadd(even, odd), div), builder.gep(yptr, [loop.index]), align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, error_model="numpy")
def _window_means(src, y, yo, n, kw, count):
    """y[yo + o] = (sum over j < kw of src[o*kw + j]) / count, o < n (src: the window rows' sums)."""
    start = 0
    if kw == 2:
        start = n // 8 * 8
        _pair_means8(src, y, yo, start // 8, count)
    for o in range(start, n):
        v = src[o * kw]
        for j in range(1, kw):
            v += src[o * kw + j]
        y[yo + o] = v / count


@njit(types.void(_R4, _W4, _W1, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def average_tiles(x, y, buf, kh, kw):
    """Y = AveragePool of X over windows that tile it: strides = kernel (kh, kw), dilation 1, no
    padding, every window inside X (2-D NCHW float32; rows and columns past the last window unread).

    Y[n, c, oh, ow] = (sum over j < kw of (sum over i < kh of X[n, c, oh*kh + i, ow*kw + j])) / (kh*kw):
    the window rows added in order into buf (unit stride: LLVM vectorizes it), then each window's
    kw columns of buf summed and divided (kw = 2: _pair_means8); buf: at least W floats.
    """
    n_n, c_n, h, w = x.shape
    oh_n, ow_n = y.shape[2], y.shape[3]
    count = np.float32(kh * kw)
    span = ow_n * kw
    xf, yf = x.reshape(-1), y.reshape(-1)
    for q in range(n_n * c_n * oh_n):   # q = (n*C + c)*OH + oh: input rows from (n*C + c)*H + oh*kh
        r = ((q // oh_n) * h + (q % oh_n) * kh) * w
        x0 = xf[r:r + span]   # row slices: indices from 0, no wraparound tests (vectorizes)
        if kh == 1:   # copied, so that _window_means compiles for one array type
            for k in range(span):
                buf[k] = x0[k]
        else:
            x1 = xf[r + w:r + w + span]
            for k in range(span):
                buf[k] = x0[k] + x1[k]
        for i in range(2, kh):
            xi = xf[r + i * w:r + i * w + span]
            for k in range(span):
                buf[k] += xi[k]
        _window_means(buf, yf, q * ow_n, ow_n, kw, count)


def _maxpool_q_sig(t):
    i = types.int64
    return types.void(types.Array(t, 4, "C", readonly=True), types.Array(t, 4, "C"), types.Array(t, 1, "C"),
                      i, i, i, i, i, i, i, i, i)


@njit([_maxpool_q_sig(types.uint8), _maxpool_q_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def maxpool2d_q(x, y, buf, kh, kw, sh, sw, dh, dw, ph, pw, lowest):
    """MaxPool of 8-bit X (N, C, H, W) into Y (N, C, OH, OW), the window geometry as pool2d's: exact (a max of
    integers). Per output row, the window's input rows reduced into buf (unit stride: vectorizes, unsigned
    indices), whose border columns hold the type's lowest value so that the kw column taps need no bounds (a
    window with no input tap gives the lowest value, as onnxruntime's); buf holds buffer_length(W, OW, kw, sw,
    dw, pw) elements; lowest: the type's lowest value (0 or -128). (The numpy separable kernel took 0.42 ms on
    ResNet-50's 64 x 112 x 112 uint8 stem pool,
    onnxruntime 0.10.)"""
    n_b, c_n, h, wd = x.shape
    oh, ow = y.shape[2], y.shape[3]
    xf = x.reshape(x.size)
    yf = y.reshape(y.size)
    u = np.uint64
    blen = u(buf.size)
    for i in range(blen):
        buf[i] = lowest
    for nc in range(n_b * c_n):
        for r in range(oh):
            first = True
            for t in range(kh):
                row = r * sh - ph + t * dh
                if row < 0 or row >= h:
                    continue
                src = u(nc * h * wd + row * wd)
                if first:
                    for j in range(u(wd)):
                        buf[u(pw) + j] = xf[src + j]
                    first = False
                else:
                    for j in range(u(wd)):
                        a, b = buf[u(pw) + j], xf[src + j]
                        buf[u(pw) + j] = b if b > a else a
            dst = u((nc * oh + r) * ow)
            if first:  # no input row in the window
                for j in range(u(ow)):
                    yf[dst + j] = lowest
                continue
            if kw == 3 and dw == 1 and sw == 2:  # ResNet's stem pool
                for j in range(u(ow)):
                    a, b, c = buf[j + j], buf[j + j + u(1)], buf[j + j + u(2)]
                    m = b if b > a else a
                    yf[dst + j] = c if c > m else m
                continue
            if sw == 1 and dw == 1:  # unit stride: tap by tap over the row, each pass a vector loop (PP-OCR det's
                # 2 x 2 stride-1 pool: 1.8 -> 0.09 ms, one thread; the generic loop's runtime tap count kept it scalar)
                yr = yf[dst:dst + u(ow)]
                for j in range(u(ow)):
                    yr[j] = buf[j]
                for t in range(1, kw):
                    bt = buf[u(t):u(t) + u(ow)]
                    for j in range(u(ow)):
                        a, b = yr[j], bt[j]
                        yr[j] = b if b > a else a
                continue
            for j in range(u(ow)):
                m = buf[j * u(sw)]
                for t in range(1, kw):
                    v = buf[j * u(sw) + u(t * dw)]
                    m = v if v > m else m
                yf[dst + j] = m


def _maxpool_q_hwc_sig(t):
    i = types.int64
    return types.void(types.Array(t, 1, "C", readonly=True), types.Array(t, 1, "C"), i, i, i, i, i, i,
                      i, i, i, i, i, i, i, i, i)


@njit([_maxpool_q_hwc_sig(types.uint8), _maxpool_q_hwc_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def maxpool2d_q_hwc(x, y, n_b, h, w, c_n, oh, ow, kh, kw, sh, sw, dh, dw, ph, pw, lowest):
    """maxpool2d_q on channels-last planes: X (N, H, W, C) and Y (N, OH, OW, C) flat, each output pixel the
    maximum of its window's input pixels, the C channels a vector loop (onnxruntime's NhwcMaxPool for 8-bit
    tensors). A window with no input tap gives `lowest`. Exact (a max of integers), so maxpool2d_q's values."""
    u = np.uint64
    c = u(c_n)
    for n in range(n_b):
        for o in range(oh):
            for q in range(ow):
                dst = u(((n * oh + o) * ow + q) * c_n)
                ys = y[dst:dst + c]
                first = True
                for t in range(kh):
                    ih = o * sh - ph + t * dh
                    if ih < 0 or ih >= h:
                        continue
                    for v in range(kw):
                        iw = q * sw - pw + v * dw
                        if iw < 0 or iw >= w:
                            continue
                        src = u(((n * h + ih) * w + iw) * c_n)
                        xs = x[src:src + c]
                        if first:
                            for k in range(c):
                                ys[k] = xs[k]
                            first = False
                        else:
                            for k in range(c):
                                a, b = ys[k], xs[k]
                                ys[k] = b if b > a else a
                if first:
                    for k in range(c):
                        ys[k] = lowest
