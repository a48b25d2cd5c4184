"""How long a forward holds the GIL: a pure-Python spinner thread's lost progress while a forward runs.

    python benchmarks/gil_share.py [--models ppocr_rec mobilenet_v2 resnet50] [--rounds R] [--seconds S]
                                   [--switch-interval MS ...] [--no-calibrate] [--no-pool]

A spinner thread counts loop iterations of pure Python, which needs the GIL all the time. On a
machine with at least 2 cores it runs at full speed beside a thread that does not hold the GIL (a
kernel in nogil code), and loses progress only while that thread holds it (Python dispatch, numpy
calls on small arrays, argument unboxing, allocation, the handoffs themselves). So, per target:
* alone       -- the spinner's iterations/s by itself (its own window, interleaved with the next);
* with        -- the spinner's iterations/s while one thread calls the target back to back;
* slept       -- the fraction of the window the spinner slept (Linux schedstat: neither on a CPU nor
                 runnable and waiting for one), less the same alone: the time it waited for the GIL.
                 Other processes' load does not enter it (a preempted spinner is runnable, not asleep);
* gil ms      -- slept x window / calls made in the window: GIL ms per call (the time the target's
                 thread held it, and the handoffs' wake-ups, in which nobody runs Python);
* rate        -- the same from the spinner's iteration rate: 1 - with / alone, times window / calls
                 (without schedstat; other processes' load reads as GIL time there);
* wall ms     -- the call's own time, alone (no spinner): gil ms / wall ms is the fraction of a
                 single-thread forward that holds the GIL, and 1 / gil ms bounds what N workers
                 can do together however many cores they have (calls/s <= 1000 / gil ms).
Targets: the calibration pair (a pure-Python loop: holds it all the time, gil ms ~ its wall ms;
a 384x384 numpy matmul, single-threaded BLAS: releases it, gil ms ~ 0), then per model a Predictor's
forward on the calling thread ("net") and a PooledPredictor with 1 worker and 1 client thread
("pool": the handoff to the worker and back included). A thread that wants the GIL back (a kernel
returned) waits for the spinner to drop it, up to sys.getswitchinterval() (5 ms by default): the
forward is slower beside the spinner, but the time it holds the GIL is what is counted;
--switch-interval repeats the run at other intervals (ms). Run it on an idle machine: another
process's load on the spinner's core reads as GIL time (the medians over rounds damp it).
Writes benchmarks/results/gil_share.json.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # BLAS must not use the spinner's core
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks._common import table, write_results  # noqa: E402

MODELS = ("ppocr_rec", "mobilenet_v2", "resnet50")


def _schedstat() -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one) of the calling thread (Linux schedstat), or None."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
            on_cpu, runnable, _ = f.read().split()
        return int(on_cpu), int(runnable)
    except (OSError, ValueError):
        return None


def spin(seconds: float, busy=None) -> tuple[float, float, float | None]:
    """(spinner iterations/s over `seconds`, calls/s of `busy` made meanwhile on another thread, the
    fraction of the window the spinner slept: neither on a CPU nor waiting for one, i.e. waiting for the
    GIL (None without schedstat))."""
    stop = threading.Event()
    calls = [0]
    started = threading.Event()

    def work():
        started.set()
        while not stop.is_set():
            busy()
            calls[0] += 1

    t = None
    if busy is not None:
        t = threading.Thread(target=work, daemon=True)
        t.start()
        started.wait()
    n = 0
    s0 = _schedstat()
    t0 = time.perf_counter()
    end = t0 + seconds
    clock = time.perf_counter
    while True:  # the spinner: 64 increments between clock reads
        for _ in range(64):
            n += 1
        if clock() >= end:
            break
    elapsed = clock() - t0
    s1 = _schedstat()
    made = calls[0]
    stop.set()
    if t is not None:
        t.join()
    slept = None
    if s0 is not None and s1 is not None:
        slept = max(0.0, 1.0 - (s1[0] - s0[0] + s1[1] - s0[1]) / 1e9 / elapsed)
    return n / elapsed, made / elapsed, slept


def wall_ms(call, seconds: float) -> float:
    """Median ms of call() alone, over about `seconds`."""
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def measure(name: str, call, rounds: int, seconds: float, py_spy: str | None = None) -> dict:
    """The table's row for one target: medians over rounds of alone / with windows, interleaved."""
    call()  # warm
    shares, gil, walls, per_s, slept, gil_s = [], [], [], [], [], []
    for _ in range(rounds):
        alone, _, slept0 = spin(seconds)
        with_, calls_per_s, slept1 = spin(seconds, call)
        share = max(0.0, 1.0 - with_ / alone)
        shares.append(share)
        per_s.append(calls_per_s)
        gil.append(1e3 * share / calls_per_s if calls_per_s else float("nan"))
        if slept1 is not None:
            slept.append(max(0.0, slept1 - slept0))
            gil_s.append(1e3 * slept[-1] / calls_per_s if calls_per_s else float("nan"))
        walls.append(wall_ms(call, seconds / 2))
    row = {"target": name, "share": statistics.median(shares), "gil_ms_rate": statistics.median(gil),
           "wall_ms": statistics.median(walls), "calls_per_s_beside_spinner": statistics.median(per_s),
           "gil_ms_rate_rounds": gil}
    if slept:
        row.update(slept=statistics.median(slept), gil_ms_slept=statistics.median(gil_s), gil_ms_slept_rounds=gil_s)
    if py_spy:
        fr, per = zip(*[py_spy_share(py_spy, call, max(1, round(seconds))) for _ in range(rounds)])
        row.update(py_spy_gil=statistics.median(fr), py_spy_calls_per_s=statistics.median(per))
        row["gil_ms_py_spy"] = row["py_spy_gil"] * row["wall_ms"]  # the held share of an undisturbed call
    row["gil_ms"] = row.get("gil_ms_py_spy", row.get("gil_ms_slept", row["gil_ms_rate"]))
    row["gil_of_wall"] = row["gil_ms"] / row["wall_ms"]
    row["bound_per_s"] = 1e3 / row["gil_ms"] if row["gil_ms"] > 0 else float("inf")
    return row


def py_spy_share(py_spy: str, call, seconds: float, rate: int = 1000) -> tuple[float, float]:
    """(fraction of py-spy's samples of this process in which a thread held the GIL, calls/s meanwhile):
    `py-spy record --gil` counts the samples where a thread holds it, `--idle` all of them, both sampling
    this process while the calling thread runs `call` back to back (no spinner: nothing competes for the
    GIL, and other processes' load changes the wall time, not the fraction much)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([py_spy, "record", "-p", str(os.getpid()), "-r", str(rate), "-d", str(seconds),
                                   "-f", "raw", "-o", f"{tmp}/{mode}.txt", f"--{mode}", "--threads", "--nonblocking"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for mode in ("gil", "idle")]
        calls, t0 = 0, time.perf_counter()
        while any(p.poll() is None for p in procs):
            call()
            calls += 1
        elapsed = time.perf_counter() - t0
        counts = {}
        for mode in ("gil", "idle"):  # with --threads, a raw line is "thread (0x..);frame;... count"
            per_thread: dict = {}
            try:
                with open(f"{tmp}/{mode}.txt") as f:
                    for line in f:
                        if line.strip():
                            stack, n = line.rsplit(" ", 1)
                            per_thread[stack.split(";", 1)[0]] = per_thread.get(stack.split(";", 1)[0], 0) + int(n)
            except (OSError, ValueError):
                pass
            counts[mode] = per_thread
    # --idle samples every thread at every tick: the ticks are any one thread's count; --gil: the holder's
    ticks = max(counts["idle"].values(), default=0)
    if not ticks:
        raise RuntimeError(f"py-spy took no samples (is {py_spy} runnable, may it ptrace this process?)")
    return sum(counts["gil"].values()) / ticks, calls / elapsed


def calibration_targets():
    def python_loop():  # about 2 ms of pure Python
        s = 0
        for i in range(40000):
            s += i
        return s

    a = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)
    b = a.copy()
    out = np.empty_like(a)

    def matmul():
        np.matmul(a, b, out=out)

    return [("calib: python loop", python_loop), ("calib: numpy matmul 384", matmul)]


def model_targets(name: str, pool: bool):
    from benchmarks.vs_onnxruntime import load_model
    from pooled_predictor import Predictor

    data, input_name, x = load_model(name, 1)
    pred = Predictor(data)
    outputs = [pred.output_names[0]] if hasattr(pred, "output_names") else None
    feed = {input_name: x}
    targets = [(f"{name}: net", lambda: pred.forward(feed, outputs))]
    closers = []
    if pool:
        from pooled_predictor import Config, PooledPredictor

        pp = PooledPredictor(Config(model_bytes=[data], num_threads=1, warmup=True,
                                    warmup_shapes=[{input_name: x.shape}]))
        targets.append((f"{name}: pool x1", lambda: pp.forward(feed).result()))
        closers.append(pp.close)
    return targets, closers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5, help="per window")
    ap.add_argument("--switch-interval", type=float, nargs="+", default=None,
                    help="sys.setswitchinterval values to run at, ms (default: Python's, 5 ms)")
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--no-pool", action="store_true", help="only the Net on the calling thread")
    ap.add_argument("--py-spy", default=None, metavar="PATH",
                    help="also sample with this py-spy binary (record --gil against --idle): the GIL-held share "
                         "without a spinner, robust to other processes' load; then the table's GIL ms is this one")
    ap.add_argument("--out", default="gil_share", help="results/<out>.json")
    args = ap.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        print("needs 2 cores: with one, the spinner loses its core as well as the GIL")
        return 1
    targets = [] if args.no_calibrate else calibration_targets()
    closers = []
    for m in args.models:
        t, c = model_targets(m, not args.no_pool)
        targets += t
        closers += c
    default = sys.getswitchinterval()
    intervals = [v / 1e3 for v in args.switch_interval] if args.switch_interval else [default]
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load {load[0]:.2f}; {args.rounds} rounds x {args.seconds:g} s windows", flush=True)
    rows = []
    try:
        for interval in intervals:
            sys.setswitchinterval(interval)
            for name, call in targets:
                row = measure(name, call, args.rounds, args.seconds, args.py_spy)
                row["switch_ms"] = interval * 1e3
                rows.append(row)
                print(f"{name} (switch {interval * 1e3:g} ms): GIL {row['gil_ms']:.3f} ms of {row['wall_ms']:.3f} ms "
                      f"({row['gil_of_wall']:.0%}), share {row['share']:.2f}", flush=True)
    finally:
        sys.setswitchinterval(default)
        for c in closers:
            c()
    columns = [("target", "target", "s"), ("switch_ms", "switch ms", "g"), ("wall_ms", "wall ms", ".3f"),
               ("gil_ms", "GIL ms/call", ".3f"), ("gil_of_wall", "GIL/wall", ".2f"), ("slept", "spinner slept", ".2f"),
               ("gil_ms_rate", "GIL ms (rate)", ".3f"), ("share", "spinner lost", ".2f"),
               ("calls_per_s_beside_spinner", "calls/s w/ spinner", ".1f"), ("bound_per_s", "GIL bound calls/s", ".0f")]
    print()
    print(table(rows, columns))
    path = write_results(args.out, rows, rounds=args.rounds, seconds=args.seconds, load_average_before=load,
                         load_average_after=os.getloadavg())
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
