"""Element-wise CPU kernels: activations, arithmetic with broadcasting, Identity (Cast: cast.py).

ONNX spec: each op's section of Operators.md; broadcasting per
"Broadcasting in ONNX" (numpy multidirectional rules). Every kernel writes into
`out` and may run in place (out aliasing an input of the same shape).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from ._special import special

from ..registry import kernel
from . import compiled
from ._special import erf_float32, erf_workspace_shape, expit


# ---- activations -------------------------------------------------------------
# Relu through compiled/epilogue.py from this many elements (numba's call overhead below, as Sigmoid)
RELU_COMPILED_MIN = 2048


@kernel("Relu", since=(6, 13, 14), inplace=(0,))
def relu(x, *, out):
    """Y = max(X, 0). float32 contiguous: one compiled pass (compiled/epilogue.py, np.maximum's
    bits: 0.24 vs 0.6 ms per 1M floats in place, measured)."""
    if (x.dtype == np.float32 and out.dtype == np.float32 and x.size >= RELU_COMPILED_MIN
            and x.flags.c_contiguous and out.flags.c_contiguous and compiled.active()):
        compiled.epilogue.relu(x.reshape(-1), out.reshape(-1))
        return
    np.maximum(x, 0, out=out)


def _prepare_relu(x, *, out):
    """relu bound to these arrays: float32 contiguous, the compiled pass at every size (bound, numba's
    dispatch paid once: a silero-vad Relu on 512 floats 0.18 against 1.9 us a call; np.maximum's
    bits), else numpy.maximum bound with a 0-d zero of X's type."""
    if (x.dtype == np.float32 and out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
            and compiled.active()):
        return compiled.bound(compiled.epilogue.relu, x.reshape(-1), out.reshape(-1))
    if x.dtype.kind not in "biuf":
        return None
    return partial(np.maximum, x, np.zeros((), x.dtype), out=out)


relu.prepare_run = _prepare_relu


# Sigmoid through compiled/sigmoid.py from this many elements: at every size now. The reference,
# _special.expit (float64, rounded once), costs 9.6 us for 1 element and 23 us for 2047, the compiled
# pass 0.4 and 1.8 us called unbound (one thread, this AMD EPYC, 17:55 UTC); silero-vad's one-element
# Sigmoid paid about 10 us of its 170 us forward. (The 2048 here before was set when scipy's expit,
# about 7 us, was the reference, against ~1.5 us of numba dispatch.)
SIGMOID_COMPILED_MIN_SIZE = 1


@kernel("Sigmoid", since=(6, 13), inplace=(0,))
def sigmoid(x, *, out):
    """Y = 1 / (1 + exp(-X)), computed stably: float32 through compiled/sigmoid.py
    (within 2 ulp, as scipy's float32 expit) when compiled.active() and X is large
    enough, else _special.expit (the reference: float32 in float64, other dtypes scipy.special.expit)."""
    if (compiled.active() and x.size >= SIGMOID_COMPILED_MIN_SIZE and x.dtype == np.float32
            and out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous):
        compiled.sigmoid.sigmoid(x.reshape(-1), out.reshape(-1))
    else:
        expit(x, out=out)


def _prepare_sigmoid(x, *, out):
    """sigmoid bound to these arrays: float32 contiguous, compiled/sigmoid.py at every size (numba's dispatch
    paid once), else None (the call form)."""
    if (x.dtype == np.float32 and out.dtype == np.float32 and x.flags.c_contiguous and out.flags.c_contiguous
            and x.size >= SIGMOID_COMPILED_MIN_SIZE and compiled.active()):
        return compiled.bound(compiled.sigmoid.sigmoid, x.reshape(-1), out.reshape(-1))
    return None


sigmoid.prepare_run = _prepare_sigmoid


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
    6.7 ulp), 7x faster than scipy, and where the compiled kernels are active its
    operations in one compiled pass (compiled/epilogue.py's erf_flat: the same bits,
    8x faster again on 1.2M floats); other dtypes: scipy.special.erf.
    """

    def __init__(self, ctx):
        self.fast = ctx.dtype(0) == np.float32
        self.compiled = self.fast and compiled.active()  # erf_float32's operations in one compiled pass
        if self.fast and not self.compiled:
            self.work = ctx.scratch(erf_workspace_shape(int(np.prod(ctx.shape(0)))), np.float32)

    def __call__(self, x, *, out):
        if self.compiled and out.flags.c_contiguous:  # (a blob: always)
            of = out.reshape(-1)
            if x.flags.c_contiguous and x.ctypes.data == out.ctypes.data:  # in place
                compiled.epilogue.erf_inplace(of)
                return
            if not x.flags.c_contiguous or np.shares_memory(x, out):
                x = np.array(x, order="C")
            compiled.epilogue.erf_flat(x.reshape(-1), of)
        elif self.fast:
            work = self.work.array if not self.compiled else np.empty(erf_workspace_shape(x.size), np.float32)
            erf_float32(x, out, work)
        else:
            special.erf(x, out=out)


# ---- arithmetic (numpy broadcasting) -----------------------------------------
def prepared_ufunc(ufunc):
    """A prepare_run (ops/registry.py) for a kernel that is `ufunc(*inputs, out=out)` and nothing else:
    the ufunc itself bound to the arrays, `out` positional (numpy parses a positional out at about
    half the cost of the keyword, and the kernel's own Python frame goes too: Add on [1, 64], 0.40
    against 0.79 us a call, measured). The same call, the same bits."""

    def prepare_run(*inputs, out):
        return partial(ufunc, *inputs, out)

    prepare_run.__doc__ = f"numpy.{ufunc.__name__} bound to these arrays (elementwise.prepared_ufunc)."
    return prepare_run


@kernel("Add", since=(7, 13, 14), inplace=(0, 1))
def add(a, b, *, out):
    np.add(a, b, out=out)


def _prepared_rows(ufunc, kernel: str):
    """prepare_run of a commutative float32 binary op: for two contiguous tensors of Y's shape, or one of them and
    a contiguous tensor of its last dimensions (a bias, a scale), the compiled pass `kernel` of
    compiled/epilogue.py (add_rows, mul_rows: the ufunc's bits; one call a native run takes), else the numpy
    ufunc bound to these arrays."""

    def prepare_run(a, b, *, out):
        if (compiled.active() and a.dtype == b.dtype == out.dtype == np.float32 and out.flags.c_contiguous
                and a.flags.c_contiguous and b.flags.c_contiguous and a.size and b.size):
            for x, y in ((a, b), (b, a)):
                if x.shape == out.shape and y.ndim <= x.ndim and (y.shape == x.shape[x.ndim - y.ndim:] or y.size == 1):
                    return compiled.bound(getattr(compiled.epilogue, kernel), x.reshape(-1), y.reshape(-1),
                                          out.reshape(-1))
        return partial(ufunc, a, b, out=out)

    prepare_run.__doc__ = f"{kernel} or numpy.{ufunc.__name__} bound to these arrays (elementwise._prepared_rows)."
    return prepare_run


add.prepare_run = _prepared_rows(np.add, "add_rows")


@kernel("Sub", since=(7, 13, 14), inplace=(0, 1))
def sub(a, b, *, out):
    np.subtract(a, b, out=out)


sub.prepare_run = prepared_ufunc(np.subtract)


@kernel("Mul", since=(7, 13, 14), inplace=(0, 1))
def mul(a, b, *, out):
    np.multiply(a, b, out=out)


mul.prepare_run = _prepared_rows(np.multiply, "mul_rows")


@kernel("Div", since=(7, 13, 14), inplace=(0, 1))
class Div:
    """C = A / B with multidirectional broadcasting (ONNX Div).

    Integer division truncates toward zero, as C and onnxruntime do, computed
    exactly in the integer type: A / B = (A - fmod(A, B)) / B, where the
    division is exact (no float round trip, so int64 beyond 2**53 is right).
    Division by zero gives 0 for integers (numpy's), +-inf/NaN for floats.
    Shapes: A, B broadcast to C; dtype A's. Workspace (integers): one array of C's shape.
    """

    def __init__(self, ctx):
        self.integer = ctx.dtype(0).kind in "iu"
        if self.integer:
            self.rem = ctx.scratch(ctx.out_shapes[0], ctx.dtype(0))

    def __call__(self, a, b, *, out):
        if self.integer:
            int_div_trunc(a, b, out, self.rem.array)
        else:
            np.divide(a, b, out=out)


def int_div_trunc(a, b, out, r) -> None:
    """out = trunc(a / b) for integers; r: workspace of out's shape (out may alias a or b)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        np.fmod(a, b, out=r)           # remainder with the sign of a (C's %)
        np.subtract(a, r, out=r)       # a multiple of b
        np.floor_divide(r, b, out=out)  # exact, so floor = trunc


@kernel("Mod", since=(10, 13, 28), inplace=(0, 1))
def mod(a, b, *, out, fmod=0):
    """C = A mod B with multidirectional broadcasting (ONNX Mod).

    fmod=0: A - floor(A / B) * B, the sign of B (numpy.mod; Python's %).
    fmod=1: A - trunc(A / B) * B, the sign of A (numpy.fmod; C's fmod and %).
    Integers: a zero divisor gives 0 (numpy's; the spec leaves it undefined).
    Floats follow the spec's special cases (inf dividend or zero divisor: NaN;
    inf divisor: A, or B when fmod=0 and the signs differ). fmod=0 on floats,
    which Mod-10 and -13 forbid, is given Mod-28's meaning at every version.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        (np.fmod if fmod else np.mod)(a, b, out=out)


# ---- identity ----------------------------------------------------------------
@kernel("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25), inplace=(0,))
def identity(x, *, out):
    """Y = X (a copy into the output blob)."""
    np.copyto(out, x)
