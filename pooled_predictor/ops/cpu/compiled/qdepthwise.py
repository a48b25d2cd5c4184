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
2. the micro-kernel (_dw8): 8 output pixels of a row x 8 channels in 8 <8 x i32>
   accumulators; per tap, one weight vector (8 channels' W') and 8 widened pixel loads
   (vpmovzxbd / vpmovsxbd, vpmulld, vpaddd), then the requantization per lane (per-channel
   multiplier) and 8-byte stores into a channels-last output row. A stride is only the
   distance between the pixels' loads: no phase planes;
3. unpack: the channels-last output transposed back into the 8 NCHW planes (_deinterleave8).

The block's scratch (its padded input and its output, channels-last) stays in L2 between
the steps. Exact int32 sums: onnxruntime's depthwise kernels are exact too (no int16 pair
saturation), so the output is onnxruntime's bit for bit (tests/ops/test_compiled_qdepthwise.py).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import arg_pointers, close_loop, dispatch_rows, vector_phis
from .jit import njit
from .qgemm import _requantizer

CB = 8  # channels per block: the lanes of one <8 x i32> accumulator
PX = 8  # output pixels per micro-kernel call (8 accumulators: with the weight and pixel vectors, 10 of 16 ymm)

_I8 = ir.IntType(8)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F4 = ir.FloatType()
_V8I = ir.VectorType(_I32, 8)
_V8F = ir.VectorType(_F4, 8)
_V8B = ir.VectorType(_I8, 8)
_V64B = ir.VectorType(_I8, 64)


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


_TRANSPOSE = [8 * (i % 8) + i // 8 for i in range(64)]  # byte 8a + b of the result = byte 8b + a of the source


@intrinsic
def _interleave8(typingctx, x, x_off, stride, dst, d_off):
    """dst[d_off + 8p + l] = x[x_off + l * stride + p] for p, l < 8: 8 pixels of 8 planes, channels-last."""
    sig = types.void(x, x_off, stride, dst, d_off)

    def codegen(context, builder, signature, args):
        xptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
        rows = [builder.load(builder.bitcast(builder.gep(xptr, [builder.mul(args[2], _c(l))]), _V8B.as_pointer()),
                             align=1) for l in range(8)]
        t = builder.shuffle_vector(_concat8(builder, rows), ir.Constant(_V64B, ir.Undefined), _mask(_TRANSPOSE))
        builder.store(t, builder.bitcast(dptr, _V64B.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _deinterleave8(typingctx, src, s_off, y, y_off, stride):
    """y[y_off + l * stride + p] = src[s_off + 8p + l] for p, l < 8: channels-last back into 8 planes."""
    sig = types.void(src, s_off, y, y_off, stride)

    def codegen(context, builder, signature, args):
        sptr, yptr = arg_pointers(context, builder, signature, args, (0, 1), (2, 3))
        v = builder.load(builder.bitcast(sptr, _V64B.as_pointer()), align=1)
        t = builder.shuffle_vector(v, ir.Constant(_V64B, ir.Undefined), _mask(_TRANSPOSE))
        for l in range(8):
            part = builder.shuffle_vector(t, ir.Constant(_V64B, ir.Undefined), _mask(range(8 * l, 8 * l + 8)))
            builder.store(part, builder.bitcast(builder.gep(yptr, [builder.mul(args[4], _c(l))]), _V8B.as_pointer()),
                          align=1)
        return context.get_dummy_value()

    return sig, codegen


def _make_dw(px: int):
    """The micro-kernel for px (1..PX) output pixels x 8 channels: _dw8 below with px pixels (a row's last
    OW % 8 pixels: no pixels computed past the row's end, 1/8 of a 14- or 28-wide row's work)."""

    @intrinsic
    def dw(typingctx, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off):
        return _dw_codegen(px, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off)

    return dw


def _dw_codegen(px, xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off):
    """px output pixels x 8 channels of a depthwise convolution, channels-last (module docstring, step 2).

    For p < px and lane l < 8: acc = b[b_off + l] + sum_{t < offs.size} wv[w_off + 8t + l] *
    xs[x_off + offs[t] + p * pstep + l]; yt[y_off + 8p + l] = saturate(rint(float32(acc) *
    mult[b_off + l]) + zp). xs and yt are uint8 or int8 (the lanes widened / saturated as their types).
    """
    sig = types.void(xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off)

    def codegen(context, builder, signature, args):
        xptr, wptr, bptr, mptr, yptr = arg_pointers(context, builder, signature, args,
                                                    (0, 1), (4, 5), (6, 7), (8, 7), (10, 11))
        optr = context.make_array(signature.args[3])(context, builder, args[3]).data
        t_n = context.make_array(signature.args[3])(context, builder, args[3]).nitems
        x_ext = "sext" if signature.args[0].dtype.signed else "zext"
        y_signed = signature.args[10].dtype.signed
        pstep = args[2]
        fn = builder.function
        pre_bb = builder.block
        loop_bb = fn.append_basic_block("tap_loop")
        done_bb = fn.append_basic_block("tap_done")
        zero = ir.Constant(_V8I, [0] * 8)
        builder.cbranch(builder.icmp_signed(">", t_n, _c(0)), loop_bb, done_bb)
        builder.position_at_end(loop_bb)
        t = builder.phi(_I64)
        t.add_incoming(_c(0), pre_bb)
        accs = vector_phis(builder, px, (zero, pre_bb))
        o = builder.load(builder.gep(optr, [t]))
        wvec = builder.load(builder.bitcast(builder.gep(wptr, [builder.mul(t, _c(8))]), _V8I.as_pointer()), align=4)
        base = builder.gep(xptr, [o])
        new = []
        for p in range(px):
            xv = builder.load(builder.bitcast(builder.gep(base, [builder.mul(pstep, _c(p))]), _V8B.as_pointer()),
                              align=1)
            new.append(builder.add(accs[p], builder.mul(getattr(builder, x_ext)(xv, _V8I), wvec)))
        final = close_loop(builder, t, t_n, accs, new, loop_bb, done_bb, (zero, pre_bb))
        # the requantization (MlasRequantizeOutput's order): + bias, to float32, * mult, clamp, rint, + zp
        scale, quantize = _requantizer(builder, args[9], y_signed)
        bv = builder.load(builder.bitcast(bptr, _V8I.as_pointer()), align=4)
        mv = builder.load(builder.bitcast(mptr, _V8F.as_pointer()), align=4)
        for p in range(px):
            q = quantize(scale(final[p], bv, mv))
            builder.store(q, builder.bitcast(builder.gep(yptr, [_c(8 * p)]), _V8B.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


_dw8 = _make_dw(PX)
_dw_tail = dispatch_rows(_make_dw, PX - 1, "xs, x_off, pstep, offs, wv, w_off, b, b_off, mult, zp, yt, y_off")


# dims: c_n, h, w, oh, ow, sh, sw, pad_top, pad_left, padded width, x_zero_point
_DIMS = 11


def _sig(xt, yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    i = types.int64
    return types.void(types.Array(xt, 1, "C", readonly=True), i, ri64, ri32, ri32, rf32, i,
                      types.Array(yt, 1, "C"), i, ri64, types.Array(xt, 1, "C"), types.Array(xt, 1, "C"),
                      types.Array(yt, 1, "C"))


@njit([_sig(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def depthwise_cl_q(x, x0, dims, wv, b, mult, zp, y, y0, offs, xt, xs, yt):
    """One image of an 8-bit depthwise convolution, 8 channels at a time in the lanes (module docstring).

    Args:
        x, x0: the input, NCHW: channel c, row r, column j at x[x0 + (c * H + r) * W + j]; uint8 or int8.
        dims: (11,) int64: C, H, W, OH, OW, stride h, stride w, pad top, pad left, WP (the padded
            scratch's width: W + pad left + pad right, and wide enough for the taps), x_zero_point.
        wv: (ceil(C / 8) * T * 8,) int32: block cb, tap t, lane l at (cb * T + t) * 8 + l holds
            W'[8 cb + l, t] = W - w_zero_point (0 past C); pack_weights.
        b: (ceil(C / 8) * 8,) int32 bias, the input's zero point folded in (0 past C); mult: as b,
            float32 x_scale * w_scale[c] / y_scale; zp: y_zero_point.
        y, y0: the output, NCHW, channel c at y[y0 + c * OH * OW]; uint8 or int8.
        offs: (T,) int64 byte offsets of the taps in the padded scratch: (a * dh * WP + e * dw) * 8.
        xt, xs, yt: scratch (scratch_sizes): the block channels-last, its padded copy, its output.
    """
    c_n, h, w, oh, ow = dims[0], dims[1], dims[2], dims[3], dims[4]
    sh, sw, pt, pl, wp, x_zp = dims[5], dims[6], dims[7], dims[8], dims[9], dims[10]
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
        wo, bo = cb * t_n * 8, cb * 8
        full, rem = ow - ow % PX, ow % PX
        for i in range(oh):  # 2. 8 output pixels x 8 channels a call, a row's last OW % 8 pixels in one call
            xr = i * sh * wp * 8
            for j0 in range(0, full, PX):
                _dw8(xs, xr + j0 * sw * 8, sw * 8, offs, wv, wo, b, bo, mult, zp, yt, (i * ow + j0) * 8)
            if rem:
                _dw_tail(xs, xr + full * sw * 8, sw * 8, offs, wv, wo, b, bo, mult, zp, yt, (i * ow + full) * 8, rem)
        yb = y0 + c0 * ohw
        if nl == CB:  # 3. unpack: back into the 8 NCHW planes
            vec = ohw // 8 * 8
            for q in range(0, vec, 8):
                _deinterleave8(yt, q * 8, y, yb + q, ohw)
            for q in range(vec, ohw):
                for lane in range(CB):
                    y[yb + lane * ohw + q] = yt[q * 8 + lane]
        else:
            for lane in range(nl):
                for q in range(ohw):
                    y[yb + lane * ohw + q] = yt[q * 8 + lane]


def geometry(h, w, oh, ow, kernel, strides, dilations, pads_begin, pads_end):
    """(WP, HP, offs) of the padded scratch for these shapes: its width and height, and the taps' byte
    offsets (a * dh * WP + e * dw) * 8, read-only int64 (T,), taps row-major as W's (kh, kw)."""
    (kh, kw), (dh, dw) = kernel, dilations
    wp = w + pads_begin[1] + pads_end[1]
    hp = h + pads_begin[0] + pads_end[0]
    # every tap of every output pixel inside the scratch: (OW - 1) * sw + (kw - 1) * dw < WP, likewise rows
    wp = max(wp, (ow - 1) * strides[1] + (kw - 1) * dw + 1)
    hp = max(hp, (oh - 1) * strides[0] + (kh - 1) * dh + 1)
    offs = np.asarray([(a * dh * wp + e * dw) * 8 for a in range(kh) for e in range(kw)], np.int64)
    offs.flags.writeable = False
    return wp, hp, offs


def scratch_sizes(h, w, oh, ow, wp, hp, sw):
    """Elements of depthwise_cl_q's xt, xs and yt: the block channels-last; its padded copy, with slack
    for a row's last 8-pixel call reading past the last row; the output, with slack for its last call."""
    return h * w * CB, hp * wp * CB + (PX * sw + 1) * CB, (oh * ow + PX) * CB


def pack_weights(w_prime: np.ndarray, b: np.ndarray, mult: np.ndarray):
    """(wv, b8, mult8) for depthwise_cl_q from W' (C, T) int32, b (C,) int32, mult (C,) float32: the
    channels in blocks of 8 lanes (module docstring), 0 past C; read-only."""
    c, t = w_prime.shape
    cb = (c + CB - 1) // CB
    wv = np.zeros((cb * CB, t), np.int32)
    wv[:c] = w_prime
    wv = np.ascontiguousarray(wv.reshape(cb, CB, t).transpose(0, 2, 1)).reshape(-1)
    b8 = np.zeros(cb * CB, np.int32)
    b8[:c] = b
    m8 = np.zeros(cb * CB, np.float32)
    m8[:c] = mult
    for a in (wv, b8, m8):
        a.flags.writeable = False
    return wv, b8, m8
