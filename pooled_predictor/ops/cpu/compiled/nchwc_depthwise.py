"""Depthwise 2-D convolution in the blocked layout NCHW8c, bias and activation fused (float32).

    Y[n, c, oh, ow] = act(B[c] + sum_{i, j} W[c, 0, i, j] * X[n, c, oh*sh + i*dh - ph, ow*sw + j*dw - pw])

(ONNX Conv, section "Conv", with group == C == M; X out of range reads 0.)
X and Y are stored NCHW8c (ops/layouts.py): physical (N, C/8, H, W, 8), the 8
channels of a block contiguous, so one <8 x float> vector (one AVX2 register)
holds one pixel of 8 channels, and a depthwise conv is vector arithmetic
with no shuffles: MLAS's NCHWc depthwise kernel (onnxruntime,
MlasConvDepthwiseFloatKernel) does the same. W is packed once (pack_depthwise)
as (C/8, KH*KW, 8): one weight vector per tap.

The micro-kernel (LLVM IR through numba.extending.intrinsic, as compiled/gemm.py)
computes a tile of up to RW output pixels: RW vector accumulators stay in
registers over all the taps; per tap, one weight-vector load and RW
multiplies and adds of input vectors (Zen 1 issues a 256-bit multiply and a
256-bit add a cycle, the throughput of its one FMA). Variants: the kernel
row's columns written out for KW 3 and 5 (else a loop over the taps), and,
where stride == dilation along W (pixel r's tap j reads pixel r + j's input),
each input vector of a kernel row loaded once for all its taps. Interior
pixels (every tap in range) go in tiles along the output row. The border
columns of the interior rows go in tiles down the column (x and y pitch of
a row), so they too are RW independent chains, not one latency-bound chain
per pixel; the top and bottom rows' border pixels go one at a time. Taps off
the input are never visited: each call is given its valid kernel rows and
columns; an output whose whole window is padding gets B. B is added after
the taps, then the activation, in registers before the store: epilogue.py's
float32 operations in its order (no contraction), so the same bits as
epilogue.activate_range on the stored output. No scratch, no allocation.

Numerics: each output is a sequential float32 sum of its in-range taps'
products in (kh, kw) order, one rounding per multiply and per add (no FMA
contraction), then + B: the operations and order of the NCHW kernel
(depthwise.py; a tap in the padding adds w * 0 there, which changes no
value), so choosing the layout never changes a bit. The error of a
sequential sum of KH*KW products: |error| <= KH*KW * 2^-24 * sum|W * X| +
O(2^-48) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2).

Measured (one thread, AMD EPYC Zen 1, benchmarks/depthwise_kernels.py, input
already NCHW8c, MobileNetV2's with Clip(0, 6) fused, multiply then add): time
over onnxruntime's one-node session (its NCHWc reorders included) 0.22x..0.68x,
MobileNetV2's 17 layers 1.98 ms against 4.03 ms (0.49x; our NCHW kernel 4.40
ms); over onnxruntime's conv inside its blocked chain (two convs less one,
stride 1) 0.98x..1.18x from 112x112 to 7x7 (576ch 14x14: 1.7x in that run),
0.87x..0.95x on PP-OCR det's 5x5 layers.
Callers pass p0, p1 as Python floats (np.float32 scalars cost numba's
dispatcher 2 us a call).

Widths: a template over LANES (compiled/widths.py): imported as itself, NCHW8c as above;
lanes16/nchwc_depthwise.py is the same source at LANES = 16, NCHW16c (one <16 x float> a pixel,
packed weights (M/16, KH*KW, 16)): read every 8 above as BLOCK = LANES. The same operations per
channel, so the same bits at either width.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import epilogue as ep
from .gemm import _splat, vector_phis, vector_type
from .jit import njit
from .widths import lanes_here

LANES = lanes_here(globals())  # 8 imported as itself; 16 as lanes16/nchwc_depthwise.py (compiled/widths.py)
BLOCK = LANES  # channels per block: one vector (AVX2's ymm at 8, AVX-512's zmm at 16)
RW = 8  # output pixels per micro-tile (RW accumulators of the 16 ymm registers; 6 and 12 measured no better)

_V8 = vector_type(LANES)  # <LANES x float>
_I64 = ir.IntType(64)


def pack_depthwise(w: np.ndarray) -> np.ndarray:
    """W (M, 1, KH, KW) float32 -> (M/8, KH*KW, 8), read-only: [cb, kh*KW + kw, l] = W[cb*8 + l, 0, kh, kw].

    Args:
        w: ONNX Conv weight of a depthwise conv (group == C == M), M a multiple of 8.
    Raises:
        ValueError: not (M, 1, KH, KW) or M not a multiple of 8.
    """
    w = np.asarray(w, np.float32)
    if w.ndim != 4 or w.shape[1] != 1 or w.shape[0] % BLOCK:
        raise ValueError(f"pack_depthwise: (M, 1, KH, KW) with M % 8 == 0 expected, got {w.shape}")
    m, _, kh, kw = w.shape
    out = np.ascontiguousarray(w.reshape(m // BLOCK, BLOCK, kh * kw).transpose(0, 2, 1))
    out.flags.writeable = False
    return out


def _activate(builder, vals, code, p0, p1):
    """epilogue.activate on each <8 x float> of vals, by the runtime activation code: the same float32
    operations in the same order (fmul, fadd apart: no contraction; compares false on NaN), so the
    same bits as epilogue.activate_range on the stored row, without its pass over memory."""
    fn = builder.function
    f = lambda v: ir.Constant(_V8, [float(v)] * LANES)  # noqa: E731
    zero, one, sixth, half = f(0.0), f(1.0), f(ep.SIXTH), f(ep.HALF)
    a, b = _splat(builder, p0, LANES), _splat(builder, p1, LANES)

    def lt(x, y, then, other):  # x < y ? then : other
        return builder.select(builder.fcmp_ordered("<", x, y), then, other)

    def clamp01(t):
        t = lt(t, zero, zero, t)
        return lt(one, t, one, t)

    def relu(v):
        t = builder.fadd(v, zero)  # -0 -> +0, as epilogue does
        return lt(t, zero, zero, t)

    def clip(v):
        t = lt(v, a, a, v)
        return lt(b, t, b, t)

    rules = {
        ep.RELU: relu,
        ep.CLIP: clip,
        ep.HARD_SIGMOID: lambda v: clamp01(builder.fadd(builder.fmul(v, a), b)),
        ep.HARD_SWISH: lambda v: builder.fmul(v, clamp01(builder.fadd(builder.fmul(v, sixth), half))),
        ep.LEAKY_RELU: lambda v: builder.select(builder.fcmp_ordered(">=", v, zero), v, builder.fmul(v, a)),
    }
    start = builder.block
    merge = fn.append_basic_block("act_done")
    switch = builder.switch(code, merge)
    results = []
    for k, rule in rules.items():
        bb = fn.append_basic_block(f"act{k}")
        switch.add_case(ir.Constant(code.type, k), bb)
        builder.position_at_end(bb)
        results.append(([rule(v) for v in vals], builder.block))
        builder.branch(merge)
    builder.position_at_end(merge)
    return vector_phis(builder, len(vals), (list(vals), start), *results)


def _make_micro(width: int, unroll: int = 0, shared: bool = False):
    """The micro-kernel of a tile of `width` output pixels (8 channels each); with `unroll`, the
    variant whose kernel rows have `unroll` columns (== cols), written out (no column loop); with
    `shared` too, the variant for x_col == x_pix (stride == dilation along W: pixel r's tap j reads
    pixel r + j's input), which loads each input vector of a kernel row once for all its taps
    (width + unroll - 1 loads, not width * unroll).

    micro(x, x_off, w, w_off, b, b_off, y, y_off, rows, cols, x_col, x_row, w_row, x_pix, y_pix, act, p0, p1):
    y[y_off + r*y_pix : +8] = sum over taps (i < rows, j < cols) in order of
    w[w_off + i*w_row + 8j : +8] * x[x_off + i*x_row + j*x_col + r*x_pix : +8], then + b[b_off : +8],
    for r < width (flat offsets in floats into the arrays' data). rows * cols == 0: y = b.
    """

    @intrinsic
    def micro(typingctx, x, x_off, w, w_off, b, b_off, y, y_off, rows, cols, x_col, x_row, w_row, x_pix, y_pix,
              act, p0, p1):
        sig = types.void(x, x_off, w, w_off, b, b_off, y, y_off, rows, cols, x_col, x_row, w_row, x_pix, y_pix,
                         act, p0, p1)

        def codegen(context, builder, signature, args):
            xa, xo, wa, wo, ba, bo, ya, yo, rows_v, cols_v, xcol, xrow, wrow, xpix, ypix, act_v, p0_v, p1_v = args

            def data(i, value):
                return context.make_array(signature.args[i])(context, builder, value).data

            c = lambda v: ir.Constant(_I64, v)  # noqa: E731
            vec = lambda p: builder.bitcast(p, _V8.as_pointer())  # noqa: E731
            xptr, wptr = builder.gep(data(0, xa), [xo]), builder.gep(data(2, wa), [wo])
            bvec = builder.load(vec(builder.gep(data(4, ba), [bo])), align=4)
            yptr = builder.gep(data(6, ya), [yo])
            fn = builder.function
            # unrolled: one iteration per kernel row; else one per tap
            n_taps = rows_v if unroll else builder.mul(rows_v, cols_v)
            # wrapping to the next kernel row: x and w move by a row less the (cols - 1) column steps taken
            cols1 = builder.sub(cols_v, c(1))
            x_wrap = builder.sub(xrow, builder.mul(cols1, xcol))
            w_wrap = builder.sub(wrow, builder.mul(cols1, c(BLOCK)))
            entry = builder.block
            loop_bb = fn.append_basic_block("taps")
            done_bb = fn.append_basic_block("taps_done")
            zero = ir.Constant(_V8, [0.0] * LANES)
            builder.cbranch(builder.icmp_signed(">", n_taps, c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            t, j = builder.phi(_I64), builder.phi(_I64)
            xp, wp = builder.phi(_I64), builder.phi(_I64)
            accs = vector_phis(builder, width, (zero, entry))
            for p, v in ((t, c(0)), (j, c(0)), (xp, c(0)), (wp, c(0))):
                p.add_incoming(v, entry)
            new = accs
            xrow_ptr = builder.gep(xptr, [xp])
            loaded = {}  # shared: input vector q of the kernel row, q = r + j

            def x_at(r, jj):
                if shared:
                    if r + jj not in loaded:
                        loaded[r + jj] = builder.load(vec(builder.gep(xrow_ptr, [builder.mul(xpix, c(r + jj))])),
                                                      align=4)
                    return loaded[r + jj]
                off = builder.add(builder.mul(xcol, c(jj)), builder.mul(xpix, c(r)))
                return builder.load(vec(builder.gep(xrow_ptr, [off])), align=4)

            for jj in range(max(1, unroll)):  # the taps of this iteration, in (kh, kw) order
                wv = builder.load(vec(builder.gep(wptr, [builder.add(wp, c(BLOCK * jj))])), align=4)
                # acc + w * x, two roundings (no contraction): the NCHW kernel's (depthwise.py) bits
                new = [builder.fadd(new[r], builder.fmul(wv, x_at(r, jj))) for r in range(width)]
            t1, j1 = builder.add(t, c(1)), builder.add(j, c(1))
            if unroll:  # the next kernel row
                j.add_incoming(c(0), loop_bb)
                xp.add_incoming(builder.add(xp, xrow), loop_bb)
                wp.add_incoming(builder.add(wp, wrow), loop_bb)
            else:
                wrap = builder.icmp_signed("==", j1, cols_v)
                j.add_incoming(builder.select(wrap, c(0), j1), loop_bb)
                xp.add_incoming(builder.add(xp, builder.select(wrap, x_wrap, xcol)), loop_bb)
                wp.add_incoming(builder.add(wp, builder.select(wrap, w_wrap, c(BLOCK))), loop_bb)
            t.add_incoming(t1, loop_bb)
            for a, v in zip(accs, new):
                a.add_incoming(v, loop_bb)
            builder.cbranch(builder.icmp_signed("<", t1, n_taps), loop_bb, done_bb)
            builder.position_at_end(done_bb)
            final = vector_phis(builder, width, (zero, entry), (new, loop_bb))  # phis lead the block
            out = _activate(builder, [builder.fadd(ph, bvec) for ph in final], act_v, p0_v, p1_v)  # B, then act
            for r, v in enumerate(out):
                builder.store(v, vec(builder.gep(yptr, [builder.mul(ypix, c(r))])), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return micro


_ARGS = "x, x_off, w, w_off, b, b_off, y, y_off, rows, cols, x_col, x_row, w_row, x_pix, y_pix, act, p0, p1"


def _dispatch(widest: int, unroll: int = 0, shared: bool = False, narrowest: int = 1):
    """A numba function calling the micro-kernel of `width` (narrowest..widest) pixels (the caller
    never passes a width below narrowest)."""
    scope = {f"micro{r}": _make_micro(r, unroll, shared) for r in range(narrowest, widest + 1)}
    lines = [f"def tile({_ARGS}, width):"]
    for r in range(widest, narrowest - 1, -1):
        lines.append(f"    {'if' if r == widest else 'elif'} width == {r}:" if r > narrowest else "    else:")
        lines.append(f"        micro{r}({_ARGS})")
    exec("\n".join(lines), scope)  # noqa: S102 -- generated dispatch over the generated kernels
    return njit(nogil=True, cache=False, error_model="numpy", inline="always")(scope["tile"])


UNROLLED_MIN = 4
"""The narrowest interior tile the written-out variants (_tile3, _tile5, _tile3s, _tile5s) take; narrower
ones go to the tap loop (_tile: the same operations in the same order, so the same bits). Interior tiles
are 4 to 8 pixels wide wherever a row's interior is 4 or more (n_tiles below): 1 to 3 only on planes 5
pixels wide or less, where a tile's taps cost little either way. Those 12 micro-kernels of the 41 were
a third of depthwise_nchwc's compile, and of its copy inside nchwc_chain's (issue 31: 7.5 -> 4.9 s of
CPU without the 5-column variants, measured)."""

_tile = _dispatch(RW)
_pixel = _make_micro(1)  # the border pixels of the top and bottom rows
# interior tiles of 3- and 5-column kernels (3x3, 5x5): the columns written out
_tile3, _tile5 = _dispatch(RW, 3, narrowest=UNROLLED_MIN), _dispatch(RW, 5, narrowest=UNROLLED_MIN)
# and stride == dilation along W
_tile3s, _tile5s = _dispatch(RW, 3, True, UNROLLED_MIN), _dispatch(RW, 5, True, UNROLLED_MIN)

_f4, _i8 = types.float32, types.int64
_R5, _W5 = types.Array(_f4, 5, "C", readonly=True), types.Array(_f4, 5, "C")
_R3, _R1 = types.Array(_f4, 3, "C", readonly=True), types.Array(_f4, 1, "C", readonly=True)
SIGNATURE = types.void(_R5, _R3, _R1, _W5, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _i8, _f4, _f4)


@njit(_i8(_i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _first_tap(o, s, d, p):
    """The first kernel index k with o*s + k*d - p >= 0."""
    start = o * s - p
    if start >= 0:
        return 0
    return -start if d == 1 else (-start + d - 1) // d  # no division in the common case (a 64-bit idiv: ~40 cycles)


@njit(_i8(_i8, _i8, _i8, _i8, _i8, _i8), nogil=True, cache=True, error_model="numpy")
def _end_tap(o, s, d, p, size, k):
    """One past the last kernel index k' < k with o*s + k'*d - p < size (at most k)."""
    start = o * s - p
    if start >= size:
        return 0
    return min(k, size - start if d == 1 else (size - start + d - 1) // d)


@njit(SIGNATURE, nogil=True, cache=True, error_model="numpy")
def depthwise_nchwc(x, wp, b, out, kh, kw, sh, sw, dh, dw, ph, pw, act, p0, p1):
    """out = act(depthwise_conv(x, W) + b), NCHW8c in and out (NCHW16c at 16 lanes: read 8 as BLOCK).

    Args:
        x: (N, CB, H, W, 8) float32, C-contiguous (read-only view is fine).
        wp: (CB, KH*KW, 8) float32, pack_depthwise(W).
        b: (CB*8,) float32 bias (zeros when the node has none).
        out: (N, CB, OH, OW, 8) float32, C-contiguous; OH, OW define the end padding.
        kh, kw / sh, sw / dh, dw / ph, pw: kernel size, strides, dilations, pads_begin (rows, columns).
        act, p0, p1: activation code and parameters (epilogue.py).
    """
    n_b, cb_n, h, wd = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    oh_n, ow_n = out.shape[2], out.shape[3]
    of = out.reshape(out.size)
    x_col, x_row, x_pix, w_row = dw * BLOCK, dh * wd * BLOCK, sw * BLOCK, kw * BLOCK
    row_len = ow_n * BLOCK
    # interior columns: every kernel column in range
    ow_lo = (pw + sw - 1) // sw
    ow_hi = min(ow_n, (wd - 1 + pw - (kw - 1) * dw) // sw + 1)
    n_left = min(ow_lo, ow_n)  # left border columns [0, n_left), right ones [ow_hi, ow_n)
    if ow_hi < n_left:
        ow_hi = n_left
    # the interior in n_tiles tiles of nearly equal widths (at most RW): t_width, the first t_wider one more
    # (divisions here, once: a 64-bit idiv per tile cost 40 ns per output row)
    n_tiles = max(0, (ow_hi - ow_lo + RW - 1) // RW)
    t_width = (ow_hi - ow_lo) // n_tiles if n_tiles else 0
    t_wider = (ow_hi - ow_lo) - t_width * n_tiles
    # interior rows: every kernel row in range
    oh_lo = min(oh_n, (ph + sh - 1) // sh)
    oh_hi = min(oh_n, (h - 1 + ph - (kh - 1) * dh) // sh + 1)
    if oh_hi < oh_lo:
        oh_hi = oh_lo
    x_down = sh * wd * BLOCK  # x's step from one output row to the next
    for n in range(n_b):
        for cb in range(cb_n):
            x_plane = ((n * cb_n + cb) * h) * wd * BLOCK
            y_plane = ((n * cb_n + cb) * oh_n) * row_len
            w0, b0 = cb * kh * kw * BLOCK, cb * BLOCK
            # the border columns of the interior rows first, as tiles of pixels down a column: RW independent
            # chains of multiply-adds (a pixel at a time, its one chain's latency would bound it)
            for k in range(n_left + ow_n - ow_hi):
                ow = k if k < n_left else ow_hi + k - n_left
                j0 = _first_tap(ow, sw, dw, pw)
                j1 = _end_tap(ow, sw, dw, pw, wd, kw)
                cols = max(0, j1 - j0)
                iw = ow * sw + j0 * dw - pw if cols else 0
                oh = oh_lo
                while oh < oh_hi:
                    width = min(RW, oh_hi - oh)
                    _tile(x, x_plane + ((oh * sh - ph) * wd + iw) * BLOCK, wp, w0 + j0 * BLOCK, b, b0, of,
                          y_plane + oh * row_len + ow * BLOCK, kh, cols, x_col, x_row, w_row, x_down, row_len,
                          act, p0, p1, width)
                    oh += width
            for oh in range(oh_n):
                i0 = _first_tap(oh, sh, dh, ph)
                i1 = _end_tap(oh, sh, dh, ph, h, kh)
                rows = max(0, i1 - i0)
                ih = oh * sh + i0 * dh - ph
                x_r = x_plane + ih * wd * BLOCK if rows else x_plane
                y_r = y_plane + oh * row_len
                w_r = w0 + i0 * w_row
                edge = oh < oh_lo or oh >= oh_hi  # the border pixels of this row not done above
                for k in range(n_left + ow_n - ow_hi if edge else 0):  # its border pixels, one at a time
                    ow = k if k < n_left else ow_hi + k - n_left
                    j0 = _first_tap(ow, sw, dw, pw)
                    j1 = _end_tap(ow, sw, dw, pw, wd, kw)
                    cols = max(0, j1 - j0)
                    iw = ow * sw + j0 * dw - pw if cols and rows else 0
                    _pixel(x, x_r + iw * BLOCK, wp, w_r + j0 * BLOCK, b, b0, of, y_r + ow * BLOCK, rows, cols,
                           x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1)
                ow = ow_lo
                for t in range(n_tiles):  # interior
                    width = t_width + 1 if t < t_wider else t_width
                    iw = ow * sw - pw if rows else 0
                    if width < UNROLLED_MIN:
                        _tile(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                              x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    elif kw == 3 and sw == dw:
                        _tile3s(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                                x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    elif kw == 5 and sw == dw:
                        _tile5s(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                                x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    elif kw == 3:
                        _tile3(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                               x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    elif kw == 5:
                        _tile5(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                               x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    else:
                        _tile(x, x_r + iw * BLOCK, wp, w_r, b, b0, of, y_r + ow * BLOCK, rows, kw,
                              x_col, x_row, w_row, x_pix, BLOCK, act, p0, p1, width)
                    ow += width
