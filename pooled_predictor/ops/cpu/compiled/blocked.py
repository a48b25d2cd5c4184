"""Spatial kernels over NCHW8c arrays: the mean over the pixels, nearest-neighbour resampling.

pixel_mean (GlobalAveragePool, ReduceMean over H, W):

    y[r, l] = scale * sum_p x[r, p, l]    (x viewed as (rows, P, 8): rows = N * C/8)

summed in exactly the order of compiled/rowreduce.py's sum_rows over the NCHW
row of channel (r, l) -- blocks of 256 pixels, each as even and odd 8-pixel
vectors into two float32 accumulators per pixel offset, their lanes added
pairwise ((0+4)+(2+6))+((1+5)+(3+7)), the block sums, the last P % 8 values
and the scale in float64 -- eight channels at a time: the same bits as the
NCHW kernels, so choosing a layout never changes a result.

nearest (Resize mode "nearest" over H and W, the index tables of ops/cpu/resize.py):

    y[r, oh, ow, l] = x[r, ih[oh], iw[ow], l]    (rows = N * C/8): one vector copy per pixel.

Widths: a template over LANES (compiled/widths.py): NCHW8c imported as itself, NCHW16c as
lanes16/blocked.py (<16 x float> per pixel; pixel_mean's 8-pixel groups unchanged, so the same
sums per channel): read the 8 channels of a block above as BLOCK = LANES.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir  # noqa: F401
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .gemm import vector_type
from .jit import njit
from .widths import lanes_here

LANES = lanes_here(globals())  # 8 imported as itself; 16 as lanes16/blocked.py (compiled/widths.py)
BLOCK = LANES  # channels per block
_V8 = vector_type(LANES)  # <LANES x float>: one pixel's block

_R1 = types.Array(types.float32, 1, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")


_D1 = types.Array(types.float64, 1, "C")


@intrinsic
def _block_sums(typingctx, x, off, nvec, dst):
    """dst[0:8] = the sums, per channel lane, of nvec 8-pixel vectors from x[off] (pixel-major, 8 channels
    a pixel), in rowreduce's order: vector j's pixel i into E[i] (j even) or O[i] (j odd), <8 x float>
    over the channels, then a_i = E_i + O_i and ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))."""
    sig = types.void(x, off, nvec, dst)

    def codegen(context, builder, signature, args):
        x_a, off_v, n_v, d_a = args
        xp = builder.bitcast(builder.gep(context.make_array(signature.args[0])(context, builder, x_a).data,
                                         [off_v]), _V8.as_pointer())
        dp = builder.bitcast(context.make_array(signature.args[3])(context, builder, d_a).data, _V8.as_pointer())
        zero = ir.Constant(_V8, [0.0] * LANES)
        acc = [cgutils.alloca_once_value(builder, zero) for _ in range(16)]  # E[0..7], O[0..7]
        c = lambda v: ir.Constant(n_v.type, v)  # noqa: E731

        def add(a, at):
            builder.store(builder.fadd(builder.load(a), builder.load(builder.gep(xp, [at]), align=4)), a)

        with cgutils.for_range(builder, builder.lshr(n_v, c(1))) as loop:
            first = builder.mul(loop.index, c(16))  # pixel 16 j: vector 2 j, then vector 2 j + 1
            for i in range(16):
                add(acc[i], builder.add(first, c(i)))
        with builder.if_then(builder.trunc(n_v, ir.IntType(1))):
            last = builder.mul(builder.sub(n_v, c(1)), c(8))
            for i in range(8):
                add(acc[i], builder.add(last, c(i)))
        a = [builder.fadd(builder.load(acc[i]), builder.load(acc[8 + i])) for i in range(8)]
        total = builder.fadd(builder.fadd(builder.fadd(a[0], a[4]), builder.fadd(a[2], a[6])),
                             builder.fadd(builder.fadd(a[1], a[5]), builder.fadd(a[3], a[7])))
        builder.store(total, dp, align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(types.void(_R1, _F1, types.int64, types.int64, types.float64, _F1, _D1), nogil=True, cache=True,
      error_model="numpy")
def pixel_mean(x, out, rows, p_n, scale, acc, tot):
    """out[r*8 + l] = float32(scale * sum_p x[(r*p_n + p)*8 + l]), r < rows, l < 8, in sum_rows' order
    (8: BLOCK).

    acc: (>= BLOCK,) float32 workspace (a block's sums); tot: (>= BLOCK,) float64 workspace.
    """
    n8 = p_n // 8 * 8  # pixels in groups of 8 (rowreduce's), at any BLOCK
    for r in range(rows):
        base = r * p_n * BLOCK
        for lane in range(BLOCK):
            tot[lane] = 0.0
        for b0 in range(0, n8, 256):
            _block_sums(x, base + b0 * BLOCK, min(256, n8 - b0) // 8, acc)
            for lane in range(BLOCK):
                tot[lane] += np.float64(acc[lane])
        for p in range(n8, p_n):
            for lane in range(BLOCK):
                tot[lane] += np.float64(x[base + p * BLOCK + lane])
        for lane in range(BLOCK):
            out[r * BLOCK + lane] = np.float32(tot[lane] * scale)


_I1 = types.Array(types.int64, 1, "C", readonly=True)


@intrinsic
def _copy_floats(typingctx, a, dst, src, n):
    """a[dst : dst + n] = a[src : src + n], ranges that do not overlap (llvm.memcpy). numba's slice
    assignment would do it, but compiles its shape-mismatch message with it (unicode formatting: nearest
    took 3.45 s of CPU to compile with it, 0.85 s with this, issue 31); an element loop from a to itself
    was 14-24% slower than the slice (LLVM left it scalar), this 6-36% faster (PP-OCR det's x2 shapes)."""
    sig = types.void(a, dst, src, n)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        cgutils.raw_memcpy(builder, builder.gep(data, [args[1]]), builder.gep(data, [args[2]]), args[3], 4)
        return context.get_dummy_value()

    return sig, codegen


@njit(types.void(_R1, _F1, _I1, _I1, types.int64, types.int64, types.int64), nogil=True, cache=True,
      error_model="numpy")
def nearest(x, out, ih, iw, rows, h, w):
    """out (rows, OH, OW, 8) flat = x (rows, h, w, 8) flat at rows ih (OH,) and columns iw (OW,)."""
    oh_n, ow_n = ih.size, iw.size
    row = ow_n * BLOCK
    for r in range(rows):
        for oh in range(oh_n):
            src = (r * h + ih[oh]) * w * BLOCK
            dst = (r * oh_n + oh) * row
            if oh > 0 and ih[oh] == ih[oh - 1]:  # a repeated row (upsampling): copy the one just written
                _copy_floats(out, dst, dst - row, row)
                continue
            for ow in range(ow_n):
                s = src + iw[ow] * BLOCK
                d = dst + ow * BLOCK
                for lane in range(BLOCK):
                    out[d + lane] = x[s + lane]


ADD, SUB, MUL, RSUB = 0, 1, 2, 3  # RSUB: s - x


def _make_rows(op: int):
    """An intrinsic rows(x, s, out, off, s_off, n): out[off + 8p + l] = x[off + 8p + l] (op) s[s_off + l],
    p < n, l < 8, one <8 x float> operation per pixel (numba's SLP vectorizer left it scalar)."""

    @intrinsic
    def rows(typingctx, x, s, out, off, s_off, n):
        sig = types.void(x, s, out, off, s_off, n)

        def codegen(context, builder, signature, args):
            x_a, s_a, o_a, off_v, s_off_v, n_v = args

            def ptr(i, a, at):
                data = context.make_array(signature.args[i])(context, builder, a).data
                return builder.bitcast(builder.gep(data, [at]), _V8.as_pointer())

            xp, op_, sv = ptr(0, x_a, off_v), ptr(2, o_a, off_v), builder.load(ptr(1, s_a, s_off_v), align=4)
            with cgutils.for_range(builder, n_v) as loop:
                v = builder.load(builder.gep(xp, [loop.index]), align=4)
                r = (builder.fadd(v, sv) if op == ADD else builder.fsub(v, sv) if op == SUB
                     else builder.fmul(v, sv) if op == MUL else builder.fsub(sv, v))
                builder.store(r, builder.gep(op_, [loop.index]), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return rows


_ROWS = [_make_rows(op) for op in (ADD, SUB, MUL, RSUB)]
_add_rows, _sub_rows, _mul_rows, _rsub_rows = _ROWS


@njit(types.void(_R1, _R1, _F1, types.int64, types.int64, types.int64, types.int64), nogil=True, cache=True,
      error_model="numpy")
def channel_op(x, s, out, rows, p_n, s_rows, op):
    """out[r, p, l] = x[r, p, l] (op) s[r % s_rows, l]: an NCHW8c array (rows, P, 8) with a per-channel
    vector (N or 1, C/8, 1, 1, 8), e.g. a squeeze-and-excitation scale. One float32 operation per element,
    as numpy's broadcast (op: ADD, SUB, MUL, RSUB = s - x)."""
    for r in range(rows):
        so, b = (r % s_rows) * BLOCK, r * p_n * BLOCK
        if op == MUL:
            _mul_rows(x, s, out, b, so, p_n)
        elif op == ADD:
            _add_rows(x, s, out, b, so, p_n)
        elif op == SUB:
            _sub_rows(x, s, out, b, so, p_n)
        else:
            _rsub_rows(x, s, out, b, so, p_n)


_UNROLLED_COLS = (1, 2, 3, 4)  # window widths whose columns _max_windows loads unrolled (the rest: a loop)


def _make_max_windows(nan_rule: bool):
    """_max_windows (nan_rule) or _max_windows_ordered (for an X without NaN)."""

    def max_windows(typingctx, x, x_off, rows, cols, x_row, x_col, x_step, y, y_off, n):
        return _max_windows_sig(nan_rule, x, x_off, rows, cols, x_row, x_col, x_step, y, y_off, n)

    max_windows.__name__ = "max_windows" if nan_rule else "max_windows_ordered"
    return intrinsic(max_windows)


def _max_windows_sig(nan_rule, x, x_off, rows, cols, x_row, x_col, x_step, y, y_off, n):
    """For each of n windows w: y[y_off + w * LANES : ... + LANES] = the lane-wise max of the rows x cols
    vectors at x[x_off + w * x_step + i * x_row + j * x_col], starting from -inf.

    combine(m, v) = select(v > m or v is NaN, v, m) keeps the first of equal maxima and the last NaN
    (NaN propagates, as np.maximum and pooling.py's _mx). That rule is associative, so any bracketing
    that keeps the taps' order gives the bits of one left-to-right scan: a window 1-4 columns wide
    loads a row's columns unrolled and combines them as a tree (depth 2, not a chain of 4), then
    combines the rows in order; wider windows scan their columns in a loop. No masked store.
    Without nan_rule, combine(m, v) = select(v > m, v, m), one vmaxps (its operands' order keeps the
    first of equal maxima, so +0 and -0 as the rule does): the same result wherever no tap is NaN
    (maxpool checks X first)."""
    sig = types.void(x, x_off, rows, cols, x_row, x_col, x_step, y, y_off, n)

    def codegen(context, builder, signature, args):
        x_a, x_off_v, rows_v, cols_v, x_row_v, x_col_v, x_step_v, y_a, y_off_v, n_v = args
        xp = builder.gep(context.make_array(signature.args[0])(context, builder, x_a).data, [x_off_v])
        yp = builder.gep(context.make_array(signature.args[7])(context, builder, y_a).data, [y_off_v])
        i64 = ir.IntType(64)
        vp = _V8.as_pointer()
        acc = cgutils.alloca_once(builder, _V8)

        def combine(m, v):
            take = builder.fcmp_ordered(">", v, m)
            if nan_rule:
                take = builder.or_(take, builder.fcmp_unordered("uno", v, v))
            return builder.select(take, v, m)

        def tree(vs):
            while len(vs) > 1:
                vs = [combine(vs[i], vs[i + 1]) for i in range(0, len(vs) - 1, 2)] + vs[len(vs) - len(vs) % 2:]
            return vs[0]

        def load(p, at):
            return builder.load(builder.bitcast(builder.gep(p, [at]), vp), align=4)

        with cgutils.for_range(builder, n_v) as wi:
            wp = builder.gep(xp, [builder.mul(wi.index, x_step_v)])
            builder.store(ir.Constant(_V8, [float("-inf")] * LANES), acc)
            done = builder.append_basic_block("max_windows.done")
            loop = builder.append_basic_block("max_windows.cols_loop")
            switch = builder.switch(cols_v, loop)
            for c in _UNROLLED_COLS:
                case = builder.append_basic_block(f"max_windows.cols{c}")
                switch.add_case(ir.Constant(i64, c), case)
                builder.position_at_end(case)
                with cgutils.for_range(builder, rows_v) as ri:
                    row = builder.gep(wp, [builder.mul(ri.index, x_row_v)])
                    taps = [load(row, builder.mul(ir.Constant(i64, j), x_col_v)) for j in range(c)]
                    builder.store(combine(builder.load(acc), tree(taps)), acc)
                builder.branch(done)
            builder.position_at_end(loop)
            with cgutils.for_range(builder, rows_v) as ri:
                row = builder.gep(wp, [builder.mul(ri.index, x_row_v)])
                with cgutils.for_range(builder, cols_v) as ci:
                    builder.store(combine(builder.load(acc), load(row, builder.mul(ci.index, x_col_v))), acc)
            builder.branch(done)
            builder.position_at_end(done)
            out = builder.gep(yp, [builder.mul(wi.index, ir.Constant(i64, LANES))])
            builder.store(builder.load(acc), builder.bitcast(out, vp), align=4)
        return context.get_dummy_value()

    return sig, codegen


_max_windows, _max_windows_ordered = _make_max_windows(True), _make_max_windows(False)


@njit(inline="always")
def _has_nan(x) -> bool:
    """Whether any element of x (float32) is a NaN: the largest magnitude's bits above +inf's (an integer
    max over the whole array, which vectorizes; no early exit)."""
    bits = x.view(np.uint32)
    top = np.uint32(0)
    for i in range(bits.size):
        top = max(top, bits[i] & np.uint32(0x7FFFFFFF))
    return top > np.uint32(0x7F800000)


ROWS_FIRST_BYTES = 1 << 20
"""_maxpool_rows_first's scratch at most (the column maxima of one block's input rows: 112 x 112 at 16 lanes is
0.8 MiB); larger images reduce each window whole (maxpool)."""


@njit(inline="always")
def _maxpool_rows_first(x, out, rows, h, oh_n, ow_n, kh, dh, ph, lowest, runs, run_n, j0s, j1s, w, sw, dw, pw):
    """maxpool's stride-1 rows for an X without NaN: each input row's column windows once (hp: h rows x OW
    pixels), then each output row the max of its kh rows of hp. Every input row serves up to kh output rows
    (3x3 stride 1: 4 vmaxps an output, not 8). The taps combine row by row, each row's columns first, as
    _max_windows brackets them: the same result (first of equal maxima). (Output rows in bands of a bounded
    scratch, or a ring of kh rows, ran 1.2-1.3x slower at 28 x 28.)"""
    hp = np.empty(h * ow_n * BLOCK, np.float32)
    for r in range(rows):
        for ih in range(h):
            row = (r * h + ih) * w
            for k in range(run_n):
                ow, ow_end = runs[k], runs[k + 1]
                j0, j1 = j0s[ow], j1s[ow]
                if j1 > j0:
                    _max_windows_ordered(x, (row + ow * sw - pw + j0 * dw) * BLOCK, 1, j1 - j0, 0, dw * BLOCK,
                                         sw * BLOCK, hp, (ih * ow_n + ow) * BLOCK, ow_end - ow)
        for oh in range(oh_n):
            base = oh - ph
            i0 = 0 if base >= 0 else (-base + dh - 1) // dh
            i1 = min(kh, (h - 1 - base) // dh + 1) if base <= h - 1 else 0
            for k in range(run_n):
                ow, ow_end = runs[k], runs[k + 1]
                o = ((r * oh_n + oh) * ow_n + ow) * BLOCK
                if i1 <= i0 or j1s[ow] <= j0s[ow]:
                    for i in range((ow_end - ow) * BLOCK):
                        out[o + i] = lowest
                    continue
                _max_windows_ordered(hp, ((base + i0 * dh) * ow_n + ow) * BLOCK, i1 - i0, 1, dh * ow_n * BLOCK, 0,
                                     BLOCK, out, o, ow_end - ow)


@njit(types.void(_R1, _F1, types.int64, types.int64, types.int64, types.int64, types.int64, types.int64,
                 types.int64, types.int64, types.int64, types.int64, types.int64, types.int64, types.int64,
                 types.float32), nogil=True, cache=True, error_model="numpy")
def maxpool(x, out, rows, h, w, oh_n, ow_n, kh, kw, sh, sw, dh, dw, ph, pw, lowest):
    """out (rows, OH, OW, 8) flat = the max of x (rows, h, w, 8) flat over each window's input taps
    (ONNX MaxPool, 2-D; padding never wins); a window with no input tap gets `lowest`. The columns'
    tap ranges are computed once per call (integer divisions), not once per output pixel, and grouped
    into runs of output columns with the same range (the left border, the interior, the right
    border): one _max_windows call a run.

    Where windows overlap enough that reading X once more pays (kh * kw >= 4 * sh * sw), X is first checked
    for NaN (_has_nan); without one, the windows reduce by one vmaxps a tap (_max_windows_ordered: the same
    result, since only a NaN tap tells the two rules apart), and at stride 1 along H each input row's column
    windows are reduced once and shared by the kh output rows that read it (_maxpool_rows_first, where its
    scratch fits ROWS_FIRST_BYTES). One thread, 16 lanes, Zen 5: GoogLeNet's 3x3 stride-1 pools 192 x 28 x 28
    60.9 -> 30.1 us, 480 x 14 x 14 38.6 -> 22.2, 832 x 7 x 7 16.3 -> 11.6 (Haswell code 71.4 -> 57.7, 49.0
    -> 43.5, 26.1 -> 23.6); ResNet-50's 3x3 stride-2 stem pool (2.25 taps an element) keeps the NaN rule,
    unchecked."""
    j0s = np.empty(ow_n, np.int64)
    j1s = np.empty(ow_n, np.int64)
    for ow in range(ow_n):
        left = ow * sw - pw
        j0s[ow] = 0 if left >= 0 else (-left + dw - 1) // dw
        j1s[ow] = min(kw, (w - 1 - left) // dw + 1) if left <= w - 1 else 0
    runs = np.empty(ow_n + 1, np.int64)  # runs[k] .. runs[k + 1]: output columns of one tap range
    run_n = 0
    for ow in range(ow_n):
        if ow == 0 or j0s[ow] != j0s[ow - 1] or j1s[ow] != j1s[ow - 1]:
            runs[run_n] = ow
            run_n += 1
    runs[run_n] = ow_n
    # Without NaN in X, one vmaxps a tap (_max_windows_ordered). Checking costs a pass over X, which pays where
    # windows overlap enough: at least 4 taps an input element (3x3 stride 1: 9; stride 2: 2.25, not checked)
    nan = kh * kw < 4 * sh * sw or _has_nan(x[:rows * h * w * BLOCK])
    if not nan and sh == 1 and kh > 1 and kw > 1 and 4 * h * ow_n * BLOCK <= ROWS_FIRST_BYTES:
        _maxpool_rows_first(x, out, rows, h, oh_n, ow_n, kh, dh, ph, lowest, runs, run_n, j0s, j1s, w, sw, dw, pw)
        return
    for r in range(rows):
        for oh in range(oh_n):
            base = oh * sh - ph
            i0 = 0 if base >= 0 else (-base + dh - 1) // dh
            i1 = min(kh, (h - 1 - base) // dh + 1) if base <= h - 1 else 0
            row = (r * h + base + i0 * dh) * w
            for k in range(run_n):
                ow, ow_end = runs[k], runs[k + 1]
                j0, j1 = j0s[ow], j1s[ow]
                o = ((r * oh_n + oh) * ow_n + ow) * BLOCK
                if i1 <= i0 or j1 <= j0:
                    for i in range((ow_end - ow) * BLOCK):
                        out[o + i] = lowest
                    continue
                if nan:
                    _max_windows(x, (row + ow * sw - pw + j0 * dw) * BLOCK, i1 - i0, j1 - j0, dh * w * BLOCK,
                                 dw * BLOCK, sw * BLOCK, out, o, ow_end - ow)
                else:
                    _max_windows_ordered(x, (row + ow * sw - pw + j0 * dw) * BLOCK, i1 - i0, j1 - j0, dh * w * BLOCK,
                                         dw * BLOCK, sw * BLOCK, out, o, ow_end - ow)
