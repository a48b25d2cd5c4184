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


# ---- integer division and Mod --------------------------------------------------------
INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def int_sample(shape, dtype, nonzero=False):
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    return np.where(x == 0, 7, x).astype(dtype) if nonzero else x


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("shapes", BROADCAST + [((), ())])
def test_div_integers_truncate(dtype, shapes):
    """Integer Div truncates toward zero, 0-d inputs included (ShuffleNet v2's channel
    arithmetic: Div of two int64 scalars)."""
    check_node("Div", [int_sample(shapes[0], dtype), int_sample(shapes[1], dtype, nonzero=True)], opset=14)


def test_div_int64_exact_beyond_float():
    a = np.array([2 ** 62 + 1, -(2 ** 62) - 3, 9007199254740993], np.int64)
    b = np.array([3, 7, -2], np.int64)
    check_node("Div", [a, b], opset=14)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", INTS + [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shapes", BROADCAST[:5])
@pytest.mark.parametrize("opset", [10, 13, 28])
def test_mod(fmod, dtype, shapes, opset):
    """Both signs of dividend and divisor; fmod=0 on floats is Mod-28's (onnx reference)."""
    if np.dtype(dtype).kind == "f":
        if fmod == 0 and opset < 28:
            return  # Mod-10/13 forbid fmod=0 on floats (onnxruntime rejects it)
        a = (rng.standard_normal(shapes[0]) * 10).astype(dtype)
        b = (rng.standard_normal(shapes[1]) * 3).astype(dtype)
        b = np.where(b == 0, 1.5, b).astype(dtype)
    else:
        a, b = int_sample(shapes[0], dtype), int_sample(shapes[1], dtype, nonzero=True)
    check_node("Mod", [a, b], {"fmod": fmod}, opset=opset, reference="onnx",
               rtol=2e-3 if dtype == np.float16 else 1e-5)


def test_mod_float_special_cases():
    """Mod-28's special cases: inf dividend or zero divisor -> NaN; inf divisor -> A (or B)."""
    a = np.array([np.inf, 3.0, 3.0, -3.0, 0.0, -0.0, np.nan], np.float64)
    b = np.array([2.0, 0.0, np.inf, np.inf, -2.0, 2.0, 1.0], np.float64)
    from tests.onnx_helpers import feeds_of, make_node_model, run_ours

    (m0,) = run_ours(make_node_model("Mod", [a, b], {"fmod": 0}, opset=28), feeds_of([a, b]))
    (m1,) = run_ours(make_node_model("Mod", [a, b], {"fmod": 1}, opset=28), feeds_of([a, b]))
    np.testing.assert_array_equal(m0, [np.nan, np.nan, 3.0, np.inf, -0.0, 0.0, np.nan])
    np.testing.assert_array_equal(np.signbit(m0[4:6]), [True, False])
    np.testing.assert_array_equal(m1, [np.nan, np.nan, 3.0, -3.0, 0.0, -0.0, np.nan])


@pytest.mark.parametrize("op,index", [("Div", 0), ("Div", 1), ("Mod", 0)])
def test_integer_in_place(op, index):
    from tests.onnx_helpers import check_inplace

    check_inplace(op, [int_sample((3, 4), np.int32), int_sample((3, 4), np.int32, nonzero=True)], {}, 14, index)


def test_channel_shuffle_shape_arithmetic():
    """ShuffleNet v2's channel split as torch exports it: Shape -> Gather -> Div of int64
    scalars -> Concat -> Reshape, evaluated at reshape time (the integer Div on 0-d arrays
    used to fail there)."""
    from onnx import TensorProto, helper, numpy_helper

    from tests.onnx_helpers import run_ort, run_ours

    i64 = lambda n, v: numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Div", ["c", "two"], ["half"]),
             helper.make_node("Unsqueeze", ["half", "zero_axis"], ["half1"]),
             helper.make_node("Concat", ["neg1", "two1", "half1", "hw"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1, 3, 4])]
    inits = [i64("one", 1), i64("two", 2), i64("zero_axis", [0]), i64("neg1", [-1]), i64("two1", [2]),
             i64("hw", [3, 3])]
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    (ours,), (ref,) = run_ours(model, {"x": x}), run_ort(model, {"x": x})
    np.testing.assert_array_equal(ours, ref)
