"""CPU kernels of the Caffe-only ops (domain "caffe"); shapes and sources in ops/shapes/caffe.py."""

from __future__ import annotations

import math

import numpy as np

from ..registry import kernel
from ..shapes.caffe import DOMAIN, prior_aspect_ratios


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


def _decode(loc: np.ndarray, prior: np.ndarray, var: np.ndarray, code_type: str,
            variance_encoded_in_target: bool) -> np.ndarray:
    """SSD's DecodeBBoxes (normalized boxes): loc (P, 4) offsets of prior (P, 4) -> boxes (P, 4)."""
    v = np.ones_like(var) if variance_encoded_in_target else var
    if code_type == "CORNER":
        return prior + v * loc
    pw = prior[:, 2] - prior[:, 0]
    ph = prior[:, 3] - prior[:, 1]
    if code_type == "CORNER_SIZE":
        return prior + v * loc * np.stack([pw, ph, pw, ph], axis=1)
    pcx = (prior[:, 0] + prior[:, 2]) / 2
    pcy = (prior[:, 1] + prior[:, 3]) / 2
    cx = v[:, 0] * loc[:, 0] * pw + pcx
    cy = v[:, 1] * loc[:, 1] * ph + pcy
    w = np.exp(v[:, 2] * loc[:, 2]) * pw
    h = np.exp(v[:, 3] * loc[:, 3]) * ph
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _nms(boxes: np.ndarray, scores: np.ndarray, score_threshold: float, nms_threshold: float, top_k: int,
         eta: float) -> list[int]:
    """SSD's ApplyNMSFast: greedy by descending score (ties: lower index first), IoU of normalized boxes.

    A candidate is kept when its IoU with every box kept before it is <= the
    threshold; with eta < 1 the threshold shrinks by eta after each kept box
    while it is above 0.5 (adaptive NMS).
    """
    idx = np.nonzero(scores > score_threshold)[0]
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    if top_k > -1:
        idx = idx[:top_k]
    if len(idx) == 0:
        return []
    iou = _iou_matrix(boxes[idx])
    keep: list[int] = []
    threshold = nms_threshold
    if eta >= 1:  # constant threshold: suppress by rows of the IoU matrix
        suppressed = np.zeros(len(idx), bool)
        for i in range(len(idx)):
            if not suppressed[i]:
                keep.append(i)
                suppressed |= iou[i] > threshold
        return idx[keep].tolist()
    for i in range(len(idx)):
        if not keep or iou[i, keep].max() <= threshold:
            keep.append(i)
            if threshold > 0.5:
                threshold *= eta
    return idx[keep].tolist()


def _iou_matrix(b: np.ndarray) -> np.ndarray:
    """SSD's JaccardOverlap of every pair of normalized boxes (0 for disjoint or invalid boxes)."""
    valid = (b[:, 2] >= b[:, 0]) & (b[:, 3] >= b[:, 1])
    area = np.where(valid, (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), 0.0)
    w = np.minimum(b[:, None, 2], b[None, :, 2]) - np.maximum(b[:, None, 0], b[None, :, 0])
    h = np.minimum(b[:, None, 3], b[None, :, 3]) - np.maximum(b[:, None, 1], b[None, :, 1])
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    union = area[:, None] + area[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inter > 0, inter / union, 0.0)


def detections(loc, conf, prior, *, num_classes, share_location=1, background_label_id=0,
               code_type="CORNER", variance_encoded_in_target=0, keep_top_k=-1,
               confidence_threshold=-math.inf, nms_threshold=0.3, top_k=-1, eta=1.0) -> np.ndarray:
    """SSD's DetectionOutputLayer::Forward_cpu: rows [image, label, score, xmin, ymin, xmax, ymax].

    Args:
        loc: (N, P * 4) box offsets; conf: (N, P * num_classes) scores (softmaxed);
        prior: (1, 2, P * 4) prior boxes and variances (PriorBox).
    Returns:
        float32 (K, 7): per image, labels ascending, scores descending within a label.
    """
    n = loc.shape[0]
    p = prior.shape[2] // 4
    priors = prior[0, 0].reshape(p, 4).astype(np.float32)
    var = prior[0, 1].reshape(p, 4).astype(np.float32)
    rows = []
    for item in range(n):
        boxes = _decode(loc[item].reshape(p, 4), priors, var, code_type, bool(variance_encoded_in_target))
        scores = conf[item].reshape(p, num_classes)
        kept = []  # (score, label, index)
        for c in range(num_classes):
            if c == background_label_id:
                continue
            for i in _nms(boxes, scores[:, c], confidence_threshold, nms_threshold, top_k, eta):
                kept.append((float(scores[i, c]), c, i))
        if keep_top_k > -1 and len(kept) > keep_top_k:
            order = sorted(range(len(kept)), key=lambda j: -kept[j][0])  # stable: ties keep their order
            kept = [kept[j] for j in order[:keep_top_k]]
        for label in sorted({c for _, c, _ in kept}):
            for s, c, i in (t for t in sorted(kept, key=lambda t: -t[0]) if t[1] == label):
                rows.append([item, label, s, *boxes[i]])
    return np.asarray(rows, np.float32).reshape(-1, 7)


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
