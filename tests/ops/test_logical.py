"""One-node tests of logical kernels (Equal, Less, Greater, Not, Where) against
onnxruntime (onnx's reference evaluator where onnxruntime has no kernel), plus in-place
runs and type errors."""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import feeds_of, make_node_model, run_ours, type_outputs
from tests.onnx_helpers import check_inplace
from tests.ops.test_math import BROADCAST, check

rng = np.random.default_rng(5)
NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64]
WORDS = np.array(["", "a", "b", "ab", "héllo", "a "], dtype=object)


def sample(shape, dtype):
    """Small values so that equal pairs occur; strings from WORDS."""
    dtype = np.dtype(dtype)
    if dtype == object:
        return rng.choice(WORDS, shape).astype(object)
    if dtype == bool:
        return rng.random(shape) < 0.5
    x = rng.integers(0 if dtype.kind == "u" else -3, 4, shape)
    if dtype.kind == "f":
        x = x / 2
    return x.astype(dtype)


# ---- comparisons ---------------------------------------------------------------
COMPARISON_CASES = [(op, dt, opset) for op in ("Equal", "Less", "Greater") for opset in (11, 13, 19)
                    for dt in NUMERIC + [np.bool_, object]
                    if (dt is not np.bool_ or op == "Equal")  # bool: Equal only
                    and (dt is not object or (op == "Equal" and opset >= 19))]  # strings: Equal-19


@pytest.mark.parametrize("op,dtype,opset", COMPARISON_CASES)
@pytest.mark.parametrize("shapes", BROADCAST)
def test_comparison(op, dtype, opset, shapes):
    a, b = sample(shapes[0], dtype), sample(shapes[1], dtype)
    check(op, [a, b], opset=opset)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_comparison_nan_inf(op):
    a = np.array([np.nan, 1.0, np.inf, -np.inf, 0.0, np.nan], np.float32)
    b = np.array([np.nan, np.nan, np.inf, np.inf, -0.0, 1.0], np.float32)
    check(op, [a, b], opset=13)


@pytest.mark.parametrize("static", [(0,), (1,)])
def test_comparison_with_weight(static):
    check("Less", [sample((2, 3, 4), np.float32), sample((4,), np.float32)], opset=13, static=static)


def test_equal_strings_before_19_is_rejected():
    a = np.array(["a", "b"], dtype=object)
    model = make_node_model("Equal", [a, a], opset=13)
    type_outputs(model, [np.zeros(2, bool)])
    with pytest.raises(ShapeInferenceError, match="tensor\\(string\\)"):
        run_ours(model, feeds_of([a, a]))


def test_comparison_types_must_match():
    a, b = np.zeros(3, np.float32), np.zeros(3, np.int32)
    model = make_node_model("Less", [a, b], opset=13)
    type_outputs(model, [np.zeros(3, bool)])
    with pytest.raises(ShapeInferenceError, match="same type"):
        run_ours(model, feeds_of([a, b]))


# ---- Not -----------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 4), (), (0, 2)])
@pytest.mark.parametrize("opset", [11, 13, 22])
def test_not(shape, opset):
    check("Not", [sample(shape, bool)], opset=opset)


def test_not_in_place():
    check_inplace("Not", [sample((3, 4), bool)], {}, 13, 0)


# ---- Where ---------------------------------------------------------------------
WHERE_SHAPES = [((2, 3, 4),) * 3, ((2, 3, 4), (4,), ()), ((4,), (2, 3, 4), (3, 1)),
                ((3, 1), (1, 4), (2, 1, 1)), ((), (2, 3), (2, 3)), ((1,), (), ()), ((0, 3), (3,), (1, 3)),
                ((2, 1, 4), (2, 3, 4), (1,))]


@pytest.mark.parametrize("shapes", WHERE_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8,
                                   np.uint64, np.bool_, object])
@pytest.mark.parametrize("opset", [11, 16])
@pytest.mark.parametrize("static", [(), (0,), (1, 2)])
def test_where(shapes, dtype, opset, static):
    c = sample(shapes[0], bool)
    x, y = sample(shapes[1], dtype), sample(shapes[2], dtype)
    check("Where", [c, x, y], opset=opset, static=static)


@pytest.mark.parametrize("index", [1, 2])
@pytest.mark.parametrize("cond_shape", [(2, 3, 4), (3, 1), ()])
def test_where_in_place(index, cond_shape):
    c = sample(cond_shape, bool)
    xs = [sample((2, 3, 4), np.float32), sample((2, 3, 4), np.float32)]
    check_inplace("Where", [c] + xs, {}, 16, index)


def test_where_condition_must_be_bool():
    c, x = np.ones(3, np.float32), np.zeros(3, np.float32)
    model = make_node_model("Where", [c, x, x], opset=16)
    type_outputs(model, [x])
    with pytest.raises(ShapeInferenceError, match="condition"):
        run_ours(model, feeds_of([c, x, x]))
