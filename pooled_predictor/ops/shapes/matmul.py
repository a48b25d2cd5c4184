"""Shape rules of MatMul (numpy matmul semantics) and BatchNormalization."""

from __future__ import annotations

from . import shape_rule
from .common import broadcast


@shape_rule("MatMul")
def matmul(ctx):
    """ONNX MatMul is numpy.matmul: 1-D operands are promoted then squeezed."""
    return [(matmul_shape(ctx, ctx.shape(0), ctx.shape(1)), ctx.dtype(0))]


def matmul_shape(ctx, a, b) -> tuple:
    """Shape of numpy.matmul(A, B) (shared by MatMulInteger and QLinearMatMul)."""
    if len(a) == 0 or len(b) == 0:
        raise ctx.error("MatMul operands must have rank >= 1")
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ctx.error(f"inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    batch = broadcast(ctx, [a2[:-2], b2[:-2]])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


@shape_rule("BatchNormalization")
def batch_normalization(ctx):
    """Inference form: Y has X's shape; C = X.shape[1] must match the 1-D parameters."""
    x = ctx.shape(0)
    c = x[1] if len(x) > 1 else 1
    for i in range(1, 5):
        if ctx.has_input(i) and tuple(ctx.shape(i)) not in ((c,),):
            raise ctx.error(f"input {i} has shape {tuple(ctx.shape(i))}, expected ({c},)")
    return [(x, ctx.dtype(0))] + [((c,), ctx.dtype(3))] * (ctx.num_outputs - 1)
