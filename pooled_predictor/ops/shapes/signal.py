"""Shape rules of the signal ops: DFT (17, 20), STFT (17), HannWindow, HammingWindow,
BlackmanWindow and MelWeightMatrix (17).

Their output lengths come from scalar inputs (dft_length, axis, frame_step,
frame_length, size, num_mel_bins...): known at reshape when those are weights or
constants, else the Net infers the node's shapes per forward (NotStatic).
`dft_geometry` and `stft_geometry` are shared with the CPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir import elem_dtype
from . import shape_rule
from .common import check_types


def _scalar(ctx, i: int, name: str) -> int:
    v = np.asarray(ctx.value(i))
    if v.size != 1:
        raise ctx.error(f"{name} must be a scalar, got shape {v.shape}")
    return int(v.reshape(()))


@dataclass(frozen=True)
class DftGeometry:
    """One DFT node: the transformed axis, the transform length n, and the output length."""

    axis: int
    n: int
    out_len: int
    inverse: bool
    onesided: bool


def dft_geometry(ctx) -> DftGeometry:
    """Axis (attribute in DFT-17, input 2 in DFT-20), length (dft_length or the axis size;
    2 (m - 1) for a one-sided inverse of m bins) and output length (n, or n // 2 + 1
    for a one-sided forward transform).

    Raises:
        ShapeInferenceError: axis out of [-r, -2] U [0, r-2], last dimension not 1 or 2,
            a one-sided forward DFT of complex input or a one-sided inverse of real input,
            dft_length < 1.
    """
    shape = tuple(ctx.shape(0))
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise ctx.error(f"input shape {shape}: the last dimension must be 1 (real) or 2 (complex)")
    if ctx.version >= 20:
        axis = _scalar(ctx, 2, "axis") if ctx.has_input(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ctx.error(f"axis={axis} must be in [-{rank}, -2] or [0, {rank - 2}] (the last axis holds re/im)")
    axis %= rank
    inverse, onesided = bool(int(ctx.attr("inverse", 0))), bool(int(ctx.attr("onesided", 0)))
    if onesided and not inverse and shape[-1] != 1:
        raise ctx.error("onesided=1 with inverse=0 (RFFT) needs real input (last dimension 1)")
    if onesided and inverse and shape[-1] != 2:
        raise ctx.error("onesided=1 with inverse=1 (IRFFT) needs complex input (last dimension 2)")
    if ctx.has_input(1):
        n = _scalar(ctx, 1, "dft_length")
    else:
        n = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    if n < 1:
        raise ctx.error(f"dft_length={n} must be positive")
    out_len = n // 2 + 1 if onesided and not inverse else n
    return DftGeometry(axis, n, out_len, inverse, onesided)


@shape_rule("DFT")
def dft(ctx):
    """The input's shape with the axis of length out_len and a last dimension of 2
    (1 for a one-sided inverse: a real signal); the input's dtype."""
    check_types(ctx)
    g = dft_geometry(ctx)
    shape = list(ctx.shape(0))
    shape[g.axis] = g.out_len
    shape[-1] = 1 if g.inverse and g.onesided else 2
    return [(tuple(shape), ctx.dtype(0))]


@dataclass(frozen=True)
class StftGeometry:
    frame_step: int
    frame_length: int
    frames: int
    bins: int


def stft_geometry(ctx) -> StftGeometry:
    """frames = 1 + (signal_length - frame_length) // frame_step; bins = frame_length // 2 + 1
    when onesided (default 1), else frame_length.

    Raises:
        ShapeInferenceError: signal not (B, L, 1 or 2), window not 1-D or not of
            frame_length, frame_step < 1, a frame longer than the signal, onesided
            with a complex signal.
    """
    shape = tuple(ctx.shape(0))
    if len(shape) != 3 or shape[2] not in (1, 2):
        raise ctx.error(f"signal shape {shape} must be (batch, length, 1 or 2)")
    step = _scalar(ctx, 1, "frame_step")
    window = tuple(ctx.shape(2)) if ctx.has_input(2) else None
    if window is not None and len(window) != 1:
        raise ctx.error(f"window shape {window} must be 1-D")
    if ctx.has_input(3):
        length = _scalar(ctx, 3, "frame_length")
        if window is not None and window[0] != length:
            raise ctx.error(f"window length {window[0]} differs from frame_length={length}")
    else:
        length = window[0] if window is not None else shape[1]
    if step < 1 or not 1 <= length <= shape[1]:
        raise ctx.error(f"frame_step={step} must be >= 1 and frame_length={length} in [1, {shape[1]}]")
    onesided = bool(int(ctx.attr("onesided", 1)))
    if onesided and shape[2] == 2:
        raise ctx.error("onesided=1 needs a real signal (last dimension 1); set onesided=0 for complex input")
    return StftGeometry(step, length, 1 + (shape[1] - length) // step, length // 2 + 1 if onesided else length)


@shape_rule("STFT")
def stft(ctx):
    """(batch, frames, bins, 2) in the signal's dtype."""
    check_types(ctx)
    g = stft_geometry(ctx)
    return [((ctx.shape(0)[0], g.frames, g.bins, 2), ctx.dtype(0))]


def output_datatype(ctx) -> np.dtype:
    """The output_datatype attribute (a TensorProto elem_type, default 1 = float) as numpy."""
    code = int(ctx.attr("output_datatype", 1))
    dt = elem_dtype(code)
    if dt is None or dt.kind not in "fiu":
        raise ctx.error(f"output_datatype={code} has no numpy dtype here (bfloat16 and others are not supported)")
    return dt


@shape_rule("HannWindow", "HammingWindow", "BlackmanWindow")
def window(ctx):
    """(size,) in output_datatype."""
    check_types(ctx)
    size = _scalar(ctx, 0, "size")
    if size < 0:
        raise ctx.error(f"size={size} must be non-negative")
    return [((size,), output_datatype(ctx))]


@shape_rule("MelWeightMatrix")
def mel_weight_matrix(ctx):
    """(dft_length // 2 + 1, num_mel_bins) in output_datatype."""
    check_types(ctx)
    bins, n = _scalar(ctx, 0, "num_mel_bins"), _scalar(ctx, 1, "dft_length")
    if bins < 1 or n < 1:
        raise ctx.error(f"num_mel_bins={bins} and dft_length={n} must be positive")
    return [((n // 2 + 1, bins), output_datatype(ctx))]
