"""One-node tests of activation kernels (Clip, LeakyRelu, PRelu, Elu, HardSwish, Gelu,
Softplus, Dropout) against onnxruntime (onnx's reference evaluator where onnxruntime has no
kernel), plus in-place runs and error cases."""

import numpy as np
import pytest

from pooled_predictor.errors import ShapeInferenceError, UnsupportedOpError
from tests.onnx_helpers import feeds_of, make_node_model, run_ours, type_outputs
from tests.onnx_helpers import check_inplace
from tests.ops.test_math import check

rng = np.random.default_rng(3)
FLOATS = [np.float32, np.float64, np.float16]
RTOL = {np.float32: 1e-5, np.float64: 1e-5, np.float16: 2e-3}
SHAPES = [(2, 3, 4, 5), (7,), (), (0, 3)]


def sample(shape, dtype, scale=3.0):
    x = (rng.standard_normal(shape) * scale).astype(dtype)
    if x.size >= 4:
        x.flat[:4] = [0, -scale * 5, scale * 5, 1e-3]
    return x


# ---- Clip ----------------------------------------------------------------------
CLIP_BOUNDS = [(None, None), (-1.0, None), (None, 2.0), (-1.0, 2.0), (0.5, 0.5), (2.0, -1.0)]
CLIP_TYPES = [(dt, opset) for opset in (11, 12, 13) for dt in FLOATS + [np.int32, np.int64, np.int8, np.uint8]
              if opset >= 12 or dt in FLOATS]  # integer Clip from Clip-12


@pytest.mark.parametrize("bounds", CLIP_BOUNDS)
@pytest.mark.parametrize("dtype,opset", CLIP_TYPES)
@pytest.mark.parametrize("static", [(), (1, 2)])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (), (0, 4)])
def test_clip(bounds, dtype, opset, static, shape):
    x = sample(shape, np.float64, 4.0)
    lo, hi = bounds
    if np.dtype(dtype).kind == "u":
        x = np.abs(x) + 1
        lo, hi = (None if v is None else abs(v) + 1 for v in bounds)
    x = x.astype(dtype)
    ins = [x, None if lo is None else np.array(lo, dtype), None if hi is None else np.array(hi, dtype)]
    while ins[-1] is None and len(ins) > 1:
        ins.pop()
    check("Clip", ins, opset=opset, static=static, rtol=RTOL.get(dtype, 1e-5))


@pytest.mark.parametrize("attrs", [{}, {"min": -1.0}, {"max": 0.5}, {"min": -1.0, "max": 2.0}])
@pytest.mark.parametrize("dtype", FLOATS)
def test_clip6_attributes(attrs, dtype):
    check("Clip", [sample((3, 4, 5), dtype)], attrs, opset=10, rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset,bounds", [(13, (None, None)), (13, (-1.0, None)), (13, (None, 1.0)),
                                          (10, (None, None)), (10, (-1.0, None)), (10, (None, 1.0))])
def test_clip_nonfinite(dtype, opset, bounds):
    """NaN stays NaN; an absent bound is the type's lowest()/max() (Clip-11+) or the
    float32 range (Clip-6's attribute defaults), so +-inf become finite."""
    big = 6e4 if dtype == np.float16 else 1e30
    x = np.array([np.nan, np.inf, -np.inf, 0.0, big, -big, 2.0, -2.0]).astype(dtype)
    if opset < 11:
        check("Clip", [x], {k: v for k, v in zip(("min", "max"), bounds) if v is not None}, opset=opset)
    else:
        ins = [x] + [None if v is None else np.array(v, dtype) for v in bounds]
        check("Clip", ins, opset=opset, static=(1, 2))


def test_clip6_min_above_max_gives_max():
    """onnxruntime refuses min > max in Clip-6; the formula min(max(X, min), max) gives max."""
    x = sample((3, 4), np.float32)
    model = make_node_model("Clip", [x], {"min": 1.0, "max": -1.0}, opset=10)
    type_outputs(model, [x])
    (y,) = run_ours(model, feeds_of([x]))
    assert np.array_equal(y, np.full_like(x, -1.0))


def test_clip_min_not_scalar():
    model = make_node_model("Clip", [sample((3, 4), np.float32), np.zeros(2, np.float32)], opset=13)
    type_outputs(model, [np.zeros((3, 4), np.float32)])
    with pytest.raises(ShapeInferenceError, match="min must be a scalar"):
        run_ours(model, feeds_of([sample((3, 4), np.float32), np.zeros(2, np.float32)]))


# ---- ReLU family ---------------------------------------------------------------
@pytest.mark.parametrize("alpha", [None, 0.2, 1.0, 1.5, 0.0, -0.3])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [11, 16])
@pytest.mark.parametrize("shape", SHAPES)
def test_leaky_relu(alpha, dtype, opset, shape):
    attrs = {} if alpha is None else {"alpha": alpha}
    check("LeakyRelu", [sample(shape, dtype)], attrs, opset=opset, rtol=RTOL[dtype])


PRELU_SLOPES = [((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1,)), ((2, 3, 4, 5), ()),
                ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (4, 5)), ((2, 3, 4, 5), (2, 3, 4, 5)),
                ((2, 3, 4, 5), (1, 3, 1, 1)), ((6,), (6,)), ((0, 3), (3,))]


@pytest.mark.parametrize("shapes", PRELU_SLOPES)
@pytest.mark.parametrize("dtype", FLOATS + [np.int32, np.int64])
@pytest.mark.parametrize("opset", [11, 16])
@pytest.mark.parametrize("static", [(), (1,)])
def test_prelu(shapes, dtype, opset, static):
    x = sample(shapes[0], np.float64, 5.0).astype(dtype)
    slope = (rng.standard_normal(shapes[1]) * (3 if np.dtype(dtype).kind == "i" else 0.5)).astype(dtype)
    check("PRelu", [x, slope], opset=opset, static=static, rtol=RTOL.get(dtype, 1e-5))


@pytest.mark.parametrize("shapes", [((3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (3,)), ((2, 3), (2, 1, 3))])
def test_prelu_slope_must_broadcast_to_x(shapes):
    x, slope = sample(shapes[0], np.float32), sample(shapes[1], np.float32)
    model = make_node_model("PRelu", [x, slope], opset=16)
    type_outputs(model, [x])
    with pytest.raises(ShapeInferenceError, match="unidirectionally"):
        run_ours(model, feeds_of([x, slope]))


@pytest.mark.parametrize("alpha", [None, 0.5, 2.0])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [11, 13, 22])
@pytest.mark.parametrize("shape", SHAPES)
def test_elu(alpha, dtype, opset, shape):
    attrs = {} if alpha is None else {"alpha": alpha}
    check("Elu", [sample(shape, dtype)], attrs, opset=opset, rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [14, 22])
@pytest.mark.parametrize("shape", SHAPES)
def test_hard_swish(dtype, opset, shape):
    check("HardSwish", [sample(shape, dtype)], opset=opset, rtol=RTOL[dtype])


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu(approximate, dtype, shape):
    attrs = {} if approximate is None else {"approximate": approximate}
    check("Gelu", [sample(shape, dtype)], attrs, opset=20, rtol=RTOL[dtype])


def test_gelu_rejects_unknown_mode():
    x = sample((2, 3), np.float32)
    model = make_node_model("Gelu", [x], {"approximate": "sigmoid"}, opset=20)
    type_outputs(model, [x])
    with pytest.raises(UnsupportedOpError, match="approximate='sigmoid'"):
        run_ours(model, feeds_of([x]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opset", [11, 13, 22])
@pytest.mark.parametrize("shape", SHAPES)
def test_softplus(dtype, opset, shape):
    x = sample(shape, dtype, 10.0)
    check("Softplus", [x], opset=opset, rtol=RTOL[dtype])


@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", {}, 16), ("LeakyRelu", {"alpha": 2.0}, 16), ("LeakyRelu", {"alpha": 0.0}, 16),
    ("LeakyRelu", {"alpha": -0.5}, 16), ("Elu", {}, 22), ("HardSwish", {}, 22), ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20), ("Softplus", {}, 22)])
def test_activation_nonfinite(op, attrs, opset):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e30, 300.0, -300.0], np.float32)
    check(op, [x], attrs, opset=opset)


def test_prelu_nonfinite():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -1e30, 3.0, -3.0], np.float32)
    check("PRelu", [x, np.array([0.3, 0.0, 0.0, 2.0, 0.5, -1.0, -1.0], np.float32)], opset=16)


@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", {"alpha": 0.1}, 16), ("LeakyRelu", {"alpha": 2.0}, 16), ("LeakyRelu", {"alpha": -2.0}, 16),
    ("Elu", {}, 22), ("HardSwish", {}, 22), ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Softplus", {}, 22), ("Clip", {"min": -0.5, "max": 0.5}, 10)])
def test_activation_in_place(op, attrs, opset):
    check_inplace(op, [sample((4, 5, 6), np.float32)], attrs, opset, 0)


def test_prelu_in_place():
    check_inplace("PRelu", [sample((2, 3, 4), np.float32), sample((3, 1), np.float32)], {}, 16, 0)


# ---- Dropout -------------------------------------------------------------------
DROPOUT_CASES = [(11, "none", ())] + [(opset, inputs, static) for opset in (12, 13, 22)
                                        for inputs in ("none", "ratio", "ratio+mode")
                                        for static in ((), (1, 2))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("outputs", [1, 2])
@pytest.mark.parametrize("opset,inputs,static", DROPOUT_CASES)
def test_dropout_inference(dtype, opset, outputs, inputs, static):
    x = sample((2, 3, 4), dtype)
    if opset < 12:  # Dropout-10: ratio is an attribute
        attrs, ins = {"ratio": 0.3}, [x]
    else:
        attrs = {"seed": 7}
        ins = [x] + {"none": [], "ratio": [np.array(0.3, np.float32)],
                     "ratio+mode": [np.array(0.3, np.float32), np.array(False)]}[inputs]
    if outputs == 2 and opset < 12:
        # onnxruntime's Dropout-10 returns an all-False mask in inference; the spec
        # (and onnx's reference) keep every element: mask all True.
        model = make_node_model("Dropout", ins, attrs, opset=opset, outputs=2)
        type_outputs(model, [x, np.ones(x.shape, bool)])
        y, mask = run_ours(model, feeds_of(ins))
        assert np.array_equal(y, x) and mask.dtype == bool and mask.all()
        return
    check("Dropout", ins, attrs, opset=opset, outputs=outputs, static=static, rtol=0)


@pytest.mark.parametrize("static", [(), (1, 2)])
def test_dropout_training_with_ratio_zero_is_identity(static):
    x = sample((3, 4), np.float32)
    check("Dropout", [x, np.array(0.0, np.float32), np.array(True)], opset=13, outputs=2,
               static=static, rtol=0)


def test_dropout_training_mode_static_true_is_unsupported():
    x = sample((3, 4), np.float32)
    model = make_node_model("Dropout", [x, None, np.array(True)], opset=13, outputs=2, static=(2,))
    type_outputs(model, [x, np.ones(x.shape, bool)])
    with pytest.raises(UnsupportedOpError, match="training_mode is true"):
        run_ours(model, feeds_of([x, None, np.array(True)], static=(2,)))


def test_dropout_training_mode_runtime_true_is_unsupported():
    x = sample((3, 4), np.float32)
    ins = [x, np.array(0.5, np.float32), np.array(True)]
    model = make_node_model("Dropout", ins, opset=22, outputs=2)
    type_outputs(model, [x, np.ones(x.shape, bool)])
    with pytest.raises(UnsupportedOpError, match="training_mode is true"):
        run_ours(model, feeds_of(ins))


# ---- Selu, Celu, ThresholdedRelu, Shrink, Softsign, Swish, SwiGLU, Mish ----------------
NEW_ACTIVATIONS = [("Selu", {}, (6, 22)), ("Selu", {"alpha": 2.0, "gamma": 0.5}, (6, 22)),
                   ("Celu", {}, (12,)), ("Celu", {"alpha": 0.3}, (12, 28)),
                   ("ThresholdedRelu", {}, (10, 22)), ("ThresholdedRelu", {"alpha": -0.5}, (22,)),
                   ("Shrink", {}, (9,)), ("Shrink", {"bias": 1.5, "lambd": 2.0}, (9,)),
                   ("Softsign", {}, (1, 22)), ("Swish", {}, (24,)), ("Swish", {"alpha": 1.702}, (24,)),
                   ("Mish", {}, (18, 22))]


@pytest.mark.parametrize("op,attrs,opsets", NEW_ACTIVATIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_more_activations(op, attrs, opsets, dtype, shape):
    """Every opset of the list whose schema takes the dtype (Celu-12: float only)."""
    for opset in opsets:
        if schema_allows(op, opset, dtype):
            check(op, [sample(shape, dtype)], attrs, opset=opset, rtol=RTOL[dtype])


def schema_allows(op, opset, dtype) -> bool:
    import onnx

    from pooled_predictor.ops.shapes.common import onnx_type

    schema = onnx.defs.get_schema(op, opset)
    return onnx_type(dtype) in schema.type_constraints[0].allowed_type_strs


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("attrs", [{}, {"bias": 1.5, "lambd": 2.0}, {"bias": -2.0, "lambd": 0.0}])
def test_shrink_integers(dtype, attrs):
    """Integer Shrink: computed in double, converted back (as onnxruntime)."""
    x = rng.integers(0 if np.dtype(dtype).kind == "u" else -6, 7, (4, 5)).astype(dtype)
    check("Shrink", [x], attrs, opset=9)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_swiglu(dtype, alpha):
    """Y = A * sigmoid(alpha A) * B (SwiGLU-28), against its formula in numpy."""
    a, b = sample((2, 3, 8), dtype), sample((2, 3, 8), dtype)

    def reference(a, b):
        a64 = a.astype(np.float64)
        return [(a64 / (1 + np.exp(-alpha * a64)) * b).astype(dtype)]

    check_node_fallback("SwiGLU", [a, b], {"alpha": alpha}, 28, RTOL[dtype], reference)


def check_node_fallback(op, inputs, attrs, opset, rtol, reference):
    from tests.onnx_helpers import check_node

    check_node(op, inputs, attrs, opset=opset, rtol=rtol, reference=reference)


def test_swiglu_shapes_must_match():
    a, b = np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)
    with pytest.raises(ShapeInferenceError, match="same shape"):
        run_ours(make_node_model("SwiGLU", [a, b], opset=28), feeds_of([a, b]))


@pytest.mark.parametrize("op,attrs,opset", [("Selu", {}, 22), ("Celu", {}, 12), ("Softsign", {}, 22),
                                            ("Swish", {}, 24), ("Mish", {}, 22), ("Shrink", {}, 9),
                                            ("ThresholdedRelu", {}, 22)])
def test_more_activations_in_place(op, attrs, opset):
    check_inplace(op, [sample((3, 4), np.float32)], attrs, opset, 0)
