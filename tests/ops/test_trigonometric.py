"""One-node tests of the trigonometric and hyperbolic kernels against onnxruntime
(onnx's reference evaluator where onnxruntime has no kernel for a type), inside and
outside each function's domain."""

import numpy as np
import pytest

from tests.onnx_helpers import check_inplace
from tests.ops.test_math import FLOATS, RTOL, check

rng = np.random.default_rng(13)
OPS = {"Sin": 7, "Cos": 7, "Tan": 7, "Asin": 7, "Acos": 7, "Atan": 7,
       "Sinh": 9, "Cosh": 9, "Asinh": 9, "Acosh": 9, "Atanh": 9}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [13, 22])
def test_unary(op, dtype, opset):
    """Values across [-3, 3] (out of domain for Asin/Acos/Atanh/Acosh: NaN) and the edges."""
    x = (rng.standard_normal((3, 4, 5)) * 1.5).astype(dtype)
    x.flat[:8] = [0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 2.0]
    check(op, [x], opset=opset, rtol=RTOL[dtype])


@pytest.mark.parametrize("op", list(OPS))
def test_in_place(op):
    check_inplace(op, [rng.uniform(-0.9, 0.9, (3, 4)).astype(np.float32)], {}, 22, 0)
