"""Data layouts of kernel types, and the LayoutTransform step between them.

A value always has a *logical* shape, ONNX's (N, C, D1, ..., Dn); its layout
says how the elements sit in memory (its *physical* shape):

    NCHW     (N, C, D1, ..., Dn)             ONNX's own order, any rank (the default)
    NHWC     (N, D1, ..., Dn, C)             channels last, rank >= 3
    NCHW<c>c (N, ceil(C/c), D1, ..., Dn, c)  channels blocked by c (NCHW8c, NCHW16c):
                                             MLAS / oneDNN's blocked layout; the
                                             padding channels of the last block are 0

Shape rules and OpContext always see logical shapes; a kernel gets arrays in
its declared layouts (ops/registry.py). The kernel-type assignment pass
(passes/assign.py) inserts LayoutTransform nodes (our domain) where a value's
producer and consumer disagree (Paddle-Lite's type_layout_cast_pass);
transform() below is their copy, registered as a CPU kernel in ops/cpu/layouts.py.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .cpu import compiled
from .registry import DEFAULT_LAYOUT

TRANSFORM_OP = "LayoutTransform"
_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def block_of(layout: str) -> int:
    """The channel block c of "NCHW<c>c" (0 for an unblocked layout).

    Raises:
        ValueError: an unknown layout name.
    """
    if layout in (DEFAULT_LAYOUT, "NHWC"):
        return 0
    m = _BLOCKED.match(layout)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"unknown layout {layout!r}; expected NCHW, NHWC or NCHW<c>c (e.g. NCHW8c)")
    return int(m.group(1))


def physical_shape(shape: tuple, layout: str) -> tuple:
    """The array shape of a value of logical `shape` stored in `layout`."""
    shape = tuple(shape)
    if layout == DEFAULT_LAYOUT:
        return shape
    if len(shape) < 3:
        raise ValueError(f"layout {layout} needs rank >= 3, got shape {shape}")
    if layout == "NHWC":
        return (shape[0],) + shape[2:] + (shape[1],)
    c = block_of(layout)
    return (shape[0], math.ceil(shape[1] / c)) + shape[2:] + (c,)


def logical_view(array: np.ndarray, layout: str):
    """A view of a physical array in logical axis order: (N, C, D...) for NCHW and NHWC;
    (N, C/c, c, D...) for a blocked layout (the block axis stays apart to remain a view)."""
    if layout == DEFAULT_LAYOUT:
        return array
    r = array.ndim
    if layout == "NHWC":
        return array.transpose((0, r - 1) + tuple(range(1, r - 1)))
    return array.transpose((0, 1, r - 1) + tuple(range(2, r - 1)))


def transform(x: np.ndarray, src: str, dst: str, out: np.ndarray) -> None:
    """Copy x (physical, in `src`) into out (physical, in `dst`): one pass, no temporaries
    except when both sides are blocked with different blocks (through NCHW)."""
    if src == dst:
        np.copyto(out, x)
        return
    bs, bd = block_of(src), block_of(dst)
    if _compiled_reorder(x, src, dst, out, bs, bd):
        return
    if bs and bd:  # NCHW<a>c -> NCHW<b>c
        n, cb = x.shape[0], x.shape[1]
        tmp = np.empty((n, cb * bs) + x.shape[2:-1], x.dtype)
        transform(x, src, DEFAULT_LAYOUT, tmp)
        transform(tmp, DEFAULT_LAYOUT, dst, out)
        return
    if bd:  # unblocked -> blocked, a block at a time; zeros after C in the last block
        xl, ol = logical_view(x, src), logical_view(out, dst)  # ol: (N, C/c, c, D...)
        c = xl.shape[1]
        for k in range(ol.shape[1]):
            c0, c1 = k * bd, min(c, k * bd + bd)
            np.copyto(ol[:, k, :c1 - c0], xl[:, c0:c1])
            if c1 - c0 < bd:
                ol[:, k, c1 - c0:] = 0
        return
    if bs:  # blocked -> unblocked, a block at a time
        xl, ol = logical_view(x, src), logical_view(out, dst)
        c = ol.shape[1]
        for k in range(xl.shape[1]):
            c0, c1 = k * bs, min(c, k * bs + bs)
            np.copyto(ol[:, c0:c1], xl[:, k, :c1 - c0])
        return
    np.copyto(logical_view(out, dst), logical_view(x, src))


def _reorder_call(x, src, dst, out, bs, bd):
    """(compiled function, its arguments) of an NCHW <-> NCHW<c>c copy of C-contiguous float32
    arrays through ops/cpu/compiled/reorder.py (an 8 x 8 register transpose per tile for c = 8:
    about 5x numpy's strided copy), or None where it does not apply (the numpy path then runs)."""
    if not ((src == DEFAULT_LAYOUT and bd) or (dst == DEFAULT_LAYOUT and bs)):
        return None
    if x.dtype != np.float32 or out.dtype != np.float32 or not (x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    if not compiled.active():
        return None
    if bd:
        n, c = x.shape[0], x.shape[1]
        return compiled.reorder.to_blocked, (x.reshape(-1), out.reshape(-1), n, c, x.size // max(1, n * c), bd)
    n, c = out.shape[0], out.shape[1]
    return compiled.reorder.from_blocked, (x.reshape(-1), out.reshape(-1), n, c, out.size // max(1, n * c), bs)


def _compiled_reorder(x, src, dst, out, bs, bd) -> bool:
    """Run _reorder_call's copy; False where it does not apply."""
    call = _reorder_call(x, src, dst, out, bs, bd)
    if call is None:
        return False
    call[0](*call[1])
    return True

