"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear against onnxruntime."""

import contextlib

import numpy as np
import onnx
import pytest

from pooled_predictor.errors import ShapeInferenceError
from pooled_predictor.ops.cpu import compiled
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(18)
QTYPES = [np.uint8, np.int8, np.uint16, np.int16]


def zero_point(shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(max(info.min, -20), min(info.max, 20) + 1, shape).astype(dtype)


def param_shape(layout, x_shape, axis, block) -> tuple:
    """The shape of a scale / zero point: per tensor (), per axis (D_axis,), blocked (ceil(D_axis / B))."""
    if layout == "tensor":
        return ()
    if layout == "axis":
        return (x_shape[axis],)
    return tuple(-(-d // block) if i == axis % len(x_shape) else d for i, d in enumerate(x_shape))


def params(layout, x_shape, axis, block, qtype, sdtype=np.float32):
    shape = param_shape(layout, x_shape, axis, block)
    scale = (rng.random(shape) * 0.2 + 0.05).astype(sdtype)
    return scale, zero_point(shape, qtype)


LAYOUTS = [("tensor", 1, 0, 13), ("axis", 1, 0, 13), ("axis", -1, 0, 13), ("axis", 0, 0, 19),
           ("blocked", 1, 2, 21), ("blocked", -1, 3, 21), ("blocked", 0, 2, 21)]


@pytest.mark.parametrize("layout,axis,block,opset", LAYOUTS)
@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("static", [(1, 2), ()])
def test_quantize_linear(layout, axis, block, opset, qtype, static):
    x = (rng.standard_normal((3, 4, 5)) * 5).astype(np.float32)
    x.reshape(-1)[:4] = [0.5, 1.5, -2.5, 1e6]  # ties round to even; saturation
    scale, zp = params(layout, x.shape, axis, block, qtype)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    if opset < 21 and qtype not in (np.uint8, np.int8):
        opset = 21
    check_node("QuantizeLinear", [x, scale, zp], attrs, opset=opset, static=static)


@pytest.mark.parametrize("layout,axis,block,opset", LAYOUTS)
@pytest.mark.parametrize("qtype", QTYPES + [np.int32])
@pytest.mark.parametrize("static", [(1, 2), ()])
def test_dequantize_linear(layout, axis, block, opset, qtype, static):
    info = np.iinfo(qtype)
    x = rng.integers(max(info.min, -1000), min(info.max, 1000) + 1, (3, 4, 5)).astype(qtype)
    scale, zp = params(layout, x.shape, axis, block, np.int8 if qtype == np.int32 else qtype)
    if qtype == np.int32:  # int32 has no zero point (0)
        zp = None
    if opset < 21 and qtype not in (np.uint8, np.int8, np.int32):
        opset = 21
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    inputs = [x, scale] + ([] if zp is None else [zp])
    check_node("DequantizeLinear", inputs, attrs, opset=opset, static=static)


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("static", [(0, 1, 2), (1, 2), ()])
@pytest.mark.parametrize("compiled_kernels", [True, False])
def test_quantize_and_dequantize_a_scalar(qtype, static, compiled_kernels):
    """A 0-d x (the quantizer's QDQ pairs on a scalar constant: GELU's 1 and 0.5 in Swin-T) through both ops, folded
    as a weight (static 0) or fed: numpy's division of two 0-d arrays gives a scalar, which np.clip's out= refused
    (a KernelError while the Program folded Swin-T's constants)."""
    opset = 13 if qtype in (np.uint8, np.int8) else 21
    for x in (np.array(1.0, np.float32), np.array(-2.5, np.float32), np.array(1e6, np.float32)):
        scale, zp = np.array(0.01, np.float32), zero_point((), qtype)
        with compiled.reference_kernels() if not compiled_kernels else contextlib.nullcontext():
            (q,) = check_node("QuantizeLinear", [x, scale, zp], {}, opset=opset, static=static)
            assert q.shape == () and q.dtype == qtype
            check_node("DequantizeLinear", [q, scale, zp], {}, opset=opset, static=static)


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 25])
def test_quantize_without_zero_point_is_uint8(opset):
    x = (rng.standard_normal((2, 6)) * 10).astype(np.float32)
    (y,) = check_node("QuantizeLinear", [x, np.array(0.1, np.float32)], {}, opset=opset)
    assert y.dtype == np.uint8


@pytest.mark.parametrize("out_type", [onnx.TensorProto.INT8, onnx.TensorProto.UINT16, onnx.TensorProto.INT16])
def test_quantize_output_dtype(out_type):
    x = (rng.standard_normal((2, 6)) * 10).astype(np.float32)
    check_node("QuantizeLinear", [x, np.array(0.1, np.float32)], {"output_dtype": out_type}, opset=21)


def test_quantize_float16_and_precision():
    x = (rng.standard_normal((4, 5)) * 10).astype(np.float16)
    check_node("QuantizeLinear", [x, np.array(0.25, np.float16), np.array(3, np.int8)], {}, opset=19)
    x32 = x.astype(np.float32)
    check_node("QuantizeLinear", [x32, np.array(0.3, np.float32), np.array(3, np.int8)],
               {"precision": onnx.TensorProto.FLOAT}, opset=23, reference="onnx")


@pytest.mark.parametrize("out_type", [onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16])
def test_dequantize_output_dtype(out_type):
    x = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    check_node("DequantizeLinear", [x, np.array(0.1, np.float32), np.array(2, np.int8)],
               {"output_dtype": out_type}, opset=23, reference="onnx", rtol=1e-3)


def test_dequantize_float16_scale():
    x = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    check_node("DequantizeLinear", [x, np.array(0.1, np.float16), np.array(128, np.uint8)], {}, opset=19,
               rtol=1e-3)


def test_output_type_of_a_later_version_is_refused():
    x = np.ones((2, 2), np.float32)  # float4e2m1 outputs came with QuantizeLinear-23
    model = make_node_model("QuantizeLinear", [x, np.array(1.0, np.float32)],
                            {"output_dtype": onnx.TensorProto.FLOAT4E2M1}, opset=21, static=(1,))
    type_outputs(model, [np.zeros((2, 2), np.uint8)])
    with pytest.raises(ShapeInferenceError, match="QuantizeLinear-21 produces"):
        run_ours(model, {"in0": x})


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "wide"])
def test_dynamic_quantize_linear(case):
    x = {"mixed": rng.standard_normal((3, 4)) * 3, "positive": rng.random((3, 4)) * 5 + 1,
         "negative": -rng.random((3, 4)) * 5 - 1, "zeros": np.zeros((3, 4)),
         "wide": rng.standard_normal((2, 8)) * 1e4}[case].astype(np.float32)
    check_node("DynamicQuantizeLinear", [x], {}, opset=11, outputs=3)


@pytest.mark.parametrize("lo, hi", [(0, 255), (-128, 127), (-255, 0), (-3, 252), (-131, 124)])
def test_saturate_code_is_the_clamped_round_half_even(lo, hi):
    """compiled/quantize.saturate_code (clamp into [lo - 1, hi + 1], round, clamp to [lo, hi]: the form LLVM turns
    into cvtps2dq and saturating packs) equals min(max(rint(v), lo), hi) in a vectorized loop and in a scalar
    call: ties at every half in and around the range, values past int32's range, infinities; NaN gives lo."""
    from numba import njit

    from pooled_predictor.ops.cpu.compiled.quantize import saturate_code

    @njit(cache=False)
    def codes(v, lo, hi, out):
        for i in range(v.size):
            out[i] = saturate_code(v[i], lo, hi)

    halves = np.arange(2 * (lo - 40), 2 * (hi + 40) + 1) / 2
    v = np.concatenate([halves, np.nextafter(halves, np.inf), np.nextafter(halves, -np.inf),
                        rng.uniform(lo - 300, hi + 300, 997), [3e9, -3e9, 1e30, -1e30, np.inf, -np.inf, np.nan],
                        np.full(13, np.nan)]).astype(np.float32)
    want = np.clip(np.rint(np.nan_to_num(v, nan=lo)), lo, hi).astype(np.int32)
    out = np.empty(v.size, np.int32)
    codes(v, np.float32(lo), np.float32(hi), out)
    assert np.array_equal(out, want)
    assert [saturate_code(np.float32(x), np.float32(lo), np.float32(hi)) for x in v[::97]] == list(want[::97])


@pytest.mark.parametrize("qtype, zp", [(np.uint8, 7), (np.int8, -5), (np.uint8, 0), (np.int8, 0)])
def test_compiled_quantize_linear_of_nan_and_infinities_is_onnxruntimes(qtype, zp):
    """compiled/quantize.quantize_f32 (QuantizeLinear's per-tensor kernel) on NaN, infinities and values past the
    type's range gives onnxruntime's codes: NaN the type's lowest value (MLAS clamps with maxps, which returns the
    bound for NaN; the kernel had given the zero point), infinities and large values saturated, ties to even."""
    import onnxruntime as ort

    from pooled_predictor.ops.cpu.compiled.quantize import quantize_f32

    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.5, 3.5, -2.5, 300.0, -300.0] * 5, np.float32)
    et = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(qtype))
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [x.size])],
        [onnx.helper.make_tensor_value_info("y", et, [x.size])],
        [onnx.helper.make_tensor("s", onnx.TensorProto.FLOAT, [], [0.5]), onnx.helper.make_tensor("z", et, [], [zp])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ours = np.empty(x.size, qtype)
    quantize_f32(x, ours, np.float32(0.5), zp)
    assert np.array_equal(ours, want), (ours[:10], want[:10])
