"""The greedy NMS shared by ONNX NonMaxSuppression and SSD's DetectionOutput (ops/nms.py),
against the procedure written out pair by pair (Caffe's ApplyNMSFast / JaccardOverlap)."""

import numpy as np
import pytest

from pooled_predictor.ops.nms import candidates, greedy_nms


def jaccard(a, b) -> float:
    """Caffe's JaccardOverlap: 0 when the boxes do not overlap, else intersection over union."""
    if b[0] >= a[2] or b[2] <= a[0] or b[1] >= a[3] or b[3] <= a[1]:
        return 0.0
    inter = (min(a[2], b[2]) - max(a[0], b[0])) * (min(a[3], b[3]) - max(a[1], b[1]))
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def written_out(boxes, scores, score_threshold, iou_threshold, top_k, eta, limit):
    order = sorted((i for i in range(len(scores)) if scores[i] > score_threshold), key=lambda i: (-scores[i], i))
    if top_k >= 0:
        order = order[:top_k]
    keep, threshold = [], iou_threshold
    for i in order:
        if limit is not None and len(keep) == limit:
            break
        if all(jaccard(boxes[i], boxes[k]) <= threshold for k in keep):
            keep.append(i)
            if eta < 1 and threshold > 0.5:
                threshold *= eta
    return keep


@pytest.mark.parametrize("eta", [1.0, 0.9])
@pytest.mark.parametrize("limit", [None, 3])
def test_greedy_nms_is_the_written_out_procedure(eta, limit):
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 30))
        lo = rng.random((n, 2))
        boxes = np.concatenate([lo, lo + rng.random((n, 2)) * 0.6 + 1e-3], axis=1)  # valid corners
        scores = np.round(rng.random(n), 1)  # ties
        args = (float(rng.choice([0.0, 0.3])), float(rng.choice([0.3, 0.6, 0.8])), int(rng.choice([-1, 8])))
        got = greedy_nms(boxes, candidates(scores, args[0], args[2]), args[1], eta=eta, limit=limit)
        assert got == written_out(boxes, scores, *args, eta, limit)
        # the axis order does not matter ([y1, x1, y2, x2] for ONNX, [x1, y1, x2, y2] for SSD)
        swapped = boxes[:, [1, 0, 3, 2]]
        assert greedy_nms(swapped, candidates(scores, args[0], args[2]), args[1], eta=eta, limit=limit) == got


def test_boxes_without_area_or_inverted_overlap_nothing():
    boxes = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [0.5, 0, 0.5, 1], [1, 1, 0, 0], [np.nan, 0, 1, 1]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5], np.float32)
    assert greedy_nms(boxes, candidates(scores), 0.5) == [0, 2, 3, 4]  # only the duplicate goes


# ---- compiled/nms.py: the same procedure, boxes that cannot overlap skipped ----------------------

def _compiled(boxes, order, iou_threshold, limit=None, eta=1.0):
    from pooled_predictor.ops.cpu.compiled.nms import greedy_nms as compiled_nms

    keep = np.empty(len(order), np.int64)
    n = compiled_nms(np.ascontiguousarray(boxes, np.float64), np.asarray(order, np.int64), iou_threshold,
                     -1 if limit is None else limit, eta, keep)
    return keep[:n].tolist()


@pytest.mark.parametrize("eta", [1.0, 0.9])
@pytest.mark.parametrize("limit", [None, 1, 3])
@pytest.mark.parametrize("threshold", [-0.1, 0.0, 0.3, 0.5, 1.0, float("nan")])
def test_compiled_nms_is_the_reference(eta, limit, threshold):
    """Random boxes with ties, inverted boxes, NaN and infinite coordinates, boxes far apart."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        n = int(rng.integers(0, 50))
        lo = rng.uniform(0, 10, (n, 2)) + (rng.integers(0, 3, (n, 1)) * 100 if trial % 2 else 0)
        ext = rng.uniform(-1, 5, (n, 2)) if trial % 3 else rng.uniform(0, 5, (n, 2))
        boxes = np.concatenate([lo, lo + ext], axis=1)
        if n and trial % 4 == 0:
            boxes[rng.integers(0, n), rng.integers(0, 4)] = np.nan
        if n and trial % 5 == 0:
            boxes[rng.integers(0, n), rng.integers(2, 4)] = np.inf
        order = candidates(np.round(rng.random(n), 1), 0.1)
        assert _compiled(boxes, order, threshold, limit, eta) == greedy_nms(boxes, order, threshold, limit=limit,
                                                                            eta=eta)


def test_compiled_nms_class_offset_boxes():
    """torchvision's batched NMS: 2,000 boxes of 20 classes, each class's boxes offset so that no two
    classes overlap, one NMS over all of them (the case compiled/nms.py's window is for)."""
    rng = np.random.default_rng(3)
    n = 2000
    lo = rng.uniform(0, 300, (n, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(5, 300, (n, 2))], axis=1) + rng.integers(0, 20, (n, 1)) * 601.0
    order = candidates(rng.random(n).astype(np.float32), 0.01)
    assert _compiled(boxes, order, 0.5) == greedy_nms(boxes, order, 0.5)


def test_non_max_suppression_node_compiled_and_reference_agree_with_onnxruntime():
    from tests.onnx_helpers import check_node

    rng = np.random.default_rng(5)
    b, c, n = 2, 3, 300
    lo = rng.uniform(0, 50, (b, n, 2))
    boxes = np.concatenate([lo, lo + rng.uniform(1, 30, (b, n, 2))], axis=2).astype(np.float32)
    scores = rng.random((b, c, n)).astype(np.float32)
    for center in (0, 1):
        check_node("NonMaxSuppression", [boxes, scores, np.array([40], np.int64), np.array([0.45], np.float32),
                                         np.array([0.2], np.float32)], {"center_point_box": center},
                   opset=11, static=(2, 3, 4))
