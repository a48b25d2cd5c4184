"""Real models through the optimizer: PP-OCR det and rec, and the zoo of classic CNNs.

Criteria: level "all" vs level "none" within 1e-5 x max|reference| (our Net,
same input), and both within 1e-4 x max|reference| of onnxruntime on the
original model. Inputs are the scanned page (tests/models/ppocr_inputs.py).
Every pass except fold_conv_add gives the same bits as the unfused graph on
PP-OCR; fold_conv_add moves a bias into Conv's GEMM (the numpy im2col path adds
it in the product's accumulation), a 1-ulp change per element that the detector
amplifies to ~1e-5 of its output scale, the same size as its float32 noise
against a float64 run (test_all_level_is_as_close_to_float64_as_none). The
compiled GEMM paths add the bias after the sum, so there the detector's two
levels give the same bits.
"""

import numpy as np
import onnx
import pytest

from pooled_predictor.importers import load_onnx
from pooled_predictor.passes import optimize
from tests.models.ppocr_inputs import page_det_input, page_rec_input, to_float64
from tests.passes.pass_helpers import rel_err, run_net

TOL_LEVELS = 1e-5
TOL_ORT = 1e-4

# What the pipeline does to each PP-OCR model (level "all"; no input_shapes).
DET_CHANGES = {"Identity removed": 147, "Add folded into Conv bias": 75, "Add folded into ConvTranspose bias": 2,
               "Gelu (erf form) fused": 13, "Conv+Add fused": 10, "Conv+Relu fused": 19, "Conv+HardSigmoid fused": 13,
               "Conv+Gelu fused": 13, "Conv(1x1)+Conv(depthwise) fused": 3, "FusedConv(1x1)+Conv(depthwise) fused": 7}
# rec's 1-D convolutions of its head: Squeeze(Conv) -> BatchNormalization -> HardSwish -> Unsqueeze, the
# Squeezes sunk (passes/squeeze.py) so the BatchNormalizations fold and the HardSwishes fuse into the Convs
REC_CHANGES = {"Identity removed": 58, "Cast folded": 39, "Mul folded": 39, "Transpose pairs composed": 1,
               "Unsqueeze(Squeeze) removed": 2, "BatchNormalization below Squeeze": 2,
               "HardSwish spelling below Squeeze": 2,
               "BatchNormalization folded into Conv": 4, "Add folded into Conv bias": 33,
               "Gelu (erf form) fused": 10, "HardSigmoid*x -> HardSwish": 2, "Conv+Add fused": 7,
               "Conv+Gelu fused": 10, "Conv+Relu fused": 3, "Conv+HardSigmoid fused": 3, "Conv+HardSwish fused": 2,
               "MatMul+Add -> MatMulAdd": 2, "Conv(1x1)+Conv(depthwise) fused": 2,
               "FusedConv(1x1)+Conv(depthwise) fused": 6}


@pytest.fixture(scope="module")
def page():
    from pooled_predictor.zoo import fetch_page_image

    return fetch_page_image()


@pytest.fixture(scope="module")
def det(ppocr):
    g = load_onnx(ppocr.det)
    return g, optimize(g, "all")


@pytest.fixture(scope="module")
def rec(ppocr):
    g = load_onnx(ppocr.rec)
    return g, optimize(g, "all")


def ort_run(path, x):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_what_fires_on_the_detector(det):
    g, (opt, report) = det
    changes = {k: v for k, v in report.changes().items() if k != "unread weights dropped"}
    assert changes == DET_CHANGES
    assert (report.nodes_before, report.nodes_after) == (464, 123)
    assert "Identity" not in report.after and "Erf" not in report.after
    # 10 with a residual sum input, 6 of them inside a FusedConvDepthwise (the 1x1 conv feeding a depthwise one)
    # (and 13 with their Gelu)
    assert report.after["pooled_predictor.FusedConv"] == 48 and report.after["pooled_predictor.FusedConvDepthwise"] == 10
    # the squeeze-excitation gates x * HardSigmoid(conv(pool(x))) are not HardSwish
    assert report.after["Mul"] == 13 and report["fuse_hard_swish"].changes == {}


def test_what_fires_on_the_recognizer(rec):
    g, (opt, report) = rec
    changes = {k: v for k, v in report.changes().items() if k != "unread weights dropped"}
    assert changes == REC_CHANGES
    assert (report.nodes_before, report.nodes_after) == (297, 41)
    assert opt.opset == {"": 11, "pooled_predictor": 1}
    # the BatchNormalizations after Squeeze(Conv) fold once the Squeezes sink; MatMuls are 3-D (N, T, C) @ W:
    # MatMulAdd, no Gemm
    assert "BatchNormalization" not in report.after and "Unsqueeze" not in report.after
    assert report.after["pooled_predictor.MatMulAdd"] == 2
    assert report.after["MatMul"] == 0


@pytest.mark.parametrize("shape", [(1, 192, 384), (2, 320, 320), (1, 640, 480)])
def test_detector_all_vs_none(det, ppocr, page, shape, nchw_winograd_minimums):
    """det's 64 -> 16 head convolution runs as the NCHW8c Winograd kind (its own rounding) once fused
    with its Relu, and with the indirect GEMM in the unfused graph, which the layout walk keeps in
    NCHW: the tests of the passes hold the Winograd kind to the NCHW minimums so both graphs take the
    same kernels (the shipped kernels' accuracy: tests/models/test_ppocr.py)."""
    g, (opt, _) = det
    x = page_det_input(page, *shape)
    none, fused = run_net(g, {"x": x})[0], run_net(opt, {"x": x})[0]
    ref = ort_run(ppocr.det, x)
    err, ort_none, ort_all = rel_err(fused, none), rel_err(none, ref), rel_err(fused, ref)
    print(f"det {shape}: all vs none {err:.2e}; vs onnxruntime: none {ort_none:.2e}, all {ort_all:.2e}")
    assert err <= TOL_LEVELS and ort_none <= TOL_ORT and ort_all <= TOL_ORT


@pytest.mark.parametrize("n,w", [(1, 320), (4, 160)])
def test_recognizer_all_vs_none(rec, ppocr, page, n, w):
    """Folding BatchNormalization and Mul into Conv weights rounds the weights differently, and the
    recognizer amplifies that to ~1e-5 of its output, in either direction: the two levels are held
    within TOL_LEVELS of each other, each also within TOL_LEVELS of a float64 run of the original
    model, and within TOL_ORT of onnxruntime."""
    g, (opt, _) = rec
    x = page_rec_input(page, n, w)
    none, fused = run_net(g, {"x": x})[0], run_net(opt, {"x": x})[0]
    exact = run_net(load_onnx(to_float64(onnx.load(ppocr.rec))), {"x": x.astype(np.float64)})[0]
    ref = ort_run(ppocr.rec, x)
    err, ort_none, ort_all = rel_err(fused, none), rel_err(none, ref), rel_err(fused, ref)
    f64_none, f64_all = rel_err(none, exact), rel_err(fused, exact)
    print(f"rec {x.shape}: all vs none {err:.2e}; vs float64: none {f64_none:.2e}, all {f64_all:.2e}; "
          f"vs onnxruntime: none {ort_none:.2e}, all {ort_all:.2e}")
    assert err <= TOL_LEVELS and ort_none <= TOL_ORT and ort_all <= TOL_ORT
    assert f64_none <= TOL_LEVELS and f64_all <= TOL_LEVELS


def test_only_fold_conv_add_changes_the_detectors_bits(det, page, nchw_winograd_minimums):
    g, _ = det
    x = page_det_input(page, 1, 192, 384)
    opt, _ = optimize(g, "all", disable=["fold_conv_add"])
    assert np.array_equal(run_net(g, {"x": x})[0], run_net(opt, {"x": x})[0])


def test_all_level_is_as_close_to_float64_as_none(ppocr, page, nchw_winograd_minimums):
    g = load_onnx(ppocr.det)
    x = page_det_input(page, 1, 320, 320)
    exact = run_net(load_onnx(to_float64(onnx.load(ppocr.det))), {"x": x.astype(np.float64)})[0]
    err_none = rel_err(run_net(g, {"x": x})[0], exact)
    err_all = rel_err(run_net(optimize(g, "all")[0], {"x": x})[0], exact)
    print(f"det vs float64: none {err_none:.2e}, all {err_all:.2e}")
    assert err_all <= max(err_none, TOL_LEVELS)


def test_optimized_graph_in_a_predictor(rec, page):
    from pooled_predictor.serving.predictor import Predictor

    g, (opt, _) = rec
    x = page_rec_input(page, 2, 160)
    p_none, p_all = Predictor(g), Predictor(opt)
    a = p_none.forward({"x": x}, ["fetch_name_0"])[0]
    b = p_all.forward({"x": x}, ["fetch_name_0"])[0]
    assert rel_err(b, a) <= TOL_LEVELS


# ---- the zoo of classic CNNs ---------------------------------------------------------------------
ZOO_MODELS = ["alexnet", "googlenet", "resnet50", "mobilenet_v2", "squeezenet1_1", "vgg16"]
# reduced sizes: the smallest each accepts (AlexNet and VGG-16 have fixed fc heads)
ZOO_SIZES = {"alexnet": 227, "googlenet": 64, "resnet50": 64, "mobilenet_v2": 64, "squeezenet1_1": 64,
             "vgg16": 224}
ZOO_FIRES = {
    "alexnet": {"Dropout removed": 2, "Conv+Relu fused": 5, "Gemm+Relu fused": 2},
    "googlenet": {"Dropout removed": 1, "Conv+Relu fused": 57},
    "resnet50": {"BatchNormalization folded into Conv": 53, "Conv+Add+Relu fused": 16, "Conv+Relu fused": 33},
    "mobilenet_v2": {"Dropout removed": 1, "BatchNormalization folded into Conv": 52, "Conv+Add fused": 10,
                     "Conv+Clip fused": 35, "FusedConv(1x1)+FusedConv(depthwise) fused": 16},
    "squeezenet1_1": {"Dropout removed": 1, "Conv+Relu fused": 26},
    "vgg16": {"Dropout removed": 2, "Conv+Relu fused": 13, "Gemm+Relu fused": 2},
}


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_all_vs_none(name):
    cnn = pytest.importorskip("pooled_predictor.zoo.cnn")
    size = ZOO_SIZES[name]
    g = load_onnx(cnn.build(name, batch=2, input_size=size, outputs=("prob", "logits")))
    opt, report = optimize(g, "all")
    changes = {k: v for k, v in report.changes().items() if k != "unread weights dropped"}
    assert changes == ZOO_FIRES[name], report.summary()
    assert "BatchNormalization" not in report.after and "Dropout" not in report.after
    x = cnn.sample_input(name, 2, input_size=size)
    for o_none, o_all, out in zip(run_net(g, {"data": x}), run_net(opt, {"data": x}), ("prob", "logits")):
        err = rel_err(o_all, o_none)
        print(f"{name} {out}: all vs none {err:.2e}; nodes {report.nodes_before} -> {report.nodes_after}")
        assert err <= TOL_LEVELS
