"""Shape rules of the quantization ops: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, and the integer products MatMulInteger, QLinearMatMul,
ConvInteger, QLinearConv.

Quantized types are the integer types (int8, uint8, int16, uint16; int4,
uint4, int2, uint2 through ml_dtypes; int32 as DequantizeLinear's input) and
the small float types (float8e4m3fn, float8e4m3fnuz, float8e5m2,
float8e5m2fnuz, float4e2m1, float6e2m3, float6e3m2: ml_dtypes). Which of them
a node may use is read from the op's schema at the node's version (types
added in later versions are refused with ShapeInferenceError).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx

from ...errors import UnsupportedOpError
from ...ir import elem_dtype
from ..widen import is_small_float
from . import shape_rule
from .common import check_types, norm_axis, onnx_type
from .conv import conv_geometry
from .matmul import matmul_shape


@functools.lru_cache(maxsize=None)
def _output_types(op_type: str, version: int) -> frozenset:
    """The type strings the schema allows for output 0 (QuantizeLinear's y, DequantizeLinear's y)."""
    schema = onnx.defs.get_schema(op_type, version, "")
    allowed = {t.type_param_str: frozenset(t.allowed_type_strs) for t in schema.type_constraints}
    return allowed[schema.outputs[0].type_str]


def attr_dtype(ctx, elem: int, what: str) -> np.dtype:
    """The numpy dtype of an ONNX elem type named by an attribute (output_dtype, precision).

    Raises:
        UnsupportedOpError: an elem type with no numpy dtype (ml_dtypes' included).
    """
    dt = elem_dtype(int(elem))
    if dt is None:
        name = (onnx.TensorProto.DataType.Name(int(elem)) if int(elem) in onnx.TensorProto.DataType.values()
                else str(elem))
        raise UnsupportedOpError(f"node {ctx.node.name!r} ({ctx.node.op_type}): {what}={name} has no "
                                 f"numpy dtype")
    return dt


def output_dtype(ctx, dt: np.dtype, what: str) -> np.dtype:
    """`dt` if the schema of ctx's op at ctx.version allows it as output 0's type.

    Raises:
        ShapeInferenceError: a type this version of the op does not produce.
    """
    allowed = _output_types(ctx.node.op_type, ctx.version)
    if onnx_type(dt) not in allowed:
        raise ctx.error(f"{what} is {onnx_type(dt)}; {ctx.node.op_type}-{ctx.version} produces "
                        f"{', '.join(sorted(allowed))}")
    return np.dtype(dt)


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
    """X's shape, after checking the scale's layout and that the zero point has the scale's shape.

    Per tensor, a scalar and a one-element 1-D tensor are taken as one shape
    (onnx's own float8/int4 cases pair a () scale with a (1,) zero point).
    """
    x = tuple(ctx.shape(0))
    kind = quant_param_layout(ctx, x, tuple(ctx.shape(1)), scale)[0]
    if not ctx.has_input(2) or tuple(ctx.shape(2)) == tuple(ctx.shape(1)):
        return x
    if kind != "tensor" or quant_param_layout(ctx, x, tuple(ctx.shape(2)), zero_point)[0] != "tensor":
        raise ctx.error(f"{zero_point} {tuple(ctx.shape(2))} and {scale} {tuple(ctx.shape(1))} "
                        f"must have one shape")
    return x


@shape_rule("QuantizeLinear")
def quantize_linear(ctx):
    """x's shape; y_zero_point's type, else output_dtype (21+), else uint8."""
    check_types(ctx)
    x = _check_params(ctx, "y_scale", "y_zero_point")
    elem = int(ctx.attr("output_dtype", 0))
    if ctx.has_input(2):
        dt = np.dtype(ctx.dtype(2))
        if elem and attr_dtype(ctx, elem, "output_dtype") != dt:
            raise ctx.error(f"output_dtype={elem} differs from y_zero_point's type {dt}")
    else:
        dt = attr_dtype(ctx, elem, "output_dtype") if elem else np.dtype(np.uint8)
    if int(ctx.attr("precision", 0)):
        p = attr_dtype(ctx, int(ctx.attr("precision")), "precision")
        if p.kind != "f" and not is_small_float(p):
            raise ctx.error(f"precision={onnx_type(p)} is not a float type")
    return [(x, output_dtype(ctx, dt, "y's type"))]


@shape_rule("DequantizeLinear")
def dequantize_linear(ctx):
    """x's shape; output_dtype (23+, one of the schema's T3), else x_scale's type.

    A float8e8m0 x_scale (24+) without output_dtype gives a float8e8m0 y, as
    onnx's own type inference says (the spec: "the same as x_scale").
    """
    check_types(ctx)
    x = _check_params(ctx, "x_scale", "x_zero_point")
    elem = int(ctx.attr("output_dtype", 0))
    if elem:
        return [(x, output_dtype(ctx, attr_dtype(ctx, elem, "output_dtype"), "output_dtype"))]
    return [(x, np.dtype(ctx.dtype(1)))]


@shape_rule("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx):
    """y (x's shape, uint8), y_scale (float32 scalar), y_zero_point (uint8 scalar)."""
    check_types(ctx)
    return [(tuple(ctx.shape(0)), np.dtype(np.uint8)), ((), np.dtype(np.float32)), ((), np.dtype(np.uint8))]


@shape_rule("MatMulInteger")
def matmul_integer(ctx):
    """numpy.matmul's shape of A and B; int32. a_zero_point a scalar or 1-D of A's M rows, b_zero_point a
    scalar or 1-D of B's N columns (Operators.md#MatMulInteger)."""
    check_types(ctx)
    out = matmul_shape(ctx, ctx.shape(0), ctx.shape(1))
    a, b = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    check_quant_params(ctx, (), (2,), a[-2] if len(a) >= 2 else 1, "rows of A")
    check_quant_params(ctx, (), (3,), b[-1] if len(b) >= 2 else 1, "columns of B")
    return [(out, np.dtype(np.int32))]


@shape_rule("QLinearMatMul")
def qlinear_matmul(ctx):
    """numpy.matmul's shape of a (input 0) and b (input 3); y_zero_point's type.

    Raises:
        UnsupportedOpError: float8 a, b or y (QLinearMatMul-21 allows them; onnxruntime has no kernel for
            them either, and onnx's reference computes them as integers).
    """
    check_types(ctx)
    small = [i for i in (0, 3, 7) if ctx.has_input(i) and is_small_float(ctx.dtype(i))]
    if small:
        raise UnsupportedOpError(f"node {ctx.node.name!r} (QLinearMatMul): float8 input {small[0]} "
                                 f"({onnx_type(ctx.dtype(small[0]))}) is not implemented (int8 and uint8 are)")
    b = tuple(ctx.shape(3))
    check_quant_params(ctx, (1, 2, 6, 7), (4, 5), b[-1] if len(b) >= 2 else 1, "columns of b")
    return [(matmul_shape(ctx, ctx.shape(0), ctx.shape(3)), ctx.dtype(7))]


def inner_conv(ctx, w: int, w_value=None):
    """The float64 Conv context of ConvInteger (w = 1) / QLinearConv (w = 3) over X and W.

    w_value: the shifted weights W - w_zero_point when static (else W is dynamic).
    """
    f8 = np.dtype(np.float64)
    return ctx.derive("Conv", [0, w], 11, dtypes=[f8, f8], values=[None, w_value])


def check_quant_params(ctx, per_tensor: tuple, per_channel: tuple, m: int, what: str = "output channels") -> None:
    """The quantization parameters of ConvInteger / QLinearConv / QLinearMatMul: those at the indices
    `per_tensor` (x's and y's, a's) a scalar or one element, onnxruntime's IsScalarOr1ElementVector; those at
    `per_channel` (w's and QLinearConv's B, b's) a scalar, one element or 1-D of the M output channels or
    columns (B: 1-D of M). Spec: Operators.md#QLinearConv ("It could be a scalar or a 1-D tensor ... equal to
    the number of output channels (M)"), #QLinearMatMul ("... equal to the number of columns of input 'b'").

    Raises:
        ShapeInferenceError: naming the input and its shape.
    """
    formals = [p.name for p in onnx.defs.get_schema(ctx.node.op_type, ctx.version, ctx.node.domain).inputs]
    for i in per_tensor:
        if ctx.has_input(i) and (len(ctx.shape(i)) > 1 or math.prod(ctx.shape(i)) != 1):
            raise ctx.error(f"{formals[i]} of shape {tuple(ctx.shape(i))} must be a scalar (per tensor)")
    for i in per_channel:
        if not ctx.has_input(i):
            continue
        shape = tuple(ctx.shape(i))
        bias = formals[i] == "B"
        if len(shape) > 1 or (bias and shape != (m,)) or (not bias and math.prod(shape) not in (1, m)):
            raise ctx.error(f"{formals[i]} of shape {shape} must be " + (f"1-D of the {m} {what}" if bias
                            else f"a scalar or 1-D of the {m} {what}"))


@shape_rule("ConvInteger")
def conv_integer(ctx):
    check_types(ctx)
    g = conv_geometry(inner_conv(ctx, 1))
    check_quant_params(ctx, (2,), (3,), g.out_channels)
    return [((g.batch, g.out_channels) + g.out_shape, np.dtype(np.int32))]


@shape_rule("QLinearConv")
def qlinear_conv(ctx):
    check_types(ctx)
    g = conv_geometry(inner_conv(ctx, 3))
    check_quant_params(ctx, (1, 2, 6, 7), (4, 5, 8), g.out_channels)
    return [((g.batch, g.out_channels) + g.out_shape, ctx.dtype(7))]
