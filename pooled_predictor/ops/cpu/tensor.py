"""Data-movement CPU kernels: Transpose, Squeeze, Unsqueeze, Concat, Shape, Size.

Shapes come from the rules in ops/shapes/tensor.py; the kernels only copy.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..registry import kernel
from . import compiled, views


@kernel("Transpose", since=(1, 13, 21, 23, 24, 25))
def transpose(x, *, out, perm=None):
    """Y = X with axes permuted by `perm` (default: reversed)."""
    np.copyto(out, np.transpose(x, perm))


@kernel("Squeeze", since=(1, 11, 13, 21, 23, 24, 25), inplace=(0,))
def squeeze(x, axes_input=None, *, out, axes=None):
    """Y = X without the size-1 axes listed (attribute before 13, input after)."""
    np.copyto(out, x.reshape(out.shape))


@kernel("Unsqueeze", since=(1, 11, 13, 21, 23, 24, 25), inplace=(0,))
def unsqueeze(x, axes_input=None, *, out, axes=None):
    """Y = X with size-1 axes inserted at `axes` (attribute before 13, input after)."""
    np.copyto(out, x.reshape(out.shape))


def prepare_reshaped(x, *rest, out, **attrs):
    """prepare_run of the kernels that copy X's elements in order into Y's shape (Reshape, Flatten,
    Squeeze, Unsqueeze; engine/layout.py: _prepared): one np.copyto of the view, or nothing at all where the
    arena put Y on X (memory_opt's in-place); None for a non-contiguous X (its reshape is a copy)."""
    if not x.flags.c_contiguous:
        return None
    view = x.reshape(out.shape)
    if view.ctypes.data == out.ctypes.data and view.dtype == out.dtype:
        return compiled.chain()  # no call at all
    return partial(np.copyto, out, view)


def _tiled_transpose(x, out, perm):
    """The compiled tiled copy (compiled/transpose.py) for these arrays, or None where it does not
    apply: X and Y C-contiguous with 4-byte (or 1-byte: byte tiles) elements, the source's last axis second to last in
    Y and another source axis, of stride > 1, last, both at least 8 long (numpy's copyto of the
    transposed view walks that stride one element a step)."""
    n = x.ndim
    perm = tuple(range(n))[::-1] if perm is None else tuple(int(p) % n for p in perm) if n else ()
    if (n < 2 or perm[-2] != n - 1 or not compiled.active() or x.dtype.itemsize not in (1, 4)
            or not (x.flags.c_contiguous and out.flags.c_contiguous) or out.dtype != x.dtype):
        return None
    rows, cols = x.shape[n - 1], x.shape[perm[-1]]
    stride = x.strides[perm[-1]] // x.itemsize
    if rows < 8 or cols < 8 or stride <= 1:
        return None
    lead = perm[:-2]  # Y's leading axes: each (multi-)index starts a rows x cols tile at this element of X
    bases = np.zeros([x.shape[a] for a in lead], np.int64)
    for k, a in enumerate(lead):
        shape = [1] * len(lead)
        shape[k] = x.shape[a]
        bases = bases + (np.arange(x.shape[a], dtype=np.int64) * (x.strides[a] // x.itemsize)).reshape(shape)
    bases = np.ascontiguousarray(bases.reshape(-1))
    bases.flags.writeable = False
    kernel, view = tile_kernel(x.itemsize)
    return compiled.bound(kernel, x.reshape(-1).view(view), out.reshape(-1).view(view), bases, rows, cols, stride)


def tile_kernel(itemsize: int):
    """(compiled/transpose.py's tiled copy, the element view it takes) for 1-byte (16 x 16 byte tiles: 8-bit
    activations) or 4-byte elements (8 x 8 float tiles)."""
    if itemsize == 1:
        return compiled.transpose.transpose_tiles_bytes, np.uint8
    return compiled.transpose.transpose_tiles, np.float32


def _strided_transpose(x, out, perm):
    """The compiled strided copy of X's transposed view into Y (views.copy_call: compiled/transpose.py's view_copy,
    one call a native run can take; BERT-base's head transposes, 1x128x12x64: 7.8 us, numpy's copyto 9.9), or None
    where it does not apply (views.py)."""
    return views.copy_call(x, np.transpose(x, perm), out, out)


def _prepare_transpose(x, *, out, perm=None):
    """A tiled copy where Y's last axis is a strided one of X (compiled/transpose.py), else the compiled strided
    copy of the transposed view, else numpy's copyto of it; all copy the elements' bits."""
    for make in (_tiled_transpose, _strided_transpose):
        call = make(x, out, perm)
        if call is not None:
            return call
    return partial(np.copyto, out, np.transpose(x, perm))


squeeze.prepare_run = unsqueeze.prepare_run = prepare_reshaped
transpose.prepare_run = _prepare_transpose


@kernel("Concat", since=(4, 11, 13))
def concat(*inputs, out, axis):
    """Y = the inputs joined along `axis` (negative counts from the end, from 11)."""
    np.concatenate([x for x in inputs if x is not None], axis=axis, out=out)


def _prepare_concat(*inputs, out, axis):
    """Each input copied into its slab of Y by a compiled call (views.py: the chain joins a native run),
    else numpy's concatenate bound to these arrays."""
    xs = [x for x in inputs if x is not None]
    ax = axis + out.ndim if axis < 0 else axis
    calls, at = [], 0
    for x in xs:
        n = x.shape[ax] if x.ndim == out.ndim else -1
        slab = out[(slice(None),) * ax + (slice(at, at + n),)] if n >= 0 else None
        call = views.copy_call(x, x, out, slab) if slab is not None else None
        if call is None and x.size:
            return partial(np.concatenate, xs, axis=axis, out=out)
        calls.append(call)
        at += max(n, 0)
    return compiled.chain(*calls)


concat.prepare_run = _prepare_concat


@kernel("Shape", since=(1, 13, 15, 19, 21, 23, 24, 25))
def shape(x, *, out, start=0, end=None):
    """Y = X.shape[start:end] as int64 (start/end from Shape-15; clamped like slices)."""
    out[...] = np.asarray(x.shape[slice(start, end)], dtype=np.int64)


@kernel("Size", since=(1, 13, 19, 21, 23, 24, 25))
def size(x, *, out):
    """Y = the number of elements of X, as an int64 scalar."""
    out[...] = x.size
