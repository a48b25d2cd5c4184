"""Sigmoid (logistic) of float32 arrays, vectorized (numba, no SVML needed).

    sigmoid(x) = 1 / (1 + exp(-x))  for x >= 0,   e / (1 + e) with e = exp(x)  for x < 0

(ONNX Sigmoid; the two forms keep it stable: exp's argument is never positive.)
exp is compiled/expf.py's exp32_nonpositive (Cephes' expf, branch-free so the loop vectorizes;
subnormal results down to exp(-103.9) rounded once).

Error, measured over every float32 in [-104, 89]: at most 2 ulp from the
correctly rounded sigmoid (float64 expit rounded), as scipy's float32 expit
(the numpy kernel, also 2 ulp); tests/ops/test_compiled_pooling.py checks a
sample. Measured 0.72 ms vs scipy's 2.0 ms on 480x640 (onnxruntime 0.35 ms), one thread.
"""

from __future__ import annotations

from numba import types

from .expf import ONE, ZERO, exp32_nonpositive
from .jit import njit

_f4 = types.float32
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")


@njit(types.void(_R1, _W1), nogil=True, cache=True, error_model="numpy")
def sigmoid(x, y):
    """y = sigmoid(x) elementwise for flat float32 arrays of one size (y may be x)."""
    for i in range(x.size):
        v = x[i]
        z = -v if v >= ZERO else v  # -|x|, NaN stays NaN
        e = exp32_nonpositive(z)
        num = ONE if v >= ZERO else e
        y[i] = num / (ONE + e)
