"""Graph passes: node counts before/after, and throughput with level "all" vs "none", side by side.

    python benchmarks/passes.py [--seconds 3] [--repeats 2] [--models det,rec,resnet50,...]

For each model (PP-OCR det and rec, and the zoo's classic CNNs at reduced
sizes) the graph is optimized at level "none" and "all" (passes.optimize),
and each is served by a PooledPredictor (Config.graph_optimization_level)
with 1 and 2 workers fed by as many closed-loop clients, under
Optimization.MEMORY (the default: one planned arena, element-wise ops in
place) and Optimization.NONE (every blob its own array: Identity copies cost
a pass).
Levels alternate within each repeat and the best of the repeats is kept, so
slow drifts of a shared machine hit both alike. Prints the node-count table
and the throughput table, and writes benchmarks/results/passes.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import percentiles_ms, run_threads, table, write_results  # noqa: E402

# model -> (input size for the zoo; PP-OCR shapes are fixed below)
ZOO_SIZES = {"alexnet": 227, "googlenet": 112, "resnet50": 112, "mobilenet_v2": 112, "squeezenet1_1": 112,
             "vgg16": 224}
DEFAULT_MODELS = ["det", "rec"] + list(ZOO_SIZES)


def load(name: str):
    """(model bytes, imported graph, feeds, output name, description) of a benchmark model."""
    from pooled_predictor.importers import load_onnx

    if name in ("det", "rec"):
        from pooled_predictor.zoo import fetch_page_image, fetch_ppocr
        from tests.models.ppocr_inputs import page_det_input, page_rec_input

        models, page = fetch_ppocr(), fetch_page_image()
        if name == "det":
            data, feeds, desc = models.det.read_bytes(), {"x": page_det_input(page, 1, 192, 384)}, "PP-OCR det"
        else:
            data, feeds, desc = models.rec.read_bytes(), {"x": page_rec_input(page, 1, 320)}, "PP-OCR rec"
        return data, load_onnx(data), feeds, "fetch_name_0", desc
    from pooled_predictor.zoo import cnn

    size = ZOO_SIZES[name]
    data = cnn.build(name, batch=1, input_size=size).SerializeToString()
    return data, load_onnx(data), {"data": cnn.sample_input(name, 1, input_size=size)}, "prob", name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per configuration and repeat")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--net", default="memory,none", help="Net optimizations to measure (memory, none)")
    args = ap.parse_args(argv)

    import numpy as np

    from pooled_predictor import Config, PooledPredictor
    from pooled_predictor.engine.net import Optimization
    from pooled_predictor.passes import optimize
    from pooled_predictor.serving.predictor import Predictor

    names = [m for m in args.models.split(",") if m]
    thread_counts = [int(t) for t in args.threads.split(",")]
    net_opts = [Optimization(o) for o in args.net.split(",") if o]
    count_rows, speed_rows, details = [], [], {}
    for name in names:
        try:
            model, graph, feeds, out, desc = load(name)
        except ImportError as exc:  # the zoo not there yet
            print(f"skipping {name}: {exc}")
            continue
        shape = "x".join(str(d) for d in next(iter(feeds.values())).shape)
        t0 = time.perf_counter()
        opt, report = optimize(graph, "all")
        opt_ms = (time.perf_counter() - t0) * 1e3
        changes = {k: v for k, v in report.changes().items()}
        count_rows.append({"model": desc, "input": shape, "nodes_none": report.nodes_before,
                           "nodes_all": report.nodes_after, "optimize_ms": opt_ms,
                           "fired": "; ".join(f"{k} x{v}" for k, v in changes.items()
                                               if k != "unread weights dropped")})
        details[desc] = {"input": shape, "report": report.to_dict()}
        for net_opt in net_opts:
            ref = Predictor(graph, optimization=net_opt, graph_optimization_level="none").forward(feeds, [out])[0]
            got = Predictor(graph, optimization=net_opt, graph_optimization_level="all").forward(feeds, [out])[0]
            err = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
            for threads in thread_counts:
                best: dict[str, tuple] = {}
                pools = {level: PooledPredictor(Config(model_bytes=[model], num_threads=threads, optimization=net_opt,
                                                       graph_optimization_level=level))
                         for level in ("none", "all")}
                for _ in range(args.repeats):
                    for level, pool in pools.items():
                        for _ in range(2 * threads):
                            pool.forward(feeds, [out]).result()
                        calls, wall, lat = run_threads(lambda p=pool: p.forward(feeds, [out]).result(), threads,
                                                       args.seconds)
                        if calls / wall > best.get(level, (0.0,))[0]:
                            best[level] = (calls / wall, *percentiles_ms(lat), calls)
                for pool in pools.values():
                    pool.close()
                row = {"model": desc, "input": shape, "net": net_opt.value.upper(), "threads": threads,
                       "all_vs_none_err": err}
                for level, (ips, p50, p99, calls) in best.items():
                    row.update({f"{level}_images_per_s": ips, f"{level}_p50_ms": p50, f"{level}_calls": calls})
                row["gain"] = row["all_images_per_s"] / row["none_images_per_s"]
                speed_rows.append(row)
                print(f"{desc} {net_opt.value} {threads} thread(s): none {row['none_images_per_s']:.2f}/s, "
                      f"all {row['all_images_per_s']:.2f}/s, x{row['gain']:.2f}", flush=True)

    print("\nNode counts, level 'none' -> 'all' (passes.optimize)\n")
    print(table(count_rows, [("model", "model", "s"), ("input", "input", "s"), ("nodes_none", "none", "d"),
                             ("nodes_all", "all", "d"), ("optimize_ms", "optimize ms", ".0f")]))
    print("\nwhat fired (level 'all'):")
    for r in count_rows:
        print(f"  {r['model']}: {r['fired']}")
    print(f"\nThroughput: PooledPredictor (workers = threads, as many closed-loop clients), best of "
          f"{args.repeats} x {args.seconds:.0f} s per configuration (net: the Net's Optimization)\n")
    print(table(speed_rows, [("model", "model", "s"), ("net", "net", "s"), ("threads", "threads", "d"),
                             ("none_images_per_s", "none img/s", ".2f"), ("all_images_per_s", "all img/s", ".2f"),
                             ("gain", "all/none", ".2f"), ("none_p50_ms", "none p50 ms", ".1f"),
                             ("all_p50_ms", "all p50 ms", ".1f"), ("all_vs_none_err", "max err", ".1e")]))
    path = write_results("passes", {"node_counts": count_rows, "throughput": speed_rows}, details=details,
                         seconds=args.seconds, repeats=args.repeats)
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
