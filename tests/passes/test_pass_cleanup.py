"""eliminate_identity (Identity, inference Dropout) and eliminate_dead_nodes."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize
from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net

SHAPE = (2, 3)
X = {"x": rand(*SHAPE, seed=1)}


def test_identity_in_the_middle_is_removed():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"]),
             helper.make_node("Identity", ["b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["y"])]
    after, report = check_pass(make_model(nodes, {"x": SHAPE}, ["y"]), X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu", "Sigmoid"] and after.nodes[1].inputs == ["a"]
    assert report["eliminate_identity"].changes == {"Identity removed": 2}


def test_identity_feeding_a_graph_output_renames_its_producer():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"])]
    after, _ = check_pass(make_model(nodes, {"x": SHAPE}, ["y"]), X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu"] and after.nodes[0].outputs == ["y"] and after.output_names == ["y"]


def test_identity_whose_input_has_other_readers_and_feeds_a_graph_output():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"]),
             helper.make_node("Sigmoid", ["a"], ["z"])]
    after, _ = check_pass(make_model(nodes, {"x": SHAPE}, ["y", "z"]), X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu", "Sigmoid"] and after.nodes[1].inputs == ["y"]


@pytest.mark.parametrize("case", ["graph_input", "weight", "both_outputs"])
def test_identity_that_names_a_graph_output_is_kept(case):
    """y = Identity(x) with x a graph input, a weight, or itself a graph output: y needs the node."""
    if case == "graph_input":
        model = make_model([helper.make_node("Identity", ["x"], ["y"])], {"x": SHAPE}, ["y"])
    elif case == "weight":
        model = make_model([helper.make_node("Identity", ["w"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
                           {"x": SHAPE}, ["y", "z"], {"w": rand(*SHAPE, seed=3)})
    else:
        model = make_model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["y"])],
                           {"x": SHAPE}, ["a", "y"])
    check_pass(model, X, "eliminate_identity", fires=False)


def test_inference_dropout_is_removed():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Dropout", ["a", "r"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["y"])]
    model = make_model(nodes, {"x": SHAPE}, ["y"], {"r": np.float32(0.3)})
    after, report = check_pass(model, X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu", "Sigmoid"]
    assert report["eliminate_identity"].changes == {"Dropout removed": 1}


def test_dropout_10_with_ratio_attribute_is_removed():
    nodes = [helper.make_node("Dropout", ["x"], ["a"], ratio=0.5), helper.make_node("Relu", ["a"], ["y"])]
    after, _ = check_pass(make_model(nodes, {"x": SHAPE}, ["y"], opset=10), X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu"]


def test_dropout_whose_mask_is_read_is_kept():
    nodes = [helper.make_node("Dropout", ["x"], ["a", "mask"]), helper.make_node("Relu", ["a"], ["y"]),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT)]
    check_pass(make_model(nodes, {"x": SHAPE}, ["y", "m"]), X, "eliminate_identity", fires=False, ort=False)


def test_dropout_with_unread_mask_is_removed():
    nodes = [helper.make_node("Dropout", ["x"], ["a", "mask"]), helper.make_node("Relu", ["a"], ["y"])]
    after, _ = check_pass(make_model(nodes, {"x": SHAPE}, ["y"]), X, "eliminate_identity", fires=True)
    assert ops(after) == ["Relu"]


def test_training_mode_dropout_is_kept():
    """training_mode true (and ratio != 0): removing it would hide the kernel's error."""
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = make_model(nodes, {"x": SHAPE}, ["y"], {"r": np.float32(0.5), "t": np.bool_(True)})
    g, report = optimize(load_onnx(model), "all")
    assert "Dropout" in ops(g) and not report["eliminate_identity"].changed


def test_training_mode_with_ratio_zero_is_removed():
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = make_model(nodes, {"x": SHAPE}, ["y"], {"r": np.float32(0.0), "t": np.bool_(True)})
    after, _ = check_pass(model, X, "eliminate_identity", fires=True, ort=False)
    assert ops(after) == ["Relu"]


# ---- dead nodes -------------------------------------------------------------------------------
def test_dead_branch_and_unread_weights_are_removed():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Add", ["a", "w_dead"], ["dead1"]),
             helper.make_node("Sigmoid", ["dead1"], ["dead2"]), helper.make_node("Add", ["a", "w"], ["y"])]
    model = make_model(nodes, {"x": SHAPE}, ["y"], {"w": rand(*SHAPE, seed=2), "w_dead": rand(*SHAPE, seed=3)})
    after, report = check_pass(model, X, "eliminate_dead_nodes", fires=True)
    assert ops(after) == ["Relu", "Add"] and "w_dead" not in after.weights and "w" in after.weights
    assert report["eliminate_dead_nodes"].changes == {"dead Add removed": 1, "dead Sigmoid removed": 1,
                                                      "unread weights dropped": 1}


def test_multi_output_node_with_one_live_output_is_kept():
    nodes = [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1), helper.make_node("Relu", ["a"], ["y"])]
    model = make_model(nodes, {"x": (2, 4)}, ["y"], {"s": np.array([2, 2], np.int64)})
    check_pass(model, {"x": rand(2, 4, seed=1)}, "eliminate_dead_nodes", fires=False)


def test_weight_that_is_a_graph_output_is_kept():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, {"x": SHAPE}, ["y", "w"], {"w": rand(*SHAPE, seed=2)})
    g = load_onnx(model)
    after, report = optimize(g, "all")
    assert "w" in after.weights
    np.testing.assert_array_equal(run_net(after, X)[1], g.weights["w"])
