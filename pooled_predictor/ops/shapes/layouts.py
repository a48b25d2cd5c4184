"""Shape rule of LayoutTransform (domain "pooled_predictor"): logically the identity (ops/layouts.py)."""

from __future__ import annotations

from . import shape_rule
from .fused import DOMAIN


@shape_rule("LayoutTransform", domain=DOMAIN)
def layout_transform(ctx):
    """Y has X's logical shape and dtype; only the storage order changes."""
    return [(ctx.shape(0), ctx.dtype(0))]
