"""Every CUDA kernel family against the CPU kernels, one-node models on device="cuda".

Each case builds a one-node ONNX model (tests/onnx_helpers.make_node_model), runs it through a Net on
the CPU and through a Net on the GPU, checks the node was placed on the GPU (not fallen back to the
CPU), and compares: max |gpu - cpu| <= rtol * max(|cpu|, 1). float32 throughout; TF32 off.
"""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.shapes.fused import DOMAIN
from tests.onnx_helpers import assert_close, feeds_of, i64, make_node_model

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(op, inputs, attrs=None, *, opset=17, static=(), domain="", outputs=1, rtol=1e-4):
    model = make_node_model(op, inputs, attrs, opset=opset, static=static, domain=domain, outputs=outputs)
    feeds = feeds_of(inputs, static)
    cpu = Net(Program(load_onnx(model)), optimization=Optimization.MEMORY)
    ref = {k: np.array(v) for k, v in cpu.forward(feeds).items()}
    gpu = Net(Program(load_onnx(model), "cuda"), optimization=Optimization.MEMORY)
    got = gpu.forward(feeds)
    assert gpu.layout.device_nodes, f"{op} ran on the CPU: its CUDA kernel did not take the node"
    for name, r in ref.items():
        assert isinstance(got[name], np.ndarray)
        assert_close(np.asarray(got[name]), r, rtol, f"{op} {name}")
    got2 = gpu.forward(feeds)  # a second run over the same arena gives the same bits
    for name in ref:
        np.testing.assert_array_equal(got2[name], got[name])


@pytest.mark.parametrize("op, attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Erf", {}), ("Abs", {}), ("Neg", {}), ("Floor", {}),
    ("Softplus", {}), ("Softsign", {}), ("HardSwish", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 0.7}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Selu", {}), ("Round", {}), ("Sign", {}),
])
def test_unary(op, attrs):
    check(op, [f32(2, 3, 17, 5)], attrs)


def test_unary_math_domain():
    check("Sqrt", [np.abs(f32(4, 33)) + 0.1])
    check("Log", [np.abs(f32(4, 33)) + 0.1])
    check("Reciprocal", [np.abs(f32(4, 33)) + 0.5])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate):
    check("Gelu", [f32(3, 50)], {"approximate": approximate}, opset=20)


def test_clip():
    check("Clip", [f32(3, 50), np.float32(-0.5), np.float32(0.7)], static=(1, 2))
    check("Clip", [f32(3, 50)], {"min": -0.2, "max": 0.3}, opset=6)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("a, b", [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (3, 1, 1)), ((4, 5), (2, 3, 4, 5)),
                                  ((2, 1, 4, 1), (1, 3, 1, 5)), ((7,), ())])
def test_binary_broadcasting(op, a, b):
    y = f32(*b) if b else np.float32(RNG.standard_normal())
    if op == "Div":
        y = np.where(np.abs(y) < 0.1, 0.5, y).astype(np.float32)
    check(op, [f32(*a), y])


def test_pow_and_prelu():
    check("Pow", [np.abs(f32(3, 8)) + 0.1, f32(3, 8)])
    check("PRelu", [f32(2, 4, 5, 5), f32(4, 1, 1)], static=(1,))


CONVS = [  # x shape, w shape, attrs
    ((2, 3, 9, 9), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 10, 11), (6, 4, 3, 3), {"strides": [2, 2]}),
    ((1, 4, 12, 12), (4, 4, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((2, 6, 8, 8), (4, 3, 3, 3), {"group": 2, "pads": [1, 0, 1, 0]}),
    ((2, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 4, 9, 9), (8, 1, 3, 3), {"group": 4, "strides": [2, 2]}),    # depthwise, multiplier 2
    ((3, 16, 7, 7), (32, 16, 1, 1), {}),                               # 1x1: one batched GEMM
    ((2, 4, 20), (5, 4, 3), {"pads": [1, 1]}),                          # 1-D
    ((1, 3, 8, 8), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    # depthwise at each of the kernel's filter paths: 3x3 (dilated, asymmetric pads), 5x5 (strided), 7x7 (generic)
    ((2, 6, 11, 10), (6, 1, 3, 3), {"group": 6, "dilations": [2, 2], "pads": [2, 1, 0, 2]}),
    ((1, 8, 13, 13), (8, 1, 5, 5), {"group": 8, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 4, 12, 9), (8, 1, 5, 5), {"group": 4, "pads": [2, 2, 2, 2]}),  # 5x5, multiplier 2
    ((1, 5, 14, 14), (5, 1, 7, 7), {"group": 5, "pads": [3, 3, 3, 3]}),
]


@pytest.mark.parametrize("x, w, attrs", CONVS)
def test_conv(x, w, attrs):
    check("Conv", [f32(*x), f32(*w), f32(w[0])], attrs, static=(1, 2))


@pytest.mark.parametrize("gemm", ["batched", "wide", "auto"])
@pytest.mark.parametrize("x, w, attrs", [c for c in CONVS if c[0][0] > 1 and c[2].get("group", 1) == 1])
def test_conv_gemm_paths_over_images(monkeypatch, x, w, attrs, gemm):
    """Group-1 convolutions of several images on each GEMM path: a strided batched GEMM over the images (the
    one a chunk of one image takes), one wide GEMM per chunk, and the faster of them timed ("auto")."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    monkeypatch.setattr(cuda_conv, "CONV_GEMM", gemm)
    check("Conv", [f32(*x), f32(*w), f32(w[0])], attrs, static=(1, 2))


@pytest.mark.parametrize("gemm", ["batched", "wide"])
def test_conv_grids_past_their_limits(monkeypatch, gemm):
    """im2col, unfold and the epilogue loop past their 3-D grid's y and z dimensions (runtime.launch_planes caps
    them at 65535 blocks): 8192 x 3 x 3 = 73,728 column rows, and 70,000 output channels over 3 images."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    monkeypatch.setattr(cuda_conv, "CONV_GEMM", gemm)
    check("Conv", [f32(3, 8192, 3, 3), f32(4, 8192, 3, 3), f32(4)], {"pads": [1, 1, 1, 1]}, static=(1, 2))
    check("FusedConv", [f32(3, 2, 2, 2), f32(70000, 2, 1, 1), f32(70000), f32(3, 70000, 2, 2)],
          {"activation": "Relu"}, static=(1, 2), domain=DOMAIN)


@pytest.mark.parametrize("gemm", ["batched", "wide", "auto"])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_im2col_in_chunks_of_images(monkeypatch, groups, gemm):
    """A batch whose columns pass the scratch budget: chunks of 2 images (the last of 1), each one im2col and
    one wide GEMM or one batched GEMM (group 1), or per image (grouped)."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    monkeypatch.setattr(cuda_conv, "COL_SCRATCH_BYTES", 2 * 4 * (4 // groups) * 9 * 81 + 4)
    monkeypatch.setattr(cuda_conv, "CONV_GEMM", gemm)
    check("Conv", [f32(5, 4, 9, 9), f32(6, 4 // groups, 3, 3), f32(6)], {"pads": [1, 1, 1, 1], "group": groups},
          static=(1, 2))
    check("FusedConv", [f32(5, 4, 9, 9), f32(6, 4 // groups, 3, 3), f32(6), f32(5, 6, 5, 5)],
          {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": groups, "activation": "Relu"}, static=(1, 2),
          domain=DOMAIN)


@pytest.mark.parametrize("x, w, attrs", CONVS[:6])
@pytest.mark.parametrize("activation, params", [("Relu", []), ("LeakyRelu", [0.2]), ("Clip", [0.0, 6.0]),
                                                ("HardSwish", []), ("Identity", [])])
def test_fused_conv_with_sum(x, w, attrs, activation, params):
    """FusedConv(X, W, B, Z): bias, residual sum and activation in the epilogue."""
    xs, ws = f32(*x), f32(*w)
    conv = Net(Program(load_onnx(make_node_model("Conv", [xs, ws], attrs, static=(1,)))))
    z = f32(*next(iter(conv.forward(feeds_of([xs, ws], (1,))).values())).shape)
    fused = {**attrs, "activation": activation}
    if params:  # onnx.helper cannot type an empty list
        fused["activation_params"] = params
    check("FusedConv", [xs, ws, f32(w[0]), z], fused, static=(1, 2), domain=DOMAIN)


def test_fused_conv_wide_gemm_with_sum_in_chunks(monkeypatch):
    """The wide GEMM's epilogue (conv_unfold_f32): bias, the residual Z and the activation, read through the
    transposition, over chunks of 2, 2 and 1 images; a 1x1 convolution (the transposing im2col) and a 3x3."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    for xs, ws, attrs in (((5, 8, 6, 7), (12, 8, 1, 1), {}), ((5, 3, 7, 6), (10, 3, 3, 3), {"pads": [1, 0, 1, 2]})):
        rows, hw = ws[1] * ws[2] * ws[3], 42
        monkeypatch.setattr(cuda_conv, "COL_SCRATCH_BYTES", 2 * 4 * max(rows, ws[0]) * hw + 4)
        monkeypatch.setattr(cuda_conv, "CONV_GEMM", "wide")
        x, wt = f32(*xs), f32(*ws)
        conv = Net(Program(load_onnx(make_node_model("Conv", [x, wt], attrs, static=(1,)))))
        z = f32(*next(iter(conv.forward(feeds_of([x, wt], (1,))).values())).shape)
        check("FusedConv", [x, wt, f32(ws[0]), z], {**attrs, "activation": "LeakyRelu", "activation_params": [0.1]},
              static=(1, 2), domain=DOMAIN)


WINOGRAD_CONVS = [  # 3x3, stride 1: odd and even output sizes (partial edge tiles), every padding, 1 to 5 images
    ((1, 4, 8, 8), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((3, 5, 7, 9), (4, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 3, 6, 5), (7, 3, 3, 3), {}),                                     # no padding: 4 x 3 outputs
    ((2, 2, 5, 6), (3, 2, 3, 3), {"pads": [2, 0, 1, 2]}),                 # asymmetric, end pads past the start
    ((5, 16, 14, 14), (32, 16, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 1, 9), (2, 3, 3, 3), {"pads": [1, 1, 1, 1]}),                 # one input row
]


@pytest.mark.parametrize("x, w, attrs", WINOGRAD_CONVS)
def test_conv_winograd(monkeypatch, x, w, attrs):
    """Winograd F(2x2,3x3) (PP_CUDA_CONV_GEMM=winograd) against the CPU's convolution, alone and fused with bias,
    the sum input Z and an activation, in one chunk and in chunks of 2 images (COL_SCRATCH_BYTES)."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    monkeypatch.setattr(cuda_conv, "CONV_GEMM", "winograd")
    check("Conv", [f32(*x), f32(*w), f32(w[0])], attrs, static=(1, 2))
    conv = Net(Program(load_onnx(make_node_model("Conv", [f32(*x), f32(*w)], attrs, static=(1,)))))
    y_shape = next(iter(conv.forward(feeds_of([f32(*x), f32(*w)], (1,))).values())).shape
    tiles = ((y_shape[2] + 1) // 2) * ((y_shape[3] + 1) // 2)
    monkeypatch.setattr(cuda_conv, "COL_SCRATCH_BYTES", 2 * 4 * 16 * (x[1] + w[0]) * tiles + 4)
    check("FusedConv", [f32(*x), f32(*w), f32(w[0]), f32(*y_shape)],
          {**attrs, "activation": "LeakyRelu", "activation_params": [0.1]}, static=(1, 2), domain=DOMAIN)
    check("FusedConv", [f32(*x), f32(*w)], {**attrs, "activation": "Relu"}, static=(1,), domain=DOMAIN)


def test_winograd_filters_are_made_once_per_weight_array():
    """Every Net over one Program shares the transformed filters on the GPU (one U per weight array and device)."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    w = f32(8, 4, 3, 3)
    u = cuda_conv.winograd_filters_on_device(w)
    assert u is cuda_conv.winograd_filters_on_device(w) and u.shape == (16, 8, 4)
    g = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
    want = np.einsum("ik,mckl,jl->ijmc", g, w.astype(np.float64), g).reshape(16, 8, 4)
    np.testing.assert_allclose(u.get(), want, rtol=1e-6, atol=1e-6)


def test_auto_times_winograd_and_keeps_the_fastest(monkeypatch):
    """Under "auto" a 3x3 stride-1 convolution of several images times batched, wide and winograd on its first
    run and keeps the fastest; every path gives the CPU's answer."""
    from pooled_predictor.ops.cuda import conv as cuda_conv

    monkeypatch.setattr(cuda_conv, "CONV_GEMM", "auto")
    x, w = f32(4, 8, 10, 10), f32(16, 8, 3, 3)
    model = make_node_model("Conv", [x, w], {"pads": [1, 1, 1, 1]}, static=(1,))
    gpu = Net(Program(load_onnx(model), "cuda"), optimization=Optimization.MEMORY)
    got = np.asarray(next(iter(gpu.forward(feeds_of([x, w], (1,))).values())))
    cpu = Net(Program(load_onnx(model)), optimization=Optimization.MEMORY)
    assert_close(got, next(iter(cpu.forward(feeds_of([x, w], (1,))).values())), 1e-4, "auto Conv")
    cores = [getattr(f.func, "core", None) or getattr(getattr(f.func, "__self__", None), "core", None)
             for f in gpu.layout.plain]
    core = next(c for c in cores if c is not None)
    assert set(core.timings_ms) == {"batched", "wide", "winograd"}
    assert core.choice == min(core.timings_ms, key=core.timings_ms.get)


def test_fused_conv_depthwise():
    x, w, b = f32(1, 8, 10, 10), f32(16, 8, 1, 1), f32(16)
    wd, bd = f32(16, 1, 3, 3), f32(16)
    check("FusedConvDepthwise", [x, w, b, None, wd, bd],
          {"activation": "Relu", "dw_activation": "Clip", "dw_activation_params": [0.0, 6.0],
           "group": 16, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
          static=(1, 2, 4, 5), domain=DOMAIN)


@pytest.mark.parametrize("ta, tb, c", [(0, 0, (7,)), (1, 0, (5, 7)), (0, 1, (1, 7)), (1, 1, (5, 1)), (0, 0, None)])
def test_gemm(ta, tb, c):
    a = f32(9, 5) if ta else f32(5, 9)
    b = f32(7, 9) if tb else f32(9, 7)
    ins = [a, b] + ([f32(*c)] if c else [])
    check("Gemm", ins, {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}, static=(1, 2))


def test_fused_gemm():
    check("FusedGemm", [f32(4, 64), f32(64, 10), f32(10)], {"activation": "Relu"},
          static=(1, 2), domain=DOMAIN)


@pytest.mark.parametrize("a, b", [((8, 16), (16, 5)), ((2, 3, 8, 16), (16, 5)), ((4, 8, 16), (4, 16, 5)),
                                  ((8, 16), (3, 16, 5)), ((2, 3, 128, 64), (2, 3, 64, 128))])
def test_matmul(a, b):
    check("MatMul", [f32(*a), f32(*b)])


def test_matmul_add():
    check("MatMulAdd", [f32(2, 7, 32), f32(32, 12), f32(12)], static=(1, 2), domain=DOMAIN)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "dilations": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "count_include_pad": 1}),
])
def test_pool(op, attrs):
    check(op, [f32(2, 3, 11, 11)], attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 7), (1, 3, 64, 65), (2, 4, 1, 1)])
def test_global_pool(op, shape):
    check(op, [f32(*shape)])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis, opset", [(-1, 13), (1, 13), (0, 13), (1, 11)])
def test_softmax(op, axis, opset):
    check(op, [f32(3, 10, 6) * 4], {"axis": axis}, opset=opset)


def test_layer_norm():
    check("LayerNormalization", [f32(2, 7, 768), f32(768), f32(768)], {"epsilon": 1e-5}, static=(1, 2))
    check("LayerNormalization", [f32(3, 4, 5), f32(4, 5), None], {"axis": 1}, static=(1,))


def test_batch_norm():
    c = 6
    check("BatchNormalization", [f32(2, c, 5, 5), f32(c), f32(c), f32(c), np.abs(f32(c)) + 0.5],
          {"epsilon": 1e-3}, static=(1, 2, 3, 4))


@pytest.mark.parametrize("shape, perm", [((2, 3, 4, 5), [0, 2, 3, 1]), ((6, 7), [1, 0]), ((2, 3, 4), None)])
def test_transpose(shape, perm):
    check("Transpose", [f32(*shape)], {} if perm is None else {"perm": perm})


def test_transpose_of_int64():
    check("Transpose", [RNG.integers(-9, 9, (3, 4, 5)).astype(np.int64)], {"perm": [2, 0, 1]})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = {0: [(1, 4, 5), (3, 4, 5)], 1: [(2, 1, 5), (2, 6, 5), (2, 2, 5)], -1: [(2, 4, 3), (2, 4, 1)]}[axis]
    check("Concat", [f32(*s) for s in shapes], {"axis": axis})


@pytest.mark.parametrize("starts, ends, axes, steps", [([1, 0], [3, 5], [0, 2], [1, 2]), ([-1], [-100], [1], [-2]),
                                                       ([0], [2 ** 62], [3], [3])])
def test_slice(starts, ends, axes, steps):
    check("Slice", [f32(4, 6, 5, 7), i64(*starts), i64(*ends), i64(*axes), i64(*steps)], static=(1, 2, 3, 4))


@pytest.mark.parametrize("axis, idx", [(0, [[0, 2], [1, -1]]), (1, [3, 0, 3]), (2, 1)])
def test_gather(axis, idx):
    check("Gather", [f32(3, 4, 5), np.asarray(idx, np.int64)], {"axis": axis}, static=(1,))
    check("Gather", [f32(3, 4, 5), np.asarray(idx, np.int64)], {"axis": axis})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    check("Pad", [f32(2, 3, 5, 6), i64(0, 0, 2, 1, 0, 0, 1, 3), np.float32(1.5)], {"mode": mode}, static=(1, 2))


def test_pad_crops():
    check("Pad", [f32(2, 3, 5, 6), i64(0, 0, -1, 2, 0, 0, 1, -2)], static=(1,))


def test_expand():
    check("Expand", [f32(3, 1, 5), i64(2, 3, 4, 5)], static=(1,))


@pytest.mark.parametrize("mode, ctm, nearest", [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"), ("linear", "half_pixel", None),
    ("linear", "align_corners", None), ("linear", "asymmetric", None), ("linear", "pytorch_half_pixel", None),
])
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.5, 1.5), (1, 1, 3, 1)])
def test_resize(mode, ctm, nearest, scales):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    check("Resize", [f32(2, 3, 6, 7), None, np.asarray(scales, np.float32)], attrs, static=(2,), opset=13)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([2, 3], 0), ([0, 2], 1), (None, 0)])
def test_reduce(op, axes, keepdims):
    x = f32(2, 5, 6, 7) * 0.5
    if op == "ReduceProd":
        x = (1 + 0.1 * x).astype(np.float32)
    ins = [x] + ([i64(*axes)] if axes is not None else [])
    check(op, ins, {"keepdims": keepdims}, static=(1,), opset=18)


@pytest.mark.parametrize("op, ins, attrs, static", [
    ("Reshape", [(2, 3, 4), i64(6, 4)], {}, (1,)),
    ("Flatten", [(2, 3, 4)], {"axis": 1}, ()),
    ("Squeeze", [(2, 1, 4), i64(1)], {}, (1,)),
    ("Unsqueeze", [(2, 4), i64(0)], {}, (1,)),
    ("Identity", [(5, 3)], {}, ()),
])
def test_shape_only_ops(op, ins, attrs, static):
    check(op, [f32(*a) if isinstance(a, tuple) else a for a in ins], attrs, static=static)


# ---- attention (passes/attention.py's fused node) and the mask's logical ops ----------------------
@pytest.mark.parametrize("q, kt, v, m", [
    ((2, 4, 9, 16), (2, 4, 16, 11), (2, 4, 11, 8), (2, 1, 1, 11)),   # BERT: the padding mask over keys
    ((1, 3, 197, 64), (1, 3, 64, 197), (1, 3, 197, 64), None),         # ViT: no mask
    ((2, 3, 7, 5), (5, 7), (2, 3, 7, 6), (3, 7, 7)),                   # a shared Kt, a bias per head
])
@pytest.mark.parametrize("scale", [None, ("div", 8.0), ("mul", 0.125)])
def test_scaled_dot_product_attention(q, kt, v, m, scale):
    attrs = {} if scale is None else {"scale": scale[1], "divide": int(scale[0] == "div")}
    inputs = [f32(*q), f32(*kt), f32(*v)] + ([f32(*m) * 3] if m is not None else [])
    check("ScaledDotProductAttention", inputs, attrs, domain=DOMAIN)


def test_attention_with_an_additive_padding_mask_of_large_negatives():
    keep = RNG.random((2, 1, 1, 13)) > 0.3
    keep[..., 0] = True
    mask = ((1.0 - keep) * np.finfo(np.float32).min).astype(np.float32)
    check("ScaledDotProductAttention", [f32(2, 3, 13, 8), f32(2, 3, 8, 13), f32(2, 3, 13, 8), mask],
          {"scale": 8.0 ** 0.5, "divide": 1}, domain=DOMAIN)


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_comparisons(op, dtype):
    a = RNG.integers(-3, 4, (2, 3, 5)).astype(dtype)
    check(op, [a, RNG.integers(-3, 4, (3, 1)).astype(dtype)])
    check(op, [a, np.array(0, dtype)], static=(1,))


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op):
    check(op, [RNG.random((2, 3, 5)) > 0.5, RNG.random((3, 1)) > 0.5])


def test_not_and_where():
    check("Not", [RNG.random((4, 7)) > 0.5])
    cond = RNG.random((3, 1, 5)) > 0.5
    check("Where", [cond, f32(3, 4, 5), f32(4, 1)])
    check("Where", [cond, RNG.integers(0, 9, (3, 4, 5)).astype(np.int64), np.array(-1, np.int64)], static=(2,))


@pytest.mark.parametrize("src, dst", [(np.bool_, np.float32), (np.int64, np.float32), (np.float32, np.int64),
                                      (np.float32, np.bool_), (np.int64, np.int32), (np.int32, np.float64),
                                      (np.uint8, np.float32), (np.float32, np.float32)])
def test_cast(src, dst):
    from onnx import helper as onnx_helper

    x = (RNG.standard_normal((3, 17)) * 5).astype(np.float32)
    x[0, :3] = 0
    check("Cast", [x.astype(src)], {"to": onnx_helper.np_dtype_to_tensor_dtype(np.dtype(dst))})
