"""ops/cpu/views.py: Slice, Gather of one index or a run of them, Concat and constant Pad as compiled copies
between strided views (compiled/transpose.py's view_copy and fill_bits), so that a native run takes them --
onnxruntime's bits over a grid of shapes, steps, axes and element sizes, and numpy's calls kept where the
compiled copy does not apply."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.ops.cpu import compiled, views
from pooled_predictor.ops.cpu.compiled import native_runs

_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
          np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL, np.uint8: TensorProto.UINT8}


def _sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-100 if dtype != np.uint8 else 0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _run(node, inputs: dict, weights: dict, out_dtype, opset=18):
    """Our output and onnxruntime's for a one-node model, and whether each of our calls is compiled (fusible)."""
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info(n, _TYPES[a.dtype.type], a.shape) for n, a in inputs.items()],
                          [helper.make_tensor_value_info("y", _TYPES[out_dtype], None)],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    data = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9).SerializeToString()
    p = Predictor(data)
    ours = p.forward(inputs)["y"]
    ours = p.forward(inputs)["y"]
    fused = [native_runs.fusible(c) is not None for c in p.net().layout.run]
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    return ours, ref, fused


def _same_bits(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_])
@pytest.mark.parametrize("shape,starts,ends,axes,steps", [
    ((2, 56, 56, 16), [0, 0], [56, 56], [1, 2], [2, 2]),          # Swin's patch merging, x[:, 0::2, 0::2]
    ((2, 56, 56, 16), [1, 0], [56, 56], [1, 2], [2, 2]),
    ((1, 14, 14, 8), [3, 0], [14, 2**62], [1, 2], [1, 1]),          # a shifted window's part
    ((3, 5, 7), [0, 1, 2], [3, 4, 7], [0, 1, 2], [1, 2, 3]),
    ((4, 6), [-3], [100], [1], [1]),
    ((2, 3, 4, 5, 6, 7, 8), [1, 2], [6, 7], [4, 5], [2, 1]),        # 7 axes, merged to fewer
])
def test_slice_is_a_compiled_copy_with_onnxruntimes_bits(dtype, shape, starts, ends, axes, steps):
    x = _sample(shape, dtype)
    w = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array(axes, np.int64),
         "t": np.array(steps, np.int64)}
    ours, ref, fused = _run(helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), {"x": x}, w, dtype)
    _same_bits(ours, ref)
    assert all(fused)


def test_a_backward_slice_keeps_numpys_copy():
    x = _sample((4, 9), np.float32)
    w = {"s": np.array([-1], np.int64), "e": np.array([-100], np.int64), "a": np.array([1], np.int64),
         "t": np.array([-2], np.int64)}
    ours, ref, fused = _run(helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"]), {"x": x}, w, np.float32)
    _same_bits(ours, ref)
    assert fused == [False]  # a negative stride: numpy's copyto


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("shape,axis,indices,compiled_call", [
    ((3, 1, 3, 49, 32), 0, np.array(1), True),                     # Swin's q/k/v = qkv[0], qkv[1], qkv[2]
    ((3, 1, 3, 49, 32), 2, np.array(-1), True),
    ((5, 6, 7), 1, np.array([2, 3, 4]), True),                     # a run of indices: a slice
    ((5, 6, 7), -1, np.array([0]), True),
    ((5, 6, 7), 1, np.array([4, 1, 1]), False),                    # any other: numpy's take
    ((5, 6, 7), 0, np.array([[0, 1], [2, 3]]), False),
])
def test_gather_of_one_index_or_a_run_is_a_compiled_copy(dtype, shape, axis, indices, compiled_call):
    x = _sample(shape, dtype)
    ours, ref, fused = _run(helper.make_node("Gather", ["x", "i"], ["y"], axis=axis), {"x": x},
                            {"i": indices.astype(np.int64)}, dtype)
    _same_bits(ours, ref)
    assert fused == [compiled_call]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
@pytest.mark.parametrize("shapes,axis", [
    ([(1, 28, 28, 8)] * 4, -1),                                    # Swin's patch merging, 4 slices joined
    ([(1, 3, 56, 16), (1, 53, 56, 16)], 1),                        # torch.roll's two parts
    ([(2, 3), (2, 0), (2, 4)], 1),                                 # an empty input
    ([(1, 4), (3, 4)], 0),
])
def test_concat_is_a_chain_of_compiled_copies(dtype, shapes, axis):
    inputs = {f"x{i}": _sample(s, dtype, seed=i) for i, s in enumerate(shapes)}
    ours, ref, fused = _run(helper.make_node("Concat", list(inputs), ["y"], axis=axis), inputs, {}, dtype)
    _same_bits(ours, ref)
    assert all(fused)


@pytest.mark.parametrize("dtype,value", [(np.float32, 0.0), (np.float32, -2.5), (np.int8, 7), (np.float16, 1.5)])
@pytest.mark.parametrize("shape,pads", [
    ((1, 14, 14, 8), [0, 0, 0, 0, 0, 0, 0, 0]),                    # Swin's Pad where the windows divide
    ((1, 5, 5, 8), [0, 1, 1, 0, 0, 1, 1, 0]),
    ((2, 3, 4), [1, 0, 2, 0, 3, 1]),
    ((2, 6, 4), [0, -1, 1, 0, -2, 2]),                             # cropped on one axis, padded on another
])
def test_constant_pad_is_a_fill_and_a_compiled_copy(dtype, value, shape, pads):
    x = _sample(shape, dtype)
    w = {"p": np.array(pads, np.int64), "v": np.array(value, dtype)}
    ours, ref, fused = _run(helper.make_node("Pad", ["x", "p", "v"], ["y"], mode="constant"), {"x": x}, w, dtype)
    _same_bits(ours, ref)
    assert all(fused)


def test_views_helpers_refuse_what_they_cannot_copy():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = np.empty((4, 3), np.float32)
    assert views.copy_call(a, a[:, ::-2], out, out) is None                    # negative stride
    assert views.copy_call(a, a[:, :3], out, out[:, :2]) is None               # shapes differ
    assert views.copy_call(a.T, a.T[:, :2], out, out[:2]) is None             # parent not C-contiguous
    c = np.empty(4, np.complex128)
    assert views.copy_call(c, c, c.copy(), c.copy()) is None                  # 16-byte elements
    assert views.fill_call(np.empty((2, 2), object), 0) is None
    with compiled.reference_kernels():
        assert views.copy_call(a, a[:, :3], out, out) is None                  # no compiled kernels
    call = views.copy_call(a, a[:, 1::2], out, out)
    call()
    assert np.array_equal(out, a[:, 1::2])
