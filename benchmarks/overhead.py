"""Per-job round-trip overhead: PooledPredictor vs concurrent.futures.ThreadPoolExecutor.

    python benchmarks/overhead.py [--jobs 5000] [--workers 1]

A one-node model (Relu on an (N, 16) float32 tensor, fed 1x16) so that the
kernel costs almost nothing. Each job is submitted and waited for (closed loop,
one client): the pool runs `pool.forward({"x": x}).result()`; the executor runs
`executor.submit(job, x).result()`, where `job` does the same work on the same
model (this thread's Net: forward, then copy the output). "direct" calls that
job inline: the round trip minus it is the overhead. Two pools: "plain" (no
batching, one priority level) and "every feature on" (dynamic batching on for
the model, max_batch_size 8, each job with a priority level and a deadline, a
Callback, priority aging on). Rounds alternate between the runners so all see
the same machine state. Writes benchmarks/results/overhead.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402


def one_node_model() -> bytes:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m.SerializeToString()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per configuration (in 10 alternating rounds)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    from pooled_predictor import Callback, Config, PooledPredictor, Predictor

    model = one_node_model()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    predictor = Predictor(model)

    def job(a):
        net = predictor.net()
        net.forward({"x": a})
        return {"y": np.array(net.blob_by_name("y"))}

    pool = PooledPredictor(Config(model_bytes=[model], num_threads=args.workers))
    featured = PooledPredictor(Config(model_bytes=[model], num_threads=args.workers, max_batch_size=8,
                                      max_queue_delay=0.0, priority_aging=1.0), Callback())
    assert featured._core.batchers[0] is not None  # the model does batch
    executor = cf.ThreadPoolExecutor(max_workers=args.workers)
    priorities = iter(range(1 << 62))
    runs = {"direct (no thread hop)": lambda: job(x),
            "ThreadPoolExecutor": lambda: executor.submit(job, x).result(),
            "PooledPredictor": lambda: pool.forward({"x": x}).result(),
            "PooledPredictor, every feature on": lambda: featured.forward(
                {"x": x}, priority=next(priorities) % 3, deadline=10.0).result()}
    lat = {k: [] for k in runs}
    for f in runs.values():  # warm up threads and Nets
        for _ in range(200):
            f()
    per_round = max(1, args.jobs // 10)
    for _ in range(10):
        for name, f in runs.items():
            for _ in range(per_round):
                t = time.perf_counter()
                f()
                lat[name].append(time.perf_counter() - t)
    pool.close()
    featured.close()
    executor.shutdown()
    direct = np.asarray(lat["direct (no thread hop)"]) * 1e6
    rows = []
    for name, values in lat.items():
        us = np.asarray(values) * 1e6
        rows.append({"runner": name, "jobs": len(us), "p50_us": float(np.percentile(us, 50)),
                     "p99_us": float(np.percentile(us, 99)),
                     "overhead_p50_us": float(np.percentile(us, 50) - np.percentile(direct, 50)),
                     "overhead_p99_us": float(np.percentile(us, 99) - np.percentile(direct, 99))})
    print(f"Round trip of a one-node model (Relu (N, 16) fed 1x16), {args.workers} worker(s), one client\n")
    print(table(rows, [("runner", "runner", "s"), ("jobs", "jobs", "d"), ("p50_us", "p50 us", ".1f"),
                       ("p99_us", "p99 us", ".1f"), ("overhead_p50_us", "overhead p50 us", ".1f"),
                       ("overhead_p99_us", "overhead p99 us", ".1f")]))
    theirs = next(r for r in rows if r["runner"] == "ThreadPoolExecutor")
    ratios = {}
    for name in ("PooledPredictor", "PooledPredictor, every feature on"):
        ours = next(r for r in rows if r["runner"] == name)
        ratios[name] = {"p50_round_trip": ours["p50_us"] / theirs["p50_us"],
                        "p50_overhead": ours["overhead_p50_us"] / theirs["overhead_p50_us"]}
        print(f"\n{name}: p50 round trip / executor's = {ratios[name]['p50_round_trip']:.2f}, "
              f"p50 overhead / executor's = {ratios[name]['p50_overhead']:.2f} (goal <= 1)")
    path = write_results("overhead", rows, workers=args.workers, model="Relu (N, 16) float32, fed (1, 16)",
                         ratios=ratios)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
