"""ConvTranspose's tile scatter (kernel == stride, no padding), 2-D float32 (numba).

With kernel (kh, kw) equal to the strides and no padding, each input pixel
(i, j) owns the output tile rows i*kh .. i*kh + kh - 1, columns j*kw .. j*kw + kw - 1,
and the GEMM cols = W^T X (ops/cpu/conv.py) holds, per output channel m and
tap (a, c), the tile's value at (a, c):

    Y[n, m, i*kh + a, j*kw + c] = cols[n, (m*kh + a)*kw + c, i*W + j] + B[m]

The numpy path writes each tap with one strided copy (kh*kw passes over Y,
each with stride-kw stores); here each output row is written once, in order,
interleaving its kw tap rows (kw = 2 is written out: LLVM turns it into
vector shuffles), B added on the way. The same float32 additions as the
numpy path: bit-identical.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

_f4, _i8, _U = types.float32, types.int64, types.uint64
_R3 = types.Array(_f4, 3, "C", readonly=True)
_W4 = types.Array(_f4, 4, "C")
_R1 = types.Array(_f4, 1, "C", readonly=True)


@njit(types.void(_R3, _W4, _R1, types.boolean, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def tile_scatter(cols, y, bias, has_bias, kh, kw, r0, width):
    """Y rows of the input rows r0 .. r0 + cols.shape[2] / width - 1 from their GEMM columns.

    Args:
        cols: (N, M*kh*kw, L) float32, L = band rows * width (the band's columns).
        y: (N, M, OH, OW) float32, OW = width * kw; rows (r0 .. ) * kh .. written.
        bias: (M,) float32 (read when has_bias).
        kh, kw: the kernel (= the strides); r0: the band's first input row; width: X's W.
    """
    n_n, rows_n, length = cols.shape
    m_n, oh_n, ow_n = y.shape[1], y.shape[2], y.shape[3]
    band = length // width
    cf, yf = cols.reshape(-1), y.reshape(-1)
    uw, ukw = _U(width), _U(kw)
    for n in range(n_n):
        for m in range(m_n):
            b = bias[m] if has_bias else np.float32(0.0)
            for i in range(band):
                for a in range(kh):
                    yo = _U(((n * m_n + m) * oh_n + (r0 + i) * kh + a) * ow_n)
                    src = _U((n * rows_n + (m * kh + a) * kw) * length + i * width)
                    if kw == 2:
                        s1 = src + _U(length)
                        if has_bias:
                            for j in range(uw):
                                yf[yo + 2 * j] = cf[src + j] + b
                                yf[yo + 2 * j + 1] = cf[s1 + j] + b
                        else:
                            for j in range(uw):
                                yf[yo + 2 * j] = cf[src + j]
                                yf[yo + 2 * j + 1] = cf[s1 + j]
                    else:
                        for c in range(ukw):
                            sc = src + c * _U(length)
                            if has_bias:
                                for j in range(uw):
                                    yf[yo + j * ukw + c] = cf[sc + j] + b
                            else:
                                for j in range(uw):
                                    yf[yo + j * ukw + c] = cf[sc + j]
