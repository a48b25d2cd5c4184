"""Gemm against onnxruntime: transposes, alpha/beta, C broadcasting, dtypes, opsets."""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(7)
M, K, N = 3, 5, 4

C_SHAPES = [None, (N,), (1, N), (M, 1), (M, N), ()]


def operands(trans_a, trans_b, c_shape, dtype=np.float32, m=M, k=K, n=N):
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(dtype)
    return a, b, c


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (0.5, 2.0), (-1.5, 0.0), (1.0, -0.25)])
@pytest.mark.parametrize("c_shape", C_SHAPES)
def test_gemm_attributes(trans_a, trans_b, alpha, beta, c_shape):
    a, b, c = operands(trans_a, trans_b, c_shape)
    inputs = [a, b] if c is None else [a, b, c]
    check_node("Gemm", inputs, {"transA": trans_a, "transB": trans_b, "alpha": alpha, "beta": beta},
               opset=13, static=(1, 2))


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize("dtype,rtol", [(np.float32, 1e-5), (np.float64, 1e-12), (np.float16, 1e-2)])
@pytest.mark.parametrize("static", [(), (2,), (1, 2)])
def test_gemm_opsets_dtypes_and_weights(opset, dtype, rtol, static):
    a, b, c = operands(0, 1, (N,), dtype)
    check_node("Gemm", [a, b, c], {"transB": 1, "alpha": 0.75, "beta": 1.5}, opset=opset,
               static=static, rtol=rtol)


@pytest.mark.parametrize("opset", [11, 13])
def test_gemm_without_c(opset):
    a, b, _ = operands(1, 0, None)
    check_node("Gemm", [a, b], {"transA": 1, "alpha": 2.0}, opset=opset)


@pytest.mark.parametrize("m,k,n", [(0, 5, 4), (3, 0, 4), (3, 5, 0), (1, 1, 1)])
def test_gemm_empty_and_tiny(m, k, n):
    a, b, c = operands(0, 0, (n,), m=m, k=k, n=n)
    check_node("Gemm", [a, b, c], {"beta": 0.5}, opset=13)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.uint64])
@pytest.mark.parametrize("alpha,beta", [(1.0, 1.0), (2.0, 3.0)])
def test_gemm_integers_match_the_formula(dtype, alpha, beta):
    # onnxruntime has no integer Gemm kernel: compare with the spec's formula.
    a = rng.integers(0, 5, (M, K)).astype(dtype)
    b = rng.integers(0, 5, (N, K)).astype(dtype)
    c = rng.integers(0, 5, (M, 1)).astype(dtype)
    ref = (alpha * (a.astype(np.float64) @ b.T.astype(np.float64)) + beta * c).astype(dtype)
    model = type_outputs(make_node_model("Gemm", [a, b, c], {"transB": 1, "alpha": alpha, "beta": beta},
                                         opset=13), [ref])
    (ours,) = run_ours(model, {"in0": a, "in1": b, "in2": c})
    assert ours.dtype == ref.dtype and np.array_equal(ours, ref)


@pytest.mark.parametrize("a_shape,b_shape,c_shape,attrs,match", [
    ((3, 5), (4, 4), None, {}, "inner dimensions differ"),
    ((5, 3), (5, 4), None, {}, "inner dimensions differ"),
    ((2, 3, 5), (5, 4), None, {}, "must be 2-D"),
    ((3, 5), (5, 4), (2, 4), {}, "C of shape"),
    ((3, 5), (5, 4), (3,), {}, "C of shape"),
    ((3, 5), (5, 4), (1, 3, 4), {}, "C of shape"),
])
def test_gemm_shape_errors_name_the_node(a_shape, b_shape, c_shape, attrs, match):
    a = np.zeros(a_shape, np.float32)
    b = np.zeros(b_shape, np.float32)
    inputs = [a, b] + ([] if c_shape is None else [np.zeros(c_shape, np.float32)])
    model = type_outputs(make_node_model("Gemm", inputs, attrs, opset=13), [np.zeros((1, 1), np.float32)])
    with pytest.raises(ShapeInferenceError, match=rf"Gemm.*{match}"):
        run_ours(model, {f"in{i}": x for i, x in enumerate(inputs)})
