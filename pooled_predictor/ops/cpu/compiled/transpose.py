"""Transpose whose two last output axes swap a strided source axis with the source's contiguous one:
batches of 2-D transposes, copied in square tiles.

    y[b, i, j] = x[bases[b] + j * stride + i]      (b < len(bases), i < rows, j < cols)

Y C-contiguous, viewed as (len(bases), rows, cols); X flat. The perms this covers put the source's
last (contiguous) axis second to last and another source axis last: BERT's keys (B, S, H, D) ->
(B, H, D, S), perm [0, 2, 3, 1]; ViT's (H, S, D) -> (H, D, S); a (C, H*W) -> (H*W, C) flatten. numpy's
copyto of the transposed view walks Y with X's column stride innermost, one element a step:
BERT's 128 x 12 x 64 keys took 134 us a copy on this machine against 16 for a plain copy, ViT's
12 x 197 x 64 117 us against 21 (one thread). Here 8 source rows at a time are walked along, their
8 x 8 blocks transposed in registers by reorder.py's transpose8 (eight vector loads, three rounds
of shuffles, eight stores), the edges a scalar loop: 26 and 31 us.

Elements of 4 bytes (the caller views X and Y as float32). Shuffles and moves only: the bits are
copied unchanged, NaN payloads included.
"""

from __future__ import annotations

from numba import types

from .jit import njit
from .reorder import _copy_row, transpose8

_F = types.Array(types.float32, 1, "C")


@njit(types.void(types.Array(types.float32, 1, "C", readonly=True), _F,
                 types.Array(types.int64, 1, "C", readonly=True), types.int64, types.int64, types.int64),
      nogil=True, cache=True, error_model="numpy")
def transpose_tiles(x, y, bases, rows, cols, stride):
    """y[(b * rows + i) * cols + j] = x[bases[b] + j * stride + i] for b < bases.size, i < rows,
    j < cols (module docstring): 8 source rows at a time, their 8 x 8 blocks along the row."""
    r8 = rows // 8 * 8
    c8 = cols // 8 * 8
    for b in range(bases.size):
        src = bases[b]
        dst = b * rows * cols
        for j0 in range(0, c8, 8):
            for i0 in range(0, r8, 8):
                transpose8(x, src + j0 * stride + i0, stride, y, dst + i0 * cols + j0, cols)
            for i in range(r8, rows):
                for j in range(j0, j0 + 8):
                    y[dst + i * cols + j] = x[src + j * stride + i]
        for i in range(rows):
            for j in range(c8, cols):
                y[dst + i * cols + j] = x[src + j * stride + i]


BYTE_TILE = 32  # a 32 x 32 tile of bytes: its 32 source rows' lines (2 KiB) stay in L1 while the tile is copied


@njit(types.void(types.Array(types.uint8, 1, "C", readonly=True), types.Array(types.uint8, 1, "C"),
                 types.Array(types.int64, 1, "C", readonly=True), types.int64, types.int64, types.int64),
      nogil=True, cache=True, error_model="numpy")
def transpose_tiles_bytes(x, y, bases, rows, cols, stride):
    """transpose_tiles for 1-byte elements (8-bit activations: the quantized transformers' head and patch
    transposes): BYTE_TILE x BYTE_TILE tiles, each element one load and one store. The strided walk touched one
    byte of each line it read: ViT's (768, 196) patch transpose took 2.6 ms, its keys' (197, 12, 64) -> (12, 64, 197)
    0.14 ms, one thread."""
    t = BYTE_TILE
    for b in range(bases.size):
        src = bases[b]
        dst = b * rows * cols
        for j0 in range(0, cols, t):
            j1 = min(cols, j0 + t)
            for i0 in range(0, rows, t):
                for i in range(i0, min(rows, i0 + t)):
                    for j in range(j0, j1):
                        y[dst + i * cols + j] = x[src + j * stride + i]


_C6 = types.Array(types.int64, 1, "C", readonly=True)


_INTS = (types.int8, types.int16, types.int32, types.int64)


@njit([types.void(types.Array(t, 1, "C", readonly=True), types.Array(t, 1, "C"), _C6, _C6, _C6) for t in _INTS],
      nogil=True, cache=True, error_model="numpy")
def view_copy(x, y, shape, xstrides, ystrides):
    """y[sum_k i_k ystrides[k]] = x[sum_k i_k xstrides[k]] for i_k < shape[k]: one strided view copied into
    another (6 axes, leading ones of size 1; strides in elements, >= 0; x and y flat from each view's first
    element), the bits as 1-, 2-, 4- or 8-byte integers: Slice, a Gather of one index, Concat's parts and
    Pad's interior, Transpose where the tiled kernel does not apply, as calls a native run takes (views.py).
    A last axis of stride 1 on both sides is one memcpy a run."""
    n5 = shape[5]
    xs5, ys5 = xstrides[5], ystrides[5]
    itemsize = x.itemsize
    for i0 in range(shape[0]):
        for i1 in range(shape[1]):
            for i2 in range(shape[2]):
                for i3 in range(shape[3]):
                    for i4 in range(shape[4]):
                        s = (i0 * xstrides[0] + i1 * xstrides[1] + i2 * xstrides[2] + i3 * xstrides[3]
                             + i4 * xstrides[4])
                        d = (i0 * ystrides[0] + i1 * ystrides[1] + i2 * ystrides[2] + i3 * ystrides[3]
                             + i4 * ystrides[4])
                        if xs5 == 1 and ys5 == 1:
                            _copy_row(y, d, x, s * itemsize, n5 * itemsize)
                        else:
                            for i in range(n5):
                                y[d + i * ys5] = x[s + i * xs5]


@njit([types.void(types.Array(t, 1, "C"), t) for t in _INTS], nogil=True, cache=True, error_model="numpy")
def fill_bits(a, value):
    """a[:] = value, the bits of a 1-, 2-, 4- or 8-byte element (Pad's constant as a call a native run takes)."""
    for i in range(a.size):
        a[i] = value
