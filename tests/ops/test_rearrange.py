"""Trilu, CumSum, CumProd, OneHot, EyeLike, DepthToSpace, SpaceToDepth, ReverseSequence,
CenterCropPad against onnxruntime (onnx's reference where it has no kernel)."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node, i64

rng = np.random.default_rng(17)


def ints(shape, dtype=np.int64, lo=-5, hi=6):
    return rng.integers(lo, hi, shape).astype(dtype)


@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (5, 2)])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 2, -1, -7])
@pytest.mark.parametrize("static", [(1,), ()])
def test_trilu(shape, upper, k, static):
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = [x] if k is None else [x, np.array(k, np.int64)]
    check_node("Trilu", inputs, {"upper": upper}, opset=14, static=static)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.bool_])
def test_trilu_dtypes(dtype):
    x = rng.random((3, 4)) > 0.5 if dtype == np.bool_ else ints((3, 4)).astype(dtype)
    check_node("Trilu", [x], {"upper": 1}, opset=14, reference="onnx")


@pytest.mark.parametrize("op,opset", [("CumSum", 11), ("CumSum", 14), ("CumProd", 26)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumulative(op, opset, axis, exclusive, reverse, dtype):
    x = ints((3, 4, 2), dtype, -2, 3)
    check_node(op, [x, np.array(axis, np.int32)], {"exclusive": exclusive, "reverse": reverse}, opset=opset,
               static=(1,), reference="onnx")


def test_cumsum_axis_fed_at_forward():
    check_node("CumSum", [ints((3, 4), np.float64), np.array(-1, np.int64)], {"exclusive": 1}, opset=14)


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
@pytest.mark.parametrize("opset", [9, 11])
@pytest.mark.parametrize("idx_dtype,depth_dtype,values_dtype", [
    (np.int64, np.int64, np.float32), (np.float32, np.float32, np.int64), (np.int32, np.float32, np.int32)])
def test_one_hot(axis, opset, idx_dtype, depth_dtype, values_dtype):
    idx = ints((2, 3), idx_dtype, -5 if opset >= 11 else 0, 7)  # some out of range: all off
    values = np.array([2, 7], values_dtype)
    check_node("OneHot", [idx, np.array(5, depth_dtype), values], {"axis": axis}, opset=opset, static=(1,),
               reference="onnx")


@pytest.mark.parametrize("shape", [(3, 3), (3, 5), (5, 2)])
@pytest.mark.parametrize("k", [0, 1, -2, 6])
@pytest.mark.parametrize("dtype", [None, 1, 7])
def test_eye_like(shape, k, dtype):
    attrs = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    check_node("EyeLike", [np.zeros(shape, np.int32)], attrs, opset=22)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize,shape", [(2, (1, 8, 2, 3)), (3, (2, 9, 2, 2)), (1, (1, 2, 3, 3))])
@pytest.mark.parametrize("opset", [11, 13])
def test_depth_to_space(mode, blocksize, shape, opset):
    x = rng.standard_normal(shape).astype(np.float32)
    check_node("DepthToSpace", [x], {"blocksize": blocksize, "mode": mode}, opset=opset)


@pytest.mark.parametrize("blocksize,shape", [(2, (1, 2, 4, 6)), (3, (2, 1, 6, 3))])
@pytest.mark.parametrize("opset,mode", [(11, None), (13, None), (28, "DCR"), (28, "CRD")])
def test_space_to_depth(blocksize, shape, opset, mode):
    x = rng.standard_normal(shape).astype(np.float32)
    attrs = {"blocksize": blocksize} | ({} if mode is None else {"mode": mode})
    check_node("SpaceToDepth", [x], attrs, opset=opset, reference="onnx")


@pytest.mark.parametrize("blocksize", [2, 3])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth_inverts_depth_to_space(blocksize, mode):
    x = rng.standard_normal((2, 2 * blocksize ** 2, 3, 2)).astype(np.float32)
    (y,) = check_node("DepthToSpace", [x], {"blocksize": blocksize, "mode": mode}, opset=13)
    (back,) = check_node("SpaceToDepth", [y], {"blocksize": blocksize, "mode": mode}, opset=28, reference="onnx")
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
@pytest.mark.parametrize("lens", [[1, 2, 3, 4], [4, 4, 0, 2]])
def test_reverse_sequence(time_axis, batch_axis, lens):
    x = rng.standard_normal((4, 4, 3)).astype(np.float32)
    check_node("ReverseSequence", [x, np.array(lens, np.int64)], {"time_axis": time_axis, "batch_axis": batch_axis},
               opset=10, static=(1,))


@pytest.mark.parametrize("target,axes", [((4, 6), None), ((7, 2), None), ((3, 9), None), ((6,), [0]),
                                         ((6,), [-1]), ((2, 3), [1, 2])])
def test_center_crop_pad(target, axes):
    x = rng.standard_normal((5, 4, 3) if axes == [1, 2] else (5, 4)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    check_node("CenterCropPad", [x, i64(*target)], attrs, opset=18, static=(1,), reference="onnx")


def test_one_hot_depth_fed_at_forward_sizes_the_output_per_forward():
    idx = np.array([[0, 2], [4, -1]], np.int64)
    for depth in (3, 5):
        check_node("OneHot", [idx, np.array(depth, np.int64), np.array([0, 1], np.float32)], {"axis": 1},
                   opset=11)


def test_center_crop_pad_shape_fed_at_forward():
    check_node("CenterCropPad", [rng.standard_normal((5, 4)).astype(np.float32), i64(3, 7)], {}, opset=18,
               reference="onnx")


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("DepthToSpace", [np.zeros((1, 6, 2, 2), np.float32)], {"blocksize": 2}, "not a multiple of blocksize"),
    ("SpaceToDepth", [np.zeros((1, 2, 3, 4), np.float32)], {"blocksize": 2}, "multiples of blocksize"),
    ("Trilu", [np.zeros((4,), np.float32)], {}, "rank >= 2"),
    ("EyeLike", [np.zeros((2, 2, 2), np.float32)], {}, "must be 2-D"),
])
def test_shape_errors_name_the_node(op, inputs, attrs, message):
    from pooled_predictor.errors import ShapeInferenceError
    from tests.onnx_helpers import make_node_model, run_ours, type_outputs

    model = type_outputs(make_node_model(op, inputs, attrs, opset=18), [np.zeros(1, np.float32)])
    with pytest.raises(ShapeInferenceError, match=f"{op}.*{message}"):
        run_ours(model, {"in0": inputs[0]})
