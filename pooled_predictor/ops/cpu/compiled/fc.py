"""A fully connected layer with its activation in one call: Y = act(A @ B + c), B a packed weight, float32.

FusedGemm's compiled path (ops/cpu/fused.py) when its Gemm takes matmul.py's
product (B a weight, c absent or a bias over N): the product, then the
activation over Y while Y is still in cache, in the same call, so a small
FusedGemm (a recurrent cell inside a Loop body, one row) costs one dispatch, not
two. The activation codes are epilogue.py's (the numpy kernels' float32
operations, the same bits as the activation node) and TANH: recurrent.py's
tanh32, x P(x^2) / Q(x^2) (at most 4.9 ulp, 2.9e-7 absolute from tanh, as the
RNN/GRU/LSTM kernels compute it), which vectorizes where a call of the C
library's tanhf per element would not.
"""

from __future__ import annotations

import numpy as np
from numba import types

from .epilogue import activate_range
from .jit import njit
from .matmul import matmul_const, matmul_const16
from .recurrent import tanh32

TANH = -1
"""The code of Tanh here (epilogue.py's codes are 0..5: NONE, RELU, ...)."""

_F1 = types.Array(types.float32, 1, "C")
_R1 = types.Array(types.float32, 1, "C", readonly=True)
_I, _f4 = types.int64, types.float32


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _activate(yf, n, code, p0, p1):
    """The activation `code` over yf[:n] (matmul_const_act's)."""
    if code == TANH:
        for i in range(n):
            yf[i] = tanh32(yf[i])
    elif code != 0:
        activate_range(yf, np.uint64(0), np.uint64(n), code, p0, p1)


_ACT_SIG = types.void(_R1, _I, _I, types.boolean, _R1, _F1, _I, _F1, _I, _f4, _f4)


@njit(_ACT_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const_act(af, rows, k_n, bias, xp, yf, n_n, ws, code, p0, p1):
    """yf (rows x n_n, flat) = act(A @ B (+ c)): matmul.py's matmul_const (its arguments, the same sums),
    then the activation `code` (epilogue.py's activate_range codes, codes.RANGE_CODES; or TANH) with
    parameters p0, p1 over the rows x n_n outputs."""
    matmul_const(af, rows, k_n, bias, xp, yf, n_n, ws)
    _activate(yf, rows * n_n, code, p0, p1)


@njit(_ACT_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const_act16(af, rows, k_n, bias, xp, yf, n_n, ws, code, p0, p1):
    """matmul_const_act on matmul.py's matmul_const16 (xp packed in PANEL16 panels; the same bits)."""
    matmul_const16(af, rows, k_n, bias, xp, yf, n_n, ws)
    _activate(yf, rows * n_n, code, p0, p1)


def act_kernel(lanes: int):
    """matmul_const_act16 for a product packed at 16 lanes (ops/cpu/matmul.py's ConstRightProduct.lanes),
    else matmul_const_act."""
    return matmul_const_act16 if lanes == 16 else matmul_const_act
