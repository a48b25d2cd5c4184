"""The Caffe importer: Caffe's blob semantics, legacy formats, TEST-phase rules, typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor import ModelLoadError, Optimization, Predictor, UnsupportedOpError
from pooled_predictor.importers import load_caffe
from pooled_predictor.importers.caffe import caffe_pb, parse_caffemodel, save_hdf5_weights
from tests.caffe_helpers import caffemodel, prototxt

R = np.random.default_rng(5)
W = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = R.standard_normal(4).astype(np.float32)
X = R.standard_normal((1, 3, 6, 6)).astype(np.float32)

CONV_RELU = prototxt({"data": (1, 3, 6, 6)}, """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Power" bottom: "conv" top: "conv" power_param { scale: 2 } }
layer { name: "out" type: "Power" bottom: "conv" top: "out" power_param { shift: 1 } }
""")


def _conv_ref(x):
    from numpy.lib.stride_tricks import sliding_window_view

    win = sliding_window_view(x[0], (3, 3), axis=(1, 2))  # (3, 4, 4, 3, 3)
    return (np.einsum("chwij,ocij->ohw", win, W) + B[:, None, None])[None]


def test_in_place_layers_blob_by_name_is_the_value_after_the_last_writer():
    p = Predictor.strings(CONV_RELU, caffemodel({"conv": [W, B]}), optimization=Optimization.NONE,
                          graph_optimization_level="none")
    blobs = p.forward({"data": X})
    conv = _conv_ref(X)
    np.testing.assert_allclose(blobs["conv"], 2 * np.maximum(conv, 0), rtol=1e-5, atol=1e-5)  # after "scale"
    np.testing.assert_allclose(blobs["conv@1"], conv, rtol=1e-5, atol=1e-5)  # earlier writers: versioned
    np.testing.assert_allclose(blobs["out"], 2 * np.maximum(conv, 0) + 1, rtol=1e-5, atol=1e-5)
    assert p.output_names == ["out"]


def test_weights_by_layer_name_from_a_training_net_with_v1_layers_and_legacy_blobs():
    # a "training" caffemodel: data and loss layers, another layer order, V1 `layers`, legacy 4-D blob dims
    net = caffe_pb.NetParameter(name="train")
    for name in ("data", "loss"):
        layer = net.layers.add()
        layer.name = name
    extra = caffe_pb.NetParameter.FromString(caffemodel({"conv": [W, B]}, legacy_shape=True, double=True, v1=True))
    net.layers.extend(extra.layers)
    graph = load_caffe(CONV_RELU, net.SerializeToString())
    np.testing.assert_array_equal(graph.weights["conv/weight"], W)
    np.testing.assert_array_equal(graph.weights["conv/bias"], B)


def test_v1_prototxt_with_legacy_input_dim():
    text = """input: "data" input_dim: 1 input_dim: 3 input_dim: 6 input_dim: 6
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
"""
    p = Predictor.strings(text, caffemodel({"conv": [W, B]}, v1=True))
    np.testing.assert_allclose(p.forward({"data": X}, ["conv"])[0], np.maximum(_conv_ref(X), 0), rtol=1e-5, atol=1e-5)


def test_input_layer_and_test_phase_rules():
    text = """
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "train_only" type: "Dropout" bottom: "data" top: "t" include { phase: TRAIN } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "not_in_test" type: "AbsVal" bottom: "conv" top: "abs" exclude { phase: TEST } }
layer { name: "staged" type: "AbsVal" bottom: "conv" top: "staged" include { phase: TEST stage: "deploy" } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "conv" bottom: "label" top: "loss" include { phase: TRAIN } }
"""
    graph = load_caffe(text, caffemodel({"conv": [W, B]}))
    assert [n.name for n in graph.nodes] == ["conv"] and graph.input_names == ["data"]
    assert graph.inputs[0].shape == ("batch", 3, 6, 6)  # a declared batch of 1 becomes symbolic


def test_unsupported_layer_types_are_listed_at_once():
    text = prototxt({"data": (1, 3, 6, 6)}, """
layer { name: "a" type: "MVN" bottom: "data" top: "a" }
layer { name: "b" type: "Embed" bottom: "a" top: "b" }
layer { name: "c" type: "MVN" bottom: "b" top: "c" }
layer { name: "d" type: "Pooling" bottom: "c" top: "d" pooling_param { pool: STOCHASTIC kernel_size: 2 } }
""")
    with pytest.raises(UnsupportedOpError) as info:
        load_caffe(text, None)
    msg = str(info.value)
    assert "MVN" in msg and "Embed" in msg and "STOCHASTIC" in msg and "'d'" in msg
    assert {m[0] for m in info.value.missing} == {"MVN", "Embed"}


def test_missing_weights_name_the_file_and_layer(tmp_path):
    path = tmp_path / "w.caffemodel"
    path.write_bytes(caffemodel({"other": [W]}))
    with pytest.raises(ModelLoadError, match=r"w\.caffemodel.*'conv'"):
        load_caffe(CONV_RELU, str(path))
    with pytest.raises(ModelLoadError, match="'conv'.*1 weight blobs, expected 2"):
        load_caffe(CONV_RELU, caffemodel({"conv": [W]}))


def test_bad_files(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        Predictor.paths(tmp_path / "none.prototxt", tmp_path / "none.caffemodel")
    bad = tmp_path / "bad.prototxt"
    bad.write_text("layer { name: 'x' type: ")
    with pytest.raises(ModelLoadError, match="bad.prototxt"):
        load_caffe(bad, None)
    model = caffemodel({"conv": [W, B]})
    with pytest.raises(ModelLoadError, match="truncated"):
        load_caffe(CONV_RELU, model[: len(model) // 2])
    with pytest.raises(ModelLoadError, match="no earlier layer"):
        load_caffe(prototxt({"data": (1, 3)}, 'layer { name: "r" type: "ReLU" bottom: "nope" top: "r" }'), None)
    empty = tmp_path / "empty.caffemodel"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty"):
        load_caffe(CONV_RELU, empty)


def test_hdf5_weights_layout(tmp_path):
    h5 = tmp_path / "w.h5"
    save_hdf5_weights(parse_caffemodel(caffemodel({"conv": [W, B]}))[0], h5)
    import h5py

    with h5py.File(h5) as f:
        assert sorted(f["data/conv"].keys()) == ["0", "1"]
    text_path = tmp_path / "net.prototxt"
    text_path.write_text(CONV_RELU)
    p = Predictor.hdf5_paths(text_path, h5)
    ref = Predictor.strings(CONV_RELU, caffemodel({"conv": [W, B]}))
    np.testing.assert_array_equal(p.forward({"data": X}, ["out"])[0], ref.forward({"data": X}, ["out"])[0])
    with pytest.raises(ModelLoadError, match="HDF5"):
        Predictor.hdf5_paths(text_path, text_path)


def test_generated_module_matches_the_proto_file():
    """caffe_pb.py is regenerated from caffe.proto: every message of the .proto is in it."""
    import re
    from pathlib import Path

    import pooled_predictor.importers.caffe as pkg

    proto = (Path(pkg.__file__).parent / "caffe.proto").read_text()
    names = re.findall(r"^message (\w+)", proto, re.M)
    assert names and all(hasattr(caffe_pb, n) for n in names)
    assert caffe_pb.PoolingParameter().stride == 1 and caffe_pb.BatchNormParameter().eps == pytest.approx(1e-5)


def test_weights_that_do_not_fit_the_layer_name_it():
    with pytest.raises(ModelLoadError, match=r"'conv'.*do not fit num_output 4"):
        load_caffe(CONV_RELU, caffemodel({"conv": [W[:3], B]}))
    with pytest.raises(ModelLoadError, match=r"'conv'.*bias of 3 values"):
        load_caffe(CONV_RELU, caffemodel({"conv": [W, B[:3]]}))
    text = prototxt({"x": (2, 6)}, 'layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y" '
                                   'inner_product_param { num_output: 5 } }')
    with pytest.raises(ModelLoadError, match=r"'fc'.*num_output 5"):
        load_caffe(text, caffemodel({"fc": [np.zeros((4, 6), np.float32), np.zeros(5, np.float32)]}))


def test_two_layers_of_one_name_are_refused():
    """Found by tests/fuzz (its caffe family, a layer line repeated): two Scale layers named "scale" made two
    nodes write one value, and the memory planner failed with an untyped ValueError. Weights are found by layer
    name, so two layers of one name (in phase TEST) are ambiguous: a ModelLoadError, as OpenCV refuses them."""
    text = prototxt({"data": (1, 3, 6, 6)}, """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
""")
    weights = caffemodel({"conv": [W, B], "scale": [np.ones(4, np.float32), np.zeros(4, np.float32)]})
    with pytest.raises(ModelLoadError, match="two layers are named 'scale'"):
        load_caffe(text, weights)


def test_a_blob_named_like_a_layers_own_value_is_kept_apart():
    """A blob "conv/scaled" (a legal Caffe name) beside a Scale layer "conv", which names its own product
    "conv/scaled": the two values stay apart (builder._fresh), and the net computes what OpenCV does."""
    from tests.caffe_helpers import opencv_forward

    text = prototxt({"data": (1, 3, 6, 6)}, """
layer { name: "c" type: "Convolution" bottom: "data" top: "conv/scaled" convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "conv" type: "Scale" bottom: "conv/scaled" top: "s" scale_param { bias_term: true } }
layer { name: "sum" type: "Eltwise" bottom: "s" bottom: "conv/scaled" top: "out" }
""")
    gamma, beta = R.standard_normal(4).astype(np.float32), R.standard_normal(4).astype(np.float32)
    weights = caffemodel({"c": [W, B], "conv": [gamma, beta]})
    x = R.standard_normal((1, 3, 6, 6)).astype(np.float32)
    p = Predictor.strings(text, weights)
    (ours,) = p.forward({"data": x}, ["out"])
    (ref,) = opencv_forward(text, weights, {"data": x}, ["sum"])
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
