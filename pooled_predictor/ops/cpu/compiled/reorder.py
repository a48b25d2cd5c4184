"""Reorders between NCHW and the blocked layout NCHW<c>c (ops/layouts.py), float32, one pass.

to_blocked: out[n, k, p, l] = X[n, k*c + l, p] (0 for the padding channels k*c + l >= C);
from_blocked: out[n, ch, p] = X[n, ch // c, p, ch % c]. P = the product of the
spatial sizes. oneDNN's "reorder" primitive / MLAS's ReorderInput and ReorderOutput.

For c a multiple of 8 (NCHW8c, NCHW16c), full groups of 8 channels x 8 pixels are
transposed in registers (eight <8 x float> loads, three rounds of two-input shuffles --
AVX2's unpack/shuffle/permute2f128 8x8 transpose -- and eight stores; c / 8 of them per
8 pixels of a block, each storing half-rows of 16 at c = 16; a partial last block's
multiple of 8 channels too); the rest (pixels past a multiple of 8, the last
block's channels past a multiple of 8, other c) is a scalar loop tiled over TILE
pixels, and the padding channels are zeroed a pixel's run at a time. Measured
(one thread, cache-hot): NCHW -> NCHW8c of 32 x 112 x 112 in about a third of
numpy's strided-copy time; NCHW16c of PP-OCR rec's 24 x 24 x 160 (a last block of
8 channels) 29.7 -> 17.7 us to the blocked layout and 22.2 -> 8.0 us back on Zen 5 (in
the model, 0.031 -> 0.019 ms), where the scalar loop had taken the whole last block.
Exact (copies).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import _I64, _V8
from .jit import njit

_LO = (0, 8, 1, 9, 4, 12, 5, 13)  # unpacklo
_HI = (2, 10, 3, 11, 6, 14, 7, 15)  # unpackhi
_Q0 = (0, 1, 8, 9, 4, 5, 12, 13)
_Q1 = (2, 3, 10, 11, 6, 7, 14, 15)
_H0 = (0, 1, 2, 3, 8, 9, 10, 11)  # permute2f128 low halves
_H1 = (4, 5, 6, 7, 12, 13, 14, 15)  # high halves


@intrinsic
def transpose8(typingctx, src, s_off, s_pitch, dst, d_off, d_pitch):
    """dst[d_off + j * d_pitch + i] = src[s_off + i * s_pitch + j], i, j < 8: an 8 x 8 transpose."""
    sig = types.void(src, s_off, s_pitch, dst, d_off, d_pitch)

    def codegen(context, builder, signature, args):
        src_a, s_off_v, s_pitch_v, dst_a, d_off_v, d_pitch_v = args
        sp = builder.gep(context.make_array(signature.args[0])(context, builder, src_a).data, [s_off_v])
        dp = builder.gep(context.make_array(signature.args[3])(context, builder, dst_a).data, [d_off_v])
        c = lambda v: ir.Constant(_I64, v)  # noqa: E731
        mask = lambda m: ir.Constant(ir.VectorType(ir.IntType(32), 8), list(m))  # noqa: E731
        r = [builder.load(builder.bitcast(builder.gep(sp, [builder.mul(s_pitch_v, c(i))]), _V8.as_pointer()),
                          align=4) for i in range(8)]
        shuf = lambda a, b, m: builder.shuffle_vector(a, b, mask(m))  # noqa: E731
        t = []
        for i in range(0, 8, 2):
            t += [shuf(r[i], r[i + 1], _LO), shuf(r[i], r[i + 1], _HI)]
        # t[0], t[1]: rows 0-1; t[2], t[3]: rows 2-3; t[4], t[5]: rows 4-5; t[6], t[7]: rows 6-7
        u = []
        for base in (0, 4):
            u += [shuf(t[base], t[base + 2], _Q0), shuf(t[base], t[base + 2], _Q1),
                  shuf(t[base + 1], t[base + 3], _Q0), shuf(t[base + 1], t[base + 3], _Q1)]
        # u[j] (j < 4): columns j and j + 4 of rows 0-3; u[4 + j]: the same of rows 4-7
        for j in range(4):
            for col, m in ((j, _H0), (j + 4, _H1)):
                v = shuf(u[j], u[4 + j], m)
                builder.store(v, builder.bitcast(builder.gep(dp, [builder.mul(d_pitch_v, c(col))]),
                                                 _V8.as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen

TILE = 64  # pixels per tile: c x TILE floats of the blocked side in L1

_R1 = types.Array(types.float32, 1, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")
_I = types.int64


@njit(types.void(_R1, _F1, _I, _I, _I, _I), nogil=True, cache=True, error_model="numpy")
def to_blocked(x, out, n_b, c_n, p_n, blk):
    """out (N, ceil(C/blk), P, blk) flat = x (N, C, P) flat, channels blocked by blk, padding zeroed."""
    cb_n = (c_n + blk - 1) // blk
    for n in range(n_b):
        for cb in range(cb_n):
            c0 = cb * blk
            cn = min(blk, c_n - c0)
            ob = (n * cb_n + cb) * p_n * blk
            # 8 x 8 tiles transposed in registers: the block's first q_v channels (all of a full block, the
            # multiple of 8 of a partial one: NCHW16c's last block of 24 channels), p_v pixels
            q_v = cn // 8 * 8 if blk % 8 == 0 else 0
            p_v = p_n // 8 * 8 if q_v else 0
            xb = (n * c_n + c0) * p_n
            for p in range(0, p_v, 8):
                for q in range(0, q_v, 8):
                    transpose8(x, xb + q * p_n + p, p_n, out, ob + p * blk + q, blk)
            for p0 in range(0, p_n, TILE):  # the rest, channel by channel
                pe = min(p_n, p0 + TILE)
                for lane in range(cn):
                    ps = max(p0, p_v) if lane < q_v else p0
                    xl = xb + lane * p_n
                    for p in range(ps, pe):
                        out[ob + p * blk + lane] = x[xl + p]
            if cn < blk:  # the padding channels, each pixel's run of them: to a multiple of 8, then 8 at a time
                z8 = min(blk, (cn + 7) // 8 * 8)
                for p in range(p_n):
                    o = ob + p * blk
                    for lane in range(cn, z8):
                        out[o + lane] = 0.0
                    for q in range(z8, blk, 8):
                        for lane in range(8):  # a fixed count: one vector store
                            out[o + q + lane] = 0.0


@njit(types.void(_R1, _F1, _I, _I, _I, _I), nogil=True, cache=True, error_model="numpy")
def from_blocked(x, out, n_b, c_n, p_n, blk):
    """out (N, C, P) flat = x (N, ceil(C/blk), P, blk) flat, the padding channels dropped."""
    cb_n = (c_n + blk - 1) // blk
    for n in range(n_b):
        for cb in range(cb_n):
            c0 = cb * blk
            cn = min(blk, c_n - c0)
            xb = (n * cb_n + cb) * p_n * blk
            q_v = cn // 8 * 8 if blk % 8 == 0 else 0  # as to_blocked
            p_v = p_n // 8 * 8 if q_v else 0
            ob = (n * c_n + c0) * p_n
            for p in range(0, p_v, 8):
                for q in range(0, q_v, 8):
                    transpose8(x, xb + p * blk + q, blk, out, ob + q * p_n + p, p_n)
            for p0 in range(0, p_n, TILE):
                pe = min(p_n, p0 + TILE)
                for lane in range(cn):
                    ps = max(p0, p_v) if lane < q_v else p0
                    ol = ob + lane * p_n
                    for p in range(ps, pe):
                        out[ol + p] = x[xb + p * blk + lane]


@intrinsic
def _copy_row(typingctx, dst, d_off, src, s_bytes, nbytes):
    """memcpy(&dst[d_off], (char *) src.data + s_bytes, nbytes): a contiguous run of an arbitrarily strided src."""
    sig = types.void(dst, d_off, src, s_bytes, nbytes)

    def codegen(context, builder, signature, args):
        from numba.core import cgutils

        i8p = ir.IntType(8).as_pointer()
        dptr = builder.gep(context.make_array(signature.args[0])(context, builder, args[0]).data, [args[1]])
        sdata = context.make_array(signature.args[2])(context, builder, args[2]).data
        sptr = builder.gep(builder.bitcast(sdata, i8p), [args[3]])
        cgutils.raw_memcpy(builder, builder.bitcast(dptr, i8p), sptr, args[4], ir.Constant(_I64, 1))
        return context.get_dummy_value()

    return sig, codegen


@njit(types.void(types.Array(types.float32, 5, "C"), types.Array(types.float32, 5, "A", readonly=True), _I, _I,
                 types.boolean), nogil=True, cache=True, error_model="numpy")
def window_copy(dst, src, y0, x0, zero):
    """dst[n, c, y0 + y, x0 + x, l] = src[n, c, y, x, l] for the window src covers, and, with `zero`, 0 in
    every other element of dst: a blocked (N, C/c, H, W, c) float32 X copied into a zero-padded buffer
    (the NCHWc convolutions' padding, conv_nchwc.py) or into a packed one (y0 = x0 = 0; src a strided view:
    a strided 1x1's pixels). One compiled call where numpy takes one per border and one for the copy; a
    row whose pixels lie contiguous in src is one memcpy.

    dst and src agree in their first two and last dimensions; y0, x0 >= 0; rows and columns of the
    window past dst's are not copied.
    """
    k_n, cb_n, hp, wp, bl = dst.shape
    h, w = src.shape[2], src.shape[3]
    x1 = max(0, min(w, wp - x0))
    s0, s1, s2, s3, s4 = src.strides
    rows = s4 == 4 and s3 == 4 * bl  # each row's x1 pixels one contiguous run
    for n in range(k_n):
        for c in range(cb_n):
            for y in range(hp):
                sy = y - y0
                if sy < 0 or sy >= h:
                    if zero:
                        for x in range(wp):
                            for lane in range(bl):
                                dst[n, c, y, x, lane] = 0.0
                    continue
                if zero:
                    for x in range(x0):
                        for lane in range(bl):
                            dst[n, c, y, x, lane] = 0.0
                    for x in range(x0 + x1, wp):
                        for lane in range(bl):
                            dst[n, c, y, x, lane] = 0.0
                if rows:
                    _copy_row(dst, (((n * cb_n + c) * hp + y) * wp + x0) * bl, src, n * s0 + c * s1 + sy * s2,
                              4 * x1 * bl)
                    continue
                for x in range(x1):
                    for lane in range(bl):
                        dst[n, c, y, x0 + x, lane] = src[n, c, sy, x, lane]


@njit(types.void(_F1, types.float32), nogil=True, cache=True, error_model="numpy")
def fill(a, value):
    """a[:] = value (float32): numpy's fill as a compiled call, so that it joins a native run
    (compiled/native_runs.py)."""
    for i in range(a.size):
        a[i] = value
