"""What the convolution kernels share below them (conv.py, conv_indirect.py, conv_nchwc.py,
matmul.py): weights transformed once per weight array for every Net, each on a cache line, and the
runner of conv.py's zero-padding fills.

Why a cache line: the kernels stream packed weights with full-width vector loads (64 bytes a zmm load
at 16 lanes, 32 a ymm load at 8). numpy aligns arrays to 16 bytes only (glibc's large chunks start
16 bytes into a page), so 106 of the 273 MiB of arrays ResNet-50's prepared calls read (its packed
weights and Winograd's U) started 16, 32 or 48 bytes past a 64-byte line (session 20), and every zmm
load of those touched two lines. Intel's cores take such a split load at twice the cost of one within a line (Intel
64 and IA-32 Architectures Optimization Reference Manual, on data alignment for AVX-512); MLAS and
oneDNN align their packed buffers to 64 bytes for the same reason. Our arenas were on lines already
(engine/device.py: ALIGNMENT, this module's LINE; both allocate with line_bytes)."""

from __future__ import annotations

import weakref

import numpy as np

_SHARED_WEIGHTS: dict = {}  # (id(W), tag) -> (weakref to W, its transform): one per Program weight
LINE = 64
"""Bytes of a cache line (x86-64): where the shared weights start."""


def line_bytes(nbytes: int) -> np.ndarray:
    """An uninitialized uint8 buffer of `nbytes` bytes starting on a LINE-byte boundary (the CPU's arenas,
    engine/device.py, and on_line's copies).

    Raises:
        MemoryError: the system cannot give that many bytes.
    """
    raw = np.empty(nbytes + LINE, np.uint8)
    start = (-raw.ctypes.data) % LINE
    return raw[start:start + nbytes]


def on_line(a: np.ndarray) -> np.ndarray:
    """`a` where it starts on a LINE-byte boundary (or is under a line long), else a copy that does: the same
    shape, dtype, values and writeable flag, C-contiguous.

    Args:
        a: any numpy array (object arrays are returned as they are).
    """
    if a.dtype == object or a.nbytes < LINE or a.ctypes.data % LINE == 0:
        return a
    out = line_bytes(a.nbytes).view(a.dtype).reshape(a.shape)
    np.copyto(out, a)
    if not a.flags.writeable:
        out.flags.writeable = False
    return out


def _on_lines(value):
    """on_line() over a transform's result: an array, or the arrays in tuples and lists of them."""
    if isinstance(value, np.ndarray):
        return on_line(value)
    if type(value) in (tuple, list):
        return type(value)(_on_lines(v) for v in value)
    return value


def shared_weights(w: np.ndarray, tag, make):
    """make(w), computed once per weight array and `tag` and shared read-only by every Net
    (each thread's Net builds its own kernels over the same weights: a transformed or
    packed copy per Net would multiply the weights' memory by the number of threads). Its numpy
    arrays (the value, or those of a tuple or list) start on a cache line (module docstring)."""
    key = (id(w), tag)
    hit = _SHARED_WEIGHTS.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    value = _on_lines(make(w))
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
