"""CuPy arrays and CUDA DLPack producers at a GPU Net's edges, against the CPU (engine/inputs.py,
Layout.io_run): inputs copied GPU to GPU, outputs returned as CuPy arrays, CUDA graphs replayed for
device edges, pool jobs ordered after the caller's stream."""

from __future__ import annotations

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.errors import InputError
from tests.onnx_helpers import assert_close
from tests.test_cuda_placement import _model

cp = pytest.importorskip("cupy")
RNG = np.random.default_rng(5)
MODEL = _model().SerializeToString()
X = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)


def _ref(x):
    return Predictor(MODEL).forward({"x": np.asarray(x)}, ["y"])[0]


def test_cupy_inputs_and_device_outputs_match_the_cpu():
    p = Predictor(MODEL, device="cuda")
    got = p.forward({"x": cp.asarray(X)}, ["y"], output_device="cuda")[0]
    assert isinstance(got, cp.ndarray) and got.device.id == 0
    assert_close(cp.asnumpy(got), _ref(X), 1e-4, "y (device)")
    host = p.forward({"x": cp.asarray(X)}, ["y"])[0]
    assert type(host) is np.ndarray
    assert_close(host, _ref(X), 1e-4, "y (host)")
    np.testing.assert_array_equal(p.net().blob_by_name("x"), X)  # read back from the device blob


def test_a_strided_cupy_input_is_read_through_its_strides():
    big = cp.asarray(RNG.standard_normal((1, 8, 3, 8)).astype(np.float32))
    x = big.transpose(0, 2, 3, 1)  # (1, 3, 8, 8), not contiguous
    got = Predictor(MODEL, device="cuda").forward({"x": x}, ["y"])[0]
    assert_close(got, _ref(cp.asnumpy(x)), 1e-4, "y")


def test_wrong_dtype_or_shape_from_cupy_is_an_input_error():
    p = Predictor(MODEL, device="cuda")
    with pytest.raises(InputError, match="expected dtype float32, got float64"):
        p.forward({"x": cp.asarray(X, dtype=cp.float64)})
    with pytest.raises(InputError, match="dimension 1 must be 3"):
        p.forward({"x": cp.asarray(X[:, :2])})


def test_a_cupy_array_on_a_cpu_predictor_is_an_input_error():
    with pytest.raises(InputError, match="CUDA device 0.*runs on the CPU"):
        Predictor(MODEL).forward({"x": cp.asarray(X)})


def test_graphs_replay_for_cupy_inputs_on_a_stream_of_its_own():
    p = Predictor(MODEL, device="cuda")
    with cp.cuda.Stream(non_blocking=True):
        for i in range(4):
            x = X * (i + 1)
            got = p.forward({"x": cp.asarray(x)}, ["y"], output_device="cuda")[0]
            assert_close(cp.asnumpy(got), _ref(x), 1e-4, f"run {i}")
    assert p.net().graphs.hits >= 2


def test_pool_jobs_with_cupy_inputs_on_worker_streams():
    config = Config(model_bytes=[MODEL], device="cuda", num_threads=2, output_device="cuda")
    xs = [X * (i + 1) for i in range(8)]
    with PooledPredictor(config) as pool:
        futures = [pool.forward({"x": cp.asarray(x)}) for x in xs]
        results = [f.result(timeout=120)["y"] for f in futures]
    for x, y in zip(xs, results):
        assert isinstance(y, cp.ndarray)
        assert_close(cp.asnumpy(y), _ref(x), 1e-4, "pool y")


def test_a_torch_cuda_tensor_goes_in_through_dlpack():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.from_numpy(X).cuda()
    got = Predictor(MODEL, device="cuda").forward({"x": t}, ["y"], output_device="cuda")[0]
    assert_close(cp.asnumpy(got), _ref(X), 1e-4, "y")
    assert torch.from_dlpack(got).is_cuda  # and the output goes back out the same way


def test_paddle_share_external_data_of_a_cupy_array():
    p = Predictor(MODEL, device="cuda")
    p.get_input_handle("x").share_external_data(cp.asarray(X))
    p.run()
    assert_close(p.get_output_handle("y").copy_to_cpu(), _ref(X), 1e-4, "y")
