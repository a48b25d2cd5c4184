"""onnxruntime's quantized contrib ops (com.microsoft) against onnxruntime itself.

Integer outputs must equal onnxruntime's bit for bit; float outputs (QGemm without y_scale,
DynamicQuantizeMatMul, MatMulIntegerToFloat) agree to float32 rounding. Scales are drawn so
that ties (x.5 before rounding) occur (0.5, 0.25 ratios) as well as generic ones.

onnxruntime's u8 x s8 GEMM on AVX2 hosts without VNNI saturates each pair of products to
int16 (vpmaddubsw); int8 weights here stay within [-64, 63] (7 bits, onnxruntime's
reduce_range), where that never happens, so the comparison holds on every host.
"""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.errors import ModelLoadError, ShapeInferenceError
from pooled_predictor.ops.cpu import compiled
from pooled_predictor.ops.cpu import quantized_contrib as qc
from tests.onnx_helpers import assert_close, feeds_of, make_node_model, run_ort, run_ours, type_outputs

MS = "com.microsoft"
F32_ = np.float32
rng = np.random.default_rng(33)


def q(shape, dtype, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi + 1, shape).astype(dtype)


def zp(dtype, present=True):
    if not present:
        return None
    return np.array(q((), dtype, np.iinfo(dtype).min // 2 + 64, np.iinfo(dtype).max // 2 + 64) if dtype == np.uint8
                    else q((), dtype, -20, 20))


def f(v):
    return np.array(v, np.float32)


def check(op, inputs, attrs=None, static=(), rtol=0.0):
    """One com.microsoft node through onnxruntime and us; the outputs must match."""
    model = make_node_model(op, inputs, attrs, static=static, domain=MS)
    feeds = feeds_of(inputs, static)
    (ref,) = run_ort(model, feeds)
    (ours,) = run_ours(model, feeds)
    if ref.dtype.kind in "iu":
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, (ours.dtype, ours.shape, ref.dtype, ref.shape)
        bad = np.flatnonzero(ours != ref)
        assert bad.size == 0, (f"{op}: {bad.size} of {ref.size} values differ, first at {bad[:5]}: "
                               f"ours {ours.ravel()[bad[:5]]}, onnxruntime {ref.ravel()[bad[:5]]}")
    else:
        assert_close(ours, ref, rtol, op)
    return ours


SCALES = [(0.02, 0.03, 0.05), (0.5, 0.25, 1.0), (0.1, 0.1, 0.1), (0.0123, 0.0071, 0.0191)]
BINARY_SHAPES = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((1, 3, 1, 1), (2, 3, 4, 5)),
                 ((2, 3, 4, 5), ()), ((), (4, 37)), ((2, 1, 5), (3, 1)), ((3, 1), (2, 1, 5)), ((70,), (70,)),
                 ((2, 3, 4, 5), (4, 5)), ((1, 69), (1, 4, 69)),  # a bias over the last axes (rows_plan)
                 ((1, 4, 3, 5, 6), (1, 4, 1, 5, 6))]  # Swin-T's window mask, repeated over the heads (rows_plan)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("scales", SCALES)
def test_qlinear_binary(op, a_shape, b_shape, dtype, scales):
    sa, sb, sc = scales
    inputs = [q(a_shape, dtype), f(sa), zp(dtype), q(b_shape, dtype), f(sb), zp(dtype), f(sc), zp(dtype)]
    check(op, inputs, static=(1, 2, 4, 5, 6, 7))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("b_shape", [(1, 16, 1, 1), ()])
def test_qlinear_binary_runs_in_a_chain(dtype, b_shape):
    """QLinearMul (one shape) -> QLinearAdd and QLinearMul with a per-channel or scalar operand (compiled/quantize.py's
    qlinear_binary_runs, and its in-place form where the planner reuses the input's bytes): onnxruntime's bits."""
    shape = (1, 16, 24, 40)
    x, w, v = q(shape, dtype), q(shape, dtype), q(b_shape, dtype)
    z = np.array(3 if dtype == np.uint8 else -2, dtype)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (v, "v"), (f(0.05), "s"), (z, "z"),
                                                         (f(0.11), "s2"))]
    nodes = [helper.make_node("QLinearMul", ["x", "s", "z", "w", "s", "z", "s2", "z"], ["t"], domain=MS),
             helper.make_node("QLinearAdd", ["t", "s2", "z", "v", "s", "z", "s", "z"], ["u"], domain=MS),
             helper.make_node("QLinearMul", ["v", "s", "z", "u", "s", "z", "s2", "z"], ["y"], domain=MS)]
    t = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", t, shape)],
                          [helper.make_tensor_value_info("y", t, shape)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    (ref,) = run_ort(model, {"x": x})
    (ours,) = run_ours(model, {"x": x})
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 16, 6, 7), (1, 16, 1, 1)), ((1, 16, 1, 1), (2, 16, 6, 7)),
                                             ((3, 50), ()), ((), (3, 50)), ((4, 5, 6), (4, 5, 6))])
@pytest.mark.parametrize("scales", SCALES)
def test_compiled_qlinear_binary_is_the_reference(op, dtype, a_shape, b_shape, scales):
    """The compiled passes (compiled/quantize.py's qlinear_binary_runs and its in-place form, qlinear_mul_same)
    bound as a Net binds them, against the numpy references' bits (which test_qlinear_binary holds to
    onnxruntime's), C in its own array and over the full operand."""
    sa, sb, sc = scales
    a, b = q(a_shape, dtype), q(b_shape, dtype)
    za, zb, zc = (np.array(v, dtype) for v in ((3, 250, 7) if dtype == np.uint8 else (-3, 100, 5)))
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    ref = np.empty(out_shape, dtype)
    fn = qc.qlinear_add if op == "QLinearAdd" else qc.qlinear_mul
    fn(a, f(sa), za, b, f(sb), zb, f(sc), zc, out=ref)
    plan = qc.runs_plan(a.shape, b.shape, out_shape)
    same = a.shape == b.shape == out_shape
    assert plan is not None or same
    per = qc._add_constants(f(sa), za, f(sb), zb, f(sc), zc) if op == "QLinearAdd" else \
        qc._mul_constants(f(sa), za, f(sb), zb, f(sc), zc)
    for in_place in (False, True):
        full = (a if plan is None or plan[0] == 0 else b).copy()
        out = full if in_place else np.empty(out_shape, dtype)
        x, y = (full, b) if plan is None or plan[0] == 0 else (a, full)
        if plan is None:
            if op == "QLinearMul" and not in_place:
                compiled.quantize.qlinear_mul_same(x.reshape(-1), y.reshape(-1), out.reshape(-1), *per)
            elif op == "QLinearAdd":
                (compiled.quantize.qlinear_add_inplace(out.reshape(-1), y.reshape(-1), True, *per) if in_place else
                 compiled.quantize.qlinear_add_same(x.reshape(-1), y.reshape(-1), out.reshape(-1), *per))
            else:
                continue
        else:
            run = qc._bound_runs(0 if op == "QLinearAdd" else 1, plan, x, y, out, per[:2], per[2:])
            assert run is not None
            run()
        np.testing.assert_array_equal(out, ref, err_msg=f"in place {in_place}")


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("absent", [(2,), (5,), (7,), (2, 5, 7)])
def test_qlinear_binary_absent_zero_points_are_zero(op, dtype, absent):
    """An absent (optional) zero point is 0. onnxruntime refuses the node without them, so it runs
    with explicit zeros, we without."""
    full = [q((4, 33), dtype), f(0.04), zp(dtype), q((33,), dtype), f(0.02), zp(dtype), f(0.05), zp(dtype)]
    for i in absent:
        full[i] = np.zeros((), dtype)
    ref = check(op, full, static=(1, 2, 4, 5, 6, 7))
    sparse = [None if i in absent else a for i, a in enumerate(full)]
    while sparse[-1] is None:
        sparse.pop()
    static = tuple(i for i in (1, 2, 4, 5, 6, 7) if i < len(sparse) and sparse[i] is not None)
    model = make_node_model(op, sparse, static=static, domain=MS)
    (ours,) = run_ours(model, feeds_of(sparse, static))
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {}),
                                      ("QLinearLeakyRelu", {"alpha": 0.1}), ("QLinearLeakyRelu", {"alpha": 0.5})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("x_scale,y_scale", [(0.05, 1 / 256), (0.1, 0.02), (0.5, 0.25), (0.0173, 0.0041)])
@pytest.mark.parametrize("with_zp", [True, False])
def test_qlinear_unary(op, attrs, dtype, x_scale, y_scale, with_zp):
    x = np.arange(256, dtype=np.uint8).view(dtype).reshape(4, 64)  # every code
    check(op, [x, f(x_scale), zp(dtype, with_zp), f(y_scale), zp(dtype, with_zp)], attrs, static=(1, 2, 3, 4))


@pytest.mark.parametrize("op", ["QLinearSigmoid", "QLinearLeakyRelu"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(), (1,), (3, 1, 2)])
@pytest.mark.parametrize("compiled_on", [True, False])
def test_qlinear_unary_of_a_scalar(op, dtype, shape, compiled_on, monkeypatch):
    """A 0-d X (and other small shapes) through the table lookup, compiled and numpy: onnxruntime's values. numpy's
    path made a 0-d X 1-d (np.ascontiguousarray) and failed its take (a KernelError; fuzz seed 131, case 26878)."""
    monkeypatch.setattr(compiled, "ENABLED", compiled_on)
    x = q(shape, dtype)
    check(op, [x, f(0.05), zp(dtype), f(1 / 256), zp(dtype)], {}, static=(1, 2, 3, 4))


@pytest.mark.parametrize("shape,axis,opset", [((2, 10), -1, 13), ((1, 1000), 1, 13), ((3, 4096), 1, 13),
                                              ((2, 3, 7), 1, 13), ((2, 3, 7), 0, 13), ((2, 3, 7), 1, 12),
                                              ((4, 5, 6), -1, 12), ((64, 40), -1, 13)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("x_scale", [0.05, 0.2, 0.0123])
@pytest.mark.parametrize("y_scale", [1 / 256, 0.0042])
def test_qlinear_softmax(shape, axis, opset, dtype, x_scale, y_scale):
    """onnxruntime's integer Softmax. Not every value is bit for bit: next to a rounding tie
    onnxruntime 1.32 sometimes rounds the other way (measured over 6e6 random values: uint8 1,
    int8 2e-5 of them, one step each; kernel docstring), so a value may differ by one step, and
    only in at most 1e-3 of the values."""
    y_zp = np.array(0 if dtype == np.uint8 else -128, dtype)
    inputs = [q(shape, dtype), f(x_scale), zp(dtype), f(y_scale), y_zp]
    model = make_node_model("QLinearSoftmax", inputs, {"axis": axis, "opset": opset}, static=(1, 2, 3, 4),
                            domain=MS)
    feeds = feeds_of(inputs, (1, 2, 3, 4))
    (ref,) = run_ort(model, feeds)
    (ours,) = run_ours(model, feeds)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    diff = np.abs(ours.astype(np.int64) - ref)
    assert diff.max() <= 1 and (diff > 0).mean() <= 1e-3, (int(diff.max()), int((diff > 0).sum()), ref.size)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_softmax_scales_fed_each_run(dtype):
    """Scales and zero point as graph inputs, not weights (the prepared call looks the table up per run):
    two runs with different scales each give onnxruntime's output."""
    y_zp = np.array(0 if dtype == np.uint8 else -128, dtype)
    inputs = [q((2, 300), dtype), f(0.05), zp(dtype), f(1 / 256), y_zp]
    model = make_node_model("QLinearSoftmax", inputs, {"axis": -1, "opset": 13}, domain=MS)
    from pooled_predictor import Predictor

    net = Predictor(model.SerializeToString()).new_net()
    for x_scale, y_scale in ((0.05, 1 / 256), (0.2, 0.0042)):
        run = [inputs[0], f(x_scale), inputs[2], f(y_scale), y_zp]
        feeds = feeds_of(run, ())
        (ref,) = run_ort(model, feeds)
        ours = next(iter(net.forward(feeds).values()))
        diff = np.abs(ours.astype(np.int64) - ref)
        assert diff.max() <= 1 and (diff > 0).mean() <= 1e-3, (int(diff.max()), int((diff > 0).sum()), ref.size)


def test_qlinear_softmax_requires_opset():
    model = make_node_model("QLinearSoftmax", [q((2, 4), np.uint8), f(0.1), zp(np.uint8), f(1 / 256),
                                               np.array(0, np.uint8)], static=(1, 2, 3, 4), domain=MS)
    with pytest.raises(ModelLoadError, match="opset"):
        run_ours(model, {"in0": q((2, 4), np.uint8)})


@pytest.mark.parametrize("shapes,axis", [([(2, 3, 4), (2, 5, 4)], 1), ([(2, 3, 4), (2, 3, 1), (2, 3, 7)], -1),
                                         ([(1, 4), (3, 4)], 0)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("same_params", [True, False])
def test_qlinear_concat(shapes, axis, dtype, same_params):
    ys, yz = f(0.05), zp(dtype)
    inputs, static = [ys, yz], [0, 1]
    for k, s in enumerate(shapes):
        scale, z = (ys, yz) if same_params and k == 0 else (f(rng.choice([0.02, 0.1, 0.025, 0.0371])), zp(dtype))
        inputs += [q(s, dtype), scale, z]
        static += [len(inputs) - 2, len(inputs) - 1]
    check("QLinearConcat", inputs, {"axis": axis}, static=tuple(static))


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("a_shape,b_shape", [((1, 40, 69), (69,)), ((69,), (1, 40, 69)), ((2, 3, 4, 5), (1, 4, 5)),
                                             ((1, 4, 3, 5, 6), (1, 4, 1, 5, 6)), ((2, 1, 7, 9), (2, 3, 7, 9))])
@pytest.mark.parametrize("scales", SCALES)
def test_compiled_qlinear_binary_rows_is_the_reference(op, dtype, a_shape, b_shape, scales):
    """An operand over the output's last axes (a bias after a MatMul) or repeated over a middle group of axes (a mask
    over the heads): rows_plan; compiled/quantize.py's qlinear_binary_rows and its in-place form bound as a Net binds
    them, against the numpy reference's bits."""
    sa, sb, sc = scales
    a, b = q(a_shape, dtype), q(b_shape, dtype)
    za, zb, zc = (np.array(v, dtype) for v in ((3, 250, 7) if dtype == np.uint8 else (-3, 100, 5)))
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    ref = np.empty(out_shape, dtype)
    fn, consts = (qc.qlinear_add, qc._add_constants) if op == "QLinearAdd" else (qc.qlinear_mul, qc._mul_constants)
    fn(a, f(sa), za, b, f(sb), zb, f(sc), zc, out=ref)
    plan = qc.rows_plan(a.shape, b.shape, out_shape)
    assert plan is not None and qc.runs_plan(a.shape, b.shape, out_shape) is None
    per = consts(f(sa), za, f(sb), zb, f(sc), zc)
    for in_place in (False, True):
        full = (a if plan[0] == 0 else b).copy()
        out = full if in_place else np.empty(out_shape, dtype)
        x, y = (full, b) if plan[0] == 0 else (a, full)
        run = qc._bound_rows(0 if op == "QLinearAdd" else 1, plan, x, y, out, per)
        assert run is not None
        run()
        np.testing.assert_array_equal(out, ref, err_msg=f"in place {in_place}")


@pytest.mark.parametrize("shapes,axis", [([(2, 3, 4, 5), (2, 6, 4, 5)], 1), ([(2, 3, 4), (2, 3, 1), (2, 3, 7)], -1),
                                         ([(1, 4), (3, 4)], 0), ([(1, 16, 24, 32), (1, 16, 24, 32)], 1)])
@pytest.mark.parametrize("x_dtype,y_dtype", [(np.uint8, np.uint8), (np.int8, np.int8), (np.uint8, np.int8),
                                             (np.int8, np.uint8)])
def test_compiled_qlinear_concat_is_the_table(shapes, axis, x_dtype, y_dtype):
    """QLinearConcat's compiled requantization (compiled/quantize.requantize_columns) against the 256-entry
    tables of the numpy path (compiled kernels off), every input's parameters other than Y's: the same bits. Every
    code of each input type occurs, and scales whose quotients tie (0.5 steps) as well as generic ones."""
    ys, yz = f(0.05), np.array(7 if y_dtype == np.uint8 else -3, y_dtype)
    params = [(f(0.025), 3), (f(0.0371), 250), (f(0.1), 128), (f(0.05), 0)]
    inputs = [ys, yz]
    for k, s in enumerate(shapes):
        x = q(s, x_dtype)
        x.reshape(-1)[:256] = qc.codes(np.dtype(x_dtype))[:min(256, x.size)]
        scale, z = params[k % len(params)]
        inputs += [x, scale, np.array(z if x_dtype == np.uint8 else z - 128, x_dtype)]
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    ours, ref = np.empty(out_shape, y_dtype), np.empty(out_shape, y_dtype)
    assert compiled.active()
    qc.qlinear_concat(*inputs, out=ours, axis=axis)
    with compiled.reference_kernels():
        qc.qlinear_concat(*inputs, out=ref, axis=axis)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (2, 3, 5, 4), (2, 16, 1, 1), (1, 4, 9), (1, 96, 14, 14)])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("x_scale,y_scale", [(0.05, 0.05), (0.1, 0.03), (0.5, 0.25)])
def test_qlinear_global_average_pool(shape, channels_last, dtype, x_scale, y_scale):
    inputs = [q(shape, dtype), f(x_scale), zp(dtype), f(y_scale), zp(dtype)]
    check("QLinearGlobalAveragePool", inputs, {"channels_last": channels_last}, static=(1, 2, 3, 4))


POOLS = [dict(kernel_shape=[3, 3]), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
         dict(kernel_shape=[2, 3], strides=[2, 1], ceil_mode=1), dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
         dict(kernel_shape=[7, 7])]


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("x_scale,y_scale", [(0.05, 0.05), (0.1, 0.03)])
def test_qlinear_average_pool(attrs, channels_last, dtype, x_scale, y_scale):
    shape = (2, 7, 7, 5) if channels_last else (2, 5, 7, 7)
    inputs = [q(shape, dtype), f(x_scale), zp(dtype), f(y_scale), zp(dtype)]
    check("QLinearAveragePool", inputs, dict(attrs, channels_last=channels_last), static=(1, 2, 3, 4))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_average_pool_1d(dtype):
    check("QLinearAveragePool", [q((2, 3, 11), dtype), f(0.05), zp(dtype), f(0.02), zp(dtype)],
          {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}, static=(1, 2, 3, 4))


def _b_values(shape, dtype):
    """Weights within [-64, 63] for int8 (no int16 saturation in onnxruntime's AVX2 u8 x s8 kernel)."""
    return q(shape, dtype, -64, 63) if dtype == np.int8 else q(shape, dtype)


@pytest.mark.parametrize("m,k,n", [(1, 16, 8), (5, 37, 11), (32, 64, 24)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1)])
@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8)])  # onnxruntime: no s8 A
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("out", ["quantized", "float"])
def test_qgemm(m, k, n, trans, a_type, b_type, per_column, out):
    ta, tb = trans
    a = q((k, m) if ta else (m, k), a_type)
    b = _b_values((n, k) if tb else (k, n), b_type)
    b_scale = f(rng.uniform(0.002, 0.02, n)) if per_column else f(0.01)
    b_zp = (np.zeros(n, b_type) if b_type == np.int8 else q((n,), b_type, 100, 150)) if per_column else \
        np.array(0 if b_type == np.int8 else 128, b_type)
    c = rng.integers(-5000, 5000, n).astype(np.int32)
    inputs = [a, f(0.03), zp(a_type), b, b_scale, b_zp, c]
    if out == "quantized":
        inputs += [f(0.25), zp(np.uint8)]
    check("QGemm", inputs, {"transA": ta, "transB": tb}, static=tuple(range(1, len(inputs))), rtol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 1.7])
@pytest.mark.parametrize("with_c", [True, False])
@pytest.mark.parametrize("out", ["quantized", "float"])
def test_qgemm_alpha_and_bias(alpha, with_c, out):
    a, b = q((6, 20), np.uint8), _b_values((20, 9), np.int8)
    c = rng.integers(-3000, 3000, (1, 9)).astype(np.int32) if with_c else None
    inputs = [a, f(0.02), zp(np.uint8), b, f(0.01), np.array(0, np.int8), c]
    if out == "quantized":
        inputs += [f(0.1), zp(np.uint8)]  # onnxruntime's QGemm with uint8 A has no int8 Y
    check("QGemm", inputs, {"alpha": alpha}, static=tuple(range(1, len(inputs))), rtol=1e-6)


@pytest.mark.parametrize("y_type", [np.int8, np.uint8])
def test_qgemm_int8_a_against_the_formula(y_type):
    """onnxruntime has no QGemm for int8 A: the real-valued formula (float64), within one step."""
    a, b = q((7, 30), np.int8), q((30, 5), np.int8)
    c = rng.integers(-3000, 3000, 5).astype(np.int32)
    za, zb, zy = np.array(3, np.int8), np.array(0, np.int8), zp(y_type)
    inputs = [a, f(0.02), za, b, f([0.01, 0.02, 0.005, 0.03, 0.011]), np.zeros(5, np.int8), c, f(0.05), zy]
    model = make_node_model("QGemm", inputs, {"alpha": 0.75}, static=tuple(range(1, 9)), domain=MS)
    (ours,) = run_ours(model, {"in0": a})
    acc = (a.astype(np.float64) - 3) @ (b.astype(np.float64) - zb) + c
    real = 0.75 * np.float64(F32_(0.02)) * f([0.01, 0.02, 0.005, 0.03, 0.011]).astype(np.float64) * acc / F32_(0.05)
    info = np.iinfo(y_type)
    expected = np.clip(np.rint(real) + zy, info.min, info.max)
    assert ours.dtype == y_type
    assert np.abs(ours.astype(np.float64) - expected).max() <= 1


@pytest.mark.parametrize("a_shape,b_shape", [((4, 32), (32, 16)), ((2, 5, 48), (48, 8)), ((1, 7), (7, 3))])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_dynamic_quantize_matmul(a_shape, b_shape, b_type, per_column, bias):
    n = b_shape[-1]
    a = rng.standard_normal(a_shape).astype(np.float32) * 3 + 0.5
    b = _b_values(b_shape, b_type)
    b_scale = f(rng.uniform(0.002, 0.02, n)) if per_column else f(0.01)
    b_zp = (q((n,), b_type, -3, 3) if b_type == np.int8 else q((n,), b_type, 120, 136)) if per_column else zp(b_type)
    inputs = [a, b, b_scale, b_zp, rng.standard_normal(n).astype(np.float32) if bias else None]
    check("DynamicQuantizeMatMul", inputs, static=(1, 2, 3, 4), rtol=1e-6)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 32), (32, 16)), ((2, 5, 48), (48, 8))])
@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_integer_to_float(a_shape, b_shape, a_type, b_type, per_column, bias):
    n = b_shape[-1]
    b_scale = f(rng.uniform(0.002, 0.02, n)) if per_column else f(0.01)
    b_zp = (q((n,), b_type, -3, 3) if b_type == np.int8 else q((n,), b_type, 120, 136)) if per_column else zp(b_type)
    inputs = [q(a_shape, a_type), _b_values(b_shape, b_type), f(0.05), b_scale, zp(a_type), b_zp,
              rng.standard_normal(n).astype(np.float32) if bias else None]
    check("MatMulIntegerToFloat", inputs, static=(1, 3, 5, 6), rtol=1e-6)


def test_registered_by_domain():
    """The kernels resolve for com.microsoft at opset 1, and only there (not in the default domain)."""
    from pooled_predictor.ops.registry import find

    for op in ("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearSoftmax",
               "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearConcat", "QGemm", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"):
        assert find(op, MS, 1, "cpu") is not None, op
        assert find(op, "", 17, "cpu") is None, op
        assert find(op, MS, 0, "cpu") is None, op  # no opset import of com.microsoft: no kernel


# ---- malformed nodes ----------------------------------------------------------------------------
def _load(model):
    return run_ours(model, {})


def test_missing_required_scale_is_a_model_load_error():
    x = q((1, 4, 3, 3), np.uint8)
    model = make_node_model("QLinearGlobalAveragePool", [x, None, zp(np.uint8), f(0.1), zp(np.uint8)],
                            static=(0, 2, 3, 4), domain=MS)
    with pytest.raises(ModelLoadError, match="x_scale"):
        _load(model)


def test_unknown_attribute_is_a_model_load_error():
    model = make_node_model("QLinearSigmoid", [q((4,), np.uint8), f(0.1), zp(np.uint8), f(0.1), zp(np.uint8)],
                            {"beta": 2.0}, static=(0, 1, 2, 3, 4), domain=MS)
    with pytest.raises(ModelLoadError, match="beta"):
        _load(model)


def test_attribute_of_the_wrong_type_is_a_model_load_error():
    model = make_node_model("QLinearLeakyRelu", [q((4,), np.uint8), f(0.1), zp(np.uint8), f(0.1), zp(np.uint8)],
                            {"alpha": 2}, static=(0, 1, 2, 3, 4), domain=MS)
    with pytest.raises(ModelLoadError, match="alpha"):
        _load(model)


def test_bad_channels_last_is_a_shape_error():
    model = make_node_model("QLinearGlobalAveragePool", [q((1, 4, 3, 3), np.uint8), f(0.1), zp(np.uint8), f(0.1),
                                                         zp(np.uint8)], {"channels_last": 2},
                            static=(0, 1, 2, 3, 4), domain=MS)
    with pytest.raises(ShapeInferenceError, match="channels_last"):
        _load(model)


def test_per_channel_scale_of_qlinear_add_is_a_shape_error():
    inputs = [q((1, 3, 2, 2), np.uint8), f([0.1, 0.2, 0.3]), zp(np.uint8), q((1, 3, 2, 2), np.uint8), f(0.1),
              zp(np.uint8), f(0.1), zp(np.uint8)]
    model = make_node_model("QLinearAdd", inputs, static=tuple(range(8)), domain=MS)
    with pytest.raises(ShapeInferenceError, match="scalar"):
        _load(model)


@pytest.mark.parametrize("op,scale_at", [("QLinearAdd", 1), ("QLinearSigmoid", 3), ("QLinearGlobalAveragePool", 3)])
def test_a_scale_of_rank_2_is_a_shape_error(op, scale_at):
    """Found by tests/fuzz: a (1, 1) scale or zero point of a per-tensor parameter ran (one element);
    onnxruntime refuses it ("Scale and Zero-point must be a scalar": IsScalarOr1ElementVector), and so do we."""
    x = q((1, 2, 3, 3), np.uint8)
    inputs = ([x, f(0.1), zp(np.uint8), x, f(0.1), zp(np.uint8), f(0.2), zp(np.uint8)] if op == "QLinearAdd"
              else [x, f(0.1), zp(np.uint8), f(0.2), zp(np.uint8)])
    run_ours(make_node_model(op, inputs, static=tuple(range(1, len(inputs))), domain=MS), {"in0": x})
    inputs[scale_at] = np.full((1, 1), 0.2, np.float32)
    model = make_node_model(op, inputs, static=tuple(range(1, len(inputs))), domain=MS)
    with pytest.raises(ShapeInferenceError, match="must be a scalar"):
        run_ours(model, {"in0": x})


def test_wrong_zero_point_type_is_a_shape_error():
    inputs = [q((2, 2), np.uint8), f(0.1), np.array(3, np.int8), q((2, 2), np.uint8), f(0.1), zp(np.uint8), f(0.1)]
    model = make_node_model("QLinearAdd", inputs, static=tuple(range(7)), domain=MS)
    with pytest.raises(ShapeInferenceError, match="same type"):
        _load(model)


def test_broken_concat_triples_is_a_shape_error():
    inputs = [f(0.1), zp(np.uint8), q((2, 2), np.uint8), f(0.1)]
    model = make_node_model("QLinearConcat", inputs, {"axis": 0}, static=(0, 1, 2, 3), domain=MS)
    with pytest.raises(ShapeInferenceError, match="triples"):
        _load(model)


def test_qgemm_inner_dimension_mismatch_is_a_shape_error():
    inputs = [q((3, 4), np.uint8), f(0.1), zp(np.uint8), q((5, 2), np.int8), f(0.1), np.array(0, np.int8)]
    model = make_node_model("QGemm", inputs, static=tuple(range(6)), domain=MS)
    with pytest.raises(ShapeInferenceError, match="inner dimensions"):
        _load(model)


def test_missing_opset_import_is_unsupported():
    from pooled_predictor.errors import UnsupportedOpError

    model = make_node_model("QLinearSigmoid", [q((4,), np.uint8), f(0.1), zp(np.uint8), f(0.1), zp(np.uint8)],
                            static=(0, 1, 2, 3, 4), domain=MS)
    del model.opset_import[1]
    with pytest.raises((UnsupportedOpError, ModelLoadError)):
        _load(model)


def test_schemas_known_to_onnx():
    """contrib_schemas registers the ops with onnx: the checker accepts a QOperator node."""
    from pooled_predictor.contrib_schemas import ensure_registered

    ensure_registered()

    model = make_node_model("QLinearAdd", [q((2,), np.uint8), f(0.1), zp(np.uint8), q((2,), np.uint8), f(0.1),
                                           zp(np.uint8), f(0.1), zp(np.uint8)], static=(1, 2, 4, 5, 6, 7), domain=MS)
    type_outputs(model, [np.zeros(2, np.uint8)])
    onnx.checker.check_model(model)
    assert onnx.defs.get_schema("QGemm", 1, MS).attributes["alpha"].default_value.f == 1.0


def test_schemas_registered_when_a_model_needs_them():
    """The import of the package registers none (issue 31: 14-22 ms most models never use); a model
    that imports com.microsoft has them registered before onnx.checker sees it."""
    code = (
        "import onnx, numpy as np, pooled_predictor\n"
        "from onnx import helper, TensorProto\n"
        "assert not onnx.defs.has('QLinearAdd', 'com.microsoft')\n"
        "u8 = lambda n: helper.make_tensor_value_info(n, TensorProto.UINT8, [2])\n"
        "inits = [helper.make_tensor(n, TensorProto.FLOAT, [], [0.1]) for n in ('s',)] + "
        "[helper.make_tensor('z', TensorProto.UINT8, [], [3])]\n"
        "node = helper.make_node('QLinearAdd', ['a', 's', 'z', 'b', 's', 'z', 's', 'z'], ['y'], domain='com.microsoft')\n"
        "g = helper.make_graph([node], 'g', [u8('a'), u8('b')], [u8('y')], inits)\n"
        "m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17), helper.make_opsetid('com.microsoft', 1)])\n"
        "p = pooled_predictor.Predictor(m.SerializeToString())\n"
        "assert onnx.defs.has('QLinearAdd', 'com.microsoft')\n"
        "y = p.forward({'a': np.array([3, 13], np.uint8), 'b': np.array([3, 23], np.uint8)})['y']\n"
        "assert y.tolist() == [3, 33], y\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("scales", SCALES)
def test_qlinear_add_chain_written_in_place_matches_onnxruntime(dtype, scales):
    """QLinearAdd writing over its dying A, then over its dying B (the planner's in-place reuse:
    compiled/quantize.qlinear_add_inplace), against onnxruntime, bit for bit; and the kernel did run
    in place (one array read and written)."""
    from onnx import TensorProto, helper, numpy_helper

    from pooled_predictor import Net, Optimization
    from pooled_predictor.engine.program import Program
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.ops.cpu import compiled

    shape = (1, 8, 13, 11)
    sa, sb, sc = scales
    consts = {"sa": f(sa), "sb": f(sb), "sc": f(sc), "za": zp(dtype), "zb": zp(dtype), "zc": zp(dtype),
              "k": q(shape, dtype)}  # a weight: t3 can only take t2's (B's) storage
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    nodes = [helper.make_node("QLinearAdd", ["x", "sa", "za", "y", "sb", "zb", "sc", "zc"], ["t1"], domain=MS),
             helper.make_node("QLinearAdd", ["t1", "sc", "zc", "y", "sb", "zb", "sa", "za"], ["t2"], domain=MS),
             helper.make_node("QLinearAdd", ["k", "sa", "za", "t2", "sa", "za", "sb", "zb"], ["t3"], domain=MS),
             helper.make_node("QLinearAdd", ["t3", "sb", "zb", "x", "sb", "zb", "sc", "zc"], ["out"], domain=MS)]
    graph = helper.make_graph(nodes, "adds", [helper.make_tensor_value_info(n, elem, shape) for n in ("x", "y")],
                              [helper.make_tensor_value_info("out", elem, shape)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    feeds = {"x": q(shape, dtype), "y": q(shape, dtype)}
    (ref,) = run_ort(model, feeds)
    calls = []
    real = compiled.quantize.qlinear_add_inplace
    try:
        compiled.quantize.qlinear_add_inplace = lambda *a: (calls.append(a[2]), real(*a))
        net = Net(Program(load_onnx(model, device="cpu"), "cpu"), optimization=Optimization.MEMORY)
        net.forward(feeds)
        ours = np.array(net.blob_by_name("out"))
    finally:
        compiled.quantize.qlinear_add_inplace = real
    assert np.array_equal(ours, ref), f"{int((ours != ref).sum())} of {ref.size} differ"
    if compiled.active():
        assert sorted(calls) == [False, True]  # t2 over t1 (A), t3 over t2 (B); out is the graph's own


@pytest.mark.parametrize("d", [1, 7, 16, 37, 1000])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_softmax_compiled_equals_the_numpy_steps(d, dtype, monkeypatch):
    """QLinearSoftmax's compiled pass (compiled/quantize.qlinear_softmax_rows) gives the numpy reference's
    output bit for bit: the same table, the same float32 sums in MLAS's AVX2 order, the same roundings."""
    from pooled_predictor.ops.cpu import compiled
    from pooled_predictor.ops.cpu.quantized_contrib import qlinear_softmax

    for x_scale, y_scale, y_zp in ((0.1, 1 / 256, 0), (0.0371, 1 / 255, 3), (0.5, 0.01, -5 if dtype == np.int8 else 9)):
        x = q((6, d), dtype)
        args = (x, f(x_scale), zp(dtype), f(y_scale), np.array(y_zp, dtype))
        got, ref = np.empty_like(x), np.empty_like(x)
        qlinear_softmax(*args, out=got, opset=13)
        with monkeypatch.context() as m:
            m.setattr(compiled, "active", lambda: False)
            qlinear_softmax(*args, out=ref, opset=13)
        assert np.array_equal(got, ref), f"{int((got != ref).sum())} of {ref.size} differ"


def test_a_requantization_ratio_above_2_15_is_a_shape_error():
    """Found by tests/fuzz: QLinearAdd with A and B at a 1e20 scale and C at 0.06 gave 255 where the spec gives
    z_c (A = B = their zero point), and onnxruntime 0: MLAS's float32 form cancels terms of 255 x the ratio.
    Scales whose ratio passes 2^15 are refused (QLinearAdd, QLinearGlobalAveragePool, QLinearAveragePool); at
    2^15 they still run."""
    from pooled_predictor.ops.shapes.quantized_contrib import MAX_RATIO

    x = q((1, 2, 3, 3), np.uint8)
    for ratio, ok in ((MAX_RATIO, True), (MAX_RATIO * 2, False), (1e21, False)):
        big = f(0.06 * ratio)
        add = [x, big, zp(np.uint8), x, f(0.1), zp(np.uint8), f(0.06), zp(np.uint8)]
        gap = [x, big, zp(np.uint8), f(0.06), zp(np.uint8)]
        for op, inputs in (("QLinearAdd", add), ("QLinearGlobalAveragePool", gap)):
            model = make_node_model(op, inputs, static=tuple(range(1, len(inputs))), domain=MS)
            if ok:
                run_ours(model, {"in0": x})
            else:
                with pytest.raises(ShapeInferenceError, match="requantization ratio above 2\\^15"):
                    run_ours(model, {"in0": x})
