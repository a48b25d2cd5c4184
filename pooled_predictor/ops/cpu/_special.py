"""Vectorized float32 special functions for hot kernels (not registered ops).

scipy.special.erf evaluates in double precision, element by element: about
20 ns per element, which made Erf the second most expensive op of the PP-OCR
detector (13 Erf nodes, the GELUs of its attention blocks). `erf_float32` uses
numpy's SIMD float32 ufuncs instead, about 7x faster.

Approximation: erf(x) ~= x * P(x^2) / Q(x^2) for |x| <= 4 (x clamped there;
erf(4) rounds to 1 in float32), P and Q of degree 5, fitted to minimize the
relative error on [0, 4] (weighted least squares iterated on the residual,
Loeb's linearization; float64 fit error 2.5e-8). Being odd, it keeps its
relative accuracy near 0. Evaluated in float32 (Horner): max error 6.7 ulp,
4.0e-7 absolute, over a dense grid of [-6, 6] and 1e-30..6 (tests/ops/
test_special.py checks it against scipy in float64).
"""

from __future__ import annotations

import numpy as np

_P = (1.12837914e+00, 1.93688777e-01, 5.31207895e-02, 3.88941680e-03, 2.84687286e-04, 1.98555021e-06)
_Q = (1.00000000e+00, 5.04984746e-01, 1.15409409e-01, 1.52195553e-02, 1.18700713e-03, 3.74135900e-05)
_P32 = tuple(np.float32(c) for c in _P)
_Q32 = tuple(np.float32(c) for c in _Q)

class _LazyScipySpecial:
    """scipy.special, imported on first use.

    Importing it costs 0.2-0.4 s (its array-API layer imports numpy.f2py), more than
    a warm start spends on anything else, and most models never call it: Sigmoid,
    Erf and Gelu reach it only off their float32 fast paths. An attribute, once
    fetched, is kept on the instance, so later lookups cost what a module's do.
    """

    def __getattr__(self, name: str):
        from scipy import special as module

        value = getattr(module, name)
        setattr(self, name, value)
        return value


special = _LazyScipySpecial()
"""Stands in for `from scipy import special` in the kernel modules (imported on first use)."""


def expit(x: np.ndarray, out: np.ndarray) -> None:
    """out = 1 / (1 + exp(-x)) (the logistic sigmoid, scipy.special.expit); `out` may be `x`.

    float32 is evaluated in float64, a chunk at a time, and rounded once: correctly rounded
    but for rare ties, so at least as close as scipy's float32 expit (within 2 ulp); exp(-x)
    overflows to inf for x below -709, giving 0, the limit. This keeps scipy.special (0.2-0.4 s
    to import) off the reference kernels' first forward (PP-OCR det's Sigmoid). Other dtypes:
    scipy.special.expit.
    """
    if not (x.dtype == np.float32 and out.dtype == np.float32 and x.shape == out.shape and out.flags.c_contiguous):
        special.expit(x, out=out)
        return
    xf, of = x.reshape(-1), out.reshape(-1)
    with np.errstate(over="ignore"):
        for s in range(0, xf.size, CHUNK):
            t = np.negative(xf[s:s + CHUNK], dtype=np.float64)
            np.exp(t, out=t)
            t += 1.0
            np.divide(1.0, t, out=of[s:s + CHUNK], casting="same_kind")


CHUNK = 65536
"""Elements per chunk: four float32 temporaries of this size (1 MiB) stay in L2."""


def erf_workspace_shape(size: int) -> tuple[int, int]:
    """Shape of the float32 workspace erf_float32 needs for `size` elements."""
    return (4, max(1, min(size, CHUNK)))


def erf_float32(x: np.ndarray, out: np.ndarray, work: np.ndarray, scale: float = 1.0) -> None:
    """out = erf(scale * x), float32, in chunks; `out` may be `x`.

    Args:
        x, out: float32 arrays of the same shape (C-contiguous).
        work: float32 workspace of erf_workspace_shape(x.size).
        scale: multiplies x first (GELU's 1/sqrt(2)).
    """
    xf, of = x.reshape(-1), out.reshape(-1)
    n, chunk = xf.size, work.shape[1]
    lim = np.float32(4.0)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        c, y, p, q = (w[:e - s] for w in work)
        if scale != 1.0:
            np.multiply(xf[s:e], np.float32(scale), out=c)
            np.clip(c, -lim, lim, out=c)
        else:
            np.clip(xf[s:e], -lim, lim, out=c)
        np.multiply(c, c, out=y)
        np.multiply(y, _P32[5], out=p)
        np.multiply(y, _Q32[5], out=q)
        for k in (4, 3, 2, 1):
            p += _P32[k]
            p *= y
            q += _Q32[k]
            q *= y
        p += _P32[0]
        q += _Q32[0]
        p *= c
        np.divide(p, q, out=p)
        np.clip(p, -1.0, 1.0, out=of[s:e])  # rounding may exceed 1 near the clamp
