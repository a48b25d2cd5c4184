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

The maximum pass also takes the row's minimum (_row_max_min); where every x - max lies in [-86, 0], the
exp is expf.exp32_normal (no clamp, one power-of-two factor: the same bits, the values being normal), as
for a recognizer's logits and attention scores. Zen 5, one thread, PP-OCR rec's 40 x 6906: 65 -> 56.5 us
(Haswell code 109 -> 91.5; onnxruntime's node about 35 and 55, its run's overhead taken out), in the model
0.064-0.068 -> 0.056 ms; 12 x 128 rows of 128 through softmax_rows_biased 88 -> 78 us (107 -> 101).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .expf import NORMAL_MIN, ONE, exp32_nonpositive, exp32_normal
from .jit import njit
from .rowreduce import _sum_lanes

_V16 = ir.VectorType(ir.FloatType(), 16)
_ACCS = 4  # independent max chains: a row of 197 (ViT) is 12 vectors, 3 steps of each chain


_EXTREMES = ((">", float("-inf")), ("<", float("inf")))  # (select's comparison, start): the maximum, the minimum


@intrinsic
def _row_max_min(typingctx, x, off, n):
    """(max, min) of x[off : off + n] as float32 ((-inf, +inf) for n = 0), in one pass: the n // 16 vectors
    <16 x float> in _ACCS accumulators each (vector i into i % _ACCS), combined and their lanes halved, then the
    last n % 16 values, each step select(v > a, v, a) (the minimum: v < a). Only for softmax: a NaN may or may not
    be the result, but the softmax of a row holding a NaN is NaN everywhere either way (x - max or the sum is
    NaN), and the maximum of the other values has one value (+0 and -0 aside, which give the same x - max for
    every x but -0, and exp(+0) = exp(-0)); so the same bits as a NaN-propagating maximum in any order. The
    minimum only chooses the exp (exp32_normal where min - max >= NORMAL_MIN, a NaN failing the test). The
    caller keeps x[off : off + n] in bounds. (rowreduce's _max_lanes, two 8-lane chains, is latency bound on
    short rows: ViT-B/16's 12 x 197 rows of 197, one thread, 0.10 ms a layer for the maximum alone.)"""
    ops = _EXTREMES
    sig = types.UniTuple(types.float32, len(ops))(x, off, n)

    def codegen(context, builder, signature, args):
        x_a, off_v, n_v = args
        data = context.make_array(signature.args[0])(context, builder, x_a).data
        base = builder.gep(data, [off_v])
        vptr = builder.bitcast(base, _V16.as_pointer())
        i64 = n_v.type
        nvec = builder.lshr(n_v, ir.Constant(i64, 4))
        groups = builder.udiv(nvec, ir.Constant(i64, _ACCS))
        done = builder.mul(groups, ir.Constant(i64, _ACCS))
        tail0 = builder.shl(nvec, ir.Constant(i64, 4))

        def pick(op):
            return lambda a, v: builder.select(builder.fcmp_ordered(op, v, a), v, a)

        accs = [[cgutils.alloca_once_value(builder, ir.Constant(_V16, [init] * 16)) for _ in range(_ACCS)]
                for _, init in ops]
        with cgutils.for_range(builder, groups) as loop:
            first = builder.mul(loop.index, ir.Constant(i64, _ACCS))
            for j in range(_ACCS):
                v = builder.load(builder.gep(vptr, [builder.add(first, ir.Constant(i64, j))]), align=4)
                for (op, _), acc in zip(ops, accs):
                    builder.store(pick(op)(builder.load(acc[j]), v), acc[j])
        with cgutils.for_range(builder, builder.sub(nvec, done)) as loop:
            v = builder.load(builder.gep(vptr, [builder.add(done, loop.index)]), align=4)
            for (op, _), acc in zip(ops, accs):
                builder.store(pick(op)(builder.load(acc[0]), v), acc[0])
        results = []
        for (op, _), acc in zip(ops, accs):
            mx = pick(op)
            vals = [builder.load(a) for a in acc]
            while len(vals) > 1:
                vals = [mx(vals[i], vals[i + 1]) for i in range(0, len(vals), 2)]
            a = vals[0]
            for half in (8, 4, 2, 1):
                mask = ir.Constant(ir.VectorType(ir.IntType(32), 16), [(i + half) % 16 for i in range(16)])
                a = mx(a, builder.shuffle_vector(a, ir.Constant(_V16, ir.Undefined), mask))
            first = builder.extract_element(a, ir.Constant(ir.IntType(32), 0))
            results.append(cgutils.alloca_once_value(builder, first))
        with cgutils.for_range(builder, builder.sub(n_v, tail0)) as loop:
            v = builder.load(builder.gep(base, [builder.add(tail0, loop.index)]))
            for (op, _), m in zip(ops, results):
                builder.store(pick(op)(builder.load(m), v), m)
        return context.make_tuple(builder, signature.return_type, [builder.load(m) for m in results])

    return sig, codegen


_CHUNK = 1024  # floats: a chunk of x and of y (8 KiB) stay in L1 between the exp and the sum


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _exp_shifted(x, y, o, n, m, normal):
    """y[o:o + n] = exp32_nonpositive(x[o:o + n] - m): one loop LLVM vectorizes (the slices tell it
    the bounds; y may be x); through exp32_normal (the same bits) where `normal`: every x - m in its range."""
    xs, ys = x[o:o + n], y[o:o + n]
    if normal:
        for i in range(n):
            ys[i] = exp32_normal(xs[i] - m)
    else:
        for i in range(n):
            ys[i] = exp32_nonpositive(xs[i] - m)


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), types.Array(types.float32, 1, "C"),
                 types.int64, types.int64), nogil=True, cache=True, error_model="numpy")
def softmax_rows(x, y, rows, d):
    """y[r*d:(r+1)*d] = softmax(x[r*d:(r+1)*d]) for r < rows; flat float32 arrays (y may be x).

    Three passes over a row: its maximum and minimum (_row_max_min: four 16-lane chains each; a NaN anywhere
    gives NaN everywhere);
    exp(x - max) written and summed chunk by chunk while the chunk is in L1 (_sum64's blocks of 256
    and its float64 order, so the sum has _sum64's bits); times the sum's reciprocal, as MLAS (within
    1 ulp of dividing). PP-OCR rec's 40 x 6625 logits, one thread: 0.237 -> 0.192 ms (max pass of
    scalar partial maxima and a separate sum pass before)."""
    n8 = d // 8 * 8
    for r in range(rows):
        o = r * d
        m, lo = _row_max_min(x, o, d)
        normal = lo - m >= NORMAL_MIN  # False with a NaN, +inf or -inf in the row
        total = 0.0
        for c0 in range(0, n8, _CHUNK):
            nc = min(_CHUNK, n8 - c0)
            _exp_shifted(x, y, o + c0, nc, m, normal)
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
def _exp_shifted_inplace(y, o, n, m, normal):
    """y[o:o + n] = exp32_nonpositive(y[o:o + n] - m) through one slice (exp32_normal where `normal`): with x
    and y the same array, _exp_shifted's two slices alias, LLVM's runtime overlap check fails and its scalar
    loop runs."""
    ys = y[o:o + n]
    if normal:
        for i in range(n):
            ys[i] = exp32_normal(ys[i] - m)
    else:
        for i in range(n):
            ys[i] = exp32_nonpositive(ys[i] - m)


@njit(types.void(types.Array(types.float32, 1, "C"), types.int64, types.int64, types.float32, types.int64,
                 _R1, _I1, types.int64), nogil=True, cache=True, error_model="numpy")
def softmax_rows_biased(y, rows, d, scale, mode, m, m_rows, m_step):
    """In place, y row r = softmax(t), t[i] = op(y[r*d + i], scale) + m[m_rows[r] + i * m_step] (flat
    float32 arrays): op is nothing (mode 0), * scale (1) or / scale (2), each rounded as the Mul / Div
    node it replaces; the + m (an additive mask or bias, broadcast by m_rows and m_step: 1 along the
    row, 0 one value a row) only when m_rows has rows entries (else no mask). Then softmax_rows' steps
    on the row while it is in cache: its maximum and minimum (_row_max_min), exp(t - max) and the
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
        mx, lo = _row_max_min(y, o, d)
        normal = lo - mx >= NORMAL_MIN
        total = 0.0
        for c0 in range(0, n8, _CHUNK):
            nc = min(_CHUNK, n8 - c0)
            _exp_shifted_inplace(y, o + c0, nc, mx, normal)
            for b0 in range(0, nc, 256):
                total += _sum_lanes(y, o + c0 + b0, min(256, nc - b0) // 8)
        for i in range(o + n8, o + d):
            y[i] = exp32_nonpositive(y[i] - mx)
            total += y[i]
        inv = ONE / np.float32(total)
        for i in range(d):
            yr[i] = yr[i] * inv
