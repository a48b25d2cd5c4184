"""Compiled kernels (ops/cpu/compiled): depthwise conv against onnxruntime over a grid of attributes,
activations fused into it, and the one-pass activations / GELU bit-identical to the numpy kernels."""

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu import conv as conv_module
from pooled_predictor.ops.cpu._special import erf_float32, erf_workspace_shape
from pooled_predictor.ops.cpu.activation import hard_swish_into, leaky_relu_into
from pooled_predictor.ops.cpu.compiled import epilogue
from pooled_predictor.ops.cpu.elementwise import hard_sigmoid
from tests.onnx_helpers import check_node
from tests.ops.test_conv import conv_kernel

rng = np.random.default_rng(11)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# (kernel, strides, dilations, pads) x (batch, channels, multiplier, H, W): odd sizes, asymmetric pads
GEOMETRY = [((3, 3), (1, 1), (1, 1), (1, 1, 1, 1)), ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
            ((3, 3), (2, 1), (1, 1), (0, 1, 1, 0)), ((3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
            ((5, 5), (1, 1), (1, 1), (2, 2, 2, 2)), ((5, 5), (2, 2), (1, 1), (2, 1, 2, 3)),
            ((3, 3), (1, 1), (1, 1), (0, 0, 0, 0)), ((2, 4), (1, 2), (1, 3), (1, 0, 0, 2)),
            ((3, 3), (1, 1), (3, 1), (3, 0, 0, 3)), ((7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),
            ((7, 7), (2, 2), (1, 1), (3, 2, 3, 4)), ((5, 5), (1, 2), (2, 2), (4, 3, 4, 5)),
            ((3, 3), (3, 3), (1, 1), (1, 1, 1, 1)), ((3, 3), (1, 1), (1, 1), (4, 3, 5, 2)),
            ((1, 1), (2, 2), (1, 1), (0, 0, 0, 0))]
SHAPES = [(1, 8, 1, 33, 27), (2, 6, 2, 31, 40)]


def _depthwise_case(kernel, strides, dilations, pads, shape):
    n, c, mult, h, w = shape
    inputs = [f32(n, c, h, w), f32(c * mult, 1, *kernel), f32(c * mult)]
    attrs = {"group": c, "strides": list(strides), "dilations": list(dilations), "pads": list(pads),
             "kernel_shape": list(kernel)}
    k, out_shape, _ = conv_kernel("Conv", inputs, attrs)
    assert k.path == "depthwise_compiled", out_shape
    check_node("Conv", inputs, attrs, opset=13, static=(1, 2))
    check_node("Conv", inputs[:2], attrs, opset=13, static=(1,))  # no bias


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel,strides,dilations,pads", GEOMETRY, ids=lambda v: "-".join(map(str, v)))
def test_depthwise_against_onnxruntime(kernel, strides, dilations, pads, shape):
    _depthwise_case(kernel, strides, dilations, pads, shape)


# tiny planes (one output row or column, input smaller than the kernel), many channels
@pytest.mark.parametrize("kernel,strides,dilations,pads,shape", [
    ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (2, 24, 1, 1, 5)), ((5, 5), (2, 2), (1, 1), (2, 2, 2, 2), (1, 16, 3, 3, 2)),
    ((7, 7), (1, 1), (1, 1), (3, 3, 3, 3), (1, 40, 1, 7, 7)), ((3, 3), (2, 2), (2, 2), (2, 2, 2, 2), (1, 9, 1, 4, 4))])
def test_depthwise_small_planes(kernel, strides, dilations, pads, shape):
    _depthwise_case(kernel, strides, dilations, pads, shape)


def test_float64_and_dynamic_weights_keep_the_numpy_path():
    c = 4
    attrs = {"group": c, "pads": [1, 1, 1, 1]}
    x64 = [a.astype(np.float64) for a in (f32(1, c, 20, 20), f32(c, 1, 3, 3))]
    assert conv_kernel("Conv", x64, attrs)[0].path == "depthwise"
    assert conv_kernel("Conv", [f32(1, c, 20, 20), f32(c, 1, 3, 3)], attrs, static=())[0].path == "depthwise"
    assert conv_kernel("Conv", [f32(1, c, 20, 20), f32(c, 1, 5, 5)], attrs)[0].path == "depthwise_compiled"


@pytest.mark.parametrize("width", [9, 40])  # rows shorter than ROW_MIN: flat passes; longer: row passes
def test_every_path_sums_the_taps_in_the_same_order(width):
    """The written-out 3x3 loop and the passes of 4 taps give the same bits: one 3x3 conv as a
    3x3 kernel, and as a 3x4 kernel whose last column is zero (adding 0 * x changes no sum)."""
    c = 5
    x, w, b = f32(1, c, 9, width), f32(c, 1, 3, 3), f32(c)
    w4 = np.concatenate([w, np.zeros((c, 1, 3, 1), np.float32)], axis=3)
    y3 = check_node("Conv", [x, w, b], {"group": c, "pads": [1, 1, 1, 1]}, opset=13, static=(1, 2))[0]
    y4 = check_node("Conv", [x, w4, b], {"group": c, "pads": [1, 1, 1, 2]}, opset=13, static=(1, 2))[0]
    np.testing.assert_array_equal(y3, y4)


ACTIVATIONS = [("Relu", {}), ("Clip", {"min": -0.5, "max": 0.75}), ("Clip", {"max": 6.0}),
               ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.1})]


def _conv_act_model(act, params, stride, k=3):
    c = 6
    w = numpy_helper.from_array(f32(c, 1, k, k), "w")
    b = numpy_helper.from_array(f32(c), "b")
    inits = [w, b]
    act_inputs = ["y"]
    if act == "Clip":
        for name in ("min", "max"):
            if name in params:
                inits.append(numpy_helper.from_array(np.array(params[name], np.float32), name))
                act_inputs.append(name)
            else:
                act_inputs.append("")
        params = {}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], group=c, pads=[k // 2] * 4, strides=[stride] * 2),
             helper.make_node(act, act_inputs, ["z"], **params)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 19, 16])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("k,stride", [(3, 1), (3, 2), (5, 1), (7, 2)])
@pytest.mark.parametrize("act,params", ACTIVATIONS, ids=lambda v: v if isinstance(v, str) else "")
def test_activation_fused_into_depthwise(act, params, k, stride):
    import onnxruntime as ort

    model = _conv_act_model(act, dict(params), stride, k)
    x = f32(2, 6, 19, 16, scale=2.0)
    p = Predictor(model)
    fused = [st for st in p.program.steps if st.node.op_type == "FusedConv"]
    assert len(fused) == 1 and len(p.program.steps) == 1
    ours = p.run(None, {"x": x})[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # the activation ran inside the kernel, with the numpy kernel's bits: same as Conv + the ONNX node
    unfused = Predictor(model, graph_optimization_level="none").run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, unfused)


def _numpy_activation(name, x, p):
    out, t = np.empty_like(x), np.empty_like(x)
    if name == "Relu":
        np.maximum(x, 0, out=out)
    elif name == "Clip":
        np.clip(x, np.float32(p[0]), np.float32(p[1]), out=out)
    elif name == "HardSigmoid":
        hard_sigmoid(x, out=out, alpha=p[0], beta=p[1])
    elif name == "HardSwish":
        hard_swish_into(x, out, t)
    else:
        leaky_relu_into(x, out, t, p[0])
    return out


@pytest.mark.parametrize("name,p", [("Relu", ()), ("Clip", (-1.0, 2.5)), ("HardSigmoid", (0.2, 0.5)),
                                    ("HardSigmoid", (0.3, 0.1)), ("HardSwish", ()), ("LeakyRelu", (0.01,))])
def test_activations_bit_identical_to_numpy(name, p):
    x = np.concatenate([f32(4099, scale=5.0), np.array([0.0, -0.0, np.inf, -np.inf, 3.0, -3.0], np.float32)])
    y = x.copy()
    epilogue.activate_inplace(y, epilogue.CODES[name], *(list(p) + [0.0, 0.0])[:2])
    np.testing.assert_array_equal(y, _numpy_activation(name, x, p))


@pytest.mark.parametrize("n", [70008, 70001, 1001, 7, 4, 3, 1, 0])
@pytest.mark.parametrize("mode", ["x to out", "inplace", "out is x"])
def test_gelu_and_erf_bit_identical_to_the_numpy_kernels(mode, n):
    # the compiled loop runs four quarters of the array side by side and the last n % 4 alone:
    # special values go into every quarter and the tail
    x = f32(n, scale=3.0)
    special = np.array([0, 4, -4, 5.5, -30, 1e-30, np.nan], np.float32)
    for k, pos in enumerate(range(0, n, max(1, n // 9))):
        x[pos] = special[k % special.size]
    if n > 4:
        x[-1] = np.nan
    s2 = np.float32(np.sqrt(2.0))
    t, work = np.empty_like(x), np.empty(erf_workspace_shape(x.size), np.float32)
    np.divide(x, s2, out=t)
    erf_float32(t, t, work)
    erf_ref = t.copy()
    t += 1.0
    ref = x * t
    ref *= 0.5
    if mode == "inplace":
        out = x.copy()
        epilogue.gelu_erf_inplace(out, s2)
    elif mode == "out is x":
        out = x.copy()
        epilogue.gelu_erf(out, out, s2)
    else:
        out = np.empty_like(x)
        epilogue.gelu_erf(x, out, s2)
    np.testing.assert_array_equal(out, ref)
    erf = np.array([epilogue.erf32(v) for v in (x / s2)[:2000]], np.float32)
    np.testing.assert_array_equal(erf, erf_ref[:2000])


def test_disabled_gives_the_numpy_paths(monkeypatch):
    monkeypatch.setattr(compiled, "ENABLED", False)
    c = 4
    k, _, _ = conv_kernel("Conv", [f32(1, c, 20, 20), f32(c, 1, 3, 3)], {"group": c, "pads": [1, 1, 1, 1]})
    assert k.path == "depthwise"
