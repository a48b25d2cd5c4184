"""Shape-changing CPU kernels: Reshape, Flatten, Expand, Tile, Pad,
ConstantOfShape, Range, Constant.

Output shapes come from the rules in ops/shapes/reshape.py (read from static
input values at reshape, or per forward when those values are fed). Reshape
and Flatten copy into their output (`inplace=(0,)`: when the memory planner
gives the output the input's storage the copy is a no-op).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..registry import kernel
from ..shapes.reshape import (CONSTANT_ATTRS, PAD_MODES, PAD_MODES_19, constant_value, pad_amounts,
                              range_compute_dtype)
from . import compiled, views
from .tensor import prepare_reshaped

_LATEST = (21, 23, 24, 25)  # versions that only widened the type constraints


# ---- Reshape, Flatten ----------------------------------------------------------
@kernel("Reshape", since=(5, 13, 14, 19) + _LATEST, inplace=(0,))
def reshape(data, shape, *, out, allowzero=0):
    """reshaped = data with the shape the rule resolved (-1 inferred; 0 copies the
    input's dim, or is a literal 0 with allowzero=1, Reshape-14+). Spec: Operators.md#Reshape."""
    np.copyto(out, data.reshape(out.shape))


@kernel("Flatten", since=(1, 9, 11, 13) + _LATEST, inplace=(0,))
def flatten(x, *, out, axis=1):
    """Y (prod(d[:axis]), prod(d[axis:])) = X flattened at `axis` in [-r, r]. Spec: Operators.md#Flatten."""
    np.copyto(out, x.reshape(out.shape))


# ---- Expand, Tile ----------------------------------------------------------------
reshape.prepare_run = flatten.prepare_run = prepare_reshaped


@kernel("Expand", since=(8, 13))
def expand(x, shape, *, out):
    """Y = X broadcast (numpy rules, both ways) with `shape`. Spec: Operators.md#Expand."""
    np.copyto(out, x)


@kernel("Tile", since=(6, 13))
def tile(x, repeats, *, out):
    """Y = numpy.tile(X, repeats), Y.shape[i] = X.shape[i] * repeats[i]. Spec: Operators.md#Tile.

    Written as one broadcast copy: Y viewed as (r_0, d_0, r_1, d_1, ...)
    receives X viewed as (1, d_0, 1, d_1, ...).
    """
    reps = [int(r) for r in np.asarray(repeats).reshape(-1)]
    y_view = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    x_view = [v for d in x.shape for v in (1, d)]
    np.copyto(out.reshape(y_view), x.reshape(x_view))


# ---- Pad ---------------------------------------------------------------------
def _pad_check(attrs, version):
    mode = str(attrs.get("mode", "constant"))
    allowed = PAD_MODES_19 if version >= 19 else PAD_MODES
    if mode not in allowed:
        return f"mode={mode!r} is not a Pad-{version} mode; expected one of {list(allowed)}"
    return None


def _as_slice(src: np.ndarray):
    """A slice equivalent to an index array when it is a run (step 1 or -1) or one repeated index.

    A slice copy is a strided view (no gather); one repeated index broadcasts.
    Returns the index array itself otherwise (wrap over several periods, say).
    """
    if src.size == 0:
        return src
    first, last = int(src[0]), int(src[-1])
    if np.all(src == first):
        return slice(first, first + 1)
    step = 1 if last > first else -1
    if np.array_equal(src, np.arange(first, last + step, step)):
        return slice(first, last + step if last + step >= 0 else None, step)
    return src


def _source_index(mode: str, rel: np.ndarray, n: int) -> np.ndarray:
    """Input index (in [0, n)) that output position `rel` (relative to the data's start) copies."""
    if mode == "edge":
        return np.clip(rel, 0, n - 1)
    if mode == "wrap":
        return np.mod(rel, n)
    if n == 1:  # reflect over a single value
        return np.zeros_like(rel)
    period = 2 * (n - 1)
    m = np.mod(rel, period)
    return np.where(m < n, m, period - m)


@kernel("Pad", since=(2, 11, 13, 18, 19) + _LATEST, check=_pad_check)
class Pad:
    """output = data padded (or cropped, for negative pads) at both ends of each axis.

    Output dim i = d_i + begin_i + end_i. Negative pads first remove elements
    (the data is cropped); positive pads are then filled per `mode`:

    * constant: `value` (Pad-2 attribute) or the `constant_value` input (Pad-11+;
      default 0, '' for strings, False for bools);
    * edge: the nearest edge value;
    * reflect: the mirror image without repeating the edge value (numpy 'reflect',
      repeated when the pad exceeds the data);
    * wrap (Pad-19+): periodic, as if the data formed a torus.

    pads: Pad-2 attribute, Pad-11+ input [x1_begin, x2_begin, ..., x1_end, ...];
    Pad-18+ optional `axes` input names the axes they apply to.
    The kept data is copied once into the output's interior; borders are then
    filled axis by axis from the interior rows, by one strided copy (a run of
    rows, or one edge row broadcast) or, for pads longer than the data, one
    `take` with an index map built at reshape. Spec: Operators.md#Pad.
    """

    def __init__(self, ctx, *, mode="constant", pads=None, value=0.0):
        self.mode = str(mode)
        shape = tuple(ctx.shape(0))
        begins, ends = pad_amounts(ctx)
        self.crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(shape, begins, ends))
        kept = [s.stop - s.start for s in self.crop]
        heads = [max(b, 0) for b in begins]
        self.inner = tuple(slice(h, h + n) for h, n in zip(heads, kept))
        self.borders = []   # (axis, head slice, head source, tail slice, tail source)
        for axis, (h, n, e) in enumerate(zip(heads, kept, (max(e, 0) for e in ends))):
            if h == 0 and e == 0:
                continue
            head_src = tail_src = None
            if self.mode != "constant":
                head_src = _as_slice(h + _source_index(self.mode, np.arange(-h, 0), n))
                tail_src = _as_slice(h + _source_index(self.mode, np.arange(n, n + e), n))
            self.borders.append((axis, slice(0, h), head_src, slice(h + n, h + n + e), tail_src))
        self.value = None
        if self.mode == "constant":
            if ctx.version < 11:
                self.value = value
            elif not ctx.has_input(2):
                self.value = "" if ctx.dtype(0) == object else 0
            elif ctx.is_static(2):
                self.value = self._scalar(ctx.value(2), ctx.dtype(0))

    @staticmethod
    def _scalar(v, dtype):
        v = np.asarray(v).reshape(-1)
        if v.size == 0:
            return "" if dtype == object else 0
        return v[0]

    def prepare_run(self, data, pads=None, constant_value=None, axes=None, *, out):
        """__call__'s copies bound to these arrays, their views taken once (the constant fed at forward:
        None, the plain call)."""
        if self.mode == "constant" and self.value is None:
            return None
        inner, kept = out[self.inner], data[self.crop]
        calls = [partial(np.copyto, inner, kept)]
        if self.mode == "constant":
            copy = views.copy_call(data, kept, out, inner)  # compiled calls a native run takes (views.py)
            fill = views.fill_call(out, self.value) if self.borders else None
            if copy is not None and (fill is not None or not self.borders):
                return compiled.chain(fill, copy)  # the whole of Y filled, then its interior written
            for axis, head, _, tail, _ in self.borders:
                pre = (slice(None),) * axis
                calls += [partial(out[pre + (head,)].fill, self.value), partial(out[pre + (tail,)].fill, self.value)]
            return compiled.chain(*calls)
        return compiled.chain(*calls, *self._border_copies(out))

    def _border_copies(self, out) -> list:
        """The copies that fill out's borders from its own cells (modes other than "constant"), in order:
        axes already padded are read over their full extent, later ones over the interior only."""
        calls, rank = [], out.ndim
        done = [False] * rank
        for axis, head, head_src, tail, tail_src in self.borders:
            view = out[tuple(slice(None) if done[i] or i == axis else self.inner[i] for i in range(rank))]
            pre = (slice(None),) * axis
            for dst, src in ((head, head_src), (tail, tail_src)):
                if isinstance(src, slice):
                    calls.append(partial(np.copyto, view[pre + (dst,)], view[pre + (src,)]))
                elif src.size:
                    calls.append(partial(np.take, view, src, axis, view[pre + (dst,)], "clip"))
            done[axis] = True
        return calls

    def __call__(self, data, pads=None, constant_value=None, axes=None, *, out):
        np.copyto(out[self.inner], data[self.crop])
        if self.mode == "constant":
            value = self.value if self.value is not None else self._scalar(constant_value, out.dtype)
            for axis, head, _, tail, _ in self.borders:
                pre = (slice(None),) * axis
                out[pre + (head,)] = value
                out[pre + (tail,)] = value
            return
        for copy in self._border_copies(out):
            copy()


# ---- ConstantOfShape, Range, Constant -----------------------------------------------
def _constant_of_shape_check(attrs, version):
    value = attrs.get("value")
    if value is None:
        return None
    value = np.asarray(value)
    if value.dtype.kind == "V":
        return (f"value of type {value.dtype} (bfloat16, float8, int4) has no numpy kernel here; "
                f"use a float32 or integer value")
    if value.size != 1:
        return f"value must hold exactly one element, got shape {value.shape}"
    return None


@kernel("ConstantOfShape", since=(9, 20) + _LATEST, check=_constant_of_shape_check)
def constant_of_shape(shape, *, out, value=None):
    """output (shape given by the input's value; empty: a scalar) filled with `value`'s
    one element (default float32 0). Spec: Operators.md#ConstantOfShape."""
    out[...] = 0 if value is None else np.asarray(value).reshape(-1)[0]


@kernel("Range", since=(11, 27))
def range_(start, limit, delta, *, out, stash_type=1):
    """output[i] = start + i * delta for i < max(ceil((limit - start) / delta), 0).

    Range-27: float16 computes in float32 (stash_type=1, default) or float64
    (stash_type=11), then rounds once. Spec: Operators.md#Range.
    """
    compute = range_compute_dtype(out.dtype, stash_type)
    if compute.kind in "iu":
        steps = np.arange(out.shape[0], dtype=np.int64)
        np.copyto(out, steps * int(delta) + int(start), casting="unsafe")
        return
    s, d = (np.asarray(v).reshape(()).astype(compute) for v in (start, delta))
    steps = np.arange(out.shape[0], dtype=compute)
    np.copyto(out, steps * d + s, casting="unsafe")


def _constant_check(attrs, version):
    given = [a for a in CONSTANT_ATTRS if a in attrs]
    if len(given) != 1:
        return f"exactly one of {list(CONSTANT_ATTRS)} must be set, got {given}"
    if constant_value(attrs).dtype.kind == "V":
        return "value of type bfloat16, float8 or int4 has no numpy kernel here"
    return None


@kernel("Constant", since=(1, 9, 11, 12, 13, 19) + _LATEST, check=_constant_check)
def constant(*, out, value=None, sparse_value=None, value_float=None, value_floats=None,
             value_int=None, value_ints=None, value_string=None, value_strings=None):
    """output = the one value attribute (value, sparse_value (densified at import),
    value_float(s) float32, value_int(s) int64, value_string(s)). The importer turns
    Constant nodes into weights; this kernel runs one that reaches a Net anyway.
    Spec: Operators.md#Constant."""
    attrs = {k: v for k, v in (("value", value), ("sparse_value", sparse_value),
                               ("value_float", value_float), ("value_floats", value_floats),
                               ("value_int", value_int), ("value_ints", value_ints),
                               ("value_string", value_string), ("value_strings", value_strings))
             if v is not None}
    out[...] = constant_value(attrs)
