"""Compiled reductions over trailing axes (compiled/rowreduce.py: ReduceMean, ReduceSum,
ReduceMax, GlobalAveragePool, GlobalMaxPool) and the compiled AveragePool of windows that tile the input
(compiled/pooling.py's average_tiles): against onnxruntime over grids (odd sizes,
batch 2, keepdims, axes, tiny and large planes), against the numpy reference paths
(compiled.ENABLED=False) and a float64 reference, NaN/inf, and the path each node takes."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node
from tests.ops.test_compiled_pooling import build, ours_both

rng = np.random.default_rng(23)
U = 2.0 ** -24   # float32's unit roundoff


def f32(*shape, offset=0.0):
    return (rng.standard_normal(shape) + offset).astype(np.float32)


# ---- ReduceMean / ReduceSum / ReduceMax / GlobalAveragePool / GlobalMaxPool ----------------------------------------
# shapes: rows of 1 value, of fewer than 8, of 8k + r, of several 256-blocks; batch 2
SHAPES = [(2, 3, 1, 1), (2, 5, 3, 2), (1, 4, 7, 7), (2, 3, 13, 17), (1, 2, 67, 71)]
# (axes, compiled): trailing sets in any order; the others take numpy
AXES = [([2, 3], True), ([3, -2], True), ([-1], True), ([1, 2, 3], True), ([0, 1, 2, 3], True),
        ([1, 3], False), ([0], False)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("axes,trailing", AXES, ids=lambda v: str(v))
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_reduce_over_axes_against_onnxruntime_and_numpy(op, axes, trailing, shape, monkeypatch):
    x = f32(*shape, offset=0.5)
    for keepdims in (0, 1):
        if op != "ReduceSum":   # axes an attribute (13) and an input (18)
            cases = [([x], {"axes": axes, "keepdims": keepdims}, 13, ()),
                     ([x, np.array(axes, np.int64)], {"keepdims": keepdims}, 18, (1,))]
        else:
            cases = [([x, np.array(axes, np.int64)], {"keepdims": keepdims}, 13, (1,))]
        for inputs, attrs, opset, static in cases:
            check_node(op, inputs, attrs, opset=opset, static=static, rtol=1e-6)
            fast, ref = ours_both(op, inputs, attrs, opset, static, monkeypatch)
            if op == "ReduceMax":
                np.testing.assert_array_equal(fast, ref)   # a max is exact
            else:
                np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-6)
            assert (build(op, inputs, attrs, opset).rows is not None) == trailing


@pytest.mark.parametrize("shape", [(2, 3, 13, 17), (1, 1280, 7, 7), (2, 3, 5), (1, 2, 3, 4, 5), (3, 2, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_global_pools_against_onnxruntime_and_numpy(shape, monkeypatch):
    x = f32(*shape)
    for op in ("GlobalAveragePool", "GlobalMaxPool"):
        check_node(op, [x], {}, opset=22, rtol=1e-6)
        fast, ref = ours_both(op, [x], {}, 1, monkeypatch=monkeypatch)
        if op == "GlobalMaxPool":
            np.testing.assert_array_equal(fast, ref)
        else:
            np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=1e-7)
        assert build(op, [x], {}, 1).rows is not None


def test_sums_within_the_error_bound_and_no_worse_than_numpy(monkeypatch):
    """Against float64: |error| <= 19 u sum|x| + u |mean| (the bound in rowreduce.py), and the
    largest error no larger than the numpy path's, on rows of 49 to 19200 values."""
    for shape in [(1, 1280, 7, 7), (1, 64, 30, 40), (1, 8, 120, 160)]:
        x = (rng.random(shape) * 2 + 0.1).astype(np.float32)   # same signs: cancellation-free
        ref = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
        fast, slow = ours_both("GlobalAveragePool", [x], {}, 1, monkeypatch=monkeypatch)
        bound = 19 * U * np.abs(x.astype(np.float64)).mean(axis=(2, 3), keepdims=True) + U * np.abs(ref)
        assert np.all(np.abs(fast - ref) <= bound)
        assert np.max(np.abs(fast - ref) / ref) <= np.max(np.abs(slow - ref) / ref)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # numpy's inf - inf
def test_nan_and_inf_propagate(monkeypatch):
    x = f32(2, 3, 9, 31)
    x[0, 0, 4, 30] = np.nan
    x[0, 1, 0, 0] = np.inf
    x[1, 2, 8, 30] = -np.inf
    x[1, 0, 3, 3], x[1, 0, 5, 5] = np.inf, -np.inf
    for op, inputs, attrs, opset, static in [("GlobalAveragePool", [x], {}, 1, ()),
                                             ("ReduceMean", [x], {"axes": [2, 3]}, 13, ()),
                                             ("ReduceSum", [x, np.array([2, 3], np.int64)], {}, 13, (1,))]:
        check_node(op, inputs, attrs, opset=opset, static=static, rtol=1e-6)
        fast, ref = ours_both(op, inputs, attrs, opset, static, monkeypatch)
        # sums of 279 values, sum|x| about 220: within a few of its float32 ulps (1.5e-5)
        np.testing.assert_allclose(fast, ref, rtol=1e-6, atol=19 * U * 220)
        assert np.isnan(fast[0, 0, 0, 0]) and fast[0, 1, 0, 0] == np.inf and fast[1, 2, 0, 0] == -np.inf
        assert np.isnan(fast[1, 0, 0, 0]) and np.isfinite(fast[0, 2, 0, 0])
    # maxima: NaN wins wherever it is (in the vector part or the last d % 8 values), as np.max
    for op, inputs, attrs, opset in [("GlobalMaxPool", [x], {}, 1), ("ReduceMax", [x], {"axes": [2, 3]}, 13)]:
        fast, ref = ours_both(op, inputs, attrs, opset, (), monkeypatch)
        np.testing.assert_array_equal(fast, ref)
        assert np.isnan(fast[0, 0, 0, 0]) and fast[0, 1, 0, 0] == np.inf and fast[1, 0, 0, 0] == np.inf
    y = f32(3, 2, 1, 5)
    y[0, 0, 0, 4], y[1, 1, 0, 0], y[2, :] = np.nan, np.nan, -np.inf
    fast, ref = ours_both("GlobalMaxPool", [y], {}, 1, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(fast, ref)
    assert np.isnan(fast[0, 0]) and np.isnan(fast[1, 1]) and np.all(fast[2] == -np.inf)


def test_float16_float64_and_empty_rows_keep_numpy():
    for dtype in (np.float16, np.float64):
        assert build("ReduceMean", [f32(2, 3, 4).astype(dtype)], {"axes": [2]}, 13).rows is None
        assert build("GlobalMaxPool", [f32(2, 3, 4).astype(dtype)], {}, 1).rows is None
    assert build("ReduceMean", [f32(2, 3, 0)], {"axes": [2]}, 13).rows is None     # mean of nothing: 0
    check_node("ReduceMean", [f32(2, 3, 0)], {"axes": [2]}, opset=13)
    check_node("ReduceSum", [f32(0, 3, 4), np.array([2], np.int64)], {}, opset=13, static=(1,))
    check_node("ReduceMax", [f32(0, 3, 4)], {"axes": [2]}, opset=13)


# ---- AveragePool whose windows tile the input ----------------------------------------
# (kernel, shape, extra attributes): leftover rows/columns unread, kernels 1..5 wide,
# SAME padding that pads nothing, count_include_pad (no window reaches padding)
TILES = [((3, 2), (1, 160, 3, 80), {}), ((2, 2), (2, 3, 13, 17), {}), ((3, 3), (2, 5, 10, 31), {}),
         ((4, 5), (1, 3, 9, 21), {}), ((1, 3), (2, 2, 5, 10), {}), ((2, 1), (1, 2, 7, 3), {}),
         ((2, 2), (2, 2, 4, 39), {}),
         ((2, 2), (1, 2, 8, 12), {"auto_pad": "SAME_UPPER"}), ((2, 2), (1, 2, 8, 12), {"pads": [0, 0, 1, 1]})]


@pytest.mark.parametrize("kernel,shape,extra", TILES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple)
                         else str(v))
def test_average_pool_tiles_against_onnxruntime_and_numpy(kernel, shape, extra, monkeypatch):
    from pooled_predictor.ops.cpu.pooling import _AverageTiles

    x = f32(*shape)
    for include in (0, 1):
        attrs = {"kernel_shape": list(kernel), "strides": list(kernel), "count_include_pad": include, **extra}
        check_node("AveragePool", [x], attrs, opset=11, rtol=1e-6)
        fast, ref = ours_both("AveragePool", [x], attrs, 11, monkeypatch=monkeypatch)
        np.testing.assert_allclose(fast, ref, rtol=3e-7, atol=1e-7)
        assert isinstance(build("AveragePool", [x], attrs, 11).compiled, _AverageTiles)


def test_average_pool_windows_into_padding_or_overlapping_are_not_tiles():
    from pooled_predictor.ops.cpu.pooling import _AverageTiles

    x = f32(1, 2, 9, 13)
    for attrs in [{"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},   # a partial last window
                  {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 0]},
                  {"kernel_shape": [3, 3], "strides": [2, 2]}]:
        assert not isinstance(build("AveragePool", [x], attrs, 11).compiled, _AverageTiles)
        check_node("AveragePool", [x], attrs, opset=11, rtol=1e-6)
    x[0, 0, 1, 1], x[0, 1, 4, 4] = np.nan, np.inf
    y = check_node("AveragePool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)[0]
    assert np.isnan(y[0, 0, 0, 0]) and y[0, 1, 2, 2] == np.inf
