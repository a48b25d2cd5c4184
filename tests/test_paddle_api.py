"""Paddle Inference's handle API, used as Paddle's documentation shows it (paddle.inference Python API)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pooled_predictor import Config, InputError, Optimization, PooledPredictor, Predictor, UnknownBlobError
from tests.conftest import make_mlp, mlp_reference

MODEL = make_mlp()
X = np.random.default_rng(11).standard_normal((3, 16)).astype(np.float32)


def test_paddle_walkthrough_copy_from_cpu():
    predictor = Predictor(MODEL)
    input_names = predictor.get_input_names()
    input_tensor = predictor.get_input_handle(input_names[0])
    input_tensor.reshape(X.shape)
    input_tensor.copy_from_cpu(X)
    assert input_tensor.shape() == [3, 16] and input_tensor.name() == "x" and input_tensor.type() == np.float32
    predictor.run()
    output_names = predictor.get_output_names()
    output_tensor = predictor.get_output_handle(output_names[0])
    output_data = output_tensor.copy_to_cpu()
    np.testing.assert_allclose(output_data, mlp_reference(MODEL, X), rtol=1e-5, atol=1e-6)
    assert output_tensor.shape() == [3, 10]
    # copy_from_cpu copied: changing the caller's array afterwards changes nothing
    x = X.copy()
    input_tensor.copy_from_cpu(x)
    x[:] = 0
    predictor.run()
    np.testing.assert_array_equal(output_tensor.copy_to_cpu(), output_data)


def test_share_external_data_is_read_in_place_not_copied():
    predictor = Predictor(MODEL, optimization=Optimization.NONE)
    x = X.copy()
    handle = predictor.get_input_handle("x")
    handle.share_external_data(x)
    predictor.run()
    first = predictor.get_output_handle("y").copy_to_cpu()
    np.testing.assert_allclose(first, mlp_reference(MODEL, X), rtol=1e-5, atol=1e-6)
    # The Net's own input blob was never written: fill it with NaN and run again on the shared buffer.
    net = predictor.net()
    net.blob_by_name("x")[...] = np.nan
    x[:] = X[::-1]  # the caller changes its buffer in place: the next run reads the new values
    predictor.run()
    np.testing.assert_allclose(predictor.get_output_handle("y").copy_to_cpu(), mlp_reference(MODEL, X[::-1].copy()),
                               rtol=1e-5, atol=1e-6)
    assert np.isnan(net.blob_by_name("x")).all()  # still NaN: the input was read from `x`, not copied


def test_clone_shares_the_weights():
    predictor = Predictor(MODEL)
    other = predictor.clone()
    assert other is not predictor and other.program is predictor.program
    for name, w in predictor.program.weights.items():
        assert other.program.weights[name] is w and not w.flags.writeable
    assert other.canonical_net is not predictor.canonical_net
    # each has its own handles
    predictor.get_input_handle("x").copy_from_cpu(X)
    with pytest.raises(InputError, match="not fed"):
        other.run()
    other.get_input_handle("x").copy_from_cpu(X[:1])
    predictor.run()
    other.run()
    assert predictor.get_output_handle("y").shape() == [3, 10]
    assert other.get_output_handle("y").shape() == [1, 10]


def test_errors():
    predictor = Predictor(MODEL)
    with pytest.raises(InputError, match="no input named"):
        predictor.get_input_handle("nope")
    with pytest.raises(UnknownBlobError):
        predictor.get_output_handle("nope")
    h = predictor.get_input_handle("x")
    with pytest.raises(InputError, match="dtype"):
        h.copy_from_cpu(X.astype(np.float64))
    with pytest.raises(InputError, match="shape"):
        h.reshape((3, 15))
    with pytest.raises(InputError, match="numpy array"):
        h.copy_from_cpu([[1.0] * 16])
    h.reshape((2, 16))
    with pytest.raises(InputError, match="values for the shape"):
        h.copy_from_cpu(X)
    with pytest.raises(InputError, match="C-contiguous"):
        predictor.get_input_handle("x").share_external_data(np.zeros((2, 32), np.float32)[:, ::2])
    out = predictor.get_output_handle("y")
    with pytest.raises(InputError, match="read-only"):
        out.reshape((1, 10))
    with pytest.raises(UnknownBlobError, match="run"):
        out.copy_to_cpu()
    with pytest.raises(InputError, match="not fed"):
        Predictor(MODEL).run()


def test_handles_belong_to_the_calling_thread():
    predictor = Predictor(MODEL)
    results, errors = {}, []

    def worker(i):
        try:
            x = X + i
            predictor.get_input_handle("x").share_external_data(x)
            for _ in range(5):
                predictor.run()
            results[i] = predictor.get_output_handle("y").copy_to_cpu()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, y in results.items():
        np.testing.assert_allclose(y, mlp_reference(MODEL, X + i), rtol=1e-5, atol=1e-6)


def test_pinned_pooled_predictor_handles():
    (pinned,) = PooledPredictor.make_predictors(Config(model_bytes=[MODEL.SerializeToString()], num_threads=2))
    try:
        assert pinned.get_input_names() == ["x"] and pinned.get_output_names() == ["y"]
        pinned.get_input_handle("x").share_external_data(X)
        pinned.run()
        np.testing.assert_allclose(pinned.get_output_handle("y").copy_to_cpu(), mlp_reference(MODEL, X),
                                   rtol=1e-5, atol=1e-6)
    finally:
        pinned.close()
