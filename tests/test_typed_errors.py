"""Every error inside importer, passes, shape inference and kernels reaches the user typed (issue 14)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import (InputError, KernelError, ModelLoadError, PooledPredictorError, Predictor,
                              ShapeInferenceError, UnknownBlobError)
from tests.conftest import make_mlp

F = TensorProto.FLOAT


def model_of(nodes, inputs, inits=(), outputs=("y",), opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o)
                                                                  for o in outputs], list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def x_info(shape, name="x"):
    return helper.make_tensor_value_info(name, F, list(shape))


def test_cycle_is_a_model_load_error():
    """Found: ir.py's toposort raised a bare ValueError for a cycle."""
    nodes = [helper.make_node("Relu", ["x", ], ["a"], name="r0"), helper.make_node("Add", ["a", "c"], ["b"], name="r1"),
             helper.make_node("Relu", ["b"], ["c"], name="r2"), helper.make_node("Abs", ["c"], ["y"], name="r3")]
    for level in ("all", "none"):
        with pytest.raises(ModelLoadError, match="cycle") as info:
            Predictor(model_of(nodes, [x_info((4,))]), graph_optimization_level=level)
        assert isinstance(info.value.__cause__, ValueError)


def test_conv_bn_fold_with_a_bias_of_the_wrong_size():
    """Found: passes/conv_bn.py raised a bare ValueError (bias of 3 for 2 output channels)."""
    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")
    b = numpy_helper.from_array(np.ones(3, np.float32), "b")
    bn = [numpy_helper.from_array(np.ones(2, np.float32), n) for n in ("s", "beta", "m", "v")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv"),
             helper.make_node("BatchNormalization", ["h", "s", "beta", "m", "v"], ["y"], name="bn")]
    with pytest.raises(ModelLoadError, match="fold_conv_bn.*node 'bn'") as info:
        Predictor(model_of(nodes, [x_info((1, 1, 2, 2))], [w, b] + bn))
    assert isinstance(info.value.__cause__, ValueError)


def test_fused_activation_with_a_string_parameter():
    """Found: passes/fuse_activation.py raised a bare ValueError (float('abc') of a Clip-6 min)."""
    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "w")
    clip = helper.make_node("Clip", ["h"], ["y"], name="clip")
    clip.attribute.append(helper.make_attribute("min", "abc"))
    m = model_of([helper.make_node("Conv", ["x", "w"], ["h"], name="conv"), clip], [x_info((1, 1, 2, 2))], [w],
                 opset=6)
    with pytest.raises(ModelLoadError, match="'clip'"):  # refused at load: the schema says FLOAT
        Predictor(m)


def test_any_rule_failure_in_a_pass_is_typed():
    """The general wrapper: whatever a rule raises becomes ModelLoadError naming pass and node."""
    import dataclasses

    from pooled_predictor.passes import fc_fuse

    def bug(m, rw):
        raise IndexError("rule bug")

    rule = fc_fuse.FC_RULES[0]
    fc_fuse.FC_RULES[0] = dataclasses.replace(rule, replace=bug)  # the pass holds this very list
    try:
        with pytest.raises(ModelLoadError, match="graph pass 'fuse_matmul_add' failed: rule .* node 'bias1'") as info:
            Predictor(make_mlp())
    finally:
        fc_fuse.FC_RULES[0] = rule
    assert isinstance(info.value.__cause__, IndexError)


def test_resize_with_infinite_scales():
    """Found: ops/shapes/resize.py raised OverflowError (int(inf))."""
    scales = numpy_helper.from_array(np.array([1, 1, np.inf, np.inf], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize")
    p = Predictor(model_of([node], [x_info((1, 1, 2, 2))], [scales]))
    with pytest.raises(ShapeInferenceError, match="node 'resize'") as info:
        p.forward([np.ones((1, 1, 2, 2), np.float32)], ["y"])
    assert isinstance(info.value.__cause__, OverflowError)


def test_any_shape_rule_or_kernel_failure_is_typed(monkeypatch):
    """Found: ops/shapes/tensor.py and ops/context.py raised TypeError / IndexError at forward;
    every shape rule, kernel setup and kernel is now wrapped (program.Step)."""
    p = Predictor(make_mlp(), graph_optimization_level="none")
    step = next(s for s in p.program.steps if s.node.op_type == "Softmax")
    monkeypatch.setattr(step, "rule", lambda ctx: ctx.shapes[7])  # an IndexError, as context.py:92
    with pytest.raises(ShapeInferenceError, match="node 'softmax' \\(Softmax\\): shape inference") as info:
        p.forward([np.ones((2, 16), np.float32)], ["y"])
    assert isinstance(info.value.__cause__, IndexError)


def test_kernel_failure_on_constant_inputs_is_typed():
    idx = numpy_helper.from_array(np.array([7], np.int64), "idx")
    data = numpy_helper.from_array(np.ones(3, np.float32), "data")
    nodes = [helper.make_node("Gather", ["data", "idx"], ["g"], name="gather"),
             helper.make_node("Add", ["x", "g"], ["y"], name="add")]
    with pytest.raises(PooledPredictorError, match="node 'gather'"):
        Predictor(model_of(nodes, [x_info((1,))], [data, idx]))


# ---- requests --------------------------------------------------------------------------------------
X = np.ones((2, 16), np.float32)


def test_predictor_forward_none_is_an_input_error():
    """Found: Predictor.forward(None) returned the outputs of the thread's previous inputs."""
    p = Predictor(make_mlp())
    p.forward([X], ["y"])
    with pytest.raises(InputError, match="needs inputs"):
        p.forward(None, ["y"])
    with pytest.raises(InputError):
        p.run(None, None)


def test_read_only_out_is_an_input_error():
    """Found: a read-only `out` array raised a bare ValueError from np.copyto (predictor.py)."""
    p = Predictor(make_mlp())
    out = np.empty((2, 10), np.float32)
    out.flags.writeable = False
    with pytest.raises(InputError, match="read-only"):
        p.forward([X], ["y"], [out])


@pytest.mark.parametrize("out,match", [
    ([np.empty((10, 2), np.float32)], "shape \\(2, 10\\)"),
    ([np.empty((2, 10), np.float64)], "dtype float32"),
    ([[0.0] * 10], "must be an ndarray"),
    (np.empty((2, 10), np.float32), "list of arrays"),
    ([np.empty((2, 10), np.float32)] * 2, "2 `out` arrays for 1"),
])
def test_out_arrays_checked(out, match):
    p = Predictor(make_mlp())
    with pytest.raises(InputError, match=match):
        p.forward([X], ["y"], out)


@pytest.mark.parametrize("names,error", [("y", InputError), ([1], InputError), (5, InputError),
                                         (["nope"], UnknownBlobError)])
def test_output_names_checked(names, error):
    with pytest.raises(error):
        Predictor(make_mlp()).forward([X], names)



def test_new_options_refuse_bad_values_and_the_pool_keeps_serving():
    """int8_arithmetic and output_device (this session's options): a bad value is refused where it is
    given, typed; a pool job with a bad output_device fails alone and the pool serves the next one."""
    from pooled_predictor import Config, PooledPredictor

    model = make_mlp().SerializeToString()
    with pytest.raises(ValueError, match="int8_arithmetic"):
        Predictor(model, int8_arithmetic="fast")
    with pytest.raises(ValueError, match="int8_arithmetic"):
        Config(model_bytes=[model], int8_arithmetic="fast").validate()
    with pytest.raises(ValueError, match="output_device"):
        Config(model_bytes=[model], output_device="cuda").validate()  # a CPU pool
    x = np.ones((2, 16), np.float32)
    with PooledPredictor(Config(model_bytes=[model], num_threads=2)) as pool:
        try:
            bad = pool.forward({"x": x}, output_device="cuda")
        except (InputError, ValueError):
            bad = None  # refused at the call
        if bad is not None:
            with pytest.raises((InputError, ValueError)):
                bad.result(timeout=30)
        good = pool.forward({"x": x}).result(timeout=30)
        np.testing.assert_allclose(good["y"], Predictor(model).run(None, {"x": x})[0])
