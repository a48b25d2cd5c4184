"""OpenCV's res10 SSD face detector (Caffe) against OpenCV dnn, and fb-caffe-exts' PredictorTest on it.

Reference: cv2.dnn.readNetFromCaffe on the same files (OpenCV plays the role
onnxruntime plays for ONNX models); input: skimage's astronaut photo as the
OpenCV face-detector sample prepares it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pooled_predictor import Config, Optimization, PooledPredictor, Predictor
from pooled_predictor.apps.faces import preprocess
from pooled_predictor.importers.caffe import parse_caffemodel, save_hdf5_weights
from tests.conftest import make_mlp, mlp_reference
from tests.pool.helpers import CountingCallback

cv2 = pytest.importorskip("cv2")

# (our blob, OpenCV layer): Caffe blob names; OpenCV names a layer's output by the layer, so the
# in-place ReLU that writes blob fc7 is "last_relu" there, and conv9_2_h after its ReLU "conv9_2_relu".
COMPARED = [("layer_512_1_conv2_h", "layer_512_1_conv2_h"),  # the backbone's last convolution
            ("fc7", "last_relu"), ("conv9_2_h", "conv9_2_relu"), ("conv4_3_norm", "conv4_3_norm"),
            ("mbox_loc", "mbox_loc"), ("mbox_conf_softmax", "mbox_conf_softmax"),
            ("mbox_priorbox", "mbox_priorbox"), ("detection_out", "detection_out")]


@pytest.fixture(scope="module")
def image(astronaut):
    return preprocess(astronaut)


@pytest.fixture(scope="module")
def reference(res10, image):
    net = cv2.dnn.readNetFromCaffe(str(res10.prototxt), str(res10.caffemodel))
    net.setInput(image)
    return dict(zip([c for _, c in COMPARED], net.forward([c for _, c in COMPARED])))


def _faces(rows, threshold=0.5):
    rows = rows.reshape(-1, 7)
    return rows[rows[:, 2] > threshold]


def test_intermediate_blobs_and_detections_match_opencv(res10, image, reference):
    p = Predictor.paths(res10.prototxt, res10.caffemodel, keep=[b for b, _ in COMPARED])
    blobs = p.forward({"data": image})
    for ours, theirs in COMPARED[:-1]:
        ref = reference[theirs]
        got = blobs[ours].reshape(ref.shape)
        err = float(np.abs(got - ref).max() / np.abs(ref).max())
        assert err <= 1e-4, (ours, err)
    ours, theirs = _faces(blobs["detection_out"]), _faces(reference["detection_out"])
    assert len(ours) == len(theirs) >= 1  # the astronaut's face
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-3)


@pytest.fixture(scope="module")
def hdf5_weights(res10, tmp_path_factory):
    path = tmp_path_factory.mktemp("res10") / "res10.h5"
    save_hdf5_weights(parse_caffemodel(res10.caffemodel)[0], path)
    return path


def _make(kind, optimization, res10, hdf5_weights):
    if kind == "paths":
        return Predictor.paths(res10.prototxt, res10.caffemodel, optimization)
    if kind == "strings":
        return Predictor.strings(res10.prototxt.read_text(), res10.caffemodel.read_bytes(), optimization)
    return Predictor.hdf5_paths(res10.prototxt, hdf5_weights, optimization)


@pytest.mark.parametrize("optimization", [Optimization.NONE, Optimization.MEMORY])
@pytest.mark.parametrize("kind", ["paths", "strings", "hdf5_paths"])
def test_predictor_test_three_forms_consistent_across_threads(kind, optimization, res10, hdf5_weights, image,
                                                              reference):
    """fb-caffe-exts' PredictorTest: {paths, strings, hdf5_paths} x {NONE, MEMORY}, three forward forms."""
    p = _make(kind, optimization, res10, hdf5_weights)
    ref = _faces(reference["detection_out"])
    (rows,) = p.forward([image], ["detection_out"])
    np.testing.assert_allclose(_faces(rows), ref, rtol=0, atol=1e-3)
    out = [np.empty_like(rows)]
    assert p.forward([image], ["detection_out"], out) is out
    np.testing.assert_array_equal(out[0], rows)
    blobs = p.forward([image])
    np.testing.assert_array_equal(blobs["detection_out"], rows)
    assert ("conv1_pool" in blobs) == (optimization is Optimization.NONE)

    results, errors = [], []

    def worker():
        try:
            results.append(p.forward([image], ["detection_out"])[0])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 2 and p.thread_net_count == 3
    for r in results:
        np.testing.assert_array_equal(r, rows)


def test_caffe_and_onnx_models_in_one_pool(res10, image, reference):
    """fb-caffe-exts' PooledPredictorTest counts, with a Caffe and an ONNX model served side by side."""
    mlp = make_mlp()
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    cob = CountingCallback()
    config = Config(model_bytes=[(res10.prototxt.read_bytes(), res10.caffemodel.read_bytes()),
                                 mlp.SerializeToString()], num_threads=2)
    faces_pp, mlp_pp = PooledPredictor.make_predictors(config, cob)
    try:
        out = faces_pp.forward({"data": image}).result(timeout=60)
        np.testing.assert_allclose(_faces(out["detection_out"]), _faces(reference["detection_out"]), atol=1e-3)
        assert (cob.enqueued, cob.processed) == (1, 1)
        seen = {}

        def chain(_):
            seen["counts"] = (cob.enqueued, cob.processed)
            return mlp_pp.forward([x])

        y = faces_pp.forward({"data": image}).then(chain).result(timeout=60)["y"]
        np.testing.assert_allclose(y, mlp_reference(mlp, x), rtol=1e-5, atol=1e-6)
        assert seen["counts"] == (2, 2) and (cob.enqueued, cob.processed) == (3, 3)
    finally:
        faces_pp.close()


def test_config_model_paths_takes_prototxt_caffemodel_pairs(res10, tmp_path, image, reference):
    import onnx

    mlp_path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp(), mlp_path)
    with PooledPredictor(Config(model_paths=[mlp_path, (res10.prototxt, res10.caffemodel)])) as pool:
        out = pool.forward({"data": image}, ["detection_out"], net_id=1).result(timeout=60)
    np.testing.assert_allclose(_faces(out["detection_out"]), _faces(reference["detection_out"]), atol=1e-3)


def test_a_batch_of_two_photos(res10, image, reference):
    """The declared batch of 1 is symbolic: two photos in one job, DetectionOutput rows tagged by image."""
    flipped = np.ascontiguousarray(image[:, :, :, ::-1])
    p = Predictor.paths(res10.prototxt, res10.caffemodel)
    (rows,) = p.forward([np.concatenate([image, flipped])], ["detection_out"])
    faces = _faces(rows)
    np.testing.assert_allclose(faces[faces[:, 0] == 0], _faces(reference["detection_out"]), atol=1e-3)
    (mirrored,) = faces[faces[:, 0] == 1]
    np.testing.assert_allclose(mirrored[[3, 5]], 1 - _faces(reference["detection_out"])[0, [5, 3]], atol=0.03)


def test_memory_opt_arena_at_the_lower_bound(res10):
    """memory_opt on the Caffe graph: the arena equals the liveness lower bound (benchmarks/memory.py)."""
    p = Predictor.paths(res10.prototxt, res10.caffemodel)
    net = p.new_net()
    net.reshape({"data": (1, 3, 300, 300)})
    plan = net.memory_plan
    plan.validate()
    assert plan.arena_bytes <= 1.001 * plan.lower_bound_bytes
    assert net.arena_bytes < 0.25 * net.activation_bytes
