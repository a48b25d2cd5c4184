"""Greedy non-maximum suppression over corner boxes, shared by ONNX NonMaxSuppression
(ops/cpu/dynamic.py) and Caffe SSD's DetectionOutput (ops/ssd.py).

Both are the same greedy procedure: candidates are the boxes whose score is
above a threshold, taken by descending score (ties: lower index first); a
candidate is kept when its IoU with every box kept before it is <= the IoU
threshold. What differs stays with each op: the box conventions (ONNX's
corners in either order or center_point_box, Caffe's decoded boxes), ONNX's
max_output_boxes_per_class (`limit`), SSD's top_k (candidates cut before NMS)
and eta (the adaptive threshold).

Boxes here are (N, 4) corners [lo0, lo1, hi0, hi1] along two axes in either
order ([y1, x1, y2, x2] for ONNX, [xmin, ymin, xmax, ymax] for SSD: IoU does
not depend on which axis comes first); IoU is computed in the boxes' dtype.
Sources: ONNX Operators.md#NonMaxSuppression; Caffe SSD bbox_util.cpp
(ApplyNMSFast, JaccardOverlap).
"""

from __future__ import annotations

import numpy as np


def candidates(scores: np.ndarray, threshold: float | None = None, top_k: int = -1) -> np.ndarray:
    """Indices of scores > threshold (all when None), by descending score, ties by lower index.

    top_k >= 0 keeps the first top_k (SSD's nms_param.top_k); -1 keeps all.
    """
    idx = np.arange(len(scores)) if threshold is None else np.flatnonzero(scores > threshold)
    idx = idx[np.argsort(-scores[idx], kind="stable")]
    return idx if top_k < 0 else idx[:top_k]


def iou_with(boxes: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    """IoU of box i with each box of `others` (indices); 0 where they do not overlap.

    intersection / (area_i + area_other - intersection), taken only where the
    intersection has positive extent along both axes: a box with no area, an
    inverted box or a NaN coordinate overlaps nothing (IoU 0), as onnxruntime
    and Caffe's JaccardOverlap (BBoxSize 0 for an invalid box) give.
    """
    b, o = boxes[i], boxes[others]
    d0 = np.minimum(b[2], o[:, 2]) - np.maximum(b[0], o[:, 0])
    d1 = np.minimum(b[3], o[:, 3]) - np.maximum(b[1], o[:, 1])
    inter = np.where((d0 > 0) & (d1 > 0), d0 * d1, 0)
    union = (b[2] - b[0]) * (b[3] - b[1]) + (o[:, 2] - o[:, 0]) * (o[:, 3] - o[:, 1]) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inter > 0, inter / union, 0)


def greedy_nms(boxes: np.ndarray, order: np.ndarray, iou_threshold: float, *, limit: int | None = None,
               eta: float = 1.0) -> list[int]:
    """The boxes kept among the candidates `order` (from `candidates`), in the order kept.

    Args:
        boxes: (N, 4) corners [lo0, lo1, hi0, hi1], float32 or float64.
        order: candidate indices, best first.
        iou_threshold: a candidate is kept when its IoU with every kept box is <= this.
        limit: stop once this many are kept (ONNX max_output_boxes_per_class); None: no limit.
        eta: SSD's adaptive NMS: with eta < 1, after each kept box the threshold
            is multiplied by eta while it is above 0.5, and each candidate is
            compared with the threshold in force when its turn comes.
    Returns:
        Indices into `boxes`.
    """
    keep: list[int] = []
    if eta >= 1:  # constant threshold: each kept box suppresses the candidates overlapping it
        cand = np.asarray(order)
        while len(cand) and (limit is None or len(keep) < limit):
            i, rest = int(cand[0]), cand[1:]
            keep.append(i)
            cand = rest[iou_with(boxes, i, rest) <= iou_threshold]
        return keep
    threshold = iou_threshold
    for i in order:
        if limit is not None and len(keep) >= limit:
            break
        if not keep or iou_with(boxes, int(i), np.asarray(keep)).max() <= threshold:
            keep.append(int(i))
            if threshold > 0.5:
                threshold *= eta
    return keep
