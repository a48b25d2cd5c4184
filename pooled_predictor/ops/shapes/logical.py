"""Shape rules of Where and Dropout (the other logical and activation ops use common.py)."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from . import shape_rule
from .common import broadcast, check_types


@shape_rule("Where")
def where(ctx):
    """Broadcast of condition (bool), X and Y; X's dtype (ONNX Where-9, -16)."""
    check_types(ctx)
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1), ctx.shape(2)]), ctx.dtype(1))]


def dropout_ratio(ctx) -> float | None:
    """The drop ratio: the attribute (Dropout-10), the input (12+, None when only
    known at forward) or the default 0.5."""
    if ctx.version < 12:
        return float(ctx.attr("ratio", 0.5))
    if not ctx.has_input(1):
        return 0.5
    return float(np.asarray(ctx.value(1)).reshape(-1)[0]) if ctx.is_static(1) else None


@shape_rule("Dropout")
def dropout(ctx):
    """output: data's shape and dtype; mask: data's shape, bool.

    Inference only: a training_mode input (Dropout-12+) that is statically true
    is rejected unless the ratio is statically 0 (then Dropout is the identity,
    as in training with nothing dropped). A training_mode only known at forward
    is checked by the kernel.
    Raises:
        UnsupportedOpError: training_mode is true (random dropout is not implemented).
    """
    check_types(ctx)
    for i, name in ((1, "ratio"), (2, "training_mode")):
        if ctx.has_input(i) and int(np.prod(ctx.shape(i), dtype=np.int64)) != 1:
            raise ctx.error(f"{name} must be a scalar (shape ()), got shape {tuple(ctx.shape(i))}")
    if ctx.version >= 12 and ctx.is_static(2) and bool(np.asarray(ctx.value(2)).reshape(-1)[0]):
        if dropout_ratio(ctx) != 0.0:
            raise UnsupportedOpError(
                f"node {ctx.node.name!r} (Dropout): training_mode is true; only inference is "
                f"supported (training_mode false or absent, or ratio 0)")
    return [(ctx.shape(0), ctx.dtype(0)), (ctx.shape(0), np.dtype(bool))]
