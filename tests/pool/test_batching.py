"""Dynamic batching: batched outputs equal unbatched ones; per-job cancellation, deadlines,
errors and callbacks inside batches; which models batch."""

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pooled_predictor import (Config, DeadlineExceededError, KernelError, PooledPredictor, Predictor)
from pooled_predictor.serving.batching import Batcher, free_batch_dimension
from tests.conftest import make_mlp
from tests.pool.faults import Gate, InjectedFault, make_faulty_mlp

ROWS = [1, 2, 1, 3, 1]


def held_pool(model_bytes, **kw):
    """A one-worker pool whose worker is held (in on_job_dequeued) on a first job."""
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[model_bytes], num_threads=1, queue_capacity=16, **kw), gate)
    first = pool.forward({"x": np.ones((1, 16), np.float32)})
    gate.wait_for_workers(1)
    return pool, gate, first


def one_node(op, in_shape, out_shape, **attrs):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], op.lower(),
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_batched_outputs_equal_unbatched_and_stats_count_batch_sizes():
    model = make_mlp().SerializeToString()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((r, 16)).astype(np.float32) for r in ROWS]
    pool, gate, first = held_pool(model, max_batch_size=8)
    futures = [pool.forward({"x": x}) for x in xs]
    gate.open()
    outs = [f.result(timeout=30)["y"] for f in futures]
    first.result(timeout=30)
    pool.close()
    single = Predictor(model)
    for x, y in zip(xs, outs):
        expect = single.forward({"x": x}, ["y"])[0]
        assert y.shape == expect.shape and y.flags.c_contiguous and y.base is None  # its own copy
        np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-7)
    snap = pool.stats()
    assert snap.nets[0].batch_sizes == {1: 1, 5: 1}  # the held job alone, then the 5 queued ones (8 rows)
    assert snap.to_dict()["nets"][0]["batch_sizes"] == {1: 1, 5: 1}
    assert gate.dequeued == gate.processed == 6 and snap.total().counts["completed"] == 6


def test_max_batch_size_counts_rows_and_other_signatures_run_apart():
    model = one_node("Relu", ["N", "M"], ["N", "M"])
    pool, gate, first = held_pool(model.SerializeToString(), max_batch_size=4)
    xs = [np.full((2, 16), -1.0, np.float32), np.ones((1, 8), np.float32), np.ones((2, 16), np.float32),
          np.ones((1, 16), np.float32), np.ones((3, 8), np.float32), np.ones((5, 16), np.float32)]
    futures = [pool.forward({"x": x}) for x in xs]
    gate.open()
    for x, f in zip(xs, futures):
        np.testing.assert_array_equal(f.result(timeout=30)["y"], np.maximum(x, 0))
    pool.close()
    # (2,16)+(2,16) fill 4 rows; (1,8)+(3,8) batch apart; (1,16) alone; 5 rows > 4 run alone
    assert pool.stats().nets[0].batch_sizes == {1: 3, 2: 2}


def test_preferred_size_stops_the_batch_and_the_rest_batches_next():
    pool, gate, first = held_pool(make_mlp().SerializeToString(), max_batch_size=8, preferred_batch_sizes=(4,))
    futures = [pool.forward({"x": np.ones((1, 16), np.float32)}) for _ in range(6)]
    gate.open()
    for f in futures:
        f.result(timeout=30)
    pool.close()
    assert pool.stats().nets[0].batch_sizes == {1: 1, 4: 1, 2: 1}


def test_queue_delay_waits_for_more_jobs():
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1, queue_capacity=8,
                                max_batch_size=4, max_queue_delay=5.0)) as pool:
        futures = [pool.forward({"x": np.ones((1, 16), np.float32)})]
        time.sleep(0.05)  # the worker holds the first job and waits for more
        futures += [pool.forward({"x": np.ones((1, 16), np.float32)}) for _ in range(3)]
        for f in futures:  # 4 rows = max_batch_size: runs without waiting the 5 s
            f.result(timeout=4)
        assert pool.stats().nets[0].batch_sizes == {4: 1}


def test_cancelled_and_expired_jobs_leave_a_waiting_batch():
    x = np.ones((1, 16), np.float32)
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1, queue_capacity=8,
                                max_batch_size=8, max_queue_delay=0.4)) as pool:
        a = pool.forward({"x": x})
        late = pool.forward({"x": x}, deadline=0.1)
        b = pool.forward({"x": x})
        time.sleep(0.05)
        assert a.cancel()   # taken into the batch, not started: it leaves
        with pytest.raises(DeadlineExceededError):
            late.result(timeout=30)
        assert b.result(timeout=30)["y"].shape == (1, 10)
        counts = pool.stats().total().counts
    assert a.cancelled()
    assert (counts["cancelled"], counts["expired"], counts["completed"]) == (1, 1, 1)


def test_an_error_in_a_batch_fails_only_the_jobs_that_cause_it():
    model = make_faulty_mlp()
    good = np.abs(np.random.default_rng(1).standard_normal((2, 16))).astype(np.float32)
    bad = good.copy()
    bad[1, 0] = -1.0   # a row of this job makes the kernel fail
    pool, gate, first = held_pool(model.SerializeToString(), max_batch_size=8)
    futures = [pool.forward({"x": x}) for x in (good, bad, good)]
    gate.open()
    with pytest.raises(KernelError) as info:
        futures[1].result(timeout=30)
    assert isinstance(info.value.__cause__, InjectedFault)
    expect = Predictor(model).forward({"x": good}, ["y"])[0]
    for f in (futures[0], futures[2]):
        np.testing.assert_allclose(f.result(timeout=30)["y"], expect, rtol=1e-5, atol=1e-7)
    pool.close()
    counts = pool.stats().total().counts
    assert (counts["failed"], counts["completed"]) == (1, 3)
    assert gate.dequeued == gate.processed == 4  # once per job, the failed batch not counted twice


def test_jobs_asking_for_intermediates_run_alone():
    pool, gate, first = held_pool(make_mlp().SerializeToString(), max_batch_size=8, keep=["h2"])
    x = np.ones((1, 16), np.float32)
    futures = [pool.forward({"x": x}, ["h2", "y"]), pool.forward({"x": x}), pool.forward({"x": x})]
    gate.open()
    assert futures[0].result(timeout=30)["h2"].shape == (1, 32)
    for f in futures[1:]:
        f.result(timeout=30)
    pool.close()
    assert pool.stats().nets[0].batch_sizes == {1: 2, 2: 1}


def test_which_models_batch():
    mlp = Predictor(make_mlp())
    assert free_batch_dimension(mlp.program) == ("N", "")
    fixed = Predictor(make_mlp(batch=1))
    assert free_batch_dimension(fixed.program)[0] is None
    with pytest.raises(ValueError, match="fixed first dimension 1"):
        Batcher(fixed.program, 8, 0.0)
    # a per-model max_batch_size for a model that cannot batch is an error; a scalar skips it
    models = [make_mlp().SerializeToString(), make_mlp(batch=1).SerializeToString()]
    with pytest.raises(ValueError, match="net 1 cannot batch"):
        PooledPredictor(Config(model_bytes=models, max_batch_size=[8, 8]))
    with PooledPredictor(Config(model_bytes=models, max_batch_size=8)) as pool:
        assert pool._core.batchers[0] is not None and pool._core.batchers[1] is None


@pytest.mark.parametrize("op,out_shape,attrs,batches", [
    ("Relu", ["K", 4], {}, True),                            # unrelated symbol: the probe shows dim 0 follows
    ("Transpose", [4, "N"], {"perm": [1, 0]}, False),        # dim 0 moves: never batched
    ("ReduceSum", [1, 4], {"axes": None, "keepdims": 1}, False),  # rows are summed together
])
def test_shape_probe_decides_outputs_not_declared_with_the_batch_symbol(op, out_shape, attrs, batches):
    attrs = {k: v for k, v in attrs.items() if v is not None}
    if op == "ReduceSum":  # opset 13+: axes is an input
        g = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "r",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 10
    else:
        model = one_node(op, ["N", 4], out_shape, **attrs)
    p = Predictor(model)
    batcher = Batcher(p.program, 8, 0.0)

    class J:
        batch_key = None
        output_names = p.output_names
        inputs = {"x": np.ones((1, 4), np.float32)}

    assert batcher.admits(J(), p.new_net()) is batches


def test_a_worker_takes_only_its_share_when_others_are_idle():
    from pooled_predictor.serving.jobqueue import JobQueue

    class J:
        def __init__(self):
            self.priority, self.enqueued, self.rows = 0, 0.0, 1

    q = JobQueue(capacity=8)
    for _ in range(6):
        q.put(J(), block=False, timeout=None)
    first = q.get()
    more = q.gather(first, lambda j: True, lambda j: j.rows, max_rows=8, delay=10.0,
                    share=lambda rows: (-(-rows // 2), True))
    assert len(more) == 2 and len(q) == 3   # 3 of the 6 rows; the idle worker gets the rest at once
    rest = q.gather(q.get(), lambda j: True, lambda j: j.rows, max_rows=8, delay=0.0)
    assert len(rest) == 2 and len(q) == 0


def test_jobs_of_two_models_with_the_same_signature_never_share_a_batch():
    a, b = make_mlp(seed=1), make_mlp(seed=2)
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[a.SerializeToString(), b.SerializeToString()], num_threads=1,
                                  queue_capacity=16, max_batch_size=8), gate)
    x = np.random.default_rng(3).standard_normal((1, 16)).astype(np.float32)
    first = pool.forward({"x": x})
    gate.wait_for_workers(1)
    futures = [(i % 2, pool.forward({"x": x}, net_id=i % 2)) for i in range(6)]
    gate.open()
    first.result(timeout=30)
    for net_id, f in futures:
        expect = Predictor([a, b][net_id]).forward({"x": x}, ["y"])[0]
        np.testing.assert_allclose(f.result(timeout=30)["y"], expect, rtol=1e-5, atol=1e-7)
    pool.close()
    snap = pool.stats()
    assert snap.nets[0].batch_sizes == {1: 1, 3: 1} and snap.nets[1].batch_sizes == {3: 1}
