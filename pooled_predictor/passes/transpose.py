"""Consecutive Transposes composed into one (or none).

    Transpose(Transpose(x, p), q) = Transpose(x, r),  r[i] = p[q[i]]

(axis i of the result is axis q[i] of the inner result, which is axis p[q[i]]
of x). When r is the identity the pair is removed and readers read x (as
Identity elimination does; kept as one identity Transpose when both x and
the result must keep their names). An absent perm reverses the axes, which
needs x's rank (declared or from the shape analysis): unknown, no rewrite.
"""

from __future__ import annotations

from ..ir import Node
from .base import rules_pass
from .pattern import Match, Pat, Replacement, Rewriter, Rule, Var


def _perm(node: Node, rank: int | None) -> list[int] | None:
    p = node.attrs.get("perm")
    if p is not None and len(p):
        r = len(p)
        return [int(a) + r if int(a) < 0 else int(a) for a in p]
    return None if rank is None else list(range(rank))[::-1]


def compose(m: Match, rw: Rewriter):
    """Transpose(Transpose(x, p), q) = Transpose(x, [p[q[i]] for i])"""
    x, y = m.value("x"), m.root.outputs[0]
    rank = m.rank(x)
    p, q = _perm(m.node("inner"), rank), _perm(m.root, rank)
    if p is None or q is None or len(p) != len(q):
        return None
    r = [p[i] for i in q]
    idx = m.index
    if r == list(range(len(r))):
        if y not in idx.outputs:
            return Replacement(substitute={y: x})
        if x not in idx.outputs and x not in idx.inputs and not idx.is_weight(x) and x in idx.producers:
            return Replacement(substitute={x: y})
    return [Node("Transpose", [x], [y], {"perm": r}, "", m.root.name)]


TRANSPOSE_RULES = [Rule("Transpose pairs composed",
                        Pat("Transpose", (Pat("Transpose", (Var("x"),), name="inner"),)),
                        compose, doc=compose.__doc__)]

compose_transposes = rules_pass(TRANSPOSE_RULES, shapes=True)
