"""Activation CPU kernels: Clip, LeakyRelu, PRelu, Elu, HardSwish, Gelu, Softplus, Selu, Celu,
ThresholdedRelu, Shrink, Softsign, Swish, SwiGLU, Mish, Dropout.

ONNX spec: each op's section of Operators.md. Shapes and dtypes come from the
rules in ops/shapes/common.py and ops/shapes/logical.py. Kernels that need an
intermediate the size of X take it from the Net's scratch workspace, so every
kernel here may run in place (out aliasing X).
"""

from __future__ import annotations

import math

import numpy as np
from ._special import special

from ...errors import UnsupportedOpError
from ..registry import kernel
from ._special import erf_float32, erf_workspace_shape, expit


def _scalar(value, dtype: np.dtype):
    """A Python number or 0-d/1-element array as a numpy scalar of `dtype`
    (float overflow saturates to +-inf, as a C cast does)."""
    with np.errstate(over="ignore"):
        return np.asarray(value).reshape(()).astype(dtype)[()]


# ---- Clip --------------------------------------------------------------------
@kernel("Clip", since=(6, 11, 12, 13), inplace=(0,))
class Clip:
    """Y = min(max(X, min), max), element-wise (ONNX Clip).

    Clip-6 takes `min`/`max` as float attributes (defaults -+3.4028234663852886e38,
    the float32 range, as the spec's attribute defaults). Clip-11+ takes them as
    optional scalar inputs that default to numeric_limits<T>::lowest() and max():
    an absent bound still maps +-inf to the type's finite extremes. Integer types
    from Clip-12. When min > max every element becomes max (Clip-13 spells this
    out; it is the formula above). NaN stays NaN. Bounds that are weights are
    converted once at reshape; runtime bounds are read per call.
    Shapes: X any shape; min, max () (one element); Y as X.
    """

    _FLT_MAX = 3.4028234663852886e38

    def __init__(self, ctx, *, min=None, max=None):
        dtype = ctx.dtype(0)
        self.runtime = ()
        if ctx.version < 11:
            self.lo = _scalar(-self._FLT_MAX if min is None else min, dtype)
            self.hi = _scalar(self._FLT_MAX if max is None else max, dtype)
            return
        lowest, highest = (np.finfo(dtype).min, np.finfo(dtype).max) if dtype.kind == "f" else (None, None)
        self.lo = _scalar(ctx.value(1), dtype) if ctx.is_static(1) else lowest
        self.hi = _scalar(ctx.value(2), dtype) if ctx.is_static(2) else highest
        self.runtime = tuple(i for i in (1, 2) if ctx.has_input(i) and not ctx.is_static(i))

    def __call__(self, x, lo=None, hi=None, *, out):
        lo_v, hi_v = self.lo, self.hi
        if 1 in self.runtime:
            lo_v = lo.reshape(())
        if 2 in self.runtime:
            hi_v = hi.reshape(())
        if lo_v is None and hi_v is None:  # integers without bounds
            np.copyto(out, x)
        elif hi_v is None:
            np.maximum(x, lo_v, out=out)
        elif lo_v is None:
            np.minimum(x, hi_v, out=out)
        else:
            np.clip(x, lo_v, hi_v, out=out)


# ---- ReLU family -------------------------------------------------------------
@kernel("LeakyRelu", since=(6, 16), inplace=(0,))
class LeakyRelu:
    """Y = X for X >= 0, alpha * X for X < 0 (ONNX LeakyRelu; alpha default 0.01).

    Computed as max(X, alpha X) for 0 < alpha <= 1, min(X, alpha X) for
    alpha > 1, and max(X, 0) + alpha min(X, 0) otherwise.
    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx, *, alpha=0.01):
        self.alpha = float(alpha)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        leaky_relu_into(x, out, self.tmp.array, self.alpha)


def leaky_relu_into(x, out, t, a: float) -> None:
    """out = x for x >= 0, a * x below; t: workspace of x's shape (out may be x).

    Shared by LeakyRelu and the fused kernels (ops/cpu/fused.py): same bits.
    """
    if 0.0 < a <= 1.0:
        np.multiply(x, a, out=t)
        np.maximum(x, t, out=out)
    elif a > 1.0:
        np.multiply(x, a, out=t)
        np.minimum(x, t, out=out)
    else:
        with np.errstate(invalid="ignore"):
            np.minimum(x, 0, out=t)
            t *= a
            np.maximum(x, 0, out=out)
            out += t


@kernel("PRelu", since=(9, 16), inplace=(0,))
class PRelu:
    """Y = X for X >= 0, slope * X for X < 0 (ONNX PRelu).

    slope broadcasts unidirectionally to X (e.g. (C, 1, 1) against (N, C, H, W)).
    Computed as max(X, 0) + slope * min(X, 0); integer types wrap as in C.
    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx):
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, slope, *, out):
        t = self.tmp.array
        with np.errstate(invalid="ignore", over="ignore"):
            np.minimum(x, 0, out=t)
            np.multiply(t, slope, out=t)
            np.maximum(x, 0, out=out)
            np.add(out, t, out=out)


@kernel("Elu", since=(6, 22), inplace=(0,))
class Elu:
    """Y = X for X >= 0, alpha * (exp(X) - 1) for X < 0 (ONNX Elu; alpha default 1).

    Computed as max(X, 0) + alpha * expm1(min(X, 0)).
    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx, *, alpha=1.0):
        self.alpha = float(alpha)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        elu_into(x, out, self.tmp.array, self.alpha)


def elu_into(x, out, t, alpha: float, inner: float = 1.0) -> None:
    """out = max(x, 0) + alpha * expm1(inner * min(x, 0)); t: workspace of x's shape
    (out may be x). Elu (inner 1), Celu (inner 1 / alpha) and Selu (times gamma)."""
    np.minimum(x, 0, out=t)
    if inner != 1.0:
        t *= inner
    np.expm1(t, out=t)
    t *= alpha
    np.maximum(x, 0, out=out)
    out += t


@kernel("HardSwish", since=(14, 22), inplace=(0,))
class HardSwish:
    """Y = X * max(0, min(1, X / 6 + 1/2)) (ONNX HardSwish; MobileNetV3).

    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx):
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        hard_swish_into(x, out, self.tmp.array)


def hard_swish_into(x, out, t) -> None:
    """out = x * max(0, min(1, x / 6 + 1/2)); t: workspace of x's shape (out may be x).

    Shared by HardSwish and the fused kernels (ops/cpu/fused.py): same bits.
    """
    np.multiply(x, 1.0 / 6.0, out=t)
    t += 0.5
    np.clip(t, 0.0, 1.0, out=t)
    with np.errstate(invalid="ignore"):  # inf * 0 = NaN for X = -inf
        np.multiply(x, t, out=out)


def _gelu_check(attrs, version):
    a = attrs.get("approximate", "none")
    if a not in ("none", "tanh"):
        return f"approximate={a!r} is not a Gelu mode; expected 'none' or 'tanh'"
    return None


@kernel("Gelu", since=20, inplace=(0,), check=_gelu_check)
class Gelu:
    """Gaussian error linear unit (ONNX Gelu-20; Hendrycks & Gimpel 2016).

    approximate="none": Y = 0.5 X (1 + erf(X / sqrt(2))); float32 uses the
    vectorized erf of ops/cpu/_special.py, other dtypes 0.5 X erfc(-X / sqrt(2))
    with scipy (no cancellation for X << 0).
    approximate="tanh": Y = 0.5 X (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))),
    computed as X sigmoid(2 sqrt(2/pi) (X + 0.044715 X^3)), the same function.
    Shapes: Y as X. Workspace: one array of X's shape.
    """

    _C = math.sqrt(2.0 / math.pi)

    def __init__(self, ctx, *, approximate="none"):
        self.tanh = approximate == "tanh"
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))
        self.fast = not self.tanh and ctx.dtype(0) == np.float32
        if self.fast:  # float32 erf form: the vectorized erf of ops/cpu/_special.py
            self.work = ctx.scratch(erf_workspace_shape(int(np.prod(ctx.shape(0)))), np.float32)

    def __call__(self, x, *, out):
        t = self.tmp.array
        with np.errstate(over="ignore", invalid="ignore"):
            if self.tanh:
                c2 = 2.0 * self._C
                np.multiply(x, x, out=t)
                t *= c2 * 0.044715
                t += c2
                t *= x
                expit(t, out=t)
                np.multiply(x, t, out=out)
            elif self.fast:
                erf_float32(x, t, self.work.array, scale=1.0 / math.sqrt(2.0))
                t += np.float32(1.0)
                t *= x
                np.multiply(t, np.float32(0.5), out=out)
            else:
                np.multiply(x, -1.0 / math.sqrt(2.0), out=t)
                special.erfc(t, out=t)
                t *= x
                np.multiply(t, 0.5, out=out)


@kernel("Softplus", since=(1, 22), inplace=(0,))
def softplus(x, *, out):
    """Y = ln(exp(X) + 1), computed stably as logaddexp(X, 0) (ONNX Softplus)."""
    with np.errstate(invalid="ignore"):
        np.logaddexp(x, 0, out=out)


# ---- SELU, CELU, thresholds, Softsign ----------------------------------------
@kernel("Selu", since=(6, 22), inplace=(0,))
class Selu:
    """Y = gamma * X for X > 0, gamma * alpha * (exp(X) - 1) for X <= 0 (ONNX Selu;
    Klambauer et al. 2017, whose alpha and gamma are the defaults).

    Computed as gamma * (max(X, 0) + alpha * expm1(min(X, 0))).
    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875):
        self.alpha, self.gamma = float(alpha), float(gamma)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        elu_into(x, out, self.tmp.array, self.alpha)
        out *= self.gamma


@kernel("Celu", since=(12, 28), inplace=(0,))
class Celu:
    """Y = max(0, X) + min(0, alpha * (exp(X / alpha) - 1)) (ONNX Celu; Barron 2017).

    Shapes: Y as X (float; Celu-28 adds bfloat16, the same formula). Workspace:
    one array of X's shape.
    """

    def __init__(self, ctx, *, alpha=1.0):
        self.alpha = float(alpha)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        elu_into(x, out, self.tmp.array, self.alpha, 1.0 / self.alpha)


@kernel("ThresholdedRelu", since=(10, 22), inplace=(0,))
def thresholded_relu(x, *, out, alpha=1.0):
    """Y = X for X > alpha, 0 otherwise (ONNX ThresholdedRelu)."""
    np.multiply(x, x > alpha, out=out)


@kernel("Shrink", since=9, inplace=(0,))
class Shrink:
    """Y = X + bias for X < -lambd, X - bias for X > lambd, 0 otherwise (ONNX Shrink).

    Integer X: computed in double and converted back (C conversion, as
    onnxruntime's float attributes do). Shapes: Y as X. Workspace: one array of
    X's shape (float64 for integer X) and two bool masks.
    """

    def __init__(self, ctx, *, bias=0.0, lambd=0.5):
        self.bias, self.lambd = float(bias), float(lambd)
        dtype = ctx.dtype(0)
        self.integer = dtype.kind in "iu"
        self.tmp = ctx.scratch(ctx.shape(0), np.float64 if self.integer else dtype)
        self.low = ctx.scratch(ctx.shape(0), np.bool_)
        self.high = ctx.scratch(ctx.shape(0), np.bool_)

    def __call__(self, x, *, out):
        t, low, high = self.tmp.array, self.low.array, self.high.array
        np.copyto(t, x, casting="unsafe")
        np.less(t, -self.lambd, out=low)
        np.greater(t, self.lambd, out=high)
        np.add(t, self.bias, out=t, where=low)
        np.subtract(t, self.bias, out=t, where=high)
        np.logical_or(low, high, out=low)
        np.multiply(t, low, out=t)
        np.copyto(out, t, casting="unsafe")


@kernel("Softsign", since=(1, 22), inplace=(0,))
class Softsign:
    """Y = X / (1 + |X|) (ONNX Softsign). Workspace: one array of X's shape."""

    def __init__(self, ctx):
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        t = self.tmp.array
        np.absolute(x, out=t)
        t += 1
        np.divide(x, t, out=out)


# ---- Swish family ---------------------------------------------------------------
@kernel("Swish", since=24, inplace=(0,))
class Swish:
    """Y = X * sigmoid(alpha * X) (ONNX Swish-24; Ramachandran et al. 2017).

    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx, *, alpha=1.0):
        self.alpha = float(alpha)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        swish_into(x, out, self.tmp.array, self.alpha)


def swish_into(x, out, t, alpha: float) -> None:
    """out = x * sigmoid(alpha x); t: workspace of x's shape (out may be x)."""
    np.multiply(x, alpha, out=t)
    expit(t, out=t)
    np.multiply(x, t, out=out)


@kernel("SwiGLU", since=28, inplace=(0, 1))
class SwiGLU:
    """Y = Swish_alpha(A) * B, A and B of one shape (ONNX SwiGLU-28; Shazeer 2020).

    Shapes: A, B, Y one shape. Workspace: one array of that shape.
    """

    def __init__(self, ctx, *, alpha=1.0):
        self.alpha = float(alpha)
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, a, b, *, out):
        t = self.tmp.array
        swish_into(a, t, t, self.alpha)
        np.multiply(t, b, out=out)


@kernel("Mish", since=(18, 22), inplace=(0,))
class Mish:
    """Y = X * tanh(softplus(X)) = X * tanh(ln(1 + exp(X))) (ONNX Mish; Misra 2019).

    Shapes: Y as X. Workspace: one array of X's shape.
    """

    def __init__(self, ctx):
        self.tmp = ctx.scratch(ctx.shape(0), ctx.dtype(0))

    def __call__(self, x, *, out):
        t = self.tmp.array
        with np.errstate(invalid="ignore"):
            np.logaddexp(x, 0, out=t)
            np.tanh(t, out=t)
            np.multiply(x, t, out=out)


# ---- Dropout (inference) -----------------------------------------------------
@kernel("Dropout", since=(10, 12, 13, 22), inplace=(0,))
class Dropout:
    """Inference Dropout: output = data, mask (optional) all True (ONNX Dropout).

    Dropout-10 takes the ratio as an attribute; Dropout-12+ takes `ratio` and
    `training_mode` as optional scalar inputs and a `seed` attribute, which
    inference does not use. training_mode true is unsupported (random dropout)
    unless the ratio is 0, which drops nothing: the shape rule rejects a static
    true, this kernel one fed at forward. The mask is all True at every version
    (nothing dropped), as in onnx's reference; onnxruntime's Dropout-10 returns
    all False instead.
    Shapes: data any shape; output and mask as data.
    Raises:
        UnsupportedOpError: training_mode is true at forward and ratio is not 0.
    """

    def __init__(self, ctx, *, ratio=0.5, seed=None):
        self.node = ctx.node.name

    def __call__(self, data, ratio=None, training_mode=None, *, out):
        output, mask = out[0], (out[1] if len(out) > 1 else None)
        if training_mode is not None and bool(training_mode.reshape(-1)[0]):
            r = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
            if r != 0.0:
                raise UnsupportedOpError(
                    f"node {self.node!r} (Dropout): training_mode is true (ratio {r}); only inference "
                    f"is supported (training_mode false or absent, or ratio 0)")
        np.copyto(output, data)
        if mask is not None:
            mask.fill(True)
