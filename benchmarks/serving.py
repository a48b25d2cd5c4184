"""Serving throughput and latency: the pool with and without dynamic batching, and onnxruntime.

    python benchmarks/serving.py [--seconds 4] [--rounds 8] [--clients 8] [--threads 2]
                                 [--models rec mobilenetv2] [--no-forced]

8 closed-loop client threads each send batch-1 requests (submit, wait, submit
again) of one model: PP-OCR rec (1x3x48x320, the real PP-OCRv6 tiny
recognizer) and MobileNetV2 (1x3x224x224, pooled_predictor.zoo). The runners:

* pool + batching: PooledPredictor, `--threads` workers, max_batch_size 8,
  max_queue_delay 2 ms (issue 34's setup), warmup=True at the request's shape:
  the warm-up measures the model's time per row at batch 1, 2, 4, 8 and sets
  the preferred size, or turns batching off where a row costs as much in a
  batch (pooled_predictor.serving.batching);
* pool + batching, every size (unless --no-forced): the same without the
  warm-up's measurement, so batches of any size up to 8 form (each batch
  still takes only its share of the waiting jobs over the workers);
* pool: the same pool without batching (one job per run, as fb-caffe-exts);
* onnxruntime: one InferenceSession (intra_op_num_threads=1) shared by the
  clients, which call run() at once from their threads (it releases the GIL).

Every round runs every runner for `--seconds`, in an order rotated every other
round and reversed in the others (each runner at each place, after each
other one), so that all see the same machine state; requests/s is over all rounds,
latency percentiles over all requests. The machine is shared, and one busy
round moves a p99 over all requests: the ratios are also given per round
(runners side by side in one round), as their median and range. The load
average is printed and written with the results. Writes
benchmarks/results/serving.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import run_threads, table, write_results  # noqa: E402

MAX_BATCH = 8
DELAY = 0.002
BATCHING, FORCED, POOL, ORT = ("pool + batching", "pool + batching, every size", "pool",
                               "onnxruntime (shared session)")


def models(names=("rec", "mobilenetv2")):
    from pooled_predictor.zoo import fetch_ppocr, mobilenet_v2

    rng = np.random.default_rng(0)
    if "rec" in names:
        yield "PP-OCR rec", Path(fetch_ppocr().rec).read_bytes(), rng.uniform(-1, 1, (1, 3, 48, 320)).astype(np.float32)
    if "mobilenetv2" in names:
        yield ("MobileNetV2", mobilenet_v2().SerializeToString(),
               rng.standard_normal((1, 3, 224, 224)).astype(np.float32))


def cpu() -> dict:
    """The CPU's model name, LLVM's name for its ISA (numba compiles for it) and its SIMD flags."""
    info = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
        info["model"] = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
        flags = next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags"))
        info["simd"] = [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_tile") if f in flags]
    except (OSError, StopIteration):
        pass
    try:
        import llvmlite.binding

        info["llvm_cpu"] = llvmlite.binding.get_host_cpu_name()
    except ImportError:
        pass
    return info


def bench(name, model, x, args):
    import onnxruntime as ort

    from pooled_predictor import Config, PooledPredictor

    def pool(batch, calibrate=True):
        return PooledPredictor(Config(
            model_bytes=[model], num_threads=args.threads, queue_capacity=2 * args.clients,
            max_batch_size=MAX_BATCH if batch else 0, max_queue_delay=DELAY if batch else 0.0,
            warmup=calibrate, warmup_shapes=[{in_name: x.shape}] if calibrate else ()))

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    in_name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    pools = {BATCHING: pool(True)}
    if args.forced:
        pools[FORCED] = pool(True, calibrate=False)
    pools[POOL] = pool(False)
    plan = pools[BATCHING]._core.batch_plans[0]
    expect = sess.run([out_name], {in_name: x})[0]
    for p in pools.values():  # same model, same answer
        np.testing.assert_allclose(p.forward({in_name: x}).result()[out_name], expect, rtol=1e-3, atol=1e-4)

    runners = {k: (lambda p: lambda: p.forward({in_name: x}).result())(p) for k, p in pools.items()}
    runners[ORT] = lambda: sess.run([out_name], {in_name: x})
    for k, f in runners.items():  # warm-up: every worker's Net and its layouts at each batch size
        run_threads(f, args.clients, 3.0 if k == FORCED else 1.0)
    before = {k: p.stats().nets[0].batch_sizes for k, p in pools.items()}
    calls = dict.fromkeys(runners, 0)
    wall = dict.fromkeys(runners, 0.0)
    lat = {k: [] for k in runners}
    rounds = []  # (requests/s, p99 s) of each runner in each round
    order = list(runners)
    for r in range(args.rounds):
        this = {}
        shift = r // 2 % len(order)
        for k in (order[shift:] + order[:shift])[::-1 if r % 2 else 1]:  # each runner at each place, after each other
            n, w, l = run_threads(runners[k], args.clients, args.seconds)
            calls[k] += n
            wall[k] += w
            lat[k] += l
            this[k] = (n / w, float(np.percentile(l, 99)))
        rounds.append(this)
    sizes = {}
    for k, p in pools.items():
        after = p.stats().nets[0].batch_sizes
        sizes[k] = {int(s): int(c - before[k].get(s, 0)) for s, c in sorted(after.items()) if c - before[k].get(s, 0)}
        p.close()
    rows = []
    for k in runners:
        a = np.asarray(lat[k]) * 1e3
        rows.append({"model": name, "runner": k, "requests": calls[k], "rps": calls[k] / wall[k],
                     "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
                     "batch_sizes": sizes.get(k)})
    by = {r["runner"]: r for r in rows}

    def ratio(a, b, p99=False):
        i, key = (1, "p99_ms") if p99 else (0, "rps")
        per_round = [rd[a][i] / rd[b][i] for rd in rounds]
        return {"all": by[a][key] / by[b][key], "median": float(np.median(per_round)),
                "min": min(per_round), "max": max(per_round)}

    summary = {"model": name,
               "row_ms_by_batch": {int(b): c * 1e3 for b, c in plan.row_costs.items()},
               "batching": f"up to {plan.max_rows} rows, preferred {plan.preferred}" if plan.max_rows > 1 else "off",
               "batching_vs_pool": ratio(BATCHING, POOL),
               "p99_batching_vs_pool": ratio(BATCHING, POOL, p99=True),
               "pool_vs_onnxruntime": ratio(POOL, ORT),
               "batching_vs_onnxruntime": ratio(BATCHING, ORT)}
    if args.forced:
        summary["every_size_vs_pool"] = ratio(FORCED, POOL)
        summary["p99_every_size_vs_pool"] = ratio(FORCED, POOL, p99=True)
    return rows, summary


def _x(r: dict) -> str:
    return f"{r['all']:.2f}x, rounds {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per runner per round")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="pool worker threads")
    ap.add_argument("--models", nargs="+", default=["rec", "mobilenetv2"], choices=["rec", "mobilenetv2"])
    ap.add_argument("--no-forced", dest="forced", action="store_false",
                    help="leave out the runner that batches at every size")
    args = ap.parse_args(argv)
    load = [os.getloadavg()]
    rows, summaries = [], []
    for name, model, x in models(args.models):
        r, s = bench(name, model, x, args)
        rows += r
        summaries.append(s)
    load.append(os.getloadavg())
    print(f"{args.clients} closed-loop clients, batch-1 requests; pool: {args.threads} workers, "
          f"max_batch_size {MAX_BATCH}, max_queue_delay {DELAY * 1e3:.0f} ms; "
          f"{args.rounds} interleaved rounds of {args.seconds:.0f} s; load average (1 min) "
          f"{load[0][0]:.1f} before, {load[1][0]:.1f} after, on {os.cpu_count()} cores\n")
    print(table(rows, [("model", "model", "s"), ("runner", "runner", "s"), ("requests", "requests", "d"),
                       ("rps", "requests/s", ".1f"), ("p50_ms", "p50 ms", ".1f"), ("p99_ms", "p99 ms", ".1f"),
                       ("batch_sizes", "batch sizes (rows: runs)", "")]))
    print("\nratios over all rounds, then the median of the rounds' ratios (their range)")
    for s in summaries:
        costs = ", ".join(f"{b}: {c:.2f}" for b, c in s["row_ms_by_batch"].items())
        print(f"{s['model']}: warm-up measured ms per row by batch size {{{costs}}}: batching {s['batching']}\n"
              f"  requests/s batching / pool {_x(s['batching_vs_pool'])} (goal >= 1.0)\n"
              f"  p99 batching / pool {_x(s['p99_batching_vs_pool'])} (goal <= 1.1)\n"
              f"  requests/s pool / onnxruntime {_x(s['pool_vs_onnxruntime'])}, "
              f"batching / onnxruntime {_x(s['batching_vs_onnxruntime'])} (goal >= 1.0)")
        if "every_size_vs_pool" in s:
            print(f"  every size / pool: requests/s {_x(s['every_size_vs_pool'])}, "
                  f"p99 {_x(s['p99_every_size_vs_pool'])}")
    path = write_results("serving", rows, summaries=summaries, clients=args.clients, threads=args.threads,
                         max_batch_size=MAX_BATCH, max_queue_delay=DELAY, seconds=args.seconds, rounds=args.rounds,
                         cpu=cpu(), load_average={"before": load[0], "after": load[1]})
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
