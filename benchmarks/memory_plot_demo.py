"""Plan the activation memory of classic CNNs three ways; print a table, write JSON and plots.

    python benchmarks/memory_plot_demo.py [--out benchmarks/results] [--batch 1] [--no-plots]

Planners: naive (no sharing), fb-caffe-exts' shared buffers (optimizeMemory), and
the arena planner (greedy by size, Pisarchyk & Lee 2020) without and with in-place
reuse. Sizes are float32 activations at batch --batch. Writes
<out>/memory_plan.json and, unless --no-plots, <out>/memory_<model>_<planner>.png
(x: step, y: offset in the arena), like fb-caffe-exts' AlexNet/GoogLeNet figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from memory_opt import (analyze, format_table, plan_arena, plan_naive, plan_row,  # noqa: E402
                        plan_shared_buffers, plot_plan)
from memory_opt import synthetic  # noqa: E402

MODELS = ("alexnet", "googlenet", "resnet50", "resnet152")


def best_time(fn, repeat=5):
    """Min wall time of fn() over `repeat` runs, in seconds, and its last result."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--no-plots", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    rows, records = [], []
    for name in MODELS:
        net = getattr(synthetic, name)(args.batch)
        plain = analyze(*net, inplace=False)
        merged = analyze(*net)
        for label, planner, liveness in (("naive", plan_naive, plain),
                                         ("shared_buffers", plan_shared_buffers, plain),
                                         ("arena", plan_arena, plain),
                                         ("arena+inplace", plan_arena, merged)):
            seconds, plan = best_time(lambda: planner(liveness))
            plan.validate()
            row = plan_row(name, plan) | {"planner": label, "plan_ms": seconds * 1e3}
            rows.append(row)
            records.append(row | plan.summary() | {"planner": label})
            if not args.no_plots:
                plot_plan(plan, liveness, net.sizes,
                          os.path.join(args.out, f"memory_{name}_{label.replace('+', '_')}.png"),
                          title=f"{name} (batch {args.batch}), {label}: "
                                f"{plan.arena_bytes / 2**20:.2f} MiB, naive "
                                f"{plan.naive_bytes / 2**20:.2f} MiB, bound "
                                f"{plan.lower_bound_bytes / 2**20:.2f} MiB")
    print(format_table(rows))
    machine = {"python": platform.python_version(), "numpy": np.__version__,
               "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
               "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    print("\n" + ", ".join(f"{k}: {v}" for k, v in machine.items()))
    with open(os.path.join(args.out, "memory_plan.json"), "w") as f:
        json.dump({"machine": machine, "batch": args.batch, "rows": records}, f, indent=2)


if __name__ == "__main__":
    main()
