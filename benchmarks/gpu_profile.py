"""Where a Net's GPU time goes: per node and per op type, CUDA events around each bound call (issue 30).

    python benchmarks/gpu_profile.py [--cases resnet50:1,mobilenet_v2:1,resnet50:32] [--transformers bert,vit]

For each case: a Predictor on device="cuda", two warm-up forwards, then the layout's run (Layout.run, one
call per node, IoCopy steps included) replayed eagerly on a stream of its own behind a spin kernel that
holds the GPU for ~0.2 s, so that every launch is queued before the GPU reaches it: the event between two
calls then times that node's device work alone (the host's launch time is reported beside it). Prints the
op types by device time, the 12 slowest nodes with their input shapes, the sum of device times, and the
raw cuBLAS sgemm rate at the slowest GEMM-shaped node's size for comparison. A case that fails prints its
whole traceback. Writes benchmarks/results/gpu_profile.json. Needs CuPy and a GPU (the lent machine).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import RESULTS, machine  # noqa: E402
from pooled_predictor.ops.cuda import runtime  # noqa: E402

SPIN = r'''extern "C" __global__ void spin(long long cycles) {
    long long t = clock64();
    while (clock64() - t < cycles) { }
}'''


def profile_net(pred, feed, reps: int = 3) -> dict:
    cp = runtime.cupy
    spin = cp.RawKernel(SPIN, "spin")
    pred.forward(feed)
    pred.forward(feed)
    layout = pred.net().layout
    run, nodes = layout.run, layout.run_nodes
    n = len(run)
    dev_ms, host_ms = np.zeros(n), np.zeros(n)
    with cp.cuda.Stream(non_blocking=True) as stream:
        for _ in range(reps):
            events = [cp.cuda.Event() for _ in range(n + 1)]
            spin((1,), (1,), (np.int64(400_000_000),))  # ~0.2 s at ~2 GHz: the launches below queue behind it
            events[0].record(stream)
            for j, call in enumerate(run):
                t0 = time.perf_counter()
                call()
                host_ms[j] += (time.perf_counter() - t0) * 1e3
                events[j + 1].record(stream)
            events[-1].synchronize()
            for j in range(n):
                dev_ms[j] += cp.cuda.get_elapsed_time(events[j], events[j + 1])
    dev_ms /= reps
    host_ms /= reps
    by_op = defaultdict(lambda: [0, 0.0, 0.0])
    rows = []
    for j, node in enumerate(nodes):
        shapes = [tuple(layout.blobs[i].shape) if i and i in layout.blobs else None for i in node.inputs[:2]]
        rows.append({"node": node.name, "op": node.op_type, "in": shapes, "dev_ms": round(float(dev_ms[j]), 4),
                     "host_ms": round(float(host_ms[j]), 4)})
        agg = by_op[node.op_type]
        agg[0] += 1
        agg[1] += dev_ms[j]
        agg[2] += host_ms[j]
    ops = sorted(({"op": k, "count": v[0], "dev_ms": round(v[1], 3), "host_ms": round(v[2], 3)}
                  for k, v in by_op.items()), key=lambda r: -r["dev_ms"])
    return {"nodes": n, "device_ms": round(float(dev_ms.sum()), 3), "host_ms": round(float(host_ms.sum()), 3),
            "by_op": ops, "slowest": sorted(rows, key=lambda r: -r["dev_ms"])[:12]}


def sgemm_rate(m: int, n: int, k: int) -> float:
    """TFLOP/s of runtime.gemm (cublasSgemm, TF32 as PP_CUDA_TF32 says) at (m, n, k), median of 20."""
    cp = runtime.cupy
    a, b, c = (cp.random.standard_normal(s, dtype=cp.float32) for s in ((m, k), (k, n), (m, n)))
    with cp.cuda.Stream(non_blocking=True) as stream:
        for _ in range(3):
            runtime.gemm(a, b, c, m, n, k)
        times = []
        for _ in range(20):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(stream)
            runtime.gemm(a, b, c, m, n, k)
            e1.record(stream)
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1))
    return 2 * m * n * k / (float(np.median(times)) * 1e-3) / 1e12


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="resnet50:1,mobilenet_v2:1,resnet50:32")
    ap.add_argument("--transformers", default="bert,vit")
    ap.add_argument("--out", default=str(RESULTS / "gpu_profile.json"))
    args = ap.parse_args(argv)
    from pooled_predictor import Predictor, zoo

    report = {"machine": machine(), "cases": []}
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",") if c]
    for name in [t for t in args.transformers.split(",") if t]:
        cases.append((name, 1))
    for name, batch in cases:
        row = {"model": name, "batch": batch}
        try:
            if name in ("bert", "vit"):
                from benchmarks.gpu_check import _transformer  # noqa: PLC0415
                from benchmarks.export_transformers import exported_dir  # noqa: PLC0415

                model, feed, row["source"] = _transformer(name, exported_dir())
                pred = Predictor(model, device="cuda")
            else:
                pred = Predictor(zoo.build(name, batch=batch).SerializeToString(), device="cuda")
                feed = {pred.input_names[0]: zoo.sample_input(name, batch)}
            row.update(profile_net(pred, feed))
            if batch == 1:  # the host's side of a whole forward (graph replay on a stream of its own)
                import cProfile  # noqa: PLC0415
                import io  # noqa: PLC0415
                import pstats  # noqa: PLC0415

                cp = runtime.cupy
                with cp.cuda.Stream(non_blocking=True):
                    for _ in range(3):
                        pred.forward(feed)
                    prof = cProfile.Profile()
                    t0 = time.perf_counter()
                    prof.enable()
                    for _ in range(20):
                        pred.forward(feed)
                    prof.disable()
                    row["forward_ms"] = (time.perf_counter() - t0) / 20 * 1e3
                text = io.StringIO()
                pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
                row["cprofile"] = text.getvalue()
                print(f"\n{name} b{batch} forward {row['forward_ms']:.2f} ms (cProfile on), by tottime:")
                print("\n".join(l for l in row["cprofile"].splitlines() if l.strip())[-2600:])
            try:  # device in, device out (gpu_check's third column)
                cp = runtime.cupy
                with cp.cuda.Stream(non_blocking=True):
                    got = pred.forward({k: cp.asarray(v) for k, v in feed.items()}, output_device="cuda")
                    ref = pred.forward(feed)
                    row["device_io_max_diff"] = max(float(abs(cp.asnumpy(got[k]) - ref[k]).max()) for k in ref)
            except Exception as exc:  # noqa: BLE001
                row["device_io_error"] = traceback.format_exc()
                print(f"\n{name} b{batch} device io FAILED\n{row['device_io_error']}")
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"
            row["traceback"] = traceback.format_exc()
            print(f"\n{name} b{batch} FAILED\n{row['traceback']}")
        report["cases"].append(row)
        if "by_op" in row:
            print(f"\n{name} b{batch}: {row['nodes']} calls, device {row['device_ms']:.2f} ms, host launch "
                  f"{row['host_ms']:.2f} ms")
            for r in row["by_op"][:8]:
                print(f"  {r['op']:<22} x{r['count']:<4} dev {r['dev_ms']:8.3f}  host {r['host_ms']:7.3f}")
            for r in row["slowest"][:8]:
                print(f"    {r['dev_ms']:7.3f} ms {r['op']:<18} {r['node'][:28]:<28} {r['in']}")
    for m, n, k in ((64, 3136, 576), (256, 3136, 64), (512, 784, 1152), (2048, 49, 512), (768, 128, 768),
                    (3072, 128, 768), (256, 100352, 576)):
        try:
            report.setdefault("sgemm_tflops", {})[f"{m}x{n}x{k}"] = round(sgemm_rate(m, n, k), 2)
        except Exception as exc:  # noqa: BLE001
            report.setdefault("sgemm_tflops", {})[f"{m}x{n}x{k}"] = f"{type(exc).__name__}: {exc}"
    print("\nsgemm TFLOP/s (m x n x k):", report.get("sgemm_tflops"))
    Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
