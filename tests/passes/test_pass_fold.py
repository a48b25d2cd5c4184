"""constant_folding and shape_folding."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from pooled_predictor.errors import InputError
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.passes.pass_helpers import check_pass, make_model, ops, rand


def test_dequantized_weights_fold():
    """Conv(x, Cast(W_int8) * scale) as PP-OCR rec has it: the weight chain becomes one weight."""
    w8 = np.random.default_rng(0).integers(-127, 127, (4, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("Cast", ["w8"], ["wf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["wf", "s"], ["w"]),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": (1, 3, 5, 5)}, ["y"], {"w8": w8, "s": np.full((4, 1, 1, 1), 0.01, np.float32)})
    after, report = check_pass(model, {"x": rand(1, 3, 5, 5, seed=1)}, "constant_folding", fires=True)
    assert ops(after) == ["Conv"]
    assert report["constant_folding"].changes == {"Cast folded": 1, "Mul folded": 1}
    np.testing.assert_array_equal(after.weights["w"], w8.astype(np.float32) * np.float32(0.01))
    assert not after.weights["w"].flags.writeable


def test_node_reading_an_input_is_not_folded():
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    check_pass(make_model(nodes, {"x": (2,)}, ["y"], {"w": rand(2)}), {"x": rand(2, seed=1)},
               "constant_folding", fires=False)


def test_folded_graph_output():
    nodes = [helper.make_node("Neg", ["w"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make_model(nodes, {"x": (2,)}, ["y", "c"], {"w": rand(2)})
    after, _ = check_pass(model, {"x": rand(2, seed=1)}, "constant_folding", fires=True)
    assert ops(after) == ["Add"]


def test_kernel_error_on_constants_is_left_for_run_time():
    """A Reshape of a weight to an impossible shape: not folded, the compiled graph reports it."""
    nodes = [helper.make_node("Reshape", ["w", "s"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])]
    model = make_model(nodes, {"x": (2, 3)}, ["y"], {"w": rand(6), "s": np.array([4, 4], np.int64)})
    g, report = optimize(load_onnx(model), "none", enable=["constant_folding"])
    assert not report["constant_folding"].changed and ops(g) == ["Reshape", "Add"]


# ---- shape folding ---------------------------------------------------------------------------
def flatten_by_shape_model(shape=("N", 3, 4, 4)):
    """y = Reshape(x, Concat(Gather(Shape(x), 0) unsqueezed, [-1])): the exporters' flatten."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Cast", ["target"], ["t64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "t64"], ["r"]),
             helper.make_node("Relu", ["r"], ["y"])]
    weights = {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return make_model(nodes, {"x": shape}, ["y"], weights, opset=13)


def test_shape_chain_folds_with_input_shapes():
    x = {"x": rand(2, 3, 4, 4, seed=1)}
    after, report = check_pass(flatten_by_shape_model(), x, "shape_folding", fires=True,
                               input_shapes={"x": (2, 3, 4, 4)})
    assert ops(after) == ["Reshape", "Relu"]
    np.testing.assert_array_equal(after.weights["t64"], [2, -1])
    assert report["shape_folding"].changes == {"Shape folded": 1, "Gather folded": 1, "Unsqueeze folded": 1,
                                               "Concat folded": 1, "Cast folded": 1}
    assert after.inputs[0].shape == (2, 3, 4, 4)
    assert "inputs pinned" in report["shape_folding"].summary


def test_pinned_graph_refuses_other_shapes():
    g = load_onnx(flatten_by_shape_model())
    after, _ = optimize(g, "all", input_shapes={"x": (2, 3, 4, 4)})
    net = Net(Program(after))
    with pytest.raises(InputError, match="dimension 0 must be 2"):
        net.forward({"x": rand(3, 3, 4, 4)})


def test_static_declared_shapes_fold_without_input_shapes():
    model = flatten_by_shape_model((2, 3, 4, 4))
    after, report = check_pass(model, {"x": rand(2, 3, 4, 4, seed=1)}, "shape_folding", fires=True)
    assert ops(after) == ["Reshape", "Relu"] and "pinned" not in report["shape_folding"].summary


def test_symbolic_shapes_are_not_folded():
    after, report = check_pass(flatten_by_shape_model(), {"x": rand(2, 3, 4, 4, seed=1)}, "shape_folding",
                               fires=False)
    assert "not static" in report["shape_folding"].notes[0]


def test_input_shapes_must_name_the_inputs():
    with pytest.raises(ValueError, match="missing"):
        optimize(load_onnx(flatten_by_shape_model()), "all", input_shapes={"y": (1,)})


def test_size_folds():
    nodes = [helper.make_node("Size", ["x"], ["n"]), helper.make_node("Cast", ["n"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["x", "f"], ["y"])]
    model = make_model(nodes, {"x": (2, 5)}, ["y"])
    after, _ = check_pass(model, {"x": rand(2, 5, seed=1)}, "shape_folding", fires=True)
    assert ops(after) == ["Div"] and float(after.weights["f"]) == 10.0
