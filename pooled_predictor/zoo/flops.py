"""Parameters and multiply-accumulates of an ONNX model, read from its graph.

Conventions (the ones the papers and torchvision's model tables use):

* Parameters are the learnable weights: initializers feeding Conv and
  ConvTranspose (W, B), Gemm and MatMul (any initializer operand), the scale
  and bias of BatchNormalization, InstanceNormalization and
  LayerNormalization (gamma, beta), PRelu's slope, and a float initializer
  added by Add (the bias of a MatMul + Add linear layer). Each initializer
  counts once, however many nodes read it. BatchNormalization's running mean
  and variance are *buffers*, not parameters (torchvision's ``num_params`` is
  ``sum(p.numel() for p in model.parameters())``, which leaves them out), and
  so are the constants of other ops: Clip bounds, Dropout ratios, Reshape
  shapes, Resize scales.
* MACs (multiply-accumulates, the papers' "multiply-adds") are counted for the
  ops that do the arithmetic, per image (batch 1):

  =============  ==============================================================
  Conv           prod(Y.shape) * C_in/group * prod(kernel)    (= prod(W.shape[1:]))
  ConvTranspose  prod(X.shape) * C_out/group * prod(kernel)   (= prod(W.shape[1:]))
  Gemm           M * N * K
  MatMul         prod(Y.shape) * K    (K: the contracted axis; batch axes broadcast)
  =============  ==============================================================

  Bias additions, BatchNormalization, activations, pooling, LRN, Softmax and
  element-wise ops are not counted: they are a fraction of a percent of a
  CNN's work, and leaving them out is what fvcore, torchvision's ``_ops`` and
  the MobileNetV2 paper's "MAdds" do. FLOPs are reported as 2 x MACs.

Shapes come from ``onnx.shape_inference`` run on a light copy of the graph:
every symbolic dimension of a graph input becomes 1 (so a dynamic batch "N"
counts one image), and large float initializers are replaced by declared
inputs of the same shape, so a 500 MB model is never copied or serialized.

Source: the counting rules follow fvcore's ``FlopCountAnalysis`` handles
(conv, addmm, matmul) and torchvision's ``_ops`` metadata; see the zoo's
``ZOO`` entries for the published figures they are compared with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import onnx
from onnx import TensorProto, helper

# (op_type -> input positions whose initializers are learnable; None = every position)
LEARNABLE_INPUTS: Mapping[str, tuple[int, ...] | None] = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "Gemm": None,
    "MatMul": None,
    "BatchNormalization": (1, 2),
    "InstanceNormalization": (1, 2),
    "LayerNormalization": (1, 2),
    "PRelu": (1,),
    "Add": None,
}

MAC_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")

_FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}

# Initializers up to this many elements stay in the shape-inference copy
# (constants such as Reshape shapes feed shape inference by value).
_KEEP_ELEMENTS = 64


@dataclass(frozen=True)
class Cost:
    """What one image costs.

    Attributes:
        params: learnable parameters (see the module docstring).
        buffers: other initializer elements (BatchNormalization running
            statistics, op constants).
        macs: multiply-accumulates per image.
        macs_by_op: op_type -> MACs.
    """

    params: int
    buffers: int
    macs: int
    macs_by_op: dict[str, int] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        """Floating-point operations per image: 2 x MACs (a multiply and an add)."""
        return 2 * self.macs


def _numel(dims: Sequence[int]) -> int:
    return math.prod(int(d) for d in dims)


def count_params(model: onnx.ModelProto) -> tuple[int, int]:
    """(learnable parameters, buffer elements) of the model's initializers.

    Reads only the initializers' dims, never their data. An initializer read
    by a learnable position of any node is a parameter; every other
    initializer is a buffer.
    """
    graph = model.graph
    dims = {t.name: tuple(t.dims) for t in graph.initializer}
    dtypes = {t.name: t.data_type for t in graph.initializer}
    learnable: set[str] = set()
    for node in graph.node:
        positions = LEARNABLE_INPUTS.get(node.op_type, ())
        for i, name in enumerate(node.input):
            if name not in dims or dtypes[name] not in _FLOAT_TYPES:
                continue
            if positions is None or i in positions:
                learnable.add(name)
    params = sum(_numel(dims[n]) for n in learnable)
    buffers = sum(_numel(d) for n, d in dims.items() if n not in learnable)
    return params, buffers


def _static(dims) -> tuple[int, ...] | None:
    out = []
    for d in dims:
        if not d.HasField("dim_value"):
            return None
        out.append(d.dim_value)
    return tuple(out)


def _shape_copy(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None) -> onnx.ModelProto:
    """A weightless copy of `model` with batch-1 (or given) input shapes, shapes inferred."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    input_shapes = dict(input_shapes or {})
    inputs = []
    for vi in graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if vi.name in input_shapes:
            shape = list(input_shapes.pop(vi.name))
        else:
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        inputs.append(helper.make_tensor_value_info(vi.name, tt.elem_type, shape))
    if input_shapes:
        raise ValueError(f"input_shapes names {sorted(input_shapes)} that are not graph inputs; "
                         f"inputs: {[vi.name for vi in inputs]}")
    kept = []
    for t in graph.initializer:
        if _numel(t.dims) <= _KEEP_ELEMENTS or t.data_type not in _FLOAT_TYPES:
            kept.append(t)
        else:
            inputs.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    light = helper.make_graph(list(graph.node), graph.name, inputs, list(graph.output), kept)
    copy = helper.make_model(light, opset_imports=list(model.opset_import))
    copy.ir_version = model.ir_version
    return onnx.shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)


def count_macs(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
               ) -> tuple[int, dict[str, int]]:
    """Multiply-accumulates of one forward pass, by op type.

    Args:
        model: an ONNX model (weights are not read).
        input_shapes: graph input name -> static shape; by default each input's
            declared shape with every symbolic dimension set to 1 (one image).
    Returns:
        (total MACs, op_type -> MACs).
    Raises:
        ValueError: a counted node has a shape shape inference left unknown.
    """
    inferred = _shape_copy(model, input_shapes)
    g = inferred.graph
    shapes: dict[str, tuple[int, ...] | None] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        shapes[vi.name] = _static(vi.type.tensor_type.shape.dim)
    for t in g.initializer:
        shapes[t.name] = tuple(t.dims)

    def shape(node, name):
        s = shapes.get(name)
        if s is None:
            raise ValueError(f"node {node.name!r} ({node.op_type}): shape of {name!r} is unknown "
                             f"after shape inference; pass input_shapes with static dims")
        return s

    by_op: dict[str, int] = {}
    for node in g.node:
        if node.op_type not in MAC_OPS:
            continue
        if node.op_type == "Conv":
            macs = _numel(shape(node, node.output[0])) * _numel(shape(node, node.input[1])[1:])
        elif node.op_type == "ConvTranspose":
            macs = _numel(shape(node, node.input[0])) * _numel(shape(node, node.input[1])[1:])
        elif node.op_type == "Gemm":
            a = shape(node, node.input[0])
            trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
            k = a[0] if trans_a else a[1]
            macs = _numel(shape(node, node.output[0])) * k
        else:  # MatMul
            a = shape(node, node.input[0])
            macs = _numel(shape(node, node.output[0])) * a[-1]
        by_op[node.op_type] = by_op.get(node.op_type, 0) + macs
    return sum(by_op.values()), by_op


def profile(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Cost:
    """Parameters, buffers and per-image MACs of `model` (see the module docstring)."""
    params, buffers = count_params(model)
    macs, by_op = count_macs(model, input_shapes)
    return Cost(params=params, buffers=buffers, macs=macs, macs_by_op=by_op)
