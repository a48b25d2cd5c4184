"""Shape rules of shape-changing ops: Reshape, Flatten, Expand, Tile, Pad,
ConstantOfShape, Range, Constant.

The shapes of most of these come from an input's *value* (Reshape's shape,
Expand's shape, Tile's repeats, Pad's pads, ConstantOfShape's input, Range's
scalars): the rules read it with ctx.value(i), which raises NotStatic when it
is fed at forward time, and the Net then infers that node per forward.
"""

from __future__ import annotations

import math

import numpy as np

from . import shape_rule
from .common import broadcast, check_types, norm_axes


def int_values(ctx, i: int, what: str) -> list[int]:
    """The static value of input i as a list of Python ints (it must be 1-D or a scalar)."""
    v = np.asarray(ctx.value(i))
    if v.ndim > 1:
        raise ctx.error(f"{what} (input {i}) must be a 1-D tensor, got shape {v.shape}")
    if v.dtype.kind not in "iu":
        raise ctx.error(f"{what} (input {i}) must be an integer tensor, got {v.dtype}")
    return [int(d) for d in v.reshape(-1)]


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# ---- Reshape, Flatten --------------------------------------------------------
def reshape_target(ctx, shape: tuple, spec: list[int], allowzero: bool) -> tuple:
    """The output shape of Reshape (ONNX Reshape-5/14): -1 inferred, 0 copies a dim unless allowzero."""
    if sum(d == -1 for d in spec) > 1:
        raise ctx.error(f"shape {spec} has more than one -1")
    if any(d < -1 for d in spec):
        raise ctx.error(f"shape {spec} has a negative dimension other than -1")
    if allowzero and 0 in spec and -1 in spec:
        raise ctx.error(f"shape {spec} has both 0 and -1, which allowzero=1 forbids "
                        f"(the -1 cannot be inferred)")
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise ctx.error(f"shape {spec}: 0 at position {i} copies an input dimension, "
                                f"but the input {tuple(shape)} has rank {len(shape)}")
            d = shape[i]
        out.append(d)
    total = _numel(shape)
    if -1 in out:
        known = _numel([d for d in out if d != -1])
        if known == 0 or total % known:
            raise ctx.error(f"cannot reshape input of shape {tuple(shape)} ({total} elements) to "
                            f"{spec}: the -1 cannot be inferred")
        out[out.index(-1)] = total // known
    if _numel(out) != total:
        raise ctx.error(f"cannot reshape input of shape {tuple(shape)} ({total} elements) to {spec} "
                        f"(resolved {tuple(out)}, {_numel(out)} elements)")
    return tuple(out)


@shape_rule("Reshape")
def reshape(ctx):
    check_types(ctx)
    spec = int_values(ctx, 1, "shape")
    allowzero = bool(int(ctx.attr("allowzero", 0)))
    return [(reshape_target(ctx, ctx.shape(0), spec, allowzero), ctx.dtype(0))]


@shape_rule("Flatten")
def flatten(ctx):
    """(d_0 * ... * d_{axis-1}, d_axis * ... * d_n); axis in [-r, r]."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    rank = len(shape)
    axis = int(ctx.attr("axis", 1))
    if not -rank <= axis <= rank:
        raise ctx.error(f"axis={axis} out of range [-{rank}, {rank}] for an input of rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return [((_numel(shape[:axis]), _numel(shape[axis:])), ctx.dtype(0))]


# ---- Expand, Tile ------------------------------------------------------------
@shape_rule("Expand")
def expand(ctx):
    """Multidirectional broadcast of the input's shape and `shape` (numpy rules)."""
    check_types(ctx)
    spec = int_values(ctx, 1, "shape")
    if any(d < 0 for d in spec):
        raise ctx.error(f"shape {spec} has a negative dimension")
    return [(broadcast(ctx, [ctx.shape(0), tuple(spec)]), ctx.dtype(0))]


@shape_rule("Tile")
def tile(ctx):
    """d_i * repeats_i; repeats has one non-negative entry per input axis."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    reps = int_values(ctx, 1, "repeats")
    if len(reps) != len(shape):
        raise ctx.error(f"repeats {reps} must have one entry per input axis ({len(shape)})")
    if any(r < 0 for r in reps):
        raise ctx.error(f"repeats {reps} must be >= 0")
    return [(tuple(d * r for d, r in zip(shape, reps)), ctx.dtype(0))]


# ---- Pad -----------------------------------------------------------------------
PAD_MODES = ("constant", "reflect", "edge")
PAD_MODES_19 = PAD_MODES + ("wrap",)


def pad_amounts(ctx) -> tuple[list[int], list[int]]:
    """Per-axis (begins, ends) of a Pad node, negative meaning removal.

    Pad-2: the `pads` attribute, [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
    over every axis. Pad-11+: the `pads` input, same layout; from Pad-18 over
    the axes listed by the optional `axes` input (negative counts from the back).
    """
    rank = len(ctx.shape(0))
    if ctx.version < 11:
        pads = ctx.attr("pads")
        if pads is None:
            raise ctx.error("Pad-2 needs the `pads` attribute")
        pads = [int(p) for p in pads]
    else:
        pads = int_values(ctx, 1, "pads")
    axes = list(range(rank))
    if ctx.version >= 18 and ctx.has_input(3):
        axes = norm_axes(ctx, int_values(ctx, 3, "axes"), rank)
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have 2 * {len(axes)} entries (begins then ends of "
                        f"{'axes ' + str(axes) if len(axes) != rank else 'every axis'})")
    begins, ends = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        begins[a], ends[a] = pads[j], pads[len(axes) + j]
    return begins, ends


@shape_rule("Pad")
def pad(ctx):
    """d_i + begin_i + end_i, which must stay >= 0."""
    check_types(ctx)
    shape = tuple(ctx.shape(0))
    begins, ends = pad_amounts(ctx)
    out = tuple(d + b + e for d, b, e in zip(shape, begins, ends))
    if any(d < 0 for d in out):
        raise ctx.error(f"pads remove more than the input has: shape {shape}, begins {begins}, "
                        f"ends {ends} give {out}")
    mode = str(ctx.attr("mode", "constant"))
    if mode != "constant":
        kept = [d + min(b, 0) + min(e, 0) for d, b, e in zip(shape, begins, ends)]
        empty = [a for a, (k, b, e) in enumerate(zip(kept, begins, ends)) if k == 0 and (b > 0 or e > 0)]
        if empty:
            raise ctx.error(f"mode={mode!r} cannot pad axes {empty}: no input values remain to copy "
                            f"(shape {shape}, begins {begins}, ends {ends})")
    if ctx.has_input(2) and _numel(ctx.shape(2)) > 1:
        raise ctx.error(f"constant_value must be a scalar, got shape {tuple(ctx.shape(2))}")
    return [(out, ctx.dtype(0))]


# ---- ConstantOfShape, Range, Constant --------------------------------------------
@shape_rule("ConstantOfShape")
def constant_of_shape(ctx):
    """The shape is input 0's value (empty: a scalar); the dtype is the `value` attribute's (float32)."""
    check_types(ctx)
    spec = int_values(ctx, 0, "input")
    if any(d < 0 for d in spec):
        raise ctx.error(f"shape {spec} has a negative dimension")
    value = ctx.attr("value")
    dtype = np.dtype(np.float32) if value is None else np.asarray(value).dtype
    return [(tuple(spec), dtype)]


def range_length(start, limit, delta) -> int:
    """max(ceil((limit - start) / delta), 0), exactly for integers (ONNX Range)."""
    if isinstance(start, (int, np.integer)):
        start, limit, delta = int(start), int(limit), int(delta)
        return max(-((start - limit) // delta), 0)
    return max(math.ceil(float(limit - start) / float(delta)), 0)


def range_compute_dtype(dtype, stash_type: int) -> np.dtype:
    """The dtype Range computes in: float16 in float32 (stash_type=1) or float64 (11), Range-27."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return np.dtype(np.float64) if int(stash_type) == 11 else np.dtype(np.float32)
    return dtype


@shape_rule("Range")
def range_(ctx):
    """(max(ceil((limit - start) / delta), 0),) of start's dtype."""
    check_types(ctx)
    names = ("start", "limit", "delta")
    vals = []
    for i, name in enumerate(names):
        v = np.asarray(ctx.value(i))
        if v.size != 1:
            raise ctx.error(f"{name} must be a scalar, got shape {v.shape}")
        vals.append(v.reshape(()))
    compute = range_compute_dtype(ctx.dtype(0), ctx.attr("stash_type", 1))
    start, limit, delta = (v.astype(compute)[()] for v in vals)
    if delta == 0:
        raise ctx.error("delta must not be 0")
    return [((range_length(start, limit, delta),), ctx.dtype(0))]


CONSTANT_ATTRS = ("value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
                  "value_string", "value_strings")


def constant_value(attrs: dict) -> np.ndarray:
    """The tensor a Constant node holds (ONNX Constant-1 to -25: exactly one value attribute)."""
    if "value" in attrs or "sparse_value" in attrs:
        return np.asarray(attrs.get("value", attrs.get("sparse_value")))
    if "value_float" in attrs:
        return np.asarray(attrs["value_float"], np.float32)
    if "value_floats" in attrs:
        return np.asarray(attrs["value_floats"], np.float32).reshape(-1)
    if "value_int" in attrs:
        return np.asarray(attrs["value_int"], np.int64)
    if "value_ints" in attrs:
        return np.asarray(attrs["value_ints"], np.int64).reshape(-1)
    if "value_string" in attrs:
        return np.asarray(attrs["value_string"], object)
    return np.asarray(list(attrs["value_strings"]), object).reshape(-1)


@shape_rule("Constant")
def constant(ctx):
    given = [a for a in CONSTANT_ATTRS if a in ctx.attrs]
    if len(given) != 1:
        raise ctx.error(f"exactly one of {list(CONSTANT_ATTRS)} must be set, got {given}")
    v = constant_value(ctx.attrs)
    return [(v.shape, v.dtype)]
