"""Prepared calls (engine/layout.py: _prepared, a kernel's prepare_run; ops/cpu/compiled: bound, prepared).

A Net binds each kernel's per-call work once per layout; the prepared run must give the
bits of calling every kernel as runner(*inputs, out=...), follow reshapes, and leave
forward(share_inputs=True) (which swaps the caller's arrays into the calls) working.
"""

from functools import partial
from types import FunctionType

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor.engine import layout as layout_module
from pooled_predictor.engine import net as net_module
from pooled_predictor.importers import load_onnx
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.ops.cpu import compiled, conv, conv_nchwc
from pooled_predictor.passes import optimize
from pooled_predictor.engine.program import Program
from tests.onnx_helpers import run_ort

RNG = np.random.default_rng(7)


def _w(*shape):
    return (RNG.standard_normal(shape) * 0.2).astype(np.float32)


def _model(c_in=3):
    """A stem conv (C_in -> 16), then every kind the NCHW8c and NCHW compiled paths prepare: 1x1 and
    3x3 convs with a residual sum, a strided 3x3, a depthwise 3x3, Sigmoid and exporter-style GELU, a
    squeeze-and-excitation mean and Mul, MaxPool, nearest Resize, Concat, and a final 1x1 conv."""
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(a, name))
        return name

    def conv_node(x, y, c, m, k=1, stride=1, group=1, pad=None):
        pad = k // 2 if pad is None else pad
        nodes.append(helper.make_node("Conv", [x, const(y + "_w", _w(m, c // group, k, k)), const(y + "_b", _w(m))],
                                      [y], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                                      group=group))
        return y

    conv_node("x", "stem", c_in, 16, k=3)
    nodes.append(helper.make_node("Relu", ["stem"], ["a"]))
    conv_node("a", "p1", 16, 16)
    conv_node("p1", "k3", 16, 16, k=3)
    nodes.append(helper.make_node("Add", ["k3", "a"], ["res"]))
    conv_node("res", "dw", 16, 16, k=3, group=16)
    nodes.append(helper.make_node("Sigmoid", ["dw"], ["sg"]))
    nodes.append(helper.make_node("Div", ["sg", const("sqrt2", np.array(np.sqrt(2), np.float32))], ["g0"]))
    nodes.append(helper.make_node("Erf", ["g0"], ["g1"]))
    nodes.append(helper.make_node("Add", ["g1", const("one", np.array(1, np.float32))], ["g2"]))
    nodes.append(helper.make_node("Mul", ["sg", "g2"], ["g3"]))
    nodes.append(helper.make_node("Mul", ["g3", const("half", np.array(0.5, np.float32))], ["gelu"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["gelu"], ["se"]))
    nodes.append(helper.make_node("Mul", ["gelu", "se"], ["scaled"]))
    nodes.append(helper.make_node("MaxPool", ["scaled"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Resize", ["mp", "", const("scales", np.array([1, 1, 2, 2], np.float32))],
                                  ["up"], mode="nearest"))
    conv_node("up", "s2", 16, 16, k=3, stride=2)
    conv_node("s2", "s2b", 16, 16)
    nodes.append(helper.make_node("Concat", ["s2", "s2b"], ["cat"], axis=1))
    conv_node("cat", "y", 32, 8)
    g = helper.make_graph(nodes, "prepared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _net(model, prepared: bool, monkeypatch, optimization=Optimization.MEMORY, passes=True):
    monkeypatch.setattr(layout_module, "PREPARE_CALLS", prepared)
    graph = load_onnx(model)
    if passes:
        graph = optimize(graph, "all")[0]
    return Net(Program(graph), optimization=optimization)


def _prepared_count(net) -> int:
    """Nodes whose call in the run is their kernel's prepared call, not runner(*inputs, out=...)."""
    return sum(f is not p for f, p in zip(net.layout.run, net.layout.plain))


def _unprepared(net) -> list:
    """The nodes a prepared call should run but that got runner(*inputs, out=...): every NCHW8c
    kernel, the NCHW Conv's compiled paths, Gelu, function kernels that offer prepare_run."""
    missed = []
    for f, p, node in zip(net.layout.run, net.layout.plain, net.layout.run_nodes):
        runner = p.func.func if isinstance(p.func, partial) else p.func
        path = getattr(runner, "path", None) or getattr(getattr(runner, "conv", None), "path", None)
        if path is not None:
            should = path in ("pointwise_compiled", "indirect", "depthwise_compiled", "winograd")
        else:  # function kernels with a prepare_run (layout transforms, Concat, Flatten...) always prepare
            should = (isinstance(runner, FunctionType) and hasattr(runner, "prepare_run")
                      or type(runner).__name__ in ("Gelu", "GeluNCHWc")
                      or type(runner).__module__.rsplit(".", 1)[-1] in ("conv_nchwc", "blocked"))
        if should and f is p:
            missed.append((node.op_type, type(runner).__name__, path))
    return missed


@pytest.mark.parametrize("blocked", [True, False], ids=["nchw8c", "nchw"])
@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
@pytest.mark.parametrize("passes", [True, False])
def test_prepared_run_gives_the_plain_runs_bits(blocked, optimization, passes, monkeypatch):
    monkeypatch.setattr(conv_nchwc, "ENABLED", blocked)
    monkeypatch.setattr(conv, "INDIRECT_MIN_WIDTH", 8)  # the 3x3 convs of these small images: indirect
    model = _model()
    x = RNG.standard_normal((2, 3, 12, 10)).astype(np.float32)
    fast = _net(model, True, monkeypatch, optimization, passes)
    plain = _net(model, False, monkeypatch, optimization, passes)
    fast.forward(x)
    plain.forward(x)
    assert _prepared_count(plain) == 0
    assert _unprepared(fast) == []
    assert _prepared_count(fast) >= (8 if blocked else 5)
    np.testing.assert_array_equal(fast.blob_by_name("y"), plain.blob_by_name("y"))
    ref = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(fast.blob_by_name("y"), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def _head_model():
    """BatchNormalization, a MatMul + Add over the last axis, Gemm and Softmax (the classifier heads'
    prepared kernels): X (N, 8, 4, 16) -> Y (N, 128)."""
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("scale", _w(8) + 1), ("bias", _w(8)), ("mean", _w(8)), ("var", np.abs(_w(8)) + 0.5),
        ("mm_w", _w(16, 48)), ("mm_b", _w(48)), ("fc_w", _w(128, 8 * 4 * 48)), ("fc_b", _w(128))]]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("MatMul", ["bn", "mm_w"], ["mm"]),  # + mm_b: MatMulAdd (A of rank 4)
             helper.make_node("Add", ["mm", "mm_b"], ["mmb"]),
             helper.make_node("Flatten", ["mmb"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], transB=1),
             helper.make_node("Softmax", ["fc"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 4, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_prepared_heads_give_the_plain_runs_bits(monkeypatch):
    model = _head_model()
    x = RNG.standard_normal((6, 8, 4, 16)).astype(np.float32)
    fast, plain = _net(model, True, monkeypatch), _net(model, False, monkeypatch)
    fast.forward(x)
    plain.forward(x)
    ran = {node.op_type for f, p, node in zip(fast.layout.run, fast.layout.plain, fast.layout.run_nodes) if f is not p}
    assert {"BatchNormalization", "MatMulAdd", "Flatten", "Gemm", "Softmax"} <= ran, ran
    assert _unprepared(fast) == []
    np.testing.assert_array_equal(fast.blob_by_name("y"), plain.blob_by_name("y"))
    np.testing.assert_allclose(fast.blob_by_name("y"), run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-6)


def test_prepared_calls_follow_reshapes(monkeypatch):
    model = _model()
    fast, plain = _net(model, True, monkeypatch), _net(model, False, monkeypatch)
    for shape in [(1, 3, 16, 16), (2, 3, 12, 10), (1, 3, 16, 16), (3, 3, 8, 24)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        fast.forward(x)
        plain.forward(x)
        np.testing.assert_array_equal(fast.blob_by_name("y"), plain.blob_by_name("y"))
        ref = run_ort(model, {"x": x})[0]
        np.testing.assert_allclose(fast.blob_by_name("y"), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_shared_input_reads_the_callers_array_with_prepared_calls(monkeypatch):
    model = _model(c_in=8)  # the stem reads X blocked: its LayoutTransform reads the caller's array
    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 0)
    net = _net(model, True, monkeypatch)
    x1, x2 = (RNG.standard_normal((1, 8, 12, 12)).astype(np.float32) for _ in range(2))
    net.forward(x1)
    y1 = net.blob_by_name("y").copy()
    net.forward({"x": x2}, share_inputs=True)
    y2 = net.blob_by_name("y").copy()
    np.testing.assert_allclose(y2, run_ort(model, {"x": x2})[0], rtol=1e-4, atol=1e-4 * np.abs(y2).max())
    assert not np.array_equal(y1, y2)
    net.forward()  # the input blob still holds x1: the prepared run is back
    np.testing.assert_array_equal(net.blob_by_name("y"), y1)


def test_bound_calls_the_specialization_dispatch_would_choose():
    from pooled_predictor.ops.cpu.compiled.epilogue import activate_inplace, gelu_erf_inplace

    y = np.linspace(-3, 3, 64, dtype=np.float32)
    want = y.copy()
    gelu_erf_inplace(want, np.float32(np.sqrt(2)))
    call = compiled.bound(gelu_erf_inplace, y, np.float32(np.sqrt(2)))
    assert isinstance(call, partial) and call.func is not gelu_erf_inplace  # numba's entry point, not dispatch
    call()
    np.testing.assert_array_equal(y, want)
    # arguments no specialization takes: left to the dispatcher, which raises at the call as before
    odd = compiled.bound(activate_inplace, np.zeros(4, np.int32), 0, np.float32(0), np.float32(0))
    assert odd.func is activate_inplace
    with pytest.raises(TypeError):
        odd()
    # a Python function: an ordinary partial
    out = []
    compiled.bound(out.append, 5)()
    assert out == [5]


def test_chain_runs_calls_in_order_and_skips_none():
    seen = []
    calls = compiled.chain(partial(seen.append, 1), None, partial(seen.append, 2))
    calls()
    assert seen == [1, 2]
    one = partial(seen.append, 3)
    assert compiled.chain(one, None) is one


def test_shared_input_swaps_only_the_readers_of_the_input(monkeypatch):
    """forward(share_inputs=True) binds the caller's array into the calls that read the input (layout.readers) and
    keeps every other node's prepared call; the Net's input blob is never written."""
    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 0)
    model = _model(c_in=8)
    net = _net(model, True, monkeypatch)
    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    net.forward(np.zeros_like(x))
    layout = net.layout
    readers = layout.readers["x"]
    assert readers == [j for j, node in enumerate(net.layout.run_nodes) if "x" in node.inputs]
    seen = []
    real = net_module.Net._run

    def spy(self, run):
        seen.append(list(run))
        return real(self, run)

    monkeypatch.setattr(net_module.Net, "_run", spy)
    net.forward({"x": x}, share_inputs=True)
    (run,) = seen
    assert all(run[j] is layout.run[j] for j in range(len(run)) if j not in readers)
    assert all(run[j] is not layout.run[j] for j in readers)
    assert layout.env is layout.blobs and not net.blob_by_name("x").any()  # restored; the blob never held x
    np.testing.assert_allclose(net.blob_by_name("y"), run_ort(model, {"x": x})[0], rtol=1e-4,
                               atol=1e-4 * np.abs(run_ort(model, {"x": x})[0]).max())


@pytest.mark.parametrize("layout", ["c", "strided", "small"])
def test_shared_inputs_read_large_inputs_in_place(layout, monkeypatch):
    """An input of at least SHARED_INPUT_MIN_BYTES, C-contiguous and of the blob's dtype, is read in place;
    a strided or a small one is copied in. Either way the bits of a plain forward."""
    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 4096 if layout != "small" else 1 << 30)
    model = _model(c_in=8)
    shared, copied = _net(model, True, monkeypatch), _net(model, True, monkeypatch)
    base = RNG.standard_normal((1, 8, 12, 24)).astype(np.float32)
    x = base[..., ::2] if layout == "strided" else np.ascontiguousarray(base[..., :12])
    shared.forward(np.zeros((1, 8, 12, 12), np.float32))
    shared.forward({"x": x}, share_inputs="large")
    copied.forward({"x": np.ascontiguousarray(x)})
    np.testing.assert_array_equal(shared.blob_by_name("y"), copied.blob_by_name("y"))
    assert shared.blob_by_name("x").any() == (layout != "c")  # read in place: the blob still holds zeros


def test_pool_reads_large_inputs_in_place_and_returns_inputs_asked_for(monkeypatch):
    """Through the pool: the same outputs as a plain forward, and an input asked for as an output comes
    back with the job's values (not the Net's input blob, which a shared run leaves alone)."""
    from pooled_predictor import Config, PooledPredictor

    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 4096)
    model = _model(c_in=8)
    want = _net(model, True, monkeypatch)
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=1)) as pool:
        for seed in range(3):
            x = np.random.default_rng(seed).standard_normal((1, 8, 12, 12)).astype(np.float32)
            got = pool.forward({"x": x}, output_names=["y", "x"]).result(timeout=60)
            want.forward({"x": x})
            np.testing.assert_array_equal(got["y"], want.blob_by_name("y"))
            np.testing.assert_array_equal(got["x"], x)
            assert got["x"] is not x


@pytest.mark.parametrize("share", [True, False])
def test_shared_inputs_reach_dynamic_nodes_and_their_outputs_stay(share, monkeypatch):
    """A node with a data-dependent shape (NonZero) looks its input up by name: it sees the caller's array,
    and what it stores stays readable after the call (a shared forward lost it before)."""
    monkeypatch.setattr(layout_module, "SHARED_INPUT_MIN_BYTES", 0)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["x"], ["nz"])], "dyn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                          [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    net = _net(model, True, monkeypatch)
    net.forward(np.zeros((3, 6), np.float32))
    x = RNG.standard_normal((3, 6)).astype(np.float32) * (RNG.random((3, 6)) > 0.5)
    net.forward({"x": x}, share_inputs="large" if share else False)
    assert net.layout.dynamic
    np.testing.assert_array_equal(net.blob_by_name("nz"), np.stack(np.nonzero(x)))
    np.testing.assert_array_equal(net.blob_by_name("r"), np.maximum(x, 0))


def test_numpy_kernels_prepared_as_bound_ufuncs(monkeypatch):
    """The kernels that are one numpy ufunc (Add, Sub, Mul, Neg, Abs, Tanh, Floor, Ceil, Round, Sign)
    and MatMul on its numpy path (both operands fed) run as the ufunc
    bound to their arrays (elementwise.prepared_ufunc), Cast between numbers as one bound copy, a small
    Relu, the Add of a bias and the Mul as bound compiled passes: prepared, with the plain run's bits,
    broadcasting included."""
    f = TensorProto.FLOAT
    w = numpy_helper.from_array(_w(8, 8), "w")
    b = numpy_helper.from_array(_w(1, 8), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("Sub", ["t", "x"], ["s"]),
             helper.make_node("Mul", ["s", "s"], ["p"]), helper.make_node("Neg", ["p"], ["n"]),
             helper.make_node("Abs", ["n"], ["ab"]), helper.make_node("Floor", ["ab"], ["fl"]),
             helper.make_node("Ceil", ["s"], ["ce"]), helper.make_node("Round", ["s"], ["ro"]),
             helper.make_node("Sign", ["s"], ["sg"]), helper.make_node("MatMul", ["y", "t"], ["yt"]),
             helper.make_node("Relu", ["s"], ["re"]), helper.make_node("Cast", ["s"], ["ci"], to=TensorProto.INT32),
             helper.make_node("Cast", ["ci"], ["cf"], to=TensorProto.FLOAT)]
    outs = ["fl", "ce", "ro", "sg", "yt", "re", "cf"]
    g = helper.make_graph(nodes, "ufuncs", [helper.make_tensor_value_info("x", f, [1, 8]),
                                            helper.make_tensor_value_info("y", f, [3, 1])],
                          [helper.make_tensor_value_info(o, f, None) for o in outs], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": (RNG.standard_normal((1, 8)) * 3).astype(np.float32),
             "y": RNG.standard_normal((3, 1)).astype(np.float32)}
    results = []
    for prepared in (True, False):
        net = _net(model, prepared, monkeypatch, passes=False)
        out = net.forward(feeds)
        results.append([np.array(out[o]) for o in outs])
        if prepared:
            assert _prepared_count(net) == len(nodes)
            # (the MatMul over the weight: matmul.py's compiled GEMV where compiled kernels are on)
            assert all(isinstance(f, partial) and isinstance(f.func, np.ufunc) for f, n in
                       zip(net.layout.run, net.layout.run_nodes)
                       if n.op_type not in ("Relu", "Cast", "Add", "Mul") and n.outputs[0] != "m")
            # Add of a bias row and Mul of one shape: the compiled passes (elementwise._prepared_rows) where
            # compiled kernels are on, a bound ufunc where not
            assert all(isinstance(f, partial) and (isinstance(f.func, np.ufunc) or getattr(f, "cres", None) is not None)
                       for f, n in zip(net.layout.run, net.layout.run_nodes) if n.op_type in ("Add", "Mul"))
    for a, b_ in zip(*results):
        np.testing.assert_array_equal(a, b_)
    for o, r in zip(outs, run_ort(model, feeds)):
        np.testing.assert_allclose(results[0][outs.index(o)], r, rtol=1e-6, atol=1e-6)
