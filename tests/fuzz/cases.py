"""Fuzz cases: small models and requests, mutated deterministically from (seed, index).

Every case is built from `make_case(seed, index)` alone, so a failing case is
replayed with `python -m tests.fuzz.harness --seed S --only INDEX`. Families:

    truncate      the serialized model cut at a random byte
    flip          1-16 random bytes of the serialized model changed
    field         one protobuf field of the model changed (attribute values,
                  op types, node inputs/outputs, dims, data types, names,
                  opsets, initializers removed or duplicated, value infos)
    attribute     Conv/MaxPool/AveragePool spatial attributes set to absurd values
    external      external data: escaping locations (.., absolute, symlinks into
                  the bait directory), bad offsets and lengths, FIFOs, directories,
                  bytes sources with and without external_data_dir
    request       a valid model, a malformed request (None, wrong names, dtypes,
                  ranks, huge broadcast batches, NaN, bad `out`, bad output names)

A case carries the model (bytes), the files of its directory, how it is loaded,
and the requests to run; `benign` cases may also succeed, and are then
compared with onnxruntime when onnxruntime accepts the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("truncate", "flip", "field", "attribute", "external", "request")
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


# ---- base models ---------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits, opset=17) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "fuzz", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", opset)])
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


BASES = (mlp, cnn, shapes_model)


# ---- the cases -----------------------------------------------------------------------------------
def make_case(seed: int, index: int) -> Case:
    rng = np.random.default_rng([seed, index])
    family = FAMILIES[index % len(FAMILIES)]
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
