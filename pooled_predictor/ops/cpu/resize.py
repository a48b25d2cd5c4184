"""Resize CPU kernel (ONNX Resize 10, 11, 13, 18, 19): nearest, linear, cubic,
antialias, every coordinate transformation mode.

Resize is separable: out = A_1 A_2 ... A_n X, where A_k resamples axis k only.
At reshape the kernel builds, for every axis whose scale is not 1, a table of
source indices and weights, idx (O, K) and w (O, K): output o along the axis is
sum_k w[o, k] * X[idx[o, k]] (nearest: K = 1, no weights; linear: K = 2;
cubic: K = 4; antialias: K = the filter width). A forward applies the tables
axis by axis with np.take into workspace and finally into `out`: a loop over
axes and taps, never over pixels. The tables come from the static scales /
sizes / roi; a roi only known at forward is read then (scales or sizes only
known at forward make the Net re-run reshape per forward, see shapes/resize.py).

Nearest tables that are plain strided slices or integer repeats (the PP-OCR
detector's nearest/asymmetric/floor x2 upsampling) skip the gathers: one
broadcast copy from a strided view of X into a reshaped view of `out`.

float32 nearest and linear resizes of the last two axes only (static tables,
no extrapolation, no antialias) run compiled when compiled.active()
(compiled/resize.py: each output row written once, from the same tables and
with the same float32 operations); the numpy paths are the tested reference.

Arithmetic follows onnxruntime (our users' reference): coordinates in float32
in onnxruntime's order of operations, and a coordinate within 1e-6 of a half
rounds as the half (this decides the nearest pixel); an axis with scale
exactly 1 is left alone, an output shaped like the input is a copy; linear
clamps the source coordinate into the input; cubic and antialias replicate
the edge unless exclude_outside; antialias is Pillow's filter widened by
1/scale when downsampling, and copies an axis whose length does not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..context import NotStatic
from ..registry import kernel
from . import compiled
from ..shapes.resize import attr_str, resize_axes, resize_sizes, upsample_as_resize

F32 = np.float32
# Nearest resizes run compiled from this many output elements; below, numba's call
# overhead loses to the numpy views (4x5x5 x2: 8.4 vs 5.7 us; 8x8x8 x2: 7.9 vs
# 8.4 us; one thread, measured). Linear runs compiled at every size (4x5x6 x2: 10 vs 85 us).
RESIZE_NEAREST_COMPILED_MIN_OUTPUT = 2048
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "tf_half_pixel_for_nn", "tf_crop_and_resize")

# ---- coordinate transformation (ONNX Resize, coordinate_transformation_mode) ----------


def source_coordinates(mode: str, n_out: int, n_in: int, scale, roi_start=0.0, roi_end=1.0) -> np.ndarray:
    """x_original for every output index along one axis, float32 as onnxruntime computes it.

    half_pixel: (x + 0.5) / scale - 0.5;  pytorch_half_pixel: the same, 0 when n_out = 1;
    asymmetric: x / scale;  tf_half_pixel_for_nn (Resize-11): (x + 0.5) / scale;
    align_corners: x * (n_in - 1) / (n_out - 1), 0 when n_out = 1;
    half_pixel_symmetric: offset + (x + 0.5) / scale - 0.5 with
        offset = n_in / 2 * (1 - n_out / (scale * n_in));
    tf_crop_and_resize: roi_start * (n_in - 1) + x * (roi_end - roi_start) * (n_in - 1) / (n_out - 1),
        0.5 * (roi_start + roi_end) * (n_in - 1) when n_out = 1.
    """
    x = np.arange(n_out, dtype=F32)
    s, len_out, len_in, half = F32(scale), F32(n_out), F32(n_in), F32(0.5)
    if mode == "asymmetric":
        return x / s
    if mode == "half_pixel":
        return (x + half) / s - half
    if mode == "pytorch_half_pixel":
        return (x + half) / s - half if n_out > 1 else np.zeros(n_out, F32)
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / s
    if mode == "align_corners":
        return x * (len_in - F32(1)) / (len_out - F32(1)) if n_out != 1 else np.zeros(n_out, F32)
    if mode == "half_pixel_symmetric":       # onnxruntime mixes float and double here
        adjustment = len_out / (s * len_in)
        offset = (len_in / F32(2)) * (F32(1) - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(F32)
    if mode == "tf_crop_and_resize":
        r0, r1 = F32(roi_start), F32(roi_end)
        if n_out > 1:
            return r0 * (len_in - F32(1)) + (x * (r1 - r0) * (len_in - F32(1))) / (len_out - F32(1))
        return np.full(n_out, F32(0.5 * np.float64(r0 + r1) * np.float64(len_in - F32(1))), F32)
    raise ValueError(f"coordinate_transformation_mode={mode!r} is not one of {', '.join(COORDINATE_MODES)}")


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): halves go away from zero."""
    return np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5))


NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
HALF_TOLERANCE = 1e-6


def nearest_index(x32: np.ndarray, mode: str, downsampling: bool) -> np.ndarray:
    """The nearest source pixel (before clamping) per ONNX nearest_mode.

    round_prefer_floor / round_prefer_ceil: round, halves down / up; as
    onnxruntime (measured on 1.32), a coordinate within 1e-6 of a half counts
    as the half, so float32 noise in x / scale does not flip the choice;
    floor / ceil (exact); "simple" (Resize-10): ceil when downsampling, else truncate.
    """
    x = x32.astype(np.float64)
    if mode == "floor":
        return np.floor(x).astype(np.int64)
    if mode == "ceil":
        return np.ceil(x).astype(np.int64)
    if mode == "simple":
        return (np.ceil(x) if downsampling else np.trunc(x)).astype(np.int64)
    below = np.floor(x)
    half = np.abs(x - below - 0.5) < HALF_TOLERANCE
    if mode == "round_prefer_ceil":
        r = np.where(half, below + 1, _round_half_away(x))
    elif mode == "round_prefer_floor":
        r = np.where(half, below, _round_half_away(x))
    else:
        raise ValueError(f"nearest_mode={mode!r} is not one of {', '.join(NEAREST_MODES)}")
    return r.astype(np.int64)


def cubic_coefficients(s: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the 4 pixels floor(x) - 1 .. floor(x) + 2, s = x - floor(x)."""
    s = np.abs(s.astype(np.float64))[:, None]
    t = np.concatenate([s + 1, s, 1 - s, 2 - s], axis=1)
    near = ((a + 2) * t - (a + 3)) * t * t + 1                 # |t| <= 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a            # 1 < |t| < 2
    return np.where(t <= 1, near, far)


def _pillow_filter(mode: str, a: float):
    if mode == "linear":
        return lambda x: np.maximum(F32(0), F32(1) - np.abs(x))

    def cubic(x):
        x = np.abs(x)
        near = ((F32(a) + F32(2)) * x - (F32(a) + F32(3))) * x * x + F32(1)
        far = (((x - F32(5)) * x + F32(8)) * x - F32(4)) * F32(a)
        return np.where(x < 1, near, np.where(x < 2, far, F32(0))).astype(F32)

    return cubic


# ---- per-axis tables ------------------------------------------------------------------
@dataclass
class AxisTable:
    """Resampling of one axis: out[o] = sum_k w[o, k] * in[idx[o, k]] (w None: nearest, K = 1)."""

    axis: int
    idx: np.ndarray | None           # (O, K) intp, inside [0, n_in); None: extrapolation only
    w: np.ndarray | list | None      # (O, K) weights, or None; the kernel keeps one array per tap
    extrapolate: np.ndarray | None   # (O,) bool: tf_crop_and_resize outputs outside the input

    def as_view(self, n_in: int):
        """('slice', slice) or ('repeat', r) when a nearest table is one, else None."""
        if self.w is not None or self.extrapolate is not None:
            return None
        i = self.idx[:, 0]
        n = len(i)
        if n and n % n_in == 0 and n > n_in and np.array_equal(i, np.arange(n) // (n // n_in)):
            return ("repeat", n // n_in)
        step = int(i[1] - i[0]) if n > 1 else 1
        if n and step >= 1 and np.array_equal(i, i[0] + step * np.arange(n)):
            return ("slice", slice(int(i[0]), int(i[0]) + step * (n - 1) + 1, step))
        return None


def axis_table(axis, n_in, n_out, scale, ctm, roi, *, mode, nearest_mode, cubic_coeff_a,
               exclude_outside, antialias, extrapolate) -> AxisTable:
    """The table of one axis (see the module doc for the onnxruntime conventions)."""
    orig = source_coordinates(ctm, n_out, n_in, scale, *roi)
    last = n_in - 1
    ext = ((orig < 0) | (orig > F32(last))) if extrapolate else None
    if ext is not None and not ext.any():
        ext = None
    if mode == "nearest":
        i = np.clip(nearest_index(orig, nearest_mode, F32(scale) < 1), 0, last)
        return AxisTable(axis, i.astype(np.intp)[:, None], None, ext)
    if antialias:
        return _antialias_table(axis, n_in, orig, scale, mode, cubic_coeff_a, exclude_outside, ext)
    if mode == "linear":
        v = np.clip(orig, F32(0), F32(last))
        i1 = np.minimum(v.astype(np.int64), last)
        i2 = np.minimum(i1 + 1, last)
        d1, d2 = np.abs(v - i1.astype(F32)), np.abs(v - i2.astype(F32))
        same = i1 == i2
        d1[same] = d2[same] = F32(0.5)
        return AxisTable(axis, np.stack([i1, i2], 1).astype(np.intp), np.stack([d2, d1], 1), ext)
    if mode == "cubic":
        base = np.floor(orig).astype(np.int64)
        w = cubic_coefficients(orig - base.astype(F32), float(cubic_coeff_a))
        j = base[:, None] + np.arange(-1, 3)[None, :]
        if exclude_outside:
            w = np.where((j < 0) | (j > last), 0.0, w)
            total = w.sum(axis=1, keepdims=True)     # 0 only for extrapolated outputs
            w = w / np.where(total == 0, 1.0, total)
        return AxisTable(axis, np.clip(j, 0, last).astype(np.intp), w, ext)
    raise ValueError(f"mode={mode!r} is not one of nearest, linear, cubic")


def _antialias_table(axis, n_in, orig, scale, mode, a, exclude_outside, ext) -> AxisTable:
    """Pillow's resampling filter as onnxruntime runs it: support and filter argument
    widened by 1/scale when downsampling; taps outside the input either dropped
    (exclude_outside) or folded onto the edge pixel; weights normalized to sum 1."""
    inv_scale = F32(1) / F32(scale)                   # onnxruntime's `scale`
    half = F32(2 if mode == "linear" else 4) * F32(0.5)
    support = half * inv_scale if inv_scale >= 1 else half
    shrink = F32(1) / inv_scale if inv_scale >= 1 else F32(1)
    center = F32(0.5) + orig
    lo = np.floor(center - support + F32(0.5)).astype(np.int64)
    hi = np.floor(center + support + F32(0.5)).astype(np.int64)
    if exclude_outside:
        lo, hi = np.maximum(lo, 0), np.minimum(hi, n_in)
    k = max(int((hi - lo).max(initial=1)), 1)
    j = lo[:, None] + np.arange(k)[None, :]
    arg = (j.astype(F32) - center[:, None] + F32(0.5)) * shrink
    w = np.where(j < hi[:, None], _pillow_filter(mode, a)(arg), F32(0)).astype(F32)
    total = w.sum(axis=1, dtype=F32)
    inv_total = np.ones_like(total)
    np.divide(F32(1), total, out=inv_total, where=total != 0)
    w *= inv_total[:, None]
    return AxisTable(axis, np.clip(j, 0, n_in - 1).astype(np.intp), w, ext)


# ---- the kernel -----------------------------------------------------------------------
def _resize_check(attrs, version):
    """Attribute values we cannot run, found at compile time."""
    mode = attr_str(attrs.get("mode"), "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"mode={mode!r} is not one of nearest, linear, cubic"
    if int(attrs.get("antialias", 0)) and mode == "nearest":
        return "antialias=1 needs mode linear or cubic"
    ctm = attr_str(attrs.get("coordinate_transformation_mode"), "half_pixel")
    if version >= 11 and ctm not in COORDINATE_MODES:
        return f"coordinate_transformation_mode={ctm!r} is not one of {', '.join(COORDINATE_MODES)}"
    nearest = attr_str(attrs.get("nearest_mode"), "round_prefer_floor")
    if version >= 11 and nearest not in NEAREST_MODES:
        return f"nearest_mode={nearest!r} is not one of {', '.join(NEAREST_MODES)}"
    return None


@kernel("Resize", since=(10, 11, 13, 18, 19), check=_resize_check)
class Resize:
    """Y = X resampled to the size given by scales or sizes (ONNX Resize).

    Shapes: X (D1, ..., Dn) of any rank; Y (O1, ..., On); roi (2n,) or (2 len(axes),)
    float, scales float32, sizes int64. Versions: 10 (X, scales; asymmetric
    coordinates, onnxruntime's "simple" nearest), 11 (roi, sizes, the coordinate
    and nearest modes, cubic), 13 (optional roi and scales), 18 (antialias, axes,
    keep_aspect_ratio_policy), 19 (half_pixel_symmetric).
    Dtypes: any for nearest; linear and cubic sum in float32 (float64 for
    float64) and convert back at the end: float16 rounds, integers truncate
    toward zero and saturate (onnxruntime's NCHW float path; its fixed-point
    8-bit paths, NHWC and antialias, may differ by one). Workspace: up to
    three arrays the size of the largest intermediate.
    """

    def __init__(self, ctx, *, mode="nearest", coordinate_transformation_mode="half_pixel",
                 cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0,
                 nearest_mode="round_prefer_floor", antialias=0, axes=None,
                 keep_aspect_ratio_policy="stretch"):
        self.in_shape = tuple(int(d) for d in ctx.shape(0))
        self.out_shape, self.scale = resize_sizes(ctx)
        rank = len(self.in_shape)
        self.options = dict(mode=attr_str(mode, "nearest"), cubic_coeff_a=float(cubic_coeff_a),
                            exclude_outside=bool(int(exclude_outside)),
                            antialias=bool(int(antialias)) and ctx.version >= 18)
        if ctx.version < 11:
            self.ctm, self.options["nearest_mode"] = "asymmetric", "simple"
        else:
            self.ctm = attr_str(coordinate_transformation_mode, "half_pixel")
            self.options["nearest_mode"] = attr_str(nearest_mode, "round_prefer_floor")
        self.extrapolation_value = float(extrapolation_value)
        self.crop = self.ctm == "tf_crop_and_resize"
        self.resize_axes = resize_axes(ctx, rank)
        # Axes to resample, the most shrinking first (less data for the next ones).
        # As in onnxruntime, scale exactly 1 leaves an axis alone, and so does an
        # unchanged length under antialias (though tf_crop_and_resize still
        # extrapolates there: `mask_only`).
        kept = [a for a in range(rank) if self.options["antialias"] and self.scale[a] != F32(1)
                and self.out_shape[a] == self.in_shape[a]]
        self.active = sorted((a for a in range(rank) if self.scale[a] != F32(1) and a not in kept),
                             key=lambda a: self.out_shape[a] / max(self.in_shape[a], 1))
        self.mask_only = kept if self.crop else []
        # onnxruntime copies X when the output shape is the input's, whatever the mode and roi
        self.copy = self.out_shape == self.in_shape or not self.active
        self.dtype = ctx.dtype(0)
        weighted = self.options["mode"] != "nearest"
        # Weighted sums in float32 (float64 for float64), cast back at the end as onnxruntime does.
        self.work = self.dtype if not weighted or self.dtype == np.float64 else np.dtype(F32)
        self.tables = None
        self.fast = None
        if not self.copy:
            try:
                self.tables = self._tables(ctx.value_or_none(1) if ctx.version >= 11 and self.crop else None)
            except NotStatic:
                self.tables = None                    # roi fed at forward: tables built per call
            except ValueError as exc:
                raise ctx.error(str(exc)) from None
        self.compiled = self._compiled_plan(ctx) if self.tables is not None else None
        if self.tables is not None and not weighted and self.compiled is None:
            self.fast = self._fast_views(self.tables)
        # Workspace: intermediate results (ping-pong; the last one too when it
        # is cast back to an integer dtype), one weighted tap, X in the work dtype.
        self.cast_out = self.work != self.dtype
        shape, sizes = list(self.in_shape), []
        for a in self.active:
            shape[a] = self.out_shape[a]
            sizes.append(int(np.prod(shape, dtype=np.int64)))
        inter = sizes if self.cast_out else sizes[:-1]
        general = not self.copy and self.fast is None and self.compiled is None
        self.buffers = [ctx.scratch((max(inter[k::2], default=0),), self.work) for k in (0, 1)] \
            if general and inter else []
        self.tap = ctx.scratch((max(sizes, default=0),), self.work) if general and weighted else None
        self.cast_in = ctx.scratch(self.in_shape, self.work) if general and self.cast_out else None

    # ---- tables ----------------------------------------------------------------------
    def _rois(self, roi) -> list[tuple[float, float]]:
        rank = len(self.in_shape)
        starts, ends = [0.0] * rank, [1.0] * rank
        if roi is not None and np.asarray(roi).size:
            r = np.asarray(roi, np.float32).reshape(-1)
            axes = self.resize_axes
            if r.size != 2 * len(axes):
                raise ValueError(f"roi has {r.size} values, expected {2 * len(axes)} "
                                 "(a start and an end per axis)")
            for i, a in enumerate(axes):
                starts[a], ends[a] = float(r[i]), float(r[len(axes) + i])
        return list(zip(starts, ends))

    def _tables(self, roi) -> list[AxisTable]:
        """Tables of the active axes, then extrapolation-only ones (idx None) of `mask_only` axes."""
        rois = self._rois(roi)
        tables = [axis_table(a, self.in_shape[a], self.out_shape[a], self.scale[a], self.ctm, rois[a],
                             extrapolate=self.crop, **self.options) for a in self.active]
        for a in self.mask_only:
            orig = source_coordinates(self.ctm, self.out_shape[a], self.in_shape[a], self.scale[a], *rois[a])
            ext = (orig < 0) | (orig > F32(self.in_shape[a] - 1))
            if ext.any():
                tables.append(AxisTable(a, None, None, ext))
        rank = len(self.in_shape)
        for t in tables:      # weights in the work dtype, shaped to broadcast along their axis
            if t.w is not None:
                shape = [-1 if k == t.axis else 1 for k in range(rank)]
                t.w = [np.ascontiguousarray(t.w[:, k], self.work).reshape(shape) for k in range(t.w.shape[1])]
        return tables

    def _fast_views(self, tables):
        """(X view index, out view shape, X view shape) when every table is a slice or a repeat."""
        views = {t.axis: t.as_view(self.in_shape[t.axis]) for t in tables}
        if any(v is None for v in views.values()):
            return None
        index, out_shape, x_shape = [], [], []
        for a, n in enumerate(self.out_shape):
            kind, arg = views.get(a, ("slice", slice(None)))
            if kind == "slice":
                index.append(arg)
                out_shape.append(n)
                x_shape.append(n)
            else:
                index.append(slice(None))
                out_shape += [self.in_shape[a], arg]
                x_shape += [self.in_shape[a], 1]
        return tuple(index), tuple(out_shape), tuple(x_shape)

    def _compiled_plan(self, ctx):
        """Arguments of compiled/resize.py for this node, or None when it does not apply."""
        rank = len(self.in_shape)
        mode = self.options["mode"]
        if not (compiled.active() and rank >= 2 and self.dtype == np.float32 and not self.copy
                and (mode == "linear" or (mode == "nearest" and int(np.prod(self.out_shape, dtype=np.int64))
                                          >= RESIZE_NEAREST_COMPILED_MIN_OUTPUT))
                and not self.options["antialias"]
                and all(t.extrapolate is None and t.idx is not None for t in self.tables)
                and all(t.axis >= rank - 2 for t in self.tables)):
            return None
        h, w = self.in_shape[-2:]
        oh, ow = self.out_shape[-2:]
        by_axis = {t.axis: t for t in self.tables}
        lead = int(np.prod(self.in_shape[:-2], dtype=np.int64))
        shapes = ((lead, h, w), (lead, oh, ow))

        def ro(a, dtype):
            a = np.ascontiguousarray(a, dtype)
            a.flags.writeable = False
            return a

        if mode == "nearest":
            ih = by_axis[rank - 2].idx[:, 0] if rank - 2 in by_axis else np.arange(h)
            iw = by_axis[rank - 1].idx[:, 0] if rank - 1 in by_axis else np.arange(w)
            repeat = ow // w if ow % w == 0 and np.array_equal(iw, np.arange(ow) // (ow // w)) else 0
            return "nearest", shapes, (ro(ih, np.int64), ro(iw, np.int64), repeat), None, None
        if len(by_axis) != 2:      # linear with one axis unchanged: the numpy path leaves it alone
            return None
        th, tw = by_axis[rank - 2], by_axis[rank - 1]
        rows_first = oh / max(h, 1) <= ow / max(w, 1)   # the numpy path's axis order
        args = (ro(th.idx[:, 0], np.int64), ro(th.idx[:, 1], np.int64), ro(th.w[0].reshape(-1), F32),
                ro(th.w[1].reshape(-1), F32), ro(tw.idx[:, 0], np.int64), ro(tw.idx[:, 1], np.int64),
                ro(tw.w[0].reshape(-1), F32), ro(tw.w[1].reshape(-1), F32), rows_first)
        return "linear", shapes, args, ctx.scratch((max(w, ow),), F32), ctx.scratch((ow,), F32)

    def _run_compiled(self, x, out):
        mode, (x_shape, out_shape), args, buf, buf2 = self.compiled
        x3 = np.ascontiguousarray(x).reshape(x_shape)
        out3 = out.reshape(out_shape)
        if mode == "nearest":
            compiled.resize.nearest2d(x3, out3, *args)
        else:
            compiled.resize.linear2d(x3, out3, *args, buf.array, buf2.array)

    # ---- forward ---------------------------------------------------------------------
    def __call__(self, x, *inputs, out):
        if self.copy:
            np.copyto(out, x)
            return
        if self.compiled is not None:
            self._run_compiled(x, out)
            return
        tables = self.tables
        if tables is None:
            tables = self._tables(inputs[0] if inputs else None)
        if self.fast is not None:
            index, out_shape, x_shape = self.fast
            view = out.view()
            view.shape = out_shape                    # raises rather than copy
            src = x[index].reshape(x_shape)
            if x_shape[-1] == 1 and out_shape[-1] > 1:
                # the last axis repeats: one strided copy per copy index keeps numpy's
                # inner loop long (a broadcast over an inner axis of length r is ~3x slower)
                for k in range(out_shape[-1]):
                    view[..., k] = src[..., 0]
            else:
                view[...] = src
            return
        src = x
        if self.cast_in is not None:
            src = self.cast_in.array
            np.copyto(src, x, casting="unsafe")
        shape = list(self.in_shape)
        resample = [t for t in tables if t.idx is not None]
        for n, t in enumerate(resample):
            shape[t.axis] = self.out_shape[t.axis]
            if n == len(resample) - 1 and not self.cast_out:
                dst = out
            else:
                dst = self.buffers[n % 2].array[:int(np.prod(shape, dtype=np.int64))].reshape(shape)
            self._apply(src, t, dst)
            src = dst
        if self.cast_out:
            if out.dtype.kind in "iu":                # C's float -> int conversion, saturated
                info = np.iinfo(out.dtype)
                np.trunc(src, out=src)
                np.clip(src, info.min, info.max, out=src)
            np.copyto(out, src, casting="unsafe")
        for t in tables:
            if t.extrapolate is not None and t.extrapolate.any():
                mask = t.extrapolate.reshape([-1 if k == t.axis else 1 for k in range(out.ndim)])
                np.copyto(out, np.array(self.extrapolation_value).astype(out.dtype), where=mask)

    def _apply(self, src, t: AxisTable, dst):
        """dst = sum_k w_k * take(src, idx[:, k], axis): one tap at a time."""
        np.take(src, t.idx[:, 0], axis=t.axis, out=dst, mode="clip")
        if t.w is None:
            return
        dst *= t.w[0]
        tap = self.tap.array[:dst.size].reshape(dst.shape)
        for k in range(1, len(t.w)):
            if not t.w[k].any():
                continue
            np.take(src, t.idx[:, k], axis=t.axis, out=tap, mode="clip")
            tap *= t.w[k]
            dst += tap


@kernel("Upsample", since=(7, 9))
class Upsample:
    """Y = X upsampled by `scales` (Upsample-7: attribute; -9: input), nearest or linear.

    The deprecated name of Resize-10 (Upsample-10 only marks the deprecation):
    out = floor(in * scale), source coordinate out / scale. Spec:
    Operators.md#Upsample.
    """

    def __init__(self, ctx, *, mode="nearest", scales=None):
        self.resize = Resize(upsample_as_resize(ctx), mode=mode)

    def __call__(self, x, scales=None, *, out):
        self.resize(x, out=out)
