"""Two (or more) checkouts of the project, or one under different environments, timed side by side in one run.

    python benchmarks/ab_checkouts.py SIDE SIDE ... [--models mobilenet_v2:1 resnet50:8 int8/resnet50/qdq ...]
                                      [--rounds 3] [--seconds 2] [--pool] [--out-suffix S]

SIDE is NAME=ROOT[:VAR=VALUE,VAR=VALUE...]: a checkout's root (a `git worktree add` of an older commit, say) and
environment variables for its process (POOLED_PREDICTOR_ISA=avx2, NUMBA_CACHE_DIR=..., or tests/avx2_target.sh's
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, which apply to every side when exported before the call). Each side is one
process importing pooled_predictor (and benchmarks.vs_onnxruntime's load_model) from its own root, kept alive over
the run; windows alternate between the sides in a rotated order, one side running at a time, a first 0.3 s window
each untimed. Measured per window: without --pool, images per second of this thread's CPU time over Net.forward
calls back to back (one thread: the kernels); with --pool, images per second of wall time of a 2-worker
PooledPredictor driven by 2 client threads, as that checkout's own vs_onnxruntime.py drives it (infer() where the
checkout's pool has it, else forward().result()). A model int8/NAME/FORMAT is benchmarks/int8.py's quantized model
(NAME of its MODELS or OPTIONAL, FORMAT qdq, qop or dynamic; batch 1), quantized in each side's process by that
side's int8.py (onnxruntime's tool is deterministic: the same model on every side); the int8 arithmetic is the
side's default, POOLED_PREDICTOR_HOST_VNNI=0 in a side's environment giving a host without VNNI's. The table gives
each side's median and its ratio to the first.
Writes benchmarks/results/ab_checkouts.json (ab_checkouts_S.json), naming the sides, the machine and the command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def serve(root: str, pool: bool) -> None:
    """A side's process: reads 'model batch seconds' lines, answers images per second."""
    sys.path.insert(0, root)
    os.environ.setdefault("POOLED_PREDICTOR_TIERED", "0")
    from benchmarks.vs_onnxruntime import load_model

    runners = {}
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        model, batch, seconds = parts[0], int(parts[1]), float(parts[2])
        if (model, batch) not in runners:
            for close in [r[1] for r in runners.values()]:
                close()
            runners.clear()
            data, name, x = _int8_model(model) if model.startswith("int8/") else load_model(model, batch)
            runners[(model, batch)] = _pool_runner(data, name, x) if pool else _net_runner(data, name, x)
        run, _ = runners[(model, batch)]
        print(f"{run(seconds) * batch:.4f}", flush=True)


def _int8_model(spec: str):
    """(bytes, input name, input) of int8/NAME/FORMAT: benchmarks/int8.py's quantized model, at its defaults."""
    import argparse
    import tempfile

    from benchmarks import int8

    _, name, fmt = spec.split("/")
    args = argparse.Namespace(bert_layers=12, bert_seq=128)
    data, _, input_name, x = int8.quantized(name, fmt, Path(tempfile.mkdtemp()), args)
    return data, input_name, x


def _net_runner(data, name, x):
    from pooled_predictor import Predictor

    net = Predictor(data).net()
    feed = {name: x}
    net.forward(feed)

    def run(seconds):
        net.forward(feed)
        n, c0, end = 0, time.thread_time(), time.perf_counter() + seconds
        while time.perf_counter() < end:
            net.forward(feed)
            n += 1
        return n / (time.thread_time() - c0)

    return run, lambda: None


def _pool_runner(data, name, x):
    from pooled_predictor import Config, PooledPredictor

    pool = PooledPredictor(Config(model_bytes=[data], num_threads=2, warmup=True, warmup_shapes=[{name: x.shape}]))
    feed = {name: x}
    once = (lambda: pool.infer(feed)) if hasattr(pool, "infer") else (lambda: pool.forward(feed).result())

    def run(seconds):
        time.sleep(0.2)
        start = time.perf_counter()
        stop, done = start + seconds, [0, 0]

        def loop(i):
            while time.perf_counter() < stop:
                once()
                done[i] += 1

        threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done) / (time.perf_counter() - start)

    return run, pool.close


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sides", nargs="+", help="NAME=ROOT[:VAR=VALUE,...]")
    ap.add_argument("--models", nargs="+", default=["mobilenet_v2:1", "resnet50:1", "ppocr_rec:1"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--pool", action="store_true")
    ap.add_argument("--out-suffix", default="")
    args = ap.parse_args()
    sides = []
    for spec in args.sides:
        name, _, rest = spec.partition("=")
        root, _, envs = rest.partition(":")
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in envs.split(",") if kv)
        sides.append((name, root, env))
    procs = {n: subprocess.Popen([sys.executable, str(HERE), "--serve", root] + (["--pool"] if args.pool else []),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for n, root, env in sides}
    names = [s[0] for s in sides]
    rows = []
    for spec in args.models:
        model, _, batch = spec.partition(":")
        rates = {n: [] for n in names}
        for r in range(args.rounds + 1):
            for n in names[r % len(names):] + names[:r % len(names)]:
                procs[n].stdin.write(f"{model} {batch or 1} {args.seconds if r else 0.3}\n")
                procs[n].stdin.flush()
                value = float(procs[n].stdout.readline())
                if r:
                    rates[n].append(value)
        base = statistics.median(rates[names[0]])
        row = {"model": model, "batch": int(batch or 1)}
        for n in names:
            row[n] = statistics.median(rates[n])
            row[f"{n}_vs_{names[0]}"] = row[n] / base
            row[f"{n}_rounds"] = rates[n]
        rows.append(row)
        print(f"{model} b{row['batch']}: " + "  ".join(f"{n} {row[n]:.2f} ({row[f'{n}_vs_{names[0]}']:.3f})"
                                                      for n in names), flush=True)
    for p in procs.values():
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()
    sys.path.insert(0, str(HERE.parents[1]))
    from benchmarks._common import write_results

    print("written to", write_results("ab_checkouts" + (f"_{args.out_suffix}" if args.out_suffix else ""), rows,
                                      sides={n: {"root": r, "env": {k: v for k, v in e.items() if k.startswith(
                                          ("POOLED_PREDICTOR", "NUMBA_"))}} for n, r, e in sides},
                                      unit="images/s of CPU time (one thread)" if not args.pool else
                                      "images/s of wall time (2-worker pool, 2 clients)"))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], "--pool" in sys.argv[3:])
    else:
        main()
