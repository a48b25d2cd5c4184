"""Device arrays and DLPack at a Net's edges (engine/inputs.py, Layout.io_run), on the CPU.

numpy's own DLPack stands for a CPU producer; tests/cuda_stand_in.StandInDeviceArray for a CUDA
array (kDLCUDA: numpy cannot read it) and HostMemoryDevice for the GPU that adopts it. Every
output is compared with the CPU Net's; the counters say which copies ran (device to device in
place of host to device, none back to the host for device outputs).
"""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.engine import device as device_mod
from pooled_predictor.engine.inputs import InputSpec
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.program import Program
from pooled_predictor.errors import InputError
from pooled_predictor.importers import load_onnx
from tests.cuda_stand_in import HostMemoryDevice, StandInDeviceArray
from tests.test_cuda_placement import ALL_ON_DEVICE, X, _model, _reference

MODEL = _model().SerializeToString()


class CpuProducer:
    """A DLPack producer on the CPU that is not an ndarray (numpy's __dlpack__ behind it)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


@pytest.fixture
def gpu(monkeypatch):
    """device="cuda" is a stand-in GPU with every op of the model (graphs off unless a test turns them on)."""
    dev = HostMemoryDevice(ALL_ON_DEVICE | {"FusedConv"})
    monkeypatch.setattr(device_mod, "_CUDA", {0: dev})
    return dev


# ---- the CPU ------------------------------------------------------------------------------------
def test_a_cpu_dlpack_producer_is_read_without_a_copy():
    x = X.copy()
    checked = InputSpec(Program(load_onnx(_model())).inputs).check({"x": CpuProducer(x)})
    assert type(checked["x"]) is np.ndarray and np.shares_memory(checked["x"], x) and not checked.on_device
    p = Predictor(MODEL)
    np.testing.assert_allclose(p.forward({"x": CpuProducer(x)})["y"], _reference(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(p.forward(CpuProducer(x), ["y"])[0], _reference(), rtol=1e-6, atol=1e-7)
    with PooledPredictor(Config(model_bytes=[MODEL])) as pool:
        got = pool.forward({"x": CpuProducer(x)}).result(timeout=60)["y"]
    np.testing.assert_allclose(got, _reference(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bad, message", [(X.astype(np.float64), "expected dtype float32, got float64"),
                                          (X[0], "expected rank 4"), (X[:, :2], r"dimension 1 must be 3")])
def test_a_dlpack_producer_of_the_wrong_dtype_or_shape_is_the_same_input_error(bad, message):
    p = Predictor(MODEL)
    with pytest.raises(InputError, match=message) as as_numpy:
        p.forward({"x": bad})
    with pytest.raises(InputError, match=message) as as_dlpack:
        p.forward({"x": CpuProducer(np.ascontiguousarray(bad))})
    assert str(as_numpy.value) == str(as_dlpack.value)


def test_a_device_array_on_a_cpu_net_is_an_input_error_naming_the_fix():
    p = Predictor(MODEL)
    with pytest.raises(InputError, match=r"'x' is an array on CUDA device 0 .*runs on the CPU.*cupy.asnumpy"):
        p.forward({"x": StandInDeviceArray(X)})
    with PooledPredictor(Config(model_bytes=[MODEL])) as pool, pytest.raises(InputError, match="CUDA device 0"):
        pool.forward({"x": StandInDeviceArray(X)})  # at the call, in the caller's thread
    with pytest.raises(InputError, match="CUDA device 0"):
        p.get_input_handle("x").share_external_data(StandInDeviceArray(X))
    with pytest.raises(InputError, match="must be an array"):
        p.forward({"x": "not an array"})


def test_output_device_is_checked():
    with pytest.raises(ValueError, match="runs on the CPU"):
        Predictor(MODEL, output_device="cuda")
    with pytest.raises(InputError, match=r"output_device='cuda'.*runs on the CPU"):
        Predictor(MODEL).forward({"x": X}, output_device="cuda")
    with pytest.raises(ValueError, match="output_device"):
        Config(model_bytes=[MODEL], output_device="cuda").validate()
    assert Predictor(MODEL).forward({"x": X}, ["y"], output_device="cpu")[0].shape == (1, 4, 8, 8)


# ---- a device (the stand-in) ----------------------------------------------------------------------
def _net(dev, **kw):
    return Net(Program(load_onnx(_model()), "cuda"), device=dev, optimization=Optimization.MEMORY, **kw)


def test_device_inputs_are_copied_device_to_device_and_outputs_stay_on_the_device():
    dev = HostMemoryDevice(ALL_ON_DEVICE)
    net = _net(dev)
    y = net.forward({"x": StandInDeviceArray(X)}, output_device="cuda")["y"]
    np.testing.assert_allclose(y, _reference(), rtol=1e-6, atol=1e-7)
    assert np.shares_memory(y, net.layout.arena)  # the Net's own device blob, not a host copy
    assert dev.device_copies == 1 and dev.to_device_calls == 0 and dev.to_host_calls == 0 and dev.syncs >= 1
    np.testing.assert_array_equal(net.blob_by_name("x"), X)  # the input reads back from the device
    # host in, host out again: the staging path
    np.testing.assert_allclose(net.forward({"x": 2 * X})["y"], net.forward({"x": 2 * X})["y"])
    assert dev.to_device_calls == 2 and dev.to_host_calls == 2 and dev.device_copies == 1
    np.testing.assert_array_equal(net.blob_by_name("x"), 2 * X)
    with pytest.raises(InputError, match="`out` takes host arrays"):
        net.forward({"x": X}, out=[np.empty((1, 4, 8, 8), np.float32)], outputs=["y"], output_device="cuda")


def test_a_device_input_read_by_a_host_node_is_copied_to_its_host_blob():
    dev = HostMemoryDevice({"Relu", "Softmax", "Mul"})  # the Conv, which reads x, runs on the host
    net = _net(dev)
    y = net.forward({"x": StandInDeviceArray(X)})["y"]
    np.testing.assert_allclose(y, _reference(), rtol=1e-6, atol=1e-7)
    assert dev.device_copies == 0 and dev.to_host_calls == 2  # x to its host blob, y back


def test_a_captured_graph_replays_for_device_and_host_edges_alike():
    dev = HostMemoryDevice(ALL_ON_DEVICE, graphs=True)
    net = _net(dev)
    cpu = Net(Program(load_onnx(_model())), optimization=Optimization.MEMORY)
    for i, (device_in, device_out) in enumerate([(True, True), (True, False), (False, True), (False, False),
                                                 (True, True)]):
        x = X * (i + 1)
        got = net.forward({"x": StandInDeviceArray(x) if device_in else x},
                          output_device="cuda" if device_out else None)["y"]
        np.testing.assert_allclose(got, cpu.forward({"x": x})["y"], rtol=1e-6, atol=1e-7)
    assert dev.captures == 1 and dev.replays == 4  # one graph (run[head:tail]) for every kind of edge
    assert net.layout.run_nodes[net.layout.head - 1].inputs == ["x"]


def test_an_input_fed_on_the_device_comes_back_without_a_trip_through_the_host(gpu):
    """Every readable blob on the device (output_names None) includes the input: the caller's device array is
    cloned on the device, not copied to the host and uploaded again (19 MB each way for ResNet-50 at batch 32:
    6 ms of its 19.5 ms forward on the H200)."""
    p = Predictor(MODEL, device="cuda")
    p.forward({"x": X})
    before = (gpu.uploads, gpu.to_host_calls, gpu.to_device_calls)
    every = p.forward({"x": StandInDeviceArray(X)}, output_device="cuda")
    assert (gpu.uploads, gpu.to_host_calls, gpu.to_device_calls) == before
    np.testing.assert_array_equal(every["x"].get(), X)
    np.testing.assert_allclose(every["y"].get(), _reference(), rtol=1e-6, atol=1e-7)


def test_a_predictor_returns_device_copies_on_request(gpu):
    p = Predictor(MODEL, device="cuda")
    got = p.forward({"x": StandInDeviceArray(X)}, ["y"], output_device="cuda")[0]
    assert isinstance(got, StandInDeviceArray) and gpu.clones == 1
    np.testing.assert_allclose(got.get(), _reference(), rtol=1e-6, atol=1e-7)
    assert not np.shares_memory(got.storage, p.net().layout.arena)  # a copy: valid after the next forward
    every = p.forward({"x": X}, output_device="cuda")
    assert set(every) >= {"x", "y"} and all(isinstance(a, StandInDeviceArray) for a in every.values())
    np.testing.assert_array_equal(every["x"].get(), X)
    on_device = Predictor(MODEL, device="cuda", output_device="cuda")
    assert type(on_device.forward({"x": X}, ["y"], output_device="cpu")[0]) is np.ndarray
    assert isinstance(on_device.forward({"x": X}, ["y"])[0], StandInDeviceArray)  # the Predictor's default
    assert type(on_device.run(None, {"x": X})[0]) is np.ndarray  # onnxruntime's run(): numpy


def test_pool_jobs_take_device_arrays_and_return_device_outputs(gpu):
    gpu.supports_graphs = True
    config = Config(model_bytes=[MODEL], device="cuda", output_device="cuda", max_batch_size=4, num_threads=1)
    with PooledPredictor(config) as pool:
        futures = [pool.forward({"x": StandInDeviceArray(X * (i + 1))}) for i in range(3)]
        futures.append(pool.forward({"x": X}, output_device="cpu"))
        results = [f.result(timeout=60)["y"] for f in futures]
    for i, y in enumerate(results[:3]):
        assert isinstance(y, StandInDeviceArray)
        np.testing.assert_allclose(y.get(), Predictor(MODEL).forward({"x": X * (i + 1)})["y"], rtol=1e-5, atol=1e-6)
    assert type(results[3]) is np.ndarray
    np.testing.assert_allclose(results[3], _reference(), rtol=1e-6, atol=1e-7)
    # each device job's Net stream waited for the mark recorded in the caller's thread at submit
    assert gpu.records == 3 and len(gpu.waited) == 3 and gpu.device_copies == 3


def test_paddle_handles_share_device_arrays_on_a_device_predictor(gpu):
    p = Predictor(MODEL, device="cuda")
    h = p.get_input_handle("x")
    with pytest.raises(InputError, match="copy_from_cpu takes a host array"):
        h.copy_from_cpu(StandInDeviceArray(X))
    h.share_external_data(StandInDeviceArray(X))
    assert h.shape() == [1, 3, 8, 8]
    p.run()
    np.testing.assert_allclose(p.get_output_handle("y").copy_to_cpu(), _reference(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(h.copy_to_cpu(), X)
    assert gpu.device_copies == 1
    h.copy_from_cpu(CpuProducer(X * 2))
    p.run()
    np.testing.assert_allclose(p.get_output_handle("y").copy_to_cpu(), Predictor(MODEL).forward({"x": X * 2})["y"],
                               rtol=1e-6, atol=1e-7)
