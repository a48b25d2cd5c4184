"""Signal-processing CPU kernels: DFT (17, 20), STFT (17), HannWindow, HammingWindow,
BlackmanWindow, MelWeightMatrix (17).

Transforms use numpy.fft (pocketfft) along the requested axis; real and complex
signals are in ONNX's layout, a trailing dimension of 1 (real) or 2 (re, im).
float16 is transformed in float32 (numpy.fft's lowest precision) and rounded once.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.signal import dft_geometry, stft_geometry


def _complex(x: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) re/im -> a complex or real array without the last axis."""
    if x.dtype == np.float16:
        x = x.astype(np.float32)
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _store(spectrum: np.ndarray, out: np.ndarray) -> None:
    """Write a complex (or real) array into ONNX's (..., 2) (or (..., 1)) layout."""
    if out.shape[-1] == 1:
        np.copyto(out[..., 0], spectrum.real, casting="unsafe")
    else:
        np.copyto(out[..., 0], spectrum.real, casting="unsafe")
        np.copyto(out[..., 1], spectrum.imag, casting="unsafe")


@kernel("DFT", since=(17, 20))
class DFT:
    """Discrete Fourier transform along one axis (ONNX DFT-17, DFT-20).

    X[k] = sum_n x[n] exp(-2 pi i k n / N) (inverse: exp(+...) / N), N =
    dft_length (the input is zero-padded or cut to it; default the axis length).
    onesided=1: forward keeps bins 0..N/2 of a real signal (RFFT); inverse takes
    those bins and returns the real signal (IRFFT, last dimension 1, N defaulting
    to 2 (bins - 1)). Shapes: input (..., 1 or 2); axis from the attribute
    (17, default 1) or the optional scalar input 2 (20, default -2).
    Raises (at reshape): ShapeInferenceError for a bad axis, length or onesided use.
    """

    def __init__(self, ctx, *, axis=1, inverse=0, onesided=0):
        self.g = dft_geometry(ctx)

    def __call__(self, x, dft_length=None, axis=None, *, out):
        g = self.g
        signal = _complex(x)
        if g.inverse:
            res = np.fft.irfft(signal, n=g.n, axis=g.axis) if g.onesided else np.fft.ifft(signal, n=g.n, axis=g.axis)
        else:
            res = np.fft.rfft(signal, n=g.n, axis=g.axis) if g.onesided else np.fft.fft(signal, n=g.n, axis=g.axis)
        _store(res, out)


@kernel("STFT", since=17)
class STFT:
    """Short-time Fourier transform (ONNX STFT-17).

    Frame f covers signal[f * frame_step : f * frame_step + frame_length], is
    multiplied by `window` (default all ones) and transformed by a DFT of
    frame_length points (onesided=1, the default: bins 0..frame_length/2).
    Shapes: signal (B, L, 1 or 2); frame_step, frame_length scalars; window
    (frame_length,). Output (B, frames, bins, 2), frames = 1 + (L - frame_length) //
    frame_step. Frames are strided views of the signal (no copy before the FFT).
    """

    def __init__(self, ctx, *, onesided=1):
        self.g = stft_geometry(ctx)

    def __call__(self, signal, frame_step, window=None, frame_length=None, *, out):
        g = self.g
        x = _complex(signal)                                     # (B, L)
        frames = np.lib.stride_tricks.sliding_window_view(x, g.frame_length, axis=1)[:, ::g.frame_step]
        frames = frames[:, :g.frames]
        if window is not None:
            frames = frames * window.astype(frames.real.dtype, copy=False)
        if g.bins != g.frame_length:
            res = np.fft.rfft(frames, n=g.frame_length, axis=-1)
        else:
            res = np.fft.fft(frames, n=g.frame_length, axis=-1)
        _store(res, out)


def _window(size, periodic, *cosines):
    """sum_m a_m cos(2 pi m n / N'), N' = size (periodic) or size - 1 (symmetric), in float64."""
    n = int(np.asarray(size).reshape(()))
    denom = n if periodic else n - 1
    phase = 2.0 * np.pi * np.arange(n) / (denom if denom > 0 else 1)
    return sum(a * np.cos(m * phase) for m, a in enumerate(cosines))


@kernel("HannWindow", since=17)
def hann_window(size, *, out, output_datatype=1, periodic=1):
    """w[n] = 0.5 - 0.5 cos(2 pi n / N') (ONNX HannWindow-17); N' = size if periodic else size - 1."""
    np.copyto(out, _window(size, periodic, 0.5, -0.5), casting="unsafe")


@kernel("HammingWindow", since=17)
def hamming_window(size, *, out, output_datatype=1, periodic=1):
    """w[n] = 25/46 - 21/46 cos(2 pi n / N') (ONNX HammingWindow-17)."""
    np.copyto(out, _window(size, periodic, 25.0 / 46.0, -21.0 / 46.0), casting="unsafe")


@kernel("BlackmanWindow", since=17)
def blackman_window(size, *, out, output_datatype=1, periodic=1):
    """w[n] = 0.42 - 0.5 cos(2 pi n / N') + 0.08 cos(4 pi n / N') (ONNX BlackmanWindow-17)."""
    np.copyto(out, _window(size, periodic, 0.42, -0.5, 0.08), casting="unsafe")


@kernel("MelWeightMatrix", since=17)
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *, out,
                      output_datatype=1):
    """Triangular filters mapping dft_length // 2 + 1 linear bins to num_mel_bins mel bands
    (ONNX MelWeightMatrix-17).

    mel(f) = 2595 log10(1 + f / 700); num_mel_bins + 2 edges are spaced by
    (mel(upper) - mel(lower)) / (num_mel_bins + 2) from mel(lower), mapped back to Hz
    and to bins as floor((dft_length + 1) f / sample_rate). Band i rises linearly
    from edge i (0) to edge i+1 (1) and falls to edge i+2 (0, excluded); a band
    whose rising edge is empty is 1 at its centre. Output (bins, num_mel_bins).
    """
    bands, n = int(np.asarray(num_mel_bins)), int(np.asarray(dft_length))
    rate = float(np.asarray(sample_rate))
    low = 2595.0 * np.log10(1.0 + float(np.asarray(lower_edge_hertz)) / 700.0)
    high = 2595.0 * np.log10(1.0 + float(np.asarray(upper_edge_hertz)) / 700.0)
    mels = np.arange(bands + 2) * ((high - low) / (bands + 2)) + low
    hz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = (((n + 1) * hz) // rate).astype(np.int64)
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(n // 2 + 1, dtype=np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = np.where(mid > lo, (j - lo) / (mid - lo), 1.0)
        fall = (hi - j) / (hi - mid)
    w = np.where((j >= lo) & (j <= mid), rise, 0.0)
    w = np.where((j >= mid) & (j < hi), fall, w)
    np.copyto(out, w, casting="unsafe")
