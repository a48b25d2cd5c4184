"""Shape rules of data-movement ops: Cast, Transpose, Squeeze, Unsqueeze, Concat, Shape, Size."""

from __future__ import annotations

import numpy as np

from ...ir import elem_dtype
from . import shape_rule
from .common import norm_axes, norm_axis


@shape_rule("Cast")
def cast(ctx):
    to = elem_dtype(int(ctx.attr("to")))
    if to is None:
        raise ctx.error(f"Cast to elem_type {ctx.attr('to')} has no numpy dtype")
    return [(ctx.shape(0), to)]


@shape_rule("CastLike")
def cast_like(ctx):
    return [(ctx.shape(0), ctx.dtype(1))]


@shape_rule("Transpose")
def transpose(ctx):
    """Y's dims are X's in the order of perm (default: reversed), a permutation of 0 .. rank - 1.

    Raises:
        ShapeInferenceError: perm is not such a permutation; negative entries included, as onnx's shape
            inference and onnxruntime refuse them ("Invalid attribute perm {0, -1, 1}"; found by tests/fuzz).
    """
    rank = len(ctx.shape(0))
    perm = ctx.attr("perm")
    perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm={perm} is not a permutation of the {rank} axes 0 .. {rank - 1}")
    return [(tuple(ctx.shape(0)[p] for p in perm), ctx.dtype(0))]


def axes_of(ctx, input_index: int = 1, attr: str = "axes"):
    """Axes from the attribute (older versions) or the optional input (newer); None if absent."""
    if ctx.has_input(input_index):
        return [int(a) for a in np.asarray(ctx.value(input_index)).reshape(-1)]
    a = ctx.attr(attr)
    return None if a is None else [int(x) for x in a]


@shape_rule("Squeeze")
def squeeze(ctx):
    shape = ctx.shape(0)
    axes = axes_of(ctx)
    if axes is None:
        return [(tuple(d for d in shape if d != 1), ctx.dtype(0))]
    axes = norm_axes(ctx, axes, len(shape))
    bad = [a for a in axes if shape[a] != 1]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of shape {shape}: size is not 1")
    return [(tuple(d for i, d in enumerate(shape) if i not in axes), ctx.dtype(0))]


@shape_rule("Unsqueeze")
def unsqueeze(ctx):
    shape = ctx.shape(0)
    axes = axes_of(ctx)
    if axes is None:
        raise ctx.error("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    axes = norm_axes(ctx, axes, rank)
    out, it = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return [(tuple(out), ctx.dtype(0))]


@shape_rule("Concat")
def concat(ctx):
    shapes = [s for i, s in enumerate(ctx.shapes) if ctx.has_input(i)]
    rank = len(shapes[0])
    axis = norm_axis(ctx, int(ctx.attr("axis")), rank)
    for s in shapes[1:]:
        if len(s) != rank or any(a != b for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis):
            raise ctx.error(f"shapes {shapes} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), ctx.dtype(0))]


def _shape_slice(ctx):
    rank = len(ctx.shape(0))
    start, end = int(ctx.attr("start", 0)), ctx.attr("end")
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else int(end)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return start, max(end, start)


@shape_rule("Shape")
def shape(ctx):
    start, end = _shape_slice(ctx)
    return [((end - start,), np.dtype(np.int64))]


@shape_rule("Size")
def size(ctx):
    return [((), np.dtype(np.int64))]
