"""compiled/gemm.py: the packed-weight GEMM with fused bias and activation, directly (every tile shape,
K chunks, column tails, row pitches) and as the pointwise Conv path against onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.ops.cpu import conv as conv_module
from pooled_predictor.ops.cpu.compiled import epilogue
from pooled_predictor.ops.cpu.compiled.gemm import KC, MR, gemm2d, gemm_bias_act, pack_weights, scratch_size
from tests.onnx_helpers import check_node
from tests.ops.test_conv import conv_kernel

rng = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _ref(w, x, b):
    """W @ x + b in float64, and the bound on float32 GEMM error: K u sum |W| |x| (plus |b|)."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    exact = w64 @ x64 + b.astype(np.float64)[:, None]
    bound = (w.shape[1] + 2) * 2.0 ** -24 * (np.abs(w64) @ np.abs(x64) + np.abs(b.astype(np.float64))[:, None])
    return exact, bound


# M: every row-tile size 1..MR and several tiles; K: one step, a chunk boundary (KC) and past it;
# P: column tails 1..7 past a multiple of 8, an 8-wide strip, 16-wide strips, several column blocks
@pytest.mark.parametrize("m", [1, 5, MR, 13, 100])
@pytest.mark.parametrize("k", [1, 7, KC, KC + 3])
@pytest.mark.parametrize("p", [1, 7, 8, 13, 24, 37, 1000])
def test_gemm_within_the_float32_bound(m, k, p):
    w, x, b = f32(m, k), f32(k, p), f32(m)
    y = np.full((1, m, p), np.nan, np.float32)
    ws = np.empty(max(1, scratch_size(p)), np.float32)
    gemm_bias_act(pack_weights(w), x[None], y, np.ascontiguousarray(b), ws)
    exact, bound = _ref(w, x, b)
    assert np.all(np.abs(y[0] - exact) <= bound + 1e-30)


def test_offset_table_row_pitch_and_batch():
    """X rows given by an offset table (here: rows of a larger array, in reverse order), Y rows
    with a pitch, several images: every element right, nothing else written."""
    m, k, p = 11, 20, 29
    w, b = f32(m, k), f32(m)
    big = f32(3, k + 2, p + 9)
    xf = big.reshape(-1)
    offs = ((k - np.arange(k)) * (p + 9) + 4).astype(np.int64)  # X[r] = big[n, k - r, 4:4 + p]
    offs.flags.writeable = False
    wp, ws = pack_weights(w), np.empty(max(1, scratch_size(p)), np.float32)
    yf = np.full(3 * m * (p + 5), -7.0, np.float32)
    for n in range(3):  # Y rows p + 5 apart in a flat array: the 5 extra per row stay untouched
        gemm2d(wp, xf, n * (k + 2) * (p + 9), offs, yf, n * m * (p + 5), p + 5, m, p, b, ws, 0,
               np.float32(0), np.float32(0))
    y = yf.reshape(3, m, p + 5)
    assert np.all(y[:, :, p:] == -7.0)
    for n in range(3):
        exact, bound = _ref(w, np.ascontiguousarray(big[n, k:0:-1, 4:4 + p]), b)
        assert np.all(np.abs(y[n, :, :p] - exact) <= bound)


@pytest.mark.parametrize("code,params", [(epilogue.RELU, ()), (epilogue.CLIP, (0.0, 6.0)),
                                         (epilogue.HARD_SIGMOID, (0.2, 0.5)), (epilogue.HARD_SWISH, ()),
                                         (epilogue.LEAKY_RELU, (0.1,))])
def test_fused_activation_is_the_epilogue_on_the_gemm(code, params):
    m, k, p = 9, 30, 45
    w, x, b = f32(m, k), f32(k, p, scale=3.0), f32(m)
    wp, ws = pack_weights(w), np.empty(max(1, scratch_size(p)), np.float32)
    plain, fused = np.empty((1, m, p), np.float32), np.empty((1, m, p), np.float32)
    gemm_bias_act(wp, x[None], plain, b, ws)
    gemm_bias_act(wp, x[None], fused, b, ws, code, *params)
    epilogue.activate_inplace(plain.reshape(-1), code, *(list(params) + [0.0, 0.0])[:2])
    np.testing.assert_array_equal(fused, plain)  # the same bits as the GEMM, then the activation pass


def test_fused_conv_applies_the_activation_inside_the_gemm():
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.fused import FusedConv
    from pooled_predictor.ops.shapes import get_rule

    inputs = [f32(1, 8, 5, 5), f32(4, 8, 1, 1), f32(4)]
    attrs = {"activation": "Clip", "activation_params": [0.0, 6.0]}
    node = Node("FusedConv", ["x", "w", "b"], ["y"], attrs, "pooled_predictor", "fc")
    ctx = OpContext(node, 1, [a.shape for a in inputs], [a.dtype for a in inputs], [None, inputs[1], inputs[2]],
                    "cpu", None)
    (shape, dtype), = get_rule("FusedConv", "pooled_predictor")(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    k = FusedConv(ctx, **attrs)
    assert k.conv.path == "pointwise_compiled" and k.act is None  # no pass of its own


def test_bad_arguments_raise():
    w, x = f32(4, 3), f32(1, 3, 10)
    ws = np.empty(max(1, scratch_size(10)), np.float32)
    with pytest.raises(ValueError):
        gemm_bias_act(pack_weights(w), x, np.empty((1, 5, 10), np.float32), np.zeros(4, np.float32), ws)
    with pytest.raises(ValueError):
        gemm_bias_act(pack_weights(w), x.astype(np.float64), np.empty((1, 4, 10), np.float32),
                      np.zeros(4, np.float32), ws)
    with pytest.raises(ValueError):
        gemm_bias_act(pack_weights(w), x, np.empty((1, 4, 10), np.float32), np.zeros(4, np.float32),
                      np.empty(1, np.float32))


# 1x1 Conv through the compiled path vs onnxruntime: batch, odd channel counts, 1-D / 2-D / 3-D, no bias
@pytest.mark.parametrize("xs,m", [((1, 16, 12, 12), 24), ((2, 7, 5, 9), 13), ((3, 33, 17), 6),
                                  ((1, 5, 3, 4, 6), 8), ((2, 300, 7, 7), 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_pointwise_conv_against_onnxruntime(xs, m, bias):
    c, rank = xs[1], len(xs) - 2
    inputs = [f32(*xs), f32(m, c, *(1,) * rank)] + ([f32(m)] if bias else [])
    k, _, _ = conv_kernel("Conv", inputs, {}, static=(1, 2))
    assert k.path == "pointwise_compiled"
    check_node("Conv", inputs, {}, opset=13, static=(1, 2))


def test_pointwise_numpy_path_when_disabled_or_weights_computed(monkeypatch):
    inputs = [f32(1, 8, 6, 6), f32(4, 8, 1, 1), f32(4)]
    assert conv_kernel("Conv", inputs, {}, static=())[0].path == "pointwise"  # W at run time
    assert conv_kernel("Conv", [a.astype(np.float64) for a in inputs], {})[0].path == "pointwise"
    assert conv_kernel("Conv", [inputs[0], f32(4, 4, 1, 1), inputs[2]], {"group": 2})[0].path == "pointwise"
    monkeypatch.setattr(conv_module, "POINTWISE_COMPILED", False)
    assert conv_kernel("Conv", inputs, {})[0].path == "pointwise"


def _check_conv_act(kernel, conv_attrs, act, act_attrs, xs):
    """Conv (static W, B) + activation: one FusedConv, within 1e-5 of onnxruntime, and bit-identical
    to the unfused graph (the activation ran in the GEMM's epilogue with the numpy kernel's bits)."""
    import onnxruntime as ort

    c, m = xs[1], kernel[0]
    inits = [numpy_helper.from_array(f32(*kernel), "w"), numpy_helper.from_array(f32(m), "b")]
    act_in = ["y"]
    if act == "Clip":
        inits += [numpy_helper.from_array(np.float32(0.0), "lo"), numpy_helper.from_array(np.float32(6.0), "hi")]
        act_in += ["lo", "hi"]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], **conv_attrs),
             helper.make_node(act, act_in, ["z"], **act_attrs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xs))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    x = f32(*xs, scale=2.0)
    p = Predictor(model)
    assert [st.node.op_type for st in p.program.steps] == ["FusedConv"]
    ours = p.run(None, {"x": x})[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    np.testing.assert_array_equal(ours, Predictor(model, graph_optimization_level="none").run(None, {"x": x})[0])
    assert c == kernel[1]


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("Clip", {}), ("HardSwish", {}),
                                       ("LeakyRelu", {"alpha": 0.2})])
def test_activation_fused_into_pointwise(act, attrs):
    _check_conv_act((20, 12, 1, 1), {}, act, attrs, (2, 12, 9, 11))


# The indirect-GEMM Conv path (conv_indirect.py) vs onnxruntime: kernel sizes, strides (phase
# planes), dilations, asymmetric and auto pads, groups, batch, odd sizes, with and without bias.
INDIRECT = [((2, 5, 23, 29), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
            ((1, 3, 31, 37), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
            ((1, 6, 20, 33), (4, 6, 2, 2), {"auto_pad": "SAME_UPPER"}),
            ((1, 6, 20, 33), (4, 6, 2, 2), {"auto_pad": "SAME_LOWER"}),
            ((2, 4, 17, 40), (9, 4, 5, 5), {"pads": [2, 1, 0, 3], "strides": [1, 3]}),
            ((1, 8, 25, 30), (6, 8, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
            ((1, 8, 25, 30), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
            ((1, 3, 40, 41), (5, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),
            ((1, 2, 19, 27), (3, 2, 4, 2), {"strides": [3, 2], "dilations": [1, 3]}),
            ((2, 9, 11, 64), (40, 9, 3, 3), {"pads": [0, 1, 0, 1]}),
            ((2, 8, 9, 32), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "group": 2})]  # row by row: OW % 16 == 0


@pytest.mark.parametrize("xs,ws,attrs", INDIRECT, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None)
@pytest.mark.parametrize("bias", [True, False])
def test_indirect_conv_against_onnxruntime(xs, ws, attrs, bias, monkeypatch):
    monkeypatch.setattr(conv_module, "INDIRECT_MIN_WIDTH", 1)  # every shape here, whatever is faster
    monkeypatch.setattr(conv_module, "INDIRECT_STRIDED_MIN_WIDTH", 1)
    inputs = [f32(*xs), f32(*ws)] + ([f32(ws[0])] if bias else [])
    k, _, _ = conv_kernel("Conv", inputs, attrs, static=(1, 2))
    assert k.path == "indirect"
    check_node("Conv", inputs, attrs, opset=13, static=(1, 2))


def test_indirect_runs_row_by_row_where_output_rows_are_multiples_of_16():
    k, _, _ = conv_kernel("Conv", [f32(1, 4, 12, 48), f32(8, 4, 3, 3)], {"pads": [1, 1, 1, 1]}, static=(1,))
    assert k.path == "indirect" and k.indirect.rowwise and k.indirect.y_ref is None  # no cropping copy
    k, _, _ = conv_kernel("Conv", [f32(1, 4, 12, 50), f32(8, 4, 3, 3)], {"pads": [1, 1, 1, 1]}, static=(1,))
    assert k.path == "indirect" and k.indirect.crop and not k.indirect.rowwise


def test_indirect_is_chosen_where_it_measured_faster():
    det_like = [f32(1, 64, 30, 40), f32(16, 64, 3, 3)]  # few output channels: skinny GEMM
    assert conv_kernel("Conv", det_like, {"pads": [1, 1, 1, 1]})[0].path == "indirect"
    wide = [f32(1, 8, 56, 56), f32(32, 8, 3, 3)]
    assert conv_kernel("Conv", wide, {"pads": [1, 1, 1, 1]})[0].path == "indirect"
    small = [f32(1, 64, 7, 7), f32(64, 64, 3, 3)]
    assert conv_kernel("Conv", small, {"pads": [1, 1, 1, 1]})[0].path == "winograd"
    depthwise = [f32(1, 8, 56, 56), f32(8, 1, 3, 3)]
    assert conv_kernel("Conv", depthwise, {"pads": [1, 1, 1, 1], "group": 8})[0].path != "indirect"
    s2 = {"pads": [1, 1, 1, 1], "strides": [2, 2]}  # strided KxK: from 14 wide (ResNet-50's 3x3 s2 convs)
    assert conv_kernel("Conv", [f32(1, 64, 28, 28), f32(64, 64, 3, 3)], s2)[0].path == "indirect"
    assert conv_kernel("Conv", [f32(1, 64, 14, 14), f32(64, 64, 3, 3)], s2)[0].path != "indirect"
    assert conv_kernel("Conv", [f32(1, 64, 28, 28), f32(64, 64, 1, 1)], {"strides": [2, 2]})[0].path != "indirect"


@pytest.mark.parametrize("act", ["Relu", "HardSigmoid"])
def test_activation_fused_into_indirect_conv(act):
    _check_conv_act((10, 6, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, act, {}, (2, 6, 33, 40))


def test_packed_weights_are_shared_by_every_net():
    """Each thread's Net builds its own kernels: the packed copy of a weight is made once."""
    w, b = f32(16, 8, 1, 1), f32(16)
    k1 = conv_kernel("Conv", [f32(1, 8, 5, 5), w, b], {})[0]
    k2 = conv_kernel("Conv", [f32(2, 8, 7, 3), w, b], {})[0]
    assert k1.path == k2.path == "pointwise_compiled" and k1.wp is k2.wp
    w3 = f32(8, 4, 3, 3)
    k3 = conv_kernel("Conv", [f32(1, 4, 60, 60), w3], {"pads": [1, 1, 1, 1]}, static=(1,))[0]
    k4 = conv_kernel("Conv", [f32(1, 4, 60, 60), w3], {"pads": [1, 1, 1, 1]}, static=(1,))[0]
    assert k3.path == "indirect" and k3.indirect.wp is k4.indirect.wp
