"""Shape rules of indexing ops: Gather, Slice, Split, TopK (ArgMax's is in reduce.py).

The index geometry (`slice_params`, `split_sizes`, `topk_k`) is shared with
the CPU kernels, which resolve it once at reshape.
"""

from __future__ import annotations

import numpy as np

from . import shape_rule
from .common import check_types, norm_axes, norm_axis
from .reshape import int_values


# ---- Gather ------------------------------------------------------------------
@shape_rule("Gather")
def gather(ctx):
    """data.shape[:axis] + indices.shape + data.shape[axis+1:]."""
    check_types(ctx)
    data, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if not data:
        raise ctx.error("data must have rank >= 1, got a scalar")
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), len(data))
    return [(data[:axis] + idx + data[axis + 1:], ctx.dtype(0))]


# ---- Slice -------------------------------------------------------------------
def slice_params(ctx) -> tuple[slice, ...]:
    """One Python slice per axis of a Slice node, clamped as ONNX Slice-13 specifies.

    Slice-1: `starts`, `ends`, `axes` attributes; Slice-10+: inputs 1-4
    (starts, ends, optional axes and steps). Axes default to 0..len(starts)-1,
    steps to 1. Negative starts/ends count from the end; then starts are clamped
    to [0, d] ([0, d-1] when stepping back) and ends to [0, d] ([-1, d-1] when
    stepping back), so INT_MAX / INT_MIN mean "to the end".
    """
    shape = tuple(ctx.shape(0))
    rank = len(shape)
    if ctx.version < 10:
        if ctx.attr("starts") is None or ctx.attr("ends") is None:
            raise ctx.error("Slice-1 needs the `starts` and `ends` attributes")
        starts = [int(v) for v in ctx.attr("starts")]
        ends = [int(v) for v in ctx.attr("ends")]
        axes = ctx.attr("axes")
        axes = None if axes is None else [int(v) for v in axes]
        steps = None
    else:
        starts, ends = int_values(ctx, 1, "starts"), int_values(ctx, 2, "ends")
        axes = int_values(ctx, 3, "axes") if ctx.has_input(3) else None
        steps = int_values(ctx, 4, "steps") if ctx.has_input(4) else None
    n = len(starts)
    axes = list(range(n)) if axes is None else axes
    steps = [1] * n if steps is None else steps
    if not len(ends) == len(axes) == len(steps) == n:
        raise ctx.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} must have "
                        f"the same length")
    if any(s == 0 for s in steps):
        raise ctx.error(f"steps {steps} must not contain 0")
    axes = norm_axes(ctx, axes, rank)
    out = [slice(None)] * rank
    for a, start, end, step in zip(axes, starts, ends, steps):
        d = shape[a]
        start = start + d if start < 0 else start
        end = end + d if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), d), min(max(end, 0), d)
        else:
            start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
        out[a] = slice(start, end if end >= 0 else None, step)
    return tuple(out)


def _slice_length(s: slice, d: int) -> int:
    return len(range(*s.indices(d))) if d else 0


@shape_rule("Slice")
def slice_(ctx):
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    sl = slice_params(ctx)
    return [(tuple(_slice_length(s, d) for s, d in zip(sl, shape)), ctx.dtype(0))]


# ---- Split -------------------------------------------------------------------
def split_sizes(ctx) -> tuple[int, list[int]]:
    """(axis, length of every output along it) of a Split node.

    The lengths come from the `split` attribute (Split-2/11) or input
    (Split-13+), else from `num_outputs` (Split-18: chunks of ceil(d / n), the
    last one smaller), else equal parts, one per node output.
    """
    shape = tuple(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    d = shape[axis]
    n_out = ctx.num_outputs
    split = None
    if ctx.version >= 13:
        if ctx.has_input(1):
            split = int_values(ctx, 1, "split") or None
    elif ctx.attr("split") is not None:
        split = [int(s) for s in ctx.attr("split")] or None
    num_outputs = ctx.attr("num_outputs")
    if split is not None:
        if num_outputs is not None:
            raise ctx.error("give either the split input or the num_outputs attribute, not both")
        if len(split) != n_out:
            raise ctx.error(f"split {split} has {len(split)} entries for {n_out} outputs")
        if any(s < 0 for s in split) or sum(split) != d:
            raise ctx.error(f"split {split} must be >= 0 and sum to {d}, the length of axis {axis}")
        return axis, split
    if num_outputs is not None:
        n = int(num_outputs)
        if n != n_out:
            raise ctx.error(f"num_outputs={n} but the node has {n_out} outputs")
        if n < 1 or n > d:
            raise ctx.error(f"num_outputs={n} must be in [1, {d}] (the length of axis {axis})")
        chunk = -(-d // n)
        last = d - chunk * (n - 1)
        if last <= 0:
            raise ctx.error(f"axis {axis} of length {d} cannot be split into {n} chunks of {chunk} "
                            f"with a smaller last one")
        return axis, [chunk] * (n - 1) + [last]
    if n_out < 1 or d % n_out:
        raise ctx.error(f"axis {axis} of length {d} does not split into {n_out} equal parts; "
                        f"give split sizes" + (" or num_outputs" if ctx.version >= 18 else ""))
    return axis, [d // n_out] * n_out


@shape_rule("Split")
def split(ctx):
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    axis, sizes = split_sizes(ctx)
    return [(shape[:axis] + (s,) + shape[axis + 1:], ctx.dtype(0)) for s in sizes]


# ---- TopK --------------------------------------------------------------------
def topk_k(ctx) -> tuple[int, int]:
    """(axis, k) of a TopK node: k is the attribute (TopK-1) or input 1 (TopK-10+)."""
    shape = tuple(ctx.shape(0))
    if not shape:
        raise ctx.error("X must have rank >= 1, got a scalar")
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), len(shape))
    if ctx.version < 10:
        if ctx.attr("k") is None:
            raise ctx.error("TopK-1 needs the `k` attribute")
        k = int(ctx.attr("k"))
    else:
        ks = int_values(ctx, 1, "K")
        if len(ks) != 1:
            raise ctx.error(f"K must hold a single value, got {ks}")
        k = ks[0]
    if not 0 <= k <= shape[axis]:
        raise ctx.error(f"k={k} must be in [0, {shape[axis]}] (the length of axis {axis})")
    return axis, k


@shape_rule("TopK")
def topk(ctx):
    """Values and Indices (int64): X's shape with k along `axis`."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    axis, k = topk_k(ctx)
    out = shape[:axis] + (k,) + shape[axis + 1:]
    return [(out, ctx.dtype(0)), (out, np.dtype(np.int64))]
