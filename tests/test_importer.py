"""ONNX import: sources, weights, symbolic dims, and typed errors for bad files and ops."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import ModelLoadError, UnsupportedOpError, load_onnx
from tests.conftest import make_mlp


def test_path_bytes_and_proto_give_the_same_graph(tmp_path, mlp_model):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model, path)
    graphs = [load_onnx(path), load_onnx(str(path)), load_onnx(mlp_model.SerializeToString()), load_onnx(mlp_model)]
    for g in graphs:
        assert [n.op_type for n in g.nodes] == ["MatMul", "Add", "Relu", "MatMul", "Softmax"]
        assert g.input_names == ["x"] and g.output_names == ["y"]
        assert g.inputs[0].shape == ("N", 16)  # symbolic dims stay symbolic
        assert g.opset == {"": 17}
        assert not g.weights["w1"].flags.writeable
    assert graphs[0].source == str(path)


def test_constant_nodes_become_weights():
    c = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(4, dtype=np.float32)))
    f = helper.make_node("Constant", [], ["f"], value_float=2.5)
    add = helper.make_node("Add", ["x", "c"], ["s"])
    mul = helper.make_node("Mul", ["s", "f"], ["y"])
    g = helper.make_graph([c, f, add, mul], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    graph = load_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.op_type for n in graph.nodes] == ["Add", "Mul"]
    np.testing.assert_array_equal(graph.weights["c"], np.arange(4, dtype=np.float32))
    assert graph.weights["f"].dtype == np.float32 and float(graph.weights["f"]) == 2.5


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_onnx(tmp_path / "nope.onnx")


def test_malformed_file_names_the_file(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\x08\x07this is not a protobuf model at all \xff\xfe" * 10)
    with pytest.raises(ModelLoadError, match="garbage.onnx"):
        load_onnx(path)


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.3, 0.5, 0.9, 0.999])
def test_truncated_real_model(tmp_path, ppocr, fraction):
    data = ppocr.det.read_bytes()
    path = tmp_path / f"det_truncated_{fraction}.onnx"
    path.write_bytes(data[:int(len(data) * fraction)])
    with pytest.raises(ModelLoadError, match=path.name):
        load_onnx(path)


def test_empty_bytes():
    with pytest.raises(ModelLoadError):
        load_onnx(b"")


def test_wrong_source_type():
    with pytest.raises(ModelLoadError, match="path, bytes or onnx.ModelProto"):
        load_onnx(12345)


def test_every_unsupported_op_is_listed_at_once_at_compile():
    """The importer does not look at kernels: the Graph imports, and Program lists every op it cannot run."""
    from pooled_predictor import Program

    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Bernoulli", ["a"], ["b"]),
             helper.make_node("StringSplit", ["a"], ["c"]),
             helper.make_node("FusedConv", ["a"], ["d"], domain="com.microsoft")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in "bcd"])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    graph = load_onnx(model)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Bernoulli", "StringSplit", "FusedConv"]
    with pytest.raises(UnsupportedOpError) as info:
        Program(graph)
    message = str(info.value)
    for op in ("Bernoulli", "StringSplit", "FusedConv"):
        assert op in message
    assert {m[0] for m in info.value.missing} == {"Bernoulli", "StringSplit", "FusedConv"}


def test_unsupported_attribute_value_is_reported_at_compile(tmp_path):
    from pooled_predictor import Predictor
    model = make_mlp()
    model.graph.node[4].attribute.append(helper.make_attribute("not_an_onnx_attribute", 1))
    with pytest.raises((UnsupportedOpError, ModelLoadError)):
        Predictor(model)
