"""MatMul + Add -> Gemm or MatMulAdd (Paddle's fc_fuse_pass, onnxruntime's MatMulAddFusion).

    MatMul(A, W) + c  =  Gemm(A, W, c)          A 2-D (M, K) (alpha = beta = 1, no transposes)
    MatMul(A, W) + c  =  MatMulAdd(A, W, c)     A of rank >= 3 (..., M, K) (our domain)
    MatMul(A, W) + c  =  MatMulAdd(A, W, c)     A of unknown rank, c of rank <= 1

Only when the fused op means the same thing: A's rank is known (from the
declared types or the shape analysis), W is a 2-D weight (K, N), and c is a
weight that broadcasts as a bias over the last dimension: shape (N,), (1, N),
(1,), (1, 1) or (). Then MatMul's result plus c is Gemm's Y, computed by the
same BLAS product and the same addition. A batched MatMul (A of rank >= 3, as
a transformer's or a CTC head's (N, T, C) @ W) becomes MatMulAdd, Paddle's fc
with in_num_col_dims = rank - 1: MatMul then + c in one kernel (on its
compiled path c is added to each output block in registers after its sum,
the same rounding as the Add: ops/cpu/compiled/matmul.py).

A's rank is often unknown before the input shapes are: exporters compute
Reshape targets from Shape nodes (a transformer's heads split and merged), so
nothing after the first such Reshape has a rank until a Net is shaped. There
MatMulAdd is still MatMul + Add when c has rank <= 1 ((N,), (1,), ()): the sum
then has MatMul's shape whatever A's rank (>= 1), so the fused node means the
same for every A the MatMul accepts. A c of shape (1, N) or (1, 1) would add a
dimension to a 1-D A's product, so it waits for a known rank.
"""

from __future__ import annotations

from ..ir import Node
from ..ops.shapes.fused import DOMAIN, DOMAIN_VERSION
from .base import rules_pass
from .pattern import Const, Match, Pat, Rewriter, Rule, Var


def _bias_fits(m: Match) -> bool:
    w, c = m.weight("W"), m.weight("c")
    n = w.shape[1]
    return (m.graph.opset.get("", 0) >= 7 and c.dtype == w.dtype
            and tuple(c.shape) in ((n,), (1, n), (1,), (1, 1), ()))


def _bias_shape_fits(m: Match) -> bool:
    return _bias_fits(m) and m.rank(m.value("a")) == 2


def _batched_bias_fits(m: Match) -> bool:
    rank = m.rank(m.value("a"))
    return _bias_fits(m) and rank is not None and rank >= 3


def _unknown_rank_bias_fits(m: Match) -> bool:
    return _bias_fits(m) and m.rank(m.value("a")) is None and m.weight("c").ndim <= 1


def to_gemm(m: Match, rw: Rewriter):
    """MatMul(A, W) + c = Gemm(A, W, c; alpha=1, beta=1)"""
    mm = m.node("mm")
    return [Node("Gemm", [m.value("a"), m.value("W"), m.value("c")], [m.root.outputs[0]], {}, "", mm.name)]


def to_matmul_add(m: Match, rw: Rewriter):
    """MatMul(A, W) + c = MatMulAdd(A, W, c), A (..., M, K) of rank >= 3"""
    mm = m.node("mm")
    rw.use_domain(DOMAIN, DOMAIN_VERSION)
    return [Node("MatMulAdd", [m.value("a"), m.value("W"), m.value("c")], [m.root.outputs[0]], {}, DOMAIN,
                 mm.name)]


def _pattern():
    return Pat("Add", (Pat("MatMul", (Var("a"), Const("W", lambda w: w.ndim == 2)), name="mm"), Const("c")),
               commutative=True)


FC_RULES = [Rule("MatMul+Add -> Gemm", _pattern(), to_gemm, where=_bias_shape_fits, doc=to_gemm.__doc__),
            Rule("MatMul+Add -> MatMulAdd", _pattern(), to_matmul_add, where=_batched_bias_fits,
                 doc=to_matmul_add.__doc__),
            Rule("MatMul+Add -> MatMulAdd (rank unknown)", _pattern(), to_matmul_add,
                 where=_unknown_rank_bias_fits, doc="MatMul(A, W) + c = MatMulAdd(A, W, c), c of rank <= 1, "
                                                    "A of any rank >= 1")]

fuse_matmul_add = rules_pass(FC_RULES, shapes=True)
