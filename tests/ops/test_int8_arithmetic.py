"""ops/int8_arithmetic.py: onnxruntime's u8 x s8 arithmetic on this host, bit for bit, and "exact".

On a host without VNNI (this one: AVX2), onnxruntime's MLAS sums two adjacent u8 x s8
products in int16 with saturation (vpmaddubsw) before the int32 sum; the inputs here are
crafted so that many pairs saturate (x near 255, |w| near 128, pair signs alike), and the
tests first check that they do (onnxruntime's output differs from the exact sum's). With
VNNI, onnxruntime is exact and so is our "onnxruntime" arithmetic: the same comparisons hold.
"""

import numpy as np
import pytest

from pooled_predictor.ops import int8_arithmetic
from pooled_predictor.ops.cpu.compiled import qgemm
from tests.onnx_helpers import make_node_model, run_ort, run_ours, type_outputs
from tests.ops.test_compiled_int8 import _reference

rng = np.random.default_rng(3333)


def run_qgemm2d_sat(module, w, x, b, mult, zp, y_type, slack=64):
    """Y (m * p,) of `module`'s qgemm2d_sat (or _f32) for W (m, k) int8 and X (k, p) uint8, X read from a
    padded flat buffer (`slack` bytes past X) through quad offsets, as QLinearConv lays it out."""
    (m, k), p = w.shape, x.shape[1]
    xf = np.zeros(k * p + slack, np.uint8)
    xf[:k * p] = x.reshape(-1)
    offs = qgemm.quad_offsets(np.arange(k) * p)
    y = np.zeros(m * p, y_type)
    ws = np.zeros(qgemm.MRS * qgemm.NP, y_type)
    xq = np.zeros(qgemm.packed_bytes(offs.size), np.uint8)
    f = module.qgemm2d_sat_f32 if y_type == np.float32 else module.qgemm2d_sat
    f(qgemm.pack_quads(w), xf, 0, offs, y, 0, p, m, p, b, mult, zp, ws, qgemm.ONES, xq)
    return y


def _sat_pairs_reference(w, x):
    """sum_j saturate_int16(w[:, 2j] x[2j] + w[:, 2j+1] x[2j+1]) in int64: w (M, K), x (K, P)."""
    k = w.shape[1]
    wi = np.pad(w.astype(np.int64), ((0, 0), (0, k % 2)))
    xi = np.pad(x.astype(np.int64), ((0, k % 2), (0, 0)))
    pairs = wi[:, 0::2, None] * xi[None, 0::2] + wi[:, 1::2, None] * xi[None, 1::2]
    return np.clip(pairs, -32768, 32767).sum(axis=1)


def _saturating_weights(shape):
    """int8 weights where most adjacent pairs (along the last axis and the channel axis) share a sign
    and have |w| > 90, some rows full range."""
    w = rng.integers(90, 128, shape)
    sign = np.where(rng.random(shape[:1] + (1,) * (len(shape) - 1)) < 0.5, -1, 1)
    w = w * sign
    w[::4] = rng.integers(-128, 128, w[::4].shape)
    return np.clip(w, -128, 127).astype(np.int8)


@pytest.mark.parametrize("m,k,p", [(1, 1, 16), (6, 4, 16), (7, 9, 33), (13, 27, 50), (20, 147, 200), (5, 3, 17),
                                   (12, 200, 16), (3, 2, 5), (40, 64, 300),
                                   # the whole-tile strips (_make_strip_sat) of every row count, blocks of PB
                                   # pixels ending on a tile or not
                                   (4, 8, 512), (9, 16, 272), (14, 5, 48), (23, 24, 529),
                                   # the last 1..4 pixels of whole row tiles, channels in the lanes (_make_cols)
                                   (11, 37, 20), (16, 12, 35), (10, 6, 18), (15, 40, 49),
                                   # ... in whole groups of 8 quads only (k 64), groups and 1 quad past (k 33):
                                   # two passes of 2 pixels, then of 2 and 1
                                   (10, 64, 36), (15, 33, 51)])
@pytest.mark.parametrize("y_type", [np.uint8, np.int8, np.float32])
def test_qgemm2d_sat_matches_the_saturating_pairs(m, k, p, y_type):
    """compiled/qgemm.py's qgemm2d_sat: the int16-saturated pair sums in k's order, requantized as qgemm2d."""
    w = _saturating_weights((m, k))
    x = rng.integers(150, 256, (k, p)).astype(np.uint8)
    x[:, ::5] = rng.integers(0, 256, x[:, ::5].shape)
    b = rng.integers(-100000, 100000, m).astype(np.int32)
    mult = (rng.random(m) * 1e-4).astype(np.float32)
    zp = 3 if y_type != np.float32 else 0
    y = run_qgemm2d_sat(qgemm, w, x, b, mult, zp, y_type)
    acc = (_sat_pairs_reference(w, x) + b[:, None]).astype(np.int32)
    fa = (acc.astype(np.float32) * mult[:, None]).astype(np.float32)
    if y_type == np.float32:
        ref = fa
    else:
        info = np.iinfo(y_type)
        ref = (np.rint(np.clip(fa, info.min - zp, info.max - zp)) + zp).astype(y_type)
    assert np.array_equal(y.reshape(m, p), ref)
    if k >= 2:
        assert not np.array_equal(_sat_pairs_reference(w, x), w.astype(np.int64) @ x.astype(np.int64))


@pytest.mark.parametrize("m,k,p", [(15, 40, 49), (10, 64, 36), (11, 37, 20), (6, 9, 3)])
def test_qgemm2d_sat_reads_no_slack_past_x(m, k, p):
    """X ending at its last pixel (a pointwise convolution's input read in place): the last partial tile's quads
    whose rows' 16 bytes would run past X take only its pixels, the others are packed whole; the same sums as
    with slack past X."""
    w = _saturating_weights((m, k))
    x = rng.integers(0, 256, (k, p)).astype(np.uint8)
    b = rng.integers(-100000, 100000, m).astype(np.int32)
    mult = (rng.random(m) * 1e-4).astype(np.float32)
    tight = run_qgemm2d_sat(qgemm, w, x, b, mult, 3, np.uint8, slack=0)
    assert np.array_equal(tight, run_qgemm2d_sat(qgemm, w, x, b, mult, 3, np.uint8))
    acc = (_sat_pairs_reference(w, x) + b[:, None]).astype(np.int32)
    fa = (acc.astype(np.float32) * mult[:, None]).astype(np.float32)
    assert np.array_equal(tight.reshape(m, p), (np.rint(np.clip(fa, -3, 252)) + 3).astype(np.uint8))


CONVS = [  # x shape, w shape, attributes: onnxruntime's paths (im2col on NHWC; MLAS's symmetric conv)
    ((1, 16, 8, 8), (24, 16, 1, 1), {}),  # pointwise, X read in place
    ((1, 16, 7, 7), (8, 16, 1, 1), {}),  # pointwise over 49 pixels (tail tile)
    ((1, 5, 6, 6), (16, 5, 1, 1), {}),  # odd channels
    ((2, 5, 9, 11), (13, 5, 3, 3), {"pads": [1, 1, 1, 1]}),  # pairs across taps
    ((1, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # MLAS's symmetric conv
    ((1, 6, 9, 9), (16, 6, 3, 3), {"pads": [1, 1, 1, 1]}),  # channels % 4 == 2: im2col
    ((1, 8, 9, 9), (12, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # output channels % 8 != 0: im2col
    ((1, 64, 10, 10), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 3, 23, 23), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # the stem
    ((1, 3, 17, 17), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # MobileNet's stem
    ((1, 16, 10, 10), (32, 16, 1, 1), {"strides": [2, 2]}),  # downsample
    ((1, 8, 9, 9), (8, 4, 3, 3), {"pads": [1, 0, 2, 1], "group": 2, "dilations": [2, 1]}),
    ((1, 12, 10, 10), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "group": 4}),
    ((1, 12, 10, 10), (12, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 12}),  # depthwise: exact in onnxruntime
    # 7 x 7 outputs (49 pixels): channels in the lanes on 16-lane VNNI targets (compiled/qgemm.py's chlanes)
    ((1, 16, 7, 7), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),  # the output's rows gathered, 2 blocks of 16
    ((1, 24, 14, 14), (48, 24, 1, 1), {"strides": [2, 2]}),  # subsampled, blocks of 32 then 16
]


def _crafted_conv(x_shape, w_shape, attrs, x_type, per_channel):
    m = w_shape[0]
    if x_type == np.uint8:
        x = rng.integers(170, 256, x_shape).astype(np.uint8)
        x_zp = np.array(rng.integers(100, 140), np.uint8)
    else:
        x = np.where(rng.random(x_shape) < 0.5, rng.integers(100, 128, x_shape), rng.integers(-128, -100, x_shape))
        x = x.astype(np.int8)
        x_zp = np.array(rng.integers(-5, 5), np.int8)
    w = _saturating_weights(w_shape)
    x_scale = np.array(0.02, np.float32)
    w_scale = (rng.random(m if per_channel else ()) * 0.01 + 0.002).astype(np.float32)
    w_zp = np.zeros(m if per_channel else (), np.int8)
    y_scale = np.array(8.0 + rng.random(), np.float32)
    y_zp = np.array(7, x_type)
    b = rng.integers(-5000, 5000, m).astype(np.int32)
    return [x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b]


def _ours(inputs, attrs, expected, arithmetic):
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    type_outputs(model, [expected])
    with int8_arithmetic.use(arithmetic):
        (ours,) = run_ours(model, {"in0": inputs[0]})
    return ours


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_onnxruntime_arithmetic_is_onnxruntimes_bits(x_shape, w_shape, attrs, x_type, per_channel):
    """Crafted to saturate MLAS's u8 x s8 pairs: our "onnxruntime" arithmetic gives onnxruntime's bits,
    "exact" the spec's (which onnxruntime's differ from wherever a pair saturated)."""
    inputs = _crafted_conv(x_shape, w_shape, attrs, x_type, per_channel)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    (ref,) = run_ort(model, {"in0": inputs[0]})
    exact = _reference(inputs, attrs)
    ours = _ours(inputs, attrs, ref, "onnxruntime")
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert np.array_equal(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"
    assert np.array_equal(_ours(inputs, attrs, ref, "exact"), exact)
    saturates = (int8_arithmetic.saturating("onnxruntime") and x_type == np.uint8
                 and attrs.get("group", 1) != x_shape[1])
    assert np.array_equal(ref, exact) != saturates  # the inputs do saturate onnxruntime's pairs (or it is exact)


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS + [((1, 4, 5, 5, 5), (8, 4, 3, 3, 3), {"pads": [1] * 6}),
                                                     ((1, 6, 11), (8, 3, 3), {"group": 2, "strides": [2]})])
def test_the_numpy_qlinear_conv_sums_as_the_compiled_kernels(x_shape, w_shape, attrs, monkeypatch):
    """The numpy QLinearConv (the nodes the compiled kernels do not take: dynamic weights, 3-D and 1-D ones) in the
    saturating pairs, as the compiled kernels on a host without VNNI: the same bits, on any host (the saturating
    kernels compile everywhere); onnxruntime's own on such a host (tests/avx2_target.sh with ORT_AVX2=1 compares
    these nodes with onnxruntime's AVX2 kernels in the tests above)."""
    monkeypatch.setattr(int8_arithmetic, "host_vnni", lambda: False)
    inputs = _crafted_conv(x_shape, w_shape, attrs, np.uint8, True)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    (like,) = run_ort(model, {"in0": inputs[0]})  # the output's shape and type
    exact = _ours(inputs, attrs, like, "exact")
    compiled_out = _ours(inputs, attrs, like, "onnxruntime") if len(x_shape) == 4 else None
    dynamic = make_node_model("QLinearConv", inputs, attrs, opset=10, static=(1, 2, 4, 5, 6, 7, 8))  # W fed
    type_outputs(dynamic, [like])
    with int8_arithmetic.use("onnxruntime"):
        (numpy_out,) = run_ours(dynamic, {"in0": inputs[0], "in3": inputs[3]})
    depthwise = attrs.get("group", 1) == x_shape[1] == w_shape[0]
    assert np.array_equal(numpy_out, exact) == depthwise  # the pairs saturated (depthwise: exact)
    if compiled_out is not None:
        assert np.array_equal(numpy_out, compiled_out), f"{int((numpy_out != compiled_out).sum())} differ"


@pytest.mark.parametrize("strides", [[2147483647, 7], [2147483647, 1]], ids=["one-window-both-axes", "one-window-rows"])
def test_a_stride_past_the_input_keeps_the_integer_kernels(strides):
    """An axis with one output position reads one window whatever its stride (a crafted 2^31 - 1, tests/fuzz): the
    node still takes the integer kernels, so their arithmetic (onnxruntime's saturating pairs on a host without
    VNNI, where the float64 reference sums exactly: a mismatch under tests/avx2_target.sh's ORT_AVX2=1 before)."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.quantized import QLinearConv

    attrs = {"pads": [1, 1, 1, 1], "strides": strides}
    inputs = _crafted_conv((1, 8, 6, 6), (16, 8, 3, 3), attrs, np.uint8, True)
    node = Node("QLinearConv", [f"in{i}" for i in range(9)], ["out0"], attrs, "", "conv")
    ctx = OpContext(node, 10, [np.shape(v) for v in inputs], [np.asarray(v).dtype for v in inputs],
                    [None] + inputs[1:], "cpu", None)
    assert QLinearConv(ctx, **attrs).fast is not None
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    (ref,) = run_ort(model, {"in0": inputs[0]})
    assert ref.shape[2] == 1
    assert np.array_equal(_ours(inputs, attrs, ref, "onnxruntime"), ref)
    assert np.array_equal(_ours(inputs, attrs, ref, "exact"), _reference(inputs, attrs))


def _f(v):
    return np.array(v, np.float32)


def _crafted_product(m, k, n, per_column):
    a = rng.integers(170, 256, (m, k)).astype(np.uint8)
    b = _saturating_weights((n, k)).T.copy()  # pairs along k share a sign
    b_scale = (rng.random(n if per_column else ()) * 0.01 + 0.002).astype(np.float32)
    return a, b, b_scale


PRODUCTS = [(1, 2, 3), (5, 7, 8), (4, 64, 24), (17, 33, 9), (3, 300, 16), (1, 1283, 70), (2, 101, 41)]


def _same(ours, ref) -> bool:
    """Bit for bit for integer outputs; float32 outputs within 1e-6 relative (onnxruntime's float epilogue
    may round a product differently by an ulp), far below one int16 saturation's effect."""
    if ref.dtype.kind in "iu":
        return np.array_equal(ours, ref)
    return np.allclose(ours, ref, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()))


def _check(model, feeds, arithmetic_differs=True):
    (ref,) = run_ort(model, feeds)
    with int8_arithmetic.use("onnxruntime"):
        (ours,) = run_ours(model, feeds)
    with int8_arithmetic.use("exact"):
        (exact,) = run_ours(model, feeds)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert _same(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"
    if arithmetic_differs and int8_arithmetic.saturating("onnxruntime"):
        assert not _same(exact, ref)  # the inputs saturate onnxruntime's pairs


@pytest.mark.parametrize("m,k,n", PRODUCTS)
@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_integer(m, k, n, zero_points):
    a, b, _ = _crafted_product(m, k, n, False)
    azp = np.array(117 if zero_points else 0, np.uint8)
    bzp = np.array(-3 if zero_points else 0, np.int8)
    model = make_node_model("MatMulInteger", [a, b, azp, bzp], opset=10, static=(1, 2, 3))
    _check(model, {"in0": a}, k > 1)


@pytest.mark.parametrize("m,k,n", PRODUCTS)
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(m, k, n, per_column):
    a, b, b_scale = _crafted_product(m, k, n, per_column)
    bzp = np.zeros(n if per_column else (), np.int8)
    inputs = [a, _f(0.05), np.array(121, np.uint8), b, b_scale, bzp, _f(1.5), np.array(128, np.uint8)]
    model = make_node_model("QLinearMatMul", inputs, opset=10, static=tuple(range(1, 8)))
    _check(model, {"in0": a}, k > 1)


@pytest.mark.parametrize("m,k,n", PRODUCTS)
@pytest.mark.parametrize("quantized_output", [False, True])
def test_qgemm(m, k, n, quantized_output):
    a, b, b_scale = _crafted_product(m, k, n, True)
    c = rng.integers(-3000, 3000, n).astype(np.int32)
    inputs = [a, _f(0.05), np.array(121, np.uint8), b, b_scale, np.zeros(n, np.int8), c]
    inputs += [_f(1.5), np.array(128, np.uint8)] if quantized_output else []
    model = make_node_model("QGemm", inputs, {"alpha": 0.75}, static=tuple(range(1, len(inputs))),
                            domain="com.microsoft")
    _check(model, {"in0": a}, k > 1)


@pytest.mark.parametrize("m,k,n", PRODUCTS)
def test_matmul_integer_to_float(m, k, n):
    a, b, b_scale = _crafted_product(m, k, n, True)
    inputs = [a, b, _f(0.05), b_scale, np.array(121, np.uint8), np.zeros(n, np.int8), _f(rng.random(n))]
    model = make_node_model("MatMulIntegerToFloat", inputs, static=tuple(range(1, 7)), domain="com.microsoft")
    _check(model, {"in0": a}, k > 1)


@pytest.mark.parametrize("a_shape,n", [((1, 20, 48), 24), ((37, 33), 17), ((2, 3, 16, 64), 40), ((128, 384), 96)])
@pytest.mark.parametrize("fused,bias", [(False, False), (True, False), (True, True)])
def test_dynamic_quantize_matmul(a_shape, n, fused, bias):
    """com.microsoft's DynamicQuantizeMatMul (numpy), and ours (passes/qdq.py's fusion of
    DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add of a bias), compiled/dqgemm.py):
    onnxruntime's bits with B's pairs crafted to saturate (A's range is its own, so x = 255 where A
    is largest)."""
    from onnx import TensorProto, helper, numpy_helper

    from pooled_predictor.importers import load_onnx
    from pooled_predictor.passes import optimize
    from tests.passes.pass_helpers import run_net

    k = a_shape[-1]
    b = _saturating_weights((n, k)).T.copy()
    bs = (rng.random(n) * 0.05 + 0.001).astype(np.float32)
    a = (rng.random(a_shape) * 4 + 1).astype(np.float32)  # positive: quantized near the top of [0, 255]
    if fused:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"]),
                 helper.make_node("Mul", ["s", "bs"], ["sb"]),
                 helper.make_node("MatMulInteger", ["q", "b", "z", "bz"], ["acc"]),
                 helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["accf", "sb"], ["yb" if bias else "y"])]
        inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.zeros(n, np.int8), "bz"),
                 numpy_helper.from_array(bs, "bs")]
        if bias:
            nodes.append(helper.make_node("Add", ["yb", "c"], ["y"]))
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "c"))
        graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        g, _ = optimize(load_onnx(model), level="extended")
        assert g.op_counts()["DynamicQuantizeMatMul"] == 1 and g.op_counts()["Add"] == 0
        (ref,) = run_ort(model, {"a": a})
        with int8_arithmetic.use("onnxruntime"):
            (ours,) = run_net(g, {"a": a})
        with int8_arithmetic.use("exact"):
            (exact,) = run_net(g, {"a": a})
        assert _same(ours, ref), float(np.abs(ours - ref).max())
        if int8_arithmetic.saturating("onnxruntime"):
            assert not _same(exact, ref)
        return
    model = make_node_model("DynamicQuantizeMatMul", [a, b, bs, np.zeros(n, np.int8)], static=(1, 2, 3),
                            domain="com.microsoft")
    _check(model, {"in0": a})
