"""onnxruntime's contrib operators (domain com.microsoft) that its quantizer emits, as onnx schemas.

onnx ships no schema of onnxruntime's own ops, so a model in the QOperator
format (QLinearAdd, QGemm, ...) could be checked by nobody before its kernels
ran. This module writes their schemas (inputs, outputs, type constraints,
attributes with their defaults) as onnx.defs.OpSchema objects and registers
them with onnx (onnx.defs.register_schema), once, the first time a schema of
the domain is asked for (`ensure_registered`: the importer for a model that
imports com.microsoft, the registry, the shape rules' type checks; building the
schemas took 14-22 ms of the package's import, which most models never use:
issue 31). From then on `onnx.defs.get_schema(op, version, "com.microsoft")` resolves them as
any ONNX op: the importer's checks (importers/validate.py: input and output
counts, required and unknown attributes, initializer types), the registry
(ops/registry.py: since_version for the model's opset of com.microsoft, the
number of outputs) and the shape rules' type checks (ops/shapes/common.py:
check_types) treat them as they treat ONNX's own.

Source: onnxruntime docs/ContribOperators.md (the schemas in
onnxruntime/core/graph/contrib_ops/quantization_defs.cc), version 1 of each.
A schema onnx already knows (another library registered it) is left as it is.
"""

from __future__ import annotations

import threading

import onnx
from onnx import helper
from onnx.defs import OpSchema

DOMAIN = "com.microsoft"
VERSION = 1

_F = OpSchema.FormalParameter
_OPT = OpSchema.FormalParameterOption.Optional
_VAR = OpSchema.FormalParameterOption.Variadic
_A = OpSchema.AttrType
Q8 = ["tensor(uint8)", "tensor(int8)"]
FLOAT = "tensor(float)"


def _in(name: str, type_str: str, optional: bool = False) -> OpSchema.FormalParameter:
    return _F(name, type_str, param_option=_OPT if optional else OpSchema.FormalParameterOption.Single)


def _attr(name: str, kind, default=None, required: bool = False) -> OpSchema.Attribute:
    if default is None:
        return OpSchema.Attribute(name, kind, "", required=required)
    return OpSchema.Attribute(name, helper.make_attribute(name, default), "")


def _unary(name: str, doc: str, attrs=()) -> OpSchema:
    """X, X_scale, X_zero_point?, Y_scale, Y_zero_point? -> Y (QLinearSigmoid, QLinearLeakyRelu)."""
    return OpSchema(name, DOMAIN, VERSION, doc=doc,
                    inputs=[_in("X", "T"), _in("X_scale", FLOAT), _in("X_zero_point", "T", True),
                            _in("Y_scale", FLOAT), _in("Y_zero_point", "T", True)],
                    outputs=[_in("Y", "T")], type_constraints=[("T", Q8, "")], attributes=list(attrs))


def _binary(name: str, doc: str) -> OpSchema:
    """A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point? -> C."""
    return OpSchema(name, DOMAIN, VERSION, doc=doc,
                    inputs=[_in("A", "T"), _in("A_scale", FLOAT), _in("A_zero_point", "T", True),
                            _in("B", "T"), _in("B_scale", FLOAT), _in("B_zero_point", "T", True),
                            _in("C_scale", FLOAT), _in("C_zero_point", "T", True)],
                    outputs=[_in("C", "T")], type_constraints=[("T", Q8, "")])


def schemas() -> list[OpSchema]:
    """The com.microsoft schemas this module defines (version 1 each)."""
    return [
        _binary("QLinearAdd", "C = (A_scale (A - A_zero_point) + B_scale (B - B_zero_point)) / C_scale "
                              "+ C_zero_point, numpy broadcasting."),
        _binary("QLinearMul", "C = (A - A_zero_point) (B - B_zero_point) A_scale B_scale / C_scale "
                              "+ C_zero_point, numpy broadcasting."),
        _unary("QLinearSigmoid", "Y = quantize(Sigmoid(dequantize(X)))."),
        _unary("QLinearLeakyRelu", "Y = quantize(LeakyRelu(dequantize(X), alpha)).",
               [_attr("alpha", _A.FLOAT, 0.01)]),
        OpSchema("QLinearSoftmax", DOMAIN, VERSION,
                 doc="Softmax of 8-bit X along axis (opset >= 13) or over the axes from axis on (opset < 13), "
                     "by onnxruntime's integer algorithm.",
                 inputs=[_in("X", "T"), _in("X_scale", FLOAT), _in("x_zero_point", "T", True),
                         _in("y_scale", FLOAT), _in("y_zero_point", "T")],
                 outputs=[_in("Y", "T")], type_constraints=[("T", Q8, "")],
                 attributes=[_attr("axis", _A.INT, -1), _attr("opset", _A.INT, required=True)]),
        OpSchema("QLinearGlobalAveragePool", DOMAIN, VERSION,
                 doc="GlobalAveragePool of 8-bit X, requantized to y_scale, y_zero_point.",
                 inputs=[_in("X", "T"), _in("x_scale", FLOAT), _in("x_zero_point", "T"),
                         _in("y_scale", FLOAT), _in("y_zero_point", "T")],
                 outputs=[_in("Y", "T")], type_constraints=[("T", Q8, "")],
                 attributes=[_attr("channels_last", _A.INT, 0)]),
        OpSchema("QLinearAveragePool", DOMAIN, VERSION,
                 doc="AveragePool of dequantize(X), quantized to y_scale, y_zero_point.",
                 inputs=[_in("X", "T"), _in("x_scale", FLOAT), _in("x_zero_point", "T", True),
                         _in("y_scale", FLOAT), _in("y_zero_point", "T", True)],
                 outputs=[_in("Y", "T")], type_constraints=[("T", Q8, "")],
                 attributes=[_attr("auto_pad", _A.STRING, "NOTSET"), _attr("ceil_mode", _A.INT, 0),
                             _attr("channels_last", _A.INT, 0), _attr("count_include_pad", _A.INT, 0),
                             _attr("kernel_shape", _A.INTS, required=True), _attr("pads", _A.INTS),
                             _attr("strides", _A.INTS)]),
        OpSchema("QLinearConcat", DOMAIN, VERSION,
                 doc="Concat of the (X, X_scale, X_zero_point) triples, each requantized to Y's scale.",
                 inputs=[_in("Y_scale", "TF"), _in("Y_zero_point", "T8"),
                         _F("inputs", "TV", param_option=_VAR, is_homogeneous=False)],
                 outputs=[_in("Y", "T8")],
                 type_constraints=[("T8", Q8, ""), ("TF", [FLOAT], ""), ("TV", Q8 + [FLOAT], "")],
                 attributes=[_attr("axis", _A.INT, required=True)]),
        OpSchema("QGemm", DOMAIN, VERSION,
                 doc="Y = alpha (A' - a_zero_point)(B' - b_zero_point) a_scale b_scale + C a_scale b_scale, "
                     "quantized to y_scale, y_zero_point when given, else float.",
                 inputs=[_in("A", "TA"), _in("a_scale", "T"), _in("a_zero_point", "TA"), _in("B", "TB"),
                         _in("b_scale", "T"), _in("b_zero_point", "TB"), _in("C", "TC", True),
                         _in("y_scale", "T", True), _in("y_zero_point", "TYZ", True)],
                 outputs=[_in("Y", "TY")],
                 type_constraints=[("T", [FLOAT], ""), ("TA", Q8, ""), ("TB", Q8, ""),
                                   ("TC", ["tensor(int32)"], ""), ("TYZ", Q8, ""), ("TY", [FLOAT] + Q8, "")],
                 attributes=[_attr("alpha", _A.FLOAT, 1.0), _attr("transA", _A.INT, 0),
                             _attr("transB", _A.INT, 0)]),
        OpSchema("DynamicQuantizeMatMul", DOMAIN, VERSION,
                 doc="Y = DynamicQuantizeLinear(A) x (B - b_zero_point), scaled to float, + bias.",
                 inputs=[_in("A", "T1"), _in("B", "T2"), _in("b_scale", "T1"), _in("b_zero_point", "T2", True),
                         _in("bias", "T1", True)],
                 outputs=[_in("Y", "T1")],
                 type_constraints=[("T1", [FLOAT], ""), ("T2", ["tensor(int8)", "tensor(uint8)"], "")]),
        OpSchema("MatMulIntegerToFloat", DOMAIN, VERSION,
                 doc="Y = (A - a_zero_point)(B - b_zero_point) a_scale b_scale + bias.",
                 inputs=[_in("A", "T1"), _in("B", "T2"), _in("a_scale", "T3"), _in("b_scale", "T3"),
                         _in("a_zero_point", "T1", True), _in("b_zero_point", "T2", True),
                         _in("bias", "T3", True)],
                 outputs=[_in("Y", "T3")],
                 type_constraints=[("T1", ["tensor(int8)", "tensor(uint8)"], ""),
                                   ("T2", ["tensor(int8)", "tensor(uint8)"], ""),
                                   ("T3", [FLOAT, "tensor(float16)"], "")]),
    ]


_lock = threading.Lock()
_registered = False


def register() -> None:
    """Register every schema of `schemas()` with onnx that it does not know yet (idempotent,
    thread-safe)."""
    global _registered
    with _lock:
        if _registered:
            return
        for s in schemas():
            if not onnx.defs.has(s.name, s.domain):
                onnx.defs.register_schema(s)
        _registered = True


def ensure_registered(domain: str = DOMAIN) -> None:
    """Register this module's schemas if `domain` is theirs and they are not yet (cheap after the
    first call). Call it before asking onnx for a schema of a node of `domain`."""
    if domain == DOMAIN and not _registered:
        register()


def is_registered_contrib(domain: str) -> bool:
    """Whether nodes of `domain` are checked against schemas of this module (attributes included)."""
    return domain == DOMAIN
