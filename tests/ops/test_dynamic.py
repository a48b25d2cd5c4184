"""One-node tests of the kernels with data-dependent output shapes (NonZero, Compress,
Unique, NonMaxSuppression) against onnxruntime (onnx's reference evaluator where
onnxruntime has no kernel), over dtypes, ranks and attributes."""

import numpy as np
import pytest

from pooled_predictor.errors import InputError, ShapeInferenceError
from tests.onnx_helpers import check_node, feeds_of, make_node_model, run_ours

rng = np.random.default_rng(22)


def check(op, inputs, attrs=None, *, opset=17, outputs=1, static=()):
    return check_node(op, inputs, attrs, opset=opset, outputs=outputs, static=static, reference="onnx")


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4), (0, 3), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.uint8, np.float16])
@pytest.mark.parametrize("opset", [9, 13])
def test_non_zero(shape, dtype, opset):
    x = (rng.integers(0, 3, shape) * (rng.random(shape) < 0.5)).astype(dtype)
    check("NonZero", [x], opset=opset)


@pytest.mark.parametrize("shape,axis", [((6,), None), ((4, 5), 0), ((4, 5), 1), ((4, 5), -1), ((2, 3, 4), None),
                                        ((2, 3, 4), 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("opset", [9, 11])
@pytest.mark.parametrize("short", [False, True])
def test_compress(shape, axis, dtype, opset, short):
    """A condition as long as the axis or shorter (missing entries false)."""
    if axis is not None and axis < 0 and opset < 11:
        return  # negative axes from Compress-11
    length = int(np.prod(shape)) if axis is None else shape[axis]
    cond = rng.random(max(length - (2 if short else 0), 0)) < 0.5
    check("Compress", [(rng.standard_normal(shape) * 4).astype(dtype), cond],
          {} if axis is None else {"axis": axis}, opset=opset)


def test_compress_condition_too_long():
    x, cond = np.ones(3, np.float32), np.array([True, False, False, True])
    with pytest.raises(InputError, match="beyond the axis"):
        run_ours(make_node_model("Compress", [x, cond], {"axis": 0}), feeds_of([x, cond]))


@pytest.mark.parametrize("shape,axis", [((12,), None), ((3, 4), None), ((6, 3), 0), ((3, 6), 1), ((4, 2, 3), 0),
                                        ((4, 3), -1)])
@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
@pytest.mark.parametrize("outputs", [1, 4])
def test_unique(shape, axis, sorted_, dtype, outputs):
    x = rng.integers(-2, 3, shape).astype(dtype)
    if axis is not None:  # repeat some slices so that slices are not all unique
        x = np.take(x, rng.integers(0, x.shape[axis], x.shape[axis]), axis=axis)
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    check("Unique", [x], attrs, opset=11, outputs=outputs)


def boxes_and_scores(b, n, c, center):
    corner = rng.uniform(0, 10, (b, n, 2))
    size = rng.uniform(0.5, 5, (b, n, 2))
    if center:
        boxes = np.concatenate([corner, size], axis=2)
    else:
        boxes = np.concatenate([corner, corner + size], axis=2)
        flip = rng.random((b, n)) < 0.3  # corners in either order
        boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    scores = rng.uniform(0, 1, (b, c, n))
    scores[..., :2] = scores[..., 2:3]  # ties: lower box index first
    return boxes.astype(np.float32), scores.astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("b,n,c", [(1, 12, 1), (2, 20, 3), (1, 0, 2)])
@pytest.mark.parametrize("limits", [(None, None, None), (5, None, None), (3, 0.5, None), (10, 0.3, 0.4),
                                    (0, 0.5, 0.1), (100, 0.0, 0.0)])
@pytest.mark.parametrize("opset", [10, 11])
def test_non_max_suppression(center, b, n, c, limits, opset):
    boxes, scores = boxes_and_scores(b, n, c, center)
    extra = [np.array([v], dtype) if v is not None else None
             for v, dtype in zip(limits, (np.int64, np.float32, np.float32))]
    while extra and extra[-1] is None:
        extra.pop()
    extra = [e if e is not None else np.array([], np.float32 if i else np.int64) for i, e in enumerate(extra)]
    check("NonMaxSuppression", [boxes, scores] + extra, {"center_point_box": center}, opset=opset,
          static=tuple(range(2, 2 + len(extra))))


def test_non_max_suppression_runtime_limits():
    """max_output_boxes_per_class, iou and score thresholds fed at forward."""
    boxes, scores = boxes_and_scores(2, 15, 2, 0)
    check("NonMaxSuppression", [boxes, scores, np.array([4], np.int64), np.array([0.3], np.float32),
                                np.array([0.2], np.float32)], opset=11)


def test_non_max_suppression_shape_errors():
    boxes, scores = np.zeros((1, 5, 4), np.float32), np.zeros((1, 2, 6), np.float32)
    with pytest.raises(ShapeInferenceError, match="B, C, N"):
        run_ours(make_node_model("NonMaxSuppression", [boxes, scores], opset=11), feeds_of([boxes, scores]))
