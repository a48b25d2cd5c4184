"""fuse_hard_swish: x * HardSigmoid(x; 1/6, 1/2) -> HardSwish (ONNX from opset 14, ours below)."""

import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand

SHAPE = (2, 3, 4, 4)
X = {"x": rand(*SHAPE, seed=1, scale=4.0)}


def model(alpha=1.0 / 6.0, beta=0.5, swap=False, gate_input="x", opset=17, outputs=("y",)):
    nodes = [helper.make_node("HardSigmoid", [gate_input], ["h"], alpha=alpha, beta=beta),
             helper.make_node("Mul", ["h", "x"] if swap else ["x", "h"], ["y"])]
    inputs = {"x": SHAPE} if gate_input == "x" else {"x": SHAPE, gate_input: SHAPE}
    return make_model(nodes, inputs, list(outputs), opset=opset)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("alpha", [1.0 / 6.0, 0.1666667, 0.16666670143604279])
def test_hard_swish_fuses(swap, alpha):
    after, _ = check_pass(model(alpha=alpha, swap=swap), X, "fuse_hard_swish", fires=True)
    assert ops(after) == ["HardSwish"]


def test_below_opset_14_emits_our_hard_swish():
    after, _ = check_pass(model(opset=13), X, "fuse_hard_swish", fires=True)
    assert ops(after) == ["pooled_predictor.HardSwish"] and after.opset["pooled_predictor"] == 1


@pytest.mark.parametrize("alpha,beta", [(0.2, 0.5), (1.0 / 6.0, 0.4), (0.1667, 0.5)])
def test_other_hard_sigmoids_do_not_fuse(alpha, beta):
    check_pass(model(alpha=alpha, beta=beta), X, "fuse_hard_swish", fires=False)


def test_squeeze_excitation_gate_does_not_fuse():
    """x * HardSigmoid(z): a gate computed from another value (PP-OCR det's SE blocks)."""
    check_pass(model(gate_input="z"), dict(X, z=rand(*SHAPE, seed=2)), "fuse_hard_swish", fires=False)


def test_hard_sigmoid_output_read_elsewhere_does_not_fuse():
    check_pass(model(outputs=("y", "h")), X, "fuse_hard_swish", fires=False)
