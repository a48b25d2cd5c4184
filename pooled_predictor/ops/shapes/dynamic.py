"""Shape rules of ops whose output shapes depend on input values (NonZero,
Compress, Unique, NonMaxSuppression): they check input types and ranks and give
the output dtypes; the kernels (registered with dynamic_output=True) compute the
shapes per forward."""

from __future__ import annotations

import numpy as np

from . import shape_rule
from .common import check_types, norm_axis

_I64 = np.dtype(np.int64)


@shape_rule("NonZero")
def non_zero(ctx):
    """Y: int64 (rank, count)."""
    check_types(ctx)
    return [(None, _I64)]


@shape_rule("Compress")
def compress(ctx):
    """output: input's dtype; condition must be 1-D bool; axis within input's rank."""
    check_types(ctx)
    if len(ctx.shape(1)) != 1:
        raise ctx.error(f"condition must be 1-D, got shape {tuple(ctx.shape(1))}")
    if ctx.attr("axis") is not None:
        norm_axis(ctx, int(ctx.attr("axis")), len(ctx.shape(0)))
    return [(None, ctx.dtype(0))]


@shape_rule("Unique")
def unique(ctx):
    """Y: X's dtype; indices, inverse_indices, counts: int64."""
    check_types(ctx)
    if ctx.attr("axis") is not None:
        norm_axis(ctx, int(ctx.attr("axis")), len(ctx.shape(0)))
    return [(None, ctx.dtype(0))] + [(None, _I64)] * 3


@shape_rule("NonMaxSuppression")
def non_max_suppression(ctx):
    """selected_indices: int64 (K, 3); boxes (B, N, 4) and scores (B, C, N) float."""
    check_types(ctx)
    b, s = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(b) != 3 or b[2] != 4 or len(s) != 3 or b[0] != s[0] or b[1] != s[2]:
        raise ctx.error(f"boxes {b} must be (B, N, 4) and scores {s} (B, C, N)")
    return [(None, _I64)]
