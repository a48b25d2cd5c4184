"""x * HardSigmoid(x) -> HardSwish(x) (MobileNetV3; PaddlePaddle exports hardswish this way).

    HardSwish(x) = x * max(0, min(1, x / 6 + 1/2)) = x * HardSigmoid(x; alpha=1/6, beta=1/2)

Fires only when alpha = 1/6 and beta = 1/2 within float32 tolerance (rtol 1e-6;
Paddle writes alpha as 0.1666667), both Mul operands are the same value x
(x * HardSigmoid(y) with y != x is a squeeze-excitation gate, not HardSwish),
and HardSigmoid's output is read by this Mul only.

ONNX HardSwish exists from opset 14: below that the pass emits our own
domain's HardSwish (pooled_predictor::HardSwish, opset 1, same kernel), as the
Gelu pass does, and never raises the model's opset.
"""

from __future__ import annotations

from ..ir import Node
from .base import rules_pass
from .pattern import Match, Pat, Rewriter, Rule, Var

RTOL = 1e-6


def _is_hardswish_gate(node: Node) -> bool:
    alpha = float(node.attrs.get("alpha", 0.2))
    beta = float(node.attrs.get("beta", 0.5))
    return abs(alpha - 1.0 / 6.0) <= RTOL / 6.0 and abs(beta - 0.5) <= RTOL * 0.5


def to_hard_swish(m: Match, rw: Rewriter):
    """x * HardSigmoid(x; 1/6, 1/2) = HardSwish(x)"""
    name = rw.node_name(f"{m.root.name}.hardswish")
    return [Node("HardSwish", [m.value("x")], [m.root.outputs[0]], {}, rw.domain_for(14), name)]


HARD_SWISH_RULES = [Rule(
    "HardSigmoid*x -> HardSwish",
    Pat("Mul", (Var("x"), Pat("HardSigmoid", (Var("x"),), where=_is_hardswish_gate)), commutative=True),
    to_hard_swish, doc=to_hard_swish.__doc__)]

fuse_hard_swish = rules_pass(HARD_SWISH_RULES)
