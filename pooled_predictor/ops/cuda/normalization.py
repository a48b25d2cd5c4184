"""Normalizations on the GPU (kernels/normalization.cu): Softmax, LogSoftmax, LayerNormalization and
BatchNormalization (inference: a per-channel affine map computed once at setup), float32."""

from __future__ import annotations

import math

import numpy as np

from . import runtime
from .codes import cuda_kernel, float32_io


class _Softmax:
    log = 0

    def __init__(self, ctx, *, axis=None):
        shape = tuple(ctx.shape(0))
        r = len(shape)
        if axis is None:
            axis = -1 if ctx.version >= 13 else 1
        axis = axis + r if axis < 0 else axis
        if ctx.version >= 13:  # one axis: (outer, len, inner)
            self.outer, self.len, self.inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        else:  # Softmax-1/11: the input flattened to 2-D at axis, normalized along the second
            self.outer, self.len, self.inner = math.prod(shape[:axis]), math.prod(shape[axis:]), 1
        self.fn = runtime.function("normalization.cu", "softmax_f32")
        self.threads = runtime.row_threads(self.len)

    def __call__(self, x, *, out):
        runtime.launch_rows(self.fn, self.outer * self.inner, (x, out, np.int64(self.outer), np.int64(self.len),
                                                               np.int64(self.inner), np.int32(self.log)), self.threads)


@cuda_kernel("Softmax")
class Softmax(_Softmax):
    """ONNX Softmax (float32): exp(x - max) / sum along the axis (Softmax-1/11: the flattened rows)."""


@cuda_kernel("LogSoftmax")
class LogSoftmax(_Softmax):
    """ONNX LogSoftmax (float32): x - max - log(sum(exp(x - max)))."""

    log = 1


def _layernorm_supported(ctx) -> bool:
    if not float32_io(ctx) or (ctx.num_outputs > 1 and any(ctx.has_output(i) for i in range(1, ctx.num_outputs))):
        return False
    shape = tuple(ctx.shape(0))
    axis = int(ctx.attr("axis", -1))
    axis = axis + len(shape) if axis < 0 else axis
    inner = shape[axis:]
    return all(not ctx.has_input(i) or tuple(ctx.shape(i)) in (inner, (math.prod(inner),)) for i in (1, 2))


@cuda_kernel("LayerNormalization", supports=_layernorm_supported)
class LayerNormalization:
    """ONNX LayerNormalization-17 (float32; Scale and B of the normalized axes' shape; only Y)."""

    def __init__(self, ctx, *, axis=-1, epsilon=1e-5, stash_type=1):
        shape = tuple(ctx.shape(0))
        axis = axis + len(shape) if axis < 0 else axis
        self.rows, self.len = math.prod(shape[:axis]), math.prod(shape[axis:])
        self.eps = runtime.f32(epsilon)
        self.fn = runtime.function("normalization.cu", "layernorm_f32")
        self.threads = runtime.row_threads(self.len)

    def __call__(self, x, scale, b=None, *, out):
        y = out[0] if isinstance(out, tuple) else out
        runtime.launch_rows(self.fn, self.rows, (x, scale, b if b is not None else runtime.NULL, y,
                                                 np.int64(self.rows), np.int64(self.len), self.eps), self.threads)


def _bn_supported(ctx) -> bool:
    return (float32_io(ctx) and all(ctx.is_static(i) for i in (1, 2, 3, 4))
            and not any(ctx.has_output(i) for i in range(1, ctx.num_outputs)))


@cuda_kernel("BatchNormalization", supports=_bn_supported)
class BatchNormalization:
    """ONNX BatchNormalization in inference mode (float32, static statistics):
    y = x * a + b with a = scale / sqrt(var + eps), b = bias - mean * a (per channel, float64 then float32)."""

    def __init__(self, ctx, *, epsilon=1e-5, momentum=0.9, training_mode=0, spatial=1):
        scale, bias, mean, var = (np.asarray(ctx.value(i), np.float64) for i in (1, 2, 3, 4))
        a = scale / np.sqrt(var + epsilon)
        self.a = runtime.device_array(a.astype(np.float32))
        self.b = runtime.device_array((bias - mean * a).astype(np.float32))
        shape = tuple(ctx.shape(0))
        self.c, self.inner = (shape[1] if len(shape) > 1 else 1), math.prod(shape[2:])
        self.fn = runtime.function("normalization.cu", "channel_affine_f32")

    def __call__(self, x, scale, b, mean, var, *, out):
        y = out[0] if isinstance(out, tuple) else out
        n = y.size
        runtime.launch(self.fn, n, (x, y, self.a, self.b, np.int64(n), np.int64(self.c), np.int64(self.inner)))
