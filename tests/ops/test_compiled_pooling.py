"""Compiled pooling, Resize, ConvTranspose tile and Sigmoid kernels (ops/cpu/compiled/pooling.py,
resize.py, sigmoid.py, col2im.py): against onnxruntime over grids of their attributes (odd sizes,
batch 2, continuous values), against the numpy reference paths (compiled.ENABLED=False), and
the path each node takes."""

import numpy as np
import pytest
from scipy import special

from pooled_predictor.ops.cpu import compiled
from tests.onnx_helpers import check_node, feeds_of, make_node_model, run_ours

rng = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def ours_both(op, inputs, attrs, opset, static=(), monkeypatch=None):
    """(compiled, numpy reference) outputs of a one-node model."""
    model = make_node_model(op, inputs, attrs, opset=opset, static=static)
    feeds = feeds_of(inputs, static)
    fast = run_ours(model, feeds)[0]
    monkeypatch.setattr(compiled, "ENABLED", False)
    ref = run_ours(model, feeds)[0]
    monkeypatch.setattr(compiled, "ENABLED", True)
    return fast, ref


# ---- MaxPool / AveragePool -----------------------------------------------------------
# (kernel, strides, dilations, pads, ceil_mode): odd sizes, asymmetric pads; kernel 5 and 4
# take the ping-pong rows and the generic column loop
POOL_GRID = [((2, 2), (1, 1), (1, 1), (0, 0, 1, 1), 0), ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 0),
             ((3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 1), ((3, 2), (1, 2), (2, 1), (2, 0, 0, 1), 1),
             ((5, 4), (3, 2), (1, 2), (2, 1, 1, 3), 0), ((1, 3), (1, 3), (1, 1), (0, 1, 0, 2), 1),
             ((5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 0)]
POOL_SHAPES = [(2, 3, 13, 17), (1, 2, 8, 5)]


@pytest.mark.parametrize("shape", POOL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel,strides,dilations,pads,ceil", POOL_GRID,
                         ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_pool_against_onnxruntime_and_numpy(kernel, strides, dilations, pads, ceil, shape, monkeypatch):
    from pooled_predictor.ops.cpu import pooling

    monkeypatch.setattr(pooling, "POOL_COMPILED_MAX_KERNEL", 5)   # the generic loops too
    monkeypatch.setattr(pooling, "AVERAGEPOOL_COMPILED_MAX_STRIDE", 3)
    monkeypatch.setattr(pooling, "POOL_COMPILED_MIN_WIDTH", 1)
    x = f32(*shape)
    base = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads), "ceil_mode": ceil}
    cases = [("MaxPool", {**base, "dilations": list(dilations)}, 12)]
    for include in (0, 1):
        if dilations == (1, 1):  # onnxruntime's AveragePool-19 dilations: kept to 1 as most exporters
            cases.append(("AveragePool", {**base, "count_include_pad": include}, 11))
    for op, attrs, opset in cases:
        check_node(op, [x], attrs, opset=opset, rtol=1e-6)
        fast, ref = ours_both(op, [x], attrs, opset, monkeypatch=monkeypatch)
        if op == "MaxPool":
            np.testing.assert_array_equal(fast, ref)   # a max is exact
        else:
            np.testing.assert_allclose(fast, ref, rtol=3e-7, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", POOL_SHAPES + [(2, 20, 13, 17), (1, 33, 7, 9)],  # >= 16 channels: channels last
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel,strides,dilations,pads,ceil", POOL_GRID,
                         ids=lambda v: "-".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_maxpool_8bit_against_onnxruntime_and_numpy(kernel, strides, dilations, pads, ceil, shape, dtype,
                                                    monkeypatch):
    """compiled/pooling.py's maxpool2d_q and, from 16 channels of narrow rows, maxpool2d_q_hwc between byte-tile
    transposes: onnxruntime's and the numpy kernel's bits (the full range of the type, its lowest value included,
    so that a padded tap could only win where it is wrongly counted)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads), "ceil_mode": ceil,
             "dilations": list(dilations)}
    check_node("MaxPool", [x], attrs, opset=12)
    fast, ref = ours_both("MaxPool", [x], attrs, 12, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(fast, ref)


def test_maxpool_nan_inf_and_empty_windows(monkeypatch):
    from pooled_predictor.ops.cpu import pooling

    monkeypatch.setattr(pooling, "POOL_COMPILED_MIN_WIDTH", 1)
    x = f32(1, 2, 6, 7)
    x[0, 0, 2, 3] = np.nan
    x[0, 1, :, :2] = -np.inf
    same = {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}
    fast, ref = ours_both("MaxPool", [x], same, 12, monkeypatch=monkeypatch)
    np.testing.assert_array_equal(fast, ref)
    assert np.isnan(fast).any() and np.isneginf(fast).any()
    # dilated windows that miss the input: float32's lowest value (rows: first case, columns: second)
    for shape, attrs in [((1, 2, 1, 6), {"kernel_shape": [3, 3], "strides": [3, 3], "dilations": [2, 1],
                                         "pads": [1, 2, 1, 2]}),
                         ((2, 2, 6, 1), {"kernel_shape": [3, 3], "strides": [3, 3], "dilations": [1, 2],
                                         "pads": [2, 1, 2, 1]})]:
        x = f32(*shape)
        check_node("MaxPool", [x], attrs, opset=12)
        fast, ref = ours_both("MaxPool", [x], attrs, 12, monkeypatch=monkeypatch)
        np.testing.assert_array_equal(fast, ref)
        assert (fast == np.finfo(np.float32).min).any()


def build(op, inputs, attrs, opset=13):
    """Our class kernel for a one-node model, built as a Net builds it (inputs 1.. static)."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops import registry
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.shapes import get_rule

    names = ["" if a is None else f"in{i}" for i, a in enumerate(inputs)]
    kdef = registry.lookup(op, "", opset, "cpu")
    ctx = OpContext(Node(op, names, ["out0"], dict(attrs), "", "n0"), kdef.since,
                    [None if a is None else a.shape for a in inputs], [None if a is None else a.dtype for a in inputs],
                    [None] + list(inputs[1:]), "cpu", None)
    shape, dtype = get_rule(op)(ctx)[0]
    ctx.out_shapes, ctx.out_dtypes = [shape], [dtype]
    return kdef.impl(ctx, **attrs)


def test_pool_paths():
    from pooled_predictor.ops.cpu.pooling import _CompiledPool2d

    attrs = {"kernel_shape": [3, 3], "strides": [2, 2]}
    assert isinstance(build("MaxPool", [f32(1, 2, 9, 40)], attrs).values, _CompiledPool2d)
    assert build("AveragePool", [f32(1, 2, 9, 40)], {"kernel_shape": [3, 3]}).compiled is not None
    # beyond the measured thresholds: numpy
    assert build("AveragePool", [f32(1, 2, 9, 40)], attrs).compiled is None
    assert not isinstance(build("MaxPool", [f32(1, 2, 9, 40)], {"kernel_shape": [5, 5]}).values, _CompiledPool2d)
    assert not isinstance(build("MaxPool", [f32(1, 2, 9, 20)], attrs).values, _CompiledPool2d)  # narrow rows
    # 1-D, 3-D and float64 keep the numpy path
    assert not isinstance(build("MaxPool", [f32(1, 2, 40)], {"kernel_shape": [3]}).values, _CompiledPool2d)
    assert not isinstance(build("MaxPool", [f32(1, 2, 5, 9, 40)], {"kernel_shape": [3, 3, 3]}).values,
                          _CompiledPool2d)
    assert not isinstance(build("MaxPool", [f32(1, 2, 9, 40).astype(np.float64)], attrs).values, _CompiledPool2d)


# ---- Sigmoid -------------------------------------------------------------------------
def test_sigmoid_within_two_ulp_and_specials():
    from pooled_predictor.ops.cpu.compiled.sigmoid import sigmoid

    x = np.concatenate([f32(200003, scale=8.0), np.linspace(-104, 89, 100003, dtype=np.float32),
                        np.array([0.0, -0.0, np.inf, -np.inf, 1e-30, -1e-30, -87.5, -100.0, 30.0], np.float32)])
    y = np.empty_like(x)
    sigmoid(x, y)
    exact = special.expit(x.astype(np.float64)).astype(np.float32)
    ulp = np.abs(y.view(np.int32).astype(np.int64) - exact.view(np.int32))
    assert ulp.max() <= 2
    z = np.array([np.nan], np.float32)
    sigmoid(z, z)  # in place
    assert np.isnan(z[0])
    in_place = x.copy()
    sigmoid(in_place, in_place)
    np.testing.assert_array_equal(in_place, y)


def test_sigmoid_node(monkeypatch):
    from pooled_predictor.ops.cpu import elementwise

    monkeypatch.setattr(elementwise, "SIGMOID_COMPILED_MIN_SIZE", 0)
    x = f32(2, 3, 17, 11, scale=6.0)
    check_node("Sigmoid", [x], {}, opset=13, rtol=1e-6)
    fast, ref = ours_both("Sigmoid", [x], {}, 13, monkeypatch=monkeypatch)
    np.testing.assert_allclose(fast, ref, rtol=3e-7, atol=0)
    check_node("Sigmoid", [x.astype(np.float64)], {}, opset=13)  # float64: scipy


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 7, 9)])
def test_small_sigmoid_is_bound_to_the_compiled_pass(shape):
    """A small float32 Sigmoid (silero-vad's one-element output) runs compiled/sigmoid.py bound once, not the
    float64 reference (about 10 us a call against 0.4), within 2 ulp of the correctly rounded value."""
    from pooled_predictor.ops.cpu import elementwise

    x = f32(*shape, scale=6.0)
    out = np.empty_like(x)
    call = elementwise.sigmoid.prepare_run(x, out=out)
    assert call is not None
    call()
    exact = (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    np.testing.assert_array_max_ulp(out, exact, maxulp=2)
    with compiled.reference_kernels():  # the reference tier binds nothing: the call form's expit
        assert elementwise.sigmoid.prepare_run(x, out=out) is None


# ---- ConvTranspose: the tile path (kernel == stride, no padding) ---------------------
# (X shape, W shape, kernel/strides, group): odd sizes, batch 2, kw 2 (written out) and others
TILE_CASES = [((2, 6, 7, 9), (6, 4, 2, 2), (2, 2), 1), ((1, 4, 5, 11), (4, 3, 3, 3), (3, 3), 1),
              ((2, 6, 9, 5), (6, 2, 2, 3), (2, 3), 2), ((1, 3, 6, 7), (3, 1, 1, 2), (1, 2), 1)]


@pytest.mark.parametrize("tile_bytes", [200, 128 << 10])
@pytest.mark.parametrize("xs,ws,k,group", TILE_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple)
                         else str(v))
def test_conv_transpose_tile(xs, ws, k, group, tile_bytes, monkeypatch):
    from pooled_predictor.ops.cpu import conv

    monkeypatch.setattr(conv, "CONV_TRANSPOSE_TILE_BYTES", tile_bytes)  # 200: one input row per band
    monkeypatch.setattr(conv, "CONV_TRANSPOSE_TILE_COMPILED_MIN_OUTPUT", 0)  # small shapes run compiled too
    monkeypatch.setattr(conv, "CONV_TRANSPOSE_TILE_COMPILED_MIN_ROWS", 0)
    m = ws[1] * group
    x, w, b = f32(*xs), f32(*ws), f32(m)
    attrs = {"kernel_shape": list(k), "strides": list(k), "group": group}
    kern = build("ConvTranspose", [x, w, b], attrs)
    assert kern.path == "tile" and kern.tile_compiled
    for inputs, static in (([x, w, b], (1, 2)), ([x, w], (1,)), ([x, w, b], ())):
        check_node("ConvTranspose", inputs, attrs, opset=13, static=static)
        fast, ref = ours_both("ConvTranspose", inputs, attrs, 13, static=static, monkeypatch=monkeypatch)
        np.testing.assert_array_equal(fast, ref)  # the same GEMM and the same additions


def test_conv_transpose_other_paths_keep_numpy():
    x = f32(1, 4, 5, 6)
    small = build("ConvTranspose", [x, f32(4, 2, 2, 2)], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert small.path == "tile" and not small.tile_compiled   # below the measured thresholds
    one = build("ConvTranspose", [f32(1, 16, 60, 80), f32(16, 1, 2, 2)], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert one.path == "tile" and not one.tile_compiled      # 4 GEMM rows: a tie with numpy, but
    assert one.tile_fused                                     # fused: 0.47 ms vs 0.96 (det 16->1 at 240x320)
    det = build("ConvTranspose", [f32(1, 16, 60, 80), f32(16, 16, 2, 2)], {"kernel_shape": [2, 2], "strides": [2, 2]})
    assert det.tile_fused and not det.tile_compiled  # kernel width 2: GEMM and scatter fused
    grouped = build("ConvTranspose", [f32(1, 16, 60, 80), f32(16, 8, 2, 2)],
                    {"kernel_shape": [2, 2], "strides": [2, 2], "group": 2})
    assert grouped.tile_compiled and not grouped.tile_fused
    padded = build("ConvTranspose", [x, f32(4, 2, 3, 3)], {"kernel_shape": [3, 3], "strides": [2, 2],
                                                           "pads": [1, 1, 1, 1]})
    assert padded.path == "col2im" and not padded.tile_compiled
    one_d = build("ConvTranspose", [f32(1, 4, 7), f32(4, 2, 2)], {"kernel_shape": [2], "strides": [2]})
    assert one_d.path == "tile" and not one_d.tile_compiled


# ---- Resize: nearest and bilinear of the last two axes --------------------------------
NEAREST = [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"), ("align_corners", "round_prefer_ceil"),
           ("pytorch_half_pixel", "ceil"), ("tf_half_pixel_for_nn", "round_prefer_floor")]
LINEAR = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]
# scales (H, W): x2 (repeat 2), x3 (repeat 3), up/down mixed (rows first or columns first), down
SCALES = [(2.0, 2.0), (3.0, 3.0), (1.7, 0.6), (0.55, 1.5), (0.5, 0.75), (1.0, 2.0)]


@pytest.mark.parametrize("scales", SCALES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode,ctm,nearest_mode", [("nearest", c, n) for c, n in NEAREST] +
                         [("linear", c, "round_prefer_floor") for c in LINEAR])
def test_resize_against_onnxruntime_and_numpy(mode, ctm, nearest_mode, scales, monkeypatch):
    from pooled_predictor.ops.cpu import resize

    monkeypatch.setattr(resize, "RESIZE_NEAREST_COMPILED_MIN_OUTPUT", 0)  # small outputs too
    x = f32(2, 3, 9, 13)
    s = np.array([1, 1, *scales], np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode}
    kern = build("Resize", [x, None, s], attrs)
    assert (kern.compiled is not None) == (mode == "nearest" or scales[0] != 1.0)
    check_node("Resize", [x, None, s], attrs, opset=13, static=(2,), rtol=1e-6)
    fast, ref = ours_both("Resize", [x, None, s], attrs, 13, static=(2,), monkeypatch=monkeypatch)
    np.testing.assert_array_equal(fast, ref)  # the same tables and float32 operations


def test_resize_sizes_rank3_and_numpy_cases():
    x = f32(4, 10, 7)
    sizes = np.array([4, 23, 15], np.int64)
    attrs = {"mode": "linear"}
    assert build("Resize", [x, None, None, sizes], attrs).compiled is not None
    check_node("Resize", [x, None, None, sizes], attrs, opset=13, static=(3,), rtol=1e-6)
    # cubic, antialias, a resized channel axis, float64: the numpy kernel
    x4 = f32(1, 2, 6, 6)
    for attrs, s, opset in [({"mode": "cubic"}, [1, 1, 2, 2], 13), ({"mode": "linear", "antialias": 1},
                            [1, 1, 0.5, 0.5], 18), ({"mode": "nearest"}, [1, 2, 2, 2], 13)]:
        assert build("Resize", [x4, None, np.array(s, np.float32)], attrs, opset).compiled is None
    x64 = x4.astype(np.float64)
    assert build("Resize", [x64, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "nearest"}).compiled is None
    # a small nearest resize: the numpy views (below the measured threshold)
    assert build("Resize", [x4, None, np.array([1, 1, 2, 2], np.float32)], {"mode": "nearest"}).compiled is None
