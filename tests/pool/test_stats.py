"""Stats: per-net counts and latency percentiles; snapshots merge."""

import numpy as np

from pooled_predictor import Config, PooledPredictor
from pooled_predictor.serving.stats import LatencyHistogram
from tests.conftest import make_mlp

X = np.ones((1, 16), np.float32)


def test_histogram_percentiles_within_two_percent():
    h = LatencyHistogram()
    values = np.random.default_rng(0).lognormal(mean=-6, sigma=1, size=10_000)
    for v in values:
        h.record(float(v))
    for p in (50, 95, 99):
        exact = np.percentile(values, p)
        assert abs(h.percentile(p) - exact) / exact < 0.03
    assert h.count == 10_000 and abs(h.max - values.max()) < 1e-12


def test_histograms_merge():
    a, b = LatencyHistogram(), LatencyHistogram()
    for v in (0.001, 0.002):
        a.record(v)
    b.record(0.5)
    m = a.merge(b)
    assert m.count == 3 and m.max == 0.5 and a.count == 2


def test_pool_stats_per_net_and_merge():
    models = [make_mlp(seed=1).SerializeToString(), make_mlp(seed=2).SerializeToString()]
    with PooledPredictor(Config(model_bytes=models, num_threads=2)) as pool:
        for _ in range(6):
            pool.forward([X], net_id=0).result(timeout=30)
        for _ in range(3):
            pool.forward([X], net_id=1).result(timeout=30)
        snap = pool.stats()
    assert snap.nets[0].counts["completed"] == 6 and snap.nets[1].counts["completed"] == 3
    run = snap.nets[0].histograms["run"]
    s = run.summary_ms()
    assert s["count"] == 6 and 0 < s["p50_ms"] <= s["p95_ms"] <= s["p99_ms"] <= s["max_ms"] + 1e-9
    e2e = snap.nets[0].histograms["end_to_end"].summary_ms()
    assert e2e["p50_ms"] >= s["p50_ms"] * 0.9
    merged = snap.merge(snap)
    assert merged.nets[0].counts["completed"] == 12 and merged.total().counts["completed"] == 18
    d = snap.to_dict()
    assert d["total"]["completed"] == 9 and "p99_ms" in d["nets"][1]["queue_wait"]
