"""Models onnxruntime refuses at session creation are refused at load (issue 14), typed and named."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import ModelLoadError, Predictor, ResourceExhaustedError, ShapeInferenceError

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
        "has no type": model_of(
            [helper.make_node("LeakyRelu", ["x"], ["y"], name="l", alpha=0.5)], [x], [untyped("y")]),
    }
    cases["has no type"].graph.node[0].attribute[0].type = onnx.AttributeProto.UNDEFINED
    for match, m in cases.items():
        if match.startswith("is not optional"):  # onnxruntime fails at run rather than at load
            sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
            with pytest.raises(Exception):
                sess.run(None, {"x": np.ones(4, np.float32)})
        else:
            assert ort_refuses(m), match
        with pytest.raises(ModelLoadError, match=match):
            Predictor(m)


def test_inputs_bound_to_one_type_parameter_with_two_types_refused():
    """Found by tests/fuzz (its quant family and a retyped initializer): nodes whose inputs of one type
    parameter had two types ran, because a pass fused or folded them before any shape rule checked them
    (MatMul + Add -> MatMulAdd, DequantizeLinear of weights -> a constant). onnxruntime refuses each at load
    ("Type parameter (T) ... bound to different types"); so do we, before any pass, naming the node. A type
    that only a pass would know (Cast's output) is not guessed: what reads it is checked later, by its kernel."""
    i8, u8, i32, u16 = TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32, TensorProto.UINT16
    x = x_info((2, 4))
    cases = {
        "Add: float and uint32": model_of(
            [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("Add", ["h", "b"], ["y"], name="bias")],
            [x], [untyped("y")], [numpy_helper.from_array(np.ones((4, 3), np.float32), "w"),
                                  helper.make_tensor("b", TensorProto.UINT32, [3], [1, 2, 3])]),
        "DequantizeLinear: int32 x, uint16 zero point": model_of(
            [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
             helper.make_node("Add", ["x", "d"], ["y"], name="add")],
            [x], [untyped("y")], [helper.make_tensor("q", i32, [4], [1, 2, 3, 4]),
                                  helper.make_tensor("s", F, [], [0.5]), helper.make_tensor("z", u16, [], [1])],
            opset=21),
        "MatMulInteger: int8 b, uint8 b_zero_point": model_of(
            [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dq"),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"], name="mm")],
            [x], [untyped("y")], [helper.make_tensor("w", i8, [4, 2], list(range(8))),
                                  helper.make_tensor("wz", u8, [], [0])]),
        "a type carried through Relu": model_of(
            [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "b"], ["y"], name="add")],
            [x], [untyped("y")], [helper.make_tensor("b", TensorProto.INT64, [4], [1, 2, 3, 4])]),
    }
    for what, m in cases.items():
        assert ort_refuses(m), what
        with pytest.raises(ShapeInferenceError, match="must have the same type|takes"):
            Predictor(m)
    # Cast's output type comes from its attribute: not inferred here, so a correct model is not refused
    ok = model_of([helper.make_node("Cast", ["x"], ["c"], name="cast", to=TensorProto.INT64),
                   helper.make_node("Add", ["c", "b"], ["y"], name="add")],
                  [x], [untyped("y")], [helper.make_tensor("b", TensorProto.INT64, [4], [1, 2, 3, 4])])
    out = Predictor(ok).forward({"x": np.full((2, 4), 2.5, np.float32)})["y"]
    np.testing.assert_array_equal(out, np.array([[3, 4, 5, 6]] * 2, np.int64))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_scale_that_is_not_a_finite_number_is_refused(bad):
    """Found by tests/fuzz: a NaN w_scale of a QLinearConv ran, its outputs whatever the float-to-int
    conversion of NaN gave (onnxruntime's and ours differed by the path taken). Refused at load, naming the
    node and input; a finite scale, negative or zero included, still loads."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 3, 3])
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("xs", np.float32(0.1)), ("xz", np.uint8(128)), ("w", np.ones((2, 2, 1, 1), np.int8)),
        ("ws", np.array([0.01, bad], np.float32)), ("wz", np.zeros(2, np.int8)), ("ys", np.float32(0.2)),
        ("yz", np.uint8(128)))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="qconv")
    m = model_of([node], [x], [untyped("y")], inits)
    with pytest.raises(ModelLoadError, match="node 'qconv' .*w_scale 'ws' holds .*finite number"):
        Predictor(m)
    inits[3] = numpy_helper.from_array(np.array([0.01, -0.02], np.float32), "ws")
    Predictor(model_of([node], [x], [untyped("y")], inits)).forward({"x": np.full((1, 2, 3, 3), 130, np.uint8)})


def test_a_nan_scale_of_a_float_op_is_not_a_quantization_scale():
    """The finite-scale check reads the quantized ops' scales only: LayerNormalization's Scale (gamma) holding
    a NaN is a float weight like any other, and runs as onnxruntime runs it (NaN out)."""
    x = helper.make_tensor_value_info("x", F, [2, 4])
    gamma = numpy_helper.from_array(np.array([1, np.nan, 1, 1], np.float32), "gamma")
    node = helper.make_node("LayerNormalization", ["x", "gamma"], ["y"], name="ln", axis=-1)
    out = Predictor(model_of([node], [x], [untyped("y")], [gamma])).forward({"x": np.ones((2, 4), np.float32)})
    assert np.isnan(out["y"][:, 1]).all()
