"""Winograd F(2x2, 3x3) in numpy: a tiered Net's reference layout's 3x3 convolutions (issue 31).

A tiered Net's first forwards run the numpy reference kernels while the compiled ones load or
compile (engine/tiering.py). With a warm cache that first forward is most of the first result,
and for VGG16 (15.5 GMAC, thirteen 3x3 convolutions) it is BLAS's GEMM over im2col columns:
0.29 s of a 0.49 s warm first result on the 2-core AVX-512 host (OpenBLAS at its AVX2 kernel,
120 GFLOP/s a core), 0.37 s of 0.77 s on the AVX2 one. Loading the compiled kernels instead
costs more than that forward (numba's import, its first cache load and the Winograd weight
transforms: 1.5-1.8 s for VGG16), so the reference tier itself does fewer multiplies here.

F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
section 4.1): each 2x2 output tile of channel m is
    Y = A^T [ sum_c (G g_mc G^T) * (B^T d_c B) ] A
over the 4x4 input tiles d_c (stride 2, the zero padding included), with
    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]],
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]:
16 GEMMs U[ab] (M, C) @ V[ab] (C, tiles) instead of one (M, 9C) @ (9C, pixels), 2.25x fewer
multiplies. The transforms are adds and subtracts of strided numpy views (B^T and A^T hold only
0 and +-1; G's halves are exact in binary), done a band of tile rows at a time so V and the
products stay cache-sized. Its error is that of direct convolution's order (the conv tests'
tolerances; the compiled kernels use the same F(2x2) by default, ops/cpu/conv.py).

Only the reference tier takes it (compiled.reference_tier(): compiled kernels on, in
reference_kernels()); the plain numpy reference (POOLED_PREDICTOR_COMPILED=0) stays im2col, the
tested reference. U, the transformed weights (16/9 of W), is computed at every call into the Net's
scratch (3 ms for a 512 x 512 layer): kept by the kernel, VGG16's would be 105 MB of new memory
whose first allocation and touch took 30-40 ms a 512 x 512 layer in the first forward (measured on
the 2-core AVX-512 host; the arena's scratch is touched once and reused by every layer), more than
the transform.
"""

from __future__ import annotations

import math

import numpy as np

from . import reference_split

__all__ = ["MIN_CHANNELS", "MIN_PIXELS", "BAND_BYTES", "WinogradReference", "fits", "transform_weights"]

MIN_CHANNELS = 64
"""Input and output channels at least, and their product at least 2 MIN_CHANNELS^2: the input and output
transforms' passes grow with C + M, the GEMM's saving with C M (VGG16's 64 -> 64 at 224 x 224: 40 ms
either way, one core; 128 -> 128 at 112 x 112: 34 -> 25 ms)."""
MIN_PIXELS = 400
"""Output pixels a plane at least: U's transform, every call, grows with C M, the saving with C M pixels
(VGG16's 512 -> 512 at 14 x 14: 8 ms im2col, 11 ms here; at 28 x 28: 31 -> 22 ms)."""
BAND_BYTES = 4 << 20
"""V (16 C x tiles of a band) at most this many bytes: a band of tile rows at a time, as im2col's TILE_BYTES."""


def fits(g, dtype) -> bool:
    """Whether this conv geometry (shapes/conv.py's) takes the path: 2-D, 3x3, stride 1, dilation 1,
    group 1, float32, at least MIN_CHANNELS channels in and out, 2 MIN_CHANNELS^2 in times out, and
    MIN_PIXELS outputs a plane."""
    return (g.rank == 2 and g.kernel == (3, 3) and g.strides == (1, 1) and g.dilations == (1, 1) and g.group == 1
            and np.dtype(dtype) == np.float32 and g.in_channels >= MIN_CHANNELS and g.out_channels >= MIN_CHANNELS
            and g.in_channels * g.out_channels >= 2 * MIN_CHANNELS ** 2 and math.prod(g.out_shape) >= MIN_PIXELS)


def transform_weights(w: np.ndarray, u: np.ndarray | None = None, t: np.ndarray | None = None) -> np.ndarray:
    """U = G g G^T for every (output, input) channel pair.

    Args:
        w: (M, C, 3, 3) float32 (any strides).
        u: where to write U, (16, M, C) float32 (None: a new array).
        t: workspace, (4, 3, M, C) float32 (None: a new array).
    Returns:
        u: U[4a + b] the (a, b) entry of every pair's 4x4 transform.
    """
    m, c = w.shape[:2]
    u = np.empty((16, m, c), np.float32) if u is None else u
    t = np.empty((4, 3, m, c), np.float32) if t is None else t
    g = [[w[:, :, i, j] for j in range(3)] for i in range(3)]  # strided views: W is read where it is
    for j in range(3):  # G g: rows
        t[0, j] = g[0][j]
        np.add(g[0][j], g[2][j], out=t[1, j])
        np.subtract(t[1, j], g[1][j], out=t[2, j])
        t[1, j] += g[1][j]
        t[3, j] = g[2][j]
    t[1:3] *= np.float32(0.5)
    v = u.reshape(4, 4, m, c)  # (G g) G^T: columns
    v[:, 0] = t[:, 0]
    np.add(t[:, 0], t[:, 2], out=v[:, 1])
    np.subtract(v[:, 1], t[:, 1], out=v[:, 2])
    v[:, 1] += t[:, 1]
    v[:, 1:3] *= np.float32(0.5)
    v[:, 3] = t[:, 2]
    return u


class WinogradReference:
    """Y = X (*) W for one Conv node's geometry (fits()), without the bias (Conv adds it after).

    Shapes: X (N, C, H, W) float32, W (M, C, 3, 3), Y (N, M, OH, OW) as shapes/conv.py gives them,
    any pads. Scratch from the Net (ctx.scratch): U and its workspace, the padded input, a band's row
    transforms, V and the products.
    """

    def __init__(self, ctx, g, split: bool):
        self.geo = g
        c, m = g.in_channels, g.out_channels
        oh, ow = g.out_shape
        self.th, self.tw = -(-oh // 2), -(-ow // 2)  # tiles
        self.hp, self.wp = 2 * self.th + 2, 2 * self.tw + 2  # the padded input the tiles read
        self.slots = reference_split.THREADS if split else 1  # bands in flight: one a thread
        band = max(1, min(self.th, BAND_BYTES // (16 * c * self.tw * 4)))
        self.band = min(band, -(-self.th // self.slots))  # a band for each thread at least
        self.bands = [(t0, min(self.th, t0 + self.band)) for t0 in range(0, self.th, self.band)]
        self.even = oh % 2 == 0 and ow % 2 == 0  # the tiles cover Y exactly: written in place
        k, tiles = self.slots, self.band * self.tw
        self.u = ctx.scratch((16, m, c), np.float32)
        self.t = ctx.scratch((4, 3, m, c), np.float32)
        self.pad = ctx.scratch((c, self.hp, self.wp), np.float32)
        self.rows = ctx.scratch((k, 4, c, self.band, self.wp), np.float32)
        self.v = ctx.scratch((k, 16, c, tiles), np.float32)
        self.prod = ctx.scratch((k, 16, m, tiles), np.float32)
        self.crop = None if self.even else ctx.scratch((k, m, self.band, 2, self.tw, 2), np.float32)

    def __call__(self, x: np.ndarray, w: np.ndarray, out: np.ndarray) -> None:
        u = transform_weights(w, self.u.array, self.t.array)
        for n in range(x.shape[0]):
            self._pad(x[n])
            y = out[n]
            if self.slots > 1 and len(self.bands) > 1:  # the bands over the idle cores (reference_split.py)
                groups = [(u, y, slot, self.bands[slot::self.slots]) for slot in range(self.slots)]
                if reference_split.parallel(self._bands, groups):
                    continue
            self._bands(u, y, 0, self.bands)

    def _pad(self, x):
        """x into the zero border: rows [pt, pt + h), columns [pl, pl + w) (the pads, and the tiles' overhang)."""
        c, h, wd = x.shape
        pt, pl = self.geo.pads_begin
        p = self.pad.array
        p[:, :pt] = 0
        p[:, pt + h:] = 0
        p[:, pt:pt + h, :pl] = 0
        p[:, pt:pt + h, pl + wd:] = 0
        p[:, pt:pt + h, pl:pl + wd] = x

    def _bands(self, u, y, slot, bands):
        """Y's tile rows [t0, t1) of each band, in scratch slot `slot`."""
        tw, p = self.tw, self.pad.array
        c, m = p.shape[0], y.shape[0]
        oh, ow = self.geo.out_shape
        rows, v, prod = self.rows.array[slot], self.v.array[slot], self.prod.array[slot]
        for t0, t1 in bands:
            nb = t1 - t0
            # B^T d: the 4 rows of each tile row's transform, across the padded width
            r = rows[:, :, :nb]
            d = [p[:, 2 * t0 + i:2 * t1 + i:2] for i in range(4)]
            np.subtract(d[0], d[2], out=r[0])
            np.add(d[1], d[2], out=r[1])
            np.subtract(d[2], d[1], out=r[2])
            np.subtract(d[1], d[3], out=r[3])
            # (B^T d) B: V[4a + b] (C, nb, tw)
            vb = v[:, :, :nb * tw].reshape(4, 4, c, nb, tw)
            for a in range(4):
                col = [r[a][:, :, j:j + 2 * tw:2] for j in range(4)]
                np.subtract(col[0], col[2], out=vb[a, 0])
                np.add(col[1], col[2], out=vb[a, 1])
                np.subtract(col[2], col[1], out=vb[a, 2])
                np.subtract(col[1], col[3], out=vb[a, 3])
            pb = prod[:, :, :nb * tw]
            np.matmul(u, v[:, :, :nb * tw], out=pb)  # the 16 products
            # A^T M: rows 0 and 1 of each output tile, into products 0 and 3 (in place)
            q = pb.reshape(4, 4, m, nb, tw)
            np.subtract(q[1], q[3], out=q[3])
            q[3] -= q[2]
            q[0] += q[1]
            q[0] += q[2]
            # (A^T M) A: Y[2t + i, 2s + j]
            o = y.reshape(m, self.th, 2, tw, 2)[:, t0:t1] if self.even else self.crop.array[slot, :, :nb]
            for i, s in enumerate((q[0], q[3])):
                np.add(s[0], s[1], out=o[:, :, i, :, 0])
                o[:, :, i, :, 0] += s[2]
                np.subtract(s[1], s[2], out=o[:, :, i, :, 1])
                o[:, :, i, :, 1] -= s[3]
            if not self.even:
                r0, r1 = 2 * t0, min(oh, 2 * t1)
                y[:, r0:r1] = o.reshape(m, 2 * nb, 2 * tw)[:, :r1 - r0, :ow]
