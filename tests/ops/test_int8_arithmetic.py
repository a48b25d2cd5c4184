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
                                   (12, 200, 16), (3, 2, 5), (40, 64, 300)])
@pytest.mark.parametrize("y_type", [np.uint8, np.int8, np.float32])
def test_qgemm2d_sat_matches_the_saturating_pairs(m, k, p, y_type):
    """compiled/qgemm.py's qgemm2d_sat: the int16-saturated pair sums in k's order, requantized as qgemm2d."""
    w = _saturating_weights((m, k))
    x = rng.integers(150, 256, (k, p)).astype(np.uint8)
    x[:, ::5] = rng.integers(0, 256, x[:, ::5].shape)
    b = rng.integers(-100000, 100000, m).astype(np.int32)
    mult = (rng.random(m) * 1e-4).astype(np.float32)
    zp = 3 if y_type != np.float32 else 0
    xf = np.zeros(k * p + 64, np.uint8)
    xf[:k * p] = x.reshape(-1)
    offs = qgemm.quad_offsets(np.arange(k) * p)
    y = np.zeros(m * p, y_type)
    ws = np.zeros(qgemm.MRS * qgemm.NP, y_type)
    xq = np.zeros(qgemm.packed_bytes(offs.size), np.uint8)
    f = qgemm.qgemm2d_sat_f32 if y_type == np.float32 else qgemm.qgemm2d_sat
    f(qgemm.pack_quads(w), xf, 0, offs, y, 0, p, m, p, b, mult, zp, ws, qgemm.ONES, xq)
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
