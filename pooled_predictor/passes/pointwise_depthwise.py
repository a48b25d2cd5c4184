"""A 1x1 Conv and the depthwise Conv that alone reads it -> one FusedConvDepthwise node.

    FusedConv(FusedConv(x, W, b, z; act1), W_dw, b_dw; act2, depthwise attributes)
        ->  FusedConvDepthwise(x, W, b, z, W_dw, b_dw; activation=act1, dw_activation=act2, ...)

(either Conv may be a plain ONNX Conv: activation Identity; b, z and b_dw may be
absent.) MobileNetV2's inverted residual blocks (Sandler et al. 2018) expand
with a 1x1 Conv and filter with a depthwise Conv; in MobileNetV1 / PP-LCNet
chains a block's 1x1 Conv feeds the next block's depthwise Conv. The 1x1
output T is the largest blob of such a network; the fused NCHW8c kernel
(ops/cpu/conv_nchwc.py, compiled/nchwc_chain.py) computes it a group of
channels at a time into a scratch buffer and filters it there, so T is never
stored whole nor read back from memory, and the arena loses it. The kernels
compute the same operations in the same order as the two nodes: the same bits.

Fires where the fused NCHW8c kernel can run it and the two blocked kernels could
have run the pair (so a pair never loses its blocked kernels to the fusion):
float32 weights; W (M, C, 1, 1) with C and M multiples of 8, group 1, strides
1, no padding (auto_pad NOTSET or VALID); W_dw (M, 1, KH, KW) with group M; b
and b_dw weights; activations the compiled kernels apply in registers
(IN_KERNEL, compiled/epilogue.py's CODES, or none); T read by the depthwise
Conv alone and no graph output (the matcher's rule); the depthwise Conv
without a sum input.
"""

from __future__ import annotations

import numpy as np

from ..ir import Node
from ..ops.shapes.fused import DEPTHWISE_ATTRS, DOMAIN, DOMAIN_VERSION
from .base import rules_pass
from .pattern import Match, Opt, Pat, Rewriter, Rule, Var

BLOCK = 8  # the NCHW8c block (ops/cpu/conv_nchwc.py)
# Activations the compiled NCHW8c kernels apply in registers: compiled/epilogue.py's CODES, and none
# (tests/passes/test_pass_pointwise_depthwise.py keeps the two lists equal).
IN_KERNEL = ("Relu", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Identity")


def _activation(node: Node) -> tuple[str, list[float]]:
    if node.op_type == "Conv":
        return "Identity", []
    name = node.attrs.get("activation")
    name = name.decode() if isinstance(name, bytes) else name
    return name, [float(v) for v in node.attrs.get("activation_params", [])]


def _ints(node: Node, name: str, default: int) -> list[int]:
    return [int(v) for v in node.attrs.get(name, [default] * 2)]


def _fits(m: Match) -> bool:
    pw, dw = m.node("pw"), m.node("dw")
    w, w_dw = m.weight("W"), m.weight("W_dw")
    if w is None or w_dw is None or w.dtype != np.float32 or w_dw.dtype != np.float32:
        return False
    if w.ndim != 4 or w.shape[2:] != (1, 1) or w.shape[0] % BLOCK or w.shape[1] % BLOCK:
        return False
    m_n = w.shape[0]
    if w_dw.ndim != 4 or w_dw.shape[:2] != (m_n, 1) or int(dw.attrs.get("group", 1)) != m_n:
        return False
    auto_pad = pw.attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if (int(pw.attrs.get("group", 1)) != 1 or auto_pad not in ("NOTSET", "VALID")
            or any(s != 1 for s in _ints(pw, "strides", 1)) or any(_ints(pw, "pads", 0))
            or _ints(pw, "kernel_shape", 1) != [1, 1]):
        return False
    for bias in ("B", "B_dw"):
        if m.value(bias) and m.weight(bias) is None:
            return False
    return all(_activation(n)[0] in IN_KERNEL for n in (pw, dw))


def _fuse(m: Match, rw: Rewriter):
    """FusedConv(FusedConv(x, W, b, z; act1), W_dw, b_dw; act2) = FusedConvDepthwise(x, W, b, z, W_dw, b_dw)"""
    pw, dw = m.node("pw"), m.node("dw")
    act1, params1 = _activation(pw)
    act2, params2 = _activation(dw)
    attrs = {k: dw.attrs[k] for k in DEPTHWISE_ATTRS if k in dw.attrs}
    attrs.update(activation=act1, activation_params=params1, dw_activation=act2, dw_activation_params=params2)
    rw.use_domain(DOMAIN, DOMAIN_VERSION)
    inputs = [m.value("x"), m.value("W"), m.value("B") or "", m.values.get("z") or "", m.value("W_dw"),
              m.value("B_dw") or ""]
    return [Node("FusedConvDepthwise", inputs, [dw.outputs[0]], attrs, DOMAIN, rw.node_name(f"{pw.name}+{dw.name}"))]


def _rules() -> list[Rule]:
    pointwise = [Pat("Conv", (Var("x"), Var("W"), Opt(Var("B"))), name="pw"),
                 Pat("FusedConv", (Var("x"), Var("W"), Opt(Var("B")), Opt(Var("z"))), name="pw", domain=DOMAIN)]
    rules = []
    for pw in pointwise:
        for op, domain in (("Conv", ""), ("FusedConv", DOMAIN)):
            rules.append(Rule(f"{pw.op}(1x1)+{op}(depthwise) fused",
                              Pat(op, (pw, Var("W_dw"), Opt(Var("B_dw"))), name="dw", domain=domain),
                              _fuse, where=_fits, doc=_fuse.__doc__))
    return rules


POINTWISE_DEPTHWISE_RULES = _rules()

fuse_pointwise_depthwise = rules_pass(POINTWISE_DEPTHWISE_RULES)
