"""One inference thread beside another busy thread: what the neighbour costs, ours vs onnxruntime.

    python benchmarks/neighbours.py [--models ppocr_rec mobilenet_v2] [--seconds 2] [--rounds 3]
                                    [--switch-interval 0.0005]

A Net (one thread's, as a pool worker has) of each model at batch 1 (PP-OCR rec 1x3x48x320, and
benchmarks/vs_onnxruntime.py's other models) runs forward() on its inputs in place in a loop
while a second Python thread does one of:

* idle        -- sleeps (the baseline);
* compute     -- a compiled loop without the GIL and without memory traffic
                 (the other core is busy);
* memory      -- a compiled loop without the GIL summing 128 MiB (memory bandwidth);
* forward     -- the same engine's second forward (ours: a second Net, as two pool
                 workers; onnxruntime: a second one-thread session);
* python      -- a pure-Python loop that never releases the GIL on its own;
* python, switch interval S -- the same, with sys.setswitchinterval(S) (restored after).

Runners: ours (runs of compiled kernels as one native call each: compiled/native_runs.py),
ours per node (the same Net's nodes called one by one from Python, as before native runs), a
PooledPredictor of 2 workers called as pool.forward(x).result() (a worker runs the job: two thread
handoffs) and as pool.infer(x) (the job runs on the calling thread), and onnxruntime's one-thread
session. The "forward" neighbour of the pool runners is a second client of the same pool. A thread that wants the GIL back while the neighbour holds it
waits up to the interpreter's switch interval (5 ms by default): ours per node takes it back at
every node boundary, ours after each native run (and node left in Python), onnxruntime once a
run. Reported: the time per forward with the neighbour / without it, and the Python calls a
forward makes. Configurations are interleaved over rounds (medians). Writes
benchmarks/results/neighbours.json.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402


@njit(nogil=True, cache=True)
def _compute(n):
    s = 0.0
    for _ in range(n):
        s = s * 1.0001 + 1.0
    return s


@njit(nogil=True, cache=True)
def _stream(a):
    s = np.float32(0)
    for i in range(a.size):
        s += a[i]
    return s


def _python(n):
    s = 0
    for i in range(n):
        s += i
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["ppocr_rec", "mobilenet_v2"])
    ap.add_argument("--seconds", type=float, default=2.0, help="per configuration per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--switch-interval", type=float, default=0.0005,
                    help="the lowered sys.setswitchinterval of the last neighbour, in seconds")
    args = ap.parse_args()

    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from benchmarks.vs_onnxruntime import load_model
    from pooled_predictor import Config, Net, PooledPredictor, Predictor

    big = np.ones(32 << 20, np.float32)
    _compute(10), _stream(big[:8])
    default_interval = sys.getswitchinterval()
    neighbours = {
        "idle": lambda: time.sleep(0.01),
        "compute": lambda: _compute(200_000),
        "memory": lambda: _stream(big),
        "forward": None,  # the runner's own engine: see below
        "python": lambda: _python(20_000),
        f"python, switch interval {args.switch_interval * 1e3:g} ms": lambda: _python(20_000),
    }

    def measure(run, work, interval):
        stop = threading.Event()

        def neighbour():
            while not stop.is_set():
                work()

        sys.setswitchinterval(interval)
        t = threading.Thread(target=neighbour, daemon=True)
        t.start()
        try:
            time.sleep(0.02)
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < args.seconds:
                run()
                calls += 1
            return (time.perf_counter() - t0) / calls
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(default_interval)

    rows = []
    for model in args.models:
        data, name, x = load_model(model, 1)
        pred = Predictor(data)
        nets = [Net(pred.program, {name: x.shape}, optimization=pred.optimization) for _ in range(4)]
        for net in nets:
            net.forward({name: x})
            net.forward({name: x})  # the first compiled run fuses the native runs
        for net in nets[2:]:
            net.layout.native = False  # per node: every call from Python
        calls = {"ours": len(nets[0].layout.native[0]) if nets[0].layout.native else len(nets[0].layout.run),
                 "ours_per_node": len(nets[2].layout.run), "onnxruntime": 1}
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        sess2 = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: x}
        pool = PooledPredictor(Config(model_bytes=[data], num_threads=2, warmup=True,
                                      warmup_shapes=[{name: x.shape}]))
        pool_feed = {name: x}
        runners = {"ours": lambda: nets[0].forward(), "ours_per_node": lambda: nets[2].forward(),
                   "pool_forward": lambda: pool.forward(pool_feed).result(),
                   "pool_infer": lambda: pool.infer(pool_feed), "onnxruntime": lambda: sess.run(None, feed)}
        second = {"ours": lambda: nets[1].forward(), "ours_per_node": lambda: nets[3].forward(),
                  "pool_forward": runners["pool_forward"], "pool_infer": runners["pool_infer"],
                  "onnxruntime": lambda: sess2.run(None, feed)}
        for run in (runners["pool_forward"], runners["pool_infer"]):
            run(), run()
        times = {(r, n): [] for r in runners for n in neighbours}
        with threadpool_limits(1):
            for k in range(args.rounds):
                for n, work in neighbours.items():
                    interval = args.switch_interval if "switch interval" in n else default_interval
                    order = list(runners.items())
                    order = order[k % len(order):] + order[:k % len(order)]
                    for r, run in order:
                        times[r, n].append(measure(run, work or second[r], interval))
        pool.close()
        for n in neighbours:
            row = {"model": model, "neighbour": n}
            for r in runners:
                row[f"{r}_ms"] = float(np.median(times[r, n])) * 1e3
                row[f"{r}_ratio"] = row[f"{r}_ms"] / (float(np.median(times[r, "idle"])) * 1e3)
            rows.append(row)
        print(f"{model}: Python calls a forward: ours {calls['ours']}, per node {calls['ours_per_node']}", flush=True)
        rows[-len(neighbours)]["calls"] = calls
    print(table(rows, [("model", "model", "s"), ("neighbour", "neighbour", "s"), ("ours_ms", "ours ms", ".2f"),
                       ("ours_ratio", "x idle", ".2f"), ("ours_per_node_ms", "per node ms", ".2f"),
                       ("ours_per_node_ratio", "x idle", ".2f"), ("pool_forward_ms", "pool forward ms", ".2f"),
                       ("pool_forward_ratio", "x idle", ".2f"), ("pool_infer_ms", "pool infer ms", ".2f"),
                       ("pool_infer_ratio", "x idle", ".2f"), ("onnxruntime_ms", "ort ms", ".2f"),
                       ("onnxruntime_ratio", "x idle", ".2f")]))
    print(f"\none thread each, batch 1; {args.rounds} rounds x {args.seconds:g} s, medians")
    out = write_results("neighbours", rows, models=args.models, seconds=args.seconds, rounds=args.rounds,
                        default_switch_interval=default_interval)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
