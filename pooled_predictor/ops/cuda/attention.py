"""ScaledDotProductAttention on the GPU (our domain; passes/attention.py makes it from the exported
MatMul -> scale -> mask -> Softmax -> MatMul pattern; the CPU kernel, ops/cpu/attention.py, is the
reference).

    S = Q Kt             cuBLAS strided-batched sgemm into a workspace of the scores' shape
    P = softmax(op(S, scale) + M)   kernels/attention.cu sdpa_softmax_f32, in place, a block per row
    Y = P V              cuBLAS strided-batched sgemm

Shapes: Q (..., S, D), Kt (..., D, T), V (..., T, Dv), M broadcasting with the scores (..., S, T);
float32. On the GPU each of Q, Kt and V has either the scores' batch dimensions or none (size 1:
shared by every batch, stride 0), and M does not enlarge the scores; other broadcasts run on the
CPU (engine/placement.py). Source: Vaswani et al. 2017, eq. 1.
"""

from __future__ import annotations

import math

import numpy as np

from ..shapes.fused import DOMAIN
from . import runtime
from .codes import cuda_kernel, float32_io
from .elementwise import _broadcast_strides

MAX_RANK = 8  # kernels/common.cuh


def _batch_stride(batch: tuple, full: tuple, matrix: int) -> int | None:
    """The element stride between consecutive batches of an operand with batch dims `batch` in a
    product over batch dims `full`: matrix (its own batches), 0 (one matrix for all), None (a partial
    broadcast, which one strided-batched GEMM cannot read)."""
    batch = (1,) * (len(full) - len(batch)) + tuple(batch)
    if batch == tuple(full):
        return matrix
    if math.prod(batch) == 1:
        return 0
    return None


def attention_plan(q: tuple, kt: tuple, v: tuple, m: tuple | None):
    """(batch, S, D, T, Dv, strides of Q, Kt, V, scores shape) for the GPU, or None when the shapes
    need a broadcast it does not do (see the module docstring)."""
    if min(len(q), len(kt), len(v)) < 2:
        return None
    s, d, t, dv = q[-2], q[-1], kt[-1], v[-1]
    if kt[-2] != d or v[-2] != t:
        return None
    try:
        batch = np.broadcast_shapes(tuple(q[:-2]), tuple(kt[:-2]), tuple(v[:-2]))
    except ValueError:
        return None
    scores = tuple(batch) + (s, t)
    if m is not None:
        try:
            if np.broadcast_shapes(scores, tuple(m)) != scores:
                return None
        except ValueError:
            return None
    if len(scores) > MAX_RANK + 1:
        return None
    strides = [_batch_stride(q[:-2], batch, s * d), _batch_stride(kt[:-2], batch, d * t),
               _batch_stride(v[:-2], batch, t * dv)]
    if None in strides:
        return None
    return math.prod(batch), s, d, t, dv, strides, scores


def _supported(ctx) -> bool:
    if not float32_io(ctx) or (ctx.has_input(3) and np.dtype(ctx.dtype(3)) != np.float32):
        return False
    m = tuple(ctx.shape(3)) if ctx.has_input(3) else None
    return attention_plan(tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2)), m) is not None


@cuda_kernel("ScaledDotProductAttention", domain=DOMAIN, supports=_supported)
class ScaledDotProductAttention:
    """Y = MatMul(Softmax(op(MatMul(Q, Kt), scale) + M, axis=-1), V) on the GPU (float32): two cuBLAS
    products and one softmax pass over the scores (module docstring). Workspace: the scores
    (batch, S, T) float32, in the device arena."""

    def __init__(self, ctx, *, scale=1.0, divide=0):
        m = tuple(ctx.shape(3)) if ctx.has_input(3) else None
        self.batch, self.s, self.d, self.t, self.dv, self.strides, scores = attention_plan(
            tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2)), m)
        self.scores = ctx.scratch(scores, np.float32)
        self.rows = math.prod(scores[:-1])
        self.fn = runtime.function("attention.cu", "sdpa_softmax_f32")
        self.threads = runtime.row_threads(self.t)
        mode = 0 if ctx.attr("scale") is None else (2 if int(divide) else 1)  # no scale attribute: Softmax(S [+ M])
        if m is not None:  # the mask's strides over the rows' dims, then along a row
            strides = _broadcast_strides(m, scores)
            rank = len(scores) - 1
            meta = runtime.i64(list(scores[:-1]) + strides[:-1] + [strides[-1]])
        else:
            rank, meta = 0, runtime.i64([0])
        self.args = (np.int64(self.rows), np.int64(self.t), runtime.f32(scale), np.int32(mode), np.int32(rank), meta)

    def __call__(self, q, kt, v, m=None, *, out):
        s = self.scores.array
        sq, sk, sv = self.strides
        runtime.gemm(q, kt, s, self.s, self.t, self.d, batch=self.batch, stride_a=sq, stride_b=sk,
                     stride_c=self.s * self.t)
        runtime.launch_rows(self.fn, self.rows, (s, m if m is not None else runtime.NULL, *self.args), self.threads)
        runtime.gemm(s, v, out, self.s, self.dv, self.t, batch=self.batch, stride_a=self.s * self.t, stride_b=sv,
                     stride_c=self.s * self.dv)
