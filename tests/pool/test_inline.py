"""Inline scheduling: jobs submitted from a worker run there at once (fb-caffe-exts semantics)."""

import threading

import numpy as np

from pooled_predictor import Callback, Config, PooledPredictor
from tests.conftest import make_mlp, mlp_reference
from tests.pool.helpers import CountingCallback

X = np.ones((2, 16), np.float32)


def pool_with(cob, **kw):
    return PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], **kw), cob)


def test_inline_job_skips_queue_callbacks_and_runs_on_the_same_worker():
    cob = CountingCallback()
    with pool_with(cob, num_threads=2, allow_inline_scheduling=True) as pool:
        threads = {}

        def chain(_):
            threads["outer"] = threading.current_thread()
            return pool.forward([X]).then(lambda out: (threading.current_thread(), out))

        thread, out = pool.forward([X]).then(chain).result(timeout=30)
        assert thread is threads["outer"]
        np.testing.assert_allclose(out["y"], mlp_reference(make_mlp(), X), rtol=1e-5, atol=1e-6)
        assert (cob.enqueued, cob.dequeued, cob.processed) == (1, 1, 2)
        assert pool.stats().total().counts["inline"] == 1


def test_without_inline_scheduling_chained_jobs_go_through_the_queue():
    cob = CountingCallback()
    with pool_with(cob, num_threads=2) as pool:
        pool.forward([X]).then(lambda _: pool.forward([X])).result(timeout=30)
        assert (cob.enqueued, cob.dequeued, cob.processed) == (2, 2, 2)


def test_inline_depth_is_bounded():
    """Jobs submitted synchronously from inside a job (here from on_job_processed) nest; past
    max_inline_depth they go through the queue instead of growing the stack."""

    class Recurse(Callback):
        def __init__(self):
            self.pool = None
            self.left = 40
            self.futures = []
            self.processed = self.enqueued = 0

        def on_job_enqueued(self, q, d):
            self.enqueued += 1

        def on_job_processed(self, ms):
            self.processed += 1
            if self.left > 0:
                self.left -= 1
                self.futures.append(self.pool.forward([X]))

    cob = Recurse()
    with pool_with(cob, num_threads=1, allow_inline_scheduling=True, max_inline_depth=8) as pool:
        cob.pool = pool
        pool.forward([X]).result(timeout=30)
        for _ in range(100):
            if cob.left == 0 and all(f.done() for f in cob.futures):
                break
            threading.Event().wait(0.05)
        assert all(f.result(timeout=30) is not None for f in cob.futures)
    assert cob.processed == 41
    counts = pool.stats().total().counts
    assert counts["inline"] > 0 and cob.enqueued > 1  # some nested, some queued
    assert counts["completed"] == 41


def test_ten_thousand_then_chained_inline_jobs():
    with pool_with(None, num_threads=2, allow_inline_scheduling=True) as pool:
        f = pool.forward([X])
        for _ in range(10_000):
            f = f.then(lambda _: pool.forward([X]))
        out = f.result(timeout=120)
        assert out["y"].shape == (2, 10)
        assert pool.stats().total().counts["completed"] == 10_001
