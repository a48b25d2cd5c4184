"""Copies between strided views of arena arrays as compiled calls (compiled/transpose.py's view_copy and
fill_bits), so that Slice, Gather of one index, Concat and constant Pad join a native run
(compiled/native_runs.py) instead of being a numpy call from Python each: Swin-T's forward made 82
Slice, 36 Gather, 15 Pad and 13 Concat calls from Python.

A view is given with the C-contiguous array it is a view of (a kernel's input or output blob): the
compiled copy reads and writes those arrays flat, from the view's first element, at the view's element
strides. Where that does not apply (no compiled kernels, elements of another size, a negative or
unaligned stride, more than 6 axes after merging, a parent that is not C-contiguous), the helpers
return None and the kernel keeps its numpy call.
"""

from __future__ import annotations

import numpy as np

from . import compiled

_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_AXES = 6


def _flat_from(parent: np.ndarray, view: np.ndarray):
    """parent flat from view's first element, as integers of the element's size; None where view is not
    a non-negatively strided view inside C-contiguous parent."""
    size = parent.dtype.itemsize
    if (size not in _INT or parent.dtype.hasobject or view.dtype != parent.dtype or not parent.flags.c_contiguous
            or any(s < 0 or s % size for s in view.strides)):
        return None
    off = view.__array_interface__["data"][0] - parent.__array_interface__["data"][0]
    last = off + sum((n - 1) * s for n, s in zip(view.shape, view.strides))  # its last element's byte
    if off < 0 or off % size or last // size >= parent.size:
        return None
    return parent.reshape(-1)[off // size:].view(_INT[size])


def _merged(shape, xs, ys):
    """The axes of a copy, size-1 ones dropped and neighbours that walk both sides as one merged."""
    axes = [(n, a, b) for n, a, b in zip(shape, xs, ys) if n != 1]
    out = []
    for n, a, b in axes:
        if out and out[-1][1] == a * n and out[-1][2] == b * n:
            m, _, _ = out[-1]
            out[-1] = (m * n, a, b)
        else:
            out.append((n, a, b))
    return out or [(1, 1, 1)]


def copy_call(src_parent: np.ndarray, src: np.ndarray, dst_parent: np.ndarray, dst: np.ndarray):
    """A compiled call doing dst[...] = src (views of src_parent and dst_parent, the same shape and dtype;
    elementwise bits), or None where it does not apply (module docstring)."""
    if not compiled.active() or src.shape != dst.shape or src.dtype != dst.dtype or not src.size:
        return None
    x, y = _flat_from(src_parent, src), _flat_from(dst_parent, dst)
    if x is None or y is None:
        return None
    size = src.dtype.itemsize
    axes = _merged(src.shape, [s // size for s in src.strides], [s // size for s in dst.strides])
    if len(axes) > _AXES:
        return None
    axes = [(1, 0, 0)] * (_AXES - len(axes)) + axes
    shape, xs, ys = (np.array(v, np.int64) for v in zip(*axes))
    for a in (shape, xs, ys):
        a.flags.writeable = False
    return compiled.bound(compiled.transpose.view_copy, x, y, shape, xs, ys)


def fill_call(dst: np.ndarray, value):
    """A compiled call doing dst[...] = value for C-contiguous dst (value cast to dst's dtype, its bits
    written), or None where it does not apply."""
    size = dst.dtype.itemsize
    if not compiled.active() or size not in _INT or dst.dtype.hasobject or not dst.flags.c_contiguous or not dst.size:
        return None
    try:
        bits = np.asarray(value, dtype=dst.dtype).reshape(()).view(_INT[size])[()]
    except (TypeError, ValueError):
        return None
    return compiled.bound(compiled.transpose.fill_bits, dst.reshape(-1).view(_INT[size]), bits)
