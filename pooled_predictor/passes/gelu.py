"""The erf form of GELU, as exporters write it, -> one Gelu node.

    GELU(x) = x * 0.5 * (1 + erf(x / sqrt(2)))          (Hendrycks & Gimpel 2016)

Exporters spell it with x / sqrt(2) as Div(x, 1.4142135) or Mul(x, 0.70710677),
and put the 0.5 in one of three places (every Mul and Add either way round):

    ((x * E) * 0.5)      PaddlePaddle (PP-OCR), PyTorch
    ((x * 0.5) * E)      TensorFlow / Keras
    (x * (E * 0.5))
    with E = erf(x / sqrt(2)) + 1

The constants must equal sqrt(2), 1/sqrt(2), 1 and 0.5 within float32
tolerance (rtol 1e-6, about 8 ulp), be single values that do not broadcast x
to a larger rank, and be floats. Every intermediate must be read only inside
the pattern (x itself may have other readers).

Which Gelu: ONNX Gelu exists from opset 20. When the model imports the default
domain at 20 or later the pass emits ONNX Gelu; below that it emits our own
domain's Gelu (pooled_predictor::Gelu, opset 1, the same function and the same
kernel) and adds that domain to graph.opset. It never raises the model's
default opset: that would change the meaning of every other node whose
schema changed in between (Squeeze-13, ReduceMean-18, Resize-13/18/19, ...).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Node
from .base import rules_pass
from .pattern import Const, Match, Pat, Rewriter, Rule, Var

RTOL = 1e-6


def near(target: float):
    """A Const test: one float value within RTOL of `target`."""
    def test(c: np.ndarray) -> bool:
        return c.size == 1 and c.dtype.kind == "f" and abs(float(c.reshape(-1)[0]) - target) <= RTOL * abs(target)
    return test


def _scaled(kind: str) -> Pat:
    if kind == "div":
        return Pat("Div", (Var("x"), Const("k1", near(math.sqrt(2.0)))))
    return Pat("Mul", (Var("x"), Const("k1", near(1.0 / math.sqrt(2.0)))), commutative=True)


def _patterns():
    for kind in ("div", "mul"):
        e = Pat("Add", (Pat("Erf", (_scaled(kind),)), Const("k2", near(1.0))), commutative=True)
        half = Const("k3", near(0.5))
        yield kind, "(x*E)*0.5", Pat("Mul", (Pat("Mul", (Var("x"), e), commutative=True), half), commutative=True)
        yield kind, "(x*0.5)*E", Pat("Mul", (Pat("Mul", (Var("x"), half), commutative=True), e), commutative=True)
        yield kind, "x*(E*0.5)", Pat("Mul", (Var("x"), Pat("Mul", (e, half), commutative=True)), commutative=True)


def _constants_keep_shape(m: Match) -> bool:
    """Each constant is one value whose broadcast leaves x's shape (rank) unchanged."""
    x = m.value("x")
    rank = m.rank(x)
    for k in ("k1", "k2", "k3"):
        c = m.weight(k)
        if c.ndim > 0 and (rank is None or c.ndim > rank):
            return False
    dt = m.shapes.dtypes.get(x) if m.shapes is not None else None
    return dt is None or all(m.weight(k).dtype == dt for k in ("k1", "k2", "k3"))


def to_gelu(m: Match, rw: Rewriter):
    """x * 0.5 * (1 + erf(x / sqrt(2))) = Gelu(x; approximate="none")"""
    name = rw.node_name(f"{m.root.name}.gelu")
    return [Node("Gelu", [m.value("x")], [m.root.outputs[0]], {}, rw.domain_for(20), name)]


GELU_RULES = [Rule("Gelu (erf form) fused", pat, to_gelu, where=_constants_keep_shape,
                   doc=f"{form} with x/sqrt(2) as {kind}: " + (to_gelu.__doc__ or ""))
              for kind, form, pat in _patterns()]

fuse_gelu = rules_pass(GELU_RULES, shapes=True)
