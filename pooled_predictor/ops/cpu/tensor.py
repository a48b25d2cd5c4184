"""Data-movement CPU kernels: Transpose, Squeeze, Unsqueeze, Concat, Shape, Size.

Shapes come from the rules in ops/shapes/tensor.py; the kernels only copy.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel


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


@kernel("Concat", since=(4, 11, 13))
def concat(*inputs, out, axis):
    """Y = the inputs joined along `axis` (negative counts from the end, from 11)."""
    np.concatenate([x for x in inputs if x is not None], axis=axis, out=out)


@kernel("Shape", since=(1, 13, 15, 19, 21, 23, 24, 25))
def shape(x, *, out, start=0, end=None):
    """Y = X.shape[start:end] as int64 (start/end from Shape-15; clamped like slices)."""
    out[...] = np.asarray(x.shape[slice(start, end)], dtype=np.int64)


@kernel("Size", since=(1, 13, 19, 21, 23, 24, 25))
def size(x, *, out):
    """Y = the number of elements of X, as an int64 scalar."""
    out[...] = x.size
