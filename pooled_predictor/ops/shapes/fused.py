"""Shape rules of our own fused ops (domain "pooled_predictor", opset 1).

The graph passes (pooled_predictor/passes) emit these ops; a graph that uses
them imports the domain (graph.opset["pooled_predictor"] = 1).

    FusedConv(X, W [, B [, Z]])  = activation(Conv(X, W, B) + Z)   attributes: Conv's + activation,
                                                                    activation_params; Z ("sum", as
                                                                    onnxruntime's): Y's shape
    FusedGemm(A, B [, C])  = activation(Gemm(A, B, C))    attributes: Gemm's + activation, activation_params
    MatMulAdd(A, B, C)     = MatMul(A, B) + C, B (K, N), C a bias over the last axis (N,), (1, N), (1,), (1, 1), ()
    Gelu(X)                = ONNX Gelu-20 (approximate "none" | "tanh"), for models below opset 20
    HardSwish(X)           = ONNX HardSwish-14, for models below opset 14

`activation` names an ONNX activation and `activation_params` its float
parameters, in this order (the names and order onnxruntime's FusedConv uses):

    Relu         []
    Sigmoid      []
    HardSwish    []
    LeakyRelu    [alpha]
    HardSigmoid  [alpha, beta]
    Clip         [min, max]   (-inf / +inf: that bound absent, as Clip-11's absent input)
    Identity     []           (none: a FusedConv that only adds its sum input Z)
"""

from __future__ import annotations

import numpy as np

from . import shape_rule
from .conv import conv as _conv_rule
from .gemm import gemm as _gemm_rule
from .matmul import matmul_shape as _matmul_shape

DOMAIN = "pooled_predictor"
DOMAIN_VERSION = 1

# activation -> number of activation_params it takes
ACTIVATIONS: dict[str, int] = {
    "Relu": 0, "Sigmoid": 0, "HardSwish": 0, "LeakyRelu": 1, "HardSigmoid": 2, "Clip": 2, "Identity": 0,
}


def activation_problem(attrs: dict) -> str | None:
    """Why a fused node's activation attributes are invalid, or None when they are fine."""
    name = attrs.get("activation")
    if isinstance(name, bytes):
        name = name.decode()
    if name not in ACTIVATIONS:
        return f"activation={name!r} is not one of {sorted(ACTIVATIONS)}"
    params = list(attrs.get("activation_params", []) or [])
    if len(params) != ACTIVATIONS[name]:
        return (f"activation {name} takes {ACTIVATIONS[name]} activation_params, "
                f"got {len(params)}: {params}")
    return None


def _check_float(ctx, what: str):
    dt = np.dtype(ctx.dtype(0))
    if dt.kind != "f":
        raise ctx.error(f"{what} takes float tensors, got {dt}")


@shape_rule("FusedConv", domain=DOMAIN)
def fused_conv(ctx):
    """Y as Conv's (ops/shapes/conv.py); the activation keeps the shape; Z, when given, has Y's shape
    and dtype."""
    reason = activation_problem(ctx.attrs)
    if reason:
        raise ctx.error(reason)
    _check_float(ctx, "FusedConv")
    out = _conv_rule(ctx)
    if ctx.has_input(3):
        (shape, dtype), = out
        if tuple(ctx.shape(3)) != tuple(shape) or np.dtype(ctx.dtype(3)) != np.dtype(dtype):
            raise ctx.error(f"the sum input Z is {np.dtype(ctx.dtype(3))}{list(ctx.shape(3))}, "
                            f"Y is {np.dtype(dtype)}{list(shape)}: they must agree")
    return out


@shape_rule("FusedGemm", domain=DOMAIN)
def fused_gemm(ctx):
    """Y (M, N) as Gemm's (ops/shapes/gemm.py); the activation keeps the shape."""
    reason = activation_problem(ctx.attrs)
    if reason:
        raise ctx.error(reason)
    _check_float(ctx, "FusedGemm")
    return _gemm_rule(ctx)


@shape_rule("MatMulAdd", domain=DOMAIN)
def matmul_add(ctx):
    """Y as MatMul's (ops/shapes/matmul.py), A of rank >= 2 and B (K, N); C must broadcast as a bias of N."""
    a, b, c = tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2))
    if len(a) < 2 or len(b) != 2:
        raise ctx.error(f"MatMulAdd takes A of rank >= 2 and a 2-D B, got {a} @ {b}")
    if c not in ((b[1],), (1, b[1]), (1,), (1, 1), ()):
        raise ctx.error(f"C {c} is not a bias of N = {b[1]}")
    return [(_matmul_shape(ctx, a, b), ctx.dtype(0))]


@shape_rule("Gelu", "HardSwish", domain=DOMAIN)
def unary_float(ctx):
    """Y has X's shape and dtype; X must be a float tensor (as the ONNX ops require)."""
    _check_float(ctx, ctx.node.op_type)
    return [(ctx.shape(0), ctx.dtype(0))]
