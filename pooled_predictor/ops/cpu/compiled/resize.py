"""Resize of the last two axes of float32 arrays: nearest and bilinear (numba).

X (P, H, W) -> Y (P, OH, OW) (the leading axes flattened into P), from the
per-axis tables of ops/cpu/resize.py (axis_table: source indices and weights,
every coordinate transformation and nearest mode already applied there):

    nearest:  Y[p, o, q] = X[p, ih[o], iw[q]]
    linear:   Y[p, o, q] = sum over a, b of wh_a[o] * ww_b[q] * X[p, ih_a[o], iw_b[q]]

One output row at a time, written once. Nearest: a row whose source row is the
previous output row's is a copy of it; a column table that repeats every
source column r times (integer upsampling, r = 2 written out) interleaves,
any other gathers. Linear is separable, as the numpy kernel: the two source
rows are blended into a row buffer (unit stride), then the buffer's two
taps per output column; when the numpy kernel would resample the columns
first (they shrink more), the two source rows are resampled along the
columns first, then blended -- the same float32 operations in the same
order, so the result is the numpy kernel's, bit for bit (finite inputs).
"""

from __future__ import annotations

from numba import types

from .jit import njit

_f4, _i8, _U = types.float32, types.int64, types.uint64
_R3 = types.Array(_f4, 3, "C", readonly=True)
_W3, _W1 = types.Array(_f4, 3, "C"), types.Array(_f4, 1, "C")
_I1 = types.Array(_i8, 1, "C", readonly=True)
_F1 = types.Array(_f4, 1, "C", readonly=True)


@njit(types.void(_R3, _W3, _I1, _I1, _i8), nogil=True, cache=True, error_model="numpy")
def nearest2d(x, y, ih, iw, repeat):
    """Y[p, o, q] = X[p, ih[o], iw[q]]; repeat r > 0: iw[q] == q // r (interleaved writes)."""
    p_n, h, w = x.shape
    oh_n, ow_n = y.shape[1], y.shape[2]
    xf, yf = x.reshape(-1), y.reshape(-1)
    uow, uw = _U(ow_n), _U(w)
    for p in range(p_n):
        for o in range(oh_n):
            yo = _U((p * oh_n + o) * ow_n)
            if o > 0 and ih[o] == ih[o - 1]:
                prev = yo - uow
                for q in range(uow):
                    yf[yo + q] = yf[prev + q]
                continue
            xo = _U((p * h + ih[o]) * w)
            if repeat == 1:
                for q in range(uw):
                    yf[yo + q] = xf[xo + q]
            elif repeat == 2:
                for q in range(uw):
                    v = xf[xo + q]
                    yf[yo + 2 * q] = v
                    yf[yo + 2 * q + 1] = v
            elif repeat > 2:
                ur = _U(repeat)
                for q in range(uw):
                    v = xf[xo + q]
                    for c in range(ur):
                        yf[yo + q * ur + c] = v
            else:
                for q in range(uow):
                    yf[yo + q] = xf[xo + _U(iw[q])]


@njit(types.void(_R3, _W3, _I1, _I1, _F1, _F1, _I1, _I1, _F1, _F1, types.boolean, _W1, _W1),
      nogil=True, cache=True, error_model="numpy")
def linear2d(x, y, h0, h1, wh0, wh1, w0, w1, ww0, ww1, rows_first, buf, buf2):
    """Bilinear Y from X with row taps (h0, h1, wh0, wh1) and column taps (w0, w1, ww0, ww1).

    rows_first: blend the rows, then the columns (buf: (W,) float32); else resample
    the two rows along the columns (buf, buf2: (OW,) at least), then blend.
    Each axis: t = X[a] * w_a + X[b] * w_b in float32 (the numpy kernel's take, *, +=).
    """
    p_n, h, w = x.shape
    oh_n, ow_n = y.shape[1], y.shape[2]
    xf, yf = x.reshape(-1), y.reshape(-1)
    uow, uw = _U(ow_n), _U(w)
    for p in range(p_n):
        for o in range(oh_n):
            yo = _U((p * oh_n + o) * ow_n)
            xa = _U((p * h + h0[o]) * w)
            xb = _U((p * h + h1[o]) * w)
            a, b = wh0[o], wh1[o]
            if rows_first:
                for q in range(uw):
                    buf[q] = xf[xa + q] * a + xf[xb + q] * b
                for q in range(uow):
                    yf[yo + q] = buf[w0[q]] * ww0[q] + buf[w1[q]] * ww1[q]
            else:
                for q in range(uow):
                    buf[q] = xf[xa + _U(w0[q])] * ww0[q] + xf[xa + _U(w1[q])] * ww1[q]
                    buf2[q] = xf[xb + _U(w0[q])] * ww0[q] + xf[xb + _U(w1[q])] * ww1[q]
                for q in range(uow):
                    yf[yo + q] = buf[q] * a + buf2[q] * b
