"""Fuzz cases: small models and requests, mutated deterministically from (seed, index).

Every case is built from `make_case(seed, index)` alone, so a failing case is
replayed with `python -m tests.fuzz.harness --seed S --only INDEX`. Families:

    truncate      the serialized model cut at a random byte
    flip          1-16 random bytes of the serialized model changed
    field         one protobuf field of the model changed (attribute values,
                  op types, node inputs/outputs, dims, data types, names,
                  opsets, initializers removed or duplicated, value infos)
    attribute     Conv/MaxPool/AveragePool spatial attributes set to absurd values
    quant         a quantized model (QDQ, QOperator with onnxruntime's com.microsoft contrib ops, or
                  dynamic) with one quantization parameter crafted: scales 0, negative, NaN, inf,
                  subnormal or huge, per-channel lengths and ranks off, zero points of another type,
                  shape or value, axis out of range, bias or weight of another type
    external      external data: escaping locations (.., absolute, symlinks into
                  the bait directory), bad offsets and lengths, FIFOs, directories,
                  bytes sources with and without external_data_dir
    request       a valid model, a malformed request (None, wrong names, dtypes,
                  ranks, huge broadcast batches, NaN, bad `out`, bad output names)
    caffe         a Caffe pair (prototxt text, caffemodel bytes: Predictor.strings) with the text
                  cut, characters changed, numbers set to interesting values, a layer's type,
                  bottom or top changed, a layer repeated or dropped; or the caffemodel cut,
                  bytes changed, a blob's shape or data count changed, a layer's blobs dropped;
                  compared with OpenCV dnn where both run it

A case carries the model (bytes), the files of its directory, how it is loaded,
and the requests to run; `benign` cases may also succeed, and are then
compared with onnxruntime when onnxruntime accepts the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("truncate", "flip", "field", "attribute", "external", "request", "quant", "caffe")
INTERESTING_INTS = [-(2 ** 63), -(2 ** 31), -1, 0, 1, 2, 3, 7, 255, 2 ** 16, 2 ** 31 - 1, 2 ** 32, 2 ** 62,
                    2 ** 63 - 1]
F = TensorProto.FLOAT


@dataclass
class Case:
    """One fuzz case (see the module docstring)."""

    index: int
    family: str
    what: str
    model: bytes
    files: dict = field(default_factory=dict)   # name -> bytes | ("symlink", target) | ("fifo",) | ("dir",)
    load_as: str = "path"                       # "path", "bytes" or "proto"
    external_data_dir: bool = False             # pass the model's directory explicitly
    requests: list = field(default_factory=list)  # [(inputs, output_names, out)]
    feeds: dict | None = None                   # the valid feed, for the onnxruntime comparison
    caffe: tuple | None = None                  # (prototxt text, caffemodel bytes): a Caffe case


# ---- base models ---------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits, opset=17, contrib=False) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if contrib else [])
    m = helper.make_model(helper.make_graph(nodes, "fuzz", inputs, outputs, inits), opset_imports=opsets)
    m.ir_version = 9
    return m


def mlp(rng) -> tuple[onnx.ModelProto, dict]:
    w1 = numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
             helper.make_node("MatMul", ["h2", "w2"], ["logits"], name="fc2"),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 6])],
               [helper.make_tensor_value_info("y", F, ["N", 3])], [w1, b1, w2])
    return m, {"x": rng.standard_normal((2, 6)).astype(np.float32)}


def cnn(rng) -> tuple[onnx.ModelProto, dict]:
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    bn = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in
          (("s", rng.random(4) + 0.5), ("beta", rng.standard_normal(4)), ("mean", rng.standard_normal(4)),
           ("var", rng.random(4) + 0.5))]
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "s", "beta", "mean", "var"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("AveragePool", ["p"], ["a"], name="avg", kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("Reshape", ["a", "shape"], ["y"], name="flat")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 2, 8, 8])],
               [helper.make_tensor_value_info("y", F, None)], [w, b, shape] + bn)
    return m, {"x": rng.standard_normal((1, 2, 8, 8)).astype(np.float32)}


def shapes_model(rng) -> tuple[onnx.ModelProto, dict]:
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    idx = numpy_helper.from_array(np.array([0, 2], np.int64), "idx")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["r"], name="resize", mode="nearest"),
             helper.make_node("Concat", ["r", "r"], ["c"], name="cat", axis=1),
             helper.make_node("Gather", ["c", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Transpose", ["g"], ["y"], name="tr", perm=[0, 2, 3, 1])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
               [helper.make_tensor_value_info("y", F, None)], [scales, idx])
    return m, {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}


def _t(name, value, dtype):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def _q_params(rng, name, signed=False, shape=()):
    """A scale ("<name>_scale", float32) and zero point ("<name>_zp", uint8 or int8) for a quantized tensor."""
    scale = (rng.random(shape) * 0.05 + 0.01).astype(np.float32)
    zp = rng.integers(-20, 20, shape) if signed else rng.integers(100, 156, shape)
    return [_t(f"{name}_scale", scale, np.float32), _t(f"{name}_zp", zp, np.int8 if signed else np.uint8)]


def qdq_cnn(rng) -> tuple[onnx.ModelProto, dict]:
    """QDQ (onnxruntime's quantize_static form): Q/DQ pairs around Conv (int8 per-channel W, int32 bias),
    Relu, MaxPool, Sigmoid (a Lookup chain) and GlobalAveragePool."""
    m = 8
    inits = [_t("w", rng.integers(-127, 128, (m, 4, 3, 3)), np.int8),
             _t("w_scale", rng.random(m) * 0.01 + 0.002, np.float32), _t("w_zp", np.zeros(m), np.int8),
             _t("b", rng.integers(-500, 500, m), np.int32), _t("b_zp", np.zeros(m), np.int32)]
    for name in ("x", "c", "r", "p", "s", "g"):
        inits += _q_params(rng, name)
    x_scale, w_scale = numpy_helper.to_array(inits[5]), numpy_helper.to_array(inits[1])
    inits.append(_t("b_scale", x_scale * w_scale, np.float32))

    def qdq(src, name):
        return [helper.make_node("QuantizeLinear", [src, f"{name}_scale", f"{name}_zp"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zp"], [f"{name}_d"])]

    nodes = (qdq("x", "x")
             + [helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["w_d"], axis=0),
                helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["b_d"], axis=0),
                helper.make_node("Conv", ["x_d", "w_d", "b_d"], ["conv"], name="conv", pads=[1, 1, 1, 1])]
             + qdq("conv", "c") + [helper.make_node("Relu", ["c_d"], ["relu"], name="relu")]
             + qdq("relu", "r") + [helper.make_node("MaxPool", ["r_d"], ["pool"], name="pool", kernel_shape=[2, 2],
                                                    strides=[2, 2])]
             + qdq("pool", "p") + [helper.make_node("Sigmoid", ["p_d"], ["sig"], name="sigmoid")]
             + qdq("sig", "s") + [helper.make_node("GlobalAveragePool", ["s_d"], ["gap"], name="gap")]
             + qdq("gap", "g")[:1]
             + [helper.make_node("DequantizeLinear", ["g_q", "g_scale", "g_zp"], ["y"], name="out")])
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 4, 6, 6])],
                   [helper.make_tensor_value_info("y", F, [1, m, 1, 1])], inits, opset=21)
    return model, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}


def qop_cnn(rng) -> tuple[onnx.ModelProto, dict]:
    """QOperator (onnxruntime's quantize_static form): QLinearConv and the com.microsoft contrib ops
    QLinearAdd, QLinearSigmoid, QLinearGlobalAveragePool, QGemm."""
    m = 8
    inits = [_t("w", rng.integers(-127, 128, (m, 4, 3, 3)), np.int8),
             _t("w_scale", rng.random(m) * 0.01 + 0.002, np.float32), _t("w_zp", np.zeros(m), np.int8),
             _t("b", rng.integers(-500, 500, m), np.int32),
             _t("fc", rng.integers(-127, 128, (m, 3)), np.int8), _t("fc_scale", 0.01, np.float32),
             _t("fc_zp", 0, np.int8), _t("fc_b", rng.integers(-500, 500, 3), np.int32),
             _t("shape", [1, m], np.int64)]
    for name in ("x", "c", "a", "s", "g", "o"):
        inits += _q_params(rng, name)
    ms = "com.microsoft"
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"]),
             helper.make_node("QLinearConv", ["x_q", "x_scale", "x_zp", "w", "w_scale", "w_zp", "c_scale", "c_zp",
                                              "b"], ["c_q"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAdd", ["c_q", "c_scale", "c_zp", "c_q", "c_scale", "c_zp", "a_scale", "a_zp"],
                              ["a_q"], name="add", domain=ms),
             helper.make_node("QLinearSigmoid", ["a_q", "a_scale", "a_zp", "s_scale", "s_zp"], ["s_q"],
                              name="sigmoid", domain=ms),
             helper.make_node("QLinearGlobalAveragePool", ["s_q", "s_scale", "s_zp", "g_scale", "g_zp"], ["g_q"],
                              name="gap", domain=ms, channels_last=0),
             helper.make_node("Reshape", ["g_q", "shape"], ["flat"], name="flat"),
             helper.make_node("QGemm", ["flat", "g_scale", "g_zp", "fc", "fc_scale", "fc_zp", "fc_b", "o_scale",
                                        "o_zp"], ["o_q"], name="fc", domain=ms),
             helper.make_node("DequantizeLinear", ["o_q", "o_scale", "o_zp"], ["y"], name="out")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 4, 6, 6])],
                   [helper.make_tensor_value_info("y", F, [1, 3])], inits, contrib=True)
    return model, {"x": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}


def dynamic_mlp(rng) -> tuple[onnx.ModelProto, dict]:
    """Dynamic quantization (onnxruntime's quantize_dynamic form): DynamicQuantizeLinear -> MatMulInteger ->
    Cast -> Mul, then QuantizeLinear -> QLinearMatMul -> DequantizeLinear."""
    inits = [_t("w1", rng.integers(-127, 128, (6, 8)), np.int8), _t("w1_scale", 0.02, np.float32),
             _t("w1_zp", 0, np.int8), _t("w2", rng.integers(-127, 128, (8, 3)), np.int8),
             _t("w2_scale", rng.random(3) * 0.01 + 0.002, np.float32), _t("w2_zp", np.zeros(3), np.int8)]
    for name in ("h", "o"):
        inits += _q_params(rng, name)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["x_q", "x_scale", "x_zp"], name="dq"),
             helper.make_node("MatMulInteger", ["x_q", "w1", "x_zp", "w1_zp"], ["acc"], name="fc1"),
             helper.make_node("Cast", ["acc"], ["acc_f"], name="cast", to=F),
             helper.make_node("Mul", ["x_scale", "w1_scale"], ["s"], name="scales"),
             helper.make_node("Mul", ["acc_f", "s"], ["h"], name="rescale"),
             helper.make_node("QuantizeLinear", ["h", "h_scale", "h_zp"], ["h_q"], name="q"),
             helper.make_node("QLinearMatMul", ["h_q", "h_scale", "h_zp", "w2", "w2_scale", "w2_zp", "o_scale",
                                                "o_zp"], ["o_q"], name="fc2"),
             helper.make_node("DequantizeLinear", ["o_q", "o_scale", "o_zp"], ["y"], name="out")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["N", 6])],
                   [helper.make_tensor_value_info("y", F, ["N", 3])], inits, opset=21)
    return model, {"x": rng.standard_normal((2, 6)).astype(np.float32)}


def attention(rng) -> tuple[onnx.ModelProto, dict]:
    """One encoder block as exporters write it (the passes' attention, Gelu and LayerNormalization fusions
    apply): Q, K, V projections, (Q K^T) / sqrt(d) + mask, Softmax, times V, a residual, LayerNormalization,
    an Erf Gelu, a second residual."""
    d, seq = 8, 5
    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(v, n) for n, v in (
        ("wq", w(d, d)), ("wk", w(d, d)), ("wv", w(d, d)), ("bq", w(d)), ("perm_c", np.float32(np.sqrt(d))),
        ("mask", np.where(rng.random((1, seq, seq)) < 0.2, -1e4, 0).astype(np.float32)),
        ("gamma", w(d) + 1), ("beta", w(d)), ("w1", w(d, 2 * d)), ("w2", w(2 * d, d)),
        ("half", np.float32(0.5)), ("one", np.float32(1.0)), ("rsqrt2", np.float32(1 / np.sqrt(2))))]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q0"], name="q"),
             helper.make_node("Add", ["q0", "bq"], ["q"], name="q_bias"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="k"),
             helper.make_node("MatMul", ["x", "wv"], ["v"], name="v"),
             helper.make_node("Transpose", ["k"], ["kt"], name="kt", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Div", ["s", "perm_c"], ["sd"], name="scale"),
             helper.make_node("Add", ["sd", "mask"], ["sm"], name="masked"),
             helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"], name="context"),
             helper.make_node("Add", ["o", "x"], ["r"], name="residual"),
             helper.make_node("LayerNormalization", ["r", "gamma", "beta"], ["ln"], name="ln", axis=-1,
                              epsilon=1e-5),
             helper.make_node("MatMul", ["ln", "w1"], ["h"], name="fc1"),
             helper.make_node("Mul", ["h", "rsqrt2"], ["hs"], name="gelu_scale"),
             helper.make_node("Erf", ["hs"], ["he"], name="gelu_erf"),
             helper.make_node("Add", ["he", "one"], ["h1"], name="gelu_add"),
             helper.make_node("Mul", ["h", "h1"], ["hh"], name="gelu_mul"),
             helper.make_node("Mul", ["hh", "half"], ["g"], name="gelu_half"),
             helper.make_node("MatMul", ["g", "w2"], ["f"], name="fc2"),
             helper.make_node("Add", ["f", "ln"], ["y"], name="residual2")]
    model = _model(nodes, [helper.make_tensor_value_info("x", F, ["N", seq, d])],
                   [helper.make_tensor_value_info("y", F, ["N", seq, d])], inits)
    return model, {"x": rng.standard_normal((2, seq, d)).astype(np.float32)}


BASES = (mlp, cnn, shapes_model, qdq_cnn, qop_cnn, dynamic_mlp, attention)
QUANTIZED = (qdq_cnn, qop_cnn, dynamic_mlp)


# ---- the cases -----------------------------------------------------------------------------------
CAFFE_TEXT = """name: "fuzz"
input: "data"
input_shape { dim: 1 dim: 3 dim: 8 dim: 8 }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 1 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" batch_norm_param { use_global_stats: true } }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "branch" type: "Convolution" bottom: "pool" top: "branch"
        convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "sum" type: "Eltwise" bottom: "pool" bottom: "branch" top: "sum" }
layer { name: "cat" type: "Concat" bottom: "sum" bottom: "pool" top: "cat" }
layer { name: "fc" type: "InnerProduct" bottom: "cat" top: "fc" inner_product_param { num_output: 5 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def caffe_pair(rng) -> tuple[str, bytes, dict]:
    """CAFFE_TEXT and its caffemodel (layer name -> blobs, as Caffe writes them), and a feed."""
    from pooled_predictor.importers.caffe import caffe_pb

    w = lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)  # noqa: E731
    blobs = {"conv": [w(4, 3, 3, 3), w(4)], "bn": [w(4), np.abs(w(4)) + 0.5, np.ones(1, np.float32)],
             "scale": [w(4) + 1, w(4)], "branch": [w(4, 4, 1, 1), w(4)], "fc": [w(5, 128), w(5)]}
    net = caffe_pb.NetParameter(name="weights")
    for name, arrays in blobs.items():
        layer = net.layer.add()
        layer.name = name
        for a in arrays:
            b = layer.blobs.add()
            b.shape.dim.extend(a.shape)
            b.data.extend(a.ravel().tolist())
    return CAFFE_TEXT, net.SerializeToString(), {"data": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}


def make_case(seed: int, index: int) -> Case:
    rng = np.random.default_rng([seed, index])
    family = FAMILIES[index % len(FAMILIES)]
    if family == "caffe":
        case = Case(index, family, "", b"")
        _caffe(case, rng)
        return case
    base, feeds = BASES[int(rng.integers(len(BASES)))](rng)
    case = Case(index, family, "", b"", feeds=feeds, requests=[(feeds, None, None)])
    globals()[f"_{family}"](case, base, rng)
    return case


def _truncate(case: Case, model: onnx.ModelProto, rng) -> None:
    data = model.SerializeToString()
    cut = int(rng.integers(0, len(data)))
    case.model, case.what = data[:cut], f"cut at {cut} of {len(data)} bytes"
    case.load_as = str(rng.choice(["path", "bytes"]))


def _flip(case: Case, model: onnx.ModelProto, rng) -> None:
    data = bytearray(model.SerializeToString())
    n = int(rng.integers(1, 17))
    where = rng.integers(0, len(data), n)
    for i in where:
        data[i] = int(rng.integers(0, 256))
    case.model, case.what = bytes(data), f"{n} bytes changed at {sorted(where.tolist())[:8]}"
    case.load_as = str(rng.choice(["path", "bytes"]))


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _field(case: Case, model: onnx.ModelProto, rng) -> None:
    g = model.graph
    node = _pick(rng, g.node)
    choice = int(rng.integers(14))
    what = ""
    if choice == 0 and node.attribute:  # an integer attribute to an interesting value
        a = _pick(rng, node.attribute)
        v = _pick(rng, INTERESTING_INTS)
        if a.type == onnx.AttributeProto.INTS and a.ints:
            a.ints[int(rng.integers(len(a.ints)))] = v
        elif a.type == onnx.AttributeProto.INT:
            a.i = v
        else:
            a.type = onnx.AttributeProto.INT
            a.i = v
        what = f"{node.name}.{a.name} -> {v}"
    elif choice == 1:
        new = _pick(rng, ["Relu", "Softmax", "Conv", "MatMul", "Concat", "Resize", "Gather", "NoSuchOp", "If",
                          "Loop", "Split", "TopK", "Constant", "Identity", "Reshape", "Expand", "Tile"])
        what, node.op_type = f"{node.name}: {node.op_type} -> {new}", new
    elif choice == 2:
        node.output.append(_pick(rng, ["extra", "y", node.input[0] if node.input else "z", ""]))
        what = f"{node.name}: output {list(node.output)}"
    elif choice == 3 and node.input:
        i = int(rng.integers(len(node.input)))
        node.input[i] = _pick(rng, ["", "nope", "y", node.output[0], "x"])
        what = f"{node.name}: inputs {list(node.input)}"
    elif choice == 4 and g.initializer:
        t = _pick(rng, g.initializer)
        if t.dims:
            t.dims[int(rng.integers(len(t.dims)))] = _pick(rng, INTERESTING_INTS)
        what = f"initializer {t.name} dims {list(t.dims)}"
    elif choice == 5 and g.initializer:
        t = _pick(rng, g.initializer)
        t.data_type = int(rng.integers(0, 25))
        what = f"initializer {t.name} data_type {t.data_type}"
    elif choice == 6 and g.initializer:
        t = g.initializer.add()
        t.CopyFrom(_pick(rng, g.initializer))
        if t.raw_data:
            t.raw_data = bytes(len(t.raw_data))
        what = f"initializer {t.name} duplicated"
    elif choice == 7 and g.initializer:
        name = g.initializer[int(rng.integers(len(g.initializer)))].name
        kept = [t for t in g.initializer if t.name != name]
        del g.initializer[:]
        g.initializer.extend(kept)
        what = f"initializer {name} removed"
    elif choice == 8:
        model.opset_import[0].version = int(_pick(rng, [1, 6, 9, 11, 13, 21, 99, 10 ** 9]))
        what = f"opset {model.opset_import[0].version}"
    elif choice == 9 and g.input[0].type.tensor_type.shape.dim:
        dims = g.input[0].type.tensor_type.shape.dim
        d = dims[int(rng.integers(len(dims)))]
        d.dim_value = _pick(rng, INTERESTING_INTS[2:])
        what = f"input dim -> {d.dim_value}"
    elif choice == 10:
        g.output[0].type.Clear()
        dup = g.node.add()
        dup.CopyFrom(node)
        what = f"node {node.name} duplicated behind an untyped output"
    elif choice == 11:
        node.name, node.output[0] = "dup", g.node[0].output[0]
        what = f"node writes {node.output[0]} twice"
    elif choice == 12:
        g.output[0].type.Clear()
        t = g.initializer.add()
        t.CopyFrom(_pick(rng, g.initializer))
        what = f"initializer {t.name} twice behind an untyped output"
    else:
        g.node.remove(node)
        what = f"node {node.name} removed"
    case.model, case.what = model.SerializeToString(), what or "no change"


def _attribute(case: Case, model: onnx.ModelProto, rng) -> None:
    if not any(n.op_type in ("Conv", "MaxPool", "AveragePool") for n in model.graph.node):
        model, case.feeds = cnn(rng)
        case.requests = [(case.feeds, None, None)]
    node = _pick(rng, [n for n in model.graph.node if n.op_type in ("Conv", "MaxPool", "AveragePool")])
    name = _pick(rng, ["pads", "strides", "dilations", "kernel_shape"] if node.op_type == "Conv"
                 else ["pads", "strides", "kernel_shape", "dilations", "ceil_mode"])
    count = {"pads": 4, "ceil_mode": 0}.get(name, 2)
    values = [int(_pick(rng, INTERESTING_INTS)) if rng.random() < 0.5 else int(rng.integers(0, 4))
              for _ in range(count or 1)]
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute(name, values if count else values[0]))
    if rng.random() < 0.3:  # skip onnx.checker as onnxruntime does
        model.graph.output[0].type.Clear()
    case.model, case.what = model.SerializeToString(), f"{node.name}.{name} = {values}"


def _quant(case: Case, model: onnx.ModelProto, rng) -> None:
    """One quantization parameter, weight or bias of a quantized base crafted (see the module docstring)."""
    if not any(t.name.endswith("_scale") for t in model.graph.initializer):
        model, case.feeds = _pick(rng, QUANTIZED)(rng)
        case.requests = [(case.feeds, None, None)]
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    scales = [n for n in inits if n.endswith("_scale")]
    zps = [n for n in inits if n.endswith("_zp")]
    choice = int(rng.integers(9))
    if choice == 0:  # a scale's values
        name = _pick(rng, scales)
        v = numpy_helper.to_array(inits[name]).copy()
        bad = np.float32(_pick(rng, [0.0, -0.01, np.nan, np.inf, -np.inf, 1e-45, 1e-30, 3e38, 1e20]))
        if v.ndim and rng.random() < 0.5:
            v[int(rng.integers(v.size))] = bad
        else:
            v[...] = bad
        inits[name].CopyFrom(_t(name, v, np.float32))
        what = f"{name} = {v.tolist()}"
    elif choice == 1:  # a scale's or zero point's shape: a length off by one, another rank, empty
        name = _pick(rng, scales + zps)
        v = numpy_helper.to_array(inits[name])
        n = max(1, v.size)
        empty = v.reshape(-1)[:0]
        new = _pick(rng, [np.resize(v, n + 1), np.resize(v, n - 1) if n > 1 else empty, v.reshape((1,) * 2 + v.shape),
                          np.resize(v, (2, 2)), empty])
        inits[name].CopyFrom(_t(name, new, v.dtype))
        what = f"{name} shape {list(new.shape)}"
    elif choice == 2:  # a zero point of another type
        name = _pick(rng, zps)
        v = numpy_helper.to_array(inits[name])
        dtype = _pick(rng, [np.int8, np.uint8, np.int32, np.float32, np.int16, np.uint16, np.int64])
        inits[name].CopyFrom(_t(name, v.astype(dtype), dtype))
        what = f"{name} dtype {np.dtype(dtype).name}"
    elif choice == 3:  # a zero point's value
        name = _pick(rng, zps)
        v = numpy_helper.to_array(inits[name]).copy()
        info = np.iinfo(v.dtype) if v.dtype.kind in "iu" else None
        v[...] = _pick(rng, [info.min, info.max, 0]) if info else 0
        inits[name].CopyFrom(_t(name, v, v.dtype))
        what = f"{name} = {v.tolist()}"
    elif choice == 4:  # an axis attribute (per-channel Q/DQ)
        node = _pick(rng, g.node)
        v = int(_pick(rng, [-5, -2, -1, 1, 2, 3, 4, 2 ** 31 - 1, -(2 ** 63)]))
        kept = [a for a in node.attribute if a.name != "axis"]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute("axis", v)])
        what = f"{node.name or node.op_type}.axis = {v}"
    elif choice == 5:  # an optional zero point left out (valid: 0 of the default type)
        node = _pick(rng, [n for n in g.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")] or g.node)
        if len(node.input) == 3:
            del node.input[2]
        what = f"{node.name or node.op_type}: inputs {list(node.input)}"
    elif choice == 6:  # a weight or bias of another type or shape
        name = _pick(rng, [n for n in inits if not n.endswith(("_scale", "_zp"))])
        v = numpy_helper.to_array(inits[name])
        new = _pick(rng, [v.astype(np.uint8), v.astype(np.int32), v.astype(np.float32), v.astype(np.int8),
                          v.reshape(-1), v[..., :1] if v.ndim else v])
        inits[name].CopyFrom(_t(name, new, new.dtype))
        what = f"{name} {new.dtype.name} {list(new.shape)}"
    elif choice == 7:  # a quantized input tied to another tensor's parameters
        node = _pick(rng, [n for n in g.node if len(n.input) >= 3] or g.node)
        i = int(rng.integers(len(node.input)))
        node.input[i] = _pick(rng, scales + zps + ["x", ""])
        what = f"{node.name or node.op_type}: inputs {list(node.input)}"
    else:  # a scale as a computed tensor, not an initializer
        name = _pick(rng, scales)
        v = numpy_helper.to_array(inits[name])
        g.initializer.remove(inits[name])
        g.node.insert(0, helper.make_node("Constant", [], [name], value=_t(name + "_c", v, np.float32)))
        what = f"{name} from a Constant node"
    if rng.random() < 0.3:  # skip onnx.checker as onnxruntime does
        g.output[0].type.Clear()
    case.model, case.what = model.SerializeToString(), what


def _caffe(case: Case, rng) -> None:
    """A Caffe pair with its text or its weights crafted (see the module docstring)."""
    from pooled_predictor.importers.caffe import caffe_pb

    text, weights, case.feeds = caffe_pair(rng)
    case.requests = [(case.feeds, None, None)]
    choice = int(rng.integers(10))
    lines = text.splitlines()
    if choice == 0:
        cut = int(rng.integers(len(text)))
        text, what = text[:cut], f"text cut at {cut}"
    elif choice == 1:
        chars = list(text)
        for i in rng.integers(0, len(chars), int(rng.integers(1, 6))):
            chars[i] = chr(int(rng.integers(32, 127)))
        text, what = "".join(chars), "text characters changed"
    elif choice == 2:  # a number of the text set to an interesting value
        import re

        numbers = list(re.finditer(r"(?<![\w.])\d+(?![\w.])", text))
        m = _pick(rng, numbers)
        v = _pick(rng, INTERESTING_INTS)
        text = text[:m.start()] + str(v) + text[m.end():]
        what = f"text number at {m.start()} ({m.group()}) -> {v}"
    elif choice == 3:  # a layer's type, bottom or top changed
        i = int(rng.integers(3, len(lines)))
        import re

        field = _pick(rng, ["type", "bottom", "top"])
        new = _pick(rng, ["Nope", "Convolution", "Eltwise", "Input", "Python", "Data", "data", "conv", "fc",
                          "prob", "missing", ""])
        lines[i] = re.sub(rf'{field}: "[^"]*"', f'{field}: "{new}"', lines[i], count=1)
        text, what = "\n".join(lines), f"line {i}: {field} -> {new!r}"
    elif choice == 4:  # a layer repeated or dropped
        i = int(rng.integers(3, len(lines)))
        if rng.random() < 0.5:
            lines.insert(i, lines[i])
            what = f"line {i} repeated"
        else:
            del lines[i]
            what = f"line {i} dropped"
        text = "\n".join(lines)
    elif choice == 5:
        cut = int(rng.integers(len(weights)))
        weights, what = weights[:cut], f"caffemodel cut at {cut} of {len(weights)}"
    elif choice == 6:
        data = bytearray(weights)
        where = rng.integers(0, len(data), int(rng.integers(1, 9)))
        for i in where:
            data[i] = int(rng.integers(0, 256))
        weights, what = bytes(data), f"caffemodel bytes changed at {sorted(where.tolist())[:6]}"
    else:  # a blob's shape, its data count, or a layer's blobs
        net = caffe_pb.NetParameter.FromString(weights)
        layer = _pick(rng, net.layer)
        blob = _pick(rng, layer.blobs)
        if choice == 7 and blob.shape.dim:
            k = int(rng.integers(len(blob.shape.dim)))
            blob.shape.dim[k] = int(_pick(rng, [0, 1, 2, 3, 7, 2 ** 31 - 1, 2 ** 40, -1 & (2 ** 63 - 1)]))
            what = f"{layer.name} blob shape {list(blob.shape.dim)}"
        elif choice == 8:
            n = len(blob.data)
            keep = int(_pick(rng, [0, max(0, n - 1), n // 2]))
            del blob.data[keep:]
            what = f"{layer.name} blob data {n} -> {keep} values"
        else:
            del layer.blobs[int(rng.integers(len(layer.blobs))):]
            what = f"{layer.name} blobs cut to {len(layer.blobs)}"
        weights = net.SerializeToString()
    case.caffe, case.what = (text, weights), what


def _external(case: Case, model: onnx.ModelProto, rng) -> None:
    """The initializer w1/w/scales moved to an external file, with a crafted location."""
    t = model.graph.initializer[0]
    data = numpy_helper.to_array(t).tobytes()
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.ClearField("int64_data")
    t.data_location = TensorProto.EXTERNAL
    variants = ["ok", "ok_offset", "dotdot", "deep_dotdot", "absolute", "symlink", "dirlink", "fifo", "dir",
                "missing", "offset_past_end", "length_past_end", "negative_offset", "short", "bytes_no_dir",
                "bytes_dir", "proto_no_dir", "nul", "empty", "self"]
    variant = _pick(rng, variants)
    location, offset, length = "w.bin", None, None
    case.files["w.bin"] = data
    if variant == "ok_offset":
        case.files["w.bin"] = b"\0" * 64 + data
        offset, length = 64, len(data)
    elif variant == "dotdot":
        location = "../../bait/secret.bin"
    elif variant == "deep_dotdot":
        location = "a/../../../bait/../bait/secret.bin"
    elif variant == "absolute":
        location = "@BAIT@"
    elif variant == "symlink":
        case.files["link.bin"] = ("symlink", "@BAIT@")
        location = "link.bin"
    elif variant == "dirlink":
        case.files["d"] = ("symlink", "@BAITDIR@")
        location = "d/secret.bin"
    elif variant == "fifo":
        case.files["f.bin"] = ("fifo",)
        location = "f.bin"
    elif variant == "dir":
        case.files["sub"] = ("dir",)
        location = "sub"
    elif variant == "missing":
        location = "nope.bin"
    elif variant == "offset_past_end":
        offset = len(data) + int(rng.integers(1, 1 << 40))
    elif variant == "length_past_end":
        length = len(data) + int(rng.integers(1, 1 << 40))
    elif variant == "negative_offset":
        offset = -int(rng.integers(1, 100))
    elif variant == "short":
        case.files["w.bin"] = data[: len(data) // 2]
    elif variant in ("bytes_no_dir", "bytes_dir"):
        case.load_as, case.external_data_dir = "bytes", variant == "bytes_dir"
    elif variant == "proto_no_dir":
        case.load_as = "proto"
    elif variant == "nul":
        location = "w.bin\0../../bait/secret.bin"
    elif variant == "empty":
        location = ""
    elif variant == "self":
        location = "."
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            e = t.external_data.add()
            e.key, e.value = key, str(value)
    if rng.random() < 0.3:
        model.graph.output[0].type.Clear()
    case.model, case.what = model.SerializeToString(), f"external data: {variant} ({location!r})"


def _request(case: Case, model: onnx.ModelProto, rng) -> None:
    feeds = case.feeds
    name, x = next(iter(feeds.items()))
    variant = _pick(rng, ["none", "wrong_name", "extra_name", "wrong_dtype", "wrong_rank", "huge_batch",
                          "nan", "list_wrong_count", "not_array", "bad_out", "readonly_out", "bad_names",
                          "string_names", "zero_batch", "object_array", "noncontiguous", "scalar"])
    out = names = None
    if variant == "none":
        inputs = None
    elif variant == "wrong_name":
        inputs = {"nope": x}
    elif variant == "extra_name":
        inputs = {name: x, "extra": x}
    elif variant == "wrong_dtype":
        inputs = {name: x.astype(_pick(rng, [np.float64, np.int64, np.float16, np.bool_, np.uint8]))}
    elif variant == "wrong_rank":
        inputs = {name: x.reshape(-1)}
    elif variant == "huge_batch":
        inputs = {name: np.broadcast_to(x[:1], (_pick(rng, [2 ** 31, 2 ** 40, 10 ** 7]),) + x.shape[1:])}
    elif variant == "nan":
        inputs = {name: np.full_like(x, _pick(rng, [np.nan, np.inf, -np.inf, 3e38]))}
    elif variant == "list_wrong_count":
        inputs = [x, x]
    elif variant == "not_array":
        inputs = {name: _pick(rng, ["text", 3, None, [[1, 2]], object()])}
    elif variant == "bad_out":
        inputs, names, out = feeds, ["y"], [np.empty((1,), np.float32)]
    elif variant == "readonly_out":
        inputs, names = feeds, ["y"]
        o = np.empty((1,), np.float32)
        o.flags.writeable = False
        out = [o]
    elif variant == "bad_names":
        inputs, names = feeds, [_pick(rng, ["nope", "h0", "", "x"])]
    elif variant == "string_names":
        inputs, names = feeds, _pick(rng, ["y", 5, [None], b"y"])
    elif variant == "zero_batch":
        inputs = {name: x[:0]}
    elif variant == "object_array":
        inputs = {name: x.astype(object)}
    elif variant == "noncontiguous":
        inputs = {name: np.asfortranarray(np.repeat(x, 2, axis=-1)[..., ::2])}
    else:
        inputs = x[(0,) * x.ndim]
    case.model = model.SerializeToString()
    case.what = f"request: {variant}"
    case.requests = [(inputs, names, out), (feeds, None, None)]  # the Predictor still serves a good one
