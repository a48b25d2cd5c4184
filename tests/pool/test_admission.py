"""Admission when the queue is full: block, block with a timeout, fail fast."""

import threading

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor, QueueFullError
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


def gated_pool(**kw):
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1,
                                  queue_capacity=2, **kw), gate)
    first = pool.forward([X])
    gate.wait_for_workers(1)          # the only worker holds job 1
    queued = [pool.forward([X]), pool.forward([X])]  # the queue is now full
    return pool, gate, [first] + queued


def test_block_waits_for_room_and_reports_the_delay():
    pool, gate, futures = gated_pool()
    produced = []
    producer = threading.Thread(target=lambda: produced.append(pool.forward([X])))
    producer.start()
    producer.join(0.3)
    assert producer.is_alive() and not produced   # blocked: the queue is full
    gate.open()
    producer.join(30)
    assert not producer.is_alive() and len(produced) == 1
    for f in futures + produced:
        f.result(timeout=30)
    # the blocked producer's wait is what on_job_enqueued reported for it: the largest delay
    assert gate.delays_ms[-1] == max(gate.delays_ms) and gate.delays_ms[-1] > 0
    pool.close()


def test_block_with_a_timeout():
    pool, gate, futures = gated_pool()
    with pytest.raises(QueueFullError, match="stayed full .* for 0.200 s"):
        pool.forward([X], timeout=0.2)
    assert pool.stats().total().counts["rejected"] == 1
    gate.open()
    for f in futures:
        f.result(timeout=30)
    pool.close()


def test_config_timeout_applies_by_default():
    pool, gate, futures = gated_pool(enqueue_timeout=0.1)
    with pytest.raises(QueueFullError):
        pool.forward([X])
    gate.open()
    pool.close()


def test_fail_fast():
    pool, gate, futures = gated_pool(admission="fail")
    with pytest.raises(QueueFullError, match="the job queue is full"):  # refused without waiting
        pool.forward([X])
    with pytest.raises(QueueFullError):
        pool.forward([X], block=False)
    gate.open()
    for f in futures:
        f.result(timeout=30)
    assert pool.forward([X]).result(timeout=30)["y"].shape == (1, 10)  # serving again
    assert pool.stats().total().counts["rejected"] == 2
    pool.close()


def test_per_call_block_overrides_fail_fast_config():
    pool, gate, futures = gated_pool(admission="fail")
    threading.Timer(0.2, gate.open).start()
    futures.append(pool.forward([X], block=True))
    for f in futures:
        f.result(timeout=30)
    pool.close()
