"""CPU kernels whose output shapes depend on input values: NonZero, Compress,
Unique, NonMaxSuppression.

Registered with ``dynamic_output=True`` (ops/registry.py): each returns the
outputs it allocates instead of writing into `out`; the Net runs such a node,
and the nodes reading its outputs, per forward (engine/layout.py: Layout.run_dynamic), while the rest of the
Net stays planned. With all inputs static the node is folded once.
ONNX spec: each op's section of Operators.md.
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ..nms import candidates, greedy_nms
from ..registry import kernel
from . import compiled


@kernel("NonZero", since=(9, 13), dynamic_output=True)
def non_zero(x):
    """Y[:, k] = the index of the k-th non-zero element of X, row-major (ONNX NonZero).

    Shapes: X any rank r (a scalar counts as shape (1,), as onnxruntime does);
    Y (max(r, 1), nnz) int64.
    """
    return np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64).reshape(max(x.ndim, 1), -1)


class _Named:
    """Mixin: the node's name for error messages."""

    def __init__(self, ctx):
        self.name = ctx.node.name


@kernel("Compress", since=(9, 11, 28), dynamic_output=True)
class Compress(_Named):
    """output = the slices of `input` along `axis` where `condition` is true (ONNX Compress).

    numpy.compress: without `axis` the input is flattened first. `condition`
    (1-D bool) may be shorter than the axis (missing entries count as false);
    a longer one may only add false entries.
    Shapes: output as input with that axis of length count(condition), or (count,) flattened.
    Raises:
        InputError: condition is longer than the axis with a true entry beyond it.
    """

    def __init__(self, ctx, *, axis=None):
        super().__init__(ctx)
        self.axis = axis

    def __call__(self, data, condition):
        cond = condition.reshape(-1)
        size = data.size if self.axis is None else data.shape[self.axis]
        if len(cond) > size:
            if cond[size:].any():
                raise InputError(f"node {self.name!r} (Compress): condition has a true entry at index "
                                 f"{size + int(np.argmax(cond[size:]))}, beyond the axis' length {size}")
            cond = cond[:size]
        return np.compress(cond, data, axis=self.axis)


@kernel("Unique", since=(11, 28), dynamic_output=True)
class Unique:
    """The unique elements (or slices along `axis`) of X (ONNX Unique).

    Outputs: Y (sorted ascending when sorted=1, else in order of first
    occurrence), indices (first occurrence of each in X), inverse_indices
    (for each element or slice of X, its index in Y), counts; all int64 but Y.
    Shapes: without `axis`, Y (U,) of the flattened X; with it, X's shape with
    that axis of length U; indices and counts (U,); inverse_indices (the
    flattened size, or X's length along `axis`).
    """

    def __init__(self, ctx, *, axis=None, sorted=1):  # noqa: A002 (the ONNX attribute's name)
        self.axis = axis
        self.sorted = bool(sorted)

    def __call__(self, x):
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                              return_counts=True, axis=self.axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = np.argsort(first, kind="stable")   # order of first occurrence
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            first, counts, inverse = first[order], counts[order], rank[inverse]
            y = np.take(x.reshape(-1) if self.axis is None else x, first, axis=0 if self.axis is None else self.axis)
        return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@kernel("NonMaxSuppression", since=(10, 11), dynamic_output=True)
class NonMaxSuppression(_Named):
    """Greedy non-maximum suppression per batch item and class (ONNX NonMaxSuppression).

    For each (batch, class): boxes with score > score_threshold (all when it is
    absent), by descending score (ties: lower box index first); a box is kept
    when its IoU with every box kept before it is <= iou_threshold (default 0),
    up to max_output_boxes_per_class (default 0: none). Boxes are
    [y1, x1, y2, x2] with the corners in any order (center_point_box=0) or
    [x_center, y_center, width, height] (center_point_box=1). Boxes of zero
    area never suppress (IoU taken as 0), as in onnxruntime.
    Shapes: boxes (B, N, 4), scores (B, C, N) float; the optional inputs are
    scalars (or 1-element); selected_indices (K, 3) int64 rows (batch, class, box).
    Compiled kernels on: compiled/nms.py (the same IoU bits, the boxes that cannot
    overlap a candidate skipped); else ops/nms.py's greedy_nms, the reference.
    Raises:
        InputError: boxes and scores disagree on B or N.
    """

    def __init__(self, ctx, *, center_point_box=0):
        super().__init__(ctx)
        self.center = int(center_point_box)
        self.compiled = compiled.active()

    def __call__(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                 score_threshold=None):
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or boxes.shape[0] != scores.shape[0] \
                or boxes.shape[1] != scores.shape[2]:
            raise InputError(f"node {self.name!r} (NonMaxSuppression): boxes {boxes.shape} must be (B, N, 4) "
                             f"and scores {scores.shape} (B, C, N)")
        limit = 0 if max_output_boxes_per_class is None or max_output_boxes_per_class.size == 0 \
            else int(max_output_boxes_per_class.reshape(-1)[0])
        iou_max = 0.0 if iou_threshold is None or iou_threshold.size == 0 else float(iou_threshold.reshape(-1)[0])
        floor = None if score_threshold is None or score_threshold.size == 0 \
            else float(score_threshold.reshape(-1)[0])
        selected = []
        if limit > 0:
            for b in range(boxes.shape[0]):
                corners = np.stack(self._corners(boxes[b].astype(np.float64)), axis=1)
                for c in range(scores.shape[1]):
                    order = candidates(scores[b, c], floor)
                    if self.compiled:
                        keep = np.empty(len(order), np.int64)
                        keep = keep[:compiled.nms.greedy_nms(corners, order, iou_max, limit, 1.0, keep)]
                        rows = np.empty((len(keep), 3), np.int64)
                        rows[:, 0], rows[:, 1], rows[:, 2] = b, c, keep
                        selected.append(rows)
                    else:
                        keep = greedy_nms(corners, order, iou_max, limit=limit)
                        selected.append(np.array([(b, c, i) for i in keep], np.int64).reshape(-1, 3))
        return np.concatenate(selected) if selected else np.empty((0, 3), np.int64)

    def _corners(self, box: np.ndarray):
        if self.center:
            xc, yc, w, h = box.T
            return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
        ya, xa, yb, xb = box.T
        return np.minimum(ya, yb), np.minimum(xa, xb), np.maximum(ya, yb), np.maximum(xa, xb)
