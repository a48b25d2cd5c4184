"""Softmax along contiguous rows in one compiled pass per row, with a vectorizable float32 exp.

    y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r))    (ONNX Softmax-13)

numpy's float32 exp runs at about 3 ns an element on this AVX2 machine and
Softmax made five passes over memory; here each row is read for its maximum,
then exp(x - max) is written and summed in one loop, then scaled, while the
row is in cache (a PP-OCR recognizer row is 6625 classes, 26 KiB).

exp32: Cephes' expf (Moshier 1992): n = round(x log2 e); r = x - n ln 2 (ln 2
in two parts, so r is exact); exp(r) by its degree-7 minimax polynomial on
[-ln2/2, ln2/2]; times 2^n, as two powers of two built in the exponent bits
(an LLVM bitcast: numba has no scalar float view). Branch-free, so LLVM vectorizes the loop. Error at
most 2 ulp against the correctly rounded exp (checked over 2^24 points in
tests/ops/test_compiled_softmax.py); inputs below -87.3 give 0 (the result
would be subnormal: softmax's terms that small vanish against the max's 1),
above 88.7 give +inf, NaN propagates.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_f4 = np.float32
LOG2E = _f4(1.44269504088896341)
LN2_HI = _f4(0.693359375)
LN2_LO = _f4(-2.12194440e-4)
HI = _f4(88.7228391)
LO = _f4(-87.3365448)  # exp(LO) = the smallest normal float32
P0, P1, P2, P3, P4, P5 = (_f4(1.9875691500e-4), _f4(1.3981999507e-3), _f4(8.3334519073e-3),
                          _f4(4.1665795894e-2), _f4(1.6666665459e-1), _f4(5.0000001201e-1))
ONE, ZERO, MAGIC = _f4(1.0), _f4(0.0), _f4(12582912.0)  # 1.5 * 2^23: adding it rounds to an integer


@intrinsic
def _as_float32(typingctx, bits):
    """The float32 whose bits are the int32 `bits`."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@njit("float32(float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def exp32(x):
    """exp(x) in float32, at most 2 ulp from the correctly rounded value (module docstring)."""
    if x != x:
        return x
    big = x > HI
    small = x < LO
    c = HI if big else x
    c = LO if small else c
    n = (c * LOG2E + MAGIC) - MAGIC  # round to nearest integer, branch-free
    r = c - n * LN2_HI
    r = r - n * LN2_LO
    rr = r * r
    p = P0 * r + P1
    p = p * r + P2
    p = p * r + P3
    p = p * r + P4
    p = p * r + P5
    p = p * rr + r + ONE
    k = np.int32(n)
    h = k >> np.int32(1)  # 2^n as 2^h * 2^(n - h): each factor normal for n in [-126, 128]
    e1 = _as_float32(np.int32((h + np.int32(127)) << np.int32(23)))
    e2 = _as_float32(np.int32((k - h + np.int32(127)) << np.int32(23)))
    v = (p * e1) * e2
    v = np.float32(np.inf) if big else v
    return ZERO if small else v


@njit("float32(float32[::1], int64)", nogil=True, cache=True, error_model="numpy", inline="always")
def _row_max(v, d):
    """max(v[:d]) with 8 partial maxima (a loop LLVM vectorizes). NaNs may be skipped: a row with a
    NaN still comes out all NaN, through its term exp(NaN - m) in the sum."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.float32(-np.inf)
    d8 = d - d % 8
    for i in range(0, d8, 8):
        m0 = max(m0, v[i])
        m1 = max(m1, v[i + 1])
        m2 = max(m2, v[i + 2])
        m3 = max(m3, v[i + 3])
        m4 = max(m4, v[i + 4])
        m5 = max(m5, v[i + 5])
        m6 = max(m6, v[i + 6])
        m7 = max(m7, v[i + 7])
    m = max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))
    for i in range(d8, d):
        m = max(m, v[i])
    return m


@njit("float32(float32[::1], int64)", nogil=True, cache=True, error_model="numpy", inline="always")
def _row_sum(v, d):
    """sum(v[:d]): blocks of 256 summed in 8 float32 lanes (a loop LLVM vectorizes; 32 terms a lane),
    the block sums added in float64: about numpy's pairwise-summation accuracy."""
    total = 0.0
    for b0 in range(0, d, 256):
        b1 = min(d, b0 + 256)
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = ZERO
        e8 = b0 + (b1 - b0) // 8 * 8
        for i in range(b0, e8, 8):
            s0 += v[i]
            s1 += v[i + 1]
            s2 += v[i + 2]
            s3 += v[i + 3]
            s4 += v[i + 4]
            s5 += v[i + 5]
            s6 += v[i + 6]
            s7 += v[i + 7]
        s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
        for i in range(e8, b1):
            s += v[i]
        total += s
    return np.float32(total)


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C"),
                 types.int64, types.int64), nogil=True, cache=True, error_model="numpy")
def softmax_rows(x, y, rows, d):
    """y[r*d:(r+1)*d] = softmax(x[r*d:(r+1)*d]) for r < rows; flat float32 arrays (y may be x)."""
    for r in range(rows):
        xr, yr = x[r * d:(r + 1) * d], y[r * d:(r + 1) * d]
        m = _row_max(xr, d)
        for i in range(d):
            yr[i] = exp32(xr[i] - m)
        s = _row_sum(yr, d)
        for i in range(d):
            yr[i] = yr[i] / s
