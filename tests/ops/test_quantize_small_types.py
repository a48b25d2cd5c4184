"""QuantizeLinear / DequantizeLinear to and from the ml_dtypes types (float8, float4, float6,
int4/uint4, int2/uint2; bfloat16 and float8e8m0 scales), per tensor, per axis and blocked.

The reference is onnxruntime where it has the kernel (float8, int4/uint4, int2/uint2). Its
Python API hands such tensors neither in nor out, so its model reads x from an initializer
(DequantizeLinear) or ends in a Cast to float (QuantizeLinear; exact for these types), and our
output is compared through the same exact cast. Where onnxruntime has no kernel (float4e2m1,
float6, bfloat16 x or y, float8e8m0 scales) onnx's ReferenceEvaluator is the reference.
"""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from tests.onnx_helpers import assert_close, feeds_of, make_node_model, run_ours, type_outputs
from tests.ops.test_quantize import param_shape

rng = np.random.default_rng(21)
FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
          ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz]
INTS = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
LAYOUTS = [("tensor", 1, 0), ("axis", 1, 0), ("blocked", -1, 3)]


def params(layout, x_shape, axis, block, qtype):
    """scale (float32) and zero point (qtype: random in range for integers, 0 for floats)."""
    shape = param_shape(layout, x_shape, axis, block)
    scale = (rng.random(shape) + 0.5).astype(np.float32)
    if "int" in np.dtype(qtype).name:
        info = ml_dtypes.iinfo(qtype)
        return scale, rng.integers(info.min, info.max + 1, shape).astype(qtype)
    return scale, np.zeros(shape, qtype)


def sample_x(qtype):
    """float32 x over the type's range, with ties, values far out of range, and (floats) Inf/NaN."""
    x = (rng.standard_normal((2, 3, 7)) * 4).astype(np.float32)
    x.reshape(-1)[:6] = [0.5, 1.5, -2.5, 1e6, -1e6, 3.0]
    if "float" in np.dtype(qtype).name:
        x.reshape(-1)[6:9] = [np.inf, -np.inf, np.nan]
    return x


def ort_through_cast(model, feeds):
    """Run `model` in onnxruntime with its output cast to float32 (exact for the small types)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    out = m.graph.output[0].name
    m.graph.node.append(helper.make_node("Cast", [out], ["as_float"], to=onnx.TensorProto.FLOAT))
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("as_float", onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def same_as_float(ours, ref, what):
    assert ours.shape == ref.shape, what
    assert np.array_equal(ours.astype(np.float32), ref, equal_nan=True), (
        f"{what}: {ours.astype(np.float32).ravel()[:12]} != {ref.ravel()[:12]}")


def quantize_cases():
    for qtype in FLOAT8:
        for layout in LAYOUTS:
            for saturate in (1, 0):
                yield qtype, layout, saturate
    for qtype in INTS:
        for layout in LAYOUTS:
            yield qtype, layout, 1


@pytest.mark.parametrize("qtype,layout,saturate", list(quantize_cases()),
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_quantize_against_onnxruntime(qtype, layout, saturate):
    kind, axis, block = layout
    x = sample_x(qtype)
    scale, zp = params(kind, x.shape, axis, block, qtype)
    opset = 25 if qtype in (ml_dtypes.int2, ml_dtypes.uint2) else 21
    attrs = {"axis": axis, "saturate": saturate} | ({"block_size": block} if block else {})
    ref = ort_through_cast(
        make_node_model("QuantizeLinear", [x, scale, zp], attrs, opset=opset, static=(1, 2)), {"in0": x})
    static = (1, 2) if kind != "blocked" else ()  # scale and zero point as graph inputs too
    model = make_node_model("QuantizeLinear", [x, scale, zp], attrs, opset=opset, static=static)
    type_outputs(model, [np.zeros(x.shape, qtype)])
    (ours,) = run_ours(model, feeds_of([x, scale, zp], static))
    assert ours.dtype == np.dtype(qtype)
    same_as_float(ours, ref, f"QuantizeLinear to {np.dtype(qtype).name}")


@pytest.mark.parametrize("qtype", FLOAT8 + INTS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda v: v[0])
def test_dequantize_against_onnxruntime(qtype, layout):
    kind, axis, block = layout
    x = sample_x(qtype).astype(qtype)  # integers wrap, floats round: any values of the type
    scale, zp = params(kind, x.shape, axis, block, qtype)
    opset = 25 if qtype in (ml_dtypes.int2, ml_dtypes.uint2) else 21
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    ref = ort_through_cast(make_node_model("DequantizeLinear", [x, scale, zp], attrs, opset=opset,
                                           static=(0, 1, 2)), {})
    model = make_node_model("DequantizeLinear", [x, scale, zp], attrs, opset=opset, static=(1, 2))
    type_outputs(model, [ref])
    (ours,) = run_ours(model, {"in0": x})
    assert ours.dtype == np.float32
    same_as_float(ours, ref, f"DequantizeLinear from {np.dtype(qtype).name}")


def check_with_onnx_reference(op, inputs, attrs, opset, static=(1, 2)):
    model = make_node_model(op, inputs, attrs, opset=opset, static=static)
    feeds = feeds_of(inputs, static)
    ref = ReferenceEvaluator(model).run(None, feeds)
    type_outputs(model, ref)
    (ours,) = run_ours(model, feeds)
    assert_close(ours, ref[0], 0.0, f"{op} (onnx reference)")


SMALL_FLOATS = [(ml_dtypes.float4_e2m1fn, 23), (ml_dtypes.float4_e2m1fn, 25),
                (ml_dtypes.float6_e2m3fn, 28), (ml_dtypes.float6_e3m2fn, 28)]


@pytest.mark.parametrize("qtype,opset", SMALL_FLOATS, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda v: v[0])
def test_float4_float6_against_onnx_reference(qtype, opset, layout):
    """No Inf or NaN in these types: out-of-range values clamp to +-max (ml_dtypes, as the reference)."""
    kind, axis, block = layout
    x = sample_x(np.int8)  # finite: the reference's NaN handling for these types is ml_dtypes' own
    scale, zp = params(kind, x.shape, axis, block, qtype)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    check_with_onnx_reference("QuantizeLinear", [x, scale, zp], attrs, opset)
    check_with_onnx_reference("DequantizeLinear", [x.astype(qtype), scale, zp], attrs, opset)


BF16, E8M0 = ml_dtypes.bfloat16, ml_dtypes.float8_e8m0fnu


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda v: v[0])
def test_bfloat16_and_e8m0_scales_against_onnx_reference(layout):
    kind, axis, block = layout
    x = sample_x(np.int8)
    scale, zp = params(kind, x.shape, axis, block, np.int8)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    # bfloat16 x and y_scale: the division in bfloat16 (rounded), then round half to even
    check_with_onnx_reference("QuantizeLinear", [x.astype(BF16), scale.astype(BF16), zp], attrs, 21)
    # float8e8m0 (power of two) scales, 24+
    p2 = (2.0 ** rng.integers(-3, 3, scale.shape)).astype(E8M0)
    check_with_onnx_reference("QuantizeLinear", [x, p2, zp], attrs, 24)
    q = x.astype(np.int8)
    check_with_onnx_reference("DequantizeLinear", [q, p2, zp],
                              attrs | {"output_dtype": onnx.TensorProto.FLOAT}, 25)
    # bfloat16 y: from a bfloat16 scale, or by output_dtype (23+)
    check_with_onnx_reference("DequantizeLinear", [q, scale.astype(BF16), zp], attrs, 21, static=())
    check_with_onnx_reference("DequantizeLinear", [q, scale, zp],
                              attrs | {"output_dtype": onnx.TensorProto.BFLOAT16}, 23)


@pytest.mark.parametrize("qtype", FLOAT8)
@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
@pytest.mark.parametrize("static", [True, False])
def test_a_float8_zero_point_must_be_zero(qtype, op, static):
    """Found by tests/fuzz (a zero point's data type retyped to float8): a nonzero float8 zero point was
    added and subtracted as the formula says, where onnxruntime refuses it ("with type float8 should have no
    zero point or all zero points should be 0") and onnx's reference ignores it in QuantizeLinear. Refused
    here too: a ShapeInferenceError at load for a weight, a KernelError at forward for a computed one; a zero
    zero point still runs."""
    from pooled_predictor.errors import KernelError, ShapeInferenceError

    x = np.ones((2, 3), np.float32) if op == "QuantizeLinear" else np.ones((2, 3), np.float32).astype(qtype)
    for zp, ok in ((np.zeros((), qtype), True), (np.ones((), np.float32).astype(qtype), False)):
        model = make_node_model(op, [x, np.float32(0.5), zp], opset=21, static=(0, 1, 2) if static else (0, 1))
        feeds = {} if static else {"in2": zp}
        if ok:
            run_ours(model, feeds)
            continue
        with pytest.raises(ShapeInferenceError if static else KernelError, match="float8 zero point must be 0"):
            run_ours(model, feeds)
