"""NCHW8c kernel types: the pointwise GEMM (compiled/nchwc_gemm.py), the reorders (compiled/reorder.py),
and whole chains the layout-assignment pass keeps blocked (ops/cpu/conv_nchwc.py, ops/cpu/blocked.py),
against the NCHW kernels and onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.ops.cpu import conv_nchwc
from pooled_predictor.ops.cpu.compiled import epilogue
from pooled_predictor.ops.cpu.compiled import gemm as nchw_gemm
from pooled_predictor.ops.cpu.compiled.nchwc_gemm import (KC, channel_offsets, gemm_nchwc, gemm_nchwc_rows, pack_weights,
                                                           pixel_offsets)
from pooled_predictor.ops.cpu.compiled.reorder import from_blocked, to_blocked
from pooled_predictor.ops.layouts import TRANSFORM_OP, physical_shape, transform
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import run_ort

pytestmark = pytest.mark.usefixtures("lanes8")  # NCHW8c structures (the 16-lane ones: test_nchwc16.py)

rng = np.random.default_rng(12)
L = "NCHW8c"


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def blocked(x, layout=L):
    out = np.empty(physical_shape(x.shape, layout), np.float32)
    transform(x, "NCHW", layout, out)
    return out


def unblocked(x, shape, layout=L):
    out = np.empty(shape, np.float32)
    transform(x, layout, "NCHW", out)
    return out


@pytest.fixture(autouse=True)
def _winograd_from_the_nchw_minimums(nchw_winograd_minimums):
    """The 3x3 stride-1 convolutions here test the indirect and pointwise kinds against the NCHW kernels'
    bits: the Winograd kind takes them only from the NCHW path's channel minimums, as before it took
    every blocked one; its own tests are test_nchwc_winograd.py's."""


# K: one block, a KC chunk boundary crossed (and five KC_PROJECTION chunks for M = 32, 40); M: one 8-block
# (the 1-vector tile), 16s, 24 (the 3-vector tile), 16 + 16 and 16 + 24;
# P: every pixel-tile size 1..6 and several tiles
@pytest.mark.parametrize("k", [8, 24, KC + 8])
@pytest.mark.parametrize("m", [8, 16, 24, 32, 40])
@pytest.mark.parametrize("p", [1, 5, 6, 7, 13, 50])
@pytest.mark.parametrize("z, act", [(False, epilogue.NONE), (True, epilogue.CLIP), (False, epilogue.RELU)])
def test_pointwise_gemm_gives_the_nchw_gemms_bits(k, m, p, z, act):
    """The same multiply-add chains, bias, Z and activation as compiled/gemm.py: bit for bit."""
    w, x, b, zz = f32(m, k), f32(1, k, p, 1), f32(m), f32(1, m, p, 1)
    a0, a1 = np.float32(-0.5), np.float32(0.75)
    ref = np.empty((1, m, p, 1), np.float32)
    ws = np.empty(max(1, nchw_gemm.scratch_size(p)), np.float32)
    args = (nchw_gemm.pack_weights(w), x.reshape(-1), 0, nchw_gemm.row_offsets(k, p), ref.reshape(-1), 0, p, m, p, b,
            ws, act, a0, a1)
    if z:
        nchw_gemm.gemm2d_sum(*args, zz.reshape(-1))
    else:
        nchw_gemm.gemm2d(*args)
    xb, zb = blocked(x), blocked(zz)
    yb = np.full(physical_shape(ref.shape, L), np.nan, np.float32)
    gemm_nchwc(pack_weights(w), xb.reshape(-1), 0, channel_offsets(k, p), 8, yb.reshape(-1), 0, 8 * p, m, p, b,
               act, a0, a1, zb.reshape(-1), z)
    np.testing.assert_array_equal(unblocked(yb, ref.shape), ref)


@pytest.mark.parametrize("k, m, p", [(KC + 8, 2048, 49), (512, 1024, 30)])
def test_pointwise_gemm_over_few_pixels_in_one_block_gives_the_nchw_gemms_bits(k, m, p):
    """A large W over few pixels runs as one pixel block (nchwc_gemm._block_pixels): the same bits."""
    w, x, b = f32(m, k), f32(1, k, p, 1), f32(m)
    ref = np.empty((1, m, p, 1), np.float32)
    ws = np.empty(max(1, nchw_gemm.scratch_size(p)), np.float32)
    nchw_gemm.gemm2d(nchw_gemm.pack_weights(w), x.reshape(-1), 0, nchw_gemm.row_offsets(k, p), ref.reshape(-1), 0,
                     p, m, p, b, ws, epilogue.RELU, np.float32(0), np.float32(0))
    yb = np.full(physical_shape(ref.shape, L), np.nan, np.float32)
    gemm_nchwc(pack_weights(w), blocked(x).reshape(-1), 0, channel_offsets(k, p), 8, yb.reshape(-1), 0, 8 * p, m, p,
               b, epilogue.RELU, np.float32(0), np.float32(0), b, False)
    np.testing.assert_array_equal(unblocked(yb, ref.shape), ref)


# bands: one at a time (W panels fit a block of one band only), several to a group, all in one group
# with W read once (K large, M 512), K chunks crossed; every tile size in a band of 7 (6 + 1), tiles
# across bands starting at every offset; panels of 8, 16 and 24
@pytest.mark.parametrize("k, m, p, rows", [(24, 16, 7, 7), (KC + 8, 64, 7, 7), (600, 512, 7, 7), (16, 16, 160, 30),
                                           (8, 8, 3, 5), (16, 24, 13, 4), (2 * KC + 16, 40, 14, 14),
                                           (8, 512, 7, 20),  # groups of 13 bands and 7
                                           (32, 32, 28, 6), (16, 48, 40, 3)])  # 28 and 40 wide: gathered too
@pytest.mark.parametrize("z, act", [(False, epilogue.NONE), (True, epilogue.RELU)])
@pytest.mark.parametrize("gather", [False, True], ids=["per-band", "across-bands"])
def test_gemm_over_bands_gives_the_gemm_over_their_pixels_bits(k, m, p, rows, z, act, gather):
    """gemm_nchwc_rows over `rows` bands of p pixels laid end to end is gemm_nchwc over rows x p pixels
    (the indirect convolution's output rows), bit for bit, however the bands are grouped, with micro-tiles
    within bands or, given pixel offsets, across them."""
    n = rows * p
    w, x, b, zz = f32(m, k), f32(1, k, n, 1), f32(m), f32(1, m, n, 1)
    wp, xb, zb = pack_weights(w), blocked(x).reshape(-1), blocked(zz).reshape(-1)
    offs = channel_offsets(k, n)
    want = np.full(m * n, np.nan, np.float32)
    got = want.copy()
    gemm_nchwc(wp, xb, 0, offs, 8, want, 0, 8 * n, m, n, b, act, np.float32(0), np.float32(0), zb, z)
    px = pixel_offsets(p, rows, 8, 8 * p) if gather else np.zeros(0, np.int64)
    gemm_nchwc_rows(wp, xb, 0, offs, 8, 8 * p, got, 0, 8 * p, 8 * n, m, p, rows, b, act, np.float32(0),
                    np.float32(0), zb, z, px)
    np.testing.assert_array_equal(got, want)


def test_pack_refuses_output_channels_off_the_block():
    with pytest.raises(ValueError, match="multiple of 8"):
        pack_weights(f32(12, 8))


@pytest.mark.parametrize("shape", [(1, 8, 8, 8), (2, 19, 13, 11), (2, 16, 3, 5), (1, 24, 1, 1), (2, 5, 7),
                                   (1, 13, 9, 9), (2, 3, 17)])
def test_reorders_round_trip_and_match_numpy(shape):
    x = f32(*shape)
    n, c = shape[0], shape[1]
    p = int(np.prod(shape[2:]))
    got = np.full(physical_shape(shape, L), np.nan, np.float32)
    to_blocked(x.reshape(-1), got.reshape(-1), n, c, p, 8)
    ref = np.zeros(physical_shape(shape, L), np.float32)
    for cb in range(ref.shape[1]):  # the definition, block by block (padding channels zero)
        part = x[:, cb * 8:cb * 8 + 8]
        ref[:, cb, ..., :part.shape[1]] = np.moveaxis(part, 1, -1)
    np.testing.assert_array_equal(got, ref)
    back = np.full(shape, np.nan, np.float32)
    from_blocked(got.reshape(-1), back.reshape(-1), n, c, p, 8)
    np.testing.assert_array_equal(back, x)


# ---- chains kept blocked by the assignment pass ----------------------------------------
def _w(name, *shape):
    return numpy_helper.from_array(f32(*shape) * np.float32(0.3), name)


def _chain_model(c=16, h=9, w=7, n=2):
    """1x1 Conv -> Relu -> depthwise 3x3 -> 3x3 Conv of 2 groups (NCHW: no blocked kernel) (+ residual) ->
    squeeze-and-excitation (GAP, 1x1, HardSigmoid, Mul) -> ReduceMean branch (Sub) -> Concat with a blocked
    branch -> nearest Resize x2 -> Sigmoid -> 1x1 Conv."""
    inits = [_w("w1", 2 * c, c, 1, 1), _w("b1", 2 * c), _w("w2", c, c, 3, 3), _w("b2", c),
             _w("wd", 2 * c, 1, 3, 3), _w("bd", 2 * c),
             _w("w3", c, c, 1, 1), _w("w4", c, c, 1, 1), _w("b4", c), _w("w5", 8, 2 * c, 1, 1),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([], np.float32), "roi")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r0"]),
             helper.make_node("Conv", ["r0", "wd", "bd"], ["r1"], group=2 * c, pads=[1, 1, 1, 1]),  # depthwise
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=2),  # NCHW
             helper.make_node("Add", ["c2", "x"], ["s1"]),                  # -> FusedConv with Z
             helper.make_node("Relu", ["s1"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
             helper.make_node("Conv", ["g", "w3"], ["e1"]),
             helper.make_node("HardSigmoid", ["e1"], ["e2"]),
             helper.make_node("Mul", ["r2", "e2"], ["se"]),                 # broadcast over H, W
             helper.make_node("ReduceMean", ["se"], ["rm"], axes=[2, 3], keepdims=1),
             helper.make_node("Sub", ["rm", "se"], ["d"]),                 # the vector first: s - x
             helper.make_node("Conv", ["d", "w4", "b4"], ["c4"]),
             helper.make_node("Concat", ["c4", "se"], ["cat"], axis=1),
             helper.make_node("MaxPool", ["cat"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["mp", "roi", "scales"], ["up"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Sigmoid", ["up"], ["sg"]),
             helper.make_node("Conv", ["sg", "w5"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _program(model, passes):
    graph = load_onnx(model)
    if passes:
        graph = optimize(graph, "all")[0]
    return Program(graph)


def _model(name, nodes, inits, x_shape):
    """A one-input ("x"), one-output ("y") float32 opset-13 model."""
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _y_under_none_and_memory(model, x, passes):
    """y of Nets under Optimization.NONE and MEMORY, each with only the graph's input and output
    transformed; MEMORY's checked bit for bit against NONE's. Returns (MEMORY's y, its run list of
    (op_type, first input, first output))."""
    outs = {}
    for opt in (Optimization.NONE, Optimization.MEMORY):
        net = Net(_program(model, passes), optimization=opt)
        net.forward(x)
        ran = [(node.op_type, node.inputs[0], node.outputs[0]) for node in net.layout.run_nodes]
        assert sum(op == TRANSFORM_OP for op, _, _ in ran) == 2, ran  # only the graph's input and output
        outs[opt] = np.array(net.blob_by_name("y"))
    np.testing.assert_array_equal(outs[Optimization.MEMORY], outs[Optimization.NONE])
    return outs[Optimization.MEMORY], ran


def _matches_ort_and_nchw_bits(net, model, x, passes, monkeypatch, atol=2e-5):
    """net's "y": onnxruntime's values, and bit for bit the y of the same model with every kernel in NCHW."""
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(net.blob_by_name("y"), ref, rtol=1e-5, atol=atol * np.abs(ref).max())
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    plain = Net(_program(model, passes))
    plain.forward(x)
    np.testing.assert_array_equal(net.blob_by_name("y"), plain.blob_by_name("y"))
    return plain


@pytest.mark.parametrize("n, passes", [(1, True), (2, True), (2, False)])
@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
def test_chain_stays_blocked_and_matches_onnxruntime(n, passes, optimization):
    model = _chain_model(n=n)
    x = f32(n, 16, 9, 7)
    net = Net(_program(model, passes), optimization=optimization)
    net.forward(x)
    ran = [(node.op_type, any("@" in o for o in node.outputs)) for node in net.layout.run_nodes]
    transforms = [op for op, _ in ran if op == TRANSFORM_OP]
    assert len(transforms) == 4, ran  # the graph input in, around the 3x3 2-group conv, the graph output back
    blocked_ops = {op for op, b in ran if b and op != TRANSFORM_OP}
    fused = {"FusedConv"} if passes else {"Add", "Relu"}
    expected = {"GlobalAveragePool", "Mul", "ReduceMean", "Sub", "Concat", "MaxPool", "Resize", "Sigmoid", "Conv"}
    if optimization is Optimization.MEMORY and n == 1:  # its inputs written in place (test_concat_in_place.py)
        expected.discard("Concat")
        assert "Concat" not in {op for op, _ in ran}
        (cat,) = [st.node.outputs[0] for st in net.program.steps if st.node.op_type == "Concat"]
        assert f"{cat}@NCHW8c" in net.layout.blobs  # stored blocked, its inputs inside it
    assert expected | fused <= blocked_ops, ran
    ref = run_ort(model, {"x": x})[0]
    got = net.blob_by_name("y")
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    if optimization is Optimization.MEMORY:
        none = Net(_program(model, passes), optimization=Optimization.NONE)
        none.forward(x)
        np.testing.assert_array_equal(got, none.blob_by_name("y"))  # MEMORY bit-identical to NONE
        plan = net.memory_plan
        assert plan.arena_bytes <= plan.lower_bound_bytes + 64 * len(ran)


def test_off_block_channels_and_disabled_switch_keep_nchw(monkeypatch):
    model = _chain_model(c=10)  # 10 and 20 channels: no value the chain could block
    x = f32(2, 10, 9, 7)
    net = Net(Program(load_onnx(model)))
    net.forward(x)
    assert not any("@" in o for node in net.layout.run_nodes for o in node.outputs)
    np.testing.assert_allclose(net.blob_by_name("y"), run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    model = _chain_model()
    net = Net(Program(load_onnx(model)))
    net.forward(f32(2, 16, 9, 7))
    assert not any(node.op_type == TRANSFORM_OP for node in net.layout.run_nodes)


@pytest.mark.parametrize("pixels", [1, 7, 8, 9, 63, 255, 256, 257, 600, 8 * 33 + 5])
def test_pixel_mean_gives_the_nchw_row_sums_bits(pixels):
    from pooled_predictor.ops.cpu.compiled.blocked import pixel_mean
    from pooled_predictor.ops.cpu.compiled.rowreduce import sum_rows

    x = f32(2, 16, pixels, 1) * np.float32(10) + np.float32(3)
    ref = np.empty(32, np.float32)
    sum_rows(x.reshape(-1), ref, 32, pixels, 1.0 / pixels)
    got = np.empty(32, np.float32)
    pixel_mean(blocked(x).reshape(-1), got, 4, pixels, 1.0 / pixels, np.empty(128, np.float32),
               np.empty(8, np.float64))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("passes", [False, True])
def test_blocked_chain_gives_the_nchw_kernels_bits(passes, monkeypatch):
    """Every NCHW8c kernel does the NCHW kernel's float32 operations in its order: the layout
    the assignment pass picks never changes a result."""
    model = _chain_model(n=2)
    x = f32(2, 16, 9, 7)
    blocked_net = Net(_program(model, passes))
    blocked_net.forward(x)
    assert any(node.op_type == TRANSFORM_OP for node in blocked_net.layout.run_nodes)
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    plain = Net(_program(model, passes))
    plain.forward(x)
    assert not any(node.op_type == TRANSFORM_OP for node in plain.layout.run_nodes)
    np.testing.assert_array_equal(blocked_net.blob_by_name("y"), plain.blob_by_name("y"))


@pytest.mark.parametrize("kernel, strides, pads, dilations, ceil", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0), ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    ((3, 2), (1, 2), (0, 1, 2, 0), (1, 1), 0), ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 0),
    ((5, 5), (3, 3), (4, 4, 4, 4), (1, 1), 1), ((1, 1), (2, 1), (0, 0, 0, 0), (1, 1), 0)])
@pytest.mark.parametrize("hw", [(7, 9), (1, 2)])
def test_blocked_maxpool_matches_onnxruntime(kernel, strides, pads, dilations, ceil, hw):
    """MaxPool between two 1x1 convs runs in NCHW8c: every window geometry, windows all in the padding
    (lowest float32, as onnxruntime), and the NCHW kernel's values bit for bit."""
    c = 16
    inits = [_w("w1", c, c, 1, 1), _w("w2", 8, c, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("MaxPool", ["a"], ["m"], kernel_shape=list(kernel), strides=list(strides),
                              pads=list(pads), dilations=list(dilations), ceil_mode=ceil),
             helper.make_node("Conv", ["m", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, *hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = f32(2, c, *hw)
    net = Net(Program(load_onnx(model)))
    net.forward(x)
    assert any(n.op_type == "MaxPool" and n.outputs[0].endswith("@" + L) for n in net.layout.run_nodes)
    np.testing.assert_allclose(net.blob_by_name("y"), run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def _scan_maxpool(x, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n):
    """The reference of compiled/blocked.py's maxpool: x (rows, H, W, B); each window's input taps in row-major
    order from -inf, a tap taken when greater or NaN (the first of equal maxima, the last NaN); float32's lowest
    where a window has no tap."""
    rows, h, w, b = x.shape
    y = np.empty((rows, oh_n, ow_n, b), np.float32)
    for oh in range(oh_n):
        for ow in range(ow_n):
            m = np.full((rows, b), -np.inf, np.float32)
            taps = 0
            for i in range(kh):
                for j in range(kw):
                    r, c = oh * sh - ph + i * dh, ow * sw - pw + j * dw
                    if 0 <= r < h and 0 <= c < w:
                        v = x[:, r, c]
                        m = np.where((v > m) | np.isnan(v), v, m)
                        taps += 1
            y[:, oh, ow] = m if taps else np.finfo(np.float32).min
    return y


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("nans", [True, False])
@pytest.mark.parametrize("kernel, strides, dilations, pads, hw", [
    ((3, 3), (2, 2), (1, 1), (1, 1), (9, 13)), ((3, 3), (1, 1), (1, 1), (1, 1), (9, 13)),
    ((2, 2), (2, 2), (1, 1), (0, 0), (9, 13)), ((1, 4), (1, 3), (1, 1), (0, 2), (9, 13)),
    ((2, 5), (1, 2), (1, 1), (1, 3), (9, 13)), ((3, 7), (2, 1), (2, 1), (2, 3), (9, 13)),
    ((3, 3), (3, 3), (2, 2), (3, 3), (9, 13)), ((2, 3), (1, 2), (3, 1), (1, 1), (2, 13)),
    ((5, 5), (1, 1), (1, 2), (4, 4), (9, 13)), ((3, 1), (1, 1), (1, 1), (1, 0), (9, 13))])
def test_blocked_maxpool_kernel_is_one_ordered_scan(block, nans, kernel, strides, dilations, pads, hw):
    """compiled/blocked.py's maxpool at both widths (windows of 1-4 columns unrolled as trees, wider ones a
    loop; runs of output columns at the borders and inside; without NaN in X, where windows overlap, one
    vmaxps a tap and at stride 1 each input row's columns first) gives the bits of one row-major scan of
    each window: NaNs of several payloads (the last one wins), ties of -0.0 and +0.0 (the first wins),
    -inf, and windows with no tap."""
    from pooled_predictor.ops.cpu.blocked import kernels

    (kh, kw), (sh, sw), (dh, dw), (ph, pw), (h, w) = kernel, strides, dilations, pads, hw
    rows = 3
    x = f32(rows, h, w, block)
    x[x > 1.5] = 0.0
    x[x < -1.5] = -0.0
    x[x > 1.2] = np.inf
    x[0, 1:4, 2:5] = np.inf * -1
    bits = x.view(np.uint32)
    for k, (r, i, j) in enumerate([(0, 2, 3), (1, 4, 4), (1, 4, 5), (2, 0, 12), (2, 8, 0)] if nans else []):
        i = min(i, h - 1)
        bits[r, i, j, k % block] = 0x7FC00001 + k  # quiet NaNs, told apart by their payloads
        bits[r, i, j, (k + 5) % block] = 0xFFC00010 + k
    oh_n = (h + 2 * ph - ((kh - 1) * dh + 1)) // sh + 1
    ow_n = (w + 2 * pw - ((kw - 1) * dw + 1)) // sw + 1
    y = np.empty(rows * oh_n * ow_n * block, np.float32)
    kernels(block).maxpool(x.reshape(-1), y, rows, h, w, oh_n, ow_n, kh, kw, sh, sw, dh, dw, ph, pw,
                           np.float32(np.finfo(np.float32).min))
    expected = _scan_maxpool(x, kh, kw, sh, sw, dh, dw, ph, pw, oh_n, ow_n)
    np.testing.assert_array_equal(y.view(np.uint32), expected.reshape(-1).view(np.uint32))
    assert (y == np.finfo(np.float32).min).all() if h == 2 else np.isnan(y).any() == nans


@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("n, stride", [(1, 1), (2, 2)])
def test_stem_convs_read_nchw_and_write_blocked(passes, n, stride, monkeypatch):
    """A chain's first convolutions (3 input channels) read NCHW and write NCHW8c (no reorder of their
    output), one with a residual sum Z fused: onnxruntime's values, and the NCHW kernels' bits."""
    w_in = 100 * stride
    inits = [_w("wa", 16, 3, 3, 3), _w("ba", 16), _w("wb", 16, 16, 1, 1), _w("wc", 16, 3, 3, 3), _w("bc", 16),
             _w("wy", 8, 16, 1, 1)]
    conv = dict(pads=[1, 1, 1, 1], strides=[stride, stride])
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], **conv),
             helper.make_node("Conv", ["a", "wb"], ["b"]),
             helper.make_node("Conv", ["x", "wc", "bc"], ["c"], **conv),
             helper.make_node("Add", ["c", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, 9, w_in])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = f32(n, 3, 9, w_in)
    net = Net(_program(model, passes))
    net.forward(x)
    ran = [(node.op_type, node.inputs[0], node.outputs[0]) for node in net.layout.run_nodes]
    firsts = [r for r in ran if r[1] == "x"]
    assert len(firsts) == 2 and all(o.endswith("@" + L) for _, _, o in firsts), ran  # x read as NCHW
    assert sum(op == TRANSFORM_OP for op, _, _ in ran) == 1, ran  # only the graph output back
    _matches_ort_and_nchw_bits(net, model, x, passes, monkeypatch, atol=1e-5)


# (C, M, kernel, strides, pads, dilations, N, H, W): outputs wide enough (conv.INDIRECT_MIN_WIDTH) that
# the NCHW Conv takes its indirect GEMM: strides 1 and 2 (det's stem), 2x2 with one-sided pads,
# a dilated 3x3, mixed strides and pads, several images, an M with a 24-channel panel; strided KxK convs
# from conv.INDIRECT_STRIDED_MIN_WIDTH
INDIRECT_CASES = [(16, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, 5, 50),
                  (32, 24, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, 9, 100),
                  (8, 16, (2, 2), (1, 1), (0, 0, 1, 1), (1, 1), 1, 4, 60),
                  (16, 8, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 2, 6, 52),
                  (24, 40, (3, 3), (2, 1), (1, 0, 1, 2), (1, 1), 1, 7, 64),
                  (16, 32, (5, 5), (2, 2), (2, 2, 1, 1), (1, 1), 2, 10, 101),
                  (16, 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, 8, 40)]  # strided: from 14 wide


@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("c, m, kernel, strides, pads, dilations, n, h, w", INDIRECT_CASES)
def test_indirect_convs_run_blocked_with_the_nchw_kernels_bits(passes, c, m, kernel, strides, pads, dilations, n,
                                                               h, w, monkeypatch):
    """A KxK conv the NCHW kernel runs as an indirect GEMM, between two 1x1 convs, runs in NCHW8c on a
    zero-padded blocked copy of X (no reorder around it): onnxruntime's values, the NCHW kernels' bits."""
    inits = [_w("wa", c, c, 1, 1), _w("wb", m, c, *kernel), _w("bb", m), _w("wy", 8, m, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"], strides=list(strides), pads=list(pads),
                              dilations=list(dilations)),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    model = _model("indirect", nodes, inits, (n, c, h, w))
    x = f32(n, c, h, w)
    net = Net(_program(model, passes))
    net.forward(x)
    ran = [(node.op_type, node.inputs[0], node.outputs[0]) for node in net.layout.run_nodes]
    target = [r for r in ran if r[1].startswith("a")]
    assert len(target) == 1 and target[0][1] == "a@" + L and target[0][2].endswith("@" + L), ran
    assert sum(op == TRANSFORM_OP for op, _, _ in ran) == 2, ran  # only the graph's input and output
    plain = _matches_ort_and_nchw_bits(net, model, x, passes, monkeypatch)
    assert [nd for nd in plain.layout.run_nodes if nd.inputs[0] == "a"], "the NCHW path runs the same node"


@pytest.mark.parametrize("act", ["Relu", "Sigmoid"])
def test_indirect_conv_adds_its_sum_input_in_the_kernel(act, monkeypatch):
    """FusedConv(indirect 3x3, Z) in NCHW8c: Z added to each output block after the bias, then the activation
    (in the kernel for Relu, after it for Sigmoid): the NCHW kernels' bits."""
    c, m, n, h, w = 16, 24, 2, 5, 49
    inits = [_w("wa", c, c, 1, 1), _w("wz", m, c, 1, 1), _w("wb", m, c, 3, 3), _w("bb", m), _w("wy", 8, m, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["x", "wz"], ["z"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "z"], ["s"]),
             helper.make_node(act, ["s"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    model = _model("sum", nodes, inits, (n, c, h, w))
    x = f32(n, c, h, w)
    net = Net(_program(model, True))
    net.forward(x)
    fused = [nd for nd in net.layout.run_nodes if nd.op_type == "FusedConv" and nd.inputs[0].startswith("a")]
    assert len(fused) == 1 and len(fused[0].inputs) == 4 and fused[0].outputs[0].endswith("@" + L), \
        [(nd.op_type, nd.inputs, nd.outputs) for nd in net.layout.run_nodes]
    _matches_ort_and_nchw_bits(net, model, x, True, monkeypatch)


def test_blocked_intermediates_read_by_their_model_names_under_none(monkeypatch):
    """Optimization.NONE keeps every blob readable as the model names it, in the model's layout: a value the
    chain holds only in NCHW8c comes back as an NCHW copy, equal to the NCHW-only Net's; blob_names lists
    no typed (v@NCHW8c) names."""
    model = _chain_model(n=2)
    x = f32(2, 16, 9, 7)
    net = Net(_program(model, True), optimization=Optimization.NONE)
    net.forward(x)
    blocked_only = [n for n in net.layout.typed if n not in net.layout.blobs]
    assert blocked_only, "the chain holds some values only in NCHW8c"
    names = net.blob_names
    assert not any("@" in n for n in names) and set(blocked_only) <= set(names)
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    plain = Net(_program(model, True), optimization=Optimization.NONE)
    plain.forward(x)
    for n in blocked_only:
        got = net.blob_by_name(n)
        assert got.shape == plain.blob_by_name(n).shape
        np.testing.assert_array_equal(got, plain.blob_by_name(n))
    assert set(names) == set(plain.blob_names)


@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("c, m, strides, n, h, w", [(16, 32, (2, 2), 1, 14, 14), (24, 8, (2, 1), 2, 9, 13),
                                                    (8, 24, (3, 3), 2, 10, 11), (32, 16, (1, 2), 1, 5, 7)])
def test_strided_pointwise_convs_run_blocked(passes, c, m, strides, n, h, w):
    """A strided 1x1 conv (ResNet's downsampling: Z of the block's last conv) between blocked convs runs as
    the pointwise kind on X[:, ::SH, ::SW] copied out: onnxruntime's values, the bits of the same Net under
    Optimization.MEMORY and NONE."""
    inits = [_w("wa", c, c, 1, 1), _w("wd", m, c, 1, 1), _w("bd", m), _w("wm", m, c, 1, 1), _w("wy", 8, m, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["a", "wd", "bd"], ["d"], strides=list(strides)),
             helper.make_node("Conv", ["a", "wm"], ["mm"], strides=list(strides)),
             helper.make_node("Add", ["mm", "d"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    model = _model("strided", nodes, inits, (n, c, h, w))
    x = f32(n, c, h, w)
    y, ran = _y_under_none_and_memory(model, x, passes)
    assert all(o.endswith("@" + L) for op, i, o in ran if i.startswith("a")), ran  # both strided 1x1s blocked
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("c, m, kernel, strides, pads, n, h, w", [
    (32, 96, (5, 5), (1, 1), (2, 2, 2, 2), 2, 14, 14),  # GoogLeNet's 5x5s
    (16, 48, (5, 5), (1, 1), (2, 2, 2, 2), 1, 7, 7),
    (24, 16, (3, 3), (2, 2), (1, 1, 1, 1), 2, 14, 13),  # ResNet-50's 3x3 stride 2 at 7x7
    (8, 8, (3, 1), (1, 1), (1, 0, 1, 0), 1, 5, 3)])
def test_narrow_kxk_convs_run_as_the_indirect_kind(passes, c, m, kernel, strides, pads, n, h, w, monkeypatch):
    """A group-1 KxK conv whose output is too narrow for the NCHW indirect GEMM (the NCHW Conv copies columns
    for a GEMM there) still runs as the NCHW8c indirect kind: onnxruntime's values, MEMORY's bits NONE's."""
    from pooled_predictor.ops.cpu import conv

    seen = []
    init = conv_nchwc._BlockedConv.__init__
    monkeypatch.setattr(conv_nchwc._BlockedConv, "__init__", lambda self, ctx: (init(self, ctx), seen.append(self.kind)))
    inits = [_w("wa", c, c, 1, 1), _w("wb", m, c, *kernel), _w("bb", m), _w("wy", 8, m, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"], strides=list(strides), pads=list(pads)),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    model = _model("narrow", nodes, inits, (n, c, h, w))
    x = f32(n, c, h, w)
    y, _ = _y_under_none_and_memory(model, x, passes)
    assert "indirect" in seen, seen
    paths = []  # the NCHW Conv would copy columns for a GEMM here, not take its indirect GEMM
    choose = conv.Conv._choose_path
    monkeypatch.setattr(conv.Conv, "_choose_path", lambda self, ctx: paths.append(choose(self, ctx)) or paths[-1])
    monkeypatch.setattr(conv_nchwc, "ENABLED", False)
    Net(_program(model, passes)).forward(x)
    assert paths and "indirect" not in paths, paths
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())
