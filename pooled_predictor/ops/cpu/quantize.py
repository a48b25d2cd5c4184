"""Linear quantization CPU kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

    QuantizeLinear:   y = saturate(round_half_even(x / y_scale) + y_zero_point)   (integer y)
                      y = convert(x / y_scale + y_zero_point, saturate)         (float8/float4/float6 y)
    DequantizeLinear: y = (x - x_zero_point) * x_scale

Scale and zero point are per tensor, per axis or blocked (see
shapes/quantize.quant_param_layout); they are laid out once at reshape as
arrays that broadcast against X (blocked: repeated block_size times along the
axis). Quantized types: int8, uint8, int16, uint16, int4, uint4, int2, uint2
(and int32 for DequantizeLinear's input), saturated by clipping to the type's
range; float8e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, converted as Cast converts
(ops/cpu/cast.cast_into: round to nearest even, `saturate` clamps to the
finite range); float4e2m1, float6e2m3, float6e3m2 (no Inf or NaN: ml_dtypes'
conversion, nearest even, clamps to the finite range). The narrow types
(bfloat16 x, scales and y; float8e8m0 scales) are ml_dtypes' dtypes, read in
float32, so these ops run on them directly (ops/widen.EXACT).
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from ...errors import KernelError
from ...ir import elem_dtype
from ..registry import kernel
from ..shapes.quantize import quant_param_layout
from . import compiled
from .cast import cast_into

_8BIT = (np.dtype(np.uint8), np.dtype(np.int8))


def _per_tensor_8bit(ctx, x_type, q_type) -> tuple | None:
    """(scale, zero point) as (float32, int) when a (De)QuantizeLinear node can take the compiled
    one-pass kernel (compiled/quantize.py): float32 x_type, 8-bit q_type, static per-tensor float32
    scale and 8-bit zero point; else None."""
    if not compiled.active() or x_type != np.float32 or q_type not in _8BIT:
        return None
    if not ctx.is_static(1) or np.size(ctx.value(1)) != 1 or ctx.dtype(1) != np.float32:
        return None
    zp = 0
    if ctx.has_input(2):
        if not ctx.is_static(2) or np.size(ctx.value(2)) != 1 or ctx.dtype(2) not in _8BIT:
            return None
        zp = int(np.asarray(ctx.value(2)).reshape(()))
    return np.float32(np.asarray(ctx.value(1)).reshape(())), zp


def int_range(dtype) -> tuple[int, int] | None:
    """(min, max) of an integer dtype (numpy's or ml_dtypes' int4/uint4/int2/uint2), None for a float."""
    try:
        return _int_range(np.dtype(dtype))
    except TypeError:  # not a dtype numpy knows
        return None


@functools.lru_cache(maxsize=None)
def _int_range(dtype: np.dtype) -> tuple[int, int] | None:
    """int_range, once per dtype (ml_dtypes.iinfo builds its answer on every call: several us, and
    the 8-bit kernels ask on every forward)."""
    try:
        info = ml_dtypes.iinfo(dtype)
    except (TypeError, ValueError):
        return None
    return int(info.min), int(info.max)


def division_dtype(a, b) -> np.dtype:
    """The dtype numpy's true division gives for operands of dtypes a and b (ml_dtypes' included).

    float32 / float16 -> float32, bfloat16 / bfloat16 -> bfloat16, int32 / float32 -> float64.
    """
    return (np.ones(1, a) / np.ones(1, b)).dtype


def rounded(a: np.ndarray, dtype: np.dtype, wide: type) -> np.ndarray:
    """`a` rounded to `dtype` (nearest even), held in the wider float type `wide`."""
    if a.dtype != dtype and dtype != wide:
        a = a.astype(dtype)
    return a.astype(wide, copy=False)


FLOAT8 = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                                          ml_dtypes.float8_e5m2fnuz))


class _Params:
    """Scale / zero point of a (De)QuantizeLinear node as arrays broadcasting against X.

    scale_as, zero_point_as: array -> the array the kernel computes with (its
    working dtype), applied once at reshape to static values, per call to
    dynamic ones. A float8 zero point must be all zeros, as onnxruntime requires ("with type float8 should
    have no zero point or all zero points should be 0"; the spec: "usually not used"): a static one is a
    ShapeInferenceError at reshape, a computed one a KernelError at forward.
    """

    def __init__(self, ctx, scale_as, zero_point_as):
        self.x_shape = tuple(ctx.shape(0))
        self.layout = quant_param_layout(ctx, self.x_shape, tuple(ctx.shape(1)), "scale")
        self.convert = (scale_as, zero_point_as)
        self.where = f"node {ctx.node.name!r} ({ctx.node.op_type})"
        if ctx.has_input(2) and ctx.is_static(2) and _nonzero_float8(ctx.value(2)):
            raise ctx.error("a float8 zero point must be 0 (or absent)")
        self.static = [self.prepare(i - 1, ctx.value(i)) if ctx.is_static(i) else None for i in (1, 2)]

    def view(self, p) -> np.ndarray:
        kind, axis, block = self.layout
        p = np.asarray(p)
        if kind == "tensor":
            return p.reshape(())
        tail = (1,) * (len(self.x_shape) - axis - 1)
        if kind == "axis":
            return p.reshape((-1,) + tail)
        return np.repeat(p, block, axis=axis)[(slice(None),) * axis + (slice(0, self.x_shape[axis]),)]

    def prepare(self, i: int, value):
        return None if value is None else self.convert[i](self.view(value))

    def get(self, i: int, value):
        """scale (i = 0) or zero point (i = 1): static layout or laid out now; None if absent."""
        if self.static[i] is not None:
            return self.static[i]
        if i == 1 and _nonzero_float8(value):
            raise KernelError(f"{self.where}: a float8 zero point must be 0 (or absent)")
        return self.prepare(i, value)


def _nonzero_float8(zp) -> bool:
    return zp is not None and np.asarray(zp).dtype in FLOAT8 and bool(np.any(np.asarray(zp, np.float32) != 0))


@kernel("QuantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class QuantizeLinear:
    """y = saturate(round(x / y_scale) + y_zero_point), round half to even (integer y);
    y = x / y_scale + y_zero_point converted to a float8/float4/float6 y.

    x float32/float16/bfloat16 (or int32); y_scale of those (23+: of its own
    type; 24+: or float8e8m0). The division is in `precision` (23+) when
    given, else in the type numpy's division gives for x and y_scale (as
    onnx's reference), computed in float32 (float64 for float64/int32
    operands) and rounded to that type: exactly that type's division, the
    double rounding being innocuous for float32 over bfloat16 and float16.
    y: y_zero_point's type, else output_dtype (21+), else uint8. `saturate`
    (19+) concerns float8 y only, as in Cast: 1 clamps out-of-range values
    (Inf included) to +-max, 0 gives Inf (e5m2) or NaN.
    Spec: Operators.md#QuantizeLinear.
    """

    def __init__(self, ctx, *, axis=1, saturate=1, output_dtype=0, block_size=0, precision=0):
        self.quotient = (elem_dtype(precision) if precision
                         else division_dtype(ctx.dtype(0), ctx.dtype(1)))
        self.wide = np.float64 if self.quotient == np.float64 else np.float32
        self.saturate = saturate
        self.range = int_range(ctx.out_dtypes[0])
        zp_type = np.float64 if self.range else self.wide
        self.params = _Params(ctx, lambda s: rounded(s, self.quotient, self.wide),
                              lambda z: z.astype(zp_type))
        self.fast = (_per_tensor_8bit(ctx, ctx.dtype(0), ctx.out_dtypes[0])
                     if self.quotient == np.float32 and not precision else None)

    def prepare_run(self, x, *inputs, out):
        """The one-pass compiled kernel bound for these arrays (per-tensor float32 -> 8 bits), else None."""
        if self.fast is None or not (x.flags.c_contiguous and out.flags.c_contiguous):
            return None
        return compiled.bound(compiled.quantize.quantize_f32, x.reshape(-1), out.reshape(-1), *self.fast)

    def __call__(self, x, y_scale, y_zero_point=None, *, out):
        if self.fast is not None and x.flags.c_contiguous and out.flags.c_contiguous:
            compiled.quantize.quantize_f32(x.reshape(-1), out.reshape(-1), *self.fast)
            return
        scale = self.params.get(0, y_scale)
        zp = self.params.get(1, y_zero_point)
        q = rounded(x, self.quotient, self.wide) / scale
        q = np.asarray(rounded(np.asarray(q), self.quotient, self.wide))  # a 0-d x gives a numpy scalar: an array again
        if self.range is None:
            if zp is not None:
                q += zp
            cast_into(q, out, self.saturate)
            return
        q = np.array(np.rint(q), np.float64)
        if zp is not None:
            q += zp
        np.clip(q, *self.range, out=q)
        np.copyto(out, q, casting="unsafe")


@kernel("DequantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class DequantizeLinear:
    """y = (x - x_zero_point) * x_scale.

    x: int8/uint8/int16/uint16/int4/uint4/int2/uint2, int32 (no zero point),
    float8/float4/float6. The difference is exact for integers (int64), in
    float32 for floats; the product in float32 (float64 for a float64 y), which
    rounded once to y's type is y's type's own product, as the spec asks ("the
    output type determines the precision of the multiplication"). y:
    output_dtype (23+), else x_scale's type (float32, float16, bfloat16; a
    float8e8m0 scale, 24+, gives float8e8m0 as onnx's type inference does).
    Spec: Operators.md#DequantizeLinear.
    """

    def __init__(self, ctx, *, axis=1, block_size=0, output_dtype=0):
        self.ct = np.float64 if ctx.out_dtypes[0] == np.float64 else np.float32
        self.integer = int_range(ctx.dtype(0)) is not None
        zp_type = np.int64 if self.integer else self.ct
        self.params = _Params(ctx, lambda s: s.astype(self.ct), lambda z: z.astype(zp_type))
        self.fast = (_per_tensor_8bit(ctx, ctx.out_dtypes[0], ctx.dtype(0))
                     if self.ct == np.float32 else None)

    def prepare_run(self, x, *inputs, out):
        """The one-pass compiled kernel bound for these arrays (per-tensor 8 bits -> float32), else None."""
        if self.fast is None or not (x.flags.c_contiguous and out.flags.c_contiguous):
            return None
        return compiled.bound(compiled.quantize.dequantize_f32, x.reshape(-1), out.reshape(-1), *self.fast)

    def __call__(self, x, x_scale, x_zero_point=None, *, out):
        if self.fast is not None and x.flags.c_contiguous and out.flags.c_contiguous:
            compiled.quantize.dequantize_f32(x.reshape(-1), out.reshape(-1), *self.fast)
            return
        scale = self.params.get(0, x_scale)
        zp = self.params.get(1, x_zero_point)
        if self.integer:
            d = x.astype(np.int64)
            if zp is not None:
                d -= zp
            y = d.astype(self.ct)
        else:
            y = x.astype(self.ct)
            if zp is not None:
                y -= zp
        y *= scale
        np.copyto(out, y, casting="unsafe")


@kernel("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(x, *, out):
    """y, y_scale, y_zero_point = uint8 quantization of x over the range [min(0, x), max(0, x)].

    y_scale = (max - min) / 255; y_zero_point = saturate(round(-min / y_scale));
    y = saturate(round(x / y_scale) + y_zero_point), rounding half to even. An
    all-zero x (max == min) gives y_scale 1, as onnxruntime (the spec's formula
    would divide by 0). Spec: Operators.md#DynamicQuantizeLinear.
    """
    y, y_scale, y_zp = out
    lo = np.float32(min(0.0, float(x.min())) if x.size else 0.0)
    hi = np.float32(max(0.0, float(x.max())) if x.size else 0.0)
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.clip(np.rint(np.float32(0 - lo / scale)), 0, 255)
    if y_scale is not None:
        y_scale[...] = scale
    if y_zp is not None:
        y_zp[...] = zp
    if y is not None:
        q = np.rint(x / scale)
        q += zp
        np.clip(q, 0, 255, out=q)
        np.copyto(y, q, casting="unsafe")
