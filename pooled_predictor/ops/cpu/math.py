"""Math CPU kernels: unary functions, Pow, and the variadic Max, Min, Sum, Mean.

ONNX spec: each op's section of Operators.md; broadcasting per "Broadcasting in
ONNX" (numpy multidirectional rules). Every kernel writes into `out` and may run
in place (out aliasing input 0, or input 1 for the variadic ops). Domain errors
give IEEE results (Sqrt(-1) = NaN, Log(0) = -inf, Reciprocal(0) = inf) without
numpy warnings.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from .elementwise import prepared_ufunc


# ---- unary -------------------------------------------------------------------
@kernel("Neg", since=(6, 13), inplace=(0,))
def neg(x, *, out):
    """Y = -X (signed integers wrap: -(-128) = -128 for int8)."""
    np.negative(x, out=out)


neg.prepare_run = prepared_ufunc(np.negative)


@kernel("Abs", since=(6, 13), inplace=(0,))
def abs_(x, *, out):
    """Y = |X| (signed integers wrap: |-128| = -128 for int8; unsigned: Y = X)."""
    np.absolute(x, out=out)


abs_.prepare_run = prepared_ufunc(np.absolute)


@kernel("Sqrt", since=(6, 13), inplace=(0,))
def sqrt(x, *, out):
    """Y = X ** 0.5 (NaN for X < 0)."""
    with np.errstate(invalid="ignore"):
        np.sqrt(x, out=out)


@kernel("Exp", since=(6, 13), inplace=(0,))
def exp(x, *, out):
    """Y = e ** X (inf on overflow)."""
    with np.errstate(over="ignore"):
        np.exp(x, out=out)


@kernel("Log", since=(6, 13), inplace=(0,))
def log(x, *, out):
    """Y = ln(X) (-inf for 0, NaN for X < 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(x, out=out)


@kernel("Tanh", since=(6, 13), inplace=(0,))
def tanh(x, *, out):
    """Y = tanh(X)."""
    np.tanh(x, out=out)


tanh.prepare_run = prepared_ufunc(np.tanh)


@kernel("Reciprocal", since=(6, 13), inplace=(0,))
def reciprocal(x, *, out):
    """Y = 1 / X (+-inf for +-0)."""
    with np.errstate(divide="ignore", over="ignore"):
        np.reciprocal(x, out=out)


@kernel("Floor", since=(6, 13), inplace=(0,))
def floor(x, *, out):
    """Y = the greatest integer <= X, element-wise (NaN and inf unchanged)."""
    np.floor(x, out=out)


floor.prepare_run = prepared_ufunc(np.floor)


@kernel("Ceil", since=(6, 13), inplace=(0,))
def ceil(x, *, out):
    """Y = the least integer >= X, element-wise (NaN and inf unchanged)."""
    np.ceil(x, out=out)


ceil.prepare_run = prepared_ufunc(np.ceil)


# ---- Pow -----------------------------------------------------------------------
@kernel("Pow", since=(7, 12, 13, 15), inplace=(0,))
class Pow:
    """Z = X ** Y with multidirectional broadcasting; Z has the base's dtype (ONNX Pow).

    Pow-7: X and Y float16/32/64 of one type. Pow-12+: base int32/int64 or
    float, exponent any int or float type (independently).
    * float base: computed in the wider of the two float types (an integer
      exponent is converted to the base's type), then stored as the base's type.
    * int base, non-negative int exponent: exact integer power (wrapping on overflow).
    * int base otherwise (negative int or float exponent): computed in float64 and
      truncated toward zero, as C's (T)pow(x, y) does (2 ** -1 = 0, 3 ** 0.5 = 1).
    Shapes: X, Y broadcast to Z. Workspace (int base only): a float64 array of Z's shape.
    """

    def __init__(self, ctx):
        bt, et = ctx.dtype(0), ctx.dtype(1)
        self.float_base = bt.kind == "f"
        if self.float_base:
            self.dtype = np.result_type(bt, et) if et.kind == "f" else bt
            return
        self.int_exponent = et.kind in "iu"
        # None: decided per call from the exponent's values.
        self.exact = None
        if not self.int_exponent:
            self.exact = False
        elif et.kind == "u":
            self.exact = True
        elif ctx.is_static(1):
            y = ctx.value(1)
            self.exact = bool(y.size == 0 or y.min() >= 0)
        self.wide = None if self.exact else ctx.scratch(ctx.out_shapes[0], np.float64)

    def __call__(self, x, y, *, out):
        if self.float_base:
            with np.errstate(all="ignore"):
                np.power(x, y, out=out, dtype=self.dtype)
            return
        exact = self.exact
        if exact is None:
            exact = y.size == 0 or y.min() >= 0
        if exact:
            np.power(x, y, out=out, dtype=np.int64, casting="unsafe")
            return
        t = self.wide.array
        with np.errstate(all="ignore"):
            np.power(x, y, out=t, dtype=np.float64)
            np.copyto(out, t, casting="unsafe")


# ---- variadic (1..N inputs, broadcasting) -------------------------------------
def _fold(ufunc, inputs, out) -> int:
    """out = ufunc(...ufunc(ufunc(x0, x1), x2)..., xn); returns the number of inputs.

    Inputs that share memory with `out` (a planner that put the output on an
    input read twice) are taken first, before `out` is written.
    """
    xs = [x for x in inputs if x is not None]
    if len(xs) == 1:
        np.copyto(out, xs[0])
        return 1
    if len(xs) > 2:
        xs.sort(key=lambda x: not np.may_share_memory(x, out))
    ufunc(xs[0], xs[1], out=out)
    for x in xs[2:]:
        ufunc(out, x, out=out)
    return len(xs)


@kernel("Max", since=(8, 12, 13), inplace=(0, 1))
def max_(*inputs, out):
    """Y = the element-wise maximum of 1..N broadcast inputs (NaN propagates; ints from Max-12)."""
    _fold(np.maximum, inputs, out)


@kernel("Min", since=(8, 12, 13), inplace=(0, 1))
def min_(*inputs, out):
    """Y = the element-wise minimum of 1..N broadcast inputs (NaN propagates; ints from Min-12)."""
    _fold(np.minimum, inputs, out)


@kernel("Sum", since=(8, 13), inplace=(0, 1))
def sum_(*inputs, out):
    """Y = X0 + X1 + ... + Xn, element-wise over broadcast inputs."""
    with np.errstate(over="ignore", invalid="ignore"):
        _fold(np.add, inputs, out)


@kernel("Mean", since=(8, 13), inplace=(0, 1))
def mean(*inputs, out):
    """Y = (X0 + X1 + ... + Xn) / (n + 1), element-wise over broadcast inputs."""
    with np.errstate(over="ignore", invalid="ignore"):
        n = _fold(np.add, inputs, out)
        if n > 1:
            np.divide(out, n, out=out)


# ---- rounding, sign, classification --------------------------------------------
@kernel("Round", since=(11, 22), inplace=(0,))
def round_(x, *, out):
    """Y = X rounded to the nearest integer, halves to even (ONNX Round; numpy.rint)."""
    np.rint(x, out=out)


round_.prepare_run = prepared_ufunc(np.rint)


@kernel("Sign", since=(9, 13), inplace=(0,))
def sign(x, *, out):
    """Y = -1, 0 or 1 by the sign of X (NaN stays NaN; unsigned: 0 or 1)."""
    np.sign(x, out=out)


sign.prepare_run = prepared_ufunc(np.sign)


@kernel("IsNaN", since=(9, 13, 20))
def is_nan(x, *, out):
    """Y = (X is NaN), bool."""
    np.isnan(x, out=out)


@kernel("IsInf", since=(10, 20))
def is_inf(x, *, out, detect_negative=1, detect_positive=1):
    """Y = (X is +inf and detect_positive) or (X is -inf and detect_negative), bool."""
    if detect_negative and detect_positive:
        np.isinf(x, out=out)
    elif detect_positive:
        np.isposinf(x, out=out)
    elif detect_negative:
        np.isneginf(x, out=out)
    else:
        out.fill(False)
