"""Element-wise CPU kernels: activations, arithmetic with broadcasting, Cast, Identity.

ONNX spec: each op's section of Operators.md; broadcasting per
"Broadcasting in ONNX" (numpy multidirectional rules). Every kernel writes into
`out` and may run in place (out aliasing an input of the same shape).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ..registry import kernel
from ._special import erf_float32, erf_workspace_shape


# ---- activations -------------------------------------------------------------
@kernel("Relu", since=(6, 13, 14), inplace=(0,))
def relu(x, *, out):
    """Y = max(X, 0)."""
    np.maximum(x, 0, out=out)


@kernel("Sigmoid", since=(6, 13), inplace=(0,))
def sigmoid(x, *, out):
    """Y = 1 / (1 + exp(-X)), computed stably (scipy.special.expit)."""
    special.expit(x, out=out)


@kernel("HardSigmoid", since=(6, 22), inplace=(0,))
def hard_sigmoid(x, *, out, alpha=0.2, beta=0.5):
    """Y = max(0, min(1, alpha * X + beta))."""
    np.multiply(x, alpha, out=out)
    out += beta
    np.clip(out, 0.0, 1.0, out=out)


@kernel("Erf", since=(9, 13), inplace=(0,))
class Erf:
    """Y = erf(X), the Gauss error function.

    float32: a vectorized rational approximation (ops/cpu/_special.py, max
    6.7 ulp), 7x faster than scipy; other dtypes: scipy.special.erf.
    """

    def __init__(self, ctx):
        self.fast = ctx.dtype(0) == np.float32
        if self.fast:
            self.work = ctx.scratch(erf_workspace_shape(int(np.prod(ctx.shape(0)))), np.float32)

    def __call__(self, x, *, out):
        if self.fast:
            erf_float32(x, out, self.work.array)
        else:
            special.erf(x, out=out)


# ---- arithmetic (numpy broadcasting) -----------------------------------------
@kernel("Add", since=(7, 13, 14), inplace=(0, 1))
def add(a, b, *, out):
    np.add(a, b, out=out)


@kernel("Sub", since=(7, 13, 14), inplace=(0, 1))
def sub(a, b, *, out):
    np.subtract(a, b, out=out)


@kernel("Mul", since=(7, 13, 14), inplace=(0, 1))
def mul(a, b, *, out):
    np.multiply(a, b, out=out)


@kernel("Div", since=(7, 13, 14), inplace=(0, 1))
def div(a, b, *, out):
    """A / B; integer division truncates toward zero (as C and onnxruntime do)."""
    if np.issubdtype(out.dtype, np.integer):
        q = np.true_divide(a, b)
        np.trunc(q, out=q)
        np.copyto(out, q, casting="unsafe")
    else:
        np.divide(a, b, out=out)


# ---- type and identity -------------------------------------------------------
def _cast_check(attrs, version):
    from ...importers.onnx import elem_dtype

    to = elem_dtype(int(attrs.get("to", 0)))
    if to is None or to.kind not in "biufc?OU":
        return f"Cast to elem_type {attrs.get('to')} is not supported (no numpy dtype)"
    return None


@kernel("Cast", since=(6, 9, 13, 19, 21, 23, 24, 25), check=_cast_check)
def cast(x, *, out, to, saturate=1, round_mode="up"):
    """Y = X converted to `to` (C semantics: float -> int truncates toward zero).

    `saturate` and `round_mode` only concern float8/float4 targets, which have
    no numpy dtype here (rejected at compile time by the check).
    """
    if out.dtype == object:
        out[...] = _to_strings(x)
    elif x.dtype == object:
        out[...] = np.asarray(x, dtype=str).astype(out.dtype)
    else:
        np.copyto(out, x, casting="unsafe")


def _to_strings(x):
    if x.dtype.kind == "f":
        flat = [("NaN" if np.isnan(v) else ("INF" if v > 0 else "-INF") if np.isinf(v) else repr(v))
                for v in x.reshape(-1).tolist()]
        if x.dtype == np.float32:
            flat = [s if s in ("NaN", "INF", "-INF") else str(np.float32(float(s))) for s in flat]
        return np.asarray(flat, dtype=object).reshape(x.shape)
    return x.astype(str).astype(object)


@kernel("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25), inplace=(0,))
def identity(x, *, out):
    """Y = X (a copy into the output blob)."""
    np.copyto(out, x)
