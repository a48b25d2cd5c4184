"""QLinearConv in integers: the compiled path of ops/cpu/quantized.py's QLinearConv.

    y = saturate(rint((conv(x - x_zp, W - w_zp) + B) * x_scale * w_scale[m] / y_scale) + y_zp)

(ONNX Operators.md#QLinearConv.) Taken for 2-D convolutions whose weights, bias,
scales and zero points are static, with a per-tensor x_zero_point / y_zero_point
(the spec's) and w_scale / w_zero_point per tensor or per output channel:

* gemm -- every group of output channels is one integer GEMM (compiled/qgemm.py)
  per image whose rows (k = (c, kh, kw)) are read in place from the stride phases
  of the input padded with x_zp (compiled/qconv.py's split; skipped for a 1x1,
  unpadded, ungrouped conv: X read as is, or strided, its pixels packed first by subsample_q; its
  last P % 16 pixels through a 16-wide strip),
  through an offset table (conv_indirect.indirect_layout): no column matrix. The
  requantization runs on each 6 x 16 tile in registers and the tile is stored as
  8-bit; rows computed past the output width (the taps' reach) land in a scratch
  image cropped after -- except under the saturating arithmetic with OW >= 5, whose
  GEMM runs over the output's pixels only, each 16-pixel tile's X gathered across
  output rows as it is packed (compiled/qgemm.py's qgemm2d_sat_rows). With an exact
  dot product on a 16-lane target, a non-pointwise, ungrouped conv of 16 or more input
  channels (C % 4 == 0) whose planes are at most 1/8 wider than its output reads X in
  place instead: its phase planes interleaved 4
  channels a pixel (compiled/qconv.py's quad_planes_q), the output computed on the
  planes' grid and its rows stored by segment (compiled/qgemm.py's qconv_direct), or,
  where the grid's 16-position tiles would add more than 1/16 to the pixels (14 x 14
  and 7 x 7 outputs) and M % 16 == 0, with the output channels in the lanes and each
  pixel's quad broadcast from the planes (qconv_direct_chlanes; ResNet-50's 3x3 layers
  1.08x the packed tiles' speed in sum on Zen 5; POOLED_PREDICTOR_QCONV_DIRECT=0: packed
  tiles). Otherwise, with an exact dot product on a 16-lane target, an output whose
  pixels fill 16-pixel tiles poorly (7 x 7) runs with the output channels in the lanes
  from packed tiles (qgemm2d_chlanes; M % 16 == 0).
* depthwise -- group == C == M: in int32, exact (as MLAS's depthwise kernels): 8 channels or
  more with the channels in the vector lanes (compiled/qdepthwise.py: blocks of 8 planes
  transposed channels-last and back, widened to int16 in tap pairs, two taps a vpmaddwd; any
  kernel, stride, padding, dilation); fewer, a 3x3,
  stride-1, pad-1 one from X itself (compiled/qconv.py's depthwise3x3s1_q), any other from the
  phase planes (depthwise_q; 3x3 in one flat pass over each channel's extended output).

W' = W - w_zp is packed once (shared by every Net); B - x_zp * sum_k W'[m, k] is the
int32 bias (the input's zero point folded in, so padding with x_zp adds nothing);
the multiplier x_scale * w_scale[m] / y_scale is computed in float32 (onnxruntime's
order); the requantization is MLAS's. The integer sum follows the Net's int8
arithmetic (ops/int8_arithmetic.py): a uint8-input, int8-weight, zero-weight-zero-point,
non-depthwise convolution runs compiled/qgemm.py's qgemm2d_sat with k in onnxruntime's order,
(kh, kw, c) within a group (its im2col on NHWC, or MLAS's symmetric convolution, 4 channels a
tap), 4 k in each 32-bit lane, summed by int8_arithmetic.dot_product()'s instruction: under
"onnxruntime" on a host without VNNI adjacent products summed in int16 with saturation as MLAS's
vpmaddubsw sums them (the output is onnxruntime's bit for bit); on a VNNI host exactly by
vpdpbusd, as MLAS there (compiled/dots.py), and on a host with AMX-INT8 (Sapphire Rapids and later
Xeons) by TDPBSUD on AMX tiles (compiled/amx.py, driven by qgemm.qconv_amx: X packed 256 pixels at a time,
then 32 output channels x 32 pixels a block, the same exact sums and requantization: the vpdpbusd kernels'
bits; POOLED_PREDICTOR_AMX_CONV=1 turns it on: not yet timed on AMX hardware). Otherwise the sum is exact
(qgemm2d), which is onnxruntime's too wherever its pair sums do not saturate (tests/ops/test_compiled_int8.py,
tests/ops/test_int8_arithmetic.py).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from .. import int8_arithmetic
from . import compiled
from .conv_indirect import indirect_layout, phase_planes_fit
from .conv_shared import shared_weights

SLACK = 64  # elements past the phase planes: the last 16-pixel tile's reads past the last row
QUAD_SLACK = 256  # bytes past the quad planes: qconv_direct's last tile reads up to 16 pixels past a plane


def direct_enabled() -> bool:
    """Whether QLinearConv may read X in place from quad planes (compiled/qgemm.py's qconv_direct; read when a
    node's kernel is built): POOLED_PREDICTOR_QCONV_DIRECT=0 packs X tiles instead (qgemm2d_sat_rows)."""
    return os.environ.get("POOLED_PREDICTOR_QCONV_DIRECT", "1").strip() != "0"


def _scalar(a) -> bool:
    return np.size(a) == 1


def is_depthwise(geo) -> bool:
    """A depthwise QLinearConv (group == C == M > 1): its own kernels here, and exact sums in onnxruntime's MLAS
    on every host (ops/int8_arithmetic.py)."""
    return geo.group == geo.in_channels == geo.out_channels > 1


def one_window_strides(geo):
    """`geo` with stride 1 along each axis that has one output position: that axis reads one window, whatever its
    stride (a crafted stride of 2^31 - 1 over a 6-pixel input, tests/fuzz), and at stride 1 its phase planes fit,
    so such a node still takes the integer kernels, and their arithmetic (onnxruntime's saturating pairs on a host
    without VNNI, where the float64 reference path sums exactly)."""
    strides = tuple(1 if o == 1 else s for o, s in zip(geo.out_shape, geo.strides))
    return geo if strides == tuple(geo.strides) else dataclasses.replace(geo, strides=strides)


def compiled_qconv(ctx, geo) -> "QConvCompiled | None":
    """The compiled integer path for a QLinearConv node at these shapes, or None where it does not apply."""
    geo = one_window_strides(geo)
    if not compiled.active() or geo.rank != 2 or not phase_planes_fit(geo):
        return None
    x_t, w_t, y_t = ctx.dtype(0), ctx.dtype(3), ctx.dtype(7)
    if any(t not in (np.dtype(np.uint8), np.dtype(np.int8)) for t in (x_t, w_t, y_t)):
        return None
    if not all(ctx.is_static(i) for i in (1, 2, 3, 4, 5, 6, 7)) or (ctx.has_input(8) and not ctx.is_static(8)):
        return None
    if not all(_scalar(ctx.value(i)) for i in (1, 2, 6, 7)):
        return None
    m = geo.out_channels
    if not all(np.size(ctx.value(i)) in (1, m) for i in (4, 5)):
        return None
    k = geo.in_channels // geo.group * int(np.prod(geo.kernel))
    if k >= 33000:  # K * 255 * 255 must stay below 2^31 (qgemm.py)
        return None
    return QConvCompiled(ctx, geo)


class QConvCompiled:
    """The gemm / depthwise paths (module docstring); called as obj(x, out)."""

    def __init__(self, ctx, geo):
        g = self.geo = geo
        m, c = g.out_channels, g.in_channels
        self.cg, self.mg = c // g.group, m // g.group
        w = ctx.value(3)
        x_zp = int(np.asarray(ctx.value(2)).reshape(()))
        w_zp = np.asarray(ctx.value(5)).astype(np.int32).reshape(-1)
        w_zp = np.broadcast_to(w_zp, (m,))
        x_scale = np.float32(np.asarray(ctx.value(1)).reshape(()))
        y_scale = np.float32(np.asarray(ctx.value(6)).reshape(()))
        w_scale = np.broadcast_to(np.asarray(ctx.value(4), np.float32).reshape(-1), (m,))
        self.zp = int(np.asarray(ctx.value(7)).reshape(()))
        self.x_zp = x_zp
        mult = ((x_scale * w_scale).astype(np.float32) / y_scale).astype(np.float32)
        bias = np.zeros(m, np.int64) if not ctx.has_input(8) else np.asarray(ctx.value(8), np.int64).reshape(-1)
        wm = np.asarray(w).reshape(m, -1)
        b = bias - x_zp * compiled.qgemm.row_sums(wm, w_zp)
        self.b = self._ro(b.astype(np.int32))
        self.mult = self._ro(mult)
        (sh, sw), (ph, pw) = g.strides, g.pads_begin
        oh, ow = g.out_shape
        h, wd = g.in_shape
        self.depthwise = is_depthwise(g)
        # the quad kernels (4 k a 32-bit lane, k = (kh, kw, c)) with the dot product of the arithmetic on this
        # host (int16-saturated pairs, vpmaddubsw; exact, vpdpbusd or emulated); else the exact int16-pair kernels
        dot = int8_arithmetic.dot_product()
        self.sat = (dot is not None and not self.depthwise and ctx.dtype(0) == np.uint8
                    and ctx.dtype(3) == np.int8 and not w_zp.any())
        self.dot = dot if self.sat else None
        self.q = compiled.dots.module("qgemm", dot) if self.sat else compiled.qgemm
        self.arithmetic = ("int16-saturated pairs" if dot == "vpmaddubsw" else "exact") + f" ({dot or 'vpmaddwd'})"
        self.direct = (not self.depthwise and g.kernel == (1, 1) and g.group == 1
                       and g.pads_begin == (0, 0) and g.pads_end == (0, 0))
        # a strided one (ResNet's downsamples): its pixels packed first (compiled/qconv.py's subsample_q)
        self.subsampled = self.direct and g.strides != (1, 1)
        # 3x3, stride 1, pads 1: read from X itself (compiled/qconv.py's depthwise3x3s1_q), no padded copy
        # channels in the lanes (compiled/qdepthwise.py): every depthwise conv of 8 channels or more
        self.dw_cl = self.depthwise and c >= compiled.qdepthwise.CB
        self.dw3s1 = (self.depthwise and not self.dw_cl and g.kernel == (3, 3) and g.strides == (1, 1)
                      and g.dilations == (1, 1) and g.pads_begin == (1, 1) and g.pads_end == (1, 1))
        if self.dw3s1:
            taps = np.asarray([kh * wd + kw for kh in range(3) for kw in range(3)], np.int64)
            self.taps = self._ro(taps)
        if self.dw_cl:
            wp, hp, cstep, self.cl_offs = compiled.qdepthwise.geometry(h, wd, oh, ow, g.kernel, g.strides,
                                                                       g.dilations, g.pads_begin, g.pads_end)
            span, dw = (g.kernel[0] - 1) * g.dilations[0], g.dilations[1]
            self.cl_dims = self._ro(np.asarray([c, h, wd, oh, ow, sh, sw, ph, pw, wp, x_zp, span, dw, cstep],
                                                np.int64))
            sizes = compiled.qdepthwise.scratch_sizes(h, wd, oh, ow, wp, hp, sw, sh, span, dw, cstep)
            self.cl_refs = [ctx.scratch((n,), t) for n, t in zip(sizes, (ctx.dtype(0), ctx.dtype(0), ctx.dtype(7),
                                                                         np.dtype(np.int16)))]
            wprime = np.asarray(w, np.int32).reshape(m, -1) - w_zp.reshape(-1, 1)
            self.cl_w = shared_weights(w, ("qdepthwise_cl2", tuple(w_zp), self.b.tobytes(), self.mult.tobytes()),
                                       lambda w: compiled.qdepthwise.pack_weights(wprime, self.b, self.mult,
                                                                                  g.kernel))
            self._split = None
            self.bg = self.mg_mult = None
            return
        if self.direct:
            if self.subsampled:  # the GEMM reads the packed pixels: a stride-1 conv on an OH x OW input
                h, wd = oh, ow
                self.sub_ref = ctx.scratch((g.batch * c * oh * ow + SLACK,), ctx.dtype(0))
            self.hq, self.wq, self.phases = h, wd, [(0, 0)]
            table = compiled.qgemm.quad_offsets if self.sat else compiled.qgemm.pair_offsets
            self.offs = table(np.arange(self.cg, dtype=np.int64) * (h * wd))
            # the last P % 16 pixels: their X columns copied into a strip of 16 per row (the tile's reads
            # stay inside it; the columns past P hold whatever was there, and feed only dropped outputs);
            # the saturating GEMM reads only P's pixels, the last tile in the same pass (its weights in cache)
            self.tail = 0 if self.sat else (h * wd) % compiled.qgemm.NP
            self.strip_ref = ctx.scratch((len(self.offs) * compiled.qgemm.NP + compiled.qgemm.NP,), ctx.dtype(0)) if self.tail else None
            self.strip_offs = table(np.arange(self.cg, dtype=np.int64) * compiled.qgemm.NP)
        else:
            self.hq, self.wq, self.phases, offs = indirect_layout(g, 1 if self.depthwise else self.cg)
            if self.sat:  # rows k = (kh, kw, c): onnxruntime's order of the saturating pairs
                self.offs = compiled.qgemm.quad_offsets(offs.reshape(self.cg, -1).T.reshape(-1))
            else:
                self.offs = offs if self.depthwise else compiled.qgemm.pair_offsets(offs)
        f = len(self.phases)
        self.plane = self.hq * self.wq
        self.image = c * f * self.plane
        x_dt = ctx.dtype(0)
        slack = SLACK + compiled.qconv.DW_BLOCK if self.depthwise else SLACK  # depthwise_q's 3x3 pass
        self.planes_ref = None if self.direct or self.dw3s1 else ctx.scratch((g.batch * self.image + slack,), x_dt)
        self.p_ext = oh * self.wq
        # the saturating GEMM over the output's pixels only, its X tiles gathered across rows (qgemm2d_sat_rows):
        # no columns past OW computed, then cropped
        self.rows = (self.sat and not self.depthwise and self.wq != ow and ow >= 5
                     and 3 * (self.wq - ow) + 16 <= SLACK)
        self.crop = self.wq != ow and not self.rows
        # channels in the lanes (compiled/qgemm.py's qgemm2d_chlanes) where 16-pixel tiles would leave many lanes
        # idle (7 x 7 outputs: 49 pixels in 4 tiles), with an exact dot product on a 16-lane target
        p_out = oh * ow
        # AMX tiles (compiled/amx.py) where the host has them: the exact sums (TDPBSUD), so the vpdpbusd
        # kernels' bits, and not under the saturating pairs
        self.amx = self.sat and self.dot != "vpmaddubsw" and compiled.amx.conv_enabled()
        if self.amx:
            self.arithmetic = "exact (tdpbsud, AMX)"
        # X read in place from quad planes (compiled/qgemm.py's qconv_direct / qconv_direct_chlanes) rather than
        # packed tile by tile (module docstring); the conditions below
        in_place = (not self.amx and self.sat and self.q.WIDE and not self.depthwise and not self.direct
                    and g.group == 1 and c % 4 == 0 and c >= 16 and direct_enabled())
        # with the output channels in the lanes where the grid's 16-position tiles would add more than 1/16 to the
        # pixels (14 x 14 and 7 x 7 outputs; the channel-lane kernel computes no position past OW)
        grid_tiles = -(-((oh - 1) * self.wq + ow) // compiled.qgemm.NP)
        self.quad_lanes = (in_place and m % compiled.qgemm.CH == 0
                           and 16 * grid_tiles * compiled.qgemm.NP > 17 * p_out)
        self.chlanes = (not self.amx and not self.quad_lanes and self.sat and self.q.WIDE
                        and self.dot != "vpmaddubsw" and g.group == 1
                        and m % compiled.qgemm.CH == 0 and p_out <= compiled.qgemm.PB
                        and -p_out % compiled.qgemm.NP > p_out // 8 and (self.direct or self.rows or not self.crop))
        # otherwise the strips on the planes' grid (qconv_direct), where the planes' pitch adds at most 1/8 to the
        # pixels (the columns past OW computed and dropped; on Zen 5, ResNet-50's 3x3 layers 1.00-1.09x the packed
        # tiles' speed, larger images 1.08-1.17x). Not for a pointwise conv (no taps share the planes' lines: its
        # quads strided by a whole plane ran slower than packed tiles, ResNet-50's 1x1 layers 0.89-0.99x), nor on
        # the 8-lane kernels (AVX2's: a version of them reading quads in place ran 0.82-1.02x the packed tiles'
        # speed, Haswell code on Zen 5, the tile's rows stored a byte a lane where a run is partial), nor for few
        # channels or C % 4 != 0 (a stem's 3 channels: quads a quarter empty, and the rows' segment stores for
        # each tile's 9 quads: 0.32x)
        self.quads = (in_place and not self.quad_lanes and not self.chlanes
                      and self.wq >= compiled.qgemm.DIRECT_PITCH and (self.wq - ow) * 8 <= self.wq)
        if self.quads or self.quad_lanes:
            self.rows = self.crop = False
            cq_bytes = 4 * f * self.plane
            self.image_q = ((c + 3) // 4) * cq_bytes
            self.qoffs = compiled.qgemm.direct_offsets(indirect_layout(g, 1)[3], c, cq_bytes)
            if self.quads:
                self.t_n, self.segs = compiled.qgemm.direct_tables(oh, ow, self.wq)
            self.quads_ref = ctx.scratch(((g.batch * self.image_q + QUAD_SLACK) // 4,), np.uint32)
        y_dt = ctx.dtype(7)
        self.y_ref = ctx.scratch((m * self.p_ext,), y_dt) if self.crop and not self.depthwise else None
        self.ws_ref = ctx.scratch((max(compiled.qgemm.MR, compiled.qgemm.MRS) * compiled.qgemm.NP,), y_dt)
        workspace = compiled.qgemm.amx_workspace_bytes if self.amx else compiled.qgemm.packed_bytes
        xq_bytes = workspace(len(self.offs))
        self.xq_ref = ctx.scratch((xq_bytes,), np.uint8) if self.sat and not (self.quads or self.quad_lanes) else None
        if self.amx:  # a block of PBA pixels' tiles at a time (compiled/qgemm.py's qconv_amx)
            self.amx_addr = compiled.amx.address("amx_qconv_s8" if ctx.dtype(7) == np.int8 else "amx_qconv_u8")
            self.k64 = compiled.amx.k_padded(len(self.offs))
        self.acc_ref = (ctx.scratch((self.p_ext + compiled.qconv.DW_BLOCK,), np.int32)
                        if self.depthwise and not self.dw3s1 else None)
        if self.depthwise:
            self.wp = shared_weights(w, ("qdepthwise", tuple(w_zp)), lambda w: self._ro(
                (np.asarray(w, np.int32).reshape(m, -1) - w_zp.reshape(-1, 1)).reshape(-1)))
        elif self.amx:  # each group's W (mg, kh * kw * cg) as rows of K64 bytes (compiled.amx.pack_rows)
            self.wp = shared_weights(w, ("qrows_amx", g.group), lambda w: tuple(
                compiled.amx.pack_rows(np.ascontiguousarray(wi).reshape(self.mg, -1)) for wi in
                np.asarray(w).reshape(g.group, self.mg, self.cg, -1).transpose(0, 1, 3, 2)))
        elif self.sat:
            def pack(w):  # each group's W (mg, cg, kh, kw) as (mg, kh * kw * cg), in int8 quads
                wg = np.asarray(w).reshape(g.group, self.mg, self.cg, -1).transpose(0, 1, 3, 2)
                return tuple(compiled.qgemm.pack_quads(np.ascontiguousarray(wg[i]).reshape(self.mg, -1)) for i in range(g.group))

            if self.quads or self.quad_lanes:  # W (m, C / 4, kh * kw, 4) (C rounded up to 4, 0 past C) in quads
                def pack(w):
                    w = np.asarray(w).reshape(m, c, -1)
                    wp = np.zeros((m, -(-c // 4) * 4, w.shape[2]), np.int8)
                    wp[:, :c] = w
                    wp = wp.reshape(m, -1, 4, w.shape[2]).transpose(0, 1, 3, 2)
                    return (compiled.qgemm.pack_quads(np.ascontiguousarray(wp).reshape(m, -1),
                                                      tile=compiled.qgemm.CH if self.quad_lanes else
                                                      compiled.qgemm.MRS),)

                self.wp = shared_weights(w, ("qquads_direct", self.quad_lanes), pack)
            elif self.chlanes:  # the same quads in tiles of CH channels (qgemm2d_chlanes)
                self.wp = shared_weights(w, ("qquads16",), lambda w: (compiled.qgemm.pack_quads(
                    np.ascontiguousarray(np.asarray(w).reshape(m, self.cg, -1).transpose(0, 2, 1)).reshape(m, -1),
                    tile=compiled.qgemm.CH),))
            else:
                self.wp = shared_weights(w, ("qquads", g.group), pack)
        else:
            def pack(w):
                wg = np.asarray(w).reshape(g.group, self.mg, -1)
                zg = w_zp.reshape(g.group, self.mg)
                return tuple(compiled.qgemm.pack_pairs(wg[i], zg[i]) for i in range(g.group))

            self.wp = shared_weights(w, ("qpacked", g.group, tuple(w_zp)), pack)
        self.bg = [self.b[i * self.mg:(i + 1) * self.mg] for i in range(g.group)]
        self.mg_mult = [self.mult[i * self.mg:(i + 1) * self.mg] for i in range(g.group)]
        # masked row steps where the kernels are 16 lanes wide (AVX-512: one instruction a masked load / store)
        self._split = (self.hq, self.wq, sh, sw, ph, pw, x_zp, compiled.isa.LANES == 16)

    @staticmethod
    def _ro(a):
        a = np.ascontiguousarray(a)
        a.flags.writeable = False
        return a

    def __call__(self, x, out):
        compiled.run_steps(self.steps(x, out))

    def _amx_steps(self, steps, xf, x0, yf, y0, ldy, gi, p_n, ow, pitch):
        """One group's GEMM on AMX tiles (compiled/qgemm.py's qconv_amx: X packed a block of pixels at a time,
        amx_qconv over each) into Y[m, p] = yf[y0 + m * ldy + p]."""
        steps.append((self.q.qconv_amx, (self.amx_addr, self.wp[gi], self.k64, xf, x0, self.offs,
                                         self.xq_ref.array, yf, y0, ldy, self.mg, p_n, self.bg[gi], self.mg_mult[gi],
                                         self.zp, ow, pitch)))

    def _direct_steps(self, steps, xf, yflat):
        """The batch's quad planes from its phase planes (or X itself) xf, then each image's qconv_direct into
        yflat (Y flat)."""
        g = self.geo
        oh, ow = g.out_shape
        m = g.out_channels
        qv = self.quads_ref.array
        steps.append((compiled.qconv.quad_planes_q, (xf, qv, g.batch, g.in_channels, len(self.phases) * self.plane)))
        for n in range(g.batch):
            if self.quad_lanes:
                steps.append((self.q.qconv_direct_chlanes, (self.wp[0], qv.view(np.uint8), n * self.image_q,
                                                            self.qoffs, yflat, n * m * oh * ow, oh * ow, m, oh * ow,
                                                            self.b, self.mult, self.zp, ow, self.wq)))
                continue
            steps.append((self.q.qconv_direct, (self.wp[0], qv.view(np.uint8), n * self.image_q, self.qoffs, yflat,
                                                n * m * oh * ow, oh * ow, m, self.t_n, self.b, self.mult, self.zp,
                                                compiled.qgemm.ONES, self.segs)))

    def steps(self, x, out):
        """__call__'s calls, in order: (function, arguments) (compiled.prepared binds them once)."""
        g = self.geo
        oh, ow = g.out_shape
        m = g.out_channels
        steps = []
        yflat = out.reshape(-1)
        if self.dw_cl:
            xf = x.reshape(-1)
            wv, b8, m8 = self.cl_w
            xt, xs, yt, x2 = (r.array for r in self.cl_refs)
            h, wd = g.in_shape
            for n in range(g.batch):
                steps.append((compiled.qdepthwise.depthwise_cl_q, (xf, n * m * h * wd, self.cl_dims, wv, b8, m8,
                                                                   self.zp, yflat, n * m * oh * ow, self.cl_offs,
                                                                   xt, xs, yt, x2)))
            return steps
        f = len(self.phases)
        # (the quad kernels' X workspace: none where X is read in place, whose steps take no `gemm`)
        gemm, extra = ((self.q.qgemm2d_sat, (compiled.qgemm.ONES, self.xq_ref.array)) if self.xq_ref is not None
                       else (compiled.qgemm.qgemm2d, ()))
        if self.direct:
            if self.subsampled:
                xf = self.sub_ref.array
                steps.append((compiled.qconv.subsample_q, (x, xf, oh, ow, *g.strides)))
                x = xf[:g.batch * self.cg * oh * ow].reshape(g.batch, self.cg, oh, ow)
            xf = x.reshape(-1)
            p_n, vec = oh * ow, oh * ow - self.tail
            if self.amx:
                for n in range(g.batch):
                    self._amx_steps(steps, xf, n * self.image, yflat, n * m * p_n, p_n, 0, p_n, 0, 0)
                return steps
            if self.chlanes:
                for n in range(g.batch):
                    steps.append((self.q.qgemm2d_chlanes, (self.wp[0], xf, n * self.image, self.offs, yflat,
                                                           n * m * p_n, p_n, m, p_n, self.b, self.mult, self.zp,
                                                           self.xq_ref.array, 0, 0)))
                return steps
            for n in range(g.batch):
                y0 = n * m * p_n
                if vec:
                    steps.append((gemm, (self.wp[0], xf, n * self.image, self.offs, yflat, y0, p_n, m, vec,
                                         self.b, self.mult, self.zp, self.ws_ref.array, *extra)))
                if self.tail:
                    strip = self.strip_ref.array
                    rows = strip[:self.cg * compiled.qgemm.NP].reshape(self.cg, compiled.qgemm.NP)[:, :self.tail]
                    steps.append((np.copyto, (rows, x[n].reshape(self.cg, p_n)[:, vec:])))
                    steps.append((gemm, (self.wp[0], strip, 0, self.strip_offs, yflat, y0 + vec, p_n, m,
                                         self.tail, self.b, self.mult, self.zp, self.ws_ref.array, *extra)))
            return steps
        if self.dw3s1:
            xf = x.reshape(-1)
            h, wd = g.in_shape
            for n in range(g.batch):
                steps.append((compiled.qconv.depthwise3x3s1_q, (xf, n * m * h * wd, self.x_zp, self.taps, self.wp,
                                                                self.b, self.mult, self.zp, yflat, n * m * oh * ow,
                                                                h, wd)))
            return steps
        xf = self.planes_ref.array
        steps.append((compiled.qconv.split_phases_q, (x, xf, *self._split)))
        ws = self.ws_ref.array
        for n in range(g.batch):
            if self.depthwise:
                steps.append((compiled.qconv.depthwise_q, (xf, n * self.image, f * self.plane, self.offs, self.wp, self.b, self.mult,
                                            self.zp, yflat, n * m * oh * ow, oh, ow, self.wq, self.acc_ref.array)))
                continue
            if self.chlanes:
                p_n = oh * ow
                steps.append((self.q.qgemm2d_chlanes, (self.wp[0], xf, n * self.image, self.offs, yflat, n * m * p_n,
                                                       p_n, m, p_n, self.b, self.mult, self.zp, self.xq_ref.array,
                                                       ow if self.rows else 0, self.wq if self.rows else 0)))
                continue
            if self.amx:
                rows = self.rows
                p_n = oh * ow if rows else self.p_ext
                yf = self.y_ref.array if self.crop else yflat
                y0 = 0 if self.crop else n * m * p_n
                for gi in range(g.group):
                    self._amx_steps(steps, xf, n * self.image + gi * self.cg * f * self.plane, yf,
                                    y0 + gi * self.mg * p_n, p_n, gi, p_n, ow if rows else 0, self.wq if rows else 0)
                if self.crop:
                    steps.append((np.copyto, (out[n], yf.reshape(m, oh, self.wq)[:, :, :ow])))
                continue
            if self.quads or self.quad_lanes:
                self._direct_steps(steps, xf, yflat)
                break
            if self.rows:
                p_n = oh * ow
                for gi in range(g.group):
                    steps.append((self.q.qgemm2d_sat_rows, (
                        self.wp[gi], xf, n * self.image + gi * self.cg * f * self.plane, self.offs, yflat,
                        (n * m + gi * self.mg) * p_n, p_n, self.mg, p_n, self.bg[gi], self.mg_mult[gi], self.zp, ws,
                        *extra, ow, self.wq)))
                continue
            yf = self.y_ref.array if self.crop else yflat
            y0 = 0 if self.crop else n * m * self.p_ext
            for gi in range(g.group):
                steps.append((gemm, (self.wp[gi], xf, n * self.image + gi * self.cg * f * self.plane, self.offs,
                                     yf, y0 + gi * self.mg * self.p_ext, self.p_ext, self.mg, self.p_ext,
                                     self.bg[gi], self.mg_mult[gi], self.zp, ws, *extra)))
            if self.crop:
                steps.append((np.copyto, (out[n], yf.reshape(m, oh, self.wq)[:, :, :ow])))
        return steps
