"""Per-tensor QuantizeLinear / DequantizeLinear between float32 and 8 bits, in one pass each.

    quantize:   y = saturate(rint(x / scale) + zp)     (float32 division, round half to even)
    dequantize: y = float32(x - zp) * scale            (the difference exact, one float32 product)

The same arithmetic as ops/cpu/quantize.py's numpy kernels (the tested reference)
for float32 x and a float32 per-tensor scale, in one vectorized loop instead of
numpy's five passes. The clamp is applied in float before the rounding: its bounds
(the type's range less zp) are integers, so clamping first changes nothing (and
keeps the conversion in range).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .jit import njit
from .qgemm import signed

_F1 = types.Array(types.float32, 1, "C")
_R1F = types.Array(types.float32, 1, "C", readonly=True)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def saturate_code(v, lo, hi):
    """saturate(rint(v)) as int32: float32 v, integer-valued float32 bounds lo <= hi (|lo|, |hi| < 2^24).
    Equal to min(max(rint(v), lo), hi) for every v but NaN (lo here: onnxruntime's cvtps2dq then saturating
    packs give lo too). Written for LLVM's x86 back end, which emits MLAS's sequence from it: maxps / minps
    into [lo - 1, hi + 1] (int32's range for the conversion; not to [lo, hi]: a bound of 0, as uint8's lo,
    turns the select into a compare and a mask), one cvtps2dq (fptosi of llvm.rint folds into it) and the
    saturating packs (vpackssdw, vpackuswb: the int32 clamp to [lo, hi] is their pattern).
    min(max(rint(v), lo), hi) then int32 took vroundps, two compares and masks, cvttps2dq and a mask
    before the packs: QLinearAdd ran 1.5x onnxruntime's time on AVX2 code, level with it this way."""
    one = np.float32(1.0)
    v = v if v > lo - one else lo - one
    v = v if v < hi + one else hi + one
    return min(max(np.int32(np.rint(v)), np.int32(lo)), np.int32(hi))


@njit([types.void(_R1F, types.Array(t, 1, "C"), types.float32, types.int64) for t in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def quantize_f32(x, y, scale, zp):
    """y = saturate(rint(x / scale) + zp) over flat arrays of equal size; y uint8 or int8."""
    lo = np.float32(-128.0 if signed(y) else 0.0) - np.float32(zp)
    hi = np.float32(127.0 if signed(y) else 255.0) - np.float32(zp)
    z = np.int32(zp)
    for i in range(np.uint64(x.size)):
        y[i] = saturate_code(x[i] / scale, lo, hi) + z


@njit([types.void(types.Array(t, 1, "C", readonly=True), _F1, types.float32, types.int64)
       for t in (types.uint8, types.int8)], nogil=True, cache=True, error_model="numpy")
def dequantize_f32(x, y, scale, zp):
    """y = float32(x - zp) * scale over flat arrays of equal size; x uint8 or int8."""
    z = np.int32(zp)
    for i in range(np.uint64(x.size)):
        y[i] = np.float32(np.int32(x[i]) - z) * scale


@njit([types.void(_R1F, types.Array(t, 1, "C"), types.float32, types.float64) for t in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def requantize_acc(acc, y, mult, zp):
    """y = saturate(rint(float32(acc * mult)) + zp) over flat arrays: exact integer sums held in float32 (ops/cpu/
    quantized.integer_product's float32 products) times a float32 multiplier, the product rounded to float32 (as
    onnxruntime's MlasRequantizeOutput and quantized._requantize's numpy passes)."""
    lo = np.float32(-128.0 if signed(y) else 0.0)
    hi = np.float32(127.0 if signed(y) else 255.0)
    z = np.float32(zp)
    for i in range(np.uint64(acc.size)):
        y[i] = saturate_code(np.rint(acc[i] * mult) + z, lo, hi)


@njit([types.void(types.Array(types.float32, 2, "C", readonly=True), types.Array(types.uint8, 1, "C"), types.float32,
                  types.int64)], nogil=True, cache=True, error_model="numpy")
def quantize_transpose(a, x, scale, zp):
    """x[k * M + m] = saturate(rint(a[m, k] / scale) + zp) as uint8, a (M, K) float32: A quantized (as
    DynamicQuantizeLinear does, for its scale and zero point) and transposed, K rows of M."""
    m_n, k_n = a.shape
    lo = np.float32(0.0) - np.float32(zp)
    hi = np.float32(255.0) - np.float32(zp)
    z = np.int32(zp)
    u = np.uint64
    for m in range(m_n):
        for k in range(k_n):
            x[u(k) * u(m_n) + u(m)] = saturate_code(a[m, k] / scale, lo, hi) + z


def _qadd_sig(t):
    a = types.Array(t, 1, "C", readonly=True)
    return types.void(a, a, types.Array(t, 1, "C"), types.float64, types.float64, types.float64)


@intrinsic
def fma_f32(typingctx, a, b, c):
    """float32 a * b + c rounded once (llvm.fma.f32: vfmadd where the host has FMA, which the loop
    vectorizer widens to 8 lanes on AVX2; libm's fmaf otherwise, the same result)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f4 = ir.FloatType()
        mod = builder.module
        fn = mod.globals.get("llvm.fma.f32") or ir.Function(mod, ir.FunctionType(f4, [f4, f4, f4]), "llvm.fma.f32")
        return builder.call(fn, list(args))

    return sig, codegen


@njit([_qadd_sig(types.uint8), _qadd_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_add_same(a, b, out, ra, rb, k):
    """out = saturate(rint(fma(a, ra, fma(b, rb, k)))) over flat arrays of one size and type.

    ra = float32(a_scale / c_scale), rb likewise, k = float32(c_zp - (ra a_zp + rb b_zp)) (as
    ops/cpu/quantized_contrib.qlinear_add computes them), each a float32 value given as float64.
    The two fused multiply-adds are float32 ones (fma_f32, each rounded once, as MLAS's
    qladd_avx2 kernel computes them), vectorized 8 lanes wide: the result is that kernel's
    (and the float64 numpy reference's, which rounds each exact float64 sum once to float32)
    bit for bit.
    """
    lo = np.float32(-128.0 if signed(out) else 0.0)
    hi = np.float32(127.0 if signed(out) else 255.0)
    ra32, rb32, k32 = np.float32(ra), np.float32(rb), np.float32(k)
    for i in range(np.uint64(out.size)):
        t = fma_f32(np.float32(b[i]), rb32, k32)
        v = fma_f32(np.float32(a[i]), ra32, t)
        out[i] = saturate_code(v, lo, hi)


def _qruns_sig(t):
    a = types.Array(t, 1, "C", readonly=True)
    f = types.float64
    return types.void(a, a, types.Array(t, 1, "C"), types.int64, types.int64, f, f, f, f)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _binary_runs(x, y, out, inner, op, c0, c1, c2, c3):
    lo = np.float32(-128.0 if signed(out) else 0.0)
    hi = np.float32(127.0 if signed(out) else 255.0)
    f0, f1, f2, f3 = np.float32(c0), np.float32(c1), np.float32(c2), np.float32(c3)
    u = np.uint64
    for r in range(u(out.size) // u(inner)):
        yv = np.float32(y[r % u(y.size)])
        xs, os = x[r * inner:(r + 1) * inner], out[r * inner:(r + 1) * inner]
        if op == 0:
            t = np.float32(yv * f1) + f2
            for j in range(u(inner)):
                v = fma_f32(np.float32(xs[j]), f0, t)
                os[j] = saturate_code(v, lo, hi)
        else:
            g = yv - f1
            for j in range(u(inner)):
                v = (np.float32(xs[j]) - f0) * g * f2 + f3
                os[j] = saturate_code(v, lo, hi)


def _qruns_io_sig(t):
    f = types.float64
    return types.void(types.Array(t, 1, "C"), types.Array(t, 1, "C", readonly=True), types.int64, types.int64,
                      f, f, f, f)


@njit([_qruns_io_sig(types.uint8), _qruns_io_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_binary_runs_inplace(io, y, inner, op, c0, c1, c2, c3):
    """qlinear_binary_runs with the output written over x (io): each run one slice read and written at the same
    index, so that LLVM vectorizes the loop (x and out as two views of one array fail its run-time overlap check
    and the loop runs scalar: 0.70 against 0.055 ms on 1.2M uint8, Zen 5)."""
    lo = np.float32(-128.0 if signed(io) else 0.0)
    hi = np.float32(127.0 if signed(io) else 255.0)
    f0, f1, f2, f3 = np.float32(c0), np.float32(c1), np.float32(c2), np.float32(c3)
    u = np.uint64
    for r in range(u(io.size) // u(inner)):
        yv = np.float32(y[r % u(y.size)])
        s = io[r * inner:(r + 1) * inner]
        if op == 0:
            t = np.float32(yv * f1) + f2
            for j in range(u(inner)):
                s[j] = saturate_code(fma_f32(np.float32(s[j]), f0, t), lo, hi)
        else:
            g = yv - f1
            for j in range(u(inner)):
                s[j] = saturate_code((np.float32(s[j]) - f0) * g * f2 + f3, lo, hi)


@njit([_qruns_sig(types.uint8), _qruns_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_binary_runs(x, y, out, inner, op, c0, c1, c2, c3):
    """QLinearAdd / QLinearMul where one operand, y, is constant along runs of `inner` elements of the
    output (a per-channel (C, 1, 1) operand, a scalar: inner = out.size) and the other, x, has the output's
    shape: out[r * inner + j] from x[r * inner + j] and y[r % y.size] (y repeated over a batch), flat arrays of
    one 8-bit type, inner > 1.

    op 0, QLinearAdd (c0 = x's ratio s_x / s_c, c1 = y's, c2 = k; ops/cpu/quantized_contrib.py): y's side folded
    first, as MLAS's qladd_avx2 folds a scalar operand: t = float32(float32(y c1) + c2) once a run, then
    saturate(rint(fma(x, c0, t))) (float32 fma, one rounding).
    op 1, QLinearMul (c0 = x's zero point, c1 = y's, c2 = float32(s_a s_b / s_c), c3 = c's zero point):
    saturate(rint(float32(float32((x - c0)(y - c1)) c2) + c3)) (the integer product exact in float32).
    Both the float32 operations of the numpy references', so their bits."""
    _binary_runs(x, y, out, inner, op, c0, c1, c2, c3)


def _requant_sig(tx, ty):
    return types.void(types.Array(tx, 2, "C", readonly=True), types.Array(ty, 2, "C"), types.int64,
                      types.float64, types.float64, types.float64, types.float64)


@njit([_requant_sig(tx, ty) for tx in (types.uint8, types.int8) for ty in (types.uint8, types.int8)],
      nogil=True, cache=True, error_model="numpy")
def requantize_columns(x, out, start, xz, xs, ys, yz):
    """out[r, start:start + J] = saturate(rint(float32(float32((x[r] - xz) xs) / ys)) + yz), x (R, J): a QLinearConcat
    input whose scale or zero point is not Y's, written into its columns of Y viewed (outer, rest) (ops/cpu/
    quantized_contrib.qlinear_concat). xs, ys: float32 values given as float64. The float32 product of the exact
    difference and the float32 division are the float64 reference's roundings (dequantize_f32, quantize_f32: one
    rounding each of an exact float64 product and a quotient of float32s), so its 256-entry table's bits, vectorized
    (5-20x numpy's table lookup on 1.2M bytes, Zen 5)."""
    lo = np.float32(-128.0 if signed(out) else 0.0)
    hi = np.float32(127.0 if signed(out) else 255.0)
    fz, fs, fy, fyz = np.float32(xz), np.float32(xs), np.float32(ys), np.float32(yz)
    j_n = x.shape[1]
    for r in range(x.shape[0]):
        src = x[r]
        dst = out[r, start:start + j_n]
        for j in range(j_n):
            v = ((np.float32(src[j]) - fz) * fs) / fy
            dst[j] = saturate_code(np.rint(v) + fyz, lo, hi)


def _lookup_sig(t):
    return types.void(types.Array(types.uint8, 1, "C", readonly=True), types.Array(t, 1, "C", readonly=True),
                      types.Array(t, 1, "C"))


@njit([_lookup_sig(t) for t in (types.uint8, types.int8, types.float32)], nogil=True, cache=True)
def lookup_bytes(x, table, y):
    """y[i] = table[x[i]]: flat 8-bit codes read as uint8 (a 256-entry table's index), y of table's type (the
    Lookup node, passes/lookup.py; QLinearSigmoid's and QLinearLeakyRelu's tables). One load, load, store an
    element (about 0.2 ns on Zen 5, numpy's take 0.56-0.9): not vectorized, as no generic vector operation
    indexes a table by lane."""
    for i in range(np.uint64(x.size)):
        y[i] = table[x[i]]


@njit(inline="always")
def _qbinary(op, a, b, f0, f1, f2, f3):
    """QLinearAdd (op 0: f0, f1 = A's and B's ratios, f2 = k; fma(a, f0, fma(b, f1, k)), each rounded once) or
    QLinearMul (op 1: f0, f1 = the zero points, f2 = the ratio, f3 = C's zero point) of two elements, before the
    rounding to an integer: qlinear_add_same's and qlinear_mul_same's float32 operations."""
    if op == 0:
        return fma_f32(a, f0, fma_f32(b, f1, f2))
    return (a - f0) * (b - f1) * f2 + f3


def _qrows_sig(t):
    a = types.Array(t, 1, "C", readonly=True)
    f = types.float64
    return types.void(a, a, types.Array(t, 1, "C"), types.int64, types.int64, types.boolean, types.int64, f, f, f, f)


@njit([_qrows_sig(types.uint8), _qrows_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_binary_rows(x, y, out, inner, mid, y_is_b, op, c0, c1, c2, c3):
    """QLinearAdd / QLinearMul where x has the output's shape and y rows of `inner` elements, each repeated over `mid`
    consecutive rows of the output (ops/cpu/quantized_contrib.rows_plan: a bias over the last axes, mid = every row;
    a mask repeated over the heads): out[r * inner + j] from x[r * inner + j] and y[(r // mid) * inner + j], y being
    B (y_is_b) or A; flat arrays of one 8-bit type. Neither operand is constant along the rows, so the numpy
    reference rounds as for one shape: _qbinary's operations, its bits."""
    lo = np.float32(-128.0 if signed(out) else 0.0)
    hi = np.float32(127.0 if signed(out) else 255.0)
    f0, f1, f2, f3 = np.float32(c0), np.float32(c1), np.float32(c2), np.float32(c3)
    u = np.uint64
    for r in range(u(out.size) // u(inner)):
        xs, os = x[r * inner:(r + 1) * inner], out[r * inner:(r + 1) * inner]
        yo = (r // u(mid)) * u(inner)
        ys = y[yo:yo + u(inner)]
        if y_is_b:
            for j in range(u(inner)):
                os[j] = saturate_code(_qbinary(op, np.float32(xs[j]), np.float32(ys[j]), f0, f1, f2, f3), lo, hi)
        else:
            for j in range(u(inner)):
                os[j] = saturate_code(_qbinary(op, np.float32(ys[j]), np.float32(xs[j]), f0, f1, f2, f3), lo, hi)


def _qrows_io_sig(t):
    f = types.float64
    return types.void(types.Array(t, 1, "C"), types.Array(t, 1, "C", readonly=True), types.int64, types.int64,
                      types.boolean, types.int64, f, f, f, f)


@njit([_qrows_io_sig(types.uint8), _qrows_io_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_binary_rows_inplace(io, y, inner, mid, y_is_b, op, c0, c1, c2, c3):
    """qlinear_binary_rows with the output written over x (io): each row one slice read and written at the same
    index, so that the loop vectorizes (qlinear_binary_runs_inplace)."""
    lo = np.float32(-128.0 if signed(io) else 0.0)
    hi = np.float32(127.0 if signed(io) else 255.0)
    f0, f1, f2, f3 = np.float32(c0), np.float32(c1), np.float32(c2), np.float32(c3)
    u = np.uint64
    for r in range(u(io.size) // u(inner)):
        s = io[r * inner:(r + 1) * inner]
        yo = (r // u(mid)) * u(inner)
        ys = y[yo:yo + u(inner)]
        if y_is_b:
            for j in range(u(inner)):
                s[j] = saturate_code(_qbinary(op, np.float32(s[j]), np.float32(ys[j]), f0, f1, f2, f3), lo, hi)
        else:
            for j in range(u(inner)):
                s[j] = saturate_code(_qbinary(op, np.float32(ys[j]), np.float32(s[j]), f0, f1, f2, f3), lo, hi)


def _qavg_sig(t):
    f = types.float32
    return types.void(types.Array(t, 3, "C", readonly=True), types.Array(t, 3, "C"),
                      types.Array(f, 2, "C", readonly=True), types.int64, types.int64, types.int64, types.int64,
                      types.int64, types.int64, f, f, f, f)


@njit([_qavg_sig(types.uint8), _qavg_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_average_pool2d(x, y, count, kh, kw, sh, sw, ph, pw, xs, xz, ys, yz):
    """QLinearAveragePool over 2-D planes: x (planes, H, W), y (planes, OH, OW), count (OH, OW) the float32
    divisor of each window. Each tap inside the input dequantized in float32 ((x - xz) xs, one rounding), the
    window summed in float32 in row-major tap order (taps in the padding add 0: no change), divided by its
    count, then q = rint(float32(float32(mean / ys) + yz)), saturated: the numpy reference's roundings, its bits."""
    lo = np.float32(-128.0 if signed(y) else 0.0)
    hi = np.float32(127.0 if signed(y) else 255.0)
    h_n, w_n = x.shape[1], x.shape[2]
    for c in range(x.shape[0]):
        for oh in range(y.shape[1]):
            for ow in range(y.shape[2]):
                total = np.float32(0.0)
                for i in range(kh):
                    ih = oh * sh - ph + i
                    if ih < 0 or ih >= h_n:
                        continue
                    for j in range(kw):
                        iw = ow * sw - pw + j
                        if 0 <= iw < w_n:
                            total += (np.float32(x[c, ih, iw]) - xz) * xs
                q = np.float32(np.float32(total / count[oh, ow]) / ys) + yz
                y[c, oh, ow] = saturate_code(q, lo, hi)


def _qmul_sig(t):
    a = types.Array(t, 1, "C", readonly=True)
    f = types.float64
    return types.void(a, a, types.Array(t, 1, "C"), f, f, f, f)


@njit([_qmul_sig(types.uint8), _qmul_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_mul_same(a, b, out, za, zb, ratio, zc):
    """QLinearMul over flat arrays of one size and 8-bit type: saturate(rint(float32(float32((a - za)(b - zb))
    ratio) + zc)), ratio = float32(s_a s_b / s_c): the numpy reference's float32 operations (the integer
    product exact in float32), so its bits and MLAS's qlmul's."""
    lo = np.float32(-128.0 if signed(out) else 0.0)
    hi = np.float32(127.0 if signed(out) else 255.0)
    fa, fb, fr, fc = np.float32(za), np.float32(zb), np.float32(ratio), np.float32(zc)
    for i in range(np.uint64(out.size)):
        v = (np.float32(a[i]) - fa) * (np.float32(b[i]) - fb) * fr + fc
        out[i] = saturate_code(v, lo, hi)


def _gap_sig(t):
    return types.void(types.Array(t, 2, "C", readonly=True), types.Array(t, 1, "C"), types.int64,
                      types.float32, types.int64)


@njit([_gap_sig(types.uint8), _gap_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_global_average_pool_rows(x, y, x_zp, mult, y_zp):
    """y[r] = saturate(rint(float32(sum_j x[r, j] - x_zp * J) * mult) + y_zp), x (R, J): each row one
    (image, channel)'s pixels (QLinearGlobalAveragePool, channels first; ops/cpu/quantized_contrib.py).
    The sum is exact (int64), converted to float32 once, multiplied in float32."""
    r_n, j_n = x.shape
    lo = -128 if signed(y) else 0
    hi = 127 if signed(y) else 255
    corr = np.int64(x_zp) * j_n
    for r in range(r_n):
        s = np.int32(0)
        for j in range(j_n):
            s += np.int32(x[r, j])
        v = np.int64(np.rint(np.float32(np.int64(s) - corr) * mult)) + y_zp
        y[r] = min(max(v, lo), hi)


def _qadd_io_sig(t):
    return types.void(types.Array(t, 1, "C"), types.Array(t, 1, "C", readonly=True), types.boolean, types.float64,
                      types.float64, types.float64)


@njit([_qadd_io_sig(types.uint8), _qadd_io_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_add_inplace(io, other, io_is_a, ra, rb, k):
    """qlinear_add_same with C written over A (io_is_a: io holds A, other B) or over B (io holds B, other A):
    one array read and written at the same index, which LLVM vectorizes (three arrays of which two are
    one fail its run-time overlap check, and the loop runs scalar: 7x slower)."""
    lo = np.float32(-128.0 if signed(io) else 0.0)
    hi = np.float32(127.0 if signed(io) else 255.0)
    ra32, rb32, k32 = np.float32(ra), np.float32(rb), np.float32(k)
    if io_is_a:
        for i in range(np.uint64(io.size)):
            t = fma_f32(np.float32(other[i]), rb32, k32)
            v = fma_f32(np.float32(io[i]), ra32, t)
            io[i] = saturate_code(v, lo, hi)
    else:
        for i in range(np.uint64(io.size)):
            t = fma_f32(np.float32(io[i]), rb32, k32)
            v = fma_f32(np.float32(other[i]), ra32, t)
            io[i] = saturate_code(v, lo, hi)


def _softmax_sig(t):
    return types.void(types.Array(t, 2, "C", readonly=True), types.Array(types.float32, 1, "C", readonly=True),
                      types.float32, types.int64, types.Array(t, 2, "C"), types.Array(types.float32, 1, "C"))


@njit([_softmax_sig(types.uint8), _softmax_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qlinear_softmax_rows(x, table, ys, zp, y, e):
    """QLinearSoftmax over the rows of x (ops/cpu/quantized_contrib.qlinear_softmax, the numpy reference,
    step for step): m = the row's maximum; e_j = table[x_j + 255 - m] (int8: table[byte(x_j + 127 - m)]);
    s = the float32 sum of e in MLAS's AVX2 order (quantized_contrib._row_sums_avx2: 8 lanes over blocks
    of 16, the tail in order, then the lanes one by one);
    y_j = saturate(rint(fma(e_j, float32(float32(1 / s) * ys), zp))).
    e: float32 workspace of a row's length."""
    r_n, d = x.shape
    lo = np.float32(-128.0 if signed(y) else 0.0)
    hi = np.float32(127.0 if signed(y) else 255.0)
    whole = d // 16 * 16
    zpf = np.float32(zp)
    lanes = np.empty(8, np.float32)
    for r in range(r_n):
        m = np.int32(x[r, 0])
        for j in range(d):
            m = max(m, np.int32(x[r, j]))
        if signed(x):
            for j in range(d):
                e[j] = table[(np.int32(x[r, j]) + 127 - m) & 0xFF]
        else:
            for j in range(d):
                e[j] = table[np.int32(x[r, j]) + 255 - m]
        for j in range(8):
            lanes[j] = np.float32(0.0)
        for b in range(0, whole, 16):
            for j in range(8):
                lanes[j] = lanes[j] + e[b + j]
            for j in range(8):
                lanes[j] = lanes[j] + e[b + 8 + j]
        total = np.float32(0.0)
        for i in range(whole, d):
            total = total + e[i]
        for j in range(8):
            total = total + lanes[j]
        scale = (np.float32(1.0) / total) * ys
        for j in range(d):
            v = fma_f32(e[j], scale, zpf)
            y[r, j] = saturate_code(v, lo, hi)
