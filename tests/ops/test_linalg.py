"""Det against onnxruntime (onnx's reference for float64, which onnxruntime lacks)."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(20)


@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (2, 4, 4), (2, 2, 3, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", [11, 22])
def test_det(shape, dtype, opset):
    check_node("Det", [rng.standard_normal(shape).astype(dtype)], {}, opset=opset, rtol=1e-4, reference="onnx")


def test_det_of_a_singular_matrix_is_zero():
    x = np.array([[1.0, 2.0], [2.0, 4.0]], np.float32)
    (y,) = check_node("Det", [x], {}, opset=22)
    assert abs(float(y)) < 1e-6
