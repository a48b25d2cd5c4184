"""MatMul with a constant right operand, the bias fused: a packed-panel GEMM, float32.

    Y[r, n] = sum_k A[r, k] B[k, n] (+ c[n])        A (R, K) fed, B (K, N) and c (N,) weights

B (with c appended as row K) is packed once into panels of PANEL = 16 columns,
each K' x 16 and k-major (pack_right), shared read-only by every thread; A is
read where it lies. Per panel, every tile of MR = 6 rows of A runs a micro-kernel
that keeps the 6 x 16 block of Y in 12 vector registers over k: two vector loads
of the panel's row, one broadcast per row of A, twelve multiply-adds (gemm.py's
register blocking, Goto & van de Geijn 2008; MLAS's SGEMM kernels also read A in
place and B packed in 16-column panels). The micro-kernels are LLVM IR (numba
intrinsics), one per tile height 1..6; the last, partial panel (zero-padded)
goes through a 6 x 16 scratch tile.

matmul_const_blocked / matmul_const16_blocked give the same bits blocked as Goto & van de Geijn block
a GEMM, where A exceeds ONE_PASS_BYTES: K in blocks of KC and rows in blocks whose KC-wide strip of A
(MC_BYTES) stays in L2 across every panel, a panel's KC-row strip in L1 across the block's row tiles,
each output's chain continued from one k-block to the next through Y. In one pass over K every panel
reads all of A again: BERT's (128 x 3072) A is 1.5 MiB, with a 384 KiB panel beside it. On the lent
machine's Emerald Rapids Xeon, blocking took that product from 95 to 151 GFLOP/s (the core's peak:
152) and BERT-base's projections from 291 to 225 ms a forward on one thread (onnxruntime's: 216); the
products whose A fits in L2 (K = 768) ran alike either way. On Zen 5, whose L3 streams A back faster,
one pass was the faster: blocking every product cost BERT-base and ViT-B/16 6% through a 2-worker
pool, blocking only the large-A ones 3-4% (benchmarks/matmul_blocking.py, vs_onnxruntime.py). So
ConstRightProduct blocks where BLOCKED: on Intel CPUs (isa.vendor()), or as
POOLED_PREDICTOR_MATMUL_BLOCKING=1|0 says. Measured on those two hosts only; others follow their vendor.

At 16 lanes (compiled/isa.py's lanes(): AVX-512 hosts), matmul_const16 runs the same loops over
panels of PANEL16 = 32 columns in tiles of MR16 = 8 rows (16 <16 x float> accumulators: one zmm
each; 12 rows spilled, 0.72x the speed); pack_right(B, c, PANEL16) packs for it. matmul_rows8 /
matmul_rows16 take B an activation, read in place (rows N apart, its last partial panel copied
zero-padded): the products of two activations (MatMul, attention's Q K^T and P V).

Numerically: each output is a sequential multiply-add chain over k in float32
(fused: FMA), then + c[n] (rounded once: round(s + c), the same as a GEMM
followed by + c, i.e. ONNX MatMul then Add). Error: BLAS sgemm's,
|error| <= K u sum_k |A B| + O(u^2), u = 2^-24 (Higham 2002, sec. 3.5).
"""

from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import isa
from .gemm import _fmuladd, dispatch_rows, prefetch, vector_phis, vector_type
from .jit import njit

_F4 = ir.FloatType()
_I64 = ir.IntType(64)
_V8 = ir.VectorType(_F4, 8)
_F1 = types.Array(types.float32, 1, "C")
_R1 = types.Array(types.float32, 1, "C", readonly=True)
_I = types.int64

MR = 6  # rows of Y per micro-tile: 12 accumulators + 2 X vectors + 1 broadcast, 15 of 16 ymm (as gemm.py)
PANEL = 16  # columns of B per packed panel: one micro-tile's width (two <8 x float> vectors)
KC = 256  # k-block: a panel's KC x PANEL strip of X (16 KB) stays in L1 (32 KB on AVX2 hosts) across the row tiles
KC16 = 384  # ... at 16 lanes: KC16 x PANEL16, 48 KB (benchmarks/matmul_blocking.py: 192-384 within 1% on the Xeon)
NB_BYTES = 96 << 10  # one pass: a block of panels (K' x NB floats) this size stays in L2 across the row tiles
ONE_PASS_BYTES = 1 << 20  # the blocked kernels run an A (rows x K floats) at most this size in one pass
MC_BYTES = 192 << 10  # row block: its rows' KC-wide strip of A, at most this many bytes, stays in L2 across the panels
BLOCKED = os.environ.get("POOLED_PREDICTOR_MATMUL_BLOCKING", "1" if isa.vendor() == "GenuineIntel" else "0") != "0"
"""Whether ConstRightProduct runs the blocked kernels (module docstring): on Intel CPUs unless
POOLED_PREDICTOR_MATMUL_BLOCKING=0; elsewhere where it is 1. Read at import."""
MR16 = 8  # matmul_const16's rows per micro-tile: 16 accumulators (12 spilled on AVX-512: 0.72x the speed)
PANEL16 = 32  # matmul_const16's columns per packed panel: two <16 x float> vectors


def pack_right(b: np.ndarray, c: np.ndarray | None, panel: int = PANEL) -> np.ndarray:
    """X for matmul_const: [B; c] (K' = K + (c given) rows, N columns) packed in panels of `panel`
    columns (PANEL; PANEL16 for matmul_const16), each panel K' x panel k-major (the last one
    zero-padded), so that a micro-tile's strip of X is contiguous (B as it lies has rows N floats
    apart: one page per k row). Flat float32, read-only; panel j starts at j * K' * panel."""
    x = np.asarray(b, np.float32)
    if c is not None:
        x = np.concatenate([x, np.asarray(c, np.float32).reshape(1, -1)], axis=0)
    kk, n = x.shape
    panels = -(-n // panel)
    padded = np.zeros((kk, panels * panel), np.float32)
    padded[:, :n] = x
    out = np.ascontiguousarray(padded.reshape(kk, panels, panel).transpose(1, 0, 2)).reshape(-1)
    out.flags.writeable = False
    return out


def _c(v: int):
    return ir.Constant(_I64, v)


def vload(builder, ptr, v: int = 0, lanes: int = 8):
    """The <lanes x float> at ptr + lanes * v (unaligned)."""
    vt = vector_type(lanes)
    return builder.load(builder.bitcast(builder.gep(ptr, [_c(lanes * v)]), vt.as_pointer()), align=4)


def vstore(builder, value, ptr, v: int = 0, lanes: int = 8):
    """Store <lanes x float> at ptr + lanes * v (unaligned)."""
    vt = vector_type(lanes)
    builder.store(value, builder.bitcast(builder.gep(ptr, [_c(lanes * v)]), vt.as_pointer()), align=4)


def splat(builder, s, lanes: int = 8):
    """<lanes x float> with every lane s."""
    vt = vector_type(lanes)
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def k_loop(builder, rows: int, arows, xptr, ldx, k_n, prefetch_at=None, lanes: int = 8, init=None) -> list:
    """Emit acc[r][v] = sum_{k < k_n} arows[r][k] * xptr[k * ldx + lanes v .. + lanes] (v < 2): a
    sequential multiply-add chain over k (llvm.fmuladd: FMA) for r < rows, k unrolled by two, on
    <lanes x float> vectors. Returns the 2 * rows accumulators (row-major), the builder positioned
    after the loop.

    The register blocking of gemm.py's micro-kernels (2 * rows accumulators, X's row in two
    vectors, one broadcast per row; Goto & van de Geijn 2008). prefetch_at: a pointer whose
    line k * ldx floats on is prefetched at step k (the next block of X), or None. init: the 2 * rows
    accumulators' starting values (the chains' earlier terms: a k-block after the first), None: zeros.
    """
    vt = vector_type(lanes)
    fma = _fmuladd(builder, lanes)
    fn = builder.function

    def step(accs, k):
        row = builder.gep(xptr, [builder.mul(k, ldx)])
        if prefetch_at is not None:
            prefetch(builder, builder.gep(prefetch_at, [builder.mul(k, ldx)]))
        xv = [vload(builder, row, v, lanes) for v in range(2)]
        out = []
        for r in range(rows):
            w = splat(builder, builder.load(builder.gep(arows[r], [k])), lanes)
            out += [builder.call(fma, [w, xv[v], accs[2 * r + v]]) for v in range(2)]
        return out

    zero = ir.Constant(vt, [0.0] * lanes)
    if init is not None:
        zero = list(init)
    entry = builder.block
    pairs_bb, tail_bb = fn.append_basic_block("pairs"), fn.append_basic_block("tail")
    last_bb, done_bb = fn.append_basic_block("last"), fn.append_basic_block("done")
    builder.cbranch(builder.icmp_signed(">=", k_n, _c(2)), pairs_bb, tail_bb)
    builder.position_at_end(pairs_bb)  # k, k + 1 per trip while k + 1 < k_n
    k = builder.phi(_I64)
    accs = vector_phis(builder, 2 * rows, (zero, entry))
    k.add_incoming(_c(0), entry)
    new = step(step(accs, k), builder.add(k, _c(1)))
    k2 = builder.add(k, _c(2))
    k.add_incoming(k2, pairs_bb)
    for a, n in zip(accs, new):
        a.add_incoming(n, pairs_bb)
    builder.cbranch(builder.icmp_signed("<", builder.add(k2, _c(1)), k_n), pairs_bb, tail_bb)
    builder.position_at_end(tail_bb)  # an odd last k
    kt = builder.phi(_I64)
    kt.add_incoming(_c(0), entry)
    kt.add_incoming(k2, pairs_bb)
    at = vector_phis(builder, len(new), (zero, entry), (new, pairs_bb))
    builder.cbranch(builder.icmp_signed("<", kt, k_n), last_bb, done_bb)
    builder.position_at_end(last_bb)
    al = step(at, kt)
    builder.branch(done_bb)
    builder.position_at_end(done_bb)
    return vector_phis(builder, len(at), (at, tail_bb), (al, last_bb))  # phis lead the block


def add_if(builder, values, on, addends) -> list:
    """Emit values[i] + addends()[i] when the i1 `on` holds (addends() emits its loads in that
    branch only), else values; returns the merged <8 x float> values."""
    fn = builder.function
    from_bb, add_bb, merge_bb = builder.block, fn.append_basic_block("add"), fn.append_basic_block("merge")
    builder.cbranch(on, add_bb, merge_bb)
    builder.position_at_end(add_bb)
    added = [builder.fadd(v, a) for v, a in zip(values, addends())]
    add_end = builder.block
    builder.branch(merge_bb)
    builder.position_at_end(merge_bb)
    return vector_phis(builder, len(values), (list(values), from_bb), (added, add_end))


def load_if(builder, n: int, on, loads, lanes: int) -> list:
    """n <lanes x float> values: loads() (emitted in a branch taken when the i1 `on` holds) or zeros."""
    fn = builder.function
    from_bb, load_bb, merge_bb = builder.block, fn.append_basic_block("load"), fn.append_basic_block("loaded")
    builder.cbranch(on, load_bb, merge_bb)
    builder.position_at_end(load_bb)
    loaded = loads()
    load_end = builder.block
    builder.branch(merge_bb)
    builder.position_at_end(merge_bb)
    return vector_phis(builder, n, (ir.Constant(vector_type(lanes), [0.0] * lanes), from_bb), (loaded, load_end))


def flag(builder, value):
    """An i1 that is true when the boolean or integer `value` is nonzero."""
    return builder.icmp_signed("!=", value, ir.Constant(value.type, 0))


def array_data(context, builder, signature, args, i):
    """The data pointer of array argument i of an intrinsic."""
    return context.make_array(signature.args[i])(context, builder, args[i]).data


def _make_panel_micro(rows: int, lanes: int = 8, strided: bool = False):
    """The micro-kernel for `rows` x (2 * lanes) outputs over one packed panel of X (2 * lanes columns:
    PANEL at 8 lanes, PANEL16 at 16).

    micro(a, a_off, lda, xp, x_off, k_n, bias, y, y_off, ldy, pf, acc):
    y[y_off + r * ldy + c] = (y[...] when `acc`) + sum_{k < k_n} a[a_off + r * lda + k] * xp[x_off + k * W + c]
    (k_loop, its chains started from y's values when `acc`: a k-block after the first continues each
    output's chain, the same FMAs in the same order), then + xp[x_off + k_n * W + c] (the panel's bias
    row) when `bias`, r < rows, c < W = 2 * lanes; the line pf floats on from each row of the panel is
    prefetched. A is read where it lies (rows lda apart, as MLAS's SGEMM kernels read A), X's rows at a
    fixed pitch.

    strided: micro(a, a_off, lda, x, x_off, ldx, k_n, y, y_off, ldy) instead, X's rows ldx apart
    (an unpacked matrix read in place: matmul_rows8 / 16), no bias, no prefetch.
    """
    width = 2 * lanes
    if strided:
        return _make_strided_micro(rows, lanes)

    @intrinsic
    def micro(typingctx, a, a_off, lda, xp, x_off, k_n, bias, y, y_off, ldy, pf, acc):
        sig = types.void(a, a_off, lda, xp, x_off, k_n, bias, y, y_off, ldy, pf, acc)

        def codegen(context, builder, signature, args):
            _, a_off_v, lda_v, _, x_off_v, k_n_v, bias_v, _, y_off_v, ldy_v, pf_v, acc_v = args
            aptr = builder.gep(array_data(context, builder, signature, args, 0), [a_off_v])
            arows = [builder.gep(aptr, [builder.mul(lda_v, _c(r))]) for r in range(rows)]
            xptr = builder.gep(array_data(context, builder, signature, args, 3), [x_off_v])
            yptr = builder.gep(array_data(context, builder, signature, args, 7), [y_off_v])
            yrows = [builder.gep(yptr, [builder.mul(ldy_v, _c(r))]) for r in range(rows)]
            init = load_if(builder, 2 * rows, flag(builder, acc_v),
                           lambda: [vload(builder, yrows[i // 2], i % 2, lanes) for i in range(2 * rows)], lanes)
            final = k_loop(builder, rows, arows, xptr, _c(width), k_n_v, builder.gep(xptr, [pf_v]), lanes, init)

            def bias_row():  # + c after the sum: round(s + c), as MatMul then Add
                brow = builder.gep(xptr, [builder.mul(k_n_v, _c(width))])
                return [vload(builder, brow, i % 2, lanes) for i in range(len(final))]

            out = add_if(builder, final, flag(builder, bias_v), bias_row)
            for r in range(rows):
                for v in range(2):
                    vstore(builder, out[2 * r + v], yrows[r], v, lanes)
            return context.get_dummy_value()

        return sig, codegen

    return micro


def _make_strided_micro(rows: int, lanes: int):
    """_make_panel_micro's strided micro-kernel: y[y_off + r * ldy + c] = sum_{k < k_n}
    a[a_off + r * lda + k] * x[x_off + k * ldx + c], r < rows, c < 2 * lanes (the same k_loop)."""

    @intrinsic
    def micro(typingctx, a, a_off, lda, x, x_off, ldx, k_n, y, y_off, ldy):
        sig = types.void(a, a_off, lda, x, x_off, ldx, k_n, y, y_off, ldy)

        def codegen(context, builder, signature, args):
            _, a_off_v, lda_v, _, x_off_v, ldx_v, k_n_v, _, y_off_v, ldy_v = args
            aptr = builder.gep(array_data(context, builder, signature, args, 0), [a_off_v])
            arows = [builder.gep(aptr, [builder.mul(lda_v, _c(r))]) for r in range(rows)]
            xptr = builder.gep(array_data(context, builder, signature, args, 3), [x_off_v])
            yptr = builder.gep(array_data(context, builder, signature, args, 7), [y_off_v])
            final = k_loop(builder, rows, arows, xptr, ldx_v, k_n_v, None, lanes)
            for r in range(rows):
                row = builder.gep(yptr, [builder.mul(ldy_v, _c(r))])
                for v in range(2):
                    vstore(builder, final[2 * r + v], row, v, lanes)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_TILE_ARGS = "a, a_off, lda, xp, x_off, k_n, bias, y, y_off, ldy, pf, acc"
_tile8 = dispatch_rows(lambda r: _make_panel_micro(r, 8), MR, _TILE_ARGS)
_tile16 = dispatch_rows(lambda r: _make_panel_micro(r, 16), MR16, _TILE_ARGS)  # <16 x float>, panels of 32 columns


def scratch_size() -> int:
    """Floats of workspace matmul_const needs: the Y tile of the last, partial panel."""
    return MR * PANEL


def scratch_size16() -> int:
    """Floats of workspace matmul_const16 needs: the Y tile of the last, partial panel."""
    return MR16 * PANEL16


_MM_SIG = types.void(_R1, _I, _I, types.boolean, _R1, _F1, _I, _F1)
_MM_KC_SIG = types.void(_R1, _I, _I, types.boolean, _R1, _F1, _I, _F1, _I, _I)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _last_panel(tile, mr, panel, af, rows, k_n, bias, xp, yf, n_n, ws, kk, full):
    """The last, partial panel of columns (from `full`): each row tile into ws, then its valid columns into Y."""
    for m in range(0, rows, mr):
        r_t = min(mr, rows - m)
        tile(af, m * k_n, k_n, xp, full * kk, k_n, bias, ws, 0, panel, 0, False, r_t)
        for r in range(r_t):
            for j in range(n_n - full):
                yf[(m + r) * n_n + full + j] = ws[r * panel + j]


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _const_kc(tile, mr, panel, af, rows, k_n, bias, xp, yf, n_n, ws, kc, mc):
    """matmul_const(16)_kc's loops around `tile` (mr x panel micro-tiles): K in blocks of kc, the rows in
    blocks of mc, each output's chain continued from one k-block to the next through Y (`acc`)."""
    kk = k_n + (1 if bias else 0)
    ahead = panel * kk
    full = n_n // panel * panel
    for k0 in range(0, max(k_n, 1), kc):  # k_n = 0: one block, Y = c or 0
        kl = min(kc, k_n - k0)
        last = bias and k0 + kl == k_n
        for m0 in range(0, rows, mc):
            me = min(rows, m0 + mc)
            for j0 in range(0, full, panel):
                for m in range(m0, me, mr):
                    tile(af, m * k_n + k0, k_n, xp, j0 * kk + k0 * panel, kl, last, yf, m * n_n + j0, n_n,
                         ahead if m == m0 else 0, k0 > 0, min(mr, me - m))
    if full < n_n:
        _last_panel(tile, mr, panel, af, rows, k_n, bias, xp, yf, n_n, ws, kk, full)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _const(tile, mr, panel, af, rows, k_n, bias, xp, yf, n_n, ws):
    """matmul_const(16)'s loops around `tile`: in blocks of panels that stay in L2 (NB_BYTES), every row tile
    of A over each panel of the block; the first row tile prefetches the next panel."""
    kk = k_n + (1 if bias else 0)
    ahead = panel * kk
    nb = max(panel, NB_BYTES // (4 * kk) // panel * panel)
    full = n_n // panel * panel
    for b0 in range(0, full, nb):
        be = min(full, b0 + nb)
        for m in range(0, rows, mr):
            for j0 in range(b0, be, panel):
                tile(af, m * k_n, k_n, xp, j0 * kk, k_n, bias, yf, m * n_n + j0, n_n, ahead if m == 0 else 0, False,
                     min(mr, rows - m))
    if full < n_n:
        _last_panel(tile, mr, panel, af, rows, k_n, bias, xp, yf, n_n, ws, kk, full)


@njit(_MM_KC_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const_kc(af, rows, k_n, bias, xp, yf, n_n, ws, kc, mc):
    """matmul_const with its k-block and row-block sizes given (kc, mc >= 1): benchmarks/matmul_blocking.py's
    sweep. The same sums, in the same order, for any kc and mc."""
    _const_kc(_tile8, MR, PANEL, af, rows, k_n, bias, xp, yf, n_n, ws, kc, mc)


@njit(_MM_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const(af, rows, k_n, bias, xp, yf, n_n, ws):
    """Y (rows, n_n) = A @ B (+ c when `bias`), A = af (rows, k_n) C-contiguous.

    xp = pack_right(B, c); yf: Y flat, rows n_n apart; ws: scratch_size() floats.
    In blocks of panels that stay in L2, every row tile of A over each panel of the
    block (the tile's rows of A stay in L1); the first row tile prefetches the next
    panel. The last, partial panel goes into ws, then its valid columns into Y.
    """
    _const(_tile8, MR, PANEL, af, rows, k_n, bias, xp, yf, n_n, ws)


@njit(_MM_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const_blocked(af, rows, k_n, bias, xp, yf, n_n, ws):
    """matmul_const, blocked as Goto & van de Geijn (2008) block a GEMM where A is larger than
    ONE_PASS_BYTES: K in blocks of KC, so that a panel's KC x PANEL strip of X stays in L1 while every
    row tile passes over it, and the rows in blocks whose KC-wide strip of A (MC_BYTES) stays in L2
    across the panels; each output's chain continues from one k-block to the next through Y (the
    micro-kernel's `acc`), so the sums, and the bits, are matmul_const's. A smaller A runs matmul_const.
    ConstRightProduct takes it where BLOCKED (module docstring)."""
    if 4 * rows * k_n <= ONE_PASS_BYTES:
        _const(_tile8, MR, PANEL, af, rows, k_n, bias, xp, yf, n_n, ws)
    else:
        _const_kc(_tile8, MR, PANEL, af, rows, k_n, bias, xp, yf, n_n, ws, KC, max(MR, MC_BYTES // (4 * min(KC, k_n))))


# ---- 16 lanes: <16 x float> micro-kernels over panels of 32 columns (AVX-512's 32 zmm registers) ----------

@njit(_MM_KC_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const16_kc(af, rows, k_n, bias, xp, yf, n_n, ws, kc, mc):
    """matmul_const16 with its k-block and row-block sizes given (kc, mc >= 1): the same sums for any."""
    _const_kc(_tile16, MR16, PANEL16, af, rows, k_n, bias, xp, yf, n_n, ws, kc, mc)


@njit(_MM_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const16(af, rows, k_n, bias, xp, yf, n_n, ws):
    """matmul_const at 16 lanes: xp = pack_right(B, c, PANEL16), ws: scratch_size16() floats; micro-tiles
    of MR16 rows x PANEL16 columns (24 <16 x float> accumulators: one zmm each on AVX-512, MLAS's
    AVX-512 SGEMM tile; LLVM splits them on narrower hosts). The same sums as matmul_const (a
    sequential multiply-add chain over k per output, then + c), so the same bits."""
    _const(_tile16, MR16, PANEL16, af, rows, k_n, bias, xp, yf, n_n, ws)


@njit(_MM_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_const16_blocked(af, rows, k_n, bias, xp, yf, n_n, ws):
    """matmul_const_blocked at 16 lanes (KC16): matmul_const16's bits."""
    if 4 * rows * k_n <= ONE_PASS_BYTES:
        _const(_tile16, MR16, PANEL16, af, rows, k_n, bias, xp, yf, n_n, ws)
    else:
        mc = max(MR16, MC_BYTES // (4 * min(KC16, k_n)))
        _const_kc(_tile16, MR16, PANEL16, af, rows, k_n, bias, xp, yf, n_n, ws, KC16, mc)


# ---- products of two activations: B read where it lies (rows ldb apart), both widths ----------------------

_S_ARGS = "a, a_off, lda, x, x_off, ldx, k_n, y, y_off, ldy"
_stile8 = dispatch_rows(lambda r: _make_panel_micro(r, 8, strided=True), MR, _S_ARGS)
_stile16 = dispatch_rows(lambda r: _make_panel_micro(r, 16, strided=True), MR16, _S_ARGS)


def rows_scratch_size(k_n: int, lanes: int) -> int:
    """Floats of workspace matmul_rows8 / 16 need at `lanes`: the last, partial panel of B zero-padded
    (k_n x 2 lanes) and its Y tile."""
    width = 2 * lanes
    return k_n * width + (MR16 if lanes == 16 else MR) * width


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _rows(tile, mr, w, af, bf, yf, batch, m_n, k_n, n_n, ws):
    """matmul_rows8 / 16's loops around `tile` (a strided micro-kernel dispatch: mr x w tiles)."""
    full = n_n // w * w
    tail = n_n - full
    for i in range(batch):
        a0, b0, y0 = i * m_n * k_n, i * k_n * n_n, i * m_n * n_n
        for j0 in range(0, full, w):
            for m in range(0, m_n, mr):
                tile(af, a0 + m * k_n, k_n, bf, b0 + j0, n_n, k_n, yf, y0 + m * n_n + j0, n_n, min(mr, m_n - m))
        if tail:
            t0 = k_n * w
            for k in range(k_n):
                for j in range(w):
                    ws[k * w + j] = bf[b0 + k * n_n + full + j] if j < tail else np.float32(0)
            for m in range(0, m_n, mr):
                r_t = min(mr, m_n - m)
                tile(af, a0 + m * k_n, k_n, ws, 0, w, k_n, ws, t0, w, r_t)
                for r in range(r_t):
                    for j in range(tail):
                        yf[y0 + (m + r) * n_n + full + j] = ws[t0 + r * w + j]


_ROWS_SIG = types.void(_R1, _R1, _F1, _I, _I, _I, _I, _F1)


@njit(_ROWS_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_rows8(af, bf, yf, batch, m_n, k_n, n_n, ws):
    """Y[i] (m_n, n_n) = A[i] (m_n, k_n) @ B[i] (k_n, n_n) for i < batch, every operand C-contiguous
    and flat (A[i] at i * m_n * k_n, ...): B an activation, read where it lies.

    The micro-kernels of matmul_const (MR x PANEL tiles of <8 x float>) with B's rows n_n apart
    instead of a packed panel; the last, partial panel of columns is copied zero-padded into ws
    (rows_scratch_size(k_n, 8) floats) and its tile's valid columns into Y. Per panel of B (k_n x
    PANEL floats, in L1 or L2), every row tile of A. The same sums as matmul_const: a sequential
    multiply-add chain over k per output.
    """
    _rows(_stile8, MR, PANEL, af, bf, yf, batch, m_n, k_n, n_n, ws)


@njit(_ROWS_SIG, nogil=True, cache=True, error_model="numpy")
def matmul_rows16(af, bf, yf, batch, m_n, k_n, n_n, ws):
    """matmul_rows8 at 16 lanes: MR16 x PANEL16 tiles of <16 x float>, ws of rows_scratch_size(k_n, 16)
    floats; the same bits."""
    _rows(_stile16, MR16, PANEL16, af, bf, yf, batch, m_n, k_n, n_n, ws)
