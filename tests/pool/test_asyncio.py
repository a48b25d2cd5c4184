"""asyncio: await pool.forward_async(...)."""

import asyncio

import numpy as np
import pytest

from pooled_predictor import Config, InputError, PooledPredictor
from tests.conftest import make_mlp, mlp_reference
from tests.pool.faults import Gate

X = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)


def test_forward_async_and_gather():
    async def main(pool):
        one = await pool.forward_async([X])
        many = await asyncio.gather(*(pool.forward_async([X]) for _ in range(20)))
        return one, many

    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=2,
                                queue_capacity=2)) as pool:
        one, many = asyncio.run(main(pool))
    ref = mlp_reference(make_mlp(), X)
    np.testing.assert_allclose(one["y"], ref, rtol=1e-5, atol=1e-6)
    assert len(many) == 20 and all(np.array_equal(m["y"], one["y"]) for m in many)


def test_forward_async_raises_bad_input_at_the_await():
    async def main(pool):
        await pool.forward_async([X.astype(np.float64)])

    with PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()])) as pool:
        with pytest.raises(InputError):
            asyncio.run(main(pool))


def test_cancelling_the_task_cancels_the_queued_job():
    gate = Gate()
    pool = PooledPredictor(Config(model_bytes=[make_mlp().SerializeToString()], num_threads=1,
                                  queue_capacity=4), gate)

    async def main():
        running = pool.forward([X])
        await asyncio.to_thread(gate.wait_for_workers, 1)
        task = asyncio.ensure_future(pool.forward_async([X]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.open()
        await asyncio.wrap_future(running)

    asyncio.run(main())
    pool.close()
    assert pool.stats().total().counts["cancelled"] == 1
    assert gate.processed == 1
