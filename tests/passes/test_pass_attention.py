"""fuse_attention: MatMul(Softmax(op(MatMul(Q, Kt), c) + M), V) -> ScaledDotProductAttention, checked against the
unfused graph (bit for bit: the same operations in the same order) and against onnxruntime."""

import numpy as np
import pytest
from onnx import helper

from tests.passes.pass_helpers import check_pass, make_model, ops, rand, run_net
from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize

B, H, S, T, D = 2, 3, 5, 7, 4
SDPA = "pooled_predictor.ScaledDotProductAttention"


def attention_model(kind="div", mask_shape=(B, 1, 1, T), mask_first=False, c=8.0, axis=-1, opset=17,
                    mask_weight=False, kt_weight=False, extra_outputs=(), q_shape=(B, H, S, D)):
    """Q (B, H, S, D), Kt (B, H, D, T), V (B, H, T, D): the pattern as exporters write it."""
    inputs = {"q": q_shape, "v": (B, H, T, D)}
    weights = {}
    (weights if kt_weight else inputs)["kt"] = rand(B, H, D, T, seed=5) if kt_weight else (B, H, D, T)
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"])]
    x = "s"
    if kind in ("div", "mul"):
        weights["c"] = np.array(c, np.float32)
        nodes.append(helper.make_node(kind.capitalize(), ["s", "c"] if kind == "div" or not mask_first
                                      else ["c", "s"], ["t"]))
        x = "t"
    if mask_shape is not None:
        if mask_weight:
            weights["m"] = rand(*mask_shape, seed=7)
        else:
            inputs["m"] = mask_shape
        nodes.append(helper.make_node("Add", ["m", x] if mask_first else [x, "m"], ["a"]))
        x = "a"
    attrs = {} if axis is None else {"axis": axis}
    nodes += [helper.make_node("Softmax", [x], ["p"], **attrs), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return make_model(nodes, inputs, ["y"] + list(extra_outputs), weights, opset=opset)


def fused(model, feeds):
    """check_pass (the fused graph against the unfused one and onnxruntime, within TOL), then the fused
    graph's output bit for bit against the unfused graph's."""
    after, report = check_pass(model, feeds, "fuse_attention", fires=True)
    assert ops(after) == [SDPA]
    np.testing.assert_array_equal(run_net(after, feeds)[0], run_net(load_onnx(model), feeds)[0])
    return after


def feeds_for(model, mask_big=False):
    f = {}
    for i, v in enumerate(model.graph.input):
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        f[v.name] = rand(*shape, seed=10 + i, scale=2.0)
    if "m" in f:  # a padding mask: 0 or a large negative number
        f["m"] = np.where(f["m"] > 1.0, np.float32(-1e4 if not mask_big else np.finfo(np.float32).min),
                          np.float32(0.0))
    return f


@pytest.mark.parametrize("kind", ["div", "mul", "none"])
@pytest.mark.parametrize("mask_shape", [(B, 1, 1, T), (1, H, S, T), (T,), (S, 1), None], ids=str)
@pytest.mark.parametrize("mask_first", [False, True])
def test_attention_is_fused(kind, mask_shape, mask_first):
    model = attention_model(kind, mask_shape, mask_first)
    f = feeds_for(model)
    after = fused(model, f)
    assert after.nodes[0].attrs.get("divide", 0) == (1 if kind == "div" else 0)


def test_bias_weight_and_opset_11_with_axis_minus_1():
    """Swin's form: a constant relative-position bias; Softmax-11 with axis=-1 is the last axis too."""
    model = attention_model("mul", (H, S, T), mask_weight=True, c=0.35355339, opset=11)
    fused(model, feeds_for(model))


def test_fully_masked_minimum_rows():
    """finfo.min in the mask (Hugging Face's): scores of -3.4e38 in a row still give its softmax."""
    model = attention_model("div", (B, 1, 1, T))
    fused(model, feeds_for(model, mask_big=True))


def test_mask_that_enlarges_the_scores():
    """Q without a batch axis, the mask with one: the scores are broadcast to the mask (the numpy path)."""
    model = attention_model("div", (B, H, S, T), q_shape=(S, D))
    fused(model, feeds_for(model))


@pytest.mark.parametrize("why", ["softmax axis not last", "opset 11 default axis", "Kt a weight",
                                 "scores read elsewhere", "probabilities read elsewhere", "scale not one value"])
def test_left_alone(why):
    model = {"softmax axis not last": lambda: attention_model(axis=2),
             "opset 11 default axis": lambda: attention_model(axis=None, opset=11),
             "Kt a weight": lambda: attention_model(kt_weight=True),
             "scores read elsewhere": lambda: attention_model(extra_outputs=["s"]),
             "probabilities read elsewhere": lambda: attention_model(extra_outputs=["p"]),
             "scale not one value": lambda: _vector_scale_model()}[why]()
    check_pass(model, feeds_for(model), "fuse_attention", fires=False)


def _vector_scale_model():
    model = attention_model("mul", None)
    for init in model.graph.initializer:
        if init.name == "c":
            from onnx import numpy_helper
            init.CopyFrom(numpy_helper.from_array(rand(T, seed=3), "c"))
    return model


def test_axis_3_with_known_rank_is_the_last():
    model = attention_model(axis=3)
    fused(model, feeds_for(model))


@pytest.mark.parametrize("dtype", [np.float64])
def test_other_float_types_on_the_numpy_path(dtype):
    from onnx import TensorProto
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "c"], ["t"]),
             helper.make_node("Add", ["t", "m"], ["a"]), helper.make_node("Softmax", ["a"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = make_model(nodes, {"q": (B, H, S, D), "kt": (B, H, D, T), "v": (B, H, T, D), "m": (B, 1, 1, T)}, ["y"],
                       {"c": np.array(2.0, np.float64)}, dtype=TensorProto.DOUBLE)
    f = {k: v.astype(np.float64) for k, v in feeds_for(model).items()}
    graph = load_onnx(model)
    after, report = optimize(graph, "none", enable=["fuse_attention"])
    assert ops(after) == [SDPA]
    np.testing.assert_array_equal(run_net(after, f)[0], run_net(graph, f)[0])


@pytest.mark.parametrize("c", [8.0, 3.0])
def test_bert_sized_heads(c):
    """12 heads of 128 tokens x 64 (BERT-base), the padding mask (1, 1, 1, 128): rows past 8 lanes and 256-blocks.
    / 8 runs as * 0.125 (a power of two: the same bits), / 3 as a division."""
    nodes = [helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Div", ["s", "c"], ["t"]),
             helper.make_node("Add", ["t", "m"], ["a"]), helper.make_node("Softmax", ["a"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    model = make_model(nodes, {"q": (1, 12, 128, 64), "kt": (1, 12, 64, 128), "v": (1, 12, 128, 64),
                               "m": (1, 1, 1, 128)}, ["y"], {"c": np.array(c, np.float32)})
    f = feeds_for(model)
    f["m"] = np.where(np.arange(128) < 112, 0.0, np.finfo(np.float32).min).astype(np.float32).reshape(1, 1, 1, 128)
    fused(model, f)
