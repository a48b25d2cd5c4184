"""Device placement on the CPU: which nodes run on a device, the io_copy steps between, the two arenas,
the weights placed once per device, the staging buffers, and the typed errors without a GPU.

The device is tests/cuda_stand_in.HostMemoryDevice (numpy memory, the CPU's kernels for the ops a
test declares), so every output is checked against the CPU Net's; the real CUDA coverage's placement
(which registered kernel supports which node) is checked through the registry, with no GPU.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Callback, Config, PooledPredictor, Predictor
from pooled_predictor.engine import device as device_mod
from pooled_predictor.engine.device import DeviceWithHost, GraphCache, get_device, worker_devices
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.placement import IO_COPY_OP
from pooled_predictor.engine.program import Program
from pooled_predictor.errors import UnsupportedOpError
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cuda import runtime as cuda_runtime
from tests.cuda_stand_in import HostMemoryDevice

RNG = np.random.default_rng(7)


def _build_model():
    """x (1, 3, 8, 8) -> Conv(w, b) -> Relu -> Softmax(axis 1) -> Mul(scale) -> y; also z = Relu out."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    s = np.float32(0.5).reshape(1)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["sm"], axis=1, name="softmax"),
             helper.make_node("Mul", ["sm", "s"], ["y"], name="mul")]
    graph = helper.make_graph(nodes, "placement", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 8, 8))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                               numpy_helper.from_array(s, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


MODEL = _build_model()
X = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)


def _model():
    return MODEL


def _reference():
    net = Net(Program(load_onnx(_model())), optimization=Optimization.MEMORY)
    return np.array(net.forward({"x": X})["y"])


@pytest.fixture(scope="module")
def program():
    return Program(load_onnx(_model()), "cuda")


def _ops(net):
    return [(n.op_type, n.inputs[0] if n.inputs else "") for n in net.layout.run_nodes]


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_nodes_without_a_device_kernel_run_on_the_host_behind_io_copies(program, optimization):
    dev = HostMemoryDevice({"Conv", "Relu", "Mul"})  # Softmax: "no device kernel"
    net = Net(program, device=dev, optimization=optimization)
    y = net.forward({"x": X})["y"]
    np.testing.assert_allclose(y, _reference(), rtol=1e-6, atol=1e-7)
    assert _ops(net) == [(IO_COPY_OP, "x"), ("Conv", "x@cuda"), ("Relu", "c@cuda"), (IO_COPY_OP, "r@cuda"),
                         ("Softmax", "r"), (IO_COPY_OP, "sm"), ("Mul", "sm@cuda"), (IO_COPY_OP, "y@cuda")]
    assert net.layout.device_nodes == {"conv", "relu", "mul"}
    assert dev.to_device_calls == 2 and dev.to_host_calls == 2  # one forward: x and sm in; r and y out


def test_everything_on_the_device_copies_only_at_the_edges(program):
    dev = HostMemoryDevice({"Conv", "Relu", "Softmax", "Mul"})
    net = Net(program, device=dev, optimization=Optimization.MEMORY)
    np.testing.assert_allclose(net.forward({"x": X})["y"], _reference(), rtol=1e-6, atol=1e-7)
    copies = [n for n in net.layout.run_nodes if n.op_type == IO_COPY_OP]
    assert [(c.inputs[0], c.outputs[0]) for c in copies] == [("x", "x@cuda"), ("y@cuda", "y")]


@pytest.mark.parametrize("optimization", [Optimization.MEMORY, Optimization.NONE])
def test_the_device_copies_of_the_weights_are_not_blobs_of_the_model(program, optimization):
    """blob_names of a device Net are the CPU Net's: w@cuda is the device's copy of w, not a blob (found on the
    H200: Predictor.forward() with no names copied every weight back, 100 MB a forward for ResNet-50)."""
    dev = HostMemoryDevice({"Conv", "Relu", "Softmax", "Mul"})
    net = Net(program, device=dev, optimization=optimization)
    net.forward({"x": X})
    cpu = Net(Program(load_onnx(_model())), optimization=optimization)
    cpu.forward({"x": X})
    assert any(n.endswith("@cuda") for n in net.layout.blobs)  # the device holds w@cuda, b@cuda, ...
    assert sorted(net.blob_names) == sorted(cpu.blob_names)


def test_nothing_on_the_device_is_the_host_layout(program):
    dev = HostMemoryDevice(set())
    net = Net(program, device=dev, optimization=Optimization.MEMORY)
    np.testing.assert_allclose(net.forward({"x": X})["y"], _reference(), rtol=1e-6, atol=1e-7)
    assert not any(n.op_type == IO_COPY_OP for n in net.layout.run_nodes)
    assert dev.uploads == 0 and not dev.arenas and net.layout.host_arena is None


def test_each_side_has_its_arena_planned_at_the_lower_bound(program):
    dev = HostMemoryDevice({"Conv", "Relu", "Mul"})
    net = Net(program, device=dev, optimization=Optimization.MEMORY)
    net.forward({"x": X})
    layout = net.layout
    device_plan, host_plan = layout.plan, layout.host_plan
    assert set(device_plan.offsets) >= {"x@cuda", "c@cuda", "r@cuda", "sm@cuda", "y@cuda"}
    assert not any("@" in v for v in host_plan.offsets) and {"x", "r", "sm", "y"} <= set(host_plan.offsets)
    # memory_opt's plan of the device values: at the liveness lower bound but for the 64-byte alignment
    assert device_plan.lower_bound_bytes <= device_plan.arena_bytes < device_plan.lower_bound_bytes + 64 * len(
        device_plan.offsets)
    assert layout.arena is dev.arenas[-1] and layout.host_arena is dev.host_arenas[-1]
    assert layout.arena.nbytes >= device_plan.arena_bytes
    # blobs live in their side's arena: graph inputs and outputs in the host one (the staging)
    assert np.shares_memory(layout.blobs["x"], layout.host_arena) and np.shares_memory(layout.blobs["y"], layout.host_arena)
    assert np.shares_memory(layout.blobs["c@cuda"], layout.arena)
    assert not np.shares_memory(layout.blobs["c@cuda"], layout.host_arena)


def test_weights_are_placed_once_per_device_and_shared(program):
    dev = HostMemoryDevice({"Conv", "Relu", "Mul"})
    nets = [Net(program, device=dev, optimization=Optimization.MEMORY) for _ in range(3)]
    for net in nets:
        net.forward({"x": X})
    assert dev.uploads == len(program.weights)  # w, b, s: once, whatever the number of Nets
    assert nets[0].layout.blobs["w@cuda"] is nets[2].layout.blobs["w@cuda"]
    assert not nets[0].layout.blobs["w@cuda"].flags.writeable
    # every Net (a pool worker's) has its own host staging arena
    assert len({id(n.layout.host_arena) for n in nets}) == 3


def test_a_programs_device_weights_go_with_it():
    """The device's weight cache holds a Program's weights only while the Program lives (it kept them for
    the process's life: a server unloading models leaked their GPU memory), and threads laying out Nets
    of one Program at once upload its weights once."""
    import gc

    dev = HostMemoryDevice({"Conv", "Relu", "Mul"})
    prog = Program(load_onnx(_model()), "cuda")
    barrier = threading.Barrier(4)

    def lay_out():
        barrier.wait()
        Net(prog, device=dev, optimization=Optimization.MEMORY).forward({"x": X})

    threads = [threading.Thread(target=lay_out) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dev.uploads == len(prog.weights) and len(dev._weights) == 1
    del prog
    gc.collect()
    assert len(dev._weights) == 0


def test_a_device_only_value_reads_back_through_the_device():
    model = _model()
    prog = Program(load_onnx(model), "cuda")
    dev = HostMemoryDevice({"Conv", "Relu", "Softmax", "Mul"})
    net = Net(prog, device=dev, optimization=Optimization.NONE)
    net.forward({"x": X})
    cpu = Net(Program(load_onnx(model)), optimization=Optimization.NONE)
    cpu.forward({"x": X})
    np.testing.assert_allclose(net.blob_by_name("r"), cpu.blob_by_name("r"), rtol=1e-6)
    assert "r@cuda" not in net.blob_names and "r" in net.blob_names


def test_inputs_of_data_dependent_nodes_come_back_to_the_host():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("NonZero", ["r"], ["nz"], name="nz")]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 5))],
                              [helper.make_tensor_value_info("nz", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    dev = HostMemoryDevice({"Relu", "NonZero"})
    net = Net(Program(load_onnx(model), "cuda"), device=dev, optimization=Optimization.MEMORY)
    np.testing.assert_array_equal(net.forward({"x": x})["nz"], np.array(np.nonzero(np.maximum(x, 0))))
    assert [n.op_type for n in net.layout.run_nodes] == [IO_COPY_OP, "Relu", IO_COPY_OP, "NonZero"]


class _Registry(DeviceWithHost):
    """The real CUDA coverage's placement decisions (kernel_for through the registry), no GPU needed."""

    name = "cuda"


@pytest.mark.parametrize("op, dtype, on_device", [
    ("Relu", np.float32, True),      # a CUDA kernel, supported
    ("Relu", np.float64, False),     # the CUDA kernel is float32 only: supports() says no
    ("Softmax", np.float32, True),
    ("TopK", np.float32, False),     # no CUDA kernel at all
])
def test_the_cuda_registry_places_what_it_supports(op, dtype, on_device):
    from pooled_predictor.ops.context import OpContext
    from pooled_predictor.ops.registry import find
    from pooled_predictor.ir import Node
    from pooled_predictor.ops.shapes import get_rule
    from pooled_predictor.ops.step import Step

    node = Node(op, ["x", "k"] if op == "TopK" else ["x"], ["y", "i"] if op == "TopK" else ["y"], {}, "", "n")
    cpu = find(op, "", 17, "cpu")
    step = Step(node, cpu, 17 if op != "TopK" else 11, get_rule(op, ""))
    shapes = [(2, 8)] + ([(1,)] if op == "TopK" else [])
    dtypes = [np.dtype(dtype)] + ([np.dtype(np.int64)] if op == "TopK" else [])
    values = [None] + ([np.array([3], np.int64)] if op == "TopK" else [])
    ctx = OpContext(node, step.version, shapes, dtypes, values)
    step.infer(ctx)
    k = _Registry().kernel_for(step, ctx)
    assert (k is not None) == on_device
    if on_device:
        assert k.device == "cuda"


def test_the_cuda_coverage_is_registered_without_cupy():
    from pooled_predictor.ops.registry import registered_ops

    ops = {k.op_type for k in registered_ops("cuda")}
    for family in ("Conv", "FusedConv", "FusedConvDepthwise", "Gemm", "MatMul", "Relu", "Add", "MaxPool",
                   "GlobalAveragePool", "Softmax", "LayerNormalization", "BatchNormalization", "Transpose", "Concat",
                   "Slice", "Gather", "Pad", "Resize", "ReduceMean"):
        assert family in ops


# ---- errors without CuPy or a GPU ---------------------------------------------------------------------
@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "unavailable", lambda: "CuPy is not installed (pip install "
                                                              "'pooled-predictor[gpu]': cupy-cuda13x, nvmath-python)")
    monkeypatch.setattr(device_mod, "_CUDA", {})


def test_cuda_without_cupy_is_a_typed_error_naming_it(no_gpu):
    with pytest.raises(UnsupportedOpError, match=r"device 'cuda': CuPy is not installed.*\[gpu\]"):
        get_device("cuda")
    with pytest.raises(UnsupportedOpError, match="CuPy is not installed"):
        get_device("cuda:1")


def test_a_predictor_on_cuda_without_a_gpu_fails_at_construction(no_gpu):
    with pytest.raises(UnsupportedOpError, match="CuPy is not installed"):
        Predictor(_model().SerializeToString(), device="cuda")


def test_a_pool_on_cuda_without_a_gpu_fails_at_construction(no_gpu):
    with pytest.raises(UnsupportedOpError, match="CuPy is not installed"):
        PooledPredictor(Config(model_bytes=[_model().SerializeToString()], device="cuda"))


@pytest.mark.skipif(cuda_runtime.unavailable() is None, reason="a GPU is here")
def test_this_machine_without_a_gpu_says_what_is_missing():
    with pytest.raises(UnsupportedOpError, match="device 'cuda': CuPy"):
        get_device("cuda")


def test_unknown_devices():
    with pytest.raises(UnsupportedOpError, match="unknown device"):
        get_device("tpu")
    with pytest.raises(UnsupportedOpError, match="cuda:<n>"):
        get_device("cuda:x")


# ---- workers -> devices; the graph cache -------------------------------------------------------------
def test_worker_i_runs_on_device_i_mod_n():
    assert worker_devices(5, [0, 1]) == [0, 1, 0, 1, 0]
    assert worker_devices(3, [2]) == [2, 2, 2]
    with pytest.raises(ValueError):
        worker_devices(2, [])
    with pytest.raises(ValueError):
        worker_devices(2, [-1])


def test_graphs_are_captured_on_the_second_sight_and_kept_in_a_bounded_lru():
    captured, released = [], []
    cache = GraphCache(2, capture=lambda key: captured.append(key) or f"graph{len(captured)}", release=released.append)
    a, b, c = (GraphCache.key(0, {"x": (n, 3)}) for n in (1, 2, 3))
    assert cache.get(a) is None and not captured  # seen once: eager
    assert cache.get(a) == "graph1" and captured == [a]
    assert cache.get(a) == "graph1" and cache.hits == 1
    assert cache.get(b) is None and cache.get(b) == "graph2"
    cache.get(a)  # a is now the most recent
    assert cache.get(c) is None and cache.get(c) == "graph3"
    assert released == ["graph2"] and len(cache) == 2 and cache.evictions == 1  # b, the least recent, went
    cache.clear()
    assert released == ["graph2", "graph1", "graph3"] or sorted(released) == ["graph1", "graph2", "graph3"]
    assert len(GraphCache(0, capture=lambda k: 1).__dict__["_graphs"]) == 0


def test_a_disabled_graph_cache_never_captures():
    cache = GraphCache(0, capture=lambda key: pytest.fail("captured"))
    key = GraphCache.key(1, {"x": (1,)})
    assert cache.get(key) is None and cache.get(key) is None


def test_graph_keys_name_the_net_and_the_input_shapes():
    assert GraphCache.key(0, {"x": [1, 3]}) == (0, (("x", (1, 3)),))
    assert GraphCache.key(0, {"x": (1, 3)}) != GraphCache.key(1, {"x": (1, 3)})


# ---- the pool over several devices -------------------------------------------------------------------
class _RecordingDevice(HostMemoryDevice):
    """A stand-in GPU that also records which threads entered its worker context."""

    def __init__(self, ordinal, ops):
        super().__init__(ops)
        self.ordinal = ordinal
        self.worker_threads = []

    def worker_context(self):
        self.worker_threads.append(threading.current_thread().name)
        return contextlib.nullcontext()


def test_pool_workers_spread_over_devices_and_share_weights_per_device(monkeypatch):
    devs = {0: _RecordingDevice(0, {"Conv", "Relu", "Mul"}), 1: _RecordingDevice(1, {"Conv", "Relu", "Mul"})}
    monkeypatch.setattr(device_mod, "_CUDA", devs)
    gate, held = threading.Event(), []

    class Hold(Callback):  # each worker stays busy after its job until the gate opens
        def on_job_processed(self, process_time_ms):
            held.append(threading.current_thread().name)
            gate.wait(60)

    config = Config(model_bytes=[_model().SerializeToString()], device="cuda", devices=[0, 1], num_threads=4)
    pool = PooledPredictor(config, callback=Hold())
    try:
        futures = []
        for i in range(4):  # a job submitted while no worker is idle starts the next worker
            futures.append(pool.forward({"x": X}))
            deadline = time.monotonic() + 60
            while len(held) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.001)
        gate.set()
        results = [f.result(timeout=60)["y"] for f in futures]
    finally:
        gate.set()
        pool.close()
    for y in results:
        np.testing.assert_allclose(y, _reference(), rtol=1e-6, atol=1e-7)
    assert sorted(held) == [f"pooled-predictor-{i}" for i in range(4)]
    # worker i on device i % 2, each in its device's worker context
    assert sorted(devs[0].worker_threads) == ["pooled-predictor-0", "pooled-predictor-2"]
    assert sorted(devs[1].worker_threads) == ["pooled-predictor-1", "pooled-predictor-3"]
    for dev in devs.values():
        assert dev.uploads == 3  # w, b and s placed once on each device, shared by its Nets
        assert len(dev.arenas) >= 2  # one device arena per worker Net on it


def test_devices_need_a_cuda_device_and_valid_ordinals():
    model = [_model().SerializeToString()]
    with pytest.raises(ValueError, match="needs device 'cuda'"):
        Config(model_bytes=model, devices=[0]).validate()
    for bad in ([-1], [0.5], [True]):
        with pytest.raises(ValueError, match="GPU ordinals"):
            Config(model_bytes=model, device="cuda", devices=bad).validate()
    assert Config(model_bytes=model, device="cuda", devices=[1, 3]).worker_device(2) == "cuda:1"
    assert Config(model_bytes=model, device="cuda", devices=[1, 3]).worker_device(1) == "cuda:3"
    assert Config(model_bytes=model, device="cuda").worker_device(5) is None


def test_a_missing_gpu_ordinal_is_a_typed_error(monkeypatch):
    class FakeRuntime:
        @staticmethod
        def getDeviceCount():
            return 1

    class FakeCupy:
        class cuda:
            runtime = FakeRuntime

    monkeypatch.setattr(cuda_runtime, "unavailable", lambda: None)
    monkeypatch.setattr(cuda_runtime, "cupy", FakeCupy, raising=False)
    monkeypatch.setattr(device_mod, "_CUDA", {})
    with pytest.raises(UnsupportedOpError, match=r"cuda:2.*1 GPU\(s\)"):
        get_device("cuda:2")


# ---- CUDA graphs: capture on the second run, replay after (stand-in: capture records, replay runs) ----
ALL_ON_DEVICE = {"Conv", "Relu", "Softmax", "Mul"}


def _batch_model():
    """_model with a free batch dimension, so that several input shapes (layouts) exist."""
    model = _model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model


def test_a_layout_wholly_on_the_device_is_captured_on_its_second_run_then_replayed():
    dev = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    net = Net(Program(load_onnx(_model()), "cuda"), device=dev, optimization=Optimization.MEMORY)
    ref = _reference()
    for i in range(4):
        x = X * (i + 1)
        got = net.forward({"x": x})["y"]
        want = Net(Program(load_onnx(_model())), optimization=Optimization.MEMORY).forward({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(net.forward({"x": X})["y"], ref, rtol=1e-6, atol=1e-7)
    assert dev.captures == 1 and dev.replays == 4  # run 1 eager, run 2 captured and replayed, 3-5 replayed
    assert net.layout.graphable is True


def test_a_host_node_in_the_run_keeps_it_eager():
    dev = HostMemoryDevice({"Conv", "Relu", "Mul"}, graphs=True)  # Softmax on the host
    net = Net(Program(load_onnx(_model()), "cuda"), device=dev, optimization=Optimization.MEMORY)
    for _ in range(3):
        np.testing.assert_allclose(net.forward({"x": X})["y"], _reference(), rtol=1e-6, atol=1e-7)
    assert dev.captures == 0 and dev.replays == 0 and net.layout.graphable is False


def test_graphs_off_profiling_or_a_failed_capture_run_eagerly(caplog):
    program = Program(load_onnx(_model()), "cuda")
    off = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    net = Net(program, device=off, optimization=Optimization.MEMORY, cuda_graphs=0)
    for _ in range(3):
        net.forward({"x": X})
    assert net.graphs is None and off.captures == 0

    failing = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    failing.fail_capture = RuntimeError("operation not permitted when stream is capturing")
    net = Net(program, device=failing, optimization=Optimization.MEMORY)
    for _ in range(4):
        np.testing.assert_allclose(net.forward({"x": X})["y"], _reference(), rtol=1e-6, atol=1e-7)
    assert net.layout.graphable is False and failing.replays == 0
    assert sum("capture failed" in r.message for r in caplog.records) == 1  # said once, then eager

    from pooled_predictor.engine.profiling import Profiler

    profiled = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    net = Net(program, device=profiled, optimization=Optimization.MEMORY)
    net.enable_profiling(Profiler())
    for _ in range(3):
        net.forward({"x": X})
    assert profiled.captures == 0  # per-node times need the eager run


def test_graphs_are_kept_per_layout_in_a_bounded_lru():
    dev = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    program = Program(load_onnx(_batch_model()), "cuda")
    net = Net(program, device=dev, optimization=Optimization.MEMORY, cuda_graphs=2)
    cpu = Net(Program(load_onnx(_batch_model())), optimization=Optimization.MEMORY)
    xs = {n: RNG.standard_normal((n, 3, 8, 8)).astype(np.float32) for n in (1, 2, 3)}
    for n in (1, 1, 2, 2, 3, 3, 1, 1):  # each shape captured on its second run; 3 evicts 1
        np.testing.assert_allclose(net.forward({"x": xs[n]})["y"], cpu.forward({"x": xs[n]})["y"],
                                   rtol=1e-6, atol=1e-7)
    assert len(net.graphs) == 2 and net.graphs.evictions >= 1
    assert dev.captures == 4  # 1, 2, 3, then 1 again after its eviction


def test_pool_jobs_on_a_device_go_through_the_staging_blobs_and_replay_graphs(monkeypatch):
    """The pool reads large inputs in place on the host (share_inputs="large"); on a device they are
    staged instead, so the captured graph, which reads the staging blob, replays for them too."""
    dev = HostMemoryDevice(ALL_ON_DEVICE | {"FusedConv"}, graphs=True)  # the passes fuse Conv + Relu
    monkeypatch.setattr(device_mod, "_CUDA", {0: dev})
    big = RNG.standard_normal((1, 3, 320, 320)).astype(np.float32)  # over SHARED_INPUT_MIN_BYTES (1 MiB)
    model = _model()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 320
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 320
    cpu = Predictor(model.SerializeToString())
    pool = PooledPredictor(Config(model_bytes=[model.SerializeToString()], device="cuda", num_threads=1))
    try:
        for i in range(4):
            x = big * (i + 1)
            got = pool.forward({"x": x}).result(timeout=60)["y"]
            np.testing.assert_allclose(got, cpu.forward({"x": x})["y"], rtol=1e-6, atol=1e-7)
    finally:
        pool.close()
    assert dev.captures == 1 and dev.replays == 3
