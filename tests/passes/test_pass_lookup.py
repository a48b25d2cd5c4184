"""tabulate_8bit_chains: element-wise chains on one 8-bit tensor become one Lookup node, with the same bits.

The chains are those onnxruntime's quantizer leaves in quantized models: the GELU between QLinear nodes in the
QOperator format (DequantizeLinear, Div, Erf, QuantizeLinear, QLinearAdd, QLinearMul by X, QLinearMul by 0.5)
and its QDQ form (DequantizeLinear / QuantizeLinear pairs around Div, Erf, Add, Mul). Each model runs with the
pass and without it (our Net, compiled kernels): the outputs must be equal bit for bit; and against onnxruntime
within one quantization step (its float Erf rounds in its own way).
"""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.errors import ShapeInferenceError
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu import quantized_contrib as qc
from pooled_predictor.passes import optimize
from tests.onnx_helpers import run_ort
from tests.passes.pass_helpers import run_net

MS = "com.microsoft"
rng = np.random.default_rng(17)
T8 = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _consts(dtype, extra=()):
    z = (lambda v: np.array(v, dtype)) if dtype == np.uint8 else (lambda v: np.array(v - 128, dtype))
    f = lambda v: np.array(v, np.float32)  # noqa: E731
    vals = {"xs": f(0.031), "xz": z(131), "es": f(1 / 127), "ez": z(128), "one": z(255), "ones": f(1 / 255),
            "onez": z(0), "as": f(2 / 255), "az": z(0), "ms": f(0.021), "mz": z(140), "half": z(255),
            "halfs": f(0.5 / 255), "halfz": z(0), "ys": f(0.013), "yz": z(120), "sqrt2": f(1.4142135),
            **dict(extra)}
    return [numpy_helper.from_array(v, k) for k, v in vals.items()]


def _gelu_qop(dtype, also_read: bool = False, out_float: bool = False):
    """QOperator GELU on an 8-bit X (the quantizer's form), then a consumer outside the chain."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("Div", ["xf", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("QuantizeLinear", ["e", "es", "ez"], ["eq"]),
             helper.make_node("QLinearAdd", ["eq", "es", "ez", "one", "ones", "onez", "as", "az"], ["a"], domain=MS),
             helper.make_node("QLinearMul", ["x", "xs", "xz", "a", "as", "az", "ms", "mz"], ["m"], domain=MS),
             helper.make_node("QLinearMul", ["m", "ms", "mz", "half", "halfs", "halfz", "ys", "yz"], ["g"],
                              domain=MS),
             # a reader outside the chain: an 8-bit MaxPool (max commutes with nothing here; it just reads g)
             helper.make_node("MaxPool", ["g"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    outputs = [helper.make_tensor_value_info("y", T8[dtype], None)]
    if also_read:  # an intermediate read outside the chain: its own table (float32) or left as it is
        outputs.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, None))
    if out_float:
        nodes.append(helper.make_node("DequantizeLinear", ["g", "ys", "yz"], ["gf"]))
        outputs.append(helper.make_tensor_value_info("gf", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", T8[dtype], [2, 16, 12, 10])],
                              outputs, _consts(dtype))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _gelu_qdq(dtype):
    """The same GELU in the QDQ format: QuantizeLinear / DequantizeLinear around every float op."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("Div", ["xf", "sqrt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("QuantizeLinear", ["e", "es", "ez"], ["eq"]),
             helper.make_node("DequantizeLinear", ["eq", "es", "ez"], ["ef"]),
             helper.make_node("Add", ["ef", "onef"], ["a"]),
             helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["af"]),
             helper.make_node("Mul", ["xf", "af"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "ms", "mz"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "ms", "mz"], ["mf"]),
             helper.make_node("Mul", ["mf", "halff"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "gelu_qdq", [helper.make_tensor_value_info("x", T8[dtype], [1, 8, 9, 7])],
                              [helper.make_tensor_value_info("y", T8[dtype], None)],
                              _consts(dtype, {"onef": np.array(1.0, np.float32), "halff": np.array(0.5, np.float32)}))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _both(model, feeds):
    """Our outputs with the pass and without it (extended level both times), and the first graph's op counts."""
    graph = load_onnx(model)
    with_pass, report = optimize(graph, level="extended")
    without, _ = optimize(graph, level="extended", disable=["tabulate_8bit_chains"])
    return run_net(with_pass, feeds), run_net(without, feeds), with_pass.op_counts(), report


def _codes(dtype, shape):
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
    x.reshape(-1)[:256] = np.arange(256, dtype=np.uint8).view(dtype)  # every code occurs
    return x


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("form", ["qop", "qdq"])
def test_quantized_gelu_becomes_one_lookup_with_the_same_bits(dtype, form):
    model = _gelu_qop(dtype) if form == "qop" else _gelu_qdq(dtype)
    x = _codes(dtype, [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])
    ours, plain, ops, report = _both(model, {"x": x})
    assert ops["Lookup"] == 1 and ops["Erf"] == 0 and ops["QuantizeLinear"] == 0, ops
    assert "tabulate_8bit_chains" in str(report)
    for a, b in zip(ours, plain):
        np.testing.assert_array_equal(a, b)
    (ref,) = run_ort(model, {"x": x})
    assert ours[0].dtype == ref.dtype and np.max(np.abs(ours[0].astype(int) - ref.astype(int))) <= 1


def test_an_intermediate_read_outside_keeps_its_value():
    """d (Div's float output) is a graph output: it gets its own float32 table or stays computed, and both outputs
    keep their bits."""
    model = _gelu_qop(np.uint8, also_read=True, out_float=True)
    x = _codes(np.uint8, (2, 16, 12, 10))
    ours, plain, ops, _ = _both(model, {"x": x})
    assert ops["Lookup"] >= 1, ops
    for a, b in zip(ours, plain):
        np.testing.assert_array_equal(a, b)


def test_a_per_channel_operand_or_a_cheap_chain_is_left_alone():
    """A per-channel constant (a different function per channel) stops the region; a chain of three cheap ops
    (DequantizeLinear, Relu, QuantizeLinear: vectorized passes) is not worth a lookup."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 5, 5])
    consts = [numpy_helper.from_array(v, k) for k, v in
              {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8),
               "c": rng.standard_normal((1, 4, 1, 1)).astype(np.float32)}.items()]
    per_channel = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
                   helper.make_node("Add", ["f", "c"], ["a"]), helper.make_node("Erf", ["a"], ["e"]),
                   helper.make_node("QuantizeLinear", ["e", "s", "z"], ["y"])]
    cheap = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]), helper.make_node("Relu", ["f"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["y"])]
    for nodes in (per_channel, cheap):
        g = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], consts)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        graph, _ = optimize(load_onnx(model), level="extended")
        assert graph.op_counts()["Lookup"] == 0


@pytest.mark.parametrize("table_type", [np.uint8, np.int8, np.float32, np.float64])
@pytest.mark.parametrize("code_type", [np.uint8, np.int8])
def test_lookup_kernel_compiled_and_numpy(table_type, code_type):
    """The Lookup kernel (compiled/quantize.lookup_bytes for uint8, int8 and float32 tables; numpy's take for
    others) indexes by the code's byte, in its own output and in place over the codes."""
    table = (rng.standard_normal(256) * 50).astype(table_type)
    x = _codes(code_type, (3, 7, 13))
    ref = table[x.view(np.uint8)]
    out = np.empty(x.shape, table_type)
    kernel = qc.Lookup(None)
    assert compiled.active()
    kernel(x, table, out=out)
    np.testing.assert_array_equal(out, ref)
    frozen = table.copy()
    frozen.flags.writeable = False
    run = kernel.prepare_run(x, frozen, out=out)
    assert (run is not None) == (np.dtype(table_type) != np.float64)
    if np.dtype(table_type).itemsize == 1:  # the planner's in-place reuse: Y over X
        io = x.view(table_type).copy()
        kernel(io.view(code_type), table, out=io)
        np.testing.assert_array_equal(io, ref)


@pytest.mark.parametrize("table_shape,x_type", [((255,), TensorProto.UINT8), ((16, 16), TensorProto.INT8),
                                                ((256,), TensorProto.FLOAT)])
def test_a_crafted_lookup_node_is_refused_with_a_typed_error(table_shape, x_type):
    """A model file may name our domain's Lookup itself: a table other than (256,) or codes other than 8-bit are a
    ShapeInferenceError when the Net is laid out for its input, naming the node."""
    table = numpy_helper.from_array(np.zeros(table_shape, np.float32), "t")
    g = helper.make_graph([helper.make_node("Lookup", ["x", "t"], ["y"], domain="pooled_predictor")], "g",
                          [helper.make_tensor_value_info("x", x_type, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("pooled_predictor", 1)])
    model.ir_version = 8
    x = np.zeros((2, 3), np.float32 if x_type == TensorProto.FLOAT else np.uint8 if x_type == TensorProto.UINT8
                 else np.int8)
    with pytest.raises(ShapeInferenceError, match="Lookup"):
        Predictor(model.SerializeToString()).run(None, {"x": x})
