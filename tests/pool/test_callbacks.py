"""Errors in Callback methods and then() functions: logged, counted, never fatal."""

import numpy as np
import pytest

from pooled_predictor import Callback, Config, PooledPredictor
from tests.conftest import make_mlp

X = np.ones((1, 16), np.float32)


class Exploding(Callback):
    def on_job_enqueued(self, queue_size, enqueue_delay_ms):
        raise RuntimeError("enqueued")

    def on_job_dequeued(self):
        raise RuntimeError("dequeued")

    def on_job_processed(self, process_time_ms):
        raise RuntimeError("processed")


def test_callback_errors_are_logged_counted_and_harmless(caplog):
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2), Exploding()) as pool:
        futures = [pool.forward([X]) for _ in range(5)]
        for f in futures:
            assert f.result(timeout=30)["y"].shape == (1, 10)
        snap = pool.stats()
    assert snap.callback_errors == 15
    assert snap.total().counts["completed"] == 5
    assert "Callback.on_job_processed raised" in caplog.text


def test_then_errors_reach_the_chained_future_and_the_worker_survives():
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1)) as pool:
        bad = pool.forward([X]).then(lambda out: out["missing"])
        with pytest.raises(KeyError):
            bad.result(timeout=30)
        assert pool.forward([X]).result(timeout=30)["y"].shape == (1, 10)


def test_done_callback_errors_do_not_kill_the_worker():
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1)) as pool:
        f = pool.forward([X])
        f.add_done_callback(lambda _: 1 / 0)
        f.result(timeout=30)
        assert pool.forward([X]).result(timeout=30)["y"].shape == (1, 10)
        assert pool.worker_count == 1
