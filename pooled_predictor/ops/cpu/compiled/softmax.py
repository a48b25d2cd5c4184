"""Softmax along contiguous rows in one compiled pass per row, with a vectorizable float32 exp.

    y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r))    (ONNX Softmax-13)

numpy's float32 exp runs at about 3 ns an element on this AVX2 machine and
Softmax made five passes over memory; here each row is read for its maximum,
then exp(x - max) is written, summed, and multiplied by the sum's reciprocal
(as onnxruntime's MLAS does; within 1 ulp of dividing), while the row is in
cache (a PP-OCR recognizer row is 6625 classes, 26 KiB).

exp32: compiled/expf.py (Cephes' expf, branch-free so the loop vectorizes, within 2 ulp).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .expf import ONE, ZERO, exp32


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
        inv = ONE / _row_sum(yr, d)  # times the reciprocal, as onnxruntime's MLAS does: within 1 ulp of / sum
        for i in range(d):
            yr[i] = yr[i] * inv
