"""Per-job round-trip overhead: PooledPredictor vs concurrent.futures.ThreadPoolExecutor.

    python benchmarks/overhead.py [--jobs 5000] [--workers 1]

A one-node model (Relu on a 1x16 float32 tensor) so that the kernel costs
almost nothing. Each job is submitted and waited for (closed loop, one client):
the pool runs `pool.forward({"x": x}).result()`; the executor runs
`executor.submit(job, x).result()`, where `job` does the same work on the same
model (this thread's Net: forward, then copy the output). "direct" calls that
job inline: the round trip minus it is the overhead. Rounds alternate between
the two so both see the same machine state. Writes benchmarks/results/overhead.json.
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
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    onnx.checker.check_model(m)
    return m.SerializeToString()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per configuration (in 10 alternating rounds)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    from pooled_predictor import Config, PooledPredictor, Predictor

    model = one_node_model()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    predictor = Predictor(model)

    def job(a):
        net = predictor.net()
        net.forward({"x": a})
        return {"y": np.array(net.blob_by_name("y"))}

    pool = PooledPredictor(Config(model_bytes=[model], num_threads=args.workers))
    executor = cf.ThreadPoolExecutor(max_workers=args.workers)
    runs = {"direct (no thread hop)": lambda: job(x),
            "ThreadPoolExecutor": lambda: executor.submit(job, x).result(),
            "PooledPredictor": lambda: pool.forward({"x": x}).result()}
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
    executor.shutdown()
    direct = np.asarray(lat["direct (no thread hop)"]) * 1e6
    rows = []
    for name, values in lat.items():
        us = np.asarray(values) * 1e6
        rows.append({"runner": name, "jobs": len(us), "p50_us": float(np.percentile(us, 50)),
                     "p99_us": float(np.percentile(us, 99)),
                     "overhead_p50_us": float(np.percentile(us, 50) - np.percentile(direct, 50)),
                     "overhead_p99_us": float(np.percentile(us, 99) - np.percentile(direct, 99))})
    print(f"Round trip of a one-node model (Relu 1x16), {args.workers} worker(s), one client\n")
    print(table(rows, [("runner", "runner", "s"), ("jobs", "jobs", "d"), ("p50_us", "p50 us", ".1f"),
                       ("p99_us", "p99 us", ".1f"), ("overhead_p50_us", "overhead p50 us", ".1f"),
                       ("overhead_p99_us", "overhead p99 us", ".1f")]))
    ours = next(r for r in rows if r["runner"] == "PooledPredictor")
    theirs = next(r for r in rows if r["runner"] == "ThreadPoolExecutor")
    print(f"\npool p50 overhead / executor p50 overhead = {ours['overhead_p50_us'] / theirs['overhead_p50_us']:.2f} "
          f"(goal <= 1)")
    path = write_results("overhead", rows, workers=args.workers, model="Relu (1, 16) float32")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
