"""One-node tests of element-wise kernels against onnxruntime."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(0)

BROADCAST = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (3, 1, 1)),
             ((1, 3, 1, 5), (2, 1, 4, 1)), ((4, 5), ()), ((), (2, 3)), ((2, 1, 5), (1, 4, 1))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", BROADCAST)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("opset", [11, 13, 14, 21])
def test_binary(op, shapes, dtype, opset):
    a = (rng.standard_normal(shapes[0]) * 10).astype(dtype)
    b = (rng.standard_normal(shapes[1]) * 10).astype(dtype)
    if op == "Div":
        b = np.where(b == 0, 3, b).astype(dtype)
    check_node(op, [a, b], opset=opset)


@pytest.mark.parametrize("static", [(), (1,)])
def test_binary_with_weight(static):
    check_node("Add", [rng.standard_normal((2, 8, 3, 3)).astype(np.float32),
                       rng.standard_normal((8, 1, 1)).astype(np.float32)], static=static)


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("Sigmoid", {}), ("Erf", {}),
                                      ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}),
                                      ("HardSigmoid", {"alpha": 0.7, "beta": 0.1}), ("Identity", {})])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opset", [11, 13, 14, 22])
def test_unary(op, attrs, dtype, opset):
    x = (rng.standard_normal((2, 3, 7, 5)) * 4).astype(dtype)
    x.flat[:4] = [0.0, -100.0, 100.0, 1e-8]
    check_node(op, [x], attrs, opset=opset)


@pytest.mark.parametrize("src,to", [(np.float32, np.int64), (np.float32, np.int32), (np.int64, np.float32),
                                    (np.float32, np.float64), (np.float64, np.float32), (np.int8, np.float32),
                                    (np.float32, np.bool_), (np.bool_, np.float32), (np.float32, np.uint8),
                                    (np.float32, np.float16), (np.int32, np.int8)])
@pytest.mark.parametrize("opset", [11, 13, 19, 21])
def test_cast(src, to, opset):
    x = (rng.standard_normal((3, 4, 5)) * 50)
    if np.dtype(src).kind == "u" or np.dtype(to).kind == "u":
        x = np.abs(x)
    x = x.astype(src)
    from tests.onnx_helpers import np_to_elem
    check_node("Cast", [x], {"to": np_to_elem(to)}, opset=opset)
