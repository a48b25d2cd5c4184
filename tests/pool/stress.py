"""A self-checking stress run of the pool (used by tests/pool/test_stress.py and benchmarks/soak.py).

Client threads hammer one pool serving two models with random batch sizes,
through forward() and, for some requests, infer() (run on the client thread while it can);
some requests carry an injected kernel fault (FailIfNegative), some are
cancelled right after submission, some have a deadline that may pass, some chain
a second job from a then() callback, some then() functions raise, the Callback
raises at random, and a closer thread calls close() partway through; the
done-callbacks of some requests call close() again (and from a then() of
theirs) once closing began: from jobs the first close() is cancelling. At the end
`StressResult.check()` asserts that every Future ended, every result is correct,
every failure is the expected one, the callback counts agree with the stats,
and no pool or client thread is left running.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from pooled_predictor import (Callback, Config, DeadlineExceededError, KernelError, PoolClosedError,
                              PooledPredictor, QueueFullError)
from tests.pool.faults import InjectedFault, faulty_reference, make_faulty_mlp


class RandomlyFailingCallback(Callback):
    """Counts every call, then raises with probability `p` (the pool must shrug it off)."""

    def __init__(self, p: float, seed: int):
        self.p = p
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.enqueued = self.dequeued = self.processed = self.raised = 0

    def _maybe_raise(self):
        with self.lock:
            fail = self.rng.random() < self.p
            self.raised += fail
        if fail:
            raise RuntimeError("injected callback error")

    def on_job_enqueued(self, queue_size, enqueue_delay_ms):
        with self.lock:
            self.enqueued += 1
        self._maybe_raise()

    def on_job_dequeued(self):
        with self.lock:
            self.dequeued += 1
        self._maybe_raise()

    def on_job_processed(self, process_time_ms):
        with self.lock:
            self.processed += 1
        self._maybe_raise()


@dataclass
class Request:
    future: cf.Future
    kind: str            # "plain", "fault", "deadline", "cancel", "chain", "then_raises"
    net_id: int
    x: np.ndarray
    cancelled_by_us: bool = False


@dataclass
class StressResult:
    requests: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)     # exception name -> count, raised at submit
    pool: PooledPredictor | None = None
    callback: RandomlyFailingCallback | None = None
    client_threads: list = field(default_factory=list)
    models: list = field(default_factory=list)
    seconds: float = 0.0
    outcomes: dict = field(default_factory=dict)
    closes_from_callbacks: int = 0  # close() calls made by callbacks of cancelled jobs

    def check(self) -> dict:
        """Assert every invariant; return outcome counts."""
        outcomes: dict[str, int] = {}
        for r in self.requests:
            f = r.future
            assert f.done(), f"a Future of a {r.kind} request is still pending"
            if f.cancelled():
                outcome = "cancelled"
                assert r.cancelled_by_us or r.kind in ("chain",) or self.pool.closed, \
                    f"{r.kind} request cancelled by nobody"
            elif f.exception() is not None:
                exc = f.exception()
                outcome = type(exc).__name__
                if isinstance(exc, KernelError):
                    assert isinstance(exc.__cause__, InjectedFault) and r.kind == "fault", \
                        f"unexpected kernel error on a {r.kind} request: {exc}"
                elif isinstance(exc, DeadlineExceededError):
                    assert r.kind == "deadline", f"deadline error on a {r.kind} request"
                elif isinstance(exc, PoolClosedError):
                    assert r.kind == "chain", f"PoolClosedError on a {r.kind} request's Future"
                elif isinstance(exc, QueueFullError):
                    # a chain's second forward() runs in the client thread when the first job is
                    # already done at then(): like any client submission it may find the queue
                    # full for enqueue_timeout (a loaded machine) and is refused, on its Future
                    assert r.kind == "chain", f"QueueFullError on a {r.kind} request's Future"
                elif isinstance(exc, ZeroDivisionError):
                    assert r.kind == "then_raises"
                else:
                    raise AssertionError(f"unexpected {exc!r} on a {r.kind} request")
            else:
                outcome = "ok"
                out = f.result()
                if r.kind == "then_raises":
                    raise AssertionError("a raising then() produced a result")
                y = out["y"] if isinstance(out, dict) else out
                assert r.kind != "fault", "a faulty request produced a result"
                expect = faulty_reference(self.models[r.net_id], r.x)
                np.testing.assert_allclose(y, expect, rtol=1e-4, atol=1e-6)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        snap = self.pool.stats()
        t = snap.total().counts
        cb = self.callback
        ran = t["completed"] + t["failed"]
        assert cb.processed == ran, (cb.processed, t)
        assert cb.enqueued == t["submitted"] - t["inline"] - t["direct"], (cb.enqueued, t)
        assert cb.dequeued == ran + t["expired"] - t["inline"] - t["direct"], (cb.dequeued, t)
        assert t["submitted"] == ran + t["expired"] + t["cancelled"], t
        assert snap.callback_errors == cb.raised, (snap.callback_errors, cb.raised)
        assert snap.queue_size == 0
        assert not any(th.is_alive() for th in self.pool._core.threads), "a worker is still running"
        assert not any(th.is_alive() for th in self.client_threads), "a client is still running"
        self.outcomes = {**outcomes, **{f"refused {k}": v for k, v in self.refused.items()}}
        return self.outcomes


def run_stress(seconds: float = 8.0, clients: int = 8, workers: int = 4, seed: int = 0,
               close_after: float = 0.6, inline: bool = True, max_batch_size: int = 0,
               max_queue_delay: float = 0.0, cancel_pending: bool | None = None,
               queue_capacity: int | None = None, active_workers: int | None = None) -> StressResult:
    """Run the stress scenario for about `seconds`; close() at `close_after` x seconds
    (cancelling the queued jobs when cancel_pending, None: at random).

    With max_batch_size > 1 the pool batches jobs (dynamic batching) and clients
    send them with random priority levels.
    """
    rng = random.Random(seed)
    models = [make_faulty_mlp(features=16, classes=10, seed=1), make_faulty_mlp(features=8, classes=3, seed=2)]
    cb = RandomlyFailingCallback(p=0.05, seed=seed)
    pool = PooledPredictor(Config(model_bytes=[m.SerializeToString() for m in models], num_threads=workers,
                                  queue_capacity=queue_capacity or 2 * workers, allow_inline_scheduling=inline,
                                  enqueue_timeout=1.0, max_batch_size=max_batch_size,
                                  max_queue_delay=max_queue_delay, active_workers=active_workers), cb)
    result = StressResult(pool=pool, callback=cb, models=models)
    lock = threading.Lock()
    stop = threading.Event()
    closing = threading.Event()

    def close_again(fut, wait: bool):
        """A done-callback (or then()) of a job that close() cancels calls close() again."""
        if closing.is_set() and fut.cancelled():
            with lock:
                result.closes_from_callbacks += 1
            pool.close(wait=wait, cancel_pending=True)

    def record(req):
        with lock:
            result.requests.append(req)

    def client(k: int):
        crng = np.random.default_rng(seed * 1000 + k)
        prng = random.Random(seed * 1000 + k)
        while not stop.is_set():
            net_id = prng.randrange(2)
            features = 16 if net_id == 0 else 8
            x = np.abs(crng.standard_normal((prng.randint(1, 8), features))).astype(np.float32) + 0.01
            kind = prng.choices(["plain", "fault", "deadline", "cancel", "chain", "then_raises"],
                                weights=[50, 10, 10, 10, 15, 5])[0]
            if kind == "fault":
                x[0, 0] = -1.0
            # some plain, faulty and deadline requests wait in infer() (run on this thread while it can)
            sync = kind in ("plain", "fault", "deadline") and prng.random() < 0.3
            try:
                args = dict(deadline=prng.choice([0.0, 0.002, 0.05]) if kind == "deadline" else None,
                            priority=prng.randrange(3) if max_batch_size > 1 else 0)
                if sync:
                    f = cf.Future()  # what infer() returned or raised, as a done Future
                    try:
                        f.set_result(pool.infer({"x": x}, net_id=net_id, **args))
                    except cf.CancelledError:  # queued, and cancelled by close(cancel_pending=True)
                        f.cancel()
                    except (PoolClosedError, QueueFullError):
                        raise
                    except Exception as exc:  # noqa: BLE001 -- the request's outcome, checked below
                        f.set_exception(exc)
                    record(Request(f, kind, net_id, x))
                    continue
                f = pool.forward({"x": x}, net_id=net_id, **args)
            except (PoolClosedError, QueueFullError) as exc:
                with lock:
                    name = type(exc).__name__
                    result.refused[name] = result.refused.get(name, 0) + 1
                if isinstance(exc, PoolClosedError):
                    return
                continue
            req = Request(f, kind, net_id, x)
            if kind in ("plain", "deadline") and prng.random() < 0.5:
                f.add_done_callback(lambda f, w=prng.random() < 0.5: close_again(f, w))
                chained = f.then(lambda r: r)  # cancelled with f: its callbacks run inside close() too
                chained.add_done_callback(lambda c: close_again(c, True))
                record(Request(chained, kind, net_id, x))
            if kind == "cancel":
                req.cancelled_by_us = f.cancel() or True
            elif kind == "chain":
                # a second job submitted from the worker that completes the first
                chained = f.then(lambda _, x=x, n=net_id: pool.forward({"x": x}, net_id=n))
                record(Request(chained, kind, net_id, x))
            elif kind == "then_raises":
                record(Request(f.then(lambda _: 1 / 0), "then_raises", net_id, x))
                req.kind = "plain"
            record(req)
            if prng.random() < 0.2:
                time.sleep(prng.random() * 0.003)

    threads = [threading.Thread(target=client, args=(k,), name=f"stress-client-{k}") for k in range(clients)]
    result.client_threads = threads
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds * close_after)
    cancel = rng.random() < 0.5
    closing.set()
    pool.close(wait=True, cancel_pending=cancel if cancel_pending is None else cancel_pending)
    time.sleep(seconds * (1 - close_after) * 0.1)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    for r in result.requests:  # every Future must end without our help
        try:
            r.future.exception(timeout=60)
        except (cf.CancelledError, cf.TimeoutError):
            pass
    result.seconds = time.perf_counter() - start
    return result
