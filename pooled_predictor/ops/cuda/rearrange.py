"""Data movement on the GPU (kernels/rearrange.cu, by element size: any dtype of 1, 2, 4 or 8 bytes):
Transpose, Slice, Expand and the copies of Concat through one strided-copy kernel; Gather along an
axis; Pad (constant, reflect, edge). The index geometry is the shape rules' (ops/shapes/indexing.py
slice_params, ops/shapes/reshape.py pad_amounts), resolved once at reshape.

A Concat whose inputs the arena stores in its output (engine/arena.concats_in_place) is not run at
all; otherwise each input is copied into its slice of the output's rows.
"""

from __future__ import annotations

import math

import numpy as np

from ..shapes.indexing import slice_params
from ..shapes.reshape import pad_amounts
from . import runtime
from .codes import cuda_kernel

MAX_RANK = 8  # kernels/common.cuh

_SIZES = {1: "b1", 2: "b2", 4: "b4", 8: "b8"}


def _sized(ctx, i=0) -> bool:
    return np.dtype(ctx.dtype(i)).itemsize in _SIZES and np.dtype(ctx.dtype(i)) != object


def _contiguous_strides(shape) -> list[int]:
    strides, s = [1] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = s
        s *= shape[d]
    return strides


class _StridedCopy:
    """y (out_shape, contiguous; or rows of `row` elements spaced `y_row_stride`) = x read at
    `offset` + sum idx_d * strides_d."""

    def __init__(self, dtype, out_shape, strides, offset=0, row=None, y_row_stride=None):
        out_shape, strides = list(out_shape) or [1], list(strides) or [0]
        if len(out_shape) > MAX_RANK:
            raise ValueError(f"rank {len(out_shape)} > {MAX_RANK}")
        self.fn = runtime.function("rearrange.cu", f"strided_copy_{_SIZES[np.dtype(dtype).itemsize]}")
        self.n = math.prod(out_shape)
        row = row or max(1, self.n)
        self.args = (np.int64(self.n), np.int32(len(out_shape)), runtime.i64(out_shape + strides), np.int64(offset),
                     np.int64(row), np.int64(y_row_stride or row))

    def __call__(self, x, y, y_offset: int = 0):
        if self.n:
            runtime.launch(self.fn, self.n, (x, y[y_offset:] if y_offset else y, *self.args))


def _rank_ok(ctx) -> bool:
    return _sized(ctx) and len(ctx.shape(0)) <= MAX_RANK


@cuda_kernel("Transpose", supports=_rank_ok)
class Transpose:
    """ONNX Transpose: y[i_0, ..] = x[i_perm^-1 ..]; x's strides permuted."""

    def __init__(self, ctx, *, perm=None):
        shape = tuple(ctx.shape(0))
        perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
        st = _contiguous_strides(shape)
        self.copy = _StridedCopy(ctx.dtype(0), [shape[p] for p in perm], [st[p] for p in perm])

    def __call__(self, x, *, out):
        self.copy(x.reshape(-1), out.reshape(-1))


@cuda_kernel("Slice", supports=lambda ctx: _rank_ok(ctx) and all(ctx.is_static(i) for i in range(1, ctx.num_inputs)
                                                                 if ctx.has_input(i)))
class Slice:
    """ONNX Slice (negative steps too): a strided copy from the first element of the slice."""

    def __init__(self, ctx, *, starts=None, ends=None, axes=None):
        shape = tuple(ctx.shape(0))
        st = _contiguous_strides(shape)
        offset, out, strides = 0, [], []
        for s, d, stride in zip(slice_params(ctx), shape, st):
            start, stop, step = s.indices(d)
            out.append(len(range(start, stop, step)))
            if out[-1]:
                offset += start * stride
            strides.append(stride * step)
        self.copy = _StridedCopy(ctx.dtype(0), out, strides, offset)

    def __call__(self, data, *_, out):
        self.copy(data.reshape(-1), out.reshape(-1))


@cuda_kernel("Expand", supports=_rank_ok)
class Expand:
    """ONNX Expand: x broadcast to the output's shape (0 strides on the repeated axes)."""

    def __init__(self, ctx):
        out = tuple(ctx.out_shapes[0])
        shape = (1,) * (len(out) - len(ctx.shape(0))) + tuple(ctx.shape(0))
        st = _contiguous_strides(shape)
        self.copy = _StridedCopy(ctx.dtype(0), out, [0 if d == 1 else s for d, s in zip(shape, st)])

    def __call__(self, x, shape, *, out):
        self.copy(x.reshape(-1), out.reshape(-1))


@cuda_kernel("Concat", supports=lambda ctx: _sized(ctx) and len(ctx.out_shapes[0]) <= MAX_RANK)
class Concat:
    """ONNX Concat: each input copied into its slice of the output, (outer, axis part, inner) rows."""

    def __init__(self, ctx, *, axis):
        out = tuple(ctx.out_shapes[0])
        axis = axis + len(out) if axis < 0 else axis
        outer, inner = math.prod(out[:axis]), math.prod(out[axis + 1:])
        self.parts, at = [], 0
        for i in range(ctx.num_inputs):
            if not ctx.has_input(i):
                continue
            length = ctx.shape(i)[axis]
            row = length * inner
            self.parts.append((i, at * inner, _StridedCopy(ctx.dtype(i), [outer * row], [1], 0, row, out[axis] * inner)))
            at += length

    def __call__(self, *inputs, out):
        flat = out.reshape(-1)
        for i, start, copy in self.parts:
            copy(inputs[i].reshape(-1), flat, start)


@cuda_kernel("Gather", supports=lambda ctx: _sized(ctx) and np.dtype(ctx.dtype(1)) == np.int64)
class Gather:
    """ONNX Gather along one axis with int64 indices (negative ones count from the end). An index out of
    range gives 0 bits here (the CPU kernel raises; static indices are checked at reshape)."""

    def __init__(self, ctx, *, axis=0):
        shape = tuple(ctx.shape(0))
        self.axis = axis + len(shape) if axis < 0 else axis
        n = shape[self.axis]
        if ctx.is_static(1):
            idx = np.asarray(ctx.value(1))
            if idx.size and (idx.min() < -n or idx.max() >= n):
                raise ctx.error(f"an index of {idx.tolist()} is out of range [{-n}, {n - 1}] for axis {self.axis}")
        self.outer, self.len, self.inner = math.prod(shape[:self.axis]), n, math.prod(shape[self.axis + 1:])
        self.n_idx = math.prod(ctx.shape(1))
        self.fn = runtime.function("rearrange.cu", f"gather_axis_{_SIZES[np.dtype(ctx.dtype(0)).itemsize]}")

    def __call__(self, data, indices, *, out):
        runtime.launch(self.fn, out.size, (data, indices, out, np.int64(self.outer), np.int64(self.len),
                                           np.int64(self.n_idx), np.int64(self.inner)))


def _pad_supported(ctx) -> bool:
    mode = ctx.attr("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return (_rank_ok(ctx) and mode in ("constant", "reflect", "edge")
            and all(ctx.is_static(i) for i in range(1, ctx.num_inputs) if ctx.has_input(i)))


@cuda_kernel("Pad", supports=_pad_supported)
class Pad:
    """ONNX Pad, modes constant (value from the attribute or input 2), reflect and edge; negative pads crop."""

    _MODES = {"constant": 0, "reflect": 1, "edge": 2}

    def __init__(self, ctx, *, mode="constant", pads=None, value=0.0):
        mode = mode.decode() if isinstance(mode, bytes) else mode
        begins, _ = pad_amounts(ctx)
        dtype = np.dtype(ctx.dtype(0))
        if ctx.version >= 11 and ctx.has_input(2):
            value = np.asarray(ctx.value(2)).reshape(-1)[0]
        bits = np.asarray(value, dtype).reshape(1).view(f"u{dtype.itemsize}")[0]
        out, shape = list(ctx.out_shapes[0]), list(ctx.shape(0))
        self.fn = runtime.function("rearrange.cu", f"pad_{_SIZES[dtype.itemsize]}")
        self.args = (np.int32(len(out)), runtime.i64(out + shape + list(begins)), np.int32(self._MODES[mode]), bits)

    def __call__(self, data, *_, out):
        runtime.launch(self.fn, out.size, (data, out, np.int64(out.size), *self.args))
