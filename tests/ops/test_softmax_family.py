"""LogSoftmax and Hardmax (Softmax's axis semantics per version) against onnxruntime."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(14)


def cases():
    for shape in [(5,), (2, 7), (2, 3, 4)]:
        for axis in [None, 0, 1, -1]:
            for opset in [11, 13]:
                effective = axis if axis is not None else (1 if opset < 13 else -1)
                if -len(shape) <= effective < len(shape):
                    yield shape, axis, opset


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("shape,axis,opset", list(cases()))
def test_softmax_family(op, shape, axis, opset):
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    check_node(op, [x], {} if axis is None else {"axis": axis}, opset=opset)


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_softmax_family_dtypes(op, dtype):
    x = (rng.standard_normal((3, 5)) * 4).astype(dtype)
    check_node(op, [x], {"axis": 1}, opset=13, rtol=1e-2 if dtype == np.float16 else 1e-12, reference="onnx")


def test_hardmax_picks_the_first_of_equal_maxima():
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)
    (y,) = check_node("Hardmax", [x], {"axis": 1}, opset=13)
    assert y.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]


def test_log_softmax_is_stable_for_large_inputs():
    check_node("LogSoftmax", [np.array([[1000.0, 0.0, -1000.0]], np.float32)], {"axis": -1}, opset=13)
