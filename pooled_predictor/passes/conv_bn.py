"""Per-output-channel affine maps after a Conv, folded into its weights and bias.

With W (M, C/group, k...) and b (M,) (b = 0 when Conv has no bias), and every
constant below per output channel m (or one scalar for all channels):

    BatchNormalization(Conv(x, W, b), g, beta, m, v, eps):
        a  = g / sqrt(v + eps)
        W' = W * a              (row m of W scaled by a[m])
        b' = (b - m) * a + beta
    Conv(x, W, b) + c    ->  Conv(x, W, b + c)
    Conv(x, W, b) * s    ->  Conv(x, W * s, b * s)
    ConvTranspose(x, W, b) + c  ->  ConvTranspose(x, W, b + c)   (W (C, M/group, k...))

(Conv is linear in W and b per output channel: Y[:, m] = W[m] (*) x + b[m].)
The new weights are computed in float64 and stored in W's dtype.

A constant counts as per-output-channel when, right-aligned against Y's rank
(N, M, D1, ...), it is 1 everywhere except along M, where it is M or 1: shapes
(1, M, 1, 1), (M, 1, 1), (1, 1, 1, 1), (1,), (). Anything else (a per-width
constant, a batch-shaped one) would broadcast differently and is not folded.
None of these fire when the Conv's output is also read by another node or is
a graph output (the matcher only matches when the Conv's output stays inside),
nor when W (or b) is not a weight, nor for a training-mode BatchNormalization.
"""

from __future__ import annotations

import numpy as np

from ..ir import Node
from .base import rules_pass
from .pattern import Const, Match, Opt, Pat, Replacement, Rewriter, Rule, Var

CONV = Pat("Conv", (Var("x"), Const("W", lambda w: w.ndim >= 3 and w.dtype.kind == "f"), Opt(Const("B"))),
           name="conv")


def per_channel(c: np.ndarray, w: np.ndarray) -> bool:
    """c broadcasts against Conv's output (rank w.ndim) as one value per output channel (or one scalar)."""
    r, m = w.ndim, w.shape[0]
    if c.ndim > r or c.dtype != w.dtype:
        return False
    padded = (1,) * (r - c.ndim) + tuple(c.shape)
    return padded[0] == 1 and padded[1] in (1, m) and all(d == 1 for d in padded[2:])


def _channel_vector(c: np.ndarray, m: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(c, np.float64).reshape(-1), (m,))


def _new_conv(m: Match, rw: Rewriter, w: np.ndarray, b: np.ndarray) -> list[Node]:
    conv, root = m.node("conv"), m.root
    dtype = m.weight("W").dtype
    wn = rw.weight(f"{conv.name}.W_folded", w if w.dtype == dtype else w.astype(dtype))
    bn = rw.weight(f"{conv.name}.B_folded", b.astype(dtype))
    return [Node("Conv", [m.value("x"), wn, bn], [root.outputs[0]], dict(conv.attrs), "", conv.name)]


def _bias(m: Match) -> np.ndarray:
    b = m.weight("B")
    mm = m.weight("W").shape[0]
    return np.zeros(mm) if b is None else np.asarray(b, np.float64)


def _unread_extra_outputs(m: Match) -> bool:
    return all(not o or (o not in m.index.outputs and not m.index.users(o)) for o in m.root.outputs[1:])


# ---- Conv + BatchNormalization ----------------------------------------------------------------
def _inference_bn(node: Node) -> bool:
    return not int(node.attrs.get("training_mode", 0)) and int(node.attrs.get("spatial", 1)) == 1


def _bn_fits(m: Match) -> bool:
    mm = m.weight("W").shape[0]
    return (all(m.weight(k).shape == (mm,) and m.weight(k).dtype.kind == "f"
                for k in ("scale", "beta", "mean", "var")) and _unread_extra_outputs(m))


def fold_bn(m: Match, rw: Rewriter):
    """a = g / sqrt(v + eps);  W' = W * a (per output channel);  b' = (b - mean) * a + beta"""
    eps = float(m.root.attrs.get("epsilon", 1e-5))
    w = m.weight("W")
    a = np.asarray(m.weight("scale"), np.float64) / np.sqrt(np.asarray(m.weight("var"), np.float64) + eps)
    # W * a in float64, rounded once to W's dtype, without a float64 copy of W (numpy buffers the casts)
    w2 = np.multiply(w, a.reshape((-1,) + (1,) * (w.ndim - 1)), dtype=np.float64, casting="same_kind",
                     out=np.empty(w.shape, w.dtype))
    b2 = (_bias(m) - np.asarray(m.weight("mean"), np.float64)) * a + np.asarray(m.weight("beta"), np.float64)
    return Replacement(_new_conv(m, rw, w2, b2))


CONV_BN_RULES = [Rule(
    "BatchNormalization folded into Conv",
    Pat("BatchNormalization", (CONV, Const("scale"), Const("beta"), Const("mean"), Const("var")),
        name="bn", where=_inference_bn),
    fold_bn, where=_bn_fits, doc=fold_bn.__doc__)]


# ---- Conv + Add(constant), Conv * constant --------------------------------------------------------
def fold_add(m: Match, rw: Rewriter):
    """Conv(x, W, b) + c = Conv(x, W, b + c)  (c per output channel)"""
    mm = m.weight("W").shape[0]
    return Replacement(_new_conv(m, rw, np.asarray(m.weight("W"), np.float64),
                                 _bias(m) + _channel_vector(m.weight("c"), mm)))


def fold_mul(m: Match, rw: Rewriter):
    """Conv(x, W, b) * s = Conv(x, W * s, b * s)  (s per output channel)"""
    w = np.asarray(m.weight("W"), np.float64)
    s = _channel_vector(m.weight("c"), w.shape[0])
    return Replacement(_new_conv(m, rw, w * s.reshape((-1,) + (1,) * (w.ndim - 1)), _bias(m) * s))


def _fits(m: Match) -> bool:
    return per_channel(m.weight("c"), m.weight("W"))


CONV_TRANSPOSE = Pat("ConvTranspose", (Var("x"), Const("W", lambda w: w.ndim >= 3 and w.dtype.kind == "f"),
                                        Opt(Const("B"))), name="conv")


def _transpose_channels(m: Match) -> int:
    """ConvTranspose's output channels: W is (C, M / group, k...)."""
    return m.weight("W").shape[1] * int(m.node("conv").attrs.get("group", 1))


def fold_add_transpose(m: Match, rw: Rewriter):
    """ConvTranspose(x, W, b) + c = ConvTranspose(x, W, b + c)  (c per output channel)"""
    conv, mm = m.node("conv"), _transpose_channels(m)
    b = m.weight("B")
    b = (np.zeros(mm) if b is None else np.asarray(b, np.float64)) + _channel_vector(m.weight("c"), mm)
    bn = rw.weight(f"{conv.name}.B_folded", b.astype(m.weight("W").dtype))
    return Replacement([Node("ConvTranspose", [m.value("x"), conv.inputs[1], bn], [m.root.outputs[0]],
                             dict(conv.attrs), "", conv.name)])


def _fits_transpose(m: Match) -> bool:
    c, w = m.weight("c"), m.weight("W")
    return per_channel(c, np.empty((_transpose_channels(m),) + w.shape[1:], w.dtype))


CONV_ADD_RULES = [Rule("Add folded into Conv bias", Pat("Add", (CONV, Const("c")), commutative=True),
                       fold_add, where=_fits, doc=fold_add.__doc__),
                  Rule("Add folded into ConvTranspose bias", Pat("Add", (CONV_TRANSPOSE, Const("c")), commutative=True),
                       fold_add_transpose, where=_fits_transpose, doc=fold_add_transpose.__doc__)]
CONV_MUL_RULES = [Rule("Mul folded into Conv weights", Pat("Mul", (CONV, Const("c")), commutative=True),
                       fold_mul, where=_fits, doc=fold_mul.__doc__)]

fold_conv_bn = rules_pass(CONV_BN_RULES)
fold_conv_add = rules_pass(CONV_ADD_RULES)
fold_conv_mul = rules_pass(CONV_MUL_RULES)
