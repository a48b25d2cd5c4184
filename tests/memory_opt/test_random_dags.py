"""Statistics over 1,000 random CNN-like DAGs: the arena stays near the lower bound.

Run with ``-s`` to see the numbers.
"""

import numpy as np

from memory_opt import analyze, plan_arena, plan_shared_buffers
from memory_opt.synthetic import random_network


def test_arena_over_1000_random_cnns():
    rng = np.random.default_rng(20240611)
    arena, shared, values = [], [], []
    for _ in range(1000):
        net = random_network(rng)
        lv = analyze(*net)
        plan = plan_arena(lv)
        plan.validate()
        baseline = plan_shared_buffers(lv)
        baseline.validate()
        arena.append(plan.efficiency)
        # the baseline plans without in-place merges: compare it to that bound
        shared.append(baseline.arena_bytes / baseline.lower_bound_no_inplace_bytes)
        values.append(len(lv.alias_of))
    arena, shared = np.array(arena), np.array(shared)
    print(f"\n1000 random CNNs ({min(values)}-{max(values)} values, mean {np.mean(values):.0f}): "
          f"arena / bound mean {arena.mean():.5f}, worst {arena.max():.4f}, "
          f"<= 1.01 in {np.mean(arena <= 1.01):.1%}; "
          f"fb shared buffers / bound mean {shared.mean():.4f}, worst {shared.max():.4f}")
    assert arena.min() >= 1.0
    assert arena.mean() <= 1.05
