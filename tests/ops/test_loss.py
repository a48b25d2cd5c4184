"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against onnxruntime."""

import numpy as np
import pytest

from pooled_predictor.errors import KernelError
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(16)
SHAPES = [(4, 3), (2, 3, 5), (2, 4, 3, 2)]


def case(shape, ignore, dtype=np.float32, target_dtype=np.int64):
    x = rng.standard_normal(shape).astype(dtype)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(target_dtype)
    if ignore is not None:
        target.reshape(-1)[::3] = ignore
    return x, target


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -1])
@pytest.mark.parametrize("opset", [13, 22])
def test_nll_loss(shape, reduction, weighted, ignore, opset):
    x, target = case(shape, ignore)
    inputs = [x, target] + ([rng.random(shape[1]).astype(np.float32)] if weighted else [])
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    check_node("NegativeLogLikelihoodLoss", inputs, attrs, opset=opset)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("outputs", [1, 2])
def test_softmax_cross_entropy_loss(shape, reduction, weighted, ignore, outputs):
    x, target = case(shape, ignore, target_dtype=np.int32)
    inputs = [x, target] + ([rng.random(shape[1]).astype(np.float32)] if weighted else [])
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    check_node("SoftmaxCrossEntropyLoss", inputs, attrs, opset=13, outputs=outputs)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_loss_dtypes(op, dtype):
    x, target = case((3, 4, 2), None, dtype)
    check_node(op, [x, target], {"reduction": "mean"}, opset=13, rtol=1e-2 if dtype == np.float16 else 1e-12)


def test_target_out_of_range_is_a_kernel_error():
    x, target = np.zeros((2, 3), np.float32), np.array([0, 3], np.int64)
    model = type_outputs(make_node_model("NegativeLogLikelihoodLoss", [x, target], {}, opset=13),
                         [np.zeros((), np.float32)])
    with pytest.raises(KernelError, match=r"target 3 is not a class index in \[0, 3\)"):
        run_ours(model, {"in0": x, "in1": target})
