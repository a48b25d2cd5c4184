"""LayoutTransform (domain "pooled_predictor"): the copy between two layouts of a value.

Inserted by the kernel-type assignment pass (passes/assign.py) where a value's
producer and consumer disagree; the layouts and the copy itself are
ops/layouts.py (block_of, transform), its shape rule ops/shapes/layouts.py.
"""

from __future__ import annotations

from ..layouts import TRANSFORM_OP, _reorder_call, block_of, transform
from ..registry import DEFAULT_LAYOUT, kernel
from ..shapes.fused import DOMAIN
from . import compiled


def _layouts_problem(attrs, version):
    for key in ("src", "dst"):
        try:
            block_of(attrs.get(key, ""))
        except ValueError as exc:
            return str(exc)
    return None


@kernel(TRANSFORM_OP, since=1, domain=DOMAIN, check=_layouts_problem)
def layout_transform(x, *, out, src=DEFAULT_LAYOUT, dst=DEFAULT_LAYOUT):
    """Y = X stored in layout `dst` (X stored in `src`); logically the identity.

    Inserted by passes/assign.py, never written in a model. Shapes: logical
    (N, C, D1, ..., Dn) both sides; arrays physical per physical_shape().
    """
    transform(x, src, dst, out)


def _prepare_transform(x, *, out, src=DEFAULT_LAYOUT, dst=DEFAULT_LAYOUT):
    """layout_transform as one call for these arrays (engine/layout.py: _prepared): the compiled reorder
    bound, or None (transform() then runs per call)."""
    call = _reorder_call(x, src, dst, out, block_of(src), block_of(dst))
    if call is None:
        return None
    return compiled.bound(call[0], *call[1])


layout_transform.prepare_run = _prepare_transform
