"""Reduction CPU kernels (ONNX Reduce*: axes as attribute or input, keepdims,
noop_with_empty_axes)."""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.reduce import reduce_axes


class _Reduce:
    """Reduce X over the axes resolved at reshape; writes the keepdims shape of `out`."""

    ufunc = None

    def __init__(self, ctx, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        self.axes = reduce_axes(ctx)
        self.keep_shape = tuple(1 if i in self.axes else d for i, d in enumerate(ctx.shape(0)))

    def __call__(self, x, axes=None, *, out):
        if not self.axes:
            np.copyto(out, x.reshape(out.shape))
            return
        self.reduce(x, out.reshape(self.keep_shape))

    def reduce(self, x, out):  # pragma: no cover - abstract
        raise NotImplementedError


@kernel("ReduceMean", since=(1, 11, 13, 18))
class ReduceMean(_Reduce):
    """Y = mean of X over `axes`."""

    def reduce(self, x, out):
        np.mean(x, axis=self.axes, keepdims=True, out=out)
