"""Every zoo model at full size through the PooledPredictor vs onnxruntime: accuracy and speed.

    python benchmarks/zoo.py [--batches 1 4] [--models resnet50 vgg16 ...]

For each model (published parameter count and MACs beside ours) and batch:
max |ours - onnxruntime| / max |onnxruntime| on "prob" and "logits", and the
time of one forward through the pool (2 workers) and through onnxruntime (one
session, 2 intra-op threads), median of 3 after a warm-up. The CI tests use
reduced sizes where the architecture allows; this runs the real sizes.
Writes benchmarks/results/zoo.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402


def timed(fn, repeats=3):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, statistics.median(times)


def main(argv=None) -> int:
    from pooled_predictor.zoo import ZOO, build, profile, sample_input

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--models", nargs="+", default=list(ZOO))
    args = ap.parse_args(argv)
    import onnxruntime as ort

    from pooled_predictor import Config, PooledPredictor

    rows = []
    for name in args.models:
        model = build(name, outputs=("prob", "logits"))
        cost = profile(model)
        data = model.SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        with PooledPredictor(Config(model_bytes=[data], num_threads=2)) as pool:
            for batch in args.batches:
                x = sample_input(name, batch)
                ours, t_ours = timed(lambda: pool.forward({"data": x}).result())
                ref, t_ort = timed(lambda: dict(zip(["prob", "logits"], sess.run(None, {"data": x}))))
                errs = {k: float(np.abs(ours[k].astype(np.float64) - ref[k]).max() / np.abs(ref[k]).max())
                        for k in ("prob", "logits")}
                rows.append({"model": name, "batch": batch, "input": "x".join(map(str, x.shape)),
                             "params": cost.params, "published_params": ZOO[name].params,
                             "gmacs": cost.macs / 1e9, "published_gmacs": ZOO[name].macs / 1e9,
                             "rel_err_prob": errs["prob"], "rel_err_logits": errs["logits"],
                             "ours_ms": t_ours * 1e3, "onnxruntime_ms": t_ort * 1e3,
                             "ours_over_ort_time": t_ours / t_ort})
                print(f"{name} batch {batch}: errors {errs}, ours {t_ours * 1e3:.0f} ms, ort {t_ort * 1e3:.0f} ms",
                      flush=True)
    print("\nZoo models at full size: ours (pool, 2 workers) vs onnxruntime (2 intra-op threads)\n")
    print(table(rows, [("model", "model", "s"), ("input", "input", "s"), ("params", "params", ","),
                       ("published_params", "published", ","), ("gmacs", "GMACs/img", ".3f"),
                       ("published_gmacs", "published", ".3f"), ("rel_err_prob", "err prob", ".1e"),
                       ("rel_err_logits", "err logits", ".1e"), ("ours_ms", "ours ms", ".0f"),
                       ("onnxruntime_ms", "ORT ms", ".0f"), ("ours_over_ort_time", "time ratio", ".2f")]))
    worst = max(max(r["rel_err_prob"], r["rel_err_logits"]) for r in rows)
    print(f"\nworst relative error {worst:.2e} (bar: 1e-4 x max|reference|)")
    path = write_results("zoo", rows)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
