"""Activations applied in place to a block of a kernel's output while it is in cache; GELU; erf.

Activation codes (ops/shapes/fused.py's names; params in activation_params order):

    NONE 0, RELU 1, CLIP 2 [min, max], HARD_SIGMOID 3 [alpha, beta], HARD_SWISH 4,
    LEAKY_RELU 5 [alpha]

Each is computed with the float32 operations, in the order, of the numpy
stand-alone kernel (elementwise.py, activation.py): one rounding per
operation, no contraction into FMA (numba without fastmath), so a fused graph
gives the same bits as the unfused one. Sigmoid (scipy's expit) is not among
them: it stays a numpy pass after the compiled kernel.

erf: the odd rational approximation of ops/cpu/_special.py (max 6.7 ulp),
the same float32 operations, hence the same bits, as erf_float32; gelu_erf
computes ONNX Gelu's exporters' order (X / sqrt(2), erf, + 1, * X, * 0.5) in
one pass instead of five.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .._special import _P32, _Q32

NONE, RELU, CLIP, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU = range(6)
CODES = {"Relu": RELU, "Clip": CLIP, "HardSigmoid": HARD_SIGMOID, "HardSwish": HARD_SWISH,
         "LeakyRelu": LEAKY_RELU}

_f = np.float32
P0, P1, P2, P3, P4, P5 = _P32
Q0, Q1, Q2, Q3, Q4, Q5 = _Q32
SIXTH = _f(1.0 / 6.0)
HALF = _f(0.5)
ONE = _f(1.0)
ZERO = _f(0.0)
LIM = _f(4.0)


@njit("float32(float32, int64, float32, float32)", nogil=True, cache=True, error_model="numpy")
def activate(v, code, p0, p1):
    """One element through activation `code` (float32 ops in the numpy kernels' order)."""
    # comparisons with NaN are false: NaN passes through, as in np.maximum / np.clip
    if code == RELU:
        # + 0 makes -0 into +0, as np.maximum(x, 0) does, and keeps LLVM from turning an
        # in-place "store 0 where v < 0" into a masked store (vmaskmovps: microcoded on AMD
        # Zen, 2.5x slower: 0.59 vs 0.24 ms per 1M floats, measured)
        t = v + ZERO
        return ZERO if t < ZERO else t
    if code == CLIP:
        t = p0 if v < p0 else v
        return p1 if t > p1 else t
    if code == HARD_SIGMOID:
        t = v * p0
        t = t + p1
        t = ZERO if t < ZERO else t
        return ONE if t > ONE else t
    if code == HARD_SWISH:
        t = v * SIXTH
        t = t + HALF
        t = ZERO if t < ZERO else t
        t = ONE if t > ONE else t
        return v * t
    if code == LEAKY_RELU:
        if v >= ZERO:
            return v
        return v * p0
    return v


@njit("void(float32[::1], uint64, uint64, int64, float32, float32)", nogil=True, cache=True, error_model="numpy")
def activate_range(y, start, n, code, p0, p1):
    """y[start:start + n] = activate(...) in place: one loop per code, so each vectorizes."""
    if code == RELU:
        for i in range(n):
            y[start + i] = activate(y[start + i], RELU, p0, p1)
    elif code == CLIP:
        for i in range(n):
            y[start + i] = activate(y[start + i], CLIP, p0, p1)
    elif code == HARD_SIGMOID:
        for i in range(n):
            y[start + i] = activate(y[start + i], HARD_SIGMOID, p0, p1)
    elif code == HARD_SWISH:
        for i in range(n):
            y[start + i] = activate(y[start + i], HARD_SWISH, p0, p1)
    elif code == LEAKY_RELU:
        for i in range(n):
            y[start + i] = activate(y[start + i], LEAKY_RELU, p0, p1)


def activate_inplace(y, code, p0, p1):
    """y = activate(y) in place for a flat float32 array."""
    activate_range(y, np.uint64(0), np.uint64(y.size), code, np.float32(p0), np.float32(p1))


@njit("float32(float32)", nogil=True, cache=True, error_model="numpy")
def erf32(x):
    """erf(x) in float32: _special.erf_float32's rational approximation, operation for operation."""
    c = LIM if x > LIM else x  # comparisons with NaN are false: NaN passes, as np.clip
    c = -LIM if c < -LIM else c
    y = c * c
    p = y * P5
    q = y * Q5
    p = (p + P4) * y
    q = (q + Q4) * y
    p = (p + P3) * y
    q = (q + Q3) * y
    p = (p + P2) * y
    q = (q + Q2) * y
    p = (p + P1) * y
    q = (q + Q1) * y
    p = p + P0
    q = q + Q0
    p = p * c
    r = p / q
    r = ONE if r > ONE else r
    return -ONE if r < -ONE else r


@njit("void(float32[::1], float32[::1], float32)", nogil=True, cache=True, error_model="numpy")
def gelu_erf(x, out, sqrt2):
    """out = 0.5 * (x * (1 + erf(x / sqrt2))) elementwise, float32 (flat arrays; out may be x)."""
    for i in range(x.size):
        v = x[i]
        t = erf32(v / sqrt2) + ONE
        out[i] = (v * t) * HALF


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.float32[::1]), nogil=True, cache=True,
      error_model="numpy")
def relu(x, y):
    """y = max(x, 0) elementwise (flat float32 arrays of one size; y may be x): np.maximum's bits."""
    for i in range(x.size):
        y[i] = activate(x[i], RELU, ZERO, ZERO)


@njit("void(float32[::1], float32)", nogil=True, cache=True, error_model="numpy")
def gelu_erf_inplace(y, sqrt2):
    """gelu_erf(y, y, sqrt2): one array, so LLVM's alias check does not send the loop to scalar code."""
    for i in range(y.size):
        v = y[i]
        t = erf32(v / sqrt2) + ONE
        y[i] = (v * t) * HALF
