"""Whole Nets on the GPU: models against the CPU, memory (the device arena at the plan, weights once per
device, measured with CuPy's memory pool), placement of an op with no CUDA kernel, worker threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pooled_predictor import Predictor
from pooled_predictor.engine.net import Net, Optimization
from pooled_predictor.engine.placement import IO_COPY_OP
from pooled_predictor.engine.program import Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.ops.cuda import runtime

RNG = np.random.default_rng(3)


def _cnn():
    """Conv-Relu-MaxPool-Conv(+residual)-GlobalAveragePool-Flatten-Gemm-Softmax, with a TopK (no CUDA kernel)."""
    w1, b1 = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.2, RNG.standard_normal(16).astype(np.float32)
    w2, b2 = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, RNG.standard_normal(16).astype(np.float32)
    wf, bf = RNG.standard_normal((10, 16)).astype(np.float32), RNG.standard_normal(10).astype(np.float32)
    k = np.array([3], np.int64)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Add", ["c2", "p1"], ["s2"]),
             n("Relu", ["s2"], ["r2"]), n("GlobalAveragePool", ["r2"], ["g"]), n("Flatten", ["g"], ["f"]),
             n("Gemm", ["f", "wf", "bf"], ["logits"], transB=1), n("Softmax", ["logits"], ["prob"], axis=1),
             n("TopK", ["prob", "k"], ["top", "idx"], axis=1)]
    inits = [numpy_helper.from_array(a, name) for a, name in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wf, "wf"), (bf, "bf"), (k, "k")]]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 3, 32, 32))],
                              [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("top", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("idx", TensorProto.INT64, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


MODEL = _cnn()


@pytest.mark.parametrize("batch", [1, 4])
def test_a_cnn_matches_the_cpu_with_topk_on_the_cpu(batch):
    x = RNG.standard_normal((batch, 3, 32, 32)).astype(np.float32)
    ref = Predictor(MODEL).forward({"x": x})
    gpu = Predictor(MODEL, device="cuda")
    got = gpu.forward({"x": x})
    for name in ("prob", "top"):
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-4, atol=1e-5 * np.abs(ref[name]).max())
    np.testing.assert_array_equal(got["idx"], ref["idx"])
    net = gpu.net()
    assert any(n.op_type == "TopK" for n in net.layout.run_nodes)
    assert "TopK" not in {n.op_type for n in net.layout.run_nodes if n.name in net.layout.device_nodes}
    assert sum(n.op_type == IO_COPY_OP for n in net.layout.run_nodes) >= 2


def test_the_device_arena_is_the_plan_and_weights_are_held_once_per_device():
    pool = runtime.cupy.get_default_memory_pool()
    program = Program(load_onnx(MODEL), "cuda")
    x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
    first = Net(program, optimization=Optimization.MEMORY)
    first.forward({"x": x})
    before = pool.used_bytes()
    nets = [Net(program, optimization=Optimization.MEMORY) for _ in range(3)]
    for net in nets:
        net.forward({"x": x})
    per_net = (pool.used_bytes() - before) / 3
    layout = nets[0].layout
    assert layout.plan.lower_bound_bytes <= layout.arena.nbytes
    # each further Net adds its arena and its kernels' small setup arrays, never the weights again
    weights = sum(a.nbytes for a in program.weights.values())
    assert per_net < layout.arena.nbytes + 64 * 1024 + weights / 2, (per_net, layout.arena.nbytes, weights)


def test_threads_each_with_their_own_net_and_stream():
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    ref = Predictor(MODEL).forward({"x": x})["prob"]
    gpu = Predictor(MODEL, device="cuda")
    errors = []

    def work():
        try:
            with runtime.cupy.cuda.Stream(non_blocking=True):
                for _ in range(20):
                    np.testing.assert_allclose(gpu.forward({"x": x})["prob"], ref, rtol=1e-4, atol=1e-6)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_pool_workers_each_run_on_a_stream_of_their_own():
    """Config(device="cuda", devices=[0, 0]): two workers on GPU 0, each in its own non-blocking
    stream (Device.worker_context); concurrent jobs match the CPU."""
    from pooled_predictor import Config, PooledPredictor

    cupy = runtime.cupy
    streams = {}  # worker thread -> the current stream its then() callbacks saw

    def seen(result):
        name = threading.current_thread().name
        if name.startswith("pooled-predictor-"):
            streams.setdefault(name, set()).add(cupy.cuda.get_current_stream().ptr)
        return result

    xs = [RNG.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    refs = [Predictor(MODEL).forward({"x": x})["prob"] for x in xs]
    pool = PooledPredictor(Config(model_bytes=[MODEL], device="cuda", devices=[0, 0], num_threads=2))
    try:
        futures = [pool.forward({"x": x}, ["prob"]).then(seen) for x in xs]
        got = [f.result(timeout=120)["prob"] for f in futures]
    finally:
        pool.close()
    for g, ref in zip(got, refs):
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    assert streams, "no callback ran on a worker"
    per_worker = [ptrs for ptrs in streams.values()]
    assert all(len(p) == 1 and 0 not in p for p in per_worker), streams  # one non-default stream each
    assert len(set().union(*per_worker)) == len(per_worker)  # and not shared between workers


def test_dynamic_batches_on_the_gpu_pad_to_graph_sizes_and_match_the_cpu():
    """Batch-1 jobs batched on a GPU worker: padded with rows of zeros to the graph sizes (1, 2, 4, 8, 16,
    24, 32; serving/batching.Batcher.graph_rows), captured on a size's second sight and replayed; every
    job gets its own rows, as the CPU computes them. Three waves of 21 jobs: the same sizes again."""
    from pooled_predictor import Config, PooledPredictor

    xs = [RNG.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(21)]
    cpu = Predictor(MODEL)
    refs = [cpu.forward({"x": x})["prob"] for x in xs]
    pool = PooledPredictor(Config(model_bytes=[MODEL], device="cuda", num_threads=1, max_batch_size=32,
                                  max_queue_delay=0.05, preferred_batch_sizes=(32,)))
    try:
        for _ in range(3):
            futures = [pool.forward({"x": x}, ["prob"]) for x in xs]
            got = [f.result(timeout=120)["prob"] for f in futures]
            for g, ref in zip(got, refs):
                np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
        sizes = pool.stats().nets[0].batch_sizes
    finally:
        pool.close()
    assert sum(k * v for k, v in sizes.items()) == 63
    assert max(sizes) > 1, sizes  # the jobs did batch


def test_gpu_out_of_memory_fails_the_job_not_the_worker():
    """An arena the GPU cannot hold (CuPy's pool limited under it): ResourceExhaustedError on that job's
    Future; the worker lives on and the next job, at a size that fits, runs."""
    from pooled_predictor import Config, PooledPredictor, ResourceExhaustedError

    cupy = runtime.cupy
    mempool = cupy.get_default_memory_pool()
    pool = PooledPredictor(Config(model_bytes=[MODEL], device="cuda", num_threads=1))
    small = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    big = RNG.standard_normal((256, 3, 32, 32)).astype(np.float32)  # an arena of tens of MB
    try:
        ref = pool.forward({"x": small}, ["prob"]).result(timeout=120)["prob"]
        limit = mempool.get_limit()
        mempool.set_limit(size=mempool.total_bytes() + (1 << 20))
        try:
            with pytest.raises(ResourceExhaustedError):
                pool.forward({"x": big}, ["prob"]).result(timeout=120)
        finally:
            mempool.set_limit(size=limit)
        again = pool.forward({"x": small}, ["prob"]).result(timeout=120)["prob"]
    finally:
        pool.close()
    np.testing.assert_array_equal(again, ref)
    assert pool.worker_count == 1


def _cnn_without_topk():
    import onnx

    model = onnx.load_from_string(MODEL)
    keep = [n for n in model.graph.node if n.op_type != "TopK"]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    outputs = [o for o in model.graph.output if o.name == "prob"]
    del model.graph.output[:]
    model.graph.output.extend(outputs)
    return model.SerializeToString()


def test_a_net_wholly_on_the_gpu_is_captured_once_and_replays_the_eager_result():
    """CUDA graphs (engine/net.py): on a stream of its own, the second run at a shape is captured and
    replayed; every run, replayed or not, matches the CPU with new input values."""
    cupy = runtime.cupy
    model = _cnn_without_topk()
    cpu = Predictor(model)
    gpu = Predictor(model, device="cuda")
    with cupy.cuda.Stream(non_blocking=True):
        for i in range(5):
            x = RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)
            got = gpu.forward({"x": x})["prob"]
            ref = cpu.forward({"x": x})["prob"]
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
        net = gpu.net()
        assert net.layout.graphable is True
        assert net.graphs.captures == 1 and net.graphs.hits == 3


# ---- transformers: every node on the GPU, against the CPU (tests/test_cuda_transformer_placement.py's graphs) ----
@pytest.mark.parametrize("which", ["bert", "vit"])
def test_a_small_transformer_runs_wholly_on_the_gpu_and_matches_the_cpu(which):
    from tests.onnx_helpers import assert_close
    from tests.transformer_graphs import bert_model, vit_model

    if which == "bert":
        model = bert_model().SerializeToString()
        ids = RNG.integers(1, 50, (2, 8)).astype(np.int64)
        ids[1, 5:] = 0  # padding: the mask path (Equal, Not, Cast) matters
        feeds = {"input_ids": ids}
    else:
        model = vit_model().SerializeToString()
        feeds = {"data": RNG.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    ref = Predictor(model).forward(feeds)
    gpu = Predictor(model, device="cuda")
    got = gpu.forward(feeds)
    layout = gpu.net().layout
    host = [f"{n.name} ({n.op_type})" for n in layout.run_nodes
            if n.name not in layout.device_nodes and n.op_type != IO_COPY_OP]
    assert not host, f"on the CPU: {host}"
    for name, r in ref.items():
        assert_close(got[name], r, 1e-4, f"{which} {name}")
