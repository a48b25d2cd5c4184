"""A pointwise convolution and the depthwise convolution reading it, a panel of channels at a time (NCHW8c).

    T[n, m, p]  = act1(b1[m] + sum_k W1[m, k] * X[n, k, p] (+ Z[n, m, p]))           (1x1 Conv, group 1)
    Y[n, m, q]  = act2(b2[m] + sum_{i, j} W2[m, 0, i, j] * T[n, m, window(q, i, j)])  (depthwise Conv)

(ONNX Conv, section "Conv", twice: the expansion and the depthwise convolution
of an inverted residual block, MobileNetV2 (Sandler et al. 2018), or the
pointwise convolution of one depthwise-separable block and the depthwise
convolution of the next, MobileNetV1 / PP-LCNet.) T is 6x X's channels in
MobileNetV2; run as two nodes it is written out whole and read back, out of
L2 (56x56x144 floats: 1.8 MB) and, at batch 8, out of L3 (2.7-14 MB). Here,
per image, each output panel of the pointwise GEMM (16 or 24 channels,
compiled/nchwc_gemm.py's panels) is computed over every pixel into a
scratch buffer (16 x H x W floats: 200 KB at 56x56), activated, and the
depthwise kernel (compiled/nchwc_depthwise.py) reads those two or three
blocks from it while they are in L2: T never exists whole. Measured on
MobileNetV2's pairs, one thread: 0.90-0.99x the two kernels' time at batch
1, 0.74-0.98x at batch 8.

Numerically the same operations in the same order as the two kernels run
apart (the panel's multiply-add chains over k, KC chunks stored and loaded
back exactly, then the bias, Z and the activation; then the depthwise taps),
so the same bits as the unfused pair (tests/ops/test_nchwc_chain.py).

Widths: a template over LANES (compiled/widths.py): NCHW8c imported as itself, NCHW16c as
lanes16/nchwc_chain.py over lanes16's GEMM and depthwise kernels; read every 8 as BLOCK = LANES.
"""

from __future__ import annotations

import numpy as np
from numba import types

from .epilogue import activate_range
from .jit import njit
from .widths import lanes_here, sibling

LANES = lanes_here(globals())  # 8 imported as itself; 16 as lanes16/nchwc_chain.py (compiled/widths.py)
depthwise_nchwc = sibling(globals(), "nchwc_depthwise").depthwise_nchwc  # both at this width
_pointwise = sibling(globals(), "nchwc_gemm")
BLOCK, KC, KC_PROJECTION, _panel, panel_widths = (_pointwise.BLOCK, _pointwise.KC, _pointwise.KC_PROJECTION,
                                                  _pointwise._panel, _pointwise.panel_widths)

_f4, _i8 = types.float32, types.int64
_R1 = types.Array(_f4, 1, "C", readonly=True)
_F1 = types.Array(_f4, 1, "C")
_O1 = types.Array(_i8, 1, "C", readonly=True)
_R3 = types.Array(_f4, 3, "C", readonly=True)
_W5 = types.Array(_f4, 5, "C")
_WIDTHS = types.Array(_i8, 1, "C", readonly=True)


def panel_starts(m_n: int) -> np.ndarray:
    """The first channel of each of nchwc_gemm's output panels of W1 (pack_weights' order), and m_n
    at the end: (panels + 1,) read-only int64."""
    starts = np.cumsum([0] + panel_widths(m_n)).astype(np.int64)
    starts.flags.writeable = False
    return starts


def scratch_size(m_n: int, h: int, w: int, group_bytes: int) -> int:
    """Floats of scratch pointwise_depthwise_nchwc needs: its largest group of panels over one image's
    H x W (the widest panel, or more panels within group_bytes)."""
    return max(max(panel_widths(m_n)) * h * w, min(m_n * h * w, group_bytes // 4))


@njit(types.void(_R1, _R1, _O1, _R1, _i8, _f4, _f4, _R1, types.boolean, _WIDTHS, _F1,
                 _R3, _R1, _W5, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _f4, _f4, _i8),
      nogil=True, cache=True, error_model="numpy")
def pointwise_depthwise_nchwc(wp, xf, offs, b1, act1, p10, p11, zf, has_z, starts, scr,
                              wd, b2, out, h, w, kh, kw, sh, sw, dh, dw, ph, pw, act2, p20, p21, group_bytes):
    """out = act2(depthwise(act1(W1 X + b1 (+ Z)), W2) + b2) over every image, NCHW8c in and out.

    Args:
        wp: W1 (M, K) packed by nchwc_gemm.pack_weights (M % 8 == 0, K % 8 == 0).
        xf, offs: X (N, KS/8, H, W, 8) flat; offs = nchwc_gemm.channel_offsets(K, H * W): its K channels
            (KS = K rounded up to the block: padding channels after K are not read).
        b1, act1, p10, p11: the pointwise bias (M,) and activation (epilogue.py codes, parameters; applied by
            activate_range on the scratch, so codes.RANGE_CODES' GELU would run too).
        zf, has_z: the pointwise sum input Z, laid out as T (N, M/8, H, W, 8) flat, when has_z.
        starts: panel_starts(M).
        scr: scratch, at least scratch_size(M, H, W) floats; its content on entry is never read.
        wd: W2 packed by nchwc_depthwise.pack_depthwise: (M/8, KH*KW, 8).
        b2, act2, p20, p21: the depthwise bias (M,) and activation.
        out: (N, M/8, OH, OW, 8), C-contiguous.
        h, w / kh, kw / sh, sw / dh, dw / ph, pw: T's plane, the depthwise kernel, strides, dilations,
            pads_begin (OH, OW from out: they set the end padding).
    """
    k_n, p_n = offs.size, h * w
    m_n = starts[starts.size - 1]
    n_b, oh_n, ow_n = out.shape[0], out.shape[2], out.shape[3]
    ldb = BLOCK * p_n
    of = out.reshape(out.size)
    kc = KC_PROJECTION if k_n > m_n and 32 <= m_n <= 96 else KC  # gemm_nchwc's K chunks (a projection's smaller)
    x_image = xf.size // n_b  # KS x P: an image of X as stored
    for n in range(n_b):
        x0 = n * x_image
        i = 0
        while i < starts.size - 1:
            # a group of panels [i, e): one panel, and more while their blocks fit GROUP_BYTES
            e = i + 1
            while e < starts.size - 1 and (starts[e + 1] - starts[i]) * p_n * 4 <= group_bytes:
                e += 1
            mg, g = starts[i], (starts[e] - starts[i]) // BLOCK
            t0 = n * m_n * p_n + (mg // BLOCK) * ldb  # the group's first element in T
            # scr[j * ldb + p * 8 + l] = T[n, mg + 8 j + l, p]: _panel writes block m // 8 at y0 + (m // 8) * ldb;
            # Z is read at the same indices as Y, so through a view from T's own offset
            y0 = -(mg // BLOCK) * ldb
            zv = zf[t0:] if has_z else zf
            for q in range(i, e):
                m0, width = starts[q], starts[q + 1] - starts[q]
                for k0 in range(0, k_n, kc):
                    kn = min(kc, k_n - k0)
                    last = k0 + kn == k_n
                    mode = (1 if k0 > 0 else 0) | (2 if last else 0) | (4 if last and has_z else 0)
                    _panel(wp, xf, x0, offs, BLOCK, scr, y0, ldb, k_n, k0, kn, m0, width, 0, p_n, b1, mode, zv)
            if act1 != 0:
                for j in range(g):
                    activate_range(scr, np.uint64(j * ldb), np.uint64(ldb), act1, p10, p11)
            o0 = (n * (m_n // BLOCK) + mg // BLOCK) * oh_n * ow_n * BLOCK
            depthwise_nchwc(scr[:g * ldb].reshape((1, g, h, w, BLOCK)), wd[mg // BLOCK:mg // BLOCK + g],
                            b2[mg:mg + g * BLOCK],
                            of[o0:o0 + g * oh_n * ow_n * BLOCK].reshape((1, g, oh_n, ow_n, BLOCK)),
                            kh, kw, sh, sw, dh, dw, ph, pw, act2, p20, p21)
            i = e
