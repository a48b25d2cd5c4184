"""Where concurrent forwards lose against one: kernel CPU time per op type and node, and where the threads sit.

    python benchmarks/two_streams.py [--models resnet50 mobilenet_v2] [--batch 1] [--rounds 6]
                                     [--forwards 5] [--seconds 2] [--parts kernels schedule]
                                     [--streams N] [--nodes K] [--out-suffix S]

Two parts, each on the models of benchmarks/vs_onnxruntime.py (load_model):

* kernels: does a kernel get slower while a second forward runs on the other core? One Net
  (ours) and one onnxruntime session (1 intra-op thread) on this thread, timed on this thread's
  CPU clock (time.thread_time), so that time spent descheduled does not count, only slower
  execution. The second stream is a child process looping the same model (ours: a Net;
  onnxruntime: a 1-thread session), stopped (SIGSTOP) for the 'alone' phases and continued
  (SIGCONT) for the 'loaded' ones, the phases interleaved round by round so that slow drifts of
  the host's other load fall on both. Ours is profiled per op type and per node (engine/profiling.py,
  on the CPU clock); onnxruntime as one total. --streams N runs N such processes beside (15 on a
  16-core host: what a 16-worker pool's forwards share, the last-level cache and the memory
  bandwidth), each engine's streams continued and stopped together; --nodes K prints ours' K nodes
  that lose most (every node's row is in the JSON's "nodes").
* schedule: do the two streams get two CPUs? Ours (PooledPredictor, 2 workers, 2 caller threads,
  Config.worker_affinity "none") against onnxruntime's ort_1x2 (1 intra-op thread, 2 callers),
  alternated over rounds: images/s, CPU ms per forward (process CPU time / forwards), cores used
  (process CPU time / wall time), the share of 2-ms samples of /proc/self/task/*/stat in which
  both busy threads (ours: the workers; onnxruntime: the callers) were runnable on the same CPU,
  and the busy threads' shares of the wall time on a CPU, runnable waiting for one, and asleep
  (/proc/self/task/*/schedstat; a worker sleeps between jobs, onnxruntime's callers never).

On a shared host the other tenants move every wall-clock figure; CPU ms per forward and the
alone/loaded ratios within a round move much less. Prints tables and writes
benchmarks/results/two_streams.json (two_streams_<S>.json with --out-suffix; with the load average of
each part).
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import table, write_results  # noqa: E402
from benchmarks.vs_onnxruntime import MODELS, OrtSession, Ours, available, load_model  # noqa: E402


def _ours_net(data: bytes, input_name: str, x):
    """(predictor, net): one compiled Net; keep the Predictor alive: while it lives BLAS runs one
    thread a call, as in the pool (serving/blas.py)."""
    from pooled_predictor import Predictor
    from pooled_predictor.engine.tiering import COMPILER

    predictor = Predictor(data)
    net = predictor.new_net()
    net.forward({input_name: x})
    COMPILER.wait()  # compiled kernels in place: the reference tier is not what is timed
    return predictor, net


def child(model: str, kind: str, batch: int) -> None:
    """The second stream: loop one forward of `model` for ever (the parent stops and continues it)."""
    data, input_name, x = load_model(model, batch)
    if kind == "ours":
        predictor, net = _ours_net(data, input_name, x)  # noqa: F841 (kept alive)
        call = lambda: net.forward({input_name: x})  # noqa: E731
    else:
        call = OrtSession(data, input_name, x, 1, 1).once
    call()
    print("READY", flush=True)
    while True:
        call()


def _start_children(model: str, kind: str, batch: int, n: int) -> list[subprocess.Popen]:
    """n streams of `kind` looping `model`, started together, each stopped (SIGSTOP) once it is ready."""
    procs = [subprocess.Popen([sys.executable, __file__, "--child", model, kind, str(batch)],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    for proc in procs:
        for line in proc.stdout:
            if line.strip() == "READY":
                break
        else:
            for other in procs:
                other.kill()
            raise RuntimeError(f"a stream beside ({kind} {model}) did not start")
        os.kill(proc.pid, signal.SIGSTOP)
    return procs


def _signal_all(procs: list, sig: int) -> None:
    for proc in procs:
        os.kill(proc.pid, sig)


def kernels(model: str, batch: int, rounds: int, forwards: int, streams: int = 1) -> tuple[list[dict], list[dict]]:
    """(rows per op type (ours) and one for onnxruntime, rows per node (ours)): CPU ms/forward alone and with
    `streams` other streams of the same model running beside it."""
    data, input_name, x = load_model(model, batch)
    clock = time.perf_counter_ns
    predictor, net = _ours_net(data, input_name, x)  # noqa: F841 (kept alive)
    ort = OrtSession(data, input_name, x, 1, 1)
    ort.once()
    feed = {input_name: x}
    beside = {}
    try:
        for kind in ("ours", "ort"):
            beside[kind] = _start_children(model, kind, batch, streams)
        by_type = {phase: collections.defaultdict(list) for phase in ("alone", "loaded")}
        by_node = {phase: collections.defaultdict(list) for phase in ("alone", "loaded")}
        op_of = {}
        totals = {(k, phase): [] for k in ("ours", "ort") for phase in ("alone", "loaded")}
        for r in range(rounds):
            for phase in ("alone", "loaded") if r % 2 == 0 else ("loaded", "alone"):
                for kind in ("ours", "ort"):
                    if phase == "loaded":
                        _signal_all(beside[kind], signal.SIGCONT)
                    time.sleep(0.05)
                    if kind == "ours":
                        time.perf_counter_ns = time.thread_time_ns  # the profiler's clock: this thread's CPU
                        try:
                            profiler = net.enable_profiling()
                            profiler.clear()
                            for _ in range(forwards):
                                net.forward(feed)
                            net.disable_profiling()
                        finally:
                            time.perf_counter_ns = clock
                        for row in profiler.by_op_type():
                            by_type[phase][row["op_type"]].append(row["ms_per_forward"])
                        for row in profiler.by_node():
                            by_node[phase][row["node"]].append(row["ms_per_forward"])
                            op_of[row["node"]] = row["op_type"]
                        totals[("ours", phase)].append(profiler.total_ms_per_forward())
                    else:
                        start = time.thread_time()
                        for _ in range(forwards):
                            ort.once()
                        totals[("ort", phase)].append((time.thread_time() - start) / forwards * 1e3)
                    if phase == "loaded":
                        _signal_all(beside[kind], signal.SIGSTOP)
    finally:
        for proc in [p for procs in beside.values() for p in procs]:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait()
    load = os.getloadavg()[0]
    common = {"model": model, "batch": batch, "streams": streams, "load": load}

    def row(engine, what, alone, loaded):
        return {**common, "engine": engine, **what, "alone_ms": alone, "loaded_ms": loaded,
                "ratio": loaded / alone if alone else float("nan"), "extra_ms": loaded - alone}

    rows = [row(kind, {"op_type": "(all kernels)"}, statistics.median(totals[(kind, "alone")]),
                statistics.median(totals[(kind, "loaded")])) for kind in ("ours", "ort")]
    rows += [row("ours", {"op_type": op}, statistics.median(times), statistics.median(by_type["loaded"][op]))
             for op, times in by_type["alone"].items()]
    rows.sort(key=lambda r: (r["op_type"] != "(all kernels)", -r["extra_ms"]))
    nodes = [row("ours", {"node": node, "op_type": op_of[node]}, statistics.median(times),
                 statistics.median(by_node["loaded"][node])) for node, times in by_node["alone"].items()]
    nodes.sort(key=lambda r: -r["extra_ms"])
    return rows, nodes


def _thread_state(tid: int) -> tuple[str, int]:
    """(state letter, CPU it last ran or is queued on) of a thread of this process."""
    text = Path(f"/proc/self/task/{tid}/stat").read_text()
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[36])


def _schedstat(tid: int) -> tuple[int, int]:
    """(ns on a CPU, ns runnable waiting for one) of a thread of this process (/proc/.../schedstat)."""
    on_cpu, waiting = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[:2]
    return int(on_cpu), int(waiting)


def _two_callers(call, seconds: float, busy_tids: list | None) -> dict:
    """Two threads calling call() back to back for `seconds`, sampled every 2 ms: busy_tids (the
    threads that run the forwards; None: the two callers themselves). Also the busy threads'
    shares of the wall time on a CPU, runnable but waiting for one, and asleep (the rest)."""
    stop = time.perf_counter() + seconds
    done = [0, 0]
    tids = list(busy_tids) if busy_tids is not None else []
    shares = []

    def measure(run):
        tid = threading.get_native_id() if busy_tids is None else None
        before = [_schedstat(t) for t in ([tid] if tid else busy_tids)]
        start = time.perf_counter_ns()
        run()
        wall = time.perf_counter_ns() - start
        after = [_schedstat(t) for t in ([tid] if tid else busy_tids)]
        shares.extend(((a[0] - b[0]) / wall, (a[1] - b[1]) / wall) for a, b in zip(after, before))

    def loop(i):
        if busy_tids is None:
            tids.append(threading.get_native_id())

        def run():
            while time.perf_counter() < stop:
                call()
                done[i] += 1
        if busy_tids is None:
            measure(run)
        elif i == 0:
            measure(run)  # the workers' shares, once
        else:
            run()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for t in threads:
        t.start()
    samples = collections.Counter()
    while time.perf_counter() < stop:
        time.sleep(0.002)
        if len(tids) < 2:
            continue
        try:
            (s1, c1), (s2, c2) = _thread_state(tids[0]), _thread_state(tids[1])
        except (OSError, IndexError, ValueError):
            continue
        samples["same_cpu" if s1 == s2 == "R" and c1 == c2 else "other"] += 1
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    n = max(sum(done), 1)
    on_cpu = statistics.mean(a for a, _ in shares) if shares else float("nan")
    waiting = statistics.mean(b for _, b in shares) if shares else float("nan")
    return {"rate": sum(done) / wall, "cpu_ms_per_forward": cpu / n * 1e3, "cores": cpu / wall,
            "same_cpu": samples["same_cpu"] / max(sum(samples.values()), 1),
            "on_cpu": on_cpu, "waiting": waiting, "asleep": 1 - on_cpu - waiting}


def schedule(model: str, batch: int, rounds: int, seconds: float) -> list[dict]:
    """Rows for ours (pool, 2 workers, 2 callers) and ort_1x2: medians over alternated rounds."""
    data, input_name, x = load_model(model, batch)
    ours = Ours(data, input_name, x, queued=True)  # the workers' scheduling is what is measured
    ort = OrtSession(data, input_name, x, 1, 2)
    ours.run(0.5)
    ort.once()
    workers = [t.native_id for t in ours.pool._core.threads]
    configs = [("ours", ours.once, workers), ("ort_1x2", ort.once, None)]
    results = {name: [] for name, _, _ in configs}
    try:
        for r in range(rounds):
            for name, call, tids in configs if r % 2 == 0 else configs[::-1]:
                results[name].append(_two_callers(call, seconds, tids))
    finally:
        ours.close()
    load = os.getloadavg()[0]
    rows = []
    for name, runs in results.items():
        row = {"model": model, "batch": batch, "config": name, "load": load}
        for key in ("rate", "cpu_ms_per_forward", "cores", "same_cpu", "on_cpu", "waiting", "asleep"):
            row[key] = statistics.median(run[key] for run in runs)
        row["rate"] *= batch
        rows.append(row)
    rows[0]["vs_ort"] = rows[0]["rate"] / rows[1]["rate"]
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2"], choices=MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--forwards", type=int, default=5, help="kernels: forwards per phase per round")
    ap.add_argument("--seconds", type=float, default=2.0, help="schedule: seconds per configuration per round")
    ap.add_argument("--parts", nargs="+", default=["kernels", "schedule"], choices=["kernels", "schedule"])
    ap.add_argument("--streams", type=int, default=1,
                    help="kernels: other streams of the model running beside the timed one (one process each)")
    ap.add_argument("--nodes", type=int, default=0, help="kernels: print the N nodes that lose most (all in the JSON)")
    ap.add_argument("--out-suffix", default="", help="write two_streams_<S>.json")
    args = ap.parse_args(argv)
    kernel_rows, node_rows, schedule_rows = [], [], []
    for model in args.models:
        if not available(model):
            continue
        if "kernels" in args.parts:
            rows, nodes = kernels(model, args.batch, args.rounds, args.forwards, args.streams)
            kernel_rows += rows
            node_rows += nodes
        if "schedule" in args.parts:
            schedule_rows += schedule(model, args.batch, args.rounds, args.seconds)
    if kernel_rows:
        print(f"kernels: this thread's CPU ms per forward, alone and with {args.streams} other stream(s) of the same "
              "model")
        print(table(kernel_rows, [("model", "model", "s"), ("engine", "engine", "s"), ("op_type", "op type", "s"),
                                  ("alone_ms", "alone ms", ".2f"), ("loaded_ms", "loaded ms", ".2f"),
                                  ("ratio", "loaded/alone", ".3f"), ("extra_ms", "extra ms", ".2f"),
                                  ("load", "load", ".2f")]))
    if node_rows and args.nodes:
        for model in dict.fromkeys(r["model"] for r in node_rows):
            print(f"\n{model}: the {args.nodes} nodes of ours that lose most beside {args.streams} stream(s)")
            print(table([r for r in node_rows if r["model"] == model][:args.nodes],
                        [("node", "node", "s"), ("op_type", "op type", "s"), ("alone_ms", "alone ms", ".3f"),
                         ("loaded_ms", "loaded ms", ".3f"), ("ratio", "loaded/alone", ".3f"),
                         ("extra_ms", "extra ms", ".3f")]))
    if schedule_rows:
        print("\nschedule: 2 streams, ours (pool, 2 workers) against onnxruntime's ort_1x2")
        print(table(schedule_rows, [("model", "model", "s"), ("config", "config", "s"), ("rate", "img/s", ".2f"),
                                    ("cpu_ms_per_forward", "CPU ms/fwd", ".2f"), ("cores", "cores", ".2f"),
                                    ("same_cpu", "both on 1 CPU", ".2f"), ("on_cpu", "on CPU", ".3f"),
                                    ("waiting", "runnable", ".3f"), ("asleep", "asleep", ".3f"),
                                    ("vs_ort", "ours/ort", ".3f"),
                                    ("load", "load", ".2f")]))
    name = "two_streams" + (f"_{args.out_suffix}" if args.out_suffix else "")
    path = write_results(name, {"kernels": kernel_rows, "nodes": node_rows, "schedule": schedule_rows},
                         rounds=args.rounds, forwards=args.forwards, seconds=args.seconds, batch=args.batch,
                         streams=args.streams)
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    sys.exit(main())
