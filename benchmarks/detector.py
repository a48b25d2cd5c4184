"""PP-OCR detector at batch 1: our PooledPredictor (1 and 2 workers) vs onnxruntime, side by side.

    python benchmarks/detector.py [--seconds 5] [--size 192x384]

onnxruntime runs as one session with 2 intra-op threads (one caller), and as
one session with 1 intra-op thread shared by two Python threads. The pool is
fed by as many client threads as it has workers, each waiting for its result
(closed loop), so throughput and latency are comparable. Prints a table and
writes benchmarks/results/detector.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import percentiles_ms, run_threads, table, write_results  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--size", default="192x384", help="HxW of the input (the demo's page is 192x384)")
    ap.add_argument("--level", default=None, help="graph optimization level (none|basic|extended|all)")
    ap.add_argument("--optimization", default="memory", choices=["none", "memory"],
                    help="Net optimization (memory: one planned arena per Net)")
    args = ap.parse_args(argv)
    import onnxruntime as ort

    from pooled_predictor import Config, Optimization, PooledPredictor
    from pooled_predictor.zoo import fetch_page_image, fetch_ppocr
    from tests.models.ppocr_inputs import page_det_input

    h, w = (int(v) for v in args.size.split("x"))
    det = fetch_ppocr().det
    x = page_det_input(fetch_page_image(), 1, h, w)
    rows = []

    def record(name, calls, wall, lat, threads):
        p50, p99 = percentiles_ms(lat)
        rows.append({"config": name, "threads": threads, "images_per_s": calls / wall, "p50_ms": p50,
                     "p99_ms": p99, "calls": calls})

    for intra, callers in ((2, 1), (1, 2)):
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(str(det), so, providers=["CPUExecutionProvider"])
        sess.run(None, {"x": x})
        record(f"onnxruntime: {callers} caller(s), {intra} intra-op thread(s)",
               *run_threads(lambda: sess.run(None, {"x": x}), callers, args.seconds), intra * callers)
    for workers in (1, 2):
        kw = {"optimization": Optimization(args.optimization)}
        if args.level is not None:
            kw["graph_optimization_level"] = args.level
        with PooledPredictor(Config(model_paths=[det], num_threads=workers, **kw)) as pool:
            for _ in range(workers * 2):  # warm every worker's Net
                pool.forward({"x": x}).result()
            record(f"pooled-predictor: {workers} worker(s)",
                   *run_threads(lambda: pool.forward({"x": x}).result(), workers, args.seconds), workers)
    best_ort = max(r["images_per_s"] for r in rows if r["config"].startswith("onnxruntime"))
    for r in rows:
        r["vs_best_onnxruntime"] = r["images_per_s"] / best_ort
    print(f"PP-OCR detector, batch 1, 1x3x{h}x{w}, {args.seconds:.0f} s per configuration, "
          f"Optimization.{args.optimization.upper()}, graph level {args.level or 'default'}\n")
    print(table(rows, [("config", "configuration", "s"), ("images_per_s", "images/s", ".1f"),
                       ("p50_ms", "p50 ms", ".2f"), ("p99_ms", "p99 ms", ".2f"),
                       ("vs_best_onnxruntime", "x best ORT", ".2f")]))
    path = write_results("detector", rows, input_shape=[1, 3, h, w], seconds=args.seconds,
                         graph_optimization_level=args.level, optimization=args.optimization)
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
