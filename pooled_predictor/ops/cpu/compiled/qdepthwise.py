"""8-bit depthwise convolution vectorized across channels: 8 channels in the lanes, as onnxruntime works.

    acc[c, i, j] = b[c] + sum_{a, e} W'[c, a, e] * Xpad[c, i * sh + a * dh, j * sw + e * dw]   (int32, exact)
    Y[c, i, j]   = saturate(rint(float32(acc) * mult[c]) + y_zp)

(ONNX Operators.md#QLinearConv with group == C == M; W' = W - w_zero_point, b the int32
bias with the input's zero point folded in, Xpad the input padded with x_zero_point, the
requantization MLAS's: compiled/qgemm.py.) The planar kernels of compiled/qconv.py
vectorize along a channel's pixels: on 7 x 7 or 14 x 14 images most pixels are border or
remainder, and a stride-2 layer first gathers its input into phase planes. Here, as MLAS's
depthwise kernels on NHWC (MlasConvSymDepthwise), the 8 lanes of an int32 vector are 8
channels, so every output pixel is one vector whatever the image size, stride or padding.
The activations stay NCHW between nodes; each block of 8 channels goes through

1. pack: its 8 planes transposed to channels-last, 8 pixels x 8 channels at a time in
   registers (_interleave8: eight 8-byte loads, one byte shuffle, one 64-byte store), into a
   padded scratch whose border holds x_zero_point (rows narrower than 8 pixels: transposed
   flat first, then copied row by row);
2. pairs: for a band of BAND output rows, the padded rows they read widened to int16 in
   tap pairs (_pair8): position q of the band holds, for each channel l, x[q, l] and x[q + dw, l]
   (the pixel one dilated tap to the right) side by side, 32 bytes: the two taps (a, e) and
   (a, e + 1) of a kernel row are one vpmaddwd operand as loaded (a kernel row of odd width
   pairs its last tap with a zero weight). The band (16 rows, at most ~60 KB) stays in L1 / L2;
3. the micro-kernel (_dw8): 8 output pixels of a row x 8 channels in 8 <8 x i32>
   accumulators; per tap pair, one weight vector (8 channels' two W' in int16) and 8 pixel
   loads, each a vpmaddwd (exact: |x| <= 255, |W'| <= 255, two products summed in int32) and
   a vpaddd, 6 pairs for a 3x3 kernel where one tap a time took 9 widening loads, 9 vpmulld;
   then the requantization per lane (per-channel multiplier) and 8-byte stores into a
   channels-last output row. A stride is only the distance between the pixels' loads: no phase
   planes;
4. unpack: the channels-last output transposed back into the 8 NCHW planes (_deinterleave8).

The block's scratch (its padded input and its output, channels-last) stays in L2 between
the steps. Exact int32 sums: onnxruntime's depthwise kernels are exact too (no int16 pair
saturation), so the output is onnxruntime's bit for bit (tests/ops/test_compiled_qdepthwise.py).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import arg_pointers, close_loop, dispatch_rows, vector_phis
from .jit import njit
from .qgemm import _pmaddwd, _requantizer

CB = 8  # channels per block: the lanes of one <8 x i32> accumulator
PX = 8  # output pixels per micro-kernel call (8 accumulators: with the weight and pixel vectors, 10 of 16 ymm)
BAND = 16  # output rows whose input rows are widened into tap pairs at a time (step 2)

_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F4 = ir.FloatType()
_V8I = ir.VectorType(_I32, 8)
_V8F = ir.VectorType(_F4, 8)
_V8B = ir.VectorType(_I8, 8)
_V64B = ir.VectorType(_I8, 64)
_V16B = ir.VectorType(_I8, 16)
_V16H = ir.VectorType(_I16, 16)
_V32H = ir.VectorType(_I16, 32)
_V16I = ir.VectorType(_I32, 16)


def _c(v, t=_I64):
    return ir.Constant(t, v)


def _mask(idx):
    return ir.Constant(ir.VectorType(_I32, len(idx)), list(idx))


def _concat8(builder, parts):
    """8 <8 x i8> -> <64 x i8>, parts in order."""
    while len(parts) > 1:
        n = parts[0].type.count
        parts = [builder.shuffle_vector(parts[i], parts[i + 1], _mask(range(2 * n))) for i in range(0, len(parts), 2)]
    return parts[0]


def _make_interleave(pixels: int):
    """The intrinsic _interleave<pixels>(x, x_off, stride, dst, d_off): dst[d_off + 8p + l] = x[x_off + l * stride
    + p] for p < pixels, l < 8 -- `pixels` (8 or 16) pixels of 8 planes, channels-last: eight loads of `pixels`
    bytes, one shuffle (byte 8p + l of the result = byte pixels * l + p of the rows side by side), one store."""
    row_t, whole = ir.VectorType(_I8, pixels), ir.VectorType(_I8, 8 * pixels)
    order = [pixels * (i % 8) + i // 8 for i in range(8 * pixels)]

    def interleave(typingctx, x, x_off, stride, dst, d_off):
        sig = types.void(x, x_off, stride, dst, d_off)

        def codegen(context, builder, signature, args):
            xptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
            rows = [builder.load(builder.bitcast(builder.gep(xptr, [builder.mul(args[2], _c(l))]), row_t.as_pointer()),
                                 align=1) for l in range(8)]
            t = builder.shuffle_vector(_concat8(builder, rows), ir.Constant(whole, ir.Undefined), _mask(order))
            builder.store(t, builder.bitcast(dptr, whole.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    interleave.__name__ = interleave.__qualname__ = f"_interleave{pixels}"
    return intrinsic(interleave)


_interleave8 = _make_interleave(8)
_interleave16 = _make_interleave(16)


def _make_deinterleave(pixels: int):
    """The intrinsic _deinterleave<pixels>(src, s_off, y, y_off, stride): y[y_off + l * stride + p] = src[s_off +
    8p + l] for p < pixels, l < 8 -- channels-last back into 8 planes, `pixels` (8 or 16) a call: one load of
    8 * pixels bytes, one shuffle (byte pixels * l + p of the result = byte 8p + l), 8 stores of `pixels` bytes."""
    whole, part_t = ir.VectorType(_I8, 8 * pixels), ir.VectorType(_I8, pixels)
    order = [8 * (i % pixels) + i // pixels for i in range(8 * pixels)]

    def deinterleave(typingctx, src, s_off, y, y_off, stride):
        sig = types.void(src, s_off, y, y_off, stride)

        def codegen(context, builder, signature, args):
            sptr, yptr = arg_pointers(context, builder, signature, args, (0, 1), (2, 3))
            v = builder.load(builder.bitcast(sptr, whole.as_pointer()), align=1)
            t = builder.shuffle_vector(v, ir.Constant(whole, ir.Undefined), _mask(order))
            for l in range(8):
                part = builder.shuffle_vector(t, ir.Constant(whole, ir.Undefined),
                                              _mask(range(pixels * l, pixels * l + pixels)))
                builder.store(part, builder.bitcast(builder.gep(yptr, [builder.mul(args[4], _c(l))]),
                                                    part_t.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    deinterleave.__name__ = deinterleave.__qualname__ = f"_deinterleave{pixels}"
    return intrinsic(deinterleave)


_deinterleave8 = _make_deinterleave(8)
_deinterleave16 = _make_deinterleave(16)


@intrinsic
def _pair8(typingctx, xs, s_off, dstep, x2, d_off):
    """x2[d_off + 2l + h] = xs[s_off + h * dstep + l] for l < 8, h < 2, widened to int16 (zero-extended from
    uint8, sign-extended from int8): one channels-last position and the one dstep bytes on, in tap pairs."""
    sig = types.void(xs, s_off, dstep, x2, d_off)

    def codegen(context, builder, signature, args):
        sptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
        a = builder.load(builder.bitcast(sptr, _V8B.as_pointer()), align=1)
        b = builder.load(builder.bitcast(builder.gep(sptr, [args[2]]), _V8B.as_pointer()), align=1)
        v = builder.shuffle_vector(a, b, _mask([8 * h + l for l in range(8) for h in range(2)]))
        ext = builder.sext if signature.args[0].dtype.signed else builder.zext
        builder.store(ext(v, _V16H), builder.bitcast(dptr, _V16H.as_pointer()), align=2)
        return context.get_dummy_value()

    return sig, codegen


def _make_pair8x4(g: int, dw: int):
    """_pair8 for 4 positions at once, q + g i (i < 4) with their partners q + g i + dw, for a column step g and
    dilation dw with 3 g + dw < 8: one 64-byte load of positions q .. q + 7 (channels-last, 8 bytes each),
    one byte shuffle, a widening, a 128-byte store: x2[d_off + 16 i + 2 l + h] = xs[s_off + 8 (g i + h dw) + l].
    (A call a position took a quarter of MobileNetV2's depthwise time.)"""
    assert 3 * g + dw < 8
    idx = [8 * (g * i + h * dw) + l for i in range(4) for l in range(8) for h in range(2)]

    @intrinsic
    def pair(typingctx, xs, s_off, x2, d_off):
        sig = types.void(xs, s_off, x2, d_off)

        def codegen(context, builder, signature, args):
            sptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (2, 3))
            v = builder.load(builder.bitcast(sptr, _V64B.as_pointer()), align=1)
            e = builder.shuffle_vector(v, ir.Constant(_V64B, ir.Undefined), _mask(idx))
            ext = builder.sext if signature.args[0].dtype.signed else builder.zext
            w = ext(e, ir.VectorType(_I16, 64))
            builder.store(w, builder.bitcast(dptr, w.type.as_pointer()), align=2)
            return context.get_dummy_value()

        return sig, codegen

    return pair


_pair8x4_11 = _make_pair8x4(1, 1)  # stride 1, no dilation
_pair8x4_21 = _make_pair8x4(2, 1)  # stride 2 (column step 2), no dilation


def _make_dw(px: int, wide: bool = False):
    """The micro-kernel for px (1..PX) output pixels x 8 channels: _dw8 below with px pixels (a row's last
    OW % 8 pixels: no pixels computed past the row's end, 1/8 of a 14- or 28-wide row's work). With `wide`
    (px even): two pixels a <32 x i16> operand, for pstep == 16 (the band's positions adjacent: stride 1, or
    stride 2 with a column step of 2, MobileNetV2's): pixel p + 1's pairs follow pixel p's, so one 64-byte
    load takes both and one vpmaddwd / vpdpwssd on zmm sums them, against the tap pair's weights twice."""

    @intrinsic
    def dw(typingctx, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off):
        return _dw_codegen(px, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off, wide)

    return dw


def _dw_codegen(px, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off, wide=False):
    """px output pixels x 8 channels of a depthwise convolution, channels-last in tap pairs (module docstring,
    step 3).

    For p < px and lane l < 8: acc = b[b_off + l] + sum_{u < offs.size, h < 2} wv[w_off + 16u + 2l + h] *
    xs[x_off + offs[u] + p * pstep + 2l + h] (xs, wv int16: the pairs of step 2 and pack_weights; vpmaddwd);
    yt[y_off + 8p + l] = saturate(rint(float32(acc) * mult[b_off + l]) + zp). yt is uint8 or int8.
    """
    sig = types.void(xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off)

    def codegen(context, builder, signature, args):
        xptr, wptr, bptr, mptr, yptr = arg_pointers(context, builder, signature, args,
                                                    (0, 1), (4, 5), (6, 7), (8, 7), (10, 11))
        optr = context.make_array(signature.args[3])(context, builder, args[3]).data
        t_n = context.make_array(signature.args[3])(context, builder, args[3]).nitems
        y_signed = signature.args[10].dtype.signed
        pstep = args[2]
        fn = builder.function
        pre_bb = builder.block
        loop_bb = fn.append_basic_block("tap_loop")
        done_bb = fn.append_basic_block("tap_done")
        zero = ir.Constant(_V8I, [0] * 8)
        if wide:
            zero = ir.Constant(_V16I, [0] * 16)
        builder.cbranch(builder.icmp_signed(">", t_n, _c(0)), loop_bb, done_bb)
        builder.position_at_end(loop_bb)
        t = builder.phi(_I64)
        t.add_incoming(_c(0), pre_bb)
        accs = vector_phis(builder, px // 2 if wide else px, (zero, pre_bb))
        o = builder.load(builder.gep(optr, [t]))
        wvec = builder.load(builder.bitcast(builder.gep(wptr, [builder.mul(t, _c(16))]), _V16H.as_pointer()),
                            align=2)
        base = builder.gep(xptr, [o])
        new = []
        if wide:  # pixels p and p + 1 in one <32 x i16> (pstep == 16), the weights twice
            w2 = builder.shuffle_vector(wvec, wvec, _mask(list(range(16)) * 2))
            for p in range(0, px, 2):
                xv = builder.load(builder.bitcast(builder.gep(base, [_c(16 * p)]), _V32H.as_pointer()), align=2)
                new.append(builder.add(accs[p // 2], _pmaddwd(builder, xv, w2)))
        else:
            for p in range(px):
                xv = builder.load(builder.bitcast(builder.gep(base, [builder.mul(pstep, _c(p))]),
                                                  _V16H.as_pointer()), align=2)
                new.append(builder.add(accs[p], _pmaddwd(builder, xv, wvec)))
        final = close_loop(builder, t, t_n, accs, new, loop_bb, done_bb, (zero, pre_bb))
        if wide:  # back to one <8 x i32> a pixel
            final = [builder.shuffle_vector(v, v, _mask(range(h, h + 8))) for v in final for h in (0, 8)]
        # the requantization (MlasRequantizeOutput's order): + bias, to float32, * mult, clamp, rint, + zp
        scale, quantize = _requantizer(builder, args[9], y_signed)
        bv = builder.load(builder.bitcast(bptr, _V8I.as_pointer()), align=4)
        mv = builder.load(builder.bitcast(mptr, _V8F.as_pointer()), align=4)
        for p in range(0, px - 1, 2):  # two pixels' 16 outputs narrowed together (saturating packs)
            q = quantize.pair(scale(final[p], bv, mv), scale(final[p + 1], bv, mv))
            builder.store(q, builder.bitcast(builder.gep(yptr, [_c(8 * p)]), _V16B.as_pointer()), align=1)
        if px % 2:
            q = quantize(scale(final[px - 1], bv, mv))
            builder.store(q, builder.bitcast(builder.gep(yptr, [_c(8 * (px - 1))]), _V8B.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


_dw8 = _make_dw(PX)
_dw8w = _make_dw(PX, wide=True)
_dw_tail = dispatch_rows(_make_dw, PX - 1, "xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off")


# dims: c_n, h, w, oh, ow, sh, sw, pad_top, pad_left, padded width, x_zero_point, row span, dw, column step
_DIMS = 14


def _sig(xt, yt):
    ri16 = types.Array(types.int16, 1, "C", readonly=True)
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    i = types.int64
    return types.void(types.Array(xt, 1, "C", readonly=True), i, ri64, ri16, ri32, rf32, i,
                      types.Array(yt, 1, "C"), i, ri64, types.Array(xt, 1, "C"), types.Array(xt, 1, "C"),
                      types.Array(yt, 1, "C"), types.Array(types.int16, 1, "C"))


@njit([_sig(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def depthwise_cl_q(x, x0, dims, wv, b, mult, zp, y, y0, offs, xt, xs, yt, x2):
    """One image of an 8-bit depthwise convolution, 8 channels at a time in the lanes (module docstring).

    Args:
        x, x0: the input, NCHW: channel c, row r, column j at x[x0 + (c * H + r) * W + j]; uint8 or int8.
        dims: (14,) int64: C, H, W, OH, OW, stride h, stride w, pad top, pad left, WP (the padded
            scratch's width: W + pad left + pad right, and wide enough for the taps), x_zero_point,
            the taps' row span (KH - 1) * dilation h, dilation w, the column step G (geometry: only every
            G-th padded column is read as a pair's first tap, and only those are widened).
        wv: (ceil(C / 8) * U * 16,) int16: block cb, tap pair u, lane l, half h at ((cb * U + u) * 8 + l) * 2 + h
            holds W'[8 cb + l, a, e + h] = W - w_zero_point for pair u = (a, e) (0 past C and past KW);
            pack_weights.
        b: (ceil(C / 8) * 8,) int32 bias, the input's zero point folded in (0 past C); mult: as b,
            float32 x_scale * w_scale[c] / y_scale; zp: y_zero_point.
        y, y0: the output, NCHW, channel c at y[y0 + c * OH * OW]; uint8 or int8.
        offs: (U,) int64 offsets of the tap pairs in a band of x2: (a * dh * WPG + e * dw / G) * 16, WPG =
            ceil(WP / G) positions a row (geometry).
        xt, xs, yt, x2: scratch (scratch_sizes): the block channels-last, its padded copy, its output, a band
            of the padded copy in int16 tap pairs.
    """
    c_n, h, w, oh, ow = dims[0], dims[1], dims[2], dims[3], dims[4]
    sh, sw, pt, pl, wp, x_zp = dims[5], dims[6], dims[7], dims[8], dims[9], dims[10]
    span, dw, g = dims[11], dims[12], dims[13]
    wpg = (wp + g - 1) // g
    t_n = offs.size
    hw, ohw = h * w, oh * ow
    fill = xs.dtype.type(x_zp)
    for i in range(xs.size):  # the padding: x_zero_point in every lane (the block's rows overwrite the inside)
        xs[i] = fill
    u = np.uint64
    for cb in range((c_n + CB - 1) // CB):
        c0 = cb * CB
        nl = min(CB, c_n - c0)
        xb = x0 + c0 * hw
        if nl == CB and w >= 8:  # 1. pack: the 8 planes channels-last, 8 pixels a shuffle, straight into the
            for r in range(h):  # padded rows; a row's last 8 pixels end at its end (overlapping the group before)
                src = xb + r * w
                dst = ((r + pt) * wp + pl) * 8
                if w >= 16:  # 16 pixels a shuffle, the row's last 16 overlapping the group before
                    for j in range(0, w - 15, 16):
                        _interleave16(x, src + j, hw, xs, dst + j * 8)
                    if w % 16:
                        _interleave16(x, src + w - 16, hw, xs, dst + (w - 16) * 8)
                    continue
                for j in range(0, w - 7, 8):
                    _interleave8(x, src + j, hw, xs, dst + j * 8)
                if w % 8:
                    _interleave8(x, src + w - 8, hw, xs, dst + (w - 8) * 8)
        elif nl == CB:  # narrow rows: the block channels-last in one flat pass, then row by row
            vec = hw // 8 * 8
            for q in range(0, vec, 8):
                _interleave8(x, xb + q, hw, xt, q * 8)
            for q in range(vec, hw):
                for lane in range(CB):
                    xt[q * 8 + lane] = x[xb + lane * hw + q]
        else:
            for q in range(hw):
                for lane in range(CB):
                    xt[q * 8 + lane] = x[xb + lane * hw + q] if lane < nl else fill
        if nl < CB or w < 8:
            row = u(w * 8)
            for r in range(h):  # ... into the padded scratch, row by row
                s = u(r * w * 8)
                d = u(((r + pt) * wp + pl) * 8)
                for e in range(row):
                    xs[d + e] = xt[s + e]
        wo, bo = cb * t_n * 16, cb * 8
        full, rem = ow - ow % PX, ow % PX
        for i0 in range(0, oh, BAND):
            i1 = min(oh, i0 + BAND)
            r0 = i0 * sh
            d = 0
            quads = wpg // 4 if dw == 1 and g <= 2 else 0  # positions 4 a call (_make_pair8x4)
            for r in range(r0, (i1 - 1) * sh + span + 1):  # 2. the band's rows in tap pairs, every G-th column
                q = r * wp
                for _ in range(quads):
                    if g == 1:
                        _pair8x4_11(xs, q * 8, x2, d)
                    else:
                        _pair8x4_21(xs, q * 8, x2, d)
                    q += 4 * g
                    d += 64
                for q in range(q, r * wp + wpg * g, g):
                    _pair8(xs, q * 8, dw * 8, x2, d)
                    d += 16
            ps = sw // g * 16
            for i in range(i0, i1):  # 3. 8 output pixels x 8 channels a call, a row's last OW % 8 in one call
                xr = (i * sh - r0) * wpg * 16
                if ps == 16:  # adjacent positions: two pixels a zmm
                    for j0 in range(0, full, PX):
                        _dw8w(x2, xr + j0 * ps, ps, offs, wv, wo, b, bo, mult, zp, yt, (i * ow + j0) * 8)
                else:
                    for j0 in range(0, full, PX):
                        _dw8(x2, xr + j0 * ps, ps, offs, wv, wo, b, bo, mult, zp, yt, (i * ow + j0) * 8)
                if rem:
                    _dw_tail(x2, xr + full * ps, ps, offs, wv, wo, b, bo, mult, zp, yt, (i * ow + full) * 8, rem)
        yb = y0 + c0 * ohw
        if nl == CB:  # 4. unpack: back into the 8 NCHW planes
            vec = ohw // 8 * 8
            v16 = ohw // 16 * 16
            for q in range(0, v16, 16):
                _deinterleave16(yt, q * 8, y, yb + q, ohw)
            for q in range(v16, vec, 8):
                _deinterleave8(yt, q * 8, y, yb + q, ohw)
            for q in range(vec, ohw):
                for lane in range(CB):
                    y[yb + lane * ohw + q] = yt[q * 8 + lane]
        else:
            for lane in range(nl):
                for q in range(ohw):
                    y[yb + lane * ohw + q] = yt[q * 8 + lane]


def geometry(h, w, oh, ow, kernel, strides, dilations, pads_begin, pads_end):
    """(WP, HP, G, offs) of the padded scratch for these shapes: its width and height; the column step G =
    gcd(stride w, 2 * dilation w) (a pair's first tap is read at columns j * sw + e * dw, e even: all multiples
    of G, so a band keeps WPG = ceil(WP / G) positions a row: half of them at stride 2); the tap pairs'
    offsets in a band, (a * dh * WPG + e * dw / G) * 16 for kernel row a and e = 0, 2, 4, ... < KW, read-only
    int64 (KH * ceil(KW / 2),), pairs row-major as pack_weights packs them."""
    (kh, kw), (dh, dw) = kernel, dilations
    wp = w + pads_begin[1] + pads_end[1]
    hp = h + pads_begin[0] + pads_end[0]
    # every tap of every output pixel inside the scratch: (OW - 1) * sw + (kw - 1) * dw < WP, likewise rows
    wp = max(wp, (ow - 1) * strides[1] + (kw - 1) * dw + 1)
    hp = max(hp, (oh - 1) * strides[0] + (kh - 1) * dh + 1)
    g = math.gcd(strides[1], 2 * dw)
    wpg = -(-wp // g)
    offs = np.asarray([(a * dh * wpg + e * dw // g) * 16 for a in range(kh) for e in range(0, kw, 2)], np.int64)
    offs.flags.writeable = False
    return wp, hp, g, offs


def scratch_sizes(h, w, oh, ow, wp, hp, sw, sh, span, dw, g):
    """Elements of depthwise_cl_q's xt, xs, yt and x2: the block channels-last; its padded copy, with slack
    for a row's last 8-pixel call and for the pairs of the last position (dw pixels on); the output, with
    slack for its last call; a band of BAND output rows' input rows in int16 tap pairs, every G-th column
    (span: (KH - 1) * dh; geometry)."""
    band_rows = (min(BAND, oh) - 1) * sh + span + 1
    return (h * w * CB, hp * wp * CB + (PX * sw + 1 + dw + g) * CB, (oh * ow + PX) * CB,
            band_rows * -(-wp // g) * 2 * CB)


def pack_weights(w_prime: np.ndarray, b: np.ndarray, mult: np.ndarray, kernel: tuple):
    """(wv, b8, mult8) for depthwise_cl_q from W' (C, KH * KW) int32 (|W'| <= 255), b (C,) int32, mult (C,)
    float32 and kernel (KH, KW): W' in blocks of 8 channels, tap pairs (a, e), (a, e + 1) of each kernel row
    side by side in int16 (module docstring), 0 past C and past KW; b and mult in blocks of 8; read-only."""
    c, t = w_prime.shape
    kh, kw = kernel
    cb = (c + CB - 1) // CB
    kw2 = kw + kw % 2
    wk = np.zeros((cb * CB, kh, kw2), np.int16)
    wk[:c, :, :kw] = w_prime.reshape(c, kh, kw)
    # (block, lane, a, pair, half) -> (block, a, pair, lane, half)
    wv = np.ascontiguousarray(wk.reshape(cb, CB, kh, kw2 // 2, 2).transpose(0, 2, 3, 1, 4)).reshape(-1)
    b8 = np.zeros(cb * CB, np.int32)
    b8[:c] = b
    m8 = np.zeros(cb * CB, np.float32)
    m8[:c] = mult
    for a in (wv, b8, m8):
        a.flags.writeable = False
    return wv, b8, m8
