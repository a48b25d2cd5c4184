"""Shape rules of element- and slice-indexed ops: GatherElements, GatherND,
ScatterElements, Scatter, ScatterND and TensorScatter.

Every rule checks the rank and shape relations the spec states between data,
indices and updates; the index values themselves are checked by the kernels
(they are data).
"""

from __future__ import annotations

from . import shape_rule
from .common import check_types, norm_axis


def _axis(ctx, rank: int, default: int = 0) -> int:
    return norm_axis(ctx, int(ctx.attr("axis", default)), rank)


@shape_rule("GatherElements")
def gather_elements(ctx):
    """indices' shape, data's dtype; data and indices have the same rank >= 1."""
    check_types(ctx)
    data, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if not data or len(idx) != len(data):
        raise ctx.error(f"data {data} and indices {idx} must have the same rank >= 1")
    _axis(ctx, len(data))
    return [(idx, ctx.dtype(0))]


def gather_nd_shape(ctx, data: tuple, idx: tuple, b: int) -> tuple:
    """Output of GatherND: idx.shape[:-1] + data.shape[b + k:], k = idx.shape[-1]."""
    if len(data) < 1 or len(idx) < 1:
        raise ctx.error(f"data {data} and indices {idx} must have rank >= 1")
    if not 0 <= b < min(len(data), len(idx)):
        raise ctx.error(f"batch_dims={b} must be in [0, {min(len(data), len(idx)) - 1}]")
    if data[:b] != idx[:b]:
        raise ctx.error(f"the first batch_dims={b} dims of data {data} and indices {idx} differ")
    k = idx[-1]
    if not 1 <= k <= len(data) - b:
        raise ctx.error(f"indices' last dim {k} must be in [1, {len(data) - b}] (rank of data "
                        f"{len(data)} minus batch_dims {b})")
    return idx[:-1] + data[b + k:]


@shape_rule("GatherND")
def gather_nd(ctx):
    check_types(ctx)
    data, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    return [(gather_nd_shape(ctx, data, idx, int(ctx.attr("batch_dims", 0))), ctx.dtype(0))]


@shape_rule("ScatterElements", "Scatter")
def scatter_elements(ctx):
    """data's shape and dtype; data, indices and updates have one rank, indices' shape is updates'."""
    check_types(ctx)
    data, idx, upd = tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2))
    if not data or len(idx) != len(data) or idx != upd:
        raise ctx.error(f"data {data}, indices {idx} and updates {upd} must have one rank >= 1, "
                        f"indices and updates one shape")
    axis = _axis(ctx, len(data))
    bad = [i for i, (d, n) in enumerate(zip(data, idx)) if i != axis and n > d]
    if bad:
        raise ctx.error(f"indices {idx} are longer than data {data} on axes {bad}")
    return [(data, ctx.dtype(0))]


@shape_rule("ScatterND")
def scatter_nd(ctx):
    """data's shape and dtype; updates' shape is indices.shape[:-1] + data.shape[k:]."""
    check_types(ctx)
    data, idx, upd = tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2))
    if not data or not idx or not 1 <= idx[-1] <= len(data):
        raise ctx.error(f"indices {idx}: the last dim must be in [1, {len(data)}] (rank of data)")
    want = idx[:-1] + data[idx[-1]:]
    if upd != want:
        raise ctx.error(f"updates have shape {upd}; data {data} and indices {idx} need {want}")
    return [(data, ctx.dtype(0))]


@shape_rule("TensorScatter")
def tensor_scatter(ctx):
    """past_cache's shape; update differs from it only along `axis` (not the batch axis 0)."""
    check_types(ctx)
    past, upd = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(past) < 2 or len(upd) != len(past):
        raise ctx.error(f"past_cache {past} and update {upd} must have one rank >= 2")
    axis = _axis(ctx, len(past), -2)
    if axis == 0:
        raise ctx.error("axis must not be 0, the batch axis")
    if any(a != b for i, (a, b) in enumerate(zip(past, upd)) if i != axis) or upd[axis] > past[axis]:
        raise ctx.error(f"update {upd} must equal past_cache {past} except along axis {axis}, "
                        f"where it may be shorter")
    if ctx.has_input(2) and tuple(ctx.shape(2)) != (past[0],):
        raise ctx.error(f"write_indices must have shape ({past[0]},), got {tuple(ctx.shape(2))}")
    return [(past, ctx.dtype(0))]
