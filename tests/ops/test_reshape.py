"""Reshape, Flatten, Expand, Tile, Pad, ConstantOfShape, Range, Constant against onnxruntime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.errors import ShapeInferenceError, UnsupportedOpError
from pooled_predictor.importers import load_onnx
from pooled_predictor.importers.onnx import _attr_value
from pooled_predictor.ir import Graph, Node, Value
from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import sample as _sample
from tests.onnx_helpers import (assert_close, i64, check_node, make_node_model, run_ort, run_ours,
                                type_outputs)

rng = np.random.default_rng(3)
x4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)



def sample(shape, dtype):
    return _sample(rng, shape, dtype)


def expect_shape_error(op, inputs, attrs, match, opset=13, static=()):
    model = type_outputs(make_node_model(op, inputs, attrs, opset=opset, static=static),
                         [np.zeros(1, inputs[0].dtype)])
    feeds = {f"in{i}": x for i, x in enumerate(inputs) if i not in static}
    with pytest.raises(ShapeInferenceError, match=match):
        run_ours(model, feeds)


# ---- Reshape -------------------------------------------------------------------
@pytest.mark.parametrize("spec", [(6, 20), (-1,), (2, -1, 5), (0, 0, -1), (0, 12, 5), (120,),
                                  (1, 2, 1, 3, 20), (-1, 1)])
@pytest.mark.parametrize("opset", [5, 13, 14, 19, 21, 25])
@pytest.mark.parametrize("static", [(1,), ()])
def test_reshape(spec, opset, static):
    check_node("Reshape", [x4, i64(*spec)], opset=opset, static=static)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.uint16, np.int64, np.bool_, object])
def test_reshape_dtypes(dtype):
    check_node("Reshape", [sample((2, 3, 4), dtype), i64(4, -1)], opset=14, static=(1,))


@pytest.mark.parametrize("x_shape,spec", [((2, 0, 3), (0, 3)), ((2, 0, 3), (6, 0)), ((0, 4), (2, 0, 2)),
                                          ((3, 4), (0, 12)), ((1,), ())])
@pytest.mark.parametrize("static", [(1,), ()])
def test_reshape_allowzero(x_shape, spec, static):
    x = rng.standard_normal(x_shape).astype(np.float32)
    if int(np.prod(spec)) != x.size:
        expect_shape_error("Reshape", [x, i64(*spec)], {"allowzero": 1}, "cannot reshape", opset=14,
                           static=static)
    else:
        check_node("Reshape", [x, i64(*spec)], {"allowzero": 1}, opset=14, static=static)


def test_reshape_to_scalar_and_empty():
    check_node("Reshape", [np.array([7.0], np.float32), np.zeros(0, np.int64)], opset=13, static=(1,))
    check_node("Reshape", [np.zeros((0, 3), np.float32), i64(3, 0, -1)], opset=13, static=(1,))


@pytest.mark.parametrize("spec,attrs,match", [
    ((-1, -1), {}, "more than one -1"), ((7, -1), {}, "cannot be inferred"), ((3, 3), {}, "cannot reshape"),
    ((0, -1), {"allowzero": 1}, "both 0 and -1"), ((1, 1, 1, 1, 0), {}, "copies an input dimension"),
    ((-2, 60), {}, "negative dimension")])
def test_reshape_errors(spec, attrs, match):
    expect_shape_error("Reshape", [x4, i64(*spec)], attrs, match, opset=14, static=(1,))


def test_reshape_of_a_shape_chain_is_static_and_matches():
    """x -> Shape -> Slice[0:2] -> Concat(.., [-1]) -> Reshape: shapes known at reshape time."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "two"], ["s2"]),
             helper.make_node("Concat", ["s2", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("Flatten", ["y"], ["z"], axis=-1)]
    inits = [numpy_helper.from_array(i64(0), "zero"), numpy_helper.from_array(i64(2), "two"),
             numpy_helper.from_array(i64(-1), "minus1")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    net = Net(Program(load_onnx(model)))
    for n in (2, 5):
        x = rng.standard_normal((n, 3, 4, 5)).astype(np.float32)
        net.forward({"x": x})
        assert not net.has_dynamic_shapes
        assert_close(net.blob_by_name("z"), run_ort(model, {"x": x})[0], what="chain")


# ---- Flatten -------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2, 3, 4, -1, -2, -4])
@pytest.mark.parametrize("opset", [11, 13, 21, 25])
def test_flatten(axis, opset):
    check_node("Flatten", [x4], {"axis": axis}, opset=opset)


@pytest.mark.parametrize("opset", [1, 9])
def test_flatten_before_11(opset):
    check_node("Flatten", [x4], {"axis": 2}, opset=opset)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_, object])
@pytest.mark.parametrize("shape", [(3,), (2, 0, 4), ()])
def test_flatten_dtypes_and_edge_shapes(dtype, shape):
    check_node("Flatten", [sample(shape, dtype)], {"axis": 0}, opset=13)


def test_flatten_axis_out_of_range():
    expect_shape_error("Flatten", [x4], {"axis": 5}, r"axis=5 out of range \[-4, 4\]")


# ---- Expand, Tile ----------------------------------------------------------------
@pytest.mark.parametrize("x_shape,spec", [((3, 1), (2, 3, 4)), ((3, 1), (3, 4)), ((1,), (2, 2)),
                                          ((2, 3), (1,)), ((2, 1, 4), (3, 1, 1, 1)), ((), (2, 3)),
                                          ((4, 1), (1, 0)), ((2, 3), ())])
@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize("static", [(1,), ()])
def test_expand(x_shape, spec, opset, static):
    check_node("Expand", [rng.standard_normal(x_shape).astype(np.float32), i64(*spec)], opset=opset,
               static=static)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, object, np.float16])
def test_expand_dtypes(dtype):
    check_node("Expand", [sample((3, 1), dtype), i64(2, 3, 2)], opset=13, static=(1,))


def test_expand_incompatible_shapes():
    expect_shape_error("Expand", [np.zeros((3, 2), np.float32), i64(4, 2)], {}, "do not broadcast",
                       static=(1,))


@pytest.mark.parametrize("x_shape,reps", [((2, 3), (1, 1)), ((2, 3), (2, 3)), ((2, 3, 4), (1, 2, 3)),
                                          ((3,), (4,)), ((2, 3), (0, 2)), ((0, 3), (2, 2)), ((), ())])
@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("static", [(1,), ()])
def test_tile(x_shape, reps, opset, static):
    check_node("Tile", [rng.standard_normal(x_shape).astype(np.float32), i64(*reps)], opset=opset,
               static=static)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, object, np.float64])
def test_tile_dtypes(dtype):
    check_node("Tile", [sample((2, 2), dtype), i64(2, 3)], opset=13, static=(1,))


def test_tile_wrong_repeats():
    expect_shape_error("Tile", [np.zeros((3, 2), np.float32), i64(2)], {}, "one entry per input axis",
                       static=(1,))


# ---- Pad ---------------------------------------------------------------------
PADS_2D = [(0, 0, 0, 0), (1, 2, 3, 1), (0, 3, 0, 0), (2, 0, 0, 2), (-1, 1, 1, -2), (-1, -1, -1, -1),
           (1, -3, 0, 3), (4, 4, 4, 4)]


@pytest.mark.parametrize("mode,opset", [(m, o) for m in ("constant", "reflect", "edge")
                                         for o in (11, 13, 18, 19, 21, 25)] + [("wrap", o) for o in (19, 21, 25)])
@pytest.mark.parametrize("pads", PADS_2D)
def test_pad_modes(mode, pads, opset):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    if mode == "reflect":  # onnxruntime's reflect stops at (kept length) - 1
        kept = [d + min(b, 0) + min(e, 0) for d, b, e in zip(x.shape, pads[:2], pads[2:])]
        pads = tuple(min(p, kept[i % 2] - 1) for i, p in enumerate(pads))
    check_node("Pad", [x, i64(*pads)], {"mode": mode}, opset=opset, static=(1,))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("static", [(1,), ()])
def test_pad_4d_runtime_pads(mode, static):
    check_node("Pad", [x4, i64(0, 1, 2, 0, 1, 0, 3, 2)], {"mode": mode}, opset=19, static=static)


@pytest.mark.parametrize("value", [None, 2.5, -7.0])
@pytest.mark.parametrize("static", [(1, 2), (1,)])
def test_pad_constant_value(value, static):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cv = None if value is None else np.array(value, np.float32)
    inputs = [x, i64(1, 0, 2, 3)] + ([] if cv is None else [cv])
    check_node("Pad", inputs, {}, opset=13, static=static)


@pytest.mark.parametrize("dtype,value", [(np.int32, 4), (np.int64, -3), (np.uint8, 200), (np.bool_, True),
                                         (object, "pad"), (np.float64, 1e300), (np.float16, 0.5)])
@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_dtypes(dtype, value, mode):
    x = sample((3, 4), dtype)
    check_node("Pad", [x, i64(1, 2, 0, 1), np.array(value, dtype)], {"mode": mode}, opset=13, static=(1, 2))


@pytest.mark.parametrize("axes", [[1], [-1], [0, 2], [3, 0], [-4, -3, -2, -1]])
@pytest.mark.parametrize("mode", ["constant", "reflect", "wrap"])
@pytest.mark.parametrize("static", [(1, 3), ()])
def test_pad_axes(axes, mode, static):
    pads = [1 + (i % 2) for i in range(len(axes))] + [2 - (i % 2) for i in range(len(axes))]
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    check_node("Pad", [x, i64(*pads), None, np.array(axes, np.int64)], {"mode": mode}, opset=19,
               static=static)


@pytest.mark.parametrize("pads,mode,value", [((0, 1, 2, 0), "constant", 0.0), ((1, 1, 1, 1), "constant", -2.0),
                                              ((2, 0, 0, 1), "reflect", 0.0), ((1, 1, 2, 2), "edge", 0.0),
                                              ((-1, 1, 0, -1), "constant", 3.0)])
def test_pad_2_attributes(pads, mode, value):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    check_node("Pad", [x], {"pads": list(pads), "mode": mode, "value": value}, opset=2)


@pytest.mark.parametrize("x_shape,pads", [((0, 3), (1, 0, 2, 0)), ((2, 3), (0, -3, 0, 0)), ((0,), (0, 0))])
def test_pad_constant_empty(x_shape, pads):
    check_node("Pad", [np.zeros(x_shape, np.float32), i64(*pads), np.array(1.5, np.float32)], opset=13,
               static=(1, 2))


def test_pad_reflect_beyond_the_data_repeats_like_numpy():
    # onnxruntime rejects pads >= d for reflect; the spec points at numpy.pad.
    x = np.arange(4, dtype=np.float32)
    model = type_outputs(make_node_model("Pad", [x, i64(6, 9)], {"mode": "reflect"}, opset=13, static=(1,)),
                         [np.zeros(19, np.float32)])
    (ours,) = run_ours(model, {"in0": x})
    np.testing.assert_array_equal(ours, np.pad(x, (6, 9), mode="reflect"))


def test_pad_errors():
    x = np.zeros((3, 4), np.float32)
    expect_shape_error("Pad", [x, i64(1, 1, 1)], {}, "must have 2 \\* 2 entries", static=(1,))
    expect_shape_error("Pad", [x, i64(0, -3, 0, -2)], {}, "remove more than the input has", static=(1,))
    expect_shape_error("Pad", [x, i64(0, -4, 0, 1)], {"mode": "edge"}, "no input values remain", static=(1,))
    model = type_outputs(make_node_model("Pad", [x, i64(0, 1, 0, 1)], {"mode": "wrap"}, opset=18, static=(1,)),
                         [np.zeros((3, 6), np.float32)])
    with pytest.raises(UnsupportedOpError, match="mode='wrap' is not a Pad-18 mode"):
        run_ours(model, {"in0": x})


# ---- ConstantOfShape, Range --------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3), (4,), (), (2, 0, 3)])
@pytest.mark.parametrize("value", [None, np.array([3.5], np.float32), np.array([-2], np.int64),
                                   np.array([7], np.int8), np.array([True]), np.array([1.25], np.float64),
                                   np.array([9], np.uint16), np.array([0.5], np.float16)])
@pytest.mark.parametrize("opset", [9, 20, 21, 25])
def test_constant_of_shape(shape, value, opset):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check_node("ConstantOfShape", [np.array(shape, np.int64).reshape(-1)], attrs, opset=opset)


def test_constant_of_shape_runtime_and_static():
    attrs = {"value": numpy_helper.from_array(np.array([5], np.int32))}
    check_node("ConstantOfShape", [i64(3, 2)], attrs, opset=13, static=(0,))
    check_node("ConstantOfShape", [i64(3, 2)], attrs, opset=13)


@pytest.mark.parametrize("start,limit,delta", [(0, 10, 1), (3, 9, 3), (10, 4, -2), (5, 5, 1), (5, 1, 1),
                                               (-7, 13, 4), (1, -10, -3)])
@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64, np.float32, np.float64])
@pytest.mark.parametrize("opset", [11, 27])
@pytest.mark.parametrize("static", [(0, 1, 2), ()])
def test_range(start, limit, delta, dtype, opset, static):
    scalars = [np.array(v, dtype) for v in (start, limit, delta)]
    check_node("Range", scalars, opset=opset, static=static)


@pytest.mark.parametrize("start,limit,delta", [(0.5, 3.3, 0.4), (1.0, -2.0, -0.3), (0.0, 1.0, 0.1),
                                               (-3.5, 100.25, 1.75)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_range_fractional(start, limit, delta, dtype):
    check_node("Range", [np.array(v, dtype) for v in (start, limit, delta)], opset=11)


@pytest.mark.parametrize("stash_type", [None, 1, 11])
def test_range_27_float16(stash_type):
    attrs = {} if stash_type is None else {"stash_type": stash_type}
    check_node("Range", [np.array(v, np.float16) for v in (1.0, 900.0, 0.7)], attrs, opset=27, rtol=1e-3)


def test_range_zero_delta():
    expect_shape_error("Range", [np.array(v, np.float32) for v in (0, 1, 0)], {}, "delta must not be 0",
                       opset=11, static=(0, 1, 2))


# ---- Constant ------------------------------------------------------------------
CONSTANTS = [
    {"value": numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32))},
    {"value": numpy_helper.from_array(np.array([1, 2, 3], np.int32))},
    {"value": numpy_helper.from_array(np.array(4.5))},
    {"value_float": 1.5}, {"value_floats": [1.0, -2.0]}, {"value_int": 7}, {"value_ints": [3, 4, 5]},
    {"value_string": "hello"}, {"value_strings": ["a", "bc"]},
    {"sparse_value": helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32)),
                                               numpy_helper.from_array(np.array([1, 4], np.int64)), [2, 3])},
]


@pytest.mark.parametrize("attrs", CONSTANTS)
@pytest.mark.parametrize("opset", [13, 25])
def test_constant_kernel_matches_onnxruntime(attrs, opset):
    """The importer folds Constant nodes into weights; run one through the kernel directly."""
    model = make_node_model("Constant", [], attrs, opset=opset)
    if "sparse_value" in attrs:  # onnxruntime returns a SparseTensor: densify by hand
        ref = np.zeros((2, 3), np.float32)
        ref.flat[[1, 4]] = [5.0, 6.0]
    else:
        ref = run_ort(model, {})[0]
    node_attrs = {a.name: _attr_value(a, "test") for a in model.graph.node[0].attribute}
    graph = Graph([Node("Constant", [], ["y"], node_attrs, name="const")], [], [Value("y")], opset={"": opset})
    net = Net(Program(graph))
    net.forward({})
    assert_close(net.blob_by_name("y"), ref, what="Constant")


def test_constant_needs_exactly_one_value():
    graph = Graph([Node("Constant", [], ["y"], {"value_int": 1, "value_float": 2.0}, name="c")], [], [Value("y")],
                  opset={"": 13})
    with pytest.raises(UnsupportedOpError, match="exactly one of"):
        Program(graph)


def test_registered_versions_cover_opset_11_to_newest():
    from pooled_predictor.ops.registry import find

    newest = onnx.defs.onnx_opset_version()
    for op in ("Reshape", "Flatten", "Expand", "Tile", "Pad", "ConstantOfShape", "Range", "Constant"):
        for opset in range(11, newest + 1):
            k = find(op, "", opset, "cpu")
            since = onnx.defs.get_schema(op, opset, "").since_version
            assert k is not None and k.since == since, (op, opset, since, k and k.since)
