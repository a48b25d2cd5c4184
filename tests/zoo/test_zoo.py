"""The zoo: valid ONNX, a dynamic batch, the published sizes, the papers' structure.

Every architecture is built once per session (`model`, an lru_cache): VGG-16's
138M random parameters take a few seconds and half a gigabyte. Parameter
counts must equal the published ones exactly (same architecture, same
convention: learnable weights, BN running statistics excluded); MACs must be
within each entry's stated tolerance of the published figure (papers and
torchvision count slightly differently, see `ZooModel.macs_note`).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.zoo import cnn, flops

NAMES = cnn.names()


@functools.lru_cache(maxsize=None)
def model(name: str) -> onnx.ModelProto:
    return cnn.build(name)


@functools.lru_cache(maxsize=None)
def cost(name: str) -> flops.Cost:
    return flops.profile(model(name))


@functools.lru_cache(maxsize=None)
def inferred(name: str) -> dict[str, tuple]:
    """Static shapes of every tensor of the batch-1 model, from onnx shape inference."""
    g = flops._shape_copy(model(name), None).graph
    return {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
            for vi in list(g.value_info) + list(g.output)}


def nodes(name: str, op_type: str) -> list[onnx.NodeProto]:
    return [n for n in model(name).graph.node if n.op_type == op_type]


def attr(node: onnx.NodeProto, key: str, default=None):
    for a in node.attribute:
        if a.name == key:
            return helper.get_attribute_value(a)
    return default


def initializers(name: str) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model(name).graph.initializer}


# ---- every model -------------------------------------------------------------------------


def test_names_are_the_zoo():
    assert NAMES == list(cnn.ZOO) == ["alexnet", "googlenet", "resnet50", "mobilenet_v2", "squeezenet1_1", "vgg16"]
    with pytest.raises(KeyError, match="the zoo has"):
        cnn.build("resnet18")


@pytest.mark.parametrize("name", NAMES)
def test_checker_passes(name):
    onnx.checker.check_model(model(name), full_check=True)


@pytest.mark.parametrize("name", NAMES)
def test_io_float32_with_symbolic_batch(name):
    m = model(name)
    assert [o.domain for o in m.opset_import] == [""] and m.opset_import[0].version == 17
    (inp,) = m.graph.input
    (out,) = m.graph.output
    assert (inp.name, out.name) == ("data", "prob")
    for vi, rest in ((inp, list(cnn.ZOO[name].input_shape)), (out, [1000])):
        tt = vi.type.tensor_type
        assert tt.elem_type == TensorProto.FLOAT
        batch, *dims = tt.shape.dim
        assert batch.dim_param == "N" and not batch.HasField("dim_value"), f"{vi.name}: batch {batch}"
        assert [d.dim_value for d in dims] == rest


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count_matches_published(name):
    e, c = cnn.ZOO[name], cost(name)
    assert c.params == e.params, (f"{name}: {c.params:,} parameters, published {e.params:,} "
                                  f"({e.params_source}); off by {c.params - e.params:+,}")


@pytest.mark.parametrize("name", NAMES)
def test_macs_match_published(name):
    e, c = cnn.ZOO[name], cost(name)
    rel = (c.macs - e.macs) / e.macs
    assert abs(rel) <= e.macs_rtol, (f"{name}: {c.macs:,} MACs per image, published {e.macs:,.0f} "
                                     f"({e.macs_source}): {rel:+.2%}, allowed +-{e.macs_rtol:.0%}; {e.macs_note}")
    assert c.flops == 2 * c.macs
    assert set(c.macs_by_op) <= {"Conv", "Gemm"}


@pytest.mark.parametrize("name", NAMES)
def test_docstrings_cite_the_paper(name):
    e, m = cnn.ZOO[name], model(name)
    assert e.paper in m.doc_string and e.paper in m.graph.doc_string
    assert {p.key: p.value for p in m.metadata_props}["paper"] == e.paper
    first_author, year = e.paper.split()[0].rstrip(","), e.paper.split('"')[0].split()[-1].rstrip(",")
    assert year.isdigit() and first_author in e.builder.__doc__ and year in e.builder.__doc__, e.builder.__doc__


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2"])
def test_batchnorm_statistics_are_realistic(name):
    """Inference-form BN with statistics like a trained net's: not 0/1, not all equal, in range."""
    inits = initializers(name)
    bns = nodes(name, "BatchNormalization")
    assert len(bns) == {"resnet50": 53, "mobilenet_v2": 52}[name]
    for bn in bns:
        gamma, beta, mean, var = (numpy_helper.to_array(inits[i]) for i in bn.input[1:])
        assert not np.all(mean == 0) and not np.all(var == 1), bn.name
        assert not np.all(gamma == 1) and not np.all(beta == 0), bn.name
        assert 0.8 <= gamma.min() and gamma.max() <= 1.2, bn.name
        assert np.abs(beta).max() < 1.0 and beta.std() > 0.02, bn.name
        assert var.min() > 0 and var.max() / var.min() > 1.5, f"{bn.name}: var spread {var.min()}..{var.max()}"
        assert mean.std() > 0.05 * np.sqrt(var.mean()), f"{bn.name}: running mean spread {mean.std()}"
        assert not attr(bn, "training_mode", 0)


def test_bn_statistics_are_buffers_not_parameters():
    c = cost("resnet50")
    assert c.buffers == 2 * sum(n_ch for n_ch in (initializers("resnet50")[bn.input[3]].dims[0]
                                                   for bn in nodes("resnet50", "BatchNormalization")))


# ---- each architecture as its paper (and its reference implementation) has it --------------


def test_alexnet_is_bvlc_alexnet():
    convs = {n.name: n for n in nodes("alexnet", "Conv")}
    assert {k: attr(v, "group", 1) for k, v in convs.items()} == {
        "conv1": 1, "conv2": 2, "conv3": 1, "conv4": 2, "conv5": 2}
    assert attr(convs["conv1"], "strides") == [4, 4] and attr(convs["conv1"], "kernel_shape") == [11, 11]
    lrns = nodes("alexnet", "LRN")
    assert [n.input[0] for n in lrns] == ["relu1", "relu2"]  # relu -> LRN -> pool, as the prototxt
    for n in lrns:
        assert (attr(n, "size"), attr(n, "alpha"), attr(n, "beta"), attr(n, "bias")) == \
            (5, pytest.approx(1e-4), pytest.approx(0.75), pytest.approx(1.0))
    assert all(attr(n, "ceil_mode") == 1 for n in nodes("alexnet", "MaxPool"))
    assert [n.name for n in nodes("alexnet", "Gemm")] == ["fc6", "fc7", "fc8"]
    assert len(nodes("alexnet", "Dropout")) == 2
    s = inferred("alexnet")
    assert [s[k][2:] for k in ("conv1", "pool1", "pool2", "pool5")] == [(55, 55), (27, 27), (13, 13), (6, 6)]


def test_googlenet_is_bvlc_googlenet_without_aux_heads():
    s = inferred("googlenet")
    sizes = [s[k][2] for k in ("conv1/7x7_s2", "pool1/3x3_s2", "pool2/3x3_s2", "pool3/3x3_s2", "pool4/3x3_s2")]
    assert sizes == [112, 56, 28, 14, 7]  # Caffe's ceil-mode pools; floor would give 55 at pool1
    assert [n.input[0] for n in nodes("googlenet", "LRN")] == ["pool1/3x3_s2", "conv2/relu_3x3"]
    concats = nodes("googlenet", "Concat")
    assert [s[n.output[0]][1] for n in concats] == [256, 480, 512, 512, 512, 528, 832, 832, 1024]
    assert [n.name for n in nodes("googlenet", "Gemm")] == ["loss3/classifier"]  # no loss1/loss2 heads
    five = [n for n in nodes("googlenet", "Conv") if n.name.endswith("/5x5")]
    assert len(five) == 9 and all(attr(n, "kernel_shape") == [5, 5] for n in five)


def test_resnet50_is_v1_5():
    convs = {n.name: n for n in nodes("resnet50", "Conv")}
    for layer in (2, 3, 4):
        assert attr(convs[f"layer{layer}.0.conv1"], "strides") == [1, 1]
        assert attr(convs[f"layer{layer}.0.conv2"], "strides") == [2, 2]  # v1.5: the stride in the 3x3
        assert attr(convs[f"layer{layer}.0.downsample.0"], "strides") == [2, 2]
    assert len(nodes("resnet50", "Add")) == 16 and len(convs) == 53
    assert inferred("resnet50")["layer4.2.relu"] == (1, 2048, 7, 7)


def test_mobilenet_v2_structure():
    convs = nodes("mobilenet_v2", "Conv")
    inits = initializers("mobilenet_v2")
    depthwise = [n for n in convs if attr(n, "group", 1) > 1]
    assert len(depthwise) == 17
    assert all(attr(n, "group") == inits[n.input[1]].dims[0] and inits[n.input[1]].dims[1] == 1 for n in depthwise)
    clips = nodes("mobilenet_v2", "Clip")
    assert len(clips) == 35
    lo, hi = (float(numpy_helper.to_array(inits[i])) for i in clips[0].input[1:])
    assert (lo, hi) == (0.0, 6.0) and all(list(n.input[1:]) == list(clips[0].input[1:]) for n in clips)
    consumers = {i for n in model("mobilenet_v2").graph.node for i in n.input if n.op_type == "Clip"}
    projections = [n.output[0] for n in nodes("mobilenet_v2", "BatchNormalization") if ".project." in n.name]
    assert len(projections) == 17 and not consumers & set(projections)  # linear bottlenecks
    assert len(nodes("mobilenet_v2", "Add")) == 10  # the inverted residuals with stride 1 and equal width
    assert inferred("mobilenet_v2")["features.18.2"] == (1, 1280, 7, 7)


def test_squeezenet1_1_structure():
    s = inferred("squeezenet1_1")
    concats = nodes("squeezenet1_1", "Concat")
    assert [s[n.output[0]][1] for n in concats] == [128, 128, 256, 256, 384, 384, 512, 512]
    assert [s[k][2] for k in ("features.0", "features.2", "features.5", "features.8")] == [111, 55, 27, 13]
    assert attr(nodes("squeezenet1_1", "Conv")[0], "kernel_shape") == [3, 3]  # v1.1 (v1.0: 96 7x7)


def test_vgg16_is_configuration_d():
    convs = nodes("vgg16", "Conv")
    assert len(convs) == 13 and all(attr(n, "kernel_shape") == [3, 3] for n in convs)
    assert len(nodes("vgg16", "MaxPool")) == 5 and len(nodes("vgg16", "Gemm")) == 3
    assert inferred("vgg16")["features.30"] == (1, 512, 7, 7)


# ---- builder options ---------------------------------------------------------------------


def test_reduced_input_size_for_global_pool_nets():
    for name, size in (("resnet50", 64), ("googlenet", 64), ("mobilenet_v2", 64), ("squeezenet1_1", 64)):
        m = cnn.build(name, input_size=size)
        onnx.checker.check_model(m)
        assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim[1:]] == [3, size, size]


def test_fixed_head_nets_accept_only_the_same_feature_map():
    with pytest.raises(ValueError, match=r"accepted input sizes: 199\.\.230"):
        cnn.build("alexnet", input_size=198)
    with pytest.raises(ValueError, match=r"needs 7x7x512; accepted input sizes: 224\.\.255"):
        cnn.build("vgg16", input_size=200)
    onnx.checker.check_model(cnn.build("alexnet", input_size=(199, 230)))
    with pytest.raises(ValueError, match="too small"):
        cnn.build("googlenet", input_size=8)


def test_batch_opset_outputs_and_seed():
    m = cnn.build("squeezenet1_1", batch=2, opset=12, outputs=("prob", "logits"))
    onnx.checker.check_model(m)
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert [o.name for o in m.graph.output] == ["prob", "logits"] and m.opset_import[0].version == 12
    latest = onnx.defs.onnx_opset_version()
    onnx.checker.check_model(cnn.build("squeezenet1_1", opset=latest))
    logits_only = cnn.build("squeezenet1_1", outputs=("logits",))
    assert not any(n.op_type == "Softmax" for n in logits_only.graph.node)
    for bad in (dict(opset=11), dict(opset=latest + 1), dict(outputs=("scores",)), dict(outputs=()),
                dict(batch=0)):
        with pytest.raises(ValueError):
            cnn.build("squeezenet1_1", **bad)
    a, b = cnn.build("squeezenet1_1", seed=7), cnn.build("squeezenet1_1", seed=7)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.SerializeToString() != cnn.build("squeezenet1_1", seed=8).SerializeToString()


def test_sample_input():
    x = cnn.sample_input("alexnet", 2)
    assert x.shape == (2, 3, 227, 227) and x.dtype == np.float32
    assert -124 <= x.min() and x.max() <= 152 and x.std() > 50  # mean-subtracted 0..255 BGR pixels
    y = cnn.sample_input("resnet50", 1, input_size=64, seed=1)
    assert y.shape == (1, 3, 64, 64)
    assert abs(y.mean()) < 0.35 and 1.0 < y.std() < 1.6  # uniform 0..1 pixels, ImageNet-normalized


# ---- flops.py on hand-made graphs ----------------------------------------------------------


def _tiny(nodes_, inputs, outputs, inits):
    g = helper.make_graph(nodes_, "tiny", inputs, outputs,
                          [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_flops_counts_each_rule():
    f = TensorProto.FLOAT
    m = _tiny(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=2, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"]),
         helper.make_node("ConvTranspose", ["n", "wt"], ["t"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["t"], ["p"]),
         helper.make_node("Flatten", ["p"], ["fl"]),
         helper.make_node("Gemm", ["fl", "wg", "bg"], ["y"], transB=1),
         helper.make_node("MatMul", ["q", "wm"], ["z"]),
         helper.make_node("Add", ["z", "bm"], ["zb"])],
        [helper.make_tensor_value_info("x", f, ["N", 4, 8, 8]), helper.make_tensor_value_info("q", f, [2, 5, 6])],
        [helper.make_tensor_value_info("y", f, ["N", 10]), helper.make_tensor_value_info("zb", f, [2, 5, 7])],
        {"w": (6, 2, 3, 3), "b": (6,), "g": (6,), "be": (6,), "mu": (6,), "var": (6,), "wt": (6, 3, 2, 2),
         "wg": (10, 3), "bg": (10,), "wm": (6, 7), "bm": (7,)})
    c = flops.profile(m)
    conv = 6 * 8 * 8 * (2 * 3 * 3)          # prod(Y) * C_in/group * kH * kW, one image
    convt = 6 * 8 * 8 * (3 * 2 * 2)         # prod(X) * C_out/group * kH * kW
    gemm = 1 * 10 * 3
    matmul = 2 * 5 * 7 * 6
    assert c.macs_by_op == {"Conv": conv, "ConvTranspose": convt, "Gemm": gemm, "MatMul": matmul}
    assert c.macs == conv + convt + gemm + matmul and c.flops == 2 * c.macs
    assert c.params == 108 + 6 + 6 + 6 + 72 + 30 + 10 + 42 + 7  # BN gamma/beta in, running stats out
    assert c.buffers == 12
    assert flops.count_macs(m, {"x": [3, 4, 8, 8]})[1]["Conv"] == 3 * conv
    with pytest.raises(ValueError, match="not graph inputs"):
        flops.count_macs(m, {"nope": [1]})
