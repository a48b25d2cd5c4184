"""Shape rules shared by many ops: same-as-input, broadcasting, normalized axes."""

from __future__ import annotations

import numpy as np

from . import shape_rule


def broadcast(ctx, shapes) -> tuple:
    """Multidirectional (numpy) broadcasting, ONNX spec "Broadcasting in ONNX"."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.error(f"shapes {[tuple(s) for s in shapes]} do not broadcast") from None


def norm_axis(ctx, axis: int, rank: int, name: str = "axis") -> int:
    """An axis in [-rank, rank-1] as a non-negative index."""
    if not -rank <= axis < rank:
        raise ctx.error(f"{name}={axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(ctx, axes, rank: int, name: str = "axes") -> list[int]:
    out = [norm_axis(ctx, int(a), rank, name) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{name}={list(axes)} repeats an axis")
    return out


@shape_rule("Relu", "Sigmoid", "HardSigmoid", "Erf", "Identity", "Softmax", "LogSoftmax", "Hardmax",
            "Neg", "Abs", "Sqrt", "Exp", "Log", "Tanh", "Reciprocal", "Floor", "Ceil", "Sign",
            "LeakyRelu", "Elu", "Selu", "Celu", "HardSwish", "Gelu", "Softplus", "Softsign",
            "ThresholdedRelu", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
            "Asinh", "Acosh", "Atanh", "Round", "IsNaN", "IsInf", "Not", "Mish", "Shrink",
            "BitwiseNot", "LRN", "InstanceNormalization", "CumSum", "Clip")
def same_as_input(ctx):
    """Output 0 has input 0's shape; its dtype too, except where the op fixes it."""
    dtype = np.dtype(bool) if ctx.node.op_type in ("IsNaN", "IsInf") else ctx.dtype(0)
    return [(ctx.shape(0), dtype)]


@shape_rule("Add", "Sub", "Mul", "Div", "Pow", "PRelu", "Mod", "BitShift",
            "BitwiseAnd", "BitwiseOr", "BitwiseXor")
def binary(ctx):
    """Broadcast of both inputs; dtype of input 0 (Pow: base's dtype)."""
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), ctx.dtype(0))]


@shape_rule("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
def comparison(ctx):
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), np.dtype(bool))]


@shape_rule("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    shapes = [s for i, s in enumerate(ctx.shapes) if ctx.has_input(i)]
    if not shapes:
        raise ctx.error("needs at least one input")
    return [(broadcast(ctx, shapes), ctx.dtype(0))]
