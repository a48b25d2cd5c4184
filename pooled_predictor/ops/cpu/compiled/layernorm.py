"""LayerNormalization over contiguous float32 rows, each row read from memory once (numba).

    mean = sum(x) / d,  D = x - mean,  var = sum(D * D) / d,  inv = 1 / sqrt(var + epsilon)
    y = (D * inv) * scale + bias                                     (ONNX LayerNormalization-17)

for X viewed as (rows, d), scale and bias one value per column (d,). numpy made six
passes over the whole tensor (mean, subtract, square-sum, scale, multiply, add), each
row long gone from L1 by the next pass; here a row (a transformer's 768 floats, 3 KiB)
is summed, centred into Y, square-summed and scaled while it stays in L1 (onnxruntime
also normalizes row by row, with one pass for sum and sum of squares).

Rounding: the mean is float64 block sums of 8-lane float32 partial sums
(compiled/rowreduce.py's _sum64); the squared deviations are summed in float32
vector partial sums (the loop compiled with LLVM's reassoc flag alone: lanes of
d / 32 sequential terms, then added together), |error| <= (d / 32 + 5) u sum D^2
(Higham 2002, sec. 4.2), about numpy's pairwise float32 sum. D, D * inv, times scale, plus bias are
rounded one by one as the spec's function body (no FMA contraction), so Y is within a
few ulp of the numpy reference path (ops/cpu/normalization.py).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .jit import njit
from .rowreduce import _sum64

_f4 = types.float32
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")
_i8 = types.int64
_V8 = ir.VectorType(ir.FloatType(), 8)


@intrinsic
def _sumsq_lanes(typingctx, x, off, nvec):
    """sum of x[i]^2 over the nvec vectors <8 x float> at x[off], x[off + 8], ...: the even vectors'
    squares into one 8-lane accumulator, the odd ones' into another (two chains hide the add latency),
    each square and sum rounded (fmul then fadd: no FMA); the two added and the lanes summed pairwise.
    The caller keeps x[off : off + 8 * nvec] in bounds."""
    sig = types.float32(x, off, nvec)

    def codegen(context, builder, signature, args):
        x_a, off_v, n_v = args
        data = context.make_array(signature.args[0])(context, builder, x_a).data
        vptr = builder.bitcast(builder.gep(data, [off_v]), _V8.as_pointer())
        acc = [cgutils.alloca_once_value(builder, ir.Constant(_V8, [0.0] * 8)) for _ in range(2)]

        def step(a, index):
            v = builder.load(builder.gep(vptr, [index]), align=4)
            builder.store(builder.fadd(builder.load(a), builder.fmul(v, v)), a)

        one = ir.Constant(n_v.type, 1)
        with cgutils.for_range(builder, builder.lshr(n_v, one)) as loop:
            even = builder.shl(loop.index, one)
            step(acc[0], even)
            step(acc[1], builder.or_(even, one))
        with builder.if_then(builder.trunc(n_v, ir.IntType(1))):
            step(acc[0], builder.sub(n_v, one))
        a = builder.fadd(builder.load(acc[0]), builder.load(acc[1]))
        for half in (4, 2, 1):
            mask = ir.Constant(ir.VectorType(ir.IntType(32), 8), [(i + half) % 8 for i in range(8)])
            a = builder.fadd(a, builder.shuffle_vector(a, ir.Constant(_V8, ir.Undefined), mask))
        return builder.extract_element(a, ir.Constant(ir.IntType(32), 0))

    return sig, codegen


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _center_square_sum(x, o, y, d, mean):
    """y[o:o+d] = x[o:o+d] - mean; returns sum of the squares of y[o:o+d] in float64: blocks of 256
    in 8-lane float32 partial sums (_sumsq_lanes), the block sums and the last d % 8 in float64."""
    for i in range(d):  # (indices as o + i: the form LLVM vectorizes here; range(o, o + d) it does not)
        y[o + i] = x[o + i] - mean
    total = 0.0
    n8 = d // 8 * 8
    for b0 in range(0, n8, 256):
        total += _sumsq_lanes(y, o + b0, min(256, n8 - b0) // 8)
    for i in range(o + n8, o + d):
        total += float(y[i] * y[i])
    return total


@njit(types.void(_R1, _R1, _R1, _W1, _i8, _i8, types.float32, types.boolean, _W1, _W1), nogil=True, cache=True,
      error_model="numpy")
def layernorm_rows(x, scale, bias, y, rows, d, epsilon, has_bias, mean_out, inv_out):
    """Y rows = LayerNormalization(X rows) (module docstring), flat C-contiguous float32 arrays.

    Args:
        x: (rows * d,) input; y: (rows * d,) output (not x).
        scale, bias: (d,) each (bias read only when has_bias).
        mean_out, inv_out: (rows,) each, the Mean and InvStdDev outputs, or (0,) when absent.
    """
    one = np.float32(1.0)
    inv_d = 1.0 / d
    want_mean, want_inv = mean_out.size > 0, inv_out.size > 0
    for r in range(rows):
        o = r * d
        mean = np.float32(_sum64(x, o, d) * inv_d)
        var = np.float32(_center_square_sum(x, o, y, d, mean) * inv_d)
        inv = one / np.sqrt(var + epsilon)
        if has_bias:
            for j in range(d):
                y[o + j] = (y[o + j] * inv) * scale[j] + bias[j]
        else:
            for j in range(d):
                y[o + j] = (y[o + j] * inv) * scale[j]
        if want_mean:
            mean_out[r] = mean
        if want_inv:
            inv_out[r] = inv
