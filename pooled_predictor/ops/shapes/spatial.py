"""Shape rules of the spatial sampling ops: GridSample (16, 20, 22), AffineGrid (20),
RoiAlign (10, 16, 22), DeformConv (19, 22), Col2Im (18), MaxUnpool (11, 22).

`deform_geometry` and `col2im_geometry` are shared with the CPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import UnsupportedOpError
from . import shape_rule
from .common import check_types
from .pooling import _ints  # attribute lists: one value per spatial axis, a default when absent


def _text(ctx, name: str, default: str) -> str:
    v = ctx.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


# GridSample mode names by version: 16 names bilinear/bicubic, 20+ linear/cubic.
GRID_MODES = {16: {"bilinear": 1, "nearest": 0, "bicubic": 2}, 20: {"linear": 1, "nearest": 0, "cubic": 2}}
GRID_PADDINGS = {"zeros": 0, "border": 1, "reflection": 2}


def grid_sample_modes(ctx) -> tuple[int, int]:
    """(mode, padding_mode) of a GridSample node as the compiled kernel's codes.

    Raises:
        ShapeInferenceError: a mode name the node's version does not define, or
            an unknown padding_mode.
    """
    names = GRID_MODES[16 if ctx.version < 20 else 20]
    mode = _text(ctx, "mode", "bilinear" if ctx.version < 20 else "linear")
    padding = _text(ctx, "padding_mode", "zeros")
    if mode not in names:
        raise ctx.error(f"mode={mode!r}; GridSample-{ctx.version} takes {', '.join(names)}")
    if padding not in GRID_PADDINGS:
        raise ctx.error(f"padding_mode={padding!r}; expected zeros, border or reflection")
    return names[mode], GRID_PADDINGS[padding]


@shape_rule("GridSample")
def grid_sample(ctx):
    """Y (N, C, *grid.shape[1:-1]) in X's dtype; grid (N, D1_out, ..., Dr_out, r), r = X's spatial rank."""
    check_types(ctx)
    x, grid = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    r = len(x) - 2
    grid_sample_modes(ctx)
    if ctx.version < 20 and r != 2:
        raise ctx.error(f"GridSample-16 takes 4-D X (N, C, H, W); got shape {x}")
    if r > 3:
        raise UnsupportedOpError(f"node {ctx.node.name!r} (GridSample): X shape {x} has {r} spatial axes; "
                                 f"1, 2 and 3 are supported (onnxruntime takes 2 and 3)")
    if r < 1:
        raise ctx.error(f"X shape {x} must be (N, C, D1, ..., Dr) with r >= 1")
    if len(grid) != r + 2 or grid[0] != x[0] or grid[-1] != r:
        raise ctx.error(f"grid shape {grid} must be (N={x[0]}, out spatial ({r} axes), {r})")
    if np.dtype(ctx.dtype(0)).kind not in "fiu":
        raise ctx.error(f"X of type {ctx.dtype(0)} cannot be interpolated (numbers only)")
    return [((x[0], x[1]) + grid[1:-1], ctx.dtype(0))]


@shape_rule("AffineGrid")
def affine_grid(ctx):
    """grid (N, H, W, 2) for theta (N, 2, 3), (N, D, H, W, 3) for theta (N, 3, 4); theta's dtype."""
    check_types(ctx)
    theta = tuple(ctx.shape(0))
    size = [int(s) for s in np.asarray(ctx.value(1)).reshape(-1)]
    r = len(size) - 2
    if r not in (2, 3) or theta != (size[0], r, r + 1):
        raise ctx.error(f"size {size} must be (N, C, H, W) or (N, C, D, H, W) and theta {theta} "
                        f"(N, 2, 3) or (N, 3, 4) accordingly")
    if any(s < 1 for s in size[2:]):
        raise ctx.error(f"size {size}: spatial sizes must be positive")
    return [((size[0],) + tuple(size[2:]) + (r,), ctx.dtype(0))]


@shape_rule("RoiAlign")
def roi_align(ctx):
    """Y (num_rois, C, output_height, output_width) in X's dtype."""
    check_types(ctx)
    x, rois, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2))
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or idx != (rois[0],):
        raise ctx.error(f"X {x} must be (N, C, H, W), rois {rois} (R, 4), batch_indices {idx} (R,)")
    mode = _text(ctx, "mode", "avg")
    ctm = _text(ctx, "coordinate_transformation_mode", "half_pixel")
    if mode not in ("avg", "max") or ctm not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(f"mode={mode!r} (avg, max), coordinate_transformation_mode={ctm!r} "
                        f"(half_pixel, output_half_pixel)")
    oh, ow = int(ctx.attr("output_height", 1)), int(ctx.attr("output_width", 1))
    if oh < 1 or ow < 1:
        raise ctx.error(f"output_height={oh} and output_width={ow} must be positive")
    return [((rois[0], x[1], oh, ow), ctx.dtype(0))]


@dataclass(frozen=True)
class DeformGeometry:
    kernel: tuple
    strides: tuple
    pads: tuple          # (top, left, bottom, right)
    dilations: tuple
    group: int
    offset_group: int
    out: tuple           # (OH, OW)


def deform_geometry(ctx) -> DeformGeometry:
    """Output size of a 2-D DeformConv: (in + pads - dilation (k - 1) - 1) // stride + 1 per axis.

    Raises:
        UnsupportedOpError: X not 4-D (only 2-D deformable convolution is
            implemented, as in onnxruntime).
        ShapeInferenceError: channels not divisible by the groups, offset / mask /
            B of the wrong shape.
    """
    x, w = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(x) != len(w) or len(x) < 3:
        raise ctx.error(f"X {x} and W {w} must be (N, C, D1, ...) and (oC, C/group, k1, ...) of one rank")
    if len(x) != 4:
        raise UnsupportedOpError(f"node {ctx.node.name!r} (DeformConv): {len(x) - 2}-D deformable convolution; "
                                 f"only 2-D is supported (as in onnxruntime)")
    kernel = tuple(_ints(ctx, "kernel_shape", 2, 0)) if ctx.attr("kernel_shape") else w[2:]
    strides, dil = tuple(_ints(ctx, "strides", 2, 1)), tuple(_ints(ctx, "dilations", 2, 1))
    pads = tuple(_ints(ctx, "pads", 4, 0))
    group, og = int(ctx.attr("group", 1)), int(ctx.attr("offset_group", 1))
    if tuple(kernel) != tuple(w[2:]):
        raise ctx.error(f"kernel_shape={list(kernel)} differs from W's spatial shape {w[2:]}")
    if x[1] % group or w[0] % group or w[1] * group != x[1] or x[1] % og:
        raise ctx.error(f"X channels {x[1]}, W {w}: C and oC must be divisible by group={group}, "
                        f"W.shape[1] = C / group, C divisible by offset_group={og}")
    out = tuple((x[2 + i] + pads[i] + pads[i + 2] - dil[i] * (kernel[i] - 1) - 1) // strides[i] + 1
                for i in range(2))
    if min(out) < 1:
        raise ctx.error(f"output size {out} is empty")
    taps = kernel[0] * kernel[1]
    if tuple(ctx.shape(2)) != (x[0], og * taps * 2) + out:
        raise ctx.error(f"offset shape {tuple(ctx.shape(2))} must be {(x[0], og * taps * 2) + out}")
    if ctx.has_input(3) and tuple(ctx.shape(3)) != (w[0],):
        raise ctx.error(f"B shape {tuple(ctx.shape(3))} must be ({w[0]},)")
    if ctx.has_input(4) and tuple(ctx.shape(4)) != (x[0], og * taps) + out:
        raise ctx.error(f"mask shape {tuple(ctx.shape(4))} must be {(x[0], og * taps) + out}")
    return DeformGeometry(tuple(kernel), strides, pads, dil, group, og, out)


@shape_rule("DeformConv")
def deform_conv(ctx):
    """Y (N, oC, OH, OW) in X's dtype."""
    check_types(ctx)
    g = deform_geometry(ctx)
    return [((ctx.shape(0)[0], ctx.shape(1)[0]) + g.out, ctx.dtype(0))]


@dataclass(frozen=True)
class Col2ImGeometry:
    image: tuple
    block: tuple
    strides: tuple
    dilations: tuple
    head: tuple
    tail: tuple
    blocks: tuple        # blocks along each axis
    channels: int


def col2im_geometry(ctx) -> Col2ImGeometry:
    """Blocks per axis: (image + head + tail - dilation (block - 1) - 1) // stride + 1; their
    product must be L, and C * prod(block) the input's second dimension.

    Raises:
        ShapeInferenceError: inconsistent shapes or attribute lengths.
    """
    shape = tuple(ctx.shape(0))
    image = tuple(int(v) for v in np.asarray(ctx.value(1)).reshape(-1))
    block = tuple(int(v) for v in np.asarray(ctx.value(2)).reshape(-1))
    r = len(image)
    if len(block) != r or len(shape) != 3 or r < 1:
        raise ctx.error(f"input {shape} must be (N, C * prod(block_shape), L); image_shape {image} and "
                        f"block_shape {block} of one length")
    strides, dil = tuple(_ints(ctx, "strides", r, 1)), tuple(_ints(ctx, "dilations", r, 1))
    pads = _ints(ctx, "pads", 2 * r, 0)
    head, tail = tuple(pads[:r]), tuple(pads[r:])
    blocks = tuple((image[i] + head[i] + tail[i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(r))
    kprod = int(np.prod(block))
    if min(blocks) < 1 or int(np.prod(blocks)) != shape[2] or kprod < 1 or shape[1] % kprod:
        raise ctx.error(f"input {shape}: L must be the number of blocks {blocks} and dimension 1 a multiple "
                        f"of prod(block_shape {block}) = {kprod}")
    return Col2ImGeometry(image, block, strides, dil, head, tail, blocks, shape[1] // kprod)


@shape_rule("Col2Im")
def col2im(ctx):
    """(N, C, *image_shape) in the input's dtype."""
    check_types(ctx)
    g = col2im_geometry(ctx)
    return [((ctx.shape(0)[0], g.channels) + g.image, ctx.dtype(0))]


@shape_rule("MaxUnpool")
def max_unpool(ctx):
    """output_shape's values when given, else (N, C, (in - 1) stride - pads + kernel per axis)."""
    check_types(ctx)
    x = tuple(ctx.shape(0))
    if tuple(ctx.shape(1)) != x:
        raise ctx.error(f"I shape {tuple(ctx.shape(1))} must equal X's {x}")
    r = len(x) - 2
    kernel = ctx.attr("kernel_shape")
    if kernel is None or len(kernel) != r:
        raise ctx.error(f"kernel_shape={kernel} must give one size per spatial axis ({r})")
    strides, pads = _ints(ctx, "strides", r, 1), _ints(ctx, "pads", 2 * r, 0)
    default = x[:2] + tuple((x[2 + i] - 1) * strides[i] - pads[i] - pads[i + r] + int(kernel[i]) for i in range(r))
    if ctx.has_input(2):
        shape = tuple(int(v) for v in np.asarray(ctx.value(2)).reshape(-1))
        if len(shape) != len(x) or shape[:2] != x[:2] or any(s < d for s, d in zip(shape, default)):
            raise ctx.error(f"output_shape {shape} must be (N, C, ...) with each spatial size >= {default[2:]}")
        return [(shape, ctx.dtype(0))]
    return [(default, ctx.dtype(0))]
