"""How large a batch is: its share of the waiting jobs over the workers, never a wait while a
worker is idle, and the preferred size measured at warm-up (pooled_predictor.serving.batching)."""

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from pooled_predictor import Config, PooledPredictor, Predictor
from pooled_predictor.serving import batching
from pooled_predictor.serving.batching import Batcher, fair_share, preferred_size
from pooled_predictor.serving.jobqueue import JobQueue
from tests.conftest import make_mlp
from tests.pool.faults import Gate

X = np.ones((1, 16), np.float32)


class J:
    """A queued job as JobQueue sees it."""

    def __init__(self, rows=1):
        self.priority, self.enqueued, self.rows = 0, time.perf_counter(), rows


def rows(job):
    return job.rows


# ---- the share ---------------------------------------------------------------------------
def test_fair_share_splits_the_models_rows_over_the_workers_that_take_them():
    # worker 0 forms a batch with 8 rows waiting
    assert fair_share(8, 0, 0, [False, True], [None, None]) == (4, True)          # the other is idle
    assert fair_share(8, 0, 0, [False, False], [None, (0, 1)]) == (5, False)      # it runs 1 row of this model
    assert fair_share(8, 0, 0, [False, False], [None, (0, 8)]) == (8, False)      # it runs a batch of 8
    assert fair_share(8, 0, 0, [False, False], [None, (1, 1)]) == (None, False)   # it runs another model
    assert fair_share(8, 0, 0, [False], [None]) == (None, False)                  # no other worker
    assert fair_share(9, 0, 1, [True, False, True], [None, None, None]) == (3, True)


def test_two_idle_workers_and_eight_queued_jobs_neither_takes_all():
    q = JobQueue(capacity=8)
    for _ in range(8):
        q.put(J(), block=False, timeout=None)
    idle, running = [True, True], [None, None]
    batches = []
    for me in (0, 1):  # each worker in turn takes a job and gathers, the other one idle
        idle[me] = False
        first = q.get()
        more = q.gather(first, lambda j: True, rows, max_rows=8, delay=10.0,
                        share=lambda w, me=me: fair_share(w, 0, me, idle, running))
        running[me] = (0, 1 + len(more))
        batches.append(1 + len(more))
    assert batches == [4, 4] and len(q) == 0


HOUR = 3600.0


def _returns_before_the_delay(call):
    """call()'s result, from a thread that must end well inside an hour-long max_queue_delay (one that
    waited for the delay is still alive after the join: no elapsed time is compared)."""
    out = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "gather waited for max_queue_delay"
    return out[0]


def test_a_batch_reaching_its_share_goes_without_waiting_for_the_delay():
    q = JobQueue(capacity=8)
    for _ in range(4):
        q.put(J(), block=False, timeout=None)
    first = q.get()
    # the other worker runs 4 rows of the model: this batch's share of 8 is 4, reached at once
    more = _returns_before_the_delay(lambda: q.gather(
        first, lambda j: True, rows, max_rows=8, delay=HOUR,
        share=lambda w: fair_share(w, 0, 0, [False, False], [None, (0, 4)])))
    assert len(more) == 3


def test_a_job_too_large_for_its_share_still_runs_and_takes_nothing_more():
    q = JobQueue(capacity=8)
    q.put(J(rows=5), block=False, timeout=None)
    q.put(J(), block=False, timeout=None)
    first = q.get()
    more = q.gather(first, lambda j: True, rows, max_rows=8, delay=30.0,
                    share=lambda w: fair_share(w, 0, 0, [False, True], [None, None]))
    assert more == [] and len(q) == 1


def test_a_lone_job_never_waits_for_the_delay_while_a_worker_is_idle():
    q = JobQueue(capacity=8)
    q.put(J(), block=False, timeout=None)
    first = q.get()
    more = _returns_before_the_delay(lambda: q.gather(
        first, lambda j: True, rows, max_rows=8, delay=HOUR,
        share=lambda w: fair_share(w, 0, 0, [False, True], [None, None])))
    assert more == []


def test_a_waiting_batch_goes_when_a_worker_becomes_idle():
    import threading

    q = JobQueue(capacity=8)
    q.put(J(), block=False, timeout=None)
    first = q.get()
    idle, running = [False, False], [None, (0, 8)]  # the other worker runs 8 rows: this batch waits for 4
    got = []
    t = threading.Thread(target=lambda: got.append(q.gather(first, lambda j: True, rows, max_rows=8, delay=30.0,
                                                            share=lambda w: fair_share(w, 0, 0, idle, running))))
    t.start()
    deadline = time.perf_counter() + 10
    while not q._batchers_waiting and time.perf_counter() < deadline:
        time.sleep(0.001)
    assert q._batchers_waiting == 1
    idle[1], running[1] = True, None
    getter = threading.Thread(target=q.get)  # the other worker goes idle: its get() wakes the batch
    getter.start()
    t.join(10)
    assert got == [[]] and not t.is_alive()  # it went alone, long before its 30 s delay
    q.close(drain=False)
    getter.join(10)


def test_in_the_pool_a_lone_job_runs_at_once_beside_an_idle_worker():
    # a 30 s delay: a job that waited for it would fail the 10 s result() timeouts
    config = Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2, queue_capacity=8,
                    max_batch_size=8, max_queue_delay=30.0)
    with PooledPredictor(config) as pool:
        a = pool.forward({"x": X})    # worker 0 starts and takes it, no other worker yet: it waits
        time.sleep(0.1)
        b = pool.forward({"x": X})    # starts worker 1, idle: a goes, b runs on worker 1
        a.result(timeout=10), b.result(timeout=10)
        deadline = time.perf_counter() + 10
        while sum(pool._core.idle) < 2 and time.perf_counter() < deadline:
            time.sleep(0.001)
        c = pool.forward({"x": X})    # both workers idle: c runs at once
        c.result(timeout=10)
        assert pool.stats().nets[0].batch_sizes == {1: 3}  # all three ran alone


def test_in_the_pool_two_workers_share_the_queued_jobs():
    gate = Gate()
    config = Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2, queue_capacity=16,
                    max_batch_size=8)
    pool = PooledPredictor(config, gate)
    held = [pool.forward({"x": X})]
    gate.wait_for_workers(1)
    held.append(pool.forward({"x": X}))  # starts the second worker, held too
    gate.wait_for_workers(1)
    futures = [pool.forward({"x": X}) for _ in range(8)]
    gate.open()
    for f in held + futures:
        f.result(timeout=30)
    pool.close()
    sizes = pool.stats().nets[0].batch_sizes
    # the first worker back takes its share (4 with the other idle, 5 with it still running one
    # row), never all 8; the other takes the rest
    assert max(sizes) <= 5 and sum(k * v for k, v in sizes.items()) == 10


# ---- the preferred size ------------------------------------------------------------------
@pytest.mark.parametrize("costs,size", [
    ({1: 10.0, 2: 9.9, 4: 9.8, 8: 10.5}, 1),   # a row costs as much in a batch: no batching
    ({1: 10.0, 2: 9.2, 4: 8.3, 8: 8.5}, 1),    # 17% cheaper at best: not worth the waiting
    ({1: 10.0, 2: 6.0, 4: 4.0, 8: 3.9}, 4),    # 8 is within 5% of 4: the smaller size
    ({1: 10.0, 2: 7.9, 4: 9.5, 8: 12.0}, 2),   # cheapest at 2
    ({1: 1.1, 2: 0.6, 4: 0.35, 8: 0.225}, 8),  # per-batch overhead: the largest
])
def test_preferred_size_is_the_smallest_near_the_cheapest_row_when_it_pays(costs, size):
    assert preferred_size(costs) == size


class FakeNet:
    """A Net whose forward takes `overhead + per_row * rows` seconds on a fake clock."""

    def __init__(self, clock, overhead, per_row, program):
        self.clock, self.overhead, self.per_row = clock, overhead, per_row
        self.real = Predictor(program).new_net()
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def forward(self, feeds, *args, **kw):
        rows = next(iter(feeds.values())).shape[0]
        self.calls.append(rows)
        self.clock[0] += self.overhead + self.per_row * rows


@pytest.mark.parametrize("overhead,per_row,max_rows,preferred", [
    (0.0, 1.0, 1, ()),      # rows cost the same in any batch: the model does not batch
    (1.0, 0.1, 8, (8,)),    # a fixed cost per forward: the largest batch
])
def test_calibrate_times_each_batch_size_and_sets_the_preferred_size(overhead, per_row, max_rows, preferred):
    clock = [0.0]
    model = make_mlp()
    batcher = Batcher(Predictor(model).program, 8, 0.002)
    net = FakeNet(clock, overhead, per_row, model)
    assert batcher.calibrate(net, {"x": (1, 16)}, rounds=3, budget=1e9, clock=lambda: clock[0])
    # a forward each for its layout, then 3 rounds of 8 rows at each size
    assert sorted(set(net.calls)) == [1, 2, 4, 8] and len(net.calls) == 4 + 3 * (8 + 4 + 2 + 1)
    assert batcher.row_costs == pytest.approx({b: overhead / b + per_row for b in (1, 2, 4, 8)})
    assert (batcher.max_rows, batcher.preferred) == (max_rows, preferred)


@pytest.mark.parametrize("one_blas_thread,clock", [(True, time.thread_time), (False, time.perf_counter)])
def test_the_pool_calibrates_on_cpu_time_while_blas_runs_one_thread(monkeypatch, one_blas_thread, clock):
    seen = []
    monkeypatch.setattr(Batcher, "calibrate", lambda self, net, shapes, clock=None: seen.append(clock) or True)
    config = Config(model_bytes=[make_mlp().SerializeToString()], max_batch_size=8, warmup=True,
                    disable_blas_threading=one_blas_thread)
    with PooledPredictor(config):
        assert seen == [clock]


def test_warmup_calibrates_and_a_model_that_gains_nothing_does_not_batch(monkeypatch):
    monkeypatch.setattr(batching, "preferred_size", lambda costs: 1)
    config = Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1, max_batch_size=8, warmup=True)
    with PooledPredictor(config) as pool:
        plan = pool._core.batch_plans[0]
        assert sorted(plan.row_costs) == [1, 2, 4, 8] and plan.max_rows == 1
        assert pool._core.batchers[0] is None
        assert pool.forward({"x": X}).result(timeout=30)["y"].shape == (1, 10)
        assert pool.stats().to_dict()["nets"][0].get("batch_sizes") in (None, {})


def test_warmup_keeps_batching_where_it_pays_and_given_preferred_sizes_are_not_measured(monkeypatch):
    monkeypatch.setattr(batching, "preferred_size", lambda costs: 4)
    model = make_mlp().SerializeToString()
    with PooledPredictor(Config(model_bytes=[model], max_batch_size=8, warmup=True)) as pool:
        assert (pool._core.batchers[0].max_rows, pool._core.batchers[0].preferred) == (4, (4,))
    with PooledPredictor(Config(model_bytes=[model], max_batch_size=8, warmup=True,
                                preferred_batch_sizes=(2, 8))) as pool:
        b = pool._core.batchers[0]
        assert (b.max_rows, b.preferred, b.row_costs) == (8, (2, 8), {})


def test_a_free_dimension_beyond_the_first_is_calibrated_only_at_given_warmup_shapes():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "W"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    with PooledPredictor(Config(model_bytes=[m.SerializeToString()], max_batch_size=8, warmup=True)) as pool:
        b = pool._core.batch_plans[0]
        assert (b.row_costs, b.max_rows) == ({}, 8)  # a width of 1 would mislead: not measured
    with PooledPredictor(Config(model_bytes=[m.SerializeToString()], max_batch_size=8, warmup=True,
                                warmup_shapes=[{"x": (1, 64)}])) as pool:
        assert sorted(pool._core.batch_plans[0].row_costs) == [1, 2, 4, 8]


def test_graph_rows_are_powers_of_two_to_8_then_multiples_of_8_up_to_max_rows():
    b = Batcher.__new__(Batcher)
    b.max_rows = 12
    assert [b.graph_rows(r) for r in range(1, 13)] == [1, 2, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12]
    b.max_rows = 8
    assert [b.graph_rows(r) for r in (1, 3, 5, 8)] == [1, 4, 8, 8]
    b.max_rows = 32
    assert [b.graph_rows(r) for r in (9, 16, 17, 21, 24, 25, 31, 32)] == [16, 16, 24, 24, 24, 32, 32, 32]
    assert sorted({b.graph_rows(r) for r in range(1, 33)}) == [1, 2, 4, 8, 16, 24, 32]
    b.max_rows = 30
    assert [b.graph_rows(r) for r in (24, 25, 30)] == [24, 30, 30]


def test_on_a_device_with_graphs_batches_are_padded_to_graph_sizes(monkeypatch):
    """Triton's graph batch sizes: a batch of 3 jobs runs as 4 rows (one of zeros), so the Net
    sees few shapes, each captured once; every job gets its own rows, right."""
    from pooled_predictor.engine import device as device_mod
    from tests.cuda_stand_in import HostMemoryDevice

    class Everything(HostMemoryDevice):  # every node "on the device", graphs on
        def kernel_for(self, step, ctx):
            return step.kernel

    dev = Everything(graphs=True)
    staged = []
    to_device = dev.to_device
    dev.to_device = lambda x, *, out: (staged.append(x.shape[0]), to_device(x, out=out))
    monkeypatch.setattr(device_mod, "_CUDA", {0: dev})
    model = make_mlp()
    cpu = Predictor(model.SerializeToString())
    xs = [np.random.default_rng(i).standard_normal((1, 16)).astype(np.float32) for i in range(4)]
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[model.SerializeToString()], device="cuda", num_threads=1,
                                  queue_capacity=8, max_batch_size=8), gate)
    try:
        held = pool.forward({"x": xs[0]})
        gate.wait_for_workers(1)
        futures = [pool.forward({"x": x}) for x in xs[1:]]  # 3 rows queued behind the held job
        gate.open()
        results = [f.result(timeout=30)["y"] for f in [held] + futures]
    finally:
        gate.open()
        pool.close()
    for x, y in zip(xs, results):
        np.testing.assert_allclose(y, cpu.forward({"x": x})["y"], rtol=1e-6, atol=1e-7)
    assert pool.stats().nets[0].batch_sizes == {1: 1, 3: 1}  # the jobs' rows, not the padding
    assert sorted(set(staged)) == [1, 4]  # the Net ran 1 row, then 3 jobs padded to 4
