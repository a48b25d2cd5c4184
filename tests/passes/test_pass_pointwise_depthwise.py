"""fuse_pointwise_depthwise: a 1x1 Conv and the depthwise Conv reading it -> FusedConvDepthwise, bit for bit."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.errors import ShapeInferenceError
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu.compiled.epilogue import CODES
from pooled_predictor.passes import optimize
from pooled_predictor.passes.pointwise_depthwise import IN_KERNEL
from tests.onnx_helpers import feeds_of, make_node_model
from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net

FUSE = ("fuse_conv_activation", "fuse_pointwise_depthwise")


def pair(c=16, m=32, pw_attrs=None, dw_attrs=None, dw_group=None, pw_act=None, dw_act=None, extra_outputs=(),
         pw_kernel=1, dw_kernel=3):
    """y = dw_act(DepthwiseConv(pw_act(Conv1x1(x))))."""
    w = {"W": rand(m, c, pw_kernel, pw_kernel, seed=1, scale=0.3), "B": rand(m, seed=2),
         "Wd": rand(m, m // (dw_group or m), dw_kernel, dw_kernel, seed=3), "Bd": rand(m, seed=4)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["e"], **(pw_attrs or {}))]
    t = "e"
    if pw_act:
        nodes.append(helper.make_node(pw_act, ["e"], ["t"]))
        t = "t"
    dw_out = "d" if dw_act else "y"
    nodes.append(helper.make_node("Conv", [t, "Wd", "Bd"], [dw_out], group=dw_group or m, pads=[1, 1, 1, 1],
                                  **(dw_attrs or {})))
    if dw_act:
        nodes.append(helper.make_node(dw_act, ["d"], ["y"]))
    return make_model(nodes, {"x": (2, c, 9, 10)}, ["y"] + list(extra_outputs), w, opset=13)


def feeds(c=16):
    return {"x": rand(2, c, 9, 10, seed=9)}


def test_in_kernel_activations_are_the_compiled_epilogue_codes():
    assert set(IN_KERNEL) == set(CODES) | {"Identity"}


@pytest.mark.parametrize("pw_act, dw_act", [(None, None), ("Relu", None), ("Relu", "LeakyRelu"), (None, "Relu")])
def test_pair_fuses_with_the_bits_of_the_two_convs(pw_act, dw_act):
    model = pair(pw_act=pw_act, dw_act=dw_act)
    after, report = check_pass(model, feeds(), FUSE, fires=True)
    assert ops(after) == ["pooled_predictor.FusedConvDepthwise"]
    node = after.nodes[0]
    assert node.attrs["activation"] == (pw_act or "Identity") and node.attrs["dw_activation"] == (dw_act or "Identity")
    assert node.attrs["group"] == 32 and node.attrs["pads"] == [1, 1, 1, 1]
    unfused, _ = optimize(load_onnx(model), "none", enable=["fuse_conv_activation"])
    np.testing.assert_array_equal(run_net(after, feeds())[0], run_net(unfused, feeds())[0])


@pytest.mark.parametrize("why, kwargs", [
    ("T read elsewhere", dict(extra_outputs=["e"])),
    ("strided 1x1", dict(pw_attrs={"strides": [2, 2]})),
    ("padded 1x1", dict(pw_attrs={"pads": [1, 1, 1, 1]})),
    ("3x3 first conv", dict(pw_kernel=3, pw_attrs={"pads": [1, 1, 1, 1]})),
    ("grouped second conv", dict(dw_group=2)),
    ("channels off the block", dict(c=12, m=36)),
    ("activation outside the kernel", dict(dw_act="Sigmoid")),
])
def test_pair_not_fused(why, kwargs):
    c = kwargs.get("c", 16)
    fires = bool(kwargs.get("pw_act") or kwargs.get("dw_act"))  # only fuse_conv_activation's rewrite
    after, _ = check_pass(pair(**kwargs), feeds(c), FUSE, fires=fires)
    assert "pooled_predictor.FusedConvDepthwise" not in ops(after), why


def test_depthwise_with_a_sum_input_is_not_fused():
    w = {"W": rand(16, 16, 1, 1, seed=1), "Wd": rand(16, 1, 3, 3, seed=2), "Bd": rand(16, seed=3)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["e"]),
             helper.make_node("Conv", ["e", "Wd", "Bd"], ["d"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["d", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, {"x": (1, 16, 6, 6)}, ["y"], w, opset=13)
    after, _ = check_pass(model, {"x": rand(1, 16, 6, 6, seed=4)}, ("fuse_conv_sum",) + FUSE, fires=True)
    assert "pooled_predictor.FusedConvDepthwise" not in ops(after)


def test_shape_rule_refuses_a_second_conv_that_is_not_depthwise():
    x, w, b, wd = rand(1, 8, 5, 5), rand(16, 8, 1, 1), rand(16), rand(16, 8, 3, 3)
    model = make_node_model("FusedConvDepthwise", [x, w, b, None, wd],
                            {"activation": "Relu", "dw_activation": "Identity", "group": 2, "pads": [1, 1, 1, 1]},
                            domain="pooled_predictor", static=(1, 2, 4))
    with pytest.raises(ShapeInferenceError, match="depthwise"):
        run_net(load_onnx(model), feeds_of([x, w, b, None, wd], (1, 2, 4)))
