"""Shape rule of Resize (versions 10, 11, 13, 18, 19).

`resize_sizes` is shared with the CPU kernel: it gives the output shape and
the per-axis scale used by the coordinate transformation, computed as
onnxruntime does (in float32, which decides borderline output sizes):

* scales given: out = floor(float32(scale) * float32(in)), scale as given;
* sizes given: out = sizes, scale = float32(out) / float32(in) (1 when in = 0);
  keep_aspect_ratio_policy (18+) not_larger / not_smaller replaces the scale
  of every resized axis by their min / max, and out = round(scale * in), half
  away from zero.

Inputs: Resize-10 (X, scales); 11+ (X, roi, scales, sizes), roi/scales optional
from 13; exactly one of scales and sizes is non-empty. axes (18+) names the
axes scales/sizes/roi refer to (the others keep scale 1).
"""

from __future__ import annotations

import numpy as np

from . import shape_rule
from .common import norm_axes


def attr_str(v, default: str) -> str:
    """A string attribute (str or bytes) or its default."""
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def resize_axes(ctx, rank: int) -> list[int]:
    """The axes scales/sizes/roi refer to: the `axes` attribute (18+) or all."""
    axes = ctx.attr("axes") if ctx.version >= 18 else None
    if axes is None or len(axes) == 0:
        return list(range(rank))
    return norm_axes(ctx, [int(a) for a in axes], rank)


def resize_sizes(ctx) -> tuple[tuple, np.ndarray]:
    """(output shape, float32 scale per axis) of a Resize node (see module doc).

    Raises:
        NotStatic: scales or sizes are only known at forward.
        ShapeInferenceError: both or neither of scales and sizes, wrong lengths,
            non-positive scales, an unknown keep_aspect_ratio_policy.
    """
    shape = tuple(int(d) for d in ctx.shape(0))
    rank = len(shape)
    axes = resize_axes(ctx, rank)
    scales_in, sizes_in = (1, None) if ctx.version < 11 else (2, 3)
    scales = sizes = None
    if ctx.has_input(scales_in):
        v = np.asarray(ctx.value(scales_in)).reshape(-1)
        scales = v if v.size else None
    if sizes_in is not None and ctx.has_input(sizes_in):
        v = np.asarray(ctx.value(sizes_in)).reshape(-1)
        sizes = v if v.size else None
    if (scales is None) == (sizes is None):
        raise ctx.error("exactly one of scales and sizes must be given (non-empty), "
                        f"got {'both' if scales is not None else 'neither'}")
    given = scales if scales is not None else sizes
    if given.size != len(axes):
        raise ctx.error(f"{'scales' if scales is not None else 'sizes'} has {given.size} values, expected "
                        f"{len(axes)} (one per {'axis in axes' if len(axes) != rank else 'input axis'})")
    f32 = np.float32
    in32 = np.array(shape, f32)
    out = list(shape)
    scale = np.ones(rank, f32)
    if scales is not None:
        if np.any(scales <= 0):
            raise ctx.error(f"scales {scales.tolist()} must be positive")
        for a, s in zip(axes, scales.astype(f32)):
            scale[a] = s
            out[a] = int(np.floor(f32(s) * in32[a]))
        return tuple(out), scale
    sizes = sizes.astype(np.int64)
    if np.any(sizes < 0):
        raise ctx.error(f"sizes {sizes.tolist()} must be non-negative")
    for a, n in zip(axes, sizes):
        if shape[a] == 0 and n != 0:
            raise ctx.error(f"axis {a} has length 0 and cannot be resized to {int(n)}")
        out[a] = int(n)
        scale[a] = f32(1) if shape[a] == 0 else f32(n) / in32[a]
    policy = attr_str(ctx.attr("keep_aspect_ratio_policy"), "stretch") if ctx.version >= 18 else "stretch"
    if policy == "stretch":
        return tuple(out), scale
    if policy not in ("not_larger", "not_smaller"):
        raise ctx.error(f"keep_aspect_ratio_policy={policy!r}; expected stretch, not_larger or not_smaller")
    chosen = f32(min(scale[a] for a in axes) if policy == "not_larger" else max(scale[a] for a in axes))
    for a in axes:
        scale[a] = chosen
        v = float(f32(chosen * in32[a]))
        out[a] = int(np.floor(v + 0.5)) if v >= 0 else -int(np.floor(-v + 0.5))
    return tuple(out), scale


@shape_rule("Resize")
def resize(ctx):
    """Y: X's dtype, shape from scales or sizes (see resize_sizes)."""
    if len(ctx.shape(0)) == 0:
        raise ctx.error("X must have rank >= 1")
    out, _ = resize_sizes(ctx)
    return [(out, ctx.dtype(0))]


def upsample_as_resize(ctx):
    """The Resize-10 context of an Upsample-7 (scales attribute) or -9 (scales input) node.

    Upsample-7/9 are Resize-10 under their old name: out = floor(in * scale),
    asymmetric coordinates, nearest or linear mode.
    """
    if ctx.version >= 9:
        return ctx.derive("Resize", [0, 1], 10)
    scales = ctx.attr("scales")
    if scales is None:
        raise ctx.error("Upsample-7 needs the `scales` attribute")
    return ctx.derive("Resize", [0, np.asarray(scales, np.float32)], 10)


@shape_rule("Upsample")
def upsample(ctx):
    """Y: X's dtype, shape floor(X.shape * scales)."""
    mode = attr_str(ctx.attr("mode"), "nearest")
    if mode not in ("nearest", "linear"):
        raise ctx.error(f"mode={mode!r} must be 'nearest' or 'linear'")
    return resize(upsample_as_resize(ctx))
