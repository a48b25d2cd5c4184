"""Shape rules of linear-algebra ops: Det."""

from __future__ import annotations

from . import shape_rule
from .common import check_types


@shape_rule("Det")
def det(ctx):
    """X (*, M, M) -> Y (*): X's dtype."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ctx.error(f"X must be (*, M, M), square in its last two axes; got shape {shape}")
    return [(shape[:-2], ctx.dtype(0))]
