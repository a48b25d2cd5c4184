"""One-layer Caffe nets, imported with our caffe.proto, against OpenCV dnn (the Caffe reference here).

Each case builds the prototxt text and the caffemodel bytes in the test. Layers
OpenCV cannot run alone (multi-top Slice/Split, ArgMax, Threshold, two-bottom
Scale, InnerProduct on a non-default axis) are checked against numpy written
from Caffe's documented semantics instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor import Predictor
from pooled_predictor.engine.net import Optimization
from tests.caffe_helpers import caffemodel, opencv_forward, prototxt

cv2 = pytest.importorskip("cv2")

R = np.random.default_rng(0)


def _r(*shape, lo=-1.0, hi=1.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def _ours(text, model, feeds):
    # level "none": the blobs are the importer's (the passes run on res10 in tests/models/test_res10.py)
    p = Predictor.strings(text, model, optimization=Optimization.NONE, graph_optimization_level="none")
    return p.forward(feeds)


def _layer(name, type_, bottoms, tops=None, params=""):
    tops = tops or [name]
    return (f'layer {{ name: "{name}" type: "{type_}" '
            + "".join(f'bottom: "{b}" ' for b in bottoms) + "".join(f'top: "{t}" ' for t in tops)
            + params + " }\n")


# (id, inputs {name: array}, layer text, weights {layer: [blobs]}, output blob == OpenCV layer name)
CV_CASES = []


def case(id_, inputs, text, weights=None, out="y"):
    CV_CASES.append(pytest.param(inputs, text, weights or {}, out, id=id_))


X4 = {"x": _r(1, 4, 9, 7)}
case("conv", {"x": _r(1, 3, 8, 8)}, _layer("y", "Convolution", ["x"], params=
     "convolution_param { num_output: 4 kernel_size: 3 pad: 1 }"), {"y": [_r(4, 3, 3, 3), _r(4)]})
case("conv_hw_group_nobias", X4, _layer("y", "Convolution", ["x"], params=
     "convolution_param { num_output: 6 kernel_h: 3 kernel_w: 2 pad_h: 1 pad_w: 0 stride_h: 2 stride_w: 1 "
     "group: 2 bias_term: false }"), {"y": [_r(6, 2, 3, 2)]})
case("conv_per_axis_dilation", {"x": _r(1, 3, 11, 10)}, _layer("y", "Convolution", ["x"], params=
     "convolution_param { num_output: 2 kernel_size: 3 kernel_size: 1 pad: 2 pad: 0 stride: 1 stride: 2 "
     "dilation: 2 }"), {"y": [_r(2, 3, 3, 1), _r(2)]})
case("deconv_group", {"x": _r(1, 4, 5, 5)}, _layer("y", "Deconvolution", ["x"], params=
     "convolution_param { num_output: 4 kernel_size: 4 stride: 2 pad: 1 group: 2 }"),
     {"y": [_r(4, 2, 4, 4), _r(4)]})
case("inner_product", {"x": _r(2, 3, 2, 2)}, _layer("y", "InnerProduct", ["x"], params=
     "inner_product_param { num_output: 5 }"), {"y": [_r(5, 12), _r(5)]})
case("pool_max_ceil", {"x": _r(1, 2, 8, 8)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: MAX kernel_size: 3 stride: 2 }"))
case("pool_max_pad", {"x": _r(1, 2, 7, 7)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }"))
case("pool_ave_pad_clipped", {"x": _r(1, 2, 7, 6)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }"))
case("pool_ave_ceil", {"x": _r(1, 2, 7, 7)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 2 }"))
case("pool_global_ave", {"x": _r(1, 3, 5, 4)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: AVE global_pooling: true }"))
case("pool_global_max", {"x": _r(1, 3, 5, 4)}, _layer("y", "Pooling", ["x"], params=
     "pooling_param { pool: MAX global_pooling: true }"))
case("lrn_across", {"x": _r(1, 7, 4, 4)}, _layer("y", "LRN", ["x"], params=
     "lrn_param { local_size: 5 alpha: 0.1 beta: 0.75 }"))  # OpenCV ignores k: k=2 below
case("lrn_within", {"x": _r(1, 3, 6, 5)}, _layer("y", "LRN", ["x"], params=
     "lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL }"))
case("relu", {"x": _r(2, 3, 4)}, _layer("y", "ReLU", ["x"]))
case("relu_leaky", {"x": _r(2, 3, 4)}, _layer("y", "ReLU", ["x"], params="relu_param { negative_slope: 0.1 }"))
case("prelu", {"x": _r(1, 3, 4, 4)}, _layer("y", "PReLU", ["x"]), {"y": [_r(3)]})
case("prelu_shared", {"x": _r(1, 3, 4, 4)}, _layer("y", "PReLU", ["x"], params=
     "prelu_param { channel_shared: true }"), {"y": [_r(1)]})
case("elu", {"x": _r(1, 3, 4)}, _layer("y", "ELU", ["x"], params="elu_param { alpha: 0.5 }"))
case("sigmoid", {"x": _r(1, 3, 4)}, _layer("y", "Sigmoid", ["x"]))
case("tanh", {"x": _r(1, 3, 4)}, _layer("y", "TanH", ["x"]))
case("absval", {"x": _r(1, 3, 4)}, _layer("y", "AbsVal", ["x"]))
case("bnll", {"x": _r(1, 3, 4, lo=-5, hi=5)}, _layer("y", "BNLL", ["x"]))
case("power", {"x": _r(1, 3, 4, lo=0, hi=2)}, _layer("y", "Power", ["x"], params=
     "power_param { power: 2.5 scale: 0.5 shift: 1 }"))
case("exp_base", {"x": _r(1, 3, 4)}, _layer("y", "Exp", ["x"], params="exp_param { base: 2 scale: 0.5 shift: 0.1 }"))
case("exp", {"x": _r(1, 3, 4)}, _layer("y", "Exp", ["x"]))
case("log", {"x": _r(1, 3, 4, lo=0.1, hi=2)}, _layer("y", "Log", ["x"]))  # OpenCV ignores log_param: below
case("dropout", {"x": _r(1, 3, 4)}, _layer("y", "Dropout", ["x"], params="dropout_param { dropout_ratio: 0.3 }"))
case("batchnorm_factor", {"x": _r(2, 3, 4, 4)}, _layer("y", "BatchNorm", ["x"], params=
     "batch_norm_param { eps: 0.001 }"), {"y": [_r(3) * 2, _r(3, lo=0.5, hi=2) * 2, np.array([2.0], np.float32)]})
case("batchnorm_factor0", {"x": _r(2, 3, 4, 4)}, _layer("y", "BatchNorm", ["x"]),
     {"y": [_r(3), _r(3, lo=0.5, hi=2), np.array([0.0], np.float32)]})
case("scale_bias", {"x": _r(2, 3, 4, 4)}, _layer("y", "Scale", ["x"], params="scale_param { bias_term: true }"),
     {"y": [_r(3), _r(3)]})
case("scale", {"x": _r(2, 3, 4, 4)}, _layer("y", "Scale", ["x"]), {"y": [_r(3)]})
case("scale_axis2", {"x": _r(2, 3, 4, 5)}, _layer("y", "Scale", ["x"], params="scale_param { axis: 2 num_axes: 2 }"),
     {"y": [_r(4, 5)]})
case("eltwise_sum_coeff", {"a": _r(1, 3, 4), "b": _r(1, 3, 4)}, _layer("y", "Eltwise", ["a", "b"], params=
     "eltwise_param { operation: SUM coeff: 1 coeff: -0.5 }"))
case("eltwise_sum3", {"a": _r(1, 3, 4), "b": _r(1, 3, 4), "c": _r(1, 3, 4)}, _layer("y", "Eltwise", ["a", "b", "c"]))
case("eltwise_prod", {"a": _r(1, 3, 4), "b": _r(1, 3, 4), "c": _r(1, 3, 4)}, _layer("y", "Eltwise", ["a", "b", "c"],
     params="eltwise_param { operation: PROD }"))
case("eltwise_max", {"a": _r(1, 3, 4), "b": _r(1, 3, 4)}, _layer("y", "Eltwise", ["a", "b"], params=
     "eltwise_param { operation: MAX }"))
case("concat", {"a": _r(1, 3, 4), "b": _r(1, 2, 4)}, _layer("y", "Concat", ["a", "b"]))
case("concat_axis2", {"a": _r(1, 3, 4, 2), "b": _r(1, 3, 1, 2)}, _layer("y", "Concat", ["a", "b"], params=
     "concat_param { axis: 2 }"))
case("crop", {"x": _r(1, 2, 8, 8), "r": _r(1, 2, 4, 5)}, _layer("y", "Crop", ["x", "r"], params=
     "crop_param { axis: 2 offset: 1 offset: 2 }"))
case("flatten", {"x": _r(2, 3, 4, 5)}, _layer("y", "Flatten", ["x"]))
case("reshape", {"x": _r(2, 3, 4, 2)}, _layer("y", "Reshape", ["x"], params=
     "reshape_param { shape { dim: 0 dim: -1 dim: 2 } }"))
case("softmax", {"x": _r(2, 3, 4, 5)}, _layer("y", "Softmax", ["x"]))
case("softmax_axis2", {"x": _r(2, 3, 4)}, _layer("y", "Softmax", ["x"], params="softmax_param { axis: 2 }"))
case("permute", {"x": _r(2, 3, 4, 5)}, _layer("y", "Permute", ["x"], params=
     "permute_param { order: 0 order: 2 order: 3 order: 1 }"))
case("normalize", {"x": _r(2, 3, 4, 5)}, _layer("y", "Normalize", ["x"], params=
     "norm_param { across_spatial: false channel_shared: false }"), {"y": [_r(3, lo=1, hi=20)]})
case("normalize_across_shared", {"x": _r(1, 3, 4, 5)}, _layer("y", "Normalize", ["x"], params=
     "norm_param { across_spatial: true channel_shared: true eps: 0.0001 }"), {"y": [np.array([7.0], np.float32)]})
case("priorbox", {"f": _r(1, 2, 3, 4), "img": _r(1, 3, 30, 40)}, _layer("y", "PriorBox", ["f", "img"], params=
     "prior_box_param { min_size: 8 max_size: 16 aspect_ratio: 2 aspect_ratio: 3 flip: true clip: true "
     "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 }"))
case("priorbox_step_offset", {"f": _r(1, 2, 3, 3), "img": _r(1, 3, 24, 24)}, _layer("y", "PriorBox", ["f", "img"],
     params="prior_box_param { min_size: 4 min_size: 9 aspect_ratio: 2 flip: false variance: 0.1 step: 7 "
            "offset: 0.25 clip: false }"))  # OpenCV's default is clip: true, Caffe's false: always say it


@pytest.mark.parametrize("inputs,layers,weights,out", CV_CASES)
def test_layer_against_opencv(inputs, layers, weights, out):
    text = prototxt({n: a.shape for n, a in inputs.items()}, layers)
    model = caffemodel(weights)
    (ref,) = opencv_forward(text, model, inputs, [out])
    got = _ours(text, model, inputs)[out]
    assert got.shape == ref.shape or got.size == ref.size and out == "y"
    np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=0,
                               atol=1e-5 * max(1.0, float(np.abs(ref).max())))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("code_type,keep_top_k,top_k", [("CENTER_SIZE", 10, 20), ("CORNER", 50, -1),
                                                          ("CENTER_SIZE", 3, 5)])
def test_detection_output_against_opencv(code_type, keep_top_k, top_k):
    # priors from a PriorBox layer, random offsets and softmaxed scores for 3 classes
    priors = 3 * 3 * 4
    layers = (_layer("prior", "PriorBox", ["f", "img"], params=
                     "prior_box_param { min_size: 6 max_size: 12 aspect_ratio: 2 flip: true clip: false "
                     "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 }")
              + _layer("y", "DetectionOutput", ["loc", "conf", "prior"], params=
                       f"detection_output_param {{ num_classes: 3 share_location: true background_label_id: 0 "
                       f"nms_param {{ nms_threshold: 0.45 {'top_k: %d' % top_k if top_k > 0 else ''} }} "
                       f"code_type: {code_type} keep_top_k: {keep_top_k} confidence_threshold: 0.2 }}"))
    conf = _softmax(R.normal(0, 2, (1, priors, 3)).astype(np.float32), 2).reshape(1, -1)
    inputs = {"f": _r(1, 2, 3, 3), "img": _r(1, 3, 24, 24), "loc": _r(1, priors * 4, lo=-0.5, hi=0.5),
              "conf": conf}
    text = prototxt({n: a.shape for n, a in inputs.items()}, layers)
    (ref,) = opencv_forward(text, caffemodel({}), inputs, ["y"])
    got = _ours(text, caffemodel({}), inputs)["y"]
    rows = ref[0, 0][ref[0, 0, :, 2] > 0]  # OpenCV pads to keep_top_k rows of zeros
    assert got.shape == (1, 1, len(rows), 7) and len(rows) > 0
    # Caffe groups the rows by label (ascending), scores descending within a label, as we
    # do; OpenCV orders them by score alone: compare in Caffe's order.
    assert np.all(np.diff(got[0, 0, :, 1]) >= 0)
    caffe_order = rows[np.lexsort((-rows[:, 2], rows[:, 1]))]
    np.testing.assert_allclose(got[0, 0], caffe_order, rtol=0, atol=1e-5)


# ---- numpy references (Caffe's documented semantics) ------------------------------------------
def test_slice_and_split_tops():
    x = _r(2, 5, 3)
    text = prototxt({"x": x.shape}, _layer("s", "Slice", ["x"], ["a", "b", "c"], "slice_param { slice_point: 1 "
                                            "slice_point: 3 }") + _layer("sp", "Split", ["c"], ["c1", "c2"])
                    + _layer("h", "Slice", ["x"], ["h1", "h2"], "slice_param { axis: 2 slice_point: 1 }"))
    got = _ours(text, caffemodel({}), {"x": x})
    for name, ref in [("a", x[:, :1]), ("b", x[:, 1:3]), ("c", x[:, 3:]), ("c1", x[:, 3:]), ("c2", x[:, 3:]),
                      ("h1", x[:, :, :1]), ("h2", x[:, :, 1:])]:
        np.testing.assert_array_equal(got[name], ref)


def test_slice_without_points_splits_equally():
    x = _r(1, 4, 2)
    got = _ours(prototxt({"x": x.shape}, _layer("s", "Slice", ["x"], ["a", "b"])), caffemodel({}), {"x": x})
    np.testing.assert_array_equal(got["a"], x[:, :2])
    np.testing.assert_array_equal(got["b"], x[:, 2:])


def test_threshold():
    x = _r(2, 3, 4)
    got = _ours(prototxt({"x": x.shape}, _layer("y", "Threshold", ["x"], params="threshold_param { threshold: 0.3 }")),
                caffemodel({}), {"x": x})["y"]
    np.testing.assert_array_equal(got, (x > 0.3).astype(np.float32))


@pytest.mark.parametrize("transpose,axis,shape", [(False, 2, (2, 3, 4)), (True, 1, (2, 3, 2, 2)),
                                                  (False, -1, (2, 3, 4))])
def test_inner_product_axis_and_transpose(transpose, axis, shape):
    x = _r(*shape)
    ax = axis % len(shape)
    k = int(np.prod(shape[ax:]))
    w = _r(k, 5) if transpose else _r(5, k)
    b = _r(5)
    text = prototxt({"x": shape}, _layer("y", "InnerProduct", ["x"], params=
                                         f"inner_product_param {{ num_output: 5 axis: {axis} "
                                         f"transpose: {'true' if transpose else 'false'} }}"))
    got = _ours(text, caffemodel({"y": [w, b]}), {"x": x})["y"]
    ref = x.reshape(shape[:ax] + (k,)) @ (w if transpose else w.T) + b
    assert got.shape == shape[:ax] + (5,)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_scale_and_bias_with_second_bottom_and_learned_bias():
    x, s = _r(2, 3, 4, 5), _r(2, 3)
    text = prototxt({"x": x.shape, "s": s.shape},
                    _layer("y", "Scale", ["x", "s"], params="scale_param { axis: 0 }")
                    + _layer("z", "Bias", ["x"], params="bias_param { axis: 1 num_axes: 2 }"))
    bias = _r(3, 4)
    got = _ours(text, caffemodel({"z": [bias]}), {"x": x, "s": s})
    np.testing.assert_allclose(got["y"], x * s[:, :, None, None], rtol=1e-6)
    np.testing.assert_allclose(got["z"], x + bias[None, :, :, None], rtol=1e-6)


def test_flatten_middle_axes_and_caffe_reshape():
    x = _r(2, 4, 3, 5)
    text = prototxt({"x": x.shape},
                    _layer("f", "Flatten", ["x"], params="flatten_param { axis: 1 end_axis: 2 }")
                    + _layer("r", "Reshape", ["x"], params="reshape_param { shape { dim: 2 dim: -1 } axis: 1 "
                                                           "num_axes: 1 }"))
    got = _ours(text, caffemodel({}), {"x": x})
    np.testing.assert_array_equal(got["f"], x.reshape(2, 12, 5))
    np.testing.assert_array_equal(got["r"], x.reshape(2, 2, 2, 3, 5))


@pytest.mark.parametrize("params,check", [
    ("argmax_param { top_k: 2 }", "flat"),
    ("argmax_param { top_k: 2 out_max_val: true }", "flat_val"),
    ("argmax_param { axis: 1 top_k: 2 }", "axis"),
    ("argmax_param { axis: 1 out_max_val: true }", "axis_val"),
])
def test_argmax(params, check):
    x = _r(2, 4, 3)
    got = _ours(prototxt({"x": x.shape}, _layer("y", "ArgMax", ["x"], params=params)), caffemodel({}), {"x": x})["y"]
    flat = x.reshape(2, -1)
    order = np.argsort(-flat, axis=1, kind="stable")[:, :2]
    if check == "flat":
        np.testing.assert_array_equal(got.reshape(2, 2), order)
    elif check == "flat_val":
        np.testing.assert_array_equal(got.reshape(2, 2, 2)[:, 0], order)
        np.testing.assert_array_equal(got.reshape(2, 2, 2)[:, 1], np.take_along_axis(flat, order, 1))
    elif check == "axis":
        np.testing.assert_array_equal(got, np.argsort(-x, axis=1, kind="stable")[:, :2])
    else:
        np.testing.assert_array_equal(got, x.max(axis=1, keepdims=True))


def test_lrn_across_channels_with_k():
    x = _r(1, 7, 4, 4)
    text = prototxt({"x": x.shape}, _layer("y", "LRN", ["x"], params="lrn_param { local_size: 5 alpha: 0.1 beta: 0.75 "
                                                                      "k: 2 }"))
    got = _ours(text, caffemodel({}), {"x": x})["y"]
    sq = np.pad(x * x, ((0, 0), (2, 2), (0, 0), (0, 0)))
    ref = x / (2 + 0.1 / 5 * sum(sq[:, i:i + 7] for i in range(5))) ** 0.75  # Caffe: k + alpha/n * sum(x^2)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_log_and_exp_with_base_scale_shift():
    x = _r(1, 3, 4, lo=0.1, hi=2)
    text = prototxt({"x": x.shape}, _layer("l", "Log", ["x"], params="log_param { base: 10 scale: 2 shift: 3 }")
                    + _layer("e", "Exp", ["x"], params="exp_param { base: 3 scale: 0.5 shift: 0.25 }"))
    got = _ours(text, caffemodel({}), {"x": x})
    np.testing.assert_allclose(got["l"], np.log10(3 + 2 * x), rtol=1e-5)
    np.testing.assert_allclose(got["e"], 3.0 ** (0.25 + 0.5 * x), rtol=1e-5)


def test_detections_corner_size_and_adaptive_nms():
    """SSD semantics written out: CORNER_SIZE decoding, and eta < 1 shrinking the NMS threshold."""
    from pooled_predictor.ops.ssd import detections

    priors = np.array([[0.1, 0.1, 0.5, 0.5], [0.12, 0.1, 0.52, 0.5], [0.2, 0.1, 0.6, 0.5], [0.6, 0.6, 0.9, 0.9]],
                      np.float32)
    var = np.full((4, 4), 0.5, np.float32)
    prior = np.stack([priors.ravel(), var.ravel()])[None]
    loc = np.zeros((1, 16), np.float32)
    loc[0, 12:16] = [0.2, 0.0, -0.2, 0.0]  # box 3 moved by var * loc * prior size (CORNER_SIZE)
    conf = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [0.4, 0.6]], np.float32).reshape(1, -1)
    kw = dict(num_classes=2, code_type="CORNER_SIZE", nms_threshold=0.6, confidence_threshold=0.5)
    rows = detections(loc, conf, prior, **kw)
    # box 1 overlaps box 0 by IoU 0.905 > 0.6: suppressed; box 2 by 0.6 (not > 0.6): kept
    assert rows[:, 2].tolist() == pytest.approx([0.9, 0.7, 0.6])
    np.testing.assert_allclose(rows[2, 3:], [0.6 + 0.5 * 0.2 * 0.3, 0.6, 0.9 - 0.5 * 0.2 * 0.3, 0.9], atol=1e-6)
    # eta 0.9: after box 0 is kept the threshold is 0.54 < IoU(0, 2) = 0.6: box 2 goes too
    rows = detections(loc, conf, prior, eta=0.9, **kw)
    assert rows[:, 2].tolist() == pytest.approx([0.9, 0.6])
