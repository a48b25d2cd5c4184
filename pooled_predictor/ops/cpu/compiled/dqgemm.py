"""DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add bias) in one call, in onnxruntime's
u8 x s8 arithmetic on hosts without VNNI: the fast path of ops/cpu/qmatmul.py.

    a_scale, a_zp = DynamicQuantizeLinear's over A (M, K) float32       (ONNX Operators.md#DynamicQuantizeLinear)
    A_q[m, k]     = saturate(rint(A[m, k] / a_scale) + a_zp)             (uint8)
    acc[m, n]     = sum_j saturate_int16(A_q[m, 2j] W[2j, n] + A_q[m, 2j+1] W[2j+1, n]) - a_zp * colsum[n]
    Y[m, n]       = float32(acc[m, n]) * float32(a_scale * b_scale[n])  (+ bias[n], a float32 add)

W (K, N) int8 with zero point 0, colsum[n] = sum_k W[k, n]. The pairs are taken along k in K's
order and each saturated to int16 before the exact int32 sum: MLAS's vpmaddubsw + vpmaddwd kernel
(MlasGemmU8S8KernelAvx2), the bits onnxruntime's DynamicQuantizeMatMul / MatMulInteger give on such
a host (ops/int8_arithmetic.py). On a VNNI host the same kernel sums exactly with vpdpbusd (compiled/dots.py:
this source run with DOT = "vpdpbusd", or "emulated" for tests on any host; WIDE on a 16-lane AVX512-VNNI
target: a row's 16 columns in one <16 x i32>, vpdpbusd on zmm), onnxruntime's arithmetic there. The zero
point's share comes from the precomputed column sums, as
MLAS's does. dynamic_qmatmul_exact is the same kernel with exact int32 sums (the spec's arithmetic,
for 8-bit W of any zero points: W - b_zero_point packed as int16 pairs, A's pairs widened to int16,
vpmaddwd; vpdpwssd where the host has VNNI); qmatmul_sat takes an A already quantized
(MatMulIntegerToFloat).

One call does everything but A's range (numpy's min and max, vectorized, read as
ops/cpu/quantize.dynamic_quantize_linear reads them: a NaN makes the range [0, 0]): the scale and
zero point, then A quantized row-major into scratch, 8 floats a step as vectors (its rows padded
with zeros to a multiple of 4 bytes; A_q is M * K4 bytes, 96 KiB for BERT-base's 128 tokens: it
stays in L2), then the GEMM in MLAS's
orientation: rows of Y are tokens, its columns are W's, and Y is written in place, row-major
(no transposed scratch, no transposed copy).

The GEMM walks W's packed panels of 16 columns (pack_panels: K4 / 4 quads x 16 columns x 4 bytes,
12 KiB for K = 768, read from L1 by every row tile) and for each, the row tiles of ROWS tokens. The
micro-kernel keeps ROWS x 16 outputs in 2 ROWS <8 x i32> accumulators; per quad of k it loads the
panel's two vectors (8 columns x 4 k each), and for each row broadcasts the row's 4 bytes of that
quad and multiplies (_sat_pairs: vpmaddubsw; then vpmaddwd by 16 ones, loaded). ROWS = 5: 10
accumulators + 2 W vectors + 1 broadcast + the ones + 1 product fit AVX2's 16 registers. Six rows
(compiled/qgemm.py's saturating tile) need 17 and LLVM spills an accumulator into the stack in
the loop; that spill slot is 16-byte aligned, and where a thread's call depth puts it across a
4 KiB page boundary (one stack alignment in 256) the loop's store -> load of it runs 3x slower:
the pool worker's BERT int8 forward took 75 ms instead of 31 (measured on Zen 3, 2026-11-27).
On a WIDE target (vpdpbusd on zmm) the columns go PANELS panels (32) at a time while they are whole,
in tiles of WIDE_ROWS (8) tokens: 16 <16 x i32> accumulators, and per quad of k 2 W loads and 8
broadcasts feed 16 vpdpbusd, where the one-panel tile of 5 rows spends 6 loads on 5. At BERT-base's
shapes (M 128; K x N 768 x 768, 768 x 3072, 3072 x 768) on one Zen 5 core that took the kernel from
585-619 GOPS to 887-992 (onnxruntime's DynamicQuantizeMatMul: 824-898; /work/tmp/dqbench.py's
interleaved best of 5, 2026-11-28); 4 panels x 4-6 rows and 3 x 8 measured within 3% of it, 4 x 8
(37 registers) spills and halves it. The last columns take the one-panel tile.
The epilogue adds the zero point's column correction, converts to float32, multiplies by the
column's scale (a_scale * b_scale[n] in float32, as the Mul of the two scales), adds the bias (no
fused multiply-add: two roundings, as the Mul and the Add), and stores 16 floats a row; a last
block of fewer than 16 columns goes through a workspace.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import arg_pointers, close_loop, dispatch_rows, vector_phis
from .jit import njit
from . import dots
from .qgemm import _I8, _I16, _I32, _I64, _V8F, _V8I, _V16I, _c, _dot4, _halves, _ones32, _pmaddwd, _splat

DOT = dots.dot_here(globals())
"""The saturating kernels' u8 x s8 dot product (compiled/dots.py): vpmaddubsw here; vpdpbusd/dqgemm.py and
emulated/dqgemm.py are this source with the others."""
WIDE = dots.wide_of(globals())
"""Whether the micro-kernel keeps a row's 16 columns in one <16 x i32> (vpdpbusd.512: dots.wide_here)."""

ROWS = 5  # tokens per micro-tile: 10 accumulators, no spill (module docstring)
COLS = 16  # columns of W per panel and micro-tile


def _epilogue(builder, final, rows: int, vectors: int, lanes: int, ptrs, bias_n, n_off, zp, a_scale, yptr, ldy):
    """A micro-tile's stores: for r < rows, v < vectors, the `lanes` columns lanes * v .. of row r (accumulator
    final[r * vectors + v], <lanes x i32>): float32(acc - zp cs) * float32(a_scale * bs) (+ bias where bias holds
    at least n_off + lanes * vectors elements: selected, not a zero added, so that -0.0 stays -0.0 as the Add of
    no bias leaves it). ptrs: cs, bs, bias at the tile's first column."""
    csptr, bsptr, bptr = ptrs
    vi, vf = ir.VectorType(_I32, lanes), ir.VectorType(ir.FloatType(), lanes)
    nzp = _splat(builder, builder.neg(builder.trunc(zp, _I32)), vi)
    scale = _splat(builder, a_scale, vf)
    has_bias = builder.icmp_signed(">=", bias_n, builder.add(n_off, _c(lanes * vectors)))
    corr, mult = [], []
    for v in range(vectors):
        cs = builder.load(builder.bitcast(builder.gep(csptr, [_c(lanes * v)]), vi.as_pointer()), align=4)
        corr.append(builder.mul(cs, nzp))
        bs = builder.load(builder.bitcast(builder.gep(bsptr, [_c(lanes * v)]), vf.as_pointer()), align=4)
        mult.append(builder.fmul(scale, bs))
    with builder.if_else(has_bias) as (then, otherwise):
        with then:
            b_then = [builder.load(builder.bitcast(builder.gep(bptr, [_c(lanes * v)]), vf.as_pointer()), align=4)
                      for v in range(vectors)]
            then_bb = builder.block
        with otherwise:
            else_bb = builder.block
    bvec = []
    for v in range(vectors):
        ph = builder.phi(vf)
        ph.add_incoming(b_then[v], then_bb)
        ph.add_incoming(ir.Constant(vf, [0.0] * lanes), else_bb)
        bvec.append(ph)
    for r in range(rows):
        row = builder.gep(yptr, [builder.mul(ldy, _c(r))])
        for v in range(vectors):
            f = builder.fmul(builder.sitofp(builder.add(final[r * vectors + v], corr[v]), vf), mult[v])
            f = builder.select(has_bias, builder.fadd(f, bvec[v]), f)
            builder.store(f, builder.bitcast(builder.gep(row, [_c(lanes * v)]), vf.as_pointer()), align=4)


def _make_micro(rows: int, exact: bool = False):
    """micro(wp, w_off, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale, ones):

    for r < rows, c < 16: acc = sum_{j < kq_n} sum_{h < 2} saturate_int16(sum_{t < 2} a[a_off + r lda +
    4j + 2h + t] * W(4j + 2h + t, c)), W(k, c) byte 4c + (k % 4) of the 64 at wp[w_off + 64 (k // 4)];
    y[y_off + r ldy + c] = float32(acc - zp cs[n_off + c]) * float32(a_scale * bs[n_off + c]) + bias[n_off + c]
    (the bias added only when bias has at least n_off + 16 elements). The caller keeps accesses in bounds.

    With `exact`: exact int32 sums (the spec's arithmetic): kq_n counts pairs of k, W(k, c) is the int16
    half k % 2 of the 4 bytes 4c .. 4c + 3 of the 64 at wp[w_off + 64 (k // 2)] (pack_panels_exact), each
    row's 2 bytes of a pair are widened to int16 and multiplied as vpmaddwd does (_pmaddwd; vpdpwssd on a
    VNNI host); ones is not read.
    """

    @intrinsic
    def micro(typingctx, wp, w_off, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale, ones):
        sig = types.void(wp, w_off, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale, ones)

        def codegen(context, builder, signature, args):
            lda_v, kq_v, ldy_v, n_off, zp_v, sc_v = args[4], args[5], args[8], args[12], args[13], args[14]
            wptr, aptr, yptr, csptr, bsptr, bptr = arg_pointers(context, builder, signature, args, (0, 1), (2, 3),
                                                                (6, 7), (9, 12), (10, 12), (11, 12))
            bias_ary = context.make_array(signature.args[11])(context, builder, args[11])
            bias_n = builder.extract_value(bias_ary.shape, 0)
            v32i8 = ir.VectorType(_I8, 32)
            v16i16 = ir.VectorType(_I16, 16)
            ones32 = _ones32(context, builder, signature.args[15], args[15])
            rowp = [builder.bitcast(builder.gep(aptr, [builder.mul(lda_v, _c(r))]),
                                    (_I16 if exact else _I32).as_pointer())
                    for r in range(rows)]
            fn = builder.function
            pre_bb = builder.block
            loop_bb = fn.append_basic_block("kq_loop")
            done_bb = fn.append_basic_block("kq_done")
            zero = ir.Constant(_V8I, [0] * 8)
            builder.cbranch(builder.icmp_signed(">", kq_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            j = builder.phi(_I64)
            j.add_incoming(_c(0), pre_bb)
            wide = WIDE and not exact  # a row's 16 columns in one <16 x i32> (vpdpbusd.512)
            if wide:
                zero = ir.Constant(_V16I, [0] * 16)
            accs = vector_phis(builder, rows if wide else 2 * rows, (zero, pre_bb))
            base = builder.gep(wptr, [builder.mul(j, _c(64))])
            if wide:  # the panel's 16 columns x 4 k in one vector; each row's quad broadcast to 16 lanes
                v64i8 = ir.VectorType(_I8, 64)
                w64 = builder.load(builder.bitcast(base, v64i8.as_pointer()), align=1)
                new = [_dot4(builder, accs[r], builder.bitcast(_splat(builder, builder.load(builder.gep(
                    rowp[r], [j]), align=1), _V16I), v64i8), w64, None, DOT) for r in range(rows)]
                final = _halves(builder, close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (zero, pre_bb)))
            else:
                wv = [builder.load(builder.bitcast(builder.gep(base, [_c(32 * v)]), v32i8.as_pointer()), align=1)
                      for v in range(2)]
                new = []
                for r in range(rows):
                    quad = builder.load(builder.gep(rowp[r], [j]), align=1)
                    if exact:  # the pair's 2 bytes as 2 int16 in every 32-bit lane
                        pair = builder.zext(builder.bitcast(quad, ir.VectorType(_I8, 2)), ir.VectorType(_I16, 2))
                        xw = builder.bitcast(_splat(builder, builder.bitcast(pair, _I32), _V8I), v16i16)
                        for v in range(2):
                            new.append(builder.add(accs[2 * r + v],
                                                   _pmaddwd(builder, xw, builder.bitcast(wv[v], v16i16))))
                        continue
                    xb = builder.bitcast(_splat(builder, quad, _V8I), v32i8)
                    for v in range(2):
                        new.append(_dot4(builder, accs[2 * r + v], xb, wv[v], ones32, DOT))
                final = close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (zero, pre_bb))
            # the epilogue: - zp * colsum (int32), to float32, * float32(a_scale * b_scale), + bias
            _epilogue(builder, final, rows, 2, 8, (csptr, bsptr, bptr), bias_n, n_off, zp_v, sc_v, yptr, ldy_v)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_ARGS = "wp, w_off, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale, ones"
_tile = dispatch_rows(_make_micro, ROWS, _ARGS)
_tile_exact = dispatch_rows(lambda r: _make_micro(r, True), ROWS, _ARGS)


PANELS = 2
"""Panels of 16 columns per micro-tile of the wide (vpdpbusd.512) kernel: 32 columns (module docstring)."""
WIDE_ROWS = 8
"""Tokens per wide micro-tile: 8 x 2 <16 x i32> accumulators + 2 W vectors + a broadcast = 19 of the 32 zmm
registers; per quad of k 10 loads feed 16 vpdpbusd (the 16-column tile: 6 loads, 5)."""


def _make_micro_wide(rows: int, panels: int = PANELS):
    """micro(wp, w_off, pstride, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale): the
    WIDE micro-kernel over `panels` adjacent panels of 16 columns (panel p's quads at wp[w_off + p pstride]),
    rows x 16 panels outputs in <16 x i32> accumulators, each quad of k one load per panel and one broadcast
    per row; the epilogue as _make_micro's (- zp cs, float32, * float32(a_scale * bs), + bias where bias
    holds at least n_off + 16 panels elements), 16 floats a store. The caller keeps accesses in bounds."""

    @intrinsic
    def micro(typingctx, wp, w_off, pstride, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale):
        sig = types.void(wp, w_off, pstride, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale)

        def codegen(context, builder, signature, args):
            ps_v, lda_v, kq_v, ldy_v, n_off, zp_v, sc_v = (args[i] for i in (2, 5, 6, 9, 13, 14, 15))
            wptr, aptr, yptr, csptr, bsptr, bptr = arg_pointers(context, builder, signature, args, (0, 1), (3, 4),
                                                                (7, 8), (10, 13), (11, 13), (12, 13))
            bias_ary = context.make_array(signature.args[12])(context, builder, args[12])
            bias_n = builder.extract_value(bias_ary.shape, 0)
            v64i8 = ir.VectorType(_I8, 64)
            rowp = [builder.bitcast(builder.gep(aptr, [builder.mul(lda_v, _c(r))]), _I32.as_pointer())
                    for r in range(rows)]
            panp = [builder.gep(wptr, [builder.mul(ps_v, _c(p))]) for p in range(panels)]
            zero = ir.Constant(_V16I, [0] * 16)
            pre_bb = builder.block
            loop_bb = builder.function.append_basic_block("kq_loop")
            done_bb = builder.function.append_basic_block("kq_done")
            builder.cbranch(builder.icmp_signed(">", kq_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            j = builder.phi(_I64)
            j.add_incoming(_c(0), pre_bb)
            accs = vector_phis(builder, rows * panels, (zero, pre_bb))
            off = builder.mul(j, _c(64))
            wv = [builder.load(builder.bitcast(builder.gep(panp[p], [off]), v64i8.as_pointer()), align=1)
                  for p in range(panels)]
            new = []
            for r in range(rows):
                xb = builder.bitcast(_splat(builder, builder.load(builder.gep(rowp[r], [j]), align=1), _V16I), v64i8)
                new += [_dot4(builder, accs[r * panels + p], xb, wv[p], None, DOT) for p in range(panels)]
            final = close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (zero, pre_bb))
            _epilogue(builder, final, rows, panels, 16, (csptr, bsptr, bptr), bias_n, n_off, zp_v, sc_v, yptr, ldy_v)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_ARGS_WIDE = "wp, w_off, pstride, a, a_off, lda, kq_n, y, y_off, ldy, cs, bs, bias, n_off, zp, a_scale"
_tile_wide = dispatch_rows(_make_micro_wide, WIDE_ROWS, _ARGS_WIDE) if WIDE else None


@intrinsic
def _quantize8(typingctx, a, a_off, xq, x_off, scale, qlo, qhi, z):
    """xq[x_off + i] = int(min(max(rint(a[a_off + i] / scale), qlo), qhi)) + z for i < 8, as vectors (numba's
    scalar loop does not vectorize: LLVM keeps its float min / max in order). a float32, xq uint8."""
    sig = types.void(a, a_off, xq, x_off, scale, qlo, qhi, z)

    def codegen(context, builder, signature, args):
        aptr, xptr = arg_pointers(context, builder, signature, args, (0, 1), (2, 3))
        v = builder.load(builder.bitcast(aptr, _V8F.as_pointer()), align=4)
        mod = builder.module
        fns = {}
        for name in ("rint", "maxnum", "minnum"):
            full = f"llvm.{name}.v8f32"
            fns[name] = mod.globals.get(full) or ir.Function(
                mod, ir.FunctionType(_V8F, [_V8F] * (1 if name == "rint" else 2)), full)
        q = builder.call(fns["rint"], [builder.fdiv(v, _splat(builder, args[4], _V8F))])
        q = builder.call(fns["minnum"], [builder.call(fns["maxnum"], [q, _splat(builder, args[5], _V8F)]),
                                         _splat(builder, args[6], _V8F)])
        zv = _splat(builder, builder.trunc(args[7], _I32), _V8I)
        b = builder.trunc(builder.add(builder.fptosi(q, _V8I), zv), ir.VectorType(_I8, 8))
        builder.store(b, builder.bitcast(xptr, ir.VectorType(_I8, 8).as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _quantize_rows(a, lo, hi, xq, k4):
    """DynamicQuantizeLinear's scale and zero point for a (M, K) float32 of minimum lo and maximum hi
    (numpy's: NaN where a holds one), and xq[m * k4 + k] = saturate(rint(a[m, k] / scale) + zp) (0 for
    K <= k < k4). Returns (scale, zp) (float32, int64): ops/cpu/quantize.dynamic_quantize_linear's."""
    m_n, k_n = a.shape
    # the reference's float32(min(0.0, lo)), float32(max(0.0, hi)): Python's min / max give 0.0 for a NaN
    lo = np.float32(0.0) if not lo < 0.0 else np.float32(lo)
    hi = np.float32(0.0) if not hi > 0.0 else np.float32(hi)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
    zpf = min(max(np.rint(np.float32(np.float32(0.0) - lo / scale)), np.float32(0.0)), np.float32(255.0))
    qlo = np.float32(0.0) - zpf
    qhi = np.float32(255.0) - zpf
    z = np.int64(zpf)
    af = a.reshape(-1)
    k8 = k_n // 8 * 8
    for m in range(m_n):
        row = m * k4
        for k in range(0, k8, 8):
            _quantize8(af, m * k_n + k, xq, row + k, scale, qlo, qhi, z)
        for k in range(k8, k_n):
            f = min(max(np.rint(a[m, k] / scale), qlo), qhi)
            xq[row + k] = np.int32(f) + np.int32(z)
        for k in range(k_n, k4):
            xq[row + k] = 0
    return scale, z


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _gemm_narrow(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones, first):
    """y = (float32(xq @ W - zp colsum) * float32(scale * bs)) (+ bias) for W's columns from `first` (a
    multiple of 16) on, a panel of 16 at a time: xq (M, K4) uint8 row-major, flat."""
    n_n = y.shape[1]
    kq_n = k4 // 4
    yf = y.reshape(-1)
    for n0 in range(first, n_n, 16):
        w_off = n0 * k4  # panel n0 // 16: kq_n quads of 64 bytes
        if n0 + 16 <= n_n:
            for m in range(0, m_n, ROWS):
                _tile(wp, w_off, xq, m * k4, k4, kq_n, yf, m * n_n + n0, n_n, cs, bs, bias, n0, zp,
                      scale, ones, min(ROWS, m_n - m))
        else:
            for m in range(0, m_n, ROWS):
                rows = min(ROWS, m_n - m)
                _tile(wp, w_off, xq, m * k4, k4, kq_n, ws, 0, 16, cs, bs, bias, n0, zp, scale, ones,
                      rows)
                for r in range(rows):
                    for c in range(n_n - n0):
                        yf[(m + r) * n_n + n0 + c] = ws[r * 16 + c]


if WIDE:
    @njit(nogil=True, cache=True, error_model="numpy", inline="always")
    def _gemm(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones):
        """_gemm_narrow's product, PANELS panels (64 columns) a micro-tile while they are whole, then the
        last columns a panel at a time."""
        n_n = y.shape[1]
        kq_n = k4 // 4
        yf = y.reshape(-1)
        group = 16 * PANELS
        whole = n_n // group * group
        for n0 in range(0, whole, group):
            for m in range(0, m_n, WIDE_ROWS):
                _tile_wide(wp, n0 * k4, 16 * k4, xq, m * k4, k4, kq_n, yf, m * n_n + n0, n_n, cs, bs, bias, n0,
                           zp, scale, min(WIDE_ROWS, m_n - m))
        _gemm_narrow(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones, whole)
else:
    @njit(nogil=True, cache=True, error_model="numpy", inline="always")
    def _gemm(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones):
        """_gemm_narrow from column 0."""
        _gemm_narrow(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones, 0)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _gemm_exact(xq, m_n, k2, zp, scale, wp, cs, bs, bias, y, ws, ones):
    """_gemm with exact sums: xq (M, K2) uint8 row-major, W from pack_panels_exact (pairs of k as int16)."""
    n_n = y.shape[1]
    kp_n = k2 // 2
    yf = y.reshape(-1)
    for n0 in range(0, n_n, 16):
        w_off = n0 * 2 * k2  # panel n0 // 16: kp_n pairs of 64 bytes
        if n0 + 16 <= n_n:
            for m in range(0, m_n, ROWS):
                _tile_exact(wp, w_off, xq, m * k2, k2, kp_n, yf, m * n_n + n0, n_n, cs, bs, bias, n0, zp,
                            scale, ones, min(ROWS, m_n - m))
        else:
            for m in range(0, m_n, ROWS):
                rows = min(ROWS, m_n - m)
                _tile_exact(wp, w_off, xq, m * k2, k2, kp_n, ws, 0, 16, cs, bs, bias, n0, zp, scale, ones, rows)
                for r in range(rows):
                    for c in range(n_n - n0):
                        yf[(m + r) * n_n + n0 + c] = ws[r * 16 + c]


_R1 = {t: types.Array(t, 1, "C", readonly=True) for t in (types.int8, types.int32, types.float32, types.int16)}
_TAIL = (_R1[types.int8], _R1[types.int32], _R1[types.float32], _R1[types.float32], types.Array(types.float32, 2, "C"),
         types.Array(types.uint8, 1, "C"), types.Array(types.float32, 1, "C"), _R1[types.int16])
_SIG = types.void(types.Array(types.float32, 2, "C", readonly=True), types.float32, types.float32, *_TAIL)
_SIG_Q = types.void(types.Array(types.uint8, 2, "C", readonly=True), types.int64, types.float32, *_TAIL)


@njit([_SIG], nogil=True, cache=True, error_model="numpy")
def dynamic_qmatmul_sat(a, lo, hi, wp, cs, bs, bias, y, xq, ws, ones):
    """Y = DynamicQuantizeLinear(A) @ W, times a_scale * b_scale, + bias, float32 (module docstring).

    Args:
        a: (M, K) float32.
        lo, hi: a.min(), a.max() (numpy's: vectorized, NaN where a holds one; float32).
        wp: pack_panels(W), W (K, N) int8 (zero point 0).
        cs: padded(sum_k W[k, n], int32), (N16,), N16 = N rounded up to 16.
        bs: padded(b_scale per column, float32), (N16,).
        bias: padded(bias, float32), (N16,), added after the scale; or an empty array: none.
        y: (M, N) float32, written.
        xq: uint8 scratch of at least M * K4 bytes (K4 = K rounded up to 4).
        ws: float32 workspace of at least ROWS * 16 elements (the last block of fewer than 16 columns).
        ones: compiled/qgemm.ONES.
    """
    m_n, k_n = a.shape
    k4 = (k_n + 3) // 4 * 4
    scale, zp = _quantize_rows(a, lo, hi, xq, k4)
    _gemm(xq, m_n, k4, zp, scale, wp, cs, bs, bias, y, ws, ones)


@njit([_SIG_Q], nogil=True, cache=True, error_model="numpy")
def qmatmul_sat(aq, a_zp, a_scale, wp, cs, bs, bias, y, xq, ws, ones):
    """Y = (A - a_zp) @ W, times a_scale * b_scale, + bias, float32, for an already quantized uint8 A (M, K)
    (com.microsoft MatMulIntegerToFloat): dynamic_qmatmul_sat's GEMM and epilogue, A's rows copied into
    xq padded to K4 (zeros). Args as dynamic_qmatmul_sat's, with aq, a_zp, a_scale for a, lo, hi."""
    m_n, k_n = aq.shape
    k4 = (k_n + 3) // 4 * 4
    for m in range(m_n):
        for k in range(k_n):
            xq[m * k4 + k] = aq[m, k]
        for k in range(k_n, k4):
            xq[m * k4 + k] = 0
    _gemm(xq, m_n, k4, a_zp, a_scale, wp, cs, bs, bias, y, ws, ones)


@njit([_SIG], nogil=True, cache=True, error_model="numpy")
def dynamic_qmatmul_exact(a, lo, hi, wp, cs, bs, bias, y, xq, ws, ones):
    """dynamic_qmatmul_sat with exact int32 sums (the spec's arithmetic; "exact" int8_arithmetic, VNNI hosts):
    wp from pack_panels_exact(W, b_zero_point), cs the column sums of W - b_zero_point, xq of M * K2 bytes
    (K2 = K rounded up to 2); the other arguments as dynamic_qmatmul_sat's (ones is not read)."""
    m_n, k_n = a.shape
    k2 = (k_n + 1) // 2 * 2
    scale, zp = _quantize_rows(a, lo, hi, xq, k2)
    _gemm_exact(xq, m_n, k2, zp, scale, wp, cs, bs, bias, y, ws, ones)


def pack_panels_exact(w: np.ndarray, zero_point=0) -> np.ndarray:
    """8-bit W (K, N) less its zero point (a scalar or one per column) as panels of 16 columns, pairs of k
    as int16 inside: flat int8 bytes, read-only. Panel p starts at byte 32 p K2 (K2 = K rounded up to 2);
    the int16 at byte 32 p K2 + 64 j + 4 c + 2 i holds W[2j + i, 16p + c] - zero_point; zeros past K and N."""
    w = np.asarray(w)
    if w.dtype not in (np.int8, np.uint8) or w.ndim != 2:
        raise TypeError(f"pack_panels_exact takes 2-D 8-bit weights, got {w.dtype} {w.shape}")
    k, n = w.shape
    kp, n16 = (k + 1) // 2, (n + 15) // 16 * 16
    wb = np.zeros((kp * 2, n16), np.int16)
    wb[:k, :n] = w.astype(np.int16) - np.asarray(zero_point, np.int16).reshape(-1)
    # (KP, 2, P, 16) -> (P, KP, 16, 2): panel, pair, column, half
    out = np.ascontiguousarray(wb.reshape(kp, 2, n16 // 16, 16).transpose(2, 0, 3, 1)).reshape(-1).view(np.int8)
    out.flags.writeable = False
    return out


def pack_panels(w: np.ndarray) -> np.ndarray:
    """int8 W (K, N) as panels of 16 columns, quads of k inside: flat int8, read-only.

    Panel p (columns 16p .. 16p + 15) starts at byte 64 p KQ (KQ = ceil(K / 4)); its bytes
    64 p KQ + 64 j + 4 c + i hold W[4j + i, 16p + c]; zeros past K and N.
    """
    w = np.asarray(w)
    if w.dtype != np.int8 or w.ndim != 2:
        raise TypeError(f"pack_panels takes 2-D int8 weights, got {w.dtype} {w.shape}")
    k, n = w.shape
    kq, n16 = (k + 3) // 4, (n + 15) // 16 * 16
    wb = np.zeros((kq * 4, n16), np.int8)
    wb[:k, :n] = w
    # (KQ, 4, P, 16) -> (P, KQ, 16, 4): panel, quad, column, byte
    out = np.ascontiguousarray(wb.reshape(kq, 4, n16 // 16, 16).transpose(2, 0, 3, 1)).reshape(-1)
    out.flags.writeable = False
    return out


def padded(v, dtype) -> np.ndarray:
    """v (N,) as dtype, then zeros up to N rounded up to 16: read-only (dynamic_qmatmul_sat's cs, bs, bias)."""
    v = np.asarray(v, dtype).reshape(-1)
    out = np.zeros((len(v) + 15) // 16 * 16, dtype)
    out[:len(v)] = v
    out.flags.writeable = False
    return out
