"""Shape rules of rearranging and generating ops: Trilu, CumProd (CumSum's is
`same_as_input`), OneHot, EyeLike, DepthToSpace, SpaceToDepth, ReverseSequence,
CenterCropPad.

OneHot's depth and CenterCropPad's shape are input values: when they are only
known at forward time the rule raises NotStatic (ctx.value) and the Net sizes
the output per forward.
"""

from __future__ import annotations

import numpy as np

from ...ir import elem_dtype
from . import shape_rule
from .common import check_types, norm_axes, norm_axis
from .reshape import int_values


@shape_rule("Trilu")
def trilu(ctx):
    """X's shape and dtype; X has rank >= 2; k (optional) is a scalar."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    if len(shape) < 2:
        raise ctx.error(f"input must have rank >= 2, got shape {shape}")
    if ctx.has_input(1) and int(np.prod(ctx.shape(1), dtype=np.int64)) != 1:
        raise ctx.error(f"k must be a scalar, got shape {tuple(ctx.shape(1))}")
    return [(shape, ctx.dtype(0))]


@shape_rule("CumProd")
def cumprod(ctx):
    check_types(ctx)
    return [(tuple(ctx.shape(0)), ctx.dtype(0))]


def one_hot_depth(ctx) -> int:
    """OneHot's depth: the scalar input 1, rounded down to an integer, >= 1."""
    d = np.asarray(ctx.value(1)).reshape(-1)
    if d.size != 1:
        raise ctx.error(f"depth must be a scalar, got {d.size} values")
    depth = int(d[0])
    if depth < 1:
        raise ctx.error(f"depth={d[0]} must be >= 1")
    return depth


@shape_rule("OneHot")
def one_hot(ctx):
    """indices' shape with depth inserted at `axis` (in [-r-1, r]); values' dtype."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), len(shape) + 1)
    if int(np.prod(ctx.shape(2), dtype=np.int64)) != 2:
        raise ctx.error(f"values must hold two elements [off_value, on_value], got shape "
                        f"{tuple(ctx.shape(2))}")
    return [(shape[:axis] + (one_hot_depth(ctx),) + shape[axis:], ctx.dtype(2))]


@shape_rule("EyeLike")
def eye_like(ctx):
    """input's 2-D shape; dtype from the `dtype` attribute (default: input's)."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    if len(shape) != 2:
        raise ctx.error(f"input must be 2-D, got shape {shape}")
    dtype = ctx.dtype(0)
    if ctx.attr("dtype") is not None:
        dtype = elem_dtype(int(ctx.attr("dtype")))
        if dtype is None:
            raise ctx.error(f"dtype={ctx.attr('dtype')} has no numpy dtype")
    return [(shape, dtype)]


def _blocks(ctx) -> tuple[tuple, int]:
    shape = tuple(ctx.shape(0))
    if len(shape) != 4:
        raise ctx.error(f"input must be 4-D (N, C, H, W), got shape {shape}")
    b = ctx.attr("blocksize")
    if b is None or int(b) < 1:
        raise ctx.error(f"blocksize={b} must be a positive integer")
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"mode={mode!r} must be 'DCR' or 'CRD'")
    return shape, int(b)


@shape_rule("DepthToSpace")
def depth_to_space(ctx):
    """(N, C / b^2, H * b, W * b); C must be a multiple of b^2."""
    check_types(ctx)
    (n, c, h, w), b = _blocks(ctx)
    if c % (b * b):
        raise ctx.error(f"{c} channels are not a multiple of blocksize^2 = {b * b}")
    return [((n, c // (b * b), h * b, w * b), ctx.dtype(0))]


@shape_rule("SpaceToDepth")
def space_to_depth(ctx):
    """(N, C * b^2, H / b, W / b); H and W must be multiples of b."""
    check_types(ctx)
    (n, c, h, w), b = _blocks(ctx)
    if h % b or w % b:
        raise ctx.error(f"H={h} and W={w} must be multiples of blocksize={b}")
    return [((n, c * b * b, h // b, w // b), ctx.dtype(0))]


@shape_rule("ReverseSequence")
def reverse_sequence(ctx):
    """input's shape; time_axis and batch_axis are 0 and 1 (either order); sequence_lens (batch,)."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    t, b = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    if len(shape) < 2 or {t, b} != {0, 1}:
        raise ctx.error(f"input {shape} needs rank >= 2 and time_axis, batch_axis = 0, 1 in some "
                        f"order; got {t}, {b}")
    if tuple(ctx.shape(1)) != (shape[b],):
        raise ctx.error(f"sequence_lens must have shape ({shape[b]},), got {tuple(ctx.shape(1))}")
    return [(shape, ctx.dtype(0))]


def crop_pad_geometry(ctx) -> tuple[tuple, tuple, tuple]:
    """(output shape, source slices, destination slices) of a CenterCropPad node.

    Per listed axis: a longer input is cropped from (d - s) // 2, a shorter one
    is placed at (s - d) // 2 in zeros (the centre, rounding towards the start).
    """
    shape = tuple(ctx.shape(0))
    target = int_values(ctx, 1, "shape")
    axes = ctx.attr("axes")
    axes = list(range(len(shape))) if axes is None else norm_axes(ctx, axes, len(shape))
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} must give one length per axis of {axes}")
    out, src, dst = list(shape), [slice(None)] * len(shape), [slice(None)] * len(shape)
    for a, s in zip(axes, target):
        d = shape[a]
        if s < 0:
            raise ctx.error(f"shape {target} must not be negative")
        out[a] = s
        if s < d:
            src[a] = slice((d - s) // 2, (d - s) // 2 + s)
        elif s > d:
            dst[a] = slice((s - d) // 2, (s - d) // 2 + d)
    return tuple(out), tuple(src), tuple(dst)


@shape_rule("CenterCropPad")
def center_crop_pad(ctx):
    check_types(ctx)
    return [(crop_pad_geometry(ctx)[0], ctx.dtype(0))]
