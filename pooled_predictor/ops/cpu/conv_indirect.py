"""Indirect-GEMM convolution: 2-D Conv as one GEMM whose X rows are read in place.

Dukhan 2019, "The Indirect Convolution Algorithm": instead of copying every
window into a column matrix (im2col), the GEMM reads each row of the virtual
column matrix straight from the (padded) input through a table of offsets.

Row k = (c, kh, kw) of the column matrix, at output pixel p = oh * Wq + ow,
is padded-X[c, oh * sh + kh * dh, ow * sw + kw * dw]. The padded input is
split once per call into its sh x sw stride phases, plane (a, b)[i, j] =
padded-X[a + i * sh, b + j * sw] (compiled/phases.py), each (Hq, Wq) with one row pitch Wq, so
that padded-X[c, oh*sh + kh*dh, ow*sw + kw*dw] = plane(kh*dh % sh, kw*dw % sw)
[c, oh + kh*dh // sh, ow + kw*dw // sw]: for a fixed k the element sits at a
constant offset from p, and consecutive p are consecutive floats. That
offset is the table entry; compiled/gemm.py's micro-kernel then runs on
16 pixels at a time with W (M, C/group * KH * KW) packed once.

The plane rows are wider than the output by (KW - 1) * dw // sw. When OW is
a multiple of 16 the GEMM runs row by row (gemm2d_rows), straight into Y;
otherwise over the extended rows, pixels ow in [OW, Wq) of each row computed on
the way and dropped when Y is cropped out of the extended output (measured:
row by row, PP-OCR det's convs with 16 channels out at 240x320 took 3.1-3.2 ms
instead of 4.0-4.1, at 120x160 4-7% less, bit for bit the same outputs); when
Wq == OW the GEMM writes Y directly.
Workspace (per-Net scratch): the phase planes, N x C x sh*sw x Hq x Wq floats
(about the padded input's size) plus one row of slack, and, when cropping, one
image's extended output (M x OH x Wq). Bias and activation are fused into the
GEMM (compiled/gemm.py); its error is that of a float32 GEMM with K =
C/group * KH * KW terms.
"""

from __future__ import annotations

import numpy as np

from . import compiled
from .conv_shared import _run_fills, shared_weights


def phase_plane_shape(geo) -> tuple[int, int]:
    """(Hq, Wq): one stride phase plane's size, the output's plus the kernel's reach in strides."""
    (sh, sw), (dh, dw), (kh_n, kw_n) = geo.strides, geo.dilations, geo.kernel
    oh, ow = geo.out_shape
    return oh + (kh_n - 1) * dh // sh, ow + (kw_n - 1) * dw // sw


def phase_planes_fit(geo) -> bool:
    """Whether the stride phase planes of `geo` (sh x sw planes of Hq x Wq) take at most 4 times the zero-padded
    input, or the kernel's extent where that is larger (their usual size: one padded input, rounded up to the
    strides).
    A stride far beyond the input (crafted: 2^31 - 1, found by tests/fuzz) asks for 2^31 planes, nearly all of
    them padding: the paths built on them (the indirect kinds, NCHW, NCHW<block>c, quantized) are then not
    taken, and the node keeps a kernel that steps over X instead."""
    (sh, sw), (dh, dw), (kh_n, kw_n) = geo.strides, geo.dilations, geo.kernel
    hq, wq = phase_plane_shape(geo)
    ih = max(geo.in_shape[0] + geo.pads_begin[0] + geo.pads_end[0], (kh_n - 1) * dh + 1)
    iw = max(geo.in_shape[1] + geo.pads_begin[1] + geo.pads_end[1], (kw_n - 1) * dw + 1)
    return sh * sw * hq * wq <= 4 * ih * iw


def indirect_layout(geo, channels: int):
    """The phase planes and tap-offset table of an indirect convolution over `channels` input channels.

    Returns:
        (hq, wq, phases, offs): the phase planes' size, the stride phases (a, b) in plane order, and
        offs (channels * KH * KW,) read-only int64: row k = (c, kh, kw)'s element offset from an
        output pixel's in the planes of one image, c * len(phases) * hq * wq + plane * hq * wq +
        (kh * dh // sh) * wq + kw * dw // sw.
    """
    (sh, sw), (dh, dw), (kh_n, kw_n) = geo.strides, geo.dilations, geo.kernel
    hq, wq = phase_plane_shape(geo)
    phases = [(a, c) for a in range(sh) for c in range(sw)]
    plane = hq * wq
    offs = np.asarray([ci * len(phases) * plane + phases.index((kh * dh % sh, kw * dw % sw)) * plane
                       + (kh * dh // sh) * wq + kw * dw // sw
                       for ci in range(channels) for kh in range(kh_n) for kw in range(kw_n)], np.int64)
    offs.flags.writeable = False
    return hq, wq, phases, offs


class IndirectConv2d:
    """The indirect path of a Conv kernel (ops/cpu/conv.py): float32, 2-D, static W.

    Args:
        ctx: the node's OpContext (scratch).
        geo: its ConvGeometry; w: W (M, C/group, KH, KW); b: B as a flat read-only
            float32 vector (M,) (zeros without a bias).
        phase_fills: conv._phase_fills (the zero-padded phase split).
    """

    def __init__(self, ctx, geo, w, b, phase_fills):
        g = geo
        self.geo = g
        oh, ow = g.out_shape
        n, c = g.batch, g.in_channels
        self.cg, self.mg = c // g.group, g.out_channels // g.group
        # offsets of row k = (c, kh, kw) within one group's channels
        self.hq, self.wq, self.phases, self.offs = indirect_layout(g, self.cg)
        f = len(self.phases)
        self.plane = self.hq * self.wq
        self.image = c * f * self.plane
        self.planes_ref = ctx.scratch((n * self.image + self.wq,), np.float32)
        self.fills = phase_fills(g, (self.hq, self.wq), self.phases)

        def pack(w):
            wm = np.asarray(w, np.float32).reshape(g.group, self.mg, -1)
            return tuple(compiled.gemm.pack_weights(wm[i]) for i in range(g.group))

        self.wp = shared_weights(w, ("packed groups", g.group), pack)  # one copy for every Net
        self.b = [b[i * self.mg:(i + 1) * self.mg] for i in range(g.group)]  # contiguous read-only views
        self.p_ext = oh * self.wq
        # output rows a multiple of 16 wide: the GEMM runs row by row into Y (no partial tiles);
        # else over the extended rows, cropped after (the last columns of each row dropped)
        self.rowwise = self.wq != ow and ow % 16 == 0
        self.crop = self.wq != ow and not self.rowwise
        self.y_ref = ctx.scratch((g.out_channels * self.p_ext,), np.float32) if self.crop else None
        self.ws_ref = ctx.scratch((max(1, compiled.gemm.scratch_size(ow if self.rowwise else self.p_ext)),), np.float32)
        self._key = None

    def _views(self, x, planes):
        key = (x, planes)
        if self._key is None or any(a is not b for a, b in zip(self._key, key)):
            view = planes[:self.geo.batch * self.image].reshape(
                (self.geo.batch, self.geo.in_channels, len(self.phases), self.hq, self.wq))
            pairs = []
            for fill in self.fills:
                pairs += fill.views(x, view)
            self._pairs, self._key = pairs, key
        return self._pairs

    def __call__(self, x, out, act):
        """out = act(conv(x) + B); act: (code, p0, p1), compiled/epilogue.py's activation."""
        compiled.run_steps(self.steps(x, out, act))

    def steps(self, x, out, act):
        """__call__'s calls, in order: (function, arguments) (compiled.prepared binds them once)."""
        g = self.geo
        planes = self.planes_ref.array
        if x.flags.c_contiguous:  # the compiled split (compiled/phases.py), 3x numpy's for stride 2
            (sh, sw), (ph, pw) = g.strides, g.pads_begin
            steps = [(compiled.phases.split_phases, (x, planes, self.hq, self.wq, sh, sw, ph, pw))]
        else:
            steps = [(_run_fills, (self._views(x, planes),))]
        # the slack read by the last row's dropped pixels
        steps.append((compiled.reorder.fill, (planes[g.batch * self.image:], np.float32(0.0))))
        ws = self.ws_ref.array
        oh, ow = g.out_shape
        yf = self.y_ref.array if self.crop else out.reshape(-1)
        f, gemm = len(self.phases), compiled.gemm
        for n in range(g.batch):
            if self.rowwise:
                for gi in range(g.group):
                    y0 = (n * g.out_channels + gi * self.mg) * oh * ow
                    steps.append((gemm.gemm2d_rows, (self.wp[gi], planes, n * self.image + gi * self.cg * f * self.plane,
                                                self.offs, self.wq, yf, y0, oh * ow, ow, oh, self.mg, ow, self.b[gi],
                                                ws, *act)))
                continue
            y0 = 0 if self.crop else n * g.out_channels * self.p_ext
            for gi in range(g.group):
                steps.append((gemm.gemm2d, (self.wp[gi], planes, n * self.image + gi * self.cg * f * self.plane, self.offs,
                                       yf, y0 + gi * self.mg * self.p_ext, self.p_ext, self.mg, self.p_ext, self.b[gi],
                                       ws, *act)))
            if self.crop:
                steps.append((np.copyto, (out[n], yf.reshape(g.out_channels, oh, self.wq)[:, :, :ow])))
        return steps
