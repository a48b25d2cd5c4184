"""8-bit convolution helpers: the stride-phase split of a padded 8-bit input, and depthwise convolution.

split_phases_q is phases.py's split for uint8 / int8 planes, the padding filled
with the input's zero point (so that a padded tap contributes (x_zp - x_zp) * W = 0
once the zero point is folded into the bias, compiled/qgemm.py), the phase planes
followed by slack so the 16-pixel tiles of the integer GEMM may read past the last
pixel.

depthwise_q runs a depthwise convolution (one input channel per output channel,
any kernel, strides and dilations through the phase planes) in int32:
acc[c, p] = b[c] + sum_t W'[c, t] * plane_t[c][off_t + p] over the extended output
rows (pitch wq), then requantizes as qgemm.py does (float32(acc) * mult[c],
clamped, rounded half to even, + y_zp) into the output rows' first OW pixels; a 3x3
kernel in one flat pass over each channel's extended output, in whole DW_BLOCKs.
depthwise3x3s1_q does a 3x3, stride-1, pad-1 one from X itself (no phase planes):
the interior in one flat pass, the border after it.

Vectorizing notes (measured on Zen 3): numba types an int32 * int32 product as int64, so
the sums are cast back to int32 before the float conversion (LLVM then narrows the whole
chain to vpmulld / vpaddd); the tap offsets come from an array, not from arithmetic on one
base (with reads at o, o + 1, o + 2 known adjacent, LLVM's vectorizer picked a 4x slower
form); a flat pass of a multiple of the vector block has no scalar remainder, which on
7 x 7 or 14 x 14 images was most of the work.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import arg_pointers, open_loop
from .jit import njit
from .phases import inside
from .qgemm import signed

_i8 = types.int64
BAND = 2048  # int32 accumulators per pass of the depthwise taps (8 KiB, in L1)
DW_BLOCK = 64  # the 3x3 pass computes the extended output in whole blocks of this many pixels


def _split_sig(t):
    return types.void(types.Array(t, 4, "C", readonly=True), types.Array(t, 1, "C"), _i8, _i8, _i8, _i8, _i8, _i8,
                      _i8, types.boolean)


def _subsample_sig(t):
    return types.void(types.Array(t, 4, "C", readonly=True), types.Array(t, 1, "C"), _i8, _i8, _i8, _i8)


@njit([_subsample_sig(types.uint8), _subsample_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def subsample_q(x, out, oh, ow, sh, sw):
    """out[((n * C + c) * oh + i) * ow + j] = x[n, c, i * sh, j * sw]: the pixels a 1x1, unpadded, strided
    convolution reads, packed (its GEMM then reads them as a stride-1 one's: split_phases_q would write all
    sh * sw phase planes, and its strided copy took ~1 ms per ResNet-50 downsample, measured).

    Args:
        x: (N, C, H, W) uint8 or int8, with (oh - 1) * sh < H and (ow - 1) * sw < W.
        out: flat, same type, at least N * C * oh * ow elements.
    """
    n_b, c_n, h, wd = x.shape
    xf = x.reshape(x.size)
    u = np.uint64  # unsigned indices: no negative-index wraparound in the loop, which LLVM then vectorizes
    for nc in range(n_b * c_n):
        for i in range(oh):
            src = u(nc * h * wd + i * sh * wd)
            dst = u((nc * oh + i) * ow)
            if sw == 2:
                for j in range(u(ow)):
                    out[dst + j] = xf[src + j + j]
            else:
                for j in range(u(ow)):
                    out[dst + j] = xf[src + j * u(sw)]


CHUNK = 16  # plane bytes a step of _split_chunks writes (one xmm)
HALF_CHUNK = 8  # the steps of planes narrower than CHUNK (7 x 7 at stride 1, 14 x 14 at stride 2)


def _make_column(sw: int, width: int):
    """Steps of _split_chunks down a column of plane rows, a loop in one intrinsic: column(x, s, s_step, dst, d,
    d_step, n, lo, hi, fill) stores, for r < n, `width` bytes at dst[d + r * d_step], lane t being
    x[s + r * s_step + sw * t] where lo <= t < hi (0 <= lo, hi <= width) and `fill` elsewhere: per row one
    unaligned load of width * sw bytes (sw = 2: its even bytes, shuffled out), a blend with the column's mask
    (lane indices against lo and hi, compared once) and one store (AVX2: vpshufb / vpackuswb for the even
    bytes, vpblendvb). Every byte of each load is read, masked lane or not: the caller keeps the reads inside
    x. (As numba loops, in split_phases_q's loop nest or called from it, the steps cost 5-10x this: the
    counters kept on the stack, or a call's marshalling per column.)"""
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    vb = ir.VectorType(i8, width)
    vi = ir.VectorType(i32, width)
    vt = ir.VectorType(i8, width * sw)

    def splat(builder, value):
        one = builder.insert_element(ir.Constant(vb, ir.Undefined), value, ir.Constant(i32, 0))
        return builder.shuffle_vector(one, ir.Constant(vb, ir.Undefined), ir.Constant(vi, [0] * width))

    @intrinsic
    def column(typingctx, x, s, s_step, dst, d, d_step, n, lo, hi, fill):
        sig = types.void(x, s, s_step, dst, d, d_step, n, lo, hi, fill)

        def codegen(context, builder, signature, args):
            xp, dp = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
            s_step, d_step, n = (builder.sext(a, i64) if a.type.width < 64 else a for a in (args[2], args[5], args[6]))
            lanes = ir.Constant(vb, list(range(width)))
            lo, hi = (splat(builder, builder.trunc(a, i8)) for a in (args[7], args[8]))
            keep = builder.and_(builder.icmp_signed(">=", lanes, lo), builder.icmp_signed("<", lanes, hi))
            fill = splat(builder, args[9])
            r, _, loop_bb, done_bb = open_loop(builder, n, "column")
            v = builder.load(builder.bitcast(builder.gep(xp, [builder.mul(r, s_step)]), vt.as_pointer()), align=1)
            if sw > 1:
                v = builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                           ir.Constant(vi, list(range(0, width * sw, sw))))
            out = builder.bitcast(builder.gep(dp, [builder.mul(r, d_step)]), vb.as_pointer())
            builder.store(builder.select(keep, v, fill), out, align=1)
            step = builder.add(r, ir.Constant(r.type, 1))
            r.add_incoming(step, builder.block)
            builder.cbranch(builder.icmp_signed("<", step, n), loop_bb, done_bb)
            builder.position_at_end(done_bb)
            return context.get_dummy_value()

        return sig, codegen

    return column


_column1, _column2 = _make_column(1, CHUNK), _make_column(2, CHUNK)
_half1, _half2 = _make_column(1, HALF_CHUNK), _make_column(2, HALF_CHUNK)


def _masked_fn(builder, name, ret, args):
    fn = builder.module.globals.get(name)
    return fn if fn is not None else ir.Function(builder.module, ir.FunctionType(ret, args), name)


MASKED_CHUNK = 64  # input bytes a masked row step loads (one zmm)


def _bits_mask(builder, bits, n: int):
    """The low n bits of an integer as an <n x i1> mask (lane t: bit t)."""
    if bits.type.width != n:
        bits = builder.trunc(bits, ir.IntType(n))
    return builder.bitcast(bits, ir.VectorType(ir.IntType(1), n))


def _make_row_bits(sw: int):
    """A row step of split_phases_q on a 16-lane (AVX-512) target: MASKED_CHUNK bytes of an input row loaded
    under a mask, the lanes outside the row (the padding) taking `fill` (llvm.masked.load's pass-through),
    then stored under a mask to the phase planes' rows: sw = 1, lane t to d0 + t; sw = 2, even lanes to
    d0 + t / 2 and odd ones to d1 + t / 2 (the two column phases, deinterleaved).

    step(x, s, load_bits, dst, d0, d1, keep_bits, fill): the lanes t set in load_bits (bit t) read
    x[s + t] (s may be negative: no masked-off lane is read), the others are fill; the outputs set in
    keep_bits (MASKED_CHUNK // sw of them) are stored (d1 unused at sw = 1). The masks come as bits,
    computed once per step of a plane row by _split_masked (one kmov each here): built in every row
    from vector compares instead, they cost more than the copy itself (14 x 14 planes: 18 us a
    256-channel input, against 6.5 us now)."""
    width = MASKED_CHUNK // sw

    @intrinsic
    def step(typingctx, x, s, load_bits, dst, d0, d1, keep_bits, fill):
        sig = types.void(x, s, load_bits, dst, d0, d1, keep_bits, fill)

        def codegen(context, builder, signature, args):
            i8, i32 = ir.IntType(8), ir.IntType(32)
            vt = ir.VectorType(i8, MASKED_CHUNK)
            xp, p0, p1 = arg_pointers(context, builder, signature, args, (0, 1), (3, 4), (3, 5))
            mask = _bits_mask(builder, args[2], MASKED_CHUNK)
            f = builder.insert_element(ir.Constant(vt, ir.Undefined), builder.trunc(args[7], i8), ir.Constant(i32, 0))
            fill = builder.shuffle_vector(f, ir.Constant(vt, ir.Undefined),
                                          ir.Constant(ir.VectorType(i32, MASKED_CHUNK), [0] * MASKED_CHUNK))
            load = _masked_fn(builder, f"llvm.masked.load.v{MASKED_CHUNK}i8.p0", vt, [xp.type, i32, mask.type, vt])
            v = builder.call(load, [xp, ir.Constant(i32, 1), mask, fill])
            ot = ir.VectorType(i8, width)
            keep = _bits_mask(builder, args[6], width)
            store = _masked_fn(builder, f"llvm.masked.store.v{width}i8.p0", ir.VoidType(),
                               [ot, p0.type, i32, keep.type])
            if sw == 1:
                builder.call(store, [v, p0, ir.Constant(i32, 1), keep])
            else:
                oi = ir.VectorType(i32, width)
                for p, h in ((p0, 0), (p1, 1)):
                    e = builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                               ir.Constant(oi, list(range(h, MASKED_CHUNK, 2))))
                    builder.call(store, [e, p, ir.Constant(i32, 1), keep])
            return context.get_dummy_value()

        return sig, codegen

    return step


_row_bits1, _row_bits2 = _make_row_bits(1), _make_row_bits(2)


@njit(nogil=True, cache=True, inline="always")
def _lane_bits(lo, hi):
    """Lanes [lo, hi) of MASKED_CHUNK (clipped to it) as bits of a uint64."""
    lo, hi = max(lo, 0), min(hi, MASKED_CHUNK)
    if hi <= lo:
        return np.uint64(0)
    upper = np.uint64(0xFFFFFFFFFFFFFFFF) if hi == 64 else (np.uint64(1) << np.uint64(hi)) - np.uint64(1)
    return upper & ~((np.uint64(1) << np.uint64(lo)) - np.uint64(1))


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _split_masked(xf, planes, nc_n, h, wd, hq, wq, sh, sw, ph, pw, v):
    """split_phases_q for sw = 1 or 2 with masked row steps (_make_row_bits; a 16-lane target): each plane
    row in steps of MASKED_CHUNK // sw outputs, its padding taken from the masked load's fill, the rows
    outside the input all fill (a load with no lane read). Output j of phase (a, b)'s row i is input
    column b + sw * j - pw of row a + sh * i - ph. The steps' masks depend on the step only (not on the
    row): computed once, as bits."""
    f_n, pq = sh * sw, hq * wq
    step = MASKED_CHUNK // sw
    n_steps = (wq + step - 1) // step
    load_bits = np.empty(n_steps, np.uint64)
    keep_bits = np.empty(n_steps, np.uint64)
    for k in range(n_steps):
        c0 = sw * k * step - pw  # the column of lane 0 (b = 0: both phases come from one read at sw = 2)
        load_bits[k] = _lane_bits(-c0, wd - c0)
        keep_bits[k] = _lane_bits(0, wq - k * step)
    none = np.uint64(0)
    for nc in range(nc_n):
        for a in range(sh):
            for i in range(hq):
                row = a + sh * i - ph
                inside_row = 0 <= row < h
                src = nc * h * wd + row * wd  # input column c at src + c
                d = (nc * f_n + a * sw) * pq + i * wq
                for k in range(n_steps):
                    j = k * step
                    c0 = sw * j - pw
                    bits = load_bits[k] if inside_row else none
                    if sw == 2:
                        _row_bits2(xf, src + c0, bits, planes, d + j, d + pq + j, keep_bits[k], v)
                    else:
                        _row_bits1(xf, src + c0, bits, planes, d + j, d, keep_bits[k], v)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _column(xf, s, s_step, planes, d, d_step, n, lo, hi, v, sw, width):
    """_make_column's column of the given step width and column stride sw (hi <= lo: fill only; the loads then
    read the steps' own bytes of the planes, keeping none)."""
    if n <= 0:
        return
    if hi <= lo:
        if width == CHUNK:
            _column1(planes, d, d_step, planes, d, d_step, n, 0, 0, v)
        else:
            _half1(planes, d, d_step, planes, d, d_step, n, 0, 0, v)
    elif width == CHUNK:
        if sw == 2:
            _column2(xf, s, s_step, planes, d, d_step, n, lo, hi, v)
        else:
            _column1(xf, s, s_step, planes, d, d_step, n, lo, hi, v)
    elif sw == 2:
        _half2(xf, s, s_step, planes, d, d_step, n, lo, hi, v)
    else:
        _half1(xf, s, s_step, planes, d, d_step, n, lo, hi, v)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _split_chunks(xf, planes, nc_n, h, wd, hq, wq, sh, sw, ph, pw, v):
    """split_phases_q for sw = 1 or 2 and plane rows of HALF_CHUNK or more on targets without masked byte loads
    (AVX2): a plane row in steps of CHUNK (rows narrower than it: HALF_CHUNK) outputs, the last step ending at
    the row's end (overlapping the one before), so that the steps of a column of rows go one row after another
    (_make_column), their mask the column's. A row whose read would leave X (near its first or last bytes) goes
    element by element. Output j of phase (a, b)'s row i is input column b + sw * j - pw of row a + sh * i - ph.
    (The row-by-row copy it replaced went element by element wherever a phase row held fewer than 16 columns:
    on Haswell code on Zen 5, ResNet-50's 256 x 28 x 28 stride-2 split 82 -> 31 us, 256 x 14 x 14 at stride 1
    22 -> 6 us, all its splits 483 -> 195 us a forward.)"""
    f_n, pq = sh * sw, hq * wq
    size = xf.size
    width = CHUNK if wq >= CHUNK else HALF_CHUNK
    n_ch = (wq + width - 1) // width
    for nc in range(nc_n):
        for f in range(f_n):
            a, b = f // sw, f % sw
            i0, i1 = inside(h, ph, a, sh, hq)
            j0, j1 = inside(wd, pw, b, sw, wq)
            base = (nc * f_n + f) * pq
            src0 = nc * h * wd + (a - ph) * wd + b - pw  # row i's output column j at src0 + i * sh * wd + sw * j
            for k in range(n_ch):
                c = min(k * width, wq - width)
                lo, hi = min(max(j0 - c, 0), width), min(max(j1 - c, 0), width)
                if hi <= lo or i1 <= i0:
                    _column(xf, 0, 0, planes, base + c, wq, hq, 0, 0, v, sw, width)
                    continue
                s0 = src0 + sw * c
                ia, ib = i0, i1  # the rows whose reads stay inside X: [ia, ib)
                while ia < ib and s0 + ia * sh * wd < 0:
                    ia += 1
                while ib > ia and s0 + (ib - 1) * sh * wd + sw * width > size:
                    ib -= 1
                _column(xf, 0, 0, planes, base + c, wq, i0, 0, 0, v, sw, width)
                _column(xf, s0 + ia * sh * wd, sh * wd, planes, base + ia * wq + c, wq, ib - ia, lo, hi, v, sw, width)
                _column(xf, 0, 0, planes, base + i1 * wq + c, wq, hq - i1, 0, 0, v, sw, width)
                if ia > i0 or ib < i1:
                    for i in range(i0, i1):  # the rest element by element
                        if ia <= i < ib:
                            continue
                        d, s = base + i * wq + c, s0 + i * sh * wd
                        for t in range(width):
                            planes[d + t] = xf[s + sw * t] if lo <= t < hi else v


@njit([_split_sig(types.uint8), _split_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def split_phases_q(x, planes, hq, wq, sh, sw, ph, pw, fill, masked):
    """planes[n, c, a*sw + b] = phase (a, b) of X[n, c] padded by (ph, pw) with `fill` (phases.py).

    Args:
        x: (N, C, H, W) uint8 or int8.
        planes: flat, same type, at least N*C*sh*sw*hq*wq elements, as (N, C, sh*sw, hq, wq); every
            element of those planes is written.
        hq, wq: the phase planes' size; sh, sw: strides; ph, pw: pads_begin; fill: the padding value
            (the input's zero point).
        masked: nonzero: at sw <= 2 the rows go in masked 64-byte steps (_split_masked: for 16-lane,
            AVX-512 targets, where a masked byte load / store is one instruction; elsewhere LLVM
            splits them into a branch a byte). ResNet-50's 256 x 28 x 28 stride-2 input: 0.096 ms
            -> 0.041 ms on Zen 5 with masks from vector compares, 0.012 ms with them as bits computed
            once a plane (14 x 14 at stride 1: 0.024 -> 0.019 -> 0.0065 ms). Zero: at sw <= 2, 16- (or 8-)
            byte steps blended with the fill down each column of plane rows (_split_chunks, AVX2's form);
            sw > 2, or planes under 8 wide, element by element.
    """
    n_b, c_n, h, wd = x.shape
    f_n, pq = sh * sw, hq * wq
    v = planes.dtype.type(fill)
    xf = x.reshape(x.size)
    u = np.uint64
    if masked and sw <= 2:
        _split_masked(xf, planes, n_b * c_n, h, wd, hq, wq, sh, sw, ph, pw, v)
        return
    if sw <= 2 and wq >= HALF_CHUNK:
        _split_chunks(xf, planes, n_b * c_n, h, wd, hq, wq, sh, sw, ph, pw, v)
        return
    for nc in range(n_b * c_n):
        for f in range(f_n):
            a, b = f // sw, f % sw
            i0, i1 = inside(h, ph, a, sh, hq)
            j0, j1 = inside(wd, pw, b, sw, wq)
            base = (nc * f_n + f) * pq
            for i in range(hq):
                r = u(base + i * wq)
                if i < i0 or i >= i1:
                    for j in range(u(wq)):
                        planes[r + j] = v
                    continue
                for j in range(u(j0)):
                    planes[r + j] = v
                for j in range(u(j1), u(wq)):
                    planes[r + j] = v
                src = u(nc * h * wd + (a + sh * i - ph) * wd + b + sw * j0 - pw)
                d = r + u(j0)
                if sw == 1:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + j]
                elif sw == 2:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + j + j]
                else:
                    for j in range(u(j1 - j0)):
                        planes[d + j] = xf[src + u(sw) * j]


@njit(types.void(types.Array(types.uint8, 1, "C", readonly=True), types.Array(types.uint32, 1, "C"), _i8, _i8, _i8),
      nogil=True, cache=True, error_model="numpy")
def quad_planes_q(planes, quads, n_b, c_n, fpq):
    """compiled/qgemm.py's qconv_direct's X: the phase planes of split_phases_q ((N, C, F * PQ) uint8, fpq =
    F * PQ elements a channel) with each 4 channels interleaved, a pixel's 4 bytes one uint32:
    quads[(n * CQ + cq) * fpq + e] = bytes planes[n, 4 cq + i, e] for i < 4 (0 past C), CQ = ceil(C / 4)."""
    cq_n = (c_n + 3) // 4
    u, x = np.uint32, np.uint64  # unsigned indices: no wraparound checks, so LLVM vectorizes the loops
    for n in range(n_b):
        for cq in range(cq_n):
            d = x((n * cq_n + cq) * fpq)
            s = x((n * c_n + 4 * cq) * fpq)
            k = min(4, c_n - 4 * cq)
            if k == 4:
                s1, s2, s3 = s + x(fpq), s + x(2 * fpq), s + x(3 * fpq)
                for e in range(x(fpq)):
                    quads[d + e] = (u(planes[s + e]) | u(planes[s1 + e]) << u(8)
                                    | u(planes[s2 + e]) << u(16) | u(planes[s3 + e]) << u(24))
                continue
            for e in range(x(fpq)):
                v = u(0)
                for i in range(k):
                    v |= u(planes[s + x(i * fpq) + e]) << u(8 * i)
                quads[d + e] = v


def _dw_sig(xt, yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    return types.void(types.Array(xt, 1, "C", readonly=True), _i8, _i8, ri64, ri32, ri32, rf32, _i8,
                      types.Array(yt, 1, "C"), _i8, _i8, _i8, _i8, types.Array(types.int32, 1, "C"))


@njit([_dw_sig(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def depthwise_q(planes, x0, image, offs, wt, b, mult, zp, y, y0, oh, ow, wq, acc):
    """One image of a depthwise convolution in int32, requantized (module docstring).

    Args:
        planes, x0, image: channel c's phase planes start at planes[x0 + c * image].
        offs: (T,) tap t's offset from an output pixel's position in them (conv_indirect.indirect_layout
            with one channel).
        wt: (C * T,) int32 W' = W - w_zero_point, channel-major; b: (C,) int32 bias with the input's
            zero point folded in; mult: (C,) float32; zp: y_zero_point.
        y, y0: output channel c, row i, column j at y[y0 + (c * oh + i) * ow + j]; oh, ow: output size;
            wq: the planes' row pitch.
        acc: int32 workspace of min(oh * wq, BAND + wq) elements at least; with a 3x3 kernel, of
            oh * wq + DW_BLOCK (its pass over the whole extended image stores oh * wq, rounded up to
            whole DW_BLOCKs, 8-bit values in acc's bytes; its reads reach up to DW_BLOCK elements further
            past the planes' last pixel than the taps do).
    """
    c_n = b.size
    t_n = offs.size
    u = np.uint64
    lo = -128.0 if signed(y) else 0.0
    hi = 127.0 if signed(y) else 255.0
    zpf = np.float32(zp)
    lo_f, hi_f = np.float32(lo) - zpf, np.float32(hi) - zpf
    if t_n == 9 and oh * wq + DW_BLOCK <= acc.size:  # 3x3: the 9 taps and the requantization in one pass
        # over the channel's extended output rows (pitch wq, flat: vectorized whatever OW, 7 or 112),
        # stored as 8-bit in acc's bytes, then the rows' first OW pixels copied out
        ext = acc.view(np.uint8).view(y.dtype)
        n = u((oh * wq + DW_BLOCK - 1) // DW_BLOCK * DW_BLOCK)  # whole blocks: no scalar remainder loop
        for c in range(c_n):
            base = u(x0 + c * image)
            bc = b[c]
            m = mult[c]
            k = c * 9
            w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wt[k], wt[k + 1], wt[k + 2], wt[k + 3], wt[k + 4], wt[k + 5],
                                                  wt[k + 6], wt[k + 7], wt[k + 8])
            o0, o1, o2, o3, o4, o5, o6, o7, o8 = (base + u(offs[0]), base + u(offs[1]), base + u(offs[2]),
                                                  base + u(offs[3]), base + u(offs[4]), base + u(offs[5]),
                                                  base + u(offs[6]), base + u(offs[7]), base + u(offs[8]))
            for i in range(n):
                a = (bc + w0 * np.int32(planes[o0 + i]) + w1 * np.int32(planes[o1 + i])
                     + w2 * np.int32(planes[o2 + i]) + w3 * np.int32(planes[o3 + i])
                     + w4 * np.int32(planes[o4 + i]) + w5 * np.int32(planes[o5 + i])
                     + w6 * np.int32(planes[o6 + i]) + w7 * np.int32(planes[o7 + i])
                     + w8 * np.int32(planes[o8 + i]))
                f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)  # the int32 sum (its wider typing dropped)
                ext[i] = np.int32(np.rint(f)) + zp
            d0 = u(y0 + c * oh * ow)
            for r in range(u(oh)):
                for j in range(u(ow)):
                    y[d0 + r * u(ow) + j] = ext[r * u(wq) + j]
        return
    band = min(oh, max(1, BAND // wq))  # output rows per pass: the accumulator stays in L1
    for c in range(c_n):
        base = u(x0 + c * image)
        bc = b[c]
        m = mult[c]
        for r0 in range(0, oh, band):
            rows = min(band, oh - r0)
            n = u(rows * wq)
            for i in range(n):
                acc[i] = bc
            for t in range(t_n):
                wv = wt[c * t_n + t]
                s = base + u(offs[t] + r0 * wq)
                for i in range(n):
                    acc[i] += wv * np.int32(planes[s + i])
            for r in range(rows):
                d = u(y0 + (c * oh + r0 + r) * ow)
                a = u(r * wq)
                for j in range(u(ow)):
                    f = min(max(np.float32(acc[a + j]) * m, lo_f), hi_f)
                    y[d + j] = np.int32(np.rint(f)) + zp



@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, r, j):
    """Output pixel (r, j) of a 3x3, stride-1, pad-1 depthwise conv, its taps checked against the image
    (a tap on the padding reads x_zp)."""
    a = np.int32(bc)
    for kh in range(3):
        i = r + kh - 1
        for kw in range(3):
            jj = j + kw - 1
            v = np.int32(x[base + i * w + jj]) if 0 <= i < h and 0 <= jj < w else np.int32(x_zp)
            a = np.int32(a + wt[k + 3 * kh + kw] * v)
    f = min(max(np.float32(a) * m, lo_f), hi_f)
    y[d + r * w + j] = np.int32(np.rint(f)) + zp


def _dw3s1_sig(xt, yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    return types.void(types.Array(xt, 1, "C", readonly=True), _i8, _i8, ri64, ri32, ri32, rf32, _i8,
                      types.Array(yt, 1, "C"), _i8, _i8, _i8)


@njit([_dw3s1_sig(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def depthwise3x3s1_q(x, x0, x_zp, taps, wt, b, mult, zp, y, y0, h, w):
    """One image of a 3x3 depthwise convolution, stride 1, pads 1, read from X itself (no padded copy).

    Output pixel p = r * W + j of channel c (the output is H x W) sums W'[c, kh, kw] *
    X[c, r + kh - 1, j + kw - 1]: one flat, vectorized pass over p = W + 1 .. (H - 1) * W - 2 reads
    x[x0 + c * H * W + p - W - 1 + taps[3 kh + kw]] (taps = (kh * W + kw), given as an array so that
    LLVM treats the nine reads as independent rows, which it vectorizes), always inside the channel;
    it gets the interior right and the first and last columns wrong (a row's neighbours wrap); then
    the border is recomputed: the first and last rows (vectorized) and columns with the taps on the
    padding summed once as x_zp * W', the corners with their taps checked. Requantized as depthwise_q.

    Args:
        x, x0: channel c of the image at x[x0 + c * h * w], H x W, uint8 or int8; x_zp: its zero point.
        taps: (9,) int64 kh * w + kw; wt: (C * 9,) int32 W' = W - w_zero_point; b: (C,) int32 bias,
            the input's zero point folded in; mult: (C,) float32; zp: y_zero_point.
        y, y0: output channel c at y[y0 + c * h * w].
    """
    c_n = b.size
    u = np.uint64
    lo = -128.0 if signed(y) else 0.0
    hi = 127.0 if signed(y) else 255.0
    zpf = np.float32(zp)
    lo_f, hi_f = np.float32(lo) - zpf, np.float32(hi) - zpf
    hw = h * w
    n = hw - 2 * w - 2  # the flat pass: p = w + 1 .. hw - w - 2
    for c in range(c_n):
        base = x0 + c * hw
        d = y0 + c * hw
        bc = b[c]
        m = mult[c]
        k = c * 9
        w0, w1, w2, w3, w4, w5, w6, w7, w8 = (wt[k], wt[k + 1], wt[k + 2], wt[k + 3], wt[k + 4], wt[k + 5],
                                              wt[k + 6], wt[k + 7], wt[k + 8])
        if n > 0:
            q = u(base)
            o0, o1, o2, o3, o4, o5, o6, o7, o8 = (q + u(taps[0]), q + u(taps[1]), q + u(taps[2]), q + u(taps[3]),
                                                  q + u(taps[4]), q + u(taps[5]), q + u(taps[6]), q + u(taps[7]),
                                                  q + u(taps[8]))
            dst = u(d + w + 1)
            for e in range(u(n)):
                a = (bc + w0 * np.int32(x[o0 + e]) + w1 * np.int32(x[o1 + e])
                     + w2 * np.int32(x[o2 + e]) + w3 * np.int32(x[o3 + e])
                     + w4 * np.int32(x[o4 + e]) + w5 * np.int32(x[o5 + e])
                     + w6 * np.int32(x[o6 + e]) + w7 * np.int32(x[o7 + e])
                     + w8 * np.int32(x[o8 + e]))
                f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)  # the int32 sum (numba's int64 dropped)
                y[dst + e] = np.int32(np.rint(f)) + zp
        if h < 3 or w < 3:  # a small image: every border pixel with its taps checked
            for j in range(w):
                _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, 0, j)
                _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, h - 1, j)
            for r in range(1, h - 1):
                _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, r, 0)
                _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, r, w - 1)
            continue
        # the border: the taps on the padding contribute x_zp * W' (summed once here); the others read
        # at offsets from `taps` (opaque to LLVM, as in the flat pass); the four corners checked
        zt = np.int32(x_zp * (w0 + w1 + w2))
        zb = np.int32(x_zp * (w6 + w7 + w8))
        zl = np.int32(x_zp * (w0 + w3 + w6))
        zr = np.int32(x_zp * (w2 + w5 + w8))
        q = u(base)
        t0, t1, t2, t3, t4, t5 = u(taps[0]), u(taps[1]), u(taps[2]), u(taps[3]), u(taps[4]), u(taps[5])
        qb = q + u((h - 2) * w)
        for e in range(u(w - 2)):  # the first row's j = e + 1 (rows 0, 1), the last row's (rows h - 2, h - 1)
            a = (bc + zt + w3 * np.int32(x[q + t0 + e]) + w4 * np.int32(x[q + t1 + e]) + w5 * np.int32(x[q + t2 + e])
                 + w6 * np.int32(x[q + t3 + e]) + w7 * np.int32(x[q + t4 + e]) + w8 * np.int32(x[q + t5 + e]))
            f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)
            y[u(d + 1) + e] = np.int32(np.rint(f)) + zp
            a = (bc + zb + w0 * np.int32(x[qb + t0 + e]) + w1 * np.int32(x[qb + t1 + e])
                 + w2 * np.int32(x[qb + t2 + e]) + w3 * np.int32(x[qb + t3 + e]) + w4 * np.int32(x[qb + t4 + e])
                 + w5 * np.int32(x[qb + t5 + e]))
            f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)
            y[u(d + (h - 1) * w + 1) + e] = np.int32(np.rint(f)) + zp
        for r in range(1, h - 1):  # the first and last columns
            p = base + (r - 1) * w
            a = (bc + zl + w1 * np.int32(x[p]) + w2 * np.int32(x[p + 1]) + w4 * np.int32(x[p + w])
                 + w5 * np.int32(x[p + w + 1]) + w7 * np.int32(x[p + 2 * w]) + w8 * np.int32(x[p + 2 * w + 1]))
            f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)
            y[d + r * w] = np.int32(np.rint(f)) + zp
            p += w - 2
            a = (bc + zr + w0 * np.int32(x[p]) + w1 * np.int32(x[p + 1]) + w3 * np.int32(x[p + w])
                 + w4 * np.int32(x[p + w + 1]) + w6 * np.int32(x[p + 2 * w]) + w7 * np.int32(x[p + 2 * w + 1]))
            f = min(max(np.float32(np.int32(a)) * m, lo_f), hi_f)
            y[d + r * w + w - 1] = np.int32(np.rint(f)) + zp
        for r, j in ((0, 0), (0, w - 1), (h - 1, 0), (h - 1, w - 1)):
            _dw3_border(x, base, x_zp, wt, k, bc, m, lo_f, hi_f, zp, y, d, h, w, r, j)
