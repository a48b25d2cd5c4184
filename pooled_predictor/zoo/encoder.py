"""A BERT-like transformer encoder built with onnx.helper (seeded random weights).

The layer is BERT's (Devlin et al. 2019; the same post-LN block as Vaswani et
al. 2017), written with the plain ONNX ops an exporter gives, so that
onnxruntime's quantizer (quantize_dynamic) finds its MatMuls:

    q, k, v = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv          (MatMul + Add)
    heads:  (N, S, d) -> Reshape (N, S, h, d/h) -> Transpose (N, h, S, d/h)
    scores = q @ k^T / sqrt(d/h) + (1 - mask) * -10000      (mask: (N, S), 1 = token, 0 = padding)
    a = Softmax(scores, axis=-1) @ v -> Transpose, Reshape (N, S, d)
    x = LayerNormalization(x + a @ Wo + bo)
    f = x @ W1 + b1;  g = 0.5 f (1 + erf(f / sqrt 2))        (exact Gelu, in its Erf form)
    x = LayerNormalization(x + g @ W2 + b2)

Inputs: "x" float32 (N, S, d) (the embeddings) and "mask" float32 (N, S);
output "y" float32 (N, S, d). N and S are dynamic (dim_params "N", "S").
Weights: uniform with std 1/sqrt(fan_in) (LeCun), biases std 0.02, LayerNorm
gamma ~ U(0.8, 1.2), beta ~ N(0, 0.05^2). BERT-base is layers=12, hidden=768,
heads=12, intermediate=3072.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def bert_encoder(*, layers: int = 2, hidden: int = 64, heads: int = 4, intermediate: int | None = None,
                 seed: int = 0, opset: int = 17) -> onnx.ModelProto:
    """A post-LN transformer encoder of `layers` BERT layers (see the module docstring).

    Args:
        layers, hidden, heads: depth, width d and attention heads (d % heads == 0).
        intermediate: the feed-forward width (default 4 d).
        seed: numpy default_rng seed of the weights.
        opset: default-domain opset (>= 17: LayerNormalization).
    Returns:
        The ModelProto, inputs "x" (N, S, d) and "mask" (N, S), output "y" (N, S, d), float32.
    Raises:
        ValueError: hidden not a multiple of heads, opset < 17, or a size < 1.
    """
    if min(layers, hidden, heads) < 1 or hidden % heads:
        raise ValueError(f"bert_encoder: need layers, hidden, heads >= 1 and hidden % heads == 0; got "
                         f"{layers}, {hidden}, {heads}")
    if opset < 17:
        raise ValueError(f"bert_encoder: opset {opset} < 17 has no LayerNormalization")
    d, ff, dh = hidden, intermediate or 4 * hidden, hidden // heads
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def uniform(name, shape, std):
        a = std * math.sqrt(3.0)
        return const(name, rng.uniform(-a, a, shape).astype(np.float32))

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x, name, n_in, n_out):
        w = uniform(f"{name}.weight", (n_in, n_out), 1.0 / math.sqrt(n_in))
        b = uniform(f"{name}.bias", (n_out,), 0.02)
        return node("Add", [node("MatMul", [x, w], f"{name}.mm"), b], f"{name}.out")

    def layer_norm(x, name):
        g = const(f"{name}.gamma", rng.uniform(0.8, 1.2, d).astype(np.float32))
        b = const(f"{name}.beta", (0.05 * rng.standard_normal(d)).astype(np.float32))
        return node("LayerNormalization", [x, g, b], f"{name}.out", axis=-1, epsilon=1e-12)

    split = const("shape.heads", np.array([0, 0, heads, dh], np.int64))
    merge = const("shape.merge", np.array([0, 0, d], np.int64))
    one = const("one", np.float32(1.0))
    half = const("half", np.float32(0.5))
    neg = const("mask.fill", np.float32(-10000.0))
    sqrt2 = const("sqrt2", np.float32(math.sqrt(2.0)))
    inv_sqrt_dh = const("inv_sqrt_dh", np.float32(1.0 / math.sqrt(dh)))
    axes = const("mask.axes", np.array([1, 2], np.int64))
    keep = node("Unsqueeze", ["mask", axes], "mask.unsq")  # (N, 1, 1, S)
    bias = node("Mul", [node("Sub", [one, keep], "mask.inv"), neg], "mask.bias")

    x = "x"
    for i in range(layers):
        p = f"layer{i}"
        q, k, v = (node("Transpose", [node("Reshape", [linear(x, f"{p}.{t}", d, d), split], f"{p}.{t}.split")],
                        f"{p}.{t}.heads", perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3]) for t in "qkv")
        s = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), inv_sqrt_dh], f"{p}.scores")
        prob = node("Softmax", [node("Add", [s, bias], f"{p}.masked")], f"{p}.prob", axis=-1)
        ctx = node("MatMul", [prob, v], f"{p}.ctx")
        ctx = node("Reshape", [node("Transpose", [ctx], f"{p}.ctx.t", perm=[0, 2, 1, 3]), merge], f"{p}.ctx.m")
        x = layer_norm(node("Add", [x, linear(ctx, f"{p}.o", d, d)], f"{p}.res1"), f"{p}.ln1")
        f = linear(x, f"{p}.ff1", d, ff)
        erf = node("Erf", [node("Div", [f, sqrt2], f"{p}.gelu.div")], f"{p}.gelu.erf")
        g = node("Mul", [node("Mul", [f, node("Add", [erf, one], f"{p}.gelu.add")], f"{p}.gelu.mul"), half],
                 f"{p}.gelu")
        x = layer_norm(node("Add", [x, linear(g, f"{p}.ff2", ff, d)], f"{p}.res2"), f"{p}.ln2")
    nodes.append(helper.make_node("Identity", [x], ["y"], name="y"))
    graph = helper.make_graph(
        nodes, f"bert_encoder_{layers}x{d}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S", d]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "S", d])], inits)
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="pooled_predictor.zoo")
    model.ir_version = helper.find_min_ir_version_for(opsets)
    onnx.checker.check_model(model)
    return model


def encoder_inputs(batch: int, seq: int, hidden: int, *, seed: int = 0, padded: int = 0) -> dict[str, np.ndarray]:
    """{"x": N(0, 1) embeddings (batch, seq, hidden) float32, "mask": 1s with the last `padded` tokens 0}."""
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.float32)
    if padded:
        mask[:, seq - padded:] = 0.0
    return {"x": rng.standard_normal((batch, seq, hidden)).astype(np.float32), "mask": mask}
