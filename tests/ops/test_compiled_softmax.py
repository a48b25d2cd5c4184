"""compiled/softmax.py: exp32 within 2 ulp of the correctly rounded exp, its special values, and
Softmax through the compiled rows against onnxruntime (opsets 11 and 13, axes, odd sizes, NaN/inf)."""

import numpy as np
import pytest
from numba import njit

from pooled_predictor.ops.cpu.compiled.expf import NORMAL_MIN, exp32, exp32_nonpositive, exp32_normal
from tests.onnx_helpers import check_node

rng = np.random.default_rng(13)


@njit
def _exp_all(x, y):
    for i in range(x.size):
        y[i] = exp32(x[i])


def test_exp32_within_2_ulp_over_its_range():
    x = np.linspace(np.float32(-87.3), np.float32(88.72), 1 << 24, dtype=np.float32)  # exp(88.7228) overflows float32
    y = np.empty_like(x)
    _exp_all(x, y)
    ref = np.exp(x.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(y - ref) / ulp) <= 2.0


@njit
def _exp_nonpositive_all(x, y):
    for i in range(x.size):
        y[i] = exp32_nonpositive(x[i])


def test_exp32_nonpositive_is_exp32_bit_for_bit():
    """Softmax's and Sigmoid's exp (no overflow test): exp32's bits wherever the argument is not positive,
    the subnormal range, -inf and NaN included."""
    x = np.concatenate([np.linspace(np.float32(-110.0), np.float32(0.0), 1 << 22, dtype=np.float32),
                        np.array([-np.inf, np.nan, -0.0, 0.0, -87.33, -103.9, -104.0, -1e-30], np.float32)])
    a, b = np.empty_like(x), np.empty_like(x)
    _exp_all(x, a)
    _exp_nonpositive_all(x, b)
    np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))


@njit
def _exp_normal_all(x, y):
    for i in range(x.size):
        y[i] = exp32_normal(x[i])


def test_exp32_normal_is_exp32_nonpositive_bit_for_bit_on_its_range():
    """Softmax's exp where a row's x - max stays in [NORMAL_MIN, 0] (one power-of-two factor, no clamp):
    exp32_nonpositive's bits there, both ends and -0 included."""
    x = np.concatenate([np.linspace(NORMAL_MIN, np.float32(0.0), 1 << 22, dtype=np.float32),
                        np.array([NORMAL_MIN, np.nextafter(NORMAL_MIN, np.float32(0)), -85.97, -0.0, 0.0, -1e-30,
                                  -1e-45], np.float32)])
    a, b = np.empty_like(x), np.empty_like(x)
    _exp_nonpositive_all(x, a)
    _exp_normal_all(x, b)
    np.testing.assert_array_equal(a.view(np.int32), b.view(np.int32))
    assert np.all(a[:-7] >= np.finfo(np.float32).tiny)  # normal values: the range's premise


def test_exp32_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 100.0, -110.0, 0.0, -0.0, 1.0, -100.0], np.float32)
    y = np.empty_like(x)
    _exp_all(x, y)
    assert np.isnan(y[0]) and y[1] == np.inf and y[2] == 0.0 and y[3] == np.inf and y[4] == 0.0
    assert abs(float(y[8]) - np.exp(-100.0)) <= 1.5e-45  # subnormal, rounded once
    assert y[5] == 1.0 and y[6] == 1.0 and abs(y[7] - np.float32(np.e)) <= np.spacing(np.float32(np.e))


@pytest.mark.parametrize("shape,axis,opset", [((3, 7), -1, 13), ((2, 5, 6625), 2, 13), ((4, 3, 9), 1, 11),
                                              ((4, 3, 9), 0, 11), ((2, 3, 17), -1, 11), ((1, 1), -1, 13),
                                              ((5, 13), 1, 1)])
def test_softmax_against_onnxruntime(shape, axis, opset):
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    check_node("Softmax", [x], {"axis": axis}, opset=opset)


def test_softmax_rows_with_nan_and_inf():
    from pooled_predictor.ops.cpu.compiled.softmax import softmax_rows

    x = np.array([[1.0, np.nan, 2.0], [0.0, -np.inf, 1.0], [np.inf, 0.0, 1.0], [3.0, 3.0, 3.0]], np.float32)
    y = np.empty_like(x)
    softmax_rows(x.reshape(-1), y.reshape(-1), 4, 3)
    assert np.all(np.isnan(y[0])) and np.isnan(y[2, 0])  # as numpy: inf - inf is NaN
    e = np.exp(np.array([0.0, 1.0]) - 1.0)
    np.testing.assert_allclose(y[1], [e[0] / e.sum(), 0.0, e[1] / e.sum()], rtol=1e-6)
    np.testing.assert_allclose(y[3], [1 / 3] * 3, rtol=1e-6)


@pytest.mark.parametrize("d", [1, 15, 16, 17, 63, 64, 65, 80, 128, 197, 300])
def test_row_max_and_nan_anywhere(d):
    """_row_max_min (four 16-lane chains each, then the tail) is np.max, np.min on NaN-free rows at every
    position of the maximum; a NaN or +inf at any position (vector group, leftover vectors, tail) gives a row of NaN /
    the softmax of +inf, as numpy's softmax does, in softmax_rows and softmax_rows_biased alike."""
    from numba import njit as _nj

    from pooled_predictor.ops.cpu.compiled.softmax import _row_max_min, softmax_rows, softmax_rows_biased

    row_max_min = _nj(lambda x, o, n: _row_max_min(x, o, n))
    none_f, none_i = np.zeros(0, np.float32), np.zeros(0, np.int64)
    for pos in sorted({0, d // 2, d - 1, min(d - 1, 64), min(d - 1, 16)}):
        x = rng.standard_normal(d + 3).astype(np.float32)
        x[1 + pos] = 9.0
        assert row_max_min(x, 1, d)[0] == np.max(x[1:1 + d]) == 9.0
        x[1 + (pos + d // 3) % d] = -9.0 if d > 1 else 9.0
        assert row_max_min(x, 1, d) == (np.max(x[1:1 + d]), np.min(x[1:1 + d]))
        for special in (np.nan, np.inf):
            z = x[1:1 + d].copy()
            z[pos] = special
            y = np.empty_like(z)
            softmax_rows(z, y, 1, d)
            yb = z.copy()
            softmax_rows_biased(yb, 1, d, np.float32(1), 0, none_f, none_i, 0)
            with np.errstate(invalid="ignore"):
                e = np.exp(z.astype(np.float64) - np.max(z))
                ref = e / e.sum()
            np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
            np.testing.assert_array_equal(y.view(np.int32), yb.view(np.int32))
    assert row_max_min(np.zeros(1, np.float32), 0, 0) == (-np.inf, np.inf)


@pytest.mark.parametrize("scale", [8, 40])
@pytest.mark.parametrize("d", [1, 7, 8, 255, 256, 1023, 1024, 1025, 2048 + 13, 6625])
def test_softmax_rows_bits_across_chunks(d, scale):
    """The exp-and-sum pass runs in 1024-float chunks: each y is exp32_nonpositive(x - max) times the
    float32 reciprocal of the float64 sum in _sum64's order (blocks of 256, then the tail), bit for bit,
    at row lengths on either side of a chunk and block boundary; rows spread less than 86 (exp32_normal's
    range) and more (scale 40: x - max down to about -200, the clamped, subnormal and zero exps)."""
    from pooled_predictor.ops.cpu.compiled.rowreduce import _sum64
    from pooled_predictor.ops.cpu.compiled.softmax import softmax_rows

    rows = 3
    x = (rng.standard_normal((rows, d)) * scale).astype(np.float32)
    y = np.empty_like(x)
    softmax_rows(x.reshape(-1), y.reshape(-1), rows, d)
    for r in range(rows):
        e = np.empty(d, np.float32)
        _exp_nonpositive_all(x[r] - x[r].max(), e)
        inv = np.float32(1.0) / np.float32(_sum64(e, 0, d))
        np.testing.assert_array_equal(y[r].view(np.int32), (e * inv).view(np.int32))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(13, 2), (13, -3), (13, 255), (11, 2), (11, 4294967296), (11, -2147483648)])
def test_softmax_axis_out_of_range_is_a_shape_error(op, opset, axis):
    """An axis outside [-r, r - 1] is the model's error, found when the shapes are inferred (the shape rule), as
    onnxruntime refuses it; it had reached the kernel and failed there (a KernelError carrying numpy's AxisError or
    "integer won't fit into a C int"; fuzz seed 131)."""
    from onnx import TensorProto, helper

    from pooled_predictor import Predictor
    from pooled_predictor.errors import ShapeInferenceError

    model = helper.make_model(
        helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", opset)])
    with pytest.raises(ShapeInferenceError, match="out of range for rank 2"):
        Predictor(model.SerializeToString()).new_net().forward({"x": np.ones((2, 3), np.float32)})
