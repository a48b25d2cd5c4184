"""A Callback that feeds prometheus-client metrics (optional extra: pip install "pooled-predictor[prometheus]").

    from pooled_predictor.serving.prometheus import PrometheusCallback
    pool = PooledPredictor(config, PrometheusCallback())

Metrics (names prefixed by `prefix`, default "pooled_predictor"):
    <prefix>_jobs_enqueued_total      Counter
    <prefix>_jobs_dequeued_total      Counter
    <prefix>_jobs_processed_total     Counter
    <prefix>_queue_size               Gauge, the queue size after the last enqueue
    <prefix>_enqueue_delay_seconds    Histogram, time producers blocked on a full queue
    <prefix>_process_seconds          Histogram, run time of a job on a worker
"""

from __future__ import annotations

from .pool import Callback

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class PrometheusCallback(Callback):
    """Pool callbacks as Prometheus metrics.

    Args:
        registry: a prometheus_client CollectorRegistry (default: the global REGISTRY).
        prefix: metric name prefix.
        labels: constant labels added to every metric (e.g. {"model": "ocr"}).
    Raises:
        ImportError: prometheus-client is not installed (the `prometheus` extra).
    """

    def __init__(self, registry=None, prefix: str = "pooled_predictor", labels: dict | None = None):
        try:
            import prometheus_client as prom
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("PrometheusCallback needs prometheus-client: "
                              "pip install 'pooled-predictor[prometheus]'") from exc
        kw = {"registry": registry} if registry is not None else {}
        names = sorted(labels or {})
        values = [str((labels or {})[n]) for n in names]

        def make(cls, name, doc, **extra):
            metric = cls(f"{prefix}_{name}", doc, labelnames=names, **extra, **kw)
            return metric.labels(*values) if names else metric

        self.enqueued = make(prom.Counter, "jobs_enqueued", "Jobs added to the queue")
        self.dequeued = make(prom.Counter, "jobs_dequeued", "Jobs taken from the queue by a worker")
        self.processed = make(prom.Counter, "jobs_processed", "Jobs run by a worker (success or failure)")
        self.queue_size = make(prom.Gauge, "queue_size", "Queue size after the last enqueue")
        self.enqueue_delay = make(prom.Histogram, "enqueue_delay_seconds",
                                  "Time a producer blocked waiting for room in the queue", buckets=_BUCKETS)
        self.process_time = make(prom.Histogram, "process_seconds", "Run time of a job on a worker",
                                 buckets=_BUCKETS)

    def on_job_enqueued(self, queue_size: int, enqueue_delay_ms: float) -> None:
        self.enqueued.inc()
        self.queue_size.set(queue_size)
        self.enqueue_delay.observe(enqueue_delay_ms / 1e3)

    def on_job_dequeued(self) -> None:
        self.dequeued.inc()

    def on_job_processed(self, process_time_ms: float) -> None:
        self.processed.inc()
        self.process_time.observe(process_time_ms / 1e3)
