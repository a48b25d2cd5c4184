"""Shape rules of reductions: Reduce* (axes attribute or input, keepdims,
noop_with_empty_axes) and ArgMax/ArgMin."""

from __future__ import annotations

import numpy as np

from . import shape_rule
from .common import check_types, norm_axes, norm_axis


def reduce_axes(ctx) -> tuple[int, ...] | None:
    """Normalized reduction axes; () means 'reduce nothing' (noop_with_empty_axes).

    ONNX: axes is an attribute up to ReduceSum-11 / Reduce*-13 and an optional
    input from ReduceSum-13 / Reduce*-18; when absent or empty, all axes are
    reduced unless noop_with_empty_axes=1.
    """
    rank = len(ctx.shape(0))
    if ctx.has_input(1):
        axes = [int(a) for a in np.asarray(ctx.value(1)).reshape(-1)]
    else:
        axes = ctx.attr("axes")
        axes = None if axes is None else [int(a) for a in axes]
    if not axes:
        return () if int(ctx.attr("noop_with_empty_axes", 0)) else tuple(range(rank))
    return tuple(sorted(norm_axes(ctx, axes, rank)))


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@shape_rule("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def reduce(ctx):
    check_types(ctx)
    axes = reduce_axes(ctx)
    keep = bool(int(ctx.attr("keepdims", 1)))
    return [(reduced_shape(ctx.shape(0), axes, keep), ctx.dtype(0))]


@shape_rule("ArgMax", "ArgMin")
def arg_reduce(ctx):
    """int64 indices; the reduced axis (in [-r, r-1]) must not be empty."""
    check_types(ctx)
    shape = ctx.shape(0)
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    if shape[axis] == 0:
        raise ctx.error(f"axis {axis} of shape {tuple(shape)} is empty: there is no "
                        f"{ctx.node.op_type[3:].lower()}imum to index")
    keep = bool(int(ctx.attr("keepdims", 1)))
    return [(reduced_shape(shape, (axis,), keep), np.dtype(np.int64))]
