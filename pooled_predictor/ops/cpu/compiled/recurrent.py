"""Compiled RNN, GRU and LSTM, float32: one call runs a whole node (ONNX spec equations).

Per call, for every direction:

1. the input projection XW = X W^T for all time steps and both directions, one
   packed-panel GEMM (compiled/matmul.py's matmul_const; W^T packed once per
   weight by pack_weights, shared by every Net);
2. the time loop: per step one GEMM of `batch` rows, H_{t-1} R^T (small_gemm,
   below, over R^T packed per direction), then, per batch row, the gates in
   contiguous passes of H to 3H floats that LLVM vectorizes (8 lanes on AVX2):
   projection and folded bias added, peepholes, clip, activations, the state
   update, Y. With the default activations, no clip and no peepholes a row's
   step is 1 to 3 fused passes (sigmoid_input, tanh_input, lstm_state,
   gru_candidate_row, rnn_row); otherwise one pass per operation (act_range,
   clip_range, ...), in the order of the spec's equations.

Rows past their sequence length are skipped (their state is kept, Y stays
zero; Y_h and Y_c are zero for a row of length 0, as onnxruntime's); a
backward direction starts each row at its own last element, lens[b] - 1.
Nothing is allocated; no threads are started; the GIL is released.

Activations are computed in float32. Tanh: tanh(x) = x P(x^2) / Q(x^2), P of
degree 6 and Q of degree 3, Horner with fused multiply-adds, kept within
[-1, 1], +-1 from |x| = 9 on (tanh(9) is 1 - 3e-8). The coefficients are our
fit of the minimax relative error on [0, 9] (Loeb's linearization, iterated
reweighted least squares in float64: 2.1e-8), the form of Eigen's and MLAS's
float tanh. Measured in float32 over 2M points of [-12, 12] and 1e-30..1: at
most 4.9 ulp, 2.9e-7 absolute. Sigmoid(x) = 0.5 + 0.5 tanh(x / 2): at most
1.8e-7 absolute (0 from x = -18 down, where the true value is under 1.6e-8).
Both branch-free: 0.6-0.7 ns an element vectorized, against 1.1-2.6 for
exp32-based forms (one thread). The spec's other activations go element by
element (act_scalar). The GEMMs' error is BLAS sgemm's (a sequential FMA chain
over k). The tested reference is recurrent_cell.py's numpy loops
(tests/ops/test_recurrent.py runs both against onnxruntime).

Arguments common to the three (flat C-contiguous float32 arrays unless said;
absent inputs and outputs as empty arrays): x (X, layout 0: [seq, batch,
input], 1: [batch, seq, input]), wp (pack_weights of W), rp (pack_recurrent
of R), b (B [D, 2 G H]), lens (int32 [batch]), h0 (initial_h, layout 0:
[D, batch, H], 1: [batch, D, H]), y (Y, layout 0: [seq, D, batch, H], 1:
[batch, seq, D, H]), yh (Y_h, as h0), xw (workspace, seq * batch * D * G * H
floats), work (workspace, work_size floats), acts (float64 [D * k, 3]: code,
alpha, beta per activation, recurrent_cell.ACTIVATIONS' codes), seq, batch,
input_size, hidden, num_dir, layout, reverse (direction "reverse"), clip
(< 0: none). Raises ValueError for a sequence length outside [0, seq].
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .expf import fmuladd32
from .gemm import close_loop, vector_phis
from .jit import njit
from .matmul import PANEL, array_data, matmul_const, pack_right, scratch_size, splat, vload, vstore

_f = np.float32
ZERO, ONE, HALF = _f(0.0), _f(1.0), _f(0.5)
# tanh(x) ~ x P(x^2) / Q(x^2) on [-9, 9] (module docstring: our fit, its error)
P0, P1, P2, P3, P4, P5, P6 = (_f(0.9999999954215231), _f(0.13090071879572798), _f(0.003110735147049521),
                              _f(1.1225520729222324e-05), _f(-2.0516429630511514e-08), _f(5.4195956920360165e-11),
                              _f(-8.856361145229547e-14))
Q0, Q1, Q2, Q3 = _f(1.0), _f(0.4642340019995262), _f(0.024522150903008695), _f(0.00025560334403506636)
TANH_CLAMP = _f(9.0)
MS = scratch_size()  # matmul_const's tile for a last, partial panel

RELU, TANH, SIGMOID = 0, 1, 2  # recurrent_cell.ACTIVATIONS' codes of the vectorized ones

_f4, _i8, _u8, _b1 = types.float32, types.int64, types.uint64, types.boolean
_R1 = types.Array(_f4, 1, "C", readonly=True)
_W1 = types.Array(_f4, 1, "C")
_L1 = types.Array(types.int32, 1, "C", readonly=True)
_A2 = types.Array(types.float64, 2, "C", readonly=True)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """W [D, G*H, input] -> W^T (input x D*G*H) in matmul_const's panels (one GEMM for every direction)."""
    w = np.asarray(w, np.float32)
    return pack_right(w.reshape(-1, w.shape[2]).T, None)


def pack_recurrent(r: np.ndarray, op: str) -> np.ndarray:
    """R [D, G*H, H] -> R_d^T in panels, direction after direction (GRU: R_zr^T, then R_h^T, per direction)."""
    r = np.asarray(r, np.float32)
    hid = r.shape[2]
    parts = []
    for d in range(r.shape[0]):
        if op == "GRU":
            parts += [pack_right(r[d, :2 * hid].T, None), pack_right(r[d, 2 * hid:].T, None)]
        else:
            parts.append(pack_right(r[d].T, None))
    out = np.concatenate(parts)
    out.flags.writeable = False
    return out


@njit("int64(int64, int64)", nogil=True, cache=True)
def _panels(n, k):
    """Floats of a pack_right of k rows and n columns (panels of PANEL columns, the last zero-padded)."""
    return (n + PANEL - 1) // PANEL * PANEL * k


def work_size(op: str, batch: int, hidden: int, num_dir: int) -> int:
    """Floats of `work` for the loops (the matmul tile, folded bias, gates, states)."""
    g = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    return MS + num_dir * g * hidden + num_dir * hidden + batch * g * hidden + 4 * batch * hidden + hidden


@njit("float32(float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def tanh32(v):
    """tanh(v) in float32: v P(v^2) / Q(v^2) within [-1, 1], +-1 from |v| = 9 on (module docstring:
    error). Evaluated on |v| and the sign copied back (2 selects fewer than clamping both ends: 0.83
    -> 0.6 ns an element); branch-free; NaN passes (comparisons with it are false)."""
    a = abs(v)
    c = TANH_CLAMP if a > TANH_CLAMP else a
    z = c * c
    p = fmuladd32(fmuladd32(fmuladd32(fmuladd32(fmuladd32(fmuladd32(P6, z, P5), z, P4), z, P3), z, P2), z, P1), z, P0)
    q = fmuladd32(fmuladd32(fmuladd32(Q3, z, Q2), z, Q1), z, Q0)
    r = (c * p) / q
    r = ONE if (r > ONE or a >= TANH_CLAMP) else r  # the fit overshoots 1 by an ulp near 8.9
    return math.copysign(r, v)


@njit("float32(float32)", nogil=True, cache=True, error_model="numpy", inline="always")
def sigmoid32(v):
    """1 / (1 + exp(-v)) = 0.5 + 0.5 tanh(v / 2) in float32."""
    return fmuladd32(HALF, tanh32(HALF * v), HALF)


@njit("float32(float32, int64, float32, float32)", nogil=True, cache=True, error_model="numpy")
def act_scalar(v, code, alpha, beta):
    """One element through the spec's activation `code` (recurrent_cell.ACTIVATIONS)."""
    if code == RELU:
        return v if v > ZERO else ZERO
    if code == TANH:
        return tanh32(v)
    if code == SIGMOID:
        return sigmoid32(v)
    if code == 3:  # Affine
        return alpha * v + beta
    if code == 4:  # LeakyRelu
        return v if v >= ZERO else alpha * v
    if code == 5:  # ThresholdedRelu
        return v if v > alpha else ZERO
    if code == 6:  # ScaledTanh
        return alpha * tanh32(beta * v)
    if code == 7:  # HardSigmoid
        return min(ONE, max(ZERO, alpha * v + beta))
    if code == 8:  # Elu
        return v if v >= ZERO else _f(alpha * (np.exp(np.float64(v)) - 1.0))
    if code == 9:  # Softsign
        return v / (ONE + abs(v))
    # 10: Softplus, ln(1 + e^v) without overflow
    w = np.float64(v)
    return _f(w + np.log1p(np.exp(-w)) if w > 0 else np.log1p(np.exp(w)))


# ---- H R^T per step: a GEMM of a few rows over pack_right's panels ----------------------------
#
# matmul_const's micro-tile is 6 rows x 1 panel (16 columns): with 1 or 2 rows (batch 1, 2) its
# k loop has 2 or 4 multiply-add chains, too few to hide the FMA latency (4 cycles, 2 a cycle on
# Zen 3: 8 chains keep both units busy). Here a tile covers more panels when it has fewer rows
# (1 x 4 panels, 2 x 2, 3 x 1, 4 x 1: 6 to 8 chains; from 6 rows on, matmul_const's 6 x 1 with
# 12), over groups of 4 panels so that a group's panels stay in L2 for every row tile. Measured,
# one thread, hidden 64-512 (K = H, N = 3H or 4H), load 4-9 on 2 cores: 1 row 24-47 GFLOP/s
# (bandwidth-bound from hidden 256 on: R^T is 1-4 MiB), 2 rows 50-77, 3 to 8 rows 53-98 (the
# low end at hidden 64: k loops of 64); against matmul_const 1.4-2.1x faster at 1 row, 1.2-1.8x
# at 2. With 6 and 8 rows, 6 + 2 rows measured 4-13% faster than 4 + 4 (A/B, interleaved).
# Tried and dropped: 2 x 3 and 3 x 2 panels (spilling: 55-78).

_F4 = ir.FloatType()
_I64 = ir.IntType(64)
_V8 = ir.VectorType(_F4, 8)
GROUP = 4  # panels per column group


def _c(v: int):
    return ir.Constant(_I64, v)


def _make_micro(rows: int, panels: int):
    """micro(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy): for r < rows and the 16 * panels
    columns of `panels` adjacent panels (kk floats apart), y[y_off + r * ldy + c] = sum_{k < k_n}
    a[a_off + r * lda + k] * panel[k * 16 + c]: 2 * rows * panels accumulators (<8 x float>), a
    sequential multiply-add chain over k each (llvm.fmuladd: FMA), as matmul.k_loop."""

    @intrinsic
    def micro(typingctx, a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy):
        sig = types.void(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)

        def codegen(context, builder, signature, args):
            _, a_off_v, lda_v, _, x_off_v, kk_v, k_n_v, _, y_off_v, ldy_v = args
            fma = builder.module.globals.get("llvm.fmuladd.v8f32") or ir.Function(
                builder.module, ir.FunctionType(_V8, [_V8, _V8, _V8]), "llvm.fmuladd.v8f32")
            aptr = builder.gep(array_data(context, builder, signature, args, 0), [a_off_v])
            arows = [builder.gep(aptr, [builder.mul(lda_v, _c(r))]) for r in range(rows)]
            xbase = builder.gep(array_data(context, builder, signature, args, 3), [x_off_v])
            xpan = [builder.gep(xbase, [builder.mul(kk_v, _c(p))]) for p in range(panels)]
            yptr = builder.gep(array_data(context, builder, signature, args, 7), [y_off_v])
            n = 2 * rows * panels
            zero = ir.Constant(_V8, [0.0] * 8)
            entry = builder.block
            loop_bb, done_bb = builder.function.append_basic_block("k"), builder.function.append_basic_block("done")
            builder.cbranch(builder.icmp_signed(">", k_n_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            k = builder.phi(_I64)
            k.add_incoming(_c(0), entry)
            accs = vector_phis(builder, n, (zero, entry))
            at = builder.mul(k, _c(PANEL))
            new = [None] * n
            if rows <= 4:
                # the rows' broadcasts first, then one vector of the panels at a time with its
                # multiply-adds: rows + 1 + 2 * rows * panels live vectors (loading the panels'
                # vectors first ran 2-3x slower with 2 and 3 rows, measured)
                w = [splat(builder, builder.load(builder.gep(arows[r], [k]))) for r in range(rows)]
                for i in range(2 * panels):
                    xv = vload(builder, builder.gep(xpan[i // 2], [at]), i % 2)
                    for r in range(rows):
                        new[r * 2 * panels + i] = builder.call(fma, [w[r], xv, accs[r * 2 * panels + i]])
            else:
                # 6 rows x 1 panel: the panel's 2 vectors first, then one broadcast at a time (12
                # accumulators + 3: matmul.k_loop's order; the other order spills)
                xv = [vload(builder, builder.gep(xpan[0], [at]), v) for v in range(2)]
                for r in range(rows):
                    w = splat(builder, builder.load(builder.gep(arows[r], [k])))
                    for v in range(2):
                        new[r * 2 + v] = builder.call(fma, [w, xv[v], accs[r * 2 + v]])
            final = close_loop(builder, k, k_n_v, accs, new, loop_bb, done_bb, (zero, entry))
            for r in range(rows):
                row = builder.gep(yptr, [builder.mul(ldy_v, _c(r))])
                for i in range(2 * panels):
                    vstore(builder, final[r * 2 * panels + i], row, i)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_m14, _m12, _m11, _m22, _m21, _m31, _m41, _m61 = (
    _make_micro(r, p) for r, p in ((1, 4), (1, 2), (1, 1), (2, 2), (2, 1), (3, 1), (4, 1), (6, 1)))


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _tile(rows, panels, a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy):
    """One tile of `rows` rows (1 to 4, or 6) by `panels` panels (1, 2 or 4 with 1 row; 1 or 2 with 2;
    else 1)."""
    if rows == 1:
        if panels == 4:
            _m14(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
        elif panels == 2:
            _m12(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
        else:
            _m11(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
    elif rows == 2:
        if panels == 2:
            _m22(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
        else:
            _m21(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
    elif rows == 3:
        _m31(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
    elif rows == 4:
        _m41(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)
    else:
        _m61(a, a_off, lda, xp, x_off, kk, k_n, y, y_off, ldy)


@njit("int64(int64, int64)", nogil=True, cache=True, inline="always")
def _widest(rows, left):
    """Panels per tile for `rows` rows with `left` panels of the group to go."""
    most = 4 if rows == 1 else (2 if rows == 2 else 1)
    while most > left:
        most //= 2
    return most


@njit("int64(int64)", nogil=True, cache=True, inline="always")
def _tile_rows(left):
    """Rows of the next tile with `left` rows to go: 6 (matmul_const's tile), else up to 4."""
    return 6 if left >= 6 else min(4, left)


@njit(types.void(_R1, _i8, _i8, _R1, _W1, _i8, _W1), nogil=True, cache=True, error_model="numpy")
def small_gemm(a, rows, k_n, xp, y, n_n, ws):
    """Y (rows, n_n) = A (rows, k_n) @ B, xp = pack_right(B, None), A and Y flat and C-contiguous;
    ws: MS floats (the tile of a last, partial panel, whose valid columns are then copied)."""
    kk = k_n * PANEL
    full = n_n // PANEL
    for g0 in range(0, full, GROUP):
        gp = min(GROUP, full - g0)
        m = 0
        while m < rows:
            rt = _tile_rows(rows - m)
            p = 0
            while p < gp:
                pw = _widest(rt, gp - p)
                _tile(rt, pw, a, m * k_n, k_n, xp, (g0 + p) * kk, kk, k_n, y, m * n_n + (g0 + p) * PANEL, n_n)
                p += pw
            m += rt
    if full * PANEL < n_n:
        m = 0
        while m < rows:
            rt = _tile_rows(rows - m)
            _tile(rt, 1, a, m * k_n, k_n, xp, full * kk, kk, k_n, ws, 0, PANEL)
            for r in range(rt):
                for j in range(n_n - full * PANEL):
                    y[(m + r) * n_n + full * PANEL + j] = ws[r * PANEL + j]
            m += rt


# Passes over one batch row's gates: offsets and lengths unsigned, so that numba emits no
# negative-index wraparound and LLVM vectorizes each loop (8 lanes on AVX2; with int64 offsets
# the loops stayed scalar: 0 of the sigmoid loops vectorized, measured in the assembly).

@njit(types.void(_W1, _u8, _u8, _A2, _i8), nogil=True, cache=True, error_model="numpy")
def act_range(g, at, n, acts, k):
    """g[at:at + n] = activation acts[k] of it, in place; Sigmoid and Tanh vectorized."""
    code = int(acts[k, 0])
    if code == SIGMOID:
        for j in range(n):
            g[at + j] = sigmoid32(g[at + j])
    elif code == TANH:
        for j in range(n):
            g[at + j] = tanh32(g[at + j])
    else:
        alpha, beta = _f(acts[k, 1]), _f(acts[k, 2])
        for j in range(n):
            g[at + j] = act_scalar(g[at + j], code, alpha, beta)


@njit(types.void(_W1, _u8, _u8, _f4), nogil=True, cache=True, error_model="numpy")
def clip_range(g, at, n, clip):
    """g[at:at + n] clipped to [-clip, clip] when clip >= 0."""
    if clip >= ZERO:
        for j in range(n):
            v = g[at + j]
            g[at + j] = clip if v > clip else (-clip if v < -clip else v)


@njit(types.void(_W1, _u8, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def add_input(g, go, xw, xo, bias, bo, n):
    """g[go + j] += XW[xo + j] + bias[bo + j]: the recurrent product plus the projection and bias."""
    for j in range(n):
        g[go + j] += xw[xo + j] + bias[bo + j]


@njit(types.void(_W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def copy_range(dst, do, src, so, n):
    for j in range(n):
        dst[do + j] = src[so + j]


@njit(types.void(_W1, _u8, _R1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def add_peephole(g, go, p, po, c, co, n):
    """g[go + j] += P[po + j] * C[co + j]."""
    for j in range(n):
        g[go + j] += p[po + j] * c[co + j]


@njit(types.void(_W1, _u8, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def one_minus(g, dst, src, n):
    """f = 1 - i (LSTM's input_forget)."""
    for j in range(n):
        g[dst + j] = ONE - g[src + j]


@njit(types.void(_W1, _u8, _u8, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def lstm_cell(g, gi, gf, gc, c, co, n):
    """C' = f * C + i * c~."""
    for j in range(n):
        c[co + j] = g[gf + j] * c[co + j] + g[gi + j] * g[gc + j]


@njit(types.void(_W1, _u8, _W1, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def lstm_hidden_tanh(g, go, c, h, ho, n):
    """H' = o * tanh(C')."""
    for j in range(n):
        h[ho + j] = g[go + j] * tanh32(c[ho + j])


@njit(types.void(_W1, _u8, _W1, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def lstm_hidden(g, go, hc, h, ho, n):
    """H' = o * h(C'), hc [n] holding h(C')."""
    for j in range(n):
        h[ho + j] = g[go + j] * hc[j]


@njit(types.void(_W1, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def gru_reset(rh, g, gr, h, ho, n):
    """r * H, the left operand of the candidate's product (without linear_before_reset)."""
    for j in range(n):
        rh[ho + j] = g[gr + j] * h[ho + j]


@njit(types.void(_W1, _u8, _W1, _u8, _W1, _u8, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True,
      error_model="numpy")
def gru_candidate_lbr(cand, ho, xw, xo, bias, bo, g, gr, rbh, ro, n):
    """cand = X Wh^T + Wbh + r * (H Rh^T + Rbh), cand holding H Rh^T (linear_before_reset)."""
    for j in range(n):
        cand[ho + j] = xw[xo + j] + bias[bo + j] + g[gr + j] * (cand[ho + j] + rbh[ro + j])


@njit(types.void(_W1, _u8, _W1, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def gru_update(h, ho, cand, g, gz, n):
    """H' = h~ + z * (H - h~) (= (1 - z) * h~ + z * H)."""
    for j in range(n):
        c = cand[ho + j]
        h[ho + j] = c + g[gz + j] * (h[ho + j] - c)


# One pass per batch row and step with the default activations, no clip and no peepholes (the
# same float32 operations as the passes above, in one loop: nothing stored between them).

@njit(types.void(_W1, _u8, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def sigmoid_input(g, go, xw, xo, bias, bo, n):
    """g = sigmoid(g + XW + bias) in place (LSTM's i, o, f; GRU's z, r), g holding H R^T."""
    for j in range(n):
        g[go + j] = sigmoid32(g[go + j] + (xw[xo + j] + bias[bo + j]))


@njit(types.void(_W1, _u8, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def tanh_input(g, go, xw, xo, bias, bo, n):
    """g = tanh(g + XW + bias) in place (LSTM's c~)."""
    for j in range(n):
        g[go + j] = tanh32(g[go + j] + (xw[xo + j] + bias[bo + j]))


@njit(types.void(_W1, _u8, _W1, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def lstm_state(g, go, c, h, ho, n):
    """C' = f * C + i * c~, H' = o * tanh(C') from the activated gates i, o, f, c~ at g[go:go + 4n].

    The LSTM row is three passes (sigmoid_input over i, o, f; tanh_input over c~; this): one
    pass with the five activations measured 25% slower (its constants and chains spill), one
    pass per operation 15% slower (2.4-2.9 against 2.8-3.3 ns a cell, hidden 64-256). Gate
    offsets are sums of unsigned values (2 * n would be signed: each lane's index wrapped, 2.4x
    slower)."""
    g1, g2, g3 = go + n, go + n + n, go + n + n + n
    for j in range(n):
        cn = g[g2 + j] * c[ho + j] + g[go + j] * g[g3 + j]
        c[ho + j] = cn
        h[ho + j] = g[g1 + j] * tanh32(cn)


@njit(types.void(_W1, _u8, _W1, _W1, _u8, _W1, _u8, _W1, _u8, _W1, _u8, _u8, _b1), nogil=True, cache=True,
      error_model="numpy")
def gru_candidate_row(h, ho, cand, g, go, xw, xo, bias, bo, rbh, ro, n, linear_before_reset):
    """h~ = tanh(.) (gru_candidate_lbr's or add_input's sum), H' = h~ + z * (H - h~); cand holds
    H Rh^T (with linear_before_reset) or (r * H) Rh^T, g z then r."""
    if linear_before_reset:
        for j in range(n):
            cj = tanh32(xw[xo + j] + bias[bo + j] + g[go + n + j] * (cand[ho + j] + rbh[ro + j]))
            h[ho + j] = cj + g[go + j] * (h[ho + j] - cj)
    else:
        for j in range(n):
            cj = tanh32(cand[ho + j] + (xw[xo + j] + bias[bo + j]))
            h[ho + j] = cj + g[go + j] * (h[ho + j] - cj)


@njit(types.void(_W1, _u8, _W1, _u8, _W1, _u8, _W1, _u8, _u8), nogil=True, cache=True, error_model="numpy")
def rnn_row(g, go, xw, xo, bias, bo, h, ho, n):
    """H' = tanh(H R^T + X W^T + bias)."""
    for j in range(n):
        h[ho + j] = tanh32(g[go + j] + (xw[xo + j] + bias[bo + j]))


@njit(types.boolean(_A2, _i8, _i8, _f4), nogil=True, cache=True)
def _defaults(acts, first, k, clip):
    """The direction's k activations from row `first` are the spec's defaults (Sigmoid, then Tanh), no clip."""
    if clip >= ZERO:
        return False
    for i in range(k):
        if int(acts[first + i, 0]) != (SIGMOID if (i == 0 and k > 1) else TANH):
            return False
    return True


@njit(types.void(_L1, _i8, _W1), nogil=True, cache=True, error_model="numpy")
def _check_lens(lens, seq, y):
    """Raise for a length outside [0, seq]; zero Y when a sequence ends before seq (its tail stays zero)."""
    short = False
    for b in range(lens.size):
        if lens[b] < 0 or lens[b] > seq:
            raise ValueError("sequence_lens outside [0, seq_length]")
        short |= lens[b] < seq
    if short:
        y[:] = ZERO


@njit(types.void(_R1, _R1, _W1, _W1, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _project(x, wp, xw, ws, rows, input_size, n_all):
    """XW [rows, n_all] = X [rows, input] W^T (every direction's columns side by side): small_gemm for a
    few rows (a decoder's single step), else matmul_const (its blocks of panels stay in L2 across many
    row tiles)."""
    if rows <= 8:
        small_gemm(x, rows, input_size, wp, xw, n_all, ws)
    else:
        matmul_const(x, rows, input_size, False, wp, xw, n_all, ws)


@njit(types.void(_R1, _W1, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _fold_bias(b, bias, gh, num_dir, inner_from):
    """bias[d, g] = Wb[d, g] + Rb[d, g] for g < inner_from (Rb beyond stays inside a product: GRU's
    linear_before_reset); zero without B."""
    for d in range(num_dir):
        for g in range(gh):
            v = ZERO
            if b.size:
                v = b[d * 2 * gh + g]
                if g < inner_from:
                    v += b[d * 2 * gh + gh + g]
            bias[d * gh + g] = v


@njit(types.void(_R1, _W1, _i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _load_state(s0, s, d, num_dir, batch, hidden, layout):
    """s [batch, H] = direction d's rows of initial_h / initial_c (zero when absent)."""
    for b in range(batch):
        at = ((b * num_dir + d) if layout else (d * batch + b)) * hidden
        for j in range(hidden):
            s[b * hidden + j] = s0[at + j] if s0.size else ZERO


@njit(types.void(_W1, _W1, _L1, _i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _store_state(s, out, lens, d, num_dir, batch, hidden, layout):
    """Y_h / Y_c's direction d = s [batch, H], zero for a row of length 0 (as onnxruntime); nothing when
    the output is absent."""
    if out.size == 0:
        return
    for b in range(batch):
        at = ((b * num_dir + d) if layout else (d * batch + b)) * hidden
        empty = lens.size > 0 and lens[b] == 0
        for j in range(hidden):
            out[at + j] = ZERO if empty else s[b * hidden + j]


@njit(types.UniTuple(_i8, 3)(_L1, _i8, _i8, _i8, _b1, _i8, _i8, _i8, _i8),
      nogil=True, cache=True, error_model="numpy")
def _row(lens, s, b, seq, backward, batch, layout, num_dir, d):
    """(time index or -1 past the row's length, its XW row, its Y offset / hidden) at step s, row b."""
    n = lens[b] if lens.size else seq
    if s >= n:
        return -1, 0, 0
    t = n - 1 - s if backward else s
    xrow = b * seq + t if layout else t * batch + b
    yrow = (b * seq + t) * num_dir + d if layout else (t * num_dir + d) * batch + b
    return t, xrow, yrow


_COMMON = (_R1, _R1, _R1, _R1, _L1, _R1, _W1, _W1, _W1, _W1, _A2, _i8, _i8, _i8, _i8, _i8, _i8, _b1, _f4)


@njit(types.void(*_COMMON), nogil=True, cache=True, error_model="numpy")
def rnn(x, wp, rp, b, lens, h0, y, yh, xw, work, acts, seq, batch, input_size, hidden, num_dir, layout, reverse,
        clip):
    """RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb) (module docstring: the arguments)."""
    hid = hidden
    n_all = num_dir * hid
    ws, bias = work[:MS], work[MS:MS + n_all]
    at = MS + n_all
    g, h = work[at:at + batch * hid], work[at + batch * hid:at + 2 * batch * hid]
    if lens.size:
        _check_lens(lens, seq, y)
    _project(x, wp, xw, ws, seq * batch, input_size, n_all)
    _fold_bias(b, bias, hid, num_dir, hid)
    rsize = _panels(hid, hid)
    for d in range(num_dir):
        backward = reverse or d == 1
        _load_state(h0, h, d, num_dir, batch, hid, layout)
        rd = rp[d * rsize:(d + 1) * rsize]
        fused = _defaults(acts, d, 1, clip)
        for s in range(seq):
            small_gemm(h, batch, hid, rd, g, hid, ws)
            for bb in range(batch):
                t, xrow, yrow = _row(lens, s, bb, seq, backward, batch, layout, num_dir, d)
                if t < 0:
                    continue
                go = bb * hid
                if fused:
                    rnn_row(g, go, xw, xrow * n_all + d * hid, bias, d * hid, h, go, hid)
                else:
                    add_input(g, go, xw, xrow * n_all + d * hid, bias, d * hid, hid)
                    clip_range(g, go, hid, clip)
                    act_range(g, go, hid, acts, d)
                    copy_range(h, go, g, go, hid)
                if y.size:
                    copy_range(y, yrow * hid, h, go, hid)
        _store_state(h, yh, lens, d, num_dir, batch, hid, layout)


@njit(types.void(*_COMMON, _b1), nogil=True, cache=True, error_model="numpy")
def gru(x, wp, rp, b, lens, h0, y, yh, xw, work, acts, seq, batch, input_size, hidden, num_dir, layout, reverse,
        clip, linear_before_reset):
    """GRU (gates z, r, h): z, r = f(X W_zr^T + H R_zr^T + Wb + Rb); h~ = g(X Wh^T + (r * H) Rh^T + Rbh +
    Wbh), or with linear_before_reset g(X Wh^T + r * (H Rh^T + Rbh) + Wbh); H' = h~ + z * (H - h~)."""
    hid = hidden
    gh = 3 * hid
    n_all = num_dir * gh
    ws, bias = work[:MS], work[MS:MS + n_all]
    at = MS + n_all
    rbh = work[at:at + num_dir * hid]
    at += num_dir * hid
    g = work[at:at + 2 * batch * hid]
    at += 2 * batch * hid
    n = batch * hid
    cand, h, rh = work[at:at + n], work[at + n:at + 2 * n], work[at + 2 * n:at + 3 * n]
    if lens.size:
        _check_lens(lens, seq, y)
    _project(x, wp, xw, ws, seq * batch, input_size, n_all)
    # Rbh stays inside the reset product with linear_before_reset; it commutes otherwise
    _fold_bias(b, bias, gh, num_dir, 2 * hid if linear_before_reset else gh)
    for d in range(num_dir):
        for j in range(hid):
            rbh[d * hid + j] = b[d * 2 * gh + gh + 2 * hid + j] if (b.size and linear_before_reset) else ZERO
    zr_size, h_size = _panels(2 * hid, hid), _panels(hid, hid)
    for d in range(num_dir):
        backward = reverse or d == 1
        _load_state(h0, h, d, num_dir, batch, hid, layout)
        rzr = rp[d * (zr_size + h_size):d * (zr_size + h_size) + zr_size]
        rhh = rp[d * (zr_size + h_size) + zr_size:(d + 1) * (zr_size + h_size)]
        fused = _defaults(acts, 2 * d, 2, clip)
        for s in range(seq):
            small_gemm(h, batch, hid, rzr, g, 2 * hid, ws)
            if linear_before_reset:
                small_gemm(h, batch, hid, rhh, cand, hid, ws)
            for bb in range(batch):
                t, xrow, yrow = _row(lens, s, bb, seq, backward, batch, layout, num_dir, d)
                if t < 0:
                    continue
                go = 2 * bb * hid
                if fused:
                    sigmoid_input(g, go, xw, xrow * n_all + d * gh, bias, d * gh, 2 * hid)
                else:
                    add_input(g, go, xw, xrow * n_all + d * gh, bias, d * gh, 2 * hid)
                    clip_range(g, go, 2 * hid, clip)
                    act_range(g, go, 2 * hid, acts, 2 * d)
                if not linear_before_reset:
                    gru_reset(rh, g, go + hid, h, bb * hid, hid)
            if not linear_before_reset:
                small_gemm(rh, batch, hid, rhh, cand, hid, ws)
            for bb in range(batch):
                t, xrow, yrow = _row(lens, s, bb, seq, backward, batch, layout, num_dir, d)
                if t < 0:
                    continue
                go, ho, xo, bo = 2 * bb * hid, bb * hid, xrow * n_all + d * gh + 2 * hid, d * gh + 2 * hid
                if fused:
                    gru_candidate_row(h, ho, cand, g, go, xw, xo, bias, bo, rbh, d * hid, hid, linear_before_reset)
                else:
                    if linear_before_reset:
                        gru_candidate_lbr(cand, ho, xw, xo, bias, bo, g, go + hid, rbh, d * hid, hid)
                    else:
                        add_input(cand, ho, xw, xo, bias, bo, hid)
                    clip_range(cand, ho, hid, clip)
                    act_range(cand, ho, hid, acts, 2 * d + 1)
                    gru_update(h, ho, cand, g, go, hid)
                if y.size:
                    copy_range(y, yrow * hid, h, ho, hid)
        _store_state(h, yh, lens, d, num_dir, batch, hid, layout)


@njit(types.void(*_COMMON, _R1, _R1, _W1, _b1), nogil=True, cache=True, error_model="numpy")
def lstm(x, wp, rp, b, lens, h0, y, yh, xw, work, acts, seq, batch, input_size, hidden, num_dir, layout, reverse,
         clip, c0, p, yc, input_forget):
    """LSTM (gates i, o, f, c; peepholes p = [Pi, Po, Pf] per direction): i = f(.. + Pi * C), f = f(.. + Pf * C)
    (1 - i with input_forget), c~ = g(..), C' = f * C + i * c~, o = f(.. + Po * C'), H' = o * h(C')."""
    hid = hidden
    gh = 4 * hid
    n_all = num_dir * gh
    ws, bias = work[:MS], work[MS:MS + n_all]
    at = MS + n_all + num_dir * hid
    g = work[at:at + batch * gh]
    at += batch * gh
    h, c = work[at:at + batch * hid], work[at + batch * hid:at + 2 * batch * hid]
    tmp = work[at + 2 * batch * hid:at + 2 * batch * hid + hid]
    if lens.size:
        _check_lens(lens, seq, y)
    _project(x, wp, xw, ws, seq * batch, input_size, n_all)
    _fold_bias(b, bias, gh, num_dir, gh)
    peep = p.size > 0
    rsize = _panels(gh, hid)
    for d in range(num_dir):
        backward = reverse or d == 1
        _load_state(h0, h, d, num_dir, batch, hid, layout)
        _load_state(c0, c, d, num_dir, batch, hid, layout)
        rd = rp[d * rsize:(d + 1) * rsize]
        pi, po, pf = 3 * d * hid, (3 * d + 1) * hid, (3 * d + 2) * hid
        a_gate, a_cell, a_out = 3 * d, 3 * d + 1, 3 * d + 2
        fast_out = int(acts[a_out, 0]) == TANH
        fused = _defaults(acts, a_gate, 3, clip) and not peep and not input_forget
        for s in range(seq):
            small_gemm(h, batch, hid, rd, g, gh, ws)
            for bb in range(batch):
                t, xrow, yrow = _row(lens, s, bb, seq, backward, batch, layout, num_dir, d)
                if t < 0:
                    continue
                go, ho, xo, bo = bb * gh, bb * hid, xrow * n_all + d * gh, d * gh
                gi, gout, gf, gc = go, go + hid, go + 2 * hid, go + 3 * hid
                if fused:
                    sigmoid_input(g, go, xw, xo, bias, bo, 3 * hid)
                    tanh_input(g, gc, xw, xo + 3 * hid, bias, bo + 3 * hid, hid)
                    lstm_state(g, go, c, h, ho, hid)
                    if y.size:
                        copy_range(y, yrow * hid, h, ho, hid)
                    continue
                add_input(g, go, xw, xo, bias, bo, gh)
                if peep:
                    add_peephole(g, gi, p, pi, c, ho, hid)
                    add_peephole(g, gf, p, pf, c, ho, hid)
                    clip_range(g, gi, hid, clip)
                    clip_range(g, gf, 2 * hid, clip)
                    act_range(g, gi, hid, acts, a_gate)
                    act_range(g, gf, hid, acts, a_gate)
                else:  # i, o, f at once
                    clip_range(g, go, gh, clip)
                    act_range(g, go, 3 * hid, acts, a_gate)
                act_range(g, gc, hid, acts, a_cell)
                if input_forget:
                    one_minus(g, gf, gi, hid)
                lstm_cell(g, gi, gf, gc, c, ho, hid)
                if peep:
                    add_peephole(g, gout, p, po, c, ho, hid)
                    clip_range(g, gout, hid, clip)
                    act_range(g, gout, hid, acts, a_gate)
                if fast_out:
                    lstm_hidden_tanh(g, gout, c, h, ho, hid)
                else:
                    copy_range(tmp, 0, c, ho, hid)
                    act_range(tmp, 0, hid, acts, a_out)
                    lstm_hidden(g, gout, tmp, h, ho, hid)
                if y.size:
                    copy_range(y, yrow * hid, h, ho, hid)
        _store_state(h, yh, lens, d, num_dir, batch, hid, layout)
        _store_state(c, yc, lens, d, num_dir, batch, hid, layout)


def act_table(acts) -> np.ndarray:
    """[[(code, alpha, beta), ...] per direction] -> float64 [D * k, 3] (read-only) for the loops."""
    out = np.array([[c, a, b] for per in acts for c, a, b in per], np.float64).reshape(-1, 3)
    out.flags.writeable = False
    return out
