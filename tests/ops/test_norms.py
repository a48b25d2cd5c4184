"""RMSNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization against onnxruntime.

RMSNormalization-23 and GroupNormalization-21 have no onnxruntime kernel in
every build: there the reference is onnx's reference evaluator.
"""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(15)


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), -1), ((2, 3, 4), 1), ((4, 6), 0), ((2, 3, 4, 5), -2)])
@pytest.mark.parametrize("scale_full", [True, False])
@pytest.mark.parametrize("dtype,stash", [(np.float32, 1), (np.float16, 1), (np.float64, 11)])
def test_rms_normalization(shape, axis, scale_full, dtype, stash):
    x = rng.standard_normal(shape).astype(dtype)
    tail = shape[axis % len(shape):]
    scale = rng.standard_normal(tail if scale_full else tail[-1:]).astype(dtype)
    check_node("RMSNormalization", [x, scale], {"axis": axis, "epsilon": 1e-3, "stash_type": stash}, opset=23,
               rtol=1e-2 if dtype == np.float16 else 1e-5, reference="onnx")


@pytest.mark.parametrize("shape,groups", [((2, 6, 4), 3), ((2, 6, 3, 3), 2), ((1, 4, 5), 4), ((3, 4), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_group_normalization(shape, groups, dtype):
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    scale, bias = rng.standard_normal(shape[1]).astype(dtype), rng.standard_normal(shape[1]).astype(dtype)
    check_node("GroupNormalization", [x, scale, bias], {"num_groups": groups, "epsilon": 1e-4}, opset=21,
               rtol=1e-2 if dtype == np.float16 else 1e-5, reference="onnx")


def test_group_normalization_18_scales_per_group():
    """GroupNormalization-18 (deprecated; onnx's checker refuses models at opsets 18-20, so the
    kernel is driven directly): scale and bias have one entry per group."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.norms import GroupNormalization

    x = rng.standard_normal((2, 6, 5)).astype(np.float32)
    scale, bias = np.array([0.5, 2.0, -1.0], np.float32), np.array([1.0, 0.0, 3.0], np.float32)
    node = Node("GroupNormalization", ["x", "s", "b"], ["y"], {"num_groups": 3})
    ctx = OpContext(node, 18, [x.shape, (3,), (3,)], [x.dtype] * 3)
    y = np.empty_like(x)
    GroupNormalization(ctx, num_groups=3, epsilon=1e-5)(x, scale, bias, out=y)
    g = x.reshape(2, 3, 10).astype(np.float64)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(2, 6, 5)
    expected = norm * np.repeat(scale, 2)[:, None] + np.repeat(bias, 2)[:, None]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lp_normalization(p, axis, opset, dtype):
    x = rng.standard_normal((3, 4, 5)).astype(dtype)
    check_node("LpNormalization", [x], {"p": p, "axis": axis}, opset=opset, reference="onnx")


def test_lp_normalization_of_a_zero_vector_is_zero():
    x = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)
    (y,) = check_node("LpNormalization", [x], {"p": 2, "axis": 1}, opset=22, reference="onnx")
    assert y.tolist() == [[0, 0], [0.6000000238418579, 0.800000011920929]]


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3], [-1]])
@pytest.mark.parametrize("opset", [11, 13])
def test_mean_variance_normalization(axes, opset):
    x = (rng.standard_normal((2, 3, 4, 5)) * 2 + 1).astype(np.float32)
    check_node("MeanVarianceNormalization", [x], {} if axes is None else {"axes": axes}, opset=opset,
               rtol=1e-4)
