"""8-bit integer GEMM with int32 accumulation and the requantization fused: Y = requant(W @ X + b).

    acc[m, p] = b[m] + sum_k W'[m, k] * X[k, p]                       (int32, exact)
    Y[m, p]   = saturate(rint(float32(acc[m, p]) * mult[m]) + y_zp)   (uint8 or int8)

W' = W - w_zero_point (per row) is a weight, packed once at build time as int16
pairs (pack_pairs); X is 8-bit (uint8 or int8) read through a table of row
offsets, pixels contiguous, as compiled/gemm.py's float GEMM reads it (an
indirect GEMM: a convolution's taps are rows at fixed offsets into the padded
input, no im2col); b holds the int32 bias with the input's zero point folded in
(b[m] = B[m] - x_zp * sum_k W'[m, k]: padding filled with x_zp then contributes
nothing, as (x_zp - x_zp) * W' would). mult[m] = x_scale * w_scale[m] / y_scale
in float32, as onnxruntime computes it (QLinearConv, QLinearMatMul); the
requantization is MLAS's (MlasRequantizeOutput): acc converted to float32,
multiplied in float32, clamped to the output type's range less y_zp, rounded half
to even (cvtps2dq under the default rounding mode; llvm.rint here), + y_zp.

The micro-kernel keeps a tile of R (1..MR) rows x 16 pixels in 2R <8 x i32>
accumulators. Per pair of k rows it loads 16 pixels of each row, widens them to
int16 and interleaves them, (x[k0, p], x[k1, p]) in each 32-bit lane, and for each
tile row multiplies them by the broadcast pair (W'[m, k0], W'[m, k1]) as int16 and
adds the pairs into int32: written with LLVM's generic vector operations (sext,
mul, even/odd shuffles, add), which its x86 back end selects as vpmaddwd (and
vpdpwssd where the CPU has AVX-VNNI / AVX512-VNNI). Every product is at most
255 * 255 in magnitude, so no sum saturates: the result is exact for any zero
points and either signedness. An exact int32 sum also needs K * 255 * 255 < 2^31
(K < 33000). On Zen 3 (AVX2) it reaches 65-90 GOPS on ResNet-50's layer shapes.

qgemm2d_sat is onnxruntime's u8 x s8 arithmetic on hosts without VNNI (ops/int8_arithmetic.py):

    acc[m, p] = b[m] + sum_j saturate_int16(W[m, 2j] X[2j, p] + W[m, 2j+1] X[2j+1, p])

uint8 X and int8 W (zero point 0) as they are. W is packed as quads of k (pack_quads: 4 int8 in
32 bits); each block of PB pixels of X is packed once (_pack16: the 4 rows of a quad interleaved,
4 bytes a pixel) and read by every row tile; a tile of MRS = 5 rows x 16 pixels per quad broadcasts the
row's 4 weights and multiplies them with the 2 X vectors. A row tile runs the block's whole 16-pixel
tiles in one call (_make_strip_sat: the tile loop in the micro-kernel, its set-up once a strip). The product
is written in generic IR (_sat_pairs: zext / sext, mul, add of the even and odd products, clamp to [-32768, 32767],
trunc to i16; then sext, mul by 16 ones loaded from memory, even + odd add), which LLVM's x86
back end selects as vpmaddubsw + vpmaddwd, MLAS's instruction pair (the ones must be loaded:
as a constant, instcombine folds the trunc / sext pair away and with it the vpmaddubsw match).
The last 1..COLS pixels of a whole row tile go the other way round (_make_cols: the tile's 5 output
channels in the lanes, each pixel's quad broadcast), one vpmaddubsw a pixel where a half tile takes 5.
On Zen 3 it reaches 90-140 GOPS on the same shapes, 1.4-1.7x qgemm2d. On a VNNI target (llvmlite,
cpu "alderlake" / "sapphirerapids") qgemm2d's IR becomes vpdpwssd; LLVM forms no vpdpbusd from
generic IR (a 4-product u8 x s8 sum into int32 stays vpmovzx / vpmovsx + vpmaddwd). There the same
quad kernels sum with vpdpbusd itself (exact: onnxruntime's arithmetic on a VNNI host), one
instruction for a lane's 4 products (_dot4; compiled/dots.py runs this source with DOT = "vpdpbusd",
and with "emulated", its exact sum in generic IR, for tests on any host); on a 16-lane AVX512-VNNI
target a whole tile's row is one <16 x i32> (WIDE: vpdpbusd on zmm). On Zen 5 (AVX512-VNNI) they
reach 550-650 GOPS at ResNet-50's shapes (390-460 with 256-bit vectors), 2.4-2.9x qgemm2d there.

WIDE strips go further: 4 or 3 tiles at a time (GROUPS: 20 or 15 zmm accumulators; one tile's 5 chains
of vpdpbusd left the unit waiting on its latency), the block's last partial tile in the strip with masked
stores, the requantization on 16 lanes at once (quantize.wide), the weights prefetched (W_PREFETCH) and
X packed 64 pixels a call (_pack64): 720-920 GOPS at ResNet-50's shapes on Zen 5. Where the output's
pixels fill 16-pixel tiles poorly (7 x 7: 49 pixels in 4 tiles) qgemm2d_chlanes puts 16 output channels
in the lanes instead (_make_chlanes).

Packing X costs 12-20% of a ResNet-50 3x3 layer's time on Zen 5 (a tile's quads gathered from 4 rows at
each of its taps: K x P bytes written, 9x the input). qconv_direct skips it for convolutions: the input's
phase planes with 4 channels interleaved a pixel (one uint32) are the B tiles already, quad j = (4
channels, tap) of 16 consecutive grid positions one 64-byte load at a fixed offset (qoffs[j]), if the
output is computed on the planes' grid (pitch = the planes' width, the columns past OW computed and dropped:
the masked stores of _make_strip_sat's `direct` write each row's runs of valid lanes, direct_tables). The
strips are the same, so the same sums; the quads' order (4 channels, then taps) lets the taps of a quad
read the same cache lines one after the other. Where the grid's tiles would add more than 1/16 to the pixels
(14 x 14: 224 positions for 196 pixels), qconv_direct_chlanes runs the channel-lane kernel on the same planes
instead, each pixel's quad broadcast from its grid position: no position past OW computed. On Zen 5 (one
thread, int8_conv_kernels.py) ResNet-50's 3x3 layers ran 1.08x the packed tiles' speed in sum (14 x 14: 1.12x),
level with onnxruntime's (0.99x, was 0.92x).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

from . import dots
from .gemm import arg_pointers, close_loop, dispatch_rows, open_loop, prefetch, vector_phis
from .indirect import call_qconv
from .jit import njit

MR = 6  # rows of Y per micro-tile: 12 accumulators + 2 X vectors + 1 broadcast of 16 ymm
NP = 16  # pixels per micro-tile
MRS = 5  # rows per micro-tile of the saturating kernel (its X comes packed): 10 accumulators, 2 X vectors and the
#   saturating steps' temporaries fit AVX2's 16 ymm; 6 rows spilled one accumulator to the stack in the k loop,
#   3x slower where the thread's stack put that slot across a page (compiled/dqgemm.py's docstring)

DOT = dots.dot_here(globals())
"""The quad kernels' u8 x s8 dot product (compiled/dots.py): vpmaddubsw here; vpdpbusd/qgemm.py and
emulated/qgemm.py are this source with the others."""
WIDE = dots.wide_of(globals())
"""Whether the whole-tile micro-kernels keep a row's 16 pixels in one <16 x i32> (a zmm: vpdpbusd.512)
rather than two <8 x i32> (dots.wide_here)."""

_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
_F4 = ir.FloatType()
_V8I = ir.VectorType(_I32, 8)
_V8F = ir.VectorType(_F4, 8)


def _c(v, t=_I64):
    return ir.Constant(t, v)


def _splat(builder, s, vt):
    v = builder.insert_element(ir.Constant(vt, ir.Undefined), s, _c(0, _I32))
    return builder.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, vt.count), [0] * vt.count))


def _ones32(context, builder, ary_type, ary):
    """<16 x i32>: the `ones` array argument (int16, 16 ones at least) sign-extended, the multiplier that
    sums adjacent int16 products in pairs (vpmaddwd by ones, as MLAS pairs them)."""
    onesp = context.make_array(ary_type)(context, builder, ary).data
    return builder.sext(builder.load(builder.bitcast(onesp, ir.VectorType(_I16, 16).as_pointer()), align=2),
                        ir.VectorType(_I32, 16))


def _pmaddwd(builder, a16, b16):
    """<n x i32>: lane i = a[2i] * b[2i] + a[2i+1] * b[2i+1], a and b <2n x i16> (vpmaddwd; n = 8 here,
    16 in _dot4's emulation)."""
    n = a16.type.count
    v = ir.VectorType(_I32, n)
    prod = builder.mul(builder.sext(a16, v), builder.sext(b16, v))
    undef = ir.Constant(v, ir.Undefined)
    even = builder.shuffle_vector(prod, undef, ir.Constant(ir.VectorType(_I32, n // 2), list(range(0, n, 2))))
    odd = builder.shuffle_vector(prod, undef, ir.Constant(ir.VectorType(_I32, n // 2), list(range(1, n, 2))))
    return builder.add(even, odd)


def _intrinsic_fn(builder, name, ret, args):
    mod = builder.module
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ret, args), name)
    return fn


def _requantizer(builder, zp_v, y_signed: bool):
    """(scale, quantize): IR builders of MlasRequantizeOutput's steps on <8 x i32> accumulators, in its order.
    scale(acc, bias, mult) = float32(acc + bias) * mult; quantize(f) = int8/uint8(rint(clamp(f, lo - zp,
    hi - zp)) + zp) with [lo, hi] the output type's range ([-128, 127] or [0, 255]) and zp the output zero
    point (an integer IR value). Shared by the GEMM micro-kernels here and compiled/qdepthwise.py."""
    lo_q, hi_q = (-128.0, 127.0) if y_signed else (0.0, 255.0)
    zp32 = builder.trunc(zp_v, _I32) if zp_v.type.width > 32 else zp_v
    zpf = builder.sitofp(zp32, _F4)
    lo_v = _splat(builder, builder.fsub(ir.Constant(_F4, lo_q), zpf), _V8F)
    hi_v = _splat(builder, builder.fsub(ir.Constant(_F4, hi_q), zpf), _V8F)
    zp_vec = _splat(builder, zp32, _V8I)
    rint = _intrinsic_fn(builder, "llvm.rint.v8f32", _V8F, [_V8F])
    v8i8 = ir.VectorType(_I8, 8)

    def scale(acc, bias, mult):
        return builder.fmul(builder.sitofp(builder.add(acc, bias), _V8F), mult)

    def quantize(f):
        # MLAS's _mm256_max_ps(f, lo) then _mm256_min_ps(f, hi): x86's max / min (a NaN gives the bound), written
        # as compare-and-select so that they become one vmaxps / vminps each (llvm.maxnum / minnum's NaN rule
        # costs a compare and a blend more each)
        f = builder.select(builder.fcmp_ordered(">", f, lo_v), f, lo_v)
        f = builder.select(builder.fcmp_ordered("<", f, hi_v), f, hi_v)
        return builder.trunc(builder.add(builder.fptosi(builder.call(rint, [f]), _V8I), zp_vec), v8i8)

    v16i32 = ir.VectorType(_I32, 16)
    v16i16 = ir.VectorType(_I16, 16)
    lo16 = ir.Constant(v16i32, [-32768] * 16)
    hi16 = ir.Constant(v16i32, [32767] * 16)
    lo_h = ir.Constant(v16i16, [int(lo_q)] * 16)
    hi_h = ir.Constant(v16i16, [int(hi_q)] * 16)
    zp16 = _splat(builder, builder.trunc(zp32, _I16), v16i16)

    def quantize_pair(f0, f1):
        """quantize(f0) and quantize(f1) as one <16 x i8>: the same values (each in [lo, hi] before the
        integer clamp, which only lets LLVM's x86 back end narrow them with saturating packs, 4 instructions
        for 16 outputs, where a truncation of each <8 x i32> takes 4 or 5 for 8)."""
        ints = []
        for f in (f0, f1):
            f = builder.select(builder.fcmp_ordered("<", f, hi_v), f, hi_v)
            f = builder.select(builder.fcmp_ordered(">", f, lo_v), f, lo_v)
            ints.append(builder.fptosi(builder.call(rint, [f]), _V8I))
        v = builder.shuffle_vector(ints[0], ints[1], ir.Constant(v16i32, list(range(16))))
        # in [lo - zp, hi - zp]: to int16 (a saturating pack that saturates nothing), + zp there (one add for
        # the 16), then to 8 bits (the same)
        v = builder.select(builder.icmp_signed(">", v, lo16), v, lo16)
        v = builder.select(builder.icmp_signed("<", v, hi16), v, hi16)
        v = builder.add(builder.trunc(v, v16i16), zp16)
        v = builder.select(builder.icmp_signed(">", v, lo_h), v, lo_h)
        v = builder.select(builder.icmp_signed("<", v, hi_h), v, hi_h)
        return builder.trunc(v, ir.VectorType(_I8, 16))

    v16f = ir.VectorType(_F4, 16)
    lo16f = _splat(builder, builder.fsub(ir.Constant(_F4, lo_q), zpf), v16f)
    hi16f = _splat(builder, builder.fsub(ir.Constant(_F4, hi_q), zpf), v16f)
    rint16 = _intrinsic_fn(builder, "llvm.rint.v16f32", v16f, [v16f])

    def scale_wide(acc, mult):
        """scale() of a <16 x i32> (the bias already in acc) by a <16 x float> mult: float32(acc) * mult."""
        return builder.fmul(builder.sitofp(acc, v16f), mult)

    zp32x16 = _splat(builder, zp32, v16i32)

    def quantize_wide(f):
        """quantize() of a <16 x float> (the same values as quantize_pair of its halves): clamped to
        [lo - zp, hi - zp] in float32, rounded half to even, + zp in int32, truncated to 8 bits. No integer
        clamps: the values are in range already, and on a 16-lane (AVX-512) target the truncation is one
        vpmovdb (quantize_pair's clamps are there for AVX2's saturating packs)."""
        f = builder.select(builder.fcmp_ordered("<", f, hi16f), f, hi16f)
        f = builder.select(builder.fcmp_ordered(">", f, lo16f), f, lo16f)
        v = builder.add(builder.fptosi(builder.call(rint16, [f]), v16i32), zp32x16)
        return builder.trunc(v, ir.VectorType(_I8, 16))

    quantize.pair = quantize_pair
    quantize.wide = quantize_wide
    scale.wide = scale_wide
    return scale, quantize


def _sat_pairs(builder, x8, w8):
    """<16 x i16>: lane i = saturate_int16(x[2i] * w[2i] + x[2i+1] * w[2i+1]), x <32 x i8> unsigned and w
    <32 x i8> signed: generic IR (zext / sext, mul, add, clamp, trunc) that LLVM's x86 back end
    selects as vpmaddubsw (its combine matches exactly this saturating, truncating pattern)."""
    v16 = ir.VectorType(_I32, 16)
    undef = ir.Constant(ir.VectorType(_I8, 32), ir.Undefined)
    even = ir.Constant(v16, list(range(0, 32, 2)))
    odd = ir.Constant(v16, list(range(1, 32, 2)))
    xe = builder.zext(builder.shuffle_vector(x8, undef, even), v16)
    xo = builder.zext(builder.shuffle_vector(x8, undef, odd), v16)
    we = builder.sext(builder.shuffle_vector(w8, undef, even), v16)
    wo = builder.sext(builder.shuffle_vector(w8, undef, odd), v16)
    s = builder.add(builder.mul(xe, we), builder.mul(xo, wo))
    lo, hi = ir.Constant(v16, [-32768] * 16), ir.Constant(v16, [32767] * 16)
    s = builder.select(builder.icmp_signed(">", s, lo), s, lo)
    s = builder.select(builder.icmp_signed("<", s, hi), s, hi)
    return builder.trunc(s, ir.VectorType(_I16, 16))


def _dot4(builder, acc, x8, w8, ones32, dot: str):
    """<8 x i32>: acc plus, in each 32-bit lane, the 4 products of x's unsigned and w's signed bytes
    (x8, w8 <32 x i8>), summed as `dot` sums them (compiled/dots.py):

        vpmaddubsw: saturate_int16(x0 w0 + x1 w1) + saturate_int16(x2 w2 + x3 w3)   (onnxruntime without VNNI)
            _sat_pairs (vpmaddubsw), then the pairs times ones32 (<16 x i32>: the loaded ones sign-extended;
            a constant would let instcombine fold the int16 truncation away, and vpmaddubsw with it) and
            even + odd (vpmaddwd), then + acc (vpaddd);
        vpdpbusd: x0 w0 + x1 w1 + x2 w2 + x3 w3 + acc, exact: llvm.x86.avx512.vpdpbusd.256 (VPDPBUSD ymm;
            the VEX form on AVX-VNNI hosts). An intrinsic, not generic IR: LLVM 20's x86 back end forms no
            vpdpbusd from this exact sum (zext / sext to i32, mul, the 4 strided lanes added: it stays
            vpmovzxbd / vpmovsxbd + vpmaddwd + vpermd + vpaddd, measured for cpu sapphirerapids and
            alderlake), and it matches vpmaddubsw only to the saturating pattern above. It compiles only for
            a CPU with AVX512-VNNI + AVX512-VL or AVX-VNNI (elsewhere LLVM aborts the process);
        emulated: the same exact sum in generic IR (runs on any host; 2-3x slower than vpmaddubsw).
    """
    if dot == "vpmaddubsw":
        v16 = ir.VectorType(_I32, 16)
        undef = ir.Constant(v16, ir.Undefined)
        prod = builder.mul(builder.sext(_sat_pairs(builder, x8, w8), v16), ones32)
        even = builder.shuffle_vector(prod, undef, ir.Constant(_V8I, list(range(0, 16, 2))))
        odd = builder.shuffle_vector(prod, undef, ir.Constant(_V8I, list(range(1, 16, 2))))
        return builder.add(acc, builder.add(even, odd))
    n = acc.type.count  # 8, or 16 (WIDE: x8 and w8 <64 x i8>, .512)
    vn = ir.VectorType(_I32, n)
    if dot == "vpdpbusd":
        fn = _intrinsic_fn(builder, f"llvm.x86.avx512.vpdpbusd.{32 * n}", vn, [vn, vn, vn])
        return builder.call(fn, [acc, builder.bitcast(x8, vn), builder.bitcast(w8, vn)])
    if dot != "emulated":
        raise ValueError(f"unknown dot product {dot!r}; expected one of {dots.DOTS}")
    # x and w widened to int16, adjacent products added in int32 (exact: vpmaddwd's pattern, _pmaddwd), then
    # adjacent pair sums added (the 4 products summed at once, as 4 strided lanes, took LLVM 8x longer to compile)
    v16i16 = ir.VectorType(_I16, 4 * n)
    pairs = _pmaddwd(builder, builder.zext(x8, v16i16), builder.sext(w8, v16i16))
    undef = ir.Constant(ir.VectorType(_I32, 2 * n), ir.Undefined)
    even = builder.shuffle_vector(pairs, undef, ir.Constant(vn, list(range(0, 2 * n, 2))))
    odd = builder.shuffle_vector(pairs, undef, ir.Constant(vn, list(range(1, 2 * n, 2))))
    return builder.add(acc, builder.add(even, odd))


_V16I = ir.VectorType(_I32, 16)
_V16F = ir.VectorType(_F4, 16)


def _halves(builder, wide: list) -> list:
    """Each <16 x i32> of `wide` as its two <8 x i32> halves, in order (the epilogue's accumulators)."""
    lo, hi = (ir.Constant(_V8I, list(range(h, h + 8))) for h in (0, 8))
    return [builder.shuffle_vector(v, ir.Constant(_V16I, ir.Undefined), m) for v in wide for m in (lo, hi)]


def _make_micro(rows: int, x_signed: bool, y_signed: bool, y_float: bool = False, sat: bool = False,
                half: bool = False):
    """The micro-kernel for a tile of `rows` x 16 outputs.

    micro(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp):
    for r < rows, c < 16: acc = b[b_off + r] + sum_{j < kp_n} sum_{h < 2} W'(r, 2j + h) *
    x[x_off + offs[2j + h] + c], W'(r, 2j + h) the int16 half h of wp[w_off + j * rows + r];
    y[y_off + r * ldy + c] = saturate(rint(float32(acc) * mult[b_off + r]) + zp) (module docstring), or
    with y_float, float32(acc) * mult[b_off + r] (MatMulInteger -> Cast -> Mul: zp unused).
    offs holds 2 * kp_n entries. The caller keeps every access in bounds.

    With `sat` (onnxruntime's u8 x s8 arithmetic on hosts without VNNI; x unsigned): kp_n counts quads
    of k, offs holds 4 * kp_n entries, wp[w_off + j * rows + r] holds the 4 int8 weights W(r, 4j .. 4j + 3)
    (pack_quads), and each pair (4j, 4j + 1), (4j + 2, 4j + 3) of products is summed in int16 with
    saturation (_sat_pairs) before the int32 sum; `ones` (16 int16 ones, loaded: a constant would let
    LLVM fold the int16 truncation away, and with it vpmaddubsw) adds each saturated pair's two
    halves into int32 (vpmaddwd). Without `sat`, ones is not read.

    With `half` (`sat` only): the tile's first 8 pixels, for a last tile of 8 or fewer: half the
    multiplies of a 16-pixel one (7 x 7 images: 49 pixels, 3 tiles and a half rather than 4).
    """
    nv = 1 if half else 2
    ext = "sext" if x_signed else "zext"

    @intrinsic
    def micro(typingctx, wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones):
        sig = types.void(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones)

        def codegen(context, builder, signature, args):
            ldy_v, kp_v, zp_v = args[7], args[8], args[12]
            wptr, xptr, yptr, bptr, mptr = arg_pointers(context, builder, signature, args,
                                                        (0, 1), (2, 3), (5, 6), (9, 10), (11, 10))
            optr = context.make_array(signature.args[4])(context, builder, args[4]).data
            v16i8 = ir.VectorType(_I8, 16)
            v16i16 = ir.VectorType(_I16, 16)
            fn = builder.function
            pre_bb = builder.block
            loop_bb = fn.append_basic_block("kp_loop")
            done_bb = fn.append_basic_block("kp_done")
            zero = ir.Constant(_V8I, [0] * 8)
            wide = sat and WIDE and nv == 2  # a row's 16 pixels in one <16 x i32>
            n_acc = rows if wide else nv * rows
            # the accumulators start at the bias (its add then costs nothing after the k loop; int32 sums
            # wrap alike in any order, and the exact ones never leave int32)
            init = ([_splat(builder, builder.load(builder.gep(bptr, [_c(i)])), _V16I) for i in range(rows)] if wide
                    else [_splat(builder, builder.load(builder.gep(bptr, [_c(i // nv)])), _V8I) for i in range(n_acc)])
            if sat:
                onesp = context.make_array(signature.args[13])(context, builder, args[13]).data
                ones16 = builder.load(builder.bitcast(onesp, v16i16.as_pointer()), align=2)
            builder.cbranch(builder.icmp_signed(">", kp_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            j = builder.phi(_I64)
            j.add_incoming(_c(0), pre_bb)
            accs = vector_phis(builder, n_acc, (init, pre_bb))
            if sat:
                new = _sat_step(builder, j, optr, xptr, wptr, rows, accs, ones16, nv)
            else:
                j2 = builder.mul(j, _c(2))
                o0 = builder.load(builder.gep(optr, [j2]))
                o1 = builder.load(builder.gep(optr, [builder.add(j2, _c(1))]))
                r0 = builder.load(builder.bitcast(builder.gep(xptr, [o0]), v16i8.as_pointer()), align=1)
                r1 = builder.load(builder.bitcast(builder.gep(xptr, [o1]), v16i8.as_pointer()), align=1)
                w0 = getattr(builder, ext)(r0, v16i16)
                w1 = getattr(builder, ext)(r1, v16i16)
                lo = builder.shuffle_vector(w0, w1, ir.Constant(ir.VectorType(_I32, 16),
                                                                [v for i in range(8) for v in (i, 16 + i)]))
                hi = builder.shuffle_vector(w0, w1, ir.Constant(ir.VectorType(_I32, 16),
                                                                [v for i in range(8, 16) for v in (i, 16 + i)]))
                wrow = builder.gep(wptr, [builder.mul(j, _c(rows))])
                new = []
                for r in range(rows):
                    wv = builder.bitcast(_splat(builder, builder.load(builder.gep(wrow, [_c(r)])), _V8I), v16i16)
                    new.append(builder.add(accs[2 * r], _pmaddwd(builder, lo, wv)))
                    new.append(builder.add(accs[2 * r + 1], _pmaddwd(builder, hi, wv)))
            final = close_loop(builder, j, kp_v, accs, new, loop_bb, done_bb, (init, pre_bb))
            if wide:
                final = _halves(builder, final)
            # the requantization (MlasRequantizeOutput's order): (+ bias: in the sums), to float32, * mult, clamp,
            # rint, + zp
            scale, quantize = _requantizer(builder, zp_v, y_signed)
            for r in range(rows):
                bv = zero
                mv = _splat(builder, builder.load(builder.gep(mptr, [_c(r)])), _V8F)
                row = builder.gep(yptr, [builder.mul(ldy_v, _c(r))])
                fs = [scale(final[nv * r + v], bv, mv) for v in range(nv)]
                if half and not y_float:
                    q = quantize(fs[0])
                    builder.store(q, builder.bitcast(row, q.type.as_pointer()), align=1)
                    continue
                if y_float:
                    for v in range(nv):
                        builder.store(fs[v], builder.bitcast(builder.gep(row, [_c(8 * v)]), _V8F.as_pointer()),
                                      align=4)
                    continue
                q = quantize.pair(*fs)  # the row's 16 outputs narrowed together
                builder.store(q, builder.bitcast(row, q.type.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return micro


def _interleave4(builder, r):
    """4 rows of 16 bytes -> two <32 x i8>: pixels 0..7 and 8..15, the 4 rows' bytes of each pixel in one
    32-bit lane (byte t of lane p = r[t][p])."""
    cat = ir.Constant(ir.VectorType(_I32, 32), list(range(32)))
    ab = builder.shuffle_vector(r[0], r[1], cat)
    cd = builder.shuffle_vector(r[2], r[3], cat)
    return [builder.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(_I32, 32),
                                                       [16 * t + p0 + p for p in range(8) for t in range(4)]))
            for p0 in (0, 8)]


@intrinsic
def _pack16(typingctx, x, x_off, offs, j, dst, d_off):
    """dst[d_off .. d_off + 64] = the 16 pixels x[x_off + offs[4j + t] + p] (t < 4, p < 16) as 16 quads
    (byte 4p + t), the layout the saturating micro-kernel reads."""
    sig = types.void(x, x_off, offs, j, dst, d_off)

    def codegen(context, builder, signature, args):
        xptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (4, 5))
        optr = context.make_array(signature.args[2])(context, builder, args[2]).data
        v16i8 = ir.VectorType(_I8, 16)
        v32i8 = ir.VectorType(_I8, 32)
        j4 = builder.mul(args[3], _c(4))
        rows = [builder.gep(xptr, [builder.load(builder.gep(optr, [builder.add(j4, _c(t))]))]) for t in range(4)]
        r = [builder.load(builder.bitcast(a, v16i8.as_pointer()), align=1) for a in rows]
        for v, h in enumerate(_interleave4(builder, r)):
            builder.store(h, builder.bitcast(builder.gep(dptr, [_c(32 * v)]), v32i8.as_pointer()), align=1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _pack64(typingctx, x, x_off, offs, j, dst, d_off, tile_b):
    """_pack16 for 4 tiles at once (64 pixels): the quad's 4 rows read 64 bytes each, tile i's 16 pixels x 4
    rows (byte 4p + t = x[x_off + offs[4j + t] + 16 i + p]) stored at dst[d_off + i * tile_b]: one byte
    shuffle of the 256 bytes, where 4 _pack16 calls take 16 loads and 8 shuffles (16-lane targets; the
    packing was a fifth of a 64-channel layer's GEMM)."""
    sig = types.void(x, x_off, offs, j, dst, d_off, tile_b)

    def codegen(context, builder, signature, args):
        xptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (4, 5))
        optr = context.make_array(signature.args[2])(context, builder, args[2]).data
        v64i8 = ir.VectorType(_I8, 64)
        j4 = builder.mul(args[3], _c(4))
        rows = [builder.gep(xptr, [builder.load(builder.gep(optr, [builder.add(j4, _c(t))]))]) for t in range(4)]
        r = [builder.load(builder.bitcast(a, v64i8.as_pointer()), align=1) for a in rows]
        cat = ir.Constant(ir.VectorType(_I32, 128), list(range(128)))
        ab = builder.shuffle_vector(r[0], r[1], cat)
        cd = builder.shuffle_vector(r[2], r[3], cat)
        for i in range(4):
            # tile i from ab (rows 0, 1: bytes 64 t + ...) and cd (rows 2, 3)
            idx = [(64 * t + 16 * i + p) if t < 2 else (128 + 64 * (t - 2) + 16 * i + p)
                   for p in range(16) for t in range(4)]
            v = builder.shuffle_vector(ab, cd, ir.Constant(ir.VectorType(_I32, 64), idx))
            builder.store(v, builder.bitcast(builder.gep(dptr, [builder.mul(args[6], _c(i))]), v64i8.as_pointer()),
                          align=1)
        return context.get_dummy_value()

    return sig, codegen


ROW_SPANS = 4  # output rows a 16-pixel tile of _pack16_rows may span: OW >= 5 (16 pixels from any column)


def _make_pack16_rows(spans: int):
    @intrinsic
    def pack(typingctx, x, x_off, offs, j, dst, d_off, rowidx, jump):
        """_pack16 for 16 pixels that may span up to `spans` output rows: pixel p read at x[x_off + offs[4j + t]
        + p + rowidx[p] * jump] (rowidx[p]: how many row ends precede it in the tile; jump: the row pitch less
        the output width), so that a convolution's GEMM computes no column past the output width. Each row of
        the quad is `spans` 16-byte loads, each shifted by one more jump, merged by lane (rowidx >= s). (A
        tile inside one output row takes _pack16: one load a row.)"""
        sig = types.void(x, x_off, offs, j, dst, d_off, rowidx, jump)

        def codegen(context, builder, signature, args):
            xptr, dptr = arg_pointers(context, builder, signature, args, (0, 1), (4, 5))
            optr = context.make_array(signature.args[2])(context, builder, args[2]).data
            iptr = context.make_array(signature.args[6])(context, builder, args[6]).data
            v16i8 = ir.VectorType(_I8, 16)
            ridx = builder.load(builder.bitcast(iptr, v16i8.as_pointer()), align=1)
            j4 = builder.mul(args[3], _c(4))
            r = []
            for t in range(4):
                base = builder.gep(xptr, [builder.load(builder.gep(optr, [builder.add(j4, _c(t))]))])
                v = builder.load(builder.bitcast(base, v16i8.as_pointer()), align=1)
                for sp in range(1, spans):
                    shifted = builder.load(builder.bitcast(builder.gep(base, [builder.mul(args[7], _c(sp))]),
                                                           v16i8.as_pointer()), align=1)
                    v = builder.select(builder.icmp_unsigned(">=", ridx, ir.Constant(v16i8, [sp] * 16)), shifted, v)
                r.append(v)
            v32i8 = ir.VectorType(_I8, 32)
            for v, h in enumerate(_interleave4(builder, r)):
                builder.store(h, builder.bitcast(builder.gep(dptr, [_c(32 * v)]), v32i8.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return pack


_pack16_rows = _make_pack16_rows(ROW_SPANS)
_pack16_rows2 = _make_pack16_rows(2)  # OW >= 16: a tile spans at most 2 output rows
_pack16_rows3 = _make_pack16_rows(3)  # OW >= 8: at most 3 (ResNet-50's 14 x 14 outputs: a load and a select less a row)


W_PREFETCH = 4096
"""Bytes ahead of the quad being read at which the quad kernels prefetch the weights (prefetcht0, once a
quad: the 16-lane strips, and the 8-lane saturating steps, _sat_step). Where a layer's weights are not in cache
(a model's forward: ResNet-50's layer-4 weights, 1-2.4 MB a node, come from L3 or memory), the hardware
prefetcher left the 7 x 7 GEMMs 30% slower than with warm weights (512 x 4608 x 49: 0.316 ms warm, 0.413 cold,
on Zen 5); 2048 or 4096 bytes ahead: 0.318 cold. In the 8-lane saturating kernels (AVX2 hosts) the same
prefetch made int8 ResNet-50 QDQ 1.027x faster a forward (one thread, Haswell code on Zen 5,
benchmarks/ab_checkouts.py int8/resnet50/qdq); MobileNetV2 and the BERT encoder level."""


def _sat_step(builder, j, optr, xptr, wptr, rows, accs, ones16, nv=2):
    """One quad of k of the saturating micro-kernel (_make_micro's `sat`): the new accumulators.
    X comes packed (_pack16): quad j of the tile's 16 pixels at x[x_off + 64 j]; offs is not read.
    nv = 1: the tile's first 8 pixels only (a last tile of 8 or fewer)."""
    v32i8 = ir.VectorType(_I8, 32)
    base = builder.gep(xptr, [builder.mul(j, _c(64))])
    wrow = builder.gep(wptr, [builder.mul(j, _c(rows))])
    prefetch(builder, builder.gep(wrow, [_c(W_PREFETCH // 4)]))
    if WIDE and nv == 2:  # the 16 pixels' 64 bytes in one vector, one accumulator a row (accs <16 x i32>)
        v64i8 = ir.VectorType(_I8, 64)
        xv = builder.load(builder.bitcast(base, v64i8.as_pointer()), align=1)
        return [_dot4(builder, accs[r_i], xv, builder.bitcast(_splat(builder, builder.load(builder.gep(
            wrow, [_c(r_i)])), _V16I), v64i8), None, DOT) for r_i in range(rows)]
    halves = [builder.load(builder.bitcast(builder.gep(base, [_c(32 * v)]), v32i8.as_pointer()), align=1)
              for v in range(nv)]
    ones32 = builder.sext(ones16, ir.VectorType(_I32, 16))
    new = []
    for r_i in range(rows):
        wv = builder.bitcast(_splat(builder, builder.load(builder.gep(wrow, [_c(r_i)])), _V8I), v32i8)
        for v in range(nv):
            new.append(_dot4(builder, accs[nv * r_i + v], halves[v], wv, ones32, DOT))
    return new


def _make_strip_sat(rows: int, y_signed: bool, y_float: bool = False, groups: tuple = (), direct: bool = False):
    """The saturating micro-kernel (_make_micro's `sat`) over a strip of t_n whole 16-pixel tiles of one
    row tile, in one call: the tile loop inside the kernel, the bias and multiplier broadcasts, the ones
    and the requantization's constants set up once for the strip rather than once a tile. (Called a tile
    at a time, a 5 x 16 tile of a 16-channel pointwise convolution spent about as long in the numba
    loop's set-up around it, its ~100 live values reloaded from the stack, as in its 4 quads of k.)

    With `groups` (WIDE only; tile counts > 1, largest first) the strip's tiles go groups[0] at a time while
    that many are left, then groups[1] at a time, ..., then one at a time: a group of n tiles is rows x 16 n
    outputs in rows * n zmm accumulators, each quad's row weights broadcast once for the group's tiles. (5
    accumulators -- one tile -- are 5 chains of vpdpbusd, which has a latency of several cycles: Zen 5 issues
    two a cycle, so one tile's chains left it mostly waiting.) The WIDE strips take the block's last, partial
    tile too: each tile's stores masked to the pixels before n_valid (counted from the strip's first).

    strip(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid): for tile
    t < t_n, _make_micro(rows, sat=True)'s tile with X at xq[x_off + t * tile_b] (packed by _pack16)
    and Y at y[y_off + 16 t + r * ldy + c]: the same sums, in the same order, and the same epilogue.

    With `direct` (WIDE only) X is not packed: strip(<the same>, qoffs, segs) reads quad j of tile t at
    xq[x_off + t * tile_b + qoffs[j]] (a convolution's input in quad planes, qconv_direct), and stores tile
    t's row r through segs: for s < SEGS, e = segs[n_valid + t * SEGS + s], the lanes of mask e & 0xFFFF
    at y[y_off + (e >> 16) + r * ldy + lane] (n_valid is then the strip's first entry of segs).
    """
    if (groups or direct) and not WIDE:
        raise ValueError("_make_strip_sat: tile groups and direct X need WIDE (one zmm accumulator a tile row)")

    if direct:
        @intrinsic
        def strip(typingctx, wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n,
                  n_valid, qoffs, segs):
            return types.void(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n,
                              n_valid, qoffs, segs), codegen
    else:
        @intrinsic
        def strip(typingctx, wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n,
                  n_valid):
            return types.void(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n,
                              n_valid), codegen

    def codegen(context, builder, signature, args):
        tile_v, ldy_v, kq_v, zp_v, tn_v, valid_v = args[4], args[7], args[8], args[12], args[14], args[15]
        wptr, xptr, yptr, bptr, mptr = arg_pointers(context, builder, signature, args,
                                                    (0, 1), (2, 3), (5, 6), (9, 10), (11, 10))
        offp = segp = None
        if direct:
            offp, segp = (context.make_array(signature.args[i])(context, builder, args[i]).data for i in (16, 17))
        onesp = context.make_array(signature.args[13])(context, builder, args[13]).data
        v16i16 = ir.VectorType(_I16, 16)
        ones16 = builder.load(builder.bitcast(onesp, v16i16.as_pointer()), align=2)
        lanes = ir.Constant(_V16I, list(range(NP)))
        n_acc = rows if WIDE else 2 * rows  # WIDE: a row's 16 pixels in one <16 x i32>
        init = ([_splat(builder, builder.load(builder.gep(bptr, [_c(i)])), _V16I) for i in range(rows)] if WIDE
                else [_splat(builder, builder.load(builder.gep(bptr, [_c(i // 2)])), _V8I) for i in range(n_acc)])
        mvs = [_splat(builder, builder.load(builder.gep(mptr, [_c(r)])), _V16F if WIDE else _V8F)
               for r in range(rows)]
        scale, quantize = _requantizer(builder, zp_v, y_signed)
        zero = ir.Constant(_V8I, [0] * 8)
        fn = builder.function
        exit_bb = fn.append_basic_block("strip_exit")

        def go_on(t, n: int):
            """Whether a group of n tiles starts at tile t: n left at least, and not a count left whose
            best split starts with a smaller group (_group_skips)."""
            left = builder.sub(tn_v, t)
            cond = builder.icmp_signed(">=", left, _c(n))
            for r in skips.get(n, ()):
                cond = builder.and_(cond, builder.icmp_signed("!=", left, _c(r)))
            return cond

        skips = _group_skips(groups)

        def tiles_loop(t0, t0_bb, n: int):
            """Tiles t0, t0 + n, ... n at a time while go_on: the t where it stopped, and its block."""
            tile_bb = fn.append_basic_block(f"strip_tile{n}")
            loop_bb = fn.append_basic_block(f"strip_kq_loop{n}")
            done_bb = fn.append_basic_block(f"strip_kq_done{n}")
            after_bb = fn.append_basic_block(f"strip_after{n}")
            builder.position_at_end(t0_bb)
            builder.cbranch(go_on(t0, n), tile_bb, after_bb)
            builder.position_at_end(tile_bb)
            t = builder.phi(_I64)
            t.add_incoming(t0, t0_bb)
            xts = [builder.gep(xptr, [builder.mul(builder.add(t, _c(i)), tile_v)]) for i in range(n)]
            yt = builder.gep(yptr, [builder.mul(t, _c(NP))])
            inits = init * n
            builder.cbranch(builder.icmp_signed(">", kq_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            j = builder.phi(_I64)
            j.add_incoming(_c(0), tile_bb)
            accs = vector_phis(builder, n_acc * n, (inits, tile_bb))
            if n == 1 and not direct:
                new = _sat_step(builder, j, None, xts[0], wptr, rows, accs, ones16, 2)
            else:
                new = _sat_group_step(builder, j, xts, wptr, rows, accs, offp)
            final = close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (inits, tile_bb))
            for i in range(n):
                fin = final[i * n_acc:(i + 1) * n_acc]
                if direct:  # each row's lanes stored by segment (segs: a mask and where lane 0 goes)
                    vs = [scale.wide(fin[r], mvs[r]) for r in range(rows)]
                    vs = vs if y_float else [quantize.wide(f) for f in vs]
                    e0 = builder.add(valid_v, builder.mul(builder.add(t, _c(i)), _c(SEGS)))
                    for sg in range(SEGS):
                        e = builder.load(builder.gep(segp, [builder.add(e0, _c(sg))]))
                        seg_bb, next_bb = fn.append_basic_block("strip_seg"), fn.append_basic_block("strip_seg_end")
                        builder.cbranch(builder.icmp_signed("!=", e, _c(0)), seg_bb, next_bb)  # most tiles: 1 run
                        builder.position_at_end(seg_bb)
                        mask = builder.bitcast(builder.trunc(e, _I16), ir.VectorType(ir.IntType(1), NP))
                        ys_ = builder.gep(yptr, [builder.ashr(e, _c(16))])
                        for r in range(rows):
                            row = builder.gep(ys_, [builder.mul(ldy_v, _c(r))])
                            _masked_store(builder, vs[r], builder.bitcast(row, vs[r].type.as_pointer()), mask,
                                          4 if y_float else 1)
                        builder.branch(next_bb)
                        builder.position_at_end(next_bb)
                    continue
                if WIDE:
                    # the tile's pixels before n_valid (a strip's last tile may be partial: WIDE strips
                    # take it, its X packed with zeros or the next rows past the valid pixels)
                    left = builder.trunc(builder.sub(valid_v, builder.mul(builder.add(t, _c(i)), _c(NP))), _I32)
                    mask = builder.icmp_signed("<", lanes, _splat(builder, left, _V16I))
                    for r in range(rows):  # the requantization on the row's 16 lanes at once
                        row = builder.gep(yt, [builder.add(builder.mul(ldy_v, _c(r)), _c(NP * i))])
                        f = scale.wide(fin[r], mvs[r])
                        v = f if y_float else quantize.wide(f)
                        _masked_store(builder, v, builder.bitcast(row, v.type.as_pointer()), mask,
                                      4 if y_float else 1)
                    continue
                for r in range(rows):
                    row = builder.gep(yt, [builder.add(builder.mul(ldy_v, _c(r)), _c(NP * i))])
                    fs = [scale(fin[2 * r + v], zero, mvs[r]) for v in range(2)]
                    if y_float:
                        for v in range(2):
                            builder.store(fs[v], builder.bitcast(builder.gep(row, [_c(8 * v)]),
                                                                 _V8F.as_pointer()), align=4)
                        continue
                    q = quantize.pair(*fs)
                    builder.store(q, builder.bitcast(row, q.type.as_pointer()), align=1)
            t1 = builder.add(t, _c(n))
            end_bb = builder.block  # done_bb, or the last block of the direct stores
            t.add_incoming(t1, end_bb)
            builder.cbranch(go_on(t1, n), tile_bb, after_bb)
            builder.position_at_end(after_bb)
            t_end = builder.phi(_I64)
            t_end.add_incoming(t0, t0_bb)
            t_end.add_incoming(t1, end_bb)
            return t_end, after_bb

        t, bb = _c(0), builder.block
        for n in groups:
            t, bb = tiles_loop(t, bb, n)
        t, bb = tiles_loop(t, bb, 1)
        builder.branch(exit_bb)
        builder.position_at_end(exit_bb)
        return context.get_dummy_value()

    return strip


def _group_skips(groups: tuple, most: int = 16) -> dict:
    """{n: the tile counts left (<= most: PB // NP, a block's tiles) at which a strip starts no group of n}:
    where the cheapest split of the count into groups (in groups' order, then single tiles) starts with a smaller
    group. Cost of a group of n tiles, in cycles a quad: max(rows * n / 2, 4) at rows = MRS -- two vpdpbusd a
    cycle, or the instruction's latency (about 4 cycles) for a chain. (For (4, 3): 6 tiles go 3 + 3, not
    4 + 1 + 1; 9 go 3 + 3 + 3.)"""
    sizes = tuple(groups) + (1,)

    def cost(n):
        return max(MRS * n / 2, 4.0)

    best = {0: (0.0, None)}
    for r in range(1, most + 1):
        best[r] = min(((cost(n) + best[r - n][0], -n) for n in sizes if n <= r))
        best[r] = (best[r][0], -best[r][1])
    skips = {}
    for n in groups:
        # the strip's loops take each size in order while allowed: a count left skips n where the best split
        # begins with a smaller size (a tie keeps the larger group)
        skips[n] = tuple(r for r in range(n, most + 1) if best[r][1] < n
                         and best[r][0] < cost(n) + best[r - n][0])
    return skips


def _masked_store(builder, value, ptr, mask, align: int):
    """llvm.masked.store: the lanes of `value` where `mask` (<n x i1>) is set, at ptr (AVX-512: one masked
    vmovdqu8 / vmovups)."""
    vt = value.type
    elt = "f32" if isinstance(vt.element, ir.FloatType) else f"i{vt.element.width}"
    fn = _intrinsic_fn(builder, f"llvm.masked.store.v{vt.count}{elt}.p0", ir.VoidType(),
                       [vt, ptr.type, _I32, mask.type])
    builder.call(fn, [value, ptr, ir.Constant(_I32, align), mask])


def _sat_group_step(builder, j, xts, wptr, rows, accs, offp=None):
    """_sat_step (WIDE) for len(xts) tiles at once: quad j of each tile's packed X (xts[i] + 64 j; with offp,
    xts[i] + offp[j]: _make_strip_sat's `direct`), the row weights broadcast once for all; accs[i * rows + r]
    is tile i's row r."""
    v64i8 = ir.VectorType(_I8, 64)
    wrow = builder.gep(wptr, [builder.mul(j, _c(rows))])
    prefetch(builder, builder.gep(wrow, [_c(W_PREFETCH // 4)]))
    wbs = [builder.bitcast(_splat(builder, builder.load(builder.gep(wrow, [_c(r)])), _V16I), v64i8)
           for r in range(rows)]
    off = builder.mul(j, _c(64)) if offp is None else builder.load(builder.gep(offp, [j]))
    xvs = [builder.load(builder.bitcast(builder.gep(xt, [off]), v64i8.as_pointer()), align=1) for xt in xts]
    return [_dot4(builder, accs[i * rows + r], xvs[i], wbs[r], None, DOT) for i in range(len(xts)) for r in range(rows)]


_ARGS = "wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones"
_TILES = {(xs, ys): dispatch_rows(lambda r, xs=xs, ys=ys: _make_micro(r, xs, ys), MR, _ARGS)
          for xs in (False, True) for ys in (False, True)}
_t_uu, _t_us, _t_su, _t_ss = (_TILES[(False, False)], _TILES[(False, True)], _TILES[(True, False)],
                              _TILES[(True, True)])
_t_uf = dispatch_rows(lambda r: _make_micro(r, False, False, True), MR, _ARGS)
_t_sf = dispatch_rows(lambda r: _make_micro(r, True, False, True), MR, _ARGS)
_s_u = dispatch_rows(lambda r: _make_micro(r, False, False, sat=True), MRS, _ARGS)
_s_s = dispatch_rows(lambda r: _make_micro(r, False, True, sat=True), MRS, _ARGS)
_s_f = dispatch_rows(lambda r: _make_micro(r, False, False, True, sat=True), MRS, _ARGS)
_STRIP_ARGS = "wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid"
GROUPS = (4, 3) if WIDE else ()
"""The strips' tile groups (_make_strip_sat): 4 tiles (20 zmm accumulators) while 4 are left, then 3 (a 7 x 7
image's 49 pixels: 3 tiles and one pixel). One tile a group ran ResNet-50's GEMMs at 470-650 GOPS on Zen 5,
groups of 2 at 550-860, of 4 and 3 at 620-910 (compiled kernels alone, one thread)."""
_st_u = dispatch_rows(lambda r: _make_strip_sat(r, False, groups=GROUPS), MRS, _STRIP_ARGS)
_st_s = dispatch_rows(lambda r: _make_strip_sat(r, True, groups=GROUPS), MRS, _STRIP_ARGS)
_st_f = dispatch_rows(lambda r: _make_strip_sat(r, False, True, groups=GROUPS), MRS, _STRIP_ARGS)
SEGS = 3  # runs of valid lanes a 16-pixel tile of qconv_direct's grid may have: rows of a pitch >= 8 (DIRECT_PITCH)
DIRECT_PITCH = 8
if WIDE:
    _sd_u, _sd_s = (dispatch_rows(lambda r, ys=ys: _make_strip_sat(r, ys, groups=GROUPS, direct=True), MRS,
                                  _STRIP_ARGS + ", qoffs, segs") for ys in (False, True))
else:
    _sd_u = _sd_s = None
_h_u = dispatch_rows(lambda r: _make_micro(r, False, False, sat=True, half=True), MRS, _ARGS)
_h_s = dispatch_rows(lambda r: _make_micro(r, False, True, sat=True, half=True), MRS, _ARGS)
_h_f = dispatch_rows(lambda r: _make_micro(r, False, False, True, sat=True, half=True), MRS, _ARGS)


COLS = 4  # the most pixels of a last tile that _make_cols takes (5 or more: the half or whole tile is cheaper)
COLS_PASS = 1 if DOT == "vpdpbusd" else 2
"""Pixels a pass of _make_cols' k loop takes: their 5 accumulators each and the group's 8 X broadcasts each in
registers (AVX2's 16 ymm). Two share the W loads (Haswell code on Zen 5, 4 last pixels of a 256 x 2304 row
block: 0.026 ms against 0.032 one at a time); with vpdpbusd (AVX-VNNI, no `ones`) two spilled a register."""
CM = 8  # quads of k in a group of _make_cols (lcm(8, MRS) / MRS), pixel-major in the tile (cols_pixel_major)


def _rotations(rows: int) -> tuple[int, int, list, list]:
    """How _make_cols reads a row tile's W quads 8 int32 at a time: (G, V, quads, gathers). The tile's
    elements j * rows + r (quad j, row r) taken in flat order, G = lcm(8, rows) / rows quads fill V =
    lcm(8, rows) / 8 whole vectors; lane l of vector s holds quad (8 s + l) // rows (quads[s][l]) and row
    (8 s + l) % rows. gathers[s]: lane index lists, one per occurrence, that bring vector s's lanes of row r
    to lane r (8: a zero lane)."""
    span = math.lcm(8, rows)
    g, v = span // rows, span // 8
    quads = [[(8 * s + lane) // rows for lane in range(8)] for s in range(v)]
    gathers = []
    for s in range(v):
        lanes_of = [[lane for lane in range(8) if (8 * s + lane) % rows == r] for r in range(rows)]
        most = max(len(ls) for ls in lanes_of)
        gathers.append([[lanes_of[r][k] if r < rows and k < len(lanes_of[r]) else 8 for r in range(8)]
                        for k in range(most)])
    return g, v, quads, gathers


def _make_cols(rows: int, n_pix: int, y_signed: bool, y_float: bool = False):
    """The saturating product for the last n_pix (1..COLS) pixels of a row tile, each pixel's X broadcast
    against the tile's W quads read 8 int32 at a time (qgemv_sat's orientation), every lane used.

    ResNet-50's 7 x 7 layers have 49 = 3 * 16 + 1 pixels, its 14 x 14 ones 196 = 12 * 16 + 4. A half tile
    took 8 lanes for each last pixel; one vector of the tile's 5 rows a quad of k (5 lanes of 8, one dot
    product a loop step for one pixel) took 2-5x the last pixels' share of the layer at the whole tiles' rate
    (Haswell code on Zen 5: 0.065 ms of a 512 x 4608 x 49 layer's 0.926). So the tile's W is read as its flat
    sequence of int32 (element j * rows + r: quad j, row r), whole vectors at a time (_rotations: for 5 rows
    G = 8 quads in V = 5 vectors, lane l of vector s holding quad (8 s + l) // 5, row (8 s + l) % 5), each
    multiplied by the pixel's X quads blended to the same lanes; vector s's products go to accumulator s of
    the pixel, whose lanes keep their rows across the loop, and are brought to lane r = row r at the end.
    The quads past the last whole group go as before, one W vector (rows lanes of 8) a quad. Pixels run
    COLS_PASS at a time over k (their accumulators in registers).

    cols(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones): for r < rows, i < n_pix:
    acc = b[b_off + r] + sum_{j < kq_n} the saturated pairs of W(r, 4j .. 4j + 3) (byte t of wq[w_off +
    j * rows + r]) and X's quad xq[x_off + 64 j + 4 i .. + 4] (the packed tile of _pack16, pixel i; in the
    whole groups, its pixel-major copy by cols_pixel_major, which the caller makes), in
    _make_micro(sat=True)'s pair order, so the same int32 sums (int32 addition is associative: the order of
    the quads does not change them); y[y_off + r * ldy + i] = the same requantization (MlasRequantizeOutput's),
    or float32(acc) * mult with y_float. Past the whole groups the W vector is read as 8 int32 at wq[w_off +
    j * rows]: the caller keeps 8 - rows elements readable past the tile's last quad (lanes >= rows hold the
    next quads' weights, and are never stored).
    """
    g_n, v_n, quads, gathers = _rotations(rows)
    if g_n != CM:
        raise ValueError(f"_make_cols: {rows} rows take groups of {g_n} quads, not the {CM} of cols_pixel_major")
    v32i8 = ir.VectorType(_I8, 32)

    @intrinsic
    def cols(typingctx, wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones):
        sig = types.void(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones)

        def codegen(context, builder, signature, args):
            ldy_v, kq_v, zp_v = args[6], args[7], args[11]
            wptr, xptr, yptr, bptr, mptr = arg_pointers(context, builder, signature, args,
                                                        (0, 1), (2, 3), (4, 5), (8, 9), (10, 9))
            ones32 = _ones32(context, builder, signature.args[12], args[12])
            zero = ir.Constant(_V8I, [0] * 8)
            bias = zero
            mv = ir.Constant(_V8F, [0.0] * 8)
            for r in range(rows):
                bias = builder.insert_element(bias, builder.load(builder.gep(bptr, [_c(r)])), _c(r, _I32))
                mv = builder.insert_element(mv, builder.load(builder.gep(mptr, [_c(r)])), _c(r, _I32))
            groups = builder.sdiv(kq_v, _c(g_n))
            rest0 = builder.mul(groups, _c(g_n))  # the first quad past the whole groups

            def quad_of(pixel, j):
                """Pixel `pixel`'s X quad j (an i32), from the packed tile."""
                at = builder.gep(xptr, [builder.add(builder.mul(j, _c(64)), _c(4 * pixel))])
                return builder.load(builder.bitcast(at, _I32.as_pointer()), align=1)

            sums = []
            for p0 in range(0, n_pix, COLS_PASS):
                pix = list(range(p0, min(n_pix, p0 + COLS_PASS)))
                # the whole groups of g_n quads: v_n accumulators a pixel, lane l of s holding row (8 s + l) % rows
                grp, pre_bb, loop_bb, done_bb = open_loop(builder, groups, f"cols_groups{p0}")
                accs = vector_phis(builder, v_n * len(pix), (zero, pre_bb))
                j0 = builder.mul(grp, _c(g_n))
                wg = builder.gep(wptr, [builder.mul(j0, _c(rows))])
                xg = builder.gep(xptr, [builder.mul(j0, _c(64))])  # the group's pixel-major quads (cols_pixel_major)
                # pixel i's quad j0 + q: a broadcast of xg[64 i + 32 + 4 q] (the pixel-major copy, one cache line)
                splats = {(i, q): _splat(builder, builder.load(builder.bitcast(
                    builder.gep(xg, [_c(64 * i + 32 + 4 * q)]), _I32.as_pointer()), align=4), _V8I)
                    for i in pix for q in range(g_n)}
                new = list(accs)  # accumulator k * v_n + s: pixel pix[k], vector s
                for s in range(v_n):
                    wv = builder.load(builder.bitcast(builder.gep(wg, [_c(8 * s)]), v32i8.as_pointer()), align=4)
                    wanted = sorted(set(quads[s]))
                    for k, i in enumerate(pix):
                        # lanes blended from the broadcasts (a vpblendd each: a shuffle of one loaded vector
                        # was folded by LLVM into _sat_pairs' byte shuffles, which then lost vpmaddubsw)
                        xv = splats[(i, wanted[0])]
                        for q in wanted[1:]:
                            mask = ir.Constant(ir.VectorType(ir.IntType(1), 8), [x == q for x in quads[s]])
                            xv = builder.select(mask, splats[(i, q)], xv)
                        a = k * v_n + s
                        new[a] = _dot4(builder, accs[a], builder.bitcast(xv, v32i8), wv, ones32, DOT)
                final = close_loop(builder, grp, groups, accs, new, loop_bb, done_bb, (zero, pre_bb))
                # the quads past them: one W vector (rows lanes) a quad, lane r row r, the bias added here
                rest = builder.sub(kq_v, rest0)
                jr, pre_bb, loop_bb, done_bb = open_loop(builder, rest, f"cols_rest{p0}")
                tails = vector_phis(builder, len(pix), (bias, pre_bb))
                j = builder.add(rest0, jr)
                wv = builder.load(builder.bitcast(builder.gep(wptr, [builder.mul(j, _c(rows))]), v32i8.as_pointer()),
                                  align=4)
                new = [_dot4(builder, tails[k], builder.bitcast(_splat(builder, quad_of(i, j), _V8I), v32i8), wv,
                             ones32, DOT) for k, i in enumerate(pix)]
                tails = close_loop(builder, jr, rest, tails, new, loop_bb, done_bb, (bias, pre_bb))
                for k in range(len(pix)):
                    acc = tails[k]
                    for s in range(v_n):
                        for idx in gathers[s]:
                            acc = builder.add(acc, builder.shuffle_vector(final[k * v_n + s], zero,
                                                                          ir.Constant(_V8I, idx)))
                    sums.append(acc)
            scale, quantize = _requantizer(builder, zp_v, y_signed)
            for i in range(n_pix):
                f = scale(sums[i], zero, mv)
                v = f if y_float else quantize(f)
                for r in range(rows):
                    dst = builder.gep(yptr, [builder.add(builder.mul(ldy_v, _c(r)), _c(i))])
                    e = builder.extract_element(v, _c(r, _I32))
                    builder.store(e, builder.bitcast(dst, e.type.as_pointer()))  # (a cast: the kernel of
                    # another y type is typed too, in a branch the dispatch never takes)
            return context.get_dummy_value()

        return sig, codegen

    return cols


def _dispatch_cols(y_signed: bool, y_float: bool):
    """cols(<_COLS_ARGS>, n_pix): _make_cols(MRS, n_pix) for n_pix 1..COLS (only whole row tiles take it: the
    matrix's last row tile, the one that may have fewer rows, is the one whose W vector would run off wq)."""
    kernels = {f"c{n}": _make_cols(MRS, n, y_signed, y_float) for n in range(1, COLS + 1)}
    lines = [f"def cols({_COLS_ARGS}, n_pix):"]
    for n in range(1, COLS + 1):
        lines.append(f"    {'if' if n == 1 else 'elif'} n_pix == {n}:" if n < COLS else "    else:")
        lines.append(f"        c{n}({_COLS_ARGS})")
    scope = dict(kernels)
    exec("\n".join(lines), scope)  # noqa: S102 -- generated dispatch over the generated kernels
    return njit(nogil=True, cache=False, error_model="numpy", inline="always")(scope["cols"])


_COLS_ARGS = "wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones"
_c_u, _c_s, _c_f = _dispatch_cols(False, False), _dispatch_cols(True, False), _dispatch_cols(False, True)


def pack_pairs(w: np.ndarray, zero_point=None, tile: int = MR) -> np.ndarray:
    """W - zero_point (M, K) as int16 pairs in tiles of `tile` rows, k-pair-major: flat int32, read-only.

    Tile t (rows m_t .. m_t + r_t, r_t = min(tile, M - m_t)) starts at m_t * KP (KP = ceil(K / 2));
    its element (j, r) at m_t * KP + j * r_t + r holds W'[m_t + r, 2j] in the low and W'[m_t + r, 2j + 1]
    in the high 16 bits (0 past K). zero_point: None, a scalar, or one per row (M,).
    """
    w = np.asarray(w)
    m, k = w.shape
    ws = w.astype(np.int32)
    if zero_point is not None:
        ws = ws - np.asarray(zero_point, np.int32).reshape(-1, 1) if np.ndim(zero_point) else ws - int(zero_point)
    kp = (k + 1) // 2
    if k % 2:
        ws = np.concatenate([ws, np.zeros((m, 1), np.int32)], axis=1)
    pairs = (ws[:, 0::2] & 0xFFFF) | (ws[:, 1::2] << 16)  # int32, the high half's sign carried by the shift
    out = np.empty(m * kp, np.int32)
    for t0 in range(0, m, tile):
        r = min(tile, m - t0)
        out[t0 * kp:(t0 + r) * kp] = pairs[t0:t0 + r].T.reshape(-1)
    out.flags.writeable = False
    return out


def row_sums(w: np.ndarray, zero_point=None) -> np.ndarray:
    """sum_k (W[m, k] - zero_point[m]) as int64 (M,): the bias correction for the input's zero point."""
    ws = np.asarray(w, np.int64)
    if zero_point is not None:
        ws = ws - (np.asarray(zero_point, np.int64).reshape(-1, 1) if np.ndim(zero_point) else int(zero_point))
    return ws.sum(axis=1)


def pair_offsets(offs: np.ndarray) -> np.ndarray:
    """A row-offset table padded to an even length (the last row repeated; its weight is 0): read-only int64."""
    offs = np.asarray(offs, np.int64)
    if offs.size % 2:
        offs = np.concatenate([offs, offs[-1:]])
    offs = np.ascontiguousarray(offs)
    offs.flags.writeable = False
    return offs


def signed(a):
    """Whether an integer array's type is signed (a compile-time constant in numba code)."""
    return a.dtype.kind == "i"


@overload(signed)
def _signed(a):
    s = bool(getattr(a.dtype, "signed", False))
    return lambda a: s


def is_float(a):
    """Whether an array's type is a float (a compile-time constant in numba code)."""
    return a.dtype.kind == "f"


@overload(is_float)
def _is_float(a):
    f = isinstance(a.dtype, types.Float)
    return lambda a: f


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _tile(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, rows, xs, ys):
    if is_float(y):
        if xs:
            _t_sf(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)
        else:
            _t_uf(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)
    elif xs:
        if ys:
            _t_ss(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)
        else:
            _t_su(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)
    elif ys:
        _t_us(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)
    else:
        _t_uu(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, b, rows)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _tile_sat_half(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows, ys):
    if is_float(y):
        _h_f(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)
    elif ys:
        _h_s(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)
    else:
        _h_u(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _strip_sat(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid, rows, ys):
    if is_float(y):
        _st_f(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid, rows)
    elif ys:
        _st_s(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid, rows)
    else:
        _st_u(wq, w_off, xq, x_off, tile_b, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, t_n, n_valid, rows)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _tile_sat(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows, ys):
    if is_float(y):
        _s_f(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)
    elif ys:
        _s_s(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)
    else:
        _s_u(wp, w_off, x, x_off, offs, y, y_off, ldy, kp_n, b, b_off, mult, zp, ones, rows)


@njit(nogil=True, cache=True, error_model="numpy")
def _cols_sat(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, n_pix, ys):
    # not inlined: inlined into _qgemm_sat, its code cost the whole-tile strips 3% (the same strip code, measured)
    if is_float(y):
        _c_f(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, n_pix)
    elif ys:
        _c_s(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, n_pix)
    else:
        _c_u(wq, w_off, xq, x_off, y, y_off, ldy, kq_n, b, b_off, mult, zp, ones, n_pix)


PB = 256  # pixels per column block: its X rows (K x PB bytes) stay in L2 across the row tiles


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _qgemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, xs, ys):
    kp_n = offs.size // 2
    vec_end = p_n // NP * NP
    for p0 in range(0, vec_end, PB):
        pe = min(vec_end, p0 + PB)
        for m in range(0, m_n, MR):
            rows = min(MR, m_n - m)
            for p in range(p0, pe, NP):
                _tile(wp, m * kp_n, xf, x0 + p, offs, yf, y0 + m * ldy + p, ldy, kp_n, b, m, mult, zp, rows, xs, ys)
    tail = p_n - vec_end
    if tail:  # the last < 16 pixels: computed into the workspace (MR x 16), the valid ones copied
        for m in range(0, m_n, MR):
            rows = min(MR, m_n - m)
            _tile(wp, m * kp_n, xf, x0 + vec_end, offs, ws, 0, NP, kp_n, b, m, mult, zp, rows, xs, ys)
            for r in range(rows):
                for j in range(tail):
                    yf[y0 + (m + r) * ldy + vec_end + j] = ws[r * NP + j]


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _pack_block(xf, x0, offs, xq, p0, t_n, p_n, kq_n, tile_b, ow, pitch, rowidx):
    """X's block of t_n 16-pixel tiles from pixel p0 packed into xq (tile t at t * tile_b: the quads of each
    tile interleaved, _pack16), read by every row tile; a last partial tile's other lanes X's next bytes (a
    convolution's rows: X readable past them; jump == 0: where they are inside X, else zero)."""
    jump = pitch - ow
    t4 = 0
    if WIDE and jump == 0:  # whole groups of 4 tiles inside X: 64 pixels a call (_pack64)
        t4 = min(t_n, (p_n - p0) // NP) // 4 * 4
        for t in range(0, t4, 4):
            for j in range(kq_n):
                _pack64(xf, x0 + p0 + t * NP, offs, j, xq, t * tile_b + j * 64, tile_b)
    for t in range(t4, t_n):
        q = p0 + t * NP
        if jump == 0:
            if q + NP <= p_n:
                for j in range(kq_n):
                    _pack16(xf, x0 + q, offs, j, xq, t * tile_b + j * 64)
                continue
            # the last tile: X needs no slack past its pixels, so a quad whose rows are not all 16 bytes inside
            # X takes only its pixels, the other lanes zero; the others are packed whole (their other lanes X's
            # next bytes: never stored). Byte by byte, the whole tile took 12 us of a 2048 x 49 pointwise layer's
            # 0.41 ms (Haswell code on Zen 5)
            n_in = p_n - q
            inside = xf.size - NP - x0 - q  # the largest row offset whose 16 bytes from q are inside X
            for j in range(kq_n):
                o = max(max(offs[4 * j], offs[4 * j + 1]), max(offs[4 * j + 2], offs[4 * j + 3]))
                if o <= inside:
                    _pack16(xf, x0 + q, offs, j, xq, t * tile_b + j * 64)
                    continue
                d = t * tile_b + j * 64
                for i in range(64):
                    xq[d + i] = 0
                for r4 in range(4):
                    src = x0 + offs[4 * j + r4] + q
                    for i in range(n_in):
                        xq[d + r4 + 4 * i] = xf[src + i]
            continue
        col = q % ow  # output pixel q + i of the tile: row (col + i) // ow after the tile's first row
        e = x0 + q // ow * pitch + col
        if col + NP <= ow:  # inside one output row: 16 contiguous pixels a row of the quad
            for j in range(kq_n):
                _pack16(xf, e, offs, j, xq, t * tile_b + j * 64)
            continue
        for i in range(NP):
            rowidx[i] = (col + i) // ow
        if ow >= NP:
            for j in range(kq_n):
                _pack16_rows2(xf, e, offs, j, xq, t * tile_b + j * 64, rowidx, jump)
        elif ow >= NP // 2:
            for j in range(kq_n):
                _pack16_rows3(xf, e, offs, j, xq, t * tile_b + j * 64, rowidx, jump)
        else:
            for j in range(kq_n):
                _pack16_rows(xf, e, offs, j, xq, t * tile_b + j * 64, rowidx, jump)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def cols_pixel_major(xq, t_off, kq_n, n_pix):
    """The quads of a packed tile's (_pack16: quad j of pixel i at xq[t_off + 64 j + 4 i]) first n_pix <= 8
    pixels copied pixel-major by groups of CM quads, for _make_cols: quads CM g .. CM g + CM - 1 of pixel i
    at xq[t_off + 64 (CM g + i) + 32 ..] (32 bytes), in the upper halves of the tile's quad rows, the lanes
    of pixels 8..15, which no kernel reads in a tile of 8 or fewer pixels (_tile_sat_half takes the lower
    halves). Read so, a pixel's CM quads are one vector load; from the tile's layout they took a cache line
    each (64 bytes for 4)."""
    x32 = xq.view(np.int32)
    base = t_off // 4
    for g in range(kq_n // CM):
        for i in range(n_pix):
            dst = base + 16 * (CM * g + i) + 8
            src = base + 16 * CM * g + i
            for q in range(CM):
                x32[dst + q] = x32[src + 16 * q]


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _qgemm_sat(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq, ys, ow, pitch):
    kq_n = offs.size // 4
    tile_b = kq_n * 64  # bytes of one packed 16-pixel tile
    vec_end = p_n // NP * NP
    rowidx = np.empty(NP, np.uint8)
    for p0 in range(0, p_n, PB):
        pe = min(p_n, p0 + PB)
        t_n = (pe - p0 + NP - 1) // NP
        _pack_block(xf, x0, offs, xq, p0, t_n, p_n, kq_n, tile_b, ow, pitch, rowidx)
        n_last = pe - p0 - (t_n - 1) * NP
        if not WIDE and n_last <= COLS:  # a last tile for _cols_sat: its pixels' quads pixel-major too
            cols_pixel_major(xq, (t_n - 1) * tile_b, kq_n, n_last)
        # the block's whole 16-pixel tiles: one strip a row tile (WIDE: its last, partial tile too, its stores
        # masked to the valid pixels)
        t_full = t_n if WIDE else max(0, (min(pe, vec_end) - p0) // NP)
        for m in range(0, m_n, MRS):
            rows = min(MRS, m_n - m)
            if t_full:
                _strip_sat(wq, m * kq_n, xq, 0, tile_b, yf, y0 + m * ldy + p0, ldy, kq_n, b, m, mult, zp, ones, t_full,
                           pe - p0, rows, ys)
            for t in range(t_full, t_n):
                p = p0 + t * NP
                if p_n - p <= COLS and rows == MRS and m * kq_n + (kq_n - 1) * MRS + 8 <= wq.size:
                    # the last 1..4 pixels, the tile's channels in the lanes (its last W quad read as 8 int32:
                    # not in the matrix's last row tile, where they would run off wq)
                    _cols_sat(wq, m * kq_n, xq, t * tile_b, yf, y0 + m * ldy + p, ldy, kq_n, b, m, mult, zp, ones,
                              p_n - p, ys)
                elif p_n - p <= NP // 2:  # the last 8 or fewer: a half tile into the workspace, the valid copied
                    _tile_sat_half(wq, m * kq_n, xq, t * tile_b, offs, ws, 0, NP, kq_n, b, m, mult, zp, ones, rows,
                                   ys)
                    for r in range(rows):
                        for jj in range(p_n - p):
                            yf[y0 + (m + r) * ldy + p + jj] = ws[r * NP + jj]
                else:  # the last < 16 pixels: computed into the workspace (MRS x 16), the valid ones copied
                    _tile_sat(wq, m * kq_n, xq, t * tile_b, offs, ws, 0, NP, kq_n, b, m, mult, zp, ones, rows, ys)
                    for r in range(rows):
                        for jj in range(p_n - p):
                            yf[y0 + (m + r) * ldy + p + jj] = ws[r * NP + jj]


CH = 16  # output channels in the lanes of the channel-lane kernels (one zmm: WIDE only)
CPX = 7  # pixels a channel-lane call: 7 x 7 images (49 pixels) in 7 calls


def _make_chlanes(cblk: int, npx: int, y_signed: bool, direct: bool = False):
    """The channel-lane micro-kernel (WIDE): cblk blocks of 16 output channels x npx pixels, the channels
    in the lanes and each pixel's quad broadcast -- for images whose pixel count leaves 16-pixel tiles mostly
    empty (7 x 7: 49 pixels in 4 tiles, 15 of 64 lanes idle; here 7 calls of 7 pixels, every lane used).

    ch(wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp): for block c < cblk, lane l < 16,
    pixel i < npx: acc = b[b_off + 16 c + l] + sum_{j < kq_n} the exact dot product (DOT) of the quad
    wq[w_off + 16 kq_n c + 16 j + l] (pack_quads(W, tile=16): 4 int8 weights of channel 16 c + l) and
    pixel p0 + i's quad j in the packed X (xq[(p) // 16 * tile_b + 64 j + 4 (p % 16)], _pack_block);
    y[y_off + (16 c + l) * ldy + i] = quantize.wide(float32(acc) * mult[b_off + 16 c + l]) (MLAS's
    requantization, as the strips), written through a byte transpose of each block: one masked
    8-byte store a channel.

    With `direct`, ch(<the same>, qoffs, x_off, ow) reads X in place from quad planes (qconv_direct's): pixel
    p's quad j at xq[x_off + qoffs[j] + 4 ((p // ow) tile_b + p % ow)], tile_b the planes' pitch."""
    if DOT == "vpmaddubsw":
        raise ValueError("_make_chlanes: exact dot products only (vpdpbusd or emulated)")

    if direct:
        @intrinsic
        def ch(typingctx, wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp, qoffs, x_off, ow):
            return types.void(wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp, qoffs, x_off,
                              ow), codegen
    else:
        @intrinsic
        def ch(typingctx, wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp):
            return types.void(wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp), codegen

    def codegen(context, builder, signature, args):
        kq_v, p0_v, tile_v, ldy_v, zp_v = args[2], args[4], args[5], args[8], args[12]
        wptr, yptr, bptr, mptr = arg_pointers(context, builder, signature, args, (0, 1), (6, 7), (9, 10),
                                              (11, 10))
        xptr = context.make_array(signature.args[3])(context, builder, args[3]).data
        v64i8 = ir.VectorType(_I8, 64)
        xbase = []
        offp = None
        if direct:
            offp = context.make_array(signature.args[13])(context, builder, args[13]).data
            xptr = builder.gep(xptr, [args[14]])
        for i in range(npx):
            p = builder.add(p0_v, _c(i))
            if direct:  # its position on the planes' grid, 4 bytes a position
                ow_v = args[15]
                pos = builder.add(builder.mul(builder.sdiv(p, ow_v), tile_v), builder.srem(p, ow_v))
                off = builder.mul(pos, _c(4))
            else:
                off = builder.add(builder.mul(builder.sdiv(p, _c(NP)), tile_v),
                                  builder.mul(builder.srem(p, _c(NP)), _c(4)))
            xbase.append(builder.gep(xptr, [off]))
        wblk = [builder.gep(wptr, [builder.mul(kq_v, _c(CH * c))]) for c in range(cblk)]
        bias = [builder.load(builder.bitcast(builder.gep(bptr, [_c(CH * c)]), _V16I.as_pointer()), align=4)
                for c in range(cblk)]
        init = [bias[c] for c in range(cblk) for _ in range(npx)]
        j, pre_bb, loop_bb, done_bb = open_loop(builder, kq_v, "ch")
        accs = vector_phis(builder, cblk * npx, (init, pre_bb))
        wvs = []
        for c in range(cblk):
            wp_j = builder.gep(wblk[c], [builder.mul(j, _c(CH))])
            prefetch(builder, builder.gep(wp_j, [_c(W_PREFETCH // 4)]))
            wvs.append(builder.load(builder.bitcast(wp_j, v64i8.as_pointer()), align=4))
        off = builder.mul(j, _c(64)) if offp is None else builder.load(builder.gep(offp, [j]))
        xvs = [builder.bitcast(_splat(builder, builder.load(builder.bitcast(builder.gep(xb, [off]),
                                                                          _I32.as_pointer()), align=4), _V16I),
                               v64i8) for xb in xbase]
        new = [_dot4(builder, accs[c * npx + i], xvs[i], wvs[c], None, DOT) for c in range(cblk)
               for i in range(npx)]
        final = close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (init, pre_bb))
        scale, quantize = _requantizer(builder, zp_v, y_signed)
        v16i8 = ir.VectorType(_I8, 16)
        v8i8 = ir.VectorType(_I8, 8)
        keep = ir.Constant(ir.VectorType(ir.IntType(1), 8), [i < npx for i in range(8)])
        for c in range(cblk):
            mv = builder.load(builder.bitcast(builder.gep(mptr, [_c(CH * c)]), _V16F.as_pointer()), align=4)
            qs = [quantize.wide(scale.wide(final[c * npx + i], mv)) for i in range(npx)]
            qs += [ir.Constant(v16i8, ir.Undefined)] * (8 - npx)
            while len(qs) > 1:  # the 8 pixel vectors concatenated: byte 16 i + l
                n = qs[0].type.count
                qs = [builder.shuffle_vector(qs[k], qs[k + 1], ir.Constant(ir.VectorType(_I32, 2 * n),
                                                                            list(range(2 * n))))
                      for k in range(0, len(qs), 2)]
            # channel-major: byte 8 l + i = byte 16 i + l
            t = builder.shuffle_vector(qs[0], ir.Constant(qs[0].type, ir.Undefined),
                                       ir.Constant(ir.VectorType(_I32, 128), [16 * (k % 8) + k // 8
                                                                               for k in range(128)]))
            for l in range(CH):
                part = builder.shuffle_vector(t, ir.Constant(t.type, ir.Undefined),
                                              ir.Constant(ir.VectorType(_I32, 8), list(range(8 * l, 8 * l + 8))))
                dst = builder.gep(yptr, [builder.mul(ldy_v, _c(CH * c + l))])
                _masked_store(builder, part, builder.bitcast(dst, v8i8.as_pointer()), keep, 1)
        return context.get_dummy_value()

    return ch


def _dispatch_chlanes(y_signed: bool, direct: bool = False):
    """chl(<_CH_ARGS>, cblk, npx): _make_chlanes(cblk, npx) for cblk 1..2, npx 1..CPX (direct: <_CHD_ARGS>)."""
    kernels = {f"k{c}_{n}": _make_chlanes(c, n, y_signed, direct) for c in (1, 2) for n in range(1, CPX + 1)}
    args = _CHD_ARGS if direct else _CH_ARGS
    lines = [f"def chl({args}, cblk, npx):"]
    first = True
    for c in (2, 1):
        for n in range(CPX, 0, -1):
            lines.append(f"    {'if' if first else 'elif'} cblk == {c} and npx == {n}:")
            lines.append(f"        k{c}_{n}({args})")
            first = False
    scope = dict(kernels)
    exec("\n".join(lines), scope)  # noqa: S102 -- generated dispatch over the generated kernels
    return njit(nogil=True, cache=False, error_model="numpy", inline="always")(scope["chl"])


_CH_ARGS = "wq, w_off, kq_n, xq, p0, tile_b, y, y_off, ldy, b, b_off, mult, zp"
_CHD_ARGS = _CH_ARGS + ", qoffs, x_off, ow"
if WIDE:
    _chl_u, _chl_s = _dispatch_chlanes(False), _dispatch_chlanes(True)
    _chd_u, _chd_s = _dispatch_chlanes(False, True), _dispatch_chlanes(True, True)
else:
    _chl_u = _chl_s = _chd_u = _chd_s = None


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _qgemm_chlanes(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, xq, ys, ow, pitch):
    kq_n = offs.size // 4
    tile_b = kq_n * 64
    rowidx = np.empty(NP, np.uint8)
    t_n = (p_n + NP - 1) // NP
    _pack_block(xf, x0, offs, xq, 0, t_n, p_n, kq_n, tile_b, ow, pitch, rowidx)
    for m in range(0, m_n, 2 * CH):
        cblk = 2 if m + 2 * CH <= m_n else 1
        for p in range(0, p_n, CPX):
            npx = min(CPX, p_n - p)
            if ys:
                _chl_s(wq, m * kq_n, kq_n, xq, p, tile_b, yf, y0 + m * ldy + p, ldy, b, m, mult, zp, cblk, npx)
            else:
                _chl_u(wq, m * kq_n, kq_n, xq, p, tile_b, yf, y0 + m * ldy + p, ldy, b, m, mult, zp, cblk, npx)


def _chl_sigs(yt):
    i = types.int64
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    return types.void(ri32, types.Array(types.uint8, 1, "C", readonly=True), i, ri64, types.Array(yt, 1, "C"), i,
                      i, i, i, ri32, rf32, i, types.Array(types.uint8, 1, "C"), i, i)


@njit([_chl_sigs(types.uint8), _chl_sigs(types.int8)], nogil=True, cache=True, error_model="numpy")
def qgemm2d_chlanes(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, xq, ow, pitch):
    """qgemm2d_sat / qgemm2d_sat_rows (ow, pitch: 0, 0 for a plain GEMM) with an exact dot product on a
    16-lane target (WIDE), the output channels in the lanes (_make_chlanes): for p_n <= PB pixels that fill
    16-pixel tiles poorly (7 x 7 images). wq is pack_quads(W, tile=CH) with m_n a multiple of CH; b and mult
    (m_n,); xq as qgemm2d_sat's. The same sums (exact) and requantization: the same outputs.

    Raises nothing; the caller checks WIDE, m_n % CH == 0 and p_n <= PB (QConvCompiled)."""
    _qgemm_chlanes(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, xq, signed(yf), ow, pitch)


def _sigs(xt, yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    x = types.Array(xt, 1, "C", readonly=True)
    y = types.Array(yt, 1, "C")
    i = types.int64
    return types.void(ri32, x, i, ri64, y, i, i, i, i, ri32, rf32, i, y)


_QGEMM_SIGS = [_sigs(xt, yt) for xt in (types.uint8, types.int8) for yt in (types.uint8, types.int8)]
_QGEMM_F32_SIGS = [_sigs(xt, types.float32) for xt in (types.uint8, types.int8)]


@njit(_QGEMM_SIGS, nogil=True, cache=True, error_model="numpy")
def qgemm2d(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws):
    """Y = requant(W' @ X + b) (module docstring), X given by an offset table (indirect GEMM).

    Args:
        wp: pack_pairs(W, w_zero_point), W (m_n, K).
        xf, x0, offs: X[k, p] = xf[x0 + offs[k] + p], uint8 or int8; offs from pair_offsets (K rounded up
            to even). Reads 16-pixel tiles: xf must hold 15 elements of slack past the last p < p_n read.
        yf, y0, ldy: Y[m, p] = yf[y0 + m * ldy + p], uint8 or int8 (the requantized output's type).
        m_n, p_n: rows of Y, pixels.
        b: (m_n,) int32 bias, the input's zero point folded in (b[m] = B[m] - x_zp * row_sums(W)[m]).
        mult: (m_n,) float32 x_scale * w_scale[m] / y_scale; zp: y_zero_point.
        ws: workspace of at least MR * 16 elements of Y's type.
    """
    _qgemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, signed(xf), signed(yf))


@njit(_QGEMM_F32_SIGS, nogil=True, cache=True, error_model="numpy")
def qgemm2d_f32(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws):
    """Y = float32(W' @ X + b) * mult[m], float32 Y (MatMulInteger -> Cast -> Mul fused): qgemm2d's
    arguments, zp unused, ws float32."""
    _qgemm(wp, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, signed(xf), False)


def _sat_sigs(yt):
    ri16 = types.Array(types.int16, 1, "C", readonly=True)
    return types.void(*_sigs(types.uint8, yt).args, ri16, types.Array(types.uint8, 1, "C"))


@njit([_sat_sigs(types.uint8), _sat_sigs(types.int8)], nogil=True, cache=True, error_model="numpy")
def qgemm2d_sat(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq):
    """qgemm2d in onnxruntime's u8 x s8 arithmetic on hosts without VNNI (MLAS's vpmaddubsw kernels) (X read
    only at its p_n pixels: no slack past them needed):

        acc[m, p] = b[m] + sum_j saturate_int16(W[m, 2j] X[2j, p] + W[m, 2j+1] X[2j+1, p])

    X uint8 (its raw values: the zero point is folded into b), W int8 with zero point 0 (its raw
    values), the pairs taken in the order of offs. Args as qgemm2d's, except: wq is
    pack_quads(W); offs is from quad_offsets (K rounded up to a multiple of 4); ones is ONES; ws holds
    MRS * 16 elements of Y's type; xq is a uint8 workspace of packed_bytes(offs.size) bytes (a block of
    PB pixels of X, its quads interleaved once for all row tiles, as MLAS packs its B).
    """
    _qgemm_sat(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq, signed(yf), 0, 0)


@njit([_sat_sigs(types.float32)], nogil=True, cache=True, error_model="numpy")
def qgemm2d_sat_f32(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq):
    """qgemm2d_sat with qgemm2d_f32's float epilogue (float32(acc) * mult[m]; zp unused, ws float32)."""
    _qgemm_sat(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq, False, 0, 0)


def _sat_rows_sigs(yt):
    i = types.int64
    return types.void(*_sat_sigs(yt).args, i, i)


@njit([_sat_rows_sigs(types.uint8), _sat_rows_sigs(types.int8)], nogil=True, cache=True, error_model="numpy")
def qgemm2d_sat_rows(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq, ow, pitch):
    """qgemm2d_sat over a convolution's output pixels only: p_n = OH * OW pixels, output pixel p = i * OW + j
    reading X at x0 + offs[k] + i * pitch + j (pitch: the row pitch of the padded input's phase planes, at
    least OW). The indirect GEMM otherwise computes OH x pitch pixels and the caller crops the pitch - OW
    columns past each row (12% of a 3x3 conv's work at 14 x 14, 22% at 7 x 7). Each 16-pixel tile's X rows
    are gathered across its output rows when packed (_pack16_rows); Y[m, p] = yf[y0 + m * ldy + p]. Needs
    OW >= 5 (a tile spans at most ROW_SPANS rows) and X readable 3 * (pitch - OW) + 15 elements past a
    row's last pixel read.
    """
    _qgemm_sat(wq, xf, x0, offs, yf, y0, ldy, m_n, p_n, b, mult, zp, ws, ones, xq, signed(yf), ow, pitch)


def _direct_sig(yt):
    i = types.int64
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    ri64 = types.Array(types.int64, 1, "C", readonly=True)
    return types.void(ri32, types.Array(types.uint8, 1, "C", readonly=True), i, ri64, types.Array(yt, 1, "C"), i, i,
                      i, i, ri32, types.Array(types.float32, 1, "C", readonly=True), i,
                      types.Array(types.int16, 1, "C", readonly=True), ri64)


@njit([_direct_sig(types.uint8), _direct_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qconv_direct(wq, xq, x0, qoffs, yf, y0, ldy, m_n, t_n, b, mult, zp, ones, segs):
    """A convolution's qgemm2d_sat_rows product (exact dot product, WIDE) with X read in place from its quad
    planes: no tiles packed. The output pixels are taken on the planes' grid (pixel (i, j) at i * pitch + j,
    pitch = the planes' width, the columns j >= OW computed and dropped), t_n tiles of 16, so a tile's quad j
    is one 64-byte vector at xq[x0 + 64 t + qoffs[j]].

    Args:
        wq: pack_quads(W) with W (m_n, KQ * 4), k = (c // 4, kh, kw, c % 4), C rounded up to a multiple of 4
            (0 past C): each quad 4 channels at one tap, a quad's taps one after another (their reads share lines).
        xq, x0: the image's quad planes (compiled/qconv.py's quad_planes_q): channels 4 cq .. 4 cq + 3 of plane
            element e at xq[x0 + 4 (cq * planes + e) .. + 4]; readable 64 bytes past the last tile's reads.
        qoffs: (KQ,) byte offsets of quad j = (cq, tap) (direct_offsets).
        yf, y0, ldy: Y[m, p] = yf[y0 + m * ldy + p], uint8 or int8, p < OH * OW.
        t_n, segs: direct_tables' tile count and store table.
        b, mult, zp, ones: as qgemm2d_sat's. The sums and requantization are the strips' (the same outputs).
    """
    kq_n = qoffs.size
    tb = PB // NP
    for t0 in range(0, t_n, tb):
        nt = min(tb, t_n - t0)
        for m in range(0, m_n, MRS):
            rows = min(MRS, m_n - m)
            if signed(yf):
                _sd_s(wq, m * kq_n, xq, x0 + t0 * 64, 64, yf, y0 + m * ldy, ldy, kq_n, b, m, mult, zp, ones, nt,
                      t0 * SEGS, qoffs, segs, rows)
            else:
                _sd_u(wq, m * kq_n, xq, x0 + t0 * 64, 64, yf, y0 + m * ldy, ldy, kq_n, b, m, mult, zp, ones, nt,
                      t0 * SEGS, qoffs, segs, rows)


def _direct_chlanes_sig(yt):
    i = types.int64
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    return types.void(ri32, types.Array(types.uint8, 1, "C", readonly=True), i,
                      types.Array(types.int64, 1, "C", readonly=True), types.Array(yt, 1, "C"), i, i, i, i, ri32,
                      types.Array(types.float32, 1, "C", readonly=True), i, i, i)


@njit([_direct_chlanes_sig(types.uint8), _direct_chlanes_sig(types.int8)], nogil=True, cache=True,
      error_model="numpy")
def qconv_direct_chlanes(wq, xq, x0, qoffs, yf, y0, ldy, m_n, p_n, b, mult, zp, ow, pitch):
    """qconv_direct with the output channels in the lanes (_make_chlanes' `direct`): each output pixel's quad
    broadcast from the quad planes, so no position of the planes' grid past OW is computed (where 16-pixel
    tiles of the grid would add more than 1/16 to the pixels: 14 x 14 and 7 x 7 outputs). wq is pack_quads(W,
    tile=CH) of qconv_direct's W; m_n a multiple of CH; p_n = OH * OW; pitch the planes' width; the rest as
    qconv_direct's. The same sums (exact) and requantization: the same outputs.

    Raises nothing; the caller checks WIDE and m_n % CH == 0 (QConvCompiled)."""
    kq_n = qoffs.size
    for m in range(0, m_n, 2 * CH):
        cblk = 2 if m + 2 * CH <= m_n else 1
        for p in range(0, p_n, CPX):
            npx = min(CPX, p_n - p)
            if signed(yf):
                _chd_s(wq, m * kq_n, kq_n, xq, p, pitch, yf, y0 + m * ldy + p, ldy, b, m, mult, zp, qoffs, x0, ow,
                       cblk, npx)
            else:
                _chd_u(wq, m * kq_n, kq_n, xq, p, pitch, yf, y0 + m * ldy + p, ldy, b, m, mult, zp, qoffs, x0, ow,
                       cblk, npx)


def direct_offsets(taps: np.ndarray, channels: int, cq_bytes: int) -> np.ndarray:
    """qconv_direct's qoffs: (KQ,) int64, read-only, qoffs[cq * KH * KW + t] = cq * cq_bytes + 4 taps[t].

    taps: (KH * KW,) element offsets of the taps in one channel's planes (indirect_layout's for one
    channel); channels: C (quads ceil(C / 4)); cq_bytes: bytes of one quad's planes."""
    cq_n = (channels + 3) // 4
    qoffs = np.ascontiguousarray((np.arange(cq_n, dtype=np.int64)[:, None] * cq_bytes
                                  + 4 * np.asarray(taps, np.int64)[None, :]).reshape(-1))
    qoffs.flags.writeable = False
    return qoffs


def direct_tables(oh: int, ow: int, pitch: int):
    """(t_n, segs) of qconv_direct for an OH x OW output on planes `pitch` wide: its tiles of 16 grid positions,
    and segs (t_n * SEGS,) int64, read-only: per tile, its runs of valid lanes as (dst << 16) | lanes mask, dst
    the output index lane 0 would have; unused entries 0 (no lanes).

    Raises:
        ValueError: pitch < DIRECT_PITCH or pitch < ow (a tile would span more than SEGS runs).
    """
    if pitch < max(ow, DIRECT_PITCH):
        raise ValueError(f"direct_tables: pitch {pitch} under max(OW {ow}, {DIRECT_PITCH})")
    p_ext = (oh - 1) * pitch + ow
    t_n = -(-p_ext // NP)
    q = np.arange(t_n * NP, dtype=np.int64)
    valid = (q < p_ext) & (q % pitch < ow)
    dst = q // pitch * ow + q % pitch
    segs = np.zeros((t_n, SEGS), np.int64)
    for t in range(t_n):
        lanes = np.flatnonzero(valid[t * NP:(t + 1) * NP])
        runs = np.split(lanes, np.flatnonzero(np.diff(lanes) != 1) + 1) if lanes.size else []
        for s, run in enumerate(runs):
            segs[t, s] = (int(dst[t * NP + run[0]]) - int(run[0])) * 65536 + int(np.sum(1 << run))
    segs.flags.writeable = False
    return t_n, segs.reshape(-1)


PBA = 256  # pixels per block of qconv_amx: its packed tiles (16 of K64 quads, and one more) stay in L2


def _qconv_amx_sig(yt):
    i = types.int64

    def ro(t):
        return types.Array(t, 1, "C", readonly=True)

    return types.void(i, ro(types.int8), i, ro(types.uint8), i, ro(types.int64), types.Array(types.uint8, 1, "C"),
                      types.Array(yt, 1, "C"), i, i, i, i, ro(types.int32), ro(types.float32), i, i, i)


@njit([_qconv_amx_sig(types.uint8), _qconv_amx_sig(types.int8)], nogil=True, cache=True, error_model="numpy")
def qconv_amx(addr, wa, k64, xf, x0, offs, xq, yf, y0, ldy, m_n, p_n, b, mult, zp, ow, pitch):
    """qgemm2d_sat's (or, with ow and pitch, qgemm2d_sat_rows's) product on AMX tiles: for each block of PBA
    pixels, its X tiles packed as _pack_block packs them (tile t at xq[t * 16 k64], quad j at + 64 j), then
    compiled/amx.py's amx_qconv_<kind> at address `addr` over them: Y[m, p] = yf[y0 + m * ldy + p] =
    requantize(b[m] + sum_k W[m, k] X[k, p]) for p < p_n. wa: amx.pack_rows(W) (rows of k64 bytes, K64 >=
    the quads of offs x 4); xq: at least (PBA / 16 + 1) * 16 k64 bytes. The rest as qgemm2d_sat_rows's."""
    kq_n = offs.size // 4
    tile_b = 16 * k64
    rowidx = np.empty(NP, np.uint8)
    for p0 in range(0, p_n, PBA):
        pe = min(p_n, p0 + PBA)
        t_n = (pe - p0 + NP - 1) // NP
        _pack_block(xf, x0, offs, xq, p0, t_n, p_n, kq_n, tile_b, ow, pitch, rowidx)
        call_qconv(addr, wa, k64, xq, tile_b, t_n, m_n, pe - p0, b, mult, zp, yf, y0 + p0, ldy)


def amx_workspace_bytes(k4: int) -> int:
    """Bytes of qconv_amx's xq for an offset table of k4 entries: PBA / 16 tiles and one more, of 16 K64."""
    k64 = max(64, (k4 + 63) // 64 * 64)
    return (PBA // NP + 1) * 16 * k64


def packed_bytes(k4: int) -> int:
    """Bytes of qgemm2d_sat's xq workspace for an offset table of k4 entries (a multiple of 4)."""
    return k4 * PB


ONES = np.ones(16, np.int16)
ONES.flags.writeable = False
"""qgemm2d_sat's `ones` argument."""


def pack_quads(w: np.ndarray, tile: int = MRS) -> np.ndarray:
    """int8 W (M, K) as quads of k in tiles of `tile` rows, k-quad-major: flat int32, read-only.

    Tile t (rows m_t .. m_t + r_t) starts at m_t * KQ (KQ = ceil(K / 4)); its element (j, r) at
    m_t * KQ + j * r_t + r holds the bytes W[m_t + r, 4j .. 4j + 3] (byte i = k 4j + i; 0 past K).
    """
    w = np.asarray(w)
    if w.dtype != np.int8:
        raise TypeError(f"pack_quads takes int8 weights, got {w.dtype}")
    m, k = w.shape
    kq = (k + 3) // 4
    wb = np.zeros((m, kq * 4), np.int8)
    wb[:, :k] = w
    quads = wb.view(np.int32)  # (M, KQ): little-endian, byte i of a quad = k 4j + i
    out = np.empty(m * kq, np.int32)
    for t0 in range(0, m, tile):
        r = min(tile, m - t0)
        out[t0 * kq:(t0 + r) * kq] = quads[t0:t0 + r].T.reshape(-1)
    out.flags.writeable = False
    return out


def quad_offsets(offs: np.ndarray) -> np.ndarray:
    """A row-offset table padded to a multiple of 4 (the last row repeated; its weights are 0): read-only int64."""
    offs = np.asarray(offs, np.int64)
    pad = -offs.size % 4
    if pad:
        offs = np.concatenate([offs, np.repeat(offs[-1:], pad)])
    offs = np.ascontiguousarray(offs)
    offs.flags.writeable = False
    return offs


GB = 4  # 8-column blocks of the GEMV's widest micro-tile: 4 accumulators, the A quad's broadcast and the
#   saturating steps' temporaries fit AVX2's 16 ymm


def _make_gemv(blocks: int, y_signed: bool, y_float: bool):
    """The GEMV micro-kernel for `blocks` x 8 output columns (qgemv_sat).

    gemv(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones): for c < 8 * blocks,
    acc = b[b_off + c] + sum_{j < kq_n} saturate_int16(A[4j] W(c, 4j) + A[4j+1] W(c, 4j+1))
    + saturate_int16(A[4j+2] W(c, 4j+2) + A[4j+3] W(c, 4j+3)), A[i] = a[a_off + i] (uint8) and W(c, 4j + t)
    byte t of wq[w_off + (c // 8) * 8 * kq_n + j * 8 + c % 8] (pack_quads with tile 8); y[y_off + c] =
    saturate(rint(float32(acc) * mult[b_off + c]) + zp), or float32(acc) * mult[b_off + c] with y_float.
    The 8 columns of a block are the 8 lanes: A's quad j is broadcast and multiplied with the block's 8
    quads of W (vpmaddubsw, then vpmaddwd by ones: the products paired as MLAS pairs them)."""

    @intrinsic
    def gemv(typingctx, wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones):
        sig = types.void(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones)

        def codegen(context, builder, signature, args):
            kq_v, zp_v = args[4], args[10]
            wptr, aptr, yptr, bptr, mptr = arg_pointers(context, builder, signature, args,
                                                        (0, 1), (2, 3), (5, 6), (7, 8), (9, 8))
            ones32 = _ones32(context, builder, signature.args[11], args[11])
            v32i8 = ir.VectorType(_I8, 32)
            fn = builder.function
            pre_bb = builder.block
            loop_bb = fn.append_basic_block("kq_loop")
            done_bb = fn.append_basic_block("kq_done")
            zero = ir.Constant(_V8I, [0] * 8)
            stride = builder.mul(kq_v, _c(8))  # int32 elements between two blocks' tiles
            builder.cbranch(builder.icmp_signed(">", kq_v, _c(0)), loop_bb, done_bb)
            builder.position_at_end(loop_bb)
            j = builder.phi(_I64)
            j.add_incoming(_c(0), pre_bb)
            accs = vector_phis(builder, blocks, (zero, pre_bb))
            quad = builder.load(builder.bitcast(builder.gep(aptr, [builder.mul(j, _c(4))]), _I32.as_pointer()),
                                align=1)
            av = builder.bitcast(_splat(builder, quad, _V8I), v32i8)
            wrow = builder.gep(wptr, [builder.mul(j, _c(8))])
            new = []
            for t in range(blocks):
                wv = builder.load(builder.bitcast(builder.gep(wrow, [builder.mul(stride, _c(t))]),
                                                  v32i8.as_pointer()), align=4)
                new.append(_dot4(builder, accs[t], av, wv, ones32, DOT))
            final = close_loop(builder, j, kq_v, accs, new, loop_bb, done_bb, (zero, pre_bb))
            scale, quantize = _requantizer(builder, zp_v, y_signed)
            for t, ph in enumerate(final):
                bv = builder.load(builder.bitcast(builder.gep(bptr, [_c(8 * t)]), _V8I.as_pointer()), align=4)
                mv = builder.load(builder.bitcast(builder.gep(mptr, [_c(8 * t)]), _V8F.as_pointer()), align=4)
                f = scale(ph, bv, mv)
                dst = builder.gep(yptr, [_c(8 * t)])
                if y_float:
                    builder.store(f, builder.bitcast(dst, _V8F.as_pointer()), align=4)
                else:
                    q = quantize(f)
                    builder.store(q, builder.bitcast(dst, q.type.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return gemv


_GEMV_ARGS = "wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones"
_gv_u = dispatch_rows(lambda n: _make_gemv(n, False, False), GB, _GEMV_ARGS)
_gv_s = dispatch_rows(lambda n: _make_gemv(n, True, False), GB, _GEMV_ARGS)
_gv_f = dispatch_rows(lambda n: _make_gemv(n, False, True), GB, _GEMV_ARGS)


@njit(nogil=True, cache=True, error_model="numpy", inline="always")
def _gemv_tile(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones, blocks):
    if is_float(y):
        _gv_f(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones, blocks)
    elif signed(y):
        _gv_s(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones, blocks)
    else:
        _gv_u(wq, w_off, a, a_off, kq_n, y, y_off, b, b_off, mult, zp, ones, blocks)


def _gemv_sigs(yt):
    ri32 = types.Array(types.int32, 1, "C", readonly=True)
    rf32 = types.Array(types.float32, 1, "C", readonly=True)
    ri16 = types.Array(types.int16, 1, "C", readonly=True)
    u8 = types.Array(types.uint8, 1, "C", readonly=True)
    y = types.Array(yt, 1, "C")
    i = types.int64
    return types.void(ri32, u8, y, i, i, i, ri32, rf32, i, ri16, y)


@njit([_gemv_sigs(t) for t in (types.uint8, types.int8, types.float32)], nogil=True, cache=True,
      error_model="numpy")
def qgemv_sat(wq, a, y, m_n, n_n, kq_n, b, mult, zp, ones, ws):
    """Y = requant(A @ W^T + b) for a few rows of A, in onnxruntime's u8 x s8 arithmetic without VNNI
    (qgemm2d_sat's sums, each output's k pairs in the same order), the output columns in the lanes:

        acc[i, c] = b[c] + sum_j saturate_int16(A[i, 2j] W[c, 2j] + A[i, 2j+1] W[c, 2j+1])
        Y[i, c]   = saturate(rint(float32(acc[i, c]) * mult[c]) + zp)   (float32 Y: float32(acc) * mult[c])

    The product of a batch-1 QGemm / QLinearMatMul: qgemm2d_sat puts pixels (here A's rows) in the
    lanes, 1 of 16 used at M = 1.

    Args:
        wq: pack_quads(W, tile=8) of the int8 W (N', K) with N' = n_n rounded up to a multiple of 8 (rows
            past n_n zero).
        a: uint8 A (m_n, 4 * kq_n) flat: each row padded to whole quads (pad values free: their W is 0).
        y: Y (m_n, n_n) flat: uint8, int8 or float32.
        b, mult: (N',) int32 bias (A's zero point folded in) and float32 multipliers; zp: Y's zero point.
        ones: ONES; ws: 8 * GB elements of Y's type (the last block's columns past n_n land there).
    """
    w_tile = 8 * kq_n
    full = n_n // 8
    for i in range(m_n):
        a_off = i * 4 * kq_n
        y_off = i * n_n
        t = 0
        while t + GB <= full:
            _gemv_tile(wq, t * w_tile, a, a_off, kq_n, y, y_off + 8 * t, b, 8 * t, mult, zp, ones, GB)
            t += GB
        if t < full:
            _gemv_tile(wq, t * w_tile, a, a_off, kq_n, y, y_off + 8 * t, b, 8 * t, mult, zp, ones, full - t)
            t = full
        if n_n > 8 * full:  # the last columns: a whole block computed into ws, the valid ones copied
            _gemv_tile(wq, t * w_tile, a, a_off, kq_n, ws, 0, b, 8 * t, mult, zp, ones, 1)
            for c in range(n_n - 8 * full):
                y[y_off + 8 * full + c] = ws[c]
