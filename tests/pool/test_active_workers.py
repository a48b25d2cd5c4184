"""The job queue's hand-over (serving/jobqueue.py) and Config.active_workers (its wake_limit).

The worker that went to sleep last is woken first. At most wake_limit workers are awake: a job
queued while that many run is taken by one of them when it comes back, so no more jobs compute at
once than that; a worker about to run user code that may block (a Future's callbacks, the
Callback's hooks) stops counting first, so such code never holds the queue up; close() still runs
every queued job.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pooled_predictor import Callback, Config, PooledPredictor
from pooled_predictor.ops import kernel, shape_rule
from pooled_predictor.serving.jobqueue import STOP, JobQueue
from tests.conftest import make_mlp, mlp_reference
from tests.pool.faults import DOMAIN

HOLD = threading.Event()  # HoldUntilSet's kernels wait for it


@shape_rule("HoldUntilSet", domain=DOMAIN)
def _hold_shape(ctx):
    return [(ctx.shape(0), ctx.dtype(0))]


@kernel("HoldUntilSet", since=1, domain=DOMAIN)
def _hold(x, *, out):
    if not HOLD.wait(20):
        raise RuntimeError("HoldUntilSet: never set")
    np.copyto(out, x)


def _hold_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("HoldUntilSet", ["x"], ["y"], domain=DOMAIN)], "hold",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 10
    return m


class _Job:
    def __init__(self, work):
        self.priority = 0
        self.enqueued = time.perf_counter()
        self.queued = self.slot = False
        self.work = work


class _Workers:
    """Threads that take jobs from `queue` as the pool's workers do and run job.work(queue)."""

    def __init__(self, queue: JobQueue, n: int):
        self.queue = queue
        self.lock = threading.Lock()
        self.running = self.most = self.done = 0
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _loop(self):
        awake = False
        while True:
            job = self.queue.get(awake)
            if job is STOP:
                return
            awake = True
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                if job.work(self.queue) == "released":
                    awake = False
            finally:
                with self.lock:
                    self.running -= 1
                    self.done += 1

    def join(self, timeout=20.0):
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)


def _compute(queue):
    time.sleep(0.002)


def _sixty_jobs_on_six_workers(queue: JobQueue) -> _Workers:
    workers = _Workers(queue, 6)
    for _ in range(60):
        queue.put(_Job(_compute), block=True, timeout=5)
    deadline = time.monotonic() + 20
    while workers.done < 60 and time.monotonic() < deadline:
        time.sleep(0.005)
    queue.close(drain=False)
    assert workers.join()
    assert workers.done == 60
    return workers


def test_no_more_workers_than_the_limit_run_and_every_job_runs():
    assert _sixty_jobs_on_six_workers(JobQueue(64, wake_limit=2)).most <= 2


def test_without_a_limit_every_put_wakes_a_worker():
    """The control: the same jobs without wake_limit run on more than 2 workers at once."""
    assert _sixty_jobs_on_six_workers(JobQueue(64)).most > 2


def test_a_worker_that_releases_lets_another_take_the_queued_jobs():
    """wake_limit=1: the one awake worker blocks in 'user code' until a later job ran; it released
    first, so a second worker wakes for that job (without release() this would never end)."""
    queue = JobQueue(8, wake_limit=1)
    later_ran = threading.Event()

    def blocking(q):
        q.release()
        assert later_ran.wait(10), "the queued job never ran while the awake worker was blocked"
        return "released"

    workers = _Workers(queue, 2)
    queue.put(_Job(blocking), block=True, timeout=5)
    queue.put(_Job(lambda q: later_ran.set()), block=True, timeout=5)
    assert later_ran.wait(10)
    deadline = time.monotonic() + 10
    while workers.done < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    queue.close(drain=False)
    assert workers.join() and workers.done == 2


def test_close_runs_the_jobs_left_for_an_awake_worker():
    """wake_limit=1, 3 workers: the awake one is busy when close() comes with 3 jobs queued and no
    worker woken for them; close() wakes the sleeping ones, which run those jobs before they stop."""
    queue = JobQueue(8, wake_limit=1)
    closed = threading.Event()

    def first(q):
        assert closed.wait(10)
        q.release()  # after close(): its ticket comes after the stops
        return "released"

    workers = _Workers(queue, 3)
    queue.put(_Job(first), block=True, timeout=5)
    for _ in range(3):
        queue.put(_Job(_compute), block=True, timeout=5)
    while workers.running < 1:
        time.sleep(0.001)
    assert queue.close(drain=False) == []
    closed.set()
    assert workers.join()
    assert workers.done == 4 and len(queue) == 0


@pytest.mark.parametrize("lifo,expected", [(True, [("c", "first"), ("b", "second")]),
                                           (False, [("a", "first"), ("b", "second")])])
def test_the_worker_that_slept_last_is_woken_first(lifo, expected):
    """a, b, c go to sleep in this order; the first job wakes c (which holds it), the second b
    (lifo=False, for workers that differ: a, then b)."""
    queue = JobQueue(8, lifo=lifo)
    order, hold = [], threading.Event()

    def worker(name):
        awake = False
        while (job := queue.get(awake)) is not STOP:
            awake = True
            order.append((name, job.work))
            if job.work == "first":
                hold.wait(10)

    threads = []
    for name in "abc":
        threads.append(threading.Thread(target=worker, args=(name,), daemon=True))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while len(queue._sleepers) < len(threads) and time.monotonic() < deadline:
            time.sleep(0.001)
    deadline = time.monotonic() + 10
    for n, work in enumerate(("first", "second")):
        queue.put(_Job(work), block=True, timeout=5)
        while len(order) <= n and time.monotonic() < deadline:
            time.sleep(0.001)
    hold.set()
    queue.close(drain=False)
    for t in threads:
        t.join(10)
    assert order == expected
    assert not any(t.is_alive() for t in threads)


def test_pinned_workers_take_turns():
    """Workers pinned to CPUs differ: the queue wakes the one idle longest (a LIFO wake-up could keep
    two busy workers on one CPU)."""
    with _pool(num_threads=4, worker_affinity="spread") as pool:
        assert pool._core.queue._next == 0
    with _pool(num_threads=4) as pool:
        assert pool._core.queue._next == -1


def test_wake_limit_is_checked():
    with pytest.raises(ValueError, match="wake_limit"):
        JobQueue(4, wake_limit=0)
    with pytest.raises(ValueError, match="active_workers"):
        Config(model_bytes=[b"x"], active_workers=-1).validate()
    with pytest.raises(ValueError, match="active_workers"):
        Config(model_bytes=[b"x"], active_workers=1.5).validate()


MODEL = make_mlp()


def _pool(**kw):
    return PooledPredictor(Config(model_bytes=[MODEL.SerializeToString()], **kw))


def test_where_the_limit_binds():
    with _pool(num_threads=4, active_workers=2) as pool:
        assert pool._core.wake_limit == 2
    with _pool(num_threads=4, active_workers=0) as pool:  # 0: num_threads
        assert pool._core.wake_limit is None
    with _pool(num_threads=2, active_workers=2) as pool:  # not below num_threads
        assert pool._core.wake_limit is None
    with _pool(num_threads=4, active_workers=1, worker_affinity="spread") as pool:  # pinned workers
        assert pool._core.wake_limit is None
    with _pool(num_threads=4, active_workers=1, max_batch_size=8) as pool:  # a batching model
        assert pool._core.wake_limit is None


def test_a_then_callback_that_waits_for_a_queued_job_does_not_wedge_the_pool():
    """active_workers=1: job A (held in its kernel until its then() is attached) has a then() that
    blocks until job B is done; B is queued behind A with no worker woken for it (one is awake:
    A's). The worker running A's callback counts as asleep from then on, so another takes B."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    HOLD.clear()
    config = Config(model_bytes=[_hold_model().SerializeToString()], num_threads=3, active_workers=1)
    with PooledPredictor(config) as pool:
        assert pool._core.wake_limit == 1
        seen = {}

        def wait_for_b(out):
            seen["b"] = fb.result(timeout=10)["y"]  # TimeoutError here: B never ran
            return out["y"]

        fa = pool.forward({"x": x})
        fb = None
        while all(pool._core.idle):  # a worker holds A in its kernel
            time.sleep(0.001)
        chained = fa.then(wait_for_b)
        fb = pool.forward({"x": x + 1})
        HOLD.set()
        np.testing.assert_array_equal(chained.result(timeout=20), x)
        np.testing.assert_array_equal(seen["b"], x + 1)


class _Blocking(Callback):
    """on_job_processed (the only hook) blocks on the first job until it is called for the second."""

    def __init__(self):
        self.second = threading.Event()
        self.calls = 0
        self.waited = None
        self.lock = threading.Lock()

    def on_job_processed(self, process_time_ms):
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.waited = self.second.wait(10)
        else:
            self.second.set()


def test_a_callback_hook_that_blocks_does_not_wedge_the_pool():
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    ref = mlp_reference(MODEL, x)
    cb = _Blocking()
    config = Config(model_bytes=[MODEL.SerializeToString()], num_threads=2, active_workers=1)
    with PooledPredictor(config, cb) as pool:
        futures = [pool.forward({"x": x}) for _ in range(2)]
        for f in futures:
            np.testing.assert_allclose(f.result(timeout=20)["y"], ref, rtol=1e-5, atol=1e-6)
    assert cb.waited is True


def test_many_clients_through_a_limited_pool_get_their_own_results():
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(8)]
    refs = [mlp_reference(MODEL, x) for x in xs]
    with _pool(num_threads=8, active_workers=2) as pool:
        errors = []

        def client(k):
            for _ in range(25):
                y = pool.forward({"x": xs[k]}).result(timeout=20)["y"]
                if not np.allclose(y, refs[k], rtol=1e-5, atol=1e-6):
                    errors.append(k)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert pool.stats().nets[0].counts["completed"] == 200
