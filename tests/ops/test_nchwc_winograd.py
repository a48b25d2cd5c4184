"""Winograd F(m x m, 3 x 3) in NCHW8c (compiled/nchwc_winograd.py, conv_nchwc "winograd" kind): the kernel
against a float64 direct convolution over a grid of shapes, pads, batches, tile sizes, sum inputs and
activations; in a model, against onnxruntime, with the node kept blocked and MEMORY bit-identical to NONE."""

import math

import numpy as np
import pytest
from onnx import helper

from pooled_predictor.ops.cpu import conv_nchwc
from pooled_predictor.ops.cpu.compiled import epilogue, widths
from tests.ops.test_nchwc import _model, _w, _y_under_none_and_memory, blocked, f32, unblocked
from tests.onnx_helpers import run_ort

pytestmark = pytest.mark.usefixtures("lanes8")  # NCHW8c structures (the 16-lane ones: test_nchwc16.py)

# F(2x2,3x3): direct convolution's error; F(4x4,3x3): transform entries up to 8 (compiled/winograd.py)
TOL = {2: 1e-6, 4: 2e-5}


def _direct(x, w, b, pads):
    """float64 cross-correlation, stride 1, pads (top, left, bottom, right)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("mc,nchw->nmhw", w[:, :, i, j].astype(np.float64), xp[:, :, i:i + oh, j:j + ow])
    return y + b[None, :, None, None]


def _run(x, w, b, pads, m, z=None, act=epilogue.NONE, a0=0.0, a1=0.0, group=None, block_rows=None, lanes=8):
    """winograd_nchwc over X (NCHW, blocked here), `group` images per call, `block_rows` rows of tiles a
    block (None: all of the call's); Y back in NCHW. lanes: 8 (NCHW8c) or 16 (NCHW16c, compiled/lanes16)."""
    L, layout = lanes, f"NCHW{lanes}c"  # noqa: N806
    winograd_nchwc = widths.module("nchwc_winograd", lanes).winograd_nchwc
    channel_offsets = widths.module("nchwc_gemm", lanes).channel_offsets
    n, c, h, wd = x.shape
    mo, a = w.shape[0], m + 2
    oh, ow = h + pads[0] + pads[2] - 2, wd + pads[1] + pads[3] - 2
    th, tw = math.ceil(oh / m), math.ceil(ow / m)
    group = group or n
    block_rows = block_rows or group * th
    t_pitch = block_rows * tw
    up = conv_nchwc.winograd_weights(w, m, lanes)
    hp, wp = th * m + 2, tw * m + 2
    xb = blocked(x, layout)
    v, mb = np.full(a * a * c * t_pitch, np.nan, np.float32), np.full(a * a * mo * t_pitch, np.nan, np.float32)
    y = np.full(n * mo * oh * ow, np.nan, np.float32)
    zf = blocked(z, layout).reshape(-1) if z is not None else np.zeros(1, np.float32)
    zero = np.zeros(mo, np.float32)
    for n0 in range(0, n, group):
        k = min(group, n - n0)
        pad = np.full((k, c // L, hp, wp, L), 0, np.float32)
        pad[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = xb[n0:n0 + k]
        winograd_nchwc(pad.reshape(-1), k, c, hp, wp, th, tw, t_pitch, up, channel_offsets(c, t_pitch), v, mb, y,
                       n0 * mo * oh * ow, mo, oh, ow, b, zero, act, np.float32(a0), np.float32(a1), zf,
                       z is not None, m, block_rows)
    return unblocked(y.reshape(n, mo // L, oh, ow, L), (n, mo, oh, ow), layout)


# channels: one block, several, a 24-wide GEMM panel; planes: one tile, partial tiles at both edges,
# wide rows; pads: none, symmetric, one-sided (ONNX pads_begin != pads_end); several images per call
CASES = [(1, 8, 8, 3, 3, (0, 0, 0, 0)), (1, 8, 8, 5, 5, (1, 1, 1, 1)), (2, 16, 32, 7, 9, (1, 1, 1, 1)),
         (1, 24, 40, 13, 6, (0, 2, 2, 0)), (3, 32, 24, 14, 14, (1, 1, 1, 1)), (2, 16, 16, 1, 11, (1, 1, 1, 1)),
         (1, 64, 64, 17, 30, (2, 1, 0, 1))]


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("block_rows", [1, 2, 5])
@pytest.mark.parametrize("n, c, mo, h, w, pads", [CASES[2], CASES[4], CASES[6]])
def test_blocks_of_tile_rows_give_the_same_bits(m, block_rows, n, c, mo, h, w, pads):
    """Transforming and multiplying a block of tile rows at a time (across images, the last block shorter)
    changes no output's sums: the bits of one block for the whole call, with Z and an activation."""
    x, wt, b, z = f32(n, c, h, w), f32(mo, c, 3, 3), f32(mo), f32(n, mo, h + pads[0] + pads[2] - 2,
                                                                   w + pads[1] + pads[3] - 2)
    whole = _run(x, wt, b, pads, m, z=z, act=epilogue.CODES["Relu"])
    blocks = _run(x, wt, b, pads, m, z=z, act=epilogue.CODES["Relu"], block_rows=block_rows)
    np.testing.assert_array_equal(blocks, whole)


def test_block_rows_follow_the_budget(monkeypatch):
    """Blocks of tile rows whose V and M fit WINOGRAD_BLOCK_BYTES (one row at least) where U is small; one
    block for the whole call where U is large (every block reads all of U)."""
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_BLOCK_BYTES", 4 * 36 * (64 + 16) * 40 * 3)
    assert conv_nchwc.winograd_block_rows(6, 64, 16, 40, 30) == 3  # det's head: 3 rows of 40 tiles
    assert conv_nchwc.winograd_block_rows(6, 64, 16, 40, 2) == 2
    assert conv_nchwc.winograd_block_rows(6, 512, 512, 2, 2) == 2  # U 37 MB: the whole call
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_BLOCK_BYTES", 1)
    assert conv_nchwc.winograd_block_rows(6, 64, 16, 40, 30) == 1


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("n, c, mo, h, w, pads", CASES)
@pytest.mark.parametrize("lanes", [8, 16])
def test_winograd_kernel_matches_direct_convolution(m, n, c, mo, h, w, pads, lanes):
    """At 16 lanes the channels double (the same blocks and panels) and the output is the 8-lane one's bits."""
    c, mo = c * lanes // 8, mo * lanes // 8
    x, wt, b = f32(n, c, h, w), f32(mo, c, 3, 3), f32(mo)
    ref = _direct(x, wt, b, pads)
    got = _run(x, wt, b, pads, m, lanes=lanes)
    assert np.abs(got - ref).max() <= TOL[m] * np.abs(ref).max()
    if lanes != 8:
        np.testing.assert_array_equal(got, _run(x, wt, b, pads, m))


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("act, a0, a1, fn", [
    (epilogue.NONE, 0.0, 0.0, lambda v: v),
    (epilogue.RELU, 0.0, 0.0, lambda v: np.maximum(v, 0)),
    (epilogue.CLIP, -0.5, 0.75, lambda v: np.clip(v, -0.5, 0.75))])
@pytest.mark.parametrize("lanes", [8, 16])
def test_winograd_kernel_adds_the_sum_input_then_activates(m, act, a0, a1, fn, lanes):
    """act((conv + B) + Z), Z laid out as Y; images in groups of 2 over 3 (the last group short)."""
    n, c, mo, h, w, pads = 3, 16, 32, 9, 10, (1, 1, 1, 1)
    x, wt, b = f32(n, c, h, w), f32(mo, c, 3, 3), f32(mo)
    ref = _direct(x, wt, b, pads)
    z = f32(*ref.shape)
    got = _run(x, wt, b, pads, m, z=z, act=act, a0=a0, a1=a1, group=2, lanes=lanes)
    want = fn(ref + z)
    assert np.abs(got - want).max() <= TOL[m] * np.abs(ref).max() + 1e-6


def _winograd_model(c, m, n, h, w, pads, act):
    """1x1 conv -> 3x3 conv (+ act) -> 1x1 conv: the 3x3 conv between two blocked convs."""
    inits = [_w("wa", c, c, 1, 1), _w("wb", m, c, 3, 3), _w("bb", m), _w("wy", 8, m, 1, 1)]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"]),
             helper.make_node("Conv", ["a", "wb", "bb"], ["b"], pads=list(pads)),
             helper.make_node(act, ["b"], ["r"]),
             helper.make_node("Conv", ["r", "wy"], ["y"])]
    return _model("winograd", nodes, inits, (n, c, h, w))


@pytest.mark.parametrize("block_bytes", [1, conv_nchwc.WINOGRAD_BLOCK_BYTES])
@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("passes", [False, True])
@pytest.mark.parametrize("c, m, n, h, w, pads, act", [
    (16, 32, 1, 14, 14, (1, 1, 1, 1), "Relu"),
    (32, 40, 3, 9, 13, (1, 0, 1, 2), "Sigmoid"),
    (64, 64, 2, 7, 7, (1, 1, 1, 1), "Relu"),
    (64, 16, 1, 12, 15, (1, 1, 1, 1), "Relu"),  # PP-OCR det's head: 64 -> 16
    (8, 8, 2, 11, 9, (1, 1, 1, 1), "Relu")])  # one block in, one out
def test_winograd_convs_run_blocked_and_match_onnxruntime(tile, passes, c, m, n, h, w, pads, act, block_bytes,
                                                          monkeypatch):
    """The 3x3 conv runs as the NCHW8c Winograd kind (no reorder around it), onnxruntime's values; a
    group budget of one image exercises several calls, and a block budget of one byte one tile row a
    block (every U here is small); MEMORY gives NONE's bits."""
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_TILE", tile)
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_GROUP_BYTES", 1)
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_BLOCK_BYTES", block_bytes)
    seen = []
    init = conv_nchwc._BlockedConv._init_winograd
    monkeypatch.setattr(conv_nchwc._BlockedConv, "_init_winograd",
                        lambda self, ctx, wt: (init(self, ctx, wt), seen.append((self.group, self.block_rows))))
    model = _winograd_model(c, m, n, h, w, pads, act)
    x = f32(n, c, h, w)
    y, _ = _y_under_none_and_memory(model, x, passes)
    assert seen and seen[-1][0] == 1  # the 3x3 conv took the Winograd kind, one image per call
    assert (seen[-1][1] == 1) == (block_bytes == 1), seen  # one tile row a block, or all (3 rows at most here)
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL[tile] * 50 * np.abs(ref).max())


def test_winograd_kind_is_chosen_only_where_it_applies(monkeypatch):
    """Stride-1 3x3, group 1, dilation 1, one block of channels or more: "winograd"; strided, dilated,
    grouped or fewer channels: another kind. The NCHW path's Winograd keeps its own minimums (16 in,
    32 out)."""
    from pooled_predictor.ops.cpu import conv

    class G:
        def __init__(self, **kw):
            self.__dict__.update(dict(group=1, kernel=(3, 3), strides=(1, 1), dilations=(1, 1), in_channels=16,
                                      out_channels=32, out_shape=(7, 7)), **kw)

    assert conv_nchwc.winograd_fits(G())
    assert not conv_nchwc.winograd_fits(G(strides=(2, 2)))
    assert not conv_nchwc.winograd_fits(G(dilations=(2, 2)))
    assert not conv_nchwc.winograd_fits(G(group=2))
    assert not conv_nchwc.winograd_fits(G(kernel=(5, 5)))
    assert conv_nchwc.winograd_fits(G(out_channels=16)) and conv_nchwc.winograd_fits(G(in_channels=8, out_channels=8))
    assert not conv_nchwc.winograd_fits(G(out_channels=4))
    assert not conv_nchwc.winograd_fits(G(in_channels=4))
    # not with fewer than WINOGRAD_MIN_TILES tiles an image and a U over WINOGRAD_MAX_U_BYTES (36 x 512 x 512
    # floats: 36 MiB), at either width; the bound is half the host's last-level cache, set here to Zen 5's
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_MAX_U_BYTES", 16 << 20)
    big = dict(in_channels=512, out_channels=512)
    assert not conv_nchwc.winograd_fits(G(**big))
    assert not conv_nchwc.winograd_fits(G(out_shape=(8, 8), **big))  # 2 x 2 tiles
    assert conv_nchwc.winograd_fits(G(out_shape=(9, 9), **big))  # 3 x 3 tiles
    assert conv_nchwc.winograd_fits(G(out_shape=(14, 14), **big))
    assert conv_nchwc.winograd_fits(G(in_channels=192, out_channels=384))  # U 10 MiB (GoogLeNet's 5b at 7x7)
    assert conv.winograd_geometry(G()) and not conv.winograd_geometry(G(out_channels=16))
    assert not conv.winograd_geometry(G(in_channels=8))
