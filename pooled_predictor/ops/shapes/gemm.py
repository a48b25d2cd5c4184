"""Shape rule of Gemm: Y (M, N) = alpha * A' (M, K) @ B' (K, N) + beta * C."""

from __future__ import annotations

from . import shape_rule
from .common import broadcast_to, check_types


def gemm_dims(ctx) -> tuple[int, int, int]:
    """(M, K, N) of a Gemm node, after transA / transB.

    ONNX Gemm-7+: A is (M, K), or (K, M) with transA; B is (K, N), or (N, K)
    with transB; both must be 2-D.
    """
    a, b = tuple(ctx.shape(0)), tuple(ctx.shape(1))
    if len(a) != 2 or len(b) != 2:
        raise ctx.error(f"A and B must be 2-D matrices, got shapes {a} and {b}")
    m, k = a[::-1] if int(ctx.attr("transA", 0)) else a
    k2, n = b[::-1] if int(ctx.attr("transB", 0)) else b
    if k != k2:
        raise ctx.error(f"inner dimensions differ: A' is ({m}, {k}) and B' is ({k2}, {n}) "
                        f"(transA={int(ctx.attr('transA', 0))}, transB={int(ctx.attr('transB', 0))})")
    return m, k, n


@shape_rule("Gemm")
def gemm(ctx):
    """Y is (M, N); C (optional) must broadcast unidirectionally to (M, N)."""
    check_types(ctx)
    m, _, n = gemm_dims(ctx)
    if ctx.has_input(2):
        broadcast_to(ctx, ctx.shape(2), (m, n), "C")
    return [((m, n), ctx.dtype(0))]
