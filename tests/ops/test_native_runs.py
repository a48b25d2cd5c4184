"""compiled/native_runs.py: runs of compiled kernel calls as one native call -- the same results as the calls one
by one, every argument type it takes, a kernel's exception raised as its own and naming its call, the GIL
released for the run; and a Net's forward with runs fused: the same bits, its errors naming the node."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from numba import njit, types
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.engine import layout as layout_module
from pooled_predictor.errors import KernelError
from pooled_predictor.ops.cpu import compiled, elementwise, tensor
from pooled_predictor.ops.cpu.compiled import native_runs
from tests import transformer_graphs

_F1 = types.Array(types.float32, 1, "C")
_F2A = types.Array(types.float32, 2, "A")
_I1 = types.Array(types.int64, 1, "C")


@njit(types.void(_F1, _F1, types.float32, types.int64), nogil=True)
def _axpy(x, y, a, n):
    for i in range(n):
        y[i] += a * x[i]


@njit(types.void(_F2A, _F1, types.float64, types.boolean, types.UniTuple(types.int32, 2)), nogil=True)
def _strided_sum(x, out, scale, negate, shift):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            s += x[i, j]
    s = s * scale + shift[0] - shift[1]
    out[0] = -s if negate else s


@njit(types.void(_I1, types.int64), nogil=True)
def _fail_at(x, bad):
    if x[0] == bad:
        raise ValueError("bad value reached")
    x[0] += 1


@njit(types.int64(_I1), nogil=True)
def _returns(x):
    return x[0]


def _bound(fn, *args):
    call = compiled.bound(fn, *args)
    assert isinstance(call, native_runs.Bound), "compiled.bound did not resolve a specialization"
    return call


def test_a_run_computes_what_its_calls_compute():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(37).astype(np.float32)
    big = rng.standard_normal((9, 12)).astype(np.float32)

    def calls():
        y, out = np.zeros(37, np.float32), np.zeros(1, np.float32)
        view = big[1::2, ::3]  # non-contiguous: an "A" array's strides
        return [_bound(_axpy, x, y, np.float32(0.5), 37), _bound(_axpy, y, y, np.float32(-1.25), 30),
                _bound(_strided_sum, view, out, 0.1, True, (np.int32(3), np.int32(-2)))], y, out

    plain, y0, out0 = calls()
    for c in plain:
        c()
    fusedcalls, y1, out1 = calls()
    fused, starts = native_runs.fuse(fusedcalls)
    assert len(fused) == 1 and isinstance(fused[0], native_runs.NativeRun) and starts == [0]
    fused[0]()
    assert np.array_equal(y0, y1) and np.array_equal(out0, out1)
    fused[0]()  # the slots stay bound: a second run adds again
    for c in plain:
        c()
    assert np.array_equal(y0, y1) and np.array_equal(out0, out1)


def test_what_it_cannot_take_stays_a_python_call():
    x = np.zeros(1, np.int64)
    y = np.zeros(4, np.float32)
    plain = [lambda: None, _bound(_fail_at, x, 99), compiled.bound(_returns, x), _bound(_axpy, y, y, np.float32(1), 4),
             _bound(_axpy, y, y, np.float32(1), 4), compiled.chain(_bound(_fail_at, x, 99), _bound(_fail_at, x, 98))]
    fused, starts = native_runs.fuse(plain)
    # a lone fusible call and one returning a value stay; the last three (a chain counts as one) fuse
    assert fused[:3] == plain[:3] and isinstance(fused[3], native_runs.NativeRun) and len(fused) == 4
    assert starts == [0, 1, 2, 3]
    fused[3]()
    assert x[0] == 2
    nested = compiled.chain(compiled.chain(_bound(_fail_at, x, 99), _bound(_fail_at, x, 99)), _bound(_fail_at, x, 99))
    assert len(native_runs.fusible(nested)) == 3 and native_runs.fusible(compiled.chain()) == []
    assert native_runs.fusible(compiled.chain(nested, lambda: None)) is None


def test_a_failing_kernel_raises_its_own_exception_and_names_its_call():
    x = np.zeros(1, np.int64)
    y = np.zeros(3, np.float32)
    calls = [_bound(_axpy, y, y, np.float32(1), 3), _bound(_fail_at, x, 1), _bound(_fail_at, x, 1)]
    fused, _ = native_runs.fuse(calls)
    (run,) = fused
    with pytest.raises(ValueError, match="bad value reached"):
        run()  # the first _fail_at moves x to 1; the second raises, natively and again through Python
    assert run.failed_at == 2
    x[0] = 5
    run()
    assert x[0] == 7


def test_the_gil_is_released_for_the_whole_run():
    """A pure-Python thread runs beside a long run: the run holds the GIL for none of it."""
    n = 4_000_000
    x = np.ones(n, np.float32)
    y = np.zeros(n, np.float32)
    fused, _ = native_runs.fuse([_bound(_axpy, x, y, np.float32(1), n) for _ in range(20)])
    (run,) = fused
    ticks = []
    done = threading.Event()

    def spin():
        while not done.is_set():
            ticks.append(time.perf_counter())

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        before = len(ticks)
        run()
        during = len(ticks) - before
    finally:
        done.set()
        t.join()
    assert y[0] == 20
    assert during > 1000  # the spinner kept running while the 20 kernels ran


def _model():
    """Relu -> LSTM (sequence_lens fed at forward) -> Relu -> Relu: the LSTM's loop checks the lengths in
    nopython code, inside the run the Relus share with it."""
    seq, batch, inp, hid = 4, 2, 3, 5
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * hid, inp)).astype(np.float32) * 0.3, "W")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * hid, hid)).astype(np.float32) * 0.3, "R")
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("LSTM", ["xr", "W", "R", "", "lens"], ["y"], hidden_size=hid, name="the_lstm"),
             helper.make_node("Relu", ["y"], ["y1"]), helper.make_node("Relu", ["y1"], ["out"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp]),
                                       helper.make_tensor_value_info("lens", TensorProto.INT32, [batch])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], [w, r])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m.SerializeToString(), rng.standard_normal((seq, batch, inp)).astype(np.float32)


def test_a_net_with_native_runs_gives_the_same_bits_and_names_a_failing_node(monkeypatch):
    data, x = _model()
    lens = np.array([4, 2], np.int32)
    outs = {}
    for flag in (False, True):
        monkeypatch.setattr(native_runs, "ENABLED", flag)
        p = Predictor(data)
        for _ in range(3):  # the first compiled run fuses
            (outs[flag],) = p.forward({"x": x, "lens": lens}, ["out"])
        native = p.net().layout.native
        if flag:
            assert native and any(isinstance(f, native_runs.NativeRun) for f in native[0])
        else:
            assert native is False
    assert np.array_equal(outs[True].view(np.uint32), outs[False].view(np.uint32))
    with pytest.raises(KernelError, match="the_lstm") as err:
        p.forward({"x": x, "lens": np.array([4, 9], np.int32)}, ["out"])
    assert "sequence_lens" in str(err.value)
    (again,) = p.forward({"x": x, "lens": lens}, ["out"])  # the Net still serves
    assert np.array_equal(again.view(np.uint32), outs[True].view(np.uint32))


def test_switched_off_by_the_environment():
    root = Path(__file__).resolve().parents[2]
    code = "from pooled_predictor.ops.cpu.compiled import native_runs; print(native_runs.ENABLED)"
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, POOLED_PREDICTOR_NATIVE_RUNS="0"),
                         cwd=root, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("pads", [(0, 0), (1, 1), (2, 1), (0, 3)])
def test_window_copy_pads_as_numpy_does(lanes, pads):
    """compiled/reorder.py's window_copy (the NCHWc convolutions' padding and strided packing, fusible where
    numpy's copies are not): the padded buffer numpy's border fills and copy give, from contiguous rows
    (memcpy), strided pixels and strided lanes (element by element)."""
    rng = np.random.default_rng(5)
    ph, pw = pads
    x = rng.standard_normal((2, 3, 9, 7, 2 * lanes)).astype(np.float32)
    for src in (x[..., :lanes], x[:, :, ::2, ::3, :lanes], x[..., ::2]):
        src = np.ascontiguousarray(src) if src is x else src
        h, w = src.shape[2:4]
        dst = np.full((2, 3, h + ph + 1, w + pw + 2, lanes), np.nan, np.float32)
        ref = np.zeros_like(dst)
        ref[:, :, ph:ph + h, pw:pw + w] = src
        compiled.reorder.window_copy(dst, src, ph, pw, True)
        assert np.array_equal(dst, ref)
        packed = np.full(src.shape, np.nan, np.float32)
        compiled.reorder.window_copy(packed, src, 0, 0, False)
        assert np.array_equal(packed, src)
    narrow = np.full((2, 3, 5, 4, lanes), 7.0, np.float32)  # a window past dst's columns: clipped, not written past
    compiled.reorder.window_copy(narrow, x[..., :lanes], 1, 2, False)
    assert np.array_equal(narrow[:, :, 1:, 2:], x[:, :, :4, :2, :lanes]) and (narrow[:, :, 0] == 7).all()


@pytest.mark.parametrize("shape,perm,dtype", [((1, 128, 12, 64), (0, 2, 1, 3), np.float32),
                                              ((2, 3, 4, 5, 6, 7), (5, 3, 1, 0, 2, 4), np.int64),
                                              ((4, 1, 6), (2, 0, 1), np.int32), ((3, 5), None, np.float32),
                                              ((2, 3, 4), (1, 0, 2), np.float64)])
def test_transpose_copies_the_bits_in_one_compiled_call(shape, perm, dtype):
    """Transpose's prepared call where the tiled kernel does not apply: compiled/transpose.py's view_copy
    (a Bound call, so a native run takes it), numpy's bits for 4- and 8-byte elements and up to 6 axes."""
    x = np.random.default_rng(7).standard_normal(shape).astype(dtype)
    ref = np.ascontiguousarray(np.transpose(x, perm))
    out = np.full(ref.shape, 9, dtype)
    call = tensor._prepare_transpose(x, out=out, perm=perm)
    assert native_runs.fusible(call) is not None
    call()
    assert np.array_equal(out.view(np.uint8), ref.view(np.uint8))


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("sa,sb", [((1, 9, 24), (1, 9, 24)), ((1, 9, 24), (24,)), ((24,), (3, 9, 24)), ((2, 3), ()),
                                   ((4, 5), (4, 1))])
def test_add_and_mul_of_a_tensor_and_its_rows_are_compiled(op, sa, sb):
    """Add / Mul of float32 tensors of one shape, or of one and its last dimensions: the compiled pass (fusible),
    numpy's bits, in place too; any other broadcast stays numpy's."""
    rng = np.random.default_rng(8)
    kernel, ufunc = {"Add": (elementwise.add, np.add), "Mul": (elementwise.mul, np.multiply)}[op]
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    ref = ufunc(a, b)
    out = np.empty(ref.shape, np.float32)
    call = kernel.prepare_run(a, b, out=out)
    assert (native_runs.fusible(call) is not None) == (sb != (4, 1))
    call()
    assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))
    if a.shape == ref.shape:
        kernel.prepare_run(a, b, out=a)()
        assert np.array_equal(a.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("graph", ["bert", "vit"])
def test_transformer_forward_is_a_few_native_calls_with_the_same_bits(graph, monkeypatch):
    """tests/transformer_graphs.py's small BERT and ViT: their projections, LayerNorms, transposes, Adds and Muls
    join native runs (and, where its products run compiled -- BERT-base's sizes: 251 calls -> 8 --
    ScaledDotProductAttention's prepared chain of both products and the row softmax), so a forward is a few
    Python calls; the outputs are the bits of the same Net calling each node's unprepared kernel."""
    size = dict(d=64, heads=2, ffn=128)  # the compiled products' sizes (at d=32 the MatMulAdds stay numpy's)
    model = transformer_graphs.bert_model(seq=16, **size) if graph == "bert" else transformer_graphs.vit_model(**size)
    rng = np.random.default_rng(3)
    feed = ({"input_ids": rng.integers(1, 50, (1, 16)).astype(np.int64)} if graph == "bert"
            else {"pixel_values": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)})
    name = model.graph.input[0].name
    feed = {name: next(iter(feed.values()))}
    outs = {}
    for prepared in (True, False):
        monkeypatch.setattr(layout_module, "PREPARE_CALLS", prepared)
        p = Predictor(model.SerializeToString())
        for _ in range(3):
            outs[prepared] = p.forward(feed, p.output_names)[0]
        layout = p.net().layout
        if prepared:
            assert layout.native and len(layout.native[0]) <= len(layout.run) // 3, (len(layout.native[0]), len(layout.run))
    assert np.array_equal(outs[True].view(np.uint32), outs[False].view(np.uint32))


@njit(types.void(_F1, types.float32), nogil=True)
def _scale(x, a):
    for i in range(x.size):
        x[i] *= a


def test_runs_built_from_many_threads_at_once():
    """Pool workers fuse their Nets' runs concurrently: each shim (and the runner) is built once, and every
    thread's run computes its own arrays."""
    arrays = [np.ones(64, np.float32) for _ in range(6)]
    barrier = threading.Barrier(len(arrays))
    errors = []

    def work(x):
        try:
            barrier.wait()
            (run,) = native_runs.fuse([_bound(_scale, x, np.float32(2)), _bound(_scale, x, np.float32(3))])[0]
            run()
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(x,)) for x in arrays]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all((x == 6).all() for x in arrays)
    shims = [k for k in native_runs._SHIMS if k[0] == id(_scale.overloads[_scale.signatures[0]])]
    assert len(shims) == 1
