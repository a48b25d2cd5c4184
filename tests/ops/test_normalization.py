"""BatchNormalization (inference) and Softmax against onnxruntime."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(1)


def bn_inputs(shape, dtype=np.float32):
    c = shape[1] if len(shape) > 1 else 1
    return [rng.standard_normal(shape).astype(dtype), rng.standard_normal(c).astype(dtype),
            rng.standard_normal(c).astype(dtype), rng.standard_normal(c).astype(dtype),
            (rng.random(c) + 0.5).astype(dtype)]


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 4, 5, 6), (1, 3, 2, 3, 4)])
@pytest.mark.parametrize("epsilon", [1e-5, 1e-2])
@pytest.mark.parametrize("opset", [11, 14, 15])
@pytest.mark.parametrize("static", [(1, 2, 3, 4), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batchnorm(shape, epsilon, opset, static, dtype):
    check_node("BatchNormalization", bn_inputs(shape, dtype), {"epsilon": epsilon}, opset=opset, static=static)


def test_batchnorm_training_mode_is_unsupported():
    from pooled_predictor.errors import UnsupportedOpError
    from tests.onnx_helpers import make_node_model, run_ours, type_outputs
    model = make_node_model("BatchNormalization", bn_inputs((2, 3, 4)), {"training_mode": 1}, opset=15,
                            outputs=3, static=(1, 2, 3, 4))
    type_outputs(model, [np.zeros((2, 3, 4), np.float32), np.zeros(3, np.float32), np.zeros(3, np.float32)])
    with pytest.raises(UnsupportedOpError, match="training_mode"):
        run_ours(model, {"in0": bn_inputs((2, 3, 4))[0]})


@pytest.mark.parametrize("shape", [(5,), (2, 7), (2, 3, 4), (2, 3, 4, 5)])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, -2])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax(shape, axis, opset):
    effective = axis if axis is not None else (1 if opset < 13 else -1)
    if not -len(shape) <= effective < len(shape):
        pytest.skip("axis out of range for this rank")
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    check_node("Softmax", [x], {} if axis is None else {"axis": axis}, opset=opset)
