"""Pointwise (1x1) convolution in the blocked layout NCHW8c, bias, sum input and activation fused.

    Y[n, m, p] = act(b[m] + sum_k W[m, k] * X[n, k, p] (+ Z[n, m, p]))

with X, Y and Z stored NCHW8c (ops/layouts.py): channel c of pixel p at
((c // 8) * P + p) * 8 + c % 8 of an image, P = H * W. This is ONNX Conv
with a 1x1 kernel, group 1 (and any stride, through the pixel pitch), and
onnxruntime's NCHWc pointwise convolution (MLAS's MlasConvPointwise): in
this layout the eight output channels of a block are one AVX2 vector, so
the micro-kernel keeps a tile of RP pixels x 16 output channels (two
blocks) in 12 vector registers over the k loop: per input channel k, two
vector loads of packed W (16 output channels, contiguous), RP broadcasts of
X[k, p] (8 floats apart: one pixel's block) and 2 * RP multiply-adds -- the
register blocking of compiled/gemm.py with the roles of X and W swapped
(Goto & van de Geijn 2008). When M % 16 == 8 the last panel is 24 channels
(three blocks) x RP3 = 4 pixels, so no panel of one block wastes its
broadcasts (12-15% faster on MobileNetV2's 24-channel projections; panels
of 24 for every M were no faster than of 16). Output channels in blocks of
8 and pixels one at a time, so there are no tails: M % 8 == 0 and K % 8 == 0
(the kernel's supports() checks), any number of pixels.

Blocking: a block of pixels at a time (its M x PB outputs stay in L2 while
the activation is applied), K in chunks of KC (later chunks accumulate onto
Y), and for each output panel the packed W panel (KC x 16 floats, 16 KiB)
stays in L1 across the block's pixel tiles. Where W is large and the pixels
few, so that every further block would stream W again at more cost than Y
leaving L2, all pixels are one block (_block_pixels); a convolution's output
rows (gemm_nchwc_rows) go in groups that fill a block, and rows narrower than
24 pixels share micro-tiles across rows (_make_gathered: each pixel's X at its
own offset), so ResNet-50's 7-wide layer4 reads its 9 MiB W once, in tiles of 6. A 1x1 projection (K > M, 32 <= M <=
96: two to six panels each reading the same X) takes K in chunks of
KC_PROJECTION = 64 instead: a chunk's X (64 channels of the block's pixels)
stays in cache for the next panel, where 256 channels of an X that the layer
before wrote out of cache (a batch) did not (15-20% faster in the model on
MobileNetV2's 192 -> 32 projections at batch 8, no change at batch 1; the
chunks only split each multiply-add chain where it is stored to Y and loaded
back, exactly, so the bits do not change). (Running every panel on one
pixel tile while its inputs are in L1 was 10-16% faster with cold caches
on MobileNetV2's projections, but no faster inside the model: not kept.)

W prefetch: the first pixel tile of each panel's K chunk (mode & PREFETCH_W) prefetches every line of
the W row W_PREFETCH bytes ahead of the one it reads; the other tiles find the chunk in L1. In a model
the layer before has evicted W, and the hardware prefetcher left the first tile waiting on it: ResNet-50's
layer4 in the model (16 lanes, one thread, Zen 5) 1x1 2048 -> 512 0.585 -> 0.525 ms, 512 -> 2048 + Z
0.597 -> 0.553, the 3x3 indirect 1.27-1.30 -> 1.13-1.17, the stride-2 projection 1.20 -> 1.07; warm
(the layer alone, repeated) no change beyond the noise. Whole forwards, one thread
(benchmarks/ab_checkouts.py, 5 rounds): ResNet-50 1.029x (Haswell code 1.042x), MobileNetV2 1.041x
(1.041x), GoogLeNet 1.023x (1.028x), PP-OCR det and rec within 2%. Every other tile runs the k loop
without the prefetches (accumulate_tile's second loop), so a panel's later tiles pay nothing for it.

Numerically: each output is a sequential multiply-add chain over k in
float32 (fused where the CPU has FMA), then + b[m], then + Z, then the
activation (epilogue.py): the operations and order of the NCHW kernel
(compiled/gemm.py), so the two layouts give the same bits; |error| <=
K u sum_k |W X| + O(u^2), u = 2^-24 (Higham 2002, sec. 3.5).

Widths: this is a template over LANES (compiled/widths.py). Imported as itself it is the NCHW8c
kernel described above; lanes16/nchwc_gemm.py is the same source at LANES = 16, the NCHW16c kernel
(AVX-512: one zmm register a block): read every 8 above as BLOCK = LANES channels and the panels as
2 (a last 3) blocks. The tile shapes and chunk sizes are the 8-lane ones at both widths (the sums,
so the bits, do not depend on them).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .epilogue import RELU, activate_range
from .gemm import _I64, _fmuladd, _splat, accumulate_tile, arg_pointers, dispatch_rows, prefetch, vector_type
from .gemm import pack_weights as gemm_pack
from .jit import njit
from .widths import lanes_here

LANES = lanes_here(globals())  # 8 imported as itself; 16 as lanes16/nchwc_gemm.py (compiled/widths.py)
BLOCK = LANES  # channels per block: one vector of float32 (one ymm register at 8, one zmm at 16)
_VL = vector_type(LANES)
RP = 6  # pixels per micro-tile (12 accumulators + 2 W vectors + 1 broadcast: 15 of 16 ymm)
NV = 2  # output blocks per micro-tile (16 channels)
RP3 = 4  # pixels per micro-tile of a 24-channel panel (12 accumulators + 3 W vectors + 1 broadcast)
KC = 256  # k chunk: the packed W panel, KC x 16 floats (16 KiB), stays in L1
PB_BYTES = 192 << 10  # a pixel block of Y (M x PB floats) at most this size, to stay in L2
# k chunk of 1x1 projections, K > M with 32 <= M <= 96 (module docstring): MobileNetV2 batch 8 in the model,
# 192 -> 32 channels 2.35 -> 1.85 ms, 576 -> 96 4.34 -> 4.11 (batch 1: no change); expansions, M >= 160 and
# the indirect KxK convolutions (gemm_nchwc_rows) were 1-7% slower with it
KC_PROJECTION = 64
W_PREFETCH = 4096  # bytes of W ahead of the row being read that a panel's first tile prefetches
PREFETCH_W = 16  # the micro-kernels' mode bit for it (accumulate_tile's step_cold)


def _tile_codegen(rows: int, vectors: int, gathered: bool):
    """The LLVM IR of _make_micro's (gathered: _make_gathered's) micro-kernel: both hold a tile of
    `rows` pixels x `vectors` output blocks in registers over k and differ only in where pixel r's
    X row starts (x_off + r * ldx, or x_off + px[j + r]: one argument more, so the arguments from Y
    on sit one place later)."""
    s = 1 if gathered else 0

    def codegen(context, builder, signature, args):
        ldb_v, k_n_v, mode_v = args[9 + s], args[10 + s], args[13 + s]
        c = lambda v: ir.Constant(_I64, v)  # noqa: E731
        # W, X, the offset table, Y and B at their offsets (and px at j); Z at Y's
        wptr, xptr, optr, yptr, bptr = arg_pointers(context, builder, signature, args,
                                                    (0, 1), (2, 3), (4, 5), (7 + s, 8 + s), (11 + s, 12 + s))
        if gathered:
            (pptr,) = arg_pointers(context, builder, signature, args, (6, 7))
            xrows = [builder.gep(xptr, [builder.load(builder.gep(pptr, [c(r)]))]) for r in range(rows)]
        else:
            xrows = [builder.gep(xptr, [builder.mul(args[6], c(r))]) for r in range(rows)]
        fma = _fmuladd(builder, LANES)
        bvec = [builder.load(builder.bitcast(builder.gep(bptr, [c(BLOCK * v)]), _VL.as_pointer()), align=4)
                for v in range(vectors)]
        at = [builder.add(builder.mul(ldb_v, c(v)), c(BLOCK * r)) for r in range(rows) for v in range(vectors)]
        slots = [builder.bitcast(builder.gep(yptr, [a]), _VL.as_pointer()) for a in at]

        def step(k, accs, cold=False):
            xo = builder.load(builder.gep(optr, [k]))
            wrow = builder.gep(wptr, [builder.mul(k, c(BLOCK * vectors))])
            if cold:  # W's row W_PREFETCH bytes on, every line of it
                for line in range(0, 4 * BLOCK * vectors, 64):
                    prefetch(builder, builder.gep(wrow, [c((W_PREFETCH + line) // 4)]))
            wv = [builder.load(builder.bitcast(builder.gep(wrow, [c(BLOCK * v)]), _VL.as_pointer()), align=4)
                  for v in range(vectors)]
            new = []
            for r in range(rows):
                xb = _splat(builder, builder.load(builder.gep(xrows[r], [xo])), LANES)
                for v in range(vectors):
                    new.append(builder.call(fma, [xb, wv[v], accs[r * vectors + v]]))
            return new

        def z_slots():
            (zptr,) = arg_pointers(context, builder, signature, args, (14 + s, 8 + s))
            return [builder.bitcast(builder.gep(zptr, [a]), _VL.as_pointer()) for a in at]

        mode = builder.zext(mode_v, _I64) if mode_v.type.width < 64 else mode_v
        accumulate_tile(builder, slots, mode, k_n_v, step, [bvec[i % vectors] for i in range(len(slots))],
                        z_slots, lambda k, accs: step(k, accs, True))
        return context.get_dummy_value()

    return codegen


def _make_micro(rows: int, vectors: int):
    """The micro-kernel for `rows` pixels x `vectors` output blocks of 8 channels.

    micro(wp, w_off, x, x_off, offs, k0, ldx, y, y_off, ldb, k_n, b, b_off, mode, z):
    y[y_off + v * ldb + 8 r + l] = ((mode & 1 ? y : 0)
        + sum_{k < k_n} x[x_off + offs[k0 + k] + r * ldx] * wp[w_off + k * 8 * vectors + 8 v + l])
        (+ b[b_off + 8 v + l] if mode & 2) (+ z[same index as y] if mode & 6 == 6),
    r < rows, v < vectors, l < 8. Offsets and pitches in elements; the caller keeps every access in bounds.
    mode & 16 (PREFETCH_W): the k loop also prefetches each W row's lines W_PREFETCH bytes ahead (the same sums).
    """

    @intrinsic
    def micro(typingctx, wp, w_off, x, x_off, offs, k0, ldx, y, y_off, ldb, k_n, b, b_off, mode, z):
        return (types.void(wp, w_off, x, x_off, offs, k0, ldx, y, y_off, ldb, k_n, b, b_off, mode, z),
                _tile_codegen(rows, vectors, False))

    return micro


def _make_gathered(rows: int, vectors: int):
    """_make_micro's tile with each pixel's X at its own offset: micro(wp, w_off, x, x_off, offs, k0,
    px, j, y, y_off, ldb, k_n, b, b_off, mode, z) reads pixel r at x[x_off + px[j + r] + offs[k0 + k]]
    (px: int64 pixel offsets) and writes it at y[y_off + 8 r + ...], as _make_micro's does. The
    pixels of a tile may then come from different output rows of a convolution (narrow outputs:
    ResNet-50's 7-wide layer4 runs tiles of 6 + 1 a row otherwise)."""

    @intrinsic
    def micro(typingctx, wp, w_off, x, x_off, offs, k0, px, j, y, y_off, ldb, k_n, b, b_off, mode, z):
        return (types.void(wp, w_off, x, x_off, offs, k0, px, j, y, y_off, ldb, k_n, b, b_off, mode, z),
                _tile_codegen(rows, vectors, True))

    return micro


_ARGS = "wp, w_off, x, x_off, offs, k0, ldx, y, y_off, ldb, kn, b, b_off, mode, z"
_ARGS_GATHERED = "wp, w_off, x, x_off, offs, k0, px, j, y, y_off, ldb, kn, b, b_off, mode, z"


def _dispatch(vectors: int, rows: int = RP):
    """The micro-kernel of `rows` (1..rows) pixels and `vectors` blocks."""
    return dispatch_rows(lambda r: _make_micro(r, vectors), rows, _ARGS)


_tile2, _tile1, _tile3 = _dispatch(2), _dispatch(1), _dispatch(3, RP3)
_tile2_gathered = dispatch_rows(lambda r: _make_gathered(r, 2), RP, _ARGS_GATHERED)


def panel_widths(m_n: int) -> list:
    """The output panels' widths in channels: 16 each, but a last 24 when m_n % 16 == 8 (three
    blocks share each broadcast of X, 12-15% faster than a 16 and an 8 on MobileNetV2's 24
    channels), and 8 when m_n == 8."""
    if m_n % (NV * BLOCK) == BLOCK and m_n > BLOCK:
        return [NV * BLOCK] * (m_n // (NV * BLOCK) - 1) + [3 * BLOCK]
    return [min(NV * BLOCK, m_n - m0) for m0 in range(0, m_n, NV * BLOCK)]


def pack_weights(w: np.ndarray) -> np.ndarray:
    """W (M, K), M % 8 == 0, as panels of output channels (panel_widths: 16, a last 24 or 8), each
    k-major (gemm.pack_weights): the panel of v channels from m0 has element (k, j) at
    m0 K + k v + j. Flat float32, read-only.

    Raises:
        ValueError: M not a multiple of 8.
    """
    w = np.asarray(w, np.float32)
    if w.shape[0] % BLOCK:
        raise ValueError(f"pack_weights: {w.shape[0]} output channels, not a multiple of {BLOCK}")
    return gemm_pack(w, panel_widths(w.shape[0]))


GATHER_MAX_WIDTH = 64
"""Bands narrower than this whose width is not a multiple of RP get pixel_offsets: their last tile a
band wastes (RP - p_n % RP) / RP of the multiply-adds otherwise (ResNet-50's 7 and 14 wide layer3/4
rows: tiles of 6 + 1 and 6 + 6 + 2; its 28 wide stride-2 3x3 and GoogLeNet's 28 wide 5x5s: 4 x 6 + 4,
28 of 30 pixels' work useful). At 24 (4 tiles), the 28 wide layers ran a band at a time; at 64, in the model,
one thread: ResNet-50's layer2.0.conv2 0.96-1.00 -> 0.93 ms at 16 lanes, 1.84 -> 1.76-1.79 on Haswell code,
GoogLeNet's inception_3b/5x5 0.48-0.49 -> 0.45-0.47 and 0.94-0.96 -> 0.90-0.92."""


def pixel_offsets(p_n: int, rows: int, ldx: int, x_pitch: int) -> np.ndarray:
    """px[r * p_n + q] = r * x_pitch + q * ldx: the X offset of pixel q of band r from the first band's
    start, for gemm_nchwc_rows (read-only int64); empty where the bands are wide enough, or a
    multiple of RP wide, to gain nothing from tiles across bands (GATHER_MAX_WIDTH)."""
    if p_n >= GATHER_MAX_WIDTH or p_n % RP == 0:
        p_n = rows = 0
    r, q = np.divmod(np.arange(p_n * rows, dtype=np.int64), max(p_n, 1))
    px = r * x_pitch + q * ldx
    px.flags.writeable = False
    return px


def channel_offsets(k_n: int, plane: int) -> np.ndarray:
    """offs[k] = (k // 8) * plane * 8 + k % 8: input channel k of pixel 0 in an NCHW8c image of
    `plane` pixels (read-only int64)."""
    k = np.arange(k_n, dtype=np.int64)
    offs = (k // BLOCK) * plane * BLOCK + k % BLOCK
    offs.flags.writeable = False
    return offs


_R1 = types.Array(types.float32, 1, "C", readonly=True)
_F1 = types.Array(types.float32, 1, "C")
_O1 = types.Array(types.int64, 1, "C", readonly=True)
_I = types.int64
_f4 = types.float32


@njit(types.void(_R1, _R1, _I, _O1, _I, _F1, _I, _I, _I, _I, _I, _I, _I, _I, _I, _R1, _I, _R1),
      nogil=True, cache=True, error_model="numpy")
def _panel(wp, xf, x0, offs, ldx, yf, y0, ldb, k_n, k0, kn, m0, width, p, p_n, b, mode, zf):
    """Pixels p .. p + p_n x the output panel of `width` channels (8, 16 or 24) from m0, over input
    channels k0 .. k0 + kn, in micro-tiles. Compiled once and called, not inlined: its micro-kernels
    (every tile shape of 8, 16 and 24 channels) were inlined at each of its call sites in gemm_nchwc,
    gemm_nchwc_rows and the chain, half their compile time (issue 31); a call per panel and K
    chunk costs nothing measurable against the panel's work."""
    y_off = y0 + (m0 // BLOCK) * ldb
    w_off = m0 * k_n + k0 * width
    step = RP3 if width == 3 * BLOCK else RP
    for q in range(p, p + p_n, step):
        xq, yq, rows = x0 + q * ldx, y_off + q * BLOCK, min(step, p + p_n - q)
        mq = mode | PREFETCH_W if q == p else mode  # the first tile brings the panel's W chunk in
        if width == 3 * BLOCK:
            _tile3(wp, w_off, xf, xq, offs, k0, ldx, yf, yq, ldb, kn, b, m0, mq, zf, rows)
        elif width == NV * BLOCK:
            _tile2(wp, w_off, xf, xq, offs, k0, ldx, yf, yq, ldb, kn, b, m0, mq, zf, rows)
        else:
            _tile1(wp, w_off, xf, xq, offs, k0, ldx, yf, yq, ldb, kn, b, m0, mq, zf, rows)


@njit(inline="always")
def _block_pixels(m_n, k_n, p_n):
    """Pixels per block: PB_BYTES of Y (M x PB floats), or all p_n where the extra passes over the
    packed W that blocks cost ((blocks - 1) x K x M floats) exceed twice Y's (2 x P x M: Y leaving
    L2 before its epilogue): a large W over few pixels, ResNet-50's layer4 (W 8 MiB, 49 pixels)."""
    pb = max(RP, (PB_BYTES // (4 * m_n)) // RP * RP)
    blocks = (p_n + pb - 1) // pb
    return p_n if blocks > 1 and (blocks - 1) * k_n >= 2 * p_n else pb


@njit(inline="always")
def _gemm(wp, xf, x0, offs, ldx, yf, y0, ldb, m_n, p_n, b, act, a0, a1, zf, has_z, kc):
    """gemm_nchwc's work, K in chunks of kc."""
    k_n = offs.size
    pb = _block_pixels(m_n, k_n, p_n)
    tail3 = m_n % (NV * BLOCK) == BLOCK and m_n > BLOCK  # the last panel is 24 wide
    m_end = m_n - 3 * BLOCK if tail3 else m_n  # panels of 16 (or one of 8) below
    relu = 8 if act == RELU else 0  # in the micro-kernel's registers (accumulate_tile), no pass over Y after
    for p0 in range(0, p_n, pb):
        pe = min(p_n, p0 + pb)
        for k0 in range(0, k_n, kc):
            kn = min(kc, k_n - k0)
            last = k0 + kn == k_n
            mode = (1 if k0 > 0 else 0) | (2 + relu if last else 0) | (4 if last and has_z else 0)
            for m0 in range(0, m_end, NV * BLOCK):
                _panel(wp, xf, x0, offs, ldx, yf, y0, ldb, k_n, k0, kn, m0, min(NV * BLOCK, m_end - m0), p0, pe - p0,
                       b, mode, zf)
            if tail3:
                _panel(wp, xf, x0, offs, ldx, yf, y0, ldb, k_n, k0, kn, m_end, 3 * BLOCK, p0, pe - p0, b, mode, zf)
        if act != 0 and not relu:
            for mb in range(m_n // BLOCK):
                activate_range(yf, np.uint64(y0 + mb * ldb + p0 * BLOCK), np.uint64((pe - p0) * BLOCK), act, a0, a1)


@njit(types.void(_R1, _R1, _I, _O1, _I, _F1, _I, _I, _I, _I, _R1, _I, _f4, _f4, _R1, types.boolean),
      nogil=True, cache=True, error_model="numpy")
def gemm_nchwc(wp, xf, x0, offs, ldx, yf, y0, ldb, m_n, p_n, b, act, a0, a1, zf, has_z):
    """Y = act(W @ X + b (+ Z)) over p_n pixels in NCHW8c.

    Args:
        wp: W (m_n, K) packed by pack_weights (m_n % 8 == 0).
        xf, x0, offs, ldx: X[k, p] = xf[x0 + offs[k] + p * ldx] (K = offs.size): for an NCHW8c
            image of P pixels, offs = channel_offsets(K, P) and ldx = 8 (8 * stride along a row
            of a strided 1x1 convolution).
        yf, y0, ldb: Y[m, p] = yf[y0 + (m // 8) * ldb + p * 8 + m % 8] (ldb = 8 * OH * OW).
        b: (m_n,) bias (zeros for none).
        act, a0, a1: activation (epilogue.py codes, codes.RANGE_CODES' GELU included: activate_range over each
            stored block), after the bias and Z.
        zf, has_z: the sum input Z, laid out as Y, added after the bias when has_z.
    """
    k_n = offs.size  # a 1x1 projection: smaller K chunks (module docstring)
    kc = KC_PROJECTION if k_n > m_n and 32 <= m_n <= 96 else KC
    _gemm(wp, xf, x0, offs, ldx, yf, y0, ldb, m_n, p_n, b, act, a0, a1, zf, has_z, kc)


@njit(inline="always")
def _gemm_bands(wp, xf, x0, offs, ldx, x_pitch, yf, y0, y_pitch, ldb, m_n, p_n, rows, b, act, a0, a1, zf, has_z,
                kc, px, j0):
    """_gemm over `rows` bands at once (their Y fits a pixel block): per K chunk and output panel, every
    band's pixels. Each output's sum runs over k in the same order as _gemm's: the same bits. Where
    px holds every pixel's X offset (px[j0 + j] for the group's pixel j, bands end to end) and the
    bands' Y rows follow each other, the 16-channel panels run tiles of RP pixels across bands."""
    k_n = offs.size
    tail3 = m_n % (NV * BLOCK) == BLOCK and m_n > BLOCK
    m_end = m_n - 3 * BLOCK if tail3 else m_n
    total = rows * p_n
    across = px.size >= j0 + total and y_pitch == p_n * BLOCK and p_n % RP != 0
    x_first = x0 - (j0 // p_n) * x_pitch  # px counts from the first band of all, j0 // p_n before this group's
    relu = 8 if act == RELU else 0  # in registers (_gemm's)
    for k0 in range(0, k_n, kc):
        kn = min(kc, k_n - k0)
        last = k0 + kn == k_n
        mode = (1 if k0 > 0 else 0) | (2 + relu if last else 0) | (4 if last and has_z else 0)
        for m0 in range(0, m_end, NV * BLOCK):
            width = min(NV * BLOCK, m_end - m0)
            if across and width == NV * BLOCK:
                y_off = y0 + (m0 // BLOCK) * ldb
                w_off = m0 * k_n + k0 * width
                for j in range(0, total, RP):
                    _tile2_gathered(wp, w_off, xf, x_first, offs, k0, px, j0 + j, yf, y_off + j * BLOCK, ldb, kn, b,
                                    m0, mode | PREFETCH_W if j == 0 else mode, zf, min(RP, total - j))
            else:
                for r in range(rows):
                    _panel(wp, xf, x0 + r * x_pitch, offs, ldx, yf, y0 + r * y_pitch, ldb, k_n, k0, kn, m0, width,
                           0, p_n, b, mode, zf)
        if tail3:
            for r in range(rows):
                _panel(wp, xf, x0 + r * x_pitch, offs, ldx, yf, y0 + r * y_pitch, ldb, k_n, k0, kn, m_end, 3 * BLOCK,
                       0, p_n, b, mode, zf)
    if act != 0 and not relu:
        for r in range(rows):
            for mb in range(m_n // BLOCK):
                activate_range(yf, np.uint64(y0 + r * y_pitch + mb * ldb), np.uint64(p_n * BLOCK), act, a0, a1)


@njit(types.void(_R1, _R1, _I, _O1, _I, _I, _F1, _I, _I, _I, _I, _I, _I, _R1, _I, _f4, _f4, _R1, types.boolean,
                 _O1), nogil=True, cache=True, error_model="numpy")
def gemm_nchwc_rows(wp, xf, x0, offs, ldx, x_pitch, yf, y0, y_pitch, ldb, m_n, p_n, rows, b, act, a0, a1, zf,
                    has_z, px):
    """gemm_nchwc over `rows` bands of p_n pixels: band r reads X from x0 + r * x_pitch and writes Y
    from y0 + r * y_pitch (a convolution's output rows, each from its own input row), in one call.
    px: empty, or every pixel's X offset from x0 (pixel_offsets(p_n, rows, ldx, x_pitch)), so that
    narrow bands share micro-tiles (_gemm_bands)."""
    # K = C x KH x KW taps in chunks of KC (KC_PROJECTION was slower on 3x3 convs). Bands in groups of
    # as many as a pixel block holds (_block_pixels over all bands): each W panel's chunk is read once
    # for the group, not once a band (ResNet-50's 3x3 stride-2 convs: W up to 9 MiB, 7 to 28 bands).
    group = max(1, _block_pixels(m_n, offs.size, rows * p_n) // p_n)
    for r0 in range(0, rows, group):
        if group == 1:
            _gemm(wp, xf, x0 + r0 * x_pitch, offs, ldx, yf, y0 + r0 * y_pitch, ldb, m_n, p_n, b, act, a0, a1, zf,
                  has_z, KC)
        else:
            _gemm_bands(wp, xf, x0 + r0 * x_pitch, offs, ldx, x_pitch, yf, y0 + r0 * y_pitch, y_pitch, ldb, m_n,
                        p_n, min(group, rows - r0), b, act, a0, a1, zf, has_z, KC, px, r0 * p_n)
