"""The stress scenario of tests/pool/stress.py, run briefly (benchmarks/soak.py runs it for longer)."""

import pytest

from tests.pool.stress import run_stress


@pytest.mark.parametrize("seed,inline", [(0, True), (1, False), (2, True)])
def test_stress(seed, inline):
    result = run_stress(seconds=6.0, clients=8, workers=4, seed=seed, inline=inline)
    outcomes = result.check()
    print(f"\nseed {seed}, inline {inline}: {len(result.requests)} requests in {result.seconds:.1f} s: {outcomes}")
    assert outcomes.get("ok", 0) > 50
    assert outcomes.get("KernelError", 0) > 0 and outcomes.get("cancelled", 0) > 0
