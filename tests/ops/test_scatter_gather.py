"""GatherElements, GatherND, ScatterElements, Scatter, ScatterND, TensorScatter against onnxruntime."""

import numpy as np
import pytest

from pooled_predictor.errors import KernelError
from tests.onnx_helpers import check_node, make_node_model, run_ours, type_outputs

rng = np.random.default_rng(12)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8]


def values(shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0 if np.dtype(dtype).kind == "u" else -5, 6, shape).astype(dtype)


def indices(shape, n, negative=True, dtype=np.int64):
    lo = -n if negative else 0
    return rng.integers(lo, n, shape).astype(dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("static", [(), (1,)])
def test_gather_elements(axis, opset, idx_dtype, static):
    data = values((3, 4, 5), np.float32)
    shape = [2, 3, 4]
    shape[axis] = 6  # indices may be longer than data along the axis
    idx = indices(tuple(shape), data.shape[axis], dtype=idx_dtype)
    check_node("GatherElements", [data, idx], {"axis": axis}, opset=opset, static=static)


@pytest.mark.parametrize("dtype", DTYPES + [np.bool_])
def test_gather_elements_dtypes(dtype):
    data = values((4, 3), dtype) if dtype != np.bool_ else rng.random((4, 3)) > 0.5
    check_node("GatherElements", [data, indices((2, 3), 4)], {"axis": 0}, opset=13)


@pytest.mark.parametrize("data_shape,idx_shape,batch_dims", [
    ((4, 5), (3, 2), 0), ((4, 5), (3, 1), 0), ((4, 5, 6), (2, 3, 2), 0), ((2, 3, 4), (2, 1), 1),
    ((2, 3, 4), (2, 5, 2), 1), ((2, 3, 4, 5), (2, 3, 1), 2), ((2, 3, 4, 5), (2, 3, 4, 2), 2)])
@pytest.mark.parametrize("opset", [12, 13])
def test_gather_nd(data_shape, idx_shape, batch_dims, opset):
    data = values(data_shape, np.float32)
    k = idx_shape[-1]
    dims = np.array(data_shape[batch_dims:batch_dims + k])
    idx = (rng.integers(0, 1 << 20, idx_shape) % dims) - (rng.random(idx_shape) < 0.3) * dims
    check_node("GatherND", [data, idx.astype(np.int64)], {"batch_dims": batch_dims}, opset=opset)


def test_gather_nd_opset_11():
    check_node("GatherND", [values((3, 4), np.int32), np.array([[1, 2], [0, -1]], np.int64)], opset=11)


@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 13), ("none", 18), ("add", 16),
                                             ("mul", 16), ("add", 18), ("max", 18), ("min", 18)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_elements(reduction, opset, axis, dtype):
    data = values((4, 5, 3), dtype)
    shape = [3, 4, 2]
    # duplicates only where the reduction defines their order-free result
    idx = indices(tuple(shape), data.shape[axis]) if reduction != "none" else None
    if idx is None:  # a permutation along the axis: no duplicates
        perm = np.argsort(rng.random(tuple(shape[:axis % 3]) + (data.shape[axis],) + tuple(shape[axis % 3 + 1:])),
                          axis=axis)
        idx = np.take(perm, range(shape[axis]), axis=axis) - data.shape[axis] * (rng.random(shape) < 0.3)
    attrs = {"axis": axis} if reduction == "none" else {"axis": axis, "reduction": reduction}
    check_node("ScatterElements", [data, idx.astype(np.int64), values(tuple(shape), dtype)], attrs, opset=opset)


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_deprecated(opset):
    """Scatter-9; onnx's checker refuses Scatter-11 (deprecated), so models carry opset <= 10."""
    data = values((3, 3), np.float32)
    idx, upd = np.array([[1, 0, 2], [0, 2, 1]], np.int64), values((2, 3), np.float32)
    check_node("Scatter", [data, idx, upd], {"axis": 0}, opset=opset)


@pytest.mark.parametrize("data_shape,idx_shape", [((4, 5), (3, 2)), ((4, 5), (2, 1)), ((6, 5, 4), (2, 3, 1)),
                                                  ((4, 5, 6), (3, 3))])
@pytest.mark.parametrize("reduction,opset", [("none", 11), ("none", 13), ("add", 16), ("mul", 16),
                                             ("max", 18), ("min", 18)])
def test_scatter_nd(data_shape, idx_shape, reduction, opset):
    data = values(data_shape, np.float32)
    k = idx_shape[-1]
    rows = int(np.prod(data_shape[:k]))
    n = int(np.prod(idx_shape[:-1]))
    # distinct tuples for 'none' (the spec leaves duplicate order undefined), any for reductions
    flat = rng.permutation(rows)[:n] if reduction == "none" else rng.integers(0, rows, n)
    idx = np.stack(np.unravel_index(flat, data_shape[:k]), axis=-1).reshape(idx_shape)
    upd = values(idx_shape[:-1] + data_shape[k:], np.float32)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    check_node("ScatterND", [data, idx.astype(np.int64), upd], attrs, opset=opset)


def test_scatter_nd_negative_index():
    data = values((4, 3), np.float32)
    check_node("ScatterND", [data, np.array([[-1], [0]], np.int64), values((2, 3), np.float32)], opset=18)


@pytest.mark.parametrize("op,inputs", [
    ("GatherElements", [np.zeros((2, 2), np.float32), np.array([[0, 2], [1, 0]], np.int64)]),
    ("ScatterND", [np.zeros((2, 2), np.float32), np.array([[0], [-3]], np.int64), np.zeros((2, 2), np.float32)]),
    ("GatherND", [np.zeros((2, 2), np.float32), np.array([[0, 5]], np.int64)])])
def test_out_of_range_index_is_a_kernel_error(op, inputs):
    model = make_node_model(op, inputs, {}, opset=18)
    type_outputs(model, [np.zeros((1,), np.float32)])
    with pytest.raises(KernelError, match=f"{op}.*out of range"):
        run_ours(model, {f"in{i}": a for i, a in enumerate(inputs)})


def tensor_scatter_reference(axis, mode):
    """The spec's pseudocode (Operators.md#TensorScatter), written out in numpy."""

    def ref(past, update, write_indices=None):
        present = past.copy()
        ax = axis % past.ndim
        for prefix in np.ndindex(past.shape[:ax]):
            w = 0 if write_indices is None else int(write_indices[prefix[0]])
            for s in range(update.shape[ax]):
                c = (w + s) % past.shape[ax] if mode == "circular" else w + s
                present[prefix + (c,)] = update[prefix + (s,)]
        return [present]

    return ref


@pytest.mark.parametrize("axis", [-2, 1, 2])
@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("with_indices", [False, True])
def test_tensor_scatter(axis, mode, with_indices):
    past = values((2, 3, 6, 4), np.float32)
    shape = list(past.shape)
    shape[axis] = 2
    upd = values(tuple(shape), np.float32)
    w = None
    if with_indices:
        w = np.array([1, past.shape[axis] - 1 if mode == "circular" else past.shape[axis] - 2], np.int64)
    inputs = [past, upd] + ([w] if with_indices else [])
    check_node("TensorScatter", inputs, {"axis": axis, "mode": mode}, opset=24,
               reference=tensor_scatter_reference(axis, mode))
