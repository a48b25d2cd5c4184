"""Rearranging and generating CPU kernels: Trilu, CumSum, CumProd, OneHot,
EyeLike, DepthToSpace, SpaceToDepth, ReverseSequence, CenterCropPad.

Geometry that depends only on shapes and static inputs (masks, block
permutations, crop windows) is fixed at reshape; the kernels copy with numpy
views.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.rearrange import crop_pad_geometry, one_hot_depth


def _scalar(ctx, i: int, default: int | None = None) -> int | None:
    """A static scalar input as an int (None when dynamic or absent and no default)."""
    if not ctx.has_input(i):
        return default
    return int(np.asarray(ctx.value(i)).reshape(-1)[0]) if ctx.is_static(i) else None


# ---- Trilu -------------------------------------------------------------------------
@kernel("Trilu", since=14)
class Trilu:
    """Y = the upper (upper=1: j - i >= k) or lower (j - i <= k) triangle of the last two axes of X.

    k: optional scalar input (default 0); the other elements are 0.
    Spec: Operators.md#Trilu.
    """

    def __init__(self, ctx, *, upper=1):
        self.n, self.m = ctx.shape(0)[-2:]
        self.upper = bool(upper)
        k = _scalar(ctx, 1, 0)
        self.mask = None if k is None else self._mask(k)

    def _mask(self, k: int) -> np.ndarray:
        diff = np.arange(self.m)[None, :] - np.arange(self.n)[:, None]
        return diff >= k if self.upper else diff <= k

    def __call__(self, x, k=None, *, out):
        mask = self.mask if self.mask is not None else self._mask(int(np.asarray(k).reshape(-1)[0]))
        out.fill(0)
        np.copyto(out, x, where=mask)


# ---- CumSum, CumProd ---------------------------------------------------------------
class _Cumulative:
    """Y[i] = X[0] op ... op X[i] along `axis` (an input); exclusive leaves X[i] out, reverse runs backwards."""

    scan = staticmethod(np.cumsum)
    identity = 0

    def __init__(self, ctx, *, exclusive=0, reverse=0):
        self.rank = len(ctx.shape(0))
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)
        a = _scalar(ctx, 1)
        self.axis = None if a is None else self._axis(a)

    def _axis(self, a: int) -> int:
        if not -self.rank <= a < self.rank:
            raise ValueError(f"axis={a} out of range for rank {self.rank}")
        return a + self.rank if a < 0 else a

    def __call__(self, x, axis, *, out):
        ax = self.axis if self.axis is not None else self._axis(int(np.asarray(axis).reshape(-1)[0]))
        if self.reverse:
            x, out = np.flip(x, ax), np.flip(out, ax)
        if x.shape[ax] == 0:
            return
        if self.exclusive:
            head = [slice(None)] * x.ndim
            head[ax] = slice(0, 1)
            out[tuple(head)] = self.identity
            src, dst = list(head), list(head)
            src[ax], dst[ax] = slice(0, -1), slice(1, None)
            x, out = x[tuple(src)], out[tuple(dst)]
        self.scan(x, axis=ax, out=out)


@kernel("CumSum", since=(11, 14))
class CumSum(_Cumulative):
    """Cumulative sum along `axis` (exclusive, reverse). Spec: Operators.md#CumSum."""


@kernel("CumProd", since=26)
class CumProd(_Cumulative):
    """Cumulative product along `axis` (exclusive, reverse). Spec: Operators.md#CumProd."""

    scan = staticmethod(np.cumprod)
    identity = 1


# ---- OneHot, EyeLike -----------------------------------------------------------------
@kernel("OneHot", since=(9, 11, 28))
class OneHot:
    """output[..., i at axis, ...] = on_value where indices[...] == i, off_value elsewhere.

    values = [off_value, on_value]; depth is a scalar of any numeric type
    (rounded down); indices in [-depth, -1] count from the end (OneHot-11);
    other indices out of [0, depth) give an all-off row. Spec: Operators.md#OneHot.
    """

    def __init__(self, ctx, *, axis=-1):
        rank = len(ctx.shape(0)) + 1
        self.axis = axis + rank if axis < 0 else axis
        self.depth = one_hot_depth(ctx)

    def __call__(self, indices, depth, values, *, out):
        off, on = np.asarray(values).reshape(2)
        out.fill(off)
        idx = np.asarray(indices)
        idx = (np.floor(idx) if idx.dtype.kind == "f" else idx).astype(np.int64)
        idx = np.where(idx < 0, idx + self.depth, idx)
        valid = (idx >= 0) & (idx < self.depth)
        np.moveaxis(out, self.axis, -1)[valid, idx[valid]] = on


@kernel("EyeLike", since=(9, 22))
def eye_like(x, *, out, dtype=None, k=0):
    """Y = ones on the k-th diagonal (k > 0 above, k < 0 below), zeros elsewhere; X's 2-D shape.

    dtype: the output's ONNX elem type (default X's). Spec: Operators.md#EyeLike.
    """
    out.fill(0)
    n, m = out.shape
    rows = np.arange(max(0, -k), min(n, m - k)) if m - k > 0 else np.arange(0)
    out[rows, rows + k] = 1


# ---- DepthToSpace, SpaceToDepth ------------------------------------------------------
@kernel("DepthToSpace", since=(1, 11, 13, 28))
class DepthToSpace:
    """(N, C, H, W) -> (N, C / b^2, H * b, W * b): channel blocks move to b x b pixel blocks.

    mode DCR (default): the block offset is the outer part of the channel
    index (depth, column, row); CRD (DepthToSpace-11+): the inner part.
    Spec: Operators.md#DepthToSpace.
    """

    def __init__(self, ctx, *, blocksize, mode="DCR"):
        n, c, h, w = ctx.shape(0)
        b = int(blocksize)
        c2 = c // (b * b)
        if mode == "DCR":
            self.src, self.perm = (n, b, b, c2, h, w), (0, 3, 4, 1, 5, 2)
        else:
            self.src, self.perm = (n, c2, b, b, h, w), (0, 1, 4, 2, 5, 3)
        self.dst = (n, c2, h, b, w, b)

    def __call__(self, x, *, out):
        np.copyto(out.reshape(self.dst), x.reshape(self.src).transpose(self.perm))


@kernel("SpaceToDepth", since=(1, 13, 28))
class SpaceToDepth:
    """(N, C, H, W) -> (N, C * b^2, H / b, W / b): each b x b pixel block becomes channels.

    The inverse of DepthToSpace in the same mode: DCR (the default) puts
    X[n, c, h * b + r, w * b + s] in channel (r * b + s) * C + c; CRD
    (SpaceToDepth-28) in channel c * b^2 + r * b + s. Spec: Operators.md#SpaceToDepth.
    """

    def __init__(self, ctx, *, blocksize, mode="DCR"):
        n, c, h, w = ctx.shape(0)
        b = int(blocksize)
        self.src = (n, c, h // b, b, w // b, b)
        if mode == "DCR":
            self.perm, self.dst = (0, 3, 5, 1, 2, 4), (n, b, b, c, h // b, w // b)
        else:
            self.perm, self.dst = (0, 1, 3, 5, 2, 4), (n, c, b, b, h // b, w // b)

    def __call__(self, x, *, out):
        np.copyto(out.reshape(self.dst), x.reshape(self.src).transpose(self.perm))


# ---- ReverseSequence, CenterCropPad --------------------------------------------------
@kernel("ReverseSequence", since=(10, 28))
class ReverseSequence:
    """Y = X with the first sequence_lens[b] steps along time_axis reversed, for every batch b.

    Steps at or past sequence_lens[b] are copied as they are; lengths are
    clamped to [0, T]. time_axis and batch_axis are 0 and 1 in either order.
    Spec: Operators.md#ReverseSequence.
    """

    def __init__(self, ctx, *, batch_axis=1, time_axis=0):
        shape = ctx.shape(0)
        self.t, self.b = shape[time_axis], shape[batch_axis]
        self.time_first = time_axis == 0
        self.steps = np.arange(self.t)[:, None]  # (T, 1)
        self.batches = np.arange(self.b)[None, :]  # (1, B)

    def __call__(self, x, sequence_lens, *, out):
        lens = np.clip(np.asarray(sequence_lens, np.int64).reshape(1, self.b), 0, self.t)
        src = np.where(self.steps < lens, lens - 1 - self.steps, self.steps)  # (T, B)
        if self.time_first:
            out[...] = x[src, self.batches]
        else:
            out[...] = x[self.batches.T, src.T]


@kernel("CenterCropPad", since=18)
class CenterCropPad:
    """Y = X cropped or zero-padded about the centre to `shape` along `axes` (default all).

    Spec: Operators.md#CenterCropPad.
    """

    def __init__(self, ctx, *, axes=None):
        _, self.src, self.dst = crop_pad_geometry(ctx)

    def __call__(self, x, shape, *, out):
        out.fill(0)
        out[self.dst] = x[self.src]
