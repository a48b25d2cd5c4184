"""compiled/qdepthwise.py: the 8-bit depthwise convolution with 8 channels in the lanes, bit for bit.

References: onnxruntime's QLinearConv (its depthwise kernels sum exactly in int32, so at full
range) and the spec's arithmetic in numpy (tests/ops/test_compiled_int8.py's _reference), over a
grid of shapes (channels not a multiple of 8, images smaller than the 8-pixel tile, strides 1 to
3, asymmetric pads, dilations), input and output types, zero points and per-channel scales.
"""

import re

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled import qdepthwise
from tests.onnx_helpers import make_node_model, run_ort
from tests.ops.test_compiled_dqgemm import _avx2_only, _check_loops
from tests.ops.test_compiled_int8 import _ours, _reference

rng = np.random.default_rng(34)

# channels, H, W, kernel, attributes
DEPTHWISE = [
    (8, 10, 10, (3, 3), {"pads": [1, 1, 1, 1]}),
    (16, 7, 7, (3, 3), {"pads": [1, 1, 1, 1]}),  # MobileNetV2's last stage: one partial 8-pixel tile a row
    (24, 14, 14, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    (13, 11, 9, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # a partial block of 5 channels
    (40, 1, 1, (3, 3), {"pads": [1, 1, 1, 1]}),  # every tap but the centre on the padding
    (9, 2, 5, (3, 3), {"pads": [1, 1, 1, 1]}),
    (12, 9, 23, (5, 5), {"pads": [2, 2, 2, 2]}),
    (8, 13, 17, (3, 3), {"pads": [0, 1, 2, 0], "strides": [3, 2]}),  # asymmetric pads, stride 3
    (16, 12, 12, (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    (10, 6, 9, (3, 1), {"pads": [1, 0, 1, 0]}),
    (8, 5, 5, (3, 3), {}),  # no padding
    (8, 16, 16, (1, 1), {"strides": [2, 2]}),
    (16, 6, 14, (3, 3), {"pads": [1, 1, 1, 1]}),  # MobileNetV2's 14 x 14: a row of 8 pixels and a tail call of 6
    # the tap pairs' bands (BAND output rows) and column steps (geometry's G)
    (8, 40, 9, (3, 3), {"pads": [1, 1, 1, 1]}),  # 3 bands, the last of 8 rows
    (11, 70, 10, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),  # 3 bands at stride 2 (G = 2)
    (16, 15, 21, (3, 3), {"pads": [2, 2, 2, 2], "strides": [2, 2], "dilations": [2, 2]}),  # G = 2, dw = 2
    (8, 17, 19, (5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),  # 3 pairs a kernel row, the last half empty
    (9, 12, 30, (1, 4), {"pads": [0, 1, 0, 2], "strides": [1, 4]}),  # an even kernel width, stride 4 (G = 2)
    (8, 9, 26, (2, 3), {"pads": [1, 0, 0, 1], "strides": [1, 3], "dilations": [3, 3]}),  # G = 3, dw = 3
    (8, 3, 40, (3, 3), {"pads": [1, 1, 1, 1]}),  # rows packed 16 pixels a shuffle, the last 16 overlapping
]


def _inputs(c, h, w, kernel, x_type, y_type, w_type, per_channel, batch=1):
    xi, yi = np.iinfo(x_type), np.iinfo(y_type)
    wi = np.iinfo(w_type)
    x = rng.integers(xi.min, xi.max + 1, (batch, c, h, w)).astype(x_type)
    wt = rng.integers(wi.min, wi.max + 1, (c, 1, *kernel)).astype(w_type)
    shape = (c,) if per_channel else ()
    w_scale = (rng.random(shape) * 0.02 + 0.004).astype(np.float32)
    w_zp = (rng.integers(-20, 20, shape) if w_type == np.int8 else rng.integers(100, 150, shape)).astype(w_type)
    x_zp = np.array(rng.integers(xi.min // 2, xi.max // 2), x_type)
    y_zp = np.array(rng.integers(yi.min // 2, yi.max // 2), y_type)
    b = rng.integers(-3000, 3000, c).astype(np.int32)
    return [x, np.array(0.03, np.float32), x_zp, wt, w_scale, w_zp, np.array(0.5 + rng.random(), np.float32), y_zp,
            b]


@pytest.mark.parametrize("c,h,w,kernel,attrs", DEPTHWISE)
@pytest.mark.parametrize("x_type,y_type", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8)])
@pytest.mark.parametrize("w_type,per_channel", [(np.int8, True), (np.int8, False), (np.uint8, True)])
def test_equals_the_spec(c, h, w, kernel, attrs, x_type, y_type, w_type, per_channel):
    attrs = {**attrs, "group": c}
    inputs = _inputs(c, h, w, kernel, x_type, y_type, w_type, per_channel, batch=2)
    ref = _reference(inputs, attrs)
    assert np.array_equal(_ours(inputs, attrs, ref), ref)


@pytest.mark.parametrize("c,h,w,kernel,attrs", DEPTHWISE)
@pytest.mark.parametrize("w_type", [np.int8, np.uint8])
def test_matches_onnxruntime(c, h, w, kernel, attrs, w_type):
    """Full-range weights: onnxruntime's depthwise sums are exact int32 (no int16 pair saturation). int8
    weights with zero point 0, as its quantizer makes them: with a nonzero one W - w_zp leaves int8's range
    and onnxruntime's sums differ from the spec's (ours follow the spec: test_equals_the_spec)."""
    attrs = {**attrs, "group": c}
    inputs = _inputs(c, h, w, kernel, np.uint8, np.uint8, w_type, True)
    if w_type == np.int8:
        inputs[5] = np.zeros(c, np.int8)
    model = make_node_model("QLinearConv", inputs, attrs, opset=10, static=tuple(range(1, 9)))
    (ref,) = run_ort(model, {"in0": inputs[0]})
    ours = _ours(inputs, attrs, ref)
    assert np.array_equal(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"


def test_saturates_at_both_ends():
    """Outputs pinned to the type's bounds (huge multipliers of either sign) and a zero multiplier."""
    c = 24
    inputs = _inputs(c, 9, 9, (3, 3), np.uint8, np.uint8, np.int8, True)
    inputs[4] = np.where(np.arange(c) % 3 == 0, 50.0, np.where(np.arange(c) % 3 == 1, 0.0, 1e-6)).astype(np.float32)
    attrs = {"pads": [1, 1, 1, 1], "group": c}
    ref = _reference(inputs, attrs)
    assert ref.min() == 0 and ref.max() == 255
    assert np.array_equal(_ours(inputs, attrs, ref), ref)


def test_mobilenet_v2_layers_take_the_channels_last_kernel():
    """The QLinearConv builder routes depthwise convs of 8 channels or more here (ops/cpu/qconv.py)."""
    from pooled_predictor.ops.cpu.qconv import QConvCompiled

    calls = []
    real = qdepthwise.depthwise_cl_q
    inputs = _inputs(32, 14, 14, (3, 3), np.uint8, np.uint8, np.int8, True)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": 32}
    ref = _reference(inputs, attrs)
    steps = QConvCompiled.steps

    def spy(self, x, out):
        s = steps(self, x, out)
        calls.extend(fn for fn, _ in s)
        return s

    QConvCompiled.steps = spy
    try:
        assert np.array_equal(_ours(inputs, attrs, ref), ref)
    finally:
        QConvCompiled.steps = steps
    assert calls == [real]


def test_pack_weights_layout():
    """W' in blocks of 8 channels, each kernel row's taps in pairs (a, e), (a, e + 1) side by side, an odd
    row's last tap paired with 0; 0 past C."""
    w = np.arange(13 * 9, dtype=np.int32).reshape(13, 9) - 60
    wv, b8, m8 = qdepthwise.pack_weights(w, np.arange(13, dtype=np.int32), np.ones(13, np.float32), (3, 3))
    assert wv.dtype == np.int16
    blocks = wv.reshape(2, 3, 2, 8, 2)  # block, kernel row, pair, lane, half
    wk = w.reshape(13, 3, 3)
    for a in range(3):
        assert np.array_equal(blocks[0, a, 0], wk[:8, a, 0:2])
        assert np.array_equal(blocks[0, a, 1, :, 0], wk[:8, a, 2]) and not blocks[0, a, 1, :, 1].any()
        assert np.array_equal(blocks[1, a, 0, :5], wk[8:, a, 0:2])
    assert not blocks[1, :, :, 5:].any() and not b8[13:].any() and not m8[13:].any()
    assert not wv.flags.writeable


@pytest.mark.parametrize("stride,dilation,step", [(1, 1, 1), (2, 1, 2), (3, 1, 1), (2, 2, 2), (4, 2, 4), (3, 2, 1)])
def test_geometry_widens_only_the_columns_read(stride, dilation, step):
    """The column step G: every pair's first tap, j * sw + e * dw for e even, is a multiple of G."""
    wp, hp, g, offs = qdepthwise.geometry(20, 20, 9, 9, (3, 3), (stride, stride), (dilation, dilation),
                                          (1, 1), (1, 1))
    assert g == step
    assert all((j * stride + e * dilation) % g == 0 for j in range(9) for e in (0, 2))
    assert offs.size == 6 and not offs.flags.writeable


@pytest.mark.skipif(not _avx2_only(), reason="AVX2's 16 vector registers are the budget at stake (AVX-512 has 32)")
def test_tap_loop_keeps_its_accumulators_in_registers():
    """The 8 accumulators, the weight vector and a pixel vector fit AVX2's 16 ymm: no vector to or from the
    stack in the tap loop (tests/ops/test_compiled_dqgemm.py's reading of the assembly), whose products are
    vpmaddwd's (two taps a vpmaddwd, no vpmulld)."""
    import numba
    from numba import types

    for xt, yt in ((types.uint8, types.uint8), (types.int8, types.int8)):
        fresh = numba.njit([qdepthwise._sig(xt, yt)], nogil=True, cache=False,
                           error_model="numpy")(qdepthwise.depthwise_cl_q.py_func)
        asm = next(iter(fresh.inspect_asm().values()))
        assert _check_loops(asm, "vpmaddwd") >= 1
        assert len(re.findall(r"vpmaddwd", asm)) >= qdepthwise.PX
