"""The integer kernels (compiled/qgemm.py, compiled/qconv.py, ops/cpu/qconv.py) bit for bit.

Two references:
* onnxruntime's QLinearConv, where its arithmetic is exact: MLAS's u8 x s8 kernels on
  AVX2 sum pairs of products in int16 with saturation (vpmaddubsw), ours never
  saturates, so the weights of these cases stay in [-64, 63] (a pair sum then fits
  int16); u8 x u8 (vpmaddwd) is exact at full range;
* the spec's arithmetic in numpy (int64 sums; the requantization in float32 as MLAS
  does it: float32(acc) * float32(x_scale * w_scale / y_scale), rounded half to even),
  at full range, including int8 activations, under the "exact" int8 arithmetic
  (tests/ops/test_int8_arithmetic.py checks the "onnxruntime" one at full range).
"""

import numpy as np
import pytest

from pooled_predictor.ops import int8_arithmetic
from pooled_predictor.ops.cpu.compiled import qgemm
from tests.onnx_helpers import make_node_model, run_ort, run_ours, type_outputs

rng = np.random.default_rng(33)

CONVS = [  # x shape, w shape, attributes
    ((1, 16, 8, 8), (24, 16, 1, 1), {}),  # pointwise, X read in place
    ((1, 16, 7, 7), (8, 16, 1, 1), {}),  # pointwise over 49 pixels (tail tile)
    ((2, 5, 9, 11), (13, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 8, 12, 12), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 3, 23, 23), (8, 3, 7, 7), {"pads": [3, 3, 3, 3], "strides": [2, 2]}),  # the stem
    ((1, 16, 10, 10), (32, 16, 1, 1), {"strides": [2, 2]}),  # downsample
    ((2, 20, 9, 13), (24, 20, 1, 1), {"strides": [3, 2]}),  # strided 1x1: pixels packed, a batch, a tail
    ((1, 8, 8, 8), (8, 8, 1, 1), {"strides": [2, 2]}),  # strided 1x1, whole 16-pixel tiles only
    ((1, 8, 9, 9), (8, 4, 3, 3), {"pads": [1, 0, 2, 1], "group": 2, "dilations": [2, 1]}),
    ((1, 12, 10, 10), (12, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 12}),  # depthwise
    ((2, 12, 11, 11), (12, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 12, "strides": [2, 2]}),
    ((1, 7, 6, 6), (7, 1, 5, 5), {"pads": [2, 2, 2, 2], "group": 7}),
    ((1, 24, 7, 7), (24, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 24}),  # depthwise, 7 x 7: whole 64-pixel blocks
    ((1, 16, 14, 14), (16, 1, 3, 3), {"pads": [0, 0, 1, 1], "group": 16, "strides": [2, 2]}),  # asymmetric pads
    ((2, 9, 2, 5), (9, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 9}),  # 3x3 stride 1 on X itself: all border
    ((1, 5, 3, 17), (5, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 5}),  # one interior row
    # 3x3 over ResNet-50's small images: the output's pixels only, tiles spanning 2 to 4 rows (qgemm2d_sat_rows)
    ((1, 16, 7, 7), (12, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 8, 14, 14), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 8, 5, 5), (7, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # OW = 5: the narrowest it takes
    ((1, 8, 15, 15), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 8, 36, 36), (8, 8, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # rows split 32 bytes at a time
    ((1, 8, 11, 13), (8, 8, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    # OW >= 16: tiles inside one output row (_pack16) and across two (_pack16_rows2)
    ((1, 8, 9, 37), (12, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 6, 16), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),  # OW = 16: every tile one whole row
    ((1, 8, 4, 4), (8, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # OW = 4: cropped as before
]


def _quantized_conv(x_shape, w_shape, attrs, x_type, w_type, per_channel, w_range):
    m = w_shape[0]
    xi = np.iinfo(x_type)
    x = rng.integers(xi.min, xi.max + 1, x_shape).astype(x_type)
    w = rng.integers(*w_range, w_shape).astype(w_type)
    x_scale = np.array(0.03, np.float32)
    w_scale = (rng.random(m if per_channel else ()) * 0.02 + 0.004).astype(np.float32)
    x_zp = np.array(rng.integers(xi.min // 2, xi.max // 2), x_type)
    wi = np.iinfo(w_type)
    w_zp = (np.zeros(m if per_channel else (), w_type) if w_type == np.int8
            else rng.integers(100, 150, m if per_channel else ()).astype(w_type))
    y_scale = np.array(0.5 + rng.random(), np.float32)
    y_zp = np.array(rng.integers(xi.min // 2, xi.max // 2), x_type)
    b = rng.integers(-3000, 3000, m).astype(np.int32)
    assert wi.min <= int(w.min())
    return [x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b]


def _reference(inputs, attrs):
    """The spec's arithmetic: int64 sums of (x - x_zp)(w - w_zp) + B, MLAS's float32 requantization."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b = inputs
    m = w.shape[0]
    xs = x.astype(np.int64) - int(x_zp)
    ws = w.astype(np.int64) - np.asarray(w_zp, np.int64).reshape((-1, 1, 1, 1) if w_zp.ndim else ())
    group = attrs.get("group", 1)
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = xs
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    cg, mg = c // group, m // group
    acc = np.zeros((n, m, oh, ow), np.int64)
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                acc[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", win, ws[g * mg:(g + 1) * mg, :, i, j])
    acc += b.reshape(1, -1, 1, 1)
    mult = ((x_scale * np.broadcast_to(w_scale.reshape(-1), (m,))).astype(np.float32) / y_scale).astype(np.float32)
    f = acc.astype(np.int32).astype(np.float32) * mult.reshape(1, -1, 1, 1)
    info = np.iinfo(y_zp.dtype)
    return np.clip(np.rint(f.astype(np.float32)).astype(np.int64) + int(y_zp), info.min, info.max).astype(y_zp.dtype)


def _ours(inputs, attrs, expected):
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    type_outputs(model, [expected])
    (ours,) = run_ours(model, {"in0": inputs[0]})
    return ours


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
@pytest.mark.parametrize("w_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_matches_onnxruntime(x_shape, w_shape, attrs, w_type, per_channel):
    w_range = (-64, 64) if w_type == np.int8 else (0, 256)
    inputs = _quantized_conv(x_shape, w_shape, attrs, np.uint8, w_type, per_channel, w_range)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    (ref,) = run_ort(model, {"in0": inputs[0]})
    ours = _ours(inputs, attrs, ref)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert np.array_equal(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"
    assert np.array_equal(ref, _reference(inputs, attrs))  # the numpy reference is onnxruntime's arithmetic


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVS)
@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv_full_range(x_shape, w_shape, attrs, x_type, per_channel):
    inputs = _quantized_conv(x_shape, w_shape, attrs, x_type, np.int8, per_channel, (-128, 128))
    ref = _reference(inputs, attrs)
    with int8_arithmetic.use("exact"):
        ours = _ours(inputs, attrs, ref)
    assert np.array_equal(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"


@pytest.mark.parametrize("m,k,p", [(1, 1, 16), (7, 13, 37), (6, 64, 256), (13, 300, 40), (20, 2, 5),
                                   # whole-tile strips of 1..6 rows over blocks of PB pixels, ending on a tile or not
                                   (12, 16, 272), (5, 9, 512), (11, 4, 48), (16, 24, 529), (3, 7, 300)])
@pytest.mark.parametrize("x_type,y_type", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
def test_qgemm2d(m, k, p, x_type, y_type):
    """Y = requant(W' @ X + b) over a grid of shapes (tiles of 1..6 rows, odd K, tail pixels)."""
    xi, yi = np.iinfo(x_type), np.iinfo(y_type)
    w = rng.integers(-128, 128, (m, k)).astype(np.int8)
    w_zp = rng.integers(-4, 4, m).astype(np.int32)
    x = rng.integers(xi.min, xi.max + 1, (k, p)).astype(x_type)
    x_zp = int(rng.integers(xi.min // 2, xi.max // 2))
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    mult = rng.uniform(1e-5, 1e-3, m).astype(np.float32)
    y_zp = int(rng.integers(yi.min // 2, yi.max // 2))
    b = (bias - x_zp * qgemm.row_sums(w, w_zp)).astype(np.int32)
    for a in (b, mult):
        a.flags.writeable = False
    xf = np.concatenate([x.reshape(-1), np.zeros(16, x_type)])
    y = np.zeros(m * p, y_type)
    qgemm.qgemm2d(qgemm.pack_pairs(w, w_zp), xf, 0, qgemm.pair_offsets(np.arange(k) * p), y, 0, p, m, p, b, mult,
                  y_zp, np.zeros(qgemm.MR * qgemm.NP, y_type))
    acc = (w.astype(np.int64) - w_zp.reshape(-1, 1)) @ (x.astype(np.int64) - x_zp) + bias.reshape(-1, 1)
    f = acc.astype(np.float32) * mult.reshape(-1, 1)
    ref = np.clip(np.rint(f).astype(np.int64) + y_zp, yi.min, yi.max).astype(y_type)
    assert np.array_equal(y.reshape(m, p), ref)


@pytest.mark.parametrize("q_type", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_per_tensor_quantize_compiled_equals_numpy(op, q_type, monkeypatch):
    """compiled/quantize.py's one-pass kernels give the numpy kernels' bits (ties, saturation included)."""
    from pooled_predictor.ops.cpu import compiled

    scale, zp = np.array(0.037, np.float32), np.array(3 if q_type == np.uint8 else -5, q_type)
    if op == "QuantizeLinear":
        x = rng.uniform(-12, 12, (2, 3, 17, 9)).astype(np.float32)
        x.reshape(-1)[:40] = (np.arange(40, dtype=np.float32) - 20 + 0.5) * scale  # exact ties
    else:
        info = np.iinfo(q_type)
        x = rng.integers(info.min, info.max + 1, (2, 3, 17, 9)).astype(q_type)
    model = make_node_model(op, [x, scale, zp], opset=13, static=(1, 2))
    fast = run_ours(model, {"in0": x})[0]
    monkeypatch.setattr(compiled, "ENABLED", False)
    slow = run_ours(model, {"in0": x})[0]
    assert fast.dtype == slow.dtype and np.array_equal(fast, slow)


@pytest.mark.parametrize("a_shape,n", [((1, 20, 48), 24), ((37, 33), 17), ((2, 3, 16, 64), 40)])
@pytest.mark.parametrize("b_type,per_column,bias", [(np.int8, False, False), (np.int8, True, False),
                                                   (np.uint8, True, False), (np.int8, False, True)])
def test_dynamic_quantize_matmul_equals_the_unfused_nodes(a_shape, n, b_type, per_column, bias):
    """DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul, fused by passes/qdq.py into one
    DynamicQuantizeMatMul: bit for bit the spec's arithmetic (exact int32 sums); and onnxruntime's
    (ORT_DISABLE_ALL: the unfused nodes) where its u8 x s8 pair sums cannot saturate (int8 B in [-64, 63])."""
    from pooled_predictor.ops.cpu.quantize import dynamic_quantize_linear

    from onnx import TensorProto, helper, numpy_helper

    from pooled_predictor.importers import load_onnx
    from pooled_predictor.passes import optimize
    from tests.passes.pass_helpers import run_net

    k = a_shape[-1]
    info = np.iinfo(b_type)
    b = rng.integers(info.min, info.max + 1, (k, n)).astype(b_type)
    bz = (rng.integers(info.min // 4, info.max // 4, n if per_column else ()).astype(b_type))
    if b_type == np.int8:
        b, bz = b // 2, bz // 2  # no saturating pair in onnxruntime's u8 x s8 kernel
    bs = (rng.random(n if per_column else ()) * 0.05 + 0.001).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["a"], ["q", "s", "z"]),
             helper.make_node("Mul", ["s", "bs"], ["sb"]),
             helper.make_node("MatMulInteger", ["q", "b", "z", "bz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "sb"], ["yb" if bias else "y"])]
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(bz, "bz"), numpy_helper.from_array(bs, "bs")]
    c = rng.standard_normal(n).astype(np.float32)
    if bias:  # an Add of a bias after it: fused too (float32, after the scale)
        nodes.append(helper.make_node("Add", ["yb", "c"], ["y"]))
        inits.append(numpy_helper.from_array(c, "c"))
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    a = (rng.standard_normal(a_shape) * 3).astype(np.float32)
    g, _ = optimize(load_onnx(model), level="extended")
    assert g.op_counts()["DynamicQuantizeMatMul"] == 1 and g.op_counts()["MatMulInteger"] == 0
    assert g.op_counts()["Add"] == 0
    (ref,) = run_ort(model, {"a": a})
    (ours,) = run_net(g, {"a": a})
    q, s, z = np.empty(a.shape, np.uint8), np.zeros((), np.float32), np.zeros((), np.uint8)
    dynamic_quantize_linear(a, out=(q, s, z))
    acc = (q.astype(np.int64) - int(z)) @ (b.astype(np.int64) - bz.astype(np.int64))
    exact = acc.astype(np.float32) * (s * bs).astype(np.float32)
    if bias:
        exact = exact + c
    assert ours.dtype == np.float32 and np.array_equal(ours, exact), float(np.abs(ours - exact).max())
    assert np.array_equal(ours, ref), float(np.abs(ours - ref).max())


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("sh", [1, 2, 3])
@pytest.mark.parametrize("sw,masked", [(2, False), (2, True), (1, False), (1, True)])
def test_split_phases_q_column_stride_2(x_type, sh, sw, masked):
    """compiled/qconv.py's split_phases_q at sw = 2 (both column phases from one read of each row, 32 bytes
    at a time where 16 or more columns of both are inside the row) and sw = 1, and with masked 64-byte row
    steps (the 16-lane path; any host runs it, LLVM splitting the masks where it must): every plane element,
    pads included, equals numpy's slicing of the padded input, and nothing past the planes is written.
    Widths from 1 to 70 (ResNet-50's 56: vectors and edges; 14: edges only), pads 0 to 3 on either side."""
    from pooled_predictor.ops.cpu.compiled.qconv import split_phases_q

    info = np.iinfo(x_type)
    for h, wd, ph, pw, pw_end in [(5, 56, 1, 1, 1), (3, 70, 0, 0, 3), (2, 33, 2, 3, 0), (4, 34, 1, 2, 2),
                                  (1, 35, 0, 1, 0), (6, 14, 1, 1, 1), (2, 1, 3, 3, 3), (3, 31, 1, 0, 1),
                                  (2, 64, 3, 2, 1), (4, 2, 0, 1, 1), (2, 130, 1, 1, 1)]:
        hq = -(-(h + 2 * ph) // sh)
        wq = -(-(wd + pw + pw_end) // sw)
        x = rng.integers(info.min, info.max + 1, (2, 3, h, wd)).astype(x_type)
        padded = np.full((2, 3, hq * sh, wq * sw), 7, x_type)
        padded[:, :, ph:ph + h, pw:pw + wd] = x
        ref = np.stack([padded[:, :, a::sh, b::sw] for a in range(sh) for b in range(sw)], 2)
        planes = np.full(ref.size + 64, 99, x_type)
        split_phases_q(x, planes, hq, wq, sh, sw, ph, pw, 7, masked)
        assert np.array_equal(planes[:ref.size].reshape(ref.shape), ref), (h, wd, ph, pw, pw_end)
        assert (planes[ref.size:] == 99).all()
