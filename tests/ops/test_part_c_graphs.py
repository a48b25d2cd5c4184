"""Chains of the indexing, loss, normalization and quantization kernels in one Net, planned
into one arena (Optimization.MEMORY: their scratch and outputs share memory) and not, against
onnxruntime."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import assert_close, run_ort

rng = np.random.default_rng(21)


def model_of(nodes, inputs, outputs, inits, opset):
    tensors = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "chain", inputs, outputs, tensors)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def run(model, feeds, optimization):
    net = Net(Program(load_onnx(model, device="cpu"), "cpu"), optimization=optimization)
    net.forward(feeds)
    return [np.array(net.blob_by_name(o)) for o in net.output_names]


def test_quantized_conv_pipeline():
    """QuantizeLinear -> QLinearConv -> DequantizeLinear -> GroupNormalization -> LogSoftmax."""
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(128, np.uint8),
             "w": rng.integers(0, 256, (6, 4, 3, 3)).astype(np.uint8), "ws": np.array(0.01, np.float32),
             "wz": np.array(120, np.uint8), "ys": np.array(0.5, np.float32), "yz": np.array(100, np.uint8),
             "b": rng.integers(-300, 300, 6).astype(np.int32),
             "g": rng.standard_normal(6).astype(np.float32), "beta": rng.standard_normal(6).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
             helper.make_node("GroupNormalization", ["y", "g", "beta"], ["n"], num_groups=3),
             helper.make_node("LogSoftmax", ["n"], ["out"], axis=1)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                     [helper.make_tensor_value_info("yq", TensorProto.UINT8, None),
                      helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits, 21)
    ref = run_ort(model, {"x": x})
    plain = run(model, {"x": x}, Optimization.NONE)
    planned = run(model, {"x": x}, Optimization.MEMORY)
    for a, b in zip(plain, planned):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(plain[0], ref[0])
    assert_close(plain[1], ref[1], 1e-5, "pipeline output")


@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
def test_gather_scatter_loss_chain(optimization):
    """GatherElements -> ScatterElements(add) -> ReduceLogSumExp and SoftmaxCrossEntropyLoss in one Net."""
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    labels = rng.integers(0, 5, (4, 3)).astype(np.int64)
    inits = {"idx": rng.integers(-5, 5, (4, 5, 3)).astype(np.int64), "ax": np.array([2], np.int64)}
    nodes = [helper.make_node("GatherElements", ["x", "idx"], ["g"], axis=1),
             helper.make_node("ScatterElements", ["x", "idx", "g"], ["s"], axis=1, reduction="add"),
             helper.make_node("ReduceLogSumExp", ["s", "ax"], ["r"], keepdims=0),
             helper.make_node("SoftmaxCrossEntropyLoss", ["s", "labels"], ["loss", "logp"], reduction="mean")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                             helper.make_tensor_value_info("labels", TensorProto.INT64, labels.shape)],
                     [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "loss", "logp")],
                     inits, 18)
    feeds = {"x": x, "labels": labels}
    for ours, ref in zip(run(model, feeds, optimization), run_ort(model, feeds)):
        assert_close(ours, ref, 1e-5, "chain")


@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
def test_qdq_conv(optimization):
    """The QDQ form quantization tools export: DequantizeLinear of int8 weights (per output
    channel, folded once as a constant), Quantize/DequantizeLinear around the activation, Conv."""
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = {"wq": w, "ws": (rng.random(4) * 0.02 + 0.01).astype(np.float32), "wz": np.zeros(4, np.int8),
             "s": np.array(0.1, np.float32), "z": np.array(3, np.uint8)}
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "w"], ["y"], pads=[1, 1, 1, 1])]
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, 13)
    assert_close(run(model, {"x": x}, optimization)[0], run_ort(model, {"x": x})[0], 1e-5, "QDQ Conv")
