"""Quantized-integer product CPU kernels: MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv.

The zero points are subtracted first; the integer products then run as
float64 BLAS GEMMs (MatMul) or through our float64 Conv kernel, which are
exact for these 8-bit operands (every partial sum stays far below 2^53), and
are written back as int32 (the *Integer ops) or requantized:

    y = saturate(round_half_even(acc * (scale_a * scale_b / y_scale)) + y_zero_point)

with acc the int32 accumulator (plus QLinearConv's int32 bias B), the product in float32 as
onnxruntime's MlasRequantizeOutput.
"""

from __future__ import annotations

import numpy as np

from .. import int8_arithmetic
from ..registry import kernel
from ..shapes.conv import conv_geometry
from ..shapes.quantize import inner_conv
from . import compiled
from .qproduct import StaticProduct
from .conv import Conv
from .qconv import compiled_qconv, is_depthwise


def saturating_matmul(a: np.ndarray, b: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """sum_j saturate_int16(a[..., m, 2j] b[2j, n] + a[..., m, 2j+1] b[2j+1, n]) as int64 (..., M, N):
    uint8 a (..., M, K), int8 b (..., K, N), their raw values: onnxruntime's u8 x s8 sums on a host
    without VNNI (ops/int8_arithmetic.py; MLAS's vpmaddubsw kernels). The pair sums are formed a
    block of pairs at a time, (..., M, J, N) int32 of about `chunk` elements."""
    a = np.asarray(a).astype(np.int32)
    b = np.asarray(b).astype(np.int32)
    k = a.shape[-1]
    if k % 2:  # a zero pair partner
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.int32)], axis=-1)
        b = np.concatenate([b, np.zeros(b.shape[:-2] + (1,) + b.shape[-1:], np.int32)], axis=-2)
    kp = a.shape[-1] // 2
    ae, ao = a[..., 0::2, None], a[..., 1::2, None]  # (..., M, KP, 1)
    be, bo = b[..., 0::2, :][..., None, :, :], b[..., 1::2, :][..., None, :, :]  # (..., 1, KP, N)
    m, n = a.shape[-2], b.shape[-1]
    step = max(1, chunk // max(1, m * n))
    acc = None
    for j0 in range(0, kp, step):
        j1 = min(kp, j0 + step)
        s = ae[..., j0:j1, :] * be[..., j0:j1, :]
        s += ao[..., j0:j1, :] * bo[..., j0:j1, :]
        np.clip(s, -32768, 32767, out=s)
        part = s.sum(axis=-2, dtype=np.int64)
        acc = part if acc is None else acc + part
    return acc


def integer_product(a, a_zero_point, b, b_zero_point, sat: bool) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point) as float64 (float32 where that is exact) (numpy.matmul's shapes; a_zero_point scalar
    or per row of A, b_zero_point scalar or per column of B): exact, or with `sat` and uint8 A, int8 B
    as onnxruntime's MLAS sums it without VNNI -- the raw products in int16-saturated pairs
    (saturating_matmul), the zero points' terms exact: S - z_a sum_k B - z_b sum_k A + K z_a z_b."""
    a = np.asarray(a)
    b = np.asarray(b)
    if not (sat and a.dtype == np.uint8 and b.dtype == np.int8):
        # float32 where every partial sum is an integer below 2^24 (8-bit operands: |a - z_a|, |b - z_b| <= 255, K
        # terms), so exact in any order and half float64's work: the quantized attention's QLinearMatMuls of two
        # activations (ViT-B/16: K = 64 and 197)
        wide = np.float32 if a.itemsize == 1 and b.itemsize == 1 and a.shape[-1] * 255 * 255 < 2 ** 24 else np.float64
        return np.matmul(_shifted(a, a_zero_point, rows=True, dtype=wide), _shifted(b, b_zero_point, dtype=wide))
    acc = saturating_matmul(a, b).astype(np.float64)
    za = _shifted(np.zeros((), np.float64), a_zero_point)  # -z_a, a scalar or per row
    zb = _shifted(np.zeros((), np.float64), b_zero_point)
    za = za.reshape(-1, 1) if za.ndim else za
    acc += za * b.astype(np.float64).sum(axis=-2, keepdims=True)
    acc += a.astype(np.float64).sum(axis=-1, keepdims=True) * zb
    acc += a.shape[-1] * za * zb
    return acc


def saturating_conv(x, x_zero_point, w, geo, rows: int = 4096) -> np.ndarray:
    """conv(X - x_zero_point, W) as float64 (N, M, *out) in onnxruntime's u8 x s8 arithmetic on a host without
    VNNI: uint8 X, int8 W with zero point 0 (raw values), each group's windows laid out as MLAS's channels-last
    im2col lays them, k = (taps..., channel) with the channel fastest and the padding x_zero_point, summed by
    integer_product (the raw products in int16-saturated pairs in that order, the zero point's term exact): the
    compiled kernels' sums (ops/cpu/qconv.py's rows k = (kh, kw, c)), for the nodes they do not take. Output
    pixels `rows` at a time. geo: the node's ConvGeometry."""
    n, c = x.shape[:2]
    zp = 0 if x_zero_point is None else int(np.asarray(x_zero_point).reshape(()))
    pads = [(0, 0), (0, 0)] + list(zip(geo.pads_begin, geo.pads_end))
    xp = np.pad(x, pads, constant_values=zp)
    axes = tuple(range(2, 2 + geo.rank))
    win = np.lib.stride_tricks.sliding_window_view(xp, geo.dilated_kernel, axis=axes)
    win = win[(slice(None), slice(None)) + tuple(slice(0, o * s, s) for o, s in zip(geo.out_shape, geo.strides))
              + tuple(slice(None, None, d) for d in geo.dilations)]  # (N, C, *out, *kernel)
    cg, mg, p = c // geo.group, geo.out_channels // geo.group, int(np.prod(geo.out_shape))
    out = np.empty((n, geo.out_channels, p), np.float64)
    for g in range(geo.group):
        a = np.moveaxis(win[:, g * cg:(g + 1) * cg], 1, -1).reshape(n, p, -1)  # (N, P, K): k = (taps..., c)
        b = np.moveaxis(np.asarray(w[g * mg:(g + 1) * mg]), 1, -1).reshape(mg, -1).T  # (K, Mg)
        for p0 in range(0, p, rows):
            acc = integer_product(a[:, p0:p0 + rows], zp, b, None, True)  # (N, rows, Mg)
            out[:, g * mg:(g + 1) * mg, p0:p0 + rows] = np.swapaxes(acc, 1, 2)
    return out.reshape((n, geo.out_channels) + tuple(geo.out_shape))


def _shifted(v, zp, *, rows: bool = False, dtype=np.float64) -> np.ndarray:
    """v - zero point in `dtype` (float64, or float32 for 8-bit v: exact either way) (a scalar zero point; 1-D: per
    row of v's last two axes when rows, else per column)."""
    d = np.asarray(v, dtype)
    if zp is None:
        return d
    zp = np.asarray(zp, dtype)
    if zp.ndim and zp.size > 1:
        zp = zp.reshape(-1, 1) if rows else zp.reshape(-1)
    return d - zp.reshape(zp.shape if zp.ndim else ())


def _requantize(acc: np.ndarray, mult, y_zp, out: np.ndarray) -> None:
    """out = saturate(rint(float32(float32(acc) * mult)) + y_zp) in out's integer type; acc is overwritten.

    The product is a float32 one (acc and the multiplier as float32, the product rounded to
    float32), as onnxruntime's MlasRequantizeOutput computes it: rounding the exact product
    instead differs where it lies within float32 rounding of a half.
    """
    acc[...] = np.multiply(acc.astype(np.float32), np.asarray(mult, np.float32), dtype=np.float32)
    np.rint(acc, out=acc)
    if y_zp is not None:
        acc += np.asarray(y_zp, np.float64)
    info = np.iinfo(out.dtype)
    np.clip(acc, info.min, info.max, out=acc)
    np.copyto(out, acc, casting="unsafe")


def _multiplier(a_scale, b_scale, y_scale, *, a_rows: bool):
    """a_scale * b_scale / y_scale, computed in the scales' type (a 1-D a_scale is per row)."""
    a = np.asarray(a_scale)
    if a.ndim and a.size > 1 and a_rows:
        a = a.reshape(-1, 1)
    return np.asarray(a * np.asarray(b_scale) / np.asarray(y_scale), np.float64)


@kernel("MatMulInteger", since=10, precision="int8")
class MatMulInteger:
    """Y = (A - a_zero_point) @ (B - b_zero_point) in int32 (numpy.matmul semantics).

    a_zero_point: scalar or per row of A (M,); b_zero_point: scalar or per
    column of B (N,). Spec: Operators.md#MatMulInteger. The sum: the Net's int8
    arithmetic (integer_product; ops/int8_arithmetic.py).
    """

    def __init__(self, ctx):
        self.sat = int8_arithmetic.saturating()

    def __call__(self, a, b, a_zero_point=None, b_zero_point=None, *, out):
        np.copyto(out, integer_product(a, a_zero_point, b, b_zero_point, self.sat), casting="unsafe")


@kernel("QLinearMatMul", since=(10, 21), precision="int8")
class QLinearMatMul:
    """y = saturate(rint(((a - a_zp) @ (b - b_zp)) * a_scale * b_scale / y_scale) + y_zp).

    Scales and zero points: scalars, or per row of a (M,) / per column of b
    (N,). y has y_zero_point's type (int8 or uint8). Spec: Operators.md#QLinearMatMul.
    The sum: the Net's int8 arithmetic (integer_product; ops/int8_arithmetic.py).
    """

    def __init__(self, ctx):
        self.sat = int8_arithmetic.saturating()
        self.fast = None
        if (compiled.active() and all(ctx.is_static(i) for i in range(1, 8)) and len(ctx.shape(3)) == 2
                and all(np.size(ctx.value(i)) == 1 for i in (1, 2, 6, 7))
                and ctx.dtype(0) in (np.dtype(np.uint8), np.dtype(np.int8))):
            n = ctx.shape(3)[1]
            mult = np.broadcast_to(_multiplier(ctx.value(1), ctx.value(4), ctx.value(6), a_rows=True)
                                   .astype(np.float32).reshape(-1), (n,))
            self.fast = StaticProduct(ctx, ctx.value(3), ctx.value(5), ctx.dtype(0),
                                      int(np.asarray(ctx.value(2)).reshape(())), np.zeros(n, np.int64), mult,
                                      ctx.out_dtypes[0], int(np.asarray(ctx.value(7)).reshape(())),
                                      int(np.prod(ctx.shape(0)[:-1])))

    def __call__(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point, *, out):
        if self.fast is not None:
            self.fast(a, out)
            return
        acc = integer_product(a, a_zero_point, b, b_zero_point, self.sat)
        mult = _multiplier(a_scale, b_scale, y_scale, a_rows=True)
        if (compiled.active() and acc.dtype == np.float32 and mult.size == 1 and y_zero_point is not None
                and np.size(y_zero_point) == 1 and out.flags.c_contiguous):  # one compiled pass (the quantized attention's products)
            compiled.quantize.requantize_acc(acc.reshape(-1), out.reshape(-1), np.float32(mult.reshape(())),
                                             float(np.asarray(y_zero_point).reshape(())))
            return
        _requantize(acc, mult, y_zero_point, out)


class _IntegerConv:
    """X - x_zero_point convolved with W - w_zero_point (per output channel) by a float64 Conv.

    The shifted weights are prepared once when W and its zero point are weights;
    the shifted input and the accumulator live in per-Net scratch.
    """

    def setup(self, ctx, w: int, wzp: int, xzp: int, conv_attrs: dict):
        self.m = ctx.shape(w)[0]
        self.rank = len(ctx.shape(0)) - 2
        static = ctx.is_static(w) and (not ctx.has_input(wzp) or ctx.is_static(wzp))
        self.w_shifted = self.shift_w(ctx.value(w), ctx.value_or_none(wzp)) if static else None
        self.conv = Conv(inner_conv(ctx, w, self.w_shifted), **conv_attrs)
        self.xs = ctx.scratch(ctx.shape(0), np.float64)
        self.acc = ctx.scratch(ctx.out_shapes[0], np.float64)

    def shift_w(self, w, zp) -> np.ndarray:
        d = np.asarray(w, np.float64)
        if zp is not None:
            d = d - np.asarray(zp, np.float64).reshape((-1,) + (1,) * (d.ndim - 1) if np.ndim(zp) else ())
        return np.ascontiguousarray(d)

    def accumulate(self, x, x_zp, w, w_zp) -> np.ndarray:
        xs, acc = self.xs.array, self.acc.array
        np.subtract(x, 0 if x_zp is None else np.asarray(x_zp).reshape(()), out=xs, dtype=np.float64)
        ws = self.w_shifted if self.w_shifted is not None else self.shift_w(w, w_zp)
        self.conv(xs, ws, out=acc)
        return acc


@kernel("ConvInteger", since=10, precision="int8")
class ConvInteger(_IntegerConv):
    """Y = (X - x_zero_point) (*) (W - w_zero_point) in int32, with Conv's attributes.

    x_zero_point: scalar; w_zero_point: scalar or per output channel (M,).
    Padding adds x_zero_point (zeros after the shift). Spec: Operators.md#ConvInteger.
    """

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                 strides=None):
        self.setup(ctx, 1, 3, 2, dict(auto_pad=auto_pad, dilations=dilations, group=group,
                                      kernel_shape=kernel_shape, pads=pads, strides=strides))

    def __call__(self, x, w, x_zero_point=None, w_zero_point=None, *, out):
        np.copyto(out, self.accumulate(x, x_zero_point, w, w_zero_point), casting="unsafe")


@kernel("QLinearConv", since=10, precision="int8")
class QLinearConv(_IntegerConv):
    """y = saturate(rint((conv(x - x_zp, w - w_zp) + B) * x_scale * w_scale / y_scale) + y_zp).

    w_scale and w_zero_point: scalar or per output channel (M,); B: int32 (M,)
    in the scale x_scale * w_scale. Conv's attributes. Spec: Operators.md#QLinearConv.
    """

    def __init__(self, ctx, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                 strides=None):
        self.fast = compiled_qconv(ctx, conv_geometry(inner_conv(ctx, 3)))
        if self.fast is not None:  # integer kernels (ops/cpu/qconv.py); else the float64 reference below
            return
        self.setup(ctx, 3, 5, 2, dict(auto_pad=auto_pad, dilations=dilations, group=group,
                                      kernel_shape=kernel_shape, pads=pads, strides=strides))
        self.per_channel = (self.m,) + (1,) * self.rank
        # the compiled kernels' arithmetic (ops/cpu/qconv.py) where this is the node's own kernel (3-D and 1-D
        # convolutions, dynamic weights, strides past the phase planes): the saturating pairs where the Net's
        # arithmetic has them, for uint8 X and int8 W of zero point 0, not depthwise (exact in onnxruntime too).
        # Not in the reference tier (compiled.active() false: a tiered Net's first forwards while the kernels
        # compile): there the float64 BLAS sums exactly, where numpy's pairs would take seconds a forward
        self.sat = (compiled.active() and int8_arithmetic.saturating() and ctx.dtype(0) == np.uint8
                    and ctx.dtype(3) == np.int8 and not is_depthwise(self.conv.geo))

    def prepare_run(self, x, *inputs, out):
        """The compiled path's calls bound once for these arrays (registry.py: prepare_run); None otherwise."""
        if self.fast is None:
            return None
        return compiled.prepared(self.fast.steps(x, out))

    def __call__(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B=None,
                 *, out):
        if self.fast is not None:
            self.fast(x, out)
            return
        if self.sat and (w_zero_point is None or not np.any(w_zero_point)):
            acc = saturating_conv(x, x_zero_point, w, self.conv.geo)
        else:
            acc = self.accumulate(x, x_zero_point, w, w_zero_point)
        if B is not None:
            acc += np.asarray(B, np.float64).reshape(self.per_channel)
        w_scale = np.asarray(w_scale)
        w_scale = w_scale.reshape(self.per_channel) if w_scale.size > 1 else w_scale.reshape(())
        _requantize(acc, _multiplier(np.asarray(x_scale).reshape(()), w_scale, y_scale, a_rows=False),
                    y_zero_point, out)
