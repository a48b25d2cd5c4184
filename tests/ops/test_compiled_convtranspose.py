"""ConvTranspose's fused tile kernel (compiled/col2im.py tile_gemm_scatter_w2: kernel (kh, 2) = strides,
no padding, group 1, static W) against onnxruntime: kh 1..3, input widths on and past multiples of 16
(the scalar column tail), odd and even channel counts (the k loop runs in pairs), output channels
giving every tile of 1..3 row pairs, batch 2, with and without a bias."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node
from tests.ops.test_compiled_pooling import build, f32, ours_both

CASES = [  # X (N, C, H, W), W (C, M, kh, 2)
    ((1, 16, 3, 16), (16, 16, 2, 2)), ((2, 3, 4, 17), (3, 5, 2, 2)), ((1, 1, 2, 37), (1, 1, 2, 2)),
    ((1, 33, 2, 40), (33, 2, 3, 2)), ((2, 4, 3, 21), (4, 3, 1, 2)), ((1, 8, 5, 32), (8, 1, 2, 2))]


@pytest.mark.parametrize("xs,ws", CASES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_fused_tile_against_onnxruntime(xs, ws, bias, monkeypatch):
    x, w = f32(*xs), f32(*ws)
    inputs = [x, w, f32(ws[1])] if bias else [x, w]
    attrs = {"kernel_shape": list(ws[2:]), "strides": list(ws[2:])}
    assert build("ConvTranspose", inputs, attrs).tile_fused
    check_node("ConvTranspose", inputs, attrs, opset=13, static=tuple(range(1, len(inputs))))
    fast, ref = ours_both("ConvTranspose", inputs, attrs, 13, static=tuple(range(1, len(inputs))),
                          monkeypatch=monkeypatch)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def test_fused_tile_needs_static_weights_width_2_and_one_group():
    x = f32(1, 4, 3, 20)
    stride2 = {"kernel_shape": [2, 2], "strides": [2, 2]}
    assert not build("ConvTranspose", [x, f32(4, 2, 2, 3)], {"kernel_shape": [2, 3], "strides": [2, 3]}).tile_fused
    assert not build("ConvTranspose", [x, f32(4, 1, 2, 2)], dict(stride2, group=2)).tile_fused
    assert not build("ConvTranspose", [f32(1, 4, 3, 15), f32(4, 2, 2, 2)], stride2).tile_fused  # W < 16
    check_node("ConvTranspose", [x, f32(4, 2, 2, 2), f32(2)], stride2, opset=13, static=())  # fed W: numpy


def test_fused_tile_takes_strided_arrays():
    """Not a Net's blobs: X and Y strided views (copied through contiguous arrays)."""
    x_full, w, b = f32(1, 4, 3, 40), f32(4, 3, 2, 2), f32(3)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    x = x_full[:, :, :, ::2]
    kern = build("ConvTranspose", [np.ascontiguousarray(x), w, b], attrs)
    assert kern.tile_fused
    out_full = np.zeros((1, 3, 6, 80), np.float32)
    out = out_full[:, :, :, ::2]
    kern(x, w, b, out=out)
    ref = np.zeros((1, 3, 6, 40), np.float32)
    kern(np.ascontiguousarray(x), w, b, out=ref)
    np.testing.assert_array_equal(out, ref)
    check_node("ConvTranspose", [np.ascontiguousarray(x), w, b], attrs, opset=13, static=(1, 2))
