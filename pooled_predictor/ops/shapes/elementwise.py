"""Shape rules of the element-wise math, bitwise and activation ops added for the
conformance suite (the older ones are in common.py): every rule checks the input
dtypes against the op's schema first."""

from __future__ import annotations

import numpy as np

from ...ir import elem_dtype
from . import shape_rule
from .common import broadcast, check_types


@shape_rule("Sign", "Selu", "Celu", "Softsign", "ThresholdedRelu", "Shrink", "Swish", "Mish", "Round",
            "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
            "BitwiseNot")
def unary_checked(ctx):
    """Y has X's shape and dtype."""
    check_types(ctx)
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("IsNaN", "IsInf")
def predicate(ctx):
    """Y has X's shape, bool."""
    check_types(ctx)
    return [(ctx.shape(0), np.dtype(bool))]


@shape_rule("Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
def binary_checked(ctx):
    """Broadcast of A and B (one dtype); that dtype."""
    check_types(ctx)
    if ctx.node.op_type == "Mod" and int(ctx.attr("fmod", 0)) not in (0, 1):
        raise ctx.error(f"fmod={ctx.attr('fmod')}; it must be 0 or 1")
    if ctx.node.op_type == "BitShift" and ctx.attr("direction") not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction={ctx.attr('direction')!r}; it must be 'LEFT' or 'RIGHT'")
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), ctx.dtype(0))]


@shape_rule("SwiGLU")
def swiglu(ctx):
    """A and B have one shape (no broadcasting, SwiGLU-28); Y has it too."""
    check_types(ctx)
    if tuple(ctx.shape(0)) != tuple(ctx.shape(1)):
        raise ctx.error(f"A {tuple(ctx.shape(0))} and B {tuple(ctx.shape(1))} must have the same shape")
    return [(ctx.shape(0), ctx.dtype(0))]


def bit_width(dtype: np.dtype) -> int:
    """Bits of one element: 4 for int4/uint4/float4e2m1, 2 for int2/uint2, else 8 * itemsize."""
    dtype = np.dtype(dtype)
    if dtype.kind == "V" or dtype.name.startswith(("int", "uint", "float")):
        for bits in (1, 2, 4):
            if dtype.name.endswith(f"int{bits}") or dtype.name.startswith(f"float{bits}_"):
                return bits
    return 8 * dtype.itemsize


@shape_rule("BitCast")
def bit_cast(ctx):
    """Y has X's shape and the type `to`, which must have X's bit width (BitCast-26)."""
    to = elem_dtype(int(ctx.attr("to", 0)))
    if to is None or to == object or ctx.dtype(0) == object:
        raise ctx.error(f"BitCast to elem_type {ctx.attr('to')} from {ctx.dtype(0)}: strings and unknown "
                        f"types cannot be reinterpreted")
    if bit_width(to) != bit_width(ctx.dtype(0)):
        raise ctx.error(f"BitCast from {ctx.dtype(0)} ({bit_width(ctx.dtype(0))} bits) to {to} "
                        f"({bit_width(to)} bits): the bit widths must be equal")
    return [(ctx.shape(0), to)]
