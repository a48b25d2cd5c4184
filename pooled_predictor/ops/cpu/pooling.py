"""Pooling CPU kernels: MaxPool (with the optional Indices), AveragePool, LpPool,
GlobalAveragePool, GlobalMaxPool.

The window geometry is onnxruntime's (ops/shapes/pooling.py). Windows are never
materialized and the input is never padded: for every kernel tap the outputs
whose input index falls inside the input form one contiguous, strided range,
so a tap is one numpy call over a strided view (a loop over kernel taps, never
over pixels). Padding therefore never takes part: a max only sees input
values (the spec's -inf padding), a sum only input values, and the average
divides by the number of taps that count (count_include_pad).

Max and sum are separable over a box window, so the spatial axes are reduced
one after the other (sum(k) taps instead of prod(k)), through two workspace
buffers. MaxPool's Indices then walk the prod(k) taps in reverse order marking
where X equals Y, so that, as in onnxruntime, the first maximum in window
order (h, then w, then d) wins.

2-D float32 MaxPool and AveragePool run compiled (compiled/pooling.py: one
pass per output row, no workspace planes; AveragePool windows that tile the
input without overlap their own loop) when compiled.active(); the numpy passes
above are the tested reference and run every other case. GlobalAveragePool's
and GlobalMaxPool's float32 planes are reduced compiled as reduce.py's
trailing axes.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..registry import kernel
from ..shapes.pooling import AxisWindow, pool_geometry
from . import compiled
from .reduce import TrailingReduce


def _lowest(dtype: np.dtype):
    """What a max starts from: the dtype's lowest finite value (onnxruntime's
    numeric_limits::lowest, what a window with no input tap returns)."""
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


class _SeparablePool:
    """Reduce the spatial axes one by one with `combine` (np.maximum or np.add).

    For each active axis (skipped: kernel 1, stride 1, no padding), the taps
    write into the next buffer: the first two taps that cover every output are
    combined into it in one call (or the one is copied), the others combined in
    place; outputs no tap reaches keep `init`.
    """

    def __init__(self, ctx, geometry: list[AxisWindow], combine, init):
        self.combine, self.init = combine, init
        shape = list(ctx.shape(0))
        dtype = ctx.dtype(0)
        self.steps = []      # (out_shape, [(output slices, input slices)], number of leading full taps)
        for i, g in enumerate(geometry):
            if g.kernel == 1 and g.stride == 1 and g.head == 0 and g.out == g.size:
                continue
            axis = i + 2
            shape[axis] = g.out
            lead = (slice(None),) * axis
            taps = [(lead + (slice(lo, hi),),
                     lead + (slice(start, start + (hi - lo - 1) * g.stride + 1, g.stride),))
                    for _, lo, hi, start in g.taps()]
            full = [t for t in taps if t[0][axis] == slice(0, g.out)]
            taps = full[:2] + [t for t in taps if t not in full[:2]]
            self.steps.append((tuple(shape), taps, min(len(full), 2)))
        sizes = [int(np.prod(s, dtype=np.int64)) for s, _, _ in self.steps[:-1]]
        self.buffers = [ctx.scratch((max(sizes[k::2], default=0),), dtype) for k in (0, 1)] if sizes else []

    def __call__(self, x, out):
        if not self.steps:
            np.copyto(out, x)
            return
        src = x
        for n, (shape, taps, full) in enumerate(self.steps):
            if n == len(self.steps) - 1:
                dst = out
            else:
                dst = self.buffers[n % 2].array[:int(np.prod(shape, dtype=np.int64))].reshape(shape)
            if full == 2:
                self.combine(src[taps[0][1]], src[taps[1][1]], out=dst)
            elif full == 1:
                np.copyto(dst, src[taps[0][1]])
            else:
                dst.fill(self.init)
            for out_sl, in_sl in taps[full:]:
                d = dst[out_sl]
                self.combine(d, src[in_sl], out=d)
            src = dst


# The compiled 2-D pooling (compiled/pooling.py) writes out windows of up to 3 taps
# per axis; larger ones take its generic loops, slower than the numpy passes
# (MaxPool 5x5 s1 on 64x56x56: 1.53 vs 1.28 ms), so they stay numpy. Up to 3x3
# it wins (PP-OCR det 2x2 s1 on 16x240x320: 1.0 vs 3.9 ms; 3x3 s2 on 64x112x112:
# 0.74 vs 1.18 ms; 3x3 s2 on 192x56x56: 0.92 vs 1.28 ms), one thread.
POOL_COMPILED_MAX_KERNEL = 3
# AveragePool's strided windows gather their sums: 2x2 s2 on 64x56x56 measured 0.24
# vs 0.18 ms numpy (a tie at 112x112); stride 1 wins on wide planes (3x3 on 32x120x160:
# 1.1 vs 2.4 ms; 64x56x56: 0.58 vs 0.68 ms).
AVERAGEPOOL_COMPILED_MAX_STRIDE = 1
# Rows narrower than this many inputs stay numpy: LLVM's vector loops take 32 floats
# an iteration, narrower rows run their scalar remainder (MaxPool 3x3 p1 on 832x14x14:
# 1.31 vs 0.92 ms numpy; 3x3 s2 on 480x28x28: 0.93 vs 0.86; 3x3 p1 on 32x40x40: 0.20 vs 0.28).
POOL_COMPILED_MIN_WIDTH = 32


class _CompiledPool2d:
    """2-D float32 MaxPool / AveragePool through compiled/pooling.py's pool2d (one thread:
    benchmarks/node_kernels.py and the thresholds above)."""

    def __init__(self, ctx, geometry: list[AxisWindow], mode: int, include_pad: bool = False):
        self.run = compiled.pooling.pool2d
        gh, gw = geometry
        valid = np.flatnonzero(gw.counts(False))
        c_lo, c_hi = (int(valid[0]), int(valid[-1]) + 1) if valid.size else (0, 0)
        self.args = (mode, gh.kernel, gw.kernel, gh.stride, gw.stride, gh.dilation, gw.dilation, gh.head, gw.head)
        self.counts = [_readonly(np.maximum(g.counts(include_pad), 1).astype(np.float32)) for g in geometry]
        self.cols = (c_lo, c_hi)
        length = compiled.pooling.buffer_length(gw.size, gw.out, gw.kernel, gw.stride, gw.dilation, gw.head)
        self.bufs = ctx.scratch((2, length), np.float32)

    @staticmethod
    def fits(ctx, geometry, average: bool = False) -> bool:
        """2-D float32, windows within the thresholds, and the outputs whose window has
        an input column are one run."""
        if not (compiled.active() and len(geometry) == 2 and ctx.dtype(0) == np.float32
                and all(g.kernel <= POOL_COMPILED_MAX_KERNEL for g in geometry)
                and geometry[1].size >= POOL_COMPILED_MIN_WIDTH
                and (not average or all(g.stride <= AVERAGEPOOL_COMPILED_MAX_STRIDE for g in geometry))):
            return False
        valid = np.flatnonzero(geometry[1].counts(False))
        return valid.size == 0 or valid[-1] - valid[0] + 1 == valid.size

    def __call__(self, x, out):
        """Y into out (C-contiguous, as every blob; X is, unless a caller passes a view)."""
        self.run(np.ascontiguousarray(x), out, self.bufs.array, *self.args, *self.counts, *self.cols)


# channels-last 8-bit MaxPool (transposed in and out by byte tiles) from this many channels on, where the planes'
# rows are short: GoogLeNet's int8 pools, one thread, 192 x 56 x 56 3x3 s2 0.45 -> 0.05 ms, its 3x3 s1 p1
# inception pools 0.1-0.27 -> 0.02-0.05 ms (the rows' 7-56 bytes ran maxpool2d_q's loops scalar)
HWC_MIN_CHANNELS = 16
HWC_MAX_WIDTH = 64


class _CompiledMaxPool2d8:
    """2-D uint8 / int8 MaxPool through compiled/pooling.py's maxpool2d_q (exact), or, with at least
    HWC_MIN_CHANNELS channels of rows narrower than HWC_MAX_WIDTH, channels last: X transposed to (N, H*W, C) in
    16 x 16 byte tiles (compiled/transpose.py), maxpool2d_q_hwc (a vector loop over the channels at every tap, as
    onnxruntime's NhwcMaxPool), Y transposed back; the same values (a max of integers)."""

    def __init__(self, ctx, geometry: list[AxisWindow]):
        gh, gw = geometry
        self.args = (gh.kernel, gw.kernel, gh.stride, gw.stride, gh.dilation, gw.dilation, gh.head, gw.head,
                     -128 if ctx.dtype(0) == np.int8 else 0)
        n, c = ctx.shape(0)[:2]
        self.hwc = c >= HWC_MIN_CHANNELS and gw.size < HWC_MAX_WIDTH and gh.size * gw.size >= 8
        if self.hwc:
            self.dims = (n, gh.size, gw.size, c, gh.out, gw.out)
            self.xt = ctx.scratch((n * gh.size * gw.size * c,), ctx.dtype(0))
            self.yt = ctx.scratch((n * gh.out * gw.out * c,), ctx.dtype(0))
            self.x_bases = _readonly(np.arange(n, dtype=np.int64) * (c * gh.size * gw.size))
            self.y_bases = _readonly(np.arange(n, dtype=np.int64) * (c * gh.out * gw.out))
        else:
            length = compiled.pooling.buffer_length(gw.size, gw.out, gw.kernel, gw.stride, gw.dilation, gw.head)
            self.buf = ctx.scratch((length,), ctx.dtype(0))

    @staticmethod
    def fits(ctx, geometry) -> bool:
        return compiled.active() and len(geometry) == 2 and ctx.dtype(0) in (np.dtype(np.uint8), np.dtype(np.int8))

    def __call__(self, x, out):
        x = np.ascontiguousarray(x)
        if not self.hwc:
            compiled.pooling.maxpool2d_q(x, out, self.buf.array, *self.args)
            return
        n, h, w, c, oh, ow = self.dims
        tiles = compiled.transpose.transpose_tiles_bytes
        xt, yt = self.xt.array, self.yt.array
        tiles(x.reshape(-1).view(np.uint8), xt.view(np.uint8), self.x_bases, h * w, c, h * w)
        compiled.pooling.maxpool2d_q_hwc(xt, yt, n, h, w, c, oh, ow, *self.args)
        tiles(yt.view(np.uint8), out.reshape(-1).view(np.uint8), self.y_bases, c, oh * ow, c)


class _AverageTiles:
    """2-D float32 AveragePool whose windows tile the input (strides = kernel, dilation 1, no
    window reaching the padding), through compiled/pooling.py's average_tiles: one row buffer,
    no count tables. One thread (benchmarks/node_kernels.py): PP-OCR rec's kernel [3, 2]
    strides [3, 2] on 160x3x80 0.011 ms (numpy 0.069, onnxruntime 0.026); 2x2 s2 on
    64x56x56 0.080 ms (0.175, 0.092)."""

    def __init__(self, ctx, geometry: list[AxisWindow]):
        self.run = compiled.pooling.average_tiles
        self.kernel = tuple(g.kernel for g in geometry)
        self.buf = ctx.scratch((geometry[1].size,), np.float32)

    @staticmethod
    def fits(ctx, geometry) -> bool:
        return (compiled.active() and len(geometry) == 2 and ctx.dtype(0) == np.float32
                and all(g.stride == g.kernel and (g.dilation == 1 or g.kernel == 1) and g.head == 0
                        and g.out * g.kernel <= g.size for g in geometry))

    def __call__(self, x, out):
        self.run(np.ascontiguousarray(x), out, self.buf.array, *self.kernel)

    def prepare(self, x, out):
        """__call__(x, out) as a zero-argument call for these arrays (engine/layout.py: _prepared), or None."""
        if not x.flags.c_contiguous:
            return None
        return compiled.bound(self.run, x, out, self.buf.array, *self.kernel)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class _MaxPoolIndices:
    """MaxPool's Indices, given Y, by a walk over the prod(kernel) taps.

    Indices (ONNX MaxPool): the flat index of the maximum in X, counting N and C;
    storage_order 0 is row major (h * W + w), 1 column major (h + w * H).
    Taps are walked in reverse window order marking where X equals Y, so the
    last mark is the first maximum in window order (h, then w, then d), as in
    onnxruntime. The winning tap number is kept in the Indices array and mapped
    to the index at the end: index = channel base + output base + tap offset.
    """

    def __init__(self, ctx, geometry: list[AxisWindow], storage_order: int):
        shape = ctx.shape(0)
        spatial = [int(d) for d in shape[2:]]
        n = len(geometry)
        if storage_order == 0:
            mult = [int(np.prod(spatial[i + 1:], dtype=np.int64)) for i in range(n)]
        else:
            mult = [int(np.prod(spatial[:i], dtype=np.int64)) for i in range(n)]
        per_axis = [{j: (lo, hi, start) for j, lo, hi, start in g.taps()} for g in geometry]
        self.taps = []      # (tap number, output slices, input slices)
        offsets = []
        for t, js in enumerate(itertools.product(*[range(g.kernel) for g in geometry])):
            offsets.append(sum(j * g.dilation * m for j, g, m in zip(js, geometry, mult)))
            if all(j in taps for j, taps in zip(js, per_axis)):
                out_sl, in_sl = [slice(None)] * 2, [slice(None)] * 2
                for j, g, taps in zip(js, geometry, per_axis):
                    lo, hi, start = taps[j]
                    out_sl.append(slice(lo, hi))
                    in_sl.append(slice(start, start + (hi - lo - 1) * g.stride + 1, g.stride))
                self.taps.append((t, tuple(out_sl), tuple(in_sl)))
        self.tap_offset = np.array(offsets, np.int64)
        base = np.zeros([g.out for g in geometry], np.int64)
        empty = np.zeros(base.shape, bool)
        for i, (g, m) in enumerate(zip(geometry, mult)):
            along = (np.arange(g.out, dtype=np.int64) * g.stride - g.head) * m
            base += along.reshape([-1 if k == i else 1 for k in range(n)])
            empty |= (g.counts(include_pad=False) == 0).reshape([-1 if k == i else 1 for k in range(n)])
        # A window with no input tap: onnxruntime reports coordinates (-1, ..., -1).
        base[empty] = -sum(mult)
        self.spatial_base = base
        x_step = int(np.prod(spatial, dtype=np.int64))
        self.channel_base = (np.arange(int(shape[0]) * int(shape[1]), dtype=np.int64) * x_step).reshape(
            (int(shape[0]), int(shape[1])) + (1,) * n)
        self.mask = ctx.scratch(ctx.out_shapes[0], np.bool_)

    def __call__(self, x, y, indices):
        mask = self.mask.array
        indices.fill(0)
        for t, out_sl, in_sl in reversed(self.taps):
            m = mask[out_sl]
            np.equal(x[in_sl], y[out_sl], out=m)
            np.copyto(indices[out_sl], t, where=m)
        np.take(self.tap_offset, indices, out=indices)   # mode="raise" buffers: safe in place
        indices += self.spatial_base
        indices += self.channel_base


@kernel("MaxPool", since=(8, 10, 11, 12, 22))
class MaxPool:
    """Y = max of X over each window (ONNX MaxPool); Indices = argmax as a flat index.

    Shapes: X (N, C, D1, ..., Dk), k = 1, 2 or 3 in practice (any k works);
    Y and Indices (N, C, O1, ..., Ok), Indices int64. Padding never wins (a max
    only reads input taps); a window with no input tap (pads or dilation larger
    than the input) gives the dtype's lowest value, as in onnxruntime.
    Versions: 8 (storage_order), 10 (ceil_mode, dilations), 11 (pads semantics
    clarified), 12 (int8/uint8), 22 (bfloat16); one implementation covers them
    all (absent attributes take their defaults).
    Workspace: two buffers for the separable passes, a bool mask for Indices.
    """

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, dilations=None,
                 pads=None, storage_order=0, strides=None):
        geometry = pool_geometry(ctx)
        if _CompiledPool2d.fits(ctx, geometry):
            self.values = _CompiledPool2d(ctx, geometry, 0)
        elif _CompiledMaxPool2d8.fits(ctx, geometry):
            self.values = _CompiledMaxPool2d8(ctx, geometry)
        else:
            self.values = _SeparablePool(ctx, geometry, np.maximum, _lowest(ctx.dtype(0)))
        self.indices = _MaxPoolIndices(ctx, geometry, int(storage_order)) if ctx.has_output(1) else None

    def __call__(self, x, *, out):
        if isinstance(out, tuple):
            y, indices = out[0], (out[1] if len(out) > 1 else None)
        else:
            y, indices = out, None
        self.values(x, y)
        if self.indices is not None and indices is not None:
            self.indices(x, y, indices)


@kernel("AveragePool", since=(7, 10, 11, 19, 22))
class AveragePool:
    """Y = mean of X over each window (ONNX AveragePool).

    The divisor counts the window's taps inside the input (count_include_pad=0)
    or inside the padded input (count_include_pad=1); the part of a ceil_mode
    window beyond the padding never counts. Versions: 7 (count_include_pad),
    10 (ceil_mode), 11, 19 (dilations), 22. Workspace: two buffers for the
    separable sums.
    """

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0,
                 dilations=None, pads=None, strides=None):
        geometry = pool_geometry(ctx)
        if _AverageTiles.fits(ctx, geometry):
            self.compiled = _AverageTiles(ctx, geometry)
        elif _CompiledPool2d.fits(ctx, geometry, average=True):
            self.compiled = _CompiledPool2d(ctx, geometry, 1, bool(int(count_include_pad)))
        else:
            self.compiled = None
        self.sum = None if self.compiled else _SeparablePool(ctx, geometry, np.add, 0)
        counts = np.ones((1, 1) + (1,) * len(geometry), np.int64)
        for i, g in enumerate(geometry):
            c = g.counts(bool(int(count_include_pad)))
            counts = counts * c.reshape([-1 if k == i + 2 else 1 for k in range(len(geometry) + 2)])
        dtype = ctx.dtype(0)
        counts[counts == 0] = 1       # a window with no input tap: sum 0, Y = 0 (onnxruntime)
        uniform = counts.size == 0 or np.all(counts == counts.flat[0])
        self.divisor = dtype.type(counts.flat[0] if counts.size else 1) if uniform else counts.astype(dtype)

    def __call__(self, x, *, out):
        if self.compiled is not None:
            self.compiled(x, out)
            return
        self.sum(x, out)
        if not (np.ndim(self.divisor) == 0 and self.divisor == 1):
            np.divide(out, self.divisor, out=out)

    def prepare_run(self, x, *, out):
        """The compiled tiling kernel bound to these arrays (engine/layout.py: _prepared), or None: one call
        holding the GIL for its arguments only, where __call__ added two Python calls and numba's dispatch."""
        if isinstance(self.compiled, _AverageTiles):
            return self.compiled.prepare(x, out)
        return None


@kernel("LpPool", since=(11, 18, 22))
class LpPool:
    """Y = (sum of |X|^p over each window)^(1/p) (ONNX LpPool-11/18/22).

    Padding adds nothing to the sum. Versions: 11 (pads semantics), 18
    (ceil_mode, dilations), 22 (bfloat16); the window geometry is MaxPool's.
    Workspace: |X|^p (X's shape) and the separable sums' buffers.
    """

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, dilations=None, p=2,
                 pads=None, strides=None):
        self.sum = _SeparablePool(ctx, pool_geometry(ctx), np.add, 0)
        self.p = int(p)
        if self.p < 1:
            raise ctx.error(f"p={self.p} must be >= 1")
        self.powered = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        t = self.powered.array
        np.abs(x, out=t)
        if self.p == 2:
            np.square(t, out=t)
        elif self.p != 1:
            np.power(t, self.p, out=t)
        self.sum(t, out)
        if self.p == 2:
            np.sqrt(out, out=out)
        elif self.p != 1:
            np.power(out, 1.0 / self.p, out=out)


class _GlobalPool:
    """Y[n, c] = the reduction of X[n, c] over all spatial axes (kept as size 1).

    float32 runs compiled (reduce.TrailingReduce: one pass per plane); `numpy` otherwise,
    the tested reference.
    """

    kind = ""

    def __init__(self, ctx):
        n = len(ctx.shape(0))
        self.rows = TrailingReduce.build(ctx, range(2, n), self.kind) if n > 2 else None

    def __call__(self, x, *, out):
        if self.rows is not None:
            self.rows(x, out)
        elif x.ndim == 2:
            np.copyto(out, x)
        else:
            self.numpy(x, out)


@kernel("GlobalAveragePool", since=(1, 22))
class GlobalAveragePool(_GlobalPool):
    """Y[n, c] = mean of X[n, c] over all spatial axes (kept as size 1); sums of float32 planes
    in 8-lane blocks added in float64 (compiled/rowreduce.py)."""

    kind = "mean"

    @staticmethod
    def numpy(x, out):
        np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=out)


@kernel("GlobalMaxPool", since=(1, 22))
class GlobalMaxPool(_GlobalPool):
    """Y[n, c] = max of X[n, c] over all spatial axes (kept as size 1), NaN propagating."""

    kind = "max"

    @staticmethod
    def numpy(x, out):
        np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True, out=out)
