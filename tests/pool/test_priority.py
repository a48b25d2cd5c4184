"""Priority levels: highest first, FIFO within a level, one bound for all, optional aging."""

import time

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor, QueueFullError
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


def held(**kw):
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1, **kw), gate)
    first = pool.forward([X])
    gate.wait_for_workers(1)
    return pool, gate, first


def run_order(pool, gate, priorities, pause=0.0):
    order = []
    futures = []
    for i, p in enumerate(priorities):
        f = pool.forward([X], priority=p)
        f.add_done_callback(lambda _, i=i: order.append(i))  # runs on the one worker, in completion order
        futures.append(f)
        time.sleep(pause if i == 0 else 0.0)
    gate.open()
    for f in futures:
        f.result(timeout=30)
    pool.close()
    return order


def test_highest_level_first_fifo_within_a_level():
    pool, gate, _ = held(queue_capacity=8)
    #                     0  1  2  3  4  5  6
    order = run_order(pool, gate, [0, 5, 1, 5, 0, 2, -3])
    assert order == [1, 3, 5, 2, 0, 4, 6]


def test_the_bound_counts_every_level():
    pool, gate, first = held(queue_capacity=2, admission="fail")
    a, b = pool.forward([X], priority=0), pool.forward([X], priority=9)
    with pytest.raises(QueueFullError):
        pool.forward([X], priority=100)
    assert pool.stats().queue_size == 2
    gate.open()
    for f in (first, a, b):
        f.result(timeout=30)
    pool.close()


def test_aging_lets_an_old_low_priority_job_go_first():
    pool, gate, _ = held(queue_capacity=8, priority_aging=0.05)
    order = run_order(pool, gate, [0, 5, 5], pause=0.15)  # job 0 waits past the aging limit
    assert order == [0, 1, 2]
    pool, gate, _ = held(queue_capacity=8)  # strict priorities: it waits
    assert run_order(pool, gate, [0, 5, 5], pause=0.15) == [1, 2, 0]


def test_priority_must_be_an_int():
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()])) as pool:
        with pytest.raises(TypeError, match="priority"):
            pool.forward([X], priority="high")
        assert pool.forward([X], priority=np.int64(3)).result(timeout=30)["y"].shape == (1, 10)


def test_config_validation_of_batching_and_aging():
    m = [make_mlp().SerializeToString()]
    with pytest.raises(ValueError, match="max_batch_size has 2 values"):
        PooledPredictor(Config(model_bytes=m, max_batch_size=[4, 4]))
    with pytest.raises(ValueError, match="preferred_batch_sizes"):
        PooledPredictor(Config(model_bytes=m, max_batch_size=4, preferred_batch_sizes=(8,)))
    with pytest.raises(ValueError, match="max_queue_delay"):
        PooledPredictor(Config(model_bytes=m, max_batch_size=4, max_queue_delay=-1))
    with pytest.raises(ValueError, match="priority_aging"):
        PooledPredictor(Config(model_bytes=m, priority_aging=0))
