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
average is printed and written with the results.

"CPU ms/request" is the process's CPU time (time.process_time: every thread,
clients and workers) over a runner's windows divided by its requests: what a
request costs, apart from how much of the machine the runner's threads get. On
this shared 2-core machine the other processes' load takes CPU from the 2 pool
workers in a larger share than from onnxruntime's 8 client threads (the
scheduler shares a core between runnable threads, not processes), so
requests/s under load mixes that share with the cost; the CPU column does not.
With --where, each forward of the pool's workers (Net.forward) and each
onnxruntime run() is timed in wall and in the thread's CPU time
(time.thread_time); their means per request are printed and written per
runner (it wraps Net.forward for the run).
Writes benchmarks/results/serving.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
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


class Where:
    """Per-call (wall, CPU) nanoseconds of the calling thread, accumulated into `into` (a list) while set.

    CPU time is time.thread_time_ns (exact). Wall minus CPU is time off a core: waiting for one (the
    run queue) or asleep (for these calls: the GIL). Splitting the two with /proc schedstat was tried
    and dropped: on this VM its run_delay came out larger than wall minus CPU by about 2 ms per
    forward, and its run time (first field) lags by up to a tick for a running thread."""

    def __init__(self):
        self.into = None

    def wrap(self, fn):
        def timed(*args, **kwargs):
            into = self.into
            if into is None:
                return fn(*args, **kwargs)
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                into.append((time.perf_counter_ns() - t0, time.thread_time_ns() - c0))
        return timed


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
    where = Where()
    ort_run = where.wrap(sess.run) if args.where else sess.run
    runners[ORT] = lambda: ort_run([out_name], {in_name: x})
    if args.where:
        from pooled_predictor.engine import net as net_module

        net_module.Net.forward = where.wrap(net_module.Net.forward)
    splits = {k: [] for k in runners}
    for k, f in runners.items():  # warm-up: every worker's Net and its layouts at each batch size
        run_threads(f, args.clients, 3.0 if k == FORCED else 1.0)
    before = {k: p.stats().nets[0].batch_sizes for k, p in pools.items()}
    calls = dict.fromkeys(runners, 0)
    wall = dict.fromkeys(runners, 0.0)
    cpu_s = dict.fromkeys(runners, 0.0)
    lat = {k: [] for k in runners}
    rounds = []  # (requests/s, p99 s) of each runner in each round
    order = list(runners)
    for r in range(args.rounds):
        this = {}
        shift = r // 2 % len(order)
        for k in (order[shift:] + order[:shift])[::-1 if r % 2 else 1]:  # each runner at each place, after each other
            c0 = time.process_time()
            where.into = splits[k] if args.where else None
            n, w, l = run_threads(runners[k], args.clients, args.seconds)
            where.into = None
            cpu_s[k] += time.process_time() - c0
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
                     "cpu_ms_per_request": cpu_s[k] / max(calls[k], 1) * 1e3, "batch_sizes": sizes.get(k)})
        if splits[k]:  # per forward (a batched run: per run), ms
            wall_ms, cpu_ms = (np.asarray(splits[k], np.float64).mean(axis=0) / 1e6).tolist()
            rows[-1].update(forward_wall_ms=wall_ms, forward_cpu_ms=cpu_ms, forward_off_cpu_ms=wall_ms - cpu_ms)
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
               "cpu_per_request_onnxruntime_vs_pool": by[ORT]["cpu_ms_per_request"] / by[POOL]["cpu_ms_per_request"],
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
    ap.add_argument("--where", action="store_true",
                    help="time each forward's wall and CPU time (the rest: waiting for a core or the GIL)")
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
                       ("cpu_ms_per_request", "CPU ms/request", ".2f"), ("batch_sizes", "batch sizes (rows: runs)", "")]))
    if args.where:
        print("\nper forward (Net.forward in the workers; onnxruntime's run()), mean ms: wall = CPU + off a core "
              "(waiting for one, or for the GIL)\n")
        print(table(rows, [("model", "model", "s"), ("runner", "runner", "s"), ("forward_wall_ms", "wall", ".2f"),
                           ("forward_cpu_ms", "CPU", ".2f"), ("forward_off_cpu_ms", "off CPU", ".2f")]))
    print("\nratios over all rounds, then the median of the rounds' ratios (their range)")
    for s in summaries:
        costs = ", ".join(f"{b}: {c:.2f}" for b, c in s["row_ms_by_batch"].items())
        print(f"{s['model']}: warm-up measured ms per row by batch size {{{costs}}}: batching {s['batching']}\n"
              f"  requests/s batching / pool {_x(s['batching_vs_pool'])} (goal >= 1.0)\n"
              f"  p99 batching / pool {_x(s['p99_batching_vs_pool'])} (goal <= 1.1)\n"
              f"  requests/s pool / onnxruntime {_x(s['pool_vs_onnxruntime'])}, "
              f"batching / onnxruntime {_x(s['batching_vs_onnxruntime'])} (goal >= 1.0)\n"
              f"  CPU per request, onnxruntime / pool {s['cpu_per_request_onnxruntime_vs_pool']:.2f}x "
              f"(above 1: a request costs the pool less)")
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
