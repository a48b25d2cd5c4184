"""Type conversion CPU kernels: Cast, CastLike, BitCast.

ONNX spec: Cast, CastLike, BitCast sections of Operators.md. bfloat16, the
float8 types (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float6 (Cast-28),
float4e2m1 and the int4/uint4/int2/uint2 types are ml_dtypes' numpy dtypes (onnx maps them the
same way), so numpy casts between every pair; what the spec adds is written
here: saturation of float8 targets and the rounding modes of float8e8m0.
"""

from __future__ import annotations

from functools import partial

import ml_dtypes
import numpy as np

from ...ir import elem_dtype
from ..registry import kernel

# float8 types `saturate` applies to (Cast-19+): out-of-range values clamp to +-max.
FLOAT8_SATURATING = frozenset(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                                    ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
FLOAT8E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
ROUND_MODES = ("up", "down", "nearest")


def _cast_check(attrs, version):
    if "to" in attrs and elem_dtype(int(attrs["to"])) is None:
        return f"Cast to elem_type {attrs.get('to')} is not supported (no numpy dtype)"
    mode = attrs.get("round_mode", "up")
    if mode not in ROUND_MODES:
        return f"round_mode={mode!r} is not one of {ROUND_MODES}"
    return None


def cast_into(x: np.ndarray, out: np.ndarray, saturate: int = 1, round_mode: str = "up") -> None:
    """out[...] = x converted to out.dtype with ONNX Cast semantics.

    Numbers: C conversions (float -> int truncates toward zero; ml_dtypes
    rounds to nearest even into the small float types). float8 targets with
    `saturate` clamp to the type's finite range (+-inf included, NaN stays
    NaN); without it an out-of-range value becomes inf (e5m2) or NaN (the
    types without inf). float8e8m0 rounds by `round_mode` (onnx.numpy_helper).
    Strings: numbers print as onnxruntime prints them ("NaN", "INF", "-INF").
    """
    if out.dtype == object:
        out[...] = _to_strings(x)
    elif x.dtype == object:
        out[...] = np.asarray(x, dtype=str).astype(out.dtype)
    elif out.dtype == FLOAT8E8M0:
        from onnx.numpy_helper import to_float8e8m0  # onnx >= 1.18, as the type itself

        out[...] = to_float8e8m0(x, bool(saturate), round_mode).reshape(out.shape)
    elif saturate and out.dtype in FLOAT8_SATURATING and x.dtype != out.dtype:
        v = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        info = ml_dtypes.finfo(out.dtype)
        np.copyto(out, np.clip(v, float(info.min), float(info.max)), casting="unsafe")
    else:
        np.copyto(out, x, casting="unsafe")


@kernel("Cast", since=(6, 9, 13, 19, 21, 23, 24, 25, 28), check=_cast_check)
def cast(x, *, out, to, saturate=1, round_mode="up"):
    """Y = X converted to the type `to` (see cast_into; Cast-19 adds `saturate`,
    Cast-25 `round_mode`). Shapes: Y as X."""
    cast_into(x, out, saturate, round_mode)


def _prepare_cast(x, *, out, to, saturate=1, round_mode="up"):
    """cast bound to these arrays where cast_into is one numpy.copyto (numbers into numbers other than
    float8 with saturation and float8e8m0): that copy bound, else None (the plain call)."""
    if (out.dtype == object or x.dtype == object or out.dtype == FLOAT8E8M0
            or (saturate and out.dtype in FLOAT8_SATURATING and x.dtype != out.dtype)):
        return None
    return partial(np.copyto, out, x, "unsafe")


cast.prepare_run = _prepare_cast


@kernel("CastLike", since=(15, 19, 21, 23, 24, 25), check=_cast_check)
def cast_like(x, target_type, *, out, saturate=1, round_mode="up"):
    """Y = X converted to the element type of `target_type` (whose values are not read).

    Same conversions as Cast (cast_into). Shapes: Y as X.
    """
    cast_into(x, out, saturate, round_mode)


def _to_strings(x):
    if x.dtype.kind == "f":
        flat = [("NaN" if np.isnan(v) else ("INF" if v > 0 else "-INF") if np.isinf(v) else repr(v))
                for v in x.reshape(-1).tolist()]
        if x.dtype == np.float32:
            flat = [s if s in ("NaN", "INF", "-INF") else str(np.float32(float(s))) for s in flat]
        return np.asarray(flat, dtype=object).reshape(x.shape)
    return x.astype(str).astype(object)


@kernel("BitCast", since=26)
def bit_cast(x, *, out, to):
    """Y = the bits of X read as the type `to`, which has X's bit width (ONNX BitCast-26).

    Little-endian, as the spec asks (numpy's native order on every supported CPU).
    Shapes: Y as X.
    """
    np.copyto(out, x.view(out.dtype))
