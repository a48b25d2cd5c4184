"""Serving throughput and latency: the pool with and without dynamic batching, and onnxruntime.

    python benchmarks/serving.py [--seconds 4] [--rounds 3] [--clients 8] [--threads 2]

8 closed-loop client threads each send batch-1 requests (submit, wait, submit
again) of one model: PP-OCR rec (1x3x48x320, the real PP-OCRv6 tiny
recognizer) and MobileNetV2 (1x3x224x224, pooled_predictor.zoo). Three
runners serve them:

* pool + batching: PooledPredictor, `--threads` workers, max_batch_size 4
  (clients / workers), max_queue_delay 2 ms (Triton's dynamic batcher);
* pool: the same pool without batching (one job per run, as fb-caffe-exts);
* onnxruntime: one InferenceSession (intra_op_num_threads=1) shared by the
  clients, which call run() at once from their threads (it releases the GIL).

Rounds are interleaved (pool + batching, pool, onnxruntime, again) so that
every runner sees the same machine state; requests/s is over all rounds,
latency percentiles over all requests. The p99 bound is max_queue_delay plus
the p99 of one batched run (from the pool's stats). Writes
benchmarks/results/serving.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import run_threads, table, write_results  # noqa: E402

MAX_BATCH = 4  # = clients / workers; every batch size 1..4 keeps its layout in the default 256 MiB cache
DELAY = 0.002


def models():
    from pooled_predictor.zoo import fetch_ppocr, mobilenet_v2

    rec = Path(fetch_ppocr().rec).read_bytes()
    rng = np.random.default_rng(0)
    yield "PP-OCR rec", rec, rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)
    yield "MobileNetV2", mobilenet_v2().SerializeToString(), rng.standard_normal((1, 3, 224, 224)).astype(np.float32)


def bench(name, model, x, args):
    import onnxruntime as ort

    from pooled_predictor import Config, PooledPredictor

    def pool_config(batch):
        return Config(model_bytes=[model], num_threads=args.threads, queue_capacity=2 * args.clients,
                      max_batch_size=MAX_BATCH if batch else 0, max_queue_delay=DELAY if batch else 0.0)

    batched, plain = PooledPredictor(pool_config(True)), PooledPredictor(pool_config(False))
    assert batched._core.batchers[0] is not None, f"{name} does not batch"
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    in_name = batched.predictor().input_names[0]
    out_name = batched.predictor().output_names[0]
    expect = sess.run([out_name], {in_name: x})[0]
    got = batched.forward({in_name: x}).result()[out_name]
    np.testing.assert_allclose(got, expect, rtol=1e-3, atol=1e-4)  # same model, same answer

    runners = {"pool + batching": lambda: batched.forward({in_name: x}).result(),
               "pool": lambda: plain.forward({in_name: x}).result(),
               "onnxruntime (shared session)": lambda: sess.run([out_name], {in_name: x})}
    for f in runners.values():  # warm-up: every worker's Net and layouts, batches of every size
        run_threads(f, args.clients, 1.0)
    calls = {k: 0 for k in runners}
    wall = {k: 0.0 for k in runners}
    lat = {k: [] for k in runners}
    batched_before = batched.stats()
    for _ in range(args.rounds):
        for k, f in runners.items():
            n, w, l = run_threads(f, args.clients, args.seconds)
            calls[k] += n
            wall[k] += w
            lat[k] += l
    snap = batched.stats().nets[0]
    sizes = {k: v - batched_before.nets[0].batch_sizes.get(k, 0) for k, v in snap.batch_sizes.items()}
    run_p99_ms = snap.histograms["run"].percentile(99) * 1e3
    batched.close()
    plain.close()
    rows = []
    for k in runners:
        a = np.asarray(lat[k]) * 1e3
        rows.append({"model": name, "runner": k, "requests": calls[k], "rps": calls[k] / wall[k],
                     "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99))})
    rps = {r["runner"]: r["rps"] for r in rows}
    summary = {"model": name, "batching_vs_pool": rps["pool + batching"] / rps["pool"],
               "batching_vs_onnxruntime": rps["pool + batching"] / rps["onnxruntime (shared session)"],
               "p99_ms": rows[0]["p99_ms"], "p99_bound_ms": DELAY * 1e3 + run_p99_ms,
               "batched_run_p99_ms": run_p99_ms,
               "batch_sizes": {int(k): int(v) for k, v in sorted(sizes.items()) if v}}
    return rows, summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per runner per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="pool worker threads")
    args = ap.parse_args(argv)
    rows, summaries = [], []
    for name, model, x in models():
        r, s = bench(name, model, x, args)
        rows += r
        summaries.append(s)
    print(f"{args.clients} closed-loop clients, batch-1 requests; pool: {args.threads} workers, "
          f"max_batch_size {MAX_BATCH}, max_queue_delay {DELAY * 1e3:.0f} ms; "
          f"{args.rounds} interleaved rounds of {args.seconds:.0f} s\n")
    print(table(rows, [("model", "model", "s"), ("runner", "runner", "s"), ("requests", "requests", "d"),
                       ("rps", "requests/s", ".1f"), ("p50_ms", "p50 ms", ".1f"), ("p99_ms", "p99 ms", ".1f")]))
    print()
    for s in summaries:
        print(f"{s['model']}: batching / pool = {s['batching_vs_pool']:.2f}x (goal >= 1.15), "
              f"batching / onnxruntime = {s['batching_vs_onnxruntime']:.2f}x (goal >= 1.0), "
              f"p99 {s['p99_ms']:.1f} ms vs delay + batched run p99 = {s['p99_bound_ms']:.1f} ms; "
              f"batch sizes (jobs: runs) {s['batch_sizes']}")
    path = write_results("serving", rows, summaries=summaries, clients=args.clients, threads=args.threads,
                         max_batch_size=MAX_BATCH, max_queue_delay=DELAY, seconds=args.seconds, rounds=args.rounds)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
