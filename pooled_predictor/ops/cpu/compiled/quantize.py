"""Per-tensor QuantizeLinear / DequantizeLinear between float32 and 8 bits, in one pass each.

    quantize:   y = saturate(rint(x / scale) + zp)     (float32 division, round half to even)
    dequantize: y = float32(x - zp) * scale            (the difference exact, one float32 product)

The same arithmetic as ops/cpu/quantize.py's numpy kernels (the tested reference)
for float32 x and a float32 per-tensor scale, in one vectorized loop instead of
numpy's five passes. The clamp is applied in float before the rounding: its bounds
(the type's range less zp) are integers, so clamping first changes nothing (and
keeps the conversion in range).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .jit import njit
from .qgemm import signed

_F1 = types.Array(types.float32, 1, "C")
_R1F = types.Array(types.float32, 1, "C", readonly=True)


@njit([types.void(_R1F, types.Array(t, 1, "C"), types.float32, types.int64) for t in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def quantize_f32(x, y, scale, zp):
    """y = saturate(rint(x / scale) + zp) over flat arrays of equal size; y uint8 or int8."""
    lo = np.float32(-128.0 if signed(y) else 0.0) - np.float32(zp)
    hi = np.float32(127.0 if signed(y) else 255.0) - np.float32(zp)
    z = np.int32(zp)
    for i in range(np.uint64(x.size)):
        f = min(max(np.rint(x[i] / scale), lo), hi)
        y[i] = np.int32(f) + z


@njit([types.void(types.Array(t, 1, "C", readonly=True), _F1, types.float32, types.int64)
       for t in (types.uint8, types.int8)], nogil=True, cache=True, error_model="numpy")
def dequantize_f32(x, y, scale, zp):
    """y = float32(x - zp) * scale over flat arrays of equal size; x uint8 or int8."""
    z = np.int32(zp)
    for i in range(np.uint64(x.size)):
        y[i] = np.float32(np.int32(x[i]) - z) * scale


@njit([types.void(types.Array(types.float32, 2, "C", readonly=True), types.Array(types.uint8, 1, "C"), types.float32,
                  types.int64)], nogil=True, cache=True, error_model="numpy")
def quantize_transpose(a, x, scale, zp):
    """x[k * M + m] = saturate(rint(a[m, k] / scale) + zp) as uint8, a (M, K) float32: A quantized (as
    DynamicQuantizeLinear does, for its scale and zero point) and transposed, K rows of M."""
    m_n, k_n = a.shape
    lo = np.float32(0.0) - np.float32(zp)
    hi = np.float32(255.0) - np.float32(zp)
    z = np.int32(zp)
    u = np.uint64
    for m in range(m_n):
        for k in range(k_n):
            f = min(max(np.rint(a[m, k] / scale), lo), hi)
            x[u(k) * u(m_n) + u(m)] = np.int32(f) + z


def _qadd_sig(t):
    a = types.Array(t, 1, "C", readonly=True)
    return types.void(a, a, types.Array(t, 1, "C"), types.float64, types.float64, types.float64)


@njit([_qadd_sig(types.uint8), _qadd_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_add_same(a, b, out, ra, rb, k):
    """out = saturate(rint(float32(a ra + float32(b rb + k)))) over flat arrays of one size and type.

    ra = float32(a_scale / c_scale), rb likewise, k = float32(c_zp - (ra a_zp + rb b_zp)) (as
    ops/cpu/quantized_contrib.qlinear_add computes them): the float64 sums are exact for 8-bit
    operands, so each float32 rounding is the one of MLAS's fused multiply-adds, and the result
    is that kernel's (and the numpy reference's) bit for bit.
    """
    lo = -128.0 if signed(out) else 0.0
    hi = 127.0 if signed(out) else 255.0
    for i in range(np.uint64(out.size)):
        t = np.float64(np.float32(np.float64(b[i]) * rb + k))
        v = np.float64(np.float32(np.float64(a[i]) * ra + t))
        out[i] = np.int32(min(max(np.rint(v), lo), hi))
