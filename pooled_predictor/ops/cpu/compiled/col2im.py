"""ConvTranspose's tile path (kernel == stride, no padding), 2-D float32 (numba): the scatter of
the GEMM's columns, and for kernel width 2 the GEMM and the scatter in one pass.

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

tile_gemm_scatter_w2 (kernel (kh, 2), group 1) computes the columns in registers
and writes Y directly (see its section below): no column buffer, one pass over Y.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import njit
from .matmul import add_if, array_data, flag, k_loop, splat, vstore

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


# ---- the GEMM and the scatter in one pass, for kernel width 2 ------------------------------
# Y[n, m, i*kh + a, 2j + c] = B[m] + sum_ch W[ch, m, a, c] X[n, ch, i, j]: GEMM row
# r = (m*kh + a)*2 + c of W^T (M*kh*2, C) against X's columns. A micro-tile of up to 3 row
# pairs (c = 0, 1 of one (m, a)) x 16 input columns keeps its 12 accumulators in registers
# (compiled/matmul.py's k_loop over the C channels), then interleaves each pair into the
# 32 output columns 2j .. 2j + 31 of row i*kh + a and stores them: Y is written once, in
# order, and the columns never go through memory.

def _make_pair_micro(pairs: int):
    """micro(wt, w_off, ldw, x, x_off, ldx, k_n, y, yo0, yo1, yo2, b0, b1, b2, has_bias):
    for pair p < pairs (GEMM rows 2p, 2p + 1 from wt[w_off + r * ldw + k], k < k_n) and
    input columns x[x_off + k * ldx + j], j < 16: y[yo_p + 2j + c] = sum_k (+ b_p)."""
    lo_mask = ir.Constant(ir.VectorType(ir.IntType(32), 8), [0, 8, 1, 9, 2, 10, 3, 11])
    hi_mask = ir.Constant(ir.VectorType(ir.IntType(32), 8), [4, 12, 5, 13, 6, 14, 7, 15])
    c = lambda v: ir.Constant(ir.IntType(64), v)  # noqa: E731

    @intrinsic
    def micro(typingctx, wt, w_off, ldw, x, x_off, ldx, k_n, y, yo0, yo1, yo2, b0, b1, b2, has_bias):
        sig = types.void(wt, w_off, ldw, x, x_off, ldx, k_n, y, yo0, yo1, yo2, b0, b1, b2, has_bias)

        def codegen(context, builder, signature, args):
            _, w_off_v, ldw_v, _, x_off_v, ldx_v, k_n_v, _, yo0_v, yo1_v, yo2_v, b0_v, b1_v, b2_v, hb_v = args
            wptr = builder.gep(array_data(context, builder, signature, args, 0), [w_off_v])
            rows = [builder.gep(wptr, [builder.mul(ldw_v, c(r))]) for r in range(2 * pairs)]
            xptr = builder.gep(array_data(context, builder, signature, args, 3), [x_off_v])
            ydata = array_data(context, builder, signature, args, 7)
            final = k_loop(builder, 2 * pairs, rows, xptr, ldx_v, k_n_v)
            bvals = (b0_v, b1_v, b2_v)[:pairs]  # + B[m] after the sum, as the GEMM then the scatter's + B
            out = add_if(builder, final, flag(builder, hb_v), lambda: [splat(builder, bvals[i // 4])
                                                                      for i in range(len(final))])
            for p, yo in enumerate((yo0_v, yo1_v, yo2_v)[:pairs]):
                yptr = builder.gep(ydata, [yo])
                for v in range(2):  # columns 8v .. 8v + 7 of taps c = 0 (row 2p) and c = 1 (row 2p + 1)
                    even, odd = out[4 * p + v], out[4 * p + 2 + v]
                    vstore(builder, builder.shuffle_vector(even, odd, lo_mask), yptr, 2 * v)
                    vstore(builder, builder.shuffle_vector(even, odd, hi_mask), yptr, 2 * v + 1)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_p1, _p2, _p3 = (_make_pair_micro(p) for p in (1, 2, 3))
_R2 = types.Array(_f4, 2, "C", readonly=True)
_R4 = types.Array(_f4, 4, "C", readonly=True)


@njit(types.void(_R2, _R4, _W4, _R1, types.boolean, _i8), nogil=True, cache=True, error_model="numpy")
def tile_gemm_scatter_w2(wt, x, y, bias, has_bias, kh):
    """ConvTranspose, kernel (kh, 2) = strides, no padding, group 1, float32: Y in one pass.

    Args:
        wt: W^T, (M*kh*2, C): row (m*kh + a)*2 + c is W[:, m, a, c].
        x: (N, C, H, W); y: (N, M, H*kh, W*2), written whole; bias: (M,) (read when has_bias).
    Per input row i and 16 input columns, every tile of 3 (m, a) pairs; the last W % 16
    columns by a scalar loop (the same sums in the same order, not fused).
    """
    n_n, c_n, h_n, w_n = x.shape
    m_n, oh_n, ow_n = y.shape[1], y.shape[2], y.shape[3]
    q_n = m_n * kh
    xf, yf = x.reshape(-1), y.reshape(-1)
    w16 = w_n // 16 * 16
    hw = h_n * w_n
    z = np.float32(0.0)
    for n in range(n_n):
        for i in range(h_n):
            for j0 in range(0, w16, 16):
                x_off = n * c_n * hw + i * w_n + j0
                for q0 in range(0, q_n, 3):
                    pairs = min(3, q_n - q0)
                    m0, m1, m2 = q0 // kh, (q0 + 1) // kh, (q0 + 2) // kh
                    base = n * m_n * oh_n * ow_n + i * kh * ow_n + 2 * j0
                    yo0 = base + m0 * oh_n * ow_n + (q0 - m0 * kh) * ow_n
                    yo1 = base + m1 * oh_n * ow_n + (q0 + 1 - m1 * kh) * ow_n
                    yo2 = base + m2 * oh_n * ow_n + (q0 + 2 - m2 * kh) * ow_n
                    b0 = bias[m0] if has_bias else z
                    b1 = bias[m1] if has_bias and pairs > 1 else z
                    b2 = bias[m2] if has_bias and pairs > 2 else z
                    if pairs == 3:
                        _p3(wt, 2 * q0 * c_n, c_n, xf, x_off, hw, c_n, yf, yo0, yo1, yo2, b0, b1, b2, has_bias)
                    elif pairs == 2:
                        _p2(wt, 2 * q0 * c_n, c_n, xf, x_off, hw, c_n, yf, yo0, yo1, yo2, b0, b1, b2, has_bias)
                    else:
                        _p1(wt, 2 * q0 * c_n, c_n, xf, x_off, hw, c_n, yf, yo0, yo1, yo2, b0, b1, b2, has_bias)
            for j in range(w16, w_n):
                for q in range(q_n):
                    m = q // kh
                    yo = ((n * m_n + m) * oh_n + i * kh + q - m * kh) * ow_n + 2 * j
                    for cc in range(2):
                        s = z
                        for ch in range(c_n):
                            s += wt[2 * q + cc, ch] * xf[(n * c_n + ch) * hw + i * w_n + j]
                        yf[yo + cc] = s + bias[m] if has_bias else s
