"""MatMul with a constant right operand on gemm.py's packed GEMM, the bias fused as one more k row.

    Y[r, n] = sum_k A[r, k] B[k, n] (+ c[n])        A (R, K) fed, B (K, N) and c (N,) weights

gemm2d computes Y = W @ X with W packed (pack_weights' layout) and X rows of
unit stride, so the roles are: W := A (R x K, small: a transformer's or a CTC
head's tokens x features), packed per call into per-Net scratch by pack_rows
below; X := B, packed once into panels of 16 columns (pack_right), one
gemm2d call per panel (matmul_const). The
bias is per column n of Y, while gemm2d's own bias is per row, so it rides in
the product instead:

    [A 1] @ [B; c] = A @ B + c

one more k step whose multiply-add is fma(1, c[n], s) = round(s + c[n]), the
same rounding as a GEMM followed by + c (ONNX MatMul then Add): no accuracy
moves, and the separate pass over Y is gone. Error: gemm.py's (BLAS sgemm's),
|error| <= K u sum_k |A B| + O(u^2), u = 2^-24 (Higham 2002, sec. 3.5).
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from .gemm import MR, gemm2d

_F1 = types.Array(types.float32, 1, "C")
_R1 = types.Array(types.float32, 1, "C", readonly=True)
_I = types.int64


@njit([types.void(_R1, _I, _I, _I, types.boolean, _F1), types.void(_F1, _I, _I, _I, types.boolean, _F1)],
      nogil=True, cache=True, error_model="numpy")
def pack_rows(af, rows, k_n, lda, ones, dst):
    """A (rows, k_n) = af[r * lda + k], with a column of ones appended when `ones`, packed as
    gemm.pack_weights packs W (tiles of MR rows, each k-major) into dst[: rows * (k_n + ones)]."""
    kk = k_n + (1 if ones else 0)
    for t0 in range(0, rows, MR):
        r_t = min(MR, rows - t0)
        base = t0 * kk
        for r in range(r_t):
            src = (t0 + r) * lda
            for k in range(k_n):
                dst[base + k * r_t + r] = af[src + k]
            if ones:
                dst[base + k_n * r_t + r] = 1.0


PANEL = 16  # columns of B per packed panel: one micro-tile's width


def pack_right(b: np.ndarray, c: np.ndarray | None, panel: int = 0) -> np.ndarray:
    """X for matmul_const: [B; c] (K' = K + (c given) rows, N columns) packed in panels of `panel`
    (default PANEL) columns, each panel K' x PANEL k-major (the last one zero-padded), so that a micro-tile's
    strip of X is contiguous (B used in place has rows N floats apart: one page per k row).
    Flat float32, read-only; panel j starts at j * K' * panel."""
    x = np.asarray(b, np.float32)
    if c is not None:
        x = np.concatenate([x, np.asarray(c, np.float32).reshape(1, -1)], axis=0)
    kk, n = x.shape
    panel = panel or PANEL
    panels = -(-n // panel)
    out = np.zeros((panels, kk, panel), np.float32)
    padded = np.zeros((kk, panels * panel), np.float32)
    padded[:, :n] = x
    out[...] = padded.reshape(kk, panels, panel).transpose(1, 0, 2)
    out = out.reshape(-1)
    out.flags.writeable = False
    return out


_O1 = types.Array(types.int64, 1, "C", readonly=True)
_MM_SIGS = [types.void(a, _I, _I, types.boolean, _F1, _R1, _I, _O1, _F1, _I, _R1, _F1) for a in (_R1, _F1)]


@njit(_MM_SIGS, nogil=True, cache=True, error_model="numpy")
def matmul_const(af, rows, k_n, bias, ap, xp, panel, offs, yf, n_n, zeros, ws):
    """Y (rows, n_n) = A @ B (+ c when `bias`): A = af (rows, k_n) C-contiguous, packed into ap
    (rows * (k_n + bias) floats); xp = pack_right(B, c, panel); offs = panel * arange(k_n + bias);
    zeros: rows zeros (gemm2d's row bias); ws: gemm.scratch_size(n_n) floats."""
    pack_rows(af, rows, k_n, k_n, bias, ap)
    kk = k_n + (1 if bias else 0)
    f0 = np.float32(0.0)
    for j0 in range(0, n_n, panel):
        gemm2d(ap, xp, j0 * kk, offs, yf, j0, n_n, rows, min(panel, n_n - j0), zeros, ws, 0, f0, f0)
