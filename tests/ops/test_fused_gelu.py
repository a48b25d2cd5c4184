"""Conv + our domain's Gelu -> FusedConv(activation="Gelu") (passes/fuse_activation.py), and its kernels:
the blocked GEMMs apply GELU (compiled/epilogue.py, code GELU) to each stored block of Y; the depthwise
kind and the NCHW kernels apply it after (ops/cpu/fused.py's Activation). Each must give the bits of the
unfused Gelu node (the exporters' X / sqrt(2), erf, + 1, * X, * 0.5), at the suite's width and at both
widths' GEMM kernels."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.engine.net import Net
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu import conv_nchwc
from pooled_predictor.ops.cpu.compiled import codes, epilogue, widths
from pooled_predictor.passes import optimize
from tests.onnx_helpers import run_ort

rng = np.random.default_rng(32)
SQRT2 = np.float32(math.sqrt(2.0))


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _w(name, *shape):
    return numpy_helper.from_array(f32(*shape, scale=0.4), name)


def _gelu(x, y, tag):
    """x * 0.5 * (1 + erf(x / sqrt(2))) as PaddlePaddle and PyTorch export it (passes/gelu.py)."""
    return [helper.make_node("Div", [x, "k_sqrt2"], [f"{tag}_d"]),
            helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"]),
            helper.make_node("Add", [f"{tag}_e", "k_one"], [f"{tag}_a"]),
            helper.make_node("Mul", [x, f"{tag}_a"], [f"{tag}_m"]),
            helper.make_node("Mul", [f"{tag}_m", "k_half"], [y])]


def _model(n=1, c=3, h=12, w=40):
    """Every kind a FusedConv Gelu can take: a stem 3x3 (NCHW in, blocked out), a 1x1 (pointwise), a 3x3
    of 16 -> 16 (Winograd, or indirect under the NCHW minimums), a strided 3x3 (indirect), a depthwise 3x3
    (Gelu after the kernel), then a 1x1 back to 8 channels."""
    inits = [_w("ws", 16, c, 3, 3), _w("bs", 16), _w("wp", 32, 16, 1, 1), _w("bp", 32), _w("w3", 16, 32, 3, 3),
             _w("wi", 16, 16, 3, 3), _w("bi", 16), _w("wd", 16, 1, 3, 3), _w("bd", 16), _w("wy", 8, 16, 1, 1),
             numpy_helper.from_array(SQRT2, "k_sqrt2"), numpy_helper.from_array(np.float32(1.0), "k_one"),
             numpy_helper.from_array(np.float32(0.5), "k_half")]
    nodes = [helper.make_node("Conv", ["x", "ws", "bs"], ["s"], pads=[1, 1, 1, 1]), *_gelu("s", "gs", "s"),
             helper.make_node("Conv", ["gs", "wp", "bp"], ["p"]), *_gelu("p", "gp", "p"),
             helper.make_node("Conv", ["gp", "w3"], ["t"], pads=[1, 1, 1, 1]), *_gelu("t", "gt", "t"),
             helper.make_node("Conv", ["gt", "wi", "bi"], ["i"], pads=[1, 1, 1, 1], strides=[2, 1]),
             *_gelu("i", "gi", "i"),
             helper.make_node("Conv", ["gi", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=16), *_gelu("d", "gd", "d"),
             helper.make_node("Conv", ["gd", "wy"], ["y"])]
    g = helper.make_graph(nodes, "gelu_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _y(model, x, **opt):
    net = Net(Program(optimize(load_onnx(model), "all", **opt)[0]))
    net.forward(x)
    return net, net.blob_by_name("y").copy()


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("winograd", [True, False], ids=["winograd", "indirect"])
def test_conv_gelu_fuses_and_keeps_the_unfused_bits(n, winograd, monkeypatch):
    if not winograd:
        monkeypatch.setattr(conv_nchwc, "WINOGRAD", False)
    model, x = _model(n), f32(n, 3, 12, 40, scale=2.0)
    net, y = _y(model, x)
    fused = [nd for nd in net.program.graph.nodes if nd.op_type == "FusedConv"]
    assert sum(nd.attrs["activation"] == "Gelu" for nd in fused) == 5
    assert not any(nd.op_type == "Gelu" for nd in net.program.graph.nodes)
    _, unfused = _y(model, x, disable=["fuse_conv_activation"])  # Conv, then the Gelu node
    np.testing.assert_array_equal(y, unfused)
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())
    if winograd:  # the NCHW path has no Winograd for 32 -> 16 channels: other sums, not comparable bit for bit
        return
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)  # every conv in NCHW: Gelu after the kernel
    _, plain = _y(model, x)
    np.testing.assert_array_equal(y, plain)


def test_onnx_gelu_and_its_tanh_form_are_not_fused():
    """ONNX Gelu-20 computes erf(X * (1/sqrt 2)) (other bits than our domain's), and approximate="tanh" is
    another function: both stay Gelu nodes after the Conv."""
    for opset, approximate in ((20, "none"), (20, "tanh")):
        inits = [_w("w", 8, 8, 1, 1)]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Gelu", ["c"], ["y"],
                                                                             approximate=approximate)]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 9
        after = optimize(load_onnx(model), "all")[0]
        assert [nd.op_type for nd in after.nodes] == ["Conv", "Gelu"], approximate


def test_our_tanh_gelu_is_not_fused():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("Gelu", ["c"], ["y"], domain="pooled_predictor", approximate="tanh")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [_w("w", 8, 8, 1, 1)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pooled_predictor", 1)])
    model.ir_version = 8
    after = optimize(load_onnx(model), "all")[0]
    assert [nd.op_type for nd in after.nodes] == ["Conv", "Gelu"]


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("kb, mb, p", [(1, 1, 1), (3, 5, 13), (33, 4, 50), (2, 3, 7)])  # K, M in blocks
def test_gemm_epilogue_gelu_gives_gelu32_of_the_plain_gemm(lanes, kb, mb, p):
    """The blocked GEMM's GELU epilogue: each stored block through gelu32, the same bits as the Gelu node
    over the GEMM's output without an activation; special values (0, +-inf, NaN, +-4 and beyond, where
    erf's argument is clamped) included through the bias."""
    gemm = widths.module("nchwc_gemm", lanes)
    k, m = kb * lanes, mb * lanes
    w, x = f32(m, k), f32(k * p, scale=2.0)
    b = f32(m, scale=3.0)
    b[:6] = [0.0, np.inf, -np.inf, np.nan, 40.0, -40.0][:min(6, m)]
    args = lambda y, code, a0: (gemm.pack_weights(w), x, 0, gemm.channel_offsets(k, p), lanes, y, 0, lanes * p,  # noqa
                                m, p, b, code, a0, np.float32(0), b, False)
    plain, fused = np.empty(m * p, np.float32), np.empty(m * p, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        gemm.gemm_nchwc(*args(plain, codes.NONE, np.float32(0)))
        gemm.gemm_nchwc(*args(fused, codes.GELU, SQRT2))
        expected = np.empty_like(plain)
        epilogue.gelu_erf(plain, expected, SQRT2)
    np.testing.assert_array_equal(fused, expected)


def test_activate_range_gelu_matches_the_gelu_kernel_on_a_slice():
    """activate_range(GELU) over a sub-range changes exactly that range, to gelu_erf's bits."""
    y = f32(1000, scale=3.0)
    ref = y.copy()
    epilogue.gelu_erf(y[37:37 + 555].copy(), ref[37:37 + 555], SQRT2)
    epilogue.activate_range(y, np.uint64(37), np.uint64(555), codes.GELU, SQRT2, np.float32(0))
    np.testing.assert_array_equal(y, ref)
