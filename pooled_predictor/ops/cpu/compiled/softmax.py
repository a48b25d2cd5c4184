"""Softmax along contiguous rows in one compiled pass per row, with a vectorizable float32 exp.

    y[r, :] = exp(x[r, :] - max_r) / sum(exp(x[r, :] - max_r))    (ONNX Softmax-13)

numpy's float32 exp runs at about 3 ns an element on this AVX2 machine and
Softmax made five passes over memory; here each row is read for its maximum,
then exp(x - max) is written and summed 1024 floats at a time while they are in
L1, and multiplied by the sum's reciprocal (as onnxruntime's MLAS does; within
1 ulp of dividing) while the row is in cache (a PP-OCR recognizer row is 6625
classes, 26 KiB).

exp32_nonpositive: compiled/expf.py (Cephes' expf, branch-free so the loop vectorizes, within 2 ulp). The sum:
compiled/rowreduce.py's (8-lane blocks of 256 in LLVM IR, block sums in float64); 40x6625 rows:
0.57 ms on a Zen 1 core (0.70 with exp32's overflow test, 1.0-1.2 ms with a scalar sum, division and
the previous exp; onnxruntime 0.41 in-model); 0.19 ms on a Zen 3 core with the chunked pass (0.24
before it; onnxruntime's Softmax node alone 0.14, its run included).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .expf import ONE, exp32_nonpositive
from .jit import njit
from .rowreduce import _max_lanes, _mx, _sum_lanes


_CHUNK = 1024  # floats: a chunk of x and of y (8 KiB) stay in L1 between the exp and the sum


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _exp_shifted(x, y, o, n, m):
    """y[o:o + n] = exp32_nonpositive(x[o:o + n] - m): one loop LLVM vectorizes (the slices tell it
    the bounds; y may be x)."""
    xs, ys = x[o:o + n], y[o:o + n]
    for i in range(n):
        ys[i] = exp32_nonpositive(xs[i] - m)


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C"),
                 types.int64, types.int64), nogil=True, cache=True, error_model="numpy")
def softmax_rows(x, y, rows, d):
    """y[r*d:(r+1)*d] = softmax(x[r*d:(r+1)*d]) for r < rows; flat float32 arrays (y may be x).

    Three passes over a row: its maximum (8-lane vectors, rowreduce's _max_lanes: NaN propagates);
    exp(x - max) written and summed chunk by chunk while the chunk is in L1 (_sum64's blocks of 256
    and its float64 order, so the sum has _sum64's bits); times the sum's reciprocal, as MLAS (within
    1 ulp of dividing). PP-OCR rec's 40 x 6625 logits, one thread: 0.237 -> 0.192 ms (max pass of
    scalar partial maxima and a separate sum pass before)."""
    n8 = d // 8 * 8
    for r in range(rows):
        o = r * d
        m = _max_lanes(x, o, n8 // 8)
        for i in range(o + n8, o + d):
            m = _mx(m, x[i])
        total = 0.0
        for c0 in range(0, n8, _CHUNK):
            nc = min(_CHUNK, n8 - c0)
            _exp_shifted(x, y, o + c0, nc, m)
            for b0 in range(0, nc, 256):
                total += _sum_lanes(y, o + c0 + b0, min(256, nc - b0) // 8)
        for i in range(o + n8, o + d):
            y[i] = exp32_nonpositive(x[i] - m)
            total += y[i]
        inv = ONE / np.float32(total)  # times the reciprocal, as MLAS: within 1 ulp of / sum
        yr = y[o:o + d]
        for i in range(d):
            yr[i] = yr[i] * inv


_R1 = types.Array(types.float32, 1, "C", readonly=True)
_I1 = types.Array(types.int64, 1, "C", readonly=True)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _exp_shifted_inplace(y, o, n, m):
    """y[o:o + n] = exp32_nonpositive(y[o:o + n] - m) through one slice: with x and y the same array,
    _exp_shifted's two slices alias, LLVM's runtime overlap check fails and its scalar loop runs."""
    ys = y[o:o + n]
    for i in range(n):
        ys[i] = exp32_nonpositive(ys[i] - m)


@njit(types.void(types.Array(types.float32, 1, "C"), types.int64, types.int64, types.float32, types.int64,
                 _R1, _I1, types.int64), nogil=True, cache=True, error_model="numpy")
def softmax_rows_biased(y, rows, d, scale, mode, m, m_rows, m_step):
    """In place, y row r = softmax(t), t[i] = op(y[r*d + i], scale) + m[m_rows[r] + i * m_step] (flat
    float32 arrays): op is nothing (mode 0), * scale (1) or / scale (2), each rounded as the Mul / Div
    node it replaces; the + m (an additive mask or bias, broadcast by m_rows and m_step: 1 along the
    row, 0 one value a row) only when m_rows has rows entries (else no mask). Then softmax_rows' steps
    on the row while it is in cache: its maximum (_max_lanes, NaN propagating), exp(t - max) and the
    float64 sum chunk by chunk (_sum64's blocks and order), times the sum's reciprocal.

    Every loop reads and writes one slice of y (and reads m): scores and probabilities in one
    array, two slices of it would alias and LLVM's vectorized loops would fall back to scalar ones
    at run time (BERT-base's 12 x 128 rows of 128: 0.55-0.59 ms a layer before, one thread)."""
    masked = m_rows.size > 0
    n8 = d // 8 * 8
    for r in range(rows):
        o = r * d
        yr = y[o:o + d]
        if mode == 1:
            for i in range(d):
                yr[i] = yr[i] * scale
        elif mode == 2:
            for i in range(d):
                yr[i] = yr[i] / scale
        if masked:
            mo = m_rows[r]
            if m_step == 1:
                mr = m[mo:mo + d]
                for i in range(d):
                    yr[i] = yr[i] + mr[i]
            elif m_step == 0:
                c = m[mo]
                for i in range(d):
                    yr[i] = yr[i] + c
            else:
                for i in range(d):
                    yr[i] = yr[i] + m[mo + i * m_step]
        mx = _max_lanes(y, o, n8 // 8)
        for i in range(o + n8, o + d):
            mx = _mx(mx, y[i])
        total = 0.0
        for c0 in range(0, n8, _CHUNK):
            nc = min(_CHUNK, n8 - c0)
            _exp_shifted_inplace(y, o + c0, nc, mx)
            for b0 in range(0, nc, 256):
                total += _sum_lanes(y, o + c0 + b0, min(256, nc - b0) // 8)
        for i in range(o + n8, o + d):
            y[i] = exp32_nonpositive(y[i] - mx)
            total += y[i]
        inv = ONE / np.float32(total)
        for i in range(d):
            yr[i] = yr[i] * inv
