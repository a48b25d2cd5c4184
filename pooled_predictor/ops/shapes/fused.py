"""Shape rules of our own fused ops (domain "pooled_predictor", opset 1).

The graph passes (pooled_predictor/passes) emit these ops; a graph that uses
them imports the domain (graph.opset["pooled_predictor"] = 1).

    FusedConv(X, W [, B [, Z]])  = activation(Conv(X, W, B) + Z)   attributes: Conv's + activation,
                                                                    activation_params; Z ("sum", as
                                                                    onnxruntime's): Y's shape
    FusedGemm(A, B [, C])  = activation(Gemm(A, B, C))    attributes: Gemm's + activation, activation_params
    FusedConvDepthwise(X, W, B, Z, W_dw [, B_dw])
                           = FusedConv(FusedConv(X, W, B, Z; activation, activation_params), W_dw, B_dw;
                                       dw_activation, dw_activation_params, the depthwise Conv's attributes)
                             a 1x1 Conv (group 1, stride 1, no padding; B and Z may be absent, '') and the
                             depthwise Conv (group = its channels) that alone reads it
                             (passes/pointwise_depthwise.py)
    MatMulAdd(A, B, C)     = MatMul(A, B) + C, B (K, N), C a bias over the last axis (N,), (1, N), (1,), (1, 1), ()
                             (A of rank >= 1; C of rank <= 1 when A is 1-D)
    ScaledDotProductAttention(Q, Kt, V [, M])
                           = MatMul(Softmax(op(MatMul(Q, Kt), scale) + M, axis=-1), V), op: * (divide 0)
                             or / (divide 1) by the float `scale`; M an additive mask or bias, any shape that
                             broadcasts with the scores (passes/attention.py)
    Gelu(X)                = ONNX Gelu-20 (approximate "none" | "tanh"), for models below opset 20
    Lookup(X, T)           = T[X]: 8-bit codes X through a (256,) table T indexed by the code's byte
                             (passes/lookup.py: a chain of element-wise ops on one 8-bit tensor, tabulated)
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
    Tanh         []           (FusedGemm only)
"""

from __future__ import annotations

import numpy as np

from ...ir import Node
from . import shape_rule
from .conv import conv as _conv_rule
from .common import broadcast as _broadcast
from .gemm import gemm as _gemm_rule
from .matmul import matmul_shape as _matmul_shape

DOMAIN = "pooled_predictor"
DOMAIN_VERSION = 1

# activation -> number of activation_params it takes
# (FusedConv's "Gelu" is our domain's Gelu, approximate="none": the exporters' X / sqrt(2), erf, + 1, * X,
# * 0.5, ops/cpu/fused.py; passes/fuse_activation.py fuses it after a Conv only)
ACTIVATIONS: dict[str, int] = {
    "Relu": 0, "Sigmoid": 0, "HardSwish": 0, "LeakyRelu": 1, "HardSigmoid": 2, "Clip": 2, "Identity": 0, "Gelu": 0,
}
# FusedGemm's: these but Gelu, and Tanh (its compiled call applies it: ops/cpu/fused.py)
GEMM_ACTIVATIONS: dict[str, int] = {**{k: v for k, v in ACTIVATIONS.items() if k != "Gelu"}, "Tanh": 0}


def activation_problem(attrs: dict, table: dict = ACTIVATIONS) -> str | None:
    """Why a fused node's activation attributes are invalid (`table`: ACTIVATIONS, or GEMM_ACTIVATIONS for
    FusedGemm), or None when they are fine."""
    name = attrs.get("activation")
    if isinstance(name, bytes):
        name = name.decode()
    if name not in table:
        return f"activation={name!r} is not one of {sorted(table)}"
    params = list(attrs.get("activation_params", []) or [])
    if len(params) != table[name]:
        return (f"activation {name} takes {table[name]} activation_params, "
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


# FusedConvDepthwise's attributes that are the depthwise Conv's own (the 1x1 Conv takes Conv's defaults)
DEPTHWISE_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def depthwise_chain_parts(ctx):
    """The two FusedConv nodes of a FusedConvDepthwise node, as OpContexts (shapes, dtypes, static
    values and the scratch allocator of ctx): (pointwise, depthwise). The pointwise one reads inputs
    0-3 and writes "<name>/pointwise", T (N, M, H, W); the depthwise one reads T, inputs 4 and 5 and
    writes the node's output. Output shapes are set on both (ShapeInferenceError where they do not fit).
    """
    node, attrs = ctx.node, ctx.attrs
    if len(node.inputs) < 5 or not node.inputs[4]:
        raise ctx.error("FusedConvDepthwise takes X, W, B, Z, W_dw [, B_dw] (W_dw present)")
    mid = f"{node.name}/pointwise"
    names = list(node.inputs) + [""] * (6 - len(node.inputs))
    vals = [ctx.value(i) if ctx.is_static(i) else None for i in range(6)]
    pw_node = Node("FusedConv", names[:4], [mid], {"activation": attrs.get("activation"),
                                                   "activation_params": list(attrs.get("activation_params", []))},
                   DOMAIN, mid)
    shapes = list(ctx.shapes) + [None] * (6 - len(ctx.shapes))
    dtypes = list(ctx.dtypes) + [None] * (6 - len(ctx.dtypes))
    pw = ctx.inner(pw_node, shapes[:4], dtypes[:4], vals[:4])
    ((t_shape, t_dtype),) = fused_conv(pw)
    pw.out_shapes, pw.out_dtypes = [tuple(t_shape)], [np.dtype(t_dtype)]
    dw_attrs = {k: attrs[k] for k in DEPTHWISE_ATTRS if k in attrs}
    dw_attrs.update(activation=attrs.get("dw_activation"),
                    activation_params=list(attrs.get("dw_activation_params", [])))
    dw_node = Node("FusedConv", [mid, names[4], names[5]], list(node.outputs[:1]), dw_attrs, DOMAIN, node.name)
    dw = ctx.inner(dw_node, [tuple(t_shape), shapes[4], shapes[5]], [np.dtype(t_dtype), dtypes[4], dtypes[5]],
                   [None, vals[4], vals[5]])
    ((y_shape, y_dtype),) = fused_conv(dw)
    dw.out_shapes, dw.out_dtypes = [tuple(y_shape)], [np.dtype(y_dtype)]
    w, w_dw = tuple(pw.shape(1)), tuple(dw.shape(1))
    m = w[0]
    if len(w) != 4 or w[2:] != (1, 1) or len(w_dw) != 4 or int(dw.attr("group", 1)) != m or w_dw[:2] != (m, 1):
        raise ctx.error(f"FusedConvDepthwise takes a 2-D 1x1 W (M, C, 1, 1) and a depthwise W_dw (M, 1, KH, KW) "
                        f"with group = M; got W {w}, W_dw {w_dw}, group {dw.attr('group', 1)}")
    return pw, dw


@shape_rule("FusedConvDepthwise", domain=DOMAIN)
def fused_conv_depthwise(ctx):
    """Y as the depthwise FusedConv's over the 1x1 FusedConv's T (depthwise_chain_parts)."""
    reason = activation_problem(ctx.attrs) or activation_problem(
        {"activation": ctx.attr("dw_activation"), "activation_params": ctx.attr("dw_activation_params", [])})
    if reason:
        raise ctx.error(reason)
    _check_float(ctx, "FusedConvDepthwise")
    _, dw = depthwise_chain_parts(ctx)
    return [(dw.out_shapes[0], dw.out_dtypes[0])]


@shape_rule("FusedGemm", domain=DOMAIN)
def fused_gemm(ctx):
    """Y (M, N) as Gemm's (ops/shapes/gemm.py); the activation keeps the shape."""
    reason = activation_problem(ctx.attrs, GEMM_ACTIVATIONS)
    if reason:
        raise ctx.error(reason)
    _check_float(ctx, "FusedGemm")
    return _gemm_rule(ctx)


@shape_rule("MatMulAdd", domain=DOMAIN)
def matmul_add(ctx):
    """Y as MatMul's (ops/shapes/matmul.py), A of rank >= 1 and B (K, N); C must broadcast as a bias of N,
    and have rank <= 1 when A is 1-D (Y (N,): C may not add a dimension)."""
    a, b, c = tuple(ctx.shape(0)), tuple(ctx.shape(1)), tuple(ctx.shape(2))
    if len(a) < 1 or len(b) != 2:
        raise ctx.error(f"MatMulAdd takes A of rank >= 1 and a 2-D B, got {a} @ {b}")
    if c not in ((b[1],), (1, b[1]), (1,), (1, 1), ()) or (len(a) == 1 and len(c) > 1):
        raise ctx.error(f"C {c} is not a bias of N = {b[1]}" + (" for a 1-D A" if len(a) == 1 else ""))
    return [(_matmul_shape(ctx, a, b), ctx.dtype(0))]


@shape_rule("Gelu", "HardSwish", domain=DOMAIN)
def unary_float(ctx):
    """Y has X's shape and dtype; X must be a float tensor (as the ONNX ops require)."""
    _check_float(ctx, ctx.node.op_type)
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("Lookup", domain=DOMAIN)
def lookup(ctx):
    """Y = T[X] (ops/cpu/quantized_contrib.Lookup): X uint8 or int8, T 1-D of 256 entries; Y X's shape, T's dtype."""
    x_type, t_shape = np.dtype(ctx.dtype(0)), tuple(ctx.shape(1))
    if x_type not in (np.dtype(np.uint8), np.dtype(np.int8)) or t_shape != (256,):
        raise ctx.error(f"Lookup takes 8-bit codes and a (256,) table, got {x_type} codes and a {t_shape} table")
    return [(ctx.shape(0), ctx.dtype(1))]


@shape_rule("DynamicQuantizeMatMul", domain=DOMAIN)
def dynamic_quantize_matmul(ctx):
    """Y float32 (..., M, N) of A float32 (..., M, K), a 2-D 8-bit B (K, N) and an optional float32 bias (N,)
    (ops/cpu/qmatmul.py)."""
    a, b = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if ctx.has_input(4) and (tuple(ctx.shape(4)) != b[1:] or np.dtype(ctx.dtype(4)) != np.float32):
        raise ctx.error(f"DynamicQuantizeMatMul's bias must be float32 (N,) = {b[1:]}, got {ctx.dtype(4)} "
                        f"{tuple(ctx.shape(4))}")
    if len(a) < 2 or len(b) != 2 or a[-1] != b[0]:
        raise ctx.error(f"DynamicQuantizeMatMul takes A (..., M, K) and B (K, N), got {a} and {b}")
    if np.dtype(ctx.dtype(0)) != np.float32 or np.dtype(ctx.dtype(1)) not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise ctx.error(f"DynamicQuantizeMatMul takes float32 A and 8-bit B, got {ctx.dtype(0)} and {ctx.dtype(1)}")
    return [(a[:-1] + (b[1],), np.dtype(np.float32))]


@shape_rule("ScaledDotProductAttention", domain=DOMAIN)
def scaled_dot_product_attention(ctx):
    """Y = MatMul(P, V), P of the scores' shape MatMul(Q, Kt) broadcast with M's (when M is given)."""
    _check_float(ctx, "ScaledDotProductAttention")
    scores = _matmul_shape(ctx, tuple(ctx.shape(0)), tuple(ctx.shape(1)))
    if ctx.has_input(3):
        scores = _broadcast(ctx, [scores, tuple(ctx.shape(3))])
    if len(scores) < 1:
        raise ctx.error("the scores MatMul(Q, Kt) are a scalar: Softmax over the last axis needs rank >= 1")
    return [(_matmul_shape(ctx, scores, tuple(ctx.shape(2))), ctx.dtype(0))]
