"""pooled_predictor.serving.backend: the onnx.backend interface the conformance suite runs through."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pooled_predictor.serving.backend import PooledPredictorBackend, cuda_available, device_name
from pooled_predictor.errors import InputError, UnsupportedOpError


def two_output_model():
    """y = x + w; z = relu(x) (two graph outputs, listed z first)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    outs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, "g", [x, w], outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_prepare_run_returns_outputs_in_graph_order():
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    w = np.ones((2, 3), np.float32)
    rep = PooledPredictorBackend.prepare(two_output_model(), "CPU")
    for feed in ([x, w], {"x": x, "w": w}):
        z, y = rep.run(feed)
        np.testing.assert_array_equal(z, np.maximum(x, 0))
        np.testing.assert_array_equal(y, x + w)
    out = rep.run([x, w])
    np.testing.assert_array_equal(out["y"], x + w)  # also indexable by output name


def test_outputs_are_copies():
    x = np.ones((2, 3), np.float32)
    rep = PooledPredictorBackend.prepare(two_output_model())
    first = rep.run([x, x])
    rep.run([x * 5, x])
    np.testing.assert_array_equal(first[1], 2 * x)


def test_run_rejects_wrong_inputs():
    rep = PooledPredictorBackend.prepare(two_output_model())
    with pytest.raises(InputError):
        rep.run([np.ones((2, 3), np.float32)])


def test_run_node_with_absent_optional_input():
    node = helper.make_node("LayerNormalization", ["x", "s", ""], ["y"], axis=-1)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    (y,) = PooledPredictorBackend.run_node(node, [x, np.ones(4, np.float32)], opset_version=17)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_run_node_with_outputs_info():
    node = helper.make_node("Einsum", ["a", "b"], ["c"], equation="ij,jk->ik")
    a, b = np.ones((2, 3), np.float64), np.ones((3, 4), np.float64)
    (c,) = PooledPredictorBackend.run_node(node, {"a": a, "b": b}, outputs_info=[(np.float64, (2, 4))])
    np.testing.assert_array_equal(c, np.full((2, 4), 3.0))


def test_devices():
    assert PooledPredictorBackend.supports_device("CPU")
    assert PooledPredictorBackend.supports_device("CUDA") == cuda_available()
    assert not PooledPredictorBackend.supports_device("TPU")
    assert device_name("CUDA:1") == "cuda" and device_name("CPU") == "cpu"
    if not cuda_available():
        with pytest.raises(ValueError, match="not available"):
            PooledPredictorBackend.prepare(two_output_model(), "CUDA")


def test_is_compatible():
    assert PooledPredictorBackend.is_compatible(two_output_model())
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    assert not PooledPredictorBackend.is_compatible(model)
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        PooledPredictorBackend.prepare(model)
