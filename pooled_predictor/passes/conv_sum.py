"""Conv + Add of another tensor + activation -> one FusedConv with a sum input (a residual connection).

    act(Conv(x, W, b) + z)  ->  FusedConv(x, W, b, z; activation=act, activation_params=p)
    Conv(x, W, b) + z       ->  FusedConv(x, W, b, z; activation=Identity)   (no activation follows)

onnxruntime's FusedConv takes the same fourth input Z ("sum"), as ResNet's
bottlenecks need it: the last 1x1 conv of a block, the shortcut added, Relu.
The fused kernel (ops/cpu/fused.py) computes Y = act((Conv(x, W) + b) + z) in
the unfused graph's order and rounding -- the conv with its bias, then + z,
then the activation -- so the result is the same bits, two nodes and two
blobs fewer; the compiled 1x1 path adds z to each output block in registers
(compiled/gemm.py's gemm2d_sum) and applies the activation while the block
is in cache, so Y is written once instead of three times.

Fires when the Add's other input z has exactly the conv output's shape
(shape inference, with symbolic dims probed: a z that broadcasts does not
fuse) and dtype, the Conv has a bias input, and the conv output and the Add
output are read only by the Add and the activation (and are no graph outputs).
Activations: those of fuse_activation.ACTIVATIONS, with their parameters; a
sum that one of them reads alone is fused with it, never without it.
"""

from __future__ import annotations

from ..ir import Node
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from .base import rules_pass
from .fuse_activation import ACTIVATIONS
from .pattern import Match, Pat, Rewriter, Rule, Var


def _fuse_sum(m: Match, rw: Rewriter):
    """act(Conv(x, W, b) + z) = FusedConv(x, W, b, z; activation=act)"""
    act, conv = m.node("act"), m.node("conv")
    params = ACTIVATIONS[act.op_type][1](m)
    if params is None:
        return None
    attrs = dict(conv.attrs, activation=act.op_type, activation_params=[float(p) for p in params])
    rw.use_domain(DOMAIN, DOMAIN_VERSION)
    return [Node("FusedConv", [m.value("x"), m.value("W"), m.value("B"), m.value("z")], [act.outputs[0]],
                 attrs, DOMAIN, conv.name)]


def _same_shape(m: Match) -> bool:
    """z has the conv output's shape and dtype (so Y's shape is the conv's: no broadcast)."""
    if m.shapes is None:
        return False
    y, z = m.node("conv").outputs[0], m.value("z")
    sy, sz = m.shapes.shapes.get(y), m.shapes.shapes.get(z)
    dy, dz = m.shapes.dtypes.get(y), m.shapes.dtypes.get(z)
    return sy is not None and sy == sz and dy is not None and dy == dz and dy.kind == "f"


def _fuse_bare_sum(m: Match, rw: Rewriter):
    """Conv(x, W, b) + z = FusedConv(x, W, b, z; activation=Identity)"""
    conv = m.node("conv")
    attrs = dict(conv.attrs, activation="Identity", activation_params=[])
    rw.use_domain(DOMAIN, DOMAIN_VERSION)
    return [Node("FusedConv", [m.value("x"), m.value("W"), m.value("B"), m.value("z")], [m.root.outputs[0]],
                 attrs, DOMAIN, conv.name)]


def _bare(m: Match) -> bool:
    """A same-shape sum that no activation follows (else the rule with the activation takes it)."""
    if not _same_shape(m):
        return False
    s = m.root.outputs[0]
    readers = [n for n in m.graph.nodes if s in n.inputs]
    return not (len(readers) == 1 and readers[0].op_type in ACTIVATIONS and s not in m.graph.output_names)


def _rules() -> list[Rule]:
    conv = Pat("Conv", (Var("x"), Var("W"), Var("B")), name="conv")
    add = Pat("Add", (conv, Var("z")), name="add", commutative=True)
    rules = [Rule("Conv+Add fused", add, _fuse_bare_sum, where=_bare, doc=_fuse_bare_sum.__doc__)]
    for op, (extra, _) in ACTIVATIONS.items():
        for d in (("", DOMAIN) if op == "HardSwish" else ("",)):
            rules.append(Rule(f"Conv+Add+{op} fused", Pat(op, (add,) + extra, name="act", domain=d), _fuse_sum,
                              where=_same_shape,
                              doc=f"{op}(Conv(x, W, b) + z) = FusedConv(x, W, b, z; activation={op})"))
    return rules


CONV_SUM_RULES = _rules()

fuse_conv_sum = rules_pass(CONV_SUM_RULES, shapes=True)
