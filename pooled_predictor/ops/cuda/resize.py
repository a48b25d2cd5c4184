"""Resize and Upsample on the GPU (kernels/resize.cu): nearest and linear over the last two axes of a
float32 (N, C, H, W) or (N, C, W) tensor whose N and C are not scaled, with no roi (tf_crop_and_resize
and cubic run on the CPU). The coordinate transformation folds into in = out * a + b per axis."""

from __future__ import annotations

import math

import numpy as np

from ..shapes.resize import attr_str, resize_sizes
from . import runtime
from .codes import cuda_kernel, float32_io


def _coordinate_map(mode: str, n_in: int, n_out: int, scale: float) -> tuple[float, float]:
    """(a, b): the source coordinate of output index o is o * a + b (ONNX Resize's formulas)."""
    if mode == "align_corners":
        return ((n_in - 1) / (n_out - 1), 0.0) if n_out > 1 else (0.0, 0.0)
    if mode == "asymmetric":
        return 1.0 / scale, 0.0
    if mode == "pytorch_half_pixel" and n_out <= 1:
        return 0.0, 0.0
    if mode == "tf_half_pixel_for_nn":
        return 1.0 / scale, 0.5 / scale
    return 1.0 / scale, 0.5 / scale - 0.5  # half_pixel, pytorch_half_pixel, half_pixel_symmetric's core


_NEAREST = {"round_prefer_floor": 0, "round_prefer_ceil": 1, "floor": 2, "ceil": 3}


def _resize_supported(ctx) -> bool:
    if not float32_io(ctx) or len(ctx.shape(0)) not in (3, 4):
        return False
    mode = attr_str(ctx.attr("mode"), "nearest")
    ctm = attr_str(ctx.attr("coordinate_transformation_mode"), "half_pixel" if ctx.version >= 11 else "asymmetric")
    if ctx.node.op_type == "Upsample":
        ctm = "asymmetric"
    if mode not in ("nearest", "linear", "bilinear") or ctm not in (
            "half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
        return False
    if int(ctx.attr("antialias", 0)) or attr_str(ctx.attr("keep_aspect_ratio_policy"), "stretch") != "stretch":
        return False
    try:
        out, _ = resize_sizes(ctx)
    except Exception:
        return False
    shape = tuple(ctx.shape(0))
    return tuple(out[:2]) == shape[:2]


class _Resize:
    def __init__(self, ctx, mode: str, ctm: str, nearest_mode: str):
        shape = tuple(ctx.shape(0))
        out, scale = resize_sizes(ctx)
        if len(shape) == 3:  # (N, C, W): H = 1
            shape, out, scale = shape[:2] + (1,) + shape[2:], tuple(out[:2]) + (1,) + tuple(out[2:]), [1, 1, 1, *scale[2:]]
        h, w, oh, ow = shape[2], shape[3], out[2], out[3]
        ah, bh = _coordinate_map(ctm, h, oh, float(scale[2]))
        aw, bw = _coordinate_map(ctm, w, ow, float(scale[3]))
        self.nc = math.prod(shape[:2])
        f = runtime.f32
        geometry = (np.int64(self.nc), np.int32(h), np.int32(w), np.int32(oh), np.int32(ow), f(ah), f(bh), f(aw), f(bw))
        if mode == "nearest":
            self.fn = runtime.function("resize.cu", "resize_nearest_f32")
            self.args = geometry + (np.int32(_NEAREST.get(nearest_mode, 0)),)
        else:
            self.fn = runtime.function("resize.cu", "resize_linear_f32")
            self.args = geometry

    def __call__(self, x, *_, out):
        runtime.launch(self.fn, out.size, (x, out, *self.args))


@cuda_kernel("Resize", supports=_resize_supported)
class Resize(_Resize):
    """ONNX Resize-10..19 (nearest / linear on H, W; see the module docstring)."""

    def __init__(self, ctx, *, mode="nearest", coordinate_transformation_mode=None, nearest_mode="round_prefer_floor",
                 cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, antialias=0, axes=None,
                 keep_aspect_ratio_policy="stretch"):
        ctm = attr_str(coordinate_transformation_mode, "half_pixel" if ctx.version >= 11 else "asymmetric")
        mode = attr_str(mode, "nearest")
        # Resize-10's nearest rounds as floor (onnxruntime); 11+ as nearest_mode says
        super().__init__(ctx, mode, ctm, attr_str(nearest_mode, "round_prefer_floor") if ctx.version >= 11 else "floor")


@cuda_kernel("Upsample", supports=_resize_supported)
class Upsample(_Resize):
    """ONNX Upsample-7/9 (nearest: floor of out / scale; linear): Resize-10's semantics."""

    def __init__(self, ctx, *, mode="nearest", scales=None):
        mode = attr_str(mode, "nearest")
        super().__init__(ctx, "nearest" if mode == "nearest" else "linear", "asymmetric", "floor")
