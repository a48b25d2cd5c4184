"""Net: reshape lays out once, forward allocates no activations, shapes, errors, dynamic shapes."""

import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import InputError, Net, Program, ShapeInferenceError, UnknownBlobError, load_onnx
from tests.conftest import make_mlp, mlp_reference


def mlp_net():
    return Net(Program(load_onnx(make_mlp())))


def test_forward_matches_onnxruntime_and_names():
    net = mlp_net()
    assert net.input_names == ["x"] and net.output_names == ["y"]
    x = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32)
    net.forward([x])
    np.testing.assert_allclose(net.blob_by_name("y"), mlp_reference(make_mlp(), x), rtol=1e-5, atol=1e-6)
    assert net.input_shapes == {"x": (5, 16)}
    assert net.output_shapes == {"y": (5, 10)}
    assert net.blob_by_name("h2").shape == (5, 32)  # intermediate blobs are kept (NONE)


def test_forward_allocates_no_activation_arrays():
    net = mlp_net()
    x = np.ones((4096, 16), np.float32)
    net.forward({"x": x})
    pointers = {n: net.blob_by_name(n).__array_interface__["data"][0] for n in net.blob_names}
    tracemalloc.start()
    for _ in range(5):
        net.forward({"x": x})
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert pointers == {n: net.blob_by_name(n).__array_interface__["data"][0] for n in net.blob_names}
    assert peak < 0.05 * net.activation_bytes, (peak, net.activation_bytes)


def test_reshape_lays_out_for_new_shapes_and_keeps_same_shapes():
    net = mlp_net()
    net.reshape({"x": (2, 16)})
    y = net.blob_by_name("y")
    net.reshape({"x": (2, 16)})
    assert net.blob_by_name("y") is y
    net.reshape({"x": (7, 16)})
    assert net.blob_by_name("y").shape == (7, 10)


def test_weights_are_shared_and_read_only():
    program = Program(load_onnx(make_mlp()))
    a, b = Net(program), Net(program)
    a.reshape({"x": (1, 16)}), b.reshape({"x": (1, 16)})
    assert a.blob_by_name("w1") is b.blob_by_name("w1")
    with pytest.raises(ValueError):
        a.blob_by_name("w1")[0, 0] = 1.0


@pytest.mark.parametrize("inputs,match", [
    ([], "takes 1 input"),
    ([np.zeros((1, 16), np.float32)] * 2, "takes 1 input"),
    ({"z": np.zeros((1, 16), np.float32)}, "unknown"),
    ([np.zeros((1, 16), np.float64)], "expected dtype float32"),
    ([np.zeros((16,), np.float32)], "expected rank 2"),
    ([np.zeros((1, 15), np.float32)], "dimension 1 must be 16"),
    (["not an array"], "must be an array"),
    (42, "must be a list"),
])
def test_bad_inputs_raise_input_error(inputs, match):
    net = mlp_net()
    with pytest.raises(InputError, match=match):
        net.forward(inputs)
    net.forward([np.zeros((1, 16), np.float32)])  # still usable


def test_unknown_blob():
    net = mlp_net()
    net.forward([np.zeros((1, 16), np.float32)])
    with pytest.raises(UnknownBlobError, match="no blob named 'nope'"):
        net.blob_by_name("nope")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def test_shape_chains_are_evaluated_at_reshape():
    # y = Unsqueeze(x, axes) where axes come from Shape(x)[...]: static once x's shape is known
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [None])
    m = _model([helper.make_node("Shape", ["x"], ["s"], start=1),
                helper.make_node("Concat", ["s", "s"], ["y"], axis=0)], [x], [y], opset=15)
    net = Net(Program(load_onnx(m)))
    net.reshape({"x": (4, 3)})
    assert not net.has_dynamic_shapes
    np.testing.assert_array_equal(net.blob_by_name("y"), [3, 3])


def test_data_dependent_shapes_run_per_forward():
    # Squeeze-13 with axes fed at run time: shape known only at forward
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1])
    axes = helper.make_tensor_value_info("axes", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = _model([helper.make_node("Squeeze", ["x", "axes"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
               [x, axes], [y])
    net = Net(Program(load_onnx(m)))
    data = np.arange(3, dtype=np.float32).reshape(1, 3, 1) - 1
    net.forward({"x": data, "axes": np.array([0], np.int64)})
    assert net.has_dynamic_shapes
    assert net.blob_by_name("y").shape == (3, 1)
    net.forward({"x": data, "axes": np.array([2], np.int64)})
    np.testing.assert_array_equal(net.blob_by_name("y"), [[0, 0, 1]])
    with pytest.raises(ShapeInferenceError, match="cannot squeeze"):
        net.forward({"x": data, "axes": np.array([1], np.int64)})


def test_broadcast_error_is_a_shape_error():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    net = Net(Program(load_onnx(_model([helper.make_node("Add", ["a", "b"], ["y"])], [a, b], [y]))))
    with pytest.raises(ShapeInferenceError, match="do not broadcast"):
        net.forward({"a": np.zeros(3, np.float32), "b": np.zeros(4, np.float32)})
    net.forward({"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)})


def test_constant_subgraphs_are_folded_at_compile():
    # Cast(int8 weight) * scale: the dequantization the PP-OCR recognizer carries
    q = numpy_helper.from_array(np.array([[1, -2], [3, 4]], np.int8), "q")
    s = numpy_helper.from_array(np.array([0.5, 0.25], np.float32), "s")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    m = _model([helper.make_node("Cast", ["q"], ["qf"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["qf", "s"], ["w"]),
                helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], [q, s])
    program = Program(load_onnx(m))
    assert [s.node.op_type for s in program.steps] == ["MatMul"]
    np.testing.assert_array_equal(program.weights["w"], [[0.5, -0.5], [1.5, 1.0]])
    assert not program.weights["w"].flags.writeable
