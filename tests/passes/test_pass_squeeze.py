"""sink_squeezes: BatchNormalization and activations below the Squeeze they read; Unsqueeze(Squeeze(x)) -> x."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize
from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net

C, W = 8, 12
X = {"x": rand(2, C, 1, W, seed=1, scale=2.0)}


def _bn_weights(c=C):
    return {"s": rand(c, seed=3) + 1.5, "b": rand(c, seed=4), "mean": rand(c, seed=5),
            "var": np.abs(rand(c, seed=6)) + 0.5}


def _squeeze(x, y, axes, opset):
    if opset >= 13:
        return helper.make_node("Squeeze", [x, "sq_axes"], [y])
    return helper.make_node("Squeeze", [x], [y], axes=axes)


def _unsqueeze(x, y, axes, opset):
    if opset >= 13:
        return helper.make_node("Unsqueeze", [x, "unsq_axes"], [y])
    return helper.make_node("Unsqueeze", [x], [y], axes=axes)


def conv1d_block(opset, sq_axes=(2,), unsq_axes=(2,), hard_swish=True):
    """PaddlePaddle's 1-D conv as exported: Conv (N, C, 1, W) -> Squeeze(2) -> BatchNormalization ->
    HardSwish (x * HardSigmoid(x), before opset 14) -> Unsqueeze(2) -> Conv."""
    w = {"W1": rand(C, 1, 1, 5, seed=7, scale=0.5), "W2": rand(C, C, 1, 1, seed=8, scale=0.4), **_bn_weights()}
    if opset >= 13:
        w["sq_axes"] = np.array(sq_axes, np.int64)
        w["unsq_axes"] = np.array(unsq_axes, np.int64)
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], group=C, pads=[0, 2, 0, 2]),
             _squeeze("c1", "s1", list(sq_axes), opset),
             helper.make_node("BatchNormalization", ["s1", "s", "b", "mean", "var"], ["n1"])]
    if hard_swish:
        nodes += [helper.make_node("HardSigmoid", ["n1"], ["h1"], alpha=1.0 / 6, beta=0.5),
                  helper.make_node("Mul", ["n1", "h1"], ["a1"])]
    else:
        nodes.append(helper.make_node("Relu", ["n1"], ["a1"]))
    nodes += [_unsqueeze("a1", "u1", list(unsq_axes), opset), helper.make_node("Conv", ["u1", "W2"], ["y"])]
    return make_model(nodes, {"x": (2, C, 1, W)}, ["y"], w, opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("hard_swish", [True, False], ids=["hard_swish", "relu"])
def test_conv1d_block_loses_its_squeeze_pair_and_folds(opset, hard_swish):
    model = conv1d_block(opset, hard_swish=hard_swish)
    after, _ = check_pass(model, X, "sink_squeezes", fires=True)
    assert "Unsqueeze" not in ops(after) and "Squeeze" not in ops(after)
    assert ops(after).index("BatchNormalization") == 1  # right after the first Conv
    full, _ = optimize(load_onnx(model), "all")
    assert ops(full) == ["pooled_predictor.FusedConv", "Conv"]
    assert full.nodes[0].attrs["activation"] == ("HardSwish" if hard_swish else "Relu")
    np.testing.assert_allclose(run_net(full, X)[0], run_net(load_onnx(model), X)[0], rtol=1e-5, atol=1e-5)


def test_the_moves_alone_keep_the_bits():
    """Without the folds after it, the pass only reorders the same operations: the same bits."""
    model = conv1d_block(11)
    graph = load_onnx(model)
    moved, _ = optimize(graph, "none", enable=["sink_squeezes"])
    assert np.array_equal(run_net(moved, X)[0], run_net(graph, X)[0])


def test_squeezing_the_channel_axis_keeps_batchnormalization_above():
    """Squeeze(1) of (N, 1, W): BatchNormalization's axis 1 is then another axis of x: no move."""
    w = {"sq_axes": np.array([1], np.int64), **_bn_weights(3)}
    nodes = [helper.make_node("Squeeze", ["x", "sq_axes"], ["s1"]),
             helper.make_node("BatchNormalization", ["s1", "s", "b", "mean", "var"], ["y"])]
    model = make_model(nodes, {"x": (2, 1, 3, W)}, ["y"], w, opset=13)
    check_pass(model, {"x": rand(2, 1, 3, W, seed=2)}, "sink_squeezes", fires=False)


def test_a_squeeze_read_elsewhere_stays():
    w = _bn_weights()
    nodes = [helper.make_node("Squeeze", ["x"], ["s1"], axes=[2]),
             helper.make_node("BatchNormalization", ["s1", "s", "b", "mean", "var"], ["y"]),
             helper.make_node("Relu", ["s1"], ["z"])]
    model = make_model(nodes, {"x": (2, C, 1, W)}, ["y", "z"], w, opset=11)
    check_pass(model, X, "sink_squeezes", fires=False)


def test_unsqueeze_of_other_axes_stays():
    """Squeeze(2) then Unsqueeze(3) of (N, C, 1, W) gives (N, C, W, 1): not x."""
    model = conv1d_block(13, unsq_axes=(3,), hard_swish=False)
    after, _ = check_pass(model, X, "sink_squeezes", fires=True)  # BatchNormalization and Relu still move
    assert ops(after).count("Unsqueeze") == 1 and ops(after).count("Squeeze") == 1


def test_negative_axes_are_normalized():
    model = conv1d_block(13, sq_axes=(-2,), unsq_axes=(-2,))
    after, _ = check_pass(model, X, "sink_squeezes", fires=True)
    assert "Unsqueeze" not in ops(after) and "Squeeze" not in ops(after)


def test_squeeze_without_axes_uses_the_shapes():
    """Squeeze-11 without axes drops every size-1 axis: (2, 8, 1, W) -> (2, 8, W), axis 2 by the shapes."""
    w = _bn_weights()
    nodes = [helper.make_node("Squeeze", ["x"], ["s1"]),
             helper.make_node("BatchNormalization", ["s1", "s", "b", "mean", "var"], ["y"])]
    model = make_model(nodes, {"x": (2, C, 1, W)}, ["y"], w, opset=11)
    after, _ = check_pass(model, X, "sink_squeezes", fires=True)
    assert ops(after) == ["BatchNormalization", "Squeeze"]
