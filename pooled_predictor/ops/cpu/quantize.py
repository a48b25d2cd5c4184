"""Linear quantization CPU kernels: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear.

    QuantizeLinear:   y = saturate(round_half_even(x / y_scale) + y_zero_point)
    DequantizeLinear: y = (x - x_zero_point) * x_scale

Scale and zero point are per tensor, per axis or blocked (see
shapes/quantize.quant_param_layout); they are laid out once at reshape as
arrays that broadcast against X (blocked: repeated block_size times along the
axis). Quantized types: int8, uint8, int16, uint16 (and int32 for
DequantizeLinear's input); saturation clips to the type's range.
"""

from __future__ import annotations

import numpy as np

from ...importers.onnx import elem_dtype
from ..registry import kernel
from ..shapes.quantize import quant_param_layout


class _Params:
    """Scale / zero point of a (De)QuantizeLinear node as arrays broadcasting against X."""

    def __init__(self, ctx):
        self.x_shape = tuple(ctx.shape(0))
        self.layout = quant_param_layout(ctx, self.x_shape, tuple(ctx.shape(1)), "scale")
        self.static = [self.view(ctx.value(i)) if ctx.is_static(i) else None for i in (1, 2)]

    def view(self, p) -> np.ndarray:
        kind, axis, block = self.layout
        p = np.asarray(p)
        if kind == "tensor":
            return p.reshape(())
        tail = (1,) * (len(self.x_shape) - axis - 1)
        if kind == "axis":
            return p.reshape((-1,) + tail)
        return np.repeat(p, block, axis=axis)[(slice(None),) * axis + (slice(0, self.x_shape[axis]),)]

    def get(self, i: int, value):
        """scale (i = 0) or zero point (i = 1): static layout or laid out now; None if absent."""
        if self.static[i] is not None:
            return self.static[i]
        return None if value is None else self.view(value)


@kernel("QuantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class QuantizeLinear:
    """y = saturate(round(x / y_scale) + y_zero_point), round half to even.

    x float32/float16 (or int32); the division in the type numpy promotes x and
    y_scale to, or in `precision` (23+). y: y_zero_point's type, else
    output_dtype (21+), else uint8. saturate only concerns float8 outputs.
    Spec: Operators.md#QuantizeLinear.
    """

    def __init__(self, ctx, *, axis=1, saturate=1, output_dtype=0, block_size=0, precision=0):
        self.params = _Params(ctx)
        self.precision = elem_dtype(precision) if precision else None
        info = np.iinfo(ctx.out_dtypes[0])
        self.lo, self.hi = info.min, info.max

    def __call__(self, x, y_scale, y_zero_point=None, *, out):
        scale = self.params.get(0, y_scale)
        zp = self.params.get(1, y_zero_point)
        if self.precision is not None:
            q = x.astype(self.precision) / scale.astype(self.precision)
        else:
            q = x / scale
        q = np.rint(q).astype(np.float64)
        if zp is not None:
            q += zp
        np.clip(q, self.lo, self.hi, out=q)
        np.copyto(out, q, casting="unsafe")


@kernel("DequantizeLinear", since=(10, 13, 19, 21, 23, 24, 25, 28))
class DequantizeLinear:
    """y = (x - x_zero_point) * x_scale; x int8/uint8/int16/uint16/int32 (int32: no zero point).

    The difference is exact (int64), the product in float32 (float64 when the
    output is float64), cast to y's type: output_dtype (23+), else x_scale's.
    Spec: Operators.md#DequantizeLinear.
    """

    def __init__(self, ctx, *, axis=1, block_size=0, output_dtype=0):
        self.params = _Params(ctx)
        self.ct = np.float64 if ctx.out_dtypes[0] == np.float64 else np.float32

    def __call__(self, x, x_scale, x_zero_point=None, *, out):
        scale = self.params.get(0, x_scale)
        zp = self.params.get(1, x_zero_point)
        d = x.astype(np.int64)
        if zp is not None:
            d -= zp
        y = d.astype(self.ct)
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
