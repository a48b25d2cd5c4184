"""Fault injection for the pool tests: an op that fails on demand, and a gate that holds workers.

`FailIfNegative` (domain test.pooled_predictor) copies its input and raises when
the first element of any row (along the first axis) is negative: a kernel error
chosen by the caller's data, which also fires inside a dynamic batch.
"""

from __future__ import annotations

import threading

import numpy as np
import onnx
from onnx import TensorProto, helper

from pooled_predictor import Callback
from pooled_predictor.ops import kernel, shape_rule

DOMAIN = "test.pooled_predictor"


class InjectedFault(RuntimeError):
    pass


@shape_rule("FailIfNegative", domain=DOMAIN)
def _fail_shape(ctx):
    return [(ctx.shape(0), ctx.dtype(0))]


@kernel("FailIfNegative", since=1, domain=DOMAIN)
def _fail_if_negative(x, *, out):
    if x.size and (x.reshape(x.shape[0], -1)[:, 0] < 0).any():
        raise InjectedFault("injected kernel failure")
    np.copyto(out, x)


def make_faulty_mlp(features=16, classes=10, seed=0) -> onnx.ModelProto:
    """x -> FailIfNegative -> MatMul -> Softmax -> y."""
    w = np.random.default_rng(seed).standard_normal((features, classes)).astype(np.float32)
    nodes = [helper.make_node("FailIfNegative", ["x"], ["checked"], domain=DOMAIN),
             helper.make_node("MatMul", ["checked", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "faulty", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", classes])],
                          [onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 10
    return m


def faulty_reference(model, x):
    w = onnx.numpy_helper.to_array(model.graph.initializer[0])
    logits = x.astype(np.float64) @ w
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)


class Gate(Callback):
    """Holds every worker in on_job_dequeued until open() (to fill the queue deterministically)."""

    def __init__(self):
        self.event = threading.Event()
        self.waiting = threading.Semaphore(0)
        self.lock = threading.Lock()
        self.enqueued = self.dequeued = self.processed = 0
        self.delays_ms = []

    def on_job_enqueued(self, queue_size, enqueue_delay_ms):
        with self.lock:
            self.enqueued += 1
            self.delays_ms.append(enqueue_delay_ms)

    def on_job_dequeued(self):
        with self.lock:
            self.dequeued += 1
        self.waiting.release()
        self.event.wait(30)

    def on_job_processed(self, process_time_ms):
        with self.lock:
            self.processed += 1

    def wait_for_workers(self, n, timeout=10):
        for _ in range(n):
            assert self.waiting.acquire(timeout=timeout), "no worker reached the gate"

    def open(self):
        self.event.set()
