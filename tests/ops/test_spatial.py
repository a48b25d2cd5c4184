"""One-node tests of the spatial sampling kernels against onnxruntime.

GridSample (16 and 20) over every mode, padding_mode and align_corners, 2-D and
3-D, with grids reaching past the borders; AffineGrid 2-D/3-D; RoiAlign avg/max,
both coordinate_transformation_modes, sampling ratios; DeformConv with groups,
offset groups, masks, bias, strides, pads and dilations; Col2Im 2-D and 3-D; MaxUnpool
after MaxPool's Indices, with and without output_shape. Batch 2 everywhere.
"""

import itertools

import numpy as np
import onnxruntime
import pytest

from pooled_predictor.errors import ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ort, run_ours

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---- GridSample ---------------------------------------------------------------------
MODES = {16: ["bilinear", "nearest", "bicubic"], 20: ["linear", "nearest", "cubic"]}


@pytest.mark.parametrize("opset,mode_index,padding,align", list(itertools.product(
    [16, 20], [0, 1, 2], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d(opset, mode_index, padding, align):
    x = randn(2, 3, 5, 6)
    grid = rng.uniform(-1.6, 1.6, (2, 4, 7, 2)).astype(np.float32)   # past the borders too
    attrs = {"mode": MODES[opset][mode_index], "padding_mode": padding, "align_corners": align}
    check_node("GridSample", [x, grid], attrs, opset=opset, rtol=1e-5)


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["linear", "nearest"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_3d(mode, padding, align):
    x = randn(2, 2, 3, 4, 5)
    grid = rng.uniform(-1.4, 1.4, (2, 2, 3, 4, 3)).astype(np.float32)
    check_node("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": align},
               opset=20, rtol=1e-5)


@pytest.mark.parametrize("mode,padding", [("nearest", "reflection"), ("linear", "border"), ("cubic", "reflection")])
def test_grid_sample_1d(mode, padding):
    """GridSample-20 on one spatial axis (onnxruntime takes 4-D and 5-D only: onnx's reference;
    not cubic with border, where that reference clamps the coordinate before taking the taps
    while onnxruntime and PyTorch clamp each tap, as we do)."""
    x, grid = randn(2, 3, 7), rng.uniform(-1.3, 1.3, (2, 5, 1)).astype(np.float32)
    check_node("GridSample", [x, grid], {"mode": mode, "padding_mode": padding, "align_corners": 1}, opset=20,
               reference="onnx")


def test_grid_sample_float64():
    x, grid = randn(2, 2, 4, 4, dtype=np.float64), rng.uniform(-1.2, 1.2, (2, 3, 3, 2))
    check_node("GridSample", [x, grid], {"mode": "cubic", "padding_mode": "reflection"}, opset=20, rtol=1e-10)


def test_grid_sample_mode_name_by_version():
    x, grid = randn(1, 1, 3, 3), np.zeros((1, 2, 2, 2), np.float32)
    model = make_node_model("GridSample", [x, grid], {"mode": "linear"}, opset=16)
    with pytest.raises(ShapeInferenceError, match="bilinear"):
        run_ours(model, {"in0": x, "in1": grid})


# ---- AffineGrid ---------------------------------------------------------------------
@pytest.mark.parametrize("size,align", list(itertools.product([(2, 3, 4, 5), (2, 1, 3, 4, 5)], [0, 1])))
def test_affine_grid(size, align):
    r = len(size) - 2
    theta = randn(2, r, r + 1)
    check_node("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align}, opset=20, static=(1,))


# ---- RoiAlign -----------------------------------------------------------------------
ROIS = np.array([[0.0, 0.0, 4.0, 4.0], [1.2, 0.5, 6.3, 5.1], [3.0, 2.0, 3.5, 2.4], [-1.0, -2.0, 9.0, 8.0]],
                np.float32)


@pytest.mark.parametrize("opset,mode,ctm,ratio,scale", [
    (10, "avg", None, 0, 1.0), (10, "max", None, 2, 0.5), (16, "avg", "half_pixel", 0, 1.0),
    (16, "max", "half_pixel", 2, 1.0), (16, "avg", "output_half_pixel", 3, 0.5),
    (16, "max", "output_half_pixel", 0, 1.0)])
def test_roi_align(opset, mode, ctm, ratio, scale):
    x = randn(2, 3, 8, 7)
    attrs = {"mode": mode, "output_height": 3, "output_width": 2, "sampling_ratio": ratio, "spatial_scale": scale}
    if ctm:
        attrs["coordinate_transformation_mode"] = ctm
    check_node("RoiAlign", [x, ROIS, np.array([0, 1, 1, 0], np.int64)], attrs, opset=opset, rtol=1e-5)


# ---- DeformConv ---------------------------------------------------------------------
@pytest.mark.parametrize("group,offset_group,mask,bias,stride,pad,dilation", [
    (1, 1, False, False, 1, 0, 1), (1, 2, True, True, 1, 1, 1), (2, 1, True, False, 2, 1, 1),
    (2, 2, False, True, 1, 2, 2)])
def test_deform_conv(group, offset_group, mask, bias, stride, pad, dilation):
    n, c, h, w, oc, k = 2, 4, 7, 6, 6, 3
    out = [(s + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for s in (h, w)]
    inputs = [randn(n, c, h, w), randn(oc, c // group, k, k), randn(n, offset_group * k * k * 2, *out) * 1.5,
              randn(oc) if bias else None, rng.random((n, offset_group * k * k, *out)).astype(np.float32) if mask else None]
    while inputs[-1] is None:
        inputs.pop()
    attrs = {"group": group, "offset_group": offset_group, "strides": [stride] * 2, "pads": [pad] * 4,
             "dilations": [dilation] * 2, "kernel_shape": [k, k]}
    check_node("DeformConv", inputs, attrs, opset=19, rtol=1e-5)


# ---- Col2Im -------------------------------------------------------------------------
@pytest.mark.parametrize("image,block,strides,pads,dilations", [
    ((5, 5), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1)), ((6, 7), (3, 2), (2, 1), (1, 0, 1, 1), (1, 2)),
    ((4, 5, 3), (2, 2, 1), (1, 2, 1), (0, 1, 0, 0, 1, 0), (1, 1, 2))])
def test_col2im(image, block, strides, pads, dilations):
    r = len(image)
    blocks = [(image[i] + pads[i] + pads[i + r] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(r)]
    x = randn(2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilations)}
    check_node("Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], attrs, opset=18,
               static=(1, 2))


# ---- MaxUnpool ----------------------------------------------------------------------
@pytest.mark.parametrize("opset,output_shape", [(11, False), (11, True), (22, True)])
def test_max_unpool(opset, output_shape):
    """MaxPool then MaxUnpool; with output_shape = the pooled input's (odd) shape the maxima
    return to their places."""
    x = randn(2, 3, 8, 7) if output_shape else randn(2, 3, 8, 6)
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    model = make_node_model("MaxPool", [x], pool, opset=12, outputs=2)
    y, idx = run_ort(model, {"in0": x})
    if output_shape:
        (z,) = check_node("MaxUnpool", [y, idx, np.array(x.shape, np.int64)], pool, opset=opset, static=(2,))
        kept = z != 0
        assert np.array_equal(z[kept], x[kept]) and kept.sum() == y.size
    else:
        check_node("MaxUnpool", [y, idx], pool, opset=opset)


@pytest.mark.parametrize("mode", ["nearest"])
def test_grid_sample_integers(mode):
    """onnxruntime has no integer GridSample: onnx's reference, nearest only (its linear mode
    computes integer weights, all 0; ours interpolates in float64 and truncates)."""
    x = rng.integers(-50, 100, (2, 2, 4, 5)).astype(np.int32)
    grid = rng.uniform(-1.2, 1.2, (2, 3, 3, 2)).astype(np.float32)
    check_node("GridSample", [x, grid], {"mode": mode}, opset=20, reference="onnx")


def test_shape_errors_name_the_problem():
    """Inconsistent inputs raise ShapeInferenceError naming what is wrong."""
    x = randn(1, 4, 5)                       # Col2Im: L = 5 is no block count of a 4x4 image with 2x2 blocks
    model = make_node_model("Col2Im", [x, np.array([4, 4], np.int64), np.array([2, 2], np.int64)], {},
                            opset=18, static=(1, 2))
    with pytest.raises(ShapeInferenceError, match="number of blocks"):
        run_ours(model, {"in0": x})
    x, w, off = randn(1, 2, 5, 5), randn(2, 2, 3, 3), randn(1, 9, 3, 3)   # DeformConv: offset needs 18 channels
    model = make_node_model("DeformConv", [x, w, off], {}, opset=19)
    with pytest.raises(ShapeInferenceError, match="offset shape"):
        run_ours(model, {"in0": x, "in1": w, "in2": off})


def test_roi_align_batch_index_out_of_range():
    from pooled_predictor.errors import InputError

    x, idx = randn(2, 1, 4, 4), np.array([0, 2, 0, 1], np.int64)
    model = make_node_model("RoiAlign", [x, ROIS, idx], {}, opset=16)
    with pytest.raises(InputError, match="batch_indices"):
        run_ours(model, {"in0": x, "in1": ROIS, "in2": idx})
