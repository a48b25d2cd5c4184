"""One-node tests of Cast, CastLike and BitCast, including the ml_dtypes types (bfloat16,
float8, float6, float4, int4, int2), against onnxruntime where it has the kernel, else onnx's
reference evaluator."""

import ml_dtypes
import numpy as np
import onnx
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, feeds_of, make_node_model, np_to_elem, run_ours

rng = np.random.default_rng(14)
SMALL = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
         ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
         ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2,
         ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn]  # float6: Cast-28 only
WIDE = [np.float32, np.float16, np.float64, np.int32, np.int8, np.uint8]


def values(dtype, shape=(3, 7)):
    """Values across the range, out-of-range ones, inf and NaN (for floats)."""
    x = rng.standard_normal(shape) * 20
    if np.dtype(dtype).kind == "f":
        x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e6]
    elif np.dtype(dtype).kind == "u":
        x = np.abs(x)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("to", SMALL)
@pytest.mark.parametrize("src", [np.float32, np.float16])
@pytest.mark.parametrize("saturate", [0, 1])
def test_cast_to_small_types(to, src, saturate):
    """Rounding, saturation (float8) and round_mode "up" (e8m0), as onnx's reference."""
    x = values(src)
    if "int" in np.dtype(to).name:
        x = np.clip(np.nan_to_num(x), -2, 3).astype(src)  # the reference wraps nothing out of range
    attrs = {"to": np_to_elem(to), "saturate": saturate}
    float6 = "float6" in np.dtype(to).name
    check_node("Cast", [x], attrs, opset=28 if float6 else 25, reference="onnx")
    if not float6:
        check_node("CastLike", [x, np.zeros(1, to)], {"saturate": saturate}, opset=25, reference="onnx")


@pytest.mark.parametrize("src", SMALL)
@pytest.mark.parametrize("to", WIDE)
def test_cast_from_small_types(src, to):
    x = values(np.float32)
    if "int" in np.dtype(src).name:
        x = rng.integers(0 if np.dtype(src).name.startswith("u") else -1, 2, (3, 7))
    x = x.astype(src)
    if np.dtype(to).kind in "iu":
        x = np.nan_to_num(x.astype(np.float32), nan=0, posinf=0, neginf=0).clip(-100, 100).astype(src)
    check_node("Cast", [x], {"to": np_to_elem(to)}, opset=28 if "float6" in np.dtype(src).name else 25,
               reference="onnx")


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
def test_cast_e8m0_round_modes(mode):
    x = np.array([1.0, 1.5, 3.0, 0.75, 5.0, 1e-30, 3e38], np.float32)
    check_node("Cast", [x], {"to": onnx.TensorProto.FLOAT8E8M0, "round_mode": mode}, opset=25, reference="onnx")


@pytest.mark.parametrize("src,to", [(np.float32, np.int64), (np.int64, np.float16), (np.float64, np.uint8),
                                    (np.bool_, np.float32), (np.float32, np.bool_)])
@pytest.mark.parametrize("opset", [15, 19, 21])
def test_cast_like(src, to, opset):
    x = values(src) if src is not np.bool_ else rng.random((3, 7)) < 0.5
    if np.dtype(to).kind in "iu":
        x = np.nan_to_num(x, nan=0, posinf=0, neginf=0).clip(0, 200).astype(src)
    check_node("CastLike", [x, np.zeros((2,), to)], opset=opset, reference="onnx")


@pytest.mark.parametrize("src,to", [(np.float32, np.int32), (np.int32, np.uint32), (np.float64, np.int64),
                                    (np.float16, ml_dtypes.bfloat16), (np.uint8, ml_dtypes.float8_e4m3fn),
                                    (np.int8, np.uint8), (ml_dtypes.int4, ml_dtypes.uint4), (np.bool_, np.uint8)])
def test_bit_cast(src, to):
    """Y's bits are X's (numpy view, little endian)."""
    x = rng.integers(-3, 4, (2, 5)).astype(src) if np.dtype(src).kind != "f" else values(src, (2, 5))
    (ours,) = run_ours(make_node_model("BitCast", [x], {"to": np_to_elem(to)}, opset=26), feeds_of([x]))
    assert ours.dtype == np.dtype(to)
    np.testing.assert_array_equal(ours.view(np.uint8) if np.dtype(to).itemsize else ours,
                                  x.view(np.dtype(to)).view(np.uint8))


@pytest.mark.parametrize("src,to", [(np.float32, np.float64), (np.int8, ml_dtypes.int4), (np.int16, np.int8)])
def test_bit_cast_width_must_match(src, to):
    x = np.zeros(3, src)
    with pytest.raises(ShapeInferenceError, match="bit widths"):
        run_ours(make_node_model("BitCast", [x], {"to": np_to_elem(to)}, opset=26), feeds_of([x]))
