"""The attention pattern, as exporters write it, -> one ScaledDotProductAttention node (our domain).

    MatMul(Softmax(op(MatMul(Q, Kt), c) + M, axis=-1), V)  =  ScaledDotProductAttention(Q, Kt, V, M;
                                                                                       scale=c, divide)
    (Vaswani et al. 2017, eq. 1: softmax(Q K^T / sqrt(d_k)) V, with an additive mask or bias M)

Forms recognised (Add and Mul either way round):

    Softmax(Div(S, c) + M)     BERT (Hugging Face, eager): (Q K^T) / sqrt(d) + mask
    Softmax(Mul(S, c) + M)
    Softmax(S + M)             Swin: (q * scale) K^T + relative position bias
    Softmax(Div(S, c)), Softmax(Mul(S, c))
    Softmax(S)                 torchvision's ViT: the scale applied to Q and K before the product
    with S = MatMul(Q, Kt)

Conditions: c is one float (a tensor of one element of rank <= 1: it leaves any score's shape
as it is); Kt and V are activations (a constant one would take the MatMul kernel's
packed-weight path, with other rounding); Softmax normalizes the last axis (axis -1, or the
last axis of a known rank; before opset 13 only an explicit -1, since the 2-D coercion at
the default axis 1 is another function); every intermediate is read only inside the
pattern. M may have any shape that broadcasts with the scores (the kernel enlarges the
scores when it does). The fused node computes what the nodes did, in their order and
rounding (ops/cpu/attention.py), in one pass over the scores instead of three.
"""

from __future__ import annotations

from ..ir import Node
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from .base import rules_pass
from .pattern import Const, Match, Pat, Rewriter, Rule, Var


def _scalar(c) -> bool:
    return c.size == 1 and c.ndim <= 1 and c.dtype.kind == "f"


def _scores():
    return Pat("MatMul", (Var("q"), Var("kt")), name="qk")


def _patterns():
    s = _scores()
    scaled = {"div": Pat("Div", (s, Const("c", _scalar)), name="scale"),
              "mul": Pat("Mul", (s, Const("c", _scalar)), name="scale", commutative=True),
              "none": s}
    for kind, x in scaled.items():
        for masked in (True, False):
            inner = Pat("Add", (x, Var("m")), name="mask", commutative=True) if masked else x
            yield kind, masked, Pat("MatMul", (Pat("Softmax", (inner,), name="softmax"), Var("v")))


def _fits(m: Match) -> bool:
    g = m.graph
    if any(g.weights.get(m.value(n)) is not None for n in ("kt", "v")):
        return False
    sm = m.node("softmax")
    opset = g.opset_of(sm)
    axis = sm.attrs.get("axis")
    if opset < 13:
        if axis is None or int(axis) != -1:
            return False
    elif axis is not None and int(axis) != -1:
        rank = m.rank(sm.inputs[0])
        if rank is None or int(axis) != rank - 1:
            return False
    dt = m.shapes.dtypes.get(m.value("q")) if m.shapes is not None else None
    if dt is not None and dt.kind != "f":
        return False
    c = m.weight("c") if "c" in m.values else None
    return c is None or dt is None or c.dtype == dt


def _replace(kind: str, masked: bool):
    def to_sdpa(m: Match, rw: Rewriter):
        """MatMul(Softmax(op(MatMul(Q, Kt), c) + M), V) = ScaledDotProductAttention(Q, Kt, V, M; c, divide)"""
        rw.use_domain(DOMAIN, DOMAIN_VERSION)
        attrs = {"divide": 1 if kind == "div" else 0}
        if kind != "none":
            attrs["scale"] = float(m.weight("c").reshape(-1)[0])
        inputs = [m.value("q"), m.value("kt"), m.value("v")] + ([m.value("m")] if masked else [])
        name = rw.node_name(f"{m.node('softmax').name}.attention")
        return [Node("ScaledDotProductAttention", inputs, [m.root.outputs[0]], attrs, DOMAIN, name)]

    return to_sdpa


ATTENTION_RULES = [Rule(f"attention ({kind}{' + mask' if masked else ''}) fused", pat, _replace(kind, masked),
                        where=_fits, doc=(_replace(kind, masked).__doc__ or ""))
                   for kind, masked, pat in _patterns()]

fuse_attention = rules_pass(ATTENTION_RULES, shapes=True)
