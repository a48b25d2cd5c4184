"""Cancellation of queued jobs and deadlines."""

import time

import numpy as np
import pytest

from pooled_predictor import Config, DeadlineExceededError, PooledPredictor
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


def gated(capacity=4):
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1,
                                  queue_capacity=capacity), gate)
    running = pool.forward([X])
    gate.wait_for_workers(1)
    return pool, gate, running


def test_cancel_removes_a_queued_job_without_running_it():
    pool, gate, running = gated()
    a, b, c = (pool.forward([X]) for _ in range(3))
    assert pool.stats().queue_size == 3
    assert b.cancel() and b.cancelled()
    assert pool.stats().queue_size == 2       # removed at once, room for another producer
    assert not running.cancel()               # already running: cannot be cancelled
    gate.open()
    for f in (running, a, c):
        f.result(timeout=30)
    pool.close()
    assert gate.processed == 3                # the cancelled job never ran
    assert gate.enqueued == 4 and gate.dequeued == 3
    counts = pool.stats().total().counts
    assert counts["cancelled"] == 1 and counts["completed"] == 3


def test_deadline_passed_in_the_queue_fails_without_running():
    pool, gate, running = gated()
    late = pool.forward([X], deadline=0.05)
    fine = pool.forward([X], deadline=60)
    time.sleep(0.15)
    gate.open()
    with pytest.raises(DeadlineExceededError, match="deadline passed"):
        late.result(timeout=30)
    assert fine.result(timeout=30)["y"].shape == (1, 10)
    running.result(timeout=30)
    pool.close()
    assert gate.processed == 2
    assert pool.stats().total().counts["expired"] == 1


def test_cancelling_a_chained_future_does_not_break_the_pool():
    pool, gate, running = gated()
    chained = pool.forward([X]).then(lambda out: out["y"].sum())
    assert chained.cancel()
    gate.open()
    running.result(timeout=30)
    assert pool.forward([X]).result(timeout=30)["y"].shape == (1, 10)
    pool.close()
