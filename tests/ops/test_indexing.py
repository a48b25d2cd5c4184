"""Gather, Slice, Split, TopK, ArgMax against onnxruntime."""

import numpy as np
import onnx
import pytest

from pooled_predictor.errors import KernelError, ShapeInferenceError
from tests.onnx_helpers import check_node, i64, make_node_model, run_ort, run_ours, type_outputs
from tests.onnx_helpers import sample as _sample

rng = np.random.default_rng(5)
x4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
INT_MAX, INT_MIN = 2**63 - 1, -(2**63)



def sample(shape, dtype):
    return _sample(rng, shape, dtype)


def expect_error(op, inputs, attrs, match, opset=13, static=(), outputs=1, error=ShapeInferenceError):
    model = type_outputs(make_node_model(op, inputs, attrs, opset=opset, static=static, outputs=outputs),
                         [np.zeros(1, np.float32)] * outputs)
    with pytest.raises(error, match=match):
        run_ours(model, {f"in{i}": x for i, x in enumerate(inputs) if i not in static})


# ---- Gather ------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 3, -1, -3])
@pytest.mark.parametrize("idx", [[1], [[0, -1], [1, 0]], 0, -2, [], [[1, 1, 0]]])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("static", [(), (1,)])
def test_gather(axis, idx, opset, static):
    check_node("Gather", [x4, np.array(idx, np.int64).reshape(np.shape(idx))], {"axis": axis}, opset=opset,
               static=static)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.float64, np.float16, np.bool_, object])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_dtypes(dtype, idx_dtype):
    # axis 1: onnxruntime 1.32 drops all but the first string of each row gathered along axis 0
    check_node("Gather", [sample((4, 3), dtype), np.array([[2, -3], [0, 1]], idx_dtype)], {"axis": 1}, opset=13)


def test_gather_strings_along_axis_0():
    x = sample((4, 2), object)
    model = type_outputs(make_node_model("Gather", [x, i64(3, -4)], {}, opset=13, static=(1,)), [x[:2]])
    (ours,) = run_ours(model, {"in0": x})
    assert ours.tolist() == [x[3].tolist(), x[0].tolist()]


def test_gather_embedding_table_weight():
    table = rng.standard_normal((50, 8)).astype(np.float32)
    check_node("Gather", [table, rng.integers(-50, 50, (4, 7)).astype(np.int64)], opset=13, static=(0,))


def test_gather_out_of_range_names_the_node():
    expect_error("Gather", [x4, i64(3)], {"axis": 1}, r"Gather.*index 3 is out of range \[-3, 2\]",
                 static=(1,))
    expect_error("Gather", [x4, i64(-4)], {"axis": 1}, r"Gather.*index -4 is out of range", error=KernelError)


# ---- Slice -------------------------------------------------------------------
SLICES = [  # starts, ends, axes, steps
    ([1], [3], None, None),
    ([0, 1], [-1, 1000], [1, 3], None),
    ([-3, 0], [INT_MAX, 2], [2, -1], None),
    ([3], [-100], [2], [-1]),
    ([-1], [INT_MIN], [-1], [-2]),
    ([0, 0, 0], [2, 3, 5], [0, 1, 3], [1, 2, 3]),
    ([4], [1], [3], [-2]),
    ([2], [2], [1], [1]),
    ([5], [0], [3], [1]),
    ([10], [-10], [3], [-1]),
    ([-10], [10], [0], [1]),
    ([1, 0], [0, 4], [0, 3], [-1, 1]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES)
@pytest.mark.parametrize("opset", [10, 11, 13])
@pytest.mark.parametrize("static", [(1, 2, 3, 4), ()])
def test_slice(starts, ends, axes, steps, opset, static):
    inputs = [x4, i64(*starts), i64(*ends), None if axes is None else i64(*axes),
              None if steps is None else i64(*steps)]
    if opset == 10 and axes is not None and min(axes) < 0:
        pytest.skip("negative axes are a Slice-11 addition")
    while inputs[-1] is None:
        inputs.pop()
    check_node("Slice", inputs, opset=opset, static=static)


@pytest.mark.parametrize("starts,ends,axes", [([1], [3], None), ([0, 1], [-1, 1000], [1, 3]),
                                              ([-3, 0], [INT_MAX, 2], [2, 3]), ([2], [2], [1])])
def test_slice_1_attributes(starts, ends, axes):
    attrs = {"starts": starts, "ends": ends}
    if axes is not None:
        attrs["axes"] = axes
    check_node("Slice", [x4], attrs, opset=1)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.bool_, object, np.uint64])
@pytest.mark.parametrize("ind_dtype", [np.int32, np.int64])
def test_slice_dtypes(dtype, ind_dtype):
    check_node("Slice", [sample((4, 6), dtype), np.array([3, 1], ind_dtype), np.array([0, 6], ind_dtype),
                         np.array([0, 1], ind_dtype), np.array([-1, 2], ind_dtype)], opset=13, static=(1, 2, 3, 4))


def test_slice_of_an_empty_axis():
    check_node("Slice", [np.zeros((0, 3), np.float32), i64(0, -1), i64(5, -5), i64(0, 1), i64(1, -1)], opset=13)


def test_slice_errors():
    expect_error("Slice", [x4, i64(0), i64(1), i64(0), i64(0)], {}, "must not contain 0", static=(1, 2, 3, 4))
    expect_error("Slice", [x4, i64(0, 0), i64(1), i64(0, 1)], {}, "same length", static=(1, 2, 3))
    expect_error("Slice", [x4, i64(0), i64(1), i64(4)], {}, "out of range", static=(1, 2, 3))


# ---- Split -------------------------------------------------------------------
@pytest.mark.parametrize("axis,split,static", [
    (0, None, ()), (1, None, ()), (1, [1, 2], (1,)), (2, [0, 3, 1], (1,)), (-1, [2, 3], (1,)), (3, [5], (1,)),
    (-2, [1, 1, 1, 1], (1,)), (1, [1, 2], ()), (2, [0, 3, 1], ()), (-1, [2, 3], ())])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split(axis, split, opset, static):
    n = len(split) if split is not None else [2, 3, 4, 5][axis]
    if opset < 13:
        attrs = {"axis": axis} if split is None else {"axis": axis, "split": split}
        check_node("Split", [x4], attrs, opset=opset, outputs=n)
    else:
        if split is None and opset >= 18:
            # The spec wants split or num_outputs; onnxruntime rejects neither, we split equally.
            model = make_node_model("Split", [x4], {"axis": axis}, opset=18, outputs=n)
            ref = np.split(x4, n, axis=axis)
            for o, r in zip(run_ours(type_outputs(model, ref), {"in0": x4}), ref):
                np.testing.assert_array_equal(o, r)
            return
        inputs = [x4] if split is None else [x4, i64(*split)]
        check_node("Split", inputs, {"axis": axis}, opset=opset, outputs=n, static=static)


@pytest.mark.parametrize("length,num", [(7, 3), (6, 3), (5, 2), (5, 5), (4, 1), (10, 4)])
@pytest.mark.parametrize("axis", [0, -1])
def test_split_18_num_outputs(length, num, axis):
    x = rng.standard_normal((length, length)).astype(np.float32)
    check_node("Split", [x], {"axis": axis, "num_outputs": num}, opset=18, outputs=num)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, object, np.float16])
def test_split_dtypes(dtype):
    check_node("Split", [sample((4, 6), dtype), i64(1, 5)], {"axis": 1}, opset=13, outputs=2, static=(1,))


def test_split_with_an_absent_output():
    x = rng.standard_normal((6, 2)).astype(np.float32)
    model = make_node_model("Split", [x, i64(1, 2, 3)], {}, opset=13, outputs=["a", "", "c"], static=(1,))
    ref = [x[:1], x[3:]]  # onnxruntime 1.32 crashes on an absent Split output
    ours = run_ours(type_outputs(model, ref), {"in0": x})
    for o, r in zip(ours, ref):
        np.testing.assert_array_equal(o, r)


def test_split_2():
    check_node("Split", [x4], {"axis": 1, "split": [2, 1]}, opset=2, outputs=2)


def test_split_errors():
    expect_error("Split", [x4], {"axis": 1}, "does not split into 2 equal parts", outputs=2)
    expect_error("Split", [x4, i64(1, 1)], {"axis": 1}, "must be >= 0 and sum to 3", outputs=2, static=(1,))
    expect_error("Split", [x4], {"axis": 3, "num_outputs": 4}, "cannot be split into 4 chunks", opset=18,
                 outputs=4)
    expect_error("Split", [x4], {"axis": 3, "num_outputs": 3}, "num_outputs=3 but the node has 2", opset=18,
                 outputs=2)


# ---- TopK --------------------------------------------------------------------
def tied(shape, dtype=np.float32):
    """Values with many ties (small integers) to exercise the lower-index-first rule."""
    return rng.integers(0, 4, shape).astype(dtype)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
@pytest.mark.parametrize("axis", [-1, 0, 2])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("opset", [11, 24])
@pytest.mark.parametrize("static", [(1,), ()])
def test_topk(k, axis, largest, opset, static):
    x = tied((4, 3, 5))
    check_node("TopK", [x, i64(k)], {"axis": axis, "largest": largest}, opset=opset, outputs=2, static=static)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_topk_by_selection(axis, largest, dtype):
    """k <= n / 4: the selection path (np.partition, then the k sorted), ties by the lower index;
    a row with a NaN takes the sort."""
    shape = [3, 5, 4]
    shape[axis] = 40
    x = tied(tuple(shape), dtype)
    check_node("TopK", [x, i64(6)], {"axis": axis, "largest": largest}, opset=11, outputs=2)
    check_node("TopK", [rng.standard_normal((2, 3234)).astype(np.float32), i64(300)], {"largest": largest},
               opset=11, outputs=2)
    if dtype == np.float32:
        x[(0,) * x.ndim] = np.nan
        check_node("TopK", [x, i64(6)], {"axis": axis, "largest": largest}, opset=11, outputs=2)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.uint64])
@pytest.mark.parametrize("largest", [1, 0])
def test_topk_dtypes(dtype, largest):
    check_node("TopK", [tied((3, 9), dtype), i64(4)], {"largest": largest}, opset=11, outputs=2)


@pytest.mark.parametrize("opset", [1, 10])
def test_topk_before_11(opset):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    if opset == 1:
        check_node("TopK", [x], {"k": 3, "axis": 0}, opset=1, outputs=2)
    else:
        check_node("TopK", [x, i64(3)], {"axis": 0}, opset=10, outputs=2)


def test_topk_unsorted_returns_the_same_set():
    x = rng.standard_normal((4, 10)).astype(np.float32)
    model = make_node_model("TopK", [x, i64(4)], {"sorted": 0}, opset=11, outputs=2, static=(1,))
    ref = run_ort(model, {"in0": x})
    vals, idx = run_ours(type_outputs(model, ref), {"in0": x})
    assert np.array_equal(np.sort(idx, axis=1), np.sort(ref[1], axis=1))
    assert np.array_equal(np.take_along_axis(x, idx, 1), vals)


def test_topk_k_too_large():
    expect_error("TopK", [x4, i64(6)], {}, r"k=6 must be in \[0, 5\]", opset=11, outputs=2, static=(1,))


# ---- ArgMax, ArgMin --------------------------------------------------------------
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("keepdims", [1, 0])
@pytest.mark.parametrize("last,opset", [(None, 11), (None, 13), (0, 12), (1, 12), (0, 13), (1, 13)])
def test_argmax(op, axis, keepdims, last, opset):
    attrs = {"axis": axis, "keepdims": keepdims}
    if last is not None:
        attrs["select_last_index"] = last
    check_node(op, [tied((3, 4, 5))], attrs, opset=opset)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax_dtypes(op, dtype, last):
    check_node(op, [tied((4, 6), dtype)], {"axis": 1, "select_last_index": last}, opset=13)


def test_argmax_1():
    check_node("ArgMax", [x4], {"axis": 2, "keepdims": 0}, opset=1)


def test_argmax_of_an_empty_axis_is_an_error():
    expect_error("ArgMax", [np.zeros((3, 0), np.float32)], {"axis": 1}, "there is no maximum")


def test_registered_versions_cover_opset_11_to_newest():
    from pooled_predictor.ops.registry import find

    newest = onnx.defs.onnx_opset_version()
    for op in ("Gather", "Slice", "Split", "TopK", "ArgMax"):
        for opset in range(11, newest + 1):
            since = onnx.defs.get_schema(op, opset, "").since_version
            k = find(op, "", opset, "cpu")
            assert k is not None and k.since == since, (op, opset, since, k and k.since)


def test_topk_over_near_ties_gives_onnxruntimes_indices():
    """Mask R-CNN's RPN (benchmarks/detection.py): TopK k=1000 of 19200 objectness scores, dozens of them
    within 1e-6 (relative) of the next and some equal. Fed the same values, our indices are
    onnxruntime's exactly; the benchmark's reordered proposals come from the values' rounding upstream."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((1, 19200)).astype(np.float32) * 0.05
    base[0, 1::97] = base[0, ::97][: base[0, 1::97].size]  # exact ties
    base[0, 2::89] = np.nextafter(base[0, 3::89][: base[0, 2::89].size], np.float32(1))  # one ulp apart
    check_node("TopK", [base, i64(1000)], {"axis": 1, "largest": 1, "sorted": 1}, opset=17, outputs=2)
