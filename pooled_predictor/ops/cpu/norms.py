"""More normalization CPU kernels: RMSNormalization, GroupNormalization,
LpNormalization and MeanVarianceNormalization.

Statistics are computed in the op's stash type (RMSNormalization,
GroupNormalization-21: stash_type, default float32) or, for float16 inputs,
in float32; the rows of the statistics are (rows, cols) views of X, so a
forward pass writes only into its output and per-Net scratch.
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel
from ..shapes.normalization import STASH_DTYPES
from .normalization import _center_rows, _compute_dtype, _layernorm_check, _rows, _sum_squares


@kernel("RMSNormalization", since=23, check=_layernorm_check)
class RMSNormalization:
    """Y = X / sqrt(mean(X^2 over axes [axis, ..., rank-1]) + epsilon) * scale.

    The first stage in stash_type precision (1 = float32, the default; 10 =
    float16; 11 = float64), the result cast back to X's type, then multiplied
    by scale (broadcast unidirectionally to X). Zhang & Sennrich 2019,
    https://arxiv.org/abs/1910.07467; Spec: Operators.md#RMSNormalization.
    """

    def __init__(self, ctx, *, axis=-1, epsilon=1e-5, stash_type=1):
        shape = tuple(ctx.shape(0))
        axis = axis + len(shape) if axis < 0 else axis
        self.rows = int(np.prod(shape[:axis], dtype=np.int64))
        self.cols = int(np.prod(shape[axis:], dtype=np.int64))
        self.epsilon = epsilon
        self.stash = STASH_DTYPES[int(stash_type)]
        self.xs = ctx.scratch((self.rows, self.cols), self.stash)
        self.ms = ctx.scratch((self.rows,), self.stash)

    def __call__(self, x, scale, *, out):
        xs, ms = self.xs.array, self.ms.array
        np.copyto(xs, x.reshape(self.rows, self.cols))
        _sum_squares(xs, ms)
        ms /= self.cols
        ms += self.epsilon
        np.sqrt(ms, out=ms)
        xs /= ms[:, None]
        np.copyto(_rows(out, self.rows, self.cols), xs, casting="same_kind")
        np.multiply(out, scale, out=out)


@kernel("GroupNormalization", since=(18, 21), check=_layernorm_check)
class GroupNormalization:
    """y = scale * (x - mean) / sqrt(variance + epsilon) + bias, statistics per (instance, group).

    X (N, C, D1..Dk); the C channels form num_groups groups of C / num_groups
    consecutive channels. scale and bias: (C,) from GroupNormalization-21;
    (num_groups,), one per group, in the deprecated -18. The first stage runs
    in stash_type (-21) or float32 for float16. Wu & He 2018,
    https://arxiv.org/abs/1803.08494; Spec: Operators.md#GroupNormalization.
    """

    def __init__(self, ctx, *, num_groups, epsilon=1e-5, stash_type=1):
        shape = tuple(ctx.shape(0))
        if len(shape) < 2:
            raise ctx.error(f"X must have rank >= 2 (N, C, ...), got shape {shape}")
        n, c = shape[:2]
        g = int(num_groups)
        if g < 1 or c % g:
            raise ctx.error(f"num_groups={g} must divide the {c} channels")
        per_param = c if ctx.version >= 21 else g
        for i, name in ((1, "scale"), (2, "bias")):
            if tuple(ctx.shape(i)) != (per_param,):
                raise ctx.error(f"{name} must have shape ({per_param},) at GroupNormalization-"
                                f"{ctx.version}, got {tuple(ctx.shape(i))}")
        self.repeat = 1 if ctx.version >= 21 else c // g
        self.n, self.c, self.g = n, c, g
        self.rows, self.cols = n * g, (c // g) * int(np.prod(shape[2:], dtype=np.int64))
        ct = STASH_DTYPES[int(stash_type)] if ctx.version >= 21 else _compute_dtype(ctx.dtype(0))
        self.ct, self.epsilon = ct, epsilon
        self.d = ctx.scratch((self.rows, self.cols), ct)
        self.stats = ctx.scratch((2, self.rows), ct)

    def __call__(self, x, scale, bias, *, out):
        d = self.d.array
        mean, std = self.stats.array
        _center_rows(x.reshape(self.rows, self.cols), d, mean, std, self.epsilon, self.ct)
        d /= std[:, None]
        y = _rows(out, self.rows, self.cols)
        np.copyto(y, d, casting="same_kind")
        per_channel = out.reshape(self.n, self.c, -1)
        if self.repeat > 1:
            scale, bias = np.repeat(scale, self.repeat), np.repeat(bias, self.repeat)
        per_channel *= scale[:, None]
        per_channel += bias[:, None]


@kernel("LpNormalization", since=(1, 22))
class LpNormalization:
    """Y = X / ||X||_p along `axis` (p = 1: sum |x|; p = 2: sqrt(sum x^2)); 0 where the norm is 0.

    Spec: Operators.md#LpNormalization.
    """

    def __init__(self, ctx, *, axis=-1, p=2):
        shape = tuple(ctx.shape(0))
        if p not in (1, 2):
            raise ctx.error(f"p={p} must be 1 or 2")
        self.axis = axis + len(shape) if axis < 0 else axis
        self.p = p
        red = tuple(1 if i == self.axis else d for i, d in enumerate(shape))
        self.norm = ctx.scratch(red, _compute_dtype(ctx.dtype(0)))

    def __call__(self, x, *, out):
        nrm = self.norm.array
        if self.p == 1:
            np.abs(x, out=out)
            np.sum(out, axis=self.axis, keepdims=True, out=nrm)
        else:
            np.square(x, out=out)
            np.sum(out, axis=self.axis, keepdims=True, out=nrm)
            np.sqrt(nrm, out=nrm)
        nrm[nrm == 0] = 1  # a zero norm means X is 0 there: Y = 0 (the spec's 0/0 = 0)
        np.divide(x, nrm, out=out, casting="same_kind")


@kernel("MeanVarianceNormalization", since=(9, 13))
class MeanVarianceNormalization:
    """Y = (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9), expectations over `axes` (default N, H, W).

    As the spec's function body. Spec: Operators.md#MeanVarianceNormalization.
    """

    def __init__(self, ctx, *, axes=(0, 2, 3)):
        shape = tuple(ctx.shape(0))
        self.axes = tuple(a + len(shape) if a < 0 else a for a in axes)
        red = tuple(1 if i in self.axes else d for i, d in enumerate(shape))
        ct = _compute_dtype(ctx.dtype(0))
        self.mean = ctx.scratch(red, ct)
        self.sq = ctx.scratch(red, ct)

    def __call__(self, x, *, out):
        mean, sq = self.mean.array, self.sq.array
        np.mean(x, axis=self.axes, keepdims=True, out=mean)
        np.square(x, out=out)
        np.mean(out, axis=self.axes, keepdims=True, out=sq)
        sq -= mean * mean
        np.sqrt(sq, out=sq)
        sq += 1e-9
        np.subtract(x, mean, out=out)
        np.divide(out, sq, out=out, casting="same_kind")
