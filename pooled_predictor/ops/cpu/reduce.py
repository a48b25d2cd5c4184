"""Reduction CPU kernels: ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.

ONNX Reduce*: `axes` is an attribute up to ReduceSum-11 / Reduce*-13 and an
optional input from ReduceSum-13 / Reduce*-18; absent or empty axes reduce
every axis unless noop_with_empty_axes=1 (then Y = X); keepdims keeps reduced
axes as length 1. The axes are resolved at reshape (shapes/reduce.reduce_axes);
the kernels write numpy's keepdims result into a view of the output.
Reductions over an empty set give the op's identity: 0 (Sum), 1 (Prod),
-inf / the type's minimum (Max), +inf / the type's maximum (Min), and 0 for
Mean, whose value the spec leaves undefined (onnxruntime's 0, not numpy's NaN);
0 for L1, L2 and SumSquare and -inf for LogSum and LogSumExp (log 0).
Sums and products accumulate in the input's type (integers wrap, as in
onnxruntime), float16 in float32.

float32 means, sums and maxima over trailing axes (ReduceMean axes [2, 3] on
NCHW, ReduceSum, ReduceMax; GlobalAveragePool and GlobalMaxPool in pooling.py)
run compiled when compiled.active(): TrailingReduce, through compiled/rowreduce.py
(one pass per row; sums in 8-lane blocks added in float64); numpy runs every
other case and is the tested reference.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.reduce import reduce_axes
from . import compiled


class TrailingReduce:
    """Y = the mean, sum or max of X over its trailing axes, compiled (compiled/rowreduce.py).

    X (d0, ..., dk-1, dk, ..., dn-1) float32, C-contiguous, is read as rows = d0*...*dk-1
    rows of d = dk*...*dn-1 values; Y holds the rows' results in order (any shape of
    that size: keepdims or not). kind: "mean" (sum_rows, scale 1/d), "sum" or "max".
    """

    def __init__(self, shape, first_axis: int, kind: str):
        self.rows = int(np.prod(shape[:first_axis], dtype=np.int64))
        self.d = int(np.prod(shape[first_axis:], dtype=np.int64))
        if kind == "max":
            self.run, self.args = compiled.rowreduce.max_rows, (self.rows, self.d)
        else:
            self.run, self.args = compiled.rowreduce.sum_rows, (self.rows, self.d, 1.0 / self.d if kind == "mean" else 1.0)

    @staticmethod
    def fits(ctx, axes) -> bool:
        """float32, the axes X's last ones (at least one value each row), compiled.active()."""
        shape, n = ctx.shape(0), len(ctx.shape(0))
        return (compiled.active() and ctx.dtype(0) == np.float32 and len(axes) > 0
                and tuple(axes) == tuple(range(n - len(axes), n))
                and int(np.prod(shape[n - len(axes):], dtype=np.int64)) > 0)

    @classmethod
    def build(cls, ctx, axes, kind: str):
        """A TrailingReduce for these axes of input 0, or None where numpy runs."""
        axes = tuple(sorted(axes))
        return cls(ctx.shape(0), axes[0], kind) if cls.fits(ctx, axes) else None

    def __call__(self, x, out):
        self.run(x.reshape(-1), out.reshape(-1), *self.args)   # a view; a copy only if X were not contiguous


class _Reduce:
    """Reduce X over the axes resolved at reshape; writes the keepdims shape of `out`.

    Subclasses with a `trailing` kind ("mean", "sum", "max") run TrailingReduce where it fits.
    """

    trailing = None

    def __init__(self, ctx, *, axes=None, keepdims=1, noop_with_empty_axes=0):
        self.axes = reduce_axes(ctx)
        dtype = np.dtype(ctx.dtype(0))
        self.acc = np.dtype(np.float32) if dtype == np.float16 else dtype
        self.keep_shape = tuple(1 if i in self.axes else d for i, d in enumerate(ctx.shape(0)))
        self.rows = TrailingReduce.build(ctx, self.axes, self.trailing) if self.trailing else None
        self.setup(ctx)

    def setup(self, ctx):
        """Ask for workspace (subclasses that need a temporary of X's shape)."""

    def __call__(self, x, axes=None, *, out):
        if self.rows is not None:
            self.rows(x, out)
            return
        if not self.axes:
            np.copyto(out, x.reshape(out.shape))
            return
        self.reduce(x, out.reshape(self.keep_shape))

    def reduce(self, x, out):  # pragma: no cover - abstract
        raise NotImplementedError


@kernel("ReduceMean", since=(1, 11, 13, 18))
class ReduceMean(_Reduce):
    """Y = mean of X over `axes` (0 over an empty set). Spec: Operators.md#ReduceMean."""

    trailing = "mean"

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(0)
            return
        np.mean(x, axis=self.axes, keepdims=True, out=out)


@kernel("ReduceSum", since=(1, 11, 13))
class ReduceSum(_Reduce):
    """Y = sum of X over `axes` (axes an input from ReduceSum-13). Spec: Operators.md#ReduceSum."""

    trailing = "sum"

    def reduce(self, x, out):
        np.sum(x, axis=self.axes, keepdims=True, out=out, dtype=self.acc)


@kernel("ReduceProd", since=(1, 11, 13, 18))
class ReduceProd(_Reduce):
    """Y = product of X over `axes`. Spec: Operators.md#ReduceProd."""

    def reduce(self, x, out):
        np.prod(x, axis=self.axes, keepdims=True, out=out, dtype=self.acc)


def _extreme(dtype: np.dtype, lowest: bool):
    """-inf / +inf for floats, the type's minimum / maximum for integers, False / True for bools."""
    if dtype.kind == "f":
        return -np.inf if lowest else np.inf
    if dtype.kind == "b":
        return not lowest
    info = np.iinfo(dtype)
    return info.min if lowest else info.max


@kernel("ReduceMax", since=(1, 11, 12, 13, 18, 20))
class ReduceMax(_Reduce):
    """Y = max of X over `axes` (bool from ReduceMax-20, False < True). Spec: Operators.md#ReduceMax."""

    trailing = "max"

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(_extreme(x.dtype, lowest=True))
            return
        np.max(x, axis=self.axes, keepdims=True, out=out)


@kernel("ReduceMin", since=(1, 11, 12, 13, 18, 20))
class ReduceMin(_Reduce):
    """Y = min of X over `axes` (bool from ReduceMin-20, False < True). Spec: Operators.md#ReduceMin."""

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(_extreme(x.dtype, lowest=False))
            return
        np.min(x, axis=self.axes, keepdims=True, out=out)


# ---- norms and log-sums: one temporary of X's shape (per-Net scratch) -------------------
class _ReduceMapped(_Reduce):
    """Reduce f(X): f is applied into scratch of X's shape in the accumulation type.

    With noop_with_empty_axes=1 and no axes, the reduction is over no axis
    (numpy's axis=()): Y = f(X) element-wise (|X| for L1, X^2 for SumSquare,
    log X for LogSum...), as onnx's reference and onnxruntime compute it.
    """

    def setup(self, ctx):
        self.tmp = ctx.scratch(ctx.shape(0), self.acc)

    def __call__(self, x, axes=None, *, out):
        self.reduce(x, out.reshape(self.keep_shape))

    def mapped(self, x):
        t = self.tmp.array
        np.copyto(t, x)
        return t

    def total(self, x, out):
        """out (keepdims view) = sum over the axes of mapped(x), in the accumulation type."""
        np.sum(self.mapped(x), axis=self.axes, keepdims=True, out=out, dtype=self.acc)


@kernel("ReduceL1", since=(1, 11, 13, 18))
class ReduceL1(_ReduceMapped):
    """Y = sum |X| over `axes`. Spec: Operators.md#ReduceL1."""

    def mapped(self, x):
        return np.abs(x, out=self.tmp.array)

    reduce = _ReduceMapped.total


@kernel("ReduceSumSquare", since=(1, 11, 13, 18))
class ReduceSumSquare(_ReduceMapped):
    """Y = sum X^2 over `axes`. Spec: Operators.md#ReduceSumSquare."""

    def mapped(self, x):
        return np.square(x, out=self.tmp.array)

    reduce = _ReduceMapped.total


def _apply_float(fn, out):
    """out = fn(out), through float64 for integer outputs (truncated back, as the spec's reference)."""
    if out.dtype.kind == "f":
        fn(out, out=out)
    else:
        out[...] = fn(out.astype(np.float64))


@kernel("ReduceL2", since=(1, 11, 13, 18))
class ReduceL2(ReduceSumSquare):
    """Y = sqrt(sum X^2) over `axes`. Spec: Operators.md#ReduceL2."""

    def reduce(self, x, out):
        self.total(x, out)
        _apply_float(np.sqrt, out)


@kernel("ReduceLogSum", since=(1, 11, 13, 18, 28))
class ReduceLogSum(_ReduceMapped):
    """Y = log(sum X) over `axes` (-inf over an empty set). Spec: Operators.md#ReduceLogSum."""

    def reduce(self, x, out):
        self.total(x, out)
        with np.errstate(divide="ignore", invalid="ignore"):
            _apply_float(np.log, out)


@kernel("ReduceLogSumExp", since=(1, 11, 13, 18, 28))
class ReduceLogSumExp(_ReduceMapped):
    """Y = log(sum exp X) over `axes`, computed as m + log(sum exp(X - m)), m = max X.

    -inf over an empty set (and where every X is -inf). Integer inputs (up to
    ReduceLogSumExp-18) are computed in float64 and truncated. Spec:
    Operators.md#ReduceLogSumExp.
    """

    def setup(self, ctx):
        self.acc = self.acc if self.acc.kind == "f" else np.dtype(np.float64)
        super().setup(ctx)
        self.m = ctx.scratch(self.keep_shape, self.acc)
        self.s = ctx.scratch(self.keep_shape, self.acc)

    def reduce(self, x, out):
        if x.size == 0:
            out.fill(-np.inf)
            return
        m, s, t = self.m.array, self.s.array, self.tmp.array
        np.max(x, axis=self.axes, keepdims=True, out=m)
        m[~np.isfinite(m)] = 0  # all -inf (or an inf): exp(x - 0) gives the limit
        np.subtract(x, m, out=t)
        np.exp(t, out=t)
        np.sum(t, axis=self.axes, keepdims=True, out=s)
        with np.errstate(divide="ignore"):
            np.log(s, out=s)
        s += m
        np.copyto(out, s, casting="unsafe")
