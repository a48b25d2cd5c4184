"""fuse_conv_activation and fuse_gemm_activation: Conv/Gemm + activation -> FusedConv/FusedGemm."""

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize
from tests.passes.pass_helpers import check_pass, make_model, ops, rand

C, M = 3, 5
X = {"x": rand(2, C, 6, 6, seed=1, scale=3.0)}

# (name, activation node(s) reading "c" and writing "y", extra weights, opset, expected params)
ACTS = [
    ("relu", [helper.make_node("Relu", ["c"], ["y"])], {}, 17, "Relu", []),
    ("relu6", [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
     {"lo": np.float32(0.0), "hi": np.float32(6.0)}, 17, "Clip", [0.0, 6.0]),
    ("clip_min_only", [helper.make_node("Clip", ["c", "lo"], ["y"])], {"lo": np.float32(-0.5)}, 17,
     "Clip", [-0.5, float("inf")]),
    ("clip_max_only", [helper.make_node("Clip", ["c", "", "hi"], ["y"])], {"hi": np.float32(1.5)}, 17,
     "Clip", [float("-inf"), 1.5]),
    ("clip6_attrs", [helper.make_node("Clip", ["c"], ["y"], min=-1.0, max=2.0)], {}, 10, "Clip", [-1.0, 2.0]),
    ("sigmoid", [helper.make_node("Sigmoid", ["c"], ["y"])], {}, 17, "Sigmoid", []),
    ("hard_sigmoid", [helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4)], {}, 17,
     "HardSigmoid", [0.3, 0.4]),
    ("hard_sigmoid_defaults", [helper.make_node("HardSigmoid", ["c"], ["y"])], {}, 17,
     "HardSigmoid", [0.2, 0.5]),
    ("hard_swish", [helper.make_node("HardSwish", ["c"], ["y"])], {}, 17, "HardSwish", []),
    ("leaky_relu", [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)], {}, 17, "LeakyRelu", [0.1]),
    ("leaky_relu_steep", [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=2.5)], {}, 17, "LeakyRelu", [2.5]),
    ("leaky_relu_negative", [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=-0.5)], {}, 17, "LeakyRelu", [-0.5]),
]


def conv_act(act_nodes, weights, opset, bias=True, extra_outputs=(), extra_nodes=()):
    w = {"W": rand(M, C, 3, 3, seed=2, scale=0.4), **weights}
    ins = ["x", "W"]
    if bias:
        w["B"] = rand(M, seed=3)
        ins.append("B")
    nodes = [helper.make_node("Conv", ins, ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv")]
    return make_model(nodes + list(act_nodes) + list(extra_nodes), {"x": (2, C, 6, 6)},
                      ["y"] + list(extra_outputs), w, opset=opset)


@pytest.mark.parametrize("case", ACTS, ids=[a[0] for a in ACTS])
def test_conv_activation_fuses(case):
    _, nodes, weights, opset, act, params = case
    after, report = check_pass(conv_act(nodes, weights, opset), X, "fuse_conv_activation", fires=True)
    assert ops(after) == ["pooled_predictor.FusedConv"]
    node = after.nodes[0]
    assert node.attrs["activation"] == act
    assert node.attrs["activation_params"] == pytest.approx(params, rel=1e-6)
    assert node.attrs["strides"] == [2, 2] and after.opset["pooled_predictor"] == 1


def test_conv_activation_without_bias():
    after, _ = check_pass(conv_act([helper.make_node("Relu", ["c"], ["y"])], {}, 17, bias=False), X,
                          "fuse_conv_activation", fires=True)
    assert len(after.nodes[0].inputs) == 2


def test_not_fused_when_conv_output_is_a_graph_output():
    model = conv_act([helper.make_node("Relu", ["c"], ["y"])], {}, 17, extra_outputs=["c"])
    check_pass(model, X, "fuse_conv_activation", fires=False)


def test_not_fused_when_conv_output_is_read_elsewhere():
    model = conv_act([helper.make_node("Relu", ["c"], ["y"])], {}, 17, extra_outputs=["z"],
                     extra_nodes=[helper.make_node("Sigmoid", ["c"], ["z"])])
    check_pass(model, X, "fuse_conv_activation", fires=False)


def test_clip_with_runtime_bounds_is_not_fused():
    w = {"W": rand(M, C, 3, 3, seed=2)}
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = make_model(nodes, {"x": (2, C, 6, 6), "lo": (), "hi": ()}, ["y"], w)
    feeds = dict(X, lo=np.array(-1, np.float32), hi=np.array(1, np.float32))
    check_pass(model, feeds, "fuse_conv_activation", fires=False)


def test_clip_with_an_infinite_bound_is_not_fused():
    model = conv_act([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
                     {"lo": np.float32(-np.inf), "hi": np.float32(6.0)}, 17)
    check_pass(model, X, "fuse_conv_activation", fires=False)


def test_two_activations_in_a_row_fuse_only_the_first():
    model = conv_act([helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])], {}, 17)
    after, _ = check_pass(model, X, "fuse_conv_activation", fires=True)
    assert ops(after) == ["pooled_predictor.FusedConv", "Sigmoid"]


def test_conv_then_hard_swish_from_hard_sigmoid_mul():
    """x * HardSigmoid(x; 1/6, 1/2) after a Conv: fuse_hard_swish, then fuse_conv_activation."""
    nodes = [helper.make_node("HardSigmoid", ["c"], ["h"], alpha=1.0 / 6.0, beta=0.5),
             helper.make_node("Mul", ["c", "h"], ["y"])]
    after, _ = check_pass(conv_act(nodes, {}, 11), X, ["fuse_hard_swish", "fuse_conv_activation"], fires=True)
    assert ops(after) == ["pooled_predictor.FusedConv"]
    assert after.nodes[0].attrs["activation"] == "HardSwish"


# ---- Gemm ------------------------------------------------------------------------------------
def gemm_act(act_nodes, weights, opset=17, trans_b=1, **kw):
    w = {"B": rand(4, 8, seed=4) if trans_b else rand(8, 4, seed=4), "C": rand(4, seed=5), **weights}
    nodes = [helper.make_node("Gemm", ["a", "B", "C"], ["c"], transB=trans_b, alpha=0.5, beta=2.0)]
    return make_model(nodes + list(act_nodes), {"a": (3, 8)}, ["y"] + list(kw.get("extra_outputs", ())), w,
                      opset=opset)


A = {"a": rand(3, 8, seed=6, scale=2.0)}


@pytest.mark.parametrize("case", ACTS, ids=[a[0] for a in ACTS])
def test_gemm_activation_fuses(case):
    _, nodes, weights, opset, act, params = case
    after, _ = check_pass(gemm_act(nodes, weights, opset), A, "fuse_gemm_activation", fires=True)
    assert ops(after) == ["pooled_predictor.FusedGemm"]
    node = after.nodes[0]
    assert node.attrs["activation"] == act and node.attrs["alpha"] == 0.5 and node.attrs["transB"] == 1


def test_gemm_tanh_fuses_and_conv_tanh_does_not():
    """Tanh fuses after a Gemm only (FusedGemm's compiled call applies it: ops/cpu/fused.py)."""
    tanh = [helper.make_node("Tanh", ["c"], ["y"])]
    after, _ = check_pass(gemm_act(tanh, {}), A, "fuse_gemm_activation", fires=True)
    assert ops(after) == ["pooled_predictor.FusedGemm"] and after.nodes[0].attrs["activation"] == "Tanh"
    check_pass(conv_act(tanh, {}, 17), X, "fuse_conv_activation", fires=False)


def test_gemm_not_fused_when_output_is_a_graph_output():
    check_pass(gemm_act([helper.make_node("Relu", ["c"], ["y"])], {}, extra_outputs=["c"]), A,
               "fuse_gemm_activation", fires=False)


def test_integer_gemm_is_not_fused():
    """Relu of an int32 Gemm has no float activation kernel: left as it is."""
    from onnx import TensorProto

    w = {"B": np.arange(32, dtype=np.int32).reshape(8, 4) - 10}
    nodes = [helper.make_node("Gemm", ["a", "B"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, {"a": (3, 8)}, ["y"], w, dtype=TensorProto.INT32)
    g, report = optimize(load_onnx(model, device=None), "none", enable=["fuse_gemm_activation"])
    assert not report["fuse_gemm_activation"].changed


def test_fused_kernels_reject_unknown_activations():
    from pooled_predictor.errors import UnsupportedOpError
    from pooled_predictor.engine.program import Program

    g = load_onnx(conv_act([helper.make_node("Relu", ["c"], ["y"])], {}, 17))
    fused, _ = optimize(g, "extended")
    fused.nodes[0].attrs["activation"] = "Tanh"
    with pytest.raises(UnsupportedOpError, match="activation='Tanh'"):
        Program(fused)
