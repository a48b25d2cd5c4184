"""ReduceMax, ReduceMin, ReduceSum, ReduceProd, ReduceMean against onnxruntime."""

import numpy as np
import onnx
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(11)
OPS = ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceMean"]
AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18, "ReduceMean": 18}


def data(shape, dtype=np.float32, op="ReduceSum"):
    """Values that keep products bounded: in [0.5, 1.5) (floats) or [-2, 2] (ints)."""
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape) + 0.5).astype(dtype) * (1 if op == "ReduceProd" else 4)
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) > 0.5
    lo = 0 if np.dtype(dtype).kind == "u" else -2
    return rng.integers(lo, 3, shape).astype(dtype)


def check_reduce(op, x, axes, opset, static=(1,), rtol=1e-5, **attrs):
    """Axes as attribute before the op's input version, else as input 1 (static or fed)."""
    if axes is None:
        return check_node(op, [x], attrs, opset=opset, rtol=rtol)
    if opset < AXES_INPUT_SINCE[op]:
        return check_node(op, [x], dict(attrs, axes=axes), opset=opset, rtol=rtol)
    return check_node(op, [x, np.array(axes, np.int64)], attrs, opset=opset, static=static, rtol=rtol)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, [1], [0, 2], [-1], [2, 0, 1]])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("opset", [11, 13, 18, 20])
def test_reduce(op, axes, keepdims, opset):
    check_reduce(op, data((3, 4, 5), op=op), axes, opset, keepdims=keepdims)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [[1], [-3, -1], []])
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_axes_fed_at_forward(op, axes, noop):
    check_reduce(op, data((3, 4, 5), op=op), axes, 18, static=(), keepdims=1, noop_with_empty_axes=noop)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, []])
@pytest.mark.parametrize("noop", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_noop_with_empty_axes(op, axes, noop, keepdims):
    check_reduce(op, data((2, 3), op=op), axes, 18, keepdims=keepdims, noop_with_empty_axes=noop)


DTYPES = {  # the types each op's newest schema allows that numpy has
    "ReduceSum": [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64],
    "ReduceProd": [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64],
    "ReduceMean": [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64],
    "ReduceMax": [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64, np.int8, np.uint8, np.bool_],
    "ReduceMin": [np.float16, np.float64, np.int32, np.int64, np.uint32, np.uint64, np.int8, np.uint8, np.bool_],
}


@pytest.mark.parametrize("op,dtype", [(op, dt) for op, dts in DTYPES.items() for dt in dts])
@pytest.mark.parametrize("axes", [None, [1]])
def test_reduce_dtypes(op, dtype, axes):
    rtol = 1e-2 if dtype == np.float16 else 1e-12 if dtype == np.float64 else 1e-5
    opset = 20 if dtype == np.bool_ else 13
    check_reduce(op, data((4, 6), dtype, op), axes, opset, rtol=rtol, keepdims=0)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,axes", [((0, 3), [0]), ((0, 3), [1]), ((0, 3), None), ((2, 0, 3), [1]),
                                        ((2, 0, 3), [0, 2])])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reduce_empty(op, shape, axes, dtype):
    """Empty sets give the identity (max: -inf / type minimum, min: +inf / maximum, sum 0, prod 1, mean 0)."""
    check_reduce(op, np.zeros(shape, dtype), axes, 13, keepdims=1)


def test_reduce_max_min_of_an_empty_bool_set_is_false_true():
    # onnxruntime refuses this case; the spec's "minimum value of the data type" is False.
    x = np.zeros((0, 2), bool)
    for op, expected in (("ReduceMax", False), ("ReduceMin", True)):
        model = type_outputs(make_node_model(op, [x], {"keepdims": 0}, opset=20), [np.zeros((), bool)])
        (ours,) = run_ours(model, {"in0": x})
        assert ours.shape == () and ours.dtype == bool and bool(ours) is expected


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce_scalar_input(op, opset):
    check_node(op, [np.array(1.5, np.float32)], {"keepdims": 0}, opset=opset)


@pytest.mark.parametrize("op", OPS)
def test_reduce_older_versions(op):
    check_node(op, [data((3, 4), op=op)], {"axes": [0], "keepdims": 0}, opset=1 if op != "ReduceMax" else 7)


def test_reduce_axis_out_of_range():
    x = np.zeros((2, 3), np.float32)
    model = type_outputs(make_node_model("ReduceSum", [x], {"axes": [2]}, opset=11), [x])
    with pytest.raises(ShapeInferenceError, match=r"ReduceSum.*axes=2 out of range for rank 2"):
        run_ours(model, {"in0": x})


def test_reduce_rejects_types_outside_the_schema():
    x = np.zeros((2, 3), np.int8)
    model = type_outputs(make_node_model("ReduceSum", [x], {}, opset=13), [x])
    with pytest.raises(ShapeInferenceError, match=r"tensor\(int8\); ReduceSum-13 takes"):
        run_ours(model, {"in0": x})


def test_registered_versions_cover_opset_11_to_newest():
    from pooled_predictor.ops.registry import find

    newest = onnx.defs.onnx_opset_version()
    for op in OPS:
        for opset in range(11, newest + 1):
            since = onnx.defs.get_schema(op, opset, "").since_version
            k = find(op, "", opset, "cpu")
            assert k is not None and k.since == since, (op, opset, since, k and k.since)
