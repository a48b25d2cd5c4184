"""MatMul + Add -> Gemm (Paddle's fc_fuse_pass, onnxruntime's MatMulAddFusion).

    MatMul(A, W) + c  =  Gemm(A, W, c)      (alpha = beta = 1, no transposes)

Only when Gemm means the same thing: A is 2-D (M, K) (its rank is known from
the declared types or the shape analysis), W is a 2-D weight (K, N), and c is
a weight that broadcasts as a bias over the last dimension: shape (N,), (1, N),
(1,), (1, 1) or (). Then MatMul's (M, N) result plus c is Gemm's Y, computed
by the same BLAS product and the same addition. A batched MatMul (A of rank 3,
as in a transformer's (N, T, C) @ W) is left alone: Gemm is 2-D only.
"""

from __future__ import annotations

from ..ir import Node
from .base import rules_pass
from .pattern import Const, Match, Pat, Rewriter, Rule, Var


def _bias_shape_fits(m: Match) -> bool:
    w, c = m.weight("W"), m.weight("c")
    n = w.shape[1]
    return (m.graph.opset.get("", 0) >= 7 and c.dtype == w.dtype and m.rank(m.value("a")) == 2
            and tuple(c.shape) in ((n,), (1, n), (1,), (1, 1), ()))


def to_gemm(m: Match, rw: Rewriter):
    """MatMul(A, W) + c = Gemm(A, W, c; alpha=1, beta=1)"""
    mm = m.node("mm")
    return [Node("Gemm", [m.value("a"), m.value("W"), m.value("c")], [m.root.outputs[0]], {}, "", mm.name)]


FC_RULES = [Rule("MatMul+Add -> Gemm",
                 Pat("Add", (Pat("MatMul", (Var("a"), Const("W", lambda w: w.ndim == 2)), name="mm"), Const("c")),
                     commutative=True),
                 to_gemm, where=_bias_shape_fits, doc=to_gemm.__doc__)]

fuse_matmul_add = rules_pass(FC_RULES, shapes=True)
