"""close() is safe from anywhere (issue 14), and forward()'s arguments are checked at the call."""

import threading

import numpy as np
import pytest

from pooled_predictor import Config, InputError, PoolClosedError, PooledPredictor
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


def make(cb=None, **kw):
    return PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], **kw), cb)


def queued_behind_a_gate(n=6, **kw):
    """A pool whose one worker is held by a Gate, with n jobs: the first running, the rest queued."""
    gate = Gate()
    pool = make(gate, num_threads=1, queue_capacity=n + 2, **kw)
    futures = [pool.forward([X]) for _ in range(n)]
    gate.wait_for_workers(1)
    return pool, gate, futures


def run_with_timeout(fn, seconds=30):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not return."""
    errors = []

    def target():
        try:
            fn()
        except BaseException as exc:  # reported below
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "close() hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("wait", [True, False])
def test_close_from_the_done_callback_of_a_job_it_cancels(wait):
    """Found: close(cancel_pending=True) hung when a cancelled job's done-callback called close()."""
    pool, gate, futures = queued_behind_a_gate()
    calls = []
    for f in futures[1:]:
        f.add_done_callback(lambda f: (calls.append(f.cancelled()), pool.close(wait=wait)))
    threading.Timer(0.2, gate.open).start()
    run_with_timeout(lambda: pool.close(wait=True, cancel_pending=True))
    assert calls == [True] * 5 and all(f.cancelled() for f in futures[1:])
    assert futures[0].result(timeout=30)["y"].shape == (1, 10)


def test_close_from_a_then_chain_of_a_cancelled_job():
    """Found: the same hang from a then() callback (on_error) of a cancelled job."""
    pool, gate, futures = queued_behind_a_gate()
    chained = [f.then(lambda r: r, on_error=lambda e: pool.close(cancel_pending=True)).then(
        lambda _: pool.close(wait=True)) for f in futures]
    threading.Timer(0.2, gate.open).start()
    run_with_timeout(lambda: pool.close(wait=True, cancel_pending=True))
    assert all(c.done() for c in chained)  # every chained Future ended with close()
    assert all(c.cancelled() for c in chained[1:])


def test_close_from_many_threads_at_once_while_cancelling():
    pool, gate, futures = queued_behind_a_gate(n=8)
    barrier = threading.Barrier(9)

    def closer():
        barrier.wait()
        pool.close(wait=True, cancel_pending=True)

    threads = [threading.Thread(target=closer) for _ in range(8)]
    for t in threads:
        t.start()
    threading.Timer(0.2, gate.open).start()
    barrier.wait()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a concurrent close() hung"
    # every closer returned after the cancellations: no Future is left pending
    assert all(f.done() for f in futures)
    with pytest.raises(PoolClosedError):
        pool.forward([X])


def test_close_from_a_worker_and_from_a_callback_of_the_pool():
    pool = make(num_threads=2)
    done = pool.forward([X]).then(lambda _: pool.close(wait=True, cancel_pending=True))
    done.result(timeout=30)
    run_with_timeout(lambda: pool.close(wait=True))
    assert not any(t.is_alive() for t in pool._core.threads)


@pytest.mark.parametrize("kwargs,match", [
    ({"deadline": "1s"}, "deadline must be a number"),
    ({"deadline": float("nan")}, "NaN"),
    ({"deadline": True}, "deadline must be a number"),
    ({"timeout": "5"}, "timeout must be a number"),
    ({"timeout": -1.0}, "timeout must be >= 0"),
    ({"block": "yes"}, "block must be"),
])
def test_forward_arguments_checked_at_the_call(kwargs, match):
    """Found: a string deadline (pool.py forward) or timeout (pool.py queue put) raised TypeError."""
    with make() as pool:
        with pytest.raises(InputError, match=match):
            pool.forward([X], **kwargs)
        with pytest.raises(InputError):
            pool.forward([X], output_names=[3])
        assert pool.forward([X], deadline=np.float32(30), timeout=1).result(timeout=30)["y"].shape == (1, 10)
