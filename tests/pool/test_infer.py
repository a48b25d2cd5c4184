"""PooledPredictor.infer(): a job run on the calling thread while fewer than num_threads run
(onnxruntime's run()), else queued and waited for as forward().result()."""

import threading

import numpy as np
import pytest

from pooled_predictor import Callback, Config, PooledPredictor
from pooled_predictor.errors import InputError, KernelError, PoolClosedError, UnknownBlobError, UnknownNetError
from tests.conftest import make_mlp, mlp_reference
from tests.pool.faults import Gate, InjectedFault, faulty_reference, make_faulty_mlp

X = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)


def _clients(pool, clients: int, calls: int, expect) -> list:
    """`clients` threads each calling pool.infer() `calls` times, checking each result; the errors raised."""
    errors = []

    def client():
        try:
            for _ in range(calls):
                np.testing.assert_allclose(pool.infer([X])["y"], expect, rtol=1e-5, atol=1e-6)
        except BaseException as exc:  # noqa: BLE001 -- returned
            errors.append(exc)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


class Threads(Callback):
    """Records the thread of each on_job_processed (the thread that ran the job)."""

    def __init__(self):
        self.threads = []

    def on_job_processed(self, process_time_ms):
        self.threads.append(threading.current_thread())


def test_infer_runs_on_the_calling_thread_with_forwards_bits():
    model = make_mlp()
    cb = Threads()
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=2), cb) as pool:
        out = pool.infer({"x": X}, deadline=10.0)
        assert cb.threads == [threading.current_thread()]
        assert pool.worker_count == 0  # no job was queued: no worker started
        np.testing.assert_array_equal(out["y"], pool.forward({"x": X}).result(timeout=30)["y"])
        np.testing.assert_allclose(out["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)
        counts = pool.stats().total().counts
        assert counts["direct"] == 1 and counts["submitted"] == counts["completed"] == 2
        out["y"][:] = 0  # a copy: the next job's outputs are not touched
        np.testing.assert_allclose(pool.infer([X])["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)


def test_infer_queues_when_num_threads_jobs_run():
    gate = Gate()
    model = make_mlp()
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=1), gate) as pool:
        held = pool.forward([X])
        gate.wait_for_workers(1)  # the one worker is busy: infer() must queue behind it
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("y", pool.infer([X])["y"]))
        t.start()
        for _ in range(200):
            if gate.enqueued == 2:
                break
            threading.Event().wait(0.01)
        assert gate.enqueued == 2 and t.is_alive()
        gate.open()
        t.join(30)
        held.result(timeout=30)
        np.testing.assert_allclose(got["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)
        assert pool.stats().total().counts["direct"] == 0


def test_infer_runs_beside_a_busy_worker_while_a_thread_is_free():
    gate = Gate()
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2), gate) as pool:
        held = pool.forward([X])
        gate.wait_for_workers(1)
        pool.infer([X])  # one of two busy, nothing queued: runs here, while the worker is held
        assert pool.stats().total().counts["direct"] == 1 and gate.enqueued == 1
        gate.open()
        held.result(timeout=30)


def test_infer_raises_the_jobs_errors_at_the_call_and_serves_on():
    model = make_faulty_mlp()
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=2)) as pool:
        with pytest.raises(KernelError, match="FailIfNegative") as err:
            pool.infer([-np.abs(X)])  # the kernel's error, raised on this thread
        assert isinstance(err.value.__cause__, InjectedFault)
        with pytest.raises(InputError):
            pool.infer([X[:, :3]])  # a wrong dim: checked before anything runs
        with pytest.raises(InputError):
            pool.infer([X.astype(np.float64)])
        with pytest.raises(UnknownNetError):
            pool.infer([X], net_id=1)
        with pytest.raises(UnknownBlobError):
            pool.infer([X], ["nope"])
        np.testing.assert_allclose(pool.infer([np.abs(X)])["y"], faulty_reference(model, np.abs(X)),
                                   rtol=1e-5, atol=1e-6)
        counts = pool.stats().total().counts
        assert (counts["failed"], counts["completed"], counts["direct"]) == (1, 1, 2)
    with pytest.raises(PoolClosedError):
        pool.infer([X])


def test_caller_nets_are_bounded_by_num_threads():
    model = make_mlp()
    expect = mlp_reference(model, X)
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=2)) as pool:
        assert not _clients(pool, 6, 30, expect)
        core = pool._core
        assert core.callers == 0 and 1 <= len(core.caller_nets[0]) <= 2
        counts = pool.stats().total().counts
        assert counts["submitted"] == counts["completed"] == 180  # the rest went through the queue
    assert core.caller_nets == [[]]  # close() lets them go


def test_jobs_of_a_batching_model_go_through_the_queue():
    model = make_mlp()
    with PooledPredictor(Config(model_bytes=[model.SerializeToString()], num_threads=2, max_batch_size=4)) as pool:
        np.testing.assert_allclose(pool.infer([X])["y"], mlp_reference(model, X), rtol=1e-5, atol=1e-6)
        assert pool.stats().total().counts["direct"] == 0


def test_pinned_predictors_infer_on_their_model():
    a, b = make_mlp(seed=1), make_mlp(seed=2)
    preds = PooledPredictor.make_predictors(Config(model_bytes=[a.SerializeToString(), b.SerializeToString()]))
    try:
        np.testing.assert_allclose(preds[1].infer([X])["y"], mlp_reference(b, X), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(preds[0].infer([X])["y"], mlp_reference(a, X), rtol=1e-5, atol=1e-6)
    finally:
        preds[0].close()


def test_infer_slots_cap_the_callers_computing_at_once():
    """infer_slots=1, 4 client threads: one forward at a time on the callers' threads, one caller Net."""
    model = make_mlp()
    expect = mlp_reference(model, X)
    lock = threading.Lock()
    state = {"now": 0, "most": 0}
    config = Config(model_bytes=[model.SerializeToString()], num_threads=4, infer_slots=1)
    with PooledPredictor(config) as pool:
        assert pool._core.caller_slots is not None
        net_class = type(pool.predictor(0).canonical_net)
        forward = net_class.forward

        def counted(self, *a, **k):
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            try:
                threading.Event().wait(0.002)
                return forward(self, *a, **k)
            finally:
                with lock:
                    state["now"] -= 1

        net_class.forward = counted
        try:
            errors = _clients(pool, 4, 10, expect)
        finally:
            net_class.forward = forward
        assert not errors and state["most"] == 1
        counts = pool.stats().total().counts
        assert counts["completed"] == counts["direct"] == 40 and pool.worker_count == 0
        assert len(pool._core.caller_nets[0]) == 1


def test_infer_slots_never_bind_at_or_above_num_threads():
    config = Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2, infer_slots=2)
    with PooledPredictor(config) as pool:
        assert pool._core.caller_slots is None  # no cost where it cannot bind
    with pytest.raises(ValueError, match="infer_slots"):
        Config(model_bytes=[b"x"], infer_slots=-1).validate()
