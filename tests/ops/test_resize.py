"""One-node tests of the Resize kernel against onnxruntime (and the ONNX
reference evaluator where onnxruntime has no kernel for a case).

Grids over mode x coordinate_transformation_mode x nearest_mode, upsampling and
downsampling, scales vs sizes, roi (tf_crop_and_resize, extrapolation),
antialias, axes, keep_aspect_ratio_policy, cubic_coeff_a and exclude_outside,
scales/sizes/roi as initializers (static) and as graph inputs (dynamic: the
Net re-infers shapes per forward), opsets 10, 11, 13, 18, 19.

What onnxruntime cannot run and where we follow something else:
* linear on 1-D or on 4-D/5-D with outer scales != 1 and cubic beyond 2-D /
  NCHW: onnxruntime has no kernel; compared with the ONNX reference evaluator
  (not for align_corners, where the reference divides by scale * in - 1, not by
  the output length as the spec text and onnxruntime do);
* keep_aspect_ratio_policy with negative axes: onnxruntime ignores the policy
  (it compares unnormalized axes); we normalize, so [-1, -2] equals [3, 2];
* antialias + tf_crop_and_resize on NHWC-like 4-D inputs: onnxruntime's NHWC
  path scatters the extrapolated values; we equal its NCHW path transposed;
* float64 / int64 inputs: onnxruntime has no Resize kernel (check_node skips).
"""

import itertools

import numpy as np
import onnxruntime
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from pooled_predictor.ir import Node
from pooled_predictor.ops.context import OpContext
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu.resize import Resize
from pooled_predictor.ops.shapes import get_rule
from tests.onnx_helpers import check_node, feeds_of, make_node_model, np_to_elem, run_ort, run_ours

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)

X4 = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
EMPTY = np.array([], np.float32)
CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
MODES = [("nearest", n) for n in NEAREST] + [("linear", None), ("cubic", None)]
# (H, W) scales: up, down, mixed, one axis left alone, and a value that is not a float32-exact ratio
SCALES = [(2.0, 3.0), (0.5, 0.6), (1.7, 0.45), (1.0, 2.5), (0.3333, 1.25)]
ROI = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7], np.float32)


def resize_inputs(x, opset, *, scales=None, sizes=None, roi=None):
    """Inputs in the version's layout: Resize-10 (X, scales); 11 (X, roi, scales, sizes), roi and
    scales required there (empty when unused); 13+ optional."""
    if opset < 11:
        return [x, np.asarray(scales, np.float32)]
    if opset < 13:
        roi = EMPTY if roi is None else roi
        scales = EMPTY if scales is None else scales
    inputs = [x, roi, None if scales is None else np.asarray(scales, np.float32)]
    if sizes is not None:
        inputs.append(np.asarray(sizes, np.int64))
    return inputs


def static_all(inputs):
    return tuple(range(1, len(inputs)))


# ---- the main grid ---------------------------------------------------------------------
@pytest.mark.parametrize("mode,nearest_mode", MODES)
@pytest.mark.parametrize("hw", SCALES)
@pytest.mark.parametrize("ctm,opset", [(c, o) for c, o in itertools.product(CTMS + ["half_pixel_symmetric"],
                                                                           [11, 13, 18, 19])
                                       if c != "half_pixel_symmetric" or o >= 19])
def test_scales(mode, nearest_mode, ctm, hw, opset):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "extrapolation_value": -3.0}
    if nearest_mode:
        attrs["nearest_mode"] = nearest_mode
    inputs = resize_inputs(X4, opset, scales=[1, 1, *hw], roi=ROI if ctm == "tf_crop_and_resize" else None)
    check_node("Resize", inputs, attrs, opset=opset, static=static_all(inputs))


@pytest.mark.parametrize("mode,nearest_mode", MODES)
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("hw", [(11, 5), (3, 4), (14, 18), (1, 1), (7, 20)])
@pytest.mark.parametrize("opset", [11, 13])
def test_sizes(mode, nearest_mode, ctm, hw, opset):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest_mode:
        attrs["nearest_mode"] = nearest_mode
    inputs = resize_inputs(X4, opset, sizes=[2, 3, *hw], roi=ROI if ctm == "tf_crop_and_resize" else None)
    check_node("Resize", inputs, attrs, opset=opset, static=static_all(inputs))


@pytest.mark.parametrize("what", ["scales", "sizes", "roi", "all"])
@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("linear", "tf_crop_and_resize"),
                                      ("cubic", "half_pixel"), ("nearest", "tf_crop_and_resize")])
@pytest.mark.parametrize("opset", [11, 13, 19])
def test_dynamic_inputs(what, mode, ctm, opset):
    """scales / sizes / roi fed as graph inputs (the Net re-infers per forward; a roi
    only known at forward is read by the bound kernel)."""
    by = "sizes" if what == "sizes" else "scales"
    inputs = resize_inputs(X4, opset, roi=ROI, **{by: [1, 1, 1.6, 0.7] if by == "scales" else [2, 3, 9, 4]})
    dynamic = {"scales": {2}, "sizes": {3}, "roi": {1}, "all": {1, 2, 3}}[what]
    static = tuple(i for i in range(1, len(inputs)) if i not in dynamic and inputs[i] is not None)
    check_node("Resize", inputs, {"mode": mode, "coordinate_transformation_mode": ctm}, opset=opset, static=static)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10(mode):
    """Resize-10: asymmetric coordinates, onnxruntime's "simple" nearest (ceil when downsampling)."""
    for hw in SCALES:
        check_node("Resize", resize_inputs(X4, 10, scales=[1, 1, *hw]), {"mode": mode}, opset=10, static=(1,))


def test_tf_half_pixel_for_nn():
    for hw in SCALES:
        check_node("Resize", resize_inputs(X4, 11, scales=[1, 1, *hw]),
                   {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, opset=11,
                   static=(1, 2))


# ---- cubic ---------------------------------------------------------------------------
@pytest.mark.parametrize("a", [-0.75, -0.5, -0.6])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"])
@pytest.mark.parametrize("hw", [(0.5, 0.3), (2.0, 1.5), (0.4, 1.6)])
@pytest.mark.parametrize("opset", [11, 19])
def test_cubic_options(a, exclude_outside, ctm, hw, opset):
    attrs = {"mode": "cubic", "coordinate_transformation_mode": ctm, "cubic_coeff_a": a,
             "exclude_outside": exclude_outside, "extrapolation_value": 7.0}
    inputs = resize_inputs(X4, opset, scales=[1, 1, *hw], roi=ROI)
    check_node("Resize", inputs, attrs, opset=opset, static=static_all(inputs))


# ---- antialias (Resize-18) -------------------------------------------------------------
@pytest.mark.parametrize("mode,a", [("linear", -0.75), ("cubic", -0.75), ("cubic", -0.5)])
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("hw", [(0.5, 0.3), (0.7, 0.26), (2.0, 1.5), (0.4, 1.6)])
@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("opset", [18, 19])
def test_antialias(mode, a, ctm, hw, exclude_outside, opset):
    x = rng.standard_normal((2, 3, 16, 13)).astype(np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "antialias": 1, "cubic_coeff_a": a,
             "exclude_outside": exclude_outside}
    inputs = resize_inputs(x, opset, scales=[1, 1, *hw], roi=ROI)
    check_node("Resize", inputs, attrs, opset=opset, static=static_all(inputs))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("shape,hw", [((1, 2, 3, 11), (1.25, 1.5)), ((1, 2, 9, 2), (1.7, 1.25))])
def test_antialias_unchanged_length(mode, shape, hw):
    """An axis whose length does not change (scale 1.25 on 3 pixels) is copied under antialias."""
    x = rng.standard_normal(shape).astype(np.float32)
    check_node("Resize", [x, None, np.array([1, 1, *hw], np.float32)],
               {"mode": mode, "antialias": 1, "coordinate_transformation_mode": "pytorch_half_pixel"},
               opset=18, static=(2,))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_sizes_and_axes(mode):
    x = rng.standard_normal((2, 3, 16, 13)).astype(np.float32)
    check_node("Resize", [x, None, None, np.array([5, 6], np.int64)], {"mode": mode, "antialias": 1, "axes": [2, 3]},
               opset=18, static=(3,))


# ---- axes and keep_aspect_ratio_policy (Resize-18) ---------------------------------------
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("sizes", [(8, 20), (32, 7), (5, 5), (16, 13)])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2]])
def test_keep_aspect_ratio_policy(mode, policy, sizes, axes):
    x = rng.standard_normal((2, 3, 16, 13)).astype(np.float32)
    check_node("Resize", [x, None, None, np.array(sizes, np.int64)],
               {"mode": mode, "keep_aspect_ratio_policy": policy, "axes": axes}, opset=18, static=(3,))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_keep_aspect_ratio_policy_all_axes(policy):
    """Without axes every axis takes part (N and C too): nearest only, onnxruntime's
    linear/cubic refuse scales on N and C."""
    x = rng.standard_normal((2, 3, 16, 13)).astype(np.float32)
    check_node("Resize", [x, None, None, np.array([2, 3, 8, 20], np.int64)],
               {"mode": "nearest", "keep_aspect_ratio_policy": policy}, opset=19, static=(3,))


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_negative_axes_with_policy(policy):
    """Deviation: onnxruntime leaves the input unchanged here (it never normalizes the axes
    it compares); we follow the spec: axes [-1, -2] mean [3, 2]."""
    x = rng.standard_normal((2, 3, 16, 13)).astype(np.float32)
    sizes = np.array([20, 8], np.int64)
    results = []
    for axes in ([-1, -2], [3, 2]):
        model = make_node_model("Resize", [x, None, None, sizes], {"mode": "linear", "keep_aspect_ratio_policy": policy,
                                                                  "axes": axes}, opset=18, static=(3,))
        _type_output(model, x.dtype, 4)
        results.append(run_ours(model, {"in0": x})[0])
    np.testing.assert_array_equal(results[0], results[1])
    ref = check_node("Resize", [x, None, None, sizes], {"mode": "linear", "keep_aspect_ratio_policy": policy,
                                                        "axes": [3, 2]}, opset=18, static=(3,))[0]
    assert results[0].shape == ref.shape


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("axes,scales", [([2, 3], [1.5, 0.7]), ([3, 2], [0.7, 1.5]), ([-1], [2.5]), ([2], [0.5])])
def test_axes_scales(mode, axes, scales):
    check_node("Resize", [X4, None, np.array(scales, np.float32)], {"mode": mode, "axes": axes}, opset=18, static=(2,))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("axes,roi,sizes", [([2, 3], [0.2, 0.1, 0.8, 0.9], [11, 4]),
                                            ([3, 2], [-0.2, 0.1, 1.3, 0.9], [11, 4])])
@pytest.mark.parametrize("static", [(1, 3), (3,)])
def test_axes_roi(mode, axes, roi, sizes, static):
    check_node("Resize", [X4, np.array(roi, np.float32), None, np.array(sizes, np.int64)],
               {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "axes": axes,
                "extrapolation_value": -1.0}, opset=19, static=static)


# ---- tf_crop_and_resize ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi", [[0, 0, 0.25, 0.1, 1, 1, 0.75, 0.6], [0, 0, -0.3, 0.4, 1, 1, 1.2, 0.5],
                                 [0, 0, 0.6, 0.9, 1, 1, 0.2, 0.1]])
@pytest.mark.parametrize("sizes", [(5, 6), (1, 12), (9, 1)])
@pytest.mark.parametrize("extrapolation_value", [0.0, 10.0])
def test_tf_crop_and_resize(mode, roi, sizes, extrapolation_value):
    """Crops inside and beyond the input (extrapolated), reversed boxes, single-pixel outputs."""
    check_node("Resize", [X4, np.array(roi, np.float32), None, np.array([2, 3, *sizes], np.int64)],
               {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                "extrapolation_value": extrapolation_value}, opset=13, static=(1, 3))


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_output_like_input_is_a_copy(mode):
    """onnxruntime copies X when the output shape equals the input's, whatever roi says."""
    check_node("Resize", [X4, ROI, None, np.array(X4.shape, np.int64)],
               {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize"}, opset=13, static=(1, 3))


# ---- float32 borderline cases -------------------------------------------------------------
@pytest.mark.parametrize("n_in", [3, 5, 7, 9])
@pytest.mark.parametrize("nearest_mode", NEAREST)
@pytest.mark.parametrize("ctm", ["asymmetric", "half_pixel"])
def test_nearest_rounding_sweep(n_in, nearest_mode, ctm):
    """Every output length 2..29: x / scale lands within float32 noise of a half
    (8 / (16 / 7) = 3.4999998); onnxruntime counts coordinates within 1e-6 of a
    half as the half, and so do we."""
    x = np.arange(2 * n_in, dtype=np.float32).reshape(1, 2, n_in, 1)
    for n_out in range(2, 30):
        check_node("Resize", [x, None, None, np.array([1, 2, n_out, 1], np.int64)],
                   {"mode": "nearest", "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode},
                   opset=13, static=(3,))


@pytest.mark.parametrize("nearest_mode", ["round_prefer_ceil", "round_prefer_floor"])
def test_half_pixel_symmetric_single_output(nearest_mode):
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    check_node("Resize", [x, None, np.array([1, 1, 0.75, 2], np.float32)],
               {"mode": "nearest", "coordinate_transformation_mode": "half_pixel_symmetric",
                "nearest_mode": nearest_mode}, opset=19, static=(2,))


@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_antialias_crop_on_unchanged_axis(exclude_outside):
    """Under antialias an axis whose length does not change is copied, yet tf_crop_and_resize
    still extrapolates along it (onnxruntime)."""
    x = rng.standard_normal((1, 2, 8, 2)).astype(np.float32)
    roi = np.array([0, 0, 0.2, 0.3, 1, 1, 0.8, 1.2], np.float32)
    check_node("Resize", [x, roi, np.array([1, 1, 2, 1.25], np.float32)],
               {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "antialias": 1,
                "exclude_outside": exclude_outside}, opset=18, static=(1, 2))


def test_antialias_crop_nhwc_matches_nchw():
    """Deviation: onnxruntime's NHWC antialias path (4-D, outer and inner scales 1) puts
    tf_crop_and_resize's extrapolated values at scattered positions; we match its NCHW path
    on the transposed problem instead."""
    x = rng.standard_normal((5, 5, 2, 5)).astype(np.float32)
    roi = np.array([0.015, -0.186, 0.636, 0.627], np.float32)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "antialias": 1,
             "extrapolation_value": -2.0}
    model = make_node_model("Resize", [x, roi, np.array([2.5, 1.5], np.float32)], dict(attrs, axes=[2, 1]),
                            opset=18, static=(1, 2))
    _type_output(model, np.float32, 4)
    ours = run_ours(model, {"in0": x})[0]
    nchw = check_node("Resize", [np.ascontiguousarray(x.transpose(0, 3, 1, 2)), roi, np.array([2.5, 1.5], np.float32)],
                      dict(attrs, axes=[3, 2]), opset=18, static=(1, 2))[0]
    np.testing.assert_allclose(ours, nchw.transpose(0, 2, 3, 1), rtol=0, atol=1e-5)


# ---- ranks -------------------------------------------------------------------------------
RANKS = [((9,), (2.5,)), ((9,), (0.4,)), ((5, 7), (2.0, 0.6)), ((4, 5, 6), (1.5, 0.7, 2.0)),
         ((1, 2, 4, 5, 6), (1, 1, 1.5, 0.7, 2.0)), ((2, 6, 7, 3), (1, 1.5, 0.5, 1)),
         ((3, 4, 5, 6), (0.6, 1.5, 0.5, 2.0)), ((2, 3, 4, 5, 6, 2), (1, 2, 0.5, 1.5, 0.7, 1))]


def ort_has_kernel(mode, antialias, shape, scales):
    """onnxruntime's Resize supports linear on 2-D, 3-D and 4-D/5-D with outer scales 1
    (4-D also NHWC), cubic on 2-D and 4-D NCHW (NHWC with antialias); nearest always."""
    rank = len(shape)
    if mode == "nearest":
        return True
    outer = rank >= 4 and scales[0] == 1 and scales[1] == 1
    nhwc = rank == 4 and scales[0] == 1 and scales[3] == 1
    if mode == "linear":
        return rank in (2, 3) or (rank in (4, 5) and outer) or nhwc
    return rank == 2 or (rank == 4 and (outer or (nhwc and antialias)))


def _type_output(model, dtype, rank):
    out = model.graph.output
    typed = [helper.make_tensor_value_info(o.name, np_to_elem(dtype), [f"d{i}" for i in range(rank)]) for o in out]
    del out[:]
    out.extend(typed)


RANK_CASES = [(shape, scales, mode, aa, ctm) for (shape, scales), (mode, aa), ctm in itertools.product(
    RANKS, [("nearest", 0), ("linear", 0), ("linear", 1), ("cubic", 0), ("cubic", 1)],
    ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"])
    # the reference evaluator takes scale * in as the output length (see module doc)
    if ort_has_kernel(mode, aa, shape, scales) or ctm in ("half_pixel", "asymmetric")]


@pytest.mark.parametrize("shape,scales,mode,antialias,ctm", RANK_CASES)
def test_ranks(shape, scales, mode, antialias, ctm):
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = [x, None, np.array(scales, np.float32)]
    attrs = {"mode": mode, "antialias": antialias, "coordinate_transformation_mode": ctm}
    if ort_has_kernel(mode, antialias, shape, scales):
        check_node("Resize", inputs, attrs, opset=18, static=(2,))
        return
    model = make_node_model("Resize", inputs, attrs, opset=18, static=(2,))
    _type_output(model, x.dtype, x.ndim)
    feeds = feeds_of(inputs, (2,))
    ours = run_ours(model, feeds)[0]
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


# ---- dtypes ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float16])
@pytest.mark.parametrize("hw", [(2.0, 2.0), (1.5, 0.7), (0.5, 0.34)])
@pytest.mark.parametrize("ctm", ["asymmetric", "half_pixel", "tf_crop_and_resize"])
def test_nearest_dtypes(dtype, hw, ctm):
    x = (rng.standard_normal(X4.shape) * 50).astype(dtype)
    check_node("Resize", [x, ROI, np.array([1, 1, *hw], np.float32)],
               {"mode": "nearest", "coordinate_transformation_mode": ctm, "extrapolation_value": 3.0},
               opset=13, static=(1, 2))


@pytest.mark.parametrize("mode,antialias", [("linear", 0), ("linear", 1), ("cubic", 0), ("cubic", 1)])
@pytest.mark.parametrize("hw", [(2.0, 2.0), (1.5, 0.7), (0.5, 0.3)])
def test_float16(mode, antialias, hw):
    """float16: summed in float32 and rounded once, as onnxruntime does. rtol 1e-3 (one
    float16 step): a float32 sum one ulp off can round to the neighbouring float16."""
    x = rng.standard_normal(X4.shape).astype(np.float16)
    check_node("Resize", [x, None, np.array([1, 1, *hw], np.float32)], {"mode": mode, "antialias": antialias},
               opset=18, static=(2,), rtol=1e-3)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32])
@pytest.mark.parametrize("hw", [(2.0, 2.0), (1.5, 0.7), (0.5, 0.6)])
@pytest.mark.parametrize("ctm", ["half_pixel", "align_corners", "asymmetric"])
def test_linear_integers(dtype, hw, ctm):
    """Integer linear (NCHW): the float sum truncated toward zero as onnxruntime does. Our sum
    is separable (along H, then W), onnxruntime's is the 4-term bilinear sum, so a value
    within float rounding of an integer may truncate to its neighbour: allow 1 there."""
    lo = 0 if dtype == np.uint8 else -100
    x = rng.integers(lo, 100, X4.shape).astype(dtype)
    inputs = [x, None, np.array([1, 1, *hw], np.float32)]
    model = make_node_model("Resize", inputs, {"mode": "linear", "coordinate_transformation_mode": ctm},
                            opset=13, static=(2,))
    feeds = feeds_of(inputs, (2,))
    ref = run_ort(model, feeds)[0]
    _type_output(model, dtype, 4)
    ours = run_ours(model, feeds)[0]
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    diff = np.abs(ours.astype(np.int64) - ref)
    assert diff.max() <= 1 and np.mean(diff) < 0.05


# ---- the PP-OCR fast path ---------------------------------------------------------------
def _bind(x, inputs, attrs, version, scratch=None):
    names = ["x", "roi", "scales", "sizes"][:len(inputs) + 1]
    node = Node("Resize", [n if v is not None or n == "x" else "" for n, v in zip(names, [x] + inputs)], ["y"],
                attrs, name="r")
    values = [None] + [None if v is None else np.asarray(v) for v in inputs]
    ctx = OpContext(node, version, [x.shape] + [None if v is None else np.shape(v) for v in inputs],
                    [x.dtype] + [None if v is None else np.asarray(v).dtype for v in inputs], values,
                    scratch=scratch)
    (shape, dtype), = get_rule("Resize")(ctx)
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    return Resize(ctx, **attrs), np.empty(shape, dtype)


@pytest.mark.parametrize("mode,antialias,dtype", [("nearest", 0, np.float32), ("linear", 0, np.float32),
                                                  ("cubic", 0, np.float32), ("linear", 1, np.float32),
                                                  ("linear", 0, np.uint8)])
def test_workspace_garbage_is_ignored(mode, antialias, dtype, monkeypatch):
    """Workspace content is undefined at each call (shared with other nodes): fill it with junk."""
    monkeypatch.setattr(compiled, "ENABLED", False)  # the numpy paths (compiled nearest needs none)
    refs = []
    x = (rng.random((2, 3, 7, 9)) * 100).astype(dtype)
    scales = np.array([1, 1, 1.6, 0.7], np.float32)
    k, out = _bind(x, [None, scales], {"mode": mode, "antialias": antialias}, 18, scratch=refs.append)
    for r in refs:
        r.array = np.full(r.shape, 77 if r.dtype.kind in "iub" else np.nan, r.dtype)
    assert refs, "the general path uses workspace"
    k(x, None, scales, out=out)
    ref = check_node("Resize", [x, None, scales], {"mode": mode, "antialias": antialias}, opset=18, static=(2,))[0]
    assert np.abs(out.astype(np.float64) - ref).max() <= (1 if dtype == np.uint8 else 1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("attrs,scales,expect", [
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, [1, 1, 2, 2], "x2"),
    ({"mode": "nearest"}, [1, 1, 2, 3], "repeat"),
    ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 0.5, 0.5], "slice"),
    ({"mode": "nearest"}, [1, 1, 1.5, 0.7], None)])
def test_nearest_fast_path(attrs, scales, expect, monkeypatch):
    """Integer repeats and strided picks are one broadcast copy; the rest gathers (numpy paths)."""
    monkeypatch.setattr(compiled, "ENABLED", False)
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)
    k, out = _bind(x, [None, np.array(scales, np.float32)], attrs, 13)
    assert (k.fast is not None) == (expect is not None)
    k(x, None, np.array(scales, np.float32), out=out)
    if expect == "x2":
        np.testing.assert_array_equal(out, x.repeat(2, axis=2).repeat(2, axis=3))
    check_node("Resize", [x, None, np.array(scales, np.float32)], attrs, opset=13, static=(2,))


def test_net_reuse_with_dynamic_scales():
    """Two forwards with different runtime scales give fresh shapes and values."""
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.engine.net import Net
    from pooled_predictor.engine.program import Program

    scales = np.array([1, 1, 2, 2], np.float32)
    model = make_node_model("Resize", [X4, None, scales], {"mode": "linear"}, opset=13)
    ref = run_ort(model, {"in0": X4, "in2": scales})
    _type_output(model, np.float32, 4)
    net = Net(Program(load_onnx(model)))
    for s in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
        feeds = {"in0": X4, "in2": np.array(s, np.float32)}
        net.forward(feeds)
        ref = run_ort(model, feeds)[0]
        np.testing.assert_allclose(net.blob_by_name("out0"), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("inputs,match", [
    ([X4, None, np.array([1, 1, 2, 2], np.float32), np.array([2, 3, 4, 4], np.int64)], "exactly one"),
    ([X4, None, np.array([2, 2], np.float32)], "expected 4"),
    ([X4, None, np.array([1, 1, -2, 2], np.float32)], "positive")])
def test_errors(inputs, match):
    model = make_node_model("Resize", inputs, {"mode": "nearest"}, opset=13, static=static_all(inputs))
    _type_output(model, np.float32, 4)
    with pytest.raises(Exception, match=match):
        run_ours(model, feeds_of(inputs, static_all(inputs)))


def test_check_rejects_antialias_with_nearest():
    model = make_node_model("Resize", [X4, None, np.array([1, 1, 2, 2], np.float32)],
                            {"mode": "nearest", "antialias": 1}, opset=18, static=(2,))
    _type_output(model, np.float32, 4)
    with pytest.raises(Exception, match="antialias"):
        run_ours(model, {"in0": X4})


def test_all_grids_cover_both_directions():
    assert any(min(s) < 1 for s in SCALES) and any(max(s) > 1 for s in SCALES)
    assert set(itertools.chain(*[[m] for m, _ in MODES])) == {"nearest", "linear", "cubic"}


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.5]])
def test_upsample(opset, mode, scales):
    """Upsample-7 (scales attribute) and -9 (scales input): Resize-10 under its old name."""
    x = np.random.default_rng(22).standard_normal((1, 2, 3, 4)).astype(np.float32)
    if opset == 7:
        check_node("Upsample", [x], {"mode": mode, "scales": scales}, opset=7)
    else:
        check_node("Upsample", [x, np.array(scales, np.float32)], {"mode": mode}, opset=9, static=(1,))
        check_node("Upsample", [x, np.array(scales, np.float32)], {"mode": mode}, opset=9)  # fed at forward
