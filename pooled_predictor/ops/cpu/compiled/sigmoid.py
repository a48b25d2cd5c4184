"""Sigmoid (logistic) of float32 arrays, vectorized (numba, no SVML needed).

    sigmoid(x) = 1 / (1 + exp(-x))  for x >= 0,   e / (1 + e) with e = exp(x)  for x < 0

(ONNX Sigmoid; the two forms keep it stable: exp's argument is never positive.)
exp(z), z = -|x| <= 0, is Cephes' expf (Moshier, Cephes Math Library): z = n ln2 + r
with n = round(z / ln2), ln2 split in two parts (Cody-Waite) so r is exact,
exp(r) by a degree-6 polynomial on |r| <= ln2 / 2, times 2^n. 2^n is built from
the float32 bits (n + 127) << 23, as two factors 2^(n - n//2) * 2^(n//2) so that
the subnormal results (z down to -103.9) come out right. numba's math.exp calls
libm's expf one element at a time; this vectorizes (AVX2: 8 lanes; 2^n by an
int32 -> float32 bitcast).

Error, measured over every float32 in [-104, 89]: at most 2 ulp from the
correctly rounded sigmoid (float64 expit rounded), as scipy's float32 expit
(the numpy kernel, also 2 ulp); tests/ops/test_compiled_pooling.py checks a
sample. Measured 0.72 ms vs scipy's 2.0 ms on 480x640 (onnxruntime 0.35 ms), one thread.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_f = np.float32
_LOG2E = _f(1.44269504088896341)
_C1 = _f(0.693359375)
_C2 = _f(-2.12194440e-4)
_P = (_f(1.9875691500e-4), _f(1.3981999507e-3), _f(8.3334519073e-3), _f(4.1665795894e-2),
      _f(1.6666665459e-1), _f(5.0000001201e-1))
_ONE, _HALF, _ZERO = _f(1.0), _f(0.5), _f(0.0)
_BIAS, _MANTISSA = _f(127.0), _f(2.0 ** 23)  # float32 bits of 2^n: (n + 127) << 23, exact in float32
_MIN_Z = _f(-104.0)  # exp(-104) < the smallest subnormal / 2: rounds to 0
_f4 = types.float32
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")


@intrinsic
def _bits_as_float32(typingctx, bits):
    """The float32 whose IEEE bits are the low 32 bits of the integer `bits` (an LLVM
    truncation and bitcast: vectorizes)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = builder.trunc(args[0], context.get_value_type(types.int32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(low, context.get_value_type(types.float32))

    return types.float32(bits), codegen


@njit(types.void(_R1, _W1), nogil=True, cache=True, error_model="numpy")
def sigmoid(x, y):
    """y = sigmoid(x) elementwise for flat float32 arrays of one size (y may be x)."""
    p0, p1, p2, p3, p4, p5 = _P
    for i in range(x.size):
        v = x[i]
        z = -v if v >= _ZERO else v            # -|x|, NaN stays NaN
        z = _MIN_Z if z < _MIN_Z else z
        k = np.floor(z * _LOG2E + _HALF)
        r = (z - k * _C1) - k * _C2
        p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
        e = (p * (r * r) + r) + _ONE          # exp(r), r in [-ln2/2, ln2/2]
        half = np.floor(k * _HALF)            # k in [-150, 0]; 2^k = 2^half * 2^(k - half)
        e = e * _bits_as_float32(np.int32((half + _BIAS) * _MANTISSA))
        e = e * _bits_as_float32(np.int32(((k - half) + _BIAS) * _MANTISSA))
        num = _ONE if v >= _ZERO else e
        y[i] = num / (_ONE + e)
