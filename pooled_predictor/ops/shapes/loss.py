"""Shape rules of the loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from . import shape_rule
from .common import check_types

REDUCTIONS = ("none", "sum", "mean")


def loss_shape(ctx) -> tuple:
    """The loss's shape: target's for reduction 'none', else a scalar ().

    Checks input (N, C, d1..dk) against target (N, d1..dk) and weight (C,).
    """
    x, t = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(x) < 2 or t != x[:1] + x[2:]:
        raise ctx.error(f"input {x} must be (N, C, d1..dk) and target {t} (N, d1..dk)")
    if ctx.has_input(2) and tuple(ctx.shape(2)) != (x[1],):
        raise ctx.error(f"weight has shape {tuple(ctx.shape(2))}; expected ({x[1]},), one per class")
    reduction = ctx.attr("reduction", "mean")
    if reduction not in REDUCTIONS:
        raise ctx.error(f"reduction={reduction!r} must be one of {REDUCTIONS}")
    return t if reduction == "none" else ()


@shape_rule("NegativeLogLikelihoodLoss")
def nll_loss(ctx):
    check_types(ctx)
    return [(loss_shape(ctx), ctx.dtype(0))]


@shape_rule("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx):
    """output (loss) and the optional log_prob (scores' shape)."""
    check_types(ctx)
    return [(loss_shape(ctx), ctx.dtype(0)), (tuple(ctx.shape(0)), ctx.dtype(0))]
