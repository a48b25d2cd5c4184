"""Models onnxruntime refuses at session creation are refused at load (issue 14), typed and named."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import ModelLoadError, Predictor, ResourceExhaustedError

F = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def untyped(name):
    return helper.make_empty_tensor_value_info(name)  # skips onnx.checker (onnxruntime accepts it)


def x_info(shape=(1, 1, 4, 4)):
    return helper.make_tensor_value_info("x", F, list(shape))


def ort_refuses(model) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        return True
    return False


def test_duplicate_initializer_names_refused():
    """Found: two initializers of one name behind an untyped output (which skips onnx.checker) ran.

    onnx.checker refuses the model once the output is typed; onnxruntime 1.32 warns
    ("Duplicate initializer ... the model will use the latest encountered") and
    runs it. We refuse it: which of two weights a file means is not ours to guess.
    """
    w1 = numpy_helper.from_array(np.full(4, 1, np.float32), "w")
    w2 = numpy_helper.from_array(np.full(4, 2, np.float32), "w")
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [x_info((4,))], [untyped("y")], [w1, w2])
    with pytest.raises(ModelLoadError, match="two initializers are named 'w'"):
        Predictor(m)


def test_duplicate_node_outputs_refused():
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="a"), helper.make_node("Neg", ["x"], ["h"], name="b"),
             helper.make_node("Abs", ["h"], ["y"], name="c")]
    m = model_of(nodes, [x_info((4,))], [untyped("y")])
    assert ort_refuses(m)
    with pytest.raises(ModelLoadError, match="node 'b' .* writes 'h'"):
        Predictor(m)


def test_node_output_shadowing_an_initializer_refused():
    w = numpy_helper.from_array(np.ones(4, np.float32), "h")
    m = model_of([helper.make_node("Relu", ["x"], ["h"], name="r"), helper.make_node("Abs", ["h"], ["y"])],
                 [x_info((4,))], [untyped("y")], [w])
    with pytest.raises(ModelLoadError, match="already defined"):
        Predictor(m)


def test_relu_with_an_extra_output_refused():
    """Found: a Relu node with two outputs was accepted (onnxruntime rejects it)."""
    m = model_of([helper.make_node("Relu", ["x"], ["y", "z"], name="relu")], [x_info((4,))],
                 [untyped("y"), untyped("z")])
    assert ort_refuses(m)
    with pytest.raises(ModelLoadError, match="'relu' \\(Relu\\) has 2 outputs"):
        Predictor(m)


def test_too_few_inputs_and_missing_required_attribute_refused():
    m = model_of([helper.make_node("Add", ["x"], ["y"], name="add")], [x_info((4,))], [untyped("y")])
    with pytest.raises(ModelLoadError, match="'add' \\(Add\\) has 1 inputs"):
        Predictor(m)
    m = model_of([helper.make_node("Concat", ["x", "x"], ["y"], name="cat")], [x_info((4,))], [untyped("y")])
    assert ort_refuses(m)
    with pytest.raises(ModelLoadError, match="'cat' .* required attribute"):
        Predictor(m)


def test_attribute_of_the_wrong_type_refused():
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="lr")
    node.attribute.append(helper.make_attribute("alpha", "abc"))
    m = model_of([node], [x_info((4,))], [untyped("y")])
    assert ort_refuses(m)
    with pytest.raises(ModelLoadError, match="'lr' .* attribute 'alpha' has type STRING"):
        Predictor(m)


def test_maxpool_with_negative_pads_refused():
    """Found: MaxPool with negative pads was accepted (onnxruntime rejects it)."""
    m = model_of([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], pads=[-1, -1, 0, 0])],
                 [x_info()], [untyped("y")])
    assert ort_refuses(m)
    with pytest.raises(ModelLoadError, match="'pool' .* pads \\[-1, -1, 0, 0\\] must be >= 0"):
        Predictor(m)


W = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")


@pytest.mark.parametrize("attrs,match", [
    ({"strides": [0, 1]}, "strides .* must be >= 1"),
    ({"dilations": [1, -2]}, "dilations .* must be >= 1"),
    ({"kernel_shape": [3, 0]}, "kernel_shape .* must be >= 1"),
    ({"pads": [1, 1, 1]}, "begin and an end"),
    ({"pads": [1, 1, 1, 1, 1, 1], "kernel_shape": [3, 3]}, "disagree"),
    ({"strides": [1, 1, 1], "kernel_shape": [3, 3]}, "disagree"),
    ({"pads": [2 ** 62, 0, 0, 0]}, "overflows int64"),
])
def test_absurd_conv_attributes_refused(attrs, match):
    m = model_of([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)], [x_info()],
                 [untyped("y")], [W])
    with pytest.raises(ModelLoadError, match=match):
        Predictor(m)


def test_negative_and_overflowing_dims_refused():
    t = numpy_helper.from_array(np.ones(4, np.float32), "w")
    t.dims[:] = [2 ** 32, 2 ** 32, 2 ** 32]
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [x_info((4,))], [untyped("y")], [t])
    with pytest.raises(ModelLoadError, match="overflows int64"):
        Predictor(m)
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], [x_info((4, -3))], [untyped("y")])
    with pytest.raises(ModelLoadError, match="negative dimension"):
        Predictor(m)


def test_huge_declared_initializer_refused_before_conversion():
    """Found: a huge declared initializer raised MemoryError (importers/onnx.py)."""
    t = TensorProto()
    t.name, t.data_type = "w", F
    t.dims.extend([1 << 20, 1 << 20])  # 4 TiB declared, no data
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [x_info((4,))], [untyped("y")], [t])
    with pytest.raises(ResourceExhaustedError) as info:
        Predictor(m)
    assert info.value.needed == 4 << 40 and info.value.limit < info.value.needed
    t.dims[:] = [8, 8]  # a small declared size with no data: onnx cannot read it
    m = model_of([helper.make_node("Add", ["x", "w"], ["y"])], [x_info((4,))], [untyped("y")], [t])
    with pytest.raises(ModelLoadError, match="'w'"):
        Predictor(m)


def test_sparse_initializer_out_of_range_indices_refused():
    """Found: a sparse initializer with bad indices raised IndexError (importers/onnx.py)."""
    values = numpy_helper.from_array(np.ones(2, np.float32), "w")
    indices = numpy_helper.from_array(np.array([1, 99], np.int64), "w_idx")
    sp = helper.make_sparse_tensor(values, indices, [4])
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x_info((4,))], [untyped("y")])
    g.sparse_initializer.append(sp)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    with pytest.raises(ModelLoadError, match="sparse tensor 'w'") as info:
        Predictor(m)
    assert isinstance(info.value.__cause__, IndexError)


def test_valid_models_still_load(mlp_model):
    Predictor(mlp_model)
    m = model_of([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2], dilations=[1, 1],
                                   kernel_shape=[3, 3])], [x_info()], [untyped("y")], [W])
    assert Predictor(m).forward([np.ones((1, 1, 4, 4), np.float32)], ["y"])[0].shape == (1, 1, 2, 2)


def test_what_onnxruntime_refuses_that_the_fuzz_suite_found():
    """Found by tests/fuzz: models we ran and onnxruntime refuses at session creation."""
    x = x_info((4,))
    cases = {
        "newer than the newest": model_of([helper.make_node("Relu", ["x"], ["y"])], [x], [untyped("y")], opset=99),
        "not in its schema": model_of([helper.make_node("Relu", ["x"], ["y"], name="r", alpha=1.0)], [x],
                                      [untyped("y")]),
        "smaller than kernel_shape": model_of(
            [helper.make_node("AveragePool", ["x"], ["y"], name="p", kernel_shape=[1, 2], pads=[0, 0, 1, 1])],
            [x_info()], [untyped("y")]),
        "is not optional but its name is empty": model_of(
            [helper.make_node("Concat", ["x", ""], ["y"], name="c", axis=0)], [x], [untyped("y")]),
        "cannot be its input": model_of(
            [helper.make_node("Add", ["x", "w"], ["y"], name="a")], [x], [untyped("y")],
            [helper.make_tensor("w", TensorProto.INT4, [4], [1, 2, 3, 4])]),
    }
    for match, m in cases.items():
        if match.startswith("is not optional"):  # onnxruntime fails at run rather than at load
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            with pytest.raises(Exception):
                sess.run(None, {"x": np.ones(4, np.float32)})
        else:
            assert ort_refuses(m), match
        with pytest.raises(ModelLoadError, match=match):
            Predictor(m)
