"""Activations applied in place to a block of a kernel's output while it is in cache; GELU; erf.

Activation codes (ops/shapes/fused.py's names; params in activation_params order):

    NONE 0, RELU 1, CLIP 2 [min, max], HARD_SIGMOID 3 [alpha, beta], HARD_SWISH 4,
    LEAKY_RELU 5 [alpha], GELU 6 [sqrt(2) as float32] (activate_range and activate only: codes.RANGE_CODES)

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
from numba import types

from .._special import _P32, _Q32
from .codes import CLIP, CODES, GELU, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, NONE, RELU  # noqa: F401 -- epilogue.CODES
from .jit import njit

_f = np.float32
P0, P1, P2, P3, P4, P5 = _P32
Q0, Q1, Q2, Q3, Q4, Q5 = _Q32
SIXTH = _f(1.0 / 6.0)
HALF = _f(0.5)
ONE = _f(1.0)
ZERO = _f(0.0)
LIM = _f(4.0)


@njit("float32(float32, float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def _below(v, hi):
    """min(v, hi) as np.clip's upper bound: comparisons with NaN are false, so NaN passes."""
    return hi if v > hi else v


@njit("float32(float32, float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def _above(v, lo):
    """max(v, lo) as np.clip's lower bound (NaN passes)."""
    return lo if v < lo else v


@njit("float32(float32, float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def _clamp(v, lim):
    """v clipped to [-lim, lim], as np.clip."""
    return _above(_below(v, lim), -lim)


@njit("float32(float32)", nogil=True, cache=True, error_model="numpy")
def erf32(x):
    """erf(x) in float32: _special.erf_float32's rational approximation, operation for operation."""
    c = _clamp(x, LIM)
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
    return _clamp(p / q, ONE)  # rounding may exceed 1 near the clamp


@njit([types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C")),
       types.void(types.Array(types.float32, 1, "C"), types.Array(types.float32, 1, "C"))],
      nogil=True, cache=True, error_model="numpy")
def erf_flat(x, y):
    """y = erf32(x) over flat float32 arrays of one size, not overlapping (the Erf node's compiled pass:
    _special.erf_float32's operations, so its bits; 8x numpy's on 1.2M floats, Zen 5)."""
    for i in range(np.uint64(x.size)):
        y[i] = erf32(x[i])


@njit(types.void(types.Array(types.float32, 1, "C")), nogil=True, cache=True, error_model="numpy")
def erf_inplace(y):
    """erf_flat(y, y) through one array: two that are one fail LLVM's run-time overlap check, and the loop
    ran scalar (14x slower)."""
    for i in range(np.uint64(y.size)):
        y[i] = erf32(y[i])


@njit("float32(float32, float32)", nogil=True, cache=True, error_model="numpy")
def gelu32(v, sqrt2):
    """0.5 * (v * (1 + erf(v / sqrt2))) in float32, the exporters' order (passes/gelu.py): Div, Erf,
    Add, Mul, Mul (multiplying by 0.5 is exact, so where they put it does not matter)."""
    t = erf32(v / sqrt2) + ONE
    return (v * t) * HALF


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _gelu_quarters(x, y, sqrt2):
    """y = gelu32(x, sqrt2) elementwise over flat float32 arrays of one size (y may be x): erf32's
    operations, hence gelu32's bits, written out for four quarters of the array side by side.

    gelu32 is one chain of ~25 dependent float32 operations, two of them divisions; a loop over it
    keeps too few iterations in flight on Zen 1 to hide their latency (2.8 ns an element in cache).
    Four independent chains interleaved step by step, each vectorized 8 lanes wide: 1.4 ns from x
    to another y, 1.9 ns in place (measured on 60k floats). Inlined, so that a caller passing one
    array twice gets a loop without the runtime alias check that would send it to scalar code."""
    n = x.size
    q = n // 4
    for i in range(q):
        v0, v1, v2, v3 = x[i], x[i + q], x[i + 2 * q], x[i + 3 * q]
        c0, c1, c2, c3 = v0 / sqrt2, v1 / sqrt2, v2 / sqrt2, v3 / sqrt2
        c0, c1, c2, c3 = _below(c0, LIM), _below(c1, LIM), _below(c2, LIM), _below(c3, LIM)
        c0, c1, c2, c3 = _above(c0, -LIM), _above(c1, -LIM), _above(c2, -LIM), _above(c3, -LIM)
        w0, w1, w2, w3 = c0 * c0, c1 * c1, c2 * c2, c3 * c3
        p0, p1, p2, p3 = w0 * P5, w1 * P5, w2 * P5, w3 * P5
        q0, q1, q2, q3 = w0 * Q5, w1 * Q5, w2 * Q5, w3 * Q5
        p0, p1, p2, p3 = (p0 + P4) * w0, (p1 + P4) * w1, (p2 + P4) * w2, (p3 + P4) * w3
        q0, q1, q2, q3 = (q0 + Q4) * w0, (q1 + Q4) * w1, (q2 + Q4) * w2, (q3 + Q4) * w3
        p0, p1, p2, p3 = (p0 + P3) * w0, (p1 + P3) * w1, (p2 + P3) * w2, (p3 + P3) * w3
        q0, q1, q2, q3 = (q0 + Q3) * w0, (q1 + Q3) * w1, (q2 + Q3) * w2, (q3 + Q3) * w3
        p0, p1, p2, p3 = (p0 + P2) * w0, (p1 + P2) * w1, (p2 + P2) * w2, (p3 + P2) * w3
        q0, q1, q2, q3 = (q0 + Q2) * w0, (q1 + Q2) * w1, (q2 + Q2) * w2, (q3 + Q2) * w3
        p0, p1, p2, p3 = (p0 + P1) * w0, (p1 + P1) * w1, (p2 + P1) * w2, (p3 + P1) * w3
        q0, q1, q2, q3 = (q0 + Q1) * w0, (q1 + Q1) * w1, (q2 + Q1) * w2, (q3 + Q1) * w3
        p0, p1, p2, p3 = (p0 + P0) * c0, (p1 + P0) * c1, (p2 + P0) * c2, (p3 + P0) * c3
        q0, q1, q2, q3 = q0 + Q0, q1 + Q0, q2 + Q0, q3 + Q0
        r0, r1, r2, r3 = p0 / q0, p1 / q1, p2 / q2, p3 / q3
        r0, r1, r2, r3 = _below(r0, ONE), _below(r1, ONE), _below(r2, ONE), _below(r3, ONE)
        r0, r1, r2, r3 = _above(r0, -ONE), _above(r1, -ONE), _above(r2, -ONE), _above(r3, -ONE)
        y[i] = (v0 * (r0 + ONE)) * HALF
        y[i + q] = (v1 * (r1 + ONE)) * HALF
        y[i + 2 * q] = (v2 * (r2 + ONE)) * HALF
        y[i + 3 * q] = (v3 * (r3 + ONE)) * HALF
    for i in range(4 * q, n):
        y[i] = gelu32(x[i], sqrt2)


@njit("void(float32[::1], float32)", nogil=True, cache=True, error_model="numpy")
def gelu_erf_inplace(y, sqrt2):
    """y = gelu32(y, sqrt2) in place (a flat float32 array): _gelu_quarters with one array."""
    _gelu_quarters(y, y, sqrt2)


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
    if code == GELU:
        return gelu32(v, p0)
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
    elif code == GELU:  # p0 = sqrt(2): gelu32's bits, four chains interleaved (one view: no alias check)
        block = y[start:start + n]
        _gelu_quarters(block, block, p0)


def activate_inplace(y, code, p0, p1):
    """y = activate(y) in place for a flat float32 array."""
    activate_range(y, np.uint64(0), np.uint64(y.size), code, np.float32(p0), np.float32(p1))


@njit("void(float32[::1], float32[::1], float32)", nogil=True, cache=True, error_model="numpy")
def gelu_erf(x, out, sqrt2):
    """out = 0.5 * (x * (1 + erf(x / sqrt2))) elementwise, float32 (flat arrays of one size; out may be
    x, though gelu_erf_inplace is faster there: each quarter's element is read before any is written)."""
    _gelu_quarters(x, out, sqrt2)


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.float32[::1]), nogil=True, cache=True,
      error_model="numpy")
def relu(x, y):
    """y = max(x, 0) elementwise (flat float32 arrays of one size; y may be x): np.maximum's bits."""
    for i in range(x.size):
        y[i] = activate(x[i], RELU, ZERO, ZERO)


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C", readonly=True),
                 types.float32[::1]), nogil=True, cache=True, error_model="numpy")
def add_rows(a, b, y):
    """y[i] = a[i] + b[i % b.size] (flat float32; y may be a or b): an Add of two tensors of one shape, or of
    a tensor and its last dimensions' worth (a bias), np.add's bits (one rounding). A b of one element is a
    scalar: one vectorized pass, not a.size rows of one (ViT's q * scale: 0.16 ms -> 0.02 ms)."""
    n = b.size
    if n == 1:
        s = b[0]
        for i in range(a.size):
            y[i] = a[i] + s
        return
    for r in range(0, a.size, n):
        for i in range(n):
            y[r + i] = a[r + i] + b[i]


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C", readonly=True),
                 types.float32[::1]), nogil=True, cache=True, error_model="numpy")
def mul_rows(a, b, y):
    """y[i] = a[i] * b[i % b.size]: add_rows' Mul (np.multiply's bits; a b of one element a scalar)."""
    n = b.size
    if n == 1:
        s = b[0]
        for i in range(a.size):
            y[i] = a[i] * s
        return
    for r in range(0, a.size, n):
        for i in range(n):
            y[r + i] = a[r + i] * b[i]
