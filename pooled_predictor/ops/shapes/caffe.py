"""Shape rules of the Caffe-only ops (domain "caffe", opset 1), emitted by the Caffe importer.

    Reshape(X)                          Caffe's Reshape: `shape` replaces axes [axis, axis + num_axes)
                                        (0 copies the bottom's axis, -1 is inferred); Flatten(axis, end_axis)
                                        is Reshape(shape=[-1], axis, num_axes=end_axis - axis + 1)
    Normalize(X, scale)                 SSD's L2 normalization (across_spatial, channel_shared, eps)
    PriorBox(feature, image)            SSD's prior boxes: (1, 2, H * W * num_priors * 4)
    DetectionOutput(loc, conf, prior)   SSD's detections: (1, 1, N, 7), N known only at forward time
    ArgMax(X)                           Caffe's ArgMax (out_max_val, top_k, axis): float indices

Sources: BVLC Caffe's reshape_layer.cpp and argmax_layer.cpp; Wei Liu's SSD
branch (normalize_layer.cpp, prior_box_layer.cpp, detection_output_layer.cpp).
"""

from __future__ import annotations

import math

import numpy as np

from ..ssd import detections
from . import shape_rule

DOMAIN = "caffe"


def caffe_reshape_shape(ctx, in_shape, shape, axis: int, num_axes: int) -> tuple:
    """Caffe ReshapeLayer::Reshape: the output shape (ShapeInferenceError when it does not fit)."""
    rank = len(in_shape)
    start = axis + rank + 1 if axis < 0 else axis
    if not 0 <= start <= rank:
        raise ctx.error(f"axis {axis} out of range for rank {rank}")
    end = rank if num_axes == -1 else start + num_axes
    if num_axes < -1 or end > rank:
        raise ctx.error(f"num_axes {num_axes} out of range for axis {axis} and rank {rank}")
    middle = []
    inferred = None
    for i, d in enumerate(shape):
        if d == 0:
            if start + i >= rank:
                raise ctx.error(f"dim {i} is 0 (copy) but the bottom has no axis {start + i}")
            middle.append(in_shape[start + i])
        elif d == -1:
            if inferred is not None:
                raise ctx.error("more than one -1 in reshape_param.shape")
            inferred = i
            middle.append(1)
        else:
            middle.append(int(d))
    out = list(in_shape[:start]) + middle + list(in_shape[end:])
    total = math.prod(in_shape)
    if inferred is not None:
        known = math.prod(out)
        if known == 0 or total % known:
            raise ctx.error(f"cannot infer the -1 of {list(shape)} for a bottom of shape {tuple(in_shape)}")
        out[start + inferred] = total // known
    if math.prod(out) != total:
        raise ctx.error(f"shape {tuple(out)} has {math.prod(out)} elements, the bottom {tuple(in_shape)} {total}")
    return tuple(out)


@shape_rule("Reshape", domain=DOMAIN)
def reshape(ctx):
    out = caffe_reshape_shape(ctx, ctx.shape(0), list(ctx.attr("shape", [])), int(ctx.attr("axis", 0)),
                              int(ctx.attr("num_axes", -1)))
    return [(out, ctx.dtype(0))]


@shape_rule("Normalize", domain=DOMAIN)
def normalize(ctx):
    if len(ctx.shape(0)) < 2:
        raise ctx.error(f"Normalize needs a blob of rank >= 2 (N, C, ...), got {ctx.shape(0)}")
    return [(ctx.shape(0), ctx.dtype(0))]


def prior_aspect_ratios(aspect_ratio, flip) -> list[float]:
    """SSD's list: 1, then each given ratio not yet present (within 1e-6), and its inverse when flip."""
    ratios = [1.0]
    for ar in aspect_ratio:
        if any(abs(ar - r) < 1e-6 for r in ratios):
            continue
        ratios.append(float(ar))
        if flip:
            ratios.append(1.0 / float(ar))
    return ratios


def num_priors(attrs) -> int:
    ratios = prior_aspect_ratios(attrs.get("aspect_ratio", []), attrs.get("flip", 1))
    return len(ratios) * len(attrs.get("min_size", [])) + len(attrs.get("max_size", []))


@shape_rule("PriorBox", domain=DOMAIN)
def prior_box(ctx):
    feat = ctx.shape(0)
    if len(feat) != 4 or len(ctx.shape(1)) != 4:
        raise ctx.error(f"PriorBox needs 4-D feature and image blobs, got {feat} and {ctx.shape(1)}")
    mins, maxs = ctx.attr("min_size", []), ctx.attr("max_size", [])
    if not mins:
        raise ctx.error("prior_box_param needs min_size")
    if maxs and len(maxs) != len(mins):
        raise ctx.error(f"{len(maxs)} max_size for {len(mins)} min_size")
    variance = ctx.attr("variance", [])
    if len(variance) not in (0, 1, 4):
        raise ctx.error(f"variance needs 1 or 4 values, got {len(variance)}")
    return [((1, 2, feat[2] * feat[3] * num_priors(ctx.attrs) * 4), np.dtype(np.float32))]


@shape_rule("DetectionOutput", domain=DOMAIN)
def detection_output(ctx):
    # N depends on the scores: the rule computes the detections when the data is there (the shape
    # is the result's).
    loc, conf, prior = (ctx.value(i) for i in range(3))  # NotStatic at reshape: a per-forward node
    rows = detections(loc, conf, prior, **ctx.attrs)
    return [((1, 1, len(rows) or loc.shape[0], 7), np.dtype(np.float32))]


@shape_rule("ArgMax", domain=DOMAIN)
def argmax(ctx):
    shape = list(ctx.shape(0))
    top_k = int(ctx.attr("top_k", 1))
    out_max = int(ctx.attr("out_max_val", 0))
    axis = ctx.attr("axis")
    if axis is not None:
        axis = int(axis)
        if top_k > shape[axis]:
            raise ctx.error(f"top_k {top_k} exceeds axis {axis} of size {shape[axis]}")
        shape[axis] = top_k
        return [(tuple(shape), np.dtype(np.float32))]
    if top_k > math.prod(shape[1:]):
        raise ctx.error(f"top_k {top_k} exceeds the {math.prod(shape[1:])} values per item")
    out = [1] * max(len(shape), 3)
    out[0], out[1], out[2] = shape[0], 2 if out_max else 1, top_k
    return [(tuple(out), np.dtype(np.float32))]


__all__ = ["DOMAIN", "caffe_reshape_shape", "prior_aspect_ratios", "num_priors"]
