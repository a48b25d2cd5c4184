"""fuse_conv_sum: act(Conv(x, W, b) + z) -> FusedConv(x, W, b, z), bit for bit the unfused graph."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.errors import ShapeInferenceError
from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize
from tests.onnx_helpers import feeds_of, make_node_model
from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net

C, M = 8, 16


def residual(kernel=1, act=None, z_shape=None, z_from_conv=False, extra_outputs=(), batch=2, hw=(9, 20)):
    """y = act(Conv(x) + z): z a graph input of the conv output's shape (or z_shape), or a second conv."""
    pads = [kernel // 2] * 4
    w = {"W": rand(M, C, kernel, kernel, seed=2, scale=0.3), "B": rand(M, seed=3)}
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=pads, name="conv")]
    inputs = {"x": (batch, C, *hw)}
    if z_from_conv:
        w.update(W2=rand(M, C, 1, 1, seed=4, scale=0.3), B2=rand(M, seed=5))
        nodes.append(helper.make_node("Conv", ["x", "W2", "B2"], ["z"], name="shortcut"))
    else:
        inputs["z"] = z_shape or (batch, M, *hw)
    nodes.append(helper.make_node("Add", ["c", "z"], ["s"]))
    act_nodes = {"Relu": [helper.make_node("Relu", ["s"], ["y"])],
                 "Clip": [helper.make_node("Clip", ["s", "lo", "hi"], ["y"])],
                 "LeakyRelu": [helper.make_node("LeakyRelu", ["s"], ["y"], alpha=0.1)],
                 None: [helper.make_node("Identity", ["s"], ["y"])]}[act]
    if act == "Clip":
        w.update(lo=np.float32(0.0), hi=np.float32(6.0))
    return make_model(nodes + act_nodes, inputs, ["y"] + list(extra_outputs), w), inputs


def feeds(inputs):
    return {k: rand(*s, seed=i + 10) for i, (k, s) in enumerate(inputs.items())}


def bits(model, f, disabled):
    """Our outputs with every pass but `disabled` (level all)."""
    graph, _ = optimize(load_onnx(model), "all", disable=disabled)
    return graph, run_net(graph, f)


@pytest.mark.parametrize("kernel", [1, 3])  # 1x1: Z added in the compiled GEMM; 3x3: after the conv
@pytest.mark.parametrize("act", ["Relu", "Clip", "LeakyRelu"])
@pytest.mark.parametrize("z_from_conv", [False, True])
def test_residual_fuses_and_keeps_the_bits(kernel, act, z_from_conv, monkeypatch):
    from pooled_predictor.ops.cpu import conv_nchwc
    from pooled_predictor.ops.cpu.compiled import gemm

    monkeypatch.setattr(conv_nchwc, "ENABLED", False)  # the NCHW kernel's paths (tests/ops/test_nchwc.py: NCHW8c)
    calls = []
    inner = gemm.gemm2d_sum
    monkeypatch.setattr(gemm, "gemm2d_sum", lambda *a: calls.append(1) or inner(*a))
    model, inputs = residual(kernel, act, z_from_conv=z_from_conv)
    f = feeds(inputs)
    after, _ = check_pass(model, f, "fuse_conv_sum", fires=True)
    assert bool(calls) == (kernel == 1)  # the 1x1 conv adds Z inside its GEMM
    fused = [n for n in after.nodes if n.op_type == "FusedConv"]
    assert len(fused) == 1 and len(fused[0].inputs) == 4 and fused[0].attrs["activation"] == act
    assert "Add" not in ops(after)
    g_all, y_all = bits(model, f, ())
    g_off, y_off = bits(model, f, ("fuse_conv_sum",))
    assert any(len(n.inputs) == 4 for n in g_all.nodes) and not any(len(n.inputs) == 4 for n in g_off.nodes)
    np.testing.assert_array_equal(y_all[0], y_off[0])  # the same roundings in the same order


@pytest.mark.parametrize("hw", [(7, 7), (4, 13), (1, 1)])  # output tails of < 8 columns, one pixel
def test_residual_tails_keep_the_bits(hw):
    model, inputs = residual(1, "Relu", hw=hw, batch=3)
    f = feeds(inputs)
    check_pass(model, f, "fuse_conv_sum", fires=True)
    np.testing.assert_array_equal(bits(model, f, ())[1][0], bits(model, f, ("fuse_conv_sum",))[1][0])


@pytest.mark.parametrize("kernel", [1, 3])
def test_residual_without_activation_fuses_with_identity(kernel):
    model, inputs = residual(kernel, None)
    f = feeds(inputs)
    after, _ = check_pass(model, f, "fuse_conv_sum", fires=True)
    fused = [n for n in after.nodes if n.op_type == "FusedConv"]
    assert len(fused) == 1 and fused[0].attrs["activation"] == "Identity" and "Add" not in ops(after)
    np.testing.assert_array_equal(bits(model, f, ())[1][0], bits(model, f, ("fuse_conv_sum",))[1][0])


def test_not_fused_when_z_broadcasts():
    model, inputs = residual(1, "Relu", z_shape=(2, M, 1, 1))
    check_pass(model, feeds(inputs), "fuse_conv_sum", fires=False)


def test_sum_read_elsewhere_fuses_without_the_activation():
    model, inputs = residual(1, "Relu", extra_outputs=["s"])  # s is also a graph output
    after, _ = check_pass(model, feeds(inputs), "fuse_conv_sum", fires=True)
    assert ops(after) == ["pooled_predictor.FusedConv", "Relu"]
    assert after.nodes[0].attrs["activation"] == "Identity" and after.nodes[0].outputs == ["s"]


def test_not_fused_when_the_conv_output_is_read_elsewhere():
    model, inputs = residual(1, "Relu", extra_outputs=["c"])
    check_pass(model, feeds(inputs), "fuse_conv_sum", fires=False)


def test_fused_conv_rejects_a_sum_of_another_shape():
    x, w, b = rand(1, C, 5, 5), rand(M, C, 1, 1), rand(M)
    z = rand(1, M, 5, 4)
    model = make_node_model("FusedConv", [x, w, b, z], {"activation": "LeakyRelu", "activation_params": [0.1]},
                            domain="pooled_predictor", static=(1, 2))
    with pytest.raises(ShapeInferenceError, match="sum input Z"):
        run_net(load_onnx(model), feeds_of([x, w, b, z], (1, 2)))
