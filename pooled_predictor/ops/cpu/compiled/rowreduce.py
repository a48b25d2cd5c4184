"""Sums, means and maxima of contiguous float32 rows (numba): reductions over trailing axes.

    y[r] = scale * sum(x[r, :])    (ReduceMean and GlobalAveragePool: scale 1/d; ReduceSum: 1)
    y[r] = max(x[r, :])            (ReduceMax, GlobalMaxPool)

for X viewed as (rows, d): a reduction over the trailing axes of a C-contiguous
tensor (NCHW's H, W: GlobalAveragePool, ReduceMean axes [2, 3]) reads each row
once, from start to end, and stores one value. numpy's reduction over two axes
walks an nditer row by row and its mean divides in a second pass (MobileNetV2's
1280x7x7 GlobalAveragePool: 0.072 ms numpy, 0.017 here, onnxruntime 0.039, one thread,
benchmarks/node_kernels.py).

Summation: blocks of 256 floats, each summed as 32 vectors of 8 float32 lanes into two
accumulators (even and odd vectors: 16 terms a lane; LLVM IR, since numba has no vector
type and LLVM does not vectorize an ordered float sum), the lanes added pairwise; the
block sums, the last d % 8 values and the scale in float64, rounded once to float32.
A block's sum is rounded at most 15 + 1 + 3 times along any term's path, so
|error| <= 19 u sum|x| + u |result|, u = 2^-24 (Higham 2002, sec. 4.2): about numpy's
blocked pairwise float32 sum (16 terms a lane too), which then divides in float32;
tests/ops/test_compiled_reduce.py checks both against a float64
reference. NaN and inf propagate as in any sum.

Maximum: the same two 8-lane accumulators, of select(v > m or v is NaN, v, m): the
value np.max gives, NaN propagating (1280x7x7: 0.083 ms numpy, 0.024 here).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import njit

_f4, _i8 = types.float32, types.int64
_V8 = ir.VectorType(ir.FloatType(), 8)
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")


def _make_lanes(op: str):
    """An intrinsic lanes(x, off, nvec) -> float32 reducing the nvec vectors <8 x float> at x[off],
    x[off + 8], ... with op ("add", "max" or "sumsq"): the even ones in order into one 8-lane
    accumulator, the odd ones into another (two chains: the latency is hidden), then
    a = op(even, odd) and its lanes as op(op(op(0, 4), op(2, 6)), op(op(1, 5), op(3, 7))). "max" is
    select(v > a or v is NaN, v, a): NaN propagates, no masked store. "sumsq" accumulates v * v
    (fmul then fadd, each rounded: no FMA) and adds the accumulators and lanes (LayerNormalization's
    variance, compiled/layernorm.py). The caller keeps x[off : off + 8 * nvec] in bounds."""

    def combine(builder, a, v):
        if op in ("add", "sumsq"):
            return builder.fadd(a, v)
        take = builder.or_(builder.fcmp_ordered(">", v, a), builder.fcmp_unordered("uno", v, v))
        return builder.select(take, v, a)

    def accumulate(builder, a, v):
        return combine(builder, a, builder.fmul(v, v) if op == "sumsq" else v)

    start = ir.Constant(_V8, [float("-inf") if op == "max" else 0.0] * 8)

    @intrinsic
    def lanes(typingctx, x, off, nvec):
        sig = types.float32(x, off, nvec)

        def codegen(context, builder, signature, args):
            x_a, off_v, n_v = args
            data = context.make_array(signature.args[0])(context, builder, x_a).data
            vptr = builder.bitcast(builder.gep(data, [off_v]), _V8.as_pointer())
            acc = [cgutils.alloca_once_value(builder, start) for _ in range(2)]

            def step(a, index):
                v = builder.load(builder.gep(vptr, [index]), align=4)
                builder.store(accumulate(builder, builder.load(a), v), a)

            one = ir.Constant(n_v.type, 1)
            with cgutils.for_range(builder, builder.lshr(n_v, one)) as loop:
                even = builder.shl(loop.index, one)
                step(acc[0], even)
                step(acc[1], builder.or_(even, one))
            with builder.if_then(builder.trunc(n_v, ir.IntType(1))):
                step(acc[0], builder.sub(n_v, one))
            a = combine(builder, builder.load(acc[0]), builder.load(acc[1]))
            for half in (4, 2, 1):
                mask = ir.Constant(ir.VectorType(ir.IntType(32), 8), [(i + half) % 8 for i in range(8)])
                a = combine(builder, a, builder.shuffle_vector(a, ir.Constant(_V8, ir.Undefined), mask))
            return builder.extract_element(a, ir.Constant(ir.IntType(32), 0))

        return sig, codegen

    return lanes


_sum_lanes, _max_lanes, _sumsq_lanes = _make_lanes("add"), _make_lanes("max"), _make_lanes("sumsq")


@njit(nogil=True, cache=True, error_model="numpy")
def _sum64(x, o, d):
    """sum(x[o : o + d]) in float64: blocks of 256 summed in 8 float32 lanes (_sum_lanes), the block
    sums and the last d % 8 values added in float64."""
    total = 0.0
    n8 = d // 8 * 8
    for b0 in range(0, n8, 256):
        total += _sum_lanes(x, o + b0, min(256, n8 - b0) // 8)
    for i in range(o + n8, o + d):
        total += x[i]
    return total


@njit(types.void(_R1, _W1, _i8, _i8, types.float64), nogil=True, cache=True, error_model="numpy")
def sum_rows(x, y, rows, d, scale):
    """y[r] = scale * sum(x[r*d:(r+1)*d]) for r < rows.

    Args:
        x: (rows * d,) float32, the C-contiguous input flattened.
        y: (rows,) float32, written.
        rows, d: the number of rows and their length (d = 0: y = 0).
        scale: what each sum is multiplied by, in float64 (1/d for a mean, 1 for a sum).
    """
    for r in range(rows):
        y[r] = np.float32(_sum64(x, r * d, d) * scale)


@njit(nogil=True, cache=True, error_model="numpy")
def _mx(a, b):
    """max(a, b) with NaN propagating (np.maximum); a select, no branch."""
    return b if (b > a) | (b != b) else a


@njit(types.void(_R1, _W1, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def max_rows(x, y, rows, d):
    """y[r] = max(x[r*d:(r+1)*d]) for r < rows, NaN propagating (np.max's value; -inf for d = 0).

    Args:
        x: (rows * d,) float32, the C-contiguous input flattened.
        y: (rows,) float32, written.
    """
    n8 = d // 8 * 8
    for r in range(rows):
        m = _max_lanes(x, r * d, n8 // 8)
        for i in range(r * d + n8, r * d + d):
            m = _mx(m, x[i])
        y[r] = m
