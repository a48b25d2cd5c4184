"""One-node tests of the pooling kernels against onnxruntime.

Grids over rank (1-D/2-D/3-D), kernel, strides, dilations, explicit pads
(symmetric and asymmetric), auto_pad, ceil_mode, count_include_pad,
storage_order and MaxPool's Indices output. Inputs are small integers stored
as floats, so windows hold ties: Indices must pick the first maximum in window
order, as onnxruntime does. onnxruntime rejects pads >= kernel ("Pad should be
smaller than kernel"), so the grids keep pads below the kernel.
"""

import itertools

import numpy as np
import onnxruntime
import pytest

from pooled_predictor.errors import ModelLoadError, ShapeInferenceError
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

onnxruntime.set_default_logger_severity(3)
rng = np.random.default_rng(0)

SHAPES = {1: (2, 3, 11), 2: (2, 3, 9, 10), 3: (1, 2, 6, 7, 5)}


def ties(shape, dtype=np.float32):
    """Small integers: many equal values inside each window."""
    return rng.integers(-4, 5, shape).astype(dtype)


def pads_for(kind, kernel):
    """Explicit pads (begin..., end...) below the kernel, as onnxruntime requires."""
    n = len(kernel)
    if kind == "none":
        return [0] * (2 * n)
    if kind == "sym":
        return [k // 2 for k in kernel] * 2
    # asymmetric: more before on the first axes, more after on the others
    return [(k - 1) if i % 2 == 0 else 0 for i, k in enumerate(kernel)] + \
           [0 if i % 2 == 0 else (k - 1) for i, k in enumerate(kernel)]


def kernel_for(rank, k):
    """A kernel with k on the first axis and a different size on the next (non-square windows)."""
    return [k] + [max(1, 3 - k + 1) if i % 2 else k for i in range(1, rank)]


# ---- 2-D: the full grid ----------------------------------------------------------
GRID_2D = list(itertools.product([1, 2, 3], [1, 2, 3], [1, 2], ["none", "sym", "asym"], [0, 1]))


@pytest.mark.parametrize("k,s,d,pads,ceil", GRID_2D)
@pytest.mark.parametrize("indices", [False, True])
def test_maxpool_2d(k, s, d, pads, ceil, indices):
    kernel = kernel_for(2, k)
    attrs = {"kernel_shape": kernel, "strides": [s, 3 - s % 3], "dilations": [d, 1],
             "pads": pads_for(pads, kernel), "ceil_mode": ceil}
    check_node("MaxPool", [ties(SHAPES[2])], attrs, opset=12, outputs=2 if indices else 1)


@pytest.mark.parametrize("k,s,d,pads,ceil", GRID_2D)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool_2d(k, s, d, pads, ceil, count_include_pad):
    kernel = kernel_for(2, k)
    attrs = {"kernel_shape": kernel, "strides": [s, 3 - s % 3], "pads": pads_for(pads, kernel),
             "ceil_mode": ceil, "count_include_pad": count_include_pad}
    if d > 1:
        attrs["dilations"] = [d, d]       # AveragePool has dilations from opset 19
    check_node("AveragePool", [ties(SHAPES[2])], attrs, opset=19)


# ---- 1-D and 3-D ---------------------------------------------------------------------
GRID_ND = list(itertools.product([1, 3], [1, 2, 3], [1, 2], ["none", "sym", "asym"], [0, 1]))


@pytest.mark.parametrize("rank", [1, 3])
@pytest.mark.parametrize("k,s,d,pads,ceil", GRID_ND)
@pytest.mark.parametrize("op", ["MaxPool", "MaxPool+Indices", "AveragePool"])
def test_pool_1d_3d(rank, k, s, d, pads, ceil, op):
    kernel = kernel_for(rank, k)
    attrs = {"kernel_shape": kernel, "strides": [s] + [1 + i % 2 for i in range(1, rank)],
             "dilations": [d] * rank, "pads": pads_for(pads, kernel), "ceil_mode": ceil}
    outputs = 2 if op.endswith("Indices") else 1
    if op == "AveragePool":
        attrs["count_include_pad"] = int(pads == "asym")
    check_node(op.split("+")[0], [ties(SHAPES[rank])], attrs, opset=22, outputs=outputs)


# ---- auto_pad ------------------------------------------------------------------------
AUTO_PAD_SHAPE = (2, 2, 8, 7)


def same_pad_needed(size, k, s):
    return (-(-size // s) - 1) * s + k - size


def ort_accepts_same(kernel, strides):
    """onnxruntime rejects SAME when kernel < stride makes pad_needed negative."""
    return all(same_pad_needed(n, k, s) >= 0 for n, k, s in zip(AUTO_PAD_SHAPE[2:], kernel, strides))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
@pytest.mark.parametrize("k,s,d", [(k, s, d) for k, s, d in itertools.product([1, 2, 3], [1, 2, 3], [1, 2])
                                   if ort_accepts_same([k, 4 - k], [s, 2])])
@pytest.mark.parametrize("op", ["MaxPool", "MaxPool+Indices", "AveragePool", "AveragePool+pad"])
def test_auto_pad(auto_pad, k, s, d, op):
    """SAME_* pads with onnxruntime's legacy rule (undilated kernel), see ops/shapes/pool.py."""
    attrs = {"kernel_shape": [k, 4 - k], "strides": [s, 2], "auto_pad": auto_pad, "dilations": [d, 1]}
    if op.startswith("AveragePool"):
        attrs["count_include_pad"] = int(op.endswith("pad"))
    check_node(op.split("+")[0], [ties(AUTO_PAD_SHAPE)], attrs, opset=19,
               outputs=2 if op.endswith("Indices") else 1)


def brute_force_pool(x, op, kernel, strides, head, out_shape):
    """Loop oracle (tests only): windows at p * s - head, taps inside the input."""
    y = np.empty(x.shape[:2] + tuple(out_shape), x.dtype)
    for p in itertools.product(*[range(o) for o in out_shape]):
        ranges = [[q * s - h + j for j in range(k) if 0 <= q * s - h + j < n]
                  for q, s, h, k, n in zip(p, strides, head, kernel, x.shape[2:])]
        window = x[(slice(None), slice(None)) + np.ix_(*ranges)].reshape(x.shape[:2] + (-1,))
        y[(slice(None), slice(None)) + p] = window.max(-1) if op == "MaxPool" else window.mean(-1)
    return y


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("k,s", [(1, 2), (1, 3), (2, 3)])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_same_with_kernel_below_stride(auto_pad, k, s, op):
    """Deviation: onnxruntime rejects these (negative padding); we follow the ONNX spec:
    pad_needed = max(0, ...), so the output length is ceil(in / stride). The ONNX
    reference evaluator is inconsistent here too, so a loop oracle checks the values."""
    x = rng.standard_normal((1, 2, 8, 7)).astype(np.float32)
    model = make_node_model(op, [x], {"kernel_shape": [k, k], "strides": [s, s], "auto_pad": auto_pad}, opset=19)
    type_outputs(model, [x])
    ours = run_ours(model, {"in0": x})[0]
    out_shape = [-(-n // s) for n in x.shape[2:]]
    head = [0 if auto_pad == "SAME_UPPER" else (max(0, same_pad_needed(n, k, s)) + 1) // 2 for n in x.shape[2:]]
    np.testing.assert_allclose(ours, brute_force_pool(x, op, [k, k], [s, s], head, out_shape), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_auto_pad_ceil_mode(auto_pad, op):
    """onnxruntime applies ceil_mode with auto_pad too."""
    attrs = {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": auto_pad, "ceil_mode": 1}
    check_node(op, [ties((1, 2, 9, 8))], attrs, opset=19)


# ---- ceil_mode: the last window starts inside the input or the left padding ------------
@pytest.mark.parametrize("size,k,s,pads", [(5, 2, 2, [1, 1]), (6, 3, 2, [1, 1]), (6, 3, 2, [0, 1]),
                                           (7, 3, 3, [2, 2]), (4, 2, 3, [1, 1]), (2, 3, 2, [0, 0])])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePool+pad"])
def test_ceil_mode_last_window(size, k, s, pads, op):
    attrs = {"kernel_shape": [k], "strides": [s], "pads": pads, "ceil_mode": 1}
    if op.startswith("AveragePool"):
        attrs["count_include_pad"] = int(op.endswith("pad"))
    check_node(op.split("+")[0], [np.arange(1, size + 1, dtype=np.float32).reshape(1, 1, size)], attrs, opset=19)


# ---- windows with no input tap (dilation or kernel beyond a tiny input) -----------------
@pytest.mark.parametrize("shape,attrs", [
    ((2, 2, 8, 1), {"kernel_shape": [3, 3], "strides": [2, 3], "dilations": [2, 2], "ceil_mode": 1,
                    "pads": [1, 1, 1, 2]}),
    ((2, 2, 1, 6), {"kernel_shape": [3, 3], "strides": [3, 3], "dilations": [2, 1], "pads": [1, 2, 1, 2]}),
    ((1, 2, 2, 8, 1), {"kernel_shape": [3, 2, 3], "strides": [3, 3, 2], "dilations": [2, 1, 2], "ceil_mode": 1,
                       "pads": [1, 1, 1, 0, 1, 2]}),
    ((1, 2, 1, 1), {"kernel_shape": [2, 2], "strides": [1, 2], "dilations": [2, 1], "ceil_mode": 1,
                    "pads": [1, 1, 1, 1]})])
@pytest.mark.parametrize("op", ["MaxPool", "MaxPool+Indices", "AveragePool", "AveragePool+pad"])
def test_windows_without_input(shape, attrs, op):
    """onnxruntime: max = the dtype's lowest value, index from coordinates (-1, ...), average 0."""
    attrs = dict(attrs)
    if op.startswith("AveragePool"):
        attrs["count_include_pad"] = int(op.endswith("pad"))
    check_node(op.split("+")[0], [ties(shape)], attrs, opset=19, outputs=2 if op.endswith("Indices") else 1)


# ---- Indices: storage order ----------------------------------------------------------
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("s,d,pads", [(1, 1, "none"), (2, 1, "sym"), (2, 2, "asym"), (3, 1, "asym")])
def test_maxpool_indices_storage_order(rank, storage_order, s, d, pads):
    kernel = [3] * rank
    attrs = {"kernel_shape": kernel, "strides": [s] * rank, "dilations": [d] * rank,
             "pads": pads_for(pads, kernel), "storage_order": storage_order}
    x = rng.standard_normal(SHAPES[rank]).astype(np.float32)
    check_node("MaxPool", [x], attrs, opset=12, outputs=2)


# ---- versions and dtypes -------------------------------------------------------------
@pytest.mark.parametrize("opset", [8, 10, 11, 12, 19, 22])
@pytest.mark.parametrize("outputs", [1, 2])
def test_maxpool_opsets(opset, outputs):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    if opset >= 10:
        attrs.update(ceil_mode=1, dilations=[1, 2])
    check_node("MaxPool", [ties(SHAPES[2])], attrs, opset=opset, outputs=outputs)


@pytest.mark.parametrize("opset", [7, 10, 11, 19, 22])
def test_averagepool_opsets(opset):
    attrs = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}
    if opset >= 10:
        attrs.update(ceil_mode=1)
    if opset >= 19:
        attrs.update(dilations=[2, 1])
    check_node("AveragePool", [rng.standard_normal(SHAPES[2]).astype(np.float32)], attrs, opset=opset)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.uint8])
@pytest.mark.parametrize("outputs", [1, 2])
@pytest.mark.parametrize("opset", [12, 22])
def test_maxpool_dtypes(dtype, outputs, opset):
    x = rng.integers(0 if dtype == np.uint8 else -100, 100, SHAPES[2]).astype(dtype)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "ceil_mode": 1}
    check_node("MaxPool", [x], attrs, opset=opset, outputs=outputs)


def test_maxpool_int8_padding_never_wins():
    """Padding is the dtype minimum: an all-minimum window still returns the input value."""
    x = np.full((1, 1, 4, 4), -128, np.int8)
    x[0, 0, 3, 3] = 5
    check_node("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, opset=12, outputs=2)


@pytest.mark.parametrize("op", ["AveragePool", "GlobalAveragePool", "GlobalMaxPool"])
def test_float16(op):
    """float16 sums round at each step (numpy and onnxruntime differ there): rtol 1e-3."""
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} if op == "AveragePool" else {}
    x = rng.standard_normal(SHAPES[2]).astype(np.float16)
    check_node(op, [x], attrs, opset=22, rtol=1e-3)


# ---- global pools --------------------------------------------------------------------
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("opset", [11, 22])
def test_global_pool(op, rank, opset):
    check_node(op, [rng.standard_normal(SHAPES[rank]).astype(np.float32)], opset=opset)


# ---- model plumbing ------------------------------------------------------------------
def test_static_input_is_folded():
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    check_node("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=12, outputs=2, static=(0,))


@pytest.mark.parametrize("op,outputs", [("MaxPool", 1), ("MaxPool", 2), ("AveragePool", 1)])
def test_workspace_garbage_is_ignored(op, outputs):
    """Workspace content is undefined at each call (shared with other nodes): fill it with junk."""
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.cpu.pooling import AveragePool, MaxPool
    from pooled_predictor.ops.shapes import get_rule

    x = ties((2, 3, 9, 8, 7))
    attrs = {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 1]}
    refs = []
    node = Node(op, ["x"], ["y", "i"][:outputs], attrs, name="p")
    ctx = OpContext(node, 12 if op == "MaxPool" else 19, [x.shape], [x.dtype], [None], scratch=refs.append)
    specs = get_rule(op)(ctx)[:outputs]
    ctx.out_shapes, ctx.out_dtypes = [s for s, _ in specs], [t for _, t in specs]
    k = (MaxPool if op == "MaxPool" else AveragePool)(ctx, **attrs)
    for r in refs:
        r.array = np.full(r.shape, True if r.dtype == bool else np.nan, r.dtype)
    assert refs
    outs = tuple(np.empty(s, t) for s, t in specs)
    k(x, out=outs if op == "MaxPool" else outs[0])
    refs_out = check_node(op, [x], attrs, opset=12 if op == "MaxPool" else 19, outputs=outputs)
    for o, r in zip(outs, refs_out):
        np.testing.assert_allclose(o, r, rtol=1e-6)


def test_reuse_of_the_net_and_workspace():
    """A second forward with other data gives fresh results (workspace content is not trusted)."""
    attrs = {"kernel_shape": [3, 3], "strides": [1, 2], "pads": [1, 1, 1, 1], "count_include_pad": 0}
    model = make_node_model("AveragePool", [ties(SHAPES[2])], attrs, opset=19)
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.engine.net import Net
    from pooled_predictor.engine.program import Program

    net = Net(Program(load_onnx(model)))
    for _ in range(2):
        x = ties(SHAPES[2])
        net.forward({"in0": x})
        ref = check_node("AveragePool", [x], attrs, opset=19)[0]
        np.testing.assert_allclose(net.blob_by_name("out0"), ref, rtol=1e-6)


@pytest.mark.parametrize("attrs,match", [({"kernel_shape": [2]}, "rank 3"),
                                         ({"kernel_shape": [2, 2], "auto_pad": "SAME"}, "auto_pad"),
                                         ({"kernel_shape": [2, 2], "strides": [1, 1, 1]}, "strides"),
                                         ({"kernel_shape": [7, 2]}, "negative output")])
def test_shape_errors(attrs, match):
    x = ties((1, 1, 5, 5))
    model = make_node_model("MaxPool", [x], attrs, opset=12)
    type_outputs(model, [x])
    with pytest.raises((ShapeInferenceError, ModelLoadError), match=match):  # attributes
        # outside the schema's ranges (strides 0, odd pads) are refused at load: importers/validate.py
        run_ours(model, {"in0": x})


# ---- LpPool ------------------------------------------------------------------------
@pytest.mark.parametrize("rank,p,opset,extra", [
    (1, 2, 11, {}), (2, 1, 11, {"pads": [1, 0, 1, 1]}), (2, 3, 11, {"auto_pad": "SAME_UPPER"}),
    (2, 2, 18, {"dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]}), (3, 2, 18, {"strides": [1, 2, 1]}),
    (2, 2, 22, {"strides": [2, 1], "pads": [0, 1, 1, 0]})])
def test_lppool(rank, p, opset, extra):
    kernel = [3, 2, 2][:rank]
    attrs = {"kernel_shape": kernel, "p": p, **extra}
    check_node("LpPool", [rng.standard_normal(SHAPES[rank]).astype(np.float32)], attrs, opset=opset, rtol=1e-5)
