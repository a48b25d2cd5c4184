"""Transpose whose two last output axes swap a strided source axis with the source's contiguous one:
batches of 2-D transposes, copied in square tiles.

    y[b, i, j] = x[bases[b] + j * stride + i]      (b < len(bases), i < rows, j < cols)

Y C-contiguous, viewed as (len(bases), rows, cols); X flat. The perms this covers put the source's
last (contiguous) axis second to last and another source axis last: BERT's keys (B, S, H, D) ->
(B, H, D, S), perm [0, 2, 3, 1]; ViT's (H, S, D) -> (H, D, S); a (C, H*W) -> (H*W, C) flatten. numpy's
copyto of the transposed view walks Y with X's column stride innermost, one element a step:
BERT's 128 x 12 x 64 keys took 134 us a copy on this machine against 16 for a plain copy, ViT's
12 x 197 x 64 117 us against 21 (one thread). Here 8 source rows at a time are walked along, their
8 x 8 blocks transposed in registers by reorder.py's transpose8 (eight vector loads, three rounds
of shuffles, eight stores), the edges a scalar loop: 26 and 31 us.

Elements of 4 bytes (the caller views X and Y as float32). Shuffles and moves only: the bits are
copied unchanged, NaN payloads included.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .gemm import arg_pointers
from .jit import njit
from .reorder import _copy_row, transpose8

_F = types.Array(types.float32, 1, "C")


_B16 = ir.VectorType(ir.IntType(8), 16)
_I64 = ir.IntType(64)
_ZIP_LO = [j for i in range(8) for j in (i, i + 16)]  # bytes 0-7 of a and b, interleaved
_ZIP_HI = [j for i in range(8, 16) for j in (i, i + 16)]  # bytes 8-15


@intrinsic
def transpose16_bytes(typingctx, src, s_off, s_pitch, dst, d_off, d_pitch):
    """dst[d_off + j * d_pitch + i] = src[s_off + i * s_pitch + j], i, j < 16: a 16 x 16 byte transpose in registers.
    Sixteen <16 x i8> loads, four rounds of the perfect shuffle (row i and row i + 8 interleaved, low and high
    halves, into rows 2i and 2i + 1: after four rounds row j holds column j), sixteen stores; generic shufflevector
    masks, which x86-64 lowers to punpck{l,h}bw."""
    sig = types.void(src, s_off, s_pitch, dst, d_off, d_pitch)

    def codegen(context, builder, signature, args):
        s_pitch_v, d_pitch_v = args[2], args[5]
        sp, dp = arg_pointers(context, builder, signature, args, (0, 1), (3, 4))
        c = lambda v: ir.Constant(_I64, v)  # noqa: E731
        lo, hi = (ir.Constant(ir.VectorType(ir.IntType(32), 16), m) for m in (_ZIP_LO, _ZIP_HI))
        rows = [builder.load(builder.bitcast(builder.gep(sp, [builder.mul(s_pitch_v, c(i))]), _B16.as_pointer()),
                             align=1) for i in range(16)]
        for _ in range(4):
            new = []
            for i in range(8):
                new += [builder.shuffle_vector(rows[i], rows[i + 8], lo),
                        builder.shuffle_vector(rows[i], rows[i + 8], hi)]
            rows = new
        for j in range(16):
            builder.store(rows[j], builder.bitcast(builder.gep(dp, [builder.mul(d_pitch_v, c(j))]), _B16.as_pointer()),
                          align=1)
        return context.get_dummy_value()

    return sig, codegen


def _tiles_sig(t):
    return types.void(types.Array(t, 1, "C", readonly=True), types.Array(t, 1, "C"),
                      types.Array(types.int64, 1, "C", readonly=True), types.int64, types.int64, types.int64)


# transpose_tiles and transpose_tiles_bytes are one loop nest over two register transposes, written out twice: made
# from one Python closure, numba keyed their cache entries by the closure's cells (an intrinsic's pickle), which
# differ between processes, so the tiered compile's workers (engine/tiering.py) compiled them and the server never
# found them ("NotCached: transpose_tiles")
@njit(_tiles_sig(types.float32), nogil=True, cache=True, error_model="numpy")
def transpose_tiles(x, y, bases, rows, cols, stride):
    """y[(b * rows + i) * cols + j] = x[bases[b] + j * stride + i] for b < bases.size, i < rows, j < cols (module
    docstring), 4-byte elements: 8 source rows at a time, their 8 x 8 blocks transposed in registers (reorder.py's
    transpose8), the edges a scalar loop."""
    r8 = rows // 8 * 8
    c8 = cols // 8 * 8
    for b in range(bases.size):
        src = bases[b]
        dst = b * rows * cols
        for j0 in range(0, c8, 8):
            for i0 in range(0, r8, 8):
                transpose8(x, src + j0 * stride + i0, stride, y, dst + i0 * cols + j0, cols)
            for i in range(r8, rows):
                for j in range(j0, j0 + 8):
                    y[dst + i * cols + j] = x[src + j * stride + i]
        for i in range(rows):
            for j in range(c8, cols):
                y[dst + i * cols + j] = x[src + j * stride + i]


@njit(_tiles_sig(types.uint8), nogil=True, cache=True, error_model="numpy")
def transpose_tiles_bytes(x, y, bases, rows, cols, stride):
    """transpose_tiles for 1-byte elements (8-bit activations: the quantized transformers' head and patch transposes,
    the quantized products' A^T and Y^T, ops/cpu/qproduct.py): 16 x 16 blocks (transpose16_bytes). The strided walk
    touched one byte of each line it read: ViT's (768, 196) patch transpose took 2.6 ms, now 0.006."""
    r16 = rows // 16 * 16
    c16 = cols // 16 * 16
    for b in range(bases.size):
        src = bases[b]
        dst = b * rows * cols
        for j0 in range(0, c16, 16):
            for i0 in range(0, r16, 16):
                transpose16_bytes(x, src + j0 * stride + i0, stride, y, dst + i0 * cols + j0, cols)
            for i in range(r16, rows):
                for j in range(j0, j0 + 16):
                    y[dst + i * cols + j] = x[src + j * stride + i]
        for i in range(rows):
            for j in range(c16, cols):
                y[dst + i * cols + j] = x[src + j * stride + i]


_C6 = types.Array(types.int64, 1, "C", readonly=True)


_INTS = (types.int8, types.int16, types.int32, types.int64)


@njit([types.void(types.Array(t, 1, "C", readonly=True), types.Array(t, 1, "C"), _C6, _C6, _C6) for t in _INTS],
      nogil=True, cache=True, error_model="numpy")
def view_copy(x, y, shape, xstrides, ystrides):
    """y[sum_k i_k ystrides[k]] = x[sum_k i_k xstrides[k]] for i_k < shape[k]: one strided view copied into
    another (6 axes, leading ones of size 1; strides in elements, >= 0; x and y flat from each view's first
    element), the bits as 1-, 2-, 4- or 8-byte integers: Slice, a Gather of one index, Concat's parts and
    Pad's interior, Transpose where the tiled kernel does not apply, as calls a native run takes (views.py).
    A last axis of stride 1 on both sides is one memcpy a run."""
    n5 = shape[5]
    xs5, ys5 = xstrides[5], ystrides[5]
    itemsize = x.itemsize
    for i0 in range(shape[0]):
        for i1 in range(shape[1]):
            for i2 in range(shape[2]):
                for i3 in range(shape[3]):
                    for i4 in range(shape[4]):
                        s = (i0 * xstrides[0] + i1 * xstrides[1] + i2 * xstrides[2] + i3 * xstrides[3]
                             + i4 * xstrides[4])
                        d = (i0 * ystrides[0] + i1 * ystrides[1] + i2 * ystrides[2] + i3 * ystrides[3]
                             + i4 * ystrides[4])
                        if xs5 == 1 and ys5 == 1:
                            _copy_row(y, d, x, s * itemsize, n5 * itemsize)
                        else:
                            for i in range(n5):
                                y[d + i * ys5] = x[s + i * xs5]


@njit([types.void(types.Array(t, 1, "C"), t) for t in _INTS], nogil=True, cache=True, error_model="numpy")
def fill_bits(a, value):
    """a[:] = value, the bits of a 1-, 2-, 4- or 8-byte element (Pad's constant as a call a native run takes)."""
    for i in range(a.size):
        a[i] = value
