"""Reductions on the GPU (kernels/reduce.cu): ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSumExp of float32 over any set of static axes; a block
per output element (the axes from the attribute or a static input: ops/shapes/reduce.reduce_axes)."""

from __future__ import annotations

import math

import numpy as np

from ..shapes.reduce import reduce_axes
from . import runtime
from .codes import REDUCE, cuda_kernel, float32_io


def _reduce_supported(ctx) -> bool:
    return float32_io(ctx) and len(ctx.shape(0)) <= 8 and (not ctx.has_input(1) or ctx.is_static(1))


class _Reduce:
    code = 0

    def __init__(self, ctx, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        shape = tuple(ctx.shape(0))
        red = reduce_axes(ctx)
        st, s = [1] * len(shape), 1
        for d in range(len(shape) - 1, -1, -1):
            st[d], s = s, s * shape[d]
        kept = [d for d in range(len(shape)) if d not in red]
        self.n_out = math.prod(shape[d] for d in kept)
        self.n_red = math.prod(shape[d] for d in red)
        meta = [shape[d] for d in kept] + [st[d] for d in kept] + [shape[d] for d in red] + [st[d] for d in red]
        self.args = (np.int64(self.n_out), np.int64(self.n_red), np.int32(len(kept)), np.int32(len(red)),
                     runtime.i64(meta or [0]), np.int32(self.code))
        self.fn = runtime.function("reduce.cu", "reduce_f32")
        self.threads = runtime.row_threads(self.n_red)

    def __call__(self, x, *_, out):
        runtime.launch_rows(self.fn, self.n_out, (x, out, *self.args), self.threads)


for _op, _code in REDUCE.items():
    cuda_kernel(_op, supports=_reduce_supported)(
        type(_op, (_Reduce,), {"code": _code, "__doc__": f"ONNX {_op} (float32, static axes) on the GPU."}))
