"""Winograd F(2x2,3x3) and F(4x4,3x3) (ops/cpu/compiled/winograd.py) against onnxruntime and direct conv."""

import numpy as np
import pytest
from scipy.signal import correlate

from pooled_predictor.ops.cpu import conv as conv_module
from pooled_predictor.ops.cpu.compiled.winograd import MATRICES, transform_weights
from tests.onnx_helpers import check_node
from tests.ops.test_conv import conv_kernel

rng = np.random.default_rng(5)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("m", [2, 4])
def test_transforms_compute_the_1d_correlation(m):
    g_mat, bt, at = MATRICES[m]
    d, g = rng.standard_normal(m + 2), rng.standard_normal(3)
    np.testing.assert_allclose(at @ ((g_mat @ g) * (bt @ d)), correlate(d, g, "valid"), atol=1e-12)


# (batch, C, M, H, W, pads): odd sizes, edge tiles cut, asymmetric and no padding, batch > 1
CASES = [(1, 16, 32, 13, 17, [1, 1, 1, 1]), (2, 20, 40, 9, 11, [0, 0, 0, 0]), (1, 16, 32, 7, 7, [1, 1, 1, 1]),
         (3, 17, 33, 10, 8, [1, 0, 2, 1]), (1, 32, 32, 30, 23, [1, 1, 1, 1])]


@pytest.mark.parametrize("f4_min_size", [0, 8])  # F(2x2,3x3) only; F(4x4,3x3) on planes >= 8
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n,c,m,h,w,pads", CASES)
def test_winograd_against_onnxruntime(n, c, m, h, w, pads, bias, f4_min_size, monkeypatch):
    monkeypatch.setattr(conv_module, "WINOGRAD_F4_MIN_SIZE", f4_min_size)
    inputs = [f32(n, c, h, w), f32(m, c, 3, 3)] + ([f32(m)] if bias else [])
    attrs = {"pads": pads}
    k, out_shape, _ = conv_kernel("Conv", inputs, attrs)
    assert k.path == "winograd" and k.wino_m == (4 if f4_min_size and min(out_shape[2:]) >= 8 else 2)
    check_node("Conv", inputs, attrs, opset=13, static=tuple(range(1, len(inputs))))


@pytest.mark.parametrize("tile", [2, 4])
def test_error_against_float64_direct_convolution(tile, monkeypatch):
    """Lavin & Gray's bound in practice: within a few 1e-6 of max|Y| on random data."""
    monkeypatch.setattr(conv_module, "WINOGRAD_F4_MIN_SIZE", 8 if tile == 4 else 0)
    x, w = f32(1, 64, 24, 24), f32(64, 64, 3, 3)
    k, shape, _ = conv_kernel("Conv", [x, w], {"pads": [1, 1, 1, 1]}, scratch=_alloc)
    assert k.wino_m == tile
    y = np.empty(shape, np.float32)
    k(x, w, out=y)
    xp = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    exact = np.stack([sum(correlate(xp[c], w[o, c].astype(np.float64), "valid") for c in range(64))
                      for o in range(64)])
    err = np.abs(y[0] - exact).max() / np.abs(exact).max()
    assert err < 1e-5, err


def _alloc(ref):
    ref.array = np.empty(ref.shape, ref.dtype)


def test_weights_transformed_once_and_shared(monkeypatch):
    monkeypatch.setattr(conv_module, "WINOGRAD_F4_MIN_SIZE", 8)
    w = f32(32, 16, 3, 3)
    w.flags.writeable = False
    x = f32(1, 16, 12, 12)
    k1, _, _ = conv_kernel("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    k2, _, _ = conv_kernel("Conv", [x, w], {"pads": [1, 1, 1, 1]})
    assert k1.u is k2.u and not k1.u.flags.writeable
    np.testing.assert_allclose(k1.u, transform_weights(w, 4))


def test_not_for_strided_grouped_or_few_channels():
    for inputs, attrs in [([f32(1, 16, 12, 12), f32(16, 16, 3, 3)], {"strides": [2, 2]}),
                          ([f32(1, 16, 12, 12), f32(16, 8, 3, 3)], {"group": 2}),
                          ([f32(1, 4, 12, 12), f32(32, 4, 3, 3)], {}),
                          ([f32(1, 64, 12, 12), f32(16, 64, 3, 3)], {}),  # few outputs: im2col
                          ([f32(1, 16, 12, 12), f32(16, 16, 3, 3)], {"dilations": [2, 2]})]:
        assert conv_kernel("Conv", inputs, attrs)[0].path != "winograd"


def test_scratch_limit_falls_back_to_im2col(monkeypatch):
    monkeypatch.setattr(conv_module, "WINOGRAD_MAX_SCRATCH", 1000)
    assert conv_kernel("Conv", [f32(1, 16, 12, 12), f32(32, 16, 3, 3)], {})[0].path == "im2col"
