"""Shape rules of onnxruntime's quantized contrib ops (domain com.microsoft), version 1.

QLinearAdd, QLinearMul (numpy broadcasting), QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax (X's shape), QLinearGlobalAveragePool, QLinearAveragePool (NCHW, or NHWC with
channels_last=1), QLinearConcat, QGemm, DynamicQuantizeMatMul,
MatMulIntegerToFloat. Scales and zero points of these ops are per tensor (one
element), except b_scale / b_zero_point of QGemm, DynamicQuantizeMatMul and
MatMulIntegerToFloat, which may be per column of B (N,). Input types are
checked against the schemas of contrib_schemas.py (check_types).

Source: onnxruntime docs/ContribOperators.md.
"""

from __future__ import annotations

import math

import numpy as np

from ...contrib_schemas import DOMAIN
from ...ir import Node
from . import shape_rule
from .common import broadcast, check_types, norm_axis
from .matmul import matmul_shape
from .pooling import AxisWindow, pool_geometry


def per_tensor(ctx, *indices: int) -> None:
    """Each present input of `indices` (a scale or zero point) is a scalar or one element of rank 1
    (onnxruntime's IsScalarOr1ElementVector).

    Raises:
        ShapeInferenceError: one holds several, or has rank 2 or more.
    """
    for i in indices:
        if ctx.has_input(i) and (math.prod(ctx.shape(i)) != 1 or len(ctx.shape(i)) > 1):
            raise ctx.error(f"input {i} ({ctx.node.inputs[i]!r}) of shape {tuple(ctx.shape(i))} must be a "
                            f"scalar (per-tensor quantization)")


def per_column(ctx, i: int, n: int, what: str) -> None:
    """Input i is per tensor (one element) or per column: 1-D of length n."""
    if not ctx.has_input(i):
        return
    shape = tuple(ctx.shape(i))
    if len(shape) > 1 or (math.prod(shape) != 1 and shape != (n,)):
        raise ctx.error(f"{what} of shape {shape} must be a scalar or 1-D of length {n} (one per column of B)")


MAX_RATIO = 2.0 ** 15
"""The largest requantization ratio (an input's scale over the output's) of QLinearAdd,
QLinearGlobalAveragePool and QLinearAveragePool with static scales. QLinearAdd's float32 form (MLAS's:
fma(a, s_a / s_c, fma(b, s_b / s_c, k)), k holding -z_a s_a / s_c - z_b s_b / s_c) cancels terms of 255 times
the ratio, whose float32 rounding passes half a step of the output above about 2^15; onnxruntime's own results
there are as wrong (found by tests/fuzz: a 1e20 scale, ours 255 and onnxruntime's 0 where the spec gives z_c).
One step of the input is then more than 2^15 steps of the output: a model no calibration writes."""


def check_ratio(ctx, inputs: tuple, output: int) -> None:
    """Each static scale of `inputs` over the static scale at `output` at most MAX_RATIO in magnitude.

    Raises:
        ShapeInferenceError: naming the two inputs and the ratio.
    """
    if not ctx.is_static(output):
        return
    out = float(np.abs(np.asarray(ctx.value(output), np.float64)).min())
    for i in inputs:
        if not ctx.is_static(i):
            continue
        ratio = float(np.abs(np.asarray(ctx.value(i), np.float64)).max()) / out if out else np.inf
        if not ratio <= MAX_RATIO:
            raise ctx.error(f"input {i} ({ctx.node.inputs[i]!r}) over input {output} ({ctx.node.inputs[output]!r}) "
                            f"is {ratio:.3g}: a requantization ratio above 2^15 is not computed within a step")


def _flag(ctx, name: str) -> int:
    v = int(ctx.attr(name, 0))
    if v not in (0, 1):
        raise ctx.error(f"{name}={v} must be 0 or 1")
    return v


@shape_rule("QLinearAdd", "QLinearMul", domain=DOMAIN)
def qlinear_binary(ctx):
    """numpy broadcast of A (input 0) and B (input 3); A's type."""
    check_types(ctx)
    per_tensor(ctx, 1, 2, 4, 5, 6, 7)
    if ctx.node.op_type == "QLinearAdd":
        check_ratio(ctx, (1, 4), 6)
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(3)]), np.dtype(ctx.dtype(0)))]


@shape_rule("QLinearSigmoid", "QLinearLeakyRelu", domain=DOMAIN)
def qlinear_unary(ctx):
    check_types(ctx)
    per_tensor(ctx, 1, 2, 3, 4)
    return [(tuple(ctx.shape(0)), np.dtype(ctx.dtype(0)))]


@shape_rule("QLinearSoftmax", domain=DOMAIN)
def qlinear_softmax(ctx):
    """X's shape and type; axis in range, opset given."""
    check_types(ctx)
    per_tensor(ctx, 1, 2, 3, 4)
    shape = tuple(ctx.shape(0))
    if ctx.attr("opset") is None:
        raise ctx.error("attribute opset (the Softmax opset it replaces) is required")
    norm_axis(ctx, int(ctx.attr("axis", -1)), max(len(shape), 1))
    return [(shape, np.dtype(ctx.dtype(0)))]


@shape_rule("QLinearGlobalAveragePool", domain=DOMAIN)
def qlinear_global_average_pool(ctx):
    """(N, C, 1, ...) or, channels_last=1, (N, 1, ..., C); X's type."""
    check_types(ctx)
    per_tensor(ctx, 1, 2, 3, 4)
    check_ratio(ctx, (1,), 3)
    shape = tuple(ctx.shape(0))
    if len(shape) < 3:
        raise ctx.error(f"X of shape {shape} must have rank >= 3 (N, C and spatial axes)")
    if _flag(ctx, "channels_last"):
        return [((shape[0],) + (1,) * (len(shape) - 2) + (shape[-1],), np.dtype(ctx.dtype(0)))]
    return [(shape[:2] + (1,) * (len(shape) - 2), np.dtype(ctx.dtype(0)))]


def nchw_pool_geometry(ctx) -> list[AxisWindow]:
    """AveragePool's windows for QLinearAveragePool's X read as NCHW (an NHWC X with channels_last=1).

    Raises:
        ShapeInferenceError: bad kernel_shape, pads, strides or auto_pad (pooling.pool_geometry), or
            dilations (QLinearAveragePool has none).
    """
    shape = tuple(ctx.shape(0))
    if len(shape) < 3:
        raise ctx.error(f"X of shape {shape} must have rank >= 3 (N, C and spatial axes)")
    if ctx.attr("dilations") is not None:
        raise ctx.error("QLinearAveragePool has no dilations attribute")
    if _flag(ctx, "channels_last"):
        shape = (shape[0], shape[-1]) + shape[1:-1]
    node = Node("AveragePool", list(ctx.node.inputs[:1]), list(ctx.node.outputs[:1]), dict(ctx.node.attrs), "",
                ctx.node.name)
    return pool_geometry(ctx.inner(node, [shape], [ctx.dtype(0)], [None]))


@shape_rule("QLinearAveragePool", domain=DOMAIN)
def qlinear_average_pool(ctx):
    """AveragePool's output shape (onnxruntime's window rules), in X's layout; X's type."""
    check_types(ctx)
    per_tensor(ctx, 1, 2, 3, 4)
    check_ratio(ctx, (1,), 3)
    _flag(ctx, "count_include_pad")
    _flag(ctx, "ceil_mode")
    shape = tuple(ctx.shape(0))
    spatial = tuple(a.out for a in nchw_pool_geometry(ctx))
    if int(ctx.attr("channels_last", 0)):
        return [((shape[0],) + spatial + (shape[-1],), np.dtype(ctx.dtype(0)))]
    return [(shape[:2] + spatial, np.dtype(ctx.dtype(0)))]


@shape_rule("QLinearConcat", domain=DOMAIN)
def qlinear_concat(ctx):
    """Concat of the X of each (X, X_scale, X_zero_point) triple along `axis`; Y_zero_point's type.

    Raises:
        ShapeInferenceError: inputs after Y_zero_point are not whole triples, a triple's X is not
            8-bit, ranks differ, or dims other than `axis` disagree.
    """
    check_types(ctx)
    n = ctx.num_inputs - 2
    if n < 3 or n % 3:
        raise ctx.error(f"{n} inputs after Y_scale, Y_zero_point; expected (X, X_scale, X_zero_point) triples")
    if ctx.attr("axis") is None:
        raise ctx.error("attribute axis is required")
    per_tensor(ctx, 0, 1, *[i for k in range(2, ctx.num_inputs, 3) for i in (k + 1, k + 2)])
    xs = list(range(2, ctx.num_inputs, 3))
    shapes = [tuple(ctx.shape(i)) for i in xs]
    for i in xs:
        if np.dtype(ctx.dtype(i)) not in (np.dtype(np.uint8), np.dtype(np.int8)):
            raise ctx.error(f"input {i} ({ctx.node.inputs[i]!r}) is {np.dtype(ctx.dtype(i))}; the X of a triple "
                            f"is uint8 or int8")
        if ctx.has_input(i + 2) and np.dtype(ctx.dtype(i + 2)) != np.dtype(ctx.dtype(i)):
            raise ctx.error(f"input {i + 2} (zero point) is {np.dtype(ctx.dtype(i + 2))}, its X is "
                            f"{np.dtype(ctx.dtype(i))}")
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        raise ctx.error(f"inputs of shapes {shapes} must share one rank >= 1")
    axis = norm_axis(ctx, int(ctx.attr("axis")), rank)
    for s in shapes[1:]:
        if any(s[d] != shapes[0][d] for d in range(rank) if d != axis):
            raise ctx.error(f"inputs of shapes {shapes} differ outside axis {axis}")
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), np.dtype(ctx.dtype(1)))]


@shape_rule("QGemm", domain=DOMAIN)
def qgemm(ctx):
    """(M, N) of A' (M, K) and B' (K, N); y_zero_point's type when y_scale is given, else float32.

    Raises:
        ShapeInferenceError: A or B not 2-D, K differs, a_scale / a_zero_point not scalars, b_scale /
            b_zero_point neither scalars nor (N,), C not broadcastable to (M, N), y_scale without
            y_zero_point.
    """
    check_types(ctx)
    a, b = tuple(ctx.shape(0)), tuple(ctx.shape(3))
    if len(a) != 2 or len(b) != 2:
        raise ctx.error(f"A {a} and B {b} must be 2-D")
    m, k = (a[1], a[0]) if _flag(ctx, "transA") else a
    kb, n = (b[1], b[0]) if _flag(ctx, "transB") else b
    if k != kb:
        raise ctx.error(f"A' is ({m}, {k}) and B' ({kb}, {n}): the inner dimensions differ")
    per_tensor(ctx, 1, 2, 7, 8)
    per_column(ctx, 4, n, "b_scale")
    per_column(ctx, 5, n, "b_zero_point")
    if ctx.has_input(6):
        c = tuple(ctx.shape(6))
        if len(c) > 2 or broadcast(ctx, [c, (m, n)]) != (m, n):
            raise ctx.error(f"C of shape {c} does not broadcast to ({m}, {n})")
    if ctx.has_input(7) != ctx.has_input(8):
        raise ctx.error("y_scale and y_zero_point go together: both (quantized Y) or neither (float Y)")
    return [((m, n), np.dtype(ctx.dtype(8)) if ctx.has_input(8) else np.dtype(np.float32))]


@shape_rule("DynamicQuantizeMatMul", domain=DOMAIN)
def dynamic_quantize_matmul(ctx):
    """numpy.matmul's shape of A and B; float32."""
    check_types(ctx)
    out = matmul_shape(ctx, ctx.shape(0), ctx.shape(1))
    _check_b(ctx, 2, 3, 4)
    return [(out, np.dtype(np.float32))]


@shape_rule("MatMulIntegerToFloat", domain=DOMAIN)
def matmul_integer_to_float(ctx):
    """numpy.matmul's shape of A and B; a_scale's type (float32 or float16)."""
    check_types(ctx)
    out = matmul_shape(ctx, ctx.shape(0), ctx.shape(1))
    per_tensor(ctx, 2, 4)
    _check_b(ctx, 3, 5, 6)
    return [(out, np.dtype(ctx.dtype(2)))]


def _check_b(ctx, scale: int, zero_point: int, bias: int) -> None:
    """B's scale and zero point per tensor or per column; bias 1-D of B's columns."""
    b = tuple(ctx.shape(1))
    if len(b) < 2:
        raise ctx.error(f"B of shape {b} must have rank >= 2")
    n = b[-1]
    per_column(ctx, scale, n, "b_scale")
    per_column(ctx, zero_point, n, "b_zero_point")
    if ctx.has_input(bias) and tuple(ctx.shape(bias)) != (n,):
        raise ctx.error(f"bias of shape {tuple(ctx.shape(bias))} must be ({n},), one per column of B")
