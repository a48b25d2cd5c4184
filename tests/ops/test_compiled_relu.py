"""Relu through compiled/epilogue.py: np.maximum(x, 0)'s bits (-0 becomes +0, NaN propagates), in place
and out of place, read-only inputs, and the numpy path below the size threshold or for other dtypes."""

import numpy as np
import pytest

from pooled_predictor.ops.cpu import elementwise
from pooled_predictor.ops.cpu.compiled import epilogue


def _x(n):
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    x[:6] = [-0.0, 0.0, np.nan, -np.inf, np.inf, -1e-45]
    return x


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("n", [7, 4099])
def test_relu_bits_equal_np_maximum(n, inplace):
    x = _x(n)
    ref = np.maximum(x, 0)
    if inplace:
        out = x
    else:
        x.flags.writeable = False  # graph inputs arrive read-only
        out = np.empty_like(x)
    elementwise.relu(x, out=out)
    assert np.array_equal(out.view(np.int32), ref.view(np.int32))


def test_fused_relu_epilogue_matches_too():
    x = _x(4099)
    y = x.copy()
    epilogue.activate_inplace(y, epilogue.RELU, 0.0, 0.0)
    assert np.array_equal(y.view(np.int32), np.maximum(x, 0).view(np.int32))


def test_float64_and_strided_take_numpy():
    x = np.random.default_rng(0).standard_normal((50, 60))
    out = np.empty_like(x)
    elementwise.relu(x, out=out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    xs = _x(8000)[::2]
    o2 = np.empty_like(xs)
    elementwise.relu(xs, out=o2)
    assert np.array_equal(o2.view(np.int32), np.maximum(xs, 0).view(np.int32))
