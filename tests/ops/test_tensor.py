"""Transpose, Squeeze, Unsqueeze, Concat, Shape, Size, ReduceMean, MatMul against onnxruntime."""

import numpy as np
import pytest

from tests.onnx_helpers import check_node

rng = np.random.default_rng(2)
x4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("perm", [None, [0, 2, 1, 3], [3, 2, 1, 0], [1, 0, 3, 2], [0, 1, 2, 3]])
@pytest.mark.parametrize("opset", [11, 13, 21])
def test_transpose(perm, opset):
    check_node("Transpose", [x4], {} if perm is None else {"perm": perm}, opset=opset)


# Y's last axis a strided one of X, X's last second to last: compiled/transpose.py's tiled copy (BERT's keys,
# ViT's (H, S, D) -> (H, D, S)), at sizes on both sides of its 8 x 8 blocks
TILED = [((1, 128, 12, 64), [0, 2, 3, 1]), ((12, 19, 64), [0, 2, 1]), ((3, 9, 17), [0, 2, 1]), ((2, 8, 8), [0, 2, 1]),
         ((2, 13, 3, 11), [2, 0, 3, 1]), ((1, 2, 3, 24, 10), [1, 0, 2, 4, 3]), ((40, 9), [1, 0])]


@pytest.mark.parametrize("shape,perm", TILED, ids=str)
def test_transpose_tiled_against_onnxruntime(shape, perm):
    check_node("Transpose", [rng.standard_normal(shape).astype(np.float32)], {"perm": perm}, opset=13)


@pytest.mark.parametrize("shape,perm", TILED + [((1, 768, 196), [0, 2, 1]), ((1, 197, 12, 64), [0, 2, 3, 1])],
                         ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int8])
def test_transpose_tiled_copies_bits(shape, perm, dtype):
    """The tiled copy is taken at these shapes and gives numpy's transpose bit for bit: NaN payloads,
    negative zeros and int32 values unchanged; 8-bit activations (the quantized transformers') in byte tiles."""
    from pooled_predictor.ops.cpu.tensor import _tiled_transpose

    if np.dtype(dtype).itemsize == 1:
        x = rng.integers(0, 256, size=shape).astype(np.uint8).view(dtype)
    else:
        bits = rng.integers(-2 ** 31, 2 ** 31, size=shape, dtype=np.int64).astype(np.int32)
        if dtype == np.float32:
            bits.reshape(-1)[:3] = np.array([0x7FC01234, 0x7F800001, np.int32(-2 ** 31)], np.int64).astype(np.int32)
        x = bits.view(dtype)
    out = np.full(np.transpose(x, perm).shape, 7, dtype)
    run = _tiled_transpose(x, out, perm)
    assert run is not None
    run()
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    assert out.tobytes() == np.ascontiguousarray(np.transpose(x, perm)).tobytes()


@pytest.mark.parametrize("shape,perm", [((2, 3, 4, 5), [0, 2, 1, 3]), ((3, 5, 9, 11), [2, 0, 3, 1]),
                                        ((4, 9, 10), [2, 0, 1]), ((16, 16), [1, 0])], ids=str)
def test_transpose_left_to_numpy(shape, perm):
    """Y's last axis X's own last, a strided axis shorter than 8, X's last not second to last, or neither 4-byte
    nor 1-byte elements: numpy's copy."""
    from pooled_predictor.ops.cpu.tensor import _tiled_transpose

    dtype = np.float64 if shape == (16, 16) else np.float32
    x = rng.standard_normal(shape).astype(dtype)
    assert _tiled_transpose(x, np.empty(np.transpose(x, perm).shape, dtype), perm) is None


@pytest.mark.parametrize("axes", [None, [2], [0, 2], [-1]])
@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("static", [(1,), ()])
def test_squeeze(axes, opset, static):
    x = rng.standard_normal((1, 3, 1, 1)).astype(np.float32)
    if opset < 13:
        check_node("Squeeze", [x], {} if axes is None else {"axes": axes}, opset=opset)
    elif axes is None:
        check_node("Squeeze", [x], opset=opset)
    else:
        check_node("Squeeze", [x, np.array(axes, np.int64)], opset=opset, static=static)


@pytest.mark.parametrize("axes", [[0], [1, 3], [-1], [0, 4]])
@pytest.mark.parametrize("opset", [11, 13, 21])
@pytest.mark.parametrize("static", [(1,), ()])
def test_unsqueeze(axes, opset, static):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    if opset < 13:
        check_node("Unsqueeze", [x], {"axes": axes}, opset=opset)
    else:
        check_node("Unsqueeze", [x, np.array(axes, np.int64)], opset=opset, static=static)


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -3])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("opset", [11, 13])
def test_concat(axis, n, opset):
    xs = []
    for i in range(n):
        shape = list(x4.shape)
        shape[axis] = i + 1
        xs.append(rng.standard_normal(shape).astype(np.float32))
    check_node("Concat", xs, {"axis": axis}, opset=opset)


@pytest.mark.parametrize("start,end", [(None, None), (1, None), (-2, None), (0, 2), (1, -1), (-10, 10), (3, 1)])
def test_shape(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check_node("Shape", [x4], attrs, opset=15 if attrs else 13)


def test_size():
    check_node("Size", [x4], opset=13)


@pytest.mark.parametrize("axes", [None, [1], [2, 3], [-1], [0, 1, 2, 3]])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reduce_mean(axes, keepdims, opset):
    if opset < 18 or axes is None:
        attrs = {"keepdims": keepdims}
        if axes is not None:
            attrs["axes"] = axes
        check_node("ReduceMean", [x4], attrs, opset=opset)
    else:
        check_node("ReduceMean", [x4, np.array(axes, np.int64)], {"keepdims": keepdims}, opset=opset, static=(1,))


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_mean_empty_axes(noop):
    check_node("ReduceMean", [x4], {"keepdims": 1, "noop_with_empty_axes": noop}, opset=18)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                 ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
                                 ((1, 2, 3), (3, 2, 3, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("static", [(), (1,)])
def test_matmul(a, b, dtype, static):
    check_node("MatMul", [rng.standard_normal(a).astype(dtype) * 3, rng.standard_normal(b).astype(dtype) * 3],
               opset=13, static=static, rtol=1e-5)


def test_squeeze_of_a_non_unit_axis_is_a_shape_error():
    from pooled_predictor.errors import ShapeInferenceError
    from tests.onnx_helpers import make_node_model, run_ours, type_outputs
    x = np.zeros((1, 3, 1), np.float32)
    model = type_outputs(make_node_model("Squeeze", [x, np.array([1], np.int64)], opset=13, static=(1,)),
                         [np.zeros((1, 1), np.float32)])
    with pytest.raises(ShapeInferenceError, match="cannot squeeze axes"):
        run_ours(model, {"in0": x})


@pytest.mark.parametrize("perm", [[0, -1, 1, 2], [0, 1, 2], [0, 1, 2, 4], [0, 0, 1, 2]])
def test_transpose_perm_must_be_a_permutation_of_the_axes(perm):
    """Found by tests/fuzz: perm [0, -1, 1] ran, read as numpy does; onnx's shape inference and onnxruntime
    refuse negative entries ("Invalid attribute perm"), and so do we, with the short or repeated ones."""
    from pooled_predictor.errors import ShapeInferenceError
    from tests.onnx_helpers import make_node_model, run_ours

    with pytest.raises(ShapeInferenceError, match="is not a permutation"):
        run_ours(make_node_model("Transpose", [x4], {"perm": perm}, opset=13), {"in0": x4})
