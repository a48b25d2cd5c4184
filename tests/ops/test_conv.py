"""Conv and ConvTranspose against onnxruntime.

The grids are covering arrays, not full products: every combination of any
three geometric parameters (rank, kernel, stride, padding mode, dilation,
group; for ConvTranspose also output_padding) appears in at least one case,
and bias / static-or-dynamic W / dtype / opset cycle over the cases so each
meets every geometry value. Spatial sizes and kernels differ per axis, so a
swapped axis shows. A few larger PP-OCR-like shapes pin the fast paths; the
scratch tests check that kernels never read workspace they did not write.
"""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from pooled_predictor.errors import ModelLoadError, ShapeInferenceError
from pooled_predictor.importers import load_onnx
from pooled_predictor.ir import Node
from pooled_predictor.engine.net import Net
from pooled_predictor.ops.context import OpContext
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu import conv as conv_module
from pooled_predictor.ops.cpu.conv import Conv, ConvTranspose
from pooled_predictor.ops.shapes import get_rule
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import (assert_close, check_node, feeds_of, make_node_model, run_ort, run_ours,
                                type_outputs)

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)


def covering(params: dict, strength: int) -> list[dict]:
    """A greedy covering array: every `strength`-tuple of parameter values appears in some case."""
    names = list(params)
    uncovered = {tuple(zip(combo, values))
                 for combo in itertools.combinations(range(len(names)), strength)
                 for values in itertools.product(*(range(len(params[names[i]])) for i in combo))}
    cases = []
    while uncovered:
        case = dict(min(uncovered))
        for i in range(len(names)):
            if i not in case:
                def gain(v):
                    trial = {**case, i: v}
                    return sum(1 for t in uncovered
                               if any(p == i for p, _ in t) and all(trial.get(p) == x for p, x in t))
                case[i] = max(range(len(params[names[i]])), key=lambda v: (gain(v), -v))
        cases.append(case)
        uncovered = {t for t in uncovered if not all(case[p] == x for p, x in t)}
    return [{names[i]: params[names[i]][v] for i, v in sorted(c.items())} for c in cases]


def check(op, inputs, attrs, *, opset, static):
    """check_node, with another reference where onnxruntime has no kernel.

    onnxruntime has no float64 Conv/ConvTranspose: float64 results are compared
    with onnxruntime on the inputs rounded to float32 (so at float32's
    tolerance). It rejects dilated Conv with SAME_* padding: those are compared
    with the onnx reference evaluator (pads from the dilated kernel).
    """
    same_dilated = (op == "Conv" and attrs.get("auto_pad", "NOTSET").startswith("SAME")
                    and max(attrs.get("dilations", [1])) > 1)
    dtype = inputs[0].dtype
    if dtype == np.float32 and not same_dilated:
        return check_node(op, inputs, attrs, opset=opset, static=static)
    model = make_node_model(op, inputs, attrs, opset=opset, static=static)
    feeds = feeds_of(inputs, static)
    if same_dilated:
        ref = ReferenceEvaluator(model).run(None, feeds)[0]
    else:
        as32 = [a.astype(np.float32) for a in inputs]
        ref = run_ort(make_node_model(op, as32, attrs, opset=opset, static=static), feeds_of(as32, static))[0]
    ref = ref.astype(dtype)
    type_outputs(model, [ref])
    assert_close(run_ours(model, feeds)[0], ref, 1e-5, op)


def extras(i: int) -> dict:
    """Bias, static W, dtype and opset for the i-th grid case (cycled, so all meet every geometry)."""
    return {"bias": i % 2 == 0, "static": (i // 2) % 2 == 0,
            "dtype": np.float64 if i % 5 == 0 else np.float32, "opset": (11, 13, 22)[i % 3]}


def per_axis(rank, first, others):
    """Values that differ between axes: `first` on axes 0 and 2, `others` on axis 1."""
    return [first if i % 2 == 0 else others for i in range(rank)]


OTHER_KERNEL = {1: 2, 2: 3, 3: 2, 4: 3, 5: 3}
CHANNELS = {"1": (4, 3, 1), "2": (4, 6, 2), "dw": (4, 4, 4), "dw2": (4, 8, 4)}  # C, M, group


def make_conv_case(rank, k, s, pad, d, group, bias, static, dtype, opset):
    kernel = per_axis(rank, k, OTHER_KERNEL[k])
    strides = per_axis(rank, s, max(1, s - 1))
    dilations = per_axis(rank, d, 1)
    c, m, g = CHANNELS[group]
    attrs = {"strides": strides, "dilations": dilations}
    if g > 1:
        attrs["group"] = g
    if pad == "sym":
        attrs["pads"] = [max(1, kk // 2) for kk in kernel] * 2
    elif pad == "asym":
        attrs["pads"] = [(2, 0, 1)[i % 3] for i in range(rank)] + [(1, 2, 0)[i % 3] for i in range(rank)]
    elif pad != "none":
        attrs["auto_pad"] = pad
    sizes = [(kk - 1) * dd + 4 + i for i, (kk, dd) in enumerate(zip(kernel, dilations))]
    x = rng.standard_normal([2 if rank < 3 else 1, c] + sizes).astype(dtype)
    w = rng.standard_normal([m, c // g] + kernel).astype(dtype)
    inputs = [x, w] + ([rng.standard_normal(m).astype(dtype)] if bias else [])
    return inputs, attrs, (tuple(range(1, len(inputs))) if static else ()), opset


CONV_GRID = [{**geo, **extras(i)} for i, geo in enumerate(covering(
    {"rank": [1, 2, 3], "k": [1, 2, 3, 5], "s": [1, 2, 3], "pad": ["none", "sym", "asym", "SAME_UPPER",
                                                                  "SAME_LOWER", "VALID"],
     "d": [1, 2], "group": ["1", "2", "dw", "dw2"]}, 3))]


def case_id(case):
    return "-".join(f"{k}{v.__name__[5:] if isinstance(v, type) else v}" for k, v in case.items())


@pytest.mark.parametrize("case", CONV_GRID, ids=case_id)
def test_conv_grid(case):
    inputs, attrs, static, opset = make_conv_case(**case)
    check("Conv", inputs, attrs, opset=opset, static=static)


def make_convtranspose_case(rank, k, s, pad, adj, d, group, bias, static, dtype, opset):
    kernel = per_axis(rank, k, OTHER_KERNEL[k])
    strides = per_axis(rank, s, max(1, s - 1))
    dilations = per_axis(rank, d, 1)
    c, m, g = {"1": (4, 3, 1), "2": (4, 6, 2), "dw": (4, 4, 4)}[group]
    attrs = {"strides": strides, "dilations": dilations}
    if g > 1:
        attrs["group"] = g
    if adj:  # the spec allows output_padding < max(stride, dilation); onnxruntime only < stride
        attrs["output_padding"] = [min(adj, ss - 1) for ss in strides]
    sizes = [3 + i for i in range(rank)]
    full = [ss * (i - 1) + a + (kk - 1) * dd + 1 for ss, i, a, kk, dd in
            zip(strides, sizes, attrs.get("output_padding", [0] * rank), kernel, dilations)]
    if pad == "sym":
        attrs["pads"] = [1] * (2 * rank)
    elif pad == "asym":
        attrs["pads"] = [(2, 0, 1)[i % 3] for i in range(rank)] + [(0, 1, 1)[i % 3] for i in range(rank)]
    elif pad.startswith("output_shape"):
        # smaller than the full output on axis 0 (pads are generated), larger on
        # axis 1 as far as onnxruntime accepts (full - output_padding + stride - 1)
        adjs = attrs.get("output_padding", [0] * rank)
        attrs["output_shape"] = [f - 1 if i == 0 else f + (max(0, ss - 1 - a) if i == 1 else 0)
                                 for i, (f, ss, a) in enumerate(zip(full, strides, adjs))]
        if pad.endswith("upper"):
            attrs["auto_pad"] = "SAME_UPPER"
    elif pad != "none":
        attrs["auto_pad"] = pad
    x = rng.standard_normal([2 if rank < 3 else 1, c] + sizes).astype(dtype)
    w = rng.standard_normal([c, m // g] + kernel).astype(dtype)
    inputs = [x, w] + ([rng.standard_normal(m).astype(dtype)] if bias else [])
    return inputs, attrs, (tuple(range(1, len(inputs))) if static else ()), opset


CONVTRANSPOSE_GRID = [{**geo, **extras(i)} for i, geo in enumerate(covering(
    {"rank": [1, 2, 3], "k": [1, 2, 3, 4], "s": [1, 2, 3],
     "pad": ["none", "sym", "asym", "output_shape", "output_shape_upper", "SAME_UPPER", "SAME_LOWER", "VALID"],
     "adj": [0, 1], "d": [1, 2], "group": ["1", "2", "dw"]}, 2))]
# Three-wise over the padding-related parameters, where the rules are subtle.
CONVTRANSPOSE_GRID += [{"rank": 2, "group": "1", **geo, **extras(i)} for i, geo in enumerate(covering(
    {"k": [1, 2, 3, 4], "s": [1, 2, 3],
     "pad": ["none", "sym", "asym", "output_shape", "output_shape_upper", "SAME_UPPER", "SAME_LOWER", "VALID"],
     "adj": [0, 1], "d": [1, 2]}, 3))]


@pytest.mark.parametrize("case", CONVTRANSPOSE_GRID, ids=case_id)
def test_convtranspose_grid(case):
    inputs, attrs, static, opset = make_convtranspose_case(**case)
    check("ConvTranspose", inputs, attrs, opset=opset, static=static)


# ---- the shapes of the PP-OCR detector (smaller images), one per fast path ----------
def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


PPOCR_LIKE = [
    ("Conv", (1, 3, 64, 48), (16, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, "im2col"),
    ("Conv", (1, 16, 32, 24), (16, 1, 3, 3), {"group": 16, "auto_pad": "SAME_UPPER"}, "depthwise"),
    ("Conv", (1, 16, 32, 24), (16, 1, 3, 3), {"group": 16, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
     "depthwise"),
    ("Conv", (1, 24, 17, 13), (24, 1, 5, 5), {"group": 24, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
     "depthwise"),
    ("Conv", (2, 24, 16, 12), (24, 1, 5, 5), {"group": 24, "pads": [2, 2, 2, 2]}, "depthwise"),
    ("Conv", (1, 8, 12, 12), (48, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, "im2col"),  # multiplier 6
    ("Conv", (1, 8, 12, 12), (16, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, "depthwise"),  # multiplier 2
    ("Conv", (2, 6, 23, 19), (6, 1, 5, 3), {"group": 6, "strides": [2, 3], "dilations": [3, 2],
                                             "pads": [2, 1, 3, 0]}, "depthwise"),
    ("Conv", (1, 64, 16, 12), (128, 64, 1, 1), {}, "pointwise"),
    ("Conv", (2, 64, 16, 12), (96, 32, 1, 1), {"group": 2}, "pointwise"),
    ("Conv", (1, 64, 8, 8), (64, 64, 1, 1), {"strides": [2, 2]}, "im2col"),
    ("Conv", (1, 128, 10, 10), (128, 4, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}, "im2col"),
    ("Conv", (1, 96, 10, 10), (96, 2, 3, 3), {"group": 48, "pads": [1, 1, 1, 1]}, "im2col"),
    ("ConvTranspose", (1, 64, 10, 8), (64, 16, 2, 2), {"strides": [2, 2]}, "tile"),
    ("ConvTranspose", (2, 16, 10, 8), (16, 4, 2, 2), {"strides": [2, 2], "group": 2}, "tile"),
    ("ConvTranspose", (1, 16, 10, 8), (16, 8, 1, 1), {}, "gemm"),
    ("ConvTranspose", (1, 16, 10, 8), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                      "output_padding": [1, 1]}, "col2im"),
]


def conv_kernel(op, inputs, attrs, static=(1, 2), scratch=None, opset=13):
    """Build our kernel object directly (as a Net does at reshape)."""
    names = [f"in{i}" for i in range(len(inputs))]
    node = Node(op, names, ["out0"], dict(attrs), "", f"{op.lower()}0")
    values = [a if i in static else None for i, a in enumerate(inputs)]
    ctx = OpContext(node, opset, [a.shape for a in inputs], [a.dtype for a in inputs], values, "cpu", scratch)
    (shape, dtype), = get_rule(op)(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    return (Conv if op == "Conv" else ConvTranspose)(ctx, **attrs), shape, dtype


@pytest.mark.parametrize("op,xs,ws,attrs,path", PPOCR_LIKE, ids=lambda v: str(v) if isinstance(v, str) else None)
@pytest.mark.parametrize("static", [(1, 2), ()])
def test_ppocr_like(op, xs, ws, attrs, path, static):
    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    inputs = [f32(*xs), f32(*ws), f32(m)]
    k, _, _ = conv_kernel(op, inputs, attrs, static)
    expected = (path, path + "_compiled")  # compiled: 2-D float32 with static weights
    if static and compiled.ENABLED and op == "Conv" and xs[1] == attrs.get("group", 1) > 1:
        expected = ("depthwise_compiled",)  # every depthwise conv, any multiplier
    # im2col's convs may take the indirect GEMM instead
    assert k.path in expected or (path == "im2col" and static and k.path == "indirect")
    check_node(op, inputs, attrs, opset=13, static=static)


@pytest.mark.parametrize("op,xs,ws,attrs,path", PPOCR_LIKE, ids=lambda v: str(v) if isinstance(v, str) else None)
@pytest.mark.parametrize("tile_bytes", [3000, 40000])
def test_tiles(op, xs, ws, attrs, path, tile_bytes, monkeypatch):
    """Small tiles: im2col in bands of output rows (the last one shorter), ConvTranspose in
    bands of input rows, depthwise in chunks of channels and, when one channel's columns
    are too large, in bands of rows."""
    monkeypatch.setattr(conv_module, "TILE_BYTES", tile_bytes)
    monkeypatch.setattr(conv_module.compiled, "ENABLED", False)  # the numpy paths' tiling
    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    inputs = [f32(*xs), f32(*ws), f32(m)]
    k, _, _ = conv_kernel(op, inputs, attrs)
    if path not in ("pointwise", "gemm") and tile_bytes < 10000:
        assert len(k.bands) > 1
    if path == "depthwise":
        assert len(k.chunks) > 1
    check_node(op, inputs, attrs, opset=13, static=(1, 2))


@pytest.mark.parametrize("op,xs,ws,attrs,path", PPOCR_LIKE, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_scratch_is_never_read_before_written(op, xs, ws, attrs, path):
    """Scratch content is undefined at each call: fill it with NaN, call twice, compare."""
    def poisoned(ref):
        ref.array = np.full(ref.shape, np.nan, ref.dtype)

    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    inputs = [f32(*xs), f32(*ws), f32(m)]
    ref = run_ort(make_node_model(op, inputs, attrs, opset=13, static=(1, 2)), {"in0": inputs[0]})[0]
    k, shape, dtype = conv_kernel(op, inputs, attrs, (1, 2), poisoned)
    for _ in range(2):
        out = np.full(shape, np.nan, dtype)
        k(*inputs, out=out)
        assert_close(out, ref, 1e-5, f"{op} {path}")
        for r in k._scratch:
            r.array.fill(np.nan)


@pytest.mark.parametrize("op,ws,attrs", [
    ("Conv", (4, 1, 1, 1), {"group": 4, "pads": [3, 0, 2, 4]}),
    ("Conv", (4, 4, 2, 1), {"pads": [3, 0, 2, 4]}),
    ("Conv", (4, 1, 2, 3), {"group": 4, "pads": [3, 0, 2, 4], "strides": [2, 3]}),
    ("ConvTranspose", (4, 1, 2, 3), {"group": 4, "pads": [3, 0, 2, 4], "strides": [2, 3]}),
])
def test_pads_beyond_the_kernel(op, ws, attrs):
    """Windows made only of padding (Conv), crops deeper than a kernel (ConvTranspose)."""
    check_node(op, [f32(1, 4, 5, 6), f32(*ws), f32(4)], attrs, opset=13, static=(1, 2))


# ---- versions, kernel_shape, folding, several nodes sharing the workspace -----------
@pytest.mark.parametrize("opset", [7, 10, 11, 13, 22])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_opsets(op, opset):
    """Conv-1 and ConvTranspose-1 (opsets 7, 10) use the same rules as -11 and -22; kernel_shape given."""
    x, w = f32(2, 4, 7, 6), f32(4, 2, 3, 3)
    attrs = {"strides": [2, 1], "auto_pad": "SAME_UPPER", "kernel_shape": [3, 3], "group": 2}
    check_node(op, [x, w, f32(4)], attrs, opset=opset, static=(1,))


def test_depthwise_dynamic_weights_change_between_calls():
    x, w, b = f32(1, 8, 9, 9), f32(8, 1, 3, 3), f32(8)
    model = make_node_model("Conv", [x, w, b], {"group": 8, "pads": [1, 1, 1, 1]}, opset=13)
    net = Net(Program(load_onnx(model)))
    for _ in range(3):
        x, w, b = f32(1, 8, 9, 9), f32(8, 1, 3, 3), f32(8)
        feeds = {"in0": x, "in1": w, "in2": b}
        net.forward(feeds)
        assert_close(net.blob_by_name("out0"), run_ort(model, feeds)[0])


def test_all_inputs_static_is_folded():
    x, w, b = f32(1, 4, 6, 6), f32(4, 1, 3, 3), f32(4)
    check_node("Conv", [x, w, b], {"group": 4, "pads": [1, 1, 1, 1]}, static=(0, 1, 2), opset=13)


def test_nodes_share_the_workspace():
    """Conv (padded) -> depthwise -> ConvTranspose -> Conv: one scratch buffer, run twice."""
    ws = {"w1": f32(16, 3, 3, 3), "w2": f32(16, 1, 5, 5), "w3": f32(16, 8, 3, 3), "w4": f32(4, 8, 3, 3),
          "b4": f32(4)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["y1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["y1", "w2"], ["y2"], group=16, auto_pad="SAME_UPPER"),
             helper.make_node("ConvTranspose", ["y2", "w3"], ["y3"], strides=[2, 2], pads=[1, 0, 1, 1],
                              output_padding=[1, 0]),
             helper.make_node("Conv", ["y3", "w4", "b4"], ["y"], pads=[2, 0, 0, 1])]
    graph = helper.make_graph(nodes, "convs",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 20, 17])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in ws.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    net = Net(Program(load_onnx(model)))
    for _ in range(2):
        x = f32(1, 3, 20, 17)
        net.forward({"x": x})
        assert_close(net.blob_by_name("y"), run_ort(model, {"x": x})[0], 1e-5)


@pytest.mark.parametrize("op,xs,ws,attrs", [
    ("Conv", (2, 6, 11, 9), (6, 1, 5, 5), {"group": 6, "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("Conv", (2, 6, 11, 9), (12, 1, 3, 3), {"group": 6, "pads": [1, 0, 2, 1]}),
    ("Conv", (2, 6, 11, 9), (4, 3, 3, 2), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 0, 1]}),
    ("ConvTranspose", (2, 6, 5, 4), (6, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 1, 2],
                                                  "output_padding": [1, 0]}),
    ("ConvTranspose", (2, 6, 5, 4), (6, 2, 2, 2), {"strides": [2, 2]}),
])
def test_float64_precision(op, xs, ws, attrs):
    """float64 stays float64 all the way: agreement with the onnx reference to 1e-12.
    (The reference evaluator fails on grouped ConvTranspose, hence group 1 there.)"""
    m = ws[0] if op == "Conv" else ws[1] * attrs.get("group", 1)
    inputs = [rng.standard_normal(s) for s in (xs, ws, (m,))]
    model = make_node_model(op, inputs, attrs, opset=13, static=(1, 2))
    ref = ReferenceEvaluator(model).run(None, {"in0": inputs[0]})[0]
    type_outputs(model, [ref])
    assert_close(run_ours(model, {"in0": inputs[0]})[0], ref, 1e-12, op)


# ---- shape rule ------------------------------------------------------------------------
@pytest.mark.parametrize("op,xs,ws,attrs,match", [
    ("Conv", (1, 4, 8, 8), (6, 3, 3, 3), {}, "channels"),
    ("Conv", (1, 4, 8, 8), (6, 1, 3, 3), {"group": 2}, "W.shape"),
    ("Conv", (1, 4, 8, 8), (5, 2, 3, 3), {"group": 2}, "multiple of group"),
    ("Conv", (1, 4, 8), (6, 4, 3, 3), {}, "rank"),
    ("Conv", (1, 4, 8, 8), (6, 4, 3, 3), {"kernel_shape": [3, 2]}, "kernel_shape"),
    ("Conv", (1, 4, 8, 8), (6, 4, 3, 3), {"pads": [1, 1, 1]}, "pads"),
    ("Conv", (1, 4, 8, 8), (6, 4, 3, 3), {"pads": [1, 1, 1, 1], "auto_pad": "SAME_UPPER"}, "auto_pad"),
    ("Conv", (1, 4, 8, 8), (6, 4, 3, 3), {"auto_pad": "SAME"}, "auto_pad"),
    ("Conv", (1, 4, 8, 8), (6, 4, 3, 3), {"strides": [0, 1]}, "strides"),
    ("Conv", (1, 4, 4, 8), (6, 4, 3, 3), {"dilations": [2, 1]}, "larger than the padded input"),
    ("ConvTranspose", (1, 4, 8, 8), (3, 2, 3, 3), {}, "channels"),
    ("ConvTranspose", (1, 4, 8, 8), (4, 2, 3, 3), {"group": 3}, "multiple of group"),
    ("ConvTranspose", (1, 4, 8, 8), (4, 2, 3, 3), {"strides": [2, 2], "output_padding": [2, 0]},
     "output_padding"),
    ("ConvTranspose", (1, 4, 8, 8), (4, 2, 3, 3), {"output_shape": [1, 2, 16, 16]}, "output_shape"),
    ("ConvTranspose", (1, 4, 2, 2), (4, 2, 1, 1), {"pads": [2, 1, 1, 1]}, "crop more"),
])
def test_shape_errors(op, xs, ws, attrs, match):
    x, w = f32(*xs), f32(*ws)
    with pytest.raises((ShapeInferenceError, ModelLoadError), match=match):  # attributes
        # outside the schema's ranges (strides 0, odd pads) are refused at load: importers/validate.py
        run_ours(make_node_model(op, [x, w], attrs, opset=13, static=(1,)), {"in0": x})


def test_bias_shape_error():
    x, w, b = f32(1, 4, 8, 8), f32(6, 4, 3, 3), f32(5)
    with pytest.raises(ShapeInferenceError, match="B has shape"):
        run_ours(make_node_model("Conv", [x, w, b], {}, opset=13, static=(1, 2)), {"in0": x})


def _ort_shape(op, xs, ws, attrs_items):
    x, w = np.zeros(xs, np.float32), np.zeros(ws, np.float32)
    return run_ort(make_node_model(op, [x, w], dict(attrs_items), opset=13, static=(1,)), {"in0": x})[0].shape


@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("size,k,s,d", [(1, 1, 1, 1), (5, 3, 2, 1), (6, 2, 3, 1), (7, 3, 3, 2), (4, 1, 4, 1)])
def test_output_shapes(auto_pad, size, k, s, d):
    """Shapes alone, including kernels below the stride and 1-pixel inputs."""
    for op in ("Conv", "ConvTranspose"):
        if op == "Conv" and (k - 1) * d + 1 > size and auto_pad in ("NOTSET", "VALID"):
            continue
        if op == "Conv" and d > 1 and auto_pad.startswith("SAME"):
            continue  # onnxruntime refuses; the grid checks these against the onnx reference
        xs, ws = (1, 2, size, size + 1), (2, 2, k, k)
        attrs = (("auto_pad", auto_pad), ("dilations", (d, d)), ("strides", (s, s)))
        _, shape, _ = conv_kernel(op, [np.zeros(xs, np.float32), np.zeros(ws, np.float32)],
                                  {k_: list(v) if isinstance(v, tuple) else v for k_, v in attrs}, (1,))
        assert shape == _ort_shape(op, xs, ws, attrs)


# ---- 1-D: the transposed compiled product (conv1d_compiled) ---------------------------------
CONV1D = [  # (X, W, attrs, bias): silero-vad's shapes first
    ((1, 129, 4), (128, 129, 3), {"pads": [1, 1]}, True),
    ((1, 1, 640), (258, 1, 256), {"strides": [128]}, False),
    ((1, 64, 2), (64, 64, 3), {"pads": [1, 1], "strides": [2]}, True),  # one output position
    ((1, 64, 1), (128, 64, 3), {"pads": [1, 1]}, True),
    ((3, 16, 37), (24, 16, 5), {"pads": [2, 3], "strides": [2], "dilations": [2]}, True),  # batch, dilation
    ((2, 8, 9), (12, 8, 4), {"auto_pad": "SAME_UPPER", "strides": [3]}, False),
    ((1, 4, 6), (5, 4, 2), {"pads": [4, 0]}, True),  # windows made only of padding
]


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV1D, ids=lambda v: str(v))
def test_conv1d_compiled(xs, ws, attrs, bias):
    """1-D convolutions (group 1, float32, static W) take the transposed product and match onnxruntime;
    a scratch poisoned with NaN before each call is never read unwritten."""
    _check_transposed_product(xs, ws, attrs, bias, "conv1d_compiled")


def _check_transposed_product(xs, ws, attrs, bias, path):
    """Conv on `path` (conv1d_compiled / patch_compiled) against onnxruntime, called and prepared, with every
    scratch poisoned with NaN before each call, so that one read unwritten shows."""
    inputs = [f32(*xs), f32(*ws)] + ([f32(ws[0])] if bias else [])
    check_node("Conv", inputs, attrs, opset=13, static=(1, 2))
    if not compiled.ENABLED:
        return

    def poisoned(ref):
        ref.array = np.full(ref.shape, np.nan, ref.dtype)

    k, shape, dtype = conv_kernel("Conv", inputs, attrs, (1, 2), poisoned)
    assert k.path == path
    ref = run_ort(make_node_model("Conv", inputs, attrs, opset=13, static=(1, 2)), {"in0": inputs[0]})[0]
    for _ in range(2):
        out = np.full(shape, np.nan, dtype)
        k(*inputs, out=out)
        assert_close(out, ref, 1e-5, path)
        prepared = k.prepare_run(*inputs, out=out)
        out.fill(np.nan)
        prepared()
        assert_close(out, ref, 1e-5, f"{path}, prepared")
        for r in (k.cols_t_ref, k.y_t_ref) + ((k.pad_ref,) if getattr(k, "pad_ref", None) is not None else ()):
            r.array.fill(np.nan)


# ---- 2-D patches: the same transposed product (patch_compiled) ------------------------------
PATCHES = [  # (X, W, attrs, bias): ViT's patch embedding, scaled down, first
    ((1, 3, 32, 32), (48, 3, 8, 8), {"strides": [8, 8]}, True),
    ((2, 4, 17, 19), (6, 4, 4, 4), {"strides": [4, 4]}, False),  # batch; rows and columns past the last patch
    ((1, 5, 12, 24), (40, 5, 4, 8), {"strides": [4, 8]}, True),  # a rectangular patch
    ((1, 3, 16, 16), (33, 3, 16, 16), {"strides": [16, 16], "pads": [0, 0, 0, 0]}, True),  # one patch
]


@pytest.mark.parametrize("xs,ws,attrs,bias", PATCHES, ids=lambda v: str(v))
def test_patch_compiled(xs, ws, attrs, bias):
    """Convolutions over non-overlapping patches (kernel == strides, no padding, group 1, static W) take the
    transposed product and match onnxruntime, called and prepared, with scratch poisoned between calls."""
    _check_transposed_product(xs, ws, attrs, bias, "patch_compiled")


def test_patch_not_taken():
    """Overlapping windows, padding, dilation, groups, small patches, dynamic W: not the patch path."""
    x = f32(1, 4, 16, 16)
    for ws, attrs, static in [((8, 4, 4, 4), {"strides": [2, 2]}, (1,)),
                              ((8, 4, 4, 4), {"strides": [4, 4], "pads": [1, 1, 1, 1]}, (1,)),
                              ((8, 4, 4, 4), {"strides": [4, 4], "dilations": [2, 2]}, (1,)),
                              ((8, 2, 4, 4), {"strides": [4, 4], "group": 2}, (1,)),
                              ((8, 4, 2, 2), {"strides": [2, 2]}, (1,)),
                              ((8, 4, 4, 4), {"strides": [4, 4]}, ())]:
        assert conv_kernel("Conv", [x, f32(*ws)], attrs, static=static)[0].path != "patch_compiled", (ws, attrs)


def test_conv1d_falls_back_to_im2col():
    """Dynamic W, groups, or a large weight with one output position: im2col, as before (at 16 lanes the one
    position's GEMV takes the compiled product up to matmul.GEMV16_COMPILED_MAX_WEIGHT elements)."""
    from pooled_predictor.ops.cpu.compiled import isa

    x = f32(1, 8, 12)
    assert conv_kernel("Conv", [x, f32(8, 8, 3)], {}, static=())[0].path == "im2col"
    assert conv_kernel("Conv", [x, f32(8, 4, 3)], {"group": 2})[0].path == "im2col"
    for lanes, path in ((8, "im2col"), (16, "conv1d_compiled")):
        with isa.use_lanes(lanes):  # 1 x 768 @ 768 x 512: OpenBLAS's GEMV at 8 lanes
            assert conv_kernel("Conv", [f32(1, 256, 3), f32(512, 256, 3)], {})[0].path == path
    check_node("Conv", [f32(1, 256, 3), f32(512, 256, 3)], {}, opset=13, static=(1,))


def test_phase_planes_of_a_stride_far_beyond_the_input_are_not_built():
    """Found by tests/fuzz: a Conv / QLinearConv with strides [1, 2^31 - 1] ran on the reference kernels, then
    the background compile built the indirect layout's list of 2^31 stride phases and took every byte of
    memory. conv_indirect.phase_planes_fit refuses planes over 4x the padded input; the usual convolutions fit
    (ResNet's 7x7 stride-2 stem, ViT's 16x16 stride-16 patches, 3x3 stride 2 on a 1x1 input). A large stride
    still computes onnxruntime's values, through the kernels that step over X."""
    from types import SimpleNamespace

    from pooled_predictor.ops.cpu.conv_indirect import phase_planes_fit

    def geo(in_shape, kernel, strides, pads, dilations=(1, 1)):
        out = tuple((i + 2 * p - (k - 1) * d - 1) // s + 1 for i, k, s, p, d in zip(in_shape, kernel, strides, pads,
                                                                                   dilations))
        return SimpleNamespace(in_shape=in_shape, kernel=kernel, strides=strides, dilations=dilations, out_shape=out,
                               pads_begin=pads, pads_end=pads)

    assert phase_planes_fit(geo((224, 224), (7, 7), (2, 2), (3, 3)))
    assert phase_planes_fit(geo((224, 224), (16, 16), (16, 16), (0, 0)))
    assert phase_planes_fit(geo((1, 1), (3, 3), (2, 2), (1, 1)))
    assert phase_planes_fit(geo((56, 56), (3, 3), (2, 2), (1, 1), (2, 2)))
    assert not phase_planes_fit(geo((6, 6), (3, 3), (1, 2 ** 31 - 1), (1, 1)))
    assert not phase_planes_fit(geo((8, 8), (3, 3), (1, 4096), (1, 1)))
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    check_node("Conv", [x, w], {"strides": [1, 4096], "pads": [1, 1, 1, 1]}, opset=11, static=(1,))
