"""Shape rules of RMSNormalization, GroupNormalization, LpNormalization and
MeanVarianceNormalization: Y has X's shape and dtype."""

from __future__ import annotations

from . import shape_rule
from .common import broadcast_to, check_types, norm_axes, norm_axis
from .normalization import stash_dtype


@shape_rule("RMSNormalization")
def rms_normalization(ctx):
    """X's shape; scale broadcasts unidirectionally to X; axis in [-r, r-1]."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    norm_axis(ctx, int(ctx.attr("axis", -1)), len(shape))
    broadcast_to(ctx, tuple(ctx.shape(1)), shape, "scale")
    stash_dtype(ctx)
    return [(shape, ctx.dtype(0))]


@shape_rule("GroupNormalization")
def group_normalization(ctx):
    check_types(ctx)
    if ctx.attr("num_groups") is None:
        raise ctx.error("the required attribute num_groups is missing")
    return [(tuple(ctx.shape(0)), ctx.dtype(0))]


@shape_rule("LpNormalization")
def lp_normalization(ctx):
    check_types(ctx)
    norm_axis(ctx, int(ctx.attr("axis", -1)), len(ctx.shape(0)))
    return [(tuple(ctx.shape(0)), ctx.dtype(0))]


@shape_rule("MeanVarianceNormalization")
def mean_variance_normalization(ctx):
    check_types(ctx)
    norm_axes(ctx, ctx.attr("axes", [0, 2, 3]), len(ctx.shape(0)))
    return [(tuple(ctx.shape(0)), ctx.dtype(0))]
