"""What the convolution kernels share below them (conv.py, conv_indirect.py, conv_nchwc.py,
matmul.py): weights transformed once per weight array for every Net, and the runner of
conv.py's zero-padding fills."""

from __future__ import annotations

import weakref

import numpy as np

_SHARED_WEIGHTS: dict = {}  # (id(W), tag) -> (weakref to W, its transform): one per Program weight


def shared_weights(w: np.ndarray, tag, make):
    """make(w), computed once per weight array and `tag` and shared read-only by every Net
    (each thread's Net builds its own kernels over the same weights: a transformed or
    packed copy per Net would multiply the weights' memory by the number of threads)."""
    key = (id(w), tag)
    hit = _SHARED_WEIGHTS.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    value = make(w)
    try:
        ref = weakref.ref(w, lambda _, key=key: _SHARED_WEIGHTS.pop(key, None))
    except TypeError:  # not weak-referenceable: not cached
        return value
    _SHARED_WEIGHTS[key] = (ref, value)
    return value


def _run_fills(pairs):
    """Run _Fill.views() pairs (conv.py): copy src into dst, or zero dst where src is None."""
    for dst, src in pairs:
        if src is None:
            dst.fill(0)
        else:
            np.copyto(dst, src)
