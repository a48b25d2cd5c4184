"""CPU kernels of the Caffe-only ops (domain "caffe"); shapes and sources in ops/shapes/caffe.py."""

from __future__ import annotations

import math

import numpy as np

from ..registry import kernel
from ..shapes.caffe import DOMAIN, prior_aspect_ratios
from ..ssd import detections


@kernel("Reshape", since=1, domain=DOMAIN)
def reshape(x, *, out, shape=(), axis=0, num_axes=-1):
    """Caffe's Reshape: the data unchanged in a new shape (the shape rule computed it)."""
    np.copyto(out, x.reshape(out.shape))


@kernel("Normalize", since=1, domain=DOMAIN)
def normalize(x, scale, *, out, across_spatial=1, channel_shared=1, eps=1e-10):
    """SSD's Normalize: y = x / sqrt(sum(x^2) + eps) * scale.

    The sum runs over C*H*W of each item (across_spatial) or over C at each
    position; scale is one value (channel_shared) or one per channel.
    """
    n, c = x.shape[:2]
    np.multiply(x, x, out=out)
    if across_spatial:
        norm = out.reshape(n, -1).sum(axis=1, dtype=np.float32).reshape((n,) + (1,) * (x.ndim - 1))
    else:
        norm = out.sum(axis=1, keepdims=True, dtype=np.float32)
    norm += np.float32(eps)
    np.sqrt(norm, out=norm)
    np.divide(x, norm, out=out)
    if channel_shared:
        out *= scale.reshape(-1)[0]
    else:
        out *= scale.reshape((1, c) + (1,) * (x.ndim - 2))


class PriorBox:
    """SSD's PriorBox: for each cell (h, w) of the feature map and each prior, a normalized box.

    Center ((w + offset) * step_w, (h + offset) * step_h) in image pixels; per
    min_size: a min_size square, then (with max_size) a sqrt(min * max) square,
    then min_size * sqrt(ar) by min_size / sqrt(ar) for each aspect ratio != 1.
    Channel 0 holds the boxes (xmin, ymin, xmax, ymax) / image size (clipped to
    [0, 1] when clip), channel 1 the variances. The boxes depend only on shapes,
    so they are computed once, at reshape.
    """

    def __init__(self, ctx, *, min_size=(), max_size=(), aspect_ratio=(), flip=1, clip=0, variance=(),
                 offset=0.5, img_h=0, img_w=0, step_h=0.0, step_w=0.0):
        _, _, lh, lw = ctx.shape(0)
        ih, iw = (img_h, img_w) if img_h and img_w else ctx.shape(1)[2:]
        sh, sw = (step_h, step_w) if step_h and step_w else (ih / lh, iw / lw)
        sizes = []  # (width, height) of each prior, in pixels
        for k, m in enumerate(min_size):
            sizes.append((m, m))
            if max_size:
                s = math.sqrt(m * max_size[k])
                sizes.append((s, s))
            for ar in prior_aspect_ratios(aspect_ratio, flip):
                if abs(ar - 1.0) < 1e-6:
                    continue
                sizes.append((m * math.sqrt(ar), m / math.sqrt(ar)))
        cy = (np.arange(lh, dtype=np.float64) + offset) * sh
        cx = (np.arange(lw, dtype=np.float64) + offset) * sw
        half = np.array(sizes, dtype=np.float64) / 2.0                     # (P, 2)
        cxg = cx[None, :, None]
        cyg = cy[:, None, None]
        boxes = np.empty((lh, lw, len(sizes), 4), np.float64)
        boxes[..., 0] = (cxg - half[None, None, :, 0]) / iw
        boxes[..., 1] = (cyg - half[None, None, :, 1]) / ih
        boxes[..., 2] = (cxg + half[None, None, :, 0]) / iw
        boxes[..., 3] = (cyg + half[None, None, :, 1]) / ih
        boxes = boxes.astype(np.float32)
        if clip:
            np.clip(boxes, 0.0, 1.0, out=boxes)
        var = np.asarray(variance if len(variance) else [0.1], np.float32)
        self.value = np.stack([boxes.reshape(-1), np.resize(var, boxes.size)])[None]

    def __call__(self, feature, image, *, out):
        np.copyto(out, self.value)


kernel("PriorBox", since=1, domain=DOMAIN)(PriorBox)


@kernel("DetectionOutput", since=1, domain=DOMAIN)
def detection_output(loc, conf, prior, *, out, **attrs):
    """SSD's DetectionOutput: (1, 1, K, 7); with no detection, one row [i, -1, ...] per image i (Caffe)."""
    rows = detections(loc, conf, prior, **attrs)
    if len(rows) == 0:
        out.fill(-1.0)
        out[0, 0, :, 0] = np.arange(out.shape[2])
    else:
        out[0, 0] = rows


@kernel("ArgMax", since=1, domain=DOMAIN)
def argmax(x, *, out, out_max_val=0, top_k=1, axis=None):
    """Caffe's ArgMax: indices (as float) of the top_k values, descending.

    With `axis`: along that axis (only the values when out_max_val). Without:
    over each item's flattened values; out_max_val adds the values as channel 1.
    Ties: the lower index first.
    """
    if axis is not None:
        order = np.argsort(-x, axis=axis, kind="stable")
        order = np.take(order, np.arange(top_k), axis=axis)
        if out_max_val:
            np.copyto(out, np.take_along_axis(x, order, axis=axis))
        else:
            np.copyto(out, order.astype(out.dtype))
        return
    flat = x.reshape(x.shape[0], -1)
    order = np.argsort(-flat, axis=1, kind="stable")[:, :top_k]
    view = out.reshape(out.shape[0], out.shape[1], top_k)
    view[:, 0] = order
    if out_max_val:
        view[:, 1] = np.take_along_axis(flat, order, axis=1)
