"""Config.worker_affinity: pool workers pinned to CPUs ("spread" or CPU ids), validated, results unchanged."""

import os

import numpy as np
import pytest

from pooled_predictor import Config, PooledPredictor
from tests.conftest import make_mlp, mlp_reference

X = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
linux = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs os.sched_setaffinity (Linux)")


def config(model, **kw):
    return Config(model_bytes=[model.SerializeToString()], **kw)


def run_all_workers(pool, n):
    """Submit enough concurrent jobs that every one of the n workers starts; their outputs."""
    futures = [pool.forward({"x": X}) for _ in range(4 * n)]
    return [f.result(timeout=60)["y"] for f in futures]


def worker_affinities(pool):
    return [os.sched_getaffinity(t.native_id) for t in pool._core.threads]


@linux
@pytest.mark.parametrize("num_threads", [1, 2, 3])
def test_spread_pins_worker_i_to_the_ith_allowed_cpu(num_threads):
    model = make_mlp()
    allowed = sorted(os.sched_getaffinity(0))
    pool = PooledPredictor(config(model, num_threads=num_threads, worker_affinity="spread"))
    try:
        outs = run_all_workers(pool, num_threads)
        ref = mlp_reference(model, X)
        for out in outs:
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        threads = pool._core.threads
        assert 1 <= len(threads) <= num_threads
        for index, cpus in enumerate(worker_affinities(pool)):
            assert cpus == {allowed[index % len(allowed)]}
        assert os.sched_getaffinity(0) == set(allowed)  # the caller's thread is left as it was
    finally:
        pool.close()


@linux
def test_cpu_ids_pin_workers_in_turn():
    model = make_mlp()
    cpu = sorted(os.sched_getaffinity(0))[-1]
    pool = PooledPredictor(config(model, num_threads=2, worker_affinity=[cpu]))
    try:
        run_all_workers(pool, 2)
        assert all(cpus == {cpu} for cpus in worker_affinities(pool))
    finally:
        pool.close()


def test_none_leaves_workers_unpinned():
    model = make_mlp()
    pool = PooledPredictor(config(model, num_threads=2))
    try:
        run_all_workers(pool, 2)
        if hasattr(os, "sched_getaffinity"):
            assert all(cpus == os.sched_getaffinity(0) for cpus in worker_affinities(pool))
    finally:
        pool.close()
    assert Config(model_bytes=[b"x"]).worker_cpus() is None


@linux
@pytest.mark.parametrize("bad, match", [
    ("pinned", "worker_affinity must be"),
    ([], "worker_affinity must be"),
    ([True], "worker_affinity must be"),
    (["0"], "worker_affinity must be"),
    (3, "worker_affinity must be"),
    (None, "worker_affinity must be"),
    (1.5, "worker_affinity must be"),
    ([1 << 20], "not among this process's CPUs"),
])
def test_bad_worker_affinity_is_a_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        PooledPredictor(config(make_mlp(), worker_affinity=bad))


def test_without_sched_setaffinity_pinning_is_a_value_error(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(ValueError, match="needs os.sched_setaffinity"):
        Config(model_bytes=[b"x"], worker_affinity="spread").worker_cpus()
    assert Config(model_bytes=[b"x"], worker_affinity="none").worker_cpus() is None
