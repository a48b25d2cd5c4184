"""Conv / Gemm followed by an activation -> one FusedConv / FusedGemm node.

    act(Conv(x, W, b))        ->  FusedConv(x, W, b; activation=act, activation_params=p)
    act(Gemm(a, B, c; ...))   ->  FusedGemm(a, B, c; ...; activation=act, activation_params=p)

The fused kernel (ops/cpu/fused.py) runs the Conv/Gemm kernel into Y and
applies the activation to Y in place, with the same numpy operations as the
stand-alone activation kernel: the result is the same, one blob and one node
fewer (except Tanh after a Gemm on the compiled path, below). Activations, with activation_params:

    Relu                      []
    Sigmoid                   []
    HardSwish (ONNX or ours)  []
    LeakyRelu                 [alpha]          (default 0.01)
    HardSigmoid               [alpha, beta]    (defaults 0.2, 0.5)
    Clip                      [min, max]       Clip-6: the attributes (defaults -+3.4028234663852886e38);
                                               Clip-11+: the inputs, which must be weights; an absent one
                                               is -inf / +inf (the kernel's absent bound). ReLU6 is [0, 6].
    Tanh (Gemm only)          []               on FusedGemm's compiled path: tanh32, within 2.9e-7 of
                                               np.tanh's (ops/cpu/fused.py), the rest as the Tanh node
    Gelu (Conv only)          []               our domain's Gelu (passes/gelu.py's, approximate="none"):
                                               the same operations as its kernel, so the same bits; the
                                               blocked GEMMs apply it to each block of Y while in cache

Does not fire when the Conv/Gemm output is also read elsewhere or is a graph
output (the activation's input must die there), when Clip's bounds are not
weights or not finite, or when a Gemm is not a float Gemm.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Node
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from .base import rules_pass
from .pattern import Const, Match, Opt, Pat, Rewriter, Rule, Var

_FLT_MAX = 3.4028234663852886e38  # Clip-6's attribute defaults


def _scalar(m: Match, name: str) -> float | None:
    a = m.weight(name)
    if a is None or a.size != 1:
        return None
    return float(np.asarray(a).reshape(-1)[0])


def _clip_params(m: Match) -> list[float] | None:
    act = m.node("act")
    if m.graph.opset_of(act) < 11:
        lo = float(act.attrs.get("min", -_FLT_MAX))
        hi = float(act.attrs.get("max", _FLT_MAX))
    else:
        lo = -math.inf if m.value("min") is None else _scalar(m, "min")
        hi = math.inf if m.value("max") is None else _scalar(m, "max")
        if lo is None or hi is None:
            return None
        if (m.value("min") is not None and not math.isfinite(lo)) or \
                (m.value("max") is not None and not math.isfinite(hi)):
            return None  # an explicit infinite bound: not the absent bound's finfo extreme
    if math.isnan(lo) or math.isnan(hi):
        return None
    return [lo, hi]


# op -> (activation inputs after the first, activation_params(match) -> list | None)
ACTIVATIONS = {
    "Relu": ((), lambda m: []),
    "Sigmoid": ((), lambda m: []),
    "HardSwish": ((), lambda m: []),
    "LeakyRelu": ((), lambda m: [float(m.node("act").attrs.get("alpha", 0.01))]),
    "HardSigmoid": ((), lambda m: [float(m.node("act").attrs.get("alpha", 0.2)),
                                   float(m.node("act").attrs.get("beta", 0.5))]),
    "Clip": ((Opt(Const("min")), Opt(Const("max"))), _clip_params),
    "Tanh": ((), lambda m: []),
}
GEMM_ONLY = {"Tanh"}  # FusedGemm computes it in its compiled call (ops/cpu/fused.py); Conv kernels do not


def _fuse(kind: str):
    def replace(m: Match, rw: Rewriter):
        """act(Op(inputs; attrs)) = Fused<Op>(inputs; attrs, activation=act, activation_params)"""
        act = m.node("act")
        params = ACTIVATIONS[act.op_type][1](m)
        if params is None:
            return None
        base = m.node("base")
        attrs = dict(base.attrs, activation=act.op_type, activation_params=[float(p) for p in params])
        rw.use_domain(DOMAIN, DOMAIN_VERSION)
        return [Node(f"Fused{kind}", list(base.inputs), [act.outputs[0]], attrs, DOMAIN, base.name)]

    return replace


def _float_gemm(m: Match) -> bool:
    dt = m.shapes.dtypes.get(m.node("base").outputs[0]) if m.shapes is not None else None
    if dt is None:
        weights = [m.graph.weights[i] for i in m.node("base").inputs if i in m.graph.weights]
        dt = weights[0].dtype if weights else None
    return dt is not None and np.dtype(dt).kind == "f"


def _rules(kind: str) -> list[Rule]:
    if kind == "Conv":
        base = Pat("Conv", (Var("x"), Var("W"), Opt(Var("B"))), name="base")
        where = None
    else:
        base = Pat("Gemm", (Var("a"), Var("b"), Opt(Var("c"))), name="base")
        where = _float_gemm
    rules = []
    for op, (extra, _) in ACTIVATIONS.items():
        if kind == "Conv" and op in GEMM_ONLY:
            continue
        domains = ("", DOMAIN) if op == "HardSwish" else ("",)
        for d in domains:
            rules.append(Rule(f"{kind}+{op} fused", Pat(op, (base,) + extra, name="act", domain=d),
                              _fuse(kind), where=where, doc=f"{op}({kind}(...)) = Fused{kind}(...; activation={op})"))
    return rules


def _exporters_gelu(m: Match) -> bool:
    """Our domain's Gelu in its erf form (approximate absent or "none"): FusedConv's "Gelu"."""
    a = m.node("act").attrs.get("approximate", "none")
    return (a.decode() if isinstance(a, bytes) else a) == "none"


def _fuse_gelu(m: Match, rw: Rewriter):
    """Gelu(Conv(x, W, b)) = FusedConv(x, W, b; activation=Gelu), Gelu being our domain's"""
    base = m.node("base")
    attrs = dict(base.attrs, activation="Gelu", activation_params=[])
    rw.use_domain(DOMAIN, DOMAIN_VERSION)
    return [Node("FusedConv", list(base.inputs), [m.node("act").outputs[0]], attrs, DOMAIN, base.name)]


# Conv + our domain's Gelu (ONNX Gelu-20 computes erf(X * (1/sqrt 2)), other bits: not fused)
GELU_RULE = Rule("Conv+Gelu fused", Pat("Gelu", (Pat("Conv", (Var("x"), Var("W"), Opt(Var("B"))), name="base"),),
                                        name="act", domain=DOMAIN),
                 _fuse_gelu, where=_exporters_gelu, doc=_fuse_gelu.__doc__)

CONV_ACTIVATION_RULES = _rules("Conv") + [GELU_RULE]
GEMM_ACTIVATION_RULES = _rules("Gemm")

fuse_conv_activation = rules_pass(CONV_ACTIVATION_RULES)
fuse_gemm_activation = rules_pass(GEMM_ACTIVATION_RULES, shapes=True)
