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

from .jit import njit
from .rowreduce import _sum64, _sumsq_lanes

_f4 = types.float32
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")
_i8 = types.int64
_V8 = ir.VectorType(ir.FloatType(), 8)


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
