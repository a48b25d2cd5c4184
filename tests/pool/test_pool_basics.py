"""PooledPredictor as fb-caffe-exts' PooledPredictorTest: correctness, counts, threading, two models."""

import logging
import threading

import numpy as np
import pytest

from pooled_predictor import (Config, Future, InputError, PinnedPooledPredictor, PooledPredictor,
                              UnknownBlobError, UnknownNetError)
from tests.conftest import make_mlp, mlp_reference
from tests.pool.helpers import CountingCallback

X = np.random.default_rng(7).standard_normal((3, 16)).astype(np.float32)


def config(models, **kw):
    return Config(model_bytes=[m.SerializeToString() for m in models], **kw)


def test_correctness_and_callback_counts(caplog):
    model = make_mlp()
    ref = mlp_reference(model, X)
    cob = CountingCallback()
    pp = PooledPredictor.make_predictor(config([model]), cob)
    assert isinstance(pp, PinnedPooledPredictor)
    out = pp.forward([X]).result(timeout=30)
    np.testing.assert_allclose(out["y"], ref, rtol=1e-5, atol=1e-6)
    assert (cob.enqueued, cob.processed) == (1, 1)

    # a then()-chained job: counts inside the callback, then after the chained job
    seen = {}

    def chain(_):
        seen["counts"] = (cob.enqueued, cob.processed)
        return pp.forward([X])

    fut = pp.forward([X]).then(chain)
    assert isinstance(fut, Future)
    np.testing.assert_allclose(fut.result(timeout=30)["y"], ref, rtol=1e-5, atol=1e-6)
    assert seen["counts"] == (2, 2)
    assert (cob.enqueued, cob.processed) == (3, 3)

    # an unknown output name raises at the call (Config.unknown_output="raise"): no job is queued
    with pytest.raises(UnknownBlobError, match="undefined"):
        pp.forward([X], ["undefined", "y"])
    assert (cob.enqueued, cob.processed) == (3, 3)
    pp.close()

    # unknown_output="warn" (fb-caffe-exts): logged as a warning and skipped, the job still runs
    cob = CountingCallback()
    pp = PooledPredictor.make_predictor(config([model], unknown_output="warn"), cob)
    with caplog.at_level(logging.WARNING, logger="pooled_predictor"):
        out = pp.forward([X], ["undefined", "y"]).result(timeout=30)
    assert list(out) == ["y"] and "undefined" in caplog.text
    assert (cob.enqueued, cob.processed) == (1, 1)
    pp.close()


@pytest.mark.parametrize("num_threads", [1, 2, 3, 4, 8])
def test_threading(num_threads):
    """N workers, 2N client threads x 5 jobs: exactly 5 x 2N callbacks of each kind, all correct."""
    model = make_mlp()
    ref = mlp_reference(model, X)
    cob = CountingCallback()
    clients = 2 * num_threads
    errors = []
    with PooledPredictor(config([model], num_threads=num_threads), cob) as pool:
        def client():
            try:
                for _ in range(5):
                    out = pool.forward([X]).result(timeout=60)
                    np.testing.assert_allclose(out["y"], ref, rtol=1e-5, atol=1e-6)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert pool.worker_count <= num_threads
    assert not errors, errors[0]
    assert cob.enqueued == cob.dequeued == cob.processed == 5 * clients
    assert max(cob.queue_sizes) <= num_threads  # the queue's capacity defaults to num_threads


def test_two_models_in_one_pool():
    a, b = make_mlp(seed=1), make_mlp(seed=2, features=8, classes=3)
    xb = np.ones((2, 8), np.float32)
    preds = PooledPredictor.make_predictors(config([a, b], num_threads=2))
    assert [p.net_id for p in preds] == [0, 1] and preds[0].pool is preds[1].pool
    pool = preds[0].pool
    fa, fb = pool.forward([X], net_id=0), pool.forward({"x": xb}, net_id=1)
    np.testing.assert_allclose(fa.result(timeout=30)["y"], mlp_reference(a, X), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fb.result(timeout=30)["y"], mlp_reference(b, xb), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(preds[1].forward({"x": xb}).result(timeout=30)["y"], mlp_reference(b, xb),
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="make_predictors"):
        PooledPredictor.make_predictor(config([a, b]))
    pool.close()


def test_bad_requests_fail_at_the_call_and_the_pool_keeps_serving():
    model = make_mlp()
    with PooledPredictor(config([model], num_threads=2)) as pool:
        with pytest.raises(UnknownNetError, match="net_id 3"):
            pool.forward([X], net_id=3)
        with pytest.raises(InputError, match="takes 1 input"):
            pool.forward([X, X])
        with pytest.raises(InputError, match="expected rank 2"):
            pool.forward([X[0]])
        with pytest.raises(InputError, match="expected dtype float32"):
            pool.forward([X.astype(np.float64)])
        with pytest.raises(InputError, match="must be 16"):
            pool.forward([np.zeros((2, 5), np.float32)])
        out = pool.forward([X]).result(timeout=30)
        np.testing.assert_allclose(out["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)
        assert pool.stats().total().counts["submitted"] == 1


def test_unknown_output_can_raise():
    with PooledPredictor(config([make_mlp()], unknown_output="raise")) as pool:
        with pytest.raises(UnknownBlobError, match="undefined"):
            pool.forward([X], ["undefined"])


def test_intermediate_blobs_can_be_requested_when_kept_or_under_none():
    from pooled_predictor import Optimization
    for kw in ({"optimization": Optimization.NONE, "graph_optimization_level": "none"}, {"keep": ["h2"]}):
        with PooledPredictor(config([make_mlp()], **kw)) as pool:
            out = pool.forward([X], ["h2", "y"]).result(timeout=30)
            assert out["h2"].shape == (3, 32) and (out["h2"] >= 0).all()


def test_an_intermediate_not_kept_under_memory_is_skipped_with_a_warning(caplog):
    # Optimization.MEMORY by default; unknown_output="warn" (the default raises, test_first_hour.py)
    with PooledPredictor(config([make_mlp()], unknown_output="warn")) as pool:
        with caplog.at_level(logging.WARNING, logger="pooled_predictor"):
            out = pool.forward([X], ["h2", "y"]).result(timeout=30)
    assert list(out) == ["y"] and "Config.keep" in caplog.text


def test_config_validation(mlp_bytes):
    with pytest.raises(ValueError, match="exactly one"):
        PooledPredictor(Config())
    with pytest.raises(ValueError, match="exactly one"):
        PooledPredictor(Config(model_paths=["a.onnx"], model_bytes=[mlp_bytes]))
    with pytest.raises(ValueError, match="num_threads"):
        PooledPredictor(Config(model_bytes=[mlp_bytes], num_threads=0))


def test_malformed_model_in_config(tmp_path):
    from pooled_predictor import ModelLoadError
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00\x01\x02 not a model")
    with pytest.raises(ModelLoadError, match="bad.onnx"):
        PooledPredictor(Config(model_paths=[bad]))


def test_job_errors_go_to_the_future_and_workers_survive():
    # A model whose second input must broadcast with the first: a shape error at run time.
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["M"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K"])
    m = helper.make_model(helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", [a, b], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    from pooled_predictor import ShapeInferenceError
    with PooledPredictor(config([m], num_threads=1)) as pool:
        bad = pool.forward({"a": np.zeros(3, np.float32), "b": np.zeros(4, np.float32)})
        with pytest.raises(ShapeInferenceError, match="do not broadcast"):
            bad.result(timeout=30)
        good = pool.forward({"a": np.ones(3, np.float32), "b": np.ones(3, np.float32)})
        np.testing.assert_array_equal(good.result(timeout=30)["y"], [2, 2, 2])
        s = pool.stats().total().counts
        assert (s["failed"], s["completed"]) == (1, 1)
