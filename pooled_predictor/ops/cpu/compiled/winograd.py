"""Winograd minimal filtering F(m x m, 3 x 3) for stride-1 3x3 convolutions (float32, NCHW).

Lavin & Gray 2016, "Fast Algorithms for Convolutional Neural Networks": for an
output tile Y (m x m) of one channel pair, with the (m+2) x (m+2) input patch d
and the 3x3 filter g,

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

and summed over input channels the element-wise product becomes, for each of
the (m+2)^2 positions xi, one GEMM over all tiles T:

    M[xi] (M_out, T) = U[xi] (M_out, C) @ V[xi] (C, T)

with U = G g G^T (the weights, transformed once per Program and shared
read-only by every Net) and V = B^T d B (the input transform, compiled). The
multiplies per output drop from 9 to (m+2)^2 / m^2: 4 for F(2x2,3x3) (2.25x
fewer), 2.25 for F(4x4,3x3) (4x fewer).

Error (Lavin & Gray, section 5; float32): F(2x2,3x3) uses the points 0, +-1
and its transforms have entries in {0, +-1/2, +-1}: its error is that of
direct convolution. F(4x4,3x3) uses 0, +-1, +-2, infinity; the transform
entries grow to 5 (B), 8 (A) and 1/24 (G), so each output carries an absolute
error up to about 1e2 x machine epsilon x sum |d| |g| over its window
(measured, tests/ops/test_winograd.py: max |Y - Y_direct| / max |Y| < 2e-6 on
random data), well inside the 1e-4 x max|reference| required of every model.
Larger tiles (F(6x6,3x3)) lose accuracy quickly and are not used.

Matrices: Lavin & Gray 2016, section 4 (F(2x2,3x3)) and the F(4x4,3x3) set of
their reference implementation (the wincnn points 0, +-1, +-2).
"""

from __future__ import annotations

import numpy as np
from numba import types

from .epilogue import activate_range
from .jit import njit

_f4, _i8 = types.float32, types.int64

# F(2x2, 3x3)
G2 = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
BT2 = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
AT2 = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
# F(4x4, 3x3)
G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)
BT4 = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
AT4 = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)
MATRICES = {2: (G2, BT2, AT2), 4: (G4, BT4, AT4)}


def transform_weights(w: np.ndarray, m: int) -> np.ndarray:
    """U = G g G^T for every (out, in) filter pair, computed in float64 once.

    Args:
        w: (M, C, 3, 3) weights.
        m: the output tile size, 2 or 4.
    Returns:
        (alpha^2, M, C) float32, C-contiguous, read-only; alpha = m + 2.
    """
    g = MATRICES[m][0]
    a = m + 2
    u = np.empty((a, a, w.shape[0], w.shape[1]), np.float32)
    for m0 in range(0, w.shape[0], 64):  # 64 output channels at a time: a float64 temporary that small
        u[:, :, m0:m0 + 64] = np.einsum("ik,mckl,jl->ijmc", g, np.asarray(w[m0:m0 + 64], np.float64), g)
    u = u.reshape(a * a, w.shape[0], w.shape[1])
    u.flags.writeable = False
    return u


@njit(types.UniTuple(_f4, 6)(_f4, _f4, _f4, _f4, _f4, _f4), nogil=True, cache=True, error_model="numpy")
def _bt4(d0, d1, d2, d3, d4, d5):
    """B^T d for F(4x4,3x3), one column (BT4's rows written out)."""
    return (np.float32(4.0) * d0 - np.float32(5.0) * d2 + d4,
            -np.float32(4.0) * (d1 + d2) + d3 + d4,
            np.float32(4.0) * (d1 - d2) - d3 + d4,
            np.float32(2.0) * (d3 - d1) - d2 + d4,
            np.float32(2.0) * (d1 - d3) - d2 + d4,
            np.float32(4.0) * d1 - np.float32(5.0) * d3 + d5)


@njit(types.UniTuple(_f4, 4)(_f4, _f4, _f4, _f4, _f4, _f4), nogil=True, cache=True, error_model="numpy")
def _at4(m0, m1, m2, m3, m4, m5):
    """A^T m for F(4x4,3x3), one column (AT4's rows written out)."""
    a, b = m1 + m2, m1 - m2
    c, e = m3 + m4, m3 - m4
    return (m0 + a + c, b + np.float32(2.0) * e, a + np.float32(4.0) * c, b + np.float32(8.0) * e + m5)


_IN_SIG = types.void(types.Array(_f4, 4, "C"), types.Array(_f4, 3, "C"), types.Array(_f4, 2, "C"),
                     types.Array(_f4, 2, "C"), _i8, _i8, _i8, _i8, _i8)


@njit(_IN_SIG, nogil=True, cache=True, error_model="numpy")
def input_transform(x, v, d, t, ph, pw, tiles_h, tiles_w, m):
    """v[i*a + j, c, tile] = (B^T d B)[i, j] for every input channel and tile (BT2, BT4 written out).

    Args:
        x: (N, C, H, W); v: (a*a, C, N * tiles_h * tiles_w);
        d, t: (a, a) scratch; ph, pw: pads_begin; m: output tile size, 2 or 4 (a = m + 2).
    The patch of tile (ty, tx) starts at row ty*m - ph, column tx*m - pw;
    entries outside X are the zero padding.
    """
    n_batch, c_n, h, wd = x.shape
    a = m + 2
    for n in range(n_batch):
        for c in range(c_n):
            plane = x[n, c]
            for ty in range(tiles_h):
                y0 = ty * m - ph
                for tx in range(tiles_w):
                    x0 = tx * m - pw
                    inside = y0 >= 0 and x0 >= 0 and y0 + a <= h and x0 + a <= wd
                    for i in range(a):
                        for j in range(a):
                            yy, xx = y0 + i, x0 + j
                            if inside or (0 <= yy < h and 0 <= xx < wd):
                                d[i, j] = plane[yy, xx]
                            else:
                                d[i, j] = 0.0
                    tile = (n * tiles_h + ty) * tiles_w + tx
                    if a == 6:  # F(4x4,3x3) written out: t = B^T d, then rows of (B^T d) B
                        for j in range(6):
                            t0, t1, t2, t3, t4, t5 = _bt4(d[0, j], d[1, j], d[2, j], d[3, j], d[4, j], d[5, j])
                            t[0, j], t[1, j], t[2, j], t[3, j], t[4, j], t[5, j] = t0, t1, t2, t3, t4, t5
                        for i in range(6):
                            r0, r1, r2, r3, r4, r5 = _bt4(t[i, 0], t[i, 1], t[i, 2], t[i, 3], t[i, 4], t[i, 5])
                            v[i * 6, c, tile] = r0
                            v[i * 6 + 1, c, tile] = r1
                            v[i * 6 + 2, c, tile] = r2
                            v[i * 6 + 3, c, tile] = r3
                            v[i * 6 + 4, c, tile] = r4
                            v[i * 6 + 5, c, tile] = r5
                        continue
                    if a == 4:  # F(2x2,3x3) written out: B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]
                        for j in range(4):
                            d0, d1, d2, d3 = d[0, j], d[1, j], d[2, j], d[3, j]
                            t[0, j], t[1, j], t[2, j], t[3, j] = d0 - d2, d1 + d2, d2 - d1, d1 - d3
                        for i in range(4):
                            t0, t1, t2, t3 = t[i, 0], t[i, 1], t[i, 2], t[i, 3]
                            v[i * 4, c, tile] = t0 - t2
                            v[i * 4 + 1, c, tile] = t1 + t2
                            v[i * 4 + 2, c, tile] = t2 - t1
                            v[i * 4 + 3, c, tile] = t1 - t3


_OUT_SIG = types.void(types.Array(_f4, 3, "C"), types.Array(_f4, 4, "C"), types.Array(_f4, 1, "C", readonly=True),
                      types.Array(_f4, 2, "C"), _i8, _i8, _i8, _i8, _f4, _f4)


@njit(_OUT_SIG, nogil=True, cache=True, error_model="numpy")
def output_transform(mb, out, bias, q, tiles_h, tiles_w, m, act, p0, p1):
    """out tile = act(A^T M A + bias), cropped at the right and bottom edges (AT2, AT4 written out).

    Args:
        mb: (a*a, M, N * tiles_h * tiles_w) the GEMM results; out: (N, M, OH, OW);
        bias: (M,); q: (a, a) scratch; m: output tile size, 2 or 4 (a = m + 2);
        act, p0, p1: activation (epilogue.py's activate_range codes: codes.RANGE_CODES).
    """
    n_batch, m_out, oh, ow = out.shape
    a = m + 2
    for n in range(n_batch):
        for mo in range(m_out):
            bv = bias[mo]
            for ty in range(tiles_h):
                for tx in range(tiles_w):
                    tile = (n * tiles_h + ty) * tiles_w + tx
                    if a == 6:  # F(4x4,3x3) written out
                        for j in range(6):
                            q0, q1, q2, q3 = _at4(mb[j, mo, tile], mb[6 + j, mo, tile], mb[12 + j, mo, tile],
                                                  mb[18 + j, mo, tile], mb[24 + j, mo, tile], mb[30 + j, mo, tile])
                            q[0, j], q[1, j], q[2, j], q[3, j] = q0, q1, q2, q3
                        for i in range(4):
                            y = ty * 4 + i
                            if y >= oh:
                                break
                            o0, o1, o2, o3 = _at4(q[i, 0], q[i, 1], q[i, 2], q[i, 3], q[i, 4], q[i, 5])
                            x0 = tx * 4
                            if x0 + 4 <= ow:
                                out[n, mo, y, x0] = o0 + bv
                                out[n, mo, y, x0 + 1] = o1 + bv
                                out[n, mo, y, x0 + 2] = o2 + bv
                                out[n, mo, y, x0 + 3] = o3 + bv
                            else:
                                vals = (o0, o1, o2, o3)
                                for j in range(ow - x0):
                                    out[n, mo, y, x0 + j] = vals[j] + bv
                        continue
                    if a == 4:  # F(2x2,3x3) written out: A^T = [[1,1,1,0],[0,1,-1,-1]]
                        for j in range(4):
                            m0, m1, m2, m3 = mb[j, mo, tile], mb[4 + j, mo, tile], mb[8 + j, mo, tile], \
                                mb[12 + j, mo, tile]
                            q[0, j], q[1, j] = m0 + m1 + m2, m1 - m2 - m3
                        for i in range(2):
                            y = ty * 2 + i
                            if y >= oh:
                                break
                            x0 = tx * 2
                            out[n, mo, y, x0] = (q[i, 0] + q[i, 1] + q[i, 2]) + bv
                            if x0 + 1 < ow:
                                out[n, mo, y, x0 + 1] = (q[i, 1] - q[i, 2] - q[i, 3]) + bv
            if act != 0:
                activate_range(out[n, mo].ravel(), np.uint64(0), np.uint64(oh * ow), act, p0, p1)
