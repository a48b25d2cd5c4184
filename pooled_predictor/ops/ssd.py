"""SSD's detection post-processing in numpy: box decoding, greedy NMS, DetectionOutput's rows.

Shared by the DetectionOutput shape rule (its output size depends on the
data) and its CPU kernel. NMS (ApplyNMSFast over normalized boxes, IoU in
float32 as Caffe's JaccardOverlap, top_k and the adaptive eta) is ops/nms.py,
shared with ONNX NonMaxSuppression. Source: Wei Liu's SSD branch of Caffe
(bbox_util.cpp: DecodeBBoxes, ApplyNMSFast, JaccardOverlap;
detection_output_layer.cpp).
"""

from __future__ import annotations

import math

import numpy as np

from .nms import candidates, greedy_nms


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
            order = candidates(scores[:, c], confidence_threshold, top_k)
            for i in greedy_nms(boxes, order, nms_threshold, eta=eta):
                kept.append((float(scores[i, c]), c, i))
        if keep_top_k > -1 and len(kept) > keep_top_k:
            order = sorted(range(len(kept)), key=lambda j: -kept[j][0])  # stable: ties keep their order
            kept = [kept[j] for j in order[:keep_top_k]]
        for label in sorted({c for _, c, _ in kept}):
            for s, c, i in (t for t in sorted(kept, key=lambda t: -t[0]) if t[1] == label):
                rows.append([item, label, s, *boxes[i]])
    return np.asarray(rows, np.float32).reshape(-1, 7)
