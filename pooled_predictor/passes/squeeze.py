"""Squeeze moved below the per-channel and element-wise ops that read it; an Unsqueeze undoing a Squeeze removed.

    BatchNormalization(Squeeze(x, a), s, B, m, v) = Squeeze(BatchNormalization(x, s, B, m, v), a)
    act(Squeeze(x, a))                              = Squeeze(act(x), a)
    Squeeze(x, a) * HardSigmoid(Squeeze(x, a))      = Squeeze(x * HardSigmoid(x), a)
    Unsqueeze(Squeeze(x, a), a)                     = x

x (N, C, D1, ..., Dk); a: the squeezed axes, every one past the channel axis (a >= 2 once
normalized), so that the squeezed tensor's axis 1 is still x's channel axis and BatchNormalization
(inference: Y = X a_c + b_c per channel of axis 1, its parameters weights) computes the same numbers
on x, one channel at a time; act is an element-wise activation (passes/fuse_activation.py's, with its
inputs beyond X weights), which commutes with any Squeeze, and so does HardSwish as exporters write it
before opset 14 (x * HardSigmoid(x), which passes/hard_swish.py fuses later); the Unsqueeze's axes, normalized against
its output's rank, are the Squeeze's, normalized against its input's (that is x's shape again).
Squeeze-1/11 and Unsqueeze-1/11 carry the axes as an attribute, -13 and later as a weight input; a
Squeeze without axes (every size-1 axis) needs x's shape (the shape analysis), else no rewrite.

Why: exporters of 1-D convolutions (PaddlePaddle's conv1d, the SVTR neck of PP-OCR's recognizers)
write Conv (N, C, 1, W) -> Squeeze(2) -> BatchNormalization -> HardSwish -> Unsqueeze(2) -> Conv.
With the Squeeze below them, fold_conv_bn and fuse_conv_activation see Conv -> BatchNormalization ->
HardSwish and fold both into the Conv, and the Unsqueeze meets its Squeeze: four to five nodes fewer
per 1-D convolution (PP-OCR rec: the two of its head). The moves themselves compute the same
operations on the same values; the BatchNormalization folded into the Conv then rounds as
fold_conv_bn's folds do (PP-OCR rec's output: within 1e-6 of the unfolded graph's).
"""

from __future__ import annotations

import numpy as np

from ..ir import Node
from .base import rules_pass
from .fuse_activation import ACTIVATIONS
from .pattern import Const, Match, Opt, Pat, Replacement, Rewriter, Rule, Var


def _axes(m: Match, node: Node, axes_var: str, rank: int | None) -> list[int] | None:
    """node's axes (attribute before opset 13, else the bound weight `axes_var`), normalized against
    `rank`; None when absent (Squeeze: every size-1 axis) or not known."""
    if m.graph.opset_of(node) < 13:
        a = node.attrs.get("axes")
    else:
        w = m.weight(axes_var) if m.values.get(axes_var) else None
        a = None if w is None else [int(v) for v in np.asarray(w).reshape(-1)]
    if a is None or (rank is None and any(int(v) < 0 for v in a)):
        return None  # (non-negative axes need no rank: a value this pass made has none in the analysis)
    out = sorted(int(v) + rank if int(v) < 0 else int(v) for v in a)
    return out if all(0 <= v and (rank is None or v < rank) for v in out) and len(set(out)) == len(out) else None


def _squeezed_axes(m: Match) -> list[int] | None:
    """The Squeeze's axes normalized against x's rank; a Squeeze without axes: x's size-1 axes (shapes)."""
    sq, x = m.node("sq"), m.value("x")
    rank = m.rank(x)
    axes = _axes(m, sq, "sq_axes", rank)
    has_axes = sq.attrs.get("axes") is not None if m.graph.opset_of(sq) < 13 else bool(m.values.get("sq_axes"))
    if axes is None and not has_axes and m.shapes is not None:
        shape = m.shapes.shapes.get(x)
        if shape is not None and all(isinstance(d, (int, np.integer)) for d in shape):
            axes = [i for i, d in enumerate(shape) if d == 1]
    return axes


def _squeeze_like(m: Match, rw: Rewriter, x: str, y: str) -> Node:
    """A copy of the matched Squeeze reading x and writing y (its axes attribute or input as they were)."""
    sq = m.node("sq")
    return Node("Squeeze", [x] + list(sq.inputs[1:]), [y], dict(sq.attrs), sq.domain, rw.node_name(sq.name))


def _channels_kept(m: Match) -> bool:
    if len([o for o in m.node("bn").outputs if o]) != 1:  # training outputs: not the inference form
        return False
    axes = _squeezed_axes(m)
    return axes is not None and bool(axes) and min(axes) >= 2


def _bn_below(m: Match, rw: Rewriter):
    """BatchNormalization(Squeeze(x, a), ...) = Squeeze(BatchNormalization(x, ...), a), a >= 2"""
    bn = m.node("bn")
    t = rw.value_name(f"{bn.outputs[0]}/unsqueezed")
    return [Node(bn.op_type, [m.value("x")] + list(bn.inputs[1:]), [t], dict(bn.attrs), bn.domain, bn.name),
            _squeeze_like(m, rw, t, bn.outputs[0])]


def _act_below(m: Match, rw: Rewriter):
    """act(Squeeze(x, a)) = Squeeze(act(x), a)"""
    act = m.node("act")
    t = rw.value_name(f"{act.outputs[0]}/unsqueezed")
    return [Node(act.op_type, [m.value("x")] + list(act.inputs[1:]), [t], dict(act.attrs), act.domain, act.name),
            _squeeze_like(m, rw, t, act.outputs[0])]


def _hard_swish_below(m: Match, rw: Rewriter):
    """Squeeze(x, a) * HardSigmoid(Squeeze(x, a)) = Squeeze(x * HardSigmoid(x), a)   (HardSwish as exported)"""
    hs, mul = m.node("hs"), m.root
    t1, t2 = rw.value_name(f"{hs.outputs[0]}/unsqueezed"), rw.value_name(f"{mul.outputs[0]}/unsqueezed")
    x = m.value("x")
    inputs = [x, t1] if mul.inputs[0] == m.node("sq").outputs[0] else [t1, x]
    return [Node("HardSigmoid", [x], [t1], dict(hs.attrs), hs.domain, hs.name),
            Node("Mul", inputs, [t2], dict(mul.attrs), mul.domain, mul.name),
            _squeeze_like(m, rw, t2, mul.outputs[0])]


def _undone(m: Match) -> bool:
    """The Unsqueeze puts back the axes the Squeeze took (both normalized against x's rank, which is the
    Unsqueeze output's: a value this pass made has no rank in the analysis, the Unsqueeze's output has)."""
    out_rank = m.rank(m.root.outputs[0])
    x_rank = m.rank(m.value("x"))
    rank = x_rank if x_rank is not None else out_rank
    axes = _axes(m, m.node("sq"), "sq_axes", rank)
    return axes is not None and axes == _axes(m, m.root, "unsq_axes", rank)


def _cancel(m: Match, rw: Rewriter):
    """Unsqueeze(Squeeze(x, a), a) = x"""
    x, y = m.value("x"), m.root.outputs[0]
    idx = m.index
    if y not in idx.outputs:
        return Replacement(substitute={y: x})
    if x not in idx.outputs and x not in idx.inputs and not idx.is_weight(x) and x in idx.producers:
        return Replacement(substitute={x: y})
    return None


def _rules() -> list[Rule]:
    squeeze = Pat("Squeeze", (Var("x"), Opt(Const("sq_axes"))), name="sq")
    rules = [Rule("BatchNormalization below Squeeze",
                  Pat("BatchNormalization", (squeeze, Const("s"), Const("B"), Const("mean"), Const("var")), name="bn"),
                  _bn_below, where=_channels_kept, doc=_bn_below.__doc__),
             Rule("Unsqueeze(Squeeze) removed", Pat("Unsqueeze", (squeeze, Opt(Const("unsq_axes")))),
                  _cancel, where=_undone, doc=_cancel.__doc__),
             Rule("HardSwish spelling below Squeeze",
                  Pat("Mul", (squeeze, Pat("HardSigmoid", (squeeze,), name="hs")), commutative=True),
                  _hard_swish_below, doc=_hard_swish_below.__doc__)]
    for op, (extra, _) in ACTIVATIONS.items():
        for d in (("", "pooled_predictor") if op == "HardSwish" else ("",)):
            rules.append(Rule(f"{op} below Squeeze", Pat(op, (squeeze,) + extra, name="act", domain=d),
                              _act_below, doc=_act_below.__doc__))
    return rules


SQUEEZE_RULES = _rules()

sink_squeezes = rules_pass(SQUEEZE_RULES, shapes=True)
