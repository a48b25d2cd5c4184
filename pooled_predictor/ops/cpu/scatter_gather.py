"""Element- and slice-indexed CPU kernels: GatherElements, GatherND,
ScatterElements (and its deprecated alias Scatter), ScatterND, TensorScatter.

Every kernel turns its indices into flat (linear) positions: the parts that
depend only on shapes (the offsets of the non-indexed axes) are computed once
at reshape, the indexed part per call into per-Net scratch. Gathers are then
one `np.take` into the output; scatters copy data into the output and write
the updates at those positions, with `ufunc.at` for the reductions (add, mul,
max, min), which applies duplicates one after the other in index order as the
spec's loops do. Indices in [-s, -1] count from the end of their axis (length
s); an index outside [-s, s-1] is an error (IndexError, reported by the Net as
KernelError naming the node).
"""

from __future__ import annotations

import numpy as np

from ..registry import kernel

REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def wrap_indices(idx: np.ndarray, sizes, what: str = "index") -> np.ndarray:
    """Indices with negatives counted from the end, checked against `sizes`.

    Args:
        idx: integer array.
        sizes: the axis length (int), or one length per entry of idx's last
            axis (a sequence, for GatherND / ScatterND tuples).
    Returns:
        int64 array of idx's shape, every entry in [0, size).
    Raises:
        IndexError: an entry is outside [-size, size - 1].
    """
    idx = np.asarray(idx)
    n = np.asarray(sizes, np.int64)
    if idx.size == 0:
        return idx.astype(np.int64, copy=False)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        limit = int(n if n.ndim == 0 else n[pos[-1]])
        raise IndexError(f"{what} {int(idx[pos])} at position {pos} is out of range "
                         f"[{-limit}, {limit - 1}]")
    return np.where(idx < 0, idx + n, idx).astype(np.int64, copy=False)


def element_strides(shape) -> np.ndarray:
    """Row-major strides of `shape` counted in elements (int64)."""
    st = np.ones(len(shape), np.int64)
    for i in range(len(shape) - 2, -1, -1):
        st[i] = st[i + 1] * shape[i + 1]
    return st


class _AlongAxis:
    """Flat positions data.flat[lin] of an element-indexed op (GatherElements, ScatterElements).

    lin[j] = sum_{i != axis} j_i * stride_i + wrap(indices[j]) * stride_axis for
    every position j of indices; the first part is fixed at reshape.
    """

    def __init__(self, ctx, axis: int):
        data, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1))
        self.axis = axis + len(data) if axis < 0 else axis
        self.n = data[self.axis]
        st = element_strides(data)
        self.step = int(st[self.axis])
        base = np.zeros(idx, np.int64)
        for i, d in enumerate(idx):
            if i != self.axis:
                base += (np.arange(d, dtype=np.int64) * st[i]).reshape((-1,) + (1,) * (len(idx) - i - 1))
        self.base = base
        self.lin = ctx.scratch(idx, np.int64)

    def positions(self, indices) -> np.ndarray:
        lin = self.lin.array
        np.multiply(wrap_indices(indices, self.n), self.step, out=lin)
        lin += self.base
        return lin


@kernel("GatherElements", since=(11, 13))
class GatherElements(_AlongAxis):
    """output[j] = data[j with j_axis replaced by indices[j]]; output has indices' shape.

    Spec: Operators.md#GatherElements.
    """

    def __init__(self, ctx, *, axis=0):
        super().__init__(ctx, axis)

    def __call__(self, data, indices, *, out):
        np.take(np.ascontiguousarray(data).reshape(-1), self.positions(indices), out=out)


def _reduction_check(attrs, version):
    """reduction: 'none' always; 'add'/'mul' from version 16; 'max'/'min' from 18."""
    r = attrs.get("reduction", "none")
    allowed = ("none",) + (("add", "mul") if version >= 16 else ()) + (("max", "min") if version >= 18 else ())
    if r not in allowed:
        return f"reduction={r!r} is not one of {allowed} at this version"
    return None


def _scatter(flat: np.ndarray, pos: np.ndarray, updates: np.ndarray, reduction: str) -> None:
    """flat[pos[i]] (op)= updates[i] in index order; rows when flat is 2-D."""
    if reduction == "none":
        flat[pos] = updates
    else:
        REDUCTIONS[reduction].at(flat, pos, updates)


@kernel("ScatterElements", since=(11, 13, 16, 18), check=_reduction_check)
@kernel("Scatter", since=(9, 11))
class ScatterElements(_AlongAxis):
    """output = data, then output[j with j_axis = indices[j]] (op)= updates[j] for every j.

    reduction: none (the last duplicate wins), add, mul (ScatterElements-16+),
    max, min (-18+). Scatter-9/11 is the deprecated name of the reduction-free
    form. Spec: Operators.md#ScatterElements.
    """

    def __init__(self, ctx, *, axis=0, reduction="none"):
        super().__init__(ctx, axis)
        self.reduction = reduction

    def __call__(self, data, indices, updates, *, out):
        np.copyto(out, data)
        pos = self.positions(indices).reshape(-1)
        _scatter(out.reshape(-1), pos, np.ascontiguousarray(updates).reshape(-1), self.reduction)


class _Tuples:
    """Row positions of index tuples over the leading k axes of `shape` (GatherND, ScatterND)."""

    def __init__(self, shape: tuple, k: int):
        self.sizes = shape[:k]
        self.strides = element_strides(self.sizes)
        self.rows = int(np.prod(self.sizes, dtype=np.int64))
        self.slice = int(np.prod(shape[k:], dtype=np.int64))

    def rows_of(self, indices) -> np.ndarray:
        """(...,) row numbers of the (..., k) index tuples."""
        return wrap_indices(indices, self.sizes) @ self.strides


@kernel("GatherND", since=(11, 12, 13))
class GatherND:
    """output[b.., i..] = data[b.., indices[b.., i.., :]] (a slice when k < rank - batch_dims).

    b: the first `batch_dims` axes (GatherND-12+), shared by data and indices;
    output shape indices.shape[:-1] + data.shape[batch_dims + k:], k =
    indices.shape[-1]. Spec: Operators.md#GatherND.
    """

    def __init__(self, ctx, *, batch_dims=0):
        data, idx = tuple(ctx.shape(0)), tuple(ctx.shape(1))
        b = int(batch_dims)
        self.batch = int(np.prod(data[:b], dtype=np.int64))
        self.tuples = _Tuples(data[b:], idx[-1])
        self.idx_view = (self.batch, -1, idx[-1])
        per = int(np.prod(idx[b:-1], dtype=np.int64))  # index tuples per batch item
        self.offset = (np.arange(self.batch, dtype=np.int64) * self.tuples.rows)[:, None]
        self.out_view = (self.batch * per, self.tuples.slice)

    def __call__(self, data, indices, *, out):
        t = self.tuples
        rows = t.rows_of(indices.reshape(self.idx_view)) + self.offset
        src = np.ascontiguousarray(data).reshape(self.batch * t.rows, t.slice)
        np.take(src, rows.reshape(-1), axis=0, out=out.reshape(self.out_view))


@kernel("ScatterND", since=(11, 13, 16, 18), check=_reduction_check)
class ScatterND:
    """output = data, then output[indices[i..]] (op)= updates[i..] for every index tuple.

    indices (..., k) address elements (k = rank) or slices (k < rank) of data;
    updates have shape indices.shape[:-1] + data.shape[k:]. reduction: none,
    add, mul (ScatterND-16+), max, min (-18+); duplicates apply in index order.
    Spec: Operators.md#ScatterND.
    """

    def __init__(self, ctx, *, reduction="none"):
        self.tuples = _Tuples(tuple(ctx.shape(0)), ctx.shape(1)[-1])
        self.reduction = reduction

    def __call__(self, data, indices, updates, *, out):
        t = self.tuples
        np.copyto(out, data)
        rows = t.rows_of(indices).reshape(-1)
        _scatter(out.reshape(t.rows, t.slice), rows,
                 np.ascontiguousarray(updates).reshape(-1, t.slice), self.reduction)


@kernel("TensorScatter", since=24)
class TensorScatter:
    """present_cache = past_cache with update written along `axis` at write_indices[b] per batch b.

    Positions write_indices[b] + s for s < update.shape[axis] (default
    write_indices 0), modulo the cache length with mode="circular"; with
    mode="linear" they must fit in the cache. Spec: Operators.md#TensorScatter
    (KV-cache update).
    """

    def __init__(self, ctx, *, axis=-2, mode="linear"):
        if mode not in ("linear", "circular"):
            raise ctx.error(f"mode={mode!r} must be 'linear' or 'circular'")
        past, upd = tuple(ctx.shape(0)), tuple(ctx.shape(1))
        axis = axis + len(past) if axis < 0 else axis
        self.circular = mode == "circular"
        inner = int(np.prod(past[axis + 1:], dtype=np.int64))
        mid = int(np.prod(past[1:axis], dtype=np.int64))
        self.m, self.seq, self.b = past[axis], upd[axis], past[0]
        # (B, M, P, T) views: batch, sequence, the axes between, the axes after.
        self.out_view = ((self.b, mid, self.m, inner), (0, 2, 1, 3))
        self.upd_view = ((self.b, mid, self.seq, inner), (0, 2, 1, 3))
        self.steps = np.arange(self.seq, dtype=np.int64)
        self.batches = np.arange(self.b, dtype=np.int64)[:, None]

    def __call__(self, past, update, write_indices=None, *, out):
        np.copyto(out, past)
        start = (np.zeros((self.b, 1), np.int64) if write_indices is None
                 else np.asarray(write_indices, np.int64).reshape(self.b, 1))
        pos = start + self.steps
        if self.circular:
            pos %= self.m
        elif self.seq and (pos.min() < 0 or pos.max() >= self.m):
            raise IndexError(f"write_indices {start.ravel().tolist()} + {self.seq} update steps do not "
                             f"fit in the cache length {self.m} (mode='linear')")
        shape, perm = self.out_view
        o = out.reshape(shape).transpose(perm)
        shape, perm = self.upd_view
        o[self.batches, pos] = np.ascontiguousarray(update).reshape(shape).transpose(perm)
