"""Winograd F(m x m, 3 x 3) convolution in the blocked layout NCHW8c, bias, sum input and activation fused.

The algorithm is compiled/winograd.py's (Lavin & Gray 2016; its docstring states the
matrices and the error bound): for the (m+2) x (m+2) input patch d of an output tile
and the filter g, Y = A^T [(G g G^T) (.) (B^T d B)] A, and summed over input channels
the element-wise product is, at each of the a^2 positions xi (a = m + 2), one GEMM

    M[xi] (M_out x T) = U[xi] (M_out x C) @ V[xi] (C x T)

over the T tiles. In NCHW8c the eight channels of a pixel are one AVX2 vector, so
here both transforms run on eight channels at once (each lane its own channel, the
same arithmetic), and V[xi] is stored as a blocked "image" of T pixels,
(C/8, T, 8), which makes each position's GEMM exactly a pointwise convolution:
compiled/nchwc_gemm.py's register-blocked micro-kernel computes it (onnxruntime's
MLAS has no float32 Winograd; oneDNN's and NNPACK's lay the transformed tiles out
this way).

Memory: V (a^2 x C x T) and M (a^2 x M_out x T) are arena scratch; the tiles of
`group` images are transformed together (a batch shares each U[xi] while it is in
cache), groups sized by the caller to keep V and M in a few MiB, and within a call
the tiles go a block of tile rows at a time (transform, GEMMs, transform back) so
that where U is small the block's V and M stay in L2 instead of making a round trip
through memory (PP-OCR det's 64 -> 16 head at 120x160: V alone was 11 MB). U (a^2 x M_out x
C, packed per position) is transformed once per weight array and shared read-only
by every Net.

Order of operations, per output: the GEMM's sequential multiply-add chain over
channels (K in chunks, exactly as a pointwise conv), then A^T M A in float32
(the transform's rows written out), then + B, then + Z, then the activation:
a different rounding from direct convolution (different sums), within the bound
of compiled/winograd.py (F(2x2,3x3): that of direct convolution; F(4x4,3x3):
measured below 2e-6 x max|Y| on random data).

Widths: a template over LANES (compiled/widths.py): NCHW8c imported as itself, NCHW16c as
lanes16/nchwc_winograd.py (the transforms on <16 x float>, the GEMMs lanes16/nchwc_gemm.py's); read
every 8 above as BLOCK = LANES. The same operations per channel, so the same bits at either width.
"""

from __future__ import annotations

import numpy as np
from numba import types

from llvmlite import ir
from numba.extending import intrinsic

from .epilogue import activate_range
from .gemm import _I64, _fmuladd, arg_pointers, vector_type
from .jit import njit
from .widths import lanes_here, sibling
from .winograd import MATRICES

LANES = lanes_here(globals())  # 8 imported as itself; 16 as lanes16/nchwc_winograd.py (compiled/widths.py)
_pointwise = sibling(globals(), "nchwc_gemm")  # the pointwise GEMM at this width
BLOCK, KC, _gemm = _pointwise.BLOCK, _pointwise.KC, _pointwise._gemm
_V8 = vector_type(LANES)  # <LANES x float>

_R1 = types.Array(types.float32, 1, "C", readonly=True)
_R2 = types.Array(types.float32, 2, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")
_O1 = types.Array(types.int64, 1, "C", readonly=True)
_I, _S = types.int64, types.float32


_V8P = _V8.as_pointer()


def _combine(builder, row, vecs):
    """sum_k row[k] * vecs[k] over the nonzero coefficients, in k order: +-1 as adds and
    subtractions, others as multiply-adds by the constant (exact: small integers)."""
    fma, acc = _fmuladd(builder, LANES), None
    for cf, v in zip(row, vecs):
        cf = float(cf)
        if cf == 0.0:
            continue
        if acc is None:
            acc = v if cf == 1.0 else builder.fmul(ir.Constant(_V8, [cf] * LANES), v)
        elif cf == 1.0:
            acc = builder.fadd(acc, v)
        elif cf == -1.0:
            acc = builder.fsub(acc, v)
        else:
            acc = builder.call(fma, [ir.Constant(_V8, [cf] * LANES), v, acc])
    return acc


def _sandwich(builder, mat, d):
    """mat d mat^T for an a x a grid d of <8 x float> (lists of rows), mat (r x a): r x r."""
    r, a = mat.shape
    cols = [[_combine(builder, mat[i], [d[k][j] for k in range(a)]) for j in range(a)] for i in range(r)]
    return [[_combine(builder, mat[j], cols[i]) for j in range(r)] for i in range(r)]


def _vec(builder, base, off):
    return builder.bitcast(builder.gep(base, [off]), _V8P)


def _make_input_tile(m: int):
    """input_tile(src, s_off, s_row, dst, d_off, d_pitch): the (m+2)^2 vectors of 8 channels at
    src[s_off + i * s_row + 8 j] -> V = B^T d B, position xi = i * a + j stored at dst[d_off + xi * d_pitch]."""
    bt = MATRICES[m][1]
    a = m + 2

    @intrinsic
    def input_tile(typingctx, src, s_off, s_row, dst, d_off, d_pitch):
        sig = types.void(src, s_off, s_row, dst, d_off, d_pitch)

        def codegen(context, builder, signature, args):
            sp, dp = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
            s_row_v, d_pitch_v = args[2], args[5]
            c = lambda v: ir.Constant(_I64, v)  # noqa: E731
            d = [[builder.load(_vec(builder, sp, builder.add(builder.mul(s_row_v, c(i)), c(BLOCK * j))), align=4)
                  for j in range(a)] for i in range(a)]
            v = _sandwich(builder, bt, d)
            for i in range(a):
                for j in range(a):
                    builder.store(v[i][j], _vec(builder, dp, builder.mul(d_pitch_v, c(i * a + j))), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return input_tile


def _make_output_tile(m: int, with_z: bool):
    """output_tile(src, s_off, s_pitch, b, b_off, dst, d_off, d_row, rows, cols, z): the (m+2)^2 GEMM
    results at src[s_off + xi * s_pitch] -> Y = A^T M A + b[b_off:b_off + 8] (+ Z), output (i, j) stored at
    dst[d_off + i * d_row + 8 j] for i < rows, j < cols (Z read at the same offsets of z)."""
    at = MATRICES[m][2]
    a = m + 2

    @intrinsic
    def output_tile(typingctx, src, s_off, s_pitch, b, b_off, dst, d_off, d_row, rows, cols, z):
        sig = types.void(src, s_off, s_pitch, b, b_off, dst, d_off, d_row, rows, cols, z)

        def codegen(context, builder, signature, args):
            sp, bp, dp = arg_pointers(context, builder, signature, args, (0, 1), (3, 4), (5, 6))
            zp = arg_pointers(context, builder, signature, args, (10, 6))[0] if with_z else None
            s_pitch_v, d_row_v, rows_v, cols_v = args[2], args[7], args[8], args[9]
            c = lambda v: ir.Constant(_I64, v)  # noqa: E731
            mv = [[builder.load(_vec(builder, sp, builder.mul(s_pitch_v, c(i * a + j))), align=4) for j in range(a)]
                  for i in range(a)]
            y = _sandwich(builder, at, mv)
            bias = builder.load(builder.bitcast(bp, _V8P), align=4)
            for i in range(m):
                for j in range(m):
                    inside = builder.and_(builder.icmp_signed("<", c(i), rows_v),
                                          builder.icmp_signed("<", c(j), cols_v))
                    with builder.if_then(inside):
                        off = builder.add(builder.mul(d_row_v, c(i)), c(BLOCK * j))
                        val = builder.fadd(y[i][j], bias)
                        if with_z:
                            val = builder.fadd(val, builder.load(_vec(builder, zp, off), align=4))
                        builder.store(val, _vec(builder, dp, off), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return output_tile


_in2, _in4 = _make_input_tile(2), _make_input_tile(4)
_out2, _out4 = _make_output_tile(2, False), _make_output_tile(4, False)
_out2z, _out4z = _make_output_tile(2, True), _make_output_tile(4, True)


@njit(types.void(_R1, _I, _I, _I, _I, _I, _I, _I, _R2, _O1, _F1, _F1, _F1, _I, _I, _I, _I, _R1, _R1, _I, _S, _S, _R1,
                 types.boolean, _I, _I),
      nogil=True, cache=True, error_model="numpy")
def winograd_nchwc(pf, images, c_n, hp, wp, tiles_h, tiles_w, t_pitch, up, offs, v, mb, yf, y0, m_n, oh, ow, b,
                   zero_b, act, a0, a1, zf, has_z, m, rows_per_block):
    """Y = act(conv3x3(X) + b (+ Z)) for `images` images, stride 1, dilation 1, NCHW8c.

    Args:
        pf: X zero-padded, `images` images of (C/8, hp, wp, 8) (c_n = C): pads_begin before X, and
            hp >= tiles_h * m + 2, wp >= tiles_w * m + 2 (every tile's patch inside).
        tiles_h, tiles_w: ceil(OH / m), ceil(OW / m).
        t_pitch: tiles per channel block in V and M (at least rows_per_block x tiles_w).
        up: (a^2, M * C) U[xi] = G g G^T at position xi, each packed by nchwc_gemm.pack_weights.
        offs: nchwc_gemm.channel_offsets(C, t_pitch).
        v, mb: scratch of a^2 x C x t_pitch and a^2 x M x t_pitch floats.
        yf, y0: Y, images from y0, each (M/8, OH, OW, 8) (m_n = M, oh = OH, ow = OW).
        b: (M,) bias; zero_b: (M,) zeros (the GEMM's own bias).
        act, a0, a1: activation (epilogue.py codes, codes.RANGE_CODES' GELU included: activate_range over each
            stored block), after the bias and Z.
        zf, has_z: the sum input Z, laid out as Y, added after the bias when has_z.
        m: output tile size, 2 or 4 (a = m + 2).
        rows_per_block: rows of tiles (of all the images' images x tiles_h, in order) transformed,
            multiplied and transformed back together: V and M of a block stay in cache (the caller
            sizes it); each output's sums do not depend on it.
    """
    a = m + 2
    cb_n, mk_n = c_n // BLOCK, m_n // BLOCK
    vstep = c_n * t_pitch  # floats from one position's V to the next
    mstep = m_n * t_pitch
    row = wp * BLOCK
    plane = oh * ow * BLOCK
    rows_n = images * tiles_h
    for r0 in range(0, rows_n, rows_per_block):
        r1 = min(rows_n, r0 + rows_per_block)
        # input transform: every channel block of the block's tiles, read in place from the padded X
        for r in range(r0, r1):
            n, ty = r // tiles_h, r % tiles_h
            for cb in range(cb_n):
                xb = (n * cb_n + cb) * hp * row + ty * m * row
                for tx in range(tiles_w):
                    s_off = xb + tx * m * BLOCK
                    d_off = (cb * t_pitch + (r - r0) * tiles_w + tx) * BLOCK
                    if m == 4:
                        _in4(pf, s_off, row, v, d_off, vstep)
                    else:
                        _in2(pf, s_off, row, v, d_off, vstep)
        # one pointwise GEMM per position: M[xi] = U[xi] @ V[xi], the tiles as pixels
        t_n = (r1 - r0) * tiles_w
        for xi in range(a * a):
            _gemm(up[xi], v, xi * vstep, offs, BLOCK, mb, xi * mstep, BLOCK * t_pitch, m_n, t_n, zero_b, 0, a0, a1,
                  zero_b, False, KC)
        # output transform, + B (+ Z), cropped at the bottom and right edges, then the activation
        for r in range(r0, r1):
            n, ty = r // tiles_h, r % tiles_h
            rows = min(m, oh - ty * m)
            for mk in range(mk_n):
                yb = y0 + (n * mk_n + mk) * plane + ty * m * ow * BLOCK
                for tx in range(tiles_w):
                    cols = min(m, ow - tx * m)
                    s_off = (mk * t_pitch + (r - r0) * tiles_w + tx) * BLOCK
                    d_off = yb + tx * m * BLOCK
                    if m == 4:
                        if has_z:
                            _out4z(mb, s_off, mstep, b, mk * BLOCK, yf, d_off, ow * BLOCK, rows, cols, zf)
                        else:
                            _out4(mb, s_off, mstep, b, mk * BLOCK, yf, d_off, ow * BLOCK, rows, cols, zf)
                    elif has_z:
                        _out2z(mb, s_off, mstep, b, mk * BLOCK, yf, d_off, ow * BLOCK, rows, cols, zf)
                    else:
                        _out2(mb, s_off, mstep, b, mk * BLOCK, yf, d_off, ow * BLOCK, rows, cols, zf)
                if act != 0:
                    activate_range(yf, np.uint64(yb), np.uint64(rows * ow * BLOCK), act, a0, a1)
