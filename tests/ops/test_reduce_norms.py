"""ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp against onnxruntime."""

import numpy as np
import onnx
import pytest

from pooled_predictor.ops.registry import find
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(13)
OPS = ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def data(shape, dtype=np.float32, op="ReduceL1"):
    if np.dtype(dtype).kind == "f":
        x = rng.random(shape) * 3 + 0.1
        return (x if op == "ReduceLogSum" else x - 1.5).astype(dtype)
    return rng.integers(1 if op == "ReduceLogSum" else -3, 4, shape).astype(dtype)


def check_reduce(op, x, axes, opset, static=(1,), rtol=1e-5, **attrs):
    if axes is None:
        return check_node(op, [x], attrs, opset=opset, rtol=rtol)
    if opset < 18:
        return check_node(op, [x], dict(attrs, axes=axes), opset=opset, rtol=rtol)
    return check_node(op, [x, np.array(axes, np.int64)], attrs, opset=opset, static=static, rtol=rtol)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [1], [0, -1]])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce(op, axes, keepdims, opset):
    check_reduce(op, data((3, 4, 5), op=op), axes, opset, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [[1], []])
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_axes_fed_at_forward(op, axes, noop):
    check_reduce(op, data((3, 4), op=op), axes, 18, static=(), keepdims=1, noop_with_empty_axes=noop)


@pytest.mark.parametrize("op,dtype", [(op, dt) for op in OPS for dt in (np.float16, np.float64, np.int32, np.int64)
                                      if op != "ReduceLogSumExp" or dt not in (np.int32, np.int64)])  # see below
def test_reduce_dtypes(op, dtype):
    rtol = 1e-2 if dtype == np.float16 else 1e-12 if dtype == np.float64 else 1e-5
    check_reduce(op, data((4, 6), dtype, op), [1], 13, rtol=rtol, keepdims=0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_log_sum_exp_of_integers_is_computed_in_floating_point(dtype):
    """Integer ReduceLogSumExp (removed from the schema at opset 28): log(sum(exp(x))) in float64,
    truncated to the integer type. onnxruntime's int64 kernel truncates exp(x - max) to integers
    first ([3, 3, 2, 2, -3, 2] gives it 3, not 4); onnx's reference refuses integers."""
    x = np.array([[3, 3, 2, 2, -3, 2], [0, 0, 0, 0, 0, 0]], dtype)
    model = type_outputs(make_node_model("ReduceLogSumExp", [x], {"axes": [1], "keepdims": 0}, opset=13),
                         [np.zeros(2, dtype)])
    (ours,) = run_ours(model, {"in0": x})
    expected = np.trunc(np.log(np.exp(x.astype(np.float64)).sum(axis=1)))
    assert ours.dtype == dtype and ours.tolist() == expected.tolist() == [4, 1]


@pytest.mark.parametrize("op", OPS)
def test_reduce_empty_set(op):
    """0 for the norms and SumSquare; log 0 = -inf for LogSum and LogSumExp."""
    check_reduce(op, np.zeros((2, 0, 3), np.float32), [1], 18)


def test_log_sum_exp_is_stable_for_large_inputs():
    check_reduce("ReduceLogSumExp", np.array([[1000.0, 1000.0], [-1000.0, 5.0]], np.float32), [1], 18)


@pytest.mark.parametrize("op", OPS)
def test_every_schema_version_from_opset_11_is_registered(op):
    for opset in range(11, onnx.defs.onnx_opset_version() + 1):
        since = onnx.defs.get_schema(op, opset, "").since_version
        assert find(op, "", opset, "cpu").since == since, (op, opset)
