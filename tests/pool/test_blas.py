"""BLAS threads through threadpoolctl: one per call while a pool lives (configurable)."""

import pytest
from threadpoolctl import threadpool_info

from pooled_predictor import Config, PooledPredictor
from tests.conftest import make_mlp


def blas_threads():
    # load every BLAS our kernels bring (numpy's, scipy's) before anything is measured
    PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], disable_blas_threading=False)).close()
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


def test_release_while_the_lock_is_held_is_queued_not_blocking():
    """A Predictor's __del__ can run from a garbage collection inside blas._apply on the
    thread holding the lock (found as a CI hang): the release must not wait."""
    from pooled_predictor.serving import blas

    token = blas.limit_blas_threads(1)
    with blas._lock:  # as _apply holds it when a collection runs a finalizer
        blas.release_blas_threads(token)  # returns at once
        assert token in blas._holders and token in blas._pending
    other = blas.limit_blas_threads(1)  # the next holder of the lock applies the queued release
    assert token not in blas._holders and not blas._pending
    blas.release_blas_threads(other)
    assert other not in blas._holders
