"""The stride-phase split of a zero-padded input, compiled (Conv's indirect GEMM and depthwise paths).

Phase (a, b) of a plane padded by (ph, pw) with strides (sh, sw) is the plane
P_ab[i, j] = padded-X[a + sh*i, b + sw*j], i < hq, j < wq (the zero padding
included: entries whose source lies outside X are 0). A convolution tap then
reads one phase at a fixed offset from the output pixel (conv_indirect.py,
depthwise.py). For stride 2 the split de-interleaves each input row into the
two column phases in one pass (an interleaved load LLVM vectorizes): numpy's
strided copies of the same split ran at a third of the speed (PP-OCR det's
32x240x320 input: 4.9 ms vs 1.x ms, one thread).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .jit import njit

_f4, _i8, _u8 = types.float32, types.int64, types.uint64
_F1 = types.Array(_f4, 1, "C")
_R1 = types.Array(_f4, 1, "C", readonly=True)
_R4 = types.Array(_f4, 4, "C", readonly=True)


@njit(types.void(_F1, _R1, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8, _u8), nogil=True, cache=True,
      error_model="numpy")
def split_rows(buf, xf, s0, wd, d0, pq, i0, i1, ih0, sh, sw, pw, wq):
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
def inside(size, pad, phase, step, count):
    """[lo, hi): the j < count whose source index phase + step*j - pad lies in [0, size)."""
    lo = min(count, max(0, (pad - phase + step - 1) // step))
    top = size - 1 + pad - phase
    hi = min(count, top // step + 1) if top >= 0 else 0
    return lo, max(lo, hi)


@njit(types.void(_R4, _F1, _i8, _i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def split_phases(x, planes, hq, wq, sh, sw, ph, pw):
    """planes[n, c, a*sw + b] = phase (a, b) of X[n, c] zero-padded by (ph, pw) (module docstring).

    Args:
        x: (N, C, H, W) float32.
        planes: flat float32, at least N*C*sh*sw*hq*wq elements, as (N, C, sh*sw, hq, wq).
        hq, wq: the phase planes' size; sh, sw: strides; ph, pw: pads_begin.
    Every element of those planes is written (the borders no input reaches with zeros).
    """
    n_b, c_n, h, wd = x.shape
    xf = x.reshape(x.size)
    u = np.uint64
    f_n, pq = sh * sw, hq * wq
    zero = np.float32(0.0)
    for nc in range(n_b * c_n):
        for f in range(f_n):
            a, b = f // sw, f % sw
            i0, i1 = inside(h, ph, a, sh, hq)
            j0, j1 = inside(wd, pw, b, sw, wq)
            base = (nc * f_n + f) * pq
            for i in range(hq):
                r = base + i * wq
                if i < i0 or i >= i1:
                    for j in range(wq):
                        planes[r + j] = zero
                else:
                    for j in range(j0):
                        planes[r + j] = zero
                    for j in range(j1, wq):
                        planes[r + j] = zero
        for a in range(sh):
            i0, i1 = inside(h, ph, a, sh, hq)
            if i1 > i0:
                split_rows(planes, xf, u(nc * h * wd), u(wd), u((nc * f_n + a * sw) * pq), u(pq), u(i0), u(i1),
                           u(a + sh * i0 - ph), u(sh), u(sw), u(pw), u(wq))
