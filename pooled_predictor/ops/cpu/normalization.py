"""Normalization CPU kernels: BatchNormalization (inference) and Softmax."""

from __future__ import annotations

import numpy as np

from ..registry import kernel


def _bn_check(attrs, version):
    if int(attrs.get("training_mode", 0)):
        return "training_mode=1 is not supported (inference only)"
    return None


@kernel("BatchNormalization", since=(9, 14, 15), inplace=(0,), check=_bn_check)
class BatchNormalization:
    """Y = (X - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1).

    Inference form (ONNX BatchNormalization, training_mode=0): computed as
    Y = X * a + b with a = scale / sqrt(var + epsilon), b = B - mean * a, where
    a and b are folded once at reshape when the parameters are weights.
    Shapes: X (N, C, D1, ..., Dk); scale, B, mean, var (C,).
    """

    def __init__(self, ctx, *, epsilon=1e-5, momentum=0.9, training_mode=0):
        self.epsilon = epsilon
        rank = len(ctx.shape(0))
        self.bshape = (-1,) + (1,) * max(rank - 2, 0) if rank > 1 else (-1,)
        self.ab = None
        if all(ctx.is_static(i) for i in range(1, 5)):
            self.ab = self._fold(*(ctx.value(i) for i in range(1, 5)), dtype=ctx.dtype(0))

    def _fold(self, scale, bias, mean, var, dtype):
        s = np.asarray(scale, np.float64)
        a = s / np.sqrt(np.asarray(var, np.float64) + self.epsilon)
        b = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * a
        return a.astype(dtype).reshape(self.bshape), b.astype(dtype).reshape(self.bshape)

    def __call__(self, x, scale, bias, mean, var, *, out):
        a, b = self.ab if self.ab is not None else self._fold(scale, bias, mean, var, x.dtype)
        if isinstance(out, tuple):
            out = out[0]
        np.multiply(x, a, out=out)
        out += b


@kernel("Softmax", since=(1, 11, 13))
class Softmax:
    """Y = exp(X - max) / sum(exp(X - max)) along `axis`.

    Softmax-13 normalizes along the single `axis` (default -1); Softmax-1 and
    -11 coerce X to 2-D at `axis` (default 1) and normalize each row.
    Workspace: the maxima and sums (reduced shape), per Net.
    """

    def __init__(self, ctx, *, axis=None):
        shape = ctx.shape(0)
        rank = len(shape)
        if ctx.version >= 13:
            axis = -1 if axis is None else axis
            self.axis = axis + rank if axis < 0 else axis
            self.view = None
            red = tuple(1 if i == self.axis else d for i, d in enumerate(shape))
        else:
            axis = 1 if axis is None else axis
            axis = axis + rank if axis < 0 else axis
            rows = int(np.prod(shape[:axis], dtype=np.int64))
            self.view = (rows, -1)
            self.axis = 1
            red = (rows, 1)
        self.red = ctx.scratch(red, ctx.dtype(0))

    def __call__(self, x, *, out):
        y = out
        if self.view is not None:
            x, y = x.reshape(self.view), out.reshape(self.view)
        m = self.red.array
        np.max(x, axis=self.axis, keepdims=True, out=m)
        np.subtract(x, m, out=y)
        np.exp(y, out=y)
        np.sum(y, axis=self.axis, keepdims=True, out=m)
        y /= m
