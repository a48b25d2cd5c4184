"""Shared pieces of the pool tests: a counting Callback and small models."""

from __future__ import annotations

import threading

from pooled_predictor import Callback


class CountingCallback(Callback):
    """Counts each callback, thread-safely (fb-caffe-exts' TestCallback)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.enqueued = self.dequeued = self.processed = 0
        self.queue_sizes, self.delays_ms, self.process_ms = [], [], []

    def on_job_enqueued(self, queue_size, enqueue_delay_ms):
        with self.lock:
            self.enqueued += 1
            self.queue_sizes.append(queue_size)
            self.delays_ms.append(enqueue_delay_ms)

    def on_job_dequeued(self):
        with self.lock:
            self.dequeued += 1

    def on_job_processed(self, process_time_ms):
        with self.lock:
            self.processed += 1
            self.process_ms.append(process_time_ms)
