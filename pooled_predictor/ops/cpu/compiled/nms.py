"""Greedy non-maximum suppression (numba), the same procedure and IoU bits as ops/nms.py's
greedy_nms (the tested reference), with the boxes that cannot overlap a candidate skipped.

The greedy procedure: candidates come best first; a candidate is kept when its IoU with
every box kept before it is <= the threshold (SSD's eta < 1: the threshold in force when
its turn comes). Compared one by one, a candidate costs one IoU per kept box: O(n k) for
n candidates and k kept. A detector's tail is where that bites: torchvision's batched
NMS offsets each class's boxes so that boxes of different classes never overlap, and
runs one NMS over all of them (ssdlite320 with a score threshold of 0.001: 27,000
candidates, most of them kept; ops/nms.py's loop took 20.7 s of a 21 s forward).

Only kept boxes that intersect the candidate can reach an IoU above a threshold >= 0
(IoU is 0 without an intersection of positive extent along both axes). Two boxes
intersect along axis 0 only when lo0_kept < hi0 and hi0_kept > lo0, and hi0_kept <=
lo0_kept + W for W the largest extent along axis 0 among the candidates; so the kept
boxes to compare are among those with lo0_kept in [lo0 - W, hi0]: the candidates are
sorted by lo0 once, and each looks up that window by two binary searches and compares
with the kept boxes in it. Worst case (every box wide) this is the O(n k) loop; with
boxes spread along axis 0 (classes offset, or objects spread over an image) a window
holds a few boxes. A threshold below 0 suppresses every later box (IoU >= 0 > threshold):
then each candidate is compared with every kept box, as the reference does.

IoU as the reference computes it, in float64, in the same order of operations:
d0 = min(hi0, hi0') - max(lo0, lo0'), d1 likewise; inter = d0 * d1 where both are > 0,
else 0; IoU = inter / (area + area' - inter) where inter > 0, else 0; a box with a NaN
coordinate overlaps nothing. A candidate is suppressed unless IoU <= threshold.
Source: ONNX Operators.md#NonMaxSuppression; Caffe SSD bbox_util.cpp ApplyNMSFast.
"""

from __future__ import annotations

import numpy as np
from numba import types

from .jit import njit

_f8, _i8 = types.float64, types.int64
_B2 = types.Array(_f8, 2, "C", readonly=True)
_I1 = types.Array(_i8, 1, "C", readonly=True)
_O1 = types.Array(_i8, 1, "C")


@njit(_i8(types.Array(_f8, 1, "C"), _f8, _i8, _i8, types.boolean), nogil=True, cache=True)
def _search(a, x, lo, hi, right):
    """The first index in a[lo:hi] (ascending, NaN last) with a[i] > x (right) or a[i] >= x (left)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x or (right and a[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(_i8(_B2, _I1, _f8, _i8, _f8, _O1), nogil=True, cache=True)
def greedy_nms(boxes, order, iou_threshold, limit, eta, keep):
    """Greedy NMS over the candidates `order` (indices into boxes, best first).

    Args:
        boxes: (N, 4) float64 corners [lo0, lo1, hi0, hi1].
        order: candidate indices, best first (ops/nms.py candidates()).
        iou_threshold: a candidate is kept when its IoU with every kept box is <= this.
        limit: stop once this many are kept; < 0: no limit.
        eta: SSD's adaptive threshold (< 1: after each kept box, threshold *= eta while > 0.5).
        keep: output, at least len(order) int64: the kept indices, in the order kept.
    Returns:
        how many were kept (keep[:count]).
    """
    n = order.shape[0]
    count = 0
    if n == 0 or limit == 0:
        return 0
    valid = np.empty(n, np.bool_)  # by position in `order`: no NaN coordinate
    lo0 = np.empty(n, np.float64)
    width = 0.0
    for t in range(n):
        i = order[t]
        ok = True
        for c in range(4):
            if np.isnan(boxes[i, c]):
                ok = False
        valid[t] = ok
        lo0[t] = boxes[i, 0] if ok else np.inf
        if ok:
            w = boxes[i, 2] - boxes[i, 0]
            if w > width:
                width = w
    by_lo0 = np.argsort(lo0)  # positions in `order`, by lo0 ascending (invalid boxes last, never compared)
    rank = np.empty(n, np.int64)
    # the candidates' corners by rank, contiguous: the window below is read in order
    s0, s1, s2, s3 = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
    for r in range(n):
        t = by_lo0[r]
        rank[t] = r
        i = order[t]
        s0[r], s1[r], s2[r], s3[r] = lo0[t], boxes[i, 1], boxes[i, 2], boxes[i, 3]
    kept = np.zeros(n, np.bool_)  # by rank; an invalid box is never marked (it overlaps nothing)
    threshold = iou_threshold
    for t in range(n):
        if limit > 0 and count >= limit:
            break
        i = order[t]
        take = True
        if count > 0:
            if not (threshold >= 0):  # every kept box suppresses (IoU >= 0 > threshold), NaN included
                take = False
            elif valid[t]:
                a0, a1, a2, a3 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
                area = (a2 - a0) * (a3 - a1)
                # widened by a relative 1e-9: the rounding of lo0 - width never drops a box
                bound = a0 - width
                start = _search(s0, bound - 1e-9 * (abs(bound) + width), 0, n, False)
                stop = _search(s0, a2, start, n, True)
                for r in range(start, stop):
                    if not kept[r]:
                        continue
                    b0, b2 = s0[r], s2[r]
                    d0 = (a2 if a2 < b2 else b2) - (a0 if a0 > b0 else b0)
                    if not d0 > 0:
                        continue
                    b1, b3 = s1[r], s3[r]
                    d1 = (a3 if a3 < b3 else b3) - (a1 if a1 > b1 else b1)
                    if not d1 > 0:
                        continue
                    inter = d0 * d1  # IoU as ops/nms.py's iou_with: 0 unless inter > 0
                    if inter > 0 and not (inter / (area + (b2 - b0) * (b3 - b1) - inter) <= threshold):
                        take = False
                        break
        if take:
            keep[count] = i
            count += 1
            if valid[t]:
                kept[rank[t]] = True
            if eta < 1 and threshold > 0.5:
                threshold *= eta
    return count
