"""BLAS threads through threadpoolctl: one per call while a pool lives (configurable)."""

import pytest
from threadpoolctl import threadpool_info

from pooled_predictor import Config, PooledPredictor
from tests.conftest import make_mlp


def blas_threads():
    infos = [i for i in threadpool_info() if i["user_api"] == "blas"]
    if not infos:
        pytest.skip("no BLAS library visible to threadpoolctl")
    return [i["num_threads"] for i in infos]


def test_pool_limits_blas_threads_and_restores_them():
    before = blas_threads()
    pool = PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2))
    assert set(blas_threads()) == {1}
    pool.close()
    assert blas_threads() == before


def test_blas_threading_can_be_kept_or_set():
    before = blas_threads()
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], disable_blas_threading=False)):
        assert blas_threads() == before
    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], blas_threads=2)):
        assert set(blas_threads()) == {min(2, max(before))} or set(blas_threads()) == {2}
