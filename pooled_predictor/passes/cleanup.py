"""Cleanups that remove nodes without computing anything new.

eliminate_identity: Identity and inference Dropout pass their input through
    (y = x), so their readers can read x directly. When y is a graph output the
    name y must survive: then x's producer writes y instead (x renamed to y),
    unless x is itself a graph input, weight or graph output; in that case the
    node stays (it is the only way to give the graph output its own name).
    A Dropout stays when its mask is read, or when training_mode is not
    statically false (its kernel must raise for a training-mode dropout).
eliminate_dead_nodes: nodes none of whose outputs reach a graph output, and
    weights nobody reads any more (dropped from the graph, not from memory
    shared with the caller's graph).
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from .base import PassContext
from .pattern import Const, Match, Opt, Pat, Replacement, Rewriter, Rule, Var, apply_rules


def _bypass(m: Match, rw: Rewriter) -> Replacement | None:
    """y = x: readers of y read x (or, y being a graph output, x's producer writes y)."""
    node, idx = m.root, m.index
    x, y = m.value("x"), node.outputs[0]
    for extra in node.outputs[1:]:  # Dropout's mask: only when nobody reads it
        if extra and (extra in idx.outputs or idx.users(extra)):
            return None
    if y not in idx.outputs:
        return Replacement(substitute={y: x})
    if x in idx.outputs or x in idx.inputs or idx.is_weight(x) or x not in idx.producers:
        return None
    return Replacement(substitute={x: y})


def _inference_dropout(node) -> bool:
    return int(node.attrs.get("is_test", 1)) != 0  # Dropout-1..6: is_test=0 is training


def _dropout_is_identity(m: Match) -> bool:
    """training_mode absent or false, or the ratio is 0 (then training drops nothing either)."""
    mode = m.weight("training_mode")
    if mode is None or not bool(np.asarray(mode).reshape(-1)[0]):
        return True
    ratio = m.weight("ratio")
    return ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0


IDENTITY_RULES = [
    Rule("Identity removed", Pat("Identity", (Var("x"),)), _bypass, doc="Identity(x) = x"),
    Rule("Dropout removed",
         Pat("Dropout", (Var("x"), Opt(Const("ratio")), Opt(Const("training_mode"))), where=_inference_dropout),
         _bypass, where=_dropout_is_identity,
         doc="Dropout(x) = x at inference (output 0; the mask must be unread)"),
]


def eliminate_identity(graph: Graph, ctx: PassContext) -> dict:
    return dict(apply_rules(graph, IDENTITY_RULES))


def eliminate_dead_nodes(graph: Graph, ctx: PassContext) -> dict:
    """Keep the nodes from which a graph output can be reached; drop unread weights."""
    live = set(graph.output_names)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.present_outputs()):
            kept.append(node)
            live.update(node.present_inputs())
    dead_ops: dict[str, int] = {}
    kept_ids = {id(n) for n in kept}
    for n in graph.nodes:
        if id(n) not in kept_ids:
            dead_ops[n.op_type] = dead_ops.get(n.op_type, 0) + 1
    graph.nodes = kept[::-1]
    unread = [w for w in graph.weights if w not in live]
    for w in unread:
        del graph.weights[w]
    changes = {f"dead {op} removed": k for op, k in sorted(dead_ops.items())}
    if unread:
        changes["unread weights dropped"] = len(unread)
    return changes
