"""MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv against onnxruntime.

onnxruntime's integer kernels are not exact for every type pair (its u8 x s8
products saturate in int16 pairs, its ConvInteger mishandles int8 inputs), so
the reference is the spec's arithmetic evaluated exactly: the zero points
subtracted, the product by onnxruntime's float MatMul / Conv (exact for
these 8-bit operands), then the spec's requantization in numpy. QLinear* with
float16 scales follow onnx's reference evaluator, which computes the
multiplier in the scales' type as the conformance cases expect. Our Nets here use the
"exact" int8 arithmetic (ops/int8_arithmetic.py; tests/ops/test_int8_arithmetic.py
checks the "onnxruntime" one).
"""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError, UnsupportedOpError
from pooled_predictor.ops import int8_arithmetic
from tests.onnx_helpers import assert_close, check_node, make_node_model, run_ort, run_ours, type_outputs

rng = np.random.default_rng(19)


@pytest.fixture(autouse=True)
def _exact_arithmetic():
    with int8_arithmetic.use("exact"):
        yield


def q(shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def f64(v, zp=None, zp_shape=None):
    d = np.asarray(v, np.float64)
    if zp is None:
        return d
    z = np.asarray(zp, np.float64)
    return d - (z.reshape(zp_shape) if zp_shape is not None and z.ndim else z)


def ort_float64(op, inputs, attrs):
    """onnxruntime's MatMul (float64) / Conv (float32: it has no float64 Conv; exact while every
    partial sum stays below 2^24, as in these cases) of already shifted operands."""
    if op == "Conv":
        inputs = [np.asarray(a, np.float32) for a in inputs]
    model = make_node_model(op, inputs, attrs, opset=13)
    return run_ort(model, {f"in{i}": a for i, a in enumerate(inputs)})[0].astype(np.float64)


def requantize(acc, mult, zp):
    info = np.iinfo(zp.dtype)
    return np.clip(np.rint(acc * mult) + zp, info.min, info.max).astype(zp.dtype)


def check_against(op, inputs, attrs, opset, static, expected, rtol=0):
    model = make_node_model(op, inputs, attrs, opset=opset, static=static)
    type_outputs(model, [expected])
    (ours,) = run_ours(model, {f"in{i}": a for i, a in enumerate(inputs) if i not in static})
    assert_close(ours, expected, rtol, op)


@pytest.mark.parametrize("a_shape,b_shape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3)),
                                             ((2, 3, 4), (2, 4, 5))])
@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
@pytest.mark.parametrize("zp", ["none", "scalar", "vector"])
def test_matmul_integer(a_shape, b_shape, a_type, b_type, zp):
    a, b = q(a_shape, a_type), q(b_shape, b_type)
    inputs, a_zp, b_zp = [a, b], None, None
    if zp == "scalar":
        a_zp, b_zp = q((), a_type), q((), b_type)
    elif zp == "vector" and len(a_shape) == 2:
        a_zp, b_zp = q((a_shape[0],), a_type), q((b_shape[1],), b_type)
    if a_zp is not None:
        inputs += [a_zp, b_zp]
    expected = ort_float64("MatMul", [f64(a, a_zp, (-1, 1)), f64(b, b_zp)], {}).astype(np.int32)
    check_against("MatMulInteger", inputs, {}, 10, (2, 3) if a_zp is not None else (), expected)
    if a_type == b_type == np.uint8 and zp != "vector":  # onnxruntime is exact here
        check_node("MatMulInteger", inputs, {}, opset=10, static=(2, 3) if a_zp is not None else ())


@pytest.mark.parametrize("a_shape,b_shape", [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)),
                                             # two activations, batched (the quantized attention's products), and K
                                             # on both sides of the float32-exact bound (K 255^2 < 2^24: K <= 258)
                                             ((2, 3, 7, 64), (2, 3, 64, 9)), ((5, 258), (258, 6)), ((5, 259), (259, 6))])
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("opset,stype", [(10, np.float32), (21, np.float32), (21, np.float16)])
def test_qlinear_matmul(a_shape, b_shape, qtype, per_column, opset, stype):
    n = b_shape[-1]
    b_scale = (rng.random(n if per_column else ()) * 0.05 + 0.01).astype(stype)
    b_zp = q((n,) if per_column else (), qtype)
    a, a_scale, a_zp, b = q(a_shape, qtype), np.array(0.02, stype), q((), qtype), q(b_shape, qtype)
    y_scale, y_zp = np.array(0.3, stype), q((), qtype)
    inputs = [a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp]
    static = (1, 2, 4, 5, 6, 7)
    if stype == np.float16:
        model = make_node_model("QLinearMatMul", inputs, {}, opset=opset, static=static)
        from onnx.reference import ReferenceEvaluator

        (expected,) = ReferenceEvaluator(model).run(None, {"in0": a, "in3": b})
    else:
        acc = ort_float64("MatMul", [f64(a, a_zp), f64(b, b_zp)], {})
        expected = requantize(acc, (a_scale * b_scale / y_scale).astype(np.float64), y_zp)
    check_against("QLinearMatMul", inputs, {}, opset, static, expected)


CONVS = [  # x shape, w shape, attributes
    ((1, 3, 6, 6), (4, 3, 3, 3), {}),
    ((2, 4, 7, 5), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 1], "strides": [2, 1]}),
    ((1, 2, 6, 6), (2, 1, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 3, 8), (2, 3, 3), {"dilations": [2], "pads": [2, 1]}),
    ((1, 3, 8), (2, 3, 2), {"auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("w_zp", ["scalar", "per_channel"])
@pytest.mark.parametrize("static", [(1, 2, 3), (2,)])
def test_conv_integer(x_shape, w_shape, attrs, x_type, w_zp, static):
    x, w, xzp = q(x_shape, x_type), q(w_shape, np.uint8), q((), x_type)
    wzp = q((w_shape[0],) if w_zp == "per_channel" else (), np.uint8)
    per_m = (-1,) + (1,) * (len(w_shape) - 1)
    expected = ort_float64("Conv", [f64(x, xzp), f64(w, wzp, per_m)], attrs).astype(np.int32)
    check_against("ConvInteger", [x, w, xzp, wzp], attrs, 10, static, expected)


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("static", [(1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 6, 7)])
def test_qlinear_conv(x_shape, w_shape, attrs, qtype, per_channel, bias, static):
    m = w_shape[0]
    per_m = (-1,) + (1,) * (len(w_shape) - 1)
    w_scale = (rng.random(m if per_channel else ()) * 0.02 + 0.005).astype(np.float32)
    x, x_scale, x_zp, w = q(x_shape, qtype), np.array(0.05, np.float32), q((), qtype), q(w_shape, np.int8)
    w_zp, y_scale, y_zp = np.zeros(m if per_channel else (), np.int8), np.array(0.4, np.float32), q((), qtype)
    inputs = [x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp]
    acc = ort_float64("Conv", [f64(x, x_zp), f64(w, w_zp, per_m)], attrs)
    if bias:
        b = rng.integers(-500, 500, m).astype(np.int32)
        inputs.append(b)
        acc = acc + b.reshape(per_m[:-1] if len(per_m) > 1 else -1).astype(np.float64)
    mult = (x_scale * (w_scale.reshape(per_m[:-1]) if per_channel else w_scale) / y_scale).astype(np.float64)
    check_against("QLinearConv", inputs, attrs, 10, tuple(i for i in static if i < len(inputs)),
                  requantize(acc, mult, y_zp))


@pytest.mark.parametrize("static", [True, False])
def test_qlinear_conv_parameter_shapes_are_the_specs(static):
    """Found by tests/fuzz (its quant family): a w_zero_point of shape (1, 1, M) ran, flattened. The spec (and
    onnxruntime, at run) wants x's and y's scale and zero point a scalar or one element, w's a scalar or 1-D of
    the M output channels, B 1-D of M: anything else is a ShapeInferenceError naming the input."""
    m = 4
    x, w = q((1, 2, 5, 5), np.uint8), q((m, 2, 3, 3), np.int8)
    good = [x, np.float32(0.05), np.uint8(128), w, np.full(m, 0.01, np.float32), np.zeros(m, np.int8),
            np.float32(0.4), np.uint8(120), np.zeros(m, np.int32)]
    bad = {"w_zero_point": (5, np.zeros((1, 1, m), np.int8)), "w_scale": (4, np.full(m + 1, 0.01, np.float32)),
           "x_scale": (1, np.full(2, 0.05, np.float32)), "y_zero_point": (7, np.full((1, 2), 120, np.uint8)),
           "B": (8, np.zeros((1, m), np.int32))}
    feeds = {f"in{i}": v for i, v in enumerate(good) if i == 0 or not static}
    run_ours(make_node_model("QLinearConv", good, opset=10, static=range(1, 9) if static else ()),
             {k: np.asarray(v) for k, v in feeds.items()})
    for name, (i, value) in bad.items():
        inputs = list(good)
        inputs[i] = value
        model = make_node_model("QLinearConv", inputs, opset=10, static=range(1, 9) if static else ())
        feeds = {f"in{k}": np.asarray(v) for k, v in enumerate(inputs) if k == 0 or not static}
        with pytest.raises(ShapeInferenceError, match=f"{name} of shape"):
            run_ours(model, feeds)


def test_qlinear_matmul_of_float8_is_refused():
    """QLinearMatMul-21 admits float8 operands; onnxruntime has no kernel for them and onnx's reference casts
    them to integers. Found by tests/fuzz: ours ran them through the integer product. Now UnsupportedOpError."""
    import ml_dtypes

    a = np.ones((2, 3), np.float32).astype(ml_dtypes.float8_e4m3fn)
    inputs = [a, np.float32(0.1), np.zeros((), ml_dtypes.float8_e4m3fn), q((3, 2), np.int8), np.float32(0.1),
              np.int8(0), np.float32(0.2), np.uint8(128)]
    model = make_node_model("QLinearMatMul", inputs, opset=21, static=range(1, 8))
    with pytest.raises(UnsupportedOpError, match="float8"):
        run_ours(model, {"in0": a})


def test_qlinear_matmul_parameter_shapes_are_the_specs():
    """Found by tests/fuzz (its quant family): a b_scale of shape (1, 1, N) ran and broadcast the output to
    (1, M, N) where the spec's output is (M, N) (onnxruntime refuses it). a's and y's scale and zero point are
    a scalar or one element, b's a scalar or 1-D of b's N columns: else a ShapeInferenceError."""
    n = 3
    good = [q((2, 4), np.uint8), np.float32(0.05), np.uint8(128), q((4, n), np.int8),
            np.full(n, 0.01, np.float32), np.zeros(n, np.int8), np.float32(0.4), np.uint8(120)]
    run_ours(make_node_model("QLinearMatMul", good, opset=10, static=range(1, 8)), {"in0": good[0]})
    for name, i, value in (("b_scale", 4, np.full((1, 1, n), 0.01, np.float32)),
                           ("b_zero_point", 5, np.zeros(n + 1, np.int8)), ("a_scale", 1, np.full(2, 0.05, np.float32)),
                           ("y_zero_point", 7, np.full((1, 2), 9, np.uint8))):
        inputs = list(good)
        inputs[i] = value
        with pytest.raises(ShapeInferenceError, match=f"{name} of shape"):
            run_ours(make_node_model("QLinearMatMul", inputs, opset=10, static=range(1, 8)), {"in0": good[0]})
