"""Shape rules shared by many ops: same-as-input, broadcasting, normalized axes,
and the check of input dtypes against the op's ONNX type constraints."""

from __future__ import annotations

import functools

import numpy as np
import onnx

from ...contrib_schemas import ensure_registered
from ...errors import UnsupportedOpError
from . import shape_rule


def broadcast(ctx, shapes) -> tuple:
    """Multidirectional (numpy) broadcasting, ONNX spec "Broadcasting in ONNX"."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.error(f"shapes {[tuple(s) for s in shapes]} do not broadcast") from None


def broadcast_to(ctx, shape, target, what: str = "input 1") -> tuple:
    """Unidirectional broadcasting of `shape` to `target` (ONNX "Broadcasting in ONNX")."""
    try:
        ok = tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ctx.error(f"{what} of shape {tuple(shape)} does not broadcast unidirectionally "
                        f"to shape {tuple(target)} (each of its trailing dims must be 1 or equal)")
    return tuple(target)


def norm_axis(ctx, axis: int, rank: int, name: str = "axis") -> int:
    """An axis in [-rank, rank-1] as a non-negative index."""
    if not -rank <= axis < rank:
        raise ctx.error(f"{name}={axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(ctx, axes, rank: int, name: str = "axes") -> list[int]:
    out = [norm_axis(ctx, int(a), rank, name) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{name}={list(axes)} repeats an axis")
    return out


# ---- dtypes against the schema's type constraints ------------------------------
def onnx_type(dtype) -> str:
    """The ONNX type string of a numpy dtype: float32 -> 'tensor(float)', object -> 'tensor(string)'."""
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    except Exception:
        return f"numpy {np.dtype(dtype)}"


@functools.lru_cache(maxsize=None)
def _formal_inputs(op_type: str, domain: str, version: int):
    """(name, type parameter or None, allowed type strings, variadic, homogeneous) per formal input."""
    ensure_registered(domain)
    schema = onnx.defs.get_schema(op_type, version, domain)
    allowed = {t.type_param_str: frozenset(t.allowed_type_strs) for t in schema.type_constraints}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    return tuple((p.name, p.type_str if p.type_str in allowed else None,
                  allowed.get(p.type_str, frozenset([p.type_str])),
                  p.option == variadic, p.is_homogeneous) for p in schema.inputs)


def check_types(ctx) -> None:
    """Reject input dtypes that the op's schema (at ctx.version) does not allow.

    Every present input must have a type its formal parameter allows, and inputs
    bound to one type parameter (e.g. T of Max's data_0..N, or X and Y of Where)
    must share one dtype. bfloat16, float8, float4, int4 and int2 are ml_dtypes'
    numpy dtypes, checked like the others.
    Raises:
        UnsupportedOpError: an input has a numpy void dtype ONNX has no name for.
        ShapeInferenceError: a type the spec does not allow, or mismatched types.
    """
    node = ctx.node
    try:
        formals = _formal_inputs(node.op_type, node.domain, ctx.version)
    except Exception:  # no schema (custom domain): nothing to check against
        return
    bound: dict[str, tuple[int, np.dtype]] = {}
    for i in range(ctx.num_inputs):
        if not ctx.has_input(i) or not formals:
            continue
        if i >= len(formals) and not formals[-1][3]:
            raise ctx.error(f"{len(node.inputs)} inputs given; {node.op_type}-{ctx.version} takes "
                            f"at most {len(formals)}")
        name, param, allowed, variadic, homogeneous = formals[min(i, len(formals) - 1)]
        dt = np.dtype(ctx.dtype(i))
        t = onnx_type(dt)
        if dt.kind == "V" and t.startswith("numpy"):
            raise UnsupportedOpError(
                f"node {node.name!r} ({node.op_type}): input {i} ({name}) is {t}; bfloat16, float8 and "
                f"int4 tensors have no numpy kernel here: cast them to float32 (or an int type) first")
        if t not in allowed:
            raise ctx.error(f"input {i} ({name}) has type {t}; {node.op_type}-{ctx.version} takes "
                            f"{', '.join(sorted(allowed))}")
        if param is not None and (homogeneous or not variadic):
            if param in bound and bound[param][1] != dt:
                j, other = bound[param]
                raise ctx.error(f"inputs {j} and {i} must have the same type ({param}); got "
                                f"{onnx_type(other)} and {t}")
            bound.setdefault(param, (i, dt))


# ---- rules ---------------------------------------------------------------------
@shape_rule("Relu", "Sigmoid", "HardSigmoid", "Erf", "Identity", "LRN", "InstanceNormalization", "CumSum")
def same_as_input(ctx):
    """Output 0 has input 0's shape and dtype."""
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("Softmax", "LogSoftmax", "Hardmax")
def softmax_like(ctx):
    """Y has X's shape and dtype; axis (default 1 before opset 13, -1 from it) within [-r, r - 1] for X of rank
    r >= 1 (ONNX Softmax-13 and Softmax-1/11: "in the range [-r, r-1]"), else a ShapeInferenceError here
    rather than the kernel's failure at run time."""
    rank = len(ctx.shape(0))
    if rank:
        norm_axis(ctx, int(ctx.attr("axis", -1 if ctx.version >= 13 else 1)), rank)
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("Neg", "Abs", "Sqrt", "Exp", "Log", "Tanh", "Reciprocal", "Floor", "Ceil",
            "LeakyRelu", "Elu", "HardSwish", "Gelu", "Softplus", "Not")
def unary(ctx):
    """Y has X's shape and dtype (after checking X's dtype against the schema)."""
    check_types(ctx)
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("Clip")
def clip(ctx):
    """Y has the input's shape and dtype; min and max (Clip-11+) must be scalars."""
    check_types(ctx)
    for i, name in ((1, "min"), (2, "max")):
        if ctx.has_input(i) and int(np.prod(ctx.shape(i), dtype=np.int64)) != 1:
            raise ctx.error(f"{name} must be a scalar (shape ()), got shape {tuple(ctx.shape(i))}")
    return [(ctx.shape(0), ctx.dtype(0))]


@shape_rule("Add", "Sub", "Mul", "Div")
def binary(ctx):
    """Broadcast of both inputs; dtype of input 0."""
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), ctx.dtype(0))]


@shape_rule("Pow")
def pow_(ctx):
    """Broadcast of base and exponent; the base's dtype (the exponent's may differ from Pow-12)."""
    check_types(ctx)
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), ctx.dtype(0))]


@shape_rule("PRelu")
def prelu(ctx):
    """X's shape and dtype; slope must broadcast unidirectionally to X (PRelu-7+)."""
    check_types(ctx)
    return [(broadcast_to(ctx, ctx.shape(1), ctx.shape(0), "slope"), ctx.dtype(0))]


def comparison(ctx):
    return [(broadcast(ctx, [ctx.shape(0), ctx.shape(1)]), np.dtype(bool))]


@shape_rule("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
def checked_comparison(ctx):
    """Broadcast of both inputs, bool (after checking their dtypes against the schema)."""
    check_types(ctx)
    return comparison(ctx)


@shape_rule("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    """Broadcast of all (1..N) inputs; their common dtype."""
    check_types(ctx)
    shapes = [s for i, s in enumerate(ctx.shapes) if ctx.has_input(i)]
    if not shapes:
        raise ctx.error("needs at least one input")
    return [(broadcast(ctx, shapes), ctx.dtype(0))]
