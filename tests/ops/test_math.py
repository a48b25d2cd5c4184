"""One-node tests of math kernels (unary functions, Pow, Max, Min, Sum, Mean) against
onnxruntime (onnx's reference evaluator where onnxruntime has no kernel), plus in-place
runs and type errors. `check` and `check_inplace` are shared with test_activation and
test_logical."""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError
from pooled_predictor.ir import Node
from pooled_predictor.ops import get_rule, lookup
from pooled_predictor.ops.step import Step
from tests.onnx_helpers import check_inplace, check_node, feeds_of, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(4)
FLOATS = [np.float32, np.float64, np.float16]
RTOL = {np.float32: 1e-5, np.float64: 1e-5, np.float16: 2e-3}
BROADCAST = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (3, 1, 1)),
             ((1, 3, 1, 5), (2, 1, 4, 1)), ((4, 5), ()), ((), (2, 3)), ((0, 3), (1, 3)), ((2, 0), ())]


def check(op_type, inputs, attrs=None, *, opset=17, outputs=1, static=(), rtol=1e-5):
    """check_node; where onnxruntime has no kernel for the case (float64 Elu, int PRelu,
    bool Where, ...), against onnx's reference evaluator."""
    return check_node(op_type, inputs, attrs, opset=opset, outputs=outputs, static=static, rtol=rtol,
                      reference="onnx")


def sample(shape, dtype, scale=3.0):
    dtype = np.dtype(dtype)
    x = rng.standard_normal(shape) * scale
    if dtype.kind == "u":
        x = np.abs(x)
    return x.astype(dtype)


# ---- unary ---------------------------------------------------------------------
UNARY = {"Neg": FLOATS + [np.int8, np.int16, np.int32, np.int64],
         "Abs": FLOATS + [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64],
         "Sqrt": FLOATS, "Exp": FLOATS, "Log": FLOATS, "Tanh": FLOATS, "Reciprocal": FLOATS,
         "Floor": FLOATS, "Ceil": FLOATS}
UNARY_CASES = [(op, dt) for op, dts in UNARY.items() for dt in dts]


@pytest.mark.parametrize("op,dtype", UNARY_CASES)
@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (), (0, 3)])
def test_unary(op, dtype, opset, shape):
    x = sample(shape, dtype, 4.0)
    if x.size >= 5 and np.dtype(dtype).kind == "f":
        x.flat[:5] = [0.0, -0.0, 1.5, -2.5, 60.0 if dtype == np.float16 else 100.0]
    if op in ("Sqrt", "Log") and x.size:
        x.flat[::2] = np.abs(x.flat[::2])  # half in the domain, half NaN (and Log(0) = -inf)
    check(op, [x], opset=opset, rtol=RTOL.get(dtype, 1e-5))


def test_unary_extremes():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e30], np.float32)
    for op in ("Neg", "Abs", "Exp", "Tanh", "Reciprocal", "Floor", "Ceil", "Sqrt", "Log"):
        check(op, [x], opset=13)


def test_neg_abs_wrap_like_c():
    x = np.array([-128, -1, 0, 127], np.int8)
    check("Neg", [x], opset=13)
    check("Abs", [x], opset=13)


@pytest.mark.parametrize("op", list(UNARY))
def test_unary_in_place(op):
    check_inplace(op, [np.abs(sample((3, 4, 5), np.float32)) + 0.1], {}, 13, 0)


# ---- Pow -----------------------------------------------------------------------
POW_TYPES = [(np.float32, np.float32), (np.float64, np.float64), (np.float16, np.float16),
             (np.float32, np.float64), (np.float64, np.float32), (np.float32, np.int64),
             (np.float32, np.int32), (np.float16, np.float32), (np.float64, np.int8), (np.float32, np.uint8),
             (np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64), (np.int64, np.float32),
             (np.int32, np.float64), (np.int64, np.uint16)]


POW_CASES = [(t, opset) for opset in (11, 12, 13, 15) for t in POW_TYPES
             if opset >= 12 or (t[0] == t[1] and np.dtype(t[0]).kind == "f")]  # Pow-7: one float type


@pytest.mark.parametrize("types,opset", POW_CASES)
@pytest.mark.parametrize("shapes", BROADCAST)
@pytest.mark.parametrize("static", [(), (1,)])
def test_pow(types, shapes, opset, static):
    bt, et = map(np.dtype, types)
    if bt.kind == "f":
        x = np.abs(sample(shapes[0], bt, 2.0)) + 0.1
        if x.size:
            x.flat[::3] *= -1  # negative bases: NaN for non-integer exponents
        y = sample(shapes[1], np.float64, 1.5)
        y = np.round(y) if et.kind in "iu" else y
    else:
        x = rng.integers(-6, 7, shapes[0]).astype(bt)
        y = rng.integers(0 if et.kind == "u" else -3, 5, shapes[1]).astype(np.float64)
        if et.kind == "f":
            y = y + rng.choice([0.0, 0.5], shapes[1])
            x = np.abs(x)  # (-x) ** 0.5 is NaN, and NaN cast to an integer is undefined in C
    y = (np.abs(y) if et.kind == "u" else y).astype(et)
    check("Pow", [x, y], opset=opset, static=static, rtol=RTOL.get(bt.type, 1e-5) * 5)


def test_pow_int_negative_exponents():
    x = np.array([1, -1, 2, -2, 3, 5, -1, 7], np.int64)
    y = np.array([-1, -3, -1, -2, 0, 2, 4, 3], np.int64)
    check("Pow", [x, y], opset=15)
    check("Pow", [x.astype(np.int32), y], opset=15, static=(1,))


def test_pow_in_place():
    check_inplace("Pow", [np.abs(sample((3, 4), np.float32)), np.float32(2.5)], {}, 15, 0)
    check_inplace("Pow", [np.arange(12, dtype=np.int64).reshape(3, 4), np.array([-1, 0, 1, 2])], {}, 15, 0)
    check_inplace("Pow", [np.arange(12, dtype=np.int32).reshape(3, 4), np.array(0.5)], {}, 15, 0)


# ---- variadic ------------------------------------------------------------------
VARIADIC_SHAPES = [[(2, 3, 4)], [(2, 3, 4), (2, 3, 4)], [(2, 3, 4), (4,)], [(4,), (2, 3, 4)],
                   [(3, 1), (1, 4), ()], [(2, 3, 4), (3, 4), (1, 1, 4), (2, 1, 1)], [(0, 4), (4,), (1, 4)],
                   [(5,), (5,), (5,), (5,), (5,)]]


VARIADIC_CASES = [(op, dt, opset) for op in ("Max", "Min", "Sum", "Mean") for opset in (11, 12, 13)
                  for dt in FLOATS + [np.int32, np.int64, np.uint8, np.int8]
                  if dt in FLOATS or (op in ("Max", "Min") and opset >= 12)]  # ints: Max, Min from 12


@pytest.mark.parametrize("op,dtype,opset", VARIADIC_CASES)
@pytest.mark.parametrize("shapes", VARIADIC_SHAPES)
def test_variadic(op, shapes, dtype, opset):
    xs = [sample(s, dtype, 5.0) for s in shapes]
    check(op, xs, opset=opset, rtol=RTOL.get(dtype, 1e-5))


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("static", [(0,), (1,), (0, 2)])
def test_variadic_with_weights(op, static):
    xs = [sample(s, np.float32) for s in [(2, 3, 4), (3, 4), (4,)]]
    check(op, xs, opset=13, static=static)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_propagate_nan(op):
    a = np.array([np.nan, 1.0, np.nan, -np.inf], np.float32)
    b = np.array([2.0, np.nan, np.nan, np.inf], np.float32)
    check(op, [a, b], opset=13)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("index", [0, 1])
def test_variadic_in_place(op, index):
    xs = [sample(s, np.float32) for s in [(2, 3, 4), (2, 3, 4), (3, 4)]]
    check_inplace(op, xs, {}, 13, index)


def test_variadic_output_on_an_input_read_twice():
    """Sum(a, b, a) with the output on a: the kernel reads both a's before writing."""
    node = Node("Sum", ["a", "b", "a"], ["y"], {}, "", "n")
    step = Step(node, lookup("Sum", "", 13, "cpu"), 13, get_rule("Sum"))
    a, b = sample((3, 4), np.float32), sample((3, 4), np.float32)
    expected = a + b + a
    step.bind(step.context([a.shape] * 3, [a.dtype] * 3))(a, b, a, out=a)
    np.testing.assert_allclose(a, expected, rtol=1e-6)


@pytest.mark.parametrize("op,inputs,message", [
    ("Max", [np.zeros(3, np.float32), np.zeros(3, np.float64)], "must have the same type"),
    ("Sum", [np.zeros(3, np.int32), np.zeros(3, np.int32)], "Sum-13 takes"),
    ("Sqrt", [np.zeros(3, np.int32)], "Sqrt-13 takes"),
    ("Pow", [np.zeros(3, np.int8), np.zeros(3, np.int8)], "Pow-13 takes")])
def test_types_the_spec_does_not_allow(op, inputs, message):
    model = make_node_model(op, inputs, opset=13)
    type_outputs(model, [inputs[0]])
    with pytest.raises(ShapeInferenceError, match=message):
        run_ours(model, feeds_of(inputs))


def test_shapes_that_do_not_broadcast():
    xs = [np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)]
    model = make_node_model("Max", xs, opset=13)
    type_outputs(model, [xs[0]])
    with pytest.raises(ShapeInferenceError, match="do not broadcast"):
        run_ours(model, feeds_of(xs))


# ---- Round, Sign, IsNaN, IsInf ------------------------------------------------------
SPECIAL = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, np.inf, -np.inf, np.nan, 1e30]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [11, 22])
def test_round(dtype, opset):
    """Halves go to the even neighbour (ONNX Round)."""
    x = sample((3, 5), dtype)
    x.flat[:len(SPECIAL)] = SPECIAL
    check("Round", [x], opset=opset)


@pytest.mark.parametrize("dtype", FLOATS + [np.int8, np.int32, np.int64, np.uint8, np.uint64])
@pytest.mark.parametrize("opset", [9, 13])
def test_sign(dtype, opset):
    """Sign(NaN), which the spec leaves open, is NaN here (onnxruntime: NaN for float and
    double, 0 for float16): tested in test_sign_nan, left out here."""
    x = sample((3, 5), dtype)
    if np.dtype(dtype).kind == "f":
        x.flat[:len(SPECIAL) - 2] = [v for v in SPECIAL if not np.isnan(v)]
    else:
        x.flat[:2] = 0
    check("Sign", [x], opset=opset)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [9, 13, 20])
def test_is_nan(dtype, opset):
    x = sample((3, 5), dtype)
    x.flat[:len(SPECIAL)] = SPECIAL
    check("IsNaN", [x], opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("detect", [(1, 1), (1, 0), (0, 1), (0, 0)])
@pytest.mark.parametrize("opset", [10, 20])
def test_is_inf(dtype, detect, opset):
    x = sample((3, 5), dtype)
    x.flat[:len(SPECIAL)] = SPECIAL
    check("IsInf", [x], {"detect_negative": detect[0], "detect_positive": detect[1]}, opset=opset)


def test_sign_nan():
    for dtype in FLOATS:
        x = np.array([np.nan, -1.0, 2.0], dtype)
        (ours,) = run_ours(make_node_model("Sign", [x], opset=13), feeds_of([x]))
        np.testing.assert_array_equal(ours, np.array([np.nan, -1.0, 1.0], dtype))
