"""One inference thread beside another busy thread: what the neighbour costs, ours vs onnxruntime.

    python benchmarks/neighbours.py [--seconds 2] [--rounds 3] [--switch-interval 0.0005]

A Net (one thread's, as a pool worker has) of PP-OCR rec (1x3x48x320) runs
forward() in a loop while a second Python thread does one of:

* idle        -- sleeps (the baseline);
* compute     -- a compiled loop without the GIL and without memory traffic
                 (the other core is busy);
* memory      -- a compiled loop without the GIL summing 128 MiB (memory bandwidth);
* forward     -- the same engine's second forward (ours: a second Net, as two pool
                 workers; onnxruntime: a second one-thread session);
* python      -- a pure-Python loop that never releases the GIL on its own;
* python, switch interval S -- the same, with sys.setswitchinterval(S) (restored after).

onnxruntime's one-thread session is measured the same way. Reported: the time
per forward with the neighbour / without it. Our forward runs its nodes from
Python and releases the GIL inside each compiled or BLAS kernel, so it takes the
GIL back at every node boundary; a neighbour that never releases it makes each
of those waits last up to the interpreter's switch interval (5 ms by default).
onnxruntime's run() releases the GIL once for the whole graph. Configurations
are interleaved over rounds (medians). Writes benchmarks/results/neighbours.json.
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
    ap.add_argument("--seconds", type=float, default=2.0, help="per configuration per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--switch-interval", type=float, default=0.0005,
                    help="the lowered sys.setswitchinterval of the last neighbour, in seconds")
    args = ap.parse_args()

    import onnxruntime as ort
    from threadpoolctl import threadpool_limits

    from pooled_predictor import Net, Predictor
    from pooled_predictor.zoo import fetch_ppocr

    path = fetch_ppocr().rec
    shape = (1, 3, 48, 320)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    pred = Predictor(path)
    name = pred.program.input_names[0]
    nets = [Net(pred.program, {name: shape}, optimization=pred.optimization) for _ in range(2)]
    for net in nets:
        net.forward({name: x})
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    sess2 = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
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
    runners = {"ours": lambda: nets[0].forward(), "onnxruntime": lambda: sess.run(None, feed)}
    second = {"ours": lambda: nets[1].forward(), "onnxruntime": lambda: sess2.run(None, feed)}

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

    times = {(r, n): [] for r in runners for n in neighbours}
    with threadpool_limits(1):
        for _ in range(args.rounds):
            for n, work in neighbours.items():
                interval = args.switch_interval if "switch interval" in n else default_interval
                for r, run in runners.items():
                    times[r, n].append(measure(run, work or second[r], interval))
    rows = []
    for n in neighbours:
        row = {"neighbour": n}
        for r in runners:
            row[f"{r}_ms"] = float(np.median(times[r, n])) * 1e3
            row[f"{r}_ratio"] = row[f"{r}_ms"] / (float(np.median(times[r, "idle"])) * 1e3)
        rows.append(row)
    print(table(rows, [("neighbour", "neighbour", "s"), ("ours_ms", "ours ms", ".2f"), ("ours_ratio", "x idle", ".2f"),
                       ("onnxruntime_ms", "ort ms", ".2f"), ("onnxruntime_ratio", "x idle", ".2f")]))
    print(f"\nPP-OCR rec 1x3x48x320, one thread each, {len(nets[0].layout.run)} nodes per forward; "
          f"{args.rounds} rounds x {args.seconds:g} s, medians")
    out = write_results("neighbours", rows, model="PP-OCR rec 1x3x48x320", nodes=len(nets[0].layout.run),
                        seconds=args.seconds, rounds=args.rounds, default_switch_interval=default_interval)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
