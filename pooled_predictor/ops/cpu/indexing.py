"""Indexing CPU kernels: Gather, Slice, Split, TopK, ArgMax, ArgMin.

Index geometry (slices, split sizes, k) is resolved once at reshape by the
helpers of ops/shapes/indexing.py; the kernels then copy with numpy views,
`take` and one stable sort (TopK).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..registry import kernel
from . import views
from ..shapes.indexing import slice_params, split_sizes, topk_k
from ..shapes.reduce import reduced_shape


# ---- Gather ------------------------------------------------------------------
@kernel("Gather", since=(1, 11, 13))
class Gather:
    """output = take(data, indices, axis): data.shape[:axis] + indices.shape + data.shape[axis+1:].

    output[j_0.., i_0.., j_axis+1..] = data[j_0.., indices[i_0..], j_axis+1..];
    an index in [-s, -1] counts from the end of the axis (length s); an index
    outside [-s, s-1] is an error naming the node. Indices that are weights are
    checked and normalized once at reshape. Spec: Operators.md#Gather.
    """

    def __init__(self, ctx, *, axis=0):
        self.axis = axis + len(ctx.shape(0)) if axis < 0 else axis
        self.size = ctx.shape(0)[self.axis]
        self.indices = None
        if ctx.is_static(1):
            try:
                self.indices = self._normalize(np.asarray(ctx.value(1)))
            except IndexError as exc:
                raise ctx.error(str(exc)) from None

    def _normalize(self, idx: np.ndarray) -> np.ndarray:
        n = self.size
        if idx.size:
            lo, hi = int(idx.min()), int(idx.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of range [{-n}, {n - 1}] for axis "
                                 f"{self.axis} of length {n}")
            if lo < 0:
                idx = np.where(idx < 0, idx + n, idx)
        return idx

    def __call__(self, data, indices, *, out):
        idx = self.indices if self.indices is not None else self._normalize(indices)
        np.take(data, idx, axis=self.axis, out=out, mode="clip")

    def prepare_run(self, data, indices, *, out):
        """With indices a weight (checked at reshape): one index or a run of them (a view of data) as a
        compiled copy (views.py: joins a native run), else numpy.take bound to these arrays."""
        if self.indices is None:
            return None
        idx = self.indices
        pick = None
        if idx.ndim == 0:
            pick = int(idx)
        elif idx.ndim == 1 and idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
            pick = slice(int(idx[0]), int(idx[0]) + idx.size)
        if pick is not None:
            view = data[(slice(None),) * self.axis + (pick,)]
            call = views.copy_call(data, view, out, out) if view.shape == out.shape else None
            if call is not None:
                return call
        return partial(np.take, data, self.indices, self.axis, out, "clip")


# ---- Slice -------------------------------------------------------------------
@kernel("Slice", since=(1, 10, 11, 13))
class Slice:
    """output = data[start_i:end_i:step_i per axis], with ONNX's clamping (Slice-13 text).

    Slice-1 takes starts/ends/axes as attributes; Slice-10+ as inputs, with
    optional steps (negative: backward). Missing axes default to 0..n-1 and
    steps to 1; INT_MAX / INT_MIN ends mean "to the end". The slices are
    resolved at reshape (ops/shapes/indexing.slice_params). Spec: Operators.md#Slice.
    """

    def __init__(self, ctx, *, starts=None, ends=None, axes=None):
        self.index = slice_params(ctx)

    def __call__(self, data, starts=None, ends=None, axes=None, steps=None, *, out):
        np.copyto(out, data[self.index])

    def prepare_run(self, data, starts=None, ends=None, axes=None, steps=None, *, out):
        """The copy from data's slice (a view, taken once) bound to these arrays: compiled where it can be
        (views.py: joins a native run), else numpy's copyto."""
        view = data[self.index]
        return views.copy_call(data, view, out, out) or partial(np.copyto, out, view)


# ---- Split -------------------------------------------------------------------
@kernel("Split", since=(2, 11, 13, 18))
class Split:
    """outputs[j] = input[..., o_j:o_j + s_j, ...] along `axis`, o_j = s_0 + ... + s_{j-1}.

    Sizes s_j: `split` attribute (Split-2/11) or input (Split-13+); else
    `num_outputs` chunks of ceil(d / n) with a smaller last one (Split-18); else
    equal parts. Spec: Operators.md#Split.
    """

    def __init__(self, ctx, *, axis=0, split=None, num_outputs=None):
        axis, sizes = split_sizes(ctx)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        pre = (slice(None),) * axis
        self.parts = [pre + (slice(a, b),) for a, b in zip(offsets[:-1], offsets[1:])]

    def __call__(self, x, split=None, *, out):
        for o, part in zip(out, self.parts):
            if o is not None:
                np.copyto(o, x[part])


# ---- TopK --------------------------------------------------------------------
@kernel("TopK", since=(1, 10, 11, 24))
class TopK:
    """Values, Indices = the k largest (largest=1) or smallest elements along `axis`.

    Sorted by value (descending for largest), ties broken by the lower index
    first, as the spec and onnxruntime do; with sorted=0 the order is
    unspecified and this kernel returns them sorted. k: attribute (TopK-1) or
    input K (TopK-10+); largest and sorted from TopK-11. Indices are int64.
    One stable argsort along the axis (k == 1 takes an argmax instead); when k is at most
    n / PARTITION_RATIO and the rows are few and hold no NaN, a selection instead
    (np.partition: the k-th value; the elements beyond it and the lowest-index ones equal
    to it; those k sorted): O(n + k log k) a row, the same indices (a detector's
    per-class TopK of 300 among 3,234 scores: 0.05 ms instead of 0.4).
    Spec: Operators.md#TopK.
    """

    PARTITION_RATIO = 4
    PARTITION_ROWS = 64

    def __init__(self, ctx, *, axis=-1, k=None, largest=1, sorted=1):
        self.axis, self.k = topk_k(ctx)
        self.n = ctx.shape(0)[self.axis]
        self.largest = bool(largest)

    def _order(self, x: np.ndarray) -> np.ndarray:
        """Indices of the first k elements along the axis in output order."""
        ax, k, n = self.axis, self.k, self.n
        if k == 1:
            pick = np.argmax if self.largest else np.argmin
            return pick(x, axis=ax, keepdims=True)
        if k * self.PARTITION_RATIO <= n and x.size <= n * self.PARTITION_ROWS \
                and not (x.dtype.kind in "fc" and np.isnan(x).any()):
            return self._selected(x)
        if not self.largest:
            return np.argsort(x, axis=ax, kind="stable").take(range(k), axis=ax)
        # Descending with ties in ascending index order: stable ascending sort of
        # the reversed axis, read backwards, indices mapped back.
        rev = np.flip(x, axis=ax)
        order = np.argsort(rev, axis=ax, kind="stable").take(range(n - 1, n - 1 - k, -1), axis=ax)
        return (n - 1) - order

    def _selected(self, x: np.ndarray) -> np.ndarray:
        """_order by selection (class docstring), row by row along the last axis; no NaN in x."""
        ax, k, n = self.axis, self.k, self.n
        rows = np.moveaxis(x, ax, -1).reshape(-1, n)
        res = np.empty((rows.shape[0], k), np.int64)
        for j, row in enumerate(rows):
            if self.largest:
                v = np.partition(row, n - k)[n - k]  # the k-th largest
                beyond = np.flatnonzero(row > v)
            else:
                v = np.partition(row, k - 1)[k - 1]  # the k-th smallest
                beyond = np.flatnonzero(row < v)
            ties = np.flatnonzero(row == v)[:k - len(beyond)]  # at least one: v itself
            sel = np.sort(np.concatenate([beyond, ties]))  # ascending index
            if self.largest:  # descending value, ties by ascending index: a stable sort of the reversed, read back
                r = sel[::-1]
                res[j] = r[np.argsort(row[r], kind="stable")[::-1]]
            else:
                res[j] = sel[np.argsort(row[sel], kind="stable")]
        shape = list(np.moveaxis(x, ax, -1).shape[:-1]) + [k]
        return np.moveaxis(res.reshape(shape), -1, ax)

    def __call__(self, x, k=None, *, out):
        values, indices = out
        if self.k == 0:
            return
        order = self._order(x)
        if values is not None:
            np.copyto(values, np.take_along_axis(x, order, axis=self.axis))
        if indices is not None:
            np.copyto(indices, order)


# ---- ArgMax, ArgMin ------------------------------------------------------------
@kernel("ArgMax", since=(1, 11, 12, 13))
class ArgMax:
    """reduced = index of the maximum of `data` along `axis` (int64).

    keepdims keeps the reduced axis as length 1; select_last_index (ArgMax-12+)
    picks the last of equal maxima instead of the first. Spec: Operators.md#ArgMax.
    """

    arg = staticmethod(np.argmax)

    def __init__(self, ctx, *, axis=0, keepdims=1, select_last_index=0):
        shape = tuple(ctx.shape(0))
        self.axis = axis + len(shape) if axis < 0 else axis
        self.keep_shape = reduced_shape(shape, (self.axis,), True)
        self.last = bool(select_last_index)
        self.n = shape[self.axis]

    def __call__(self, data, *, out):
        y = out.reshape(self.keep_shape)
        if self.last:
            self.arg(np.flip(data, axis=self.axis), axis=self.axis, keepdims=True, out=y)
            np.subtract(self.n - 1, y, out=y)
        else:
            self.arg(data, axis=self.axis, keepdims=True, out=y)


@kernel("ArgMin", since=(1, 11, 12, 13))
class ArgMin(ArgMax):
    """reduced = index of the minimum of `data` along `axis` (int64); as ArgMax otherwise.

    Spec: Operators.md#ArgMin.
    """

    arg = staticmethod(np.argmin)
