"""Shape rules of the quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, and the integer products MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv.

Quantized types here are the integer ones numpy has (int8, uint8, int16,
uint16, int32); float8, float4, int4 and int2 tensors have no numpy dtype in
this build and are refused with UnsupportedOpError (check_types, or
`quantized_dtype` for an output_dtype attribute).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedOpError
from ...importers.onnx import elem_dtype
from . import shape_rule
from .common import check_types, norm_axis
from .conv import conv_geometry
from .matmul import matmul_shape


def quantized_dtype(ctx, elem, what: str) -> np.dtype:
    """The numpy dtype of a quantized type (an ONNX elem type or a dtype): an integer type.

    Raises:
        UnsupportedOpError: float8, float4, int4 or int2 (no numpy kernel here).
    """
    dt = elem if isinstance(elem, np.dtype) else elem_dtype(int(elem))
    if dt is None or dt.kind not in "iu":
        import onnx

        if isinstance(elem, np.dtype):
            name = str(elem)
        elif int(elem) in onnx.TensorProto.DataType.values():
            name = onnx.TensorProto.DataType.Name(int(elem))
        else:
            name = str(elem)
        raise UnsupportedOpError(f"node {ctx.node.name!r} ({ctx.node.op_type}): {what} {name} has no "
                                 f"numpy kernel here (float8, float4, int4 and int2 need ml_dtypes)")
    return dt


def quant_param_layout(ctx, x_shape: tuple, p_shape: tuple, what: str) -> tuple[str, int, int]:
    """('tensor' | 'axis' | 'blocked', axis, block_size) of a scale / zero point.

    Per tensor: a scalar (or one element); per axis: 1-D of X's length along
    `axis`; blocked (block_size > 0, from version 21): X's rank, ceil(d / B)
    along `axis`, X's dims elsewhere. Spec: QuantizeLinear, "granularities".
    """
    block = int(ctx.attr("block_size", 0))
    if block < 0:
        raise ctx.error(f"block_size={block} must be >= 0")
    size = math.prod(p_shape)
    if not block and len(p_shape) <= 1 and size == 1 and (len(p_shape) == 0 or not x_shape
                                                           or p_shape[0] == 1):
        return "tensor", 0, 0
    axis = norm_axis(ctx, int(ctx.attr("axis", 1)), len(x_shape))
    if not block:
        if len(p_shape) != 1 or p_shape[0] != x_shape[axis]:
            raise ctx.error(f"{what} of shape {p_shape} must be a scalar or 1-D of length "
                            f"{x_shape[axis]} (axis {axis} of {x_shape})")
        return "axis", axis, 0
    want = tuple(-(-d // block) if i == axis else d for i, d in enumerate(x_shape))
    if tuple(p_shape) != want:
        raise ctx.error(f"{what} of shape {p_shape} must be {want} for blocks of {block} along "
                        f"axis {axis} of {x_shape}")
    return "blocked", axis, block


def _check_params(ctx, scale: str, zero_point: str) -> tuple:
    """X's shape, after checking the scale's layout and that the zero point has the scale's shape."""
    x = tuple(ctx.shape(0))
    quant_param_layout(ctx, x, tuple(ctx.shape(1)), scale)
    if ctx.has_input(2) and tuple(ctx.shape(2)) != tuple(ctx.shape(1)):
        raise ctx.error(f"{zero_point} {tuple(ctx.shape(2))} and {scale} {tuple(ctx.shape(1))} "
                        f"must have one shape")
    return x


def _float_dtype(ctx, elem: int, what: str) -> np.dtype:
    """The numpy float dtype of an ONNX elem type named by an attribute (precision, output_dtype)."""
    dt = elem_dtype(elem)
    if dt is None or dt.kind != "f":
        raise UnsupportedOpError(f"node {ctx.node.name!r} ({ctx.node.op_type}): {what}={elem} is not a "
                                 f"numpy float type")
    return dt


@shape_rule("QuantizeLinear")
def quantize_linear(ctx):
    """x's shape; y_zero_point's type, else output_dtype (21+), else uint8."""
    check_types(ctx)
    x = _check_params(ctx, "y_scale", "y_zero_point")
    elem = int(ctx.attr("output_dtype", 0))
    if ctx.has_input(2):
        dt = quantized_dtype(ctx, np.dtype(ctx.dtype(2)), "y_zero_point type")
        if elem and quantized_dtype(ctx, elem, "output_dtype") != dt:
            raise ctx.error(f"output_dtype={elem} differs from y_zero_point's type {dt}")
    else:
        dt = quantized_dtype(ctx, elem, "output_dtype") if elem else np.dtype(np.uint8)
    if int(ctx.attr("precision", 0)):
        _float_dtype(ctx, int(ctx.attr("precision")), "precision")
    return [(x, dt)]


@shape_rule("DequantizeLinear")
def dequantize_linear(ctx):
    """x's shape; output_dtype (23+), else x_scale's type."""
    check_types(ctx)
    quantized_dtype(ctx, np.dtype(ctx.dtype(0)), "x type")
    x = _check_params(ctx, "x_scale", "x_zero_point")
    elem = int(ctx.attr("output_dtype", 0))
    return [(x, _float_dtype(ctx, elem, "output_dtype") if elem else ctx.dtype(1))]


@shape_rule("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx):
    """y (x's shape, uint8), y_scale (float32 scalar), y_zero_point (uint8 scalar)."""
    check_types(ctx)
    return [(tuple(ctx.shape(0)), np.dtype(np.uint8)), ((), np.dtype(np.float32)), ((), np.dtype(np.uint8))]


@shape_rule("MatMulInteger")
def matmul_integer(ctx):
    """numpy.matmul's shape of A and B; int32."""
    check_types(ctx)
    return [(matmul_shape(ctx, ctx.shape(0), ctx.shape(1)), np.dtype(np.int32))]


@shape_rule("QLinearMatMul")
def qlinear_matmul(ctx):
    """numpy.matmul's shape of a (input 0) and b (input 3); y_zero_point's type."""
    check_types(ctx)
    return [(matmul_shape(ctx, ctx.shape(0), ctx.shape(3)), ctx.dtype(7))]


def inner_conv(ctx, w: int, w_value=None):
    """The float64 Conv context of ConvInteger (w = 1) / QLinearConv (w = 3) over X and W.

    w_value: the shifted weights W - w_zero_point when static (else W is dynamic).
    """
    f8 = np.dtype(np.float64)
    return ctx.derive("Conv", [0, w], 11, dtypes=[f8, f8], values=[None, w_value])


@shape_rule("ConvInteger")
def conv_integer(ctx):
    check_types(ctx)
    g = conv_geometry(inner_conv(ctx, 1))
    return [((g.batch, g.out_channels) + g.out_shape, np.dtype(np.int32))]


@shape_rule("QLinearConv")
def qlinear_conv(ctx):
    check_types(ctx)
    g = conv_geometry(inner_conv(ctx, 3))
    return [((g.batch, g.out_channels) + g.out_shape, ctx.dtype(7))]
