"""compiled/nchwc_depthwise.py: the NCHW8c depthwise conv against onnxruntime's Conv (group == C), and the
NCHW16c one (compiled/lanes16) where the grid runs at both widths (channels doubled at 16)."""

import itertools

import numpy as np
import pytest

from pooled_predictor.ops.cpu.compiled import epilogue as ep
from pooled_predictor.ops.cpu.compiled import widths
from pooled_predictor.ops.cpu.compiled.nchwc_depthwise import pack_depthwise
from pooled_predictor.ops.layouts import physical_shape, transform
from tests.onnx_helpers import assert_close, feeds_of, make_node_model, run_ort

rng = np.random.default_rng(11)
SIZES = [(1, 1), (2, 2), (7, 13), (13, 7), (5, 37)]


def out_size(size, k, s, d, pb, pe):
    return (size + pb + pe - ((k - 1) * d + 1)) // s + 1


def reference(x, w, b, strides, dilations, pads):
    """onnxruntime's Conv with group == C (NCHW)."""
    attrs = {"group": x.shape[1], "kernel_shape": list(w.shape[2:]), "strides": list(strides),
             "dilations": list(dilations), "pads": list(pads)}
    inputs = [x, w, b]
    return run_ort(make_node_model("Conv", inputs, attrs, opset=11, static=(1, 2)), feeds_of(inputs, (1, 2)))[0]


def ours(x, w, b, strides, dilations, pads, out_hw, act=ep.NONE, p0=0.0, p1=0.0, lanes=8):
    """depthwise_nchwc through NCHW<lanes>c: transform in, run, transform back."""
    n, c = x.shape[:2]
    layout, mod = f"NCHW{lanes}c", widths.module("nchwc_depthwise", lanes)
    xb = np.empty(physical_shape(x.shape, layout), np.float32)
    transform(x, "NCHW", layout, xb)
    xb.flags.writeable = False
    yb = np.full(physical_shape((n, c) + out_hw, layout), np.nan, np.float32)
    (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], strides, dilations
    mod.depthwise_nchwc(xb, mod.pack_depthwise(w), b, yb, kh, kw, sh, sw, dh, dw, pads[0], pads[1], act, p0, p1)
    y = np.empty((n, c) + out_hw, np.float32)
    transform(yb, layout, "NCHW", y)
    return y


def case(c, hw, kernel, strides, dilations, pads, n=2):
    x = rng.standard_normal((n, c) + hw).astype(np.float32)
    w = rng.standard_normal((c, 1) + kernel).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    return x, w, b


def test_pack_depthwise():
    w = rng.standard_normal((16, 1, 3, 5)).astype(np.float32)
    wp = pack_depthwise(w)
    assert wp.shape == (2, 15, 8) and wp.flags.c_contiguous and not wp.flags.writeable
    for cb, t, lane in itertools.product(range(2), range(15), range(8)):
        assert wp[cb, t, lane] == w[cb * 8 + lane, 0, t // 5, t % 5]
    with pytest.raises(ValueError):
        pack_depthwise(np.zeros((12, 1, 3, 3), np.float32))


GRID = [(k, s, d, p) for k in [(3, 3), (5, 5), (1, 3), (3, 1)]
        for s in [(1, 1), (2, 2), (3, 1)]
        for d in [(1, 1), (2, 2)]
        for p in [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (0, 2, 1, 0)]]


@pytest.mark.parametrize("kernel,strides,dilations,pads", GRID)
@pytest.mark.parametrize("lanes", [8, 16])
def test_matches_onnxruntime(kernel, strides, dilations, pads, lanes):
    for i, hw in enumerate(SIZES):
        out_hw = tuple(out_size(hw[a], kernel[a], strides[a], dilations[a], pads[a], pads[a + 2]) for a in (0, 1))
        if min(out_hw) < 1:
            continue  # no output for this geometry (ONNX: invalid)
        x, w, b = case((8, 16, 24)[i % 3] * lanes // 8, hw, kernel, strides, dilations, pads)
        got = ours(x, w, b, strides, dilations, pads, out_hw, lanes=lanes)
        assert_close(got, reference(x, w, b, strides, dilations, pads), 1e-5, f"{hw} {kernel} {strides}")


def test_outputs_entirely_in_padding():
    # pads beyond the kernel's reach: the border rows and columns see only padding, and get B
    x, w, b = case(16, (2, 3), (3, 3), (1, 1), (1, 1), (4, 5, 3, 4))
    pads = (4, 5, 3, 4)
    out_hw = (out_size(2, 3, 1, 1, 4, 3), out_size(3, 3, 1, 1, 5, 4))
    got = ours(x, w, b, (1, 1), (1, 1), pads, out_hw)
    assert_close(got, reference(x, w, b, (1, 1), (1, 1), pads), 1e-5)
    np.testing.assert_array_equal(got[:, :, 0, 0], np.broadcast_to(b, (2, 16)))
    # strided, dilated: whole output rows whose taps all fall in the padding
    x, w, b = case(8, (3, 3), (3, 3), (2, 2), (3, 3), (7, 7, 7, 7))
    out_hw = (out_size(3, 3, 2, 3, 7, 7),) * 2
    got = ours(x, w, b, (2, 2), (3, 3), (7, 7, 7, 7), out_hw)
    assert_close(got, reference(x, w, b, (2, 2), (3, 3), (7, 7, 7, 7)), 1e-5)


ACTS = [(ep.RELU, 0.0, 0.0, lambda y: np.maximum(y, 0)),
        (ep.CLIP, -0.5, 1.5, lambda y: np.clip(y, -0.5, 1.5)),
        (ep.HARD_SIGMOID, 0.2, 0.5, lambda y: np.clip(y * np.float32(0.2) + np.float32(0.5), 0, 1)),
        (ep.HARD_SWISH, 0.0, 0.0, lambda y: y * np.clip(y / np.float32(6) + np.float32(0.5), 0, 1)),
        (ep.LEAKY_RELU, 0.1, 0.0, lambda y: np.where(y >= 0, y, y * np.float32(0.1)))]


@pytest.mark.parametrize("act,p0,p1,formula", ACTS)
@pytest.mark.parametrize("hw,pads", [((14, 14), (1, 1, 1, 1)), ((60, 9), (2, 0, 1, 2))])
@pytest.mark.parametrize("lanes", [8, 16])
def test_activation_after_bias(act, p0, p1, formula, hw, pads, lanes):
    x, w, b = case(24 * lanes // 8, hw, (3, 3), (1, 1), (1, 1), pads)
    x[1, 5, 4, 3] = np.nan  # passes through every activation, as in numpy
    out_hw = (out_size(hw[0], 3, 1, 1, pads[0], pads[2]), out_size(hw[1], 3, 1, 1, pads[1], pads[3]))
    got = ours(x, w, b, (1, 1), (1, 1), pads, out_hw, act, p0, p1, lanes)
    assert_close(got, formula(reference(x, w, b, (1, 1), (1, 1), pads)), 1e-5, f"activation {act}")
    # fused in registers, the same bits as epilogue's activation applied to the unfused output
    plain = ours(x, w, b, (1, 1), (1, 1), pads, out_hw, lanes=lanes).reshape(-1)
    ep.activate_inplace(plain, act, p0, p1)
    np.testing.assert_array_equal(got, plain.reshape(got.shape))


@pytest.mark.parametrize("kernel", [(3, 3), (5, 5)])
@pytest.mark.parametrize("strides", [(1, 1), (1, 2)])
def test_narrow_interior_rows_take_the_tap_loop(kernel, strides):
    """Interior tiles narrower than UNROLLED_MIN go to the tap loop (_tile), wider ones to the written-out
    variants: every interior width from 1 to 9 pixels, both kinds of tile beside each other in a row."""
    from pooled_predictor.ops.cpu.compiled import nchwc_depthwise

    assert nchwc_depthwise.UNROLLED_MIN == 4
    kh, kw = kernel
    pads = (kh // 2, kw // 2, kh // 2, kw // 2)
    for interior in range(1, 10):
        # output width: the interior plus the border columns each side (pad // stride rounded up)
        wd = (interior - 1) * strides[1] + kw
        x, w, b = case(16, (6, wd), kernel, strides, (1, 1), pads)
        out_hw = tuple(out_size((6, wd)[a], kernel[a], strides[a], 1, pads[a], pads[a + 2]) for a in (0, 1))
        got = ours(x, w, b, strides, (1, 1), pads, out_hw)
        assert_close(got, reference(x, w, b, strides, (1, 1), pads), 1e-5, f"interior {interior}")
