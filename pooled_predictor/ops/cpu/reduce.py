"""Reduction CPU kernels: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd.

ONNX Reduce*: `axes` is an attribute up to ReduceSum-11 / Reduce*-13 and an
optional input from ReduceSum-13 / Reduce*-18; absent or empty axes reduce
every axis unless noop_with_empty_axes=1 (then Y = X); keepdims keeps reduced
axes as length 1. The axes are resolved at reshape (shapes/reduce.reduce_axes);
the kernels write numpy's keepdims result into a view of the output.
Reductions over an empty set give the op's identity: 0 (Sum), 1 (Prod),
-inf / the type's minimum (Max), +inf / the type's maximum (Min), and 0 for
Mean, whose value the spec leaves undefined (onnxruntime's 0, not numpy's NaN).
Sums and products accumulate in the input's type (integers wrap, as in
onnxruntime), float16 in float32.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.reduce import reduce_axes


class _Reduce:
    """Reduce X over the axes resolved at reshape; writes the keepdims shape of `out`."""

    def __init__(self, ctx, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        self.axes = reduce_axes(ctx)
        dtype = np.dtype(ctx.dtype(0))
        self.acc = np.dtype(np.float32) if dtype == np.float16 else dtype
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
    """Y = mean of X over `axes` (0 over an empty set). Spec: Operators.md#ReduceMean."""

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(0)
            return
        np.mean(x, axis=self.axes, keepdims=True, out=out)


@kernel("ReduceSum", since=(1, 11, 13))
class ReduceSum(_Reduce):
    """Y = sum of X over `axes` (axes an input from ReduceSum-13). Spec: Operators.md#ReduceSum."""

    def reduce(self, x, out):
        np.sum(x, axis=self.axes, keepdims=True, out=out, dtype=self.acc)


@kernel("ReduceProd", since=(1, 11, 13, 18))
class ReduceProd(_Reduce):
    """Y = product of X over `axes`. Spec: Operators.md#ReduceProd."""

    def reduce(self, x, out):
        np.prod(x, axis=self.axes, keepdims=True, out=out, dtype=self.acc)


def _extreme(dtype: np.dtype, lowest: bool):
    """-inf / +inf for floats, the type's minimum / maximum for integers, False / True for bools."""
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    if dtype.kind == "b":
        return not lowest
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


@kernel("ReduceMax", since=(1, 11, 12, 13, 18, 20))
class ReduceMax(_Reduce):
    """Y = max of X over `axes` (bool from ReduceMax-20, False < True). Spec: Operators.md#ReduceMax."""

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(_extreme(x.dtype, lowest=True))
            return
        np.max(x, axis=self.axes, keepdims=True, out=out)


@kernel("ReduceMin", since=(1, 11, 12, 13, 18, 20))
class ReduceMin(_Reduce):
    """Y = min of X over `axes` (bool from ReduceMin-20, False < True). Spec: Operators.md#ReduceMin."""

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(_extreme(x.dtype, lowest=False))
            return
        np.min(x, axis=self.axes, keepdims=True, out=out)
