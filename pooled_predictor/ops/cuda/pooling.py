"""Pooling on the GPU (kernels/pooling.cu): MaxPool (without the Indices output), AveragePool, and
GlobalAveragePool / GlobalMaxPool, float32 over 1-D or 2-D windows; the window geometry is the shape
rule's (ops/shapes/pooling.pool_geometry: pads, auto_pad, ceil_mode, dilations)."""

from __future__ import annotations

import math

import numpy as np

from ..shapes.pooling import pool_geometry
from . import runtime
from .codes import cuda_kernel, float32_io


def _pool_supported(ctx) -> bool:
    return float32_io(ctx) and len(ctx.shape(0)) in (3, 4) and not (ctx.num_outputs > 1 and ctx.has_output(1))


class _Pool2d:
    def __init__(self, ctx, mode: int):
        axes = pool_geometry(ctx)
        if len(axes) == 1:  # 1-D: a window of height 1 over H = 1
            axes = [type(axes[0])(1, 1, 1, 1, 0, 0, 1)] + axes
        h, w = axes
        shape = ctx.shape(0)
        self.nc = shape[0] * shape[1]
        self.fn = runtime.function("pooling.cu", "pool2d_f32")
        self.args = tuple(np.int32(v) for v in (self.nc, h.size, w.size, h.out, w.out, h.kernel, w.kernel, h.stride,
                                                w.stride, h.head, w.head, h.dilation, w.dilation, h.tail, w.tail,
                                                mode))

    def __call__(self, x, *_, out):
        if isinstance(out, tuple):  # MaxPool's schema has two outputs (Indices: never asked of this kernel)
            out = out[0]
        runtime.launch(self.fn, out.size, (x, out, *self.args))


@cuda_kernel("MaxPool", supports=_pool_supported)
class MaxPool(_Pool2d):
    """ONNX MaxPool (float32, no Indices output, storage_order irrelevant) on the GPU."""

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
                 storage_order=0, strides=None):
        super().__init__(ctx, 0)


@cuda_kernel("AveragePool", supports=_pool_supported)
class AveragePool(_Pool2d):
    """ONNX AveragePool (float32; count_include_pad as onnxruntime counts) on the GPU."""

    def __init__(self, ctx, *, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0,
                 dilations=None, pads=None, strides=None):
        super().__init__(ctx, 2 if count_include_pad else 1)


class _Global:
    mode = 1

    def __init__(self, ctx):
        shape = ctx.shape(0)
        self.rows, self.inner = shape[0] * shape[1], math.prod(shape[2:])
        self.fn = runtime.function("pooling.cu", "global_pool_f32")
        self.threads = runtime.row_threads(self.inner)

    def __call__(self, x, *, out):
        runtime.launch_rows(self.fn, self.rows, (x, out, np.int64(self.rows), np.int64(self.inner),
                                                 np.int32(self.mode)), self.threads)


@cuda_kernel("GlobalAveragePool")
class GlobalAveragePool(_Global):
    """ONNX GlobalAveragePool (float32): the mean over every spatial axis, a block per (n, c)."""

    mode = 1


@cuda_kernel("GlobalMaxPool")
class GlobalMaxPool(_Global):
    """ONNX GlobalMaxPool (float32): the max over every spatial axis, a block per (n, c)."""

    mode = 0
