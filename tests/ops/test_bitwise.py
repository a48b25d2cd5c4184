"""One-node tests of the bitwise and boolean kernels (BitShift, BitwiseAnd/Or/Xor/Not,
And, Or, Xor) and of LessOrEqual/GreaterOrEqual against onnxruntime (onnx's reference
evaluator where onnxruntime has no kernel for a type), over dtypes, broadcasting and
opsets."""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_inplace, feeds_of, make_node_model, run_ours
from tests.ops.test_math import check

rng = np.random.default_rng(12)
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
SHAPES = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3)), ((0, 3), (1, 3))]


def ints(shape, dtype, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype,opset", [(t, 11) for t in UNSIGNED] + [(t, 28) for t in UNSIGNED + SIGNED])
@pytest.mark.parametrize("shapes", SHAPES[:4])
def test_bit_shift(direction, dtype, opset, shapes):
    """Shift amounts from -2 to the bit width + 2 (BitShift-28 defines them all)."""
    bits = np.dtype(dtype).itemsize * 8
    lo = -2 if opset == 28 and np.dtype(dtype).kind == "i" else 0
    check("BitShift", [ints(shapes[0], dtype), ints(shapes[1], dtype, lo, bits + 2)],
          {"direction": direction}, opset=opset)


def test_bit_shift_signed_edges():
    """Arithmetic right shift, sign fill for out-of-range amounts (BitShift-28's text)."""
    x = np.array([-5, -5, -5, 5, 5, -128, 127], np.int8)
    y = np.array([1, 8, -1, 8, -3, 7, 1], np.int8)
    model = make_node_model("BitShift", [x, y], {"direction": "RIGHT"}, opset=28)
    (ours,) = run_ours(model, feeds_of([x, y]))
    np.testing.assert_array_equal(ours, [-3, -1, -1, 0, 0, -1, 63])
    model = make_node_model("BitShift", [x, y], {"direction": "LEFT"}, opset=28)
    (ours,) = run_ours(model, feeds_of([x, y]))
    np.testing.assert_array_equal(ours, [-10, 0, 0, 0, 0, 0, -2])


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", UNSIGNED + SIGNED)
@pytest.mark.parametrize("shapes", SHAPES)
def test_bitwise_binary(op, dtype, shapes):
    check(op, [ints(shapes[0], dtype), ints(shapes[1], dtype)], opset=18)


@pytest.mark.parametrize("dtype", UNSIGNED + SIGNED)
def test_bitwise_not(dtype):
    check("BitwiseNot", [ints((3, 4), dtype)], opset=18)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("opset", [7, 17])
def test_boolean(op, shapes, opset):
    check(op, [rng.random(shapes[0]) < 0.5, rng.random(shapes[1]) < 0.5], opset=opset)


@pytest.mark.parametrize("op", ["LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype,opset", [(t, 12) for t in (np.float32, np.int32, np.int64, np.float64)]
                         + [(t, 16) for t in (np.float32, np.float16, np.int8, np.uint8, np.uint64, np.int16)])
@pytest.mark.parametrize("shapes", SHAPES)
def test_or_equal(op, dtype, opset, shapes):
    def sample(shape):
        v = rng.integers(0, 4, shape)
        return (v / 2 if np.dtype(dtype).kind == "f" else v).astype(dtype)

    check(op, [sample(shapes[0]), sample(shapes[1])], opset=opset)


def test_or_equal_nan():
    a = np.array([np.nan, 1, np.inf, -np.inf, 0.0], np.float32)
    b = np.array([np.nan, np.nan, np.inf, 1.0, -0.0], np.float32)
    for op in ("LessOrEqual", "GreaterOrEqual"):
        check(op, [a, b], opset=16)


@pytest.mark.parametrize("op,inputs", [("BitwiseAnd", 2), ("BitShift", 2), ("And", 2), ("BitwiseNot", 1)])
def test_in_place(op, inputs):
    attrs = {"direction": "LEFT"} if op == "BitShift" else {}
    arrays = [rng.random((3, 4)) < 0.5 if op == "And" else ints((3, 4), np.uint8, 0, 7) for _ in range(inputs)]
    check_inplace(op, arrays, attrs, 18, 0)


def test_types_checked():
    with pytest.raises(ShapeInferenceError, match="tensor\\(float\\)"):
        model = make_node_model("BitwiseAnd", [np.ones(3, np.float32), np.ones(3, np.float32)], opset=18)
        run_ours(model, feeds_of([np.ones(3, np.float32)] * 2))
    with pytest.raises(ShapeInferenceError, match="same type"):
        model = make_node_model("BitShift", [np.ones(3, np.uint8), np.ones(3, np.uint16)],
                                {"direction": "LEFT"}, opset=11)
        run_ours(model, feeds_of([np.ones(3, np.uint8), np.ones(3, np.uint16)]))
