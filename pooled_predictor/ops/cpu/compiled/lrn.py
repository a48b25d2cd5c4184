"""Local response normalization across channels (ONNX LRN-1/-13; AlexNet, Krizhevsky et al. 2012),
float32 NCHW, compiled.

    square_sum[n, c, p] = X[n, c, p]^2 + sum over taps k of X[n, c + k, p]^2,
        k = -floor((size-1)/2) .. ceil((size-1)/2), k != 0, 0 <= c + k < C
    Y = X / (bias + alpha / size * square_sum) ^ beta

One channel plane at a time: its square sum is built in a plane-sized buffer (in L1/L2)
by one vectorized pass per tap, in the numpy kernel's order (the centre, then the
taps from -before to after), so the sums and d = sum * scale + bias have the numpy
kernel's bits (ops/cpu/normalization.py: LRN, the tested reference). d^beta: for
beta = 0.75 (AlexNet's, GoogLeNet's and Caffe's default) as sqrt(d) * sqrt(sqrt(d)),
for 0.5 as sqrt(d), for 1 as d; three correctly rounded operations at most, so
within 2 ulp of d^beta (numpy's powf is within 1), and Y within 4 ulp of the numpy
kernel's (measured, tests/ops/test_compiled_lrn.py); other betas call powf per
element (the numpy kernel's bits). Shapes: X and Y (N, C, D1, ..., Dk) flattened,
float32; the window is clamped to the C channels by the caller (LRN.__init__).
numpy's np.power took 8-10 ns an element here, two-thirds of GoogLeNet's two LRNs
(10.3 ms of its 73 ms forward, one thread); these loops vectorize (vsqrtps).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .jit import njit

_f4, _i8 = types.float32, types.int64
_R1 = types.Array(_f4, 1, "C", readonly=True)
_F1 = types.Array(_f4, 1, "C")

POW_GENERAL, POW_075, POW_05, POW_1 = 0, 1, 2, 3


def pow_mode(beta: float) -> int:
    """The lrn_nchw `mode` for this beta (a float32 value)."""
    b = np.float32(beta)
    return {np.float32(0.75): POW_075, np.float32(0.5): POW_05, np.float32(1.0): POW_1}.get(b, POW_GENERAL)


@njit(types.void(_R1, _F1, _F1, _i8, _i8, _i8, _i8, _i8, _f4, _f4, _f4, _i8), nogil=True, cache=True,
      error_model="numpy")
def lrn_nchw(x, y, acc, images, channels, plane, before, after, scale, bias, beta, mode):
    """Y = LRN(X) (module docstring) for flat float32 X and Y of images x channels x plane elements
    (Y must not be X); acc: scratch of at least `plane` floats; mode: pow_mode(beta)."""
    for n in range(images):
        for c in range(channels):
            base = (n * channels + c) * plane
            xc, yc, a = x[base:base + plane], y[base:base + plane], acc[:plane]  # slices: unsigned indices below
            for p in range(plane):
                a[p] = xc[p] * xc[p]
            for k in range(-before, after + 1):
                if k == 0 or c + k < 0 or c + k >= channels:
                    continue
                xk = x[base + k * plane:base + (k + 1) * plane]
                for p in range(plane):
                    a[p] += xk[p] * xk[p]
            if mode == POW_075:
                for p in range(plane):
                    s = np.sqrt(a[p] * scale + bias)
                    yc[p] = xc[p] / (s * np.sqrt(s))
            elif mode == POW_05:
                for p in range(plane):
                    yc[p] = xc[p] / np.sqrt(a[p] * scale + bias)
            elif mode == POW_1:
                for p in range(plane):
                    yc[p] = xc[p] / (a[p] * scale + bias)
            else:
                for p in range(plane):
                    yc[p] = xc[p] / (a[p] * scale + bias) ** beta
