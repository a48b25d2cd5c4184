"""The optional prometheus-client Callback."""

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor
from tests.conftest import make_mlp

prom = pytest.importorskip("prometheus_client")


def test_prometheus_callback_counts_jobs():
    from pooled_predictor.serving.prometheus import PrometheusCallback

    registry = prom.CollectorRegistry()
    cb = PrometheusCallback(registry=registry, labels={"model": "mlp"})
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2), cb) as pool:
        for f in [pool.forward([np.ones((1, 16), np.float32)]) for _ in range(7)]:
            f.result(timeout=30)
    get = lambda name: registry.get_sample_value(name, {"model": "mlp"})
    assert get("pooled_predictor_jobs_enqueued_total") == 7
    assert get("pooled_predictor_jobs_dequeued_total") == 7
    assert get("pooled_predictor_jobs_processed_total") == 7
    assert get("pooled_predictor_process_seconds_count") == 7
    assert get("pooled_predictor_enqueue_delay_seconds_count") == 7
