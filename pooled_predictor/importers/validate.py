"""Checks of an ONNX model before import: what onnx.checker misses or is skipped for.

onnx.checker stops at the first problem, and the importer accepts models whose
graph inputs/outputs carry no type (as onnxruntime does), which skips the rest
of the checker. onnxruntime then still refuses, at session creation, what is
refused here (ModelLoadError, naming the node, tensor or value):

* names defined twice: two initializers of one name, or a value written by two
  nodes (or by a node and an initializer or graph input): onnxruntime's
  "Duplicate definition of name" / "Duplicate definition-site";
* default-domain opsets newer than this onnx knows (onnxruntime: "opset
  version 99 is not supported");
* nodes with fewer or more inputs or outputs than their schema allows (a Relu
  with two outputs), an empty name for a required or variadic input or a
  required output (absent variadic outputs, e.g. of Split, are allowed),
  required attributes missing, attributes the schema does not have or whose
  type is not the schema's; inputs whose element type the input's type
  constraint does not allow (an int4 weight of an Add), or inputs bound to one
  type parameter with two types (Add of float and uint32, DequantizeLinear of an
  int32 x and a uint16 zero point: onnxruntime's "Type parameter (T) bound to
  different types"), where the types are known before any pass runs:
  initializers, typed graph inputs, and the outputs whose type follows from the
  schema (a bound type parameter or a fixed type; the others, Cast's for one,
  and what reads them are the kernels' to check, at compile and reshape); the
  same for onnxruntime's contrib ops of domain com.microsoft that its quantizer
  emits, whose schemas contrib_schemas.py registers with onnx (onnxruntime
  refuses these too);
* spatial attributes outside their ranges (ONNX Operators: Conv, ConvTranspose,
  MaxPool, AveragePool, LpPool, ...): pads and output_padding >= 0, strides,
  dilations and kernel_shape >= 1, pads of length 2 x (number of spatial axes),
  pooling pads smaller than the kernel (onnxruntime: "Pad should be smaller
  than kernel");
* dims that are negative or whose product overflows int64, in initializers and
  declared graph inputs;
* initializers whose declared bytes (dims x element size) pass the memory budget
  (ResourceExhaustedError), before any of them is converted.

Values that are merely large (pads of 2**31 - 1) are legal here; the memory
budget refuses them at reshape, before a kernel is set up.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from .. import budget
from ..contrib_schemas import ensure_registered, is_registered_contrib
from ..errors import ModelLoadError, ShapeInferenceError
from .external import declared_nbytes

INT64_MAX = (1 << 63) - 1

# op_type -> spatial attribute rules; our own FusedConv takes Conv's attributes.
_SPATIAL_OPS = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool",
                "MaxUnpool", "FusedConv", "FusedConvDepthwise", "DeformConv", "MaxRoiPool"}
_NON_NEGATIVE = ("pads", "output_padding")
_POOLS = {"MaxPool", "AveragePool", "LpPool"}
_OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional
_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single
_POSITIVE = ("strides", "dilations", "kernel_shape", "pooled_shape")


def validate_model(model: onnx.ModelProto, where: str, memory_limit: int | None = None) -> None:
    """Refuse what onnxruntime refuses at session creation (see the module docstring).

    Args:
        model: the parsed model (external data already resolved).
        where: the model's description, for messages.
        memory_limit: budget in bytes for the initializers' declared size.
    Raises:
        ModelLoadError: the first problem found, naming the node / tensor / value.
        ResourceExhaustedError: the initializers' declared bytes pass the budget.
    """
    opset = {("" if o.domain in ("", "ai.onnx") else o.domain): int(o.version) for o in model.opset_import}
    newest = onnx.defs.onnx_opset_version()
    if opset.get("", 0) > newest:
        raise _err(where, f"opset {opset['']} of the default domain is newer than the newest this build "
                          f"knows ({newest})")
    _check_graph(model.graph, opset, where, memory_limit, int(model.ir_version))


def _err(where: str, message: str) -> ModelLoadError:
    return ModelLoadError(f"model {where!r}: {message}")


def _check_graph(g: onnx.GraphProto, opset: dict, where: str, memory_limit, ir_version: int) -> None:
    defined: set[str] = set()
    weight_bytes = 0
    for t in g.initializer:
        if not isinstance(t.name, str):
            raise _err(where, f"an initializer's name {t.name[:40]!r} is not valid UTF-8")
        if t.name in defined:
            raise _err(where, f"two initializers are named {t.name!r} (onnxruntime: duplicate definition-site)")
        defined.add(t.name)
        _check_dims(t.dims, where, f"initializer {t.name!r}")
        weight_bytes += declared_nbytes(t) or 0
    for sp in g.sparse_initializer:
        name = sp.values.name
        if name in defined:
            raise _err(where, f"sparse initializer {name!r} has the name of another initializer")
        defined.add(name)
        _check_dims(sp.dims, where, f"sparse initializer {name!r}")
        weight_bytes += budget.nbytes_of(sp.dims, _np_dtype(sp.values.data_type)) if sp.dims else 0
    budget.check(weight_bytes, memory_limit, f"model {where!r}: the initializers")
    for v in g.input:
        if v.name in defined:
            continue  # an input with a default value (IR < 4 style): allowed
        defined.add(v.name)
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            dims = [d.dim_value for d in v.type.tensor_type.shape.dim if d.HasField("dim_value")]
            _check_dims(dims, where, f"graph input {v.name!r}")
    types = {t.name: _tensor_type(t.data_type) for t in g.initializer}  # value -> its ONNX type string, where known
    initializers = {t.name: t for t in g.initializer}
    for v in g.input:
        if v.name not in types and v.type.HasField("tensor_type") and _tensor_type(v.type.tensor_type.elem_type):
            types[v.name] = _tensor_type(v.type.tensor_type.elem_type)
    for i, node in enumerate(g.node):
        label = f"node {node.name or f'#{i}'!r} ({node.op_type})"
        for name in list(node.input) + list(node.output) + [node.name, node.op_type, node.domain]:
            if not isinstance(name, str):  # protobuf hands back bytes for invalid UTF-8
                raise _err(where, f"{label}: the name {name[:40]!r} is not valid UTF-8")
        for o in node.output:
            if not o:
                continue
            if o in defined:
                raise _err(where, f"{label} writes {o!r}, which is already defined "
                                  "(onnxruntime: duplicate definition of name)")
            defined.add(o)
        _check_node(node, opset, where, label, types, initializers, ir_version)
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _check_graph(sub, opset, where, memory_limit, ir_version)  # each scope on its own


def _check_dims(dims, where: str, what: str) -> None:
    count = 1
    for d in dims:
        if d < 0:
            raise _err(where, f"{what} has a negative dimension in {list(dims)}")
        count *= int(d)
    if count > INT64_MAX:
        raise _err(where, f"{what} has dims {list(dims)} whose product overflows int64")


def _np_dtype(data_type: int):
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(data_type)
    except Exception:
        return onnx.helper.tensor_dtype_to_np_dtype(TensorProto.UINT8)


def _schema(node: onnx.NodeProto, opset: dict):
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    version = opset.get(domain)
    if version is None:
        return None
    ensure_registered(domain)
    try:
        return onnx.defs.get_schema(node.op_type, version, domain)
    except Exception:  # not an ONNX op (our own domain, a custom one): the registry decides
        return None


def _check_node(node: onnx.NodeProto, opset: dict, where: str, label: str, types: dict,
                initializers: dict, ir_version: int) -> None:
    for a in node.attribute:  # onnx.checker's rule from IR version 2 (onnxruntime refuses it at load)
        if a.type == AttributeProto.UNDEFINED and ir_version >= 2:
            raise _err(where, f"{label}: attribute {a.name!r} has no type (required from IR version 2)")
    schema = _schema(node, opset)
    if schema is not None:
        _check_types(node, schema, where, label, types, initializers)
        _check_scales(node, schema, where, label, initializers)
        n_in, n_out = len(node.input), len(node.output)
        if not schema.min_input <= n_in <= schema.max_input:
            raise _err(where, f"{label} has {n_in} inputs; its schema (opset {schema.since_version}) "
                              f"takes {schema.min_input}..{schema.max_input}")
        if not schema.min_output <= n_out <= schema.max_output:
            raise _err(where, f"{label} has {n_out} outputs; its schema (opset {schema.since_version}) "
                              f"allows {schema.min_output}..{schema.max_output}")
        given = {a.name for a in node.attribute}
        missing = [name for name, spec in schema.attributes.items() if spec.required and name not in given]
        if missing:
            raise _err(where, f"{label} lacks the required attribute(s) {missing}")
        for names, params, kind in ((node.input, schema.inputs, "input"), (node.output, schema.outputs, "output")):
            for k, name in enumerate(names):
                param = params[min(k, len(params) - 1)] if params else None
                if not name and param is not None and (param.option == _SINGLE or (
                        kind == "input" and param.option != _OPTIONAL)):
                    raise _err(where, f"{label}: {kind} {k} ({param.name}) "
                                      "is not optional but its name is empty")
        for a in node.attribute:
            spec = schema.attributes.get(a.name)
            if spec is None and (node.domain in ("", "ai.onnx") or is_registered_contrib(node.domain)):
                raise _err(where, f"{label}: attribute {a.name!r} is not in its schema (opset "
                                  f"{schema.since_version}): {sorted(schema.attributes)}")
            if spec is not None and a.type != AttributeProto.UNDEFINED and int(a.type) != int(spec.type.value):
                raise _err(where, f"{label}: attribute {a.name!r} has type "
                                  f"{AttributeProto.AttributeType.Name(a.type)}, its schema says {spec.type.name}")
    if node.op_type in _SPATIAL_OPS:
        _check_spatial(node, where, label)


def _tensor_type(data_type: int) -> str | None:
    """'tensor(float)' for TensorProto.FLOAT; None for a data type ONNX has no name for."""
    try:
        return f"tensor({TensorProto.DataType.Name(data_type).lower()})"
    except ValueError:
        return None


def _where_label(where: str, label: str) -> str:
    """'model <where>: <label>', as _err's messages begin."""
    return f"model {where!r}: {label}"


SCALE_CHECK_MAX = 1 << 16
"""Scales of at most this many elements are read at load (_check_scales); a larger one is the kernels'."""


def _check_scales(node: onnx.NodeProto, schema, where: str, label: str, initializers: dict) -> None:
    """A quantization scale given as an initializer (a formal input named *scale of a quantized op:
    QuantizeLinear's y_scale, QLinearConv's w_scale, QLinearAdd's C_scale, ...) must hold finite numbers. A NaN
    or infinite scale makes every value it quantizes or requantizes undefined; onnxruntime runs such a model and
    returns whatever its float-to-int conversion gives (found by tests/fuzz: NaN w_scale, outputs differing from
    it by the path taken). Raises ModelLoadError naming the node and input."""
    if not schema.inputs or not (node.op_type in _QUANT_OPS or node.op_type.startswith("QLinear")):
        return
    for k, name in enumerate(node.input):
        t = initializers.get(name)
        param = schema.inputs[min(k, len(schema.inputs) - 1)]
        if t is None or not param.name.lower().endswith("scale"):
            continue
        if t.data_type not in _FLOAT_TYPES or t.data_location == TensorProto.EXTERNAL:
            continue
        count = 1
        for d in t.dims:
            count *= int(d)
        if count > SCALE_CHECK_MAX:
            continue
        try:
            values = numpy_helper.to_array(t).astype(np.float32)
        except Exception:  # a malformed tensor: its conversion reports it, with the others
            continue
        bad = values.reshape(-1)[~np.isfinite(values.reshape(-1))]
        if bad.size:
            raise _err(where, f"{label}: {param.name} {name!r} holds {bad[0]}; a quantization scale must be a "
                              "finite number")


_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})
# the quantized ops whose *scale inputs _check_scales reads (with every QLinear* op); not LayerNormalization's or
# BatchNormalization's Scale, a float weight like any other
_QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QGemm", "DynamicQuantizeMatMul",
                        "MatMulIntegerToFloat"})


def _check_types(node: onnx.NodeProto, schema, where: str, label: str, types: dict,
                 initializers: dict) -> None:
    """The node's inputs of known type (initializers, typed graph inputs, the outputs of nodes checked before
    it) against its schema's type constraints, as onnxruntime's graph resolution checks them at load: each
    input's type among those its formal parameter allows, and the inputs bound to one type parameter (T of
    Add's A and B, of DequantizeLinear's x and x_zero_point) of one type. Records the types of the outputs that
    follow from these (an output of a bound type parameter, or of a fixed type); others stay unknown, and so
    unchecked downstream.

    Raises:
        ModelLoadError: an initializer of a type its input does not allow (the file is invalid).
        ShapeInferenceError: another input of a type not allowed, or two types for one type parameter (the
            messages of shapes/common.check_types, which the shape rules raise for what only they see).
    """
    if not schema.inputs:
        return
    constraints = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    bound: dict[str, tuple[int, str]] = {}
    for k, name in enumerate(node.input):
        if not name:
            continue
        if name in types and types[name] is None:
            raise _err(where, f"{label}: initializer {name!r} has an unknown data type")
        type_str = types.get(name)
        if type_str is None:
            continue
        param = schema.inputs[min(k, len(schema.inputs) - 1)]
        allowed = constraints.get(param.type_str, {param.type_str})
        if type_str not in allowed:
            if name in initializers:  # the file itself is invalid
                raise _err(where, f"{label}: initializer {name!r} of type {type_str} cannot be its input {k} "
                                  f"({param.name}: {', '.join(sorted(allowed))})")
            raise ShapeInferenceError(f"{_where_label(where, label)}: input {k} ({param.name}) has type {type_str}; "
                                      f"{node.op_type}-{schema.since_version} takes {', '.join(sorted(allowed))}")
        if param.type_str in constraints and (param.is_homogeneous or param.option != variadic):
            if param.type_str in bound and bound[param.type_str][1] != type_str:
                j, other = bound[param.type_str]
                raise ShapeInferenceError(
                    f"{_where_label(where, label)}: inputs {j} and {k} must have the same type ({param.type_str}); "
                    f"got {other} and {type_str} (onnxruntime: Type parameter bound to different types)")
            bound.setdefault(param.type_str, (k, type_str))
    for k, name in enumerate(node.output):
        if not name or not schema.outputs:
            continue
        param = schema.outputs[min(k, len(schema.outputs) - 1)]
        if param.type_str in constraints:
            if param.type_str in bound and (param.is_homogeneous or param.option != variadic):
                types[name] = bound[param.type_str][1]
        elif param.type_str.startswith("tensor("):
            types[name] = param.type_str


def _check_spatial(node: onnx.NodeProto, where: str, label: str) -> None:
    attrs = {a.name: list(a.ints) for a in node.attribute if a.type == AttributeProto.INTS}
    for name, values in attrs.items():
        if any(abs(v) > INT64_MAX // 4 for v in values):
            raise _err(where, f"{label}: attribute {name} {values} overflows int64 arithmetic")
    for name in _NON_NEGATIVE:
        if any(v < 0 for v in attrs.get(name, ())):
            raise _err(where, f"{label}: {name} {attrs[name]} must be >= 0 (ONNX {node.op_type})")
    for name in _POSITIVE:
        if any(v < 1 for v in attrs.get(name, ())):
            raise _err(where, f"{label}: {name} {attrs[name]} must be >= 1 (ONNX {node.op_type})")
    pads = attrs.get("pads")
    if pads is not None and len(pads) % 2:
        raise _err(where, f"{label}: pads {pads} must hold a begin and an end per spatial axis")
    spatial = [len(attrs[k]) for k in ("kernel_shape", "strides", "dilations") if k in attrs]
    if pads is not None:
        spatial.append(len(pads) // 2)
    kernel = attrs.get("kernel_shape")
    if node.op_type in _POOLS and kernel and pads and len(pads) == 2 * len(kernel) \
            and any(p >= kernel[k % len(kernel)] for k, p in enumerate(pads)):
        raise _err(where, f"{label}: pads {pads} must be smaller than kernel_shape {kernel} "
                          "(onnxruntime: Pad should be smaller than kernel)")
    if len(set(spatial)) > 1:
        raise _err(where, f"{label}: kernel_shape, strides, dilations and pads disagree on the number of "
                          f"spatial axes ({ {k: attrs[k] for k in attrs} })")
