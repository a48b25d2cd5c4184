"""Activation memory of every zoo model, the PP-OCR detector and res10 (Caffe): naive, fb-caffe-exts, arena, bounds.

    python benchmarks/memory.py [--batches 1 32] [--lanes 8 16] [--skip-measure]

For each model and batch: naive bytes (what Optimization.NONE allocates: every
activation its own buffer, plus one workspace shared by all kernels' scratch,
like Caffe's col buffer), the fb-caffe-exts shared-buffer baseline
(memory_opt's plan_shared_buffers over the activations, plus that workspace),
our arena (plan_arena, with in-place reuse and the kernels' scratch planned as
values live at one step), the liveness lower bound without and with in-place
reuse (scratch included), arena / bound and the reductions vs naive; in each
blocked layout (--lanes: 8, NCHW8c, AVX2's; 16, NCHW16c, AVX-512's: compiled/isa.py).

Rows for quantized models: ResNet-50, MobileNetV2 and the PP-OCR detector quantized with
onnxruntime's tool (static QDQ, per channel, u8 activations), optimized so they run as integer
nodes with 8-bit activations (the detector's GELUs as Lookup nodes), beside the same float32
models through the same passes.

Also: the planning time for ResNet-50, the GoogLeNet allocation plots (arena
and fb baseline) as PNG, and the measured memory of one forward of ResNet-50 at
batch 32 under NONE and MEMORY (tracemalloc peak in a fresh process, weights
excluded) beside the planned figures.

Writes benchmarks/results/memory.json (a list of rows with the keys model,
batch, naive_bytes, fb_baseline_bytes, arena_bytes, lower_bound_bytes,
lower_bound_inplace_bytes, ...) and memory.meta.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import RESULTS, table, write_results  # noqa: E402

MiB = 2 ** 20
ZOO_MODELS = ["alexnet", "googlenet", "resnet50", "mobilenet_v2", "squeezenet1_1", "vgg16"]
DET_SHAPE = (3, 640, 480)


def models():
    from pooled_predictor.importers import load_onnx
    from pooled_predictor.zoo import ZOO, build, fetch_ppocr

    for name in ZOO_MODELS:
        yield name, load_onnx(build(name)), ZOO[name].input_shape, "data"
    yield "ppocr_det", load_onnx(fetch_ppocr().det), DET_SHAPE, "x"
    from pooled_predictor.importers import load_caffe
    from pooled_predictor.zoo import fetch_res10_face_detector

    res10 = fetch_res10_face_detector()  # a Caffe model: prototxt + caffemodel
    yield "res10_ssd (caffe)", load_caffe(res10.prototxt, res10.caffemodel), (3, 300, 300), "data"
    yield from quantized_models()


def quantized_models():
    """ResNet-50, MobileNetV2 and the PP-OCR detector quantized by onnxruntime's tool (static QDQ, per channel, u8/s8;
    benchmarks/int8.py), optimized (passes/qdq.py turns them into integer nodes: 8-bit activations),
    beside their float32 selves through the same passes. Skipped without onnxruntime."""
    import tempfile
    from types import SimpleNamespace

    from pooled_predictor.importers import load_onnx
    from pooled_predictor.passes import optimize
    from pooled_predictor.zoo import ZOO

    try:
        from benchmarks.int8 import quantized
    except ImportError:
        return
    with tempfile.TemporaryDirectory() as d:
        for name in ("resnet50", "mobilenet_v2", "ppocr_det"):
            qdata, fdata, input_name, _ = quantized(name, "qdq", Path(d), SimpleNamespace())
            chw = DET_SHAPE if name == "ppocr_det" else ZOO[name].input_shape
            for label, data in ((f"{name} f32 (optimized)", fdata), (f"{name} int8 QDQ (optimized)", qdata)):
                graph, _ = optimize(load_onnx(data), "all")
                yield label, graph, chw, input_name


def plan_rows(batches, lanes=(8, 16)):
    from pooled_predictor import Net, Optimization, Program

    rows, extras = [], {}
    for name, graph, chw, input_name in models():
        program = Program(graph)
        for batch, width in ((b, w) for b in batches for w in lanes):
            shape = {input_name: (batch,) + tuple(chw)}
            arena = Net(program, shape, optimization=Optimization.MEMORY, lanes=width)
            fb = Net(program, shape, optimization=Optimization.MEMORY, planner="shared", lanes=width)
            naive = Net(program, shape, optimization=Optimization.NONE, lanes=width)  # virtual memory, never touched
            p, q = arena.memory_plan, fb.memory_plan
            p.validate()
            q.validate()
            row = {"model": name, "batch": batch, "layout": f"NCHW{width}c", "naive_bytes": naive.arena_bytes,
                   "fb_baseline_bytes": fb.arena_bytes, "arena_bytes": arena.arena_bytes,
                   "lower_bound_bytes": p.lower_bound_no_inplace_bytes,
                   "lower_bound_inplace_bytes": p.lower_bound_bytes,
                   "plan_ms": arena.plan_seconds * 1e3}
            row["arena_over_bound"] = row["arena_bytes"] / row["lower_bound_inplace_bytes"]
            row["fb_reduction_vs_naive"] = 1 - row["fb_baseline_bytes"] / row["naive_bytes"]
            row["arena_reduction_vs_naive"] = 1 - row["arena_bytes"] / row["naive_bytes"]
            row["naive_over_arena"] = row["naive_bytes"] / row["arena_bytes"]
            rows.append(row)
            if name == "googlenet" and batch == batches[0] and width == lanes[0]:
                from memory_opt import plot_plan

                for label, net in (("arena", arena), ("fb_baseline", fb)):
                    png = RESULTS / f"googlenet_{label}.png"
                    plot_plan(net.memory_plan, net.memory_liveness, None, png,
                              title=f"GoogLeNet batch {batch}: {label.replace('_', ' ')} "
                                    f"({net.memory_plan.arena_bytes / MiB:.1f} MiB)")
                    extras[f"googlenet_{label}_plot"] = str(png.relative_to(RESULTS.parent.parent))
            if name == "resnet50" and width == lanes[0]:
                # planning time alone, best of 5 (the first includes imports)
                import time

                from memory_opt import plan_arena
                times = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    plan_arena(arena.memory_liveness)
                    times.append(time.perf_counter() - t0)
                extras[f"resnet50_batch{batch}_plan_ms"] = min(times) * 1e3
            del arena, fb, naive
    return rows, extras


MEASURE = r"""
import json, sys, tracemalloc
import numpy as np
from pooled_predictor import Net, Optimization, Program
from pooled_predictor.importers import load_onnx
from pooled_predictor.zoo import build, sample_input
opt = Optimization(sys.argv[1])
program = Program(load_onnx(build("resnet50")))
x = sample_input("resnet50", 32)
tracemalloc.start()
net = Net(program, optimization=opt)
net.forward({"data": x})
current, peak = tracemalloc.get_traced_memory()
print(json.dumps({"optimization": opt.value, "tracemalloc_peak_bytes": peak,
                  "planned_arena_bytes": net.arena_bytes}))
"""


def measure_resnet50():
    out = []
    for opt in ("none", "memory"):
        proc = subprocess.run([sys.executable, "-c", MEASURE, opt], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1])
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--lanes", type=int, nargs="+", default=[8, 16], choices=[8, 16],
                    help="blocked layouts: 8 (NCHW8c), 16 (NCHW16c)")
    ap.add_argument("--skip-measure", action="store_true", help="skip the ResNet-50 process-memory run")
    args = ap.parse_args(argv)
    rows, extras = plan_rows(args.batches, tuple(args.lanes))
    show = [dict(r, **{k: r[k] / MiB for k in r if k.endswith("_bytes")}) for r in rows]
    print("Activation memory (MiB) per model and batch\n")
    print(table(show, [("model", "model", "s"), ("batch", "batch", "d"), ("layout", "layout", "s"),
                       ("naive_bytes", "naive", ".1f"),
                       ("fb_baseline_bytes", "fb-caffe-exts", ".1f"), ("arena_bytes", "arena", ".1f"),
                       ("lower_bound_bytes", "bound", ".1f"), ("lower_bound_inplace_bytes", "bound+inplace", ".1f"),
                       ("arena_over_bound", "arena/bound", ".3f"), ("fb_reduction_vs_naive", "fb saves", ".1%"),
                       ("arena_reduction_vs_naive", "arena saves", ".1%"), ("naive_over_arena", "naive/arena", ".1f")]))
    for k, v in extras.items():
        print(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}")
    measured = []
    if not args.skip_measure:
        measured = measure_resnet50()
        print("\nResNet-50, batch 32, one forward in a fresh process (tracemalloc peak, weights excluded):")
        for m in measured:
            print(f"  {m['optimization']:>6}: measured peak {m['tracemalloc_peak_bytes'] / MiB:8.1f} MiB, "
                  f"planned arena {m['planned_arena_bytes'] / MiB:8.1f} MiB")
    path = write_results("memory", rows, rows_only=True, extras=extras, resnet50_batch32_measured=measured)
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
