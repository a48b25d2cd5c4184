"""Throughput vs worker threads: PP-OCR detector and ResNet-50, batch 1, with a plot.

    python benchmarks/scaling.py [--threads 1 2] [--seconds 4]

For each thread count N: our PooledPredictor with N workers fed by N closed-loop
clients, and onnxruntime with one session of N intra-op threads (one caller) as a
reference, side by side. On this 2-core machine N goes to 2; pass more on a larger
machine. Writes benchmarks/results/scaling.json and scaling.png.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import RESULTS, percentiles_ms, run_threads, table, write_results  # noqa: E402


def workloads():
    from pooled_predictor.zoo import build, fetch_page_image, fetch_ppocr, sample_input
    from tests.models.ppocr_inputs import page_det_input

    yield "ppocr_det 1x3x192x384", fetch_ppocr().det.read_bytes(), "x", page_det_input(fetch_page_image(), 1, 192, 384)
    yield "resnet50 1x3x224x224", build("resnet50").SerializeToString(), "data", sample_input("resnet50", 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    from pooled_predictor import Config, PooledPredictor

    rows = []
    for name, model, input_name, x in workloads():
        feed = {input_name: x}
        for n in args.threads:
            with PooledPredictor(Config(model_bytes=[model], num_threads=n)) as pool:
                for _ in range(2 * n):
                    pool.forward(feed).result()
                calls, wall, lat = run_threads(lambda: pool.forward(feed).result(), n, args.seconds)
            p50, p99 = percentiles_ms(lat)
            rows.append({"model": name, "runner": "pooled-predictor", "threads": n,
                         "images_per_s": calls / wall, "p50_ms": p50, "p99_ms": p99})
            so = ort.SessionOptions()
            so.intra_op_num_threads = n
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            sess.run(None, feed)
            calls, wall, lat = run_threads(lambda: sess.run(None, feed), 1, args.seconds)
            p50, p99 = percentiles_ms(lat)
            rows.append({"model": name, "runner": "onnxruntime (intra-op threads)", "threads": n,
                         "images_per_s": calls / wall, "p50_ms": p50, "p99_ms": p99})
    base = {(r["model"], r["runner"]): r["images_per_s"] for r in rows if r["threads"] == args.threads[0]}
    for r in rows:
        r["speedup_vs_first"] = r["images_per_s"] / base[(r["model"], r["runner"])]
    print(f"Throughput vs threads, batch 1, {args.seconds:.0f} s per point\n")
    print(table(rows, [("model", "model", "s"), ("runner", "runner", "s"), ("threads", "threads", "d"),
                       ("images_per_s", "images/s", ".1f"), ("speedup_vs_first", "speedup", ".2f"),
                       ("p50_ms", "p50 ms", ".2f"), ("p99_ms", "p99 ms", ".2f")]))
    png = plot(rows)
    path = write_results("scaling", rows, seconds=args.seconds, plot=str(png.name))
    print(f"\nwritten to {path} and {png}")
    return 0


def plot(rows) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.6))
    for ax, model in zip(axes if len(models) > 1 else [axes], models):
        for runner, style in (("pooled-predictor", "o-"), ("onnxruntime (intra-op threads)", "s--")):
            pts = [(r["threads"], r["images_per_s"]) for r in rows if r["model"] == model and r["runner"] == runner]
            ax.plot(*zip(*pts), style, label=runner)
        ax.set_title(model)
        ax.set_xlabel("threads")
        ax.set_ylabel("images / s")
        ax.set_xticks(sorted({r["threads"] for r in rows}))
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
