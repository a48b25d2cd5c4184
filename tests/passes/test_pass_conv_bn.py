"""fold_conv_bn, fold_conv_add, fold_conv_mul: per-channel affine maps folded into Conv."""

import numpy as np
import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand

C, M = 4, 6


def conv_bn_model(bias=True, group=1, extra=None, bn_output_is_graph_output=False, conv_output_out=False,
                  epsilon=1e-3):
    w = rand(M, C // group, 3, 3, seed=1, scale=0.3)
    weights = {"W": w, "g": rand(M, seed=2) + 1.5, "beta": rand(M, seed=3), "mean": rand(M, seed=4),
               "var": np.abs(rand(M, seed=5)) + 0.1}
    conv_in = ["x", "W"]
    if bias:
        weights["B"] = rand(M, seed=6)
        conv_in.append("B")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], group=group, name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["y"],
                              epsilon=epsilon, name="bn")]
    outputs = ["y"]
    if extra == "second_consumer":
        nodes.append(helper.make_node("Relu", ["c"], ["r"], name="other"))
        outputs.append("r")
    if conv_output_out:
        outputs.append("c")
    return make_model(nodes, {"x": (2, C, 7, 7)}, outputs, weights)


X = {"x": rand(2, C, 7, 7, seed=9)}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_conv_bn_folds(bias, group):
    after, report = check_pass(conv_bn_model(bias, group), X, "fold_conv_bn", fires=True)
    assert ops(after) == ["Conv"]
    assert report["fold_conv_bn"].changes == {"BatchNormalization folded into Conv": 1}
    assert after.nodes[0].attrs["group"] == group


def test_conv_bn_does_not_fold_when_conv_output_has_a_second_reader():
    """The BN's input (the Conv's output) also feeds a Relu: W cannot change."""
    check_pass(conv_bn_model(extra="second_consumer"), X, "fold_conv_bn", fires=False)


def test_conv_bn_does_not_fold_when_conv_output_is_a_graph_output():
    check_pass(conv_bn_model(conv_output_out=True), X, "fold_conv_bn", fires=False)


def test_conv_bn_does_not_fold_training_mode():
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.passes import optimize

    model = conv_bn_model()
    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            n.attribute.append(helper.make_attribute("training_mode", 1))
    g, report = optimize(load_onnx(model, device=None), "none", enable=["fold_conv_bn"])
    assert not report["fold_conv_bn"].changed


def conv_then(op, const, conv_out_extra=False):
    w = rand(M, C, 3, 3, seed=1, scale=0.3)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node(op, ["c", "k"] if op != "Add-rev" else ["k", "c"], ["y"], name="aff")]
    if op == "Add-rev":
        nodes[1] = helper.make_node("Add", ["k", "c"], ["y"], name="aff")
    outputs = ["y"] + (["c"] if conv_out_extra else [])
    return make_model(nodes, {"x": (2, C, 7, 7)}, outputs, {"W": w, "k": const})


PER_CHANNEL = [(1, M, 1, 1), (M, 1, 1), (1, 1, 1, 1), (1,), ()]
NOT_PER_CHANNEL = [(1, 1, 1, 7), (M,), (2, M, 1, 1), (1, M, 7, 7), (1, 1, M, 1, 1)]


@pytest.mark.parametrize("op", ["Add", "Add-rev", "Mul"])
@pytest.mark.parametrize("shape", PER_CHANNEL, ids=str)
def test_conv_affine_folds_per_channel_constants(op, shape):
    const = rand(*shape, seed=7) if shape else np.float32(0.7)
    const = np.asarray(const, np.float32)
    name = "fold_conv_mul" if op == "Mul" else "fold_conv_add"
    after, report = check_pass(conv_then(op, const), X, name, fires=True)
    assert ops(after) == ["Conv"] and len(after.nodes[0].inputs) == 3


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("shape", NOT_PER_CHANNEL, ids=str)
def test_conv_affine_leaves_other_broadcasts(op, shape):
    """(1,1,1,W) and (M,) broadcast over width; (2,M,1,1) over batch; (1,M,H,W) is per pixel."""
    if shape == (M,) and M != 7:
        shape = (7,)  # (M,) against width 7 would not broadcast: use a width-sized vector
    name = "fold_conv_mul" if op == "Mul" else "fold_conv_add"
    ort = len(shape) <= 4
    check_pass(conv_then(op, rand(*shape, seed=7)), X, name, fires=False, ort=ort)


def test_conv_add_does_not_fold_when_conv_output_feeds_others():
    check_pass(conv_then("Add", rand(1, M, 1, 1, seed=7), conv_out_extra=True), X, "fold_conv_add", fires=False)


def test_conv_add_then_bn_then_relu_chain_all_fold():
    """Conv -> Add(bias) -> BN -> Relu: fold_conv_add, then fold_conv_bn, then fuse_conv_activation."""
    w = rand(M, C, 3, 3, seed=1, scale=0.3)
    weights = {"W": w, "k": rand(1, M, 1, 1, seed=8), "g": rand(M, seed=2) + 1.5, "beta": rand(M, seed=3),
               "mean": rand(M, seed=4), "var": np.abs(rand(M, seed=5)) + 0.1}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "k"], ["a"]),
             helper.make_node("BatchNormalization", ["a", "g", "beta", "mean", "var"], ["b"]),
             helper.make_node("Relu", ["b"], ["y"])]
    model = make_model(nodes, {"x": (2, C, 7, 7)}, ["y"], weights)
    after, report = check_pass(model, X, ["fold_conv_add", "fold_conv_bn", "fuse_conv_activation"], fires=True)
    assert ops(after) == ["pooled_predictor.FusedConv"]


X_T = {"x": rand(2, C, 5, 4, seed=9)}


def conv_transpose_then_add(shape, group=1, bias=False, seed=7):
    """ConvTranspose (W (C, M / group, 2, 3), output M channels) then Add(constant of `shape`)."""
    weights = {"W": rand(C, M // group, 2, 3, seed=1, scale=0.3), "k": np.asarray(rand(*shape, seed=seed))}
    inputs = ["x", "W"]
    if bias:
        weights["B"] = rand(M, seed=6)
        inputs.append("B")
    nodes = [helper.make_node("ConvTranspose", inputs, ["c"], strides=[2, 3], group=group, name="convT"),
             helper.make_node("Add", ["k", "c"], ["y"], name="aff")]
    return make_model(nodes, {"x": (2, C, 5, 4)}, ["y"], weights)


@pytest.mark.parametrize("shape,group,bias", [((1, M, 1, 1), 1, False), ((M, 1, 1), 2, True), ((1,), 1, True)])
def test_conv_transpose_add_folds_into_bias(shape, group, bias):
    after, report = check_pass(conv_transpose_then_add(shape, group, bias), X_T, "fold_conv_add", fires=True)
    assert ops(after) == ["ConvTranspose"] and len(after.nodes[0].inputs) == 3
    assert report["fold_conv_add"].changes == {"Add folded into ConvTranspose bias": 1}


@pytest.mark.parametrize("shape", [(2, 1, 1, 1), (1, 1, 10, 1), (1, 1, 1, 12)])
def test_conv_transpose_add_leaves_other_shapes(shape):
    """Per batch, per row, per column: not per output channel."""
    check_pass(conv_transpose_then_add(shape), X_T, "fold_conv_add", fires=False)

