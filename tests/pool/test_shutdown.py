"""Shutdown: drain, cancel pending, closed pool, close from callbacks and workers, exit."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from pooled_predictor import Callback, Config, PoolClosedError, PooledPredictor
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


def make(cob=None, **kw):
    return PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], **kw), cob)


def pool_threads():
    return [t for t in threading.enumerate() if t.name.startswith("pooled-predictor-")]


def test_close_drains_queued_jobs():
    gate = Gate()
    pool = make(gate, num_threads=1, queue_capacity=8)
    futures = [pool.forward([X]) for _ in range(6)]
    gate.wait_for_workers(1)
    threading.Timer(0.1, gate.open).start()
    pool.close(wait=True)
    assert all(f.done() and not f.cancelled() and f.exception() is None for f in futures)
    assert not any(t.is_alive() for t in pool._core.threads)


def test_close_cancel_pending():
    gate = Gate()
    pool = make(gate, num_threads=1, queue_capacity=8)
    futures = [pool.forward([X]) for _ in range(6)]
    gate.wait_for_workers(1)
    threading.Timer(0.1, gate.open).start()
    pool.close(wait=True, cancel_pending=True)
    assert futures[0].result(timeout=1)["y"].shape == (1, 10)   # was running
    assert all(f.cancelled() for f in futures[1:])
    assert pool.stats().total().counts["cancelled"] == 5


def test_forward_after_close_raises():
    pool = make()
    pool.forward([X]).result(timeout=30)
    pool.close()
    with pytest.raises(PoolClosedError):
        pool.forward([X])
    pool.close()  # twice is fine


def test_close_from_a_then_callback_does_not_deadlock():
    pool = make(num_threads=2)
    done = pool.forward([X]).then(lambda _: pool.close(wait=True))
    done.result(timeout=30)
    assert pool.closed
    for t in pool._core.threads:
        t.join(timeout=10)
        assert not t.is_alive()


def test_close_from_inside_a_worker_callback_does_not_deadlock():
    class Closer(Callback):
        pool = None

        def on_job_processed(self, ms):
            self.pool.close(wait=True)

    cob = Closer()
    pool = make(cob, num_threads=2)
    cob.pool = pool
    assert pool.forward([X]).result(timeout=30)["y"].shape == (1, 10)
    for t in pool._core.threads:
        t.join(timeout=10)
        assert not t.is_alive()


def test_chained_job_after_close_fails_its_future_not_the_worker():
    pool = make(num_threads=1)
    chained = pool.forward([X]).then(lambda _: (pool.close(wait=False), pool.forward([X]))[1])
    with pytest.raises(PoolClosedError):
        chained.result(timeout=30)


def test_context_manager_joins_workers():
    before = set(pool_threads())
    with make(num_threads=3) as pool:
        futures = [pool.forward([X]) for _ in range(9)]
    assert all(f.done() for f in futures)
    assert not [t for t in pool_threads() if t not in before and t.is_alive()]


def test_interpreter_exits_cleanly_with_a_pool_still_open(tmp_path):
    model = tmp_path / "mlp.onnx"
    model.write_bytes(make_mlp().SerializeToString())
    script = textwrap.dedent(f"""
        import numpy as np
        from pooled_predictor import Config, PooledPredictor
        pool = PooledPredictor(Config(model_paths=[{str(model)!r}], num_threads=2, queue_capacity=64))
        futures = [pool.forward([np.ones((1, 16), np.float32)]) for _ in range(20)]
        futures[-1].add_done_callback(lambda f: print("last job done", flush=True))
        print("exiting without close", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "exiting without close" in proc.stdout and "last job done" in proc.stdout
